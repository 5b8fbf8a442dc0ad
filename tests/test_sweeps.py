"""Sweeps on the tiny random model: resume, shared storage, failures, pruning, paper defaults,
the report, spec validation and the CLI command."""

from __future__ import annotations

import copy
import json
import math
import time

import optuna
import pytest
import yaml
from optuna.trial import TrialState

import sweeps
from sweeps.report import write_report
from sweeps.spec import packaged_spec
from sweeps.study import make_storage
from zoopt.runs.seedlog import SeedLog
from zoopt.config import load_config
from zoopt.workflows.train import export_from_seedlog

PNG = b"\x89PNG\r\n\x1a\n"
SMALL = {"prompts_per_step": 2, "eval": {"n_problems": 4, "max_new_tokens": 2},
         "sampling": {"max_new_tokens": 2}}


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny(**changes) -> dict:
    """The packaged tiny spec, made smaller still, with top-level ``changes``."""
    raw = yaml.safe_load(packaged_spec("tiny").read_text())
    raw["set"] = copy.deepcopy(SMALL)
    raw.update(copy.deepcopy(changes))
    return raw


# -- evaluation hooks (module level: picklable for worker processes) --------------------------
def eval_sigma(trainer) -> dict:
    """greedy_accuracy = σ and pass@1 = 1 − σ: the best single-objective trial has the largest σ."""
    s = float(trainer.cfg["sigma"])
    return {"greedy_accuracy": s, "pass@1": 1.0 - s}


def eval_first_trial_high(trainer) -> dict:
    return {"greedy_accuracy": 1.0 if trainer.run_dir.path.name == "trial-0000" else 0.0}


def eval_nan(trainer) -> dict:
    return {"greedy_accuracy": float("nan")}


def states(study) -> list[str]:
    return [t.state.name for t in sorted(study.trials, key=lambda t: t.number)]


# -- running and resuming ------------------------------------------------------------------------
def test_rerun_adds_trials_to_the_same_study(tmp_path):
    study = sweeps.run(tiny(), study_name="resume", run_root=tmp_path, n_trials=3, report=False)
    assert states(study) == ["COMPLETE"] * 3
    study = sweeps.run(tiny(), study_name="resume", run_root=tmp_path, n_trials=2, report=False)
    assert [t.number for t in study.trials] == [0, 1, 2, 3, 4]
    assert states(study) == ["COMPLETE"] * 5
    assert (tmp_path / "resume" / "study.db").is_file()
    for t in study.trials:
        run_dir = tmp_path / "resume" / "trials" / f"trial-{t.number:04d}"
        assert t.user_attrs["run_dir"] == str(run_dir)
        assert SeedLog.load(run_dir / "seedlog.json").steps_done == 2 == t.user_attrs["steps"]
        # docs/sweeps.md: every trial has its metrics.jsonl, one line per step, ES as GRPO
        assert [json.loads(x)["step"] for x in (run_dir / "metrics.jsonl").read_text().splitlines()] == [0, 1]
        cfg = t.user_attrs["config"]
        assert (cfg["sigma"], cfg["lr"], cfg["population_size"]) == (
            t.params["sigma"], t.params["lr"], t.params["population_size"])
        assert json.loads((run_dir / "eval_after.json").read_text())["greedy_accuracy"] == t.value
    assert len({t.params["sigma"] for t in study.trials}) == 5  # the resumed sampler does not replay draws
    # trials keep no weights: the seed log rebuilds them (zoopt export)
    path, _ = export_from_seedlog(tmp_path / "resume" / "trials" / "trial-0004", tmp_path / "w")
    assert (path / "config.json").is_file()


def test_resuming_with_other_objectives_is_refused(tmp_path):
    sweeps.run(tiny(), study_name="obj", run_root=tmp_path, n_trials=0, report=False)
    spec = tiny(objectives=[{"metric": "greedy_accuracy", "direction": "minimize"}])
    with pytest.raises(ValueError, match="objectives: study 'obj' already optimises maximize greedy_accuracy"):
        sweeps.run(spec, study_name="obj", run_root=tmp_path, n_trials=1, report=False)


