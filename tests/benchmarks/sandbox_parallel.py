"""Parallel load on the code sandbox: wall time of N programs on W workers against one program.

    .venv/bin/python tests/benchmarks/sandbox_parallel.py --n 32 --workers 1 2 4 8 16
    .venv/bin/python tests/benchmarks/sandbox_parallel.py --kind spin --workers 1 2

Each program sleeps (``--kind sleep``) or spins on the CPU (``--kind spin``) for ``--seconds``.
With W workers the batch should take about ``N/W`` times one program (sleeping programs), or
``N/min(W, cores)`` (spinning ones), plus the sandbox's start-up per program (~50 ms here:
namespaces, a fresh interpreter, the seccomp filter).  A measurement, not a test: it prints
a table; tests/benchmarks/test_bench_sandbox.py runs it under ``make test-slow``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from zoopt.sandbox.programs import run_program, run_programs  # noqa: E402

PROGRAMS = {
    "sleep": "import time\ntime.sleep({seconds})\n",
    "spin": "import time\nend = time.perf_counter() + {seconds}\nwhile time.perf_counter() < end:\n    pass\n",
}


def measure(n: int = 32, workers: tuple[int, ...] = (1, 2, 4, 8), kind: str = "sleep",
            seconds: float = 0.5) -> list[dict]:
    """One row per worker count: ``workers``, ``wall_s``, ``ratio`` (to one program),
    ``expected`` (``n / min(workers, n)``, or ``n / min(workers, cores)`` for spinning)."""
    source = PROGRAMS[kind].format(seconds=seconds)
    single = statistics.median(_timed(lambda: [run_program(source, timeout_s=30)]) for _ in range(3))
    cores = os.cpu_count() or 1
    rows = [{"workers": "one program", "wall_s": single, "ratio": 1.0, "expected": 1.0}]
    for w in workers:
        wall = _timed(lambda: run_programs([source] * n, workers=w, timeout_s=60))
        parallel = min(w, n) if kind == "sleep" else min(w, n, cores)
        rows.append({"workers": w, "wall_s": wall, "ratio": wall / single,
                     "expected": n / parallel})
    return rows


def _timed(batch) -> float:
    start = time.perf_counter()
    results = batch()
    wall = time.perf_counter() - start
    bad = [r.status for r in results if not r.ok]
    if bad:
        raise RuntimeError(f"{len(bad)} programs did not run cleanly: {bad[:5]}")
    return wall


def report(rows: list[dict], n: int, kind: str, seconds: float) -> str:
    lines = [f"{n} programs ({kind} {seconds} s each), {os.cpu_count()} CPU cores",
             f"{'workers':>12} {'wall s':>8} {'ratio':>7} {'expected':>9}"]
    for row in rows:
        lines.append(f"{row['workers']!s:>12} {row['wall_s']:8.2f} {row['ratio']:7.2f} "
                     f"{row['expected']:9.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=32)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--kind", choices=sorted(PROGRAMS), default="sleep")
    parser.add_argument("--seconds", type=float, default=0.5)
    args = parser.parse_args(argv)
    rows = measure(args.n, tuple(args.workers), args.kind, args.seconds)
    print(report(rows, args.n, args.kind, args.seconds))


if __name__ == "__main__":
    main()
