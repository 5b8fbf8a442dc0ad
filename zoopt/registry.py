"""A generic name → object registry with lazy ``"module:attr"`` targets and entry points.

Modelled on lm-evaluation-harness's ``api/registry.py``: registering a name twice is an error,
a miss suggests the closest names, and targets given as ``"package.module:attr"`` strings are
imported only when first asked for, so the core never imports a plugin package it does not use.
Third-party packages add names through the entry-point group given to the registry
(``zoopt.estimators``, ``zoopt.noise``, ``zoopt.objectives``, ``zoopt.engines``,
``zoopt.update_rules``); user modules
listed in ``ZOOPT_PLUGINS`` (or given with ``--plugin``) are imported before a lookup, so the
names they register are found (:mod:`zoopt.plugins`).
"""

from __future__ import annotations

import difflib
import importlib
from importlib.metadata import entry_points
from typing import Any, Callable

from .extras import missing_dependency
from .plugins import load_env_plugins


class RegistryError(LookupError):
    """An unknown or duplicate name; the message is one line and names the offending key."""


def resolve_target(target: str) -> Any:
    """Import ``"package.module:attr"`` (attr may be dotted) and return the attribute.  A module
    that needs an optional dependency which is not installed raises
    :class:`~zoopt.extras.MissingDependency` (one line naming the extra)."""
    if ":" not in target:
        raise RegistryError(f"lazy target {target!r} must look like 'package.module:attr'")
    module_name, attr = target.split(":", 1)
    try:
        obj: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        missing = missing_dependency(exc)
        if missing is None:
            raise
        raise missing from exc
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


class Registry:
    """Names → objects of one kind (``kind`` is used in error messages)."""

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._targets: dict[str, Any] = {}
        self._entry_points_loaded = False

    def register(self, name: str, target: Any = None, *, overwrite: bool = False) -> Any:
        """Register ``target`` (an object or a lazy ``"module:attr"`` string) under ``name``.

        Without ``target`` this returns a decorator: ``@registry.register("name")``.
        """
        if target is None:
            def decorator(obj: Any) -> Any:
                self.register(name, obj, overwrite=overwrite)
                return obj
            return decorator
        if not isinstance(name, str) or not name:
            raise RegistryError(f"{self.kind} name must be a non-empty string, got {name!r}")
        existing = self._targets.get(name)
        if existing is not None and not overwrite and not _same(existing, target):
            raise RegistryError(
                f"{self.kind} {name!r} is already registered (to {_describe(existing)}); "
                f"pass overwrite=True to replace it"
            )
        self._targets[name] = target
        return target

    def get(self, name: str) -> Any:
        """The object registered as ``name``; lazy targets are imported on first use."""
        if name not in self._targets:
            self._load_entry_points()
        if name not in self._targets:
            raise RegistryError(self._unknown_message(name))
        target = self._targets[name]
        if isinstance(target, str):
            target = resolve_target(target)
            self._targets[name] = target
        return target

    def name_of(self, cls: Any) -> str | None:
        """The name ``cls`` is registered under (as itself or as its lazy ``"module:qualname"``
        target), or None; imports nothing."""
        self._load_entry_points()
        path = f"{cls.__module__}:{cls.__qualname__}"
        return next((name for name, target in self._targets.items() if target is cls or target == path), None)

    def names(self) -> list[str]:
        self._load_entry_points()
        return sorted(self._targets)

    def __contains__(self, name: str) -> bool:
        self._load_entry_points()
        return name in self._targets

    def _unknown_message(self, name: str) -> str:
        names = sorted(self._targets)
        close = difflib.get_close_matches(str(name), names, n=1, cutoff=0.5)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        return f"unknown {self.kind} {name!r}{hint} (known: {', '.join(names) or 'none'})"

    def _load_entry_points(self) -> None:
        load_env_plugins()  # ZOOPT_PLUGINS: imported once each, whichever registry asks first
        if self._entry_points_loaded or not self.entry_point_group:
            return
        self._entry_points_loaded = True
        for ep in entry_points(group=self.entry_point_group):
            if ep.name not in self._targets:
                self._targets[ep.name] = ep.value  # lazy "module:attr"