def test_two_workers_share_one_storage_exactly(tmp_path):
    sweeps.run(tiny(), study_name="par", run_root=tmp_path, n_trials=4, workers=2, report=False)
    trials = optuna.load_study(study_name="par", storage=f"sqlite:///{tmp_path / 'par' / 'study.db'}").trials
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert sorted(t.user_attrs["worker"] for t in trials) == [0, 0, 1, 1]
    assert len({t.user_attrs["run_dir"] for t in trials}) == 4
    assert len({t.params["sigma"] for t in trials}) == 4  # the workers' samplers are seeded apart


# -- failures --------------------------------------------------------------------------------
def test_a_failing_trial_is_fail_and_the_sweep_goes_on(tmp_path):
    spec = tiny(space={"sigma": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                       "estimator": {"type": "categorical", "choices": ["one_point", "no_such_estimator"]}})
    study = sweeps.run(spec, study_name="fail", run_root=tmp_path, n_trials=0, report=False)
    study.enqueue_trial({"estimator": "no_such_estimator"})
    study.enqueue_trial({"estimator": "one_point"})
    study = sweeps.run(spec, study_name="fail", run_root=tmp_path, n_trials=2)
    assert states(study) == ["FAIL", "COMPLETE"]
    assert "no_such_estimator" in study.trials[0].user_attrs["error"]
    assert (tmp_path / "fail" / "best.yaml").is_file()


def test_a_nan_metric_is_fail(tmp_path):
    study = sweeps.run(tiny(), study_name="nan", run_root=tmp_path, n_trials=1, evaluate_fn=eval_nan)
    assert states(study) == ["FAIL"]
    assert not (tmp_path / "nan" / "best.yaml").exists()  # the report copes with no completed trial


def test_a_repeated_param_set_reuses_the_completed_trial_without_training(tmp_path):
    """A sampler proposing a completed trial's params again (NSGA-II does) gets that trial's value
    back, with ``duplicate_of``; no run is trained for it.  Other params still train."""
    spec = tiny()
    study = sweeps.run(spec, study_name="dup", run_root=tmp_path, n_trials=0, report=False)
    same = {"sigma": 0.02, "lr": 1e-3, "population_size": 2}
    for params in (same, same, {**same, "sigma": 0.03}):
        study.enqueue_trial(params)
    study = sweeps.run(spec, study_name="dup", run_root=tmp_path, n_trials=3, evaluate_fn=eval_sigma, report=False)
    first, twin, other = sorted(study.trials, key=lambda t: t.number)
    assert states(study) == ["COMPLETE"] * 3
    assert twin.value == first.value == 0.02 and other.value == 0.03
    assert twin.user_attrs["duplicate_of"] == 0 and "duplicate_of" not in other.user_attrs
    assert twin.user_attrs["run_dir"] == first.user_attrs["run_dir"]
    trials = tmp_path / "dup" / "trials"
    assert sorted(p.name for p in trials.iterdir()) == ["trial-0000", "trial-0002"]


def test_a_stale_running_trial_is_marked_fail(tmp_path):
    spec = tiny(heartbeat={"interval": 1, "grace_period": 1})
    sweeps.run(spec, study_name="stale", run_root=tmp_path, n_trials=0, report=False)
    storage = make_storage(f"sqlite:///{tmp_path / 'stale' / 'study.db'}", sweeps.load_spec(spec))
    dead = optuna.load_study(study_name="stale", storage=storage).ask()  # a "killed" worker's trial
    storage.record_heartbeat(dead._trial_id)
    time.sleep(2.1)  # SQLite timestamps have 1 s resolution: 2 s apart is > grace_period
    study = sweeps.run(spec, study_name="stale", run_root=tmp_path, n_trials=1, report=False)
    assert states(study) == ["FAIL", "COMPLETE"]


