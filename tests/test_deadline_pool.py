"""The deadline pool: a real overrun is killed and replaced, the pool recovers, nothing is left behind;
and the worker process it shares with the judge pool (zoopt/deadline/process.py) is capped."""

import os
import time
from pathlib import Path

import pytest

from zoopt.deadline.pool import DeadlinePool
from objectives.math_grader import CHECK_FILE
from worker_processes import alive, worker_pids, zombie_children
from zoopt.rewards.timeouts import call_with_timeout
from zoopt.sandbox.judge_pool import JudgePool

TARGETS = Path(__file__).with_name("deadline_targets.py")


def _pool(function, **kw):
    return DeadlinePool(TARGETS, function, **kw)


def test_results_come_back_in_order_and_errors_are_one_line():
    echo, fail = _pool("echo"), _pool("fail")
    try:
        out = echo.map([(i,) for i in range(7)], timeout_s=5)
        assert [o.status for o in out] == ["ok"] * 7 and [o.value for o in out] == list(range(7))
        [bad] = fail.map([("no\nnewline",)], timeout_s=5)
        assert bad.status == "error" and bad.value == "RuntimeError: no newline"
    finally:
        echo.close()
        fail.close()


def test_an_overrun_is_killed_and_replaced_and_its_late_answer_never_read():
    sleeper = _pool("sleep_then", workers=1)
    try:
        [first] = sleeper.map([(0.01, "warm")], timeout_s=10)  # the worker is up
        assert first.status == "ok"
        before = set(sleeper.pids())
        start = time.perf_counter()
        late, fine = sleeper.map([(30, "stale"), (0, "next")], timeout_s=0.5)
        elapsed = time.perf_counter() - start
        assert late.status == "timeout" and late.value is None
        assert fine.status == "ok" and fine.value == "next"   # served by the replacement
        assert elapsed < 10
        assert sleeper.killed == 1
        killed = before - set(sleeper.pids())
        assert len(killed) == 1 and not any(alive(pid) for pid in killed)
        assert len(sleeper.pids()) == 1
    finally:
        sleeper.close()


def test_a_hung_math_verification_is_killed_and_the_next_check_is_right():
    """A real hang: sympy evaluating 5^(5^(5^5)) in one C call; only killing the worker stops it."""
    checker = DeadlinePool(CHECK_FILE, "call", workers=1, memory_mb=1024)
    try:
        [warm] = checker.map([("equivalent", "5", "\\boxed{5}")], timeout_s=30)
        assert warm.status == "ok" and warm.value is True
        start = time.perf_counter()
        [hung] = checker.map([("equivalent", "5", "\\boxed{5^{5^{5^{5}}}}")], timeout_s=1.0)
        assert hung.status == "timeout" and time.perf_counter() - start < 5
        [after] = checker.map([("equivalent", "\\frac{1}{2}", "\\boxed{0.5}")], timeout_s=30)
        assert after.status == "ok" and after.value is True
        assert checker.killed == 1 and len(checker.pids()) == 1
    finally:
        checker.close()


def test_a_worker_past_its_memory_limit_fails_alone():
    hog = _pool("hog", workers=1, memory_mb=64)
    try:
        big, small = hog.map([(512,), (1,)], timeout_s=10)
        assert big.status == "error" and "MemoryError" in big.value
        assert small.status == "ok" and small.value == 2**20
    finally:
        hog.close()


def _address_space(pid: int) -> tuple[int, int]:
    """(its size now, its RLIMIT_AS) in bytes, from /proc."""
    size = int(Path(f"/proc/{pid}/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    line = next(l for l in Path(f"/proc/{pid}/limits").read_text().splitlines()
                if l.startswith("Max address space"))
    return size, int(line.split()[3])


def test_both_pools_cap_a_ready_worker_at_its_size_plus_memory_mb():
    """The cap comes from the shared worker process, so the judge's workers get it too."""
    echo, judges = _pool("echo", workers=1, memory_mb=256), JudgePool(1, memory_mb=256)
    try:
        assert echo.warm()
        with judges.checkout() as judge:
            assert judge.wait_ready(time.monotonic() + 60)
            pids = echo.pids() + [judge.process.pid]
        for pid in pids:
            size, limit = _address_space(pid)
            assert size < limit <= size + 256 * 2**20
    finally:
        echo.close()
        judges.close()


def test_the_batch_deadline_cancels_what_has_not_started():
    sleeper = _pool("sleep_then", workers=1)
    try:
        sleeper.map([(0, 0)], timeout_s=10)
        out = sleeper.map([(0.2, "a"), (5, "b"), (0, "c")], timeout_s=10, deadline_s=1.0)
        assert [o.status for o in out] == ["ok", "timeout", "cancelled"]
    finally:
        sleeper.close()


def test_an_interrupted_map_leaves_no_busy_worker():
    """The reward guard's SIGALRM interrupts map(): busy workers are killed, the next map is clean."""
    sleeper = _pool("sleep_then", workers=2)
    try:
        sleeper.map([(0, 0), (0, 0)], timeout_s=10)
        status, _ = call_with_timeout(lambda: sleeper.map([(30, "x"), (30, "y")], timeout_s=60), 0.5)
        assert status == "timeout"
        out = sleeper.map([(0, "fresh"), (0, "too")], timeout_s=10)
        assert [o.value for o in out] == ["fresh", "too"]
    finally:
        sleeper.close()


def test_close_leaves_no_process_and_no_zombie():
    sleeper = _pool("sleep_then", workers=2)
    sleeper.map([(0, 0), (30, 1)], timeout_s=0.5)
    pids = set(sleeper.pids())
    assert len(pids) == 2 and pids <= worker_pids()
    sleeper.close()
    assert not any(alive(pid) for pid in pids) and not (pids & worker_pids())
    assert not zombie_children()


def test_bad_arguments_are_one_line_errors():
    with pytest.raises(ValueError, match="no module file"):
        DeadlinePool("nowhere.py", "f")
    with pytest.raises(ValueError, match="workers must be"):
        _pool("echo", workers=0)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        _pool("echo").map([(1,)], timeout_s=0)


def test_a_worker_that_cannot_start_fails_the_calls_instead_of_respawning_forever(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("import a_module_that_does_not_exist\n")
    pool = DeadlinePool(broken, "f", workers=1)
    try:
        start = time.perf_counter()
        [out] = pool.map([(1,)], timeout_s=5)
        assert out.status == "error" and "cannot start" in out.value
        assert time.perf_counter() - start < 60
    finally:
        pool.close()
    assert not zombie_children()


def test_a_worker_that_cannot_be_capped_is_never_used(monkeypatch):
    def refuse(*args):
        raise PermissionError("no prlimit here")

    monkeypatch.setattr("zoopt.deadline.process.resource.prlimit", refuse)
    pool = _pool("echo", workers=1, memory_mb=64)
    try:
        [out] = pool.map([(1,)], timeout_s=5)
        assert out.status == "error" and "cannot start" in out.value
    finally:
        pool.close()
    assert not zombie_children()
