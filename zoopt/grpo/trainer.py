"""``GRPO``: group-relative policy optimisation on the same engine, objectives and sampling as ES.

One step (TRL's defaults: one optimizer step per generation batch, ``num_iterations = 1``):

1. draw ``prompts_per_step`` training rows with :func:`zoopt.objective.step_indices` (from
   ``(seed, step)`` alone, as ES does);
2. rollouts: ``engine.generate(prompts, sampling)`` with ``sampling.n = G`` completions per
   prompt (the group) and a sampling seed from ``(seed, step)``; score them with a
   :class:`zoopt.rewards.scoring.Scorer` (the same guard, TRL-shaped inputs and ``reward_errors`` as ES);
3. advantages :func:`~zoopt.grpo.advantages.group_advantages` (``scale_rewards``);
4. ``num_iterations`` times: the loss of :mod:`zoopt.grpo.loss` over the whole batch —
   micro-batches of ``micro_batch_size`` sequences, each backpropagating its exact share, so
   the accumulated gradient is the full-batch gradient — then gradient clipping to
   ``max_grad_norm`` and one AdamW step on the policy (the engine's transformers module);
5. ``sync_weights(engine, policy)``: the rollout engine takes the new weights
   (:mod:`zoopt.grpo.policy`).  For ``HFEngine`` the policy *is* the engine's module, and the
   hook re-reads it into the ES master copy (``engine.sync_master()``), so ES
   ``perturb``/``restore``/``apply`` start from the GRPO weights (schedules mix the two).  For
   ``VLLMEngine`` the policy is a separate fp32 transformers model built from the engine's
   master, and the hook loads its weights into the vLLM workers (``engine.load_weights``).

With a separate policy the rollouts also return the sampler's log-probs, and the first
iteration of each step logs how far they are from the policy's own log-probs of the same
tokens (``sampler_logp_gap_mean``/``_max``, over completion tokens): the two must describe one
model, so a large gap means the sync or the sampler is off (TRL logs the same gap for vLLM).

Log-probs are of softmax(logits / T) with the sampling temperature T (TRL's convention), with
the prompt left-padded and the completion right-padded, positions from the attention mask,
exactly as ``HFEngine`` decodes.  Weights train in fp32 (``autocast_bf16`` runs the forward
under bf16 autocast); ``gradient_checkpointing`` trades compute for activation memory.

``share_prompt``: the G sequences of a group share their prompt, so the prompt is run forward
(and backward) once per group, its keys and values repeated G times for the completions
(``cache.batch_repeat_interleave``): the same log-probs and gradient up to float rounding
(~1e-6 relative), with a micro-batch of ``max(1, micro_batch_size // G)`` whole groups.  On a
CPU, where the forward and backward are bound by arithmetic, it pays when prompts are long
against completions (31 prompt and ≤ 8 completion tokens: 3.3× fewer tokens; docs/grpo.md).

:meth:`GRPO.state_dict` / :meth:`GRPO.load_state_dict`: the policy's weights, AdamW's state and
the step count — everything a step depends on besides ``(seed, step)`` — so a run continued
from a saved state is, on the same machine, the run that was never stopped, bit for bit.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from ..config import ConfigError
from ..engines.base import Sampling
from ..hparams import GRPOConfig, from_dict, to_dict
from ..objective import step_indices
from ..rewards.scoring import Scorer
from .advantages import group_advantages, group_std_is_zero
from .loss import grpo_loss, token_logps, token_weights
from .policy import policy_for, sync_same_module


@dataclass
class Batch:
    """One generation batch, in the order ``[prompt 0 × G, prompt 1 × G, ...]``."""

    input_ids: torch.Tensor        # (B, P + C): left-padded prompt ‖ right-padded completion
    attention_mask: torch.Tensor   # (B, P + C)
    completion_mask: torch.Tensor  # (B, C)
    advantages: torch.Tensor       # (B,)
    rewards: list
    prompt_width: int
    info: dict = field(default_factory=dict)
    old_logps: torch.Tensor | None = None
    ref_logps: torch.Tensor | None = None
    sampler_logps: torch.Tensor | None = None  # (B, C) the rollout engine's, when it is not the policy

    @property
    def size(self) -> int:
        return self.input_ids.shape[0]


class GRPO:
    """GRPO on ``engine`` (``generate``, ``encode``, ``restore``; a ``module`` to train, or
    ``load_weights``/``state_dict`` for a separate policy, see :mod:`zoopt.grpo.policy`) and
    ``objective`` (TRL reward signature + ``dataset``).  ``policy``/``sync_weights`` override
    :func:`~zoopt.grpo.policy.policy_for`'s choice.  ``hparams`` are the keys of
    :attr:`zoopt.hparams.GRPOConfig.TRAINER_KEYS` (``lr=1e-5``, ``loss_type="grpo"``, ...): their
    defaults and rules are :class:`~zoopt.hparams.GRPOConfig`'s (TRL 1.16's ``GRPOConfig``
    defaults; table in docs/configuration.md), and a bad value raises
    :class:`~zoopt.config.ConfigError` naming the key.
    """

    def __init__(self, engine, objective, sampling: Sampling, *, policy: torch.nn.Module | None = None,
                 sync_weights: Callable[[object, torch.nn.Module], None] | None = None, **hparams) -> None:
        unknown = sorted(set(hparams) - set(GRPOConfig.TRAINER_KEYS))
        if unknown:
            raise TypeError(f"GRPO() got an unexpected keyword argument {unknown[0]!r} "
                            f"(hyper-parameters: {', '.join(GRPOConfig.TRAINER_KEYS)})")
        hp = self.hparams = GRPOConfig(**hparams)  # validates every value
        if sampling.greedy:
            raise ValueError("sampling.temperature must be > 0 for GRPO: greedy samples of a group are identical")
        if sampling.n < 2:
            raise ValueError(f"sampling.n (the group size) must be ≥ 2 for GRPO, got {sampling.n}")

        self.engine, self.objective, self.sampling = engine, objective, sampling
        if policy is None:
            policy, default_sync = policy_for(engine)
            sync_weights = sync_weights or default_sync
        self.policy, sync_weights = policy, sync_weights or sync_same_module
        self.separate_policy = policy is not engine.module
        if any(p.dtype != torch.float32 for p in self.policy.parameters() if p.requires_grad):  # adapter space: a frozen base may be int8
            raise ValueError("GRPO trains fp32 weights: load the model with dtype=float32 "
                             "(autocast_bf16=true gives bf16 compute)")
        self.prompts_per_step, self.loss_type = hp.prompts_per_step, hp.loss_type
        self.epsilon, self.epsilon_high, self.beta = hp.epsilon, hp.epsilon_high, hp.beta
        self.scale_rewards, self.num_iterations = hp.scale_rewards, hp.num_iterations
        self.micro_batch_size, self.autocast_bf16 = hp.micro_batch_size, hp.autocast_bf16
        self.max_grad_norm = hp.max_grad_norm or None
        self.seed, self.reward_timeout_s, self.sync_weights = hp.seed, hp.reward_timeout_s, sync_weights
        self.step_count = 0
        self.gradient_checkpointing, self.share_prompt = hp.gradient_checkpointing, hp.share_prompt
        if self.share_prompt and self.gradient_checkpointing:  # transformers turns the cache off under checkpointing
            raise ValueError("share_prompt needs the prompt's key/value cache: turn gradient_checkpointing off")
        if self.gradient_checkpointing:
            enable = getattr(self.policy, "activation_checkpointing_enable", None)  # transformers ≥ 5.2x
            if enable is not None:
                enable(activation_checkpointing_kwargs={"use_reentrant": False})
            else:
                self.policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
            for m in self.policy.modules():  # checkpointing needs train mode; keep the forward deterministic
                if isinstance(m, torch.nn.Dropout):
                    m.p = 0.0
        self.ref = None
        if self.beta != 0.0:  # the frozen reference: the policy as GRPO found it
            self.ref = copy.deepcopy(self.policy).eval().requires_grad_(False)
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=hp.lr, betas=hp.adam_betas, eps=hp.adam_eps,
                                           weight_decay=hp.weight_decay)
        self.train_data = objective.dataset("train")
        self.columns = [c for c in self.train_data.column_names if c != "prompt"]
        self.scorer = Scorer(objective, engine, timeout_s=hp.reward_timeout_s, reward_errors=hp.reward_errors)

    @classmethod
    def from_config(cls, cfg: dict, engine, objective) -> "GRPO":
        """Build from a ``grpo`` config dict (:class:`~zoopt.hparams.GRPOConfig`'s keys, every value checked)."""
        hp = from_dict(GRPOConfig, cfg)
        try:
            return cls(engine, objective, Sampling(**to_dict(hp.sampling)), **hp.trainer_kwargs())
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    # -- rollouts --------------------------------------------------------------------------
    def rollout(self, step: int | None = None) -> Batch:
        """Generate, score and build the batch of ``step`` (default: the next step)."""
        step = self.step_count if step is None else step
        rows = self.train_data.select(step_indices(len(self.train_data), self.seed, step,
                                                   self.prompts_per_step).tolist())
        prompts, G = list(rows["prompt"]), self.sampling.n
        seed = int(np.random.SeedSequence([self.seed, int(step), 0x6790]).generate_state(1)[0])
        self.engine.restore()
        t0 = time.perf_counter()
        completions = self.engine.generate(prompts, Sampling(**{**self.sampling.__dict__, "seed": seed,
                                                                "logprobs": self.separate_policy}))
        t1 = time.perf_counter()
        flat = [c for per_prompt in completions for c in per_prompt]
        columns = {c: [v for v in rows[c] for _ in range(G)] for c in self.columns}
        self.scorer.start()
        result = self.scorer.score([p for p in prompts for _ in range(G)], [c.text for c in flat], columns)
        self.scorer.finish(f"GRPO step {step}")
        t2 = time.perf_counter()
        batch = self._collate([self.engine.encode(p) for p in prompts for _ in range(G)],
                              [c.token_ids for c in flat], result.rewards)
        if self.separate_policy and all(c.logprobs is not None for c in flat):
            batch.sampler_logps = torch.zeros(batch.completion_mask.shape)
            for b, c in enumerate(flat):
                batch.sampler_logps[b, :len(c.logprobs)] = torch.tensor(c.logprobs)
        valid = [r for r in result.rewards if r is not None]
        batch.info = {"completions": len(flat), "tokens": int(batch.completion_mask.sum()),
                      "reward_mean": float(np.mean(valid)) if valid else None,
                      "reward_std": float(np.std(valid, ddof=1)) if len(valid) > 1 else None,
                      "frac_reward_zero_std": group_std_is_zero(result.rewards, G),
                      "reward_failed": result.failed, "reward_timed_out": result.timed_out,
                      "reward_skipped": result.skipped, **self.scorer.reward_metrics(),
                      "time_generate_s": t1 - t0, "time_score_s": t2 - t1}
        return batch

    def _collate(self, prompt_ids: list[list[int]], completion_ids: list[list[int]], rewards: list) -> Batch:
        pad = self.engine.pad_id
        P, C, B = max(map(len, prompt_ids)), max(map(len, completion_ids)), len(prompt_ids)
        ids = torch.full((B, P + C), pad, dtype=torch.long)
        attn = torch.zeros((B, P + C), dtype=torch.long)
        for b, (p, c) in enumerate(zip(prompt_ids, completion_ids)):
            ids[b, P - len(p):P], attn[b, P - len(p):P] = torch.tensor(p), 1
            ids[b, P:P + len(c)], attn[b, P:P + len(c)] = torch.tensor(c), 1
        adv = group_advantages(rewards, self.sampling.n, self.scale_rewards).float()
        return Batch(ids, attn, attn[:, P:].clone(), adv, list(rewards), P)

    # -- the loss --------------------------------------------------------------------------
    def _logps(self, model, batch: Batch, sl: slice) -> tuple[torch.Tensor, torch.Tensor]:
        ids, attn = batch.input_ids[sl], batch.attention_mask[sl]
        device = next(model.parameters()).device
        ids, attn = ids.to(device), attn.to(device)
        P = batch.prompt_width
        C = ids.shape[1] - P
        positions = (attn.cumsum(-1) - 1).clamp_(min=0)
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=self.autocast_bf16):
            if self.share_prompt:
                logits = self._shared_prompt_logits(model, ids, attn, positions, P)
            else:
                logits = model(input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False,
                               logits_to_keep=C + 1).logits[:, :-1]
        return token_logps(logits, ids[:, P:], self.sampling.temperature)

    def _shared_prompt_logits(self, model, ids, attn, positions, P: int) -> torch.Tensor:
        """The logits that predict each completion token, with each group's prompt run once:
        the prompt's last logits (the first completion token's) ‖ the completion's own but its last."""
        G = self.sampling.n
        prompts = ids[:, :P].view(-1, G, P)
        if not torch.equal(prompts, prompts[:, :1].expand_as(prompts)):
            raise RuntimeError("share_prompt: a micro-batch is not made of whole groups of one prompt")
        head = model(input_ids=ids[::G, :P], attention_mask=attn[::G, :P], position_ids=positions[::G, :P],
                     use_cache=True, logits_to_keep=1)
        cache = head.cache
        cache.batch_repeat_interleave(G)
        tail = model(input_ids=ids[:, P:], attention_mask=attn, position_ids=positions[:, P:], cache=cache,
                     use_cache=True).logits
        return torch.cat([head.logits.repeat_interleave(G, dim=0), tail[:, :-1]], dim=1)

    def _slices(self, batch: Batch) -> list[slice]:
        size = self.micro_batch_size
        if self.share_prompt:  # whole groups
            size = max(1, size // self.sampling.n) * self.sampling.n
        return [slice(s, min(s + size, batch.size)) for s in range(0, batch.size, size)]

    @torch.no_grad()
    def _fixed_logps(self, model, batch: Batch) -> torch.Tensor:
        return torch.cat([self._logps(model, batch, sl)[0].cpu() for sl in self._slices(batch)])

    def backward(self, batch: Batch, sampler_gap: bool = False) -> dict:
        """Zero the gradients and accumulate ∇ of the full-batch loss over micro-batches.

        ``sampler_gap``: also measure |policy log-prob − sampler log-prob| per completion token
        (``gap_sum``, ``gap_max``; needs ``batch.sampler_logps``)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.policy.train(self.gradient_checkpointing)
        weights = token_weights(batch.completion_mask, self.loss_type, self.sampling.max_new_tokens)
        stats = {"loss": 0.0, "tokens": 0, "kl_sum": 0.0, "low": 0, "high": 0, "entropy_sum": 0.0,
                 "gap_sum": 0.0, "gap_max": 0.0}
        try:
            for sl in self._slices(batch):
                logps, entropy = self._logps(self.policy, batch, sl)
                dev = logps.device
                mask = batch.completion_mask[sl].to(dev)
                out = grpo_loss(logps, batch.old_logps[sl].to(dev) if batch.old_logps is not None else logps.detach(),
                                batch.advantages[sl].to(dev), mask, loss_type=self.loss_type,
                                epsilon=self.epsilon, epsilon_high=self.epsilon_high, beta=self.beta,
                                ref_logps=batch.ref_logps[sl].to(dev) if batch.ref_logps is not None else None,
                                weights=weights[sl].to(dev))
                out.loss.backward()
                stats["loss"] += float(out.loss.detach())
                stats["tokens"] += out.tokens
                stats["kl_sum"] += out.kl_sum
                stats["low"] += out.low_clipped
                stats["high"] += out.high_clipped
                stats["entropy_sum"] += float((entropy.detach() * mask).sum())
                if sampler_gap and batch.sampler_logps is not None:
                    gap = (logps.detach() - batch.sampler_logps[sl].to(dev)).abs() * mask
                    stats["gap_sum"] += float(gap.sum())
                    stats["gap_max"] = max(stats["gap_max"], float(gap.max()))
        finally:
            self.policy.eval()
        return stats

    def train_on(self, batch: Batch) -> dict:
        """``num_iterations`` optimizer steps on ``batch``; the averaged loss statistics."""
        if self.beta != 0.0 and batch.ref_logps is None:
            batch.ref_logps = self._fixed_logps(self.ref, batch)
        if self.num_iterations > 1 and batch.old_logps is None:  # π_old: the policy that sampled
            batch.old_logps = self._fixed_logps(self.policy, batch)
        totals: dict[str, float] = {}
        gap = None
        for iteration in range(self.num_iterations):
            stats = self.backward(batch, sampler_gap=iteration == 0)
            if iteration == 0 and batch.sampler_logps is not None:  # the weights that sampled
                gap = (stats["gap_sum"] / max(stats["tokens"], 1), stats["gap_max"])
            limit = self.max_grad_norm if self.max_grad_norm is not None else math.inf
            stats["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(self.params, limit))
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + value / self.num_iterations
        t_sync = time.perf_counter()
        self.sync_weights(self.engine, self.policy)
        totals["time_sync_s"] = round(time.perf_counter() - t_sync, 4)
        n = max(totals["tokens"], 1.0)
        return {"loss": totals["loss"], "kl": totals["kl_sum"] / n if self.beta != 0.0 else None,
                "clip_ratio_low": totals["low"] / n, "clip_ratio_high": totals["high"] / n,
                "clip_ratio_region": (totals["low"] + totals["high"]) / n,
                "entropy": totals["entropy_sum"] / n, "grad_norm": totals["grad_norm"],
                "sampler_logp_gap_mean": None if gap is None else gap[0],
                "sampler_logp_gap_max": None if gap is None else gap[1], "time_sync_s": totals["time_sync_s"]}

    # -- state -----------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``{"step_count", "policy", "optimizer"}``: the policy's parameters (copies, on the CPU)
        and AdamW's state — with ``(seed, step)``, all that the next step depends on."""
        return {"step_count": self.step_count,
                "policy": {name: p.detach().cpu().clone() for name, p in self.policy.named_parameters()},
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from :meth:`state_dict`'s ``state``: the policy's weights, AdamW's state and
        the step count; the rollout engine takes the weights (``sync_weights``)."""
        params = dict(self.policy.named_parameters())
        if set(params) != set(state["policy"]):
            missing = sorted(set(params) ^ set(state["policy"]))
            raise ValueError(f"the saved GRPO state does not fit this policy: parameter {missing[0]!r}")
        with torch.no_grad():
            for name, tensor in state["policy"].items():
                params[name].copy_(tensor)
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_count = int(state["step_count"])
        self.sync_weights(self.engine, self.policy)

    def step(self) -> dict:
        """One GRPO step (rollout, score, ``num_iterations`` AdamW steps, sync); its metrics."""
        t0 = time.perf_counter()
        batch = self.rollout()
        t1 = time.perf_counter()
        record = {"step": self.step_count, **{k: v for k, v in batch.info.items() if not k.startswith("time_")}}
        record.update(self.train_on(batch))
        t2 = time.perf_counter()
        record.update(lr=self.optimizer.param_groups[0]["lr"], optimizer_steps=self.num_iterations,
                      time_generate_s=round(batch.info["time_generate_s"], 4),
                      time_score_s=round(batch.info["time_score_s"], 4), time_train_s=round(t2 - t1, 4),
                      time_step_s=round(t2 - t0, 4))
        self.step_count += 1
        return record
