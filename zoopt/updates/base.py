"""The update-rule contract: what turns the estimated gradient ĝ into a step, per tensor.

In the spirit of optax's ``GradientTransformation`` (``init`` + ``update``, composed by
``chain``), but shaped by where ĝ exists in zoopt: an estimator returns ĝ = Σᵢ cᵢ·ε(seedᵢ) as
seeds and coefficients, and ĝ becomes a dense tensor only inside an engine's ``apply``, one
tensor (or one row block of it) at a time, beside the fp32 master.  So a rule is applied **per
tensor, where the master lives** (the HF module, each vLLM worker, each Ray replica):

- ``init(param)`` → the rule's state of one tensor at a run's first step: fp32 tensors shaped
  like ``param`` (the master before that step), e.g. a momentum buffer of zeros;
- ``update(g, state, param, ctx)`` → the step ``u`` this rule makes of ``g`` (ĝ, or what the
  previous link of a chain made of it), updating ``state`` in place; the master then takes
  ``θ ← θ + u``.  ``param`` is the master before the step; ``ctx`` holds the rule's step ``t``
  (0-based: adam's bias correction uses ``t + 1``) and, for a rule that asks for it
  (:attr:`UpdateRule.needs_norm`), the global norm ‖ĝ‖₂ over every moved weight.

**Elementwise, fp32, deterministic.**  ``update`` may only combine its arguments element by
element with single-rounding operations (``+ − × ÷ √`` of tensors and Python scalars; the
scalars round to fp32), never with fused ones (``add_(x, alpha=…)``, ``addcmul``, ``lerp``,
whose vectorised and scalar paths may round differently).  Then a tensor split into pieces
(vLLM's fused and tensor-parallel parameters), a tensor cut into row blocks and the whole tensor
give the same bits, so every engine ends bit-identical.  ``update`` must not write to ``g`` or
``param``; it may return ``g`` or a state tensor (callers only read the result).

**State is a function of the seed log.**  The engine keeps the state of the run's rule and the
step it is at; step 0 starts it afresh (``init``), and step t > 0 must follow step t − 1 with
the same rule (:mod:`zoopt.engines.rule_state`).  Replaying a run's updates from its first step
therefore rebuilds the state exactly: ``zoopt export``, ``--resume`` and a Ray replica that
rejoins all do.

A rule is a frozen, picklable dataclass; :meth:`UpdateRule.to_dict` / ``rule_from_dict``
carry it in a seed log's header and to vLLM workers (:mod:`zoopt.updates.compose`, with
:func:`~zoopt.updates.compose.chain`).  The rules themselves are in :mod:`zoopt.updates.rules`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import ClassVar

import torch


@dataclass(frozen=True)
class StepContext:
    """What every tensor of one step shares: the rule's step ``t`` (0-based) and, when the rule
    asks for it, ``norm`` = ‖ĝ‖₂ over every moved weight (else None)."""

    step: int
    norm: float | None = None


@dataclass(frozen=True)
class UpdateRule:
    """Base class of the update rules (see the module docstring for the contract).

    ``kind`` is the rule's registered name (:data:`zoopt.registry.UPDATE_RULES`), by which
    ``rule_from_dict`` rebuilds it; ``needs_norm``: the engine computes ‖ĝ‖₂ over every moved
    weight in a first pass and hands it over in ``ctx.norm`` (such a rule must come first in a
    chain, where its input is ĝ itself).
    """

    kind: ClassVar[str] = "rule"
    needs_norm: ClassVar[bool] = False

    def init(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        """The state of one tensor at the run's first step (default: none)."""
        return {}

    def update(self, g: torch.Tensor, state: dict[str, torch.Tensor], param: torch.Tensor,
               ctx: StepContext) -> torch.Tensor:
        """The step ``u`` made of ``g``; ``θ ← θ + u`` (see the module docstring)."""
        raise NotImplementedError

    @property
    def links(self) -> tuple["UpdateRule", ...]:
        """The rules applied in order: a chain's, or this rule alone."""
        return (self,)

    @property
    def label(self) -> str:
        """The kinds of its links joined by ``+`` (``clip_by_norm+adam``), for logs."""
        return "+".join(r.kind for r in self.links) or "sgd"

    def state_bytes_per_param(self) -> int:
        """Bytes of state this rule keeps per moved weight (fp32 buffers: 4 each)."""
        probe = torch.zeros(1)
        return sum(t.element_size() for t in self.init(probe).values())

    def to_dict(self) -> dict:
        """``{"kind": ..., **parameters}``: what ``rule_from_dict`` rebuilds it from (JSON-able)."""
        return {"kind": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)}}


@dataclass(frozen=True)
class Chain(UpdateRule):
    """Rules applied in order, each to what the previous one made: ``u = fₖ(…f₂(f₁(ĝ)))``.

    The state of link i is its own state under keys ``"i.name"``.  Build it with :func:`zoopt.updates.chain`,
    which flattens nested chains, drops ``sgd()`` (the identity) and checks that a rule that
    needs ‖ĝ‖ comes first.
    """

    rules: tuple[UpdateRule, ...] = ()
    kind: ClassVar[str] = "chain"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        for i, rule in enumerate(self.rules):
            if not isinstance(rule, UpdateRule) or isinstance(rule, Chain):
                raise TypeError(f"a Chain holds update rules other than chains (zoopt.updates.chain flattens), "
                                f"got {rule!r}")
            if rule.needs_norm and i > 0:
                raise ValueError(f"{rule.kind} acts on ĝ itself: put it first in the chain "
                                 f"(it is link {i + 1} of {', '.join(r.kind for r in self.rules)})")

    @property
    def needs_norm(self) -> bool:  # type: ignore[override]
        return any(r.needs_norm for r in self.rules)

    @property
    def links(self) -> tuple[UpdateRule, ...]:
        return self.rules

    def init(self, param: torch.Tensor) -> dict[str, torch.Tensor]:
        return {f"{i}.{k}": v for i, r in enumerate(self.rules) for k, v in r.init(param).items()}

    def update(self, g, state, param, ctx):
        u = g
        for i, r in enumerate(self.rules):
            prefix = f"{i}."
            own = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
            u = r.update(u, own, param, ctx)
        return u

    def to_dict(self) -> dict:
        return {"kind": self.kind, "rules": [r.to_dict() for r in self.rules]}


__all__ = ["UpdateRule", "Chain", "StepContext"]
