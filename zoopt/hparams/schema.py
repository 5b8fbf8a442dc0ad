"""The machinery under :mod:`zoopt.hparams`: rules, fields, the one validator, dict/YAML/Markdown.

A config is a frozen dataclass whose fields are made by :func:`hp` (a value: default, one line
of help, a :class:`Rule`) or :func:`section` (a nested config).  Construction validates every
field (``__post_init__``), so ``GRPOConfig(lr=-1)`` and a YAML file with ``lr: -1`` fail the
same way, with one line that names the dotted key, the rule and the bad value::

    config key 'sigma' must be a number > 0, got 'abc'

Coercion is limited to what cannot be misread: an integer for a float field becomes a float, an
integral float for an integer field an integer, a list for a list field a tuple, and a string in
YAML 1.2 exponent syntax (``5e-3``, which PyYAML's YAML 1.1 reads as a string) a float.  Other
strings never become numbers, and nothing becomes a bool.
"""

from __future__ import annotations

import copy
import difflib
import inspect
import math
import re
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, ClassVar, Mapping

import yaml


class ConfigError(ValueError):
    """A bad config key or value; the message is one line and names it (``zoopt.config.ConfigError``)."""


# YAML 1.2 floats with an exponent, which YAML 1.1 (PyYAML) leaves as strings: 5e-3, 1.5e3, -2E+5
_FLOAT_SYNTAX = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)[eE][-+]?[0-9]+")
_NOUNS = {"float": ("a number", "numbers"), "int": ("an integer", "integers"), "bool": ("true or false", "booleans"),
          "str": ("a string", "strings"), "mapping": ("a mapping", "mappings")}


@dataclass(frozen=True)
class Rule:
    """What one key accepts; :meth:`describe` is the phrase after "must be" in an error.

    ``kind``: ``float`` | ``int`` | ``bool`` | ``str`` | ``list`` | ``mapping``.  Numbers: an
    interval from ``low``/``high`` (``low_open``/``high_open``: strict).  Strings: ``choices``,
    or ``registry`` (a :class:`zoopt.registry.Registry`: any name registered when the value is
    checked).  Lists: ``item`` (the rule of each element) and an exact ``length``; ``single``:
    one element given alone is accepted as a list of one (``report_to: wandb``).
    ``also``: literal values accepted besides (``"auto"``); ``null``: ``None`` accepted.
    """

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple = ()
    registry: Any = None
    item: "Rule | None" = None
    length: int | None = None
    also: tuple = ()
    null: bool = False
    single: bool = False

    def describe(self, names: bool = True, plural: bool = False) -> str:
        """``names=False`` leaves out the registry's names (docs: they depend on what is installed)."""
        if self.kind == "list":
            count = f"{self.length} " if self.length is not None else ""
            base = f"a list of {count}{self.item.describe(names, plural=True)}"
            if self.single:
                base = f"{self.item.describe(names)}, or a list of them"
        elif self.choices:
            base = "one of " + ", ".join(map(str, self.choices))
        elif self.registry is not None:
            known = f" ({', '.join(self.registry.names())})" if names else ""
            base = f"a registered {self.registry.kind}{known}"
        else:
            base = _NOUNS[self.kind][1 if plural else 0] + self._interval()
        parts = [repr(a) for a in self.also] + [base] + (["null"] if self.null else [])
        return ", ".join(parts[:-1]) + " or " + parts[-1] if len(parts) > 1 else base

    def _interval(self) -> str:
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            return f" in {'(' if self.low_open else '['}{lo:g}, {hi:g}{')' if self.high_open else ']'}"
        if lo is not None:
            return f" {'>' if self.low_open else '≥'} {lo:g}"
        if hi is not None:
            return f" {'<' if self.high_open else '≤'} {hi:g}"
        return ""

    def check(self, key: str, value: Any) -> Any:
        """``value``, coerced as the module doc says; :class:`ConfigError` naming ``key`` if it breaks the rule."""
        ok, out = self._coerce(value)
        if not ok:
            raise ConfigError(f"config key {key!r} must be {self.describe()}, got {value!r}")
        return out

    def _coerce(self, value: Any) -> tuple[bool, Any]:
        if value is None:
            return self.null, None
        if isinstance(value, str) and value in self.also:
            return True, value
        kind = self.kind
        if kind == "bool":
            return isinstance(value, bool), value
        if kind == "str":
            if not isinstance(value, str):
                return False, value
            if self.choices:
                return value in self.choices, value
            if self.registry is not None:
                return value in self.registry, value
            return True, value
        if kind == "mapping":
            return isinstance(value, Mapping), copy.deepcopy(dict(value)) if isinstance(value, Mapping) else value
        if kind == "list":
            if self.single and not isinstance(value, (list, tuple)):
                value = [value]
            if not isinstance(value, (list, tuple)) or (self.length is not None and len(value) != self.length):
                return False, value
            items = [self.item._coerce(v) for v in value]
            return all(ok for ok, _ in items), tuple(v for _, v in items)
        if isinstance(value, bool):
            return False, value
        if kind == "float":
            if isinstance(value, str) and _FLOAT_SYNTAX.fullmatch(value):
                value = float(value)
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                return False, value
            value = float(value)
        elif kind == "int":
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int):
                return False, value
        else:
            raise TypeError(f"unknown rule kind {kind!r}")
        return self._within(value), value

    def _within(self, v: float) -> bool:
        lo, hi = self.low, self.high
        return ((lo is None or (v > lo if self.low_open else v >= lo))
                and (hi is None or (v < hi if self.high_open else v <= hi)))


