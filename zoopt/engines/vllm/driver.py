"""``VLLMEngine``: rollouts with vLLM's offline ``LLM``, ES on the weights inside its workers.

The driver (this file) holds no weights.  It owns an ``LLM`` built with
``worker_extension_cls="zoopt.engines.vllm.worker.ZooptWorkerExtension"`` and reaches the
weights only through ``LLM.collective_rpc("zoopt_...", args=...)`` with primitive arguments —
seeds, scales, coefficient lists, ``Noise.to_dict()``, file paths — so every worker (one per
tensor-parallel rank) regenerates the same noise from the seed.  See
:mod:`zoopt.engines.vllm.layout` for the per-HF-tensor noise streams mapped onto vLLM's
fused/sharded parameters, and :mod:`zoopt.engines.vllm.worker` for the worker side: the fp32
master, bit-exact restore, and the CPU GEMM fix.

Contract (that of :class:`~zoopt.engines.base.Engine`, as ``HFEngine``):

- ``perturb``/``restore``/``apply``/``checksum`` give bit for bit the weights and digests that
  ``HFEngine`` gives on the same device type and dtype (noise is drawn per HF parameter name on
  the master's device, from the noise's stream: the default counter stream is the same on CPU
  and CUDA, the numpy stream of older seed logs is not).
- ``generate(prompts, sampling)`` encodes prompts exactly as ``HFEngine.encode`` (chat template
  of the model's tokenizer, or plain tokens), hands vLLM token ids, and stops at the same
  tokens (EOS, pad and the generation config's EOS; the stop token is kept).  Greedy
  (``temperature == 0``) is argmax, so it equals ``HFEngine``'s output token for token up to
  floating-point differences in the logits; ``n > 1`` greedy samples are copies of one.
  Sampling uses vLLM's own sampler with a per-prompt seed drawn from ``(sampling.seed, prompt
  index)`` (sample j gets that seed + j), so it is reproducible but differs from
  ``HFEngine``'s stream.  ``logprobs=True`` gives the chosen tokens' log-probabilities after
  temperature (vLLM's ``processed_logprobs``: equal to ``HFEngine``'s when ``top_p == 1``;
  with ``top_p < 1`` vLLM renormalises over the nucleus).  ``entropies`` are not available
  (None): vLLM does not return the full distribution.
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

``batch_size`` maps to vLLM's ``max_num_seqs`` (the most sequences decoded at once).
"""

from __future__ import annotations

import json
import tempfile
import time
import typing
from pathlib import Path
from types import SimpleNamespace
from typing import Iterable, Mapping, Sequence

import numpy as np
import torch

from ...models import cache_dir, resolve_dtype
from ...noise import LowRank, Noise
from ...runs.atomic import atomic_directory
from ...types import Population, Update
from ..base import Completion, Engine, Prompt, Sampling
from ..prompts import check_system_prompt, encode_prompt, ensure_pad_token, stop_token_ids
from ..rule_state import RuleState, next_rule_state
from ..weights import check_finite, digest
from .environment import check_cpu_head_dim, configure_environment, resolve_model_dir
from .lora import LoRAPopulation, check_lora_slots, lora_selection, ram_scratch_dir, round_lora_rank

WORKER_EXTENSION = "zoopt.engines.vllm.worker.ZooptWorkerExtension"
VLLM_DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def _prompt_seed(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([int(seed), int(index), 0x711]).generate_state(1, np.uint32)[0] >> 1)


