"""``zoopt study coverage``: training seeds, checkpoints evaluated along the way, final models at
more temperatures, C1S's numbers (exact on constructed evaluations), resume and wall time."""

import json
import math
import sys
from pathlib import Path

import pytest

from zoopt import models, warmups
from zoopt.config import ConfigError
from zoopt.engines.weights import digest
from zoopt.metrics import pass_at_k
from zoopt.runs.references import load_base
from zoopt.study.narrowing import c1_strong, curves, point_difference
from zoopt.study.spec import load_study_spec
from zoopt.study.verdict import CONTRADICTED, INCONCLUSIVE, REPRODUCED
from zoopt.workflows import study as study_flow
from zoopt.workflows import study_seeds

sys.path.insert(0, str(Path(__file__).parent))
from test_study import LooseDigits  # noqa: E402


class AnyArgsDigits(LooseDigits):
    """LooseDigits that ignores the coverage spec's arithmetic arguments."""

    def __init__(self, **_):
        pass


OBJECTIVE = f"objective={Path(__file__).resolve()}:AnyArgsDigits"


def smoke(*sets: str) -> dict:
    return load_study_spec("coverage", "smoke", [OBJECTIVE, *sets])


def quiet(spec: dict, out: Path) -> dict:
    return study_flow.run_study(spec, out=out, quiet=True, log=lambda *a: None)


@pytest.mark.usefixtures("one_thread")
def test_smoke_runs_seeds_checkpoints_and_temperatures_then_resumes(tmp_path, monkeypatch):
    out = tmp_path / "s"
    report = quiet(smoke(), out)
    runs = out / "runs"
    assert sorted(report["runs"]) == ["base", "es", "es-s1", "grpo", "grpo-s1"]
    # budget 32: ES 4 steps of 4 members × 2 prompts, GRPO 4 steps of 2 prompts × 4; a checkpoint every 2 steps
    for name in ("es", "es-s1", "grpo", "grpo-s1"):
        method = name.split("-")[0]
        assert [p.name for p in (runs / name / "checkpoints").iterdir()] == [f"phase0-{method}-2.json"]
        assert not list((runs / name / f"phase0-{method}").glob("checkpoint-*"))  # evaluated, then removed
        assert json.loads((runs / name / "eval-T1.json").read_text())["summary"]["temperature"] == 1.0
    assert (runs / "base" / "eval-T1.json").exists()
    # the seed changes training, not the evaluation
    es0 = json.loads((runs / "es" / "phase0-es" / "seedlog.json").read_text())
    es1 = json.loads((runs / "es-s1" / "phase0-es" / "seedlog.json").read_text())
    assert es0["updates"][0]["seeds"] != es1["updates"][0]["seeds"]
    assert {json.loads((runs / n / "eval.json").read_text())["summary"]["seed"] for n in report["runs"]} == {0}
    c1s = report["claims"]["C1S"]
    assert [v["statement"] for v in c1s["verdicts"]] == [
        f"{m} falls below the base at Pass@4 (final weights, T = {t})" for m in ("GRPO", "ES") for t in ("0.6", "1")]
    points = c1s["numbers"]["points"]["grpo"]
    assert [(p["label"], p["temperature"], p["completions"]) for p in points] == [
        ("step 2", 0.6, 16), ("final", 0.6, 32), ("final", 1.0, 32)]
    assert all(p["by_k"]["4"]["seeds"] == 2 for p in points)
    assert (out / "coverage_pass_at_k.png").stat().st_size > 0 and (out / "coverage_pass_at_k_T1.png").exists()
    reward = c1s["numbers"]["training_reward"]  # GRPO's train reward: is it saturating?
    assert sorted(reward) == ["es", "es-s1", "grpo", "grpo-s1"] and [x for x, _ in reward["grpo"]] == [8, 16, 24, 32]
    assert (out / "training_reward.png").exists()
    wall = json.loads((out / "wall_time.json").read_text())
    assert len(wall["segments"]) == 1 and report["wall_time"]["total_s"] == wall["total_s"] > 0
    assert "Wall time:" in (out / "report.md").read_text()

    # a kill after grpo-s1 trained, before its extra evaluations: only those are redone
    kept = (runs / "es" / "checkpoints" / "phase0-es-2.json").read_text()
    (runs / "grpo-s1" / "eval-T1.json").unlink()
    (runs / "grpo-s1" / "checkpoints" / "phase0-grpo-2.json").unlink()
    monkeypatch.setattr(study_flow, "run_method", lambda *a, **k: pytest.fail("a finished run ran again"))
    again = quiet(smoke(), out)
    assert (runs / "grpo-s1" / "eval-T1.json").exists()
    assert (runs / "es" / "checkpoints" / "phase0-es-2.json").read_text() == kept
    # the checkpoint's weights were gone, so its evaluation is not redone: the point has one seed left
    assert again["claims"]["C1S"]["numbers"]["points"]["grpo"][0]["by_k"]["4"]["seeds"] == 1
    assert again["claims"]["C1S"]["verdicts"] == c1s["verdicts"]
    assert len(json.loads((out / "wall_time.json").read_text())["segments"]) == 2


