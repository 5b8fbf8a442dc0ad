"""Rewards from running a completion's program against unit tests it cannot forge.

The shared half of ``humaneval`` and ``mbpp``, and the base of a user's own code objective:

* :func:`extract_code` — the completion's last fenced code block (an unclosed last fence
  counts up to the end), else the whole text.
* :class:`ProgramTestObjective` — a subclass says what the model's program is
  (:meth:`~ProgramTestObjective.program`) and what the row's tests are
  (:meth:`~ProgramTestObjective.tests`, an :class:`zoopt.sandbox.judged_tests.UnitTests`).  The
  program runs in the sandbox as an oracle that only answers calls of its functions; the tests
  run in a trusted judge process that compares the answers (plain data) itself, so the
  program never sees a test or an expected value and nothing it prints or exits with counts
  (:mod:`zoopt.sandbox.judged_tests`, docs/sandbox.md "Reward integrity").  A batch runs in
  parallel (up to ``workers`` programs at a time) under one deadline; the reward is 1.0 when
  every test passed, else 0.0, or with ``partial_credit=True`` the fraction of tests passed
  (tests judged before a timeout count).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from zoopt.objective import Objective, ZooptWarning, completion_text
from zoopt.rewards.timeouts import guard_time_left

from .judge_pool import JudgePool
from .judged_tests import MAX_MESSAGE_BYTES, Judgement, UnitTests, judge_programs
from .programs import FILESYSTEM_MODES, NETWORK_MODES, SandboxResult, isolation
from .runtime_files import runtime_view

_FENCE = "```"


def extract_code(text: str) -> str:
    """The content of the last fenced block (```` ```python ```` or bare ```` ``` ````; the
    info string on the opening line is dropped), or ``text`` itself when it has no fence.
    Linear time."""
    starts = []
    pos = 0
    while True:
        k = text.find(_FENCE, pos)
        if k == -1:
            break
        starts.append(k)
        end = text.find(_FENCE, k + len(_FENCE))
        if end == -1:
            break
        starts.append(end)
        pos = end + len(_FENCE)
    if not starts:
        return text
    if len(starts) % 2:  # an unclosed last fence: its content runs to the end
        open_at, close_at = starts[-1], len(text)
    else:
        open_at, close_at = starts[-2], starts[-1]
    body = text[open_at + len(_FENCE):close_at]
    newline = body.find("\n")
    return body[newline + 1:] if newline != -1 else ""


class ProgramTestObjective(Objective):
    """A reward from unit tests judged outside the model's process; subclasses implement
    :meth:`program` and :meth:`tests`.

    * ``partial_credit`` — reward the fraction of tests passed instead of all-or-nothing.
    * ``timeout_s`` — wall-clock limit of one program (its judge gets 2 s more);
      ``batch_timeout_s`` — of the whole batch (tests judged by then keep their outcome, the
      rest fail, programs not started score 0; a ZooptWarning says so).
      When called under :func:`zoopt.rewards.guard.score`'s timer, the batch also ends 0.25 s
      before that timer would fire, so the guard's own fallback is not triggered.
    * ``workers`` — programs at once (default: the CPU count); as many judge workers are kept
      alive between calls.
    * ``max_message_bytes`` — the largest encoded call or result (a bigger one fails its test);
      ``judge_memory_mb`` — each judge worker's address space above its start size.
    * ``memory_mb``, ``network``, ``filesystem``, ``packages`` and any other
      :func:`zoopt.sandbox.programs.run_program` option in ``sandbox`` (a dict).  With
      ``network="refuse"`` (default) construction fails where the sandbox cannot make a network
      namespace; with ``filesystem="refuse"`` (default), where it cannot give the program the
      allowlist file-system view (the program could read the machine's files, answer keys
      included).  ``packages`` names the installed packages the programs may import (none by
      default: the standard library only).

    ``last_judgements`` holds the last batch's judgements (:class:`~zoopt.sandbox.judged_tests.Judgement`)
    and ``last_results`` their sandbox results (for diagnosis; they decide nothing).
    """

    success_threshold = 1.0

    def __init__(self, *, partial_credit: bool = False, timeout_s: float = 5.0,
                 batch_timeout_s: float = 60.0, workers: int | None = None,
                 memory_mb: int | None = 512, network: str = "refuse",
                 filesystem: str = "refuse", packages: tuple[str, ...] | list[str] = (),
                 max_message_bytes: int = MAX_MESSAGE_BYTES, judge_memory_mb: int | None = 1024,
                 sandbox: dict[str, Any] | None = None) -> None:
        if network not in NETWORK_MODES:
            raise ValueError(f"network must be one of {', '.join(NETWORK_MODES)}, got {network!r}")
        if filesystem not in FILESYSTEM_MODES:
            raise ValueError(f"filesystem must be one of {', '.join(FILESYSTEM_MODES)}, "
                             f"got {filesystem!r}")
        if isinstance(packages, str) or not all(isinstance(p, str) and p for p in packages):
            raise ValueError(f"packages must be a list of package names, got {packages!r}")
        if packages and filesystem == "visible":
            raise ValueError("packages: only the allowlist view binds packages; "
                             "filesystem='visible' shows every installed one")
        if not timeout_s > 0 or not batch_timeout_s > 0:
            raise ValueError(f"timeout_s and batch_timeout_s must be > 0, got {timeout_s}, "
                             f"{batch_timeout_s}")
        if not (isinstance(max_message_bytes, int) and max_message_bytes >= 1024):
            raise ValueError(f"max_message_bytes must be an integer ≥ 1024, got {max_message_bytes!r}")
        self.partial_credit = bool(partial_credit)
        self.timeout_s, self.batch_timeout_s = float(timeout_s), float(batch_timeout_s)
        self.workers = int(workers) if workers else (os.cpu_count() or 1)
        self.max_message_bytes, self.judge_memory_mb = max_message_bytes, judge_memory_mb
        self.sandbox_options = {"memory_mb": memory_mb, "network": network,
                                "filesystem": filesystem, "packages": tuple(packages),
                                **(sandbox or {})}
        if packages:
            runtime_view(tuple(packages))  # a package that is not installed: a ValueError now
        why = '; '.join(isolation().notes) or 'unknown reason'
        if network == "refuse" and not isolation().network_isolated:
            raise RuntimeError(f"{self.name}: this machine cannot give the sandbox a network "
                               f"namespace ({why}); pass network='warn' to run programs without it")
        if filesystem == "refuse" and not isolation().private_filesystem:
            raise RuntimeError(f"{self.name}: this machine cannot give the sandbox its allowlist "
                               f"file-system view ({why}), so programs could read answer keys on "
                               "disk; pass filesystem='warn' to run them anyway")
        self.last_judgements: list[Judgement] = []
        self.last_results: list[SandboxResult] = []
        self._judges: JudgePool | None = None

    def program(self, completion: str, row: dict) -> str:
        """The model's program for one completion and its dataset row (run in the sandbox)."""
        raise NotImplementedError

    def tests(self, row: dict) -> UnitTests:
        """The row's tests (trusted dataset code, run in the judge; never sent to the sandbox)."""
        raise NotImplementedError

    def __call__(self, prompts: list, completions: list, **columns: list) -> list[float]:
        n = len(completions)
        for key, values in columns.items():
            if len(values) != n:
                raise ValueError(f"column {key!r} has {len(values)} values for {n} completions")
        rows = [{k: v[i] for k, v in columns.items()} for i in range(n)]
        codes = [self.program(completion_text(c), row) for c, row in zip(completions, rows)]
        tests = [self.tests(row) for row in rows]
        if self._judges is None:
            self._judges = JudgePool(self.workers, memory_mb=self.judge_memory_mb)
        judgements = judge_programs(codes, tests, workers=self.workers, deadline_s=self._deadline(),
                                    timeout_s=self.timeout_s, pool=self._judges,
                                    max_message_bytes=self.max_message_bytes, **self.sandbox_options)
        self.last_judgements = judgements
        self.last_results = [j.sandbox for j in judgements]
        if any(j.sandbox.status in ("cancelled", "skipped") or j.judge in ("cancelled", "skipped")
               for j in judgements):
            warnings.warn(f"{self.name}: some programs had not finished when the batch's time ran "
                          "out and scored 0 on the tests not judged by then; raise reward_timeout_s "
                          "(the reward guard's limit), batch_timeout_s or workers", ZooptWarning,
                          stacklevel=2)
        return [self._reward(j) for j in judgements]

    def _reward(self, judgement: Judgement) -> float:
        if self.partial_credit:
            return judgement.fraction
        return 1.0 if judgement.outcomes and judgement.passed == len(judgement.outcomes) else 0.0

    def _deadline(self) -> float:
        """``batch_timeout_s``, cut to end before the reward guard's timer would fire."""
        return guard_time_left(self.batch_timeout_s)

    def __getstate__(self) -> dict:  # worker processes do not travel with a pickled objective
        return {**self.__dict__, "_judges": None}
