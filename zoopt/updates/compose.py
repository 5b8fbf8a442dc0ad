"""Composing update rules: :func:`chain` (optax's), :func:`is_identity`, and :func:`rule_from_dict`,
which rebuilds a rule from its :meth:`~zoopt.updates.base.UpdateRule.to_dict` (a seed log's
header, a vLLM worker's call) through the registry :data:`zoopt.registry.UPDATE_RULES`.
"""

from __future__ import annotations

from .base import Chain, UpdateRule
from .rules import SGD


def is_identity(rule: UpdateRule) -> bool:
    """Whether ``rule`` leaves ĝ as it is (``sgd()``): then a step is the linear combination
    α·ĝ, applied as seeds and coefficients with no state (:func:`zoopt.updates.step_update`)."""
    return not rule.links or all(r.kind == "sgd" for r in rule.links)


def chain(*rules: UpdateRule) -> UpdateRule:
    """The rules applied in order (optax's ``chain``), flattened: ``chain()`` and ``chain(sgd())``
    are ``sgd()``, a chain of one rule is that rule.  A rule that needs ‖ĝ‖ (``clip_by_norm``)
    anywhere but first is a one-line ``ValueError``: its input must be ĝ itself."""
    flat: list[UpdateRule] = []
    for rule in rules:
        if not isinstance(rule, UpdateRule):
            raise TypeError(f"chain takes update rules, got {type(rule).__name__}: {rule!r}")
        flat.extend(r for r in rule.links if r.kind != "sgd")
    if not flat:
        return SGD()
    if len(flat) == 1:
        return flat[0]
    return Chain(tuple(flat))  # checks that a rule needing ‖ĝ‖ comes first


def rule_from_dict(config: dict) -> UpdateRule:
    """Rebuild a rule from :meth:`UpdateRule.to_dict` output; a bad kind or parameter is a
    one-line error naming it."""
    from ..registry import UPDATE_RULES, RegistryError

    if not isinstance(config, dict) or "kind" not in config:
        raise ValueError(f"an update rule must be a mapping with a 'kind', got {config!r}")
    params = {k: v for k, v in config.items() if k != "kind"}
    if config["kind"] == "chain":
        return chain(*(rule_from_dict(r) for r in params.get("rules", [])))
    cls = UPDATE_RULES.get(config["kind"])
    try:
        return cls(**params)
    except TypeError as exc:
        raise RegistryError(f"update rule {config['kind']!r}: {exc}") from None


__all__ = ["chain", "is_identity", "rule_from_dict"]
