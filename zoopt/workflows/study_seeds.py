"""``zoopt study``'s runs over training seeds, with checkpoints along the way and the final
weights at more temperatures — what C1's strong form (:mod:`zoopt.study.narrowing`) reads.

* :func:`plan_runs`: every method the claims need once per training seed (``seeds``; the first
  seed's runs keep their names, the others are ``<run>-s<seed>``), the base once; a seed changes
  what training draws (prompts, rollouts, ES noise), never the evaluation (``seed``);
* :func:`checkpoint_evaluator`: a run's checkpoints (``checkpoint_every`` of its phases), each
  evaluated like the final weights into ``runs/<run>/checkpoints/<phase>-<N>.json`` as soon as
  training exports it, and then deleted;
* :func:`extra_evaluations`: a finished run's final weights at each of ``final_temperatures``
  into ``eval-T<T>.json`` (and any checkpoint a kill left unevaluated);
* :func:`coverage_points`: those evaluations gathered per method, point and temperature;
* :class:`WallClock`: the study's wall time over every invocation (``wall_time.json``).

Everything written is read back on resume, not redone.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

from ..runs.atomic import write_text_atomic
from .analyze import evaluate_model
from .compare import eval_config, plan_methods, shared_config


def model_eval_config(cfg: dict, model: str) -> dict:
    """The evaluation config of ``model`` in a study whose compare config is ``cfg``."""
    return {**shared_config(cfg), **eval_config(cfg), "model": model}


def training_seeds(spec: dict) -> list[int]:
    """The training seeds: ``seeds``, or ``[seed]`` when it is null."""
    return [int(s) for s in spec["seeds"]] if spec.get("seeds") else [int(spec["seed"])]


def seed_run_name(name: str, seed: int, first: bool) -> str:
    """The first training seed's runs keep their names; the others are ``<name>-s<seed>``."""
    return name if first else f"{name}-s{seed}"


def plan_runs(spec: dict, cfg: dict, n_train_rows: int) -> dict[str, dict]:
    """``{run name: {"method", "seed", "phases", "shared"}}``: every method of the claims once per
    training seed (:func:`training_seeds`), the base once.  A seed changes the phases' seeds
    (prompts, rollouts, ES noise); the evaluation keeps ``cfg["seed"]`` for every run."""
    runs = {}
    for i, seed in enumerate(training_seeds(spec)):
        seeded = {**cfg, "seed": seed}
        for name, phases in plan_methods(seeded, n_train_rows).items():
            if i and not phases:
                continue  # the base model has nothing to train: evaluated once
            runs[seed_run_name(name, seed, i == 0)] = {"method": name, "seed": seed, "phases": phases,
                                                       "shared": shared_config(seeded)}
    return runs



class WallClock:
    """The study's wall time over every invocation: ``wall_time.json`` holds one segment per
    invocation (its start and seconds so far), rewritten at each :meth:`tick`, so a kill loses at
    most the time since the last tick (a unit of work).  :meth:`tick` returns the total."""

    def __init__(self, path: Path) -> None:
        self.path, self.t0 = path, time.perf_counter()
        self.segments = json.loads(path.read_text())["segments"] if path.exists() else []
        self.segments.append({"started": time.strftime("%Y-%m-%d %H:%M:%S"), "seconds": 0.0})

    def tick(self) -> dict:
        self.segments[-1]["seconds"] = round(time.perf_counter() - self.t0, 1)
        record = {"total_s": round(sum(s["seconds"] for s in self.segments), 1), "segments": self.segments}
        write_text_atomic(self.path, json.dumps(record, indent=1))
        return record


def checkpoint_evaluator(cfg: dict, run_dir: Path, describe):
    """The ``on_checkpoint`` hook of a study run (:func:`zoopt.workflows.schedule.run_schedule`):
    evaluate ``phase_dir/checkpoint-N`` like the final weights into
    ``run_dir/checkpoints/<phase>-<N>.json`` (unless it is there) and remove it (a model's size)."""
    def evaluate(phase_dir: Path, steps: int, path: Path) -> None:
        out = run_dir / "checkpoints" / f"{Path(phase_dir).name}-{int(steps)}.json"
        if not out.exists():
            describe(f"run {run_dir.name}: {Path(phase_dir).name} checkpoint-{steps}")
            out.parent.mkdir(parents=True, exist_ok=True)
            evaluate_model(model_eval_config(cfg, str(path))).to_json(out)
        shutil.rmtree(path)
    return evaluate


