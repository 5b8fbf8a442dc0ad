"""The one weights core: an fp32 master copy, bit-exact restore, fp32 updates, a noise cache.

Every engine that holds weights in this process (``ModuleEngine``/``HFEngine`` over a torch
module, and each vLLM worker over vLLM's fused, sharded parameters) keeps them through
:class:`MasterWeights`.  Weights are addressed by **logical names** — the Hugging Face
parameter names, in ``named_parameters()`` order, with their full shapes — because that is
what the noise stream is keyed by: ``ε(seed, name)`` is drawn for the whole logical tensor.
Each logical name maps to :class:`Piece` s: a box of a *working* tensor (a parameter of the
module that runs) that equals, element for element, a box of the logical tensor.  A plain
torch module has one piece per name covering the whole parameter; a vLLM rank has fused parts
(q, k, v in ``qkv_proj``) and tensor-parallel slices.

With master ``M`` (fp32, one per working tensor) and working weights ``W``:

- ``perturb(noise, seed, scale)``:  ``W[p] ← cast(M[p] + scale·ε(seed, h)[box])`` for every
  piece ``p`` of every selected logical name ``h`` (from the master, never from ``W``);
- ``restore()``:                     ``W ← cast(M)`` for every perturbed tensor — bit-exact, no
  "subtract the noise again" (in bf16 that drifts);
- ``apply(noise, update)``:          ``M[p] ← M[p] + (Σᵢ cᵢ·ε(seedᵢ, h))[box]``, accumulated in
  fp32 over the whole logical tensor, then ``W ← cast(M)``.  Non-finite coefficients are
  refused before anything is written.  The sum is added in the row blocks that
  ``noise.combine_rows`` yields (low-rank noise: ≤ ``ROW_BLOCK_BYTES`` each, so a big embedding's
  update never exists whole; dense noise: one block).  An update that carries a rule
  (``update.rule``: momentum, adam, …) adds ``rule(ĝ)`` instead, with the rule's state kept
  here (:mod:`zoopt.engines.rule_state`).

All writes are in place (``copy_``/``add_``): CUDA graphs, vLLM kernels and optimizers keep
the addresses they hold.  ``noise_cache_bytes`` lets ``perturb`` (and the adapter space's
one-call population, :meth:`MasterWeights.keep_noise`) keep the fp32 noise it drew for the next
``apply`` (the noise is a pure function of (noise, seed, name), so the cache changes no bit).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping

import torch

from ..noise import ROW_BLOCK_BYTES, Noise
from ..types import Update
from .rule_state import RuleState, apply_rule

Box = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Piece:
    """``working[param][param_box]`` holds ``logical[name][hf_box]`` (boxes: (start, stop) per dim)."""

    param: str
    param_box: Box
    hf_box: Box

    @property
    def pslice(self) -> tuple[slice, ...]:
        return tuple(slice(a, b) for a, b in self.param_box)

    @property
    def hslice(self) -> tuple[slice, ...]:
        return tuple(slice(a, b) for a, b in self.hf_box)

    def within_rows(self, start: int, stop: int) -> tuple[tuple[slice, ...], tuple[slice, ...]] | None:
        """This piece's share of rows ``start … stop`` (first dimension) of the logical tensor:
        ``(slices of the working tensor, slices of that row block)``, or None when it holds none
        of them.  A 0-d tensor is one block: ``((), ())``."""
        if not self.hf_box:
            return (), ()
        (h0, h1), p0 = self.hf_box[0], self.param_box[0][0]
        lo, hi = max(h0, start), min(h1, stop)
        if lo >= hi:
            return None
        return (slice(p0 + lo - h0, p0 + hi - h0), *self.pslice[1:]), (slice(lo - start, hi - start), *self.hslice[1:])


def whole_box(shape: Iterable[int]) -> Box:
    return tuple((0, int(n)) for n in shape)


def shape_numel(shape: Iterable[int]) -> int:
    return math.prod(int(n) for n in shape)


def box_volume(box: Box) -> int:
    return math.prod(b - a for a, b in box)


def digest(items: Iterable[tuple[str, torch.Tensor]]) -> str:
    """blake2b (16 bytes, hex) over each ``(name, tensor)``'s name, dtype, shape and bytes."""
    h = hashlib.blake2b(digest_size=16)
    for name, t in items:
        t = t.detach().contiguous().cpu()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def check_finite(what: str, value: float) -> None:
    """Raise a one-line ``ValueError`` naming ``what`` unless ``value`` is a finite number."""
    try:
        ok = math.isfinite(float(value))
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise ValueError(f"{what} must be a finite number, got {value!r}")