def test_total_trials_runs_the_rest_of_a_planned_sweep_after_a_cut(tmp_path):
    spec = tiny(heartbeat={"interval": 1, "grace_period": 1})
    study = sweeps.run(spec, study_name="plan", run_root=tmp_path, total_trials=2, report=False)
    assert states(study) == ["COMPLETE"] * 2
    storage = make_storage(f"sqlite:///{tmp_path / 'plan' / 'study.db'}", sweeps.load_spec(spec))
    dead = optuna.load_study(study_name="plan", storage=storage).ask()  # the cut: a killed process's trial
    storage.record_heartbeat(dead._trial_id)
    time.sleep(2.1)
    study = sweeps.run(spec, study_name="plan", run_root=tmp_path, total_trials=4, report=False)
    assert states(study) == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE"]  # the FAIL does not count
    study = sweeps.run(spec, study_name="plan", run_root=tmp_path, total_trials=4, report=False)
    assert len(study.trials) == 5  # the plan is complete: the same call runs nothing
    with pytest.raises(ValueError, match=r"^give n_trials \(1\) or total_trials \(4\), not both$"):
        sweeps.run(spec, study_name="plan", run_root=tmp_path, n_trials=1, total_trials=4)
    with pytest.raises(ValueError, match=r"^total_trials must be an integer >= 0, got -1$"):
        sweeps.run(spec, study_name="plan", run_root=tmp_path, total_trials=-1)


# -- pruning ---------------------------------------------------------------------------------
def test_median_pruner_prunes_a_trial_below_the_median(tmp_path):
    spec = tiny(pruner={"type": "median", "n_startup_trials": 1, "n_warmup_steps": 0}, report_every=1)
    study = sweeps.run(spec, study_name="prune", run_root=tmp_path, n_trials=2, evaluate_fn=eval_first_trial_high,
                       report=False)
    assert states(study) == ["COMPLETE", "PRUNED"]
    assert study.trials[0].intermediate_values == {1: 1.0} and study.trials[0].value == 1.0
    assert study.trials[1].intermediate_values == {1: 0.0}


# -- paper defaults --------------------------------------------------------------------------
def test_paper_defaults_are_trial_zero_and_enqueued_once(tmp_path):
    spec = tiny(enqueue_paper_defaults=True, budget={"steps": 1},
                space={"sigma": {"type": "float", "low": 1e-3, "high": 1e-1, "log": True},
                       "lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
                       "population_size": {"type": "categorical", "choices": [2, 32]}})
    study = sweeps.run(spec, study_name="paper", run_root=tmp_path, n_trials=1, report=False)
    study = sweeps.run(spec, study_name="paper", run_root=tmp_path, n_trials=1, report=False)
    first, second = study.trials
    assert first.params == {"sigma": 1.5e-3, "lr": 2.5e-4, "population_size": 32}
    assert first.user_attrs["paper_defaults"] is True and first.state == TrialState.COMPLETE
    assert (first.user_attrs["config"]["sigma"], first.user_attrs["config"]["population_size"]) == (1.5e-3, 32)
    assert second.params["sigma"] != 1.5e-3 and "paper_defaults" not in second.user_attrs


def test_paper_defaults_outside_the_space_reject_the_spec():
    with pytest.raises(ValueError, match=r"enqueue_paper_defaults: the paper's population_size=32 is outside "
                                         r"space\.population_size"):
        sweeps.load_spec(tiny(enqueue_paper_defaults=True))  # tiny searches N in [2, 4]


