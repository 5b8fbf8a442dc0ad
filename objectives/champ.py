"""CHAMP (Mao, Kim & Zhou 2024, "CHAMP: A Competition-level Dataset for Fine-Grained Analyses of
LLMs' Mathematical Reasoning Capabilities"), read offline from the PyPI package
``champ-dataset`` (MIT; its ``dataset_files/v0.json``, 270 competition problems in five
categories).

CHAMP's final answers are free text, graded in the paper by a language model ("No", "0 is the
only possible value", "C(10, 5), or equivalently 252").  A verifier reward needs an answer it
can check, so :func:`numeric_problems` keeps exactly the problems whose answer is **one number**
(an integer or a fraction, ``-?\\d+(/\\d+)?``): 85 of the 270 (Inequality 23, Number-Theory 18,
Combinatorics 17, Polynomial 16, Sequence 11).  The rule is about the answer's form only; no
problem is dropped for being hard to check.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
from pathlib import Path

NUMBER = re.compile(r"-?\d+(?:/\d+)?")


def data_file() -> Path:
    """``champ_dataset/dataset_files/v0.json`` of the installed package (not imported)."""
    spec = importlib.util.find_spec("champ_dataset")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the offline CHAMP problems need the package champ-dataset "
                                  "(pip install champ-dataset==1.0.0)")
    return Path(list(spec.submodule_search_locations)[0]) / "dataset_files" / "v0.json"


@functools.lru_cache(maxsize=1)
def numeric_problems() -> tuple[dict, ...]:
    """The CHAMP problems with a one-number answer: ``{"id", "problem", "answer", "category"}``,
    in the file's order."""
    problems = json.loads(data_file().read_text(encoding="utf-8"))["problems"]
    return tuple({"id": key, "problem": p["_text"].strip(), "answer": p["_answer"].strip(),
                  "category": p["category"]}
                 for key, p in problems.items() if NUMBER.fullmatch(p["_answer"].strip()))
