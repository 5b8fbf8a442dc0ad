"""What a seed log records of its parameter space, and the checks that a resume or an export
rebuilds the same one.

A new run's header gets the engine's :meth:`~zoopt.engines.base.WeightsEngine.space_record`:
``{"space": "full"}``, or in adapter space ``{"space": "adapter", "adapter": {r, lora_alpha,
target_modules, init_lora_weights, init_seed}, "quantization": …, "base_weights": digest of the
frozen base}``.  A log without ``space`` was written before spaces existed: full.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..hparams.schema import ConfigError
from .space import AdapterSpace, adapter_space_from_dict


def space_of_header(header: Mapping[str, Any]) -> dict:
    """``from_pretrained`` options that rebuild the log's space (``{}`` for full space)."""
    if header.get("space", "full") != "adapter":
        return {}
    return {"adapter": adapter_space_from_dict(header["adapter"]), "quantization": header.get("quantization", "none")}


def check_same_space(header: Mapping[str, Any], engine) -> None:
    """One-line :class:`ConfigError` naming the key when ``engine`` is not in the log's space
    (space, adapter config, quantization, or the frozen base's bytes)."""
    logged, now = dict(header), engine.space_record()
    logged.setdefault("space", "full")
    for key in ("space", "adapter", "quantization", "base_weights"):
        was, got = logged.get(key), now.get(key)
        if key == "adapter" and was is not None:
            was = AdapterSpace(**{**was, "target_modules": _targets(was["target_modules"])}).to_dict()
        if was != got:
            raise ConfigError(f"resume: config key {key!r} of the run was {was!r}, got {got!r}")


def _targets(value):
    return value if isinstance(value, str) else tuple(value)


__all__ = ["space_of_header", "check_same_space"]
