"""Engines own the weights (and, for LLM engines, the rollouts); see :mod:`zoopt.engines.base`."""

from .base import Completion, Engine, GenerationStats, Sampling, WeightsEngine
from .module import ModuleEngine
from .weights import MasterWeights

__all__ = ["Engine", "WeightsEngine", "ModuleEngine", "MasterWeights", "HFEngine", "Sampling", "Completion",
           "GenerationStats"]


def __getattr__(name: str):
    if name == "HFEngine":  # imported lazily: transformers is heavy
        from .hf import HFEngine

        return HFEngine
    raise AttributeError(name)
