"""One replica of :class:`~zoopt.engines.ray.RayEngine`: an inner engine in a Ray actor.

A :class:`Replica` holds one inner engine (``hf``, or ``vllm`` where installed) built from the
same model, dtype and options as every other replica, plus two numbers that say which weights
it holds: ``version`` (how many updates of the driver's log it has applied) and ``master``
(the digest of its fp32 master after the last apply or replay).  Every call that reads or
moves the weights carries the driver's ``version`` and ``expected`` master digest; a replica
that is behind, ahead, or holds another master **refuses** (returns a :class:`Refused`) instead
of computing on the wrong weights — a restarted actor (its constructor re-ran: base weights,
version 0) therefore cannot silently produce a wrong reward.

What crosses the process boundary: seeds, scales, coefficient lists, frozen ``Noise`` and
``Population`` values, prompts, ``Sampling`` and completions — never weights (only
``state_dict``/``export_files``, which the driver calls on request, return tensors or files).

The class is plain Python: :class:`~zoopt.engines.ray.RayEngine` wraps it with
``ray.remote(...)``.  The ``debug_*`` methods are test hooks (hang, corrupt).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from ...noise import Noise
from ...types import Population, Update
from ..base import Completion, Sampling


@dataclass(frozen=True)
class Refused:
    """A replica's answer when its weights are not the ones the call was meant for."""

    version: int
    master: str | None
    reason: str