class Killed(Exception):
    """The stand-in for a kill in the middle of a run."""


@pytest.mark.usefixtures("one_thread")
def test_a_killed_grpo_run_resumes_from_its_state_to_the_same_weights(tmp_path, monkeypatch):
    sets = ["seeds=[0]", "final_temperatures=null", "grpo.state_every=2"]
    whole = quiet(smoke(*sets), tmp_path / "whole")

    from zoopt.workflows.grpo import GRPOTrainer

    step, ran = GRPOTrainer.step, []

    def killed_at_step_3(self, on_member=None):
        if self.steps_done == 3:
            raise Killed()  # the state was saved after step 2, the checkpoint of step 2 evaluated
        ran.append(self.steps_done)
        return step(self, on_member)

    monkeypatch.setattr(GRPOTrainer, "step", killed_at_step_3)
    tick = study_seeds.WallClock.tick
    monkeypatch.setattr(study_seeds.WallClock, "tick", lambda self: (ran.append("tick"), tick(self))[1])
    with pytest.raises(Killed):
        quiet(smoke(*sets), tmp_path / "cut")
    runs = tmp_path / "cut" / "runs"
    # the wall clock ticked between steps 1 and 2 (at the step-2 checkpoint): the killed
    # invocation's time is counted up to there, not only up to its last finished run
    assert "tick" in ran[ran.index(1) + 1:ran.index(2)]
    ran[:] = [x for x in ran if x != "tick"]
    monkeypatch.setattr(study_seeds.WallClock, "tick", tick)
    assert ran == [0, 1, 2] and (runs / "grpo" / "phase0-grpo" / "trainer_state.pt").exists()
    assert (runs / "grpo" / "checkpoints" / "phase0-grpo-2.json").exists()  # evaluated as soon as written
    assert not (runs / "grpo" / "result.json").exists()
    ran.clear()
    monkeypatch.setattr(GRPOTrainer, "step", lambda self, on_member=None: (ran.append(self.steps_done),
                                                                          step(self, on_member))[1])
    resumed = quiet(smoke(*sets), tmp_path / "cut")
    assert ran == [2, 3]  # from the state, not from the start
    for name in ("es", "grpo"):
        assert resumed["runs"][name]["checksum"] == whole["runs"][name]["checksum"], name
    lines = (runs / "grpo" / "phase0-grpo" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2, 3]
    assert not (runs / "grpo" / "phase0-grpo" / "trainer_state.pt").exists()  # a finished run needs none
    cut_eval, whole_eval = (json.loads((d / "runs" / "grpo" / "checkpoints" / "phase0-grpo-2.json").read_text())
                            for d in (tmp_path / "cut", tmp_path / "whole"))
    assert cut_eval["per_problem"] == whole_eval["per_problem"]
    assert {k: v for k, v in cut_eval["summary"].items() if not k.endswith("_s")} == {
        k: v for k, v in whole_eval["summary"].items() if not k.endswith("_s")}


@pytest.mark.usefixtures("one_thread")
def test_runs_can_be_done_apart_then_finished(tmp_path, capsys):
    from zoopt.cli import build_parser

    out, sets = tmp_path / "s", ["--set", OBJECTIVE, "--set", "seeds=[0]", "--set", "final_temperatures=null"]
    parser = build_parser()
    args = parser.parse_args(["study", "coverage", "--profile", "smoke", "--out", str(out), "--quiet",
                              "--runs", "base,grpo", *sets])
    assert args.func(args) == 0
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["base", "grpo"]
    assert (out / "runs" / "grpo" / "result.json").exists() and not (out / "report.json").exists()
    bad = parser.parse_args(["study", "coverage", "--profile", "smoke", "--out", str(out), "--runs", "es-s1", *sets])
    with pytest.raises(ConfigError, match=r"--runs: no run 'es-s1' in study 'coverage'; its runs: base, es, grpo"):
        bad.func(bad)
    grpo = (out / "runs" / "grpo" / "result.json").read_text()
    report = quiet(smoke("seeds=[0]", "final_temperatures=null"), out)  # the rest, then the report
    assert sorted(report["runs"]) == ["base", "es", "grpo"] and (out / "report.json").exists()
    assert (out / "runs" / "grpo" / "result.json").read_text() == grpo  # done once


