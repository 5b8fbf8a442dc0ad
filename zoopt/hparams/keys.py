"""One validation per hyper-parameter: ``check_key("sigma", σ)`` applies config key ``sigma``'s rule.

Every key is defined once, in :mod:`zoopt.hparams.run_configs` (default, help and
:class:`~zoopt.hparams.schema.Rule`).  Code that takes the same value outside a config file —
``ES(sigma=…, lr=…, population_size=…, seed=…)``, an estimator's ``plan(step, population_size,
sigma, …)``, population coverage's ``sigma`` — checks it here, against that one definition, so a
bad value is the same one line wherever it enters::

    config key 'sigma' must be a number > 0, got -0.001

The value comes back coerced as a config's would be (an integer σ becomes a float, an integral
float N an integer).
"""

from __future__ import annotations

from dataclasses import Field, fields
from typing import Any

from .run_configs import TrainConfig
from .schema import unknown_key


def key_field(key: str, config: type = TrainConfig) -> Field:
    """The dataclass field that defines ``config``'s ``key`` (dotted for a section's: ``"sampling.n"``)."""
    cls, *parts = config, *key.split(".")
    for i, part in enumerate(parts):
        known = {f.name: f for f in fields(cls)}
        if part not in known or (i < len(parts) - 1 and "section" not in known[part].metadata):
            raise unknown_key(key, known)
        if i < len(parts) - 1:
            cls = known[part].metadata["section"]
    return known[parts[-1]]


def check_key(key: str, value: Any, config: type = TrainConfig) -> Any:
    """``value`` checked (and coerced) by the rule of ``config``'s ``key`` (default: ``zoopt train``'s);
    a bad one is the :class:`~zoopt.hparams.schema.ConfigError` line naming the key, the rule and the value."""
    return key_field(key, config).metadata["rule"].check(key, value)


__all__ = ["check_key", "key_field"]