# -- the engine ---------------------------------------------------------------------------------
class VLLMEngine(Engine):
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

        super().__init__()
        check_system_prompt(tokenizer, system_prompt)
        if noise_cache_bytes < 0:
            raise ValueError(f"noise_cache_bytes must be ≥ 0, got {noise_cache_bytes!r}")
        self.llm = llm
        self._device = torch.device(device)  # where the driver puts tensors (a GRPO policy); not the weights
        self.tokenizer = tokenizer
        self.model_dir = Path(model_dir)
        self.system_prompt = system_prompt
        self.prefix_caching = bool(prefix_caching)
        self._pad_id = ensure_pad_token(tokenizer)
        if population not in ("auto", "sequential", "batched"):
            raise ValueError(f"population must be one of auto, batched, sequential, got {population!r}")
        check_lora_slots(population, max_loras)
        self.population = population
        self.max_loras, self.max_lora_rank = max_loras, max_lora_rank
        self._rules: RuleState | None = None  # the update rule and step the workers' states are at
        self._next_lora_id = 1  # every adapter ever registered gets a fresh id (and name)
        try:
            gen = GenerationConfig.from_pretrained(str(self.model_dir))
        except OSError:
            gen = GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(self.model_dir)))
        self.stop_ids = stop_token_ids(tokenizer, gen)
        info = self._rpc("zoopt_setup", master_device, int(noise_cache_bytes))
        self.shapes: dict[str, tuple[int, ...]] = {n: tuple(s) for n, s in zip(info[0]["names"], info[0]["shapes"])}
        self.dtype = info[0]["dtype"]
        self._whole = all(i["whole"] for i in info)
        uncovered = {n for i in info for n in i["lora_uncovered"]}
        self.lora_covered = [] if max_loras is None else [n for n in self.shapes if n not in uncovered]

    @classmethod
    def from_pretrained(cls, name_or_path: str, dtype="float32", device: str = "cpu", batch_size: int = 64, *,
                        gpu_memory_utilization: float = 0.9, max_model_len: int | None = None,
                        tensor_parallel_size: int = 1, enforce_eager: bool | None = None,
                        enable_prefix_caching: bool = False, master_device: str | None = None,
                        system_prompt: str | None = None, noise_cache_bytes: int = 0, seed: int = 0,
                        population: str = "auto", max_loras: int | None = None, max_lora_rank: int = 1,
                        **llm_kwargs) -> "VLLMEngine":
        """Start vLLM on ``name_or_path`` (see :func:`resolve_model_dir`) and wrap it.

        ``noise_cache_bytes`` as ``HFEngine``'s (each worker keeps up to that many bytes of the
        members' noise for the update).  ``max_loras`` (None: LoRA off) turns vLLM's LoRA on with
        that many adapter slots, the largest population the batched path runs in one call;
        ``max_lora_rank`` (≥ the noise's rank) is rounded up to a rank vLLM takes (1, 8, 16, …).
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
        check_lora_slots(population, max_loras)
        if max_loras is not None:
            from vllm.config.lora import MaxLoRARanks

            max_lora_rank = round_lora_rank(max_lora_rank, typing.get_args(MaxLoRARanks))
            llm_kwargs.update(enable_lora=True, max_loras=int(max_loras), max_lora_rank=max_lora_rank)
        path = resolve_model_dir(name_or_path)
        if kind == "cpu":
            check_cpu_head_dim(path)
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
        return cls(llm, tokenizer, path, master_device=master_device, system_prompt=system_prompt,
                   prefix_caching=enable_prefix_caching, noise_cache_bytes=noise_cache_bytes, device=kind,
                   population=population, max_loras=max_loras, max_lora_rank=max_lora_rank if max_loras else None)

    # -- plumbing ------------------------------------------------------------------------------
    def _rpc(self, method: str, *args) -> list:
        return self.llm.collective_rpc(method, args=args)

    def _weights_changed(self) -> None:
        if self.prefix_caching:
            self.llm.reset_prefix_cache()

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
        if self.population == "sequential":
            return "sequential"
        if isinstance(noise, LowRank) and self.max_loras is not None:
            return "batched"
        if self.population == "batched":
            raise ValueError(f"population: batched needs noise.kind low_rank, got {noise.kind!r}")
        return "sequential"

    def generate_population(self, noise: Noise, population: Population, prompts: Sequence[Prompt],
                            sampling: Sampling, on_member=None) -> list[list[list[Completion]]]:
        """The contract's population call.  On the batched path (:meth:`population_path`) member
        i is a LoRA adapter adding ``cᵢ·Aᵢ·Bᵢᵀ`` to each selected linear weight (the HF batched
        path's factors, :mod:`zoopt.engines.vllm.lora`), and the prompts × members rows go
        through **one** ``LLM.generate`` with one ``LoRARequest`` per row.  The weights are never
        written; prompt p's sampling seed is the sequential path's for every member, so results
        equal it up to floating-point rounding.  Adapters are registered for this call only.

        Refused with a one-line ``ValueError`` (before anything runs): more members than
        ``max_loras``, a noise rank above ``max_lora_rank``, or a selected parameter that LoRA
        cannot perturb (named, with the ``exclude`` that skips it)."""
        if self.population_path(noise) != "batched":
            return super().generate_population(noise, population, prompts, sampling, on_member)
        if isinstance(prompts, (str, dict)):
            raise TypeError("generate_population takes a sequence of prompts, not a single prompt")
        if len(population) > self.max_loras:
            raise ValueError(f"population of {len(population)} members needs engine_args.max_loras ≥ "
                             f"{len(population)} (it is {self.max_loras}), or set population: sequential")
        if noise.rank > self.max_lora_rank:
            raise ValueError(f"noise.rank {noise.rank} exceeds the LoRA slots' rank (engine_args.max_lora_rank "
                             f"{self.max_lora_rank}): raise it, or set population: sequential")
        names = lora_selection(noise, self.shapes, self.lora_covered)
        t0 = time.perf_counter()
        self.restore()
        encoded = [self.encode(p) for p in prompts]
        first_id, self._next_lora_id = self._next_lora_id, self._next_lora_id + len(population)
        with LoRAPopulation(self.llm, noise, population, names, self.shapes, first_id, ram_scratch_dir()) as lora:
            flat = self._generate_rows([ids for _ in population.members for ids in encoded],
                                       [p for _ in population.members for p in range(len(encoded))], sampling,
                                       [req for req in lora.requests for _ in encoded])
        results = [flat[i * len(encoded):(i + 1) * len(encoded)] for i in range(len(population))]
        self.stats.record(flat, t0)
        if on_member is not None:
            for i, member in enumerate(results):
                on_member(i, member)
        return results

    # -- weights ---------------------------------------------------------------------------------
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """Working weights ← cast(M + scale·ε(seed, hf_name)) for the selected HF names."""
        check_finite("scale", scale)
        self._rpc("zoopt_perturb", noise.to_dict(), int(seed), float(scale))
        self._weights_changed()

    def restore(self) -> None:
        """Working weights ← cast(M), bit for bit."""
        self._rpc("zoopt_restore")
        self._weights_changed()

    def apply(self, noise: Noise, update: Update) -> None:
        """M ← M + Σᵢ cᵢ·ε(seedᵢ) in fp32, then W ← cast(M) (non-finite coefficients refused); with
        an update rule, M ← M + rule(ĝ), the rule's state kept in every worker beside its master."""
        for c in update.coefficients:
            check_finite("update coefficient", c)
        rules = next_rule_state(self._rules, update)  # a wrong step is refused here, before any worker
        rule = None if update.rule is None else update.rule.to_dict()
        self._rpc("zoopt_apply", noise.to_dict(), [int(s) for s in update.seeds],
                  [float(c) for c in update.coefficients], rule, int(update.rule_step))
        self._rules = rules
        self._weights_changed()

    def load_weights(self, named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> list[str]:
        """GRPO weight sync: HF-named tensors → vLLM's ``load_weights`` in every worker, then the
        working weights become the master (as ``sync_master``) and the prefix cache is reset.

        The tensors travel through a temporary safetensors file (a path is all that crosses
        the process boundary).  Returns the vLLM parameter names written.
        """
        from safetensors.torch import save_file

        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        state = {str(n): t.detach().contiguous().cpu() for n, t in items}
        with tempfile.TemporaryDirectory(prefix="zoopt-sync-", dir=_scratch_dir()) as tmp:
            path = Path(tmp) / "weights.safetensors"
            save_file(state, str(path))
            written = self._rpc("zoopt_load_weights", str(path))[0]
        self._weights_changed()
        return written

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fp32 master weights as whole HF-named CPU tensors, in HF order (tied ones once)."""
        return self._gather(master=True)

    def checksum(self) -> str:
        """blake2b over the working weights in HF names, order, dtype and shape (= HFEngine's)."""
        return self._digest(master=False)

    def master_checksum(self) -> str:
        return self._digest(master=True)

    def _digest(self, master: bool) -> str:
        if self._whole:
            return self._rpc("zoopt_checksum", master)[0]
        return digest(self._gather(master).items())

    def _gather(self, master: bool) -> dict[str, torch.Tensor]:
        """Whole HF tensors assembled from every rank's pieces (through files)."""
        with tempfile.TemporaryDirectory(prefix="zoopt-pieces-", dir=_scratch_dir()) as tmp:
            files = self._rpc("zoopt_write_pieces", tmp, master)
            return assemble_pieces(files, self.shapes)

    def num_parameters(self, noise: Noise | None = None) -> int:
        names = self.shapes if noise is None else noise.select(self.shapes)
        return sum(int(np.prod(self.shapes[n], dtype=np.int64)) for n in names)

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

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """``sampling.n`` completions per prompt, ``result[i][j]`` (see the module docstring)."""
        if isinstance(prompts, (str, dict)):
            raise TypeError("generate takes a sequence of prompts, not a single prompt")
        t0 = time.perf_counter()
        encoded = [self.encode(p) for p in prompts]
        results = self._generate_rows(encoded, list(range(len(encoded))), sampling)
        self.stats.record(results, t0)
        return results

    def _generate_rows(self, encoded: list[list[int]], indices: list[int], sampling: Sampling,
                       lora_requests: list | None = None) -> list[list[Completion]]:
        """One ``LLM.generate`` over rows of token ids; row k samples with prompt ``indices[k]``'s
        seed (so a prompt gets the same seed in every member) and adapter ``lora_requests[k]``."""
        from vllm import SamplingParams

        if not encoded:
            return []
        n = 1 if sampling.greedy else sampling.n
        params = [SamplingParams(
            n=n, temperature=0.0 if sampling.greedy else float(sampling.temperature),
            top_p=1.0 if sampling.greedy else float(sampling.top_p), max_tokens=sampling.max_new_tokens,
            seed=None if sampling.greedy else _prompt_seed(sampling.seed, i),
            logprobs=0 if sampling.logprobs else None, stop_token_ids=sorted(self.stop_ids),
            detokenize=False,
        ) for i in indices]
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in encoded], params, use_tqdm=False,
                                    lora_request=lora_requests)
        results = []
        for out in outputs:
            samples = [self._completion(o, sampling.logprobs) for o in sorted(out.outputs, key=lambda o: o.index)]
            results.append(samples if len(samples) == sampling.n else
                           [samples[0]] + [_copy(samples[0]) for _ in range(sampling.n - 1)])
        return results

    def _completion(self, out, want_logprobs: bool) -> Completion:
        ids = list(out.token_ids)
        stop_at = next((t for t, tok in enumerate(ids) if tok in self.stop_ids), None)
        ids = ids if stop_at is None else ids[: stop_at + 1]
        logprobs = None
        if want_logprobs and out.logprobs is not None:
            logprobs = [float(step[tok].logprob) for step, tok in zip(out.logprobs, ids)]
        return Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), token_ids=ids,
                          logprobs=logprobs, entropies=None,
                          finish_reason="length" if stop_at is None else "stop")


