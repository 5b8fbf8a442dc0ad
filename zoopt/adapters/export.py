"""Writing adapter space's result where other tools read it.

- :func:`save_adapter`: a PEFT adapter directory — ``adapter_config.json`` (PEFT's own
  ``LoraConfig.save_pretrained``, ``base_model_name_or_path`` set to the base) and
  ``adapter_model.safetensors`` holding the fp32 **master** under the names PEFT saves — that
  ``PeftModel.from_pretrained(base, dir)`` and vLLM's ``LoRARequest`` load;
- :func:`merge_adapter`: for a base that is not quantized, a full HF model directory with
  ``W + (lora_alpha/r)·B·A`` merged in by PEFT's ``merge_and_unload`` on a fresh copy of the base
  (the engine's own base stays frozen and unmerged).

Both directories appear atomically (written beside, renamed into place).
"""

from __future__ import annotations

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


__all__ = ["save_adapter", "merge_adapter"]
