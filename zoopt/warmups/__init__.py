"""Named warm-up models: the embedded model after a short supervised warm-up on a task's *train*
split (:mod:`zoopt.warmups.finetune`), built once into the model cache and then loaded by name
like any model.

A recipe is ``base`` (a model name), ``objective`` (a registered name) with ``objective_args``,
the first ``problems`` of its *train* split, the completion ``target`` (formatted with the row's
columns), optionally ``label_noise`` (:func:`noisy_answers`: a share of the answers moved by a
small offset before formatting), and :func:`zoopt.warmups.finetune.sft`'s ``steps``, ``lr``,
``batch_size``, ``seed``.  A recipe never changes once published: a new one gets a new name (the
cache is keyed by the name).
:func:`ensure_warmup` builds ``cache_dir()/models/<name>`` (model, tokenizer and
``zoopt_build.json`` with the recipe and the losses) under the cache's lock, once; the workflows
call it before they build an engine, and :func:`zoopt.models.load_model` then reads the
directory (:func:`zoopt.models.cached_build`).

A package above the engines (the fine-tuning encodes prompts as the engines do) and below the
workflows, which build a warm-up before they load it.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..models import EMBEDDED, build_cached, cache_dir, load_model
from ..objective import load_objective
from .finetune import encode_pairs, sft

log = logging.getLogger(__name__)

WARMUPS: dict[str, dict] = {
    # docs/results.md, "Coverage study": the base of `zoopt study coverage`.  Half the targets moved
    # by -10, -1, +1 or +10 (carry and unit slips): the model learns to spread its answers, so at
    # T=0.6 it solves most problems sometimes rather than some always and others never
    "smollm2-135m-sft30-arith21-ln50": {
        "base": EMBEDDED, "objective": "arithmetic",
        "objective_args": {"digits": [2, 1], "operators": "+-", "system_prompt": ""},
        "problems": 1463, "target": "{answer}", "steps": 30, "lr": 2.0e-5, "batch_size": 16, "seed": 0,
        "label_noise": {"share": 0.5, "offsets": [-10, -1, 1, 10], "seed": 12345}},
}
WARMUP_THREADS = 1  # the warm-up trains on one thread: float sums, so the weights, do not depend on the machine's cores


def ensure_warmup(name: str) -> Path | None:
    """Build the warm-up ``name`` if it is one of :data:`WARMUPS` and not cached yet; return its
    directory (None when ``name`` is not a warm-up)."""
    if name not in WARMUPS:
        return None
    return build_cached(cache_dir() / "models" / name, lambda dest: build_warmup(dest, WARMUPS[name]))


def build_warmup(dest: Path, recipe: dict, on_step: Callable[[int, float], None] | None = None) -> None:
    """Fine-tune ``recipe["base"]`` (fp32) on its task's train split and save it to ``dest``
    (an HF directory: model, tokenizer, ``zoopt_build.json`` with the recipe and the losses)."""
    t0 = time.perf_counter()
    model, tokenizer = load_model(recipe["base"], dtype="float32")
    objective = load_objective(recipe["objective"], **recipe.get("objective_args", {}))
    rows = objective.dataset("train", int(recipe["problems"])).to_list()
    if "label_noise" in recipe:
        noise = recipe["label_noise"]
        answers = noisy_answers([r["answer"] for r in rows], float(noise["share"]), noise["offsets"], int(noise["seed"]))
        rows = [{**r, "answer": a} for r, a in zip(rows, answers)]
    pairs = encode_pairs(tokenizer, [r["prompt"] for r in rows], [recipe["target"].format(**r) for r in rows],
                         objective.system_prompt)
    log.warning("building the warm-up model from %s: %d steps on %d %s train problems (once)",
                recipe["base"], recipe["steps"], len(rows), recipe["objective"])
    threads = torch.get_num_threads()
    torch.set_num_threads(WARMUP_THREADS)
    try:
        losses = sft(model, tokenizer, pairs, int(recipe["steps"]), float(recipe["lr"]), int(recipe["batch_size"]),
                     int(recipe["seed"]), on_step)
    finally:
        torch.set_num_threads(threads)
    model.save_pretrained(str(dest))
    tokenizer.save_pretrained(str(dest))
    (dest / "zoopt_build.json").write_text(json.dumps({
        "recipe": recipe, "losses": losses, "threads": WARMUP_THREADS,
        "seconds": round(time.perf_counter() - t0, 1)}, indent=1))


def noisy_answers(answers: list[str], share: float, offsets: list[int], seed: int) -> list[str]:
    """Integer answers with a ``share`` of them moved: for row i in order, with
    ``rng = numpy.random.default_rng(seed)``, ``u = rng.random()``; if ``u < share`` the answer
    becomes ``answer + offsets[rng.integers(len(offsets))]``, else it stays (as a string)."""
    if not 0.0 <= share <= 1.0 or not offsets:
        raise ValueError(f"label_noise: share must be in [0, 1] and offsets non-empty, got {share!r}, {offsets!r}")
    rng = np.random.default_rng(seed)
    out = []
    for a in answers:
        value = int(a)
        if rng.random() < share:
            value += int(offsets[int(rng.integers(len(offsets)))])
        out.append(str(value))
    return out