# -- the report ------------------------------------------------------------------------------
def test_best_yaml_reproduces_the_best_trial_and_plots_are_pngs(tmp_path):
    study = sweeps.run(tiny(), study_name="rep", run_root=tmp_path, n_trials=3, evaluate_fn=eval_sigma,
                       report=False)
    report = write_report(study, tmp_path / "rep")
    best = max(study.trials, key=lambda t: t.params["sigma"])
    assert study.best_trial.number == best.number
    cfg = load_config(report.best_yaml)
    assert report.best_yaml == tmp_path / "rep" / "best.yaml"
    assert {k: cfg[k] for k in best.params} == best.params
    assert cfg["steps"] == 2 and cfg["run_dir"] is None and cfg["model"] == "tiny"
    # scipy is a project dependency: Optuna's σ–α contour interpolates with it
    assert set(report.plots) == {"history", "importances", "contour"}, report.skipped
    for path in report.plots.values():
        assert path.read_bytes()[:8] == PNG


def test_two_objectives_use_nsga2_and_draw_a_pareto_front(tmp_path):
    spec = tiny(objectives=[{"metric": "greedy_accuracy"}, {"metric": "pass@1"}])
    del spec["sampler"]  # two objectives: NSGA-II by default
    spec["set"]["eval"]["n_samples"] = 1
    study = sweeps.run(spec, study_name="mo", run_root=tmp_path, n_trials=2, evaluate_fn=eval_sigma, report=False)
    assert isinstance(study.sampler, optuna.samplers.NSGAIISampler)
    assert study.metric_names == ["greedy_accuracy", "pass@1"]
    assert all(t.values == [t.params["sigma"], 1 - t.params["sigma"]] for t in study.trials)
    report = write_report(study, tmp_path / "mo")
    for name in ("pareto", "history-greedy_accuracy", "history-pass_1"):
        assert report.plots[name].read_bytes()[:8] == PNG
    best = max(study.trials, key=lambda t: t.params["sigma"])
    assert load_config(report.best_yaml)["sigma"] == best.params["sigma"]
    front = yaml.safe_load(report.front_yaml.read_text())  # (σ, 1 − σ): every trial is on the front
    assert [f["trial"] for f in front] == [t.number for t in study.trials]


def test_front_yaml_lists_exactly_the_non_dominated_trials(tmp_path):
    """Three trials on two maximised objectives: (0.2, 0.9) and (0.5, 0.5) are the front, (0.1, 0.4) is
    dominated by both; front.yaml lists the two in trial order with their values and params."""
    from sweeps.report import write_front

    study = optuna.create_study(directions=["maximize", "maximize"], study_name="front")
    study.set_metric_names(["pass@1", "pass@64"])
    dist = {"sigma": optuna.distributions.FloatDistribution(1e-3, 1e-1, log=True)}
    for sigma, values in ((0.01, [0.2, 0.9]), (0.02, [0.1, 0.4]), (0.03, [0.5, 0.5])):
        study.add_trial(optuna.trial.create_trial(params={"sigma": sigma}, distributions=dist, values=values))
    front = yaml.safe_load(write_front(study, tmp_path / "front.yaml").read_text())
    assert front == [{"trial": 0, "values": {"pass@1": 0.2, "pass@64": 0.9}, "params": {"sigma": 0.01}},
                     {"trial": 2, "values": {"pass@1": 0.5, "pass@64": 0.5}, "params": {"sigma": 0.03}}]


