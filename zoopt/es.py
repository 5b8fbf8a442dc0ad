"""The ES shell: step counter, seed stream, estimator, noise and learning rate.

    pop = es.ask()                    # members (seed, sign) at scale σ, same for every caller
    for i, m in enumerate(pop.members):
        engine.perturb(es.noise, m.seed, pop.scale(i)); rewards[i] = score(); engine.restore()
    update = es.tell(rewards)         # ĝ as (seeds, coefficients), with the step's rule
    engine.apply(es.noise, update)    # θ ← θ + rule(ĝ); sgd (default): θ ← θ + α·ĝ

The shell holds no weights: a run is reproduced from ``state_dict()`` plus the log of updates.
The update rule (``rule``: :mod:`zoopt.updates`) keeps its state in the engine, beside the
weights, as a function of the updates applied since the run's first step.
"""

from __future__ import annotations

from typing import Any, Sequence

from .hparams.keys import check_key
from .noise import Gaussian, Noise, noise_from_record
from .registry import ESTIMATORS, build
from .types import Population, Update
from .updates import UpdateRule, rule_from_dict, sgd, step_update


class ES:
    """Evolution strategies over seeded noise.

    Args:
        estimator: an estimator object, or a registered name (``"one_point"``, ``"two_point"``).
        noise: a :class:`~zoopt.noise.Noise` (default ``Gaussian()``).
        lr: α, multiplied into every update (paper: 2.5e-4).
        sigma: σ, the perturbation scale (paper: 1.5e-3).
        population_size: N members per step (paper: 32).
        seed: base seed; step t's member seeds depend only on (seed, t).
        rule: the update rule over ĝ (:mod:`zoopt.updates`: ``momentum()``, ``adam()``, a
            ``chain``); default ``sgd()``, θ ← θ + α·ĝ.

    A bad value is the one-line error of the config key of the same name (:func:`zoopt.hparams.check_key`).

    Defaults: the paper's recipe for 1.5 B models with long reasoning, σ=1.5e-3, α=2.5e-4, N=32
    ("Understanding Evolution Strategies for LLM Reasoning").  ``zoopt train``'s defaults
    (:class:`zoopt.hparams.TrainConfig`) differ on purpose: σ=5e-3, α=2.5e-3, N=16 are measured for
    the 135 M demo (README, "What make demo does"; docs/design.md), whose greedy 10-token answers do
    not move at σ ≤ 1.5e-3.  ``tests/test_es.py`` pins both sets and this text.
    """

    def __init__(self, estimator: Any = "one_point", noise: Noise | None = None, lr: float = 2.5e-4,
                 sigma: float = 1.5e-3, population_size: int = 32, seed: int = 0,
                 rule: UpdateRule | None = None) -> None:
        if isinstance(estimator, str):
            estimator = build(ESTIMATORS, estimator)
        # the rules of the config keys of the same names (one definition: zoopt.hparams)
        lr, sigma = check_key("lr", lr), check_key("sigma", sigma)
        population_size, seed = check_key("population_size", population_size), check_key("seed", seed)
        if rule is not None and not isinstance(rule, UpdateRule):
            raise TypeError(f"rule must be a zoopt.updates.UpdateRule (sgd(), momentum(), adam(), …), got {rule!r}")
        if rule is not None and rule_from_dict(rule.to_dict()) != rule:
            raise ValueError(f"rule {rule!r} does not round-trip through its dict: a seed log could not replay it "
                             f"(register its class in zoopt.registry.UPDATE_RULES under kind {rule.kind!r})")
        self.estimator = estimator
        self.rule = rule if rule is not None else sgd()
        self.noise = noise if noise is not None else Gaussian()
        self.lr = float(lr)
        self.sigma = float(sigma)
        self.population_size = population_size
        self.seed = seed
        self.step = 0
        self._population: Population | None = None
        # Validate the combination now (e.g. odd N for TwoPoint) rather than at the first ask.
        self.estimator.plan(0, population_size, self.sigma, seed)

    def ask(self) -> Population:
        """The population of the current step (asking twice gives the same population)."""
        if self._population is None or self._population.step != self.step:
            self._population = self.estimator.plan(self.step, self.population_size, self.sigma, self.seed)
        return self._population

    def tell(self, rewards: Sequence[float]) -> Update:
        """Turn the current population's rewards into this step's update and advance the step:
        α·ĝ for ``sgd``, else ĝ with ``chain(rule, scale(α))`` (:func:`zoopt.updates.step_update`)."""
        population = self.ask()
        update = step_update(self.rule, self.estimator.update(population, rewards), self.lr, self.step)
        update.info["step"] = self.step
        self.step += 1
        return update

    def state_dict(self) -> dict:
        return {"step": self.step, "seed": self.seed, "lr": self.lr, "sigma": self.sigma,
                "population_size": self.population_size, "noise": self.noise.to_dict(), "update": self.rule.to_dict()}

    def load_state_dict(self, state: dict) -> None:
        self.step = int(state["step"])
        self.seed = int(state["seed"])
        self.lr = float(state["lr"])
        self.sigma = float(state["sigma"])
        self.population_size = int(state["population_size"])
        self.noise = noise_from_record(state["noise"])  # a state that names no stream: the numpy one
        self.rule = rule_from_dict(state.get("update", {"kind": "sgd"}))  # a state without one: sgd
        self._population = None
