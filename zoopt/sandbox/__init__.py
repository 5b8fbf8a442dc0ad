"""Running model-written code safely: the sandbox (:mod:`.programs`, with the child's
:mod:`.boot` and its isolation :mod:`.layers`) and the harness that turns unit tests into rewards
(:mod:`.program_tests`).  See docs/sandbox.md."""

from .programs import SandboxResult, isolation, run_program, run_programs

__all__ = ["SandboxResult", "isolation", "run_program", "run_programs"]