# -- the spec --------------------------------------------------------------------------------
@pytest.mark.parametrize("change, message", [
    ({"sampelr": "tpe"}, r"unknown spec key 'sampelr'"),
    ({"space": {"sigmaa": {"type": "float", "low": 1e-3, "high": 1e-2}}},
     r"space\.sigmaa: unknown config key 'sigmaa'; did you mean 'sigma'"),
    ({"space": {"sigma": {"type": "float", "low": 1e-2, "high": 1e-3}}}, r"space\.sigma: low must be < high"),
    ({"space": {"sigma": {"type": "float", "low": 0.0, "high": 1e-3, "log": True}}}, r"space\.sigma: log: true"),
    ({"space": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "base": 2}}}, r"unknown key space\.lr\.base"),
    ({"space": {"steps": {"type": "int", "low": 1, "high": 3}}}, r"space\.steps: 'steps' is set by the sweep"),
    ({"method": "ppo"}, r"method must be one of \['es', 'grpo'\], got 'ppo'"),
    ({"objectives": [{"metric": "pass@8"}]}, r"objectives\[0\]\.metric 'pass@8' needs base eval\.n_samples >= 8"),
    ({"objectives": [{"metric": "accuracy"}]}, r"objectives\[0\]\.metric must be"),
    ({"objectives": ["greedy_accuracy", "reward"], "pruner": "median", "report_every": 1}, r"pruner: Optuna prunes"),
    ({"pruner": "median"}, r"pruner: 'median' needs report_every > 0"),
    ({"pruner": {"type": "median", "n_startup": 1}, "report_every": 1}, r"pruner: bad option for 'median'"),
    ({"sampler": "grid"}, r"sampler: grid needs categorical or linear int params; space\.sigma is float"),
    ({"budget": {"steps": 0}}, r"budget\.steps must be a positive integer"),
    ({"budget": {"epochs": 3}}, r"budget must be \{steps: N\} or \{completions: N\}"),
    ({"base": {"sampling": {"max_tokens": 3}}}, r"base: unknown config key 'sampling\.max_tokens'"),
    ({"heartbeat": {"interval": 0}}, r"heartbeat\.interval must be a positive integer"),
])
def test_bad_specs_raise_one_line_errors_naming_the_key(change, message):
    with pytest.raises(ValueError, match=message) as info:
        sweeps.load_spec(tiny(**change))
    assert "\n" not in str(info.value)


def test_base_can_be_a_train_yaml_beside_the_spec(tmp_path):
    (tmp_path / "train.yaml").write_text("model: tiny\nsigma: 0.02\n")
    raw = tiny(base="train.yaml", set={"lr": 0.003})
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
    spec = sweeps.load_spec(tmp_path / "spec.yaml")
    assert (spec.name, spec.base["model"], spec.base["sigma"], spec.base["lr"]) == ("spec", "tiny", 0.02, 0.003)


def test_completions_budget_becomes_steps():
    spec = sweeps.load_spec(tiny(budget={"completions": 100}))
    cfg = spec.trial_config({"population_size": 4}, None)  # 4 members × 2 prompts × n=1 = 8 a step
    assert cfg["steps"] == 12
    assert spec.trial_config({"population_size": 4, "sampling.n": 20}, None)["steps"] == 1  # at least 1


def test_packaged_specs_load():
    default, pareto = sweeps.load_spec("default"), sweeps.load_spec("pareto")
    assert default.paper_trial() == {"sigma": 1.5e-3, "lr": 2.5e-4, "population_size": 32}
    assert default.pruner[0] == "median" and default.directions == ["maximize"]
    assert pareto.sampler[0] == "nsga2" and pareto.metric_names == ["greedy_accuracy", "pass@8"]
    assert default.steps_for(default.base) == 4096 // (16 * 32)


def test_the_frontier_spec_searches_at_a_fixed_budget_on_the_validation_split():
    """Issue 43's ES Pareto sweep: Pass@1 and Pass@64 on train[:200], 10,240 completions a trial
    whatever N, and every corner of its space a valid train config."""
    from itertools import product

    from zoopt.hparams import validate

    spec = sweeps.load_spec("frontier")
    assert spec.metric_names == ["pass@1", "pass@64"] and spec.sampler[0] == "nsga2"
    assert spec.base["objective"] == "zoopt.study.validation:ValidationSplit"
    assert spec.trial_config({}, None)["dtype"] == "bfloat16"  # as the committed trials ran
    assert spec.base["objective_args"]["n_validation"] == spec.base["eval"]["n_problems"] == 200
    assert spec.paper_trial() == {"sigma": 1.5e-3, "lr": 2.5e-4, "population_size": 32, "shaping": "zscore",
                                  "noise.kind": "gaussian", "update.rule": "sgd"}
    for n, kind, rule, shaping in product([16, 32, 64], ["gaussian", "low_rank"], ["sgd", "adam"],
                                          ["zscore", "centered_rank"]):
        cfg = spec.trial_config({"population_size": n, "noise.kind": kind, "update.rule": rule,
                                 "shaping": shaping}, None)
        validate(cfg, "train")
        assert cfg["steps"] * n * cfg["prompts_per_step"] == 10240