def test_a_study_refuses_to_go_on_from_another_base(tmp_path):
    out = tmp_path / "s"
    out.mkdir()
    spec = smoke("seeds=[0]")
    first = study_flow.check_base(out, spec)
    assert study_flow.check_base(out, spec) == first  # the same machine builds the same weights
    saved = json.loads((out / "base.json").read_text())
    (out / "base.json").write_text(json.dumps({**saved, "digest": "0" * 32}))
    with pytest.raises(ConfigError, match=r"model: 'tiny' builds to weights [0-9a-f]{32} on this machine, but the "
                                          r"study in .* started from 0{32}: its runs would not share a base"):
        quiet(spec, out)


def test_a_study_on_a_fresh_machine_builds_its_warmup_base_before_taking_its_digest(tmp_path, monkeypatch):
    # a new machine has no built warm-up: the base guard must build it, not fail to load it by name
    monkeypatch.setenv("ZOOPT_CACHE", str(tmp_path / "cache"))
    recipe = {"base": "tiny", "objective": "arithmetic", "objective_args": {"digits": 1}, "problems": 8,
              "target": "{answer}", "steps": 2, "lr": 1e-2, "batch_size": 4, "seed": 0}
    monkeypatch.setitem(warmups.WARMUPS, "tiny-study-warmup", recipe)
    out = tmp_path / "s"
    out.mkdir()
    spec = {**smoke("seeds=[0]"), "model": "tiny-study-warmup"}
    assert models.cached_build("tiny-study-warmup") is None
    first = study_flow.check_base(out, spec)
    assert (tmp_path / "cache" / "models" / "tiny-study-warmup" / "zoopt_build.json").exists()
    assert json.loads((out / "base.json").read_text())["model"] == "tiny-study-warmup"
    assert first == digest(load_base("tiny-study-warmup", spec["dtype"]).params.items())
    assert first != digest(load_base("tiny", spec["dtype"]).params.items())  # the warm-up, not its base


def test_plan_runs_names_and_seeds():
    spec = load_study_spec("coverage", "smoke", ["seeds=[3, 5]", "seed=7"])
    cfg = study_flow.compare_config(spec, {m: {"chosen": {}} for m in ("es", "grpo")}, Path("r"))
    runs = study_seeds.plan_runs(spec, cfg, 16)
    assert list(runs) == ["base", "es", "grpo", "es-s5", "grpo-s5"]
    assert [(runs[n]["seed"], runs[n]["phases"][0].cfg["seed"]) for n in ("es", "grpo-s5")] == [(3, 3), (5, 5)]
    assert study_flow.eval_config(cfg)["seed"] == 7  # every run is evaluated with the spec's seed
    assert study_seeds.training_seeds(load_study_spec("paper-toy", None, ["seed=4"])) == [4]


@pytest.mark.parametrize("sets,message", [
    (["seeds=[1, 1]"], "seeds must be null or a non-empty list of distinct integers"),
    (["seeds=[]"], "seeds must be null or a non-empty list"),
    (["seeds=[-1]"], "integers ≥ 0"),
    (["final_temperatures=[0]"], "final_temperatures must be null or a list of numbers > 0"),
    (["final_temperatures=1.0"], "final_temperatures must be null or a list"),
])
def test_bad_seeds_and_temperatures_are_one_line(sets, message):
    with pytest.raises(ConfigError) as info:
        load_study_spec("coverage", None, sets)
    assert message in str(info.value) and "\n" not in str(info.value)


def _eval(counts, n=4, ks=(1, 2, 4)):
    return {"summary": {}, "per_problem": [{f"pass@{k}": pass_at_k(n, c, k) for k in ks} for c in counts]}


def test_point_difference_numbers_are_exact():
    base = _eval([4, 1, 0, 2])                       # pass@4: 1, 1, 0, 1
    seeds = [_eval([4, 0, 0, 2]), _eval([4, 0, 0, 0])]  # pass@4: 1, 0, 0, 1  and  1, 0, 0, 0
    at = point_difference(seeds, base, 4)
    assert at["per_seed"] == [-0.25, -0.5]
    assert at["difference"] == pytest.approx(-0.375) and at["base"] == 0.75 and at["method"] == pytest.approx(0.375)
    assert at["ci_problems"][1] <= 0 and at["ci_seeds"][0] >= -0.5 and at["ci_seeds"][1] <= -0.25
    one = point_difference(seeds, base, 1)  # pass@1 = c/4
    assert one["per_seed"] == [-1 / 16, -3 / 16] and one["difference"] == -1 / 8