def assemble_pieces(files: list[str], shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """Whole HF tensors, in ``shapes`` order, from the files of :meth:`zoopt_write_pieces`.

    Raises when some element of some tensor is in no file.  (Replicated pieces — KV heads
    copied onto several TP ranks — are written more than once, with equal values.)
    """
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    seen: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(path, framework="pt") as fh:
            boxes = json.loads(fh.metadata()["boxes"])
            for key in fh.keys():
                name = key.rsplit("#", 1)[0]
                t = fh.get_tensor(key)
                if name not in out:
                    out[name] = torch.empty(shapes[name], dtype=t.dtype)
                    seen[name] = torch.zeros(shapes[name], dtype=torch.bool)
                box = tuple(slice(a, b) for a, b in boxes[key])
                out[name][box] = t
                seen[name][box] = True
    missing = [n for n in shapes if n not in seen or not bool(seen[n].all())]
    if missing:
        raise RuntimeError(f"no rank holds all of {missing[:5]}")
    return {n: out[n] for n in shapes}


def _copy(c: Completion) -> Completion:
    return Completion(c.text, list(c.token_ids), None if c.logprobs is None else list(c.logprobs),
                      None, c.finish_reason, dict(c.meta))


def _scratch_dir() -> str:
    path = cache_dir() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


__all__ = ["VLLMEngine", "WORKER_EXTENSION", "resolve_model_dir", "configure_environment", "check_cpu_head_dim",
           "assemble_pieces"]