# -- the CLI command -------------------------------------------------------------------------
def test_cli_sweep_command(tmp_path, capsys):
    from zoopt.cli import build_parser

    parser = build_parser()
    spec_path = tmp_path / "mine.yaml"
    spec_path.write_text(yaml.safe_dump(tiny(budget={"steps": 1})))
    args = parser.parse_args(["sweep", str(spec_path), "--n-trials", "1", "--run-root", str(tmp_path / "runs")])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "study mine: 1 complete, 0 pruned, 0 fail" in out
    study = optuna.load_study(study_name="mine", storage=f"sqlite:///{tmp_path / 'runs' / 'mine' / 'study.db'}")
    assert states(study) == ["COMPLETE"] and math.isfinite(study.trials[0].value)
    assert (tmp_path / "runs" / "mine" / "best.yaml").is_file()
    args = parser.parse_args(["sweep", str(spec_path), "--total-trials", "2", "--run-root", str(tmp_path / "runs")])
    assert args.func(args) == 0
    assert "study mine: 2 complete, 0 pruned, 0 fail" in capsys.readouterr().out  # one more, not two
    with pytest.raises(SystemExit):  # argparse: not allowed with argument --n-trials
        parser.parse_args(["sweep", str(spec_path), "--n-trials", "1", "--total-trials", "2"])


def test_the_update_rules_spec_is_a_grid_of_rules_and_learning_rates_at_the_demos_rollouts():
    spec = sweeps.load_spec("update-rules")
    assert spec.sampler[0] == "grid" and spec.n_trials == 6 and spec.space["update.rule"].choices == ("sgd", "momentum",
                                                                                                       "adam")
    assert spec.steps_for(spec.base) == load_config()["steps"] == 15  # the demo's 15 steps of 16 × 32
    assert spec.base["model"] == load_config()["model"] and spec.base["eval"]["n_problems"] == 200


def test_the_update_rules_spec_runs_every_rule_on_the_tiny_model(tmp_path, capsys):
    from rich.console import Console

    from sweeps.report import best_table

    raw = yaml.safe_load(packaged_spec("update-rules").read_text())
    raw["base"] = {**yaml.safe_load(packaged_spec("tiny").read_text())["base"], **SMALL}
    raw["budget"] = {"steps": 2}
    study = sweeps.run(raw, study_name="rules", run_root=tmp_path, report=False)
    assert states(study) == ["COMPLETE"] * 6
    seen = set()
    for t in study.trials:
        rule = t.params["update.rule"]
        header = SeedLog.load(t.user_attrs["run_dir"]).header
        assert header["config"]["update"]["rule"] == rule and t.user_attrs["config"]["lr"] == t.params["lr"]
        assert (header["update"]["kind"] == rule) and len(SeedLog.load(t.user_attrs["run_dir"]).updates) == 2
        lo, hi = t.user_attrs["eval"]["greedy_accuracy_ci"]
        assert lo <= t.values[0] <= hi
        seen.add((rule, t.params["lr"]))
    assert seen == {(r, lr) for r in ("sgd", "momentum", "adam") for lr in (6.25e-4, 2.5e-3)}
    Console(width=200).print(best_table(study))
    assert "greedy_accuracy 95 % CI" in capsys.readouterr().out
