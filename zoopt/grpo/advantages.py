"""Group-relative advantages, as TRL's ``GRPOTrainer`` computes them (``scale_rewards``).

Rewards come in groups of ``G`` consecutive completions of the same prompt (``G`` = samples
per prompt).  With μ_g the mean of the rewards of group g:

    A_i = (r_i − μ_g(i)) / (s + 1e-4)     for scale_rewards = "group" (s = std of the group)
                                                          or "batch" (s = std of the whole batch)
    A_i =  r_i − μ_g(i)                   for scale_rewards = "none"  (Dr. GRPO's advice)

The centring is always on the group mean; only the scale differs.  ``s`` is the *unbiased*
sample standard deviation (Bessel's correction, ddof = 1), as ``trl.trainer.utils.nanstd``
computes it (TRL 1.16; ``torch.std`` has the same convention), and the constant 1e-4 is
TRL's.  A reward of ``None`` (the objective had no opinion) is left out of the mean and the
std and gets advantage 0, exactly as TRL treats an unscorable completion; a std over fewer
than two valid rewards is undefined, which also gives advantage 0 when scaling.

References: Shao et al. (2024), DeepSeekMath, eq. 3 (GRPO's outcome supervision);
Liu et al. (2025), "Understanding R1-Zero-Like Training" (Dr. GRPO: no std scaling);
TRL ``GRPOTrainer._generate_and_score_completions``.
"""

from __future__ import annotations

from typing import Sequence

import torch

SCALE_REWARDS = ("group", "batch", "none")
STD_EPS = 1e-4


def _nanstd(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Unbiased std ignoring NaNs; NaN where fewer than two values are present."""
    kw = {"dim": dim, "keepdim": True} if dim is not None else {}
    mean = torch.nanmean(x, **kw)
    count = (~torch.isnan(x)).sum(**kw)
    var = torch.nansum((x - mean) ** 2, **kw) / (count - 1).clamp(min=1)
    return torch.where(count > 1, var.sqrt(), torch.full_like(var, float("nan")))


def group_advantages(rewards: Sequence[float | None], group_size: int,
                     scale_rewards: str = "group", eps: float = STD_EPS) -> torch.Tensor:
    """Advantages (float64, one per completion) of ``rewards`` grouped by ``group_size``.

    ``rewards[i]`` belongs to group ``i // group_size``; see the module docstring for the
    formula.  Raises a one-line ``ValueError`` for a bad ``scale_rewards`` or a length that is
    not a multiple of ``group_size``.
    """
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}, got {scale_rewards!r}")
    if not (isinstance(group_size, int) and group_size >= 1):
        raise ValueError(f"group_size must be an integer ≥ 1, got {group_size!r}")
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    r = torch.tensor([float("nan") if x is None else float(x) for x in rewards], dtype=torch.float64)
    groups = r.view(-1, group_size)
    centred = (groups - torch.nanmean(groups, dim=1, keepdim=True)).reshape(-1)
    if scale_rewards == "group":
        std = _nanstd(groups, dim=1).expand_as(groups).reshape(-1)
        adv = centred / (std + eps)
    elif scale_rewards == "batch":
        adv = centred / (_nanstd(r) + eps)
    else:
        adv = centred
    return torch.nan_to_num(adv, nan=0.0)


def group_std_is_zero(rewards: Sequence[float | None], group_size: int) -> float:
    """The share of groups whose valid rewards are all equal (they carry no gradient)."""
    r = torch.tensor([float("nan") if x is None else float(x) for x in rewards], dtype=torch.float64)
    std = _nanstd(r.view(-1, group_size), dim=1)
    return float((torch.nan_to_num(std, nan=0.0) == 0).double().mean())
