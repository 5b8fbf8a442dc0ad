"""``VLLMEngine``: rollouts with vLLM's offline ``LLM``, ES on the weights inside its workers.

The driver (this file) holds no weights.  It starts an ``LLM`` built with
``worker_extension_cls="zoopt.engines.vllm.worker.ZooptWorkerExtension"`` and is the engine
contract over it: the weights half is :class:`~zoopt.engines.vllm.remote_weights.RemoteWeights`
(every weight operation one ``collective_rpc`` with primitive arguments; see
:mod:`zoopt.engines.vllm.layout` for the per-HF-tensor noise streams mapped onto vLLM's
fused/sharded parameters, and :mod:`zoopt.engines.vllm.worker` for the worker side: the fp32
master, bit-exact restore, and the CPU GEMM fix); the rollouts are here.

Contract (that of :class:`~zoopt.engines.base.Engine`, as ``HFEngine``):

- ``perturb``/``restore``/``apply``/``checksum`` give bit for bit the weights and digests that
  ``HFEngine`` gives on the same device type and dtype (noise is drawn per HF parameter name on
  the master's device, from the noise's stream: the default counter stream is the same on CPU
  and CUDA, the numpy stream of older seed logs is not).
- ``generate(prompts, sampling)`` encodes prompts exactly as ``HFEngine.encode`` (chat template
  of the model's tokenizer, or plain tokens), hands vLLM token ids, and stops at the same
  tokens (EOS, pad and the generation config's EOS; the stop token is kept).  How a
  ``Sampling`` becomes vLLM's (greedy equals ``HFEngine``'s tokens; sampling is reproducible
  but its own stream; log-probabilities, no entropies): :mod:`zoopt.engines.vllm.sampling`.
- Prefix caching is off by default.  When enabled, the prefix cache is reset after every
  weight change (perturb, restore, apply, load_weights), since cached KV blocks were computed
  with other weights.
- ``enforce_eager`` defaults to True on CPU: inductor compilation costs minutes there and, with
  ``max_autotune``, freezes weights into the compiled graph so in-place updates would be lost.
  On CUDA it defaults to False: CUDA graphs and vLLM's torch.compile read parameters by
  address, and the worker only ever writes in place (``copy_``/``add_``), so they see updates.

- The population call: member by member (perturb → generate → restore) by default; for
  ``LowRank`` noise on linear layers, with LoRA slots (``max_loras``), every member is a LoRA
  adapter and all prompts × members go through one ``generate`` call
  (:mod:`zoopt.engines.vllm.lora`, docs/vllm.md).
- Adapter space (``from_pretrained(..., adapter=AdapterSpace(...))``): the weights are one LoRA
  adapter held in this process, the base vLLM loaded is never written
  (:mod:`zoopt.engines.vllm.adapter_space`).

``batch_size`` maps to vLLM's ``max_num_seqs`` (the most sequences decoded at once).
"""

from __future__ import annotations

import typing
from pathlib import Path

import torch

from ...adapters.export import saved_start
from ...models import resolve_dtype
from ...noise import LowRank, Noise
from ...runs.atomic import atomic_directory
from ...types import Population
from ..base import Completion, Engine, Prompt, Sampling, check_population_mode, chosen_path
from ..prompts import check_system_prompt, encode_prompt, ensure_pad_token, stop_token_ids
from .adapter_space import AdapterSpaceMixin, adapter_lora_rank
from .environment import check_cpu_head_dim, check_vllm_quantization, configure_environment, resolve_model_dir
from .lora import LoRAPopulation, check_lora_slots, lora_selection, ram_scratch_dir, round_lora_rank
from .remote_weights import RemoteWeights
from .sampling import completions, sampling_params

WORKER_EXTENSION = "zoopt.engines.vllm.worker.ZooptWorkerExtension"
VLLM_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


