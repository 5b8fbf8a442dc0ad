"""The generic ES loop over any ``torch.nn.Module`` and a Python fitness function."""

from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..engines.module import ModuleEngine
from ..es import ES


def optimize(module: torch.nn.Module, fitness: Callable[[torch.nn.Module], float], es: ES,
             steps: int, engine: ModuleEngine | None = None, eval_center: bool = True) -> list[dict]:
    """Run ``steps`` ES steps on ``module`` in place, maximising ``fitness(module)``.

    Each step: ask → ``engine.evaluate_population`` (each member perturbed, scored, restored)
    → tell → apply.  Returns one record
    per step: ``step``, ``reward_mean``, ``reward_max``, ``update_norm`` (√Σc²) and, with
    ``eval_center``, ``fitness`` of the updated weights.
    """
    engine = engine or ModuleEngine(module)
    history: list[dict] = []
    for _ in range(steps):
        population = es.ask()
        rewards = np.asarray(engine.evaluate_population(es.noise, population, lambda i: float(fitness(module))))
        update = es.tell(rewards)
        engine.apply(es.noise, update)
        record = {"step": population.step, "reward_mean": float(np.mean(rewards)),
                  "reward_max": float(np.max(rewards)),
                  "update_norm": float(np.sqrt(sum(c * c for c in update.coefficients)))}
        if eval_center:
            record["fitness"] = float(fitness(module))
        history.append(record)
    return history