def extra_evaluations(spec: dict, cfg: dict, result: dict, run_dir: Path, describe) -> None:
    """A finished run's final weights at each of ``final_temperatures`` into ``eval-T<T>.json``, and
    any checkpoint directory still there (:func:`checkpoint_evaluator`).  What is written already
    is not redone."""
    evaluate = checkpoint_evaluator(cfg, run_dir, describe)
    for phase in result["phases"]:
        phase_dir = Path(phase["dir"])
        for ckpt in sorted(phase_dir.glob("checkpoint-*"), key=lambda d: int(d.name.split("-")[1])):
            evaluate(phase_dir, int(ckpt.name.split("-")[1]), ckpt)
    for temperature in final_temperatures(spec):
        path = run_dir / temperature_eval_name(temperature)
        if not path.exists():
            describe(f"run {run_dir.name}: final weights at T = {temperature:g}")
            eval_cfg = model_eval_config(cfg, result["model_dir"])
            eval_cfg["eval"] = {**eval_cfg["eval"], "temperature": temperature}
            evaluate_model(eval_cfg).to_json(path)


def final_temperatures(spec: dict) -> list[float]:
    """``final_temperatures`` other than ``eval.temperature`` (whose evaluation is ``eval.json``)."""
    main = float(spec["eval"]["temperature"])
    return [float(t) for t in spec.get("final_temperatures") or [] if float(t) != main]


def temperature_eval_name(temperature: float) -> str:
    return f"eval-T{float(temperature):g}.json"



def coverage_points(spec: dict, runs: dict, results: dict, evals: dict, study_dir: Path) -> tuple[dict, dict]:
    """C1S's inputs (:func:`zoopt.study.narrowing.c1_strong`): ``points[method]`` — each
    checkpoint and the final weights at each temperature, with the evaluations of every seed —
    and ``base[str(T)]``, the base model's evaluation at each temperature."""
    main = float(spec["eval"]["temperature"])
    temperatures = [main, *final_temperatures(spec)]

    def read(path: Path) -> dict:
        return json.loads(path.read_text())

    base = {str(main): evals["base"]}
    base.update({str(t): read(study_dir / "runs" / "base" / temperature_eval_name(t)) for t in temperatures[1:]})
    points = {}
    for method in ("grpo", "es"):
        names = [n for n, r in runs.items() if r["method"] == method]
        if not names:
            continue
        entries: dict[tuple, dict] = {}
        for name in names:
            run_dir, done = study_dir / "runs" / name, 0
            for phase in results[name]["phases"]:
                phase_name = Path(phase["dir"]).name
                for path in sorted((run_dir / "checkpoints").glob(f"{phase_name}-*.json"),
                                   key=lambda p: int(p.stem.rsplit("-", 1)[1])):
                    step = int(path.stem.rsplit("-", 1)[1])
                    label = f"step {done + step}"
                    entry = entries.setdefault((label, main), {
                        "label": label, "step": done + step, "temperature": main, "final": False,
                        "completions": _completions_at(results[name]["phases"], phase, step), "evals": []})
                    entry["evals"].append(read(path))
                done += phase["steps"]
            for t in temperatures:
                entry = entries.setdefault(("final", t), {
                    "label": "final", "step": done, "temperature": t, "final": True,
                    "completions": results[name]["completions"], "evals": []})
                entry["evals"].append(evals[name] if t == main else read(run_dir / temperature_eval_name(t)))
        points[method] = sorted(entries.values(), key=lambda e: (e["temperature"] != main, e["step"], e["temperature"]))
    return points, base


def _completions_at(phases: list[dict], phase: dict, step: int) -> int:
    """Sampled completions used when ``phase`` had done ``step`` steps (earlier phases whole)."""
    before = 0
    for p in phases:
        if p is phase:
            return before + step * p["completions_per_step"]
        before += p["completions"]
    raise ValueError("phase not in phases")


def pooled_eval(evals: dict, runs: dict, method: str, key: str) -> dict:
    """``method``'s evaluation with per-problem ``key`` averaged over its training seeds."""
    names = [n for n, r in runs.items() if r["method"] == method]
    if len(names) == 1:
        return evals[names[0]]
    per_problem = [{key: float(np.mean([evals[n]["per_problem"][p][key] for n in names]))}
                   for p in range(len(evals[names[0]]["per_problem"]))]
    return {"summary": {key: float(np.mean([evals[n]["summary"][key] for n in names]))}, "per_problem": per_problem}
