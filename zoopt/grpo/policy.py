"""Which module GRPO trains, and how the rollout engine gets its weights after each step.

GRPO needs a transformers module to backpropagate through; the rollout engine may or may not
be one.

- **An engine with a ``module``** (``HFEngine``): the policy *is* that module, so training
  changes the rollout weights directly; the sync hook only refreshes the engine's fp32 master
  (:func:`sync_same_module`), so ES phases after GRPO perturb the trained weights.
- **An engine without one** (``VLLMEngine``): the policy is a separate fp32 transformers model
  of the engine's architecture (``engine.model_dir``), on ``engine.device``, whose weights are
  set from the engine's current fp32 master (``engine.state_dict()``: the base model, or what
  earlier ES phases made of it).  After each optimizer step :func:`sync_to_engine` pushes
  ``policy.named_parameters()`` into the engine with ``engine.load_weights`` (vLLM's own
  loader in every worker; the engine then takes them as its new master and resets the prefix
  cache).  Rollouts therefore always come from the weights just trained, as in TRL's
  ``use_vllm`` mode.  Tied parameters appear once in ``named_parameters()``, under the name
  vLLM's loader expects.

On a GPU the policy, its gradients and AdamW's two moments (≈ 16 bytes a parameter) live beside
vLLM's memory pool: lower ``engine_args.gpu_memory_utilization`` to leave them room.
"""

from __future__ import annotations

from typing import Callable

import torch

from ..engines.base import Engine


def sync_same_module(engine: Engine, policy) -> None:
    """The ``sync_weights`` hook when the policy is the engine's module: refresh its master."""
    if engine.module is not policy:
        raise RuntimeError("the policy is not the engine's module: pass a sync_weights hook that loads it")
    engine.sync_master()


def sync_to_engine(engine: Engine, policy: torch.nn.Module) -> None:
    """The ``sync_weights`` hook for a separate policy: ``engine.load_weights(policy's parameters)``."""
    engine.load_weights(policy.named_parameters())


def separate_policy(engine: Engine) -> torch.nn.Module:
    """An fp32 transformers model of ``engine``'s architecture holding the engine's master weights.

    Raises when the engine's HF names do not cover the model's parameters exactly.
    """
    from ..models import load_model

    policy, _ = load_model(str(engine.model_dir), dtype=torch.float32, device=str(engine.device))
    state = engine.state_dict()
    names = [n for n, _ in policy.named_parameters()]
    if set(names) != set(state):
        missing, extra = sorted(set(names) - set(state)), sorted(set(state) - set(names))
        raise RuntimeError(f"engine weights do not match the policy: missing {missing[:3]}, unexpected {extra[:3]}")
    with torch.no_grad():
        params = dict(policy.named_parameters())
        for name, tensor in state.items():
            params[name].copy_(tensor)
    return policy.requires_grad_(True)


def policy_for(engine: Engine) -> tuple[torch.nn.Module, Callable[[Engine, torch.nn.Module], None]]:
    """``(policy, sync_weights)`` for GRPO on ``engine`` (see the module docstring).

    An engine with neither a ``module`` nor a ``model_dir`` is a one-line ``TypeError``; one
    whose ``state_dict``/``load_weights`` are the base class's defaults raises their
    ``NotImplementedError`` here, before any training step."""
    if engine.module is not None:
        return engine.module, sync_same_module
    if engine.model_dir is None:
        raise TypeError(f"{type(engine).__name__} has no module to train and no model_dir to build a separate "
                        f"policy from")
    return separate_policy(engine), sync_to_engine


__all__ = ["policy_for", "separate_policy", "sync_same_module", "sync_to_engine"]
