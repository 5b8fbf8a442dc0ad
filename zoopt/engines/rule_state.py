"""An update rule applied beside the fp32 master: ``θ ← θ + rule(ĝ)``, per tensor, with its state.

:meth:`MasterWeights.apply <zoopt.engines.weights.MasterWeights.apply>` hands an update that
carries a rule (:class:`zoopt.types.Update`, ``rule`` set: the coefficients are ĝ's) to
:func:`apply_rule`, so every engine built on the weights core — ``ModuleEngine``/``HFEngine``
(the batched low-rank population included: it applies through the same core), each vLLM worker,
each Ray replica's inner engine — runs the same code:

1. **Where ĝ exists.**  ĝ of a tensor is ``noise.combine_rows(seeds, coefficients)`` — the
   blocks of rows that a plain apply adds (dense noise: the whole tensor; low-rank: ≤ 16 MiB) —
   over the whole logical tensor, as in a plain apply, then cut to each piece the engine holds.
2. **The norm, when the rule asks for it** (``clip_by_norm``): a first pass draws every moved
   tensor's ĝ and sums the squares in float64 in a fixed order (tensors in logical order, row
   blocks in order, each block in chunks of 2²⁰ elements summed pairwise by numpy on the CPU), so
   every engine gets the same ‖ĝ‖₂, bit for bit.  The second pass draws ĝ again (dense noise
   comes from the engine's noise cache when it kept the members' noise).
3. **The rule** runs element by element on chunks of ≤ ``RULE_CHUNK_BYTES`` (16 MiB) of rows of each piece:
   ``u = rule.update(ĝ_chunk, state_chunk, θ_chunk, ctx)``, then ``θ_chunk += u``.  The rule's
   operations round once each (:mod:`zoopt.updates.base`), so pieces, chunks and whole tensors
   give the same bits: HF, vLLM (fused and tensor-parallel pieces) and Ray replicas agree.

**State** (:class:`RuleState`): the rule, the step it is at, and per working tensor the rule's
buffers (``rule.init(master)``: fp32, shaped like the master; 4 bytes per moved weight per
buffer, on the master's device).  An update for step 0 starts it afresh; step t > 0 must be the
next step of the same rule, else a one-line ``ValueError`` before anything is written — so a
state can only be the one a replay from the run's first step rebuilds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Protocol

import numpy as np
import torch

from ..noise import ROW_BLOCK_BYTES, Noise
from ..types import Update
from ..updates.base import StepContext, UpdateRule

RULE_CHUNK_BYTES = 1 << 24  # the most fp32 rows of a piece the rule runs on at once (element-wise: any size, same bits)



class MasterWeights(Protocol):
    """What a rule needs of a weights core (:class:`zoopt.engines.weights.MasterWeights` is one):
    its fp32 ``master`` and working ``params`` by name, the ``layout`` of each HF name's pieces, the
    HF ``shapes``, the noise of one member of one tensor, which names the noise moves, and the
    ``rule_state`` it keeps.  Declared here so this module, which the weights core imports, needs
    nothing from it."""

    master: Mapping[str, torch.Tensor]
    params: Mapping[str, torch.Tensor]
    layout: Mapping[str, list]
    shapes: Mapping[str, tuple[int, ...]]
    rule_state: RuleState | None

    def selected(self, noise: Noise) -> list[str]: ...

    def noise(self, noise: Noise, seed: int, name: str) -> torch.Tensor: ...

    def clear_noise_cache(self) -> None: ...

NORM_CHUNK = 1 << 20  # elements summed at once (float64) by the norm pass


@dataclass
class RuleState:
    """The state of one run's rule on one weights core: ``rule``, ``next_step`` (the step the
    next update must be for) and ``buffers[working tensor][name]``."""

    rule: UpdateRule
    next_step: int = 0
    buffers: dict[str, dict[str, torch.Tensor]] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Bytes of state held (every buffer of every tensor)."""
        return sum(t.numel() * t.element_size() for per in self.buffers.values() for t in per.values())


def check_rule_step(state: RuleState | None, update: Update) -> None:
    """One-line ``ValueError`` unless ``update`` may be applied on ``state``: step 0, or the next
    step of the same rule."""
    step = int(update.rule_step)
    if step < 0:
        raise ValueError(f"update rule_step must be ≥ 0, got {step}")
    if step == 0:
        return
    if state is None or state.next_step != step:
        at = "no state" if state is None else f"state at step {state.next_step}"
        raise ValueError(f"update rule {update.rule.kind}: the update is for step {step} but the engine holds {at}; "
                         f"replay the run's updates from its first step")
    if state.rule != update.rule:
        raise ValueError(f"update rule changed at step {step} ({state.rule.to_dict()} → {update.rule.to_dict()}): "
                         f"a rule's state belongs to one run; start a new run (step 0) for another rule")


