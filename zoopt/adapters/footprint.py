"""What fits where: the memory of an ES run in full or adapter space, from measured figures.

``python -m zoopt.adapters.footprint`` prints the markdown table of :func:`fits_table`.

The figures come from ``docs/results/adapter_memory.json``, which
``tests/benchmarks/adapter_memory.py`` writes after measuring one ES step (and plain generation)
on a Qwen2.5-1.5B-shaped model on the CPU.  This module extends them to other sizes with a model
that is deliberately simple.  For one model:

- ``n``: base parameters (a tied embedding counted once);
- ``L``: weights of the decoder's linear layers (q, k, v, o, gate, up, down);
- ``h``: weights of the LM head (vocab × hidden);
- ``a``: adapter parameters, LoRA rank ``r`` on every decoder linear layer: ``r·(in + out)`` each;
- ``t``: trained parameters: ``n`` in full space, ``a`` in adapter space;
- ``s``: the update rule's state in bytes per trained weight (``sgd`` 0, ``momentum`` 4,
  ``adam`` 8: fp32 buffers beside the master, :mod:`zoopt.engines.rule_state`).

**The frozen base's stored bytes**, ``W``::

    bf16:        W = 2·n
    int8, int4:  W = 2·(n − L − h·[head untied]) + q·(L + h·[head quantized])

``quantize_base`` quantizes every ``nn.Linear``, the LM head included: a *tied* head gets a
quantized copy of its own and the embedding stays bf16 (the JSON's ``head_quantized``).  ``q`` is
the bytes per quantized weight: int8 measured (int8 values, an fp32 scale and an int8 zero point
per row); int4 on the CPU measured when the JSON holds the ``adapter-int4`` case, else taken to be
int8's — torchao stores int4 *unpacked* in int8 on the CPU (the JSON's ``int4_packed: false``;
were it packed, int8's ``q`` less 0.5); int4 on a GPU (packed, 4 bits plus a bf16 scale and zero
point per group of 32) ``q = 0.625`` — assumed, not measured here.

**device_bytes**, the weights of a run on one GPU (analytic; the KV cache, activations and the CUDA
context are *not* in it, hence the 20 % headroom of :data:`GPUS`)::

    full:     D = 2·n + 4·n + s·n                     (bf16 working weights, fp32 master, rule state)
    adapter:  D = W + w_a·a + 4·a + s·a + N·w_a·a     (frozen base, working adapter, fp32 master,
                                                       rule state, the population's N adapters)

``N`` (``members``, default 0): the population call holds every member's adapter at once
(:func:`zoopt.engines.adapter_rows.member_tables`; on vLLM its LoRA slots) — 32 members of a
7B's r=8 adapter are 2.6 GB, more than the adapter itself; full space runs Gaussian members one
at a time and holds no such copies.

``w_a`` = 4: PEFT keeps the adapter in fp32 on a bf16 base (measured: the adapter's stored bytes
per weight).

**host_bytes**, the peak resident memory of one ES step on the CPU (what the benchmark measures),
extended linearly in ``n``::

    H = R + W + k·n + s·t + max(0, N − N₀)·w_a·a,    k = (P − R − W₀) / n₀

with ``P`` the measured step peak, ``R`` the measured process before the model (libraries,
tokenizer, first-call tables), ``W₀`` and ``n₀`` the measured model's base bytes and parameters:
``k`` is everything else the step held, per base parameter (master, adapter, noise, activations,
allocator slack; measured with ``sgd``, hence ``+ s·t``; and with ``N₀`` members, hence the
member adapters beyond them in adapter space).  Its fixed parts (a few tens of MiB at
1.5 B) grow with ``n`` here, so larger models are slightly over-estimated.  For the measured shape
``H = P`` by construction; ``tests/test_adapter_footprint.py`` holds the formulas to the JSON.

Full space trains every weight of a bf16 base; a quantized base needs adapter space
(:func:`zoopt.adapters.quantize.check_quantization`), so the table has no full-space int8/int4 rows.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

DEFAULT_RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results" / "adapter_memory.json"
BASES = ("bf16", "int8", "int4")
RULE_STATE_BYTES = {"sgd": 0, "momentum": 4, "adam": 8}
INT4_PACKED_Q = 0.625  # GPU int4: 0.5 byte per weight + bf16 scale and zero per group of 32 (4/32)
GPUS = (16, 24, 40, 48, 80, 141)  # GiB; a GPU fits when device_bytes ≤ 80 % of it
HOSTS = (16, 32, 64, 128, 256)    # GiB of RAM; fits when host_bytes ≤ 90 % of it
GPU_HEADROOM, HOST_HEADROOM = 0.8, 0.9
GIB = 1 << 30
DOC_MEMBERS = 32  # the population docs/adapters.md's table holds at once: the paper's N
_CASE = {("full", "bf16"): "full-bf16", ("adapter", "bf16"): "adapter-bf16",
         ("adapter", "int8"): "adapter-int8", ("adapter", "int4"): "adapter-int4"}


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's layout (Qwen2 / Llama): enough to count n, L, h and a."""

    name: str
    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int
    tied: bool
    qkv_bias: bool = True
    head_dim: int | None = None

    @property
    def _dims(self) -> tuple[int, int]:
        d = self.head_dim or self.hidden // self.heads
        return self.heads * d, self.kv_heads * d

    def _linears(self) -> list[tuple[int, int]]:
        """(in, out) of each linear layer of one decoder layer."""
        q, kv, hd, i = *self._dims, self.hidden, self.intermediate
        return [(hd, q), (hd, kv), (hd, kv), (q, hd), (hd, i), (hd, i), (i, hd)]

    @property
    def linear(self) -> int:
        """L: the decoder's linear weights."""
        return self.layers * sum(a * b for a, b in self._linears())

    @property
    def head(self) -> int:
        """h: the LM head's weights."""
        return self.vocab * self.hidden

    @property
    def params(self) -> int:
        """n: every parameter (embedding, head unless tied, linears, q/k/v biases, norms)."""
        q, kv = self._dims
        per_layer = sum(a * b for a, b in self._linears()) + (q + 2 * kv) * self.qkv_bias + 2 * self.hidden
        return self.head * (1 if self.tied else 2) + self.layers * per_layer + self.hidden

    def lora(self, r: int) -> int:
        """a: LoRA parameters of rank ``r`` on every decoder linear layer."""
        return r * self.layers * sum(a + b for a, b in self._linears())


