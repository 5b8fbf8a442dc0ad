"""Does ES in adapter space learn? Full space vs adapter space (bf16 base) vs adapter space (int8
base) at equal rollouts on the demo task, 3 seeds, paired over the same held-out problems.

    python tests/benchmarks/adapter_learning.py --adapter-sigma S --adapter-lr A
        [--seeds 0,1,2] [--arms full,adapter-bf16,adapter-int8] [--root docs/results/adapter_learning]
        [--out docs/results/adapter_learning.json] [--set KEY=VALUE ...]

Every arm is ``zoopt train`` with its defaults — the embedded SmolLM2-135M-Instruct, here in fp32
(bf16 generation is ~5× slower on the 2-core CPU machines; the "bf16 base" arm is thus an fp32 one),
two-digit addition, N=16, 32 prompts a step, 15 steps (7,680 completions), greedy rollouts of
≤ 10 tokens — plus ``seed`` and:

- ``full``: nothing else (σ=5e-3, α=2.5e-3: the demo's);
- ``adapter-bf16``: ``space=adapter`` (r=8, lora_alpha=16, all linear layers, B = 0 start) with
  σ, α from the adapter-space sweep (``sweeps/specs/adapter-space.yaml``, tuned on the
  validation split carved from train);
- ``adapter-int8``: the same on a torchao int8 weight-only base (``quantization=int8``).

``--set`` adds overrides to every arm (a smoke test: ``--set model=tiny --set steps=1``).
``noise_cache_gb=0`` everywhere (the same bits as with a cache: each step draws its noise twice).
After training, ``zoopt eval --model RUN --n 0`` scores the run's final weights greedily on the
200 held-out problems (``eval.n_problems``) and writes ``per_problem.csv``; its accuracy must
equal the run's own ``eval_after.json`` (checked).  A run whose ``heldout/per_problem.csv``
exists is not run again (the script resumes).  The run directories live under
``docs/results/adapter_learning/`` and their small files (config, seed log, metrics, evaluations,
wall time) are committed as each run finishes, its weights (``model/``) and plot never: a later
session on a fresh machine resumes with the runs still missing.

Reported per arm: held-out greedy accuracy before and after, per seed and averaged over seeds;
per pair of arms the paired difference of per-problem accuracy averaged over seeds, with its 95 %
percentile-bootstrap CI over the 200 problems (:func:`zoopt.metrics.bootstrap_ci`, 10,000
resamples); wall time per run.  Writes everything as JSON (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE.parents[1] / "docs" / "results" / "adapter_learning.json"
DEFAULT_ROOT = HERE.parents[1] / "docs" / "results" / "adapter_learning"
ARMS = ("full", "adapter-bf16", "adapter-int8")
N_BOOT = 10_000


def arm_sets(arm: str, sigma: float, lr: float) -> list[str]:
    """The ``--set`` overrides of ``arm`` on ``zoopt train``'s defaults."""
    if arm == "full":
        return []
    sets = ["space=adapter", f"sigma={sigma}", f"lr={lr}"]
    return sets + (["quantization=int8"] if arm == "adapter-int8" else [])


def zoopt(*args: str) -> None:
    cmd = [str(Path(sys.executable).parent / "zoopt"), *args]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def run_arm(arm: str, seed: int, root: Path, sigma: float, lr: float, extra: list[str]) -> dict:
    """Train and score one (arm, seed), unless already done; its record."""
    run = root / f"{arm}-s{seed}"
    heldout = run / "heldout"
    timing = run / "wall_s.json"
    if not (heldout / "per_problem.csv").is_file():
        t0 = time.perf_counter()
        sets = ["dtype=float32", "noise_cache_gb=0", f"seed={seed}", f"run_dir={run}", *arm_sets(arm, sigma, lr), *extra]
        zoopt("train", "--quiet", *[a for s in sets for a in ("--set", s)])
        train_s = time.perf_counter() - t0
        zoopt("eval", "--model", str(run), "--n", "0", "--quiet", "--out", str(heldout))
        timing.write_text(json.dumps({"train_s": round(train_s, 1), "total_s": round(time.perf_counter() - t0, 1)}))
    with open(heldout / "per_problem.csv") as fh:
        correct = [row["greedy_correct"] == "True" for row in csv.DictReader(fh)]
    before = json.loads((run / "eval_before.json").read_text())
    after = json.loads((run / "eval_after.json").read_text())
    acc = sum(correct) / len(correct)
    if abs(acc - after["greedy_accuracy"]) > 1e-12:
        raise RuntimeError(f"{run}: zoopt eval's accuracy {acc} differs from the run's eval_after "
                           f"{after['greedy_accuracy']}: not the same weights or problems")
    return {"arm": arm, "seed": seed, "run_dir": str(run), "correct": correct,
            "before": before["greedy_accuracy"], "after": acc, "checksum": after.get("checksum"),
            **json.loads(timing.read_text())}


def paired_ci(a: list[list[bool]], b: list[list[bool]]) -> dict:
    """Mean over problems of (a's per-problem accuracy over seeds − b's), its bootstrap CI."""
    import numpy as np

    from zoopt.metrics import bootstrap_ci

    pa = np.mean(np.asarray(a, dtype=float), axis=0)
    pb = np.mean(np.asarray(b, dtype=float), axis=0)
    d = pa - pb
    lo, hi = bootstrap_ci(d, n_boot=N_BOOT, seed=0)
    return {"diff": float(d.mean()), "ci": [lo, hi], "problems": int(d.size)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapter-sigma", type=float, required=True)
    p.add_argument("--adapter-lr", type=float, required=True)
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE")
    args = p.parse_args()
    arms = [a for a in args.arms.split(",") if a]
    for a in arms:
        if a not in ARMS:
            p.error(f"--arms: unknown arm {a!r} (known: {', '.join(ARMS)})")
    seeds = [int(s) for s in args.seeds.split(",") if s]
    records = [run_arm(a, s, args.root, args.adapter_sigma, args.adapter_lr, args.extra) for s in seeds for a in arms]
    by_arm = {a: [r for r in records if r["arm"] == a] for a in arms}
    summary = {a: {"before": rs[0]["before"], "after_per_seed": [r["after"] for r in rs],
                   "after_mean": sum(r["after"] for r in rs) / len(rs),
                   "train_s_per_seed": [r["train_s"] for r in rs]} for a, rs in by_arm.items()}
    pairs = {f"{b} - {a}": paired_ci([r["correct"] for r in by_arm[b]], [r["correct"] for r in by_arm[a]])
             for i, a in enumerate(arms) for b in arms[i + 1:]}
    report = {"benchmark": "tests/benchmarks/adapter_learning.py", "seeds": seeds,
              "adapter": {"sigma": args.adapter_sigma, "lr": args.adapter_lr, "r": 8, "lora_alpha": 16},
              "overrides": args.extra,
              "arms": summary, "paired": pairs, "n_boot": N_BOOT, "cpus": os.cpu_count(),
              "runs": [{k: v for k, v in r.items() if k != "correct"} for r in records]}
    print("| arm | before | after (per seed) | after, mean |\n|---|---|---|---|")
    for a, s in summary.items():
        print(f"| {a} | {s['before']:.3f} | {', '.join(f'{x:.3f}' for x in s['after_per_seed'])} | {s['after_mean']:.3f} |")
    for name, c in pairs.items():
        print(f"{name}: {c['diff']:+.3f} [{c['ci'][0]:+.3f}, {c['ci'][1]:+.3f}] over {c['problems']} problems")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
