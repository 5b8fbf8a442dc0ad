"""Typed hyper-parameters: one definition per key (default, help, rule) for every run config.

:class:`TrainConfig` (``zoopt train``, ES) and :class:`GRPOConfig` (``zoopt grpo``) are frozen
dataclasses; constructing one validates every value, and a bad value is one
:class:`~zoopt.config.ConfigError` line naming the dotted key, the rule and the value.  They
drive everything else:

* ``zoopt.config.default_config("train" | "grpo")`` is ``to_dict(TrainConfig())`` /
  ``to_dict(GRPOConfig())``, and ``load_config`` validates the merged dict through them;
* :class:`zoopt.grpo.GRPO` takes :attr:`GRPOConfig.TRAINER_KEYS` as keyword arguments, with
  these defaults and rules;
* :class:`ESConfig` (``zoopt.trl``) takes their definitions under TRL's names;
* :func:`check_key` is the one validation of a key's value outside a config (``ES(sigma=…)``, an
  estimator's ``plan``, population coverage): the same rule and the same one-line error;
* ``zoopt/configs/{train,grpo}.yaml`` and ``docs/configuration.md`` are generated from them:
  ``python -m zoopt.hparams`` rewrites both (tests fail when either drifts).
"""

from __future__ import annotations

from pathlib import Path

from .keys import check_key, key_field
from .run_configs import (
    EvalConfig, GRPOConfig, GRPOSamplingConfig, NoiseConfig, SamplingConfig, TrainConfig, UpdateConfig,
)
from .schema import Config, ConfigError, Rule, from_dict, markdown_table, optional_keys, to_dict, to_yaml, unknown_key
from .trl_names import ES_KEYS, TRL_NAMES, ESConfig

#: ``base`` name of ``zoopt.config.load_config`` → its config class
CONFIGS: dict[str, type] = {"train": TrainConfig, "grpo": GRPOConfig}


def validate(cfg: dict, base: str) -> dict:
    """``cfg`` checked against ``CONFIGS[base]``: the plain dict of the validated config."""
    return to_dict(from_dict(CONFIGS[base], cfg))


def configuration_markdown() -> str:
    """The text of ``docs/configuration.md``."""
    parts = ["# Configuration", "",
             "Every key of `zoopt train` (ES) and `zoopt grpo`, its rule, default and meaning. Set keys in a YAML",
             "file (`--config FILE`) or with `--set key=value` (dotted for sections: `--set sampling.n=4`);",
             "values are YAML (`5e-3`, `[0.9, 0.99]`, `null`). A key that does not exist, or a value that breaks",
             "its rule, is a one-line error naming the key.",
             "",
             "Generated from `zoopt/hparams/run_configs.py` by `python -m zoopt.hparams` (which also writes",
             "`zoopt/configs/train.yaml` and `grpo.yaml`); `tests/test_hparams.py` fails when this file drifts.",
             "In Python: `TrainConfig(sigma=0.01)`, `GRPOConfig(lr=1e-5)` (`zoopt.hparams`), and",
             "`GRPO(engine, objective, sampling, lr=1e-5, ...)` takes the GRPO keys marked below.",
             ""]
    for name, cls, note in (
            ("train", TrainConfig, "ES (`zoopt train`; also each ES phase of `zoopt compare` and ES sweeps)."),
            ("grpo", GRPOConfig, "GRPO (`zoopt grpo`; also each GRPO phase of `zoopt compare` and GRPO sweeps). "
                                 "Keys in **bold** are keyword arguments of `zoopt.grpo.GRPO`.")):
        table = markdown_table(cls)
        if cls is GRPOConfig:
            for key in GRPOConfig.TRAINER_KEYS:
                table = table.replace(f"| `{key}` |", f"| **`{key}`** |")
        parts += [f"## `{name}` — `{cls.__name__}`", "", note, "", table]
    parts += ["## `zoopt.trl.ESConfig` — TRL's names", "",
              "The arguments of `zoopt.trl.ESTrainer` (docs/python.md): TRL `GRPOConfig`'s name where the concept is",
              "the same — the `train` key each stands for opens its help — and ES's own keys under their `train`",
              "names, with `train`'s defaults and rules.", "", markdown_table(ESConfig)]
    return "\n".join(parts)


GENERATED = {"docs/configuration.md": configuration_markdown,
             "zoopt/configs/train.yaml": lambda: to_yaml(TrainConfig),
             "zoopt/configs/grpo.yaml": lambda: to_yaml(GRPOConfig)}


def write_generated(root: str | Path = Path(__file__).resolve().parents[2]) -> list[Path]:
    """Write every generated file under the repository ``root``; the paths written."""
    out = []
    for rel, make in GENERATED.items():
        path = Path(root) / rel
        path.write_text(make())
        out.append(path)
    return out


__all__ = ["TrainConfig", "GRPOConfig", "ESConfig", "TRL_NAMES", "ES_KEYS", "NoiseConfig", "SamplingConfig", "GRPOSamplingConfig", "EvalConfig",
           "UpdateConfig",
           "Config", "ConfigError", "check_key", "key_field", "Rule", "CONFIGS", "validate", "from_dict", "to_dict",
           "to_yaml",
           "optional_keys", "unknown_key", "markdown_table", "configuration_markdown", "GENERATED",
           "write_generated"]
