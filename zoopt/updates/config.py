"""The ``update`` section of a train config ⇄ an update rule.

``update.rule`` picks the direction rule (``sgd``, ``momentum``, ``adam``, ``rmsprop``) and the
other keys its parameters; ``update.clip_norm`` (set) puts ``clip_by_norm`` first and
``update.weight_decay`` (> 0) puts ``weight_decay`` after it::

    chain(clip_by_norm(clip_norm)?, <rule>(its keys), weight_decay(weight_decay, decay_towards)?)

A key another rule reads is ignored (``update.b1`` under ``rule: momentum``), so a sweep may search
them side by side.  :func:`config_of` is the inverse, for ``zoopt.fit``'s ``config.yaml``: the
section a rule composed in Python stands for, or None when no section does.
"""

from __future__ import annotations

from typing import Mapping

from .base import UpdateRule
from .compose import chain
from .rules import Adam, ClipByNorm, Momentum, RMSProp, WeightDecay

#: ``update.rule`` → its class and ``{config key: the class's field}``
RULES: dict[str, tuple[type | None, dict[str, str]]] = {
    "sgd": (None, {}),
    "momentum": (Momentum, {"momentum": "mu", "nesterov": "nesterov"}),
    "adam": (Adam, {"b1": "b1", "b2": "b2", "eps": "eps"}),
    "rmsprop": (RMSProp, {"rms_decay": "decay", "eps": "eps"}),
}
RULE_NAMES = tuple(RULES)

#: every key of the ``update`` section with its default (the rules' own defaults)
DEFAULTS = {"rule": "sgd", "momentum": Momentum.mu, "nesterov": Momentum.nesterov, "b1": Adam.b1, "b2": Adam.b2,
            "eps": Adam.eps, "rms_decay": RMSProp.decay, "weight_decay": 0.0, "decay_towards": WeightDecay.towards,
            "clip_norm": None}


def rule_from_config(section: Mapping) -> UpdateRule:
    """The rule an ``update`` section describes (missing keys take :data:`DEFAULTS`).  The values
    are checked by the config schema (``zoopt.hparams``: one line naming the key); here a bad one
    is the rule's own one-line ``ValueError``."""
    cfg = {**DEFAULTS, **dict(section)}
    unknown = sorted(set(cfg) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown config key 'update.{unknown[0]}' (keys: {', '.join(DEFAULTS)})")
    if cfg["rule"] not in RULES:
        raise ValueError(f"config key 'update.rule' must be one of {', '.join(RULE_NAMES)}, got {cfg['rule']!r}")
    cls, keys = RULES[cfg["rule"]]
    links: list[UpdateRule] = []
    if cfg["clip_norm"] is not None:
        links.append(ClipByNorm(cfg["clip_norm"]))
    if cls is not None:
        links.append(cls(**{field: cfg[k] for k, field in keys.items()}))
    if cfg["weight_decay"] != 0.0:
        links.append(WeightDecay(cfg["weight_decay"], cfg["decay_towards"]))
    return chain(*links)


def config_of(rule: UpdateRule) -> dict | None:
    """The ``update`` section (every key) whose :func:`rule_from_config` is ``rule``, or None when
    ``rule`` is no such chain (another order, a rule of yours, ``scale``)."""
    links = [r for r in rule.links if r.kind != "sgd"]
    out = dict(DEFAULTS)
    if links and isinstance(links[0], ClipByNorm):
        out["clip_norm"] = links.pop(0).max_norm
    if links and isinstance(links[-1], WeightDecay) and links[-1].rate > 0:
        decay = links.pop()
        out.update(weight_decay=decay.rate, decay_towards=decay.towards)
    if len(links) > 1:
        return None
    if links:
        name = next((n for n, (cls, _) in RULES.items() if cls is not None and type(links[0]) is cls), None)
        if name is None:
            return None
        out["rule"] = name
        for key, field in RULES[name][1].items():
            out[key] = getattr(links[0], field)
    return out if rule_from_config(out) == rule else None


__all__ = ["rule_from_config", "config_of", "RULES", "RULE_NAMES", "DEFAULTS"]
