"""Unit tests that a program cannot forge: the sandbox answers calls, a trusted process judges.

The model's code runs in the sandbox (:mod:`zoopt.sandbox.programs`) as an **oracle**: it holds the
model's code, the dataset's program set-up (inputs built with the model's own classes) and a
small server (``oracle_server.py``) — never a test, an ``assert`` or an expected value.  The
tests run in a **judge** worker (:mod:`zoopt.sandbox.judge_pool`, trusted, time-bounded): the
dataset's own test code with a stand-in for each function under test; a stand-in call sends
the encoded arguments to the sandbox and gets back the result as plain data (exact builtin
values, ``plain_data.py``), and the comparison runs in the judge with exact types
(``strict_tests.py``).  Nothing the sandboxed program prints or exits with counts; a call it did
not answer fails its test.  See docs/sandbox.md ("Reward integrity").

* :class:`UnitTests` — the tests of one dataset row (trusted code only).
* :func:`oracle_program` — the program run in the sandbox for a model's code.
* :func:`judge_programs` — a batch: each program in the sandbox with its judge, ``workers`` at
  a time, under one deadline; one :class:`Judgement` per program.

A user's code objective gets the same guarantee by subclassing
:class:`zoopt.sandbox.program_tests.ProgramTestObjective` (docs/objectives.md has an example).
"""

from __future__ import annotations

import functools
import keyword
import math
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from zoopt.deadline.process import START_TIMEOUT_S

from .strict_tests import check_units, statement_units
from .judge_pool import JudgePool
from .programs import SandboxResult, run_program, run_until

MAX_MESSAGE_BYTES = 4 << 20  # one call's arguments or one result, encoded
JUDGE_GRACE_S = 2.0  # how long the judge may go on after its program's time is up
_HERE = Path(__file__).parent


@dataclass(frozen=True)
class UnitTests:
    """The tests of one row, all trusted (the dataset's code, never the model's).

    * ``functions`` — the names in the model's program that the tests call (each becomes a
      stand-in in the judge; for ``check`` the first one is its argument).
    * ``tests`` — test snippets, each Python statements and one test (MBPP's asserts); or
    * ``check`` — HumanEval-style code defining ``check(candidate)``, whose top-level
      statements containing an ``assert`` are the tests (none: the call of ``check`` is one).
    * ``setup`` — code run in the judge before the tests: imports, the dataset's helper
      functions (HumanEval's prompt).  Never sent to the sandbox.
    * ``program_setup`` — dataset code run in the sandbox after the model's code, for inputs
      that need the model's own classes (MBPP's trees built from the solution's ``Node``);
      names it defines that the tests use must be listed in ``functions`` (they reach the
      judge as handles).  It must hold no expected value: the model's process can read it.
    """

    functions: tuple[str, ...]
    tests: tuple[str, ...] = ()
    check: str = ""
    setup: str = ""
    program_setup: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "functions", tuple(self.functions))
        object.__setattr__(self, "tests", tuple(self.tests))
        bad = [f for f in self.functions if not (isinstance(f, str) and f.isidentifier()
                                                   and not keyword.iskeyword(f))]
        if not self.functions or bad:
            raise ValueError(f"functions must be one or more Python names, got {self.functions!r}")
        if bool(self.tests) == bool(self.check):
            raise ValueError("give either tests (a list of snippets) or check (code defining check())")

    @property
    def count(self) -> int:
        """The number of tests."""
        return _count(self.check, self.tests)

    def spec(self, max_message_bytes: int = MAX_MESSAGE_BYTES) -> dict:
        """What the judge worker gets (JSON)."""
        return {"setup": self.setup, "functions": list(self.functions), "tests": list(self.tests),
                "check": self.check, "entry": self.functions[0],
                "max_message_bytes": int(max_message_bytes)}


@functools.lru_cache(maxsize=1024)
def _count(check: str, tests: tuple[str, ...]) -> int:
    return max(check_units(check)[1], 1) if check else statement_units(tests)[1]


@dataclass(frozen=True)
class Judgement:
    """One program's verdict.  ``outcomes[i]`` is test ``i``'s: ``"passed"``, ``"failed"``,
    ``"unanswered"`` (a call got no answer: the program exited, crashed or ran out of time),
    ``"not_plain"`` (a value that is not plain data was used) or ``"not_run"`` (the judge
    stopped before it: its own deadline, a cancelled batch).  ``judge`` is the judge's status
    (see :class:`zoopt.sandbox.judge_pool.JudgeReport`, plus ``"skipped"``); ``sandbox`` what the
    program's process did (for diagnosis only: it decides nothing)."""

    outcomes: tuple[str, ...]
    sandbox: SandboxResult
    judge: str = "done"
    notes: tuple[str, ...] = field(default=())

    @property
    def passed(self) -> int:
        return sum(o == "passed" for o in self.outcomes)

    @property
    def fraction(self) -> float:
        """Tests passed over tests (0.0 for a row without tests)."""
        return self.passed / len(self.outcomes) if self.outcomes else 0.0