def test_c1_strong_verdicts_read_below_as_reproduced():
    counts = [0] * 20 + [2] * 20                       # the base's pass@4: 0 on half the problems, 1 on the others
    base = {"0.6": _eval(counts), "1.0": _eval(counts)}
    below = [_eval([0] * 40), _eval([0] * 40)]
    above = [_eval([4] * 40), _eval([4] * 40)]
    points = {"grpo": [{"label": "step 10", "step": 10, "completions": 80, "temperature": 0.6, "final": False,
                        "evals": above},
                       {"label": "final", "step": 20, "completions": 160, "temperature": 0.6, "final": True,
                        "evals": below},
                       {"label": "final", "step": 20, "completions": 160, "temperature": 1.0, "final": True,
                        "evals": [_eval(counts)] * 2}],
              "es": [{"label": "final", "step": 2, "completions": 160, "temperature": 0.6, "final": True,
                      "evals": above}]}
    out = c1_strong(points, base, [1, 2, 4])
    assert [(v.statement, v.verdict) for v in out["verdicts"]] == [
        ("GRPO falls below the base at Pass@4 (final weights, T = 0.6)", REPRODUCED),
        ("GRPO falls below the base at Pass@4 (final weights, T = 1)", INCONCLUSIVE),
        ("ES falls below the base at Pass@4 (final weights, T = 0.6)", CONTRADICTED)]
    assert out["verdicts"][0].mean == 0.5 and out["verdicts"][2].mean == -0.5  # base − method at Pass@4
    assert out["numbers"]["first_below_base_at_K"] == {"grpo": "final", "es": None}
    lines = curves(out["numbers"], 0.6)
    assert list(lines) == ["base", "GRPO step 10", "GRPO final", "ES final"]
    assert lines["base"] == {1: 0.25, 2: pytest.approx(5 / 12), 4: 0.5} and lines["GRPO final"][4] == 0.0


def test_sizing_is_the_paired_formula_on_the_seed_averaged_differences():
    from zoopt.study.narrowing import held_out_size

    d = [0.3, -0.3] * 50                          # sd (ddof 1) = 0.3 · sqrt(100/99)
    z = held_out_size(d, seeds=3)
    sd = 0.3 * (100 / 99) ** 0.5
    assert z["sd_d"] == pytest.approx(sd) and z["problems"] == 100 and z["seeds"] == 3
    assert z["problems_needed"] == math.ceil((2.8015876 * sd / 0.03) ** 2) == 793


def test_the_grpo_early_profile_plans_ten_grpo_steps_checkpointed_every_two():
    """Issue 43's GRPO early frontier: 2,560 completions = 10 steps of 32 × 8, checkpoints at 2, 4, 6, 8."""
    spec = load_study_spec("coverage", "grpo-early", ["grpo.beta=0.04"])
    cfg = study_flow.compare_config(spec, {m: {"chosen": {}} for m in ("es", "grpo")}, Path("r"))
    runs = study_seeds.plan_runs(spec, cfg, 500)
    assert {"base", "grpo", "grpo-s1", "grpo-s2"} <= set(runs)
    (phase,) = runs["grpo-s2"]["phases"]
    assert phase.steps == 10 and phase.cfg["checkpoint_every"] == 2 and phase.cfg["beta"] == 0.04
    assert spec["final_temperatures"] is None and spec["eval"]["n_problems"] == 337


def test_the_es_front_profile_retrains_a_sweep_configuration_at_twice_its_budget():
    """Issue 43's retrain of a front trial: its params as ``es.<key>`` sets reach the ES phase; 20,480
    completions of 64 x 32 are 10 steps, checkpointed at 3, 6 and 9 (``es.checkpoint_every=3``)."""
    sets = ["es.sigma=0.004", "es.lr=0.0007", "es.population_size=64", "es.shaping=centered_rank",
            "es.noise.kind=low_rank", "es.update.rule=adam", "es.checkpoint_every=3"]
    spec = load_study_spec("coverage", "es-front", sets)
    cfg = study_flow.compare_config(spec, {m: {"chosen": {}} for m in ("es", "grpo")}, Path("r"))
    runs = study_seeds.plan_runs(spec, cfg, 500)
    assert {"base", "es", "es-s1", "es-s2"} <= set(runs)
    (phase,) = runs["es-s2"]["phases"]
    assert phase.steps == 10 and phase.cfg["checkpoint_every"] == 3
    assert (phase.cfg["sigma"], phase.cfg["lr"], phase.cfg["shaping"]) == (0.004, 0.0007, "centered_rank")
    assert phase.cfg["noise"]["kind"] == "low_rank" and phase.cfg["update"]["rule"] == "adam"
    assert spec["final_temperatures"] is None and spec["eval"]["n_problems"] == 337
