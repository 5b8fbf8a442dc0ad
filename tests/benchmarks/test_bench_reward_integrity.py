"""The cost of judging tests outside the program: a batch of HumanEval programs scored the
judged way (today's) and the in-process way (before issue 27), side by side in one run.

    python -m pytest -q -s tests/benchmarks/test_bench_reward_integrity.py --benchmark-enable

With ``--benchmark-enable`` each round scores the 64 first HumanEval problems' canonical
solutions both ways on 2 workers (the judge's worker processes are started once, before the
rounds, as a trainer keeps them); a warm-up round, then 3 rounds.  It prints the mean wall time
of each path and their ratio (target: judged ≤ 1.5 × in-process); the same numbers go into
pytest-benchmark's ``extra_info``.  The default test run (benchmarks disabled) does one round on
8 problems and checks that both paths give every canonical solution 1.0.
"""

from __future__ import annotations

import statistics
import time

import reward_paths as paths

from objectives.humaneval import HumanEval


def test_judged_against_in_process(benchmark):
    n, rounds, warmup = (8, 1, 0) if benchmark.disabled else (64, 3, 1)
    rows = paths.problems(n)
    objective = HumanEval(test_fraction=1.0, workers=2, timeout_s=10.0, batch_timeout_s=600)
    paths.judged(objective, rows[:2])  # start the judge workers, as a trainer's first step does
    times: dict[str, list[float]] = {"in_process": [], "judged": []}

    def one_round() -> list[list[float]]:
        out = []
        for name in ("in_process", "judged"):
            start = time.perf_counter()
            out.append(paths.in_process(rows, workers=2) if name == "in_process" else paths.judged(objective, rows))
            times[name].append(time.perf_counter() - start)
        return out

    in_process, judged = benchmark.pedantic(one_round, rounds=rounds, warmup_rounds=warmup)
    assert in_process == judged == [1.0] * n
    mean = {name: statistics.fmean(ts[warmup:]) for name, ts in times.items()}
    ratio = mean["judged"] / mean["in_process"]
    benchmark.extra_info.update(programs=n, rounds=rounds, ratio=round(ratio, 3),
                                seconds={k: [round(t, 2) for t in ts[warmup:]] for k, ts in times.items()})
    print(f"\n{n} HumanEval programs, 2 workers: in-process {mean['in_process']:.2f} s, "
          f"judged {mean['judged']:.2f} s, ratio {ratio:.2f} (target ≤ 1.5)")