@functools.lru_cache(maxsize=1)
def _server_source() -> str:
    return ((_HERE / "plain_data.py").read_text() + "\n" + (_HERE / "oracle_server.py").read_text()
            + "\nserve(PROGRAM, 3, LIMIT)\n")


def oracle_program(code: str, tests: UnitTests, max_message_bytes: int = MAX_MESSAGE_BYTES) -> str:
    """The program run in the sandbox: the model's ``code``, the row's ``program_setup``, then
    the oracle server, which runs in a namespace of its own (it defines no name of the program)."""
    return (f"{code}\n\n# ---- the dataset's program set-up ----\n{tests.program_setup}\n\n"
            "# ---- answers the judge's calls on fd 3 ----\n"
            f"__import__('builtins').exec({_server_source()!r}, {{'__name__': 'zoopt_oracle', "
            f"'PROGRAM': globals(), 'LIMIT': {int(max_message_bytes)}}})\n")


def judge_programs(codes: Sequence[str], tests: Sequence[UnitTests], *, workers: int | None = None,
                   deadline_s: float | None = None, timeout_s: float = 10.0,
                   pool: JudgePool | None = None, max_message_bytes: int = MAX_MESSAGE_BYTES,
                   **sandbox_options) -> list[Judgement]:
    """Judge ``codes[i]`` (a model's program) against ``tests[i]``, up to ``workers`` at a
    time (default: the CPU count), in order.

    Each program runs in the sandbox for at most ``timeout_s`` (``sandbox_options`` go to
    :func:`zoopt.sandbox.programs.run_program`), its judge until ``JUDGE_GRACE_S`` after that.
    ``deadline_s`` bounds the whole batch: programs and judges still running then are stopped
    (tests already judged keep their outcome), programs not started are ``"skipped"``.  An
    exception in the calling thread (a reward guard's timer) cancels everything before it
    propagates.  ``pool``: judge workers to reuse (default: a pool for this call only).
    """
    if len(codes) != len(tests):
        raise ValueError(f"judge_programs got {len(tests)} test sets for {len(codes)} programs")
    workers = max(1, int(workers or os.cpu_count() or 1))
    if pool is not None and pool.size < workers:
        raise ValueError(f"a JudgePool of {pool.size} workers cannot serve {workers} programs at once")
    own_pool = pool is None
    pool = pool or JudgePool(workers)
    end = time.monotonic() + deadline_s if deadline_s is not None else math.inf
    cancel = threading.Event()
    results: list[Judgement | None] = [None] * len(codes)

    def one(i: int) -> None:
        if cancel.is_set() or end - time.monotonic() <= 0:
            return
        results[i] = _judge_one(oracle_program(codes[i], tests[i], max_message_bytes),
                                tests[i], pool, timeout_s, end, cancel, max_message_bytes,
                                sandbox_options)

    try:
        run_until(one, len(codes), workers, end, cancel, "zoopt-judge")
    finally:
        if own_pool:
            pool.close()
    return [r if r is not None else Judgement(("not_run",) * t.count, SandboxResult("skipped"), "skipped")
            for r, t in zip(results, tests)]


def _judge_one(program: str, tests: UnitTests, pool: JudgePool, timeout_s: float, end: float,
               cancel: threading.Event, max_message_bytes: int, sandbox_options: dict) -> Judgement:
    count = tests.count
    with pool.checkout() as worker:
        if not worker.wait_ready(min(worker.born + START_TIMEOUT_S, end)):
            worker.broken = True
            return Judgement(("not_run",) * count, SandboxResult("skipped"), "not_started",
                             ("no judge worker became ready",))
        ours, theirs = socket.socketpair()
        try:
            started = worker.start(tests.spec(max_message_bytes), ours)
        finally:
            ours.close()
        if not started:
            theirs.close()
            return Judgement(("not_run",) * count, SandboxResult("skipped"), "died",
                             ("the judge worker could not take the job",))
        start = time.monotonic()
        budget = min(timeout_s, end - start)
        if budget <= 0:
            theirs.close()
            result = SandboxResult("skipped")
        else:
            result = run_program(program, timeout_s=budget, cancel=cancel, channel=theirs,
                                 **sandbox_options)
        report = worker.collect(min(start + max(budget, 0.0) + JUDGE_GRACE_S, end), cancel)
    outcomes = tuple(report.outcomes.get(i, "not_run") for i in range(count))
    return Judgement(outcomes, result, report.status, tuple(report.notes))
