"""Objectives: verifier rewards plus their data, registered by name.

Built-ins (lazy, imported on first ``get``): ``arithmetic``, ``countdown``, ``gsm8k``,
``humaneval``, ``mbpp``, the math benchmarks ``math500``, ``aime24``, ``aime25``, ``amc23``,
``minerva``, ``olympiadbench``, ``deepscaler``, ``champ``, and ``gpqa_diamond``
(docs/objectives.md).
Third-party packages add names through the ``zoopt.objectives`` entry-point group, or with::

    @objectives.register("my_task")
    class MyTask(zoopt.objective.Objective): ...

``get(name, **kwargs)`` instantiates a registered objective.  ``load(spec, **kwargs)`` also
accepts ``"path/to/file.py:attr"`` or ``"package.module:attr"`` where ``attr`` is

* an :class:`~zoopt.objective.Objective` subclass or factory — called with ``kwargs``;
* an :class:`~zoopt.objective.Objective` instance — returned as is (no ``kwargs`` allowed);
* a plain TRL reward function — any callable with a parameter named ``completions``, called as
  ``fn(prompts=..., completions=..., **columns)`` — wrapped in a :class:`FunctionObjective`
  whose data, ``extract_answer`` and ``gold_answer`` come from the registered objective named by
  the keyword ``dataset`` (default ``"arithmetic"``); the remaining ``kwargs`` build that
  objective, except ``success_threshold`` which sets the wrapper's.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

from zoopt.objective import Objective
from zoopt.plugins import PluginError, import_file, is_file_spec
from zoopt.registry import OBJECTIVES, RegistryError, build, resolve_target

OBJECTIVES.register("arithmetic", "objectives.arithmetic:Arithmetic")
OBJECTIVES.register("countdown", "objectives.countdown:Countdown")
OBJECTIVES.register("gsm8k", "objectives.gsm8k:GSM8K")
OBJECTIVES.register("humaneval", "objectives.humaneval:HumanEval")
OBJECTIVES.register("mbpp", "objectives.mbpp:MBPP")
for _name, _cls in (("math500", "Math500"), ("aime24", "AIME24"), ("aime25", "AIME25"), ("amc23", "AMC23"),
                    ("minerva", "Minerva"), ("olympiadbench", "OlympiadBench"),
                    ("deepscaler", "DeepScaleR"), ("champ", "Champ")):
    OBJECTIVES.register(_name, f"objectives.math_benchmarks:{_cls}")
OBJECTIVES.register("gpqa_diamond", "objectives.gpqa:GPQADiamond")

__all__ = ["register", "get", "names", "load", "FunctionObjective", "Objective"]


def register(name: str, *, overwrite: bool = False) -> Callable[[Any], Any]:
    """Decorator registering an Objective subclass or factory under ``name`` (a name already
    registered to a different target is an error unless ``overwrite``)."""
    return OBJECTIVES.register(name, overwrite=overwrite)


def names() -> list[str]:
    """The registered objective names (built-ins, decorated, entry points), sorted."""
    return OBJECTIVES.names()


def get(name: str, **kwargs: Any) -> Objective:
    """The registered objective ``name`` built with ``kwargs``; an unknown name raises a
    one-line RegistryError with a "did you mean" hint."""
    return _checked(build(OBJECTIVES, name, **kwargs), name)


def load(spec: str, **kwargs: Any) -> Objective:
    """A registered name, ``"path/to/file.py:attr"`` or ``"package.module:attr"`` as an
    Objective; see the module doc.  Bad paths and attributes raise a one-line RegistryError."""
    if ":" not in spec:
        return get(spec, **kwargs)
    where, attr = spec.rsplit(":", 1)
    target = _from_file(where, attr) if is_file_spec(where) else _from_module(where, attr)
    if isinstance(target, Objective):
        if kwargs:
            raise RegistryError(f"{spec!r} is an Objective instance; it takes no arguments "
                                f"(got {', '.join(sorted(kwargs))})")
        return target
    if inspect.isclass(target) and issubclass(target, Objective):
        return _checked(_call(target, spec, kwargs), spec)
    if callable(target) and _is_reward_function(target):
        dataset = kwargs.pop("dataset", "arithmetic")
        threshold = kwargs.pop("success_threshold", 1.0)
        return FunctionObjective(target, get(dataset, **kwargs), success_threshold=threshold,
                                 name=getattr(target, "__name__", attr))
    if callable(target):
        return _checked(_call(target, spec, kwargs), spec)
    raise RegistryError(f"{spec!r} is a {type(target).__name__}, not an Objective, a factory or a "
                        f"reward function")


class FunctionObjective(Objective):
    """A plain TRL reward function ``fn(prompts, completions, **columns)`` scored on another
    objective's data (its ``dataset``, ``extract_answer`` and ``gold_answer``)."""

    def __init__(self, fn: Callable[..., list], data: Objective, *, success_threshold: float = 1.0,
                 name: str | None = None) -> None:
        self.fn = fn
        self.data = data
        self.success_threshold = float(success_threshold)
        self.system_prompt = data.system_prompt
        self.publish_text = data.publish_text
        self.name = name or getattr(fn, "__name__", "reward_function")

    def __call__(self, prompts: list, completions: list[str], **columns: list) -> list[float | None]:
        return list(self.fn(prompts=prompts, completions=completions, **columns))

    def dataset(self, split: str, n: int | None = None):
        return self.data.dataset(split, n)

    def split_size(self, split: str) -> int | None:
        return self.data.split_size(split)

    def extract_answer(self, completion: str) -> str | None:
        return self.data.extract_answer(completion)

    def gold_answer(self, row: dict) -> str | None:
        return self.data.gold_answer(row)

    def failure_mode(self, prompt, completion: str, row: dict) -> str:
        return self.data.failure_mode(prompt, completion, row)


def _from_file(path: str, attr: str) -> Any:
    try:  # the plugin loader's import: a file given both ways is imported once
        module = import_file(path, what="objective")
    except PluginError as exc:
        raise RegistryError(str(exc)) from exc.__cause__
    if not hasattr(module, attr):
        raise RegistryError(f"{path!r} has no attribute {attr!r}")
    return getattr(module, attr)


def _from_module(module: str, attr: str) -> Any:
    try:
        return resolve_target(f"{module}:{attr}")
    except ModuleNotFoundError as exc:
        raise RegistryError(f"cannot import module {module!r}: {exc}") from None
    except AttributeError:
        raise RegistryError(f"module {module!r} has no attribute {attr!r}") from None


def _is_reward_function(fn: Callable) -> bool:
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "completions" in parameters


def _call(factory: Callable[..., Any], spec: str, kwargs: dict) -> Any:
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise RegistryError(f"objective {spec!r}: {exc}") from None


def _checked(obj: Any, name: str) -> Objective:
    if not isinstance(obj, Objective):
        raise RegistryError(f"objective {name!r} built a {type(obj).__name__}, not an Objective")
    return obj
