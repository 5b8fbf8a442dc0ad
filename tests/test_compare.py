"""Equal budgets and ``zoopt compare`` end to end on the tiny model."""

import json
import sys
from pathlib import Path

import pytest

from zoopt.cli import build_parser
from zoopt.workflows import compare as compare_module
from zoopt.workflows.compare import (compare, engine_config, eval_config, load_compare_config, plan_methods, run_method,
                                    shared_config)
from zoopt.config import ConfigError
from zoopt.workflows.schedule import PlannedPhase, run_schedule
from zoopt.workflows.builders import build_engine
from zoopt.workflows.train import export_from_seedlog

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402



class DigitVotes(Digits):
    """Digits with an answer to vote on (maj@k): the first digit of the completion; gold is '0'."""

    def extract_answer(self, completion):
        return next((ch for ch in completion if ch.isdigit()), None)


DIGITS = f"{Path(__file__).resolve()}:DigitVotes"
# ES step: 4 members × 8 prompts × 1 = 32 completions; GRPO step: 8 prompts × group 4 = 32
TINY = ["model=tiny", f"objective={DIGITS}", "es.population_size=4", "es.prompts_per_step=8",
        "es.sampling.max_new_tokens=6", "es.sigma=0.05", "es.lr=0.05", "grpo.prompts_per_step=8",
        "grpo.sampling.n=4", "grpo.sampling.max_new_tokens=6", "grpo.lr=1e-2", "eval.n_problems=4",
        "eval.n_samples=4", "eval.ks=[1,2,4]", "eval.max_new_tokens=6"]


pytestmark = pytest.mark.usefixtures("one_thread")


def counting(engine, calls):
    inner = engine.generate

    def generate(prompts, sampling):
        out = inner(prompts, sampling)
        calls.append(sum(len(per_prompt) for per_prompt in out))
        return out

    engine.generate = generate


def test_the_same_budget_gives_every_method_the_same_completions(tmp_path):
    cfg = load_compare_config(overrides=[*TINY, "budget=128"])
    planned = plan_methods(cfg, n_train_rows=16)
    assert {name: [p.steps for p in phases] for name, phases in planned.items()} == {
        "base": [], "es": [4], "grpo": [4], "es_grpo": [2, 2], "grpo_es": [2, 2]}
    counted = {}
    for name, phases in planned.items():
        engine = build_engine(shared_config(cfg))
        calls = []
        counting(engine, calls)
        summary = run_schedule(phases, engine, Digits(), tmp_path / name)
        counted[name] = sum(calls)
        assert [p["completions_generated"] for p in summary] == [p.completions for p in phases]
    assert counted == {"base": 0, "es": 128, "grpo": 128, "es_grpo": 128, "grpo_es": 128}


def test_a_methods_engine_takes_the_engine_settings_of_its_es_phases():
    """ES's noise cache and population path belong to the engine, which one method builds once
    for all its phases: it must get them from the ES phases (compare built it from the shared
    keys alone, so ES under compare and zoopt study ran without its noise cache and redrew every
    member's noise for the update: 17 s of a 76 s step on SmolLM2-135M)."""
    cfg = load_compare_config(overrides=[*TINY, "budget=64", "es.noise_cache_gb=0.01", "es.population=sequential"])
    planned, shared = plan_methods(cfg, n_train_rows=16), shared_config(cfg)
    for name in ("es", "es_grpo", "grpo_es"):
        built = engine_config(shared, planned[name], name)
        assert (built["noise_cache_gb"], built["population"]) == (0.01, "sequential")
    assert engine_config(shared, planned["grpo"]) == shared  # GRPO never perturbs
    engine = build_engine(engine_config(shared, planned["es"]))
    assert engine.weights.noise_cache_bytes == int(0.01 * 2**30) and engine.population == "sequential"
    first = planned["es"][0]
    other = PlannedPhase("es", {**first.cfg, "population": "batched"}, first.steps, first.per_step, first.allotted)
    with pytest.raises(ConfigError, match=r"^methods.x: its ES phases set population differently"):
        engine_config(shared, [first, other], "methods.x")


def test_run_method_builds_its_engine_from_engine_config(tmp_path, monkeypatch):
    cfg = load_compare_config(overrides=[*TINY, "budget=64", "es.noise_cache_gb=0.01"])
    built = []

    class Built(Exception):
        pass

    def record(engine_cfg, objective=None):
        built.append(engine_cfg)
        raise Built

    monkeypatch.setattr(compare_module, "build_engine", record)
    spec = {"name": "es", "dir": str(tmp_path / "es"), "shared": shared_config(cfg), "eval": eval_config(cfg),
            "phases": [p.to_dict() for p in plan_methods(cfg, n_train_rows=16)["es"]]}
    with pytest.raises(Built):
        run_method(spec, objective=Digits())
    assert built[0]["noise_cache_gb"] == 0.01


