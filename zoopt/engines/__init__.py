"""Engines own the weights (and, for LLM engines, the rollouts)."""

from .module import ModuleEngine

__all__ = ["ModuleEngine", "HFEngine"]


def __getattr__(name: str):
    if name == "HFEngine":  # imported lazily: transformers is heavy
        from .hf import HFEngine

        return HFEngine
    raise AttributeError(name)
