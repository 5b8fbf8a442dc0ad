"""The weights half of :class:`~zoopt.engines.vllm.VLLMEngine`: ES on weights held by vLLM's
workers, reached from the driver only through ``LLM.collective_rpc``.

:class:`RemoteWeights` is a :class:`~zoopt.engines.base.WeightsEngine` that holds no weights
(as ``ModuleEngine`` is the weights half of ``HFEngine``).  Every method is one
``collective_rpc("zoopt_...", args=...)`` with primitive arguments — seeds, scales, coefficient
lists, ``Noise.to_dict()``, file paths — so every worker (one per tensor-parallel rank)
regenerates the same noise from the seed; the worker side is
:class:`~zoopt.engines.vllm.worker.ZooptWorkerExtension`.

- ``perturb``/``restore``/``apply``/``checksum`` give bit for bit the weights and digests that
  ``HFEngine`` gives on the same device type and dtype.  Non-finite scales and coefficients,
  and an update rule's wrong step, are refused here, before any worker sees them.
- Whole tensors (``state_dict``, a checksum with TP > 1, an export) cross the process boundary
  as files: each rank writes its pieces, :func:`assemble_pieces` merges them.
- With prefix caching on, the prefix cache is reset after every weight change (perturb,
  restore, apply, load_weights), since cached KV blocks were computed with other weights.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import torch

from ...models import cache_dir
from ...noise import Noise
from ...types import Update
from ..base import WeightsEngine
from ..rule_state import RuleState, next_rule_state
from ..weights import check_finite, digest


class RemoteWeights(WeightsEngine):
    """The weights of ``llm``'s workers as a :class:`WeightsEngine` (see the module docstring).

    ``__init__`` runs the workers' set-up (``zoopt_setup``: layout probe and fp32 master, on
    each parameter's device or on the host with ``master_device="cpu"``) and keeps what they
    report: :attr:`shapes` (HF names and shapes, in HF order), :attr:`dtype`, whether every
    rank holds every tensor whole (TP = 1), and :attr:`lora_uncovered` (the HF names no LoRA
    layer can perturb).
    """

    def __init__(self, llm, *, master_device: str | None = None, noise_cache_bytes: int = 0,
                 prefix_caching: bool = False) -> None:
        if noise_cache_bytes < 0:
            raise ValueError(f"noise_cache_bytes must be ≥ 0, got {noise_cache_bytes!r}")
        self.llm = llm
        self.prefix_caching = bool(prefix_caching)
        self._rules: RuleState | None = None  # the update rule and step the workers' states are at
        info = self._rpc("zoopt_setup", master_device, int(noise_cache_bytes))
        self.shapes: dict[str, tuple[int, ...]] = {n: tuple(s) for n, s in zip(info[0]["names"], info[0]["shapes"])}
        self.dtype = info[0]["dtype"]
        self._whole = all(i["whole"] for i in info)
        self.lora_uncovered = {n for i in info for n in i["lora_uncovered"]}

    def _rpc(self, method: str, *args) -> list:
        return self.llm.collective_rpc(method, args=args)

    def _weights_changed(self) -> None:
        if self.prefix_caching:
            self.llm.reset_prefix_cache()

    # -- moves -----------------------------------------------------------------------------------
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """Working weights ← cast(M + scale·ε(seed, hf_name)) for the selected HF names."""
        check_finite("scale", scale)
        self._rpc("zoopt_perturb", noise.to_dict(), int(seed), float(scale))
        self._weights_changed()

    def restore(self) -> None:
        """Working weights ← cast(M), bit for bit."""
        self._rpc("zoopt_restore")
        self._weights_changed()

    def apply(self, noise: Noise, update: Update) -> None:
        """M ← M + Σᵢ cᵢ·ε(seedᵢ) in fp32, then W ← cast(M) (non-finite coefficients refused); with
        an update rule, M ← M + rule(ĝ), the rule's state kept in every worker beside its master."""
        for c in update.coefficients:
            check_finite("update coefficient", c)
        rules = next_rule_state(self._rules, update)  # a wrong step is refused here, before any worker
        rule = None if update.rule is None else update.rule.to_dict()
        self._rpc("zoopt_apply", noise.to_dict(), [int(s) for s in update.seeds],
                  [float(c) for c in update.coefficients], rule, int(update.rule_step))
        self._rules = rules
        self._weights_changed()

    def load_weights(self, named_tensors: Mapping[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]]) -> list[str]:
        """GRPO weight sync: HF-named tensors → vLLM's ``load_weights`` in every worker, then the
        working weights become the master (as ``sync_master``) and the prefix cache is reset.

        The tensors travel through a temporary safetensors file (a path is all that crosses
        the process boundary).  Returns the vLLM parameter names written.
        """
        from safetensors.torch import save_file

        items = named_tensors.items() if isinstance(named_tensors, Mapping) else named_tensors
        state = {str(n): t.detach().contiguous().cpu() for n, t in items}
        with tempfile.TemporaryDirectory(prefix="zoopt-sync-", dir=scratch_dir()) as tmp:
            path = Path(tmp) / "weights.safetensors"
            save_file(state, str(path))
            written = self._rpc("zoopt_load_weights", str(path))[0]
        self._weights_changed()
        return written

    # -- reads -----------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fp32 master weights as whole HF-named CPU tensors, in HF order (tied ones once)."""
        return self._gather(master=True)

    def checksum(self) -> str:
        """blake2b over the working weights in HF names, order, dtype and shape (= HFEngine's)."""
        return self._digest(master=False)

    def master_checksum(self) -> str:
        return self._digest(master=True)

    def _digest(self, master: bool) -> str:
        if self._whole:
            return self._rpc("zoopt_checksum", master)[0]
        return digest(self._gather(master).items())

    def _gather(self, master: bool) -> dict[str, torch.Tensor]:
        """Whole HF tensors assembled from every rank's pieces (through files)."""
        with tempfile.TemporaryDirectory(prefix="zoopt-pieces-", dir=scratch_dir()) as tmp:
            files = self._rpc("zoopt_write_pieces", tmp, master)
            return assemble_pieces(files, self.shapes)

    def num_parameters(self, noise: Noise | None = None) -> int:
        names = self.shapes if noise is None else noise.select(self.shapes)
        return sum(int(np.prod(self.shapes[n], dtype=np.int64)) for n in names)


