"""GRPO: group-relative policy optimisation on zoopt's engines and objectives (see docs/grpo.md).

``GRPO`` trains the engine's transformers module with AdamW on TRL's GRPO loss
(:mod:`zoopt.grpo.loss`) and group-relative advantages (:mod:`zoopt.grpo.advantages`).
"""

from .advantages import SCALE_REWARDS, group_advantages
from .loss import LOSS_TYPES, grpo_loss, token_weights
from .trainer import GRPO, GRPOResult, sync_same_module, train_grpo

__all__ = ["GRPO", "GRPOResult", "train_grpo", "sync_same_module", "grpo_loss", "token_weights",
           "group_advantages", "LOSS_TYPES", "SCALE_REWARDS"]
