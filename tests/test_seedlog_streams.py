"""Seed logs record the noise stream that wrote them, and old logs keep replaying with theirs.

``fixtures/seedlogs/`` holds three logs written before the counter stream existed (the tiny
model, 3 steps, N=4: Gaussian, low-rank and Rademacher noise; their headers name no stream) and
the checksums ``zoopt export`` gave for them then (``CHECKSUMS``).  They must export to those
checksums for ever: a seed log is the model.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from zoopt.runs.seedlog import SeedLog
from zoopt.cli import main
from zoopt.config import ConfigError
from zoopt.hparams import TrainConfig, from_dict, to_dict
from zoopt.noise import Gaussian, LowRank
from zoopt.workflows.train import Trainer, export_from_seedlog

FIXTURES = Path(__file__).parent / "fixtures" / "seedlogs"
KINDS = ("gaussian", "low_rank", "rademacher")


def recorded() -> dict[str, str]:
    lines = (FIXTURES / "CHECKSUMS").read_text().splitlines()
    return dict(line.split() for line in lines if line.strip() and not line.startswith("#"))


@pytest.mark.parametrize("kind", KINDS)
def test_old_seed_logs_export_to_their_recorded_checksums(kind, tmp_path):
    log = SeedLog.load(FIXTURES / f"{kind}.json")
    assert "stream" not in log.header["noise"] and log.noise.stream == "numpy" and log.noise.kind == kind
    _, checksum = export_from_seedlog(FIXTURES / f"{kind}.json", tmp_path / "model")
    assert checksum == recorded()[f"{kind}.json"]


def test_cli_export_of_an_old_log_prints_its_recorded_checksum(tmp_path, capsys):
    assert main(["export", str(FIXTURES / "low_rank.json"), "--out", str(tmp_path / "model")]) == 0
    assert f"weights checksum {recorded()['low_rank.json']}" in capsys.readouterr().out


def test_a_new_log_records_its_stream_and_replays_with_it(tmp_path):
    for noise in (LowRank(rank=2), Gaussian(stream="numpy")):
        SeedLog.create(tmp_path / f"{noise.stream}.json", model="tiny", dtype="float32", noise=noise, es_state={})
        log = SeedLog.load(tmp_path / f"{noise.stream}.json")
        assert log.header["noise"]["stream"] == noise.stream and log.noise == noise


def old_run(tmp_path) -> tuple[Path, dict]:
    """A run directory holding the old Gaussian log, and its config (3 more steps to go)."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(FIXTURES / "gaussian.json", run / "seedlog.json")
    raw = json.loads((run / "seedlog.json").read_text())["config"]
    cfg = to_dict(from_dict(TrainConfig, {**raw, "steps": 4, "run_dir": str(run)}))
    assert "stream" not in cfg["noise"]
    return run, cfg


def test_resuming_an_old_run_continues_with_its_numpy_stream(tmp_path):
    run, cfg = old_run(tmp_path)
    trainer = Trainer(cfg, run)
    try:
        assert trainer.es.noise == Gaussian(stream="numpy")
        assert trainer.engine.checksum() == recorded()["gaussian.json"]  # replayed with the numpy stream
        trainer.step()
        log = SeedLog.load(run)
        assert log.steps_done == 4 and "stream" not in log.header["noise"]
    finally:
        trainer.close()


def test_resume_refuses_a_config_that_names_another_stream(tmp_path):
    run, cfg = old_run(tmp_path)
    cfg["noise"] = {**cfg["noise"], "stream": "counter"}
    with pytest.raises(ConfigError, match="noise.stream' is 'counter' but the run's seed log was written by the 'numpy'"):
        Trainer(cfg, run)
