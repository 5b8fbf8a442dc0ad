"""Rewards from running a completion's program against unit tests in the sandbox.

The shared half of ``humaneval`` and ``mbpp``:

* :func:`extract_code` — the completion's last fenced code block (an unclosed last fence
  counts up to the end), else the whole text.
* :func:`test_program` — one Python program: a small reporter, the model's code, then each
  test wrapped so that its outcome is reported on stdout as ``<nonce> pass <i>`` or
  ``<nonce> fail <i>``, and ``<nonce> done`` at the end.  The nonce is random per run and
  reaches the program only through an environment variable that the reporter removes before
  the model's code runs, so ``sys.exit(0)``, ``os._exit(0)`` or printing "passed" before the
  tests does not pass them.  (A program written to hunt for the reporter in its own memory
  can still forge it: the sandbox protects the machine, not the reward from a program that
  targets this harness; see docs/sandbox.md.)
* :class:`ProgramTestObjective` — runs a batch in parallel (up to ``workers`` sandboxes at a
  time) under one deadline and turns the reports into rewards: 1.0 when the program exited
  cleanly and every test passed, else 0.0; with ``partial_credit=True`` the fraction of tests
  that passed (tests reported before a timeout count).
"""

from __future__ import annotations

import ast
import os
import secrets
import warnings
from typing import Any

from zoopt.objective import Objective, ZooptWarning, completion_text
from zoopt.rewards.timeouts import guard_time_left

from .programs import NETWORK_MODES, SandboxResult, isolation, run_programs

NONCE_VARIABLE = "ZOOPT_TEST_NONCE"
_FENCE = "```"

_REPORTER = f'''\
def _zoopt_reporter():
    import os
    nonce = os.environ.pop("{NONCE_VARIABLE}", "")

    def report(word, i=""):
        os.write(1, ("\\n%s %s %s\\n" % (nonce, word, i)).encode())
    return report


_zoopt_report = _zoopt_reporter()
del _zoopt_reporter
'''


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


def wrap_test(test: str, i: int) -> str:
    """``test`` (trusted dataset code: statements) wrapped to report ``pass i``/``fail i``."""
    body = "\n".join("    " + line for line in test.splitlines()) or "    pass"
    return (f"try:\n{body}\nexcept BaseException:\n    _zoopt_report('fail', {i})\n"
            f"else:\n    _zoopt_report('pass', {i})\n")


def test_program(code: str, tests: list[str], setup: str = "", after: str = "") -> str:
    """The program run for one completion: reporter, ``code`` (the model's), ``setup`` (the
    dataset's, e.g. imports), each of ``tests`` wrapped by :func:`wrap_test`, ``after``
    (already wrapped code, e.g. a ``check(candidate)`` call whose asserts report themselves)
    and the ``done`` line."""
    parts = [_REPORTER, code, "", "# ---- tests ----", setup]
    parts += [wrap_test(test, i) for i, test in enumerate(tests)]
    parts += [after, "_zoopt_report('done')", ""]
    return "\n".join(parts)


def passed_tests(result: SandboxResult, nonce: str, n_tests: int) -> tuple[set[int], bool]:
    """``(indices of tests reported passed, whether the done line came)`` from ``result``."""
    passed, done = set(), False
    for line in result.stdout.splitlines():
        if not line.startswith(nonce):
            continue
        word, _, index = line[len(nonce):].strip().partition(" ")
        if word == "pass" and index.isdigit() and int(index) < n_tests:
            passed.add(int(index))
        elif word == "done":
            done = True
    return passed, done


