"""Seeded noise samplers: ``ε(seed, name)`` regenerated wherever the weights live.

Every tensor gets its own stream keyed by ``(seed, parameter name)`` through blake2b (never
Python's ``hash()``), so the noise of a tensor does not depend on which other tensors exist or
on their order.  ``correlated=True`` drops the name from the key: every tensor restarts the
same stream, as the ES-at-scale reference code does.

Generation is in fp32; callers cast once.  Which generator makes the bits is the noise's
``stream`` (recorded in its dict, so in every seed log):

- ``"counter"`` (the default): :mod:`zoopt.counter_stream` — element i of a tensor is a pure
  function of (seed, name, i), computed with integer tensor operations on the tensor's own
  device, **the same bits on the CPU, on CUDA and on any other torch device** (and the same for
  any chunking or thread count).  Gaussian values come from a table inverse CDF with only
  correctly rounded float steps.
- ``"numpy"`` (the stream before it; every seed log that records no stream was written by it):
  on the CPU numpy's SFC64, filled in blocks of ``BLOCK`` elements (each block its own keyed
  ``SeedSequence`` stream, so several threads fill one tensor independently of the thread
  count); on other devices torch's generator on that device — so CPU and CUDA noise for the
  same seed differ.  Kept so that old seed logs replay bit for bit.

Samplers (all with mean 0 and unit variance per element):
- ``Gaussian``:   εⱼ ~ N(0, 1).
- ``Rademacher``: εⱼ ∈ {−1, +1} with probability ½ each.
- ``LowRank(r)``: for a matrix W ∈ R^{m×n}, ε = A·Bᵀ/√r with A ∈ R^{m×r}, B ∈ R^{n×r} Gaussian
  (rank ≤ r); tensors of other dimension fall back to Gaussian.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, ClassVar, Iterable, Iterator, Sequence

import numpy as np
import torch

from . import counter_stream

STREAMS = ("counter", "numpy")
DEFAULT_STREAM = "counter"   # what new noise uses
LEGACY_STREAM = "numpy"      # what wrote every noise record that names no stream
BLOCK = 1 << 18  # elements per independently keyed block of the numpy stream on the CPU
ROW_BLOCK_BYTES = 1 << 24  # the most fp32 update combine_rows yields at once, where the noise allows it

_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max(1, min(8, torch.get_num_threads(), os.cpu_count() or 1)))
    return _POOL


def name_key(name: str) -> int:
    """A stable 64-bit key for a parameter name (blake2b; identical in every process)."""
    return int.from_bytes(hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest(), "little")


def _cpu_fill(out: np.ndarray, key: Sequence[int], draw) -> None:
    """Fill ``out`` (1-D fp32) block by block from the streams ``key + [block index]``."""
    n = out.shape[0]
    blocks = range((n + BLOCK - 1) // BLOCK)

    def fill(b: int) -> None:
        rng = np.random.Generator(np.random.SFC64(np.random.SeedSequence([*key, b])))
        draw(rng, out[b * BLOCK : (b + 1) * BLOCK])

    if len(blocks) <= 1:
        for b in blocks:
            fill(b)
    else:
        list(_pool().map(fill, blocks))


def _gaussian_draw(rng: np.random.Generator, out: np.ndarray) -> None:
    rng.standard_normal(out=out, dtype=np.float32)


def _rademacher_draw(rng: np.random.Generator, out: np.ndarray) -> None:
    bits = rng.integers(0, 2, size=out.shape[0], dtype=np.int8)
    np.multiply(bits, 2, out=out, casting="unsafe")
    out -= 1.0


@dataclass(frozen=True)
class Noise:
    """Base class: a frozen, picklable description of a noise distribution.

    ``include``/``exclude`` are ``fnmatch`` patterns over parameter names: a parameter moves
    when it matches some include pattern and no exclude pattern.  ``stream`` names the
    generator of the bits (module docstring; keyword only).
    """

    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    correlated: bool = False
    stream: str = field(default=DEFAULT_STREAM, kw_only=True)

    kind: ClassVar[str] = "noise"
    # combine() adds up the dense ε that sample() returns, so the noise perturb draws is worth
    # keeping for the next apply (engines' noise cache); False when combine never reads them.
    combine_reuses_samples: ClassVar[bool] = True

    def __post_init__(self) -> None:
        for field_name in ("include", "exclude"):
            value = getattr(self, field_name)
            if isinstance(value, str):
                object.__setattr__(self, field_name, (value,))
            elif not isinstance(value, tuple):
                object.__setattr__(self, field_name, tuple(value))
        if self.stream not in STREAMS:
            raise ValueError(f"noise stream must be one of {', '.join(STREAMS)}, got {self.stream!r}")

    # -- which parameters move -------------------------------------------------------------
    def selects(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.include) and not any(
            fnmatch.fnmatchcase(name, p) for p in self.exclude
        )

    def select(self, names: Iterable[str]) -> list[str]:
        return [n for n in names if self.selects(n)]

    # -- the stream ------------------------------------------------------------------------
    def key(self, seed: int, name: str) -> list[int]:
        """``[seed, name key]`` (name key 0 when correlated): the numpy stream's SeedSequence
        entropy and the counter stream's key material."""
        if not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"noise seed must be a non-negative integer, got {seed!r}")
        return [int(seed), 0 if self.correlated else name_key(name)]

    def counter_key(self, seed: int, name: str) -> tuple[int, int]:
        """The counter stream of ``(seed, name)``: :func:`zoopt.counter_stream.stream_key`."""
        return counter_stream.stream_key(*self.key(seed, name))

    def sample(self, seed: int, name: str, shape: Sequence[int] | torch.Size,
               device: torch.device | str = "cpu") -> torch.Tensor:
        """``ε(seed, name)`` as an fp32 tensor of ``shape`` on ``device``."""
        raise NotImplementedError

    def samples(self, seeds: Sequence[int], name: str, shape: Sequence[int] | torch.Size,
                device: torch.device | str = "cpu") -> torch.Tensor:
        """``ε(seedᵢ, name)`` for every seed, stacked: ``(len(seeds), *shape)`` fp32 on ``device``,
        row i equal to :meth:`sample` of ``seeds[i]`` bit for bit.  Default: one :meth:`sample` per
        seed; the counter stream's Gaussian and Rademacher draw every row in one call (meant for
        small tensors: vectors of many members)."""
        shape = tuple(shape)
        if not seeds:
            return torch.empty((0, *shape), dtype=torch.float32, device=device)
        return torch.stack([self.sample(int(s), name, shape, device) for s in seeds])

    def combine(self, seeds: Sequence[int], coefficients: Sequence[float], name: str,
                shape: Sequence[int] | torch.Size, device: torch.device | str = "cpu",
                sample: Callable[[int], torch.Tensor] | None = None) -> torch.Tensor:
        """``Σᵢ cᵢ·ε(seedᵢ, name)`` in fp32 — the tensor an update adds to ``name``.

        Default: one dense ``ε`` per non-zero coefficient, accumulated in order (``sample(seed)``
        may supply them, e.g. from a cache; it must return :meth:`sample`'s tensor).  Without it the
        ``ε`` come from :meth:`samples`, as many seeds a call as fit in ``ROW_BLOCK_BYTES`` (cheap
        small-tensor updates), accumulated in the same order: the same bits."""
        shape = tuple(shape)
        acc = torch.zeros(shape, dtype=torch.float32, device=device)
        kept = [(int(s), float(c)) for s, c in zip(seeds, coefficients) if c != 0.0]
        if sample is not None:
            for seed, c in kept:
                acc.add_(sample(seed), alpha=c)
            return acc
        per_block = max(1, ROW_BLOCK_BYTES // max(1, 4 * acc.numel()))
        for start in range(0, len(kept), per_block):
            block = kept[start : start + per_block]
            eps = self.samples([s for s, _ in block], name, shape, device)
            for row, (_, c) in zip(eps, block):
                acc.add_(row, alpha=c)
        return acc

    def combine_rows(self, seeds: Sequence[int], coefficients: Sequence[float], name: str,
                     shape: Sequence[int] | torch.Size, device: torch.device | str = "cpu",
                     sample: Callable[[int], torch.Tensor] | None = None,
                     block_bytes: int | None = ROW_BLOCK_BYTES) -> Iterator[tuple[int, torch.Tensor]]:
        """:meth:`combine`'s tensor in blocks of rows (first dimension): yields ``(start, block)``
        with ``block = Σᵢ cᵢ·ε(seedᵢ, name)[start : start + len(block)]``, the blocks in order and
        covering every row, so an apply can add a big tensor's update without holding all of it.

        Default: one block, the whole of :meth:`combine` (dense noise is drawn whole anyway).
        A noise that can compute some rows alone (:class:`LowRank`) yields blocks of at most
        ``block_bytes`` fp32 bytes (at least one row each; ``None``: one block)."""
        yield 0, self.combine(seeds, coefficients, name, shape, device, sample=sample)

    def _torch_generator(self, seed: int, name: str, device: torch.device) -> torch.Generator:
        ss = np.random.SeedSequence(self.key(seed, name))
        return torch.Generator(device=device).manual_seed(int(ss.generate_state(1, np.uint64)[0] >> 1))

    def to_dict(self) -> dict:
        return {"kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class Gaussian(Noise):
    """εⱼ ~ N(0, 1), independent per element."""

    kind: ClassVar[str] = "gaussian"

    def sample(self, seed, name, shape, device="cpu"):
        device = torch.device(device)
        numel = int(np.prod(tuple(shape), dtype=np.int64))
        if self.stream == "counter":
            return counter_stream.normal([self.counter_key(seed, name)], numel, device).view(tuple(shape))
        if device.type == "cpu":
            out = np.empty(numel, dtype=np.float32)
            _cpu_fill(out, self.key(seed, name), _gaussian_draw)
            return torch.from_numpy(out).view(tuple(shape))
        g = self._torch_generator(seed, name, device)
        return torch.randn(tuple(shape), generator=g, device=device, dtype=torch.float32)

    def samples(self, seeds, name, shape, device="cpu"):
        if self.stream != "counter" or not seeds:
            return super().samples(seeds, name, shape, device)
        keys = [self.counter_key(int(s), name) for s in seeds]
        return counter_stream.normal(keys, int(np.prod(tuple(shape), dtype=np.int64)), device).view(len(keys), *tuple(shape))


@dataclass(frozen=True)
class Rademacher(Noise):
    """εⱼ uniform on {−1, +1}, independent per element."""

    kind: ClassVar[str] = "rademacher"

    def sample(self, seed, name, shape, device="cpu"):
        device = torch.device(device)
        numel = int(np.prod(tuple(shape), dtype=np.int64))
        if self.stream == "counter":
            return counter_stream.signs([self.counter_key(seed, name)], numel, device).view(tuple(shape))
        if device.type == "cpu":
            out = np.empty(numel, dtype=np.float32)
            _cpu_fill(out, self.key(seed, name), _rademacher_draw)
            return torch.from_numpy(out).view(tuple(shape))
        g = self._torch_generator(seed, name, device)
        bits = torch.randint(0, 2, tuple(shape), generator=g, device=device, dtype=torch.int8)
        return bits.to(torch.float32).mul_(2).sub_(1)

    def samples(self, seeds, name, shape, device="cpu"):
        if self.stream != "counter" or not seeds:
            return super().samples(seeds, name, shape, device)
        keys = [self.counter_key(int(s), name) for s in seeds]
        return counter_stream.signs(keys, int(np.prod(tuple(shape), dtype=np.int64)), device).reshape(len(keys), *tuple(shape))


@dataclass(frozen=True)
class LowRank(Noise):
    """ε = A·Bᵀ/√r for matrices (rank ≤ r, unit variance per element); Gaussian otherwise.

    Tensors with more than two dimensions are treated as matrices of shape
    ``(shape[0], prod(shape[1:]))``.  Cost per matrix is (m + n)·r draws instead of m·n.

    The factors (:meth:`factors`, :meth:`factor_table`) are the first (m + n)·r Gaussian
    elements of the ``(seed, name)`` stream: A row-major, then B.  With the counter stream they
    are drawn on the device where they are used, the same bits everywhere; with the numpy
    stream they are drawn on the **CPU** on every device (they are small) and moved.  Either
    way a low-rank seed log gives the same weights on CPU and GPU up to matmul rounding.  An
    update is applied as one matrix product per tensor (:meth:`combine`):
    ``Σᵢ cᵢ·Aᵢ·Bᵢᵀ/√r = (A·diag(c))·Bᵀ/√r`` with the members' factors side by side, instead of
    N dense ``ε``.
    """

    rank: int = 1
    kind: ClassVar[str] = "low_rank"
    combine_reuses_samples: ClassVar[bool] = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.rank, int) or self.rank < 1:
            raise ValueError(f"LowRank.rank must be a positive integer, got {self.rank!r}")

    def _matrix(self, name: str, shape) -> tuple[int, int]:
        shape = tuple(shape)
        if len(shape) < 2:
            raise ValueError(f"LowRank.factors: {name!r} has shape {shape}, not a matrix")
        return shape[0], int(np.prod(shape[1:]))

    def factors(self, seed: int, name: str, shape: Sequence[int] | torch.Size,
                device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(A, B)``, fp32 on ``device``, with ``A ∈ ℝ^{m×r}``, ``B ∈ ℝ^{n×r}`` (``n = prod(shape[1:])``):
        the matrix noise is ``A·Bᵀ/√r``.  Only for tensors of two or more dimensions."""
        a, b = self.factor_table([seed], name, shape, device)
        return a[0], b[0]

    def factor_table(self, seeds: Sequence[int], name: str, shape: Sequence[int] | torch.Size,
                     device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Every seed's factors of matrix ``name``, stacked: ``A`` of shape ``(S, m, r)`` and ``B``
        of shape ``(S, n, r)`` (fp32 on ``device``), row s = :meth:`factors` of ``seeds[s]``.
        Counter stream: one batched draw on ``device`` (a repeated seed is drawn once)."""
        m, n = self._matrix(name, shape)
        r = self.rank
        distinct = list(dict.fromkeys(int(s) for s in seeds))
        if self.stream == "counter":
            flat = counter_stream.normal([self.counter_key(s, name) for s in distinct], (m + n) * r, device)
        else:
            flat = torch.stack([Gaussian(correlated=self.correlated, stream=self.stream).sample(s, name, ((m + n) * r,), "cpu")
                                for s in distinct]).to(device) if distinct else torch.empty((0, (m + n) * r), device=device)
        if len(distinct) != len(seeds):
            flat = flat[torch.tensor([distinct.index(int(s)) for s in seeds], dtype=torch.long, device=flat.device)]
        return flat[:, : m * r].reshape(len(seeds), m, r), flat[:, m * r:].reshape(len(seeds), n, r)

    def _vector(self, seed, name, shape, device) -> torch.Tensor:
        gauss = Gaussian(correlated=self.correlated, stream=self.stream)
        if self.stream == "counter":
            return gauss.sample(seed, name, shape, device)
        return gauss.sample(seed, name, shape, "cpu").to(device)

    def _vector_sum(self, seeds, coefficients, name, shape, device) -> torch.Tensor:
        """The default dense ``Σᵢ cᵢ·εᵢ`` of a vector, in order, its ``εᵢ`` drawn in one call."""
        kept = [(int(s), float(c)) for s, c in zip(seeds, coefficients) if c != 0.0]
        acc = torch.zeros(shape, dtype=torch.float32, device=device)
        eps = self.samples([s for s, _ in kept], name, shape, device)
        for e, (_, c) in zip(eps, kept):
            acc.add_(e, alpha=c)
        return acc

    def samples(self, seeds, name, shape, device="cpu"):
        if len(tuple(shape)) < 2 and self.stream == "counter":
            return Gaussian(correlated=self.correlated, stream=self.stream).samples(seeds, name, shape, device)
        return super().samples(seeds, name, shape, device)

    def sample(self, seed, name, shape, device="cpu"):
        shape = tuple(shape)
        if len(shape) < 2:
            return self._vector(seed, name, shape, device)
        if self.stream == "counter":
            a, b = self.factors(seed, name, shape, device)
            return (a @ b.T).div_(self.rank ** 0.5).view(shape)
        a, b = self.factors(seed, name, shape)
        return (a @ b.T).div_(self.rank ** 0.5).view(shape).to(device)

    def combine(self, seeds, coefficients, name, shape, device="cpu", sample=None):
        """``Σᵢ cᵢ·εᵢ`` as ``(A·diag(c))·Bᵀ/√r`` for matrices (one product; equal to the dense
        sum up to fp32 rounding), the default dense sum for vectors: :meth:`combine_rows` as
        one block."""
        [(_, whole)] = self.combine_rows(seeds, coefficients, name, shape, device, block_bytes=None)
        return whole

    def combine_rows(self, seeds, coefficients, name, shape, device="cpu", sample=None, block_bytes=ROW_BLOCK_BYTES):
        """Matrices: ``a[rows]·bᵀ`` per block of rows (``block_bytes=None``: one block) with
        ``(a, b)`` = :meth:`update_factors` (drawn once, side by side, where the product runs);
        vectors: one block, the default dense sum."""
        shape = tuple(shape)
        if len(shape) < 2:
            yield 0, self._vector_sum(seeds, coefficients, name, shape, device)
            return
        if not any(c != 0.0 for c in coefficients):
            yield 0, torch.zeros(shape, dtype=torch.float32, device=device)
            return
        a, b = self.update_factors(seeds, coefficients, name, shape, device)
        step = max(1, shape[0] if block_bytes is None else int(block_bytes) // (4 * b.shape[0]))
        for start in range(0, max(shape[0], 1), step):  # a 0-row matrix: one empty block
            block = a[start : start + step] @ b.T
            yield start, block.view(block.shape[0], *shape[1:])

    def update_factors(self, seeds: Sequence[int], coefficients: Sequence[float], name: str,
                       shape: Sequence[int] | torch.Size, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """``(a, b)`` with ``Σᵢ cᵢ·εᵢ = a·bᵀ`` for matrix ``name``: the members with ``cᵢ ≠ 0`` side
        by side, ``a = [A₁·c₁/√r | A₂·c₂/√r | …]`` (m × S·r, the fp32 product ``Aᵢ·(cᵢ/√r)``) and
        ``b = [B₁ | B₂ | …]`` (n × S·r), on ``device`` — the factors an update multiplies out
        (:meth:`factor_table`'s, drawn on ``device`` for the counter stream, on the CPU and moved
        for the numpy stream)."""
        kept = [(int(s), float(c)) for s, c in zip(seeds, coefficients) if c != 0.0]
        coef = torch.tensor([c / self.rank ** 0.5 for _, c in kept], dtype=torch.float32).repeat_interleave(self.rank)
        table_device = device if self.stream == "counter" else "cpu"
        fa, fb = self.factor_table([s for s, _ in kept], name, shape, table_device)
        m, n = fa.shape[1], fb.shape[1]
        a = fa.transpose(0, 1).reshape(m, -1).mul(coef.to(fa.device)).to(device)
        b = fb.transpose(0, 1).reshape(n, -1).to(device)
        return a, b


def noise_from_dict(config: dict) -> Noise:
    """Rebuild a noise from :meth:`Noise.to_dict` output (or a user config with ``kind``); a
    config that names no ``stream`` gets the default for new noise (:data:`DEFAULT_STREAM`)."""
    from .registry import NOISE, RegistryError

    config = dict(config)
    kind = config.pop("kind", "gaussian")
    cls = NOISE.get(kind)
    for key in ("include", "exclude"):
        if key in config and isinstance(config[key], list):
            config[key] = tuple(config[key])
    try:
        return cls(**config)
    except TypeError as exc:
        raise RegistryError(f"noise {kind!r}: {exc}") from None


def noise_from_record(config: dict) -> Noise:
    """:func:`noise_from_dict` for a *written* record (a seed log's header, an ES state): one
    that names no ``stream`` was written before streams were recorded, by :data:`LEGACY_STREAM`."""
    return noise_from_dict({"stream": LEGACY_STREAM, **dict(config)})