MODELS = (
    Shape("Qwen2.5-0.5B", 896, 4864, 24, 14, 2, 151936, tied=True),
    Shape("Qwen2.5-1.5B", 1536, 8960, 28, 12, 2, 151936, tied=True),
    Shape("Qwen2.5-3B", 2048, 11008, 36, 16, 2, 151936, tied=True),
    Shape("Qwen2.5-7B", 3584, 18944, 28, 28, 4, 152064, tied=False),
    Shape("Llama-3.1-8B", 4096, 14336, 32, 32, 8, 128256, tied=False, qkv_bias=False),
    Shape("Qwen2.5-14B", 5120, 13824, 48, 40, 8, 152064, tied=False),
)
# the benchmark's model: Qwen2.5-1.5B's layout with SmolLM2's 49 152-token vocabulary
BENCH_SHAPE = Shape("qwen2.5-1.5b-shape", 1536, 8960, 28, 12, 2, 49152, tied=True)


@dataclass(frozen=True)
class Measured:
    """The benchmark's figures that the model needs (:func:`load_measured`)."""

    cases: dict           # case name → {runtime, peak, base_stored, base_params, trained_params, ...}
    q: dict               # base → bytes per quantized weight on the CPU ("int8", and "int4" when measured)
    int4_packed: bool
    adapter_bytes_per_weight: float
    head_quantized: bool
    r: int
    shape: dict           # the measured model's n, L, h, a, tied
    members: int = 4      # N₀: the population the step was measured with

    def k(self, case: str) -> float:
        """Bytes per base parameter the step held beyond the process and the base (module docstring)."""
        c = self.cases[case]
        return (c["peak"] - c["runtime"] - c["base_stored"]) / c["base_params"]


