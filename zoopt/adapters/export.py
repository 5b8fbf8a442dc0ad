"""Writing adapter space's result where other tools read it.

- :func:`save_adapter`: a PEFT adapter directory — ``adapter_config.json`` (PEFT's own
  ``LoraConfig.save_pretrained``, ``base_model_name_or_path`` set to the base) and
  ``adapter_model.safetensors`` holding the fp32 **master** under the names PEFT saves — that
  ``PeftModel.from_pretrained(base, dir)`` and vLLM's ``LoRARequest`` load;
- :func:`merge_adapter`: for a base that is not quantized, a full HF model directory with
  ``W + (lora_alpha/r)·B·A`` merged in by PEFT's ``merge_and_unload`` on a fresh copy of the base
  (the engine's own base stays frozen and unmerged).

Both directories appear atomically (written beside, renamed into place).

- :func:`read_adapter`: the other way, an adapter directory's base, scale and tensors, for an
  adapter-space engine that starts from it (``zoopt eval --model RUN`` of an adapter run).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import torch

from ..runs.atomic import atomic_directory


def save_adapter(directory: str | Path, lora_config, tensors: Iterable[tuple[str, torch.Tensor]],
                 base_model: str, tokenizer=None) -> Path:
    """Write ``tensors`` (logical name → tensor) and ``lora_config`` as a PEFT adapter directory."""
    from safetensors.torch import save_file

    config = lora_config.__class__(**{**lora_config.to_dict(), "base_model_name_or_path": str(base_model)})
    with atomic_directory(directory) as tmp:
        config.save_pretrained(str(tmp))
        save_file({n: t.detach().contiguous().cpu() for n, t in tensors}, str(Path(tmp) / "adapter_model.safetensors"),
                  metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_pretrained(str(tmp))
    return Path(directory).absolute()


def merge_adapter(adapter_dir: str | Path, directory: str | Path, base_model: str, dtype: str = "float32") -> Path:
    """Load ``base_model`` afresh in ``dtype``, apply the adapter at ``adapter_dir`` and write the
    merged model (config, tokenizer, safetensors) to ``directory``."""
    from peft import PeftModel

    from ..models import load_model

    base, tokenizer = load_model(base_model, dtype=dtype)
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    with atomic_directory(directory) as tmp:
        merged.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
    return Path(directory).absolute()


@dataclass(frozen=True)
class SavedAdapter:
    """An adapter directory's content: the base it sits on, its rank and ``lora_alpha`` (which
    scale B·A), and its tensors under the names PEFT saves (adapter space's logical names)."""

    base_model: str
    r: int
    lora_alpha: float
    tensors: dict[str, torch.Tensor]

    def check_matches(self, adapter, source: str) -> None:
        """The configured ``adapter`` must scale B·A as this one did: another ``r`` or
        ``lora_alpha`` is a one-line ``ValueError`` naming ``source``."""
        if (self.r, self.lora_alpha) != (adapter.r, adapter.lora_alpha):
            raise ValueError(f"adapter: {source!r} has r={self.r}, lora_alpha={self.lora_alpha:g}; "
                             f"the configured adapter r={adapter.r}, lora_alpha={adapter.lora_alpha:g}")


def is_adapter_dir(path: str | Path) -> bool:
    return (Path(path).expanduser() / "adapter_config.json").is_file()


def read_adapter(directory: str | Path) -> SavedAdapter:
    """Read what :func:`save_adapter` wrote (or PEFT's ``save_pretrained``); a directory without
    its base named or without ``adapter_model.safetensors`` is a one-line ``ValueError``."""
    from safetensors.torch import load_file

    directory = Path(directory).expanduser()
    config = json.loads((directory / "adapter_config.json").read_text())
    if not config.get("base_model_name_or_path"):
        raise ValueError(f"adapter {str(directory)!r}: its adapter_config.json names no base model")
    weights = directory / "adapter_model.safetensors"
    if not weights.is_file():
        raise ValueError(f"adapter {str(directory)!r} has no adapter_model.safetensors")
    return SavedAdapter(str(config["base_model_name_or_path"]), int(config["r"]), float(config["lora_alpha"]),
                        load_file(str(weights)))


def saved_start(name_or_path: str | Path, adapter) -> SavedAdapter | None:
    """What an engine in adapter space (``adapter`` not None) starts from when ``name_or_path`` is
    an adapter directory: its content, checked against ``adapter`` (:meth:`SavedAdapter.check_matches`);
    None otherwise (a base model, or full space)."""
    if adapter is None or not is_adapter_dir(name_or_path):
        return None
    saved = read_adapter(name_or_path)
    saved.check_matches(adapter, str(name_or_path))
    return saved


__all__ = ["save_adapter", "merge_adapter", "read_adapter", "is_adapter_dir", "saved_start", "SavedAdapter"]
