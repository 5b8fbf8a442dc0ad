"""``ModuleEngine``: the weights contract over any ``torch.nn.Module``, through :class:`MasterWeights`.

It keeps a *master copy* of every parameter (fp32, whatever dtype the module runs in) and only
ever sets the working weights from it (see :mod:`zoopt.engines.weights` for the formulas):

- ``perturb(noise, seed, scale)``:  W ← cast(M + scale·ε(seed, name))  for selected names;
- ``restore()``:                     W ← cast(M)  (bit-exact: no "subtract the noise again");
- ``apply(noise, update)``:          M ← M + Σᵢ cᵢ·ε(seedᵢ, name) (accumulated in fp32), W ← cast(M).

All writes are in place (``copy_``), never by rebinding ``.data``, so anything that holds a
parameter's address (CUDA graphs, vLLM's kernels, an optimizer) keeps working.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..noise import Noise
from ..types import Update
from .base import WeightsEngine
from .weights import MasterWeights


class ModuleEngine(WeightsEngine):
    """Perturb/restore/apply on the parameters of ``module`` (tied parameters once).

    ``master_device`` holds the fp32 master copy (default: each parameter's own device; pass
    ``"cpu"`` to keep a GPU model's master in host memory).

    ``select``/``logical`` (optional) choose which parameters are the weights and name them
    (:meth:`MasterWeights.of_module`; adapter space holds only the LoRA tensors).

    ``noise_cache_bytes`` (default 0: off) lets ``perturb`` keep up to that many bytes of the
    fp32 noise it draws, so that the next ``apply`` reuses them instead of drawing them again
    (on a CPU, drawing the noise is most of an ES step's non-generation time).  The noise is a
    pure function of (noise, seed, name), so the cache changes no result, bit for bit; it is
    emptied by every ``apply`` and by :meth:`clear_noise_cache`.
    """

    def __init__(self, module: torch.nn.Module, master_device: str | torch.device | None = None,
                 noise_cache_bytes: int = 0, select=None, logical=None) -> None:
        self.module = module
        self.weights = MasterWeights.of_module(module, master_device=master_device, noise_cache_bytes=noise_cache_bytes,
                                               select=select, logical=logical)

    @property
    def params(self) -> dict[str, torch.Tensor]:
        """The working parameters by name (``named_parameters()``, ties once)."""
        return self.weights.params

    @property
    def master(self) -> dict[str, torch.Tensor]:
        """The fp32 master copy by parameter name."""
        return self.weights.master

    # -- the contract ----------------------------------------------------------------------
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """Set the selected weights to ``M + scale·ε(seed, name)`` (from the master, not from W)."""
        self.weights.perturb(noise, seed, scale)

    def restore(self) -> None:
        """Set every perturbed weight back to the master copy, bit for bit."""
        self.weights.restore()

    def apply(self, noise: Noise, update: Update) -> None:
        """``M ← M + Σᵢ cᵢ·ε(seedᵢ)`` in fp32, then ``W ← cast(M)`` (non-finite coefficients
        are refused before anything is written, so weights never become NaN)."""
        self.weights.apply(noise, update)

    def checksum(self) -> str:
        """blake2b over every working parameter's name, dtype, shape and bytes."""
        return self.weights.checksum(master=False)

    def master_checksum(self) -> str:
        return self.weights.checksum(master=True)

    def num_parameters(self, noise: Noise | None = None) -> int:
        return self.weights.num_parameters(noise)

    # -- beyond the contract ----------------------------------------------------------------
    def delta(self, noise: Noise, update: Update, name: str) -> torch.Tensor:
        """The fp32 tensor ``Σᵢ cᵢ·ε(seedᵢ, name)`` that ``apply`` adds to ``name``'s master."""
        return self.weights.delta(noise, update, name)

    def clear_noise_cache(self) -> None:
        self.weights.clear_noise_cache()

    def sync_master(self) -> None:
        """Take the current working weights as the new master (after a gradient optimizer,
        e.g. GRPO, changed the module in place).  Perturbed weights are refused."""
        self.weights.take_working()

    def load_weights(self, named_tensors) -> None:
        """Set the weights (logical names: HF's, or PEFT's in adapter space) and take them as the
        new master, exactly (:meth:`MasterWeights.load`: every name, no other, the same shapes)."""
        self.weights.load(dict(named_tensors))

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The fp32 master by logical name — the names the noise is keyed by and
        :meth:`load_weights` takes: HF's, or in adapter space PEFT's saved names, as the vLLM
        engine's (the tensors themselves, not copies)."""
        return dict(self.weights.items(master=True))

    def export(self, directory: str | Path) -> Path:
        """Write the working weights as ``model.safetensors`` (atomically) and return the path."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "model.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file({n: p.detach().contiguous().cpu() for n, p in self.params.items()}, str(tmp))
        tmp.replace(path)
        return path