class Replica:
    """An inner engine plus its place in the driver's update log (see the module docstring)."""

    def __init__(self, inner: str, model: str, dtype: str, device: str, batch_size: int,
                 inner_args: dict, threads: int | None = None) -> None:
        if threads:
            torch.set_num_threads(int(threads))
        self._spec = (inner, model, dtype, device, int(batch_size), dict(inner_args))
        self.engine = None
        self._build()
        self._hang_s = 0.0
        self._corrupt_next_apply = 0.0

    def _build(self) -> None:
        from ...registry import ENGINES

        inner, model, dtype, device, batch_size, inner_args = self._spec
        if self.engine is not None:
            self.engine.close()
            self.engine = None
        if device.startswith("cuda"):
            device = "cuda"  # Ray sets CUDA_VISIBLE_DEVICES: the replica's GPU is cuda:0
        self.engine = ENGINES.get(inner).from_pretrained(model, dtype=dtype, device=device,
                                                          batch_size=batch_size, **inner_args)
        self.version = 0
        self.master = self.engine.master_checksum()

    # -- bookkeeping ----------------------------------------------------------------------------
    def info(self) -> dict:
        import ray

        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "ip": ray.util.get_node_ip_address(), "version": self.version, "master": self.master,
                "threads": torch.get_num_threads()}

    def _check(self, version: int, expected: str | None) -> Refused | None:
        if version != self.version:
            return Refused(self.version, self.master, f"at update {self.version}, the call is for update {version}")
        if expected is not None and expected != self.master:
            return Refused(self.version, self.master, "holds another master than the driver expects")
        return None

    # -- the population call: one call per member (or chunk of members) --------------------------
    def evaluate(self, version: int, expected: str | None, noise: Noise, population: Population,
                 prompts: Sequence, sampling: Sampling) -> Any:
        """perturb → generate → restore for every member of ``population`` (a chunk of the
        step's), with restore in a ``finally`` (the inner engine's population call): a failure
        never leaves this replica perturbed.  Returns ``{"completions", "seconds"}``."""
        refused = self._check(version, expected)
        if refused is not None:
            return refused
        if self._hang_s:  # test hook: a hung replica
            hang, self._hang_s = self._hang_s, 0.0
            time.sleep(hang)
        t0 = time.perf_counter()
        try:
            completions = self.engine.generate_population(noise, population, prompts, sampling)
        finally:
            self.engine.restore()
        return {"completions": completions, "seconds": time.perf_counter() - t0}

    # -- rollouts at the current (possibly perturbed) weights ------------------------------------
    def generate(self, version: int, expected: str | None, prompts: Sequence, sampling: Sampling,
                 first_index: int = 0) -> Any:
        """``generate(prompts, sampling)`` as if ``prompts`` started at ``first_index`` of a
        longer list (so a sampled batch split over replicas gives what one engine gives)."""
        refused = self._check(version, expected)
        if refused is not None:
            return refused
        t0 = time.perf_counter()
        completions = generate_from(self.engine, prompts, sampling, first_index)
        return {"completions": completions, "seconds": time.perf_counter() - t0}

    # -- weights ----------------------------------------------------------------------------------
    def perturb(self, version: int, expected: str | None, noise: Noise, seed: int, scale: float) -> Any:
        refused = self._check(version, expected)
        return refused if refused is not None else self.engine.perturb(noise, seed, scale)

    def restore(self, version: int, expected: str | None) -> Any:
        refused = self._check(version, expected)
        return refused if refused is not None else self.engine.restore()

    def apply(self, version: int, expected: str | None, noise: Noise, update: Update) -> Any:
        """Update ``version`` → ``version + 1``; returns ``(version, master digest)``."""
        refused = self._check(version, expected)
        if refused is not None:
            return refused
        self.engine.apply(noise, update)
        if self._corrupt_next_apply:  # test hook: an apply that went wrong on this replica only
            self._corrupt(self._corrupt_next_apply)
            self._corrupt_next_apply = 0.0
        self.version += 1
        self.master = self.engine.master_checksum()
        return self.version, self.master

    def replay(self, log: Sequence[tuple[Noise, Update]], expected: Sequence[str | None], reload: bool,
               system_prompt: str | None, perturbation: tuple | None) -> tuple[int, str, int]:
        """Catch up with the driver's log: from this replica's own version when its master is
        the expected one there, else from the base model (the engine is rebuilt).  Then set the
        system prompt and the driver's current perturbation.  Returns ``(version, master,
        updates applied)``."""
        start = self.version
        if reload or start > len(log) or (expected[start] is not None and expected[start] != self.master):
            self._build()
            start = 0
        for noise, update in log[start:]:
            self.engine.apply(noise, update)
        if start < len(log):
            self.version = len(log)
            self.master = self.engine.master_checksum()
        self.engine.system_prompt = system_prompt
        if perturbation is not None:
            self.engine.perturb(*perturbation)
        return self.version, self.master, len(log) - start

    def verify(self) -> str:
        """A fresh digest of the master (not the one remembered after the last apply)."""
        return self.engine.master_checksum()

    def checksum(self, version: int, expected: str | None, master: bool) -> Any:
        refused = self._check(version, expected)
        if refused is not None:
            return refused
        return self.engine.master_checksum() if master else self.engine.checksum()

    def set_system_prompt(self, system_prompt: str | None) -> None:
        self.engine.system_prompt = system_prompt

    # -- what the driver asks about ---------------------------------------------------------------
    def state_dict(self, version: int, expected: str | None) -> Any:
        refused = self._check(version, expected)
        if refused is not None:
            return refused
        return {n: t.detach().to("cpu", copy=True) for n, t in self.engine.state_dict().items()}

    def space_record(self, version: int, expected: str | None) -> Any:
        """The inner engine's space record as canonical JSON (comparable across replicas)."""
        refused = self._check(version, expected)
        if refused is not None:
            return refused
        return json.dumps(self.engine.space_record(), sort_keys=True)

    def num_parameters(self, noise: Noise | None) -> int:
        return self.engine.num_parameters(noise)

    def population_path(self, noise: Noise) -> str:
        return self.engine.population_path(noise)

    def encode(self, prompt) -> list[int]:
        return self.engine.encode(prompt)

    def pad_id(self) -> int:
        return self.engine.pad_id

    def export_files(self, version: int, expected: str | None) -> Any:
        """The inner engine's ``export_pretrained`` directory as ``{relative path: bytes}`` (the
        driver writes it where it runs: the replica may be on another node)."""
        refused = self._check(version, expected)
        if refused is not None:
            return refused
        with tempfile.TemporaryDirectory(prefix="zoopt-export-") as tmp:
            out = self.engine.export_pretrained(Path(tmp) / "model")
            return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    # -- test hooks ----------------------------------------------------------------------------------
    def debug_hang(self, seconds: float) -> None:
        """The next ``evaluate`` sleeps ``seconds`` first (a hung replica)."""
        self._hang_s = float(seconds)

    def debug_corrupt(self, scale: float, at: str = "now") -> None:
        """Add ``scale``·noise to the master behind the driver's back: ``now`` (weights at rest
        that rot: only a fresh digest sees it) or at the ``next_apply`` (an apply that went wrong
        on this replica: its post-apply digest differs from the others')."""
        if at == "now":
            self._corrupt(scale)
        elif at == "next_apply":
            self._corrupt_next_apply = float(scale)
        else:
            raise ValueError(f"at must be 'now' or 'next_apply', got {at!r}")

    def _corrupt(self, scale: float) -> None:
        from ...noise import Gaussian

        self.engine.apply(Gaussian(), Update((987654321,), (float(scale),)))


def generate_from(engine, prompts: Sequence, sampling: Sampling, first_index: int) -> list[list[Completion]]:
    """``engine.generate`` with prompt ``p`` sampled as prompt ``first_index + p``.

    HFEngine draws sample j of prompt p from the stream ``(sampling.seed, p, j)``, p counted
    within the call.  The engine contract has no offset, so for an ``HFEngine`` this shifts the
    keys its decoding loop receives (``_generate_batch(prompts, keys, sampling, ...)``); greedy
    decoding needs no shift.  Other engines are only called with ``first_index == 0``.
    """
    if first_index == 0 or sampling.greedy:
        return engine.generate(prompts, sampling)
    from ..hf import HFEngine

    if not isinstance(engine, HFEngine):
        raise ValueError(f"{type(engine).__name__} cannot sample from a prompt offset")
    batch = engine._generate_batch
    engine._generate_batch = lambda p, keys, s, **kw: batch(p, [(i + first_index, j) for i, j in keys], s, **kw)
    try:
        return engine.generate(prompts, sampling)
    finally:
        del engine._generate_batch


def can_offset(inner: str) -> bool:
    """Whether :func:`generate_from` can shift the sampling stream of ``inner`` engines."""
    return inner == "hf"
