"""Run configuration: defaults (:mod:`zoopt.hparams`) ← a YAML file ← ``key=value`` overrides.

``--set key=value`` overrides use dotted keys for sections (``sampling.max_new_tokens=16``);
values are parsed as YAML (``[a, b]`` → list, ``null`` → None; ``5e-3``, a string to YAML 1.1,
becomes a float in a float key).  A key that the defaults do not have is an error that names it
(with the closest known key), so a typo never silently trains with the default; for the
``train`` and ``grpo`` bases every value is checked against its rule
(:class:`zoopt.hparams.TrainConfig`, :class:`~zoopt.hparams.GRPOConfig`), and a bad one is a
one-line :class:`ConfigError` naming the key.  Callers receive plain dicts, whose local paths
(``objective: path/to/file.py:attr``, a ``model`` directory) are absolute (:func:`absolute_paths`),
so a run's ``config.yaml`` means the same from any working directory.
"""

from __future__ import annotations

import copy
import difflib
import importlib.util
import re
from importlib import resources
from pathlib import Path
from typing import Any, Collection, Iterable

import yaml

from .hparams import CONFIGS, ConfigError, optional_keys, to_dict, validate
from .plugins import is_file_spec

OPEN_SECTIONS = {"objective_args", "engine_args"}  # free-form: passed to constructors
# dotted keys a config may add although its defaults leave them out (noise.rank), for every caller of
# set_dotted/merge: --set, compare's es./grpo. sections, schedules' overrides, sweep spaces
OPTIONAL_KEYS = frozenset().union(*(optional_keys(cls) for cls in CONFIGS.values()))


def default_config(name: str = "train") -> dict:
    """The defaults of ``name`` as a plain dict: ``train``/``grpo`` from :mod:`zoopt.hparams`,
    any other name (``compare``) from ``zoopt/configs/<name>.yaml``."""
    if name in CONFIGS:
        return to_dict(CONFIGS[name]())
    text = resources.files("zoopt.configs").joinpath(f"{name}.yaml").read_text()
    return yaml.safe_load(text)


def load_config(path: str | Path | None = None, overrides: Iterable[str] = (), base: str = "train") -> dict:
    """Defaults ← YAML file ← ``key=value`` overrides; an unknown key or a bad value raises
    :class:`ConfigError` (values are checked for the ``train`` and ``grpo`` bases)."""
    config = default_config(base)
    optional = optional_keys(CONFIGS[base]) if base in CONFIGS else ()
    for key, value in config_items(path, overrides):
        set_dotted(config, key, value, optional)
    absolute_paths(config)
    return validate(config, base) if base in CONFIGS else config


MODEL_NAMES = ("smollm2-135m", "tiny")  # names zoopt.models resolves before looking for a directory


def absolute_paths(config: dict) -> dict:
    """Make ``config``'s local paths absolute, in place: ``objective: dir/file.py:attr`` (an existing
    file) and ``model`` (an existing directory that is not a model name).  Names, module targets and
    paths that do not exist are left as they are.  Returns ``config``."""
    objective = config.get("objective")
    if isinstance(objective, str) and ":" in objective:
        where, attr = objective.rsplit(":", 1)
        if is_file_spec(where) and Path(where).expanduser().is_file():
            config["objective"] = f"{Path(where).expanduser().resolve()}:{attr}"
    model = config.get("model")
    if (isinstance(model, str) and model not in MODEL_NAMES and not model.startswith("tiny:")
            and Path(model).expanduser().is_dir()):
        config["model"] = str(Path(model).expanduser().resolve())
    return config


def parse_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)``; malformed YAML is a one-line :class:`ConfigError` naming ``where``
    (``config file PATH``, ``--set KEY``) and the position (line and column, 1-based) of the fault."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise ConfigError(f"{where}: malformed YAML{at}: {problem}") from None


def parse_override(item: str) -> tuple[str, Any]:
    """``"key=value"`` → ``(key, YAML value)``; one-line errors name the item or the key."""
    if "=" not in item:
        raise ConfigError(f"--set expects key=value, got {item!r}")
    key, raw = item.split("=", 1)
    key = key.strip()
    return key, parse_yaml(raw, f"--set {key}={raw}")


