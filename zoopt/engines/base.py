"""The engine contract: :class:`WeightsEngine` (perturb, restore, apply) and :class:`Engine` (+ rollouts).

Every engine is a subclass, in the style of Optuna's ``BaseSampler``: a small abstract core
that each engine must write, and every other method that callers use declared here with a
documented default, so that callers never probe an engine with ``getattr``/``hasattr``.

**Abstract core** (:class:`WeightsEngine`): ``perturb``, ``restore``, ``apply``, ``checksum``;
(:class:`Engine`) also ``_generate``, the hook behind ``generate``.

**Rollouts are template methods.**  :meth:`Engine.generate` is written once, here: it refuses a
single prompt or a ``sampling`` that is not a :class:`Sampling` (:func:`check_request`), times
the call, asks the engine's hook :meth:`Engine._generate` for the completions and counts them
in :attr:`Engine.stats`.  A new engine writes ``_generate`` only and never repeats that opening.

**The population call** — the one seam through which every workflow evaluates an ES
population (the trainer, ``optimize``, schedules, ``compare``, sweeps):

- :meth:`WeightsEngine.evaluate_population` ``(noise, population, evaluate)``: the value of
  ``evaluate(i)`` with the weights at member ``i``, ``θ + population.scale(i)·ε(seed_i)``;
- :meth:`Engine.generate_population` ``(noise, population, prompts, sampling, on_member)``:
  the completions of the same prompts under every member (``result[i][p][j]``).

Their defaults are the sequential loop ``perturb → evaluate/generate → restore`` with
``restore`` in a ``finally``; an engine that can do better gives the same results another
way — one batched forward for all members, N LoRA adapters in one vLLM call: a path named by
:meth:`Engine.population_path` and run by the hook :meth:`Engine._generate_population`, which
``generate_population`` opens, times and counts like ``generate``; K Ray replicas: an override
of the whole call, opened with :func:`check_request`.  ``tests/engine_conformance.py`` checks
the results and the shared opening, for every engine.
"""

from __future__ import annotations

import abc
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar, Union

import torch

from ..noise import Noise
from ..types import Population, Update

# A prompt is plain text (wrapped as one user message when the model has a chat template) or a
# conversation: a list of {"role": ..., "content": ...} messages.
Prompt = Union[str, list]
T = TypeVar("T")


