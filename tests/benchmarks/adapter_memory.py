"""Peak host memory of one ES step against plain generation, full space vs adapter space, at a real shape.

    python tests/benchmarks/adapter_memory.py [--config PATH] [--members 4] [--prompts 2] [--tokens 4]
        [--cases full-bf16,adapter-bf16,adapter-int8] [--out docs/results/adapter_memory.json] [--merge] [--plain]

The model is a randomly initialised Qwen2 built straight in bf16 from ``--config`` (default
``configs/qwen2.5-1.5b-shape.json``: Qwen2.5-1.5B-Instruct's published ``config.json`` — hidden
1536, intermediate 8960, 28 layers, 12 heads, 2 KV heads, tied embeddings, rope_theta 1e6,
rms_norm_eps 1e-6, 32768 positions — with ``vocab_size`` 49152 and SmolLM2's special token ids, so
that the embedded SmolLM2 tokenizer drives it: 1 385 838 080 parameters instead of 1.54 B).  Random
weights change no byte of what is held; prompts are plain text (no chat template) so the bf16 CPU
forward — this machine has no fast bf16 matmul — stays short.

Cases (each a ``--cases`` name):

- ``full-bf16``: full space, ``HFEngine`` without ``adapter=``: bf16 working weights + the fp32
  master of every parameter;
- ``adapter-bf16``: adapter space (``AdapterSpace(r=8, lora_alpha=16)``, all linear layers) on the
  frozen bf16 base;
- ``adapter-int8`` / ``adapter-int4``: the same on a base quantized by
  ``zoopt.adapters.quantize.quantize_base`` *before* the engine is built (int4 on the CPU is
  torchao's ``IntxWeightOnlyConfig``, 4-bit values stored unpacked in int8).

Every case runs twice, each time in a fresh child process (peak RSS only grows, so the two must not
share one): ``generate`` — one ``engine.generate`` call over the same rows a step generates
(``members × prompts``, greedy, ``--tokens`` new tokens); ``step`` — one whole ES step:
``es.ask()`` → ``engine.generate_population`` (``population="auto"``: the adapter space runs the
population as one batched call, full space with Gaussian noise runs it member by member —
the path is printed) → a dummy reward (the completions' total text length, plus 1e-3 × member
index so that the update is never zero) → ``es.tell`` → ``engine.apply``.

``--plain`` adds one more child: transformers' ``generate`` on the bare bf16 model (no zoopt
engine, hence no fp32 master) over the same rows, forced to ``--tokens`` new tokens — the
"plain generation" full space's step is compared with (issue: 2.84× at this shape), written as
``plain_generate``.

What is measured, in the child: ``runtime`` = resident memory (``VmRSS``) after importing torch,
transformers, peft, torchao and zoopt, loading the tokenizer and running the same call once on a
1-layer, 64-wide model of the same architecture (warm-up: lazy imports and first-call tables),
before the model exists;
``load_peak`` = ``VmHWM`` once the model is built (quantized) and the engine constructed
(``gc.collect()`` + glibc ``malloc_trim(0)`` first, so freed bf16 weights of a quantized model
are returned); then the high-water mark is reset (``/proc/self/clear_refs`` ← 5) and
``peak`` = ``VmHWM`` after the measured call.  ``peak`` is the figure compared: step/generate
(target ≤ 1.10 in adapter space), bytes per base parameter (``step peak / base params``) and per
trained parameter (``step peak / engine.num_parameters()``).  ``base_stored_bytes`` and
``adapter_stored_bytes`` are :func:`zoopt.adapters.attach.stored_bytes` (quantized data, scales and
zero points included).  ``load_peak`` of a quantized case is the bf16 model it was quantized from.

Prints a table and writes everything as JSON (``--out``); ``zoopt.adapters.footprint`` reads it.
``--merge`` keeps the other cases already in ``--out`` when it was measured with the same config,
members, prompts and tokens (to add ``adapter-int4`` without measuring the rest again).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIG = HERE / "configs" / "qwen2.5-1.5b-shape.json"
DEFAULT_OUT = HERE.parents[1] / "docs" / "results" / "adapter_memory.json"
CASES = {"full-bf16": ("full", "none"), "adapter-bf16": ("adapter", "none"),
         "adapter-int8": ("adapter", "int8"), "adapter-int4": ("adapter", "int4")}
DEFAULT_CASES = ("full-bf16", "adapter-bf16", "adapter-int8")
KINDS = ("generate", "step")
PROMPTS = ("The capital of France is", "Two plus two equals", "The first month of the year is",
           "Water boils at a temperature of")
SIGMA, LR, R, ALPHA = 1.5e-3, 2.5e-4, 8, 16.0
GIB, MIB = 1 << 30, 1 << 20


# -- child ------------------------------------------------------------------------------------
def status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))


def reset_peak() -> bool:
    """Reset this process's ``VmHWM`` to its current RSS (Linux ≥ 4.0); False where refused."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def trim() -> None:
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def build_model(config: dict):
    """The random model of ``config`` (an HF ``config.json`` as a dict), built directly in bf16 (seed 0)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    data = dict(config)
    hf_config = AutoConfig.for_model(data.pop("model_type"), **data)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = AutoModelForCausalLM.from_config(hf_config)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def linear_params(model) -> int:
    """Weights of the decoder's linear layers (every ``nn.Linear`` but the LM head)."""
    import torch

    head = model.get_output_embeddings()
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear) and m is not head)