# -- rule constructors ---------------------------------------------------------------------
def number(*, gt=None, ge=None, lt=None, le=None, null=False, also=()) -> Rule:
    return Rule("float", low=ge if gt is None else gt, high=le if lt is None else lt,
                low_open=gt is not None, high_open=lt is not None, null=null, also=also)


def integer(*, ge=None, null=False) -> Rule:
    return Rule("int", low=ge, null=null)


def boolean() -> Rule:
    return Rule("bool")


def string(*, choices=(), registry=None, null=False) -> Rule:
    return Rule("str", choices=tuple(choices), registry=registry, null=null)


def list_of(item: Rule, length: int | None = None, *, single: bool = False, null: bool = False) -> Rule:
    """A list of ``item``s; ``single``: one item alone counts as a list of one."""
    return Rule("list", item=item, length=length, single=single, null=null)


def mapping() -> Rule:
    return Rule("mapping")


# -- fields --------------------------------------------------------------------------------
def hp(default: Any, help: str, rule: Rule, *, omit_if_none: bool = False) -> Any:
    """A hyper-parameter: its default, one line of help and its rule.

    ``omit_if_none``: the key is left out of :func:`to_dict` while it is ``None`` (an optional
    key that today's configs do not carry, such as ``noise.rank``)."""
    meta = {"help": help, "rule": rule, "omit_if_none": omit_if_none}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=meta)
    return field(default=default, metadata=meta)


def section(cls: type, help: str) -> Any:
    """A nested config (a YAML mapping of its own keys)."""
    return field(default_factory=cls, metadata={"help": help, "section": cls})


class Config:
    """Base of the config dataclasses: validates every field on construction.

    ``prefix``: the dotted path of a section class (``"noise."``), so errors name the full key.
    ``check()``: cross-field rules, after every field passed its own.
    """

    prefix: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            value, sub = getattr(self, f.name), f.metadata.get("section")
            if sub is not None:
                if isinstance(value, Mapping):
                    value = from_dict(sub, value)
                elif not isinstance(value, sub):
                    raise ConfigError(f"config key {self.prefix + f.name!r} is a section; "
                                      f"set its keys ({self.prefix + f.name}.KEY=...)")
            else:
                value = f.metadata["rule"].check(self.prefix + f.name, value)
            object.__setattr__(self, f.name, value)
        self.check()

    def check(self) -> None:
        """Cross-field rules (none by default)."""


