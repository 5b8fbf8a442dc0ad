"""The frozen base in a weight-only quantized format, through torchao (``quantize_``).

``quantization``:

- ``none``  — the base as loaded (bf16 / fp16 / fp32);
- ``int8``  — ``Int8WeightOnlyConfig()``: int8 weights, one scale per output row
  (≈ 1 byte per weight of every linear layer but the LM head and embeddings);
- ``int4``  — 4-bit weights in groups of 32: on CUDA ``Int4WeightOnlyConfig`` (packed, tinygemm
  layout, ≈ 0.5 byte per weight); on the CPU the only 4-bit format torchao 0.18 runs there,
  ``IntxWeightOnlyConfig(int4, PerGroup(32))``, which keeps the 4-bit values *unpacked in int8*
  (≈ 1 byte per weight: int4's accuracy, int8's memory — said here so nobody expects the saving).

Only linear layers are quantized (torchao's default filter), the tied embedding / LM head stays
in the base dtype.  A quantization this machine cannot run is a one-line ``ValueError`` naming
``quantization`` and what is missing.  Quantizing is one-way: the base is frozen afterwards, so
only adapter space trains on it.
"""

from __future__ import annotations

import torch

QUANTIZATIONS = ("none", "int8", "int4")


def check_quantization(kind: str, space: str = "adapter") -> str:
    """``kind`` if it is a known quantization usable in ``space``; else a one-line ``ValueError``."""
    if kind not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {', '.join(QUANTIZATIONS)}, got {kind!r}")
    if kind != "none" and space != "adapter":
        raise ValueError(f"quantization: {kind} freezes the base, so it needs space: adapter (got space: {space})")
    return kind


def quantize_base(model: torch.nn.Module, kind: str) -> torch.nn.Module:
    """Quantize ``model``'s linear layers in place (module docstring); ``none`` returns it unchanged."""
    check_quantization(kind)
    if kind == "none":
        return model
    try:
        from torchao.quantization import quantize_
    except ImportError:
        raise ValueError(f"quantization: {kind} needs torchao (pip install 'zoopt-llm[adapters]')") from None
    device = next(model.parameters()).device
    try:
        quantize_(model, _config(kind, device))
    except (ImportError, AssertionError, RuntimeError, NotImplementedError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"quantization: {kind} cannot run on {device.type} here ({reason})") from None
    return model


def _config(kind: str, device: torch.device):
    from torchao.quantization import Int4WeightOnlyConfig, Int8WeightOnlyConfig, IntxWeightOnlyConfig
    from torchao.quantization.granularity import PerGroup

    if kind == "int8":
        return Int8WeightOnlyConfig()
    if device.type == "cuda":
        return Int4WeightOnlyConfig(group_size=32, int4_packing_format="tile_packed_to_4d")
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(32))


__all__ = ["QUANTIZATIONS", "check_quantization", "quantize_base"]
