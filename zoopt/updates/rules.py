"""The update rules over ĝ: sgd, momentum (heavy-ball, Nesterov), adam, rmsprop, decoupled weight
decay, clipping by the global norm, and scaling by α.

Each rule maps its input ``g`` (ĝ, or the previous link's output) to a step ``u`` with its state
of one tensor, element by element in fp32 (see :mod:`zoopt.updates.base` for the contract; t is
the 0-based step, every operation rounds once, scalars round to fp32).  ES ascends, ``θ ← θ + u``,
and the ES shell appends ``scale(α)``, so the full step of, e.g., ``adam`` is ``α·m̂/(√v̂ + ε)``:

===================  =====================================================  ==============
rule                 step (state updated first)                             state / weight
===================  =====================================================  ==============
``sgd()``            u = g                                                  —
``momentum(μ)``      v ← μ·v + g;  u = v                                    v: 4 bytes
``momentum(μ,        v ← μ·v + g;  u = g + μ·v                              v: 4 bytes
nesterov=True)``
``adam(β₁, β₂, ε)``  m ← β₁·m + (1−β₁)·g;  s ← β₂·s + (1−β₂)·g²;             m, s: 8 bytes
                     u = (m/(1−β₁^{t+1})) / (√(s/(1−β₂^{t+1})) + ε)
``rmsprop(ρ, ε)``    s ← ρ·s + (1−ρ)·g²;  u = g / (√s + ε)                  s: 4 bytes
``weight_decay(λ)``  u = g − λ·(θ − θ₀),  θ₀ the weights at the run's first  θ₀: 4 bytes
                     step (``towards="base"``) or 0 (``towards="zero"``)    (zero: —)
``clip_by_norm(c)``  u = g·min(1, c/‖g‖₂), ‖g‖₂ over every moved weight     —
``scale(α)``         u = α·g                                                —
===================  =====================================================  ==============

``momentum`` is heavy-ball in the trace form of optax's ``trace`` and PyTorch's SGD:
v_t = Σ_{s≤t} μ^{t−s}·ĝ_s.  ``weight_decay`` is decoupled (AdamW's): put after the direction
rule, the full step is α·(direction − λ·(θ − θ₀)), so the weights are pulled towards the base
model (the default: fine-tuning keeps what the base knows) or towards zero.  ``clip_by_norm`` acts
on ĝ and must come first in a chain; the engine computes the norm in a first pass over every
moved tensor (:mod:`zoopt.engines.rule_state`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from .base import StepContext, UpdateRule

DECAY_TOWARDS = ("base", "zero")


def _check(rule: str, name: str, value, ok: bool, must: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok:
        raise ValueError(f"{rule}: {name} must be {must}, got {value!r}")


def _unit(rule: str, name: str, value) -> float:
    """A float in [0, 1)."""
    _check(rule, name, value, isinstance(value, (int, float)) and 0 <= value < 1, "a number in [0, 1)")
    return float(value)


def _positive(rule: str, name: str, value) -> float:
    _check(rule, name, value, isinstance(value, (int, float)) and value > 0, "a finite number > 0")
    return float(value)


@dataclass(frozen=True)
class SGD(UpdateRule):
    """u = g: the step is α·ĝ, today's rule (applied as seeds and coefficients, no state)."""

    kind: ClassVar[str] = "sgd"

    def update(self, g, state, param, ctx):
        return g


@dataclass(frozen=True)
class Momentum(UpdateRule):
    """Heavy-ball momentum v ← μ·v + g, u = v; Nesterov: u = g + μ·v (module table)."""

    mu: float = 0.9
    nesterov: bool = False
    kind: ClassVar[str] = "momentum"

    def __post_init__(self) -> None:
        object.__setattr__(self, "mu", _unit("momentum", "mu", self.mu))
        if not isinstance(self.nesterov, bool):
            raise ValueError(f"momentum: nesterov must be true or false, got {self.nesterov!r}")

    def init(self, param):
        return {"v": torch.zeros_like(param, dtype=torch.float32)}

    def update(self, g, state, param, ctx):
        v = state["v"].mul_(self.mu).add_(g)
        return g + v * self.mu if self.nesterov else v


@dataclass(frozen=True)
class Adam(UpdateRule):
    """Adam on ĝ (Kingma & Ba 2015; OpenAI-ES used it on the ES gradient): bias-corrected first
    and second moments, u = m̂/(√ŝ + ε) (module table)."""

    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-8
    kind: ClassVar[str] = "adam"

    def __post_init__(self) -> None:
        object.__setattr__(self, "b1", _unit("adam", "b1", self.b1))
        object.__setattr__(self, "b2", _unit("adam", "b2", self.b2))
        object.__setattr__(self, "eps", _positive("adam", "eps", self.eps))

    def init(self, param):
        return {"m": torch.zeros_like(param, dtype=torch.float32), "s": torch.zeros_like(param, dtype=torch.float32)}

    def update(self, g, state, param, ctx):
        t = ctx.step + 1
        m = state["m"].mul_(self.b1).add_(g * (1.0 - self.b1))
        s = state["s"].mul_(self.b2).add_(g * g * (1.0 - self.b2))
        return (m / (1.0 - self.b1 ** t)) / ((s / (1.0 - self.b2 ** t)).sqrt_() + self.eps)


