"""The small value types that cross every boundary in zoopt.

An ES run is *a base model plus a log of (seed, coefficient) pairs*.  A population member is
``θ + sign·σ·ε(seed)``; an update is ``θ ← θ + Σᵢ cᵢ·ε(seedᵢ)``.  These types carry exactly
that information and nothing else, so they are cheap to pickle, log and send to a worker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Member:
    """One population member: the weights ``θ + sign·σ·ε(seed)``."""

    seed: int
    sign: int = 1

    def __post_init__(self) -> None:
        if self.sign not in (1, -1):
            raise ValueError(f"Member.sign must be +1 or -1, got {self.sign!r}")


@dataclass(frozen=True)
class Population:
    """The members an estimator asked for at one step, all evaluated at perturbation scale σ."""

    step: int
    sigma: float
    members: tuple[Member, ...]

    def __len__(self) -> int:
        return len(self.members)

    def scale(self, i: int) -> float:
        """The signed scale ``sign·σ`` with which member ``i`` perturbs the weights."""
        return self.members[i].sign * self.sigma


@dataclass(frozen=True)
class Update:
    """A weight update ``θ ← θ + Σᵢ coefficients[i]·ε(seeds[i])`` (coefficients include α).

    ``seeds`` are unique; an antithetic pair contributes one seed whose coefficient already
    combines both signs.  ``info`` carries diagnostics (shaping stats, warnings) for logs.

    With an update ``rule`` (a :class:`zoopt.updates.UpdateRule`, α included as its last link),
    the coefficients are ĝ's, ĝ = Σᵢ cᵢ·ε(seedᵢ), and the step is ``θ ← θ + rule(ĝ)``, made per
    tensor by the engine with the rule's state at step ``rule_step`` (0-based; step 0 starts the
    state afresh).  ``rule=None`` (sgd, every update before rules existed) is the plain sum.
    """

    seeds: tuple[int, ...]
    coefficients: tuple[float, ...]
    info: dict = field(default_factory=dict, compare=False)
    rule: Any = None
    rule_step: int = 0

    def __post_init__(self) -> None:
        if len(self.seeds) != len(self.coefficients):
            raise ValueError(
                f"Update has {len(self.seeds)} seeds but {len(self.coefficients)} coefficients"
            )

    def scaled(self, factor: float) -> "Update":
        """The same direction with every coefficient multiplied by ``factor``."""
        return Update(self.seeds, tuple(float(c) * factor for c in self.coefficients), self.info, self.rule,
                      self.rule_step)

    def is_zero(self) -> bool:
        return all(c == 0.0 for c in self.coefficients)

    def to_dict(self) -> dict:
        """Seeds and coefficients, a seed-log record (the rule lives in the log's header)."""
        return {"seeds": [int(s) for s in self.seeds], "coefficients": [float(c) for c in self.coefficients]}

    @classmethod
    def from_dict(cls, d: dict) -> "Update":
        return cls(tuple(int(s) for s in d["seeds"]), tuple(float(c) for c in d["coefficients"]))


@dataclass
class RunResult:
    """What a training run returns (:func:`zoopt.workflows.loop.run_loop`, for ``train``,
    ``train_grpo`` and ``zoopt.fit``): its directory, the final weights' checksum,
    the steps done, the held-out evaluations before and after, each step's record, and whether a
    callback stopped it before ``steps`` (:mod:`zoopt.callbacks`)."""

    run_dir: Path
    checksum: str
    steps: int
    eval_before: dict | None = None
    eval_after: dict | None = None
    history: list[dict] = field(default_factory=list)
    stopped_early: bool = False
