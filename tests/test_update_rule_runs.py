"""Runs with an update rule keep the promise "a run is a base model plus its seed log": the log holds
ĝ's coefficients and the rule, and ``zoopt export``, ``--resume`` (after a kill) and ``zoopt.fit``
rebuild the rule's state from it, bit for bit; a log without a rule is sgd, as before rules existed."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest

from zoopt import ES, Gaussian, Sampling, fit
from zoopt.cli import main
from zoopt.config import ConfigError, load_config
from zoopt.engines.hf import HFEngine
from zoopt.runs.seedlog import SeedLog
from zoopt.updates import adam, chain, momentum, weight_decay
from zoopt.workflows.train import Trainer, export_from_seedlog, train

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402
from test_train import DIGITS, TINY, run_cli  # noqa: E402

RULES = {"adam": ["update.rule=adam", "lr=0.01"], "momentum": ["update.rule=momentum", "update.momentum=0.8"]}


def config(run_dir: Path, *keys: str) -> dict:
    return load_config(overrides=[*TINY, "noise_cache_gb=0", f"objective={DIGITS}", f"run_dir={run_dir}", *keys])


@pytest.mark.parametrize("rule", sorted(RULES))
def test_a_five_step_run_exports_to_the_checksum_it_ended_with(rule, tmp_path, one_thread):
    result = train(config(tmp_path / "run", "steps=5", *RULES[rule]), show_progress=False)
    log = json.loads((result.run_dir / "seedlog.json").read_text())
    assert log["update"]["kind"] == rule and len(log["updates"]) == 5
    records = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["update_rule"] for r in records] == [rule] * 5
    _, checksum = export_from_seedlog(result.run_dir, tmp_path / "exported")
    assert checksum == result.checksum
    sgd = train(config(tmp_path / "sgd", "steps=5"), show_progress=False)
    assert sgd.checksum != result.checksum, "the rule changed nothing: the check proves nothing"
    assert main(["export", str(result.run_dir), "--out", str(tmp_path / "cli")]) == 0


def test_a_run_killed_after_step_3_resumes_to_the_uninterrupted_weights(tmp_path):
    common = ["train", "--quiet", "--objective", DIGITS] + [x for s in [*TINY, *RULES["adam"]] for x in ("--set", s)]
    steps = ["--set", "steps=8"]
    full = run_cli([*common, *steps, "--set", f"run_dir={tmp_path / 'full'}"])
    killed = run_cli([*common, *steps, "--set", f"run_dir={tmp_path / 'killed'}"])
    log = tmp_path / "killed" / "seedlog.json"
    deadline = time.time() + 900
    while time.time() < deadline and killed.poll() is None:
        if log.exists() and len(json.loads(log.read_text())["updates"]) >= 3:
            break
        time.sleep(0.05)
    if killed.poll() is not None:
        pytest.fail(f"the run to be killed exited by itself (status {killed.returncode}): {killed.stdout.read()[-2000:]}")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    done = len(json.loads(log.read_text())["updates"])
    assert 3 <= done < 8, f"killed after {done} steps: the test did not interrupt the run"
    assert full.wait(timeout=600) == 0, full.stdout.read()
    resumed = run_cli(["train", "--quiet", "--resume", str(tmp_path / "killed")])
    assert resumed.wait(timeout=600) == 0, resumed.stdout.read()
    assert (tmp_path / "killed" / "checksum.txt").read_text() == (tmp_path / "full" / "checksum.txt").read_text()
    assert json.loads(log.read_text())["update"]["kind"] == "adam"


def test_resume_in_process_after_three_steps_and_a_changed_rule_is_refused(tmp_path, one_thread):
    keys = ("steps=5", *RULES["momentum"], "update.nesterov=true", "update.weight_decay=0.5")
    full = Trainer(config(tmp_path / "full", *keys), tmp_path / "full", objective=Digits())
    while full.steps_done < 5:
        full.step()
    cut = Trainer(config(tmp_path / "cut", *keys), tmp_path / "cut", objective=Digits())
    for _ in range(3):
        cut.step()
    cut.close()
    resumed = Trainer(config(tmp_path / "cut", *keys), tmp_path / "cut", objective=Digits())
    assert resumed.steps_done == 3
    while resumed.steps_done < 5:
        resumed.step()
    assert resumed.engine.checksum() == full.engine.checksum()
    assert resumed.engine.master_checksum() == full.engine.master_checksum()
    with pytest.raises(ConfigError, match="'update'"):
        Trainer(config(tmp_path / "cut", "steps=5", "update.rule=adam"), tmp_path / "cut", objective=Digits())


def test_a_log_without_a_rule_replays_as_sgd(tmp_path, one_thread):
    result = train(config(tmp_path / "run", "steps=3"), show_progress=False)
    path = result.run_dir / "seedlog.json"
    data = json.loads(path.read_text())
    assert data["update"] == {"kind": "sgd"}
    del data["update"], data["es"]["update"]  # a log written before rules existed
    path.write_text(json.dumps(data))
    assert SeedLog.load(path).rule.kind == "sgd"
    _, checksum = export_from_seedlog(result.run_dir, tmp_path / "old")
    assert checksum == result.checksum


def test_fit_with_a_rule_equals_the_cli_and_a_rule_no_config_says_is_recorded(tmp_path, one_thread):
    from estimators import OnePoint, zscore

    keys = ["model=tiny", "dtype=float32", "steps=3", "prompts_per_step=4", "population_size=4", "sigma=0.05",
            "lr=0.01", "seed=3", "sampling.max_new_tokens=6", "eval.n_problems=0", "export=false",
            "noise_cache_gb=0", f"objective={DIGITS}", f"run_dir={tmp_path / 'cli'}", "update.rule=adam",
            "update.b1=0.8"]
    cli = train(load_config(overrides=keys), show_progress=False)
    es = ES(OnePoint(zscore), noise=Gaussian(), lr=0.01, sigma=0.05, population_size=4, seed=3, rule=adam(b1=0.8))
    sampling = Sampling(temperature=0.0, max_new_tokens=6)
    python = fit(HFEngine.from_pretrained("tiny", dtype="float32"), Digits(), es, steps=3, prompts_per_step=4,
                 sampling=sampling, run_dir=tmp_path / "python", progress=False)
    assert python.checksum == cli.checksum
    assert "rule: adam" in (tmp_path / "python" / "config.yaml").read_text()
    # a chain no `update` section stands for (decay before the rule): recorded as an object
    es = ES(OnePoint(zscore), lr=0.01, sigma=0.05, population_size=4, rule=chain(weight_decay(0.1), momentum()))
    out = fit(HFEngine.from_pretrained("tiny", dtype="float32"), Digits(), es, steps=1, prompts_per_step=2,
              sampling=sampling, run_dir=tmp_path / "chain", progress=False)
    header = SeedLog.load(out.run_dir).header
    assert json.loads(header["objects"]["update"]) == header["update"] and "update" not in header["config"]
    assert main(["train", "--quiet", "--resume", str(out.run_dir)]) == 2
    _, checksum = export_from_seedlog(out.run_dir, tmp_path / "chain-export")
    assert checksum == out.checksum


def test_es_trainer_takes_the_update_section(tmp_path):
    from zoopt.trl import ESConfig

    args = ESConfig(update={"rule": "momentum", "momentum": 0.5}, output_dir=str(tmp_path))
    assert args.train_config()["update"]["rule"] == "momentum"
    from zoopt.workflows.builders import build_es

    assert build_es(args.train_config()).rule == momentum(0.5)
    with pytest.raises(ConfigError, match="^config key 'update.rule' must be one of"):
        ESConfig(update={"rule": "lion"})
