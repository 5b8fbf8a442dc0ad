"""The two ways to score HumanEval programs, for tests/benchmarks/test_bench_reward_integrity.py.

* :func:`judged` — today's: :class:`objectives.humaneval.HumanEval` (the program answers calls
  in the sandbox, a judge worker runs the tests; zoopt/sandbox/judged_tests.py).
* :func:`in_process` — the harness before issue 27, rebuilt here for the comparison only (it
  can be forged: the tests ran in the program's own process): one program per completion —
  a reporter, the model's code, the test code with each top-level ``assert`` statement of
  ``check`` wrapped to print ``<nonce> pass i`` — run with
  :func:`zoopt.sandbox.programs.run_programs`, the nonce passed in the environment.
"""

from __future__ import annotations

import ast
import re
import secrets

from objectives.humaneval import HumanEval, load_problems, truncate
from zoopt.sandbox.program_tests import extract_code
from zoopt.sandbox.programs import run_programs

NONCE_VARIABLE = "ZOOPT_TEST_NONCE"
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


def problems(n: int) -> list[dict]:
    """The first ``n`` HumanEval problems with their canonical solutions."""
    return list(load_problems())[:n]


def columns(rows: list[dict]) -> dict:
    return {"task_id": [p["task_id"] for p in rows], "entry_point": [p["entry_point"] for p in rows],
            "code_prompt": [p["prompt"] for p in rows], "test": [p["test"] for p in rows]}


def judged(objective: HumanEval, rows: list[dict]) -> list[float]:
    return objective(["p"] * len(rows), [p["canonical_solution"] for p in rows], **columns(rows))


def _wrap(test: str, i: int) -> str:
    body = "\n".join("    " + line for line in test.splitlines()) or "    pass"
    return (f"try:\n{body}\nexcept BaseException:\n    _zoopt_report('fail', {i})\n"
            f"else:\n    _zoopt_report('pass', {i})\n")


def _check_units(test_code: str) -> tuple[str, int]:
    tree = ast.parse(test_code)
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            body = []
            for statement in node.body:
                if any(isinstance(n, ast.Assert) for n in ast.walk(statement)):
                    body.extend(ast.parse(_wrap(ast.unparse(statement), count)).body)
                    count += 1
                else:
                    body.append(statement)
            node.body = body
    return ast.unparse(ast.fix_missing_locations(tree)), count


def in_process_program(completion: str, problem: dict) -> tuple[str, int]:
    entry, prompt = problem["entry_point"], problem["prompt"]
    code = extract_code(completion)
    if re.search(rf"^(?:async\s+)?def\s+{re.escape(entry)}\s*\(", code, re.MULTILINE):
        code = prompt + "\n\n" + code
    else:
        code = prompt + truncate(code)
    checks, n = _check_units(problem["test"])
    call = f"try:\n    check({entry})\nexcept BaseException:\n    pass\n"
    return "\n".join([_REPORTER, code, "", checks, call, "_zoopt_report('done')", ""]), n


def in_process(rows: list[dict], workers: int, timeout_s: float = 10.0) -> list[float]:
    built = [in_process_program(p["canonical_solution"], p) for p in rows]
    nonces = [secrets.token_hex(16) for _ in rows]
    results = run_programs([source for source, _ in built], workers=workers, timeout_s=timeout_s,
                           envs=[{NONCE_VARIABLE: nonce} for nonce in nonces])
    rewards = []
    for result, nonce, (_, n) in zip(results, nonces, built):
        passed, done = set(), False
        for line in result.stdout.splitlines():
            if line.startswith(nonce):
                word, _, index = line[len(nonce):].strip().partition(" ")
                passed |= {int(index)} if word == "pass" and index.isdigit() else set()
                done = done or word == "done"
        rewards.append(1.0 if result.ok and done and n and len(passed) == n else 0.0)
    return rewards
