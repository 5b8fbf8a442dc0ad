"""Wrapping a model with PEFT LoRA for adapter space, and naming its tensors.

:func:`attach` injects LoRA layers into ``model`` **in place** (PEFT's ``get_peft_model``) and
returns the ``PeftModel``; the engine keeps generating with ``model`` itself, whose targeted
linear layers now add ``(lora_alpha/r)·B·A·x``.  Every base parameter is frozen
(``requires_grad=False``) and is never written by zoopt.

Logical names (what the noise stream is keyed by, what checksums and the seed log mean) are the
names PEFT writes to ``adapter_model.safetensors``: ``base_model.model.<module>.lora_A.weight``
(the adapter name ``default`` dropped) — so a seed log replays onto an adapter that
``PeftModel.from_pretrained`` loaded, and an exported file needs no renaming.
"""

from __future__ import annotations

import hashlib
from typing import Iterator

import torch

from .space import AdapterSpace

ADAPTER = "default"  # PEFT's adapter name; zoopt trains exactly one adapter
_MARKS = (f".lora_A.{ADAPTER}.", f".lora_B.{ADAPTER}.")


def attach(model: torch.nn.Module, space: AdapterSpace):
    """Inject ``space``'s LoRA adapter into ``model`` (in place) and return the ``PeftModel``.

    The adapter's start is drawn with torch's RNG seeded by ``space.init_seed`` (forked, so the
    caller's RNG is untouched) while the model is on the CPU.  A target module the model does not
    have is a one-line ``ValueError`` naming ``adapter.target_modules``.
    """
    try:
        from peft import get_peft_model
    except ImportError:
        raise ValueError("space: adapter needs peft (pip install 'zoopt-llm[adapters]')") from None
    check_targets(model, space)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(space.init_seed)
        peft_model = get_peft_model(model, space.lora_config())
    for name, param in model.named_parameters():
        param.requires_grad_(is_adapter(name))
    return peft_model


def check_targets(model: torch.nn.Module, space: AdapterSpace) -> None:
    """Every named target must be the last part of some linear layer's name."""
    if isinstance(space.target_modules, str):
        return
    linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)})
    for target in space.target_modules:
        if target not in linear:
            raise ValueError(f"adapter.target_modules: the model has no linear module {target!r} "
                             f"(it has: {', '.join(linear)})")


def is_adapter(param_name: str) -> bool:
    """Whether ``param_name`` (a name in the injected model) is a LoRA A or B weight."""
    return any(mark in param_name for mark in _MARKS)


def logical_name(param_name: str) -> str:
    """The name PEFT saves ``param_name`` under (module docstring)."""
    for mark in _MARKS:
        param_name = param_name.replace(mark, mark[: -len(ADAPTER) - 1])
    return "base_model.model." + param_name


def adapter_parameters(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(param name, tensor)`` of every adapter weight, in ``named_parameters()`` order."""
    return ((n, p) for n, p in model.named_parameters() if is_adapter(n))


def base_parameters(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    return ((n, p) for n, p in model.named_parameters() if not is_adapter(n))


def base_digest(model: torch.nn.Module) -> str:
    """blake2b over every base parameter's stored bytes (a quantized tensor's inner tensors:
    data, scales, zero points), to show that a step never writes the base."""
    h = hashlib.blake2b(digest_size=16)
    for name, param in base_parameters(model):
        for part, t in stored_tensors(param.detach()):
            t = t.contiguous().cpu()
            h.update(f"{name}{part}|{t.dtype}|{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def stored_tensors(t: torch.Tensor) -> list[tuple[str, torch.Tensor]]:
    """The plain tensors that hold ``t``: itself, or a tensor subclass's inner tensors (torchao)."""
    if type(t) is torch.Tensor or not hasattr(type(t), "__tensor_flatten__"):
        return [("", t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t)]
    inner, _ = t.__tensor_flatten__()
    return [(f".{k}{p}", s) for k in inner for p, s in stored_tensors(getattr(t, k))]


def stored_bytes(model: torch.nn.Module, adapter: bool = False) -> int:
    """Bytes held by the base's parameters (or, ``adapter=True``, the adapter's)."""
    items = adapter_parameters(model) if adapter else base_parameters(model)
    seen, total = set(), 0
    for _, p in items:
        for _, t in stored_tensors(p.detach()):
            key = (t.untyped_storage().data_ptr(), t.dtype, tuple(t.shape))
            if key not in seen:
                seen.add(key)
                total += t.numel() * t.element_size()
    return total


__all__ = ["attach", "check_targets", "is_adapter", "logical_name", "adapter_parameters", "base_parameters",
           "base_digest", "stored_tensors", "stored_bytes", "ADAPTER"]
