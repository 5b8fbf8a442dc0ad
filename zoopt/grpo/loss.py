"""The GRPO policy loss and its normalisations, defined as in TRL's ``GRPOTrainer``.

For completion i (of a batch of B sequences) and its token t, with the current log-prob
ℓ_it = log π_θ(o_it | q, o_i,<t), the log-prob at sampling time ℓ^old_it, the reference
log-prob ℓ^ref_it and the sequence's advantage A_i:

    ρ_it   = exp(ℓ_it − ℓ^old_it)
    L_it   = −min(ρ_it·A_i, clip(ρ_it, 1 − ε, 1 + ε_high)·A_i) + β·KL_it
    KL_it  = exp(ℓ^ref_it − ℓ_it) − (ℓ^ref_it − ℓ_it) − 1          (the k3 estimator, ≥ 0)

(ε_high = ε unless given; the KL term only when β ≠ 0.)  With the completion mask m_it and
|o_i| = Σ_t m_it, the loss types reduce L_it over the *whole optimizer-step batch*:

    grpo     (1/B) Σ_i (1/|o_i|) Σ_t m_it L_it                  (sequence mean of token means)
    bnpo     Σ_it m_it L_it / Σ_it m_it                          (token mean over the batch)
    dr_grpo  Σ_it m_it L_it / (B · max_completion_length)        (a constant normaliser)
    dapo     Σ_it m_it L_it / Σ_it m_it                          (token mean over the global batch)

Every variant is written as Σ_it w_it·L_it with weights w from :func:`token_weights`, computed
once on the full batch; a micro-batch's loss is its share of that sum, so gradient
accumulation over micro-batches gives the full-batch gradient exactly.

bnpo and dapo: TRL normalises bnpo by the tokens of each *local* micro-batch (then divides by
the accumulation steps) and dapo by ``num_items_in_batch``, the tokens of the whole
accumulated batch on all processes.  zoopt is one process and normalises over the whole
optimizer-step batch for both, so here the two are the same number; both equal TRL's when
TRL runs the batch without gradient accumulation.  TRL's default is ``dapo`` (TRL 1.16).

With one iteration per batch (TRL's default ``num_iterations=1``) ℓ^old is ℓ detached, so
ρ = 1 numerically and nothing is clipped, but ∇ρ = ∇ℓ: the gradient is the policy gradient
−Σ w_it A_i ∇ℓ_it.

References: Shao et al. (2024) DeepSeekMath (GRPO, eq. 3, k3 KL); Yu et al. (2025) DAPO
(token-level loss, ε_high); Liu et al. (2025) Dr. GRPO; TRL ``GRPOTrainer._compute_loss``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")


def check_loss_type(loss_type: str) -> str:
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")
    return loss_type


def token_weights(mask: torch.Tensor, loss_type: str, max_completion_length: int | None = None,
                  dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """w_it with loss = Σ_it w_it·L_it for ``loss_type`` (see the module docstring), shape of ``mask``."""
    check_loss_type(loss_type)
    m = mask.to(dtype)
    n_seq = m.shape[0]
    if loss_type == "grpo":
        return m / (m.sum(-1, keepdim=True).clamp(min=1.0) * n_seq)
    if loss_type in ("bnpo", "dapo"):
        return m / m.sum().clamp(min=1.0)
    if not (isinstance(max_completion_length, int) and max_completion_length >= 1):
        raise ValueError(f"dr_grpo needs max_completion_length ≥ 1, got {max_completion_length!r}")
    return m / (n_seq * max_completion_length)


def token_logps(logits: torch.Tensor, token_ids: torch.Tensor, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(log q(token), H(q))`` per position with q = softmax(logits / T), in fp32 (or wider).

    T is the sampling temperature (TRL divides the logits by it too), so ℓ is the log-prob of
    the distribution the completion was sampled from.
    """
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
    logq = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
    logp = logq.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    entropy = -(logq.exp() * logq).sum(-1)
    return logp, entropy


@dataclass
class LossOutput:
    """The weighted loss of (part of) a batch and token counts for logging."""

    loss: torch.Tensor          # Σ_it w_it L_it over the tokens given (a scalar with grad)
    tokens: int                 # Σ m_it
    kl_sum: float               # Σ m_it KL_it (0 when β = 0)
    low_clipped: int            # tokens with ρ < 1 − ε and A < 0
    high_clipped: int           # tokens with ρ > 1 + ε_high and A > 0


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
              loss_type: str = "dapo", epsilon: float = 0.2, epsilon_high: float | None = None,
              beta: float = 0.0, ref_logps: torch.Tensor | None = None,
              max_completion_length: int | None = None, weights: torch.Tensor | None = None) -> LossOutput:
    """The clipped GRPO loss of the module docstring.

    ``logps``, ``old_logps``, ``ref_logps`` and ``mask`` are (B, T); ``advantages`` is (B,).
    ``weights`` (from :func:`token_weights` on the *full* batch) lets a micro-batch add its
    exact share; without it the weights are computed from this batch alone.
    """
    if beta != 0.0 and ref_logps is None:
        raise ValueError("beta ≠ 0 needs ref_logps (log-probs under the reference model)")
    eps_high = epsilon if epsilon_high is None else epsilon_high
    if weights is None:
        weights = token_weights(mask, loss_type, max_completion_length, dtype=logps.dtype)
    adv = advantages.to(logps.dtype).unsqueeze(-1)
    ratio = torch.exp(logps - old_logps)
    clipped = torch.clamp(ratio, 1 - epsilon, 1 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    m = mask.to(torch.bool)
    kl_sum = 0.0
    if beta != 0.0:
        delta = ref_logps - logps
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + beta * kl
        kl_sum = float(kl.detach()[m].sum())
    loss = (per_token * weights.to(per_token.dtype)).sum()
    with torch.no_grad():
        low = int(((ratio < 1 - epsilon) & (adv < 0) & m).sum())
        high = int(((ratio > 1 + eps_high) & (adv > 0) & m).sum())
    return LossOutput(loss=loss, tokens=int(m.sum()), kl_sum=kl_sum, low_clipped=low, high_clipped=high)
