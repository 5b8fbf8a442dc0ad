"""Token entropy of the sampling distribution.

For logits ``z`` over a vocabulary of size ``V`` and temperature ``T``,
``p = softmax(z/T)`` and ``H(p) = −Σ_v p_v log p_v`` (natural log, nats), computed as
``−Σ exp(log_softmax(z/T)) · log_softmax(z/T)`` for numerical stability.  The paper
("Understanding Evolution Strategies for LLM Reasoning") tracks its mean over generated tokens
during training; entropy collapse is a known signature of RL post-training
(Cui et al. 2025, "The Entropy Mechanism of Reinforcement Learning for Reasoning LMs").
"""

from __future__ import annotations

from typing import Sequence

import torch


def token_entropy(logits: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """``H(softmax(logits/T))`` over the last dimension, in nats; shape ``logits.shape[:-1]``."""
    if not temperature > 0:
        raise ValueError(f"token_entropy: temperature must be > 0, got temperature={temperature!r}")
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    # exp(-inf) * -inf = nan; masked (-inf) logits contribute 0 to the sum
    plogp = torch.where(torch.isfinite(logp), logp.exp() * logp, torch.zeros_like(logp))
    return -plogp.sum(dim=-1)


def mean_token_entropy(per_completion_entropies: Sequence[Sequence[float]]) -> float:
    """Token-weighted mean: ``Σ_c Σ_t H_{c,t} / Σ_c T_c`` over all generated tokens.

    Long completions weigh more than short ones (every token counts once), as when averaging
    over a flat batch of tokens.  Returns NaN when there are no tokens.
    """
    total, count = 0.0, 0
    for ents in per_completion_entropies:
        total += float(sum(ents))
        count += len(ents)
    return total / count if count else float("nan")
