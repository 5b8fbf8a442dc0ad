"""A seed log's step digests: written when the engine reports one, checked on replay (issue 15)."""

from __future__ import annotations

import pytest
import torch

from zoopt.runs.seedlog import SeedLog
from zoopt.engines.module import ModuleEngine
from zoopt.noise import Gaussian
from zoopt.types import Update


class ReportingEngine(ModuleEngine):
    """A module engine that reports its master digest after each apply, as a Ray engine does."""

    def applied_checksum(self) -> str | None:
        return self.master_checksum()


def engine(cls=ReportingEngine) -> ModuleEngine:
    torch.manual_seed(0)
    return cls(torch.nn.Linear(4, 3))


def logged_run(tmp_path) -> SeedLog:
    e = engine()
    log = SeedLog.create(tmp_path / "seedlog.json", model="linear", dtype="float32", noise=Gaussian(), es_state={})
    for t in range(3):
        update = Update((10 * t, 10 * t + 1), (0.1, -0.2))
        e.apply(Gaussian(), update)
        log.append(t, update, stats={"master": e.applied_checksum()})
    return log


def test_replay_checks_every_logged_step_digest(tmp_path):
    log = SeedLog.load(logged_run(tmp_path).path)
    replayed = engine()
    log.replay(replayed)  # equal at every step: no error
    assert replayed.master_checksum() == log.updates[-1]["stats"]["master"]


def test_a_replayed_master_that_differs_names_the_step(tmp_path):
    log = logged_run(tmp_path)
    log.updates[1]["stats"]["master"] = "0" * 32
    with pytest.raises(RuntimeError, match="seed log step 1: replayed master"):
        log.replay(engine())


def test_engines_that_do_not_report_a_digest_replay_unchecked(tmp_path):
    log = logged_run(tmp_path)
    log.updates[1]["stats"]["master"] = "0" * 32
    plain = engine(ModuleEngine)
    assert plain.applied_checksum() is None
    log.replay(plain)