class ProgramTestObjective(Objective):
    """A reward from unit tests run in the sandbox; subclasses implement :meth:`program`.

    * ``partial_credit`` — reward the fraction of tests passed instead of all-or-nothing.
    * ``timeout_s`` — wall-clock limit of one program; ``batch_timeout_s`` — of the whole
      batch (programs still running then score what they reported; those not started, 0;
      a ZooptWarning says so).
      When called under :func:`zoopt.rewards.guard.score`'s timer, the batch also ends 0.25 s
      before that timer would fire, so the guard's own fallback is not triggered.
    * ``workers`` — programs at once (default: the CPU count).
    * ``memory_mb``, ``network`` and any other :func:`zoopt.sandbox.programs.run_program` option
      in ``sandbox`` (a dict).  With ``network="refuse"`` (default) construction fails where
      the sandbox cannot make a network namespace.
    """

    success_threshold = 1.0

    def __init__(self, *, partial_credit: bool = False, timeout_s: float = 5.0,
                 batch_timeout_s: float = 60.0, workers: int | None = None,
                 memory_mb: int | None = 512, network: str = "refuse",
                 sandbox: dict[str, Any] | None = None) -> None:
        if network not in NETWORK_MODES:
            raise ValueError(f"network must be one of {', '.join(NETWORK_MODES)}, got {network!r}")
        if not timeout_s > 0 or not batch_timeout_s > 0:
            raise ValueError(f"timeout_s and batch_timeout_s must be > 0, got {timeout_s}, "
                             f"{batch_timeout_s}")
        self.partial_credit = bool(partial_credit)
        self.timeout_s, self.batch_timeout_s = float(timeout_s), float(batch_timeout_s)
        self.workers = int(workers) if workers else (os.cpu_count() or 1)
        self.sandbox_options = {"memory_mb": memory_mb, "network": network, **(sandbox or {})}
        if network == "refuse" and not isolation().network_isolated:
            raise RuntimeError(f"{self.name}: this machine cannot give the sandbox a network "
                               f"namespace ({'; '.join(isolation().notes) or 'unknown reason'}); "
                               "pass network='warn' to run programs without it")
        self.last_results: list[SandboxResult] = []

    def program(self, completion: str, row: dict) -> tuple[str, int]:
        """``(source, number of tests)`` for one completion and its dataset row."""
        raise NotImplementedError

    def __call__(self, prompts: list, completions: list, **columns: list) -> list[float]:
        n = len(completions)
        for key, values in columns.items():
            if len(values) != n:
                raise ValueError(f"column {key!r} has {len(values)} values for {n} completions")
        rows = [{k: v[i] for k, v in columns.items()} for i in range(n)]
        built = [self.program(completion_text(c), row) for c, row in zip(completions, rows)]
        nonces = [secrets.token_hex(16) for _ in range(n)]
        results = run_programs([source for source, _ in built], workers=self.workers,
                               deadline_s=self._deadline(), timeout_s=self.timeout_s,
                               envs=[{NONCE_VARIABLE: nonce} for nonce in nonces],
                               **self.sandbox_options)
        self.last_results = results
        if any(r.status in ("cancelled", "skipped") for r in results):
            warnings.warn(f"{self.name}: some programs had not finished when the batch's time ran "
                          "out and scored 0; raise reward_timeout_s (the reward guard's limit), "
                          "batch_timeout_s or workers", ZooptWarning, stacklevel=2)
        return [self._reward(result, nonce, n_tests)
                for result, nonce, (_, n_tests) in zip(results, nonces, built)]

    def _reward(self, result: SandboxResult, nonce: str, n_tests: int) -> float:
        passed, done = passed_tests(result, nonce, n_tests)
        if self.partial_credit:
            return len(passed) / n_tests if n_tests else 0.0
        return 1.0 if result.ok and done and n_tests and len(passed) == n_tests else 0.0

    def _deadline(self) -> float:
        """``batch_timeout_s``, cut to end before the reward guard's timer would fire."""
        return guard_time_left(self.batch_timeout_s)


def check_units(test_code: str, function: str = "check") -> tuple[str, int]:
    """HumanEval-style tests (``def check(candidate): assert ...``) rewritten so that each
    top-level statement of ``function``'s body that contains an ``assert`` reports itself as
    one test (:func:`wrap_test`).  Returns ``(code, number of tests)``; a test file without
    such statements is one test: the call of ``function`` as a whole."""
    tree = ast.parse(test_code)
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            body = []
            for statement in node.body:
                if any(isinstance(n, ast.Assert) for n in ast.walk(statement)):
                    wrapped = ast.parse(wrap_test(ast.unparse(statement), count)).body
                    body.extend(wrapped)
                    count += 1
                else:
                    body.append(statement)
            node.body = body
    return ast.unparse(ast.fix_missing_locations(tree)), count
