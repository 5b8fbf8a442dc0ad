"""The weights side of every engine: perturb, restore bit-exactly, apply updates in fp32.

``ModuleEngine`` wraps any ``torch.nn.Module``.  It keeps a *master copy* of every parameter
(fp32, whatever dtype the module runs in) and only ever sets the working weights from it:

- ``perturb(noise, seed, scale)``:  W ← cast(M + scale·ε(seed, name))  for selected names;
- ``restore()``:                     W ← cast(M)  (bit-exact: no "subtract the noise again");
- ``apply(noise, update)``:          M ← M + Σᵢ cᵢ·ε(seedᵢ, name) (accumulated in fp32), W ← cast(M).

All writes are in place (``copy_``), never by rebinding ``.data``, so anything that holds a
parameter's address (CUDA graphs, vLLM's kernels, an optimizer) keeps working.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Iterator

import torch

from ..noise import Noise
from ..types import Update


class ModuleEngine:
    """Perturb/restore/apply on the parameters of ``module``.

    ``master_device`` holds the fp32 master copy (default: each parameter's own device; pass
    ``"cpu"`` to keep a GPU model's master in host memory).

    ``noise_cache_bytes`` (default 0: off) lets ``perturb`` keep up to that many bytes of the
    fp32 noise it draws, so that the next ``apply`` reuses them instead of drawing them again
    (on a CPU, drawing the noise is most of an ES step's non-generation time).  The noise is a
    pure function of (noise, seed, name), so the cache changes no result, bit for bit; it is
    emptied by every ``apply`` and by :meth:`clear_noise_cache`.
    """

    def __init__(self, module: torch.nn.Module, master_device: str | torch.device | None = None,
                 noise_cache_bytes: int = 0) -> None:
        self.module = module
        self.params: dict[str, torch.nn.Parameter] = dict(module.named_parameters())  # ties deduplicated
        self.master: dict[str, torch.Tensor] = {
            name: p.detach().to(device=master_device or p.device, dtype=torch.float32, copy=True)
            for name, p in self.params.items()
        }
        self._dirty: set[str] = set()
        if noise_cache_bytes < 0:
            raise ValueError(f"noise_cache_bytes must be ≥ 0, got {noise_cache_bytes!r}")
        self.noise_cache_bytes = int(noise_cache_bytes)
        self._noise_cache: dict[tuple[Noise, int, str], torch.Tensor] = {}
        self._noise_cache_used = 0

    # -- the contract ----------------------------------------------------------------------
    @torch.no_grad()
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """Set the selected weights to ``M + scale·ε(seed, name)`` (from the master, not from W)."""
        _check_finite("scale", scale)
        self.restore()
        for name in self._selected(noise):
            p, m = self.params[name], self.master[name]
            eps = self._noise(noise, seed, name, keep=True)
            p.copy_((eps * scale).add_(m))
            self._dirty.add(name)

    @torch.no_grad()
    def restore(self) -> None:
        """Set every perturbed weight back to the master copy, bit for bit."""
        for name in self._dirty:
            self.params[name].copy_(self.master[name])
        self._dirty.clear()

    @torch.no_grad()
    def apply(self, noise: Noise, update: Update) -> None:
        """``M ← M + Σᵢ cᵢ·ε(seedᵢ)`` in fp32, then ``W ← cast(M)``.

        Non-finite coefficients are refused before anything is written, so weights never
        become NaN.
        """
        for c in update.coefficients:
            _check_finite("update coefficient", c)
        self.restore()
        if update.is_zero():
            return
        for name in self._selected(noise):
            m = self.master[name]
            m.add_(self.delta(noise, update, name))
            self.params[name].copy_(m)
        self.clear_noise_cache()

    def delta(self, noise: Noise, update: Update, name: str) -> torch.Tensor:
        """The fp32 tensor ``Σᵢ cᵢ·ε(seedᵢ, name)`` that ``apply`` adds to ``name``'s master."""
        m = self.master[name]
        acc = torch.zeros_like(m)
        for seed, c in zip(update.seeds, update.coefficients):
            if c != 0.0:
                acc.add_(self._noise(noise, seed, name), alpha=float(c))
        return acc

    def _noise(self, noise: Noise, seed: int, name: str, keep: bool = False) -> torch.Tensor:
        """``ε(seed, name)`` from the cache, else drawn (and kept if ``keep`` and it fits)."""
        key = (noise, int(seed), name)
        eps = self._noise_cache.get(key)
        if eps is None:
            m = self.master[name]
            eps = noise.sample(seed, name, m.shape, device=m.device)
            nbytes = eps.numel() * eps.element_size()
            if keep and self._noise_cache_used + nbytes <= self.noise_cache_bytes:
                self._noise_cache[key] = eps
                self._noise_cache_used += nbytes
        return eps

    def clear_noise_cache(self) -> None:
        self._noise_cache.clear()
        self._noise_cache_used = 0

    @torch.no_grad()
    def sync_master(self) -> None:
        """Take the current working weights as the new master (after a gradient optimizer,
        e.g. GRPO, changed the module in place).  Perturbed weights are refused."""
        if self._dirty:
            raise RuntimeError("sync_master() on perturbed weights: restore() first")
        for name, p in self.params.items():
            self.master[name].copy_(p.detach())

    def checksum(self) -> str:
        """blake2b over every working parameter's name, dtype, shape and bytes."""
        return _digest((n, p.detach()) for n, p in self.params.items())

    def master_checksum(self) -> str:
        return _digest(self.master.items())

    # -- helpers ---------------------------------------------------------------------------
    def _selected(self, noise: Noise) -> list[str]:
        names = noise.select(self.params)
        if not names:
            raise ValueError(
                f"noise include={list(noise.include)} exclude={list(noise.exclude)} selects no parameter"
            )
        return names

    def master_state_dict(self) -> dict[str, torch.Tensor]:
        return dict(self.master)

    def num_parameters(self, noise: Noise | None = None) -> int:
        names = self.params if noise is None else noise.select(self.params)
        return sum(self.params[n].numel() for n in names)

    def export(self, directory: str | Path) -> Path:
        """Write the working weights as ``model.safetensors`` (atomically) and return the path."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "model.safetensors"
        tmp = path.with_suffix(".tmp")
        state = {n: p.detach().contiguous().cpu() for n, p in self.params.items()}
        save_file(state, str(tmp))
        tmp.replace(path)
        return path


def _digest(items: Iterator[tuple[str, torch.Tensor]]) -> str:
    h = hashlib.blake2b(digest_size=16)
    for name, t in items:
        t = t.contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _check_finite(what: str, value: float) -> None:
    try:
        ok = math.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{what} must be a finite number, got {value!r}")