def load_measured(path: str | Path | None = None) -> Measured:
    """The figures of ``tests/benchmarks/adapter_memory.py``'s JSON (default: the committed one)."""
    data = json.loads(Path(path or DEFAULT_RESULTS).read_text())
    n, L, h, tied = data["base_params"], data["linear_params"], data["head_params"], data["head_tied"]
    cases, q, head_quantized, adapter_bpw = {}, {}, True, 4.0
    for name, c in data["cases"].items():
        cases[name] = {"runtime": c["runtime_rss_bytes"], "peak": c["step_peak_bytes"],
                       "generate_peak": c["generate_peak_bytes"], "base_stored": c["base_stored_bytes"],
                       "base_params": c["base_params"], "trained_params": c["trained_params"],
                       "adapter_stored": c["adapter_stored_bytes"], "master": c["master_bytes"],
                       "working": c["working_bytes"]}
        if c["quantization"] != "none":
            head_quantized = c["head_quantized"]
            quantized = L + h * head_quantized
            q[c["quantization"]] = (c["base_stored_bytes"] - 2 * (n - L - h * (not tied))) / quantized
        if c["space"] == "adapter":
            adapter_bpw = c["adapter_stored_bytes"] / c["trained_params"]
    return Measured(cases=cases, q=q, int4_packed=bool(data.get("int4_packed", False)),
                    adapter_bytes_per_weight=adapter_bpw, head_quantized=head_quantized, r=data["adapter"]["r"],
                    members=int(data["members"]),
                    shape={"n": n, "L": L, "h": h, "tied": tied,
                           "a": next((c["trained_params"] for c in data["cases"].values() if c["space"] == "adapter"),
                                     None)})


def _counts(model: Shape | int, measured: Measured, r: int) -> tuple[int, float, float, float, bool]:
    """(n, L, h, a, tied) of a shape; of a bare parameter count, the measured shape's fractions."""
    if isinstance(model, Shape):
        return model.params, model.linear, model.head, model.lora(r), model.tied
    n, s = int(model), measured.shape
    if r != measured.r or s["a"] is None:
        raise ValueError(f"a bare parameter count takes the measured adapter (r={measured.r}); give a Shape for r={r}")
    return n, n * s["L"] / s["n"], n * s["h"] / s["n"], n * s["a"] / s["n"], s["tied"]


def quantized_bytes(base: str, measured: Measured, gpu: bool) -> float:
    """``q``: bytes per quantized weight of ``base`` (module docstring)."""
    if base == "int8":
        return measured.q["int8"]
    if gpu:
        return INT4_PACKED_Q
    if "int4" in measured.q:
        return measured.q["int4"]
    return measured.q["int8"] - (0.5 if measured.int4_packed else 0.0)


def base_bytes(model: Shape | int, base: str, measured: Measured, gpu: bool = False, r: int | None = None) -> float:
    """``W``: the frozen base's stored bytes (module docstring)."""
    n, L, h, _, tied = _counts(model, measured, r or measured.r)
    if base == "bf16":
        return 2.0 * n
    return 2.0 * (n - L - h * (not tied)) + quantized_bytes(base, measured, gpu) * (L + h * measured.head_quantized)


def footprint(model: Shape | int, space: str, base: str, measured: Measured | None = None, rule: str = "sgd",
              r: int | None = None, members: int = 0) -> dict:
    """``{"device_bytes", "host_bytes", "params", "trained"}`` of an ES run of ``model`` (a
    :class:`Shape`, or a parameter count taking the measured shape's proportions) in ``space``
    (``full``/``adapter``) on a ``base`` of ``bf16``/``int8``/``int4``, with ``rule``'s state,
    LoRA rank ``r`` (default: the measured one) and a population of ``members`` held at once in
    adapter space (0: not counted).  Formulas: the module docstring."""
    measured = measured or load_measured()
    if base not in BASES:
        raise ValueError(f"base must be one of {', '.join(BASES)}, got {base!r}")
    if space not in ("full", "adapter"):
        raise ValueError(f"space must be full or adapter, got {space!r}")
    if space == "full" and base != "bf16":
        raise ValueError(f"full space trains every weight: its base is bf16, not {base} (quantization needs adapter)")
    if rule not in RULE_STATE_BYTES:
        raise ValueError(f"rule must be one of {', '.join(RULE_STATE_BYTES)}, got {rule!r}")
    if isinstance(members, bool) or not isinstance(members, int) or members < 0:
        raise ValueError(f"members must be an integer ≥ 0, got {members!r}")
    r = r or measured.r
    n, _, _, a, _ = _counts(model, measured, r)
    population = float(members) * measured.adapter_bytes_per_weight * a if space == "adapter" else 0.0
    beyond = max(0, members - measured.members) * measured.adapter_bytes_per_weight * a if space == "adapter" else 0.0
    s = RULE_STATE_BYTES[rule]
    if space == "full":
        trained, device = n, (2 + 4 + s) * n
    else:
        trained = a
        device = base_bytes(model, base, measured, gpu=True, r=r) + (measured.adapter_bytes_per_weight + 4 + s) * a \
            + population
    case = _CASE[(space, base)]
    if case not in measured.cases:  # int4 not measured: int8's process and k (module docstring)
        case = _CASE[(space, "int8")]
    c = measured.cases[case]
    host = c["runtime"] + base_bytes(model, base, measured, gpu=False, r=r) + measured.k(case) * n + s * trained + beyond
    return {"device_bytes": float(device), "host_bytes": float(host), "params": int(n), "trained": int(round(trained))}