# -- the engine ---------------------------------------------------------------------------------
class VLLMEngine(RemoteWeights, Engine):
    """vLLM as an :class:`~zoopt.engines.base.Engine` (see the module docstring).

    Build it with :meth:`from_pretrained`; ``__init__`` takes an ``LLM`` that was created with
    ``worker_extension_cls=WORKER_EXTENSION`` and runs the workers' set-up (layout probe and
    fp32 master, on each parameter's device or on the host with ``master_device="cpu"``).
    """

    def __init__(self, llm, tokenizer, model_dir: str | Path, *, master_device: str | None = None,
                 system_prompt: str | None = None, prefix_caching: bool = False, noise_cache_bytes: int = 0,
                 device: str = "cpu", population: str = "auto", max_loras: int | None = None,
                 max_lora_rank: int | None = None) -> None:
        from transformers import AutoConfig, GenerationConfig

        Engine.__init__(self)
        check_system_prompt(tokenizer, system_prompt)
        self._device = torch.device(device)  # where the driver puts tensors (a GRPO policy); not the weights
        self.tokenizer = tokenizer
        self.model_dir = Path(model_dir)
        self.system_prompt = system_prompt
        self._pad_id = ensure_pad_token(tokenizer)
        self.population = check_population_mode(population)
        check_lora_slots(population, max_loras)
        self.max_loras, self.max_lora_rank = max_loras, max_lora_rank
        self._next_lora_id = 1  # every adapter ever registered gets a fresh id (and name)
        try:
            gen = GenerationConfig.from_pretrained(str(self.model_dir))
        except OSError:
            gen = GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(self.model_dir)))
        self.stop_ids = stop_token_ids(tokenizer, gen)
        self._setup_weights(llm, master_device=master_device, noise_cache_bytes=noise_cache_bytes,
                            prefix_caching=prefix_caching)

    def _setup_weights(self, llm, *, master_device: str | None, noise_cache_bytes: int, prefix_caching: bool) -> None:
        """The weights half: the workers' fp32 masters (:class:`RemoteWeights`); adapter space
        overrides it (:class:`VLLMAdapterEngine`)."""
        RemoteWeights.__init__(self, llm, master_device=master_device, noise_cache_bytes=noise_cache_bytes,
                               prefix_caching=prefix_caching)
        self.lora_covered = [] if self.max_loras is None else [n for n in self.shapes if n not in self.lora_uncovered]

    @classmethod
    def from_pretrained(cls, name_or_path: str, dtype="float32", device: str = "cpu", batch_size: int = 64, *,
                        gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                        tensor_parallel_size: int = 1, enforce_eager: bool | None = None,
                        enable_prefix_caching: bool = False, master_device: str | None = None,
                        system_prompt: str | None = None, noise_cache_bytes: int = 0, seed: int = 0,
                        population: str = "auto", max_loras: int | None = None, max_lora_rank: int | None = None,
                        adapter=None, quantization: str = "none", **llm_kwargs) -> "VLLMEngine":
        """Start vLLM on ``name_or_path`` (see :func:`resolve_model_dir`) and wrap it.

        ``noise_cache_bytes`` as ``HFEngine``'s (each worker keeps up to that many bytes of the
        members' noise for the update).  ``max_loras`` (None: LoRA off) turns vLLM's LoRA on with
        that many adapter slots, the largest population the batched path runs in one call;
        ``max_lora_rank`` (default 1, ≥ the noise's rank) is rounded up to a rank vLLM takes (1, 8, 16, …).
        ``adapter`` (an :class:`~zoopt.adapters.AdapterSpace`): adapter space, a
        :class:`VLLMAdapterEngine` is returned (LoRA always on); ``name_or_path`` may then be an
        adapter directory, the engine starting from its tensors on the base it names.
        ``quantization``: ``none``; torchao's ``int8``/``int4`` are the HF engine's and refused
        here (a quantized base on vLLM is a checkpoint vLLM loads quantized); any other value is
        vLLM's own ``quantization`` argument, passed on.
        ``llm_kwargs`` go to ``vllm.LLM`` unchanged.  Takes ~20 s on CPU (process start-up).
        """
        from transformers import AutoTokenizer
        from vllm import LLM
        from vllm.platforms import current_platform

        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size!r}")
        kind = torch.device(device).type
        if kind != current_platform.device_type:
            raise ValueError(f"device {device!r}: this vLLM build runs on {current_platform.device_type!r}")
        if check_vllm_quantization(quantization) != "none":
            llm_kwargs["quantization"] = quantization
        check_lora_slots(population, max_loras)
        engine_cls, extra = cls, {}
        if adapter is not None:  # adapter space: LoRA is always on, the adapter's rank sets the slots'
            from vllm.config.lora import MaxLoRARanks

            engine_cls = VLLMAdapterEngine
            max_lora_rank = adapter_lora_rank(adapter, max_lora_rank, typing.get_args(MaxLoRARanks))
            llm_kwargs.update(enable_lora=True, max_loras=int(max_loras or 1), max_lora_rank=max_lora_rank)
        elif max_loras is not None:
            from vllm.config.lora import MaxLoRARanks

            max_lora_rank = round_lora_rank(1 if max_lora_rank is None else max_lora_rank,
                                            typing.get_args(MaxLoRARanks))
            llm_kwargs.update(enable_lora=True, max_loras=int(max_loras), max_lora_rank=max_lora_rank)
        saved = saved_start(name_or_path, adapter)
        if saved is not None:  # start from a saved adapter, on the base it names
            name_or_path = saved.base_model
        path = resolve_model_dir(name_or_path)
        if kind == "cpu":
            check_cpu_head_dim(path)
        if adapter is not None:  # one CPU load of the base in this process: the adapter's start
            extra = engine_cls.start_adapter(name_or_path, dtype, adapter)
        configure_environment(device, tensor_parallel_size)
        llm = LLM(
            model=str(path), dtype=VLLM_DTYPES[resolve_dtype(dtype)], seed=seed,
            tensor_parallel_size=int(tensor_parallel_size), gpu_memory_utilization=float(gpu_memory_utilization),
            max_model_len=max_model_len, max_num_seqs=int(batch_size),
            enforce_eager=(kind == "cpu") if enforce_eager is None else bool(enforce_eager),
            enable_prefix_caching=bool(enable_prefix_caching), skip_tokenizer_init=True,
            generation_config="vllm", logprobs_mode="processed_logprobs",
            worker_extension_cls=WORKER_EXTENSION, **llm_kwargs,
        )
        tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        tokenizer.padding_side = "left"
        engine = engine_cls(llm, tokenizer, path, master_device=master_device, system_prompt=system_prompt,
                            prefix_caching=enable_prefix_caching, noise_cache_bytes=noise_cache_bytes, device=kind,
                            population=population, max_loras=max_loras,
                            max_lora_rank=max_lora_rank if max_loras or adapter else None, **extra)
        if saved is not None:
            engine.load_weights(saved.tensors)
        return engine

    # -- plumbing ------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def pad_id(self) -> int:
        return self._pad_id

    def close(self) -> None:
        """Shut vLLM's engine processes down (the engine is unusable afterwards; closing twice
        is a no-op)."""
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()

    def population_path(self, noise: Noise) -> str:
        """``"batched"`` (one call, a LoRA adapter per member: :mod:`zoopt.engines.vllm.lora`) for
        ``LowRank`` noise when LoRA is on (``max_loras``) and ``population`` is not
        ``sequential``; else ``"sequential"``.  ``population: batched`` with other noise is refused."""
        return chosen_path(self.population, noise, isinstance(noise, LowRank) and self.max_loras is not None)

    def _generate_population(self, noise: Noise, population: Population, prompts: list[Prompt],
                             sampling: Sampling) -> list[list[list[Completion]]]:
        """The batched path (:meth:`population_path`): member i is a LoRA adapter adding
        ``cᵢ·Aᵢ·Bᵢᵀ`` to each selected linear weight (the HF batched path's factors,
        :mod:`zoopt.engines.vllm.lora`), and the prompts × members rows go through **one**
        ``LLM.generate`` with one ``LoRARequest`` per row.  The weights are never written;
        prompt p's sampling seed is the sequential path's for every member, so results equal it
        up to floating-point rounding.  Adapters are registered for this call only.

        Refused with a one-line ``ValueError`` (before anything runs): more members than
        ``max_loras``, a noise rank above ``max_lora_rank``, or a selected parameter that LoRA
        cannot perturb (named, with the ``exclude`` that skips it)."""
        if len(population) > self.max_loras:
            raise ValueError(f"population of {len(population)} members needs engine_args.max_loras ≥ "
                             f"{len(population)} (it is {self.max_loras}), or set population: sequential")
        if noise.rank > self.max_lora_rank:
            raise ValueError(f"noise.rank {noise.rank} exceeds the LoRA slots' rank (engine_args.max_lora_rank "
                             f"{self.max_lora_rank}): raise it, or set population: sequential")
        names = lora_selection(noise, self.shapes, self.lora_covered)
        self.restore()
        encoded = [self.encode(p) for p in prompts]
        first_id, self._next_lora_id = self._next_lora_id, self._next_lora_id + len(population)
        with LoRAPopulation(self.llm, noise, population, names, self.shapes, first_id, ram_scratch_dir()) as lora:
            flat = self._generate_rows([ids for _ in population.members for ids in encoded],
                                       [p for _ in population.members for p in range(len(encoded))], sampling,
                                       [req for req in lora.requests for _ in encoded])
        return [flat[i * len(encoded):(i + 1) * len(encoded)] for i in range(len(population))]

    # -- export ----------------------------------------------------------------------------------
    def export_pretrained(self, directory: str | Path) -> Path:
        """Write an HF directory (config, generation config, tokenizer, fp32 master weights in HF
        names, tied embeddings once) loadable by ``load_model``/``HFEngine``; atomic like
        ``HFEngine.export_pretrained``.  Perturbations are not exported."""
        from safetensors.torch import save_file
        from transformers import AutoConfig, GenerationConfig

        self.restore()
        with atomic_directory(directory) as tmp:
            save_file(self._gather(master=True), str(tmp / "model.safetensors"), metadata={"format": "pt"})
            AutoConfig.from_pretrained(str(self.model_dir)).save_pretrained(str(tmp))
            if (self.model_dir / "generation_config.json").exists():
                GenerationConfig.from_pretrained(str(self.model_dir)).save_pretrained(str(tmp))
            self.tokenizer.save_pretrained(str(tmp))
        directory = Path(directory).absolute()
        return directory

    # -- rollouts --------------------------------------------------------------------------------
    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt, exactly as ``HFEngine.encode`` makes them (same code)."""
        return encode_prompt(self.tokenizer, prompt, self.system_prompt)

    def _generate(self, prompts: list[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """``sampling.n`` completions per prompt, ``result[i][j]`` (see the module docstring)."""
        encoded = [self.encode(p) for p in prompts]
        return self._generate_rows(encoded, list(range(len(encoded))), sampling)

    def _generate_rows(self, encoded: list[list[int]], indices: list[int], sampling: Sampling,
                       lora_requests: list | None = None) -> list[list[Completion]]:
        """One ``LLM.generate`` over rows of token ids; row k samples with prompt ``indices[k]``'s
        seed (so a prompt gets the same seed in every member) and adapter ``lora_requests[k]``."""
        if not encoded:
            return []
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in encoded],
                                    sampling_params(sampling, indices, self.stop_ids), use_tqdm=False,
                                    lora_request=lora_requests)
        return completions(outputs, sampling, self.stop_ids, self.tokenizer)


class VLLMAdapterEngine(AdapterSpaceMixin, VLLMEngine):
    """:class:`VLLMEngine` in adapter space: ES over one LoRA adapter held in the driver, the base
    vLLM loaded frozen (:mod:`zoopt.engines.vllm.adapter_space`, where its methods live)."""


__all__ = ["VLLMAdapterEngine", "VLLMEngine", "WORKER_EXTENSION"]
