"""Update rules over the ES gradient ĝ, replayable from the seed log (docs/update-rules.md).

    from zoopt import ES
    from zoopt.updates import adam, chain, clip_by_norm, momentum, weight_decay

    es = ES("one_point", lr=5e-4, rule=chain(clip_by_norm(1.0), adam(), weight_decay(1e-2)))

The contract (``init`` + ``update`` per tensor) is :mod:`zoopt.updates.base`, ``chain`` and
``rule_from_dict`` :mod:`zoopt.updates.compose`; the
rules and their formulas :mod:`zoopt.updates.rules`; how the ES shell hands ĝ and the rule to an
engine :mod:`zoopt.updates.step`; the ``update`` config section :mod:`zoopt.updates.config`.
Engines apply a rule beside their fp32 master (:mod:`zoopt.engines.rule_state`).
"""

from .base import Chain, StepContext, UpdateRule
from .compose import chain, is_identity, rule_from_dict
from .config import config_of, rule_from_config
from .rules import (
    SGD, Adam, ClipByNorm, Momentum, RMSProp, Scale, WeightDecay, adam, clip_by_norm, momentum, rmsprop, scale, sgd,
    weight_decay,
)
from .step import applied_rule, step_update

__all__ = ["UpdateRule", "Chain", "StepContext", "chain", "rule_from_dict", "is_identity", "SGD", "Momentum", "Adam",
           "RMSProp", "WeightDecay", "ClipByNorm", "Scale", "sgd", "momentum", "adam", "rmsprop", "weight_decay",
           "clip_by_norm", "scale", "step_update", "applied_rule", "rule_from_config", "config_of"]
