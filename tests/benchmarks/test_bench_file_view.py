"""What the allowlist file-system view costs: programs in the view (``filesystem="refuse"``, the
default) against today's visible, read-only file system (``filesystem="visible"``, the sandbox
before the view), side by side in one run, alternating.

    python -m pytest -q -s tests/benchmarks/test_bench_file_view.py --benchmark-enable

* **per program** — one trivial program at a time (``print(1)``), each view in turn, 40 each
  after 5 warm-up pairs; the ratio of the medians (target ≤ 1.1).
* **a batch** — an ``mbpp`` batch of 64 correct programs (the fixture's three tasks, repeated;
  no MBPP copy is shipped) judged on 2 workers, each view in turn, 3 rounds after a warm-up;
  the ratio of the mean batch times (target ≤ 1.1).

Both print their figures and put them in pytest-benchmark's ``extra_info``.  The default test
run (benchmarks disabled) does 3 programs and one batch of 6, and checks that both views give
the same results (every program ok, every correct program 1.0).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from objectives.mbpp import MBPP
from zoopt.sandbox.programs import run_program

VIEWS = ("refuse", "visible")
FIXTURE = Path(__file__).parents[1] / "fixtures" / "mbpp"
DATA_FILES = {"train": str(FIXTURE / "train.jsonl"), "test": str(FIXTURE / "test.jsonl")}


def _paired(measure, pairs: int, warmup: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {view: [] for view in VIEWS}
    for i in range(warmup + pairs):
        for view in VIEWS if i % 2 == 0 else VIEWS[::-1]:
            seconds = measure(view)
            if i >= warmup:
                times[view].append(seconds)
    return times


def test_one_program_in_each_view(benchmark):
    pairs, warmup = (3, 1) if benchmark.disabled else (40, 5)

    def one(view: str) -> float:
        start = time.perf_counter()
        result = run_program("print(1)", timeout_s=10, filesystem=view)
        seconds = time.perf_counter() - start
        assert result.ok and result.stdout == "1\n" and result.private_filesystem == (view == "refuse")
        return seconds

    times = benchmark.pedantic(lambda: _paired(one, pairs, warmup), rounds=1)
    median = {view: statistics.median(ts) for view, ts in times.items()}
    ratio = median["refuse"] / median["visible"]
    benchmark.extra_info.update(programs=pairs, ratio=round(ratio, 3),
                                median_ms={k: round(v * 1e3, 1) for k, v in median.items()})
    print(f"\none program: allowlist view {median['refuse'] * 1e3:.1f} ms, visible "
          f"{median['visible'] * 1e3:.1f} ms (medians of {pairs}), ratio {ratio:.3f} (target ≤ 1.1)")


def test_an_mbpp_batch_in_each_view(benchmark):
    size, rounds, warmup = (6, 1, 0) if benchmark.disabled else (64, 3, 1)
    objectives = {view: MBPP(data_files=DATA_FILES, workers=2, timeout_s=10.0,
                             batch_timeout_s=600, filesystem=view) for view in VIEWS}
    rows = objectives["refuse"].dataset("train").to_list()
    batch = [rows[i % len(rows)] for i in range(size)]
    prompts = [r["prompt"] for r in batch]
    columns = {k: [r[k] for r in batch] for k in batch[0] if k != "prompt"}
    code = {row["task_id"]: row["code"]
            for row in map(json.loads, (FIXTURE / "train.jsonl").read_text().splitlines())}
    completions = [f"```python\n{code[r['task_id']]}\n```" for r in batch]
    for objective in objectives.values():  # start the judge workers, as a trainer's first step does
        objective(prompts[:2], completions[:2], **{k: v[:2] for k, v in columns.items()})

    def one(view: str) -> float:
        start = time.perf_counter()
        rewards = objectives[view](prompts, completions, **columns)
        seconds = time.perf_counter() - start
        assert rewards == [1.0] * size, (view, objectives[view].last_results)
        return seconds

    times = benchmark.pedantic(lambda: _paired(one, rounds, warmup), rounds=1)
    mean = {view: statistics.fmean(ts) for view, ts in times.items()}
    ratio = mean["refuse"] / mean["visible"]
    benchmark.extra_info.update(programs=size, rounds=rounds, ratio=round(ratio, 3),
                                seconds={k: [round(t, 2) for t in ts] for k, ts in times.items()})
    print(f"\nmbpp batch of {size} on 2 workers: allowlist view {mean['refuse']:.2f} s, visible "
          f"{mean['visible']:.2f} s (means of {rounds}), ratio {ratio:.3f} (target ≤ 1.1)")
