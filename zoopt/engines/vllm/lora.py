"""The vLLM engine's batched population: every member a LoRA adapter, all in one ``generate`` call.

For :class:`~zoopt.noise.LowRank` noise of rank r, member i (seed sᵢ's factors, sign, scale σ)
perturbs a linear weight ``W ∈ ℝ^{m×n}`` by ``cᵢ·Aᵢ·Bᵢᵀ`` with ``(Aᵢ, Bᵢ) = LowRank.factors(seedᵢ,
name, shape)`` and ``cᵢ = signᵢ·σ/√r`` — the factors ``LowRank.sample`` multiplies out and the HF
batched path uses (:func:`~zoopt.engines.batched.member_factors`, one definition).  vLLM's LoRA
adds ``(x·lora_Aᵀ)·lora_Bᵀ·(lora_alpha/r)`` to a linear layer's output, so member i's adapter is

    lora_A = Bᵢᵀ (r×n),   lora_B = cᵢ·Aᵢ (m×r, folded in fp32 as the HF path folds it),   lora_alpha = r

and vLLM's scaling ``lora_alpha/r`` is exactly 1: each row of the batch computes
``x·Wᵀ + (x·Bᵢ)·(cᵢAᵢ)ᵀ``, the HF batched path's formula, equal to the dense member
``x·(W + cᵢAᵢBᵢᵀ)ᵀ`` up to rounding.  vLLM maps the HF module names onto its fused
(``qkv_proj``, ``gate_up_proj``) and tensor-parallel-sharded layers itself, and pads the rank up
to its ``max_lora_rank`` with zeros (which add exactly nothing).

**How adapters get in.**  Each call writes the N adapters in PEFT format
(``adapter_config.json`` + ``adapter_model.safetensors``, tensors named
``base_model.model.<hf module>.lora_{A,B}.weight``) to a fresh RAM-backed directory
(``/dev/shm`` where there is one), registers them with vLLM's public ``add_lora`` under fresh
ids, runs the call with one ``LoRARequest`` per row, and in a ``finally`` removes every adapter
(``remove_lora``) and the directory: nothing persists from one step to the next.  PEFT files
and ``LoRARequest`` are vLLM's stable, documented interface to adapters; setting the slots from
the worker extension would skip a few MB of RAM-disk I/O per step but tie zoopt to vLLM's
internal LoRA manager (docs/vllm.md weighs the two).

**What LoRA cannot move**: embeddings, the LM head, norms and biases (vLLM's LoRA covers
linear layers' weights only).  Noise that selects any of them is refused with one line naming
them and the ``noise.exclude`` patterns that would skip them (:func:`lora_selection`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import torch

from ...noise import LowRank
from ...types import Population
from ..batched import member_factors

PEFT_PREFIX = "base_model.model."


def round_lora_rank(rank: int, allowed: Sequence[int]) -> int:
    """The smallest rank in ``allowed`` (vLLM's ``max_lora_rank`` values) that is ≥ ``rank``."""
    if not isinstance(rank, int) or rank < 1:
        raise ValueError(f"max_lora_rank must be a positive integer, got {rank!r}")
    fits = [a for a in sorted(allowed) if a >= rank]
    if not fits:
        raise ValueError(f"max_lora_rank {rank} exceeds vLLM's largest LoRA rank {max(allowed)}")
    return fits[0]


def check_lora_slots(population: str, max_loras: int | None) -> None:
    """``population: batched`` needs LoRA slots; ``max_loras`` is None (off) or an integer ≥ 1."""
    if max_loras is not None and (isinstance(max_loras, bool) or not isinstance(max_loras, int) or max_loras < 1):
        raise ValueError(f"max_loras must be an integer ≥ 1 (or unset: LoRA off), got {max_loras!r}")
    if population == "batched" and max_loras is None:
        raise ValueError("population: batched on the vllm engine runs members as LoRA adapters: set "
                         "engine_args.max_loras ≥ population_size")


def exclude_patterns(refused: Sequence[str], keep: Iterable[str]) -> list[str]:
    """``fnmatch`` patterns that match every name in ``refused`` and none in ``keep``: layer
    numbers become ``*`` (``model.layers.*.input_layernorm.weight``) unless that pattern would
    also match a name to keep, in which case the names themselves are listed."""
    import fnmatch

    keep = list(keep)
    patterns: list[str] = []
    for name in refused:
        general = re.sub(r"\.\d+\.", ".*.", name)
        pattern = general if not any(fnmatch.fnmatchcase(k, general) for k in keep) else name
        if pattern not in patterns:
            patterns.append(pattern)
    return patterns


def lora_selection(noise: LowRank, shapes: Mapping[str, tuple[int, ...]], covered: Iterable[str]) -> list[str]:
    """The HF names ``noise`` moves, in order, when every one of them is a weight that vLLM's LoRA
    covers (``covered``); otherwise a one-line ``ValueError`` naming the others and the
    ``noise.exclude`` that would skip them."""
    covered = set(covered)
    selected = noise.select(shapes)
    if not selected:
        raise ValueError(f"noise include={list(noise.include)} exclude={list(noise.exclude)} selects no parameter")
    refused = [n for n in selected if n not in covered or len(shapes[n]) != 2]
    if refused:
        keep = [n for n in selected if n not in refused]
        exclude = list(noise.exclude) + exclude_patterns(refused, keep)
        shown = ", ".join(repr(n) for n in refused[:3]) + (f", … ({len(refused)} parameters)" if len(refused) > 3 else "")
        raise ValueError(f"the vLLM batched (multi-LoRA) path moves only linear layers' weights, not {shown}: "
                         f"skip them with noise.exclude={exclude!r} or set population: sequential")
    return selected


def adapter_tensors(noise: LowRank, population: Population, names: Sequence[str],
                    shapes: Mapping[str, tuple[int, ...]]) -> list[dict[str, torch.Tensor]]:
    """Member i's PEFT tensors: ``lora_A = Bᵢᵀ`` and ``lora_B = cᵢ·Aᵢ`` (fp32) for each HF name."""
    tensors: list[dict[str, torch.Tensor]] = [{} for _ in population.members]
    for name in names:
        a, b = member_factors(noise, population, name, shapes[name])
        module = PEFT_PREFIX + name.removesuffix(".weight")
        for i, member in enumerate(tensors):
            member[f"{module}.lora_A.weight"] = b[i].T.contiguous()
            member[f"{module}.lora_B.weight"] = a[i].contiguous()
    return tensors


def write_adapter(directory: Path, tensors: Mapping[str, torch.Tensor], rank: int,
                  alpha: float | None = None) -> Path:
    """A PEFT LoRA directory; ``lora_alpha`` defaults to ``r`` (vLLM's scaling alpha/r = 1: the
    tensors carry the whole perturbation).  Adapter space passes its own ``lora_alpha``."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True)
    modules = sorted({k.rsplit(".", 2)[0].rsplit(".", 1)[-1] for k in tensors})  # q_proj, …
    config = {"peft_type": "LORA", "r": int(rank), "lora_alpha": int(rank) if alpha is None else alpha,
              "target_modules": modules, "bias": "none", "use_rslora": False, "use_dora": False}
    (directory / "adapter_config.json").write_text(json.dumps(config))
    save_file({n: t.contiguous() for n, t in tensors.items()}, str(directory / "adapter_model.safetensors"))
    return directory


def ram_scratch_dir() -> str | None:
    """``/dev/shm`` when it is a writable directory (a RAM disk), else None (the system temp dir)."""
    shm = "/dev/shm"
    return shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None


class LoRAAdapters:
    """A context manager that holds adapters in vLLM for as long as it is open.

    On entry each adapter of ``adapters`` (a mapping of PEFT tensor names to tensors) is written
    (:func:`write_adapter`, rank ``rank``, ``lora_alpha`` ``alpha``) under a fresh directory in
    ``scratch`` and registered with ``llm.llm_engine.add_lora`` under ids ``first_id, first_id
    + 1, …``; :attr:`requests` holds adapter i's ``LoRARequest``.  On exit — also when the call
    raised — every adapter is removed from vLLM and the directory is deleted.
    """

    def __init__(self, llm, adapters: Iterable[Mapping[str, torch.Tensor]] | None, rank: int, first_id: int,
                 scratch: str | None = None, alpha: float | None = None) -> None:
        self.llm, self.adapters, self.rank, self.alpha = llm, adapters, int(rank), alpha
        self.first_id, self.scratch = int(first_id), scratch
        self.requests: list = []
        self.directory: Path | None = None

    def tensors(self) -> Iterable[Mapping[str, torch.Tensor]]:
        """The adapters to register, one tensor mapping each (drawn when the context opens)."""
        return self.adapters or ()

    def __enter__(self) -> "LoRAAdapters":
        from vllm.lora.request import LoRARequest

        self.directory = Path(tempfile.mkdtemp(prefix="zoopt-lora-", dir=self.scratch))
        try:
            for i, tensors in enumerate(self.tensors()):
                lora_id = self.first_id + i
                path = write_adapter(self.directory / f"member{i}", tensors, self.rank, self.alpha)
                request = LoRARequest(f"zoopt-{lora_id}", lora_id, str(path))
                self.llm.llm_engine.add_lora(request)
                self.requests.append(request)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            for request in self.requests:
                self.llm.llm_engine.remove_lora(request.lora_int_id)
        finally:
            self.requests = []
            if self.directory is not None:
                shutil.rmtree(self.directory, ignore_errors=True)
                self.directory = None


class LoRAPopulation(LoRAAdapters):
    """:class:`LoRAAdapters` for one ``LowRank`` population: member i's adapter is
    :func:`adapter_tensors`' i-th (``lora_alpha = r``), registered for one call."""

    def __init__(self, llm, noise: LowRank, population: Population, names: Sequence[str],
                 shapes: Mapping[str, tuple[int, ...]], first_id: int, scratch: str | None = None) -> None:
        super().__init__(llm, None, noise.rank, first_id, scratch)
        self.noise, self.population, self.names, self.shapes = noise, population, list(names), shapes

    def tensors(self) -> Iterable[Mapping[str, torch.Tensor]]:
        return adapter_tensors(self.noise, self.population, self.names, self.shapes)


__all__ = ["LoRAAdapters", "LoRAPopulation", "check_lora_slots", "lora_selection", "exclude_patterns", "adapter_tensors", "write_adapter",
           "round_lora_rank", "ram_scratch_dir"]
