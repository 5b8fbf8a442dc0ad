"""Shared test set-up: a project-owned cache so tests never write under ~ by accident."""

import os
from pathlib import Path

os.environ.setdefault("ZOOPT_CACHE", str(Path(__file__).resolve().parents[1] / ".cache" / "zoopt"))
os.environ.setdefault("HF_HOME", str(Path(os.environ["ZOOPT_CACHE"]).parent / "hf"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