@dataclass(frozen=True)
class Sampling:
    """How to sample: ``temperature == 0`` means greedy (then ``n`` must be 1 to be useful).

    ``seed`` makes sampling reproducible for a given engine and batch; ``logprobs=True`` asks
    for the chosen tokens' log-probabilities and the per-token entropy of the sampling
    distribution (after temperature, before top-p).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 64
    n: int = 1
    seed: int = 0
    logprobs: bool = False

    def __post_init__(self) -> None:
        if not (self.temperature >= 0):
            raise ValueError(f"temperature must be ≥ 0, got {self.temperature!r}")
        if not (0 < self.top_p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not (isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1):
            raise ValueError(f"max_new_tokens must be an integer ≥ 1, got {self.max_new_tokens!r}")
        if not (isinstance(self.n, int) and self.n >= 1):
            raise ValueError(f"n must be an integer ≥ 1, got {self.n!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    text: str
    token_ids: list[int]
    logprobs: list[float] | None = None     # log p(chosen token), one per generated token
    entropies: list[float] | None = None    # H(p_t) of the sampling distribution, one per token
    finish_reason: str = "length"           # "stop" (EOS) or "length"
    meta: dict = field(default_factory=dict)


@dataclass
class GenerationStats:
    """Running counters over every ``generate`` call of one engine (reset with :meth:`reset`):
    calls, sequences (= completions returned), generated tokens, seconds inside ``generate``."""

    calls: int = 0
    sequences: int = 0
    generated_tokens: int = 0
    seconds: float = 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0

    def reset(self) -> None:
        self.calls = self.sequences = self.generated_tokens = 0
        self.seconds = 0.0

    def record(self, results: Sequence[Sequence[Completion]], started: float) -> None:
        """Count one ``generate`` call that returned ``results`` and began at ``started``
        (a ``time.perf_counter()`` value)."""
        self.calls += 1
        self.sequences += sum(len(r) for r in results)
        self.generated_tokens += sum(len(c.token_ids) for r in results for c in r)
        self.seconds += time.perf_counter() - started


class WeightsEngine(abc.ABC):
    """Owns weights and moves them by seeded noise: the weights half of the engine contract.

    Subclasses write the four abstract methods; the rest have the defaults documented on
    each.  An engine is a context manager that :meth:`close` s itself.
    """

    # -- abstract core ------------------------------------------------------------------------
    @abc.abstractmethod
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """Working weights ← cast(M + scale·ε(seed, name)) for the names ``noise`` selects,
        from the fp32 master M (perturbing twice does not stack).  A non-finite scale is a
        ``ValueError`` and changes nothing."""

    @abc.abstractmethod
    def restore(self) -> None:
        """Working weights ← cast(M), bit for bit (never by subtracting the noise again)."""

    @abc.abstractmethod
    def apply(self, noise: Noise, update: Update) -> None:
        """M ← M + Σᵢ cᵢ·ε(seedᵢ) accumulated in fp32, then working weights ← cast(M).
        Non-finite coefficients are a ``ValueError`` raised before anything is written."""

    @abc.abstractmethod
    def checksum(self) -> str:
        """A digest of the working weights (names, dtypes, shapes, bytes); engines holding
        the same weights under the same names give the same digest."""

    # -- declared, with defaults ---------------------------------------------------------------
    #: The parameter space of the weights: ``"full"`` (every parameter of the model, the
    #: default) or ``"adapter"`` (a LoRA adapter on a frozen base, :mod:`zoopt.adapters`).
    space: str = "full"

    def base_checksum(self) -> str:
        """A digest of what the weights sit on and never change: in adapter space, the frozen
        base's stored bytes.  Default (full space: nothing is frozen): :meth:`checksum`."""
        return self.checksum()

    def space_record(self) -> dict:
        """What a seed log records of the space (:mod:`zoopt.adapters.record`).  Default: ``{"space": "full"}``."""
        return {"space": "full"}

    def master_checksum(self) -> str:
        """The digest of the fp32 master.  Default: not available."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its master copy")

    def num_parameters(self, noise: Noise | None = None) -> int:
        """How many weights ``noise`` moves (all weights for ``None``).  Default: not available."""
        raise NotImplementedError(f"{type(self).__name__} does not count its parameters")

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fp32 master as whole tensors by (HF) parameter name, in parameter order — the
        names the noise is keyed by.  Default: not available."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its master copy")

    def evaluate_population(self, noise: Noise, population: Population,
                            evaluate: Callable[[int], T]) -> list[T]:
        """``[evaluate(i) at θ + population.scale(i)·ε(seed_i) for each member i]``, in order.

        Default: for each member, ``perturb`` → ``evaluate(i)`` → ``restore``, with
        ``restore`` in a ``finally``: the weights are the master's when this returns *and*
        when ``evaluate`` raises (the exception propagates).  ``evaluate`` may read the
        perturbed model (``module`` of an in-process engine); it must not change weights.
        """
        results: list[T] = []
        for i, member in enumerate(population.members):
            self.perturb(noise, member.seed, population.scale(i))
            try:
                results.append(evaluate(i))
            finally:
                self.restore()
        return results

    def population_info(self) -> dict:
        """What the engine went through since the last call (re-queued members, restarts, …),
        merged into each step's ``metrics.jsonl`` record after ``apply``: flat JSON values
        under keys prefixed by the engine's kind (``ray_requeued``).  Default: ``{}``."""
        return {}

    def applied_checksum(self) -> str | None:
        """The master digest after the last ``apply``, when the engine computed it anyway (a Ray
        engine, whose replicas must agree on it), for the seed log; ``None`` (the default) when
        it would cost a pass over the weights."""
        return None

    def close(self) -> None:
        """Release what the engine holds outside Python memory (processes, devices, actors).
        Default: nothing to release.  The engine is unusable afterwards."""

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Engine(WeightsEngine):
    """An LLM engine: weights (:class:`WeightsEngine`) plus rollouts on a tokenizer.

    Attributes every engine has (class-level defaults):

    - ``system_prompt``: prepended as a system message to conversations without one (None).
    - ``module``: the ``torch.nn.Module`` that generates, when it lives in this process and
      can be trained in place (``HFEngine``); None otherwise (vLLM's weights live in workers).
    - ``model_dir``: an HF directory of the engine's architecture, for building a separate
      trainable policy when ``module`` is None; None when there is none.
    - ``stats``: :class:`GenerationStats` over every ``generate`` call (set per instance).
    - ``model_name``, ``model_dtype``: what ``from_pretrained(model_name, dtype=model_dtype)`` was
      given — the base a seed log replays onto (``zoopt.fit`` records them); None for an engine
      built around a model object.
    """

    system_prompt: str | None = None
    module: torch.nn.Module | None = None
    model_dir: Path | None = None
    model_name: str | None = None
    model_dtype: str | None = None
    stats: GenerationStats

    def __init__(self) -> None:
        self.stats = GenerationStats()

    # -- rollouts: the template and its hook -------------------------------------------------
    def generate(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """``sampling.n`` completions for each prompt, in prompt order: ``result[p][j]``.

        The same in every engine: :func:`check_request` (a single prompt, or a ``sampling``
        that is not a :class:`Sampling`, is a ``TypeError`` and counts nothing), then the
        engine's :meth:`_generate`, timed and counted in :attr:`stats` as one call."""
        prompts = check_request(prompts, sampling, "generate")
        started = time.perf_counter()
        results = self._generate(prompts, sampling)
        self.stats.record(results, started)
        return results

    @abc.abstractmethod
    def _generate(self, prompts: list[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """The hook a new engine implements: ``sampling.n`` completions for each of ``prompts``
        (a checked list, possibly empty), ``result[p][j]``, at the current working weights.
        Only :meth:`generate` calls it; it neither checks its arguments nor touches ``stats``."""

    # -- the population call --------------------------------------------------------------------
    def generate_population(self, noise: Noise, population: Population, prompts: Sequence[Prompt],
                            sampling: Sampling,
                            on_member: Callable[[int, list[list[Completion]]], Any] | None = None,
                            ) -> list[list[list[Completion]]]:
        """Completions of ``prompts`` under every member: ``result[i][p][j]``.

        Member ``i``'s weights are ``θ + population.scale(i)·ε(seed_i)``.  Every member gets
        the same prompts and the same ``sampling`` (its seed included: common random numbers),
        so ``result[i]`` equals ``generate(prompts, sampling)`` after
        ``perturb(noise, seed_i, scale_i)`` — what every path must also return.
        ``on_member(i, result[i])`` is called once per member, in member order, as soon as its
        completions exist (a batched path calls it after the batch); it may score them.
        The weights are the master's on return and when anything raises.

        A template, like :meth:`generate`: :func:`check_request`, then for the path
        :meth:`population_path` names, ``"sequential"``: :meth:`evaluate_population` with
        ``generate`` (one member at a time, each ``generate`` counted); any other: the hook
        :meth:`_generate_population`, timed and counted in :attr:`stats` as one call.
        """
        prompts = check_request(prompts, sampling, "generate_population")
        if self.population_path(noise) == "sequential":
            def member(i: int) -> list[list[Completion]]:
                completions = self.generate(prompts, sampling)
                if on_member is not None:
                    on_member(i, completions)
                return completions

            return self.evaluate_population(noise, population, member)
        started = time.perf_counter()
        results = self._generate_population(noise, population, prompts, sampling)
        self.stats.record([per_prompt for member in results for per_prompt in member], started)
        if on_member is not None:
            for i, member in enumerate(results):
                on_member(i, member)
        return results

    def population_path(self, noise: Noise) -> str:
        """How :meth:`generate_population` runs ``noise``'s members: ``"sequential"`` (the
        default loop) or the name of the engine's own path (``"batched"``), for the metrics log.
        A path the engine was told to take but cannot is a one-line ``ValueError``."""
        return "sequential"

    def _generate_population(self, noise: Noise, population: Population, prompts: list[Prompt],
                             sampling: Sampling) -> list[list[list[Completion]]]:
        """The hook of an engine whose :meth:`population_path` names a path of its own: every
        member's completions, ``result[i][p][j]``, in one go (``prompts`` checked).  It must
        leave the weights the master's, also when it raises; only :meth:`generate_population`
        calls it, and it neither calls ``on_member`` nor touches ``stats``.
        Default: not available (the engine only has the sequential path)."""
        raise NotImplementedError(f"{type(self).__name__} has no population path but the sequential one")

    # -- declared, with defaults ---------------------------------------------------------------
    def encode(self, prompt: Prompt) -> list[int]:
        """The token ids ``generate`` feeds the model for ``prompt`` (chat template applied).
        Default: not available."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its prompt encoding")

    @property
    def pad_id(self) -> int:
        """The padding token id (GRPO pads batches with it).  Default: not available."""
        raise NotImplementedError(f"{type(self).__name__} does not say which token pads")

    @property
    def device(self) -> torch.device:
        """Where a policy trained beside this engine should live.  Default: the CPU."""
        return torch.device("cpu")

    def sync_master(self) -> None:
        """Take the in-process ``module``'s current weights as the new master (after a gradient
        optimizer changed them in place).  Default: not available (no in-process module)."""
        raise NotImplementedError(f"{type(self).__name__} has no in-process module to sync from")

    def load_weights(self, named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> Any:
        """Set the weights (HF names) and take them as the new master.  Default: not available."""
        raise NotImplementedError(f"{type(self).__name__} cannot load weights")

    def export_pretrained(self, directory: str | Path) -> Path:
        """Write an HF directory of the fp32 master, atomically; return its absolute path.
        Default: not available."""
        raise NotImplementedError(f"{type(self).__name__} cannot export an HF directory")


def check_request(prompts: Sequence[Prompt], sampling: Sampling, call: str = "generate") -> list[Prompt]:
    """``prompts`` as a list, after the checks that open every rollout call (``call`` names it
    in the message): a single prompt (a string or one message dict) instead of a sequence, and
    a ``sampling`` that is not a :class:`Sampling`, are a ``TypeError``."""
    if isinstance(prompts, (str, dict)):
        raise TypeError(f"{call} takes a sequence of prompts, not a single prompt")
    if not isinstance(sampling, Sampling):
        raise TypeError(f"sampling must be a zoopt.engines.base.Sampling, got {type(sampling).__name__}")
    return list(prompts)


POPULATION_MODES = ("auto", "batched", "sequential")


def check_population_mode(mode: str) -> str:
    """``mode`` when it is one of :data:`POPULATION_MODES` (an engine's ``population`` setting),
    else a one-line ``ValueError``."""
    if mode not in POPULATION_MODES:
        raise ValueError(f"population must be one of {', '.join(POPULATION_MODES)}, got {mode!r}")
    return mode


def chosen_path(mode: str, noise: Noise, batchable: bool) -> str:
    """:meth:`Engine.population_path` of an engine set to ``population: mode`` whose own path
    (``"batched"``, for ``LowRank`` noise) can run ``noise`` when ``batchable``: ``sequential``
    always runs member by member; ``auto`` takes the batched path where it can; ``batched``
    insists, and other noise is a one-line ``ValueError``."""
    if mode == "sequential":
        return "sequential"
    if batchable:
        return "batched"
    if mode == "batched":
        raise ValueError(f"population: batched needs noise.kind low_rank, got {noise.kind!r}")
    return "sequential"


__all__ = ["WeightsEngine", "Engine", "Sampling", "Completion", "GenerationStats", "Prompt", "check_request",
           "POPULATION_MODES", "check_population_mode", "chosen_path"]

