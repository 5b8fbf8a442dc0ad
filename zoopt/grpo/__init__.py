"""GRPO: group-relative policy optimisation on zoopt's engines and objectives (see docs/grpo.md).

``GRPO`` trains a transformers policy with AdamW on TRL's GRPO loss (:mod:`zoopt.grpo.loss`)
and group-relative advantages (:mod:`zoopt.grpo.advantages`); the policy is the engine's module
or, for vLLM, a separate model synced into the engine after each step (:mod:`zoopt.grpo.policy`).
``zoopt grpo`` runs it through :class:`zoopt.workflows.grpo.GRPOTrainer`.
"""

from .advantages import SCALE_REWARDS, group_advantages
from .loss import LOSS_TYPES, grpo_loss, token_weights
from .policy import policy_for, sync_same_module, sync_to_engine
from .trainer import GRPO

__all__ = ["GRPO", "policy_for", "sync_same_module", "sync_to_engine", "grpo_loss",
           "token_weights", "group_advantages", "LOSS_TYPES", "SCALE_REWARDS"]
