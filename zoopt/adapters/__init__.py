"""Adapter space: ES (and GRPO) over LoRA adapters on a frozen, optionally quantized base.

In adapter space the adapter's tensors *are* the weights: the engine's
:class:`~zoopt.engines.weights.MasterWeights` holds only them (logical names = the names PEFT
writes to ``adapter_model.safetensors``), so noise, estimators, update rules, the fp32 master,
exact restore, checksums, the seed log and export all work over them unchanged.  The base
model is never written.

- :mod:`.space` — :class:`AdapterSpace`, LoRA's knobs in PEFT's names, checked;
- :mod:`.quantize` — the frozen base in int8 / int4 weight-only (torchao);
- :mod:`.attach` — wrapping a model with PEFT, the logical names, the base's digest;
- :mod:`zoopt.engines.adapter_rows` — a whole population in one batched forward, one adapter per row;
- :mod:`.export` — a PEFT adapter directory, and a merged HF directory.
"""

from .space import AdapterSpace, SPACES, adapter_space_from_dict, check_space
from .quantize import QUANTIZATIONS, check_quantization

__all__ = ["AdapterSpace", "SPACES", "adapter_space_from_dict", "check_space", "QUANTIZATIONS",
           "check_quantization"]