def next_rule_state(state: RuleState | None, update: Update) -> RuleState | None:
    """The rule and next step after ``update`` (``state`` itself for an update without a rule),
    checked by :func:`check_rule_step`: a driver's account of what its workers hold (no buffers),
    so that it refuses an update before any worker sees it."""
    if update.rule is None:
        return state
    check_rule_step(state, update)
    return RuleState(update.rule, int(update.rule_step) + 1)


@torch.no_grad()
def apply_rule(weights: "MasterWeights", noise: Noise, update: Update) -> None:
    """``θ ← θ + rule(ĝ)`` on ``weights`` (the module docstring), then working weights ← cast(θ).
    The caller has checked the coefficients and restored the working weights."""
    rule, step = update.rule, int(update.rule_step)
    check_rule_step(weights.rule_state, update)
    names = [n for n in weights.selected(noise) if weights.layout[n]]
    norm = None
    if rule.needs_norm:
        missing = [n for n in weights.selected(noise) if not weights.layout[n]]
        if missing:
            raise ValueError(f"update rule {rule.kind} needs ‖ĝ‖ over every moved tensor, but these weights hold no "
                             f"piece of {missing[0]!r}")
        norm = math.sqrt(sum(block_sum_of_squares(block) for name in names
                             for _, block in _blocks(weights, noise, update, name)))
    if step == 0:
        params = dict.fromkeys(p.param for n in names for p in weights.layout[n])
        weights.rule_state = RuleState(rule, 0, {p: rule.init(weights.master[p]) for p in params})
    state = weights.rule_state
    ctx = StepContext(step, norm)
    touched: list[str] = []
    for name in names:
        pieces = weights.layout[name]
        for start, block in _blocks(weights, noise, update, name):
            for piece in pieces:
                share = piece.within_rows(start, start + (block.shape[0] if block.ndim else 1))
                if share is None:
                    continue
                master, buffers = weights.master[piece.param], state.buffers[piece.param]
                for at, rows in _row_chunks(share, block):
                    theta = master[at]
                    theta.add_(rule.update(block[rows], {k: b[at] for k, b in buffers.items()}, theta, ctx))
                touched.append(piece.param)
    for pname in dict.fromkeys(touched):
        weights.params[pname].copy_(weights.master[pname])
    state.next_step = step + 1
    weights.clear_noise_cache()


def _blocks(weights: "MasterWeights", noise: Noise, update: Update, name: str) -> Iterator[tuple[int, torch.Tensor]]:
    """ĝ of logical tensor ``name`` in the row blocks a plain apply adds (fp32, the master's device):
    the noise's ``ROW_BLOCK_BYTES``, not the rule's chunk size — a low-rank block is a matrix
    product, whose bits may depend on its row count (MKL's AVX-512 kernels give a 1-row product
    other bits than the same row of a 6-row one), so ĝ must be cut exactly as the plain apply cuts it."""
    device = weights.master[weights.layout[name][0].param].device
    return noise.combine_rows(update.seeds, update.coefficients, name, weights.shapes[name], device,
                              sample=weights.sampler(noise, name, update.seeds), block_bytes=ROW_BLOCK_BYTES)


def _row_chunks(share: tuple, block: torch.Tensor) -> Iterator[tuple[tuple, tuple]]:
    """``(working-tensor slices, block slices)`` of a piece's share in chunks of at most
    ``RULE_CHUNK_BYTES`` of fp32 rows (at least one row each; a 0-d tensor is one chunk)."""
    at, rows = share
    if not at:
        yield at, rows
        return
    width = math.prod(block[rows].shape[1:])
    step = max(1, RULE_CHUNK_BYTES // (4 * width))
    a0, a1, r0 = at[0].start, at[0].stop, rows[0].start
    for k in range(0, a1 - a0, step):
        n = min(step, a1 - a0 - k)
        yield (slice(a0 + k, a0 + k + n), *at[1:]), (slice(r0 + k, r0 + k + n), *rows[1:])


def block_sum_of_squares(block: torch.Tensor) -> float:
    """Σ x² of ``block`` in float64, in a fixed order (module docstring)."""
    flat = block.detach().reshape(-1)
    if flat.device.type != "cpu":
        return float(flat.double().square().sum())
    values = flat.numpy()
    total = 0.0
    for i in range(0, values.shape[0], NORM_CHUNK):
        chunk = values[i:i + NORM_CHUNK].astype(np.float64)
        total += float(np.add.reduce(chunk * chunk))
    return total


__all__ = ["RuleState", "apply_rule", "check_rule_step", "next_rule_state", "block_sum_of_squares"]
