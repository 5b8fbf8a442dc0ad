"""``report_to``: the step records, evaluations and plots reach TensorBoard, W&B (offline) and
Trackio (a local database) from ``zoopt train``, ``zoopt.fit``, ``zoopt grpo`` and ``zoopt compare``;
nothing leaves the machine.  The trackers are in the ``dev`` extra, so these tests run in CI."""

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from zoopt import ES, Gaussian, Sampling, fit
from zoopt.cli import main
from zoopt.engines.hf import HFEngine
from zoopt.hparams import EvalConfig, run_configs
from zoopt.runs.rundir import RunDir
from zoopt.reporting.trackers import TRACKERS

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

DIGITS = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"


def sets(*items):
    return [x for item in items for x in ("--set", item)]


TINY = ["--quiet", "--model", "tiny", "--objective", DIGITS, *sets(
    "dtype=float32", "prompts_per_step=2", "population_size=4", "sigma=0.05", "lr=0.05", "sampling.max_new_tokens=4",
    "eval.n_problems=2", "eval.max_new_tokens=2", "noise_cache_gb=0", "export=false")]


def scalars(directory: Path, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(str(directory))
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


def test_tensorboard_event_file_of_a_two_step_run_holds_the_step_records(tmp_path, one_thread):
    run = tmp_path / "run"
    assert main(["train", *TINY, "--report-to", "tensorboard", *sets("steps=2", f"run_dir={run}")]) == 0
    records = RunDir(run).read_metrics()
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert len(list((run / "tensorboard").glob("events.out.tfevents.*"))) == 1
    for key in ("reward_mean", "reward_max", "entropy", "rewards/digits/mean", "update_coef_norm"):
        # step = steps done; the value is the record's (float32 in the event file)
        assert scalars(run / "tensorboard", f"train/{key}") == [
            (r["step"] + 1, pytest.approx(r[key], rel=1e-6)) for r in records], key
    before, after = (json.loads((run / f"eval_{t}.json").read_text()) for t in ("before", "after"))
    assert scalars(run / "tensorboard", "eval/greedy_accuracy") == [(0, before["greedy_accuracy"]),
                                                                    (2, after["greedy_accuracy"])]
    assert [e.step for e in events.Images("training")] == [2]  # the final plot
    assert "train/population_path" not in events.Tags()["scalars"]  # strings are left out


def test_wandb_offline_writes_its_run_directory_and_log_every_thins_the_steps(tmp_path, monkeypatch, one_thread):
    monkeypatch.setenv("WANDB_MODE", "offline")  # nothing leaves the machine
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")
    monkeypatch.setenv("WANDB_SILENT", "true")
    es = ES("one_point", noise=Gaussian(), lr=0.05, sigma=0.05, population_size=4)
    result = fit(HFEngine.from_pretrained("tiny", dtype="float32"), Digits(), es, steps=2, prompts_per_step=2,
                 sampling=Sampling(temperature=0.0, max_new_tokens=4), run_dir=tmp_path / "run",
                 report_to=["wandb", "tensorboard"], log_every=2, evaluation=EvalConfig(n_problems=2, max_new_tokens=2),
                 progress=False)
    # log_every (TRL's logging_steps): every 2nd step record reaches the trackers; metrics.jsonl has each
    assert [s for s, _ in scalars(result.run_dir / "tensorboard", "train/reward_mean")] == [2]
    assert len(RunDir(result.run_dir).read_metrics()) == 2
    runs = list((result.run_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, list((result.run_dir / "wandb").iterdir())
    keys = (b"train/reward_mean", b"train/rewards/digits/mean", b"eval/greedy_accuracy", b"training")
    log, deadline = b"", time.time() + 60  # W&B's service writes its record log (keys as text) after finish()
    while not all(key in log for key in keys) and time.time() < deadline:
        time.sleep(0.2)
        log = next(runs[0].glob("run-*.wandb")).read_bytes()
    assert all(key in log for key in keys), [key for key in keys if key not in log]
    assert list((runs[0] / "files" / "media").rglob("*.png")), "the training plot was not logged"


def test_trackio_gets_a_grpo_run_in_its_local_database(tmp_path):
    env = {**os.environ, "TRACKIO_DIR": str(tmp_path / "trackio"), "OMP_NUM_THREADS": "1"}
    argv = ["grpo", "--quiet", "--model", "tiny", "--objective", DIGITS, *sets(
        "steps=2", "prompts_per_step=2", "sampling.n=2", "sampling.max_new_tokens=4", "eval.n_problems=0",
        "export=false", "report_to=trackio", f"run_dir={tmp_path / 'run'}")]
    out = subprocess.run([sys.executable, "-m", "zoopt.cli", *argv], env=env, capture_output=True, text=True,
                         timeout=600, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    with sqlite3.connect(tmp_path / "trackio" / "zoopt.db") as db:
        rows = db.execute("select step, metrics from metrics where run_name = 'run' order by step").fetchall()
    logged: dict[int, dict] = {}
    for step, metrics in rows:  # the final plot is a row of its own at the last step
        logged.setdefault(step, {}).update(json.loads(metrics))
    records = RunDir(tmp_path / "run").read_metrics()
    assert sorted(logged) == [1, 2]
    assert [logged[r["step"] + 1]["train/reward_mean"] for r in records] == [r["reward_mean"] for r in records]
    assert [logged[r["step"] + 1]["train/loss"] for r in records] == [r["loss"] for r in records]
    assert "training" in logged[2]


def test_compare_reports_each_method_and_the_table(tmp_path, one_thread):
    run = tmp_path / "cmp"
    argv = ["compare", "--quiet", "--model", "tiny", "--objective", DIGITS, "--methods", "base,es", *sets(
        "budget=16", "isolate=false", "es.population_size=2", "es.prompts_per_step=2", "es.sampling.max_new_tokens=2",
        "eval.n_problems=2", "eval.n_samples=2", "eval.ks=[1,2]", "eval.max_new_tokens=2", "report_to=tensorboard",
        f"run_dir={run}")]
    assert main(argv) == 0
    table = {row["method"]: row for row in json.loads((run / "compare.json").read_text())["table"]}
    steps = scalars(run / "es" / "tensorboard", "train/reward_mean")
    assert [s for s, _ in steps] == [1, 2, 3, 4]  # 16 completions at 4 a step
    assert scalars(run / "es" / "tensorboard", "eval/pass@2") == [(4, pytest.approx(table["es"]["pass@2"]))]
    assert scalars(run / "tensorboard", "base/greedy_accuracy") == [(0, table["base"]["greedy_accuracy"])]
    events = EventAccumulator(str(run / "tensorboard"))
    events.Reload()
    assert {"pass_at_k", "train_reward"} <= set(events.Tags()["images"])


def test_a_tracker_that_is_not_installed_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    import zoopt.extras

    real = zoopt.extras.importlib.util.find_spec
    monkeypatch.setattr(zoopt.extras.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name))
    assert main(["train", *TINY, "--report-to", "tensorboard,wandb", *sets(f"run_dir={tmp_path / 'run'}")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "report_to: wandb" in err and 'pip install "zoopt-llm[wandb]"' in err, err
    assert not (tmp_path / "run").exists()  # refused before anything was loaded or written


def test_the_config_choices_are_the_trackers():
    assert run_configs.TRACKERS == ("none", *TRACKERS)


def test_log_every_is_checked_by_its_config_keys_rule():
    from zoopt.hparams import ConfigError, TrainConfig
    from zoopt.reporting.trackers import ReportTo

    for bad in (0, 1.5, True):
        with pytest.raises(ConfigError) as from_callback:
            ReportTo("none", bad)
        with pytest.raises(ConfigError) as from_config:
            TrainConfig(log_every=bad)
        assert str(from_callback.value) == str(from_config.value)
    assert ReportTo("none", 3).log_every == 3