def _same(a: Any, b: Any) -> bool:
    return a is b or (isinstance(a, str) and isinstance(b, str) and a == b) or _describe(a) == _describe(b)


def _describe(obj: Any) -> str:
    if isinstance(obj, str):
        return obj
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    return f"{module}:{qualname}" if module and qualname else repr(obj)


# The core's registries.  Built-in plugins are lazy targets, so importing zoopt imports none.
ESTIMATORS = Registry("estimator", "zoopt.estimators")
ESTIMATORS.register("one_point", "estimators.one_point:OnePoint")
ESTIMATORS.register("two_point", "estimators.two_point:TwoPoint")

SHAPINGS = Registry("shaping", "zoopt.shapings")
for _name in ("zscore", "centered_rank", "raw", "mean_baseline"):
    SHAPINGS.register(_name, f"estimators.shaping:{_name}")

NOISE = Registry("noise", "zoopt.noise")
NOISE.register("gaussian", "zoopt.noise:Gaussian")
NOISE.register("rademacher", "zoopt.noise:Rademacher")
NOISE.register("low_rank", "zoopt.noise:LowRank")

OBJECTIVES = Registry("objective", "zoopt.objectives")

UPDATE_RULES = Registry("update rule", "zoopt.update_rules")  # by kind: how a seed log's header rebuilds a rule
for _name, _cls in (("sgd", "SGD"), ("momentum", "Momentum"), ("adam", "Adam"), ("rmsprop", "RMSProp"),
                    ("weight_decay", "WeightDecay"), ("clip_by_norm", "ClipByNorm"), ("scale", "Scale")):
    UPDATE_RULES.register(_name, f"zoopt.updates.rules:{_cls}")

ENGINES = Registry("engine", "zoopt.engines")
ENGINES.register("module", "zoopt.engines.module:ModuleEngine")
ENGINES.register("hf", "zoopt.engines.hf:HFEngine")
ENGINES.register("vllm", "zoopt.engines.vllm:VLLMEngine")
ENGINES.register("ray", "zoopt.engines.ray:RayEngine")

#: Registered engines a command cannot run, and why (``"*"``: no command).  The commands'
#: ``--engine`` help and their config checks read this table, so an engine a plugin registers is
#: offered by every command unless it is listed here.
ENGINE_REFUSALS: dict[str, dict[str, str]] = {
    "module": {"*": "the 'module' engine wraps a torch module built in Python (zoopt.optimize, "
                    "ModuleEngine(module)) and loads no model by name"},
    "ray": {"grpo": "GRPO runs on hf or vllm; ray replicas serve ES only (GRPO's gradient step needs the "
                    "weights in this process)"},
}


def engine_refusal(name: str, command: str) -> str | None:
    """Why ``command`` (``train``, ``grpo``, ``compare``, ``eval``, ...) cannot run engine ``name``, or None."""
    refused = ENGINE_REFUSALS.get(str(name), {})
    return refused.get("*") or refused.get(command)


def engines_for(command: str) -> list[str]:
    """The registered engine names ``command`` runs, sorted: built-ins and entry points, less
    :data:`ENGINE_REFUSALS` (plugin modules are not imported for this: it serves ``--help``)."""
    names = set(ENGINES._targets)
    if ENGINES.entry_point_group:
        names |= {ep.name for ep in entry_points(group=ENGINES.entry_point_group)}
    return sorted(n for n in names if engine_refusal(n, command) is None)


def build(registry: Registry, name: str, **kwargs: Any) -> Any:
    """``registry.get(name)(**kwargs)`` with a one-line error naming a bad keyword."""
    factory: Callable[..., Any] = registry.get(name)
    try:
        return factory(**kwargs)
    except TypeError as exc:
        raise RegistryError(f"{registry.kind} {name!r}: {exc}") from None
