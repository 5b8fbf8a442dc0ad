"""``HFEngine``: rollouts with a transformers causal LM, weights handled by ``ModuleEngine``.

Generation is zoopt's own KV-cached decoding loop over the HF model's ``forward`` (left
padding, attention mask, position ids from the mask), in micro-batches of ``batch_size``
sequences, under ``torch.inference_mode()``.  At step t with raw next-token logits ℓ_t:

- greedy (``temperature == 0``): the token is ``argmax ℓ_t`` (first index on ties);
- sampling: p_t = softmax(ℓ_t / T), restricted to the top-p nucleus (the smallest set of most
  likely tokens whose mass reaches ``top_p``, renormalised) and sampled by inverse CDF with a
  uniform u ∈ (0, 1] drawn from a numpy stream keyed by ``(sampling.seed, prompt index,
  sample index)``.  So the global torch RNG is never touched, and a completion depends only
  on its seed, its prompt and the weights — not on ``batch_size``, on the other prompts in
  the batch, or on the device (up to floating-point differences in the logits).
- ``logprobs=True``: ``logprobs[t] = log q_t(token_t)`` and ``entropies[t] = −Σ q_t log q_t``
  (nats) with q_t = softmax(ℓ_t / T) — the temperature-scaled distribution *before* top-p,
  with T = 1 for greedy decoding.

A sequence stops at its first EOS or pad token (that token is kept in ``token_ids`` and has
a log-prob; nothing after it is returned), ``finish_reason="stop"``; otherwise after
``max_new_tokens`` tokens, ``finish_reason="length"``.  ``text`` skips special tokens.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np
import torch

from ..adapters.attach import ADAPTER, attach, base_digest, is_adapter, logical_name
from ..adapters.export import merge_adapter, save_adapter, saved_start
from ..adapters.quantize import check_quantization, quantize_base
from .adapter_rows import AdapterRows
from ..adapters.space import AdapterSpace
from ..models import load_model
from ..noise import LowRank, Noise
from ..runs.atomic import atomic_directory
from ..types import Population
from .base import Completion, Engine, Prompt, Sampling, check_population_mode, chosen_path
from .batched import BatchedLowRank, RowLayout
from .module import ModuleEngine
from .prompts import check_system_prompt, encode_prompt, ensure_pad_token, stop_token_ids


class HFEngine(ModuleEngine, Engine):
    """A transformers causal LM as an :class:`~zoopt.engines.base.Engine` (weights through
    :class:`~zoopt.engines.module.ModuleEngine`, rollouts by the decoding loop above).

    ``system_prompt`` (optional) is prepended as a system message to every conversation
    that has none; it needs a tokenizer with a chat template.

    ``population`` chooses how :meth:`generate_population` runs: ``"auto"`` (the default) runs
    the members of ``LowRank`` noise in one batched forward (:mod:`zoopt.engines.batched`) and
    every other noise member by member; ``"batched"`` insists on the batched path (other noise
    is an error); ``"sequential"`` always runs member by member.
    """

    def __init__(self, model, tokenizer, batch_size: int = 64, master_device=None,
                 system_prompt: str | None = None, noise_cache_bytes: int = 0, population: str = "auto",
                 adapter: AdapterSpace | None = None) -> None:
        self.adapter, self.peft_model = adapter, None
        if adapter is not None:  # adapter space: the LoRA tensors are the weights, the base is frozen
            self.peft_model = attach(model, adapter)
            ModuleEngine.__init__(self, model, master_device=master_device, noise_cache_bytes=noise_cache_bytes,
                                  select=is_adapter, logical=logical_name)
        else:
            ModuleEngine.__init__(self, model, master_device=master_device, noise_cache_bytes=noise_cache_bytes)
        Engine.__init__(self)
        if batch_size < 1:
            raise ValueError(f"batch_size must be ≥ 1, got {batch_size!r}")
        check_system_prompt(tokenizer, system_prompt)
        self.tokenizer = tokenizer
        self.batch_size = int(batch_size)
        self.system_prompt = system_prompt
        self._pad_id = ensure_pad_token(tokenizer)
        self.stop_ids = stop_token_ids(tokenizer, getattr(model, "generation_config", None))
        self._cache_arg = _cache_argument(model)
        self.population = check_population_mode(population)
        self._row_layouts: dict[tuple, RowLayout] = {}

    @classmethod
    def from_pretrained(cls, name_or_path: str, dtype="float32", device: str = "cpu", quantization: str = "none",
                        adapter: AdapterSpace | None = None, **kw) -> "HFEngine":
        """Load with :func:`zoopt.models.load_model` (``"smollm2-135m"``, ``"tiny:SEED"``, a path);
        ``quantization`` (``none``/``int8``/``int4``, adapter space only) quantizes the frozen base
        before the adapter is attached (:mod:`zoopt.adapters.quantize`).

        In adapter space, ``name_or_path`` may be an adapter directory (what an adapter-space run
        exports): its base is loaded (and quantized), ``adapter`` attached and the directory's
        tensors loaded as the weights (:func:`~zoopt.adapters.export.saved_start`); an ``r`` or
        ``lora_alpha`` other than ``adapter``'s is a one-line error.  (Outside adapter space an
        adapter directory loads as a model with the adapter in it, :func:`load_model`.)"""
        check_quantization(quantization, "adapter" if adapter is not None else "full")
        saved = saved_start(name_or_path, adapter)
        base = saved.base_model if saved is not None else name_or_path
        model, tokenizer = load_model(base, dtype=dtype, device=device)
        quantize_base(model, quantization)
        engine = cls(model, tokenizer, adapter=adapter, **kw)
        if saved is not None:  # start from the saved adapter: its tensors are the weights
            engine.load_weights(saved.tensors)
        engine.model_name, engine.model_dtype, engine.quantization = str(base), str(dtype), quantization
        return engine

    quantization = "none"  # the base's weight-only quantization (set by from_pretrained)

    @property
    def space(self) -> str:
        """``"adapter"`` when the weights are a LoRA adapter on a frozen base, else ``"full"``."""
        return "full" if self.adapter is None else "adapter"

    def base_checksum(self) -> str:
        """Adapter space: blake2b over the frozen base's stored bytes (quantized data and scales
        included); it never changes.  Full space: the working weights' :meth:`checksum`."""
        return super().base_checksum() if self.adapter is None else base_digest(self.module)

    def space_record(self) -> dict:
        """Full space: ``{"space": "full"}``; adapter space adds the adapter's config, the base's
        quantization and :meth:`base_checksum` (what a resume or an export must find again)."""
        if self.adapter is None:
            return super().space_record()
        return {"space": "adapter", "adapter": self.adapter.to_dict(), "quantization": self.quantization,
                "base_weights": self.base_checksum()}

    @property
    def device(self) -> torch.device:
        return next(self.module.parameters()).device

    @property
    def pad_id(self) -> int:
        return self._pad_id

    # -- prompts ---------------------------------------------------------------------------
    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt: chat-templated (with generation prompt) when possible."""
        return encode_prompt(self.tokenizer, prompt, self.system_prompt)

    # -- generation ------------------------------------------------------------------------
    def _generate(self, prompts: list[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """``sampling.n`` completions per prompt, ``result[i][j]`` (see the module docstring)."""
        encoded = [self.encode(p) for p in prompts]
        rows = [(i, j) for i in range(len(encoded)) for j in range(sampling.n)]
        rows.sort(key=lambda r: len(encoded[r[0]]))  # less padding; results do not depend on order
        results: list[list[Completion | None]] = [[None] * sampling.n for _ in encoded]
        self.module.eval()
        with torch.inference_mode():
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                out = self._generate_batch([encoded[i] for i, _ in chunk], chunk, sampling,
                                           prompt_of=[i for i, _ in chunk], weights_of=[0] * len(chunk))
                for (i, j), c in zip(chunk, out):
                    results[i][j] = c
        return results  # type: ignore[return-value]

    # -- the population call -----------------------------------------------------------------
    def population_path(self, noise: Noise) -> str:
        """``"batched"`` for ``LowRank`` noise, and for any noise in adapter space, unless
        ``population`` is ``sequential`` (see the class)."""
        return chosen_path(self.population, noise, self.adapter is not None or isinstance(noise, LowRank))

    def _generate_population(self, noise: Noise, population: Population, prompts: list[Prompt],
                             sampling: Sampling) -> list[list[list[Completion]]]:
        """The batched path (``LowRank`` noise, see ``population``): every member's rows go
        through one batched decoding loop, micro-batched by ``batch_size`` across members, with
        each member's perturbation applied in activation space
        (:class:`~zoopt.engines.batched.BatchedLowRank`).  The weights are never written, and
        sample j of prompt p uses the same uniform stream ``(sampling.seed, p, j)`` as the
        sequential path, so results equal it up to floating-point rounding."""
        self.restore()
        if self.adapter is not None:  # one adapter per row (zoopt.adapters.rows)
            batch = AdapterRows(self.module, self.weights, noise, population)
        else:
            key = (noise.include, noise.exclude)
            if key not in self._row_layouts:
                self._row_layouts[key] = RowLayout(self.module, self.weights, noise)
            batch = BatchedLowRank(self._row_layouts[key], self.weights, noise, population)
        encoded = [self.encode(p) for p in prompts]
        rows = [(i, p, j) for i in range(len(population)) for p in range(len(encoded)) for j in range(sampling.n)]
        rows.sort(key=lambda r: len(encoded[r[1]]))  # less padding; stable: rows of one length stay member-major (AdapterRows copies nothing then)
        results: list = [[[None] * sampling.n for _ in encoded] for _ in range(len(population))]
        self.module.eval()
        with torch.inference_mode():
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                out = self._generate_batch([encoded[p] for _, p, _ in chunk], [(p, j) for _, p, j in chunk], sampling,
                                           prompt_of=[(i, p) for i, p, _ in chunk],
                                           weights_of=[i for i, _, _ in chunk], at_weights=batch.rows)
                for (i, p, j), c in zip(chunk, out):
                    results[i][p][j] = c
        return results

    def _generate_batch(self, prompts: list[list[int]], keys: list[tuple[int, int]], sampling: Sampling,
                        prompt_of: list | None = None, weights_of: list | None = None,
                        at_weights: Callable[[list], ContextManager] | None = None) -> list[Completion]:
        """Decode one micro-batch; row b samples with the uniform stream ``keys[b]``.

        Sharing (given ``prompt_of`` and ``weights_of``; without them every row is prefilled
        whole): row b runs at the weights ``weights_of[b]`` (``generate``: all the same; the
        batched population: its member), and rows with the same ``prompt_of`` id hold the same
        prompt at the same weights (the n samples of one prompt).  ``at_weights(ids)`` is the
        context in which row k of a forward runs at weights ``ids[k]`` (the batched population's
        hooks; by default nothing is needed).  The prefill is then shared twice over:

        * the prompt tokens all rows begin with (a chat template's system turn: most of a short
          question's tokens) run once per distinct weights, their KV cache fanned out to the rows;
        * each distinct prompt's remaining tokens run once, fanned out to its n rows.

        Row b attends to the same keys at the same positions as when its whole prompt is
        prefilled alone (the pads between shared prefix and its own tokens are masked), so the
        result equals per-row prefill up to rounding (``tests/test_hf_engine.py``,
        ``tests/test_batched_population.py``).
        """
        device, B, T = self.device, len(prompts), sampling.max_new_tokens
        at_weights = at_weights or (lambda ids: contextlib.nullcontext())
        weights_all = list(weights_of) if weights_of is not None else [0] * B
        fan_out, cache, prefix, weights_first = None, None, 0, weights_all
        if prompt_of is not None and weights_of is not None:
            first: dict = {}
            rows_of = [first.setdefault(g, b) for b, g in enumerate(prompt_of)]
            if len(first) < B:
                unique = sorted(first.values())
                position = {b: k for k, b in enumerate(unique)}
                fan_out = torch.tensor([position[b] for b in rows_of], device=device)
                prompts, weights_first = [prompts[b] for b in unique], [weights_all[b] for b in unique]
            prefix = shared_prefix(prompts)
            if prefix:
                cache = self._prefill_prefix(prompts[0][:prefix], weights_first, at_weights)
                prompts = [p[prefix:] for p in prompts]
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self._pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for b, p in enumerate(prompts):
            if p:
                input_ids[b, width - len(p):] = torch.tensor(p)
                mask[b, width - len(p):] = 1
        input_ids, mask = input_ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp_(min=0) + prefix
        if prefix:
            mask = torch.cat([mask.new_ones(len(prompts), prefix), mask], dim=1)
        uniforms = None if sampling.greedy else _uniforms(sampling.seed, keys, T).to(device)
        stop = torch.tensor(sorted(self.stop_ids), device=device)

        def forward(cache):
            out = self.module(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                              use_cache=True, logits_to_keep=1, **{self._cache_arg: cache})
            return getattr(out, self._cache_arg), out.logits[:, -1, :].float()

        tokens, logps, ents = [], [], []
        done = torch.zeros(B, dtype=torch.bool, device=device)
        with contextlib.ExitStack() as rows_context:  # entered once unless the rows change at the fan-out
            rows_context.enter_context(at_weights(weights_first))
            cache, logits = forward(cache)
            if fan_out is not None:  # one prefill per distinct prompt: fan out to its rows
                rows_context.close()
                rows_context.enter_context(at_weights(weights_all))
                cache.reorder_cache(fan_out)
                logits, mask, positions = logits[fan_out], mask[fan_out], positions[fan_out]
            for t in range(T):
                if t:
                    cache, logits = forward(cache)
                token = self._next_token(logits, sampling, uniforms, t, logps, ents)
                token = token.masked_fill(done, self._pad_id)
                tokens.append(token)
                done |= torch.isin(token, stop)
                if bool(done.all()):
                    break
                input_ids = token[:, None]
                mask = torch.cat([mask, mask.new_ones(B, 1)], dim=1)
                positions = positions[:, -1:] + 1
        return self._completions(torch.stack(tokens, 1), logps, ents)

    @staticmethod
    def _next_token(logits, sampling: Sampling, uniforms, t: int, logps: list, ents: list) -> torch.Tensor:
        """Step t's token of every row (greedy, or inverse-CDF with the row's uniform); appends
        its log-prob and the distribution's entropy when ``sampling.logprobs``."""
        if sampling.greedy:
            token = logits.argmax(-1)
        else:
            token = _sample(logits / sampling.temperature, sampling.top_p, uniforms[:, t])
        if sampling.logprobs:
            logq = torch.log_softmax(logits / (sampling.temperature or 1.0), dim=-1)
            logps.append(logq.gather(-1, token[:, None])[:, 0])
            ents.append((logq.exp() * logq).sum(-1).neg_().clamp_(min=0.0))
        return token

    def _prefill_prefix(self, prefix: list[int], weights_of: list, at_weights):
        """The KV cache of ``prefix`` (positions 0 … L−1) for rows at weights ``weights_of``: run
        once per distinct weights and fanned out to the rows."""
        distinct = sorted(set(weights_of))
        ids = torch.tensor([prefix] * len(distinct), device=self.device)
        positions = torch.arange(len(prefix), device=self.device)[None].expand(len(distinct), -1)
        with at_weights(distinct):
            out = self.module(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=positions,
                              use_cache=True, logits_to_keep=1, **{self._cache_arg: None})
        cache = getattr(out, self._cache_arg)
        cache.reorder_cache(torch.tensor([distinct.index(w) for w in weights_of], device=self.device))
        return cache

    def _completions(self, tokens: torch.Tensor, logps: list, ents: list) -> list[Completion]:
        tokens = tokens.cpu().tolist()
        lp = torch.stack(logps, 1).cpu().tolist() if logps else None
        en = torch.stack(ents, 1).cpu().tolist() if ents else None
        result = []
        for b, row in enumerate(tokens):
            stop_at = next((t for t, tok in enumerate(row) if tok in self.stop_ids), None)
            n = len(row) if stop_at is None else stop_at + 1
            ids = row[:n]
            result.append(Completion(
                text=self.tokenizer.decode(ids, skip_special_tokens=True),
                token_ids=ids,
                logprobs=lp[b][:n] if lp is not None else None,
                entropies=en[b][:n] if en is not None else None,
                finish_reason="length" if stop_at is None else "stop",
            ))
        return result

    # -- export ----------------------------------------------------------------------------
    def export_pretrained(self, directory: str | Path) -> Path:
        """Write an HF directory (config, tokenizer, safetensors) loadable by ``load_model``.

        In adapter space it is a PEFT adapter directory instead (:func:`zoopt.adapters.export.save_adapter`:
        ``adapter_config.json``, ``adapter_model.safetensors``, the tokenizer), loadable with
        ``PeftModel.from_pretrained`` and vLLM's ``LoRARequest``.

        The weights written are the fp32 *master* (the exact ES state, whatever dtype the
        module runs in); perturbations are not exported.  The directory appears atomically:
        it is written beside ``directory`` and renamed into place (replacing an old one).
        """
        self.restore()
        if self.adapter is not None:
            return save_adapter(directory, self.peft_model.peft_config[ADAPTER], self.weights.items(master=True),
                                getattr(self, "model_name", ""), self.tokenizer)
        with atomic_directory(directory) as tmp:
            self.module.save_pretrained(str(tmp), state_dict=dict(self.master))
            self.tokenizer.save_pretrained(str(tmp))
        directory = Path(directory).absolute()
        return directory

    def export_merged(self, directory: str | Path) -> Path:
        """Adapter space on a base that is not quantized: a full HF model directory with the
        adapter merged in (:func:`zoopt.adapters.export.merge_adapter`, on a fresh copy of the base)."""
        if self.adapter is None:
            return self.export_pretrained(directory)
        if self.quantization != "none":
            raise ValueError(f"merge: the base is quantized ({self.quantization}); export the adapter instead")
        with tempfile.TemporaryDirectory() as tmp:
            adapter_dir = self.export_pretrained(Path(tmp) / "adapter")
            return merge_adapter(adapter_dir, directory, self.model_name, dtype=self.model_dtype)


