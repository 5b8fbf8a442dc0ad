"""``zoopt calibrate``: is this task, for this model, at this temperature, a base for a coverage study?

A coverage study (does RL narrow Pass@k below the base model's?) needs a base that already
covers most problems at large k but solves many of them rarely (docs/results.md).  For
``P = eval.n_problems`` held-out problems with ``n`` samples each at ``T = eval.temperature``
(problem p: ``c_p`` correct), :func:`calibrate` measures

* Pass@k for k = 1, 2, 4, … ≤ n — the unbiased estimator
  ``1 − C(n−c_p, k)/C(n, k)`` averaged over problems (:func:`zoopt.metrics.pass_at_k`), with 95 %
  percentile-bootstrap CIs over problems;
* ``share_0.01_0.1`` — the share of problems with success rate ``c_p/n ∈ [0.01, 0.1]``
  (:func:`zoopt.metrics.share_between`) and the histogram of success rates;
* the failure modes of the incorrect samples — ``wrong``, ``no_answer``, ``format`` as the
  objective defines them through its own answer extraction
  (:meth:`zoopt.objective.Objective.failure_mode`) — as shares of the failed samples, and the
  share of failed samples cut at ``max_new_tokens``;
* greedy accuracy (one greedy completion per problem), mean completion length, and the
  generation throughput;
* whether :data:`TARGET` is met, criterion by criterion.

Sampling is that of :func:`zoopt.workflows.evaluate.evaluate` with ``batch_size = chunk``: chunk ``b`` of
``chunk`` problems is one ``generate`` call with sampling seed ``seed + b``, so Pass@k here
equals ``zoopt eval``'s at the same settings.  Each finished chunk is written to
``chunks/chunk-<b>.json`` (atomically); re-running the same command in the same directory
reads them back and generates only the missing chunks (other settings there are an error).
The result is ``calibration.json`` (written atomically) and returned.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

from ..config import ConfigError
from ..engines.base import Sampling
from ..metrics import bootstrap_ci, pass_at_k, rate_histogram, share_between
from ..objective import FAILURE_MODES, load_split
from ..rewards.scoring import Scorer
from .builders import build_engine, build_objective

#: the base a coverage study needs (issue #31): ``key: (low, high)``, both inclusive
TARGET = {
    "pass@1": (0.15, 0.50),
    "pass@32": (0.85, 1.0),
    "share_0.01_0.1": (0.20, 1.0),
    "format_share_of_failures": (0.0, 0.10),
}
#: the settings a resumed calibration must share with the chunks on disk
SETTINGS = ("model", "objective", "objective_args", "dtype", "device", "engine", "engine_args", "seed",
            "n_problems", "n_samples", "temperature", "top_p", "max_new_tokens", "chunk", "greedy")

ProgressFn = Callable[[int, int], None]  # (problems done, problems in all)


def calibration_settings(cfg: dict, n_samples: int, chunk: int, greedy: bool = True) -> dict:
    """What a calibration measures, from an evaluation config (``zoopt/configs/train.yaml`` keys)."""
    ev = cfg["eval"]
    if not (isinstance(n_samples, int) and n_samples >= 1):
        raise ValueError(f"n_samples must be an integer ≥ 1, got {n_samples!r}")
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk must be an integer ≥ 1, got {chunk!r}")
    if float(ev["temperature"]) <= 0:
        raise ValueError(f"eval.temperature must be > 0 for sampled completions, got {ev['temperature']!r}")
    return {"model": str(cfg["model"]), "objective": str(cfg["objective"]),
            "objective_args": dict(cfg.get("objective_args") or {}), "dtype": str(cfg["dtype"]),
            "device": str(cfg["device"]), "engine": str(cfg["engine"]),
            "engine_args": dict(cfg.get("engine_args") or {}), "seed": int(cfg["seed"]),
            "n_problems": int(ev["n_problems"]), "n_samples": n_samples,
            "temperature": float(ev["temperature"]), "top_p": float(ev.get("top_p", 1.0)),
            "max_new_tokens": int(ev["max_new_tokens"]), "chunk": chunk, "greedy": bool(greedy)}


def powers_of_two(n: int) -> list[int]:
    """1, 2, 4, … ≤ n."""
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    return ks


def calibrate(cfg: dict, out: str | Path, n_samples: int = 64, chunk: int = 16, greedy: bool = True,
              objective=None, progress: ProgressFn | None = None) -> dict:
    """Calibrate ``cfg["model"]`` on ``cfg["objective"]`` (module doc); resumes from ``out``."""
    settings = calibration_settings(cfg, n_samples, chunk, greedy)
    out = Path(out)
    chunks_dir = out / "chunks"
    _check_settings(out / "settings.json", settings)
    objective = objective if objective is not None else build_objective(cfg)
    rows = load_split(objective, "test", settings["n_problems"], key="eval.n_problems").to_list()
    if not rows:
        raise ValueError(f"objective {settings['objective']!r} has no test problems")
    starts = list(range(0, len(rows), chunk))
    done = {b: _read_json(chunks_dir / f"chunk-{b:05d}.json") for b in range(len(starts))
            if (chunks_dir / f"chunk-{b:05d}.json").exists()}
    report = progress or (lambda done_, total: None)
    report(sum(len(c["problems"]) for c in done.values()), len(rows))
    todo = [b for b in range(len(starts)) if b not in done]
    if todo:
        engine = build_engine(cfg, objective)
        try:
            scorer = Scorer(objective, engine, timeout_s=float(cfg["reward_timeout_s"]),
                            reward_errors=cfg.get("reward_errors", "raise"))
            for b in todo:
                part = rows[starts[b]:starts[b] + chunk]
                done[b] = _chunk(engine, objective, scorer, part, starts[b], b, settings)
                _write_json(chunks_dir / f"chunk-{b:05d}.json", done[b])
                report(sum(len(c["problems"]) for c in done.values()), len(rows))
        finally:
            engine.close()
    result = summarize([done[b] for b in range(len(starts))], settings)
    _write_json(out / "calibration.json", result)
    return result


def _chunk(engine, objective, scorer: Scorer, rows: list[dict], start: int, b: int, settings: dict) -> dict:
    """Generate, score and classify one chunk of problems (sampling seed ``seed + b``)."""
    n = settings["n_samples"]
    prompts = [r["prompt"] for r in rows]
    columns = {c: [r[c] for r in rows] for c in rows[0] if c != "prompt"}
    t0 = time.perf_counter()
    sampled = engine.generate(prompts, Sampling(
        temperature=settings["temperature"], top_p=settings["top_p"],
        max_new_tokens=settings["max_new_tokens"], n=n, seed=settings["seed"] + b))
    seconds = time.perf_counter() - t0
    scorer.start()
    texts = [c.text for cs in sampled for c in cs]
    rewards = scorer.score([p for p in prompts for _ in range(n)], texts,
                           {c: [v for v in vals for _ in range(n)] for c, vals in columns.items()}).rewards
    correct = objective.is_correct(rewards)
    greedy_ok = [None] * len(rows)
    if settings["greedy"]:
        greedy = engine.generate(prompts, Sampling(temperature=0.0, max_new_tokens=settings["max_new_tokens"],
                                                   seed=settings["seed"] + b))
        greedy_ok = objective.is_correct(scorer.score(prompts, [g[0].text for g in greedy], columns).rewards)
    counts = scorer.finish(f"calibration chunk {b}")
    problems = []
    for i, (row, comps) in enumerate(zip(rows, sampled)):
        ok = correct[i * n:(i + 1) * n]
        modes, cut = Counter(), 0
        for comp, good in zip(comps, ok):
            if not good:
                modes[objective.failure_mode(row["prompt"], comp.text, row)] += 1
                cut += comp.finish_reason == "length"
        problems.append({"index": start + i, "n_correct": int(sum(ok)), "failures": dict(modes),
                         "failures_cut": cut, "tokens": sum(len(c.token_ids) for c in comps),
                         "greedy_correct": None if greedy_ok[i] is None else bool(greedy_ok[i])})
    return {"chunk": b, "problems": problems, "seconds": seconds, "score": counts}


def summarize(chunks: list[dict], settings: dict) -> dict:
    """The calibration record of finished chunks (module doc): plain JSON."""
    n = settings["n_samples"]
    problems = [p for c in chunks for p in c["problems"]]
    counts = [p["n_correct"] for p in problems]
    ks = powers_of_two(n)
    per_k = {k: [pass_at_k(n, c, k) for c in counts] for k in ks}
    seed = settings["seed"]
    pass_k = {str(k): sum(v) / len(v) for k, v in per_k.items()}
    modes = Counter()
    for p in problems:
        modes.update(p["failures"])
    failed = sum(modes.values())
    cut = sum(p["failures_cut"] for p in problems)
    completions = n * len(problems)
    seconds = sum(c["seconds"] for c in chunks)
    greedy = [p["greedy_correct"] for p in problems if p["greedy_correct"] is not None]
    result: dict[str, Any] = {
        "pass@1": pass_k["1"], "pass@32": pass_k.get("32"),
        "share_0.01_0.1": share_between(counts, n, 0.01, 0.1),
        "n_problems": len(problems), "n_samples": n, "temperature": settings["temperature"],
        "pass_at_k": pass_k,
        "pass_at_k_ci": {str(k): list(bootstrap_ci(v, seed=seed)) for k, v in per_k.items()},
        "success_rate_histogram": rate_histogram(counts, n),
        "greedy_accuracy": sum(greedy) / len(greedy) if greedy else None,
        "failed_samples": failed,
        "failure_modes": {m: (modes[m] / failed if failed else 0.0) for m in FAILURE_MODES},
        "failure_counts": {m: modes[m] for m in FAILURE_MODES},
        "failures_cut_share": cut / failed if failed else 0.0,
        "mean_completion_tokens": sum(p["tokens"] for p in problems) / completions,
        "generation_s": seconds,
        "completions_per_s": completions / seconds if seconds > 0 else None,
        "score": {k: sum(c["score"][k] for c in chunks) for k in chunks[0]["score"]},
        "settings": settings,
        "n_correct": counts,
    }
    result["target"] = target_check(result)
    result["meets_target"] = all(t["ok"] for t in result["target"].values())
    return result


def target_check(result: dict) -> dict:
    """Each :data:`TARGET` criterion: ``{"value", "low", "high", "ok"}`` (``ok`` False when the
    value could not be measured, e.g. Pass@32 from fewer than 32 samples)."""
    values = {"pass@1": result["pass@1"], "pass@32": result["pass@32"],
              "share_0.01_0.1": result["share_0.01_0.1"],
              "format_share_of_failures": result["failure_modes"]["format"]}
    return {key: {"value": values[key], "low": low, "high": high,
                  "ok": values[key] is not None and low <= values[key] <= high}
            for key, (low, high) in TARGET.items()}


def _check_settings(path: Path, settings: dict) -> None:
    if not path.exists():
        _write_json(path, settings)
        return
    saved = _read_json(path)
    for key in SETTINGS:
        if saved.get(key) != settings.get(key):
            raise ConfigError(f"calibration directory {str(path.parent)!r} holds a calibration whose {key!r} "
                              f"is {saved.get(key)!r}, not {settings.get(key)!r}; use another --out")


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def _write_json(path: Path, data: dict) -> None:
    """Write ``data`` to ``path`` whole or not at all (a temporary file renamed into place)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