def smallest(nbytes: float, sizes: Iterable[int], headroom: float) -> int | None:
    """The smallest of ``sizes`` (GiB) whose ``headroom`` share holds ``nbytes``; None if none does."""
    return next((g for g in sizes if nbytes <= headroom * g * GIB), None)


def fits_table(models: Iterable[Shape | int] = MODELS, measured: Measured | None = None, rule: str = "sgd",
               members: int = 0) -> list[dict]:
    """One row per model × (full bf16, adapter bf16, adapter int8, adapter int4): the
    :func:`footprint` and the smallest GPU (:data:`GPUS`) and host (:data:`HOSTS`) it fits."""
    measured = measured or load_measured()
    rows = []
    for model in models:
        for space, base in _CASE:
            f = footprint(model, space, base, measured, rule, members=members)
            rows.append({"model": model.name if isinstance(model, Shape) else f"{model / 1e9:.2f} B", "space": space,
                         "base": base, **f, "gpu_gib": smallest(f["device_bytes"], GPUS, GPU_HEADROOM),
                         "host_gib": smallest(f["host_bytes"], HOSTS, HOST_HEADROOM)})
    return rows


def markdown(rows: list[dict], rule: str = "sgd", members: int = 0) -> str:
    """``rows`` of :func:`fits_table` as a markdown table."""
    lines = [f"| model | params | space | base | trained | GPU weights (GiB) | smallest GPU | CPU step peak (GiB) "
             f"| smallest host |",
             "|---|---:|---|---|---:|---:|---|---:|---|"]
    for r in rows:
        trained = f"{r['trained'] / 1e9:.2f} B" if r["trained"] >= 1e9 else f"{r['trained'] / 1e6:.1f} M"
        lines.append(f"| {r['model']} | {r['params'] / 1e9:.2f} B | {r['space']} | {r['base']} | {trained} "
                     f"| {r['device_bytes'] / GIB:.1f} | {_fit(r['gpu_gib'])} | {r['host_bytes'] / GIB:.1f} "
                     f"| {_fit(r['host_gib'])} |")
    lines.append("")
    lines.append(f"Update rule: {rule}; population held at once in adapter space: {members} members.  "
                 f"GPU weights: base + working + fp32 master + rule state (+ the members' adapters), without KV cache "
                 f"or activations; a GPU fits at ≤ {GPU_HEADROOM:.0%} of its memory (GPU int4: packed, "
                 f"{INT4_PACKED_Q} B/weight, assumed).  CPU step peak: extended from the 1.5 B measurement "
                 f"(docs/results/adapter_memory.json); a host fits at ≤ {HOST_HEADROOM:.0%} of its RAM.")
    return "\n".join(lines)


def _fit(gib: int | None) -> str:
    return f"{gib} GiB" if gib is not None else "none listed"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m zoopt.adapters.footprint", description=__doc__.splitlines()[0])
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="the benchmark's JSON")
    p.add_argument("--rule", default="sgd", choices=sorted(RULE_STATE_BYTES))
    p.add_argument("--members", type=int, default=DOC_MEMBERS, help="population held at once in adapter space")
    args = p.parse_args(argv)
    rows = fits_table(measured=load_measured(args.results), rule=args.rule, members=args.members)
    print(markdown(rows, rule=args.rule, members=args.members))


__all__ = ["Shape", "MODELS", "BENCH_SHAPE", "Measured", "load_measured", "base_bytes", "footprint", "fits_table",
           "markdown", "smallest"]

if __name__ == "__main__":
    main()