MIN_SHARED_PREFIX = 8  # tokens: below this an extra forward costs more than it saves


def shared_prefix(prompts: list[list[int]]) -> int:
    """How many leading tokens every prompt shares and can be prefilled once: the longest
    common prefix, less one where it is a whole prompt (every row keeps a token of its own,
    whose logits start its decoding); 0 for one prompt or fewer than ``MIN_SHARED_PREFIX``."""
    if len(prompts) < 2:
        return 0
    shortest = min(len(p) for p in prompts)
    n = 0
    while n < shortest and all(p[n] == prompts[0][n] for p in prompts):
        n += 1
    n = min(n, shortest - 1)
    return n if n >= MIN_SHARED_PREFIX else 0


def _cache_argument(model) -> str:
    """The KV-cache keyword of ``model.forward``: ``cache`` (transformers ≥ 5.2x) or ``past_key_values``."""
    import inspect

    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def _uniforms(seed: int, keys: list[tuple[int, int]], steps: int) -> torch.Tensor:
    """u ∈ (0, 1], shape (len(keys), steps): row (i, j) from the stream ``(seed, i, j)``."""
    rows = [1.0 - np.random.default_rng(np.random.SeedSequence([int(seed), i, j])).random(steps, dtype=np.float32)
            for i, j in keys]
    return torch.from_numpy(np.stack(rows))


def _sample(logits: torch.Tensor, top_p: float, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sample from softmax(logits) restricted to the top-p nucleus.

    With u ∈ (0, 1] and target = u·total, the first index whose cumulative mass reaches the
    target always has positive probability, so masked or underflowed tokens are never chosen.
    """
    probs = torch.softmax(logits, dim=-1)
    order = None
    if top_p < 1.0:
        probs, order = probs.sort(dim=-1, descending=True)
        probs = probs * ((probs.cumsum(-1) - probs) < top_p)  # keeps the most likely token always
    cdf = probs.cumsum(-1)
    idx = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None].contiguous()).clamp_(max=cdf.shape[-1] - 1)
    return (order.gather(-1, idx) if order is not None else idx)[:, 0]
