"""The counter-based noise stream: the same bits for (seed, name, element index) on every device.

**Bits.**  A stream is SplitMix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number
generators", OOPSLA 2014; ``java.util.SplittableRandom``) with its own state ``k`` and odd
increment ``γ``, both from blake2b of ``(seed, name key)`` (:func:`stream_key`).  Word ``i``
(i = 0, 1, …) is

    wᵢ = mix64(k + (i + 1)·γ  mod 2⁶⁴),
    mix64(z): z ← (z ⊕ z≫30)·0xBF58476D1CE4E5B9;  z ← (z ⊕ z≫27)·0x94D049BB133111EB;  z ⊕ z≫31

(Stafford's variant 13, SplitMix64's finaliser), so element ``i`` is a pure function of the key
and ``i``: any chunk of a tensor, on any device, in any order, gives the same bits.  It is
computed with int64 tensor operations on the tensor's device — wrap-around ``+``/``×`` are the
same bits as unsigned arithmetic, and ``≫`` (arithmetic in torch) is masked to a logical shift.

**Values**, from bits by exact integer steps and correctly rounded IEEE operations only (no
``log``/``exp``/``sin``/``cos``, whose last bit differs between CPU and CUDA libraries, and no
fused multiply-add):

- Rademacher: element ``i`` is ``+1`` or ``−1`` as bit ``i mod 64`` of word ``⌊i/64⌋`` is 0 or 1.
- Gaussian: element ``i`` from word ``wᵢ``: the sign is bit 63; ``y = (bits 0…52) | 1`` is an odd
  53-bit integer and ``v = y/2⁵³ ∈ (0, 1)`` a two-sided tail probability, ``|z| = Φ⁻¹(1 − v/2)``.
  ``y`` converts exactly to float64, whose exponent is the octave ``p = ⌊log₂ y⌋`` (0…52) and
  whose next ``KNOT_BITS`` mantissa bits the knot ``j``; the 24 bits after them are the fraction
  ``f``.  Then ``|z| = base[p, j] + f·slope[p, j]`` in float32 (one rounded ``×``, one rounded
  ``+``): linear interpolation between the knots ``Φ⁻¹(1 − v/2)`` (:mod:`zoopt.normal_table`) at
  ``v = 2^(p−53)·(1 + j/2^KNOT_BITS)``, computed once in float64 (:class:`statistics.NormalDist`,
  tested against an independent ``ndtri``) and rounded to float32; the slopes are the exact
  differences of those float32 knots, and the table is pinned by its checksum.  Octaves are a geometric sub-table: the
  tail reaches ``|z| = Φ⁻¹(1 − 2⁻⁵⁴) = 8.29``; linear interpolation is within 5.1e-8 of the
  exact quantile, and the float32 values within 2 float32 ulps of ``Φ⁻¹(1 − v/2)`` (6e-8 below
  |z| = 0.5; tested).  Negative values come from a negated copy of the table (exactly ``−z``).

**Kernels.**  On the CPU a draw of at least ``FUSED_MIN`` elements runs as one fused kernel
(the formulas above written once as tensor expressions, compiled by ``torch.compile``: one
pass, no temporaries, and no fused multiply-add — ``-ffp-contract=off``, set explicitly; with
contraction on, 1,139 of 2²⁰ values differ in the last bit), the first time in a process after
a compile (seconds; cached on disk by inductor).  Smaller draws, other devices, forked children
(GNU OpenMP is not fork-safe) and any machine where compiling fails (no C++ compiler: logged
once) run the same steps as eager in-place tensor operations: on the CPU in chunks of at most
``CPU_CHUNK`` elements — below torch's parallel grain, so each operation runs on the calling
thread — spread over a small thread pool; elsewhere in chunks of ``DEVICE_CHUNK`` that bound
the temporaries (~28 bytes an element).  Results never depend on the kernel, the chunking, the
thread count or the device (tested element for element against each other and against plain
Python).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Sequence

import torch

from .normal_table import KNOT_BITS, OCTAVES, TABLE_CHECKSUM, table_checksum, tables

log = logging.getLogger(__name__)

MASK64 = (1 << 64) - 1
MIX1, MIX2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
CPU_CHUNK = 1 << 15       # elements per piece of CPU work (torch's GRAIN_SIZE: no intra-op threads)
DEVICE_CHUNK = 1 << 20    # elements per piece of work elsewhere (bounds the temporaries)
FUSED_MIN = 1 << 12       # CPU draws of this many elements or more: one compiled kernel (4,096: 97 µs, eager 248 µs)
FUSED = os.environ.get("ZOOPT_NOISE_FUSED", "1") != "0"  # 0: always the eager kernels (same bits)

if sys.byteorder != "little":  # Rademacher unpacks words through an int32 view
    raise ImportError("zoopt's counter noise stream assumes a little-endian machine")


def signed64(x: int) -> int:
    """``x mod 2⁶⁴`` as a signed int64 (the bits torch stores)."""
    x &= MASK64
    return x - (1 << 64) if x >> 63 else x


def mix64(z: int) -> int:
    """SplitMix64's finaliser on a Python int (the reference the tensor code must equal)."""
    z &= MASK64
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def stream_key(seed: int, name_key: int) -> tuple[int, int]:
    """``(k, γ)`` of the stream for ``(seed, name_key)`` (``name_key`` 0: the correlated mode).

    ``k, g`` = the two little-endian halves of blake2b-128(``"{seed}:{name_key}"``, person
    ``zoopt.counter1``); ``γ = g | 1``, xored with ``0xAAAA…AAAA`` when ``γ`` has fewer than 24 bit
    transitions (SplittableRandom's ``mixGamma`` rule against weak increments)."""
    digest = hashlib.blake2b(f"{int(seed)}:{int(name_key)}".encode(), digest_size=16, person=b"zoopt.counter1").digest()
    k, g = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little") | 1
    if bin(g ^ (g >> 1)).count("1") < 24:
        g ^= 0xAAAAAAAAAAAAAAAA
    return k, g


