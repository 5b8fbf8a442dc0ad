"""Shared test set-up: a project-owned cache so tests never write under ~ by accident."""

import os
from pathlib import Path

os.environ.setdefault("ZOOPT_CACHE", str(Path(__file__).resolve().parents[1] / ".cache" / "zoopt"))
os.environ.setdefault("HF_HOME", str(Path(os.environ["ZOOPT_CACHE"]).parent / "hf"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


import pytest  # noqa: E402


@pytest.fixture
def one_thread(monkeypatch):
    """One intra-op thread (and OMP_NUM_THREADS=1 for spawned workers) for tiny-model tests.

    On 2 shared cores the tiny model's many small kernels run far slower with OpenMP
    oversubscribed (measured up to 60× for GRPO steps); results do not depend on it.
    """
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    yield
    torch.set_num_threads(before)


# a reward the random tiny model earns about a third of the time, so its numbers are not all 0
DIGIT_REWARD = "def digit_first(completions, **kw):\n    return [float(c[:1].isdigit()) for c in completions]\n"


@pytest.fixture(scope="module")
def reward_spec(tmp_path_factory):
    """``path:digit_first``: :data:`DIGIT_REWARD` written to a file, as ``--objective`` takes it."""
    path = tmp_path_factory.mktemp("objective") / "digit_reward.py"
    path.write_text(DIGIT_REWARD)
    return f"{path}:digit_first"
