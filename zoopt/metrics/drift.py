"""Relative L2 drift of a trained checkpoint from its base, overall and per parameter group.

    D_rel = ‖θ − θ₀‖₂ / ‖θ₀‖₂

with both norms taken over the concatenation of every floating-point tensor of the state dict
(sums of squares accumulated in float64).  "Understanding Evolution Strategies for LLM
Reasoning" uses it to compare how far ES and GRPO move the weights.
"""

from __future__ import annotations

import math
import re
from typing import Iterator, Mapping

import torch

StateDict = Mapping[str, torch.Tensor]

GROUPS = ("embeddings", "attention", "mlp", "norms", "other")

# Checked in this order on the dotted name; norms come before attention so that
# "post_attention_layernorm" is a norm.  Llama/Qwen/Mistral naming, plus GPT-2's for robustness.
_GROUP_PATTERNS: tuple[tuple[str, re.Pattern], ...] = (
    ("embeddings", re.compile(r"(^|\.)(embed_tokens|lm_head|wte|wpe|embed_in|embed_out|"
                              r"word_embeddings|embeddings?)(\.|$)")),
    ("norms", re.compile(r"(^|\.)([^.]*norm|ln_\w+|ln)(\.|$)", re.IGNORECASE)),
    ("attention", re.compile(r"(^|\.)(q_proj|k_proj|v_proj|o_proj|qkv_proj|self_attn|attn|"
                             r"attention|c_attn)(\.|$)")),
    ("mlp", re.compile(r"(^|\.)(mlp|gate_proj|up_proj|down_proj|gate_up_proj|feed_forward|"
                       r"c_fc|experts)(\.|$)")),
)


def param_group(name: str) -> str:
    """Group of a parameter name: one of ``embeddings, attention, mlp, norms, other``.

    ``model.embed_tokens.weight``/``lm_head.weight`` → embeddings; ``…self_attn.q_proj.weight``
    → attention; ``…mlp.down_proj.weight`` → mlp; ``…input_layernorm.weight``,
    ``model.norm.weight``, ``…self_attn.q_norm.weight`` → norms.
    """
    for group, pattern in _GROUP_PATTERNS:
        if pattern.search(name):
            return group
    return "other"


def paired_tensors(base: StateDict, trained: StateDict, *,
                   floating_only: bool = True) -> Iterator[tuple[str, torch.Tensor, torch.Tensor]]:
    """``(name, base_tensor, trained_tensor)`` over the (identical) key sets, in base order.

    Raises ``ValueError`` naming the first key that is in only one dict or whose shapes differ.
    With ``floating_only`` non-float tensors (integer buffers) are skipped.
    """
    for key in base:
        if key not in trained:
            raise ValueError(f"key {key!r} is in the base state dict but not the trained one")
    for key in trained:
        if key not in base:
            raise ValueError(f"key {key!r} is in the trained state dict but not the base one")
    for key, b in base.items():
        t = trained[key]
        if b.shape != t.shape:
            raise ValueError(f"key {key!r}: shape {tuple(b.shape)} in base vs "
                             f"{tuple(t.shape)} in trained")
        if floating_only and not (b.is_floating_point() and t.is_floating_point()):
            continue
        yield key, b, t


def _sq_norms(b: torch.Tensor, t: torch.Tensor) -> tuple[float, float]:
    b64 = b.detach().to(torch.float64)
    d64 = t.detach().to(torch.float64) - b64
    return float((d64 * d64).sum()), float((b64 * b64).sum())


def relative_drift(base_state_dict: StateDict, trained_state_dict: StateDict) -> float:
    """``‖θ − θ₀‖₂ / ‖θ₀‖₂`` over all floating-point tensors (float64 accumulation)."""
    num = den = 0.0
    for _, b, t in paired_tensors(base_state_dict, trained_state_dict):
        dn, bn = _sq_norms(b, t)
        num, den = num + dn, den + bn
    if den == 0.0:
        raise ValueError("relative_drift: the base state dict has zero norm")
    return math.sqrt(num) / math.sqrt(den)


def drift_by_group(base: StateDict, trained: StateDict) -> dict[str, float]:
    """``{group: ‖Δ_g‖₂ / ‖θ₀_g‖₂}`` for each group present (see :func:`param_group`), plus
    ``"all"`` (= :func:`relative_drift`).  A group whose base norm is 0 gets ``inf`` if it moved,
    else ``0``."""
    sums: dict[str, list[float]] = {}
    for name, b, t in paired_tensors(base, trained):
        dn, bn = _sq_norms(b, t)
        for g in (param_group(name), "all"):
            acc = sums.setdefault(g, [0.0, 0.0])
            acc[0] += dn
            acc[1] += bn
    out = {}
    for g, (dn, bn) in sums.items():
        out[g] = math.sqrt(dn) / math.sqrt(bn) if bn > 0 else (math.inf if dn > 0 else 0.0)
    return out
