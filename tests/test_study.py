"""``zoopt study`` end to end on the tiny model: every claim of ``paper-toy --profile smoke``,
resume (finished runs skipped, a killed run resumes to the same checksum), spec errors, and
``zoopt analyze --population-coverage``."""

import json
import sys
from pathlib import Path

import pytest

from zoopt.cli import main
from zoopt.config import ConfigError
from zoopt.study.spec import load_study_spec
from zoopt.study.verdict import CONTRADICTED, INCONCLUSIVE, NOT_DRAWN, REPRODUCED
from zoopt.workflows import study as study_flow

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


class LooseDigits(Digits):
    """Digits (the tiny model's ~12 % digit share) counted correct at ≥ 20 % digits, so Pass@k moves."""

    success_threshold = 0.2

    def extract_answer(self, completion):
        return next((ch for ch in completion if ch.isdigit()), None)


OBJECTIVE = f"objective={Path(__file__).resolve()}:LooseDigits"
VERDICTS = {REPRODUCED, CONTRADICTED, INCONCLUSIVE, NOT_DRAWN}


def test_smoke_study_runs_every_claim_and_resumes_without_rerunning(tmp_path, monkeypatch):
    out = tmp_path / "study"
    assert main(["study", "paper-toy", "--profile", "smoke", "--set", OBJECTIVE, "--out", str(out), "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert list(report["claims"]) == ["C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8"]
    for cid, claim in report["claims"].items():
        assert claim["verdicts"] and {v["verdict"] for v in claim["verdicts"]} <= VERDICTS, cid
    c1 = report["claims"]["C1"]["verdicts"][0]
    assert c1["verdict"] == NOT_DRAWN or (c1["ci"][0] <= c1["mean"] <= c1["ci"][1])
    # equal budgets: every trained run used the same completions (16), the base none
    assert {r: row["completions"] for r, row in report["runs"].items()} == {
        "base": 0, **{r: 16 for r in report["runs"] if r != "base"}}
    assert report["tuning"]["es"]["chosen"]["sigma"] == 0.05 and len(report["tuning"]["es"]["trials"]) == 2
    # C6 at N ∈ {2, 4}: the es run (N=4) serves N=4 instead of training the same configuration twice
    assert "es_n4" not in report["runs"] and "es_n2" in report["runs"]
    assert report["claims"]["C6"]["numbers"]["runs"] == {"2": "es_n2", "4": "es"}
    # tuning scored on problems carved from train, the held-out eval on test (Digits: 0..15 vs 100..115)
    assert "crosses zero" in (out / "report.md").read_text()
    for png in ("pass_at_k.png", "entropy.png", "c7_points.png", "c8_coverage.png"):
        assert (out / png).stat().st_size > 0
    c8 = json.loads((out / "analysis" / "c8.json").read_text())
    assert c8["members"] == 4 and set(c8["by_k"]) == {"1", "2", "4"}
    # a second call finds everything finished: no run, tuning trial or analysis runs again
    monkeypatch.setattr(study_flow, "run_method", lambda *a, **k: pytest.fail("a finished run ran again"))
    monkeypatch.setattr(study_flow, "population_coverage", lambda *a, **k: pytest.fail("C8 ran again"))
    assert main(["study", "paper-toy", "--profile", "smoke", "--set", OBJECTIVE, "--out", str(out), "--quiet"]) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["runs"] == report["runs"] and again["claims"] == report["claims"]


def smoke_spec(*sets: str) -> dict:
    return load_study_spec("paper-toy", "smoke", [OBJECTIVE, *sets])


def quiet_study(spec: dict, out: Path) -> dict:
    return study_flow.run_study(spec, out=out, quiet=True, log=lambda *a: None)


def killed_study(spec: dict, out: Path, trainer: type, at_step: int, monkeypatch) -> None:
    """Run the study with ``trainer.step`` raising KeyboardInterrupt at its ``at_step``-th call."""
    real_step, calls = trainer.step, []

    def dies(self, on_member=None):
        calls.append(1)
        if len(calls) == at_step:
            raise KeyboardInterrupt("killed")
        return real_step(self, on_member)

    monkeypatch.setattr(trainer, "step", dies)
    with pytest.raises(KeyboardInterrupt):
        quiet_study(spec, out)
    monkeypatch.setattr(trainer, "step", real_step)


def test_a_killed_run_resumes_to_the_same_checksum(tmp_path, monkeypatch):
    from zoopt.workflows.train import Trainer

    spec = smoke_spec("claims=[C5]", "tuning.enabled=false", "budget=32", "es.sigma=0.05", "es.lr=0.05")
    whole = quiet_study(spec, tmp_path / "whole")
    killed_study(spec, tmp_path / "killed", Trainer, 3, monkeypatch)
    seedlog = json.loads((tmp_path / "killed" / "runs" / "es" / "phase0-es" / "seedlog.json").read_text())
    assert len(seedlog["updates"]) == 2  # 4 steps planned, killed after 2
    resumed = quiet_study(spec, tmp_path / "killed")
    assert resumed["runs"]["es"]["checksum"] == whole["runs"]["es"]["checksum"]
    assert resumed["runs"]["es"]["steps"] == [4]
    assert resumed["claims"] == whole["claims"]


def test_a_killed_grpo_phase_starts_again_and_reaches_the_same_checksum(tmp_path, monkeypatch):
    from zoopt.workflows.grpo import GRPOTrainer

    spec = smoke_spec("claims=[C2]", "tuning.enabled=false", "budget=32", "es.sigma=0.05", "es.lr=0.05",
                      "grpo.lr=0.01")
    whole = quiet_study(spec, tmp_path / "whole")
    killed_study(spec, tmp_path / "killed", GRPOTrainer, 3, monkeypatch)
    assert (tmp_path / "killed" / "runs" / "grpo" / "phase0-grpo").is_dir()
    assert not (tmp_path / "killed" / "runs" / "grpo" / "result.json").exists()
    resumed = quiet_study(spec, tmp_path / "killed")
    assert resumed["runs"]["grpo"]["checksum"] == whole["runs"]["grpo"]["checksum"]
    assert resumed["runs"]["grpo"]["checksum"] != resumed["runs"]["base"]["checksum"]  # GRPO moved the weights
    assert resumed["claims"] == whole["claims"]


def test_a_tuning_trial_killed_midway_runs_again_on_resume(tmp_path, monkeypatch):
    from zoopt.workflows.train import Trainer

    spec = smoke_spec("claims=[C5]")
    killed_study(spec, tmp_path / "s", Trainer, 3, monkeypatch)  # a trial is 2 steps: the second trial's first
    report = quiet_study(spec, tmp_path / "s")
    trials = report["tuning"]["es"]["trials"]
    assert sorted(t["params"]["lr"] for t in trials) == [0.01, 0.05]  # both grid points, none twice
    choice = json.loads((tmp_path / "s" / "tuning" / "es" / "choice.json").read_text())
    assert len(choice["trials"]) == 2 and choice["failed_trials"] == [1]


@pytest.mark.parametrize("sets,message", [
    (["claims=[C1, C9]"], "claims: unknown claim 'C9'"),
    (["tunning.budget=3"], "unknown config key 'tunning'; did you mean 'tuning'?"),
    (["c8.ks=[1, 64]"], "c8.ks must lie in [1, c8.members=32]"),
    (["tuning.es.sigma=0.1"], "tuning.es.sigma must be a non-empty list"),
])
def test_bad_spec_input_is_one_line_naming_the_key(sets, message):
    with pytest.raises(ConfigError) as info:
        load_study_spec("paper-toy", None, sets)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_unknown_profile_and_spec_and_the_cli_line(capsys):
    with pytest.raises(ConfigError, match="unknown profile 'fast'.*has: smoke"):
        load_study_spec("paper-toy", "fast")
    assert main(["study", "paper-tiny"]) == 2
    assert "zoopt study: error: study spec not found: paper-tiny (shipped: coverage, paper-easy, paper-hard, paper-toy)" \
        in capsys.readouterr().err


def test_shipped_recipes_load_with_their_documented_ids():
    easy, hard = load_study_spec("paper-easy"), load_study_spec("paper-hard")
    assert (easy["model"], easy["objective"], easy["es"]["population_size"], easy["es"]["sigma"], easy["es"]["lr"]) == \
        ("Qwen/Qwen2.5-0.5B-Instruct", "gsm8k", 32, 1.5e-3, 2.5e-4)
    assert hard["model"] == "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B" and hard["engine"] == "vllm"
    import objectives  # noqa: F401 - registers the built-in objectives
    from zoopt.registry import OBJECTIVES

    assert hard["objective"] == "deepscaler" and OBJECTIVES.get("deepscaler").__name__ == "DeepScaleR"  # registered


def test_analyze_population_coverage_on_a_trained_run(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--model", "tiny", "--objective", OBJECTIVE.split("=", 1)[1], "--quiet", "--set", "steps=1",
                 "--set", "population_size=2", "--set", "prompts_per_step=2", "--set", "sampling.max_new_tokens=4",
                 "--set", "eval.n_problems=2", "--set", "sigma=0.05", "--set", f"run_dir={run}"]) == 0
    out = tmp_path / "cov"
    assert main(["analyze", str(run), "--population-coverage", "--members", "4", "--coverage-ks", "1,4",
                 "--n-problems", "4", "--max-new-tokens", "4", "--out", str(out)]) == 0
    record = json.loads((out / "coverage.json").read_text())
    assert record["sigma"] == 0.05 and record["members"] == 4 and record["n_problems"] == 4
    assert len(record["member_success"]["rates"]) == 4
    for k in ("1", "4"):
        r = record["by_k"][k]
        assert r["difference"] == pytest.approx(r["population"] - r["center"])
        assert r["difference_ci"][0] <= r["difference"] <= r["difference_ci"][1]
    assert "K = 4: population" in capsys.readouterr().out
