"""One searched hyper-parameter of a sweep: a typed range or a list of choices.

A spec's ``space`` maps dotted train-config keys (``sigma``, ``lr``, ``population_size``,
``noise.kind``…) to one of::

    {type: float, low: 1e-3, high: 1e-1, log: true}      # optional step (not with log)
    {type: int, low: 4, high: 64, log: false, step: 4}    # log and step default false / 1
    {type: categorical, choices: [8, 16, 32]}             # scalars: str, int, float, bool, null

:meth:`Param.suggest` asks an Optuna trial for a value under the param's own name, so trial
params are keyed by the same dotted config keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

PARAM_KEYS = {"float": {"type", "low", "high", "log", "step"},
              "int": {"type", "low", "high", "log", "step"},
              "categorical": {"type", "choices"}}


class SpecError(ValueError):
    """A bad sweep spec; the message is one line and names the offending key."""


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple = ()

    def suggest(self, trial) -> Any:
        """The value for ``trial`` (an ``optuna.Trial``), recorded under :attr:`name`."""
        if self.type == "categorical":
            return trial.suggest_categorical(self.name, list(self.choices))
        if self.type == "int":
            return trial.suggest_int(self.name, int(self.low), int(self.high), step=int(self.step or 1), log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high), step=self.step, log=self.log)

    def contains(self, value: Any) -> bool:
        """Whether ``value`` is one this param can take (used for enqueued trials)."""
        if self.type == "categorical":
            return any(value == c and type(value) is type(c) or _same_number(value, c) for c in self.choices)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.type == "int" and value != int(value):
            return False
        return self.low <= value <= self.high

    def grid(self) -> list:
        """The values a grid sampler walks: the choices, or every int step in [low, high]."""
        if self.type == "categorical":
            return list(self.choices)
        if self.type == "int" and not self.log:
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        raise SpecError(f"sampler: grid needs categorical or linear int params; space.{self.name} is "
                        f"{'log-int' if self.type == 'int' else 'float'} (list its values as choices)")


def _same_number(a: Any, b: Any) -> bool:
    numeric = (int, float)
    return (isinstance(a, numeric) and isinstance(b, numeric) and not isinstance(a, bool)
            and not isinstance(b, bool) and a == b)


def parse_param(name: str, raw: Any) -> Param:
    """Validate one ``space`` entry; raise :class:`SpecError` naming ``space.<name>``."""
    where = f"space.{name}"
    if not isinstance(raw, dict):
        raise SpecError(f"{where} must be a mapping like {{type: float, low: ..., high: ...}}, got {raw!r}")
    kind = raw.get("type")
    if kind not in PARAM_KEYS:
        raise SpecError(f"{where}.type must be one of {sorted(PARAM_KEYS)}, got {kind!r}")
    unknown = sorted(set(raw) - PARAM_KEYS[kind])
    if unknown:
        raise SpecError(f"unknown key {where}.{unknown[0]} for a {kind} param (allowed: {sorted(PARAM_KEYS[kind])})")
    if kind == "categorical":
        choices = raw.get("choices")
        if not isinstance(choices, list) or not choices:
            raise SpecError(f"{where}.choices must be a non-empty list, got {choices!r}")
        for c in choices:
            if c is not None and not isinstance(c, (str, int, float, bool)):
                raise SpecError(f"{where}.choices must hold scalars (str, int, float, bool, null), got {c!r}")
        if len(set(map(repr, choices))) != len(choices):
            raise SpecError(f"{where}.choices has duplicates: {choices!r}")
        return Param(name, kind, choices=tuple(choices))
    low, high, log, step = raw.get("low"), raw.get("high"), raw.get("log", False), raw.get("step")
    for key, value in (("low", low), ("high", high)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SpecError(f"{where}.{key} must be a finite number, got {value!r}")
        if kind == "int" and value != int(value):
            raise SpecError(f"{where}.{key} must be an integer for an int param, got {value!r}")
    if not low < high:
        raise SpecError(f"{where}: low must be < high, got low={low!r} high={high!r}")
    if not isinstance(log, bool):
        raise SpecError(f"{where}.log must be true or false, got {log!r}")
    if log and low <= 0:
        raise SpecError(f"{where}: log: true needs low > 0, got low={low!r}")
    if step is not None:
        if isinstance(step, bool) or not isinstance(step, (int, float)) or step <= 0:
            raise SpecError(f"{where}.step must be a positive number, got {step!r}")
        if log and (kind == "float" or step != 1):
            raise SpecError(f"{where}: step cannot be combined with log: true")
    if kind == "int":
        return Param(name, kind, int(low), int(high), log, int(step) if step else None)
    return Param(name, kind, float(low), float(high), log, float(step) if step else None)