def reference_words(key: tuple[int, int], start: int, count: int) -> list[int]:
    """Words ``start … start + count − 1`` of stream ``key`` in plain Python (for tests)."""
    k, g = key
    return [mix64(k + (i + 1) * g) for i in range(start, start + count)]


_ARANGE: dict[str, torch.Tensor] = {}


def _counters(device: torch.device, n: int) -> torch.Tensor:
    """``1, 2, …, n`` (int64) on ``device``, cached: the ``i + 1`` of each chunk's words."""
    key = str(device)
    have = _ARANGE.get(key)
    if have is None or have.numel() < n:
        have = torch.arange(1, max(n, CPU_CHUNK) + 1, dtype=torch.int64, device=device)
        _ARANGE[key] = have
    return have[:n]


# -- the kernels: one chunk of rows × words -------------------------------------------------
class _Scratch(threading.local):
    """Per-thread buffers for CPU chunks (allocating each chunk anew costs more than the work)."""

    def get(self, n: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        if device.type != "cpu":  # device chunks: fresh buffers from the caching allocator
            return (torch.empty(n, dtype=torch.int64, device=device), torch.empty(n, dtype=torch.int64, device=device),
                    torch.empty(n, dtype=torch.float64, device=device), torch.empty(n, dtype=torch.float32, device=device))
        if getattr(self, "n", 0) < n:
            self.bufs = (torch.empty(n, dtype=torch.int64), torch.empty(n, dtype=torch.int64),
                         torch.empty(n, dtype=torch.float64), torch.empty(n, dtype=torch.float32))
            self.n = n
        return tuple(b[:n] for b in self.bufs)


_SCRATCH = _Scratch()


def _words(w: torch.Tensor, t: torch.Tensor, steps: torch.Tensor, ks: torch.Tensor) -> None:
    """``w[r, c] = mix64(k_r + (first + c + 1)·γ_r)`` in place (``w``, ``t``: (rows, cols) int64),
    from ``steps[r, c] = (c + 1)·γ_r`` and ``ks[r] = k_r + first·γ_r`` (signed, (rows, 1))."""
    torch.add(steps[:, :w.shape[1]], ks, out=w)
    torch.bitwise_right_shift(w, 30, out=t).bitwise_and_((1 << 34) - 1)
    w.bitwise_xor_(t).mul_(signed64(MIX1))
    torch.bitwise_right_shift(w, 27, out=t).bitwise_and_((1 << 37) - 1)
    w.bitwise_xor_(t).mul_(signed64(MIX2))
    torch.bitwise_right_shift(w, 31, out=t).bitwise_and_((1 << 33) - 1)
    w.bitwise_xor_(t)


def _normal_chunk(out: torch.Tensor, streams: tuple[torch.Tensor, ...], first: int) -> None:
    """Gaussian elements ``first … first + out.shape[1] − 1`` of each row's stream into ``out``
    (rows, cols) float32."""
    rows, cols = out.shape
    w, t, d, f = _SCRATCH.get(rows * cols, out.device)
    k, g, steps = streams
    _words(w.view(rows, cols), t.view(rows, cols), steps, torch.add(k, g, alpha=first))
    _gaussian(w, t, d, f, out)


def _gaussian(w: torch.Tensor, t: torch.Tensor, d: torch.Tensor, f: torch.Tensor, out: torch.Tensor) -> None:
    """``out`` (float32, any shape of ``w.numel()`` elements) ← the Gaussian values of the words
    ``w`` (1-D int64, overwritten; ``t``, ``d``, ``f`` scratch of the same length: int64,
    float64, float32).  The module docstring's formula, step by step."""
    torch.bitwise_and(w, (1 << 53) - 1, out=t).bitwise_or_(1)       # y: odd, < 2**53
    d.copy_(t)                                                       # exact
    bits = d.view(torch.int64)
    torch.bitwise_right_shift(bits, 52 - KNOT_BITS, out=t).bitwise_and_((64 << KNOT_BITS) - 1)  # (e mod 64, j)
    w.bitwise_right_shift_(63 - 6 - KNOT_BITS).bitwise_and_(64 << KNOT_BITS)                    # the sign bit
    t.bitwise_or_(w)                                                 # table index
    torch.bitwise_right_shift(bits, 28 - KNOT_BITS, out=w).bitwise_and_((1 << 24) - 1)
    f.copy_(w)                                                       # the 24-bit fraction, exact
    base, slope = tables(out.device)
    contiguous = out.is_contiguous()
    flat = out.view(-1) if contiguous else torch.empty(w.numel(), dtype=torch.float32, device=out.device)
    torch.index_select(slope, 0, t, out=flat)
    flat.mul_(f)                                                     # f·slope, rounded
    torch.index_select(base, 0, t, out=f)
    flat.add_(f)                                                     # + base, rounded
    if not contiguous:
        out.copy_(flat.view(out.shape))


def normal_from_words(words: torch.Tensor) -> torch.Tensor:
    """The Gaussian values (float32, same shape and device) of int64 ``words`` — what
    :func:`normal` applies to a stream's words; for tests and checks on crafted words."""
    w = words.reshape(-1).clone()
    out = torch.empty(words.shape, dtype=torch.float32, device=words.device)
    _gaussian(w, torch.empty_like(w), torch.empty(w.shape, dtype=torch.float64, device=w.device),
              torch.empty(w.shape, dtype=torch.float32, device=w.device), out)
    return out


def _sign_chunk(out: torch.Tensor, streams: tuple[torch.Tensor, ...], first_word: int) -> None:
    """Rademacher elements of words ``first_word …`` (64 per word) into ``out`` (rows, 64·words)
    float32: ±1.0 written as float bits ``0x3F800000 | bit << 31``, unpacked in pieces of at most
    ``CPU_CHUNK`` elements (each word is hashed once, every bit of it used)."""
    rows, cols = out.shape
    words = cols // 64
    device = out.device
    w, t, _, _ = _SCRATCH.get(rows * words, device)
    w, t = w.view(rows, words), t.view(rows, words)
    k, g, steps = streams
    _words(w, t, steps, torch.add(k, g, alpha=first_word))
    halves = w.view(torch.int32).view(rows, words, 2, 1)             # bits 0–31, then 32–63
    shifts = _bit_shifts(device)                                     # bit b to the sign bit
    ints = out.view(torch.int32).view(rows, words, 2, 32)
    step = max(1, CPU_CHUNK // (64 * rows)) if device.type == "cpu" else words
    for s in range(0, words, step):
        piece = ints[:, s:s + step]
        torch.bitwise_left_shift(halves[:, s:s + step], shifts, out=piece)
        piece.bitwise_and_(-(1 << 31)).bitwise_or_(0x3F800000)


def _bit_shifts(device: torch.device) -> torch.Tensor:
    key = "shifts:" + str(device)
    if key not in _ARANGE:
        _ARANGE[key] = torch.arange(31, -1, -1, dtype=torch.int32, device=device)
    return _ARANGE[key]


def _stream_tensors(keys: Sequence[tuple[int, int]], cols: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(k, γ, steps)`` on ``device``: ``k_r``, ``γ_r`` as signed (rows, 1) int64, and
    ``steps[r, c] = (c + 1)·γ_r`` for c < cols, shared by every chunk of one draw.  A chunk's
    offsets ``k_r + first·γ_r`` are one small device op: no per-chunk host-to-device copy."""
    kg = torch.tensor([[signed64(k), signed64(g)] for k, g in keys], dtype=torch.int64).to(device)
    k, g = kg[:, :1], kg[:, 1:]
    return k, g, _counters(device, cols)[None, :] * g


# -- the fused CPU kernels: the same formulas as one compiled expression ---------------------
def _mixed(z: torch.Tensor) -> torch.Tensor:
    """``mix64`` of int64 ``z`` as one tensor expression (logical shifts as masked arithmetic ones)."""
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * signed64(MIX1)
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * signed64(MIX2)
    return z ^ ((z >> 31) & ((1 << 33) - 1))


def _normal_expression(k: torch.Tensor, g: torch.Tensor, count: int, base: torch.Tensor,
                       slope: torch.Tensor) -> torch.Tensor:
    """Gaussian elements ``0 … count − 1`` of the streams ``(k, γ)`` ((rows, 1) int64 each):
    :func:`_words` then :func:`_gaussian`, step for step."""
    w = _mixed(k + torch.arange(1, count + 1, dtype=torch.int64, device=k.device) * g)
    bits = ((w & ((1 << 53) - 1)) | 1).to(torch.float64).view(torch.int64)
    index = ((bits >> (52 - KNOT_BITS)) & ((64 << KNOT_BITS) - 1)) | ((w >> (63 - 6 - KNOT_BITS)) & (64 << KNOT_BITS))
    fraction = ((bits >> (28 - KNOT_BITS)) & ((1 << 24) - 1)).to(torch.float32)
    return slope[index] * fraction + base[index]


def _signs_expression(k: torch.Tensor, g: torch.Tensor, count: int) -> torch.Tensor:
    """Rademacher elements ``0 … count − 1``: bit ``i mod 64`` of word ``⌊i/64⌋``, 0 → +1, 1 → −1."""
    i = torch.arange(count, dtype=torch.int64, device=k.device)
    w = _mixed(k + ((i >> 6) + 1) * g)
    return (1 - 2 * ((w >> (i & 63)) & 1)).to(torch.float32)


_COMPILED: dict[str, object] = {}
_WORKING: set[str] = set()  # kernels that have run once
_COMPILE_LOCK = threading.Lock()


def _fused(name: str, expression):
    """The compiled ``expression`` (built on first use), or None when fusing is off or compiling
    failed on this machine (then the eager kernels run: the same bits)."""
    if not FUSED:
        return None
    if name not in _COMPILED:
        # no FMA contraction (inductor's default, pinned here against an environment that changes it)
        _COMPILED[name] = torch.compile(expression, dynamic=True, fullgraph=True,
                                        options={"cpp.enable_floating_point_contract_flag": "off"})
    return _COMPILED[name]


def _run_fused(name: str, expression, *args) -> torch.Tensor | None:
    """Call the fused kernel ``name`` under a lock (compiling is not thread-safe); None when there
    is none.  Its first call compiles it: if that fails, this process never tries again (and the
    eager kernels draw); a failure of a kernel that has run before is an error like any other."""
    with _COMPILE_LOCK:
        kernel = _fused(name, expression)
        if kernel is None:
            return None
        if name in _WORKING:
            return kernel(*args)
        try:
            out = kernel(*args)
        except Exception as e:  # noqa: BLE001 - no C++ compiler, or inductor cannot build here
            log.warning("counter noise stream: the fused CPU kernel is unavailable (%s: %s); drawing with the "
                        "eager kernels (the same bits, slower)", type(e).__name__, str(e).splitlines()[0] if str(e) else "")
            _COMPILED[name] = None
            return None
        _WORKING.add(name)
        return out


_FORKED = False  # set in a forked child (see _forget_pool)


def _fusable(rows: int, count: int, device: torch.device) -> bool:
    return device.type == "cpu" and rows * count >= FUSED_MIN and not _FORKED


# -- drawing whole tensors ------------------------------------------------------------------
_POOL: ThreadPoolExecutor | None = None


def _pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        if _FORKED:  # torch rebuilds its own fork-leaked thread pool on first use, racily (see _forget_pool)
            torch.set_num_threads(torch.get_num_threads())
        _POOL = ThreadPoolExecutor(max(1, min(8, torch.get_num_threads(), os.cpu_count() or 1)),
                                   thread_name_prefix="zoopt-noise")
    return _POOL


def _forget_pool() -> None:
    """A forked child has the parent's pool object but none of its threads: make a new one.  Nor
    does it have the parent's OpenMP threads, which the fused kernels' parallel loops would wait
    for (GNU OpenMP is not fork-safe): a forked child draws with the eager kernels.

    Torch leaks its own thread pool at a fork and rebuilds it on the first call that asks for it,
    but not atomically: two of our workers asking at once can see it released and not yet rebuilt
    ("Invalid thread pool!").  So the new pool is made only after ``torch.set_num_threads`` has
    rebuilt torch's, on one thread."""
    global _POOL, _FORKED
    _POOL = None
    _FORKED = True


os.register_at_fork(after_in_child=_forget_pool)


def _run(chunks: list, work) -> None:
    if len(chunks) <= 1:
        for c in chunks:
            work(c)
    else:
        list(_pool().map(work, chunks))


def normal(keys: Sequence[tuple[int, int]], count: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(len(keys), count)`` float32: row r holds Gaussian elements ``0 … count − 1`` of stream
    ``keys[r]`` (from :func:`stream_key`), computed on ``device``."""
    device = torch.device(device)
    if _fusable(len(keys), count, device):
        k, g, _ = _stream_tensors(keys, 0, device)
        out = _run_fused("normal", _normal_expression, k, g, count, *tables(device))
        if out is not None:
            return out
    out = torch.empty((len(keys), count), dtype=torch.float32, device=device)
    if out.numel() == 0:
        return out
    step = min(count, max(1, (CPU_CHUNK if device.type == "cpu" else DEVICE_CHUNK) // len(keys)))
    streams = _stream_tensors(keys, step, device)
    _run([(s, min(s + step, count)) for s in range(0, count, step)],
         lambda c: _normal_chunk(out[:, c[0]:c[1]], streams, c[0]))
    return out


def words(keys: Sequence[tuple[int, int]], count: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(len(keys), count)`` int64: the raw words ``w_0 … w_{count−1}`` of each stream (signed
    view of the unsigned 64-bit values) — for tests and bit-equality checks."""
    device = torch.device(device)
    out = torch.empty((len(keys), count), dtype=torch.int64, device=device)
    if out.numel():
        k, _, steps = _stream_tensors(keys, count, device)
        _words(out, torch.empty_like(out), steps, k)
    return out


def signs(keys: Sequence[tuple[int, int]], count: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """``(len(keys), count)`` float32 of ±1: Rademacher elements ``0 … count − 1`` of each stream."""
    device = torch.device(device)
    if _fusable(len(keys), count, device):
        k, g, _ = _stream_tensors(keys, 0, device)
        out = _run_fused("signs", _signs_expression, k, g, count)
        if out is not None:
            return out
    words = -(-count // 64)
    full = torch.empty((len(keys), words * 64), dtype=torch.float32, device=device)
    if full.numel() == 0:
        return full[:, :count]
    step = min(words, max(1, (CPU_CHUNK // 8 if device.type == "cpu" else DEVICE_CHUNK // 64) // len(keys)))
    streams = _stream_tensors(keys, step, device)
    _run([(s, min(s + step, words)) for s in range(0, words, step)],
         lambda c: _sign_chunk(full[:, 64 * c[0]:64 * c[1]], streams, c[0]))
    return full[:, :count] if count != words * 64 else full


__all__ = ["stream_key", "normal", "signs", "words", "normal_from_words", "mix64", "reference_words", "tables", "TABLE_CHECKSUM",
           "table_checksum", "KNOT_BITS", "OCTAVES"]
