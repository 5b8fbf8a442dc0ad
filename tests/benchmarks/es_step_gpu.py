"""One ES step of the batched low-rank population against one pure batch, and the noise stream's
bits on the device against the CPU's — one prepared command for a GPU machine (issue 28).

    python tests/benchmarks/es_step_gpu.py                 # CUDA: the table below, < 5 min on one H200
    python tests/benchmarks/es_step_gpu.py --device cpu    # no CUDA: the small CPU version (the test suite runs it)

On CUDA the model is a randomly initialised Qwen2.5-0.5B shape (config only, no hub: hidden 896,
24 layers, 14 heads, 2 KV heads, MLP 4864, vocab 151936; zoopt's tiny character tokenizer, so
prompts are short plain text) in bfloat16, N = 32 members × 32 prompts × 128 greedy new tokens
(1,024 rows, one batch).  Timed, each warm (one untimed run first), median of 3:

- ``generate``: one pure ``generate`` of the same 1,024 rows at the base weights — the floor;
- ``ES step (counter)``: ``es.ask()`` → ``generate_population(LowRank(rank=1))`` (the batched
  population call; its factor tables drawn on the device) → rewards (each member's mean token
  log-probability: continuous, so the z-scored update is never degenerate) → ``es.tell`` →
  ``engine.apply`` (the update's factors redrawn on the device) — and its three parts;
- ``ES step (numpy)``: the same with ``LowRank(rank=1, stream="numpy")``, the stream before it
  (factors drawn on the CPU and copied), for comparison on the same machine.

Peak device memory (``torch.cuda.max_memory_allocated``, reset before each case; the engine
holds the fp32 master in both) and the step / generate ratios (targets: time ≤ 1.10, memory
≤ 1.1).  Then the stream check on the model's real tensors: for every parameter, the Gaussian
and Rademacher noise drawn on the device equal the CPU's bit for bit, and so do the N members'
low-rank factor tables and an update's factors of every matrix.

Then the **adapter-space case** (issue 42): ES over a LoRA adapter (r = 8, every linear layer) on
a frozen, weight-only quantized base — on CUDA a randomly initialised Qwen2.5-7B shape (hidden
3584, 28 layers, 28 heads, 4 KV heads, MLP 18944, vocab 152064, untied; 7.6 B parameters) built
in bfloat16 on the device and quantized to ``--adapter-quant`` (default int4: torchao's packed
tinygemm layout), N = 16 × 16 prompts × 64 tokens; one pure ``generate`` of the same rows against
one ES step (Gaussian noise over the adapter, the population in one call with one adapter per
row, ``zoopt.engines.adapter_rows``), time and peak device memory, and the bytes the base and
the adapter hold.  It needs ``peft`` and ``torchao`` on the machine; without them the case is
reported as not run, with the reason.

Prints one Markdown table (and ``--json PATH`` writes the numbers).  ``--device cpu`` (the
default without CUDA) runs the same code on a small Qwen2 shape (N = 4 × 4 prompts × 8 tokens,
no memory column) and the stream check compares the CPU draw with itself through a second
thread count and chunking (``tests/benchmarks/test_es_step_gpu_script.py``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import json
import statistics
import time
from pathlib import Path

QWEN05 = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
              num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True)
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=512, max_position_embeddings=256, tie_word_embeddings=True)
QWEN7B = dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
              num_key_value_heads=4, vocab_size=152064, max_position_embeddings=4096, tie_word_embeddings=False)
SIGMA, LR = 5e-3, 2.5e-3


def prompts(n: int) -> list[str]:
    return [f"What is {10 + 7 * i % 83} + {20 + 13 * i % 71}?" for i in range(n)]


def build(shape: dict, device: str, dtype: str, rows: int, quantization: str | None = None, adapter=None):
    """A random Qwen2 model of ``shape`` on ``device`` in an :class:`HFEngine` whose batch is all
    ``rows``; with ``quantization``/``adapter``: built directly in ``dtype`` (no fp32 copy at the
    7B shape), quantized, and trained in adapter space."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from zoopt.engines.hf import HFEngine
    from zoopt.models import tiny_tokenizer

    tok = tiny_tokenizer()
    config = Qwen2Config(**shape, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    default = torch.get_default_dtype()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            if adapter is not None:
                torch.set_default_dtype(getattr(torch, dtype))
            with torch.device(device):
                model = Qwen2ForCausalLM(config)
        finally:
            torch.set_default_dtype(default)
    model = model.to(getattr(torch, dtype)).eval()
    if adapter is None:
        return HFEngine(model, tok, batch_size=rows)
    from zoopt.adapters.quantize import quantize_base

    quantize_base(model, quantization or "none")
    return HFEngine(model, tok, batch_size=rows, adapter=adapter)


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def es_step(engine, es, ps, sampling, device: str) -> dict:
    """One ES step; seconds of its parts."""
    pop = es.ask()
    t0 = time.perf_counter()
    out = engine.generate_population(es.noise, pop, ps, sampling)
    sync(device)
    t1 = time.perf_counter()
    rewards = [sum(sum(c.logprobs) / max(1, len(c.logprobs)) for per_prompt in member for c in per_prompt) / len(member)
               for member in out]
    update = es.tell(rewards)
    t2 = time.perf_counter()
    engine.apply(es.noise, update)
    sync(device)
    t3 = time.perf_counter()
    assert not update.is_zero(), "a degenerate step: the update was not measured"
    return {"population_s": t1 - t0, "rewards_s": t2 - t1, "update_s": t3 - t2, "step_s": t3 - t0}


def measured(run, device: str, reps: int) -> dict:
    """``run()`` once untimed, then ``reps`` times: medians of its parts and the peak device memory."""
    import torch

    run()
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    parts = [run() for _ in range(reps)]
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else None
    return {**{k: statistics.median(p[k] for p in parts) for k in parts[0]}, "peak_mib": peak}


def stream_check(engine, device: str, members: int) -> dict:
    """The counter stream on ``device`` against the CPU, on every parameter of the model (on the
    CPU: the default draw against one with another chunk size and one thread)."""
    import torch

    from zoopt.noise import Gaussian, LowRank, Rademacher

    seeds = list(range(100, 100 + members))
    coefs = [0.25 * (-1) ** i for i in range(members)]
    low = LowRank(rank=1)

    def draws(name, shape, where: str) -> list:
        out = [Gaussian().sample(7, name, shape, where), Rademacher().sample(7, name, shape, where)]
        if len(shape) >= 2:
            out += [*low.factor_table(seeds, name, shape, where), *low.update_factors(seeds, coefs, name, shape, where)]
        return out

    equal = True
    for name, shape in engine.weights.shapes.items():
        want = draws(name, shape, "cpu")
        with other_chunking(device):
            got = draws(name, shape, device)
        equal &= all(torch.equal(g.cpu(), w) for g, w in zip(got, want, strict=True))
    shapes = engine.weights.shapes.values()
    return {"stream_equal": equal, "stream_tensors": len(shapes),
            "stream_elements": sum(int(torch.Size(s).numel()) for s in shapes)}


@contextlib.contextmanager
def other_chunking(device: str):
    """On the CPU, the device side of :func:`stream_check` draws with 1,000-element chunks on one
    thread (so the check compares two different schedules of the same stream); else nothing."""
    if device.startswith("cuda"):
        yield
        return
    import zoopt.counter_stream as cs

    saved = cs.CPU_CHUNK, cs._POOL
    cs.CPU_CHUNK, cs._POOL = 1000, concurrent.futures.ThreadPoolExecutor(1)
    try:
        yield
    finally:
        cs._POOL.shutdown()
        cs.CPU_CHUNK, cs._POOL = saved


def run(args) -> dict:
    import torch

    from zoopt.engines.base import Sampling
    from zoopt.es import ES
    from zoopt.noise import LowRank

    shape = QWEN05 if args.shape == "qwen2.5-0.5b" else SMALL
    rows = args.members * args.prompts
    t0 = time.perf_counter()
    engine = build(shape, args.device, args.dtype, rows)
    ps = prompts(args.prompts)
    sampling = Sampling(temperature=0.0, max_new_tokens=args.tokens, logprobs=True)
    flat = [p for _ in range(args.members) for p in ps]

    def generate() -> dict:
        t = time.perf_counter()
        engine.generate(flat, sampling)
        sync(args.device)
        return {"step_s": time.perf_counter() - t}

    result = {"device": args.device, "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
              "dtype": args.dtype, "shape": args.shape, "members": args.members, "prompts": args.prompts,
              "tokens": args.tokens, "reps": args.reps, "torch": torch.__version__,
              "build_s": round(time.perf_counter() - t0, 1)}
    result["generate"] = measured(generate, args.device, args.reps)
    streams = ("counter", "numpy") if args.baseline else ("counter",)
    for stream in streams:
        es = ES("one_point", noise=LowRank(rank=1, stream=stream), lr=LR, sigma=SIGMA,
                population_size=args.members, seed=0)
        result[f"es_{stream}"] = measured(lambda: es_step(engine, es, ps, sampling, args.device), args.device, args.reps)
    t0 = time.perf_counter()
    result.update(stream_check(engine, args.device, args.members))
    result["stream_check_s"] = round(time.perf_counter() - t0, 1)
    del engine
    result["adapter"] = adapter_case(args)
    return result


def adapter_case(args) -> dict:
    """ES over a LoRA adapter on a quantized base (module docstring): generate vs one ES step."""
    try:
        import peft  # noqa: F401
        import torchao  # noqa: F401
    except ImportError as exc:
        return {"skipped": f"{exc.name} is not installed here"}
    import gc

    import torch

    from zoopt.adapters import AdapterSpace
    from zoopt.adapters.attach import stored_bytes
    from zoopt.engines.base import Sampling
    from zoopt.es import ES
    from zoopt.noise import Gaussian

    big = args.device.startswith("cuda")
    members, n_prompts, tokens = (16, 16, 64) if big else (args.members, args.prompts, args.tokens)
    gc.collect()
    if big:
        torch.cuda.empty_cache()
    t0 = time.perf_counter()
    engine = build(QWEN7B if big else SMALL, args.device, "bfloat16" if big else args.dtype, members * n_prompts,
                   quantization=args.adapter_quant, adapter=AdapterSpace(r=8))
    ps = prompts(n_prompts)
    sampling = Sampling(temperature=0.0, max_new_tokens=tokens, logprobs=True)
    flat = [p for _ in range(members) for p in ps]

    def generate() -> dict:
        t = time.perf_counter()
        engine.generate(flat, sampling)
        sync(args.device)
        return {"step_s": time.perf_counter() - t}

    base_params = sum(p.numel() for n, p in engine.module.named_parameters() if "lora_" not in n)
    out = {"shape": "qwen2.5-7b" if big else "small", "quantization": args.adapter_quant, "r": 8,
           "members": members, "prompts": n_prompts, "tokens": tokens, "build_s": round(time.perf_counter() - t0, 1),
           "base_parameters": base_params, "adapter_parameters": engine.num_parameters(),
           "base_bytes": stored_bytes(engine.module), "adapter_bytes": stored_bytes(engine.module, adapter=True)}
    out["generate"] = measured(generate, args.device, args.reps)
    es = ES("one_point", noise=Gaussian(), lr=LR, sigma=SIGMA, population_size=members, seed=0)
    base = engine.base_checksum() if not big else None  # a pass over 7 B weights is not worth its time on CUDA
    out["es"] = measured(lambda: es_step(engine, es, ps, sampling, args.device), args.device, args.reps)
    if base is not None:
        out["base_untouched"] = engine.base_checksum() == base
    return out


def table(r: dict) -> str:
    gen = r["generate"]

    def mib(x):
        return "–" if x is None else f"{x:,.0f}"

    def ratio(x, y):
        return "–" if x is None or y is None else f"{x / y:.2f}"

    lines = [f"{r['shape']} on {r['gpu'] or r['device']} ({r['dtype']}), N={r['members']} × {r['prompts']} prompts × "
             f"{r['tokens']} new tokens = {r['members'] * r['prompts']:,} rows; median of {r['reps']} warm runs; "
             f"torch {r['torch']}", "",
             "| case | seconds | × generate | peak memory MiB | × generate |", "|---|---:|---:|---:|---:|",
             f"| generate (pure batch) | {gen['step_s']:.3f} | 1.00 | {mib(gen['peak_mib'])} | 1.00 |"]
    for stream in ("counter", "numpy"):
        es = r.get(f"es_{stream}")
        if es is None:
            continue
        lines.append(f"| ES step, {stream} stream | {es['step_s']:.3f} | {es['step_s'] / gen['step_s']:.2f} | "
                     f"{mib(es['peak_mib'])} | {ratio(es['peak_mib'], gen['peak_mib'])} |")
        for part in ("population", "rewards", "update"):
            lines.append(f"| – {part} | {es[part + '_s']:.3f} | {es[part + '_s'] / gen['step_s']:.2f} | | |")
    a = r.get("adapter", {})
    if "skipped" in a:
        lines.append(f"| adapter space | not run: {a['skipped']} | | | |")
    elif a:
        g, e = a["generate"], a["es"]
        lines.append(f"| adapter space ({a['shape']}, {a['quantization']} base, r={a['r']}, N={a['members']} × "
                     f"{a['prompts']} × {a['tokens']}): generate | {g['step_s']:.3f} | 1.00 | {mib(g['peak_mib'])} | 1.00 |")
        lines.append(f"| adapter space: ES step | {e['step_s']:.3f} | {e['step_s'] / g['step_s']:.2f} | "
                     f"{mib(e['peak_mib'])} | {ratio(e['peak_mib'], g['peak_mib'])} |")
        lines.append(f"| adapter space: bytes held | base {a['base_bytes'] / a['base_parameters']:.2f} B/param "
                     f"({a['base_parameters']:,}), adapter {a['adapter_parameters']:,} params | | | |")
    against = "CUDA vs CPU" if str(r["device"]).startswith("cuda") else "CPU vs CPU (1 thread, other chunks)"
    lines.append(f"| stream bits, {against} | {'equal' if r['stream_equal'] else 'DIFFERENT'} on {r['stream_tensors']} "
                 f"tensors ({r['stream_elements']:,} elements; Gaussian, Rademacher, N={r['members']} low-rank "
                 f"factor tables and update factors) | | | |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    import torch

    cuda = torch.cuda.is_available()
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if cuda else "cpu")
    p.add_argument("--shape", choices=("qwen2.5-0.5b", "small"), default=None,
                   help="default: qwen2.5-0.5b on cuda, small on cpu")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--members", type=int, default=None, help="default: 32 on cuda, 4 on cpu")
    p.add_argument("--prompts", type=int, default=None, help="default: 32 on cuda, 4 on cpu")
    p.add_argument("--tokens", type=int, default=None, help="default: 128 on cuda, 8 on cpu")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-baseline", dest="baseline", action="store_false", help="skip the numpy-stream ES step")
    p.add_argument("--json", default=None, help="also write the numbers here")
    p.add_argument("--adapter-quant", default=None, choices=("none", "int8", "int4"),
                   help="the adapter case's base: default int4 on cuda, int8 on cpu")
    args = p.parse_args(argv)
    big = args.device.startswith("cuda")
    args.shape = args.shape or ("qwen2.5-0.5b" if big else "small")
    args.dtype = args.dtype or ("bfloat16" if big else "float32")
    args.members = args.members or (32 if big else 4)
    args.prompts = args.prompts or (32 if big else 4)
    args.tokens = args.tokens or (128 if big else 8)
    args.adapter_quant = args.adapter_quant or ("int4" if big else "int8")
    result = run(args)
    print(table(result), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
