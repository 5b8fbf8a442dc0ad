"""The sandbox under parallel load (tests/benchmarks/sandbox_parallel.py): 32 sleeping
programs on 1 and 4 workers, printed as a table (``make test-slow``; ``-s`` shows it).
No timed assert: on shared CPUs the numbers are a report, not a pass/fail line."""

import pytest

from sandbox_parallel import measure, report


@pytest.mark.slow
def test_parallel_load_report():
    rows = measure(n=32, workers=(1, 4), kind="sleep", seconds=0.5)
    print("\n" + report(rows, 32, "sleep", 0.5))
    assert [row["workers"] for row in rows] == ["one program", 1, 4]