class MasterWeights:
    """fp32 master + working tensors + noise cache, addressed by logical names (module docstring).

    Args:
        params: working tensors by their own name (modified in place, never rebound).
        shapes: logical name → full shape, in logical (HF ``named_parameters``) order.
        layout: logical name → its pieces.  A logical name with no pieces (a tensor this vLLM
            rank does not hold) is skipped by every operation.
        master_device: where the fp32 master lives (default: each working tensor's device).
        noise_cache_bytes: how many bytes of drawn noise ``perturb`` may keep for ``apply``.
    """

    def __init__(self, params: Mapping[str, torch.Tensor], shapes: Mapping[str, tuple[int, ...]],
                 layout: Mapping[str, list[Piece]], master_device: str | torch.device | None = None,
                 noise_cache_bytes: int = 0) -> None:
        if noise_cache_bytes < 0:
            raise ValueError(f"noise_cache_bytes must be ≥ 0, got {noise_cache_bytes!r}")
        covered = {p.param for pieces in layout.values() for p in pieces}
        self.params: dict[str, torch.Tensor] = {n: t for n, t in params.items() if n in covered}
        self.shapes = {n: tuple(int(d) for d in s) for n, s in shapes.items()}
        self.layout = {n: list(layout.get(n, [])) for n in self.shapes}
        self.master: dict[str, torch.Tensor] = {
            n: t.detach().to(device=master_device or t.device, dtype=torch.float32, copy=True)
            for n, t in self.params.items()
        }
        self.dirty: set[str] = set()
        self.noise_cache_bytes = int(noise_cache_bytes)
        self._cache: dict[tuple[Noise, int, str], torch.Tensor] = {}
        self._cache_used = 0
        self.rule_state: RuleState | None = None  # an update rule's state beside the master (rule_state.py)

    @classmethod
    def of_module(cls, module: torch.nn.Module, master_device=None, noise_cache_bytes: int = 0,
                  select: Callable[[str], bool] | None = None,
                  logical: Callable[[str], str] | None = None) -> "MasterWeights":
        """One whole piece per parameter of ``module`` (tied parameters once, as
        ``named_parameters()`` lists them).  ``select(name)`` keeps only some parameters (adapter
        space: the LoRA tensors, the frozen base is not held at all); ``logical(name)`` renames
        them (adapter space: the names PEFT saves)."""
        params = {n: p for n, p in module.named_parameters() if select is None or select(n)}
        logical = logical or (lambda n: n)
        shapes = {logical(n): tuple(p.shape) for n, p in params.items()}
        layout = {logical(n): [Piece(n, whole_box(p.shape), whole_box(p.shape))] for n, p in params.items()}
        return cls(params, shapes, layout, master_device=master_device, noise_cache_bytes=noise_cache_bytes)

    # -- the three writes -----------------------------------------------------------------
    @torch.no_grad()
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        check_finite("scale", scale)
        self.restore()
        for name in self.selected(noise):
            pieces = self.layout[name]
            if not pieces:
                continue
            eps = self.noise(noise, seed, name, keep=noise.combine_reuses_samples)
            for piece in pieces:
                m = self.master[piece.param][piece.pslice]
                self.params[piece.param][piece.pslice].copy_(eps[piece.hslice].mul(float(scale)).add_(m))
                self.dirty.add(piece.param)

    @torch.no_grad()
    def restore(self) -> None:
        for pname in self.dirty:
            self.params[pname].copy_(self.master[pname])
        self.dirty.clear()

    @torch.no_grad()
    def apply(self, noise: Noise, update: Update) -> None:
        for c in update.coefficients:
            check_finite("update coefficient", c)
        self.restore()
        if update.rule is not None:  # θ ← θ + rule(ĝ) with the rule's state: rule_state.py
            return apply_rule(self, noise, update)
        if update.is_zero():
            return
        touched: list[str] = []
        for name in self.selected(noise):
            pieces = self.layout[name]
            if not pieces:
                continue
            device = self.master[pieces[0].param].device
            for start, block in noise.combine_rows(update.seeds, update.coefficients, name, self.shapes[name], device,
                                                   sample=self.sampler(noise, name, update.seeds),
                                                   block_bytes=ROW_BLOCK_BYTES):
                for piece in pieces:
                    share = piece.within_rows(start, start + (block.shape[0] if block.ndim else 1))
                    if share is not None:
                        self.master[piece.param][share[0]].add_(block[share[1]])
                        touched.append(piece.param)
        for pname in dict.fromkeys(touched):
            self.params[pname].copy_(self.master[pname])
        self.clear_noise_cache()

    def delta(self, noise: Noise, update: Update, name: str) -> torch.Tensor:
        """The fp32 tensor ``Σᵢ cᵢ·ε(seedᵢ, name)`` (whole logical shape) that ``apply`` adds:
        ``noise.combine`` (dense noise comes from the cache when ``perturb`` kept it)."""
        device = self.master[self.layout[name][0].param].device
        return noise.combine(update.seeds, update.coefficients, name, self.shapes[name], device,
                             sample=self.sampler(noise, name, update.seeds))

    @torch.no_grad()
    def take_working(self) -> None:
        """The working weights become the master (after a gradient step or a weight load
        changed them in place).  Refused while perturbed: that would bake the noise in."""
        if self.dirty:
            raise RuntimeError("cannot take perturbed weights as the master: restore() first")
        for pname, m in self.master.items():
            m.copy_(self.params[pname].detach())

    @torch.no_grad()
    def load(self, tensors: Mapping[str, torch.Tensor], source: str = "weights") -> None:
        """Set the master to ``tensors`` (logical name → tensor; cast to fp32, exactly the
        names and shapes held) and the working weights to it.  A missing, extra or misshapen
        name is a one-line ``ValueError`` naming it and ``source``; nothing is written then."""
        missing = [n for n in self.shapes if n not in tensors]
        extra = [n for n in tensors if n not in self.shapes]
        if missing or extra:
            what = f"lacks {missing[0]!r}" if missing else f"has {extra[0]!r}, which these weights do not"
            raise ValueError(f"{source} {what} ({len(missing)} missing, {len(extra)} unexpected)")
        for name, shape in self.shapes.items():
            if tuple(tensors[name].shape) != shape:
                raise ValueError(f"{source}: {name!r} has shape {tuple(tensors[name].shape)}, these weights {shape}")
        self.restore()
        self.clear_noise_cache()
        for name, pieces in self.layout.items():
            value = tensors[name].detach().to(torch.float32)
            for piece in pieces:
                self.master[piece.param][piece.pslice].copy_(value[piece.hslice])
        for pname, m in self.master.items():
            self.params[pname].copy_(m)

    # -- noise ------------------------------------------------------------------------------
    def sampler(self, noise: Noise, name: str, seeds: Iterable[int]) -> Callable[[int], torch.Tensor] | None:
        """What ``noise.combine``/``combine_rows`` should draw ``ε(seed, name)`` for ``seeds`` with:
        :meth:`noise` (the cache, else one seed drawn) when the cache holds any of them, else None
        — the noise then draws several seeds per call (:meth:`Noise.combine`, several times faster
        than one by one for small tensors), the same bits either way."""
        if not any((noise, int(s), name) in self._cache for s in seeds):
            return None
        return lambda seed: self.noise(noise, seed, name)

    def noise(self, noise: Noise, seed: int, name: str, keep: bool = False) -> torch.Tensor:
        """``ε(seed, name)`` (fp32, whole logical shape, on the master's device), cached or drawn."""
        key = (noise, int(seed), name)
        eps = self._cache.get(key)
        if eps is None:
            device = self.master[self.layout[name][0].param].device
            eps = noise.sample(int(seed), name, self.shapes[name], device=device)
            nbytes = eps.numel() * eps.element_size()
            if keep and self._cache_used + nbytes <= self.noise_cache_bytes:
                self._cache[key] = eps
                self._cache_used += nbytes
        return eps

    def keep_noise(self, noise: Noise, seeds: Iterable[int], name: str, eps_rows: torch.Tensor) -> bool:
        """Keep ``eps_rows[i] = ε(seedᵢ, name)`` (drawn together, :meth:`Noise.samples`) for the
        next ``apply``, all of them or — over the ``noise_cache_bytes`` budget — none (the rows
        are views of one tensor: keeping some would hold all).  True if kept."""
        nbytes = eps_rows.numel() * eps_rows.element_size()
        if self._cache_used + nbytes > self.noise_cache_bytes:
            return False
        for seed, eps in zip(seeds, eps_rows):
            self._cache.setdefault((noise, int(seed), name), eps)
        self._cache_used += nbytes
        return True

    def clear_noise_cache(self) -> None:
        self._cache.clear()
        self._cache_used = 0

    @property
    def noise_cache_used(self) -> int:
        """Bytes of noise held for the next ``apply``."""
        return self._cache_used

    @property
    def noise_cache_entries(self) -> int:
        """``(noise, seed, name)`` tensors held for the next ``apply``."""
        return len(self._cache)

    def selected(self, noise: Noise) -> list[str]:
        """The logical names ``noise`` moves; an empty selection is an error naming the filter."""
        names = noise.select(self.shapes)
        if not names:
            raise ValueError(f"noise include={list(noise.include)} exclude={list(noise.exclude)} selects no parameter")
        return names

    # -- reading ----------------------------------------------------------------------------
    @property
    def whole(self) -> bool:
        """Whether every logical tensor is held here completely (no tensor-parallel split)."""
        return all(sum(box_volume(p.hf_box) for p in self.layout[n]) == shape_numel(s)
                   for n, s in self.shapes.items())

    def tensor(self, name: str, master: bool = False) -> torch.Tensor:
        """Logical tensor ``name`` (working weights, or the fp32 master).  A single piece that
        covers its whole tensor is returned as that tensor itself (no copy)."""
        pieces, source = self.layout[name], self.master if master else self.params
        if len(pieces) == 1 and pieces[0].hf_box == whole_box(self.shapes[name]) \
                and tuple(source[pieces[0].param].shape) == self.shapes[name]:
            return source[pieces[0].param]
        out = torch.empty(self.shapes[name], dtype=source[pieces[0].param].dtype, device="cpu")
        for piece in pieces:
            out[piece.hslice] = source[piece.param][piece.pslice].cpu()
        return out

    def checksum(self, master: bool = False) -> str:
        """:func:`digest` over the logical tensors in logical order (needs :attr:`whole`)."""
        return digest((name, self.tensor(name, master)) for name in self.shapes)

    def num_parameters(self, noise: Noise | None = None) -> int:
        names = self.shapes if noise is None else noise.select(self.shapes)
        return sum(shape_numel(self.shapes[n]) for n in names)

    def items(self, master: bool = True) -> Iterator[tuple[str, torch.Tensor]]:
        """``(logical name, tensor)`` for every logical tensor, in order."""
        return ((name, self.tensor(name, master)) for name in self.shapes)


__all__ = ["MasterWeights", "Piece", "whole_box", "shape_numel", "box_volume", "digest", "check_finite"]