def config_items(path: str | Path | None, overrides: Iterable[str]) -> list[tuple[str, Any]]:
    """``(key, value)`` pairs from a YAML mapping file, then from ``key=value`` strings (in order)."""
    items: list[tuple[str, Any]] = []
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        user = parse_yaml(path.read_text(), f"config file {path}") or {}
        if not isinstance(user, dict):
            raise ConfigError(f"config file {path} must hold a mapping, got {type(user).__name__}")
        items += [(str(k), v) for k, v in user.items()]
    items += [parse_override(item) for item in overrides]
    return items


def merge(config: dict, user: dict) -> None:
    for key, value in user.items():
        set_dotted(config, str(key), value)


def set_dotted(config: dict, key: str, value: Any, optional: Collection[str] = OPTIONAL_KEYS) -> None:
    """Set ``config[a][b] = value`` for ``key = "a.b"``, refusing keys the defaults lack
    (except the dotted keys in ``optional``, which a config may add: ``noise.rank``)."""
    parts = key.split(".")
    if parts[0] in OPEN_SECTIONS:
        node = config.setdefault(parts[0], {})
        if len(parts) == 1:
            if not isinstance(value, dict):
                raise ConfigError(f"config key {key!r} must be a mapping, got {value!r}")
            node.update(copy.deepcopy(value))
            return
        for part in parts[1:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = copy.deepcopy(value)
        return
    node = config
    for i, part in enumerate(parts):
        dotted = ".".join(parts[: i + 1])
        if isinstance(node, dict) and part not in node and dotted in optional and i == len(parts) - 1:
            node[part] = None
        if not isinstance(node, dict) or part not in node:
            known = list(node) if isinstance(node, dict) else []
            close = difflib.get_close_matches(part, known, n=1)
            hint = f"; did you mean {'.'.join(parts[:i] + [close[0]])!r}?" if close else ""
            raise ConfigError(f"unknown config key {dotted!r}{hint}")
        if i < len(parts) - 1:
            node = node[part]
        elif isinstance(node[part], dict):
            if not isinstance(value, dict):
                raise ConfigError(f"config key {dotted!r} is a section; set its keys ({dotted}.KEY=...)")
            for k, v in value.items():
                set_dotted(config, f"{dotted}.{k}", v, optional)
        else:
            node[part] = copy.deepcopy(value)


def packaged_names(package: str, folder: str) -> list[str]:
    """The names of the YAML files shipped in ``<package>/<folder>/`` (``zoopt sweep``'s and
    ``zoopt study``'s specs), sorted; found without importing ``package``."""
    spec = importlib.util.find_spec(package)
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    return sorted({p.stem for root in roots for p in (Path(root) / folder).glob("*.yaml")})


def packaged_yaml(package: str, folder: str, name: str) -> Path | None:
    """The YAML file ``<package>/<folder>/<name>.yaml`` shipped in a package, or None (also for a
    ``name`` that is not a bare ``[A-Za-z0-9_-]+`` word)."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)):
        return None
    path = resources.files(package).joinpath(folder).joinpath(f"{name}.yaml")
    return Path(str(path)) if path.is_file() else None


def read_yaml_spec(source: str | Path, package: str, folder: str, kind: str, error: type[Exception] = ConfigError,
                   not_found_hint: str = "") -> tuple[Path, dict]:
    """``(path, mapping)`` of a spec file: ``source`` as a path, else the packaged
    :func:`packaged_yaml` of that name (``zoopt study`` specs, sweep specs).  A one-line
    ``error`` when neither exists (``"{kind} not found: {source}{not_found_hint}"``) or when the
    file does not hold a mapping."""
    path = Path(source)
    if not path.is_file():
        packaged = packaged_yaml(package, folder, str(source))
        if packaged is None:
            raise error(f"{kind} not found: {source}{not_found_hint}")
        path = packaged
    try:
        raw = parse_yaml(path.read_text(), f"{kind} {path}")
    except ConfigError as exc:
        raise error(str(exc)) from None
    if not isinstance(raw, dict):
        raise error(f"{kind} {path} must hold a mapping, got {type(raw).__name__}")
    return path, raw
