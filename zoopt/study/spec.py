"""A study spec: the runs and analyses of ``zoopt study`` as one YAML mapping.

:func:`load_study_spec` reads ``zoopt/configs/study.yaml`` (every key, its default and meaning)
← the spec (a YAML path, or a shipped name: ``paper-toy``, ``paper-easy``, ``paper-hard`` from
``zoopt/configs/studies/``) ← its ``profiles.P`` block (``--profile P``) ← ``--set key=value``
items, and returns a plain dict.  Sections ``es``, ``grpo``, ``tuning.es``, ``tuning.grpo``
are free-form here (train/grpo keys, checked when the runs are planned); every other key must
exist in ``study.yaml``: an unknown key, an unknown claim or profile is a one-line
:class:`~zoopt.config.ConfigError` naming it.
"""

from __future__ import annotations

import copy
from importlib import resources
from pathlib import Path

import yaml

from ..config import ConfigError, absolute_paths, config_items, packaged_names, read_yaml_spec, set_dotted

CLAIMS = ("C1", "C1S", "C2", "C3", "C4", "C5", "C6", "C7", "C8")
OPEN = ("es", "grpo", "tuning.es", "tuning.grpo", "profiles", "objective_args", "engine_args")
SHIPPED = tuple(packaged_names("zoopt.configs", "studies"))  # zoopt/configs/studies/*.yaml


def defaults() -> dict:
    return yaml.safe_load(resources.files("zoopt.configs").joinpath("study.yaml").read_text())


def load_study_spec(source: str | Path, profile: str | None = None, overrides=()) -> dict:
    """The spec of ``source`` with ``profile`` and ``overrides`` applied (module docstring)."""
    path, raw = read_yaml_spec(source, "zoopt.configs", "studies", "study spec",
                               not_found_hint=f" (shipped: {', '.join(SHIPPED)})")
    spec = defaults()
    spec["name"] = path.stem
    apply(spec, raw.items())
    if profile is not None:
        profiles = spec["profiles"]
        if profile not in profiles:
            raise ConfigError(f"--profile: unknown profile {profile!r} (spec {spec['name']!r} has: "
                              f"{', '.join(profiles) or 'none'})")
        apply(spec, (profiles[profile] or {}).items())
    apply(spec, config_items(None, overrides))
    spec["profile"] = profile or "default"
    check(spec)
    return absolute_paths(spec)


def apply(spec: dict, items) -> None:
    """Set each ``(key, value)``: open sections update (or, given whole, replace) free-form maps."""
    for key, value in items:
        key = str(key)
        if key == "name":
            spec["name"] = str(value)
            continue
        section = next((s for s in OPEN if key == s or key.startswith(s + ".")), None)
        if section is None:
            set_dotted(spec, key, value, optional=())
            continue
        node = spec
        for part in section.split(".")[:-1]:
            node = node[part]
        leaf = section.split(".")[-1]
        if key == section:
            if not isinstance(value, dict):
                raise ConfigError(f"study key {key!r} must be a mapping, got {value!r}")
            node[leaf] = {**node[leaf], **copy.deepcopy(value)}
        else:
            node[leaf][key[len(section) + 1:]] = copy.deepcopy(value)


def check(spec: dict) -> None:
    """One-line errors for values the runs would only trip over later."""
    claims = spec["claims"]
    if not isinstance(claims, list) or not claims:
        raise ConfigError(f"claims must be a non-empty list of {', '.join(CLAIMS)}, got {claims!r}")
    for c in claims:
        if c not in CLAIMS:
            raise ConfigError(f"claims: unknown claim {c!r} (known: {', '.join(CLAIMS)})")
    ev = spec["eval"]
    n, ks = int(ev["n_samples"]), [int(k) for k in ev["ks"]]
    if n < 1 or not ks or min(ks) < 1 or max(ks) > n:
        raise ConfigError(f"eval.ks must lie in [1, eval.n_samples={n}] and n_samples ≥ 1, got {ks}")
    for method in ("es", "grpo"):
        grid = spec["tuning"][method]
        for key, values in grid.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"tuning.{method}.{key} must be a non-empty list of values, got {values!r}")
    members, cks = int(spec["c8"]["members"]), [int(k) for k in spec["c8"]["ks"]]
    if members < 1 or not cks or min(cks) < 1 or max(cks) > members:
        raise ConfigError(f"c8.ks must lie in [1, c8.members={members}], got {cks}")
    for s in spec["c3"]["sparsity"]:
        if not 0 < float(s) < 1:
            raise ConfigError(f"c3.sparsity values must lie in (0, 1), got {s!r}")
    seeds = spec["seeds"]
    if seeds is not None and (not isinstance(seeds, list) or not seeds or len(set(map(str, seeds))) != len(seeds)
                              or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 0 for x in seeds)):
        raise ConfigError(f"seeds must be null or a non-empty list of distinct integers ≥ 0, got {seeds!r}")
    temps = spec["final_temperatures"]
    if temps is not None and (not isinstance(temps, list) or not all(
            isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0 for t in temps)):
        raise ConfigError(f"final_temperatures must be null or a list of numbers > 0, got {temps!r}")