def test_budget_rounding_is_floor_per_phase_and_reported():
    cfg = load_compare_config(overrides=[*TINY, "budget=100"])
    planned = plan_methods(cfg, n_train_rows=16)
    assert [(p.allotted, p.steps, p.completions) for p in planned["es"]] == [(100, 3, 96)]
    assert [(p.allotted, p.steps, p.completions) for p in planned["es_grpo"]] == [(50, 1, 32), (50, 1, 32)]
    assert planned["grpo_es"][1].cfg["seed"] == planned["grpo_es"][0].cfg["seed"] + 1
    # fewer training rows than prompts_per_step: the trainers draw only 5 prompts a step
    assert plan_methods(cfg, n_train_rows=5)["grpo"][0].per_step == 5 * 4
    with pytest.raises(ConfigError, match=r"methods.es_grpo\[0\] \(es\): its share of the budget, 20 completions, "
                                          r"is less than one step \(32 completions\)"):
        plan_methods(load_compare_config(overrides=[*TINY, "budget=40"]), 16)


@pytest.mark.parametrize("override,message", [
    ("budgett=3", "unknown config key 'budgett'; did you mean 'budget'?"),
    ("methods.x=[{method: ppo, budget_fraction: 1}]", "methods.x[0].method must be one of es, grpo, got 'ppo'"),
    ("methods.x=[{method: es, budget_fraction: 0.7}, {method: grpo, budget_fraction: 0.7}]",
     "methods.x: budget fractions add up to 1.4 > 1"),
    ("methods.x=[{method: es, budget_fraction: 1, override: {}}]", "methods.x[0]: unknown key 'override'"),
])
def test_bad_compare_config_is_a_one_line_error(override, message):
    with pytest.raises(ConfigError) as info:
        load_compare_config(overrides=[*TINY, override])
    assert message in str(info.value) and "\n" not in str(info.value)


def test_bad_method_override_names_its_section():
    cfg = load_compare_config(overrides=[*TINY, "es.sigmaa=1"])
    with pytest.raises(ConfigError, match="es: unknown config key 'sigmaa'; did you mean 'sigma'"):
        plan_methods(cfg, 16)


def check_outputs(result, run_dir, budget):
    table = {row["method"]: row for row in result["table"]}
    assert list(table) == ["base", "es", "grpo", "es_grpo", "grpo_es"]
    assert table["base"]["d_rel"] == 0.0 and table["base"]["completions"] == 0
    for name in ("es", "grpo", "es_grpo", "grpo_es"):
        assert table[name]["completions"] == table[name]["completions_generated"] == budget
        assert table[name]["d_rel"] > 0, name
    for key in ("pass@1", "pass@2", "pass@4", "maj@4", "entropy", "greedy_accuracy", "wall_s", "peak_rss_mib"):
        assert key in table["es"], key
    assert 0 <= table["grpo"]["pass@1"] <= table["grpo"]["pass@4"] <= 1
    saved = json.loads((run_dir / "compare.json").read_text())
    assert saved["table"] == result["table"]
    for png in ("pass_at_k.png", "train_reward.png"):
        assert (run_dir / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "| es_grpo | es → grpo |" in (run_dir / "compare.md").read_text()
    return table


def test_compare_in_process_writes_the_table_and_plots(tmp_path):
    cfg = load_compare_config(overrides=[*TINY, "budget=64", "isolate=false", f"run_dir={tmp_path / 'cmp'}"])
    result = compare(cfg, objective=DigitVotes(), log=lambda *a: None)
    table = check_outputs(result, tmp_path / "cmp", 64)
    assert table["es"]["peak_rss_mib"] is None  # not attributable in-process
    assert not (tmp_path / "cmp" / "es" / "model").exists()  # keep_models=false
    # ... but GRPO→ES's ES phase still exports from its seed log, onto its start_model/
    path, checksum = export_from_seedlog(tmp_path / "cmp" / "grpo_es" / "phase1-es", tmp_path / "exported")
    assert checksum == next(m for m in result["methods"] if m["name"] == "grpo_es")["checksum"]
    # ES→GRPO's ES half is ES alone's first step, bit for bit (same seed, same prompts)
    es = json.loads((tmp_path / "cmp" / "es" / "phase0-es" / "metrics.jsonl").read_text().splitlines()[0])
    half = json.loads((tmp_path / "cmp" / "es_grpo" / "phase0-es" / "metrics.jsonl").read_text().splitlines()[0])
    assert es["reward_mean"] == half["reward_mean"]


def test_zoopt_compare_isolated_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the children: no oversubscription of 2 shared cores
    args = build_parser().parse_args(["compare", "--quiet", *[x for s in [*TINY, "budget=64", f"run_dir={tmp_path / 'c'}"]
                                                              for x in ("--set", s)]])
    assert args.func(args) == 0
    result = json.loads((tmp_path / "c" / "compare.json").read_text())
    table = check_outputs(result, tmp_path / "c", 64)
    for row in table.values():
        # the same child's peak, read inside it (VmHWM) and by the parent (wait4 rusage)
        assert row["peak_rss_mib"] > 100 and row["peak_rss_mib_self"] > 100
        assert abs(row["peak_rss_mib"] - row["peak_rss_mib_self"]) < 32  # MiB (a polluted rusage was +72)
