"""GRPO sweeps on the tiny random model: trials, best.yaml as a GRPO config, pruning, spec checks
and the per-group completions budget (the ES side is tests/test_sweeps.py)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

import sweeps
from sweeps.spec import packaged_spec
from test_sweeps import eval_first_trial_high, states  # noqa: E402
from zoopt.config import load_config

pytestmark = pytest.mark.usefixtures("one_thread")


def grpo_tiny(**changes) -> dict:
    """The packaged grpo-tiny spec with top-level ``changes``."""
    raw = yaml.safe_load(packaged_spec("grpo-tiny").read_text())
    raw.update(copy.deepcopy(changes))
    return raw


def test_grpo_sweep_completes_and_best_yaml_is_a_grpo_config(tmp_path):
    study = sweeps.run(grpo_tiny(), study_name="g", run_root=tmp_path, n_trials=2)
    assert states(study) == ["COMPLETE"] * 2
    for t in study.trials:
        assert {"lr", "beta", "sampling.n", "epsilon"} == set(t.params)
        cfg = t.user_attrs["config"]
        assert (cfg["lr"], cfg["sampling"]["n"]) == (t.params["lr"], t.params["sampling.n"])
        assert cfg["steps"] == 16 // (2 * t.params["sampling.n"]) == t.user_attrs["steps"]
        run_dir = tmp_path / "g" / "trials" / f"trial-{t.number:04d}"
        assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == cfg["steps"]
        assert json.loads((run_dir / "eval_after.json").read_text())["greedy_accuracy"] == t.value
    best_yaml = tmp_path / "g" / "best.yaml"
    assert "zoopt grpo --config best.yaml" in best_yaml.read_text()
    cfg = load_config(best_yaml, base="grpo")
    assert cfg["lr"] == study.best_trial.params["lr"] and cfg["run_dir"] is None and cfg["model"] == "tiny"


def test_grpo_sweep_reports_and_prunes(tmp_path):
    spec = grpo_tiny(budget={"steps": 2}, report_every=1,
                     pruner={"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0})
    study = sweeps.run(spec, study_name="gp", run_root=tmp_path, n_trials=2, evaluate_fn=eval_first_trial_high,
                       report=False)
    assert states(study) == ["COMPLETE", "PRUNED"]
    assert study.trials[0].intermediate_values == {1: 1.0} and study.trials[1].intermediate_values == {1: 0.0}


@pytest.mark.parametrize("change, message", [
    ({"enqueue_paper_defaults": True}, r"enqueue_paper_defaults: the paper's σ, α, N are ES values; set it false "
                                       r"for method: grpo"),
    ({"space": {"sigma": {"type": "float", "low": 1e-3, "high": 1e-2}}}, r"space\.sigma: unknown config key 'sigma'"),
    ({"base": {"population_size": 4}}, r"base: unknown config key 'population_size'"),
])
def test_bad_grpo_specs_raise_one_line_errors(change, message):
    with pytest.raises(ValueError, match=message) as info:
        sweeps.load_spec(grpo_tiny(**change))
    assert "\n" not in str(info.value)


def test_grpo_completions_budget_is_per_group():
    spec = sweeps.load_spec(grpo_tiny(budget={"completions": 100}))
    assert spec.method == "grpo" and spec.base["loss_type"] == "dapo"  # grpo.yaml defaults
    assert spec.trial_config({"sampling.n": 4}, None)["steps"] == 12  # 2 prompts × G=4 = 8 a step
    assert spec.trial_config({"sampling.n": 64}, None)["steps"] == 1  # at least 1
