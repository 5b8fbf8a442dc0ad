"""The rollout side of the engine contract: sampling parameters, completions, the protocol.

An LLM engine is a :class:`~zoopt.engines.module.ModuleEngine`-like weights owner (perturb,
restore, apply, checksum, export) that can also ``generate``.  The HF engine, the vLLM engine
and a Ray cluster of either all satisfy :class:`RolloutEngine`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence, Union, runtime_checkable

from ..noise import Noise
from ..types import Update

# A prompt is plain text (wrapped as one user message when the model has a chat template) or a
# conversation: a list of {"role": ..., "content": ...} messages.
Prompt = Union[str, list]


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


@runtime_checkable
class RolloutEngine(Protocol):
    def generate(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """``n`` completions for each prompt, in prompt order: ``result[i][j]``."""

    def perturb(self, noise: Noise, seed: int, scale: float) -> None: ...

    def restore(self) -> None: ...

    def apply(self, noise: Noise, update: Update) -> None: ...

    def checksum(self) -> str: ...


def close_engine(engine) -> None:
    """Release what an engine holds outside this process (``VLLMEngine`` shuts its worker
    processes down); a no-op for engines without ``close`` (``HFEngine``: memory only)."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()