def assemble_pieces(files: list[str], shapes: dict[str, tuple[int, ...]]) -> dict[str, torch.Tensor]:
    """Whole HF tensors, in ``shapes`` order, from the files of :meth:`zoopt_write_pieces`.

    Raises when some element of some tensor is in no file.  (Replicated pieces — KV heads
    copied onto several TP ranks — are written more than once, with equal values.)
    """
    from safetensors import safe_open

    out: dict[str, torch.Tensor] = {}
    seen: dict[str, torch.Tensor] = {}
    for path in files:
        with safe_open(path, framework="pt") as fh:
            boxes = json.loads(fh.metadata()["boxes"])
            for key in fh.keys():
                name = key.rsplit("#", 1)[0]
                t = fh.get_tensor(key)
                if name not in out:
                    out[name] = torch.empty(shapes[name], dtype=t.dtype)
                    seen[name] = torch.zeros(shapes[name], dtype=torch.bool)
                box = tuple(slice(a, b) for a, b in boxes[key])
                out[name][box] = t
                seen[name][box] = True
    missing = [n for n in shapes if n not in seen or not bool(seen[n].all())]
    if missing:
        raise RuntimeError(f"no rank holds all of {missing[:5]}")
    return {n: out[n] for n in shapes}


def scratch_dir() -> str:
    """Where files that cross to the workers are written: ``cache_dir()/tmp`` (made if needed)."""
    path = cache_dir() / "tmp"
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


__all__ = ["RemoteWeights", "assemble_pieces", "scratch_dir"]