def unknown_key(key: str, known) -> ConfigError:
    """``unknown config key 'a.b'; did you mean 'a.c'?`` (the hint when one is close)."""
    head, _, last = key.rpartition(".")
    close = difflib.get_close_matches(last, list(known), n=1)
    hint = f"; did you mean {(head + '.' if head else '') + close[0]!r}?" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}")


def from_dict(cls: type, data: Mapping) -> Config:
    """``cls`` from a (nested) mapping of its keys; missing keys take their defaults."""
    known = {f.name: f for f in fields(cls)}
    if not isinstance(data, Mapping):
        raise ConfigError(f"config key {cls.prefix.rstrip('.')!r} must be a mapping, got {data!r}")
    kwargs = {}
    for name, value in data.items():
        f = known.get(str(name))
        if f is None:
            raise unknown_key(cls.prefix + str(name), known)
        sub = f.metadata.get("section")
        if sub is not None and not isinstance(value, (Mapping, sub)):
            raise ConfigError(f"config key {cls.prefix + f.name!r} is a section; "
                              f"set its keys ({cls.prefix + f.name}.KEY=...)")
        kwargs[f.name] = value
    return cls(**kwargs)


def to_dict(config: Config) -> dict:
    """The plain dict of ``config`` (sections → dicts, tuples → lists), as ``load_config`` returns it."""
    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if f.metadata.get("omit_if_none") and value is None:
            continue
        out[f.name] = to_dict(value) if is_dataclass(value) else _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def optional_keys(cls: type) -> set[str]:
    """Dotted keys a config may set although its defaults dict leaves them out (``omit_if_none``)."""
    out = set()
    for f in fields(cls):
        if "section" in f.metadata:
            out |= optional_keys(f.metadata["section"])
        elif f.metadata.get("omit_if_none"):
            out.add(cls.prefix + f.name)
    return out


# -- generated text: YAML defaults and the docs table -------------------------------------
def _default(f) -> Any:
    return f.default_factory() if f.default is MISSING else f.default


def _flow(value: Any) -> str:
    """One YAML flow value: ``0.005``, ``null``, ``['*']``, ``{}``."""
    return yaml.safe_dump([_plain(value)], default_flow_style=True, width=10**6).strip()[1:-1]


def to_yaml(cls: type, indent: int = 0) -> str:
    """The defaults of ``cls`` as commented YAML (the class doc as the header, each key's help after it)."""
    lines = []
    if indent == 0:
        header = inspect.cleandoc(cls.__doc__ or "")
        lines += [("# " + line).rstrip() for line in header.splitlines()]
        lines.append("# Generated from zoopt/hparams (python -m zoopt.hparams); edit the dataclass, not this file.")
    pad = "  " * indent
    for f in fields(cls):
        sub, help = f.metadata.get("section"), f.metadata["help"]
        if sub is not None:
            lines.append(f"{pad}{f.name + ':':<{27 - len(pad)}}  # {help}")
            lines.append(to_yaml(sub, indent + 1))
            continue
        value = _default(f)
        if f.metadata.get("omit_if_none") and value is None:
            entry = f"{pad}# {f.name}: null"
            lines.append(f"{entry:<27}  # (optional) {help}")
            continue
        entry = f"{pad}{f.name}: {_flow(value)}"
        lines.append(f"{entry:<27}  # {help}")
    return "\n".join(lines) + ("\n" if indent == 0 else "")


def markdown_table(cls: type) -> str:
    """``| key | rule | default | help |``, one row per key (sections flattened to dotted keys)."""
    rows = ["| key | type and rule | default | help |", "|---|---|---|---|"]

    def walk(c: type) -> None:
        for f in fields(c):
            sub = f.metadata.get("section")
            if sub is not None:
                walk(sub)
                continue
            rule, default = f.metadata["rule"], _default(f)
            shown = "(unset)" if f.metadata.get("omit_if_none") and default is None else f"`{_flow(default)}`"
            cells = [f"`{c.prefix}{f.name}`", rule.describe(names=False), shown, f.metadata["help"]]
            rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")

    walk(cls)
    return "\n".join(rows) + "\n"
