"""What the ES shell hands an engine: ĝ plus the rule that turns it into this step.

:func:`step_update` is the one place where a rule meets the learning rate α:

- ``sgd`` (the default) is linear and keeps no state, so the step α·ĝ is folded into the
  coefficients — ``Update(seeds, α·c)``, exactly the update zoopt made before rules existed, bit
  for bit (an old seed log, whose header names no rule, is this);
- any other rule travels with ĝ: ``Update(seeds, c, rule=chain(rule, scale(α)), rule_step=t)``,
  and the engine applies ``θ ← θ + rule(ĝ)`` per tensor, beside its master, with the rule's state
  at step t (:mod:`zoopt.engines.rule_state`).  The seed log keeps c (ĝ's coefficients) in each
  record and the rule in its header, so a replay hands the engine the same updates.
"""

from __future__ import annotations

from ..types import Update
from .base import UpdateRule
from .compose import chain, is_identity
from .rules import scale


def applied_rule(rule: UpdateRule, lr: float) -> UpdateRule:
    """The rule an engine runs for a step of ``rule`` at learning rate α: ``chain(rule, scale(α))``."""
    return chain(rule, scale(lr))


def step_update(rule: UpdateRule, g: Update, lr: float, step: int) -> Update:
    """The update of step ``step`` (0-based) for ĝ = ``g`` (coefficients without α) under ``rule``
    (see the module docstring); ``g.info`` is kept."""
    if is_identity(rule):
        return g.scaled(lr)
    return Update(g.seeds, g.coefficients, g.info, rule=applied_rule(rule, lr), rule_step=int(step))


__all__ = ["step_update", "applied_rule"]