@dataclass(frozen=True)
class RMSProp(UpdateRule):
    """RMSProp (Tieleman & Hinton 2012): s ← ρ·s + (1−ρ)·g², u = g/(√s + ε), no bias correction."""

    decay: float = 0.9
    eps: float = 1e-8
    kind: ClassVar[str] = "rmsprop"

    def __post_init__(self) -> None:
        object.__setattr__(self, "decay", _unit("rmsprop", "decay", self.decay))
        object.__setattr__(self, "eps", _positive("rmsprop", "eps", self.eps))

    def init(self, param):
        return {"s": torch.zeros_like(param, dtype=torch.float32)}

    def update(self, g, state, param, ctx):
        s = state["s"].mul_(self.decay).add_(g * g * (1.0 - self.decay))
        return g / (s.sqrt() + self.eps)


@dataclass(frozen=True)
class WeightDecay(UpdateRule):
    """Decoupled weight decay u = g − λ·(θ − θ₀): towards the weights of the run's first step
    (``"base"``, state θ₀) or towards zero (``"zero"``, no state)."""

    rate: float = 0.0
    towards: str = "base"
    kind: ClassVar[str] = "weight_decay"

    def __post_init__(self) -> None:
        _check("weight_decay", "rate", self.rate, isinstance(self.rate, (int, float)) and self.rate >= 0,
               "a finite number ≥ 0")
        object.__setattr__(self, "rate", float(self.rate))
        if self.towards not in DECAY_TOWARDS:
            raise ValueError(f"weight_decay: towards must be one of {', '.join(DECAY_TOWARDS)}, got {self.towards!r}")

    def init(self, param):
        return {"base": param.detach().to(torch.float32, copy=True)} if self.towards == "base" else {}

    def update(self, g, state, param, ctx):
        if self.rate == 0.0:
            return g
        pull = param - state["base"] if self.towards == "base" else param
        return g - pull * self.rate


@dataclass(frozen=True)
class ClipByNorm(UpdateRule):
    """u = g·min(1, c/‖g‖₂), ‖g‖₂ = ctx.norm over every moved weight (a zero g stays zero)."""

    max_norm: float = 1.0
    kind: ClassVar[str] = "clip_by_norm"
    needs_norm: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_norm", _positive("clip_by_norm", "max_norm", self.max_norm))

    def factor(self, norm: float) -> float:
        """min(1, c/‖g‖) (1 for a zero norm)."""
        return 1.0 if norm <= self.max_norm else self.max_norm / norm

    def update(self, g, state, param, ctx):
        if ctx.norm is None:
            raise ValueError("clip_by_norm needs ‖ĝ‖ (ctx.norm): the engine computes it for a rule that comes first")
        f = self.factor(ctx.norm)
        return g if f == 1.0 else g * f


@dataclass(frozen=True)
class Scale(UpdateRule):
    """u = α·g (optax's ``scale``; the ES shell appends ``scale(lr)`` to every rule)."""

    factor: float = 1.0
    kind: ClassVar[str] = "scale"

    def __post_init__(self) -> None:
        _check("scale", "factor", self.factor, True, "a finite number")
        object.__setattr__(self, "factor", float(self.factor))

    def update(self, g, state, param, ctx):
        return g * self.factor


# -- optax-style constructors ------------------------------------------------------------------------
def sgd() -> SGD:
    """u = g (the default: θ ← θ + α·ĝ)."""
    return SGD()


def momentum(mu: float = 0.9, nesterov: bool = False) -> Momentum:
    """Heavy-ball momentum v ← μ·v + g (Nesterov: u = g + μ·v)."""
    return Momentum(mu, nesterov)


def adam(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> Adam:
    """Adam's bias-corrected m̂/(√ŝ + ε)."""
    return Adam(b1, b2, eps)


def rmsprop(decay: float = 0.9, eps: float = 1e-8) -> RMSProp:
    """g/(√s + ε) with s the running mean of g²."""
    return RMSProp(decay, eps)


def weight_decay(rate: float, towards: str = "base") -> WeightDecay:
    """u = g − λ·(θ − θ₀) (``towards="base"``) or g − λ·θ (``"zero"``)."""
    return WeightDecay(rate, towards)


def clip_by_norm(max_norm: float) -> ClipByNorm:
    """ĝ scaled down to global norm ``max_norm`` when longer (first in a chain)."""
    return ClipByNorm(max_norm)


def scale(factor: float) -> Scale:
    """u = factor·g."""
    return Scale(factor)


__all__ = ["SGD", "Momentum", "Adam", "RMSProp", "WeightDecay", "ClipByNorm", "Scale", "sgd", "momentum", "adam",
           "rmsprop", "weight_decay", "clip_by_norm", "scale", "DECAY_TOWARDS", "StepContext"]