def head_facts(model) -> dict:
    """The LM head: its weights, whether it is tied to the input embedding, whether it is quantized."""
    import torch

    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    return {"head_params": head.weight.numel(), "head_tied": head.weight is embed.weight,
            "head_quantized": type(head.weight.detach()) is not torch.Tensor}


class PlainModel:
    """The bare HF model and its tokenizer, for the ``plain`` kind (what a user generates with
    before zoopt holds anything): the zoopt facts the child reports read as zero."""

    population_path = staticmethod(lambda noise: "none")
    master: dict = {}
    params: dict = {}

    def __init__(self, model, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def build_engine(case: str, config: dict, tokenizer, plain: bool = False):
    """``(engine, model, base params, decoder linear params, head facts before quantizing)`` of
    ``case`` on the random model of ``config``."""
    from zoopt.adapters import AdapterSpace
    from zoopt.adapters.quantize import quantize_base
    from zoopt.engines.hf import HFEngine

    space, quant = CASES[case]
    model = build_model(config)
    base_params = sum(p.numel() for p in model.parameters())
    n_linear, head = linear_params(model), head_facts(model)
    if plain:
        return PlainModel(model, tokenizer), model, base_params, n_linear, head
    quantize_base(model, quant)
    adapter = AdapterSpace(r=R, lora_alpha=ALPHA) if space == "adapter" else None
    engine = HFEngine(model, tokenizer, batch_size=64, adapter=adapter, population="auto")
    return engine, model, base_params, n_linear, head


def run_kind(engine, kind: str, members: int, n_prompts: int, tokens: int) -> dict:
    """The measured call: ``generate`` of members × prompts rows, or one whole ES step (module docstring)."""
    from zoopt.engines.base import Sampling
    from zoopt.es import ES
    from zoopt.noise import Gaussian

    prompts = list(PROMPTS[:n_prompts])
    greedy = Sampling(temperature=0.0, max_new_tokens=tokens)
    if kind == "plain":  # transformers' own generate on the bare model: no zoopt engine, no master
        import torch

        tok = engine.tokenizer
        batch = tok([p for _ in range(members) for p in prompts], return_tensors="pt", padding=True)
        with torch.inference_mode():
            out = engine.model.generate(**batch, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                                        pad_token_id=tok.pad_token_id or tok.eos_token_id)
        return {"rows": int(out.shape[0]), "new_tokens": int(out.shape[0] * (out.shape[1] - batch["input_ids"].shape[1]))}
    if kind == "generate":
        out = engine.generate([p for _ in range(members) for p in prompts], greedy)
        return {"rows": len(out), "new_tokens": sum(len(c.token_ids) for per_prompt in out for c in per_prompt)}
    es = ES("one_point", noise=Gaussian(), lr=LR, sigma=SIGMA, population_size=members, seed=0)
    population = es.ask()
    out = engine.generate_population(es.noise, population, prompts, greedy)
    rewards = [sum(len(c.text) for per_prompt in member for c in per_prompt) + 1e-3 * i for i, member in enumerate(out)]
    update = es.tell(rewards)
    if update.is_zero():
        raise RuntimeError("the dummy reward gave a zero update: apply would do nothing")
    engine.apply(es.noise, update)
    return {"rows": sum(len(member) for member in out), "rewards": rewards,
            "new_tokens": sum(len(c.token_ids) for member in out for per_prompt in member for c in per_prompt)}


def warm_up(case: str, kind: str, config: dict, tokenizer) -> None:
    """Run the same case and call once on a 1-layer, 64-wide model of the same architecture, so
    that what any first call creates, whatever the model's size (lazy imports, kernel and noise
    tables, the noise stream's compiled kernel, allocator arenas), counts in ``runtime`` and not
    per parameter."""
    small = {**config, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 1,
             "num_attention_heads": 2, "num_key_value_heads": 1}
    engine = build_engine(case, small, tokenizer, plain=kind == "plain")[0]
    run_kind(engine, kind, members=2, n_prompts=1, tokens=2)
    del engine
    from zoopt.noise import Gaussian

    # the counter stream's fused kernel is compiled (torch.compile) on the first draw of ≥ 4096
    # elements, once for one stream and once for several: the small model's adapter draws fewer
    Gaussian().sample(0, "warm-up", (64, 64))
    Gaussian().samples([0, 1], "warm-up", (64, 64))


def child(case: str, kind: str, config_path: Path, members: int, n_prompts: int, tokens: int) -> dict:
    import resource

    import peft  # noqa: F401  (imported in every case, so that ``runtime`` is the same in all)
    import torch
    import torchao  # noqa: F401
    from transformers import AutoTokenizer

    from zoopt.adapters.attach import stored_bytes
    from zoopt.models import ensure_embedded

    space, quant = CASES[case]
    config = json.loads(Path(config_path).read_text())
    tokenizer = AutoTokenizer.from_pretrained(str(ensure_embedded()))
    tokenizer.chat_template = None  # plain tokens: a few per prompt
    tokenizer.padding_side = "left"
    warm_up(case, kind, config, tokenizer)
    trim()
    runtime = status_kib("VmRSS") * 1024
    t0 = time.perf_counter()
    engine, model, base_params, n_linear, head = build_engine(case, config, tokenizer, plain=kind == "plain")
    setup_s = time.perf_counter() - t0
    trim()
    load_peak, setup_rss = status_kib("VmHWM") * 1024, status_kib("VmRSS") * 1024
    was_reset = reset_peak()
    t0 = time.perf_counter()
    info = run_kind(engine, kind, members, n_prompts, tokens)
    run_s = time.perf_counter() - t0
    peak = status_kib("VmHWM") * 1024
    from zoopt.noise import Gaussian

    return {
        "case": case, "kind": kind, "space": space, "quantization": quant,
        "population_path": engine.population_path(Gaussian()), "noise": "Gaussian()",
        "base_params": base_params, "linear_params": n_linear, "head_params": head["head_params"],
        "head_tied": head["head_tied"], "head_quantized": head_facts(model)["head_quantized"],
        "trained_params": engine.num_parameters(), "base_stored_bytes": stored_bytes(model),
        "adapter_stored_bytes": stored_bytes(model, adapter=True) if space == "adapter" else 0,
        "master_bytes": sum(t.numel() * t.element_size() for t in engine.master.values()),
        "working_bytes": sum(t.numel() * t.element_size() for t in engine.params.values()),
        "runtime_rss_bytes": runtime, "load_peak_bytes": load_peak, "setup_rss_bytes": setup_rss,
        "peak_reset": was_reset, "peak_bytes": peak if was_reset else max(peak, load_peak),
        "end_rss_bytes": status_kib("VmRSS") * 1024,
        "ru_maxrss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "setup_s": round(setup_s, 2), "run_s": round(run_s, 2), "torch_threads": torch.get_num_threads(), **info,
    }


# -- parent -----------------------------------------------------------------------------------
def run_child(case: str, kind: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", case, kind, "--config", str(args.config),
           "--members", str(args.members), "--prompts", str(args.prompts), "--tokens", str(args.tokens)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{case} {kind} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarize(case: str, gen: dict, step: dict) -> dict:
    keep = ("space", "quantization", "population_path", "noise", "base_params", "linear_params", "head_params",
            "head_tied", "head_quantized", "trained_params", "base_stored_bytes", "adapter_stored_bytes",
            "master_bytes", "working_bytes")
    return {
        **{k: step[k] for k in keep}, "generate": gen, "step": step,
        "generate_peak_bytes": gen["peak_bytes"], "step_peak_bytes": step["peak_bytes"],
        "runtime_rss_bytes": step["runtime_rss_bytes"],
        "step_over_generate": round(step["peak_bytes"] / gen["peak_bytes"], 4),
        "bytes_per_base_param": round(step["peak_bytes"] / step["base_params"], 4),
        "bytes_per_trained_param": round(step["peak_bytes"] / step["trained_params"], 4),
    }


def table(cases: dict) -> str:
    head = ("case", "population", "trained", "base stored", "adapter", "gen peak", "step peak", "step/gen",
            "B/base param", "B/trained param", "load peak")
    rows = [head]
    for name, c in cases.items():
        rows.append((name, c["population_path"], f"{c['trained_params'] / 1e6:.1f} M",
                     f"{c['base_stored_bytes'] / GIB:.2f} GiB", f"{c['adapter_stored_bytes'] / MIB:.1f} MiB",
                     f"{c['generate_peak_bytes'] / GIB:.2f} GiB", f"{c['step_peak_bytes'] / GIB:.2f} GiB",
                     f"{c['step_over_generate']:.3f}", f"{c['bytes_per_base_param']:.2f}",
                     f"{c['bytes_per_trained_param']:.1f}", f"{c['step']['load_peak_bytes'] / GIB:.2f} GiB"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(v.ljust(w) for v, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    p.add_argument("--members", type=int, default=4)
    p.add_argument("--prompts", type=int, default=2, choices=range(1, len(PROMPTS) + 1))
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--cases", default=",".join(DEFAULT_CASES), help=f"comma-separated, of {', '.join(CASES)}")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    p.add_argument("--timeout", type=float, default=1200, help="seconds per child process")
    p.add_argument("--merge", action="store_true", help="keep the other cases already in --out (same settings)")
    p.add_argument("--plain", action="store_true", help="also measure transformers' generate on the bare bf16 "
                   "model (no zoopt engine): what full space's step is compared with in the issue")
    p.add_argument("--child", nargs=2, metavar=("CASE", "KIND"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.config, args.members, args.prompts, args.tokens)), flush=True)
        return
    names = [c for c in args.cases.split(",") if c]
    for name in names:
        if name not in CASES:
            p.error(f"unknown case {name!r} (known: {', '.join(CASES)})")
    import torch
    import torchao
    import transformers

    results = {}
    for name in names:
        measured = {}
        for kind in KINDS:
            measured[kind] = run_child(name, kind, args)
            m = measured[kind]
            print(f"{name:13} {kind:8} peak {m['peak_bytes'] / GIB:6.2f} GiB  setup {m['setup_s']:6.1f} s  "
                  f"run {m['run_s']:6.1f} s  ({m['population_path']})", file=sys.stderr, flush=True)
        results[name] = summarize(name, measured["generate"], measured["step"])
    plain = run_child("full-bf16", "plain", args) if args.plain else None
    if plain is not None:
        print(f"plain generate peak {plain['peak_bytes'] / GIB:6.2f} GiB  run {plain['run_s']:6.1f} s",
              file=sys.stderr, flush=True)
    any_case = next(iter(results.values())) if results else plain
    report = {
        "benchmark": "tests/benchmarks/adapter_memory.py",
        "config": os.path.relpath(args.config, HERE.parents[1]) if args.config.is_absolute() else str(args.config),
        "shape": {k: v for k, v in json.loads(Path(args.config).read_text()).items()
                  if k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                           "num_key_value_heads", "vocab_size", "tie_word_embeddings")},
        "base_params": any_case["base_params"], "linear_params": any_case["linear_params"],
        "head_params": any_case["head_params"], "head_tied": any_case["head_tied"],
        "members": args.members, "prompts": args.prompts, "max_new_tokens": args.tokens, "greedy": True,
        "estimator": "one_point", "noise": "Gaussian()", "sigma": SIGMA, "lr": LR,
        "adapter": {"r": R, "lora_alpha": ALPHA, "target_modules": "all-linear"},
        "population": "auto (adapter space: one batched call; full space, Gaussian noise: member by member)",
        "device": "cpu",
        "int4_packed": False,  # on the CPU, zoopt's int4 is IntxWeightOnlyConfig: 4-bit values unpacked in int8
        "int4_note": "on the CPU torchao's int4 (IntxWeightOnlyConfig) keeps 4-bit values unpacked in int8",
        "measure": "peak = VmHWM of a fresh child process after the model and engine are built and the "
                   "high-water mark reset; runtime = VmRSS after imports, the tokenizer and a warm-up of the same "
                   "call on a 1-layer model, before the model",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "torch": torch.__version__,
                    "transformers": transformers.__version__, "torchao": torchao.__version__},
        "cases": results,
    }
    if plain is not None:
        report["plain_generate"] = plain
    same = ("config", "base_params", "members", "prompts", "max_new_tokens", "adapter", "sigma", "lr")
    if args.merge and args.out.is_file():
        old = json.loads(args.out.read_text())
        if all(old.get(k) == report[k] for k in same):
            report["cases"] = {**{k: v for k, v in old["cases"].items() if k not in results}, **results}
            if plain is None and "plain_generate" in old:
                report["plain_generate"] = old["plain_generate"]
        else:
            print(f"--merge: {args.out} was measured with other settings; overwriting it", file=sys.stderr)
    print(table(report["cases"]))
    if "plain_generate" in report and "full-bf16" in report["cases"]:
        full, bare = report["cases"]["full-bf16"], report["plain_generate"]["peak_bytes"]
        print(f"full-bf16 step / plain generate on the bare model: {full['step_peak_bytes'] / bare:.3f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
