"""A stateful update rule on Ray replicas: a replica killed mid-step restarts, rebuilds adam's moments
by replaying the driver's update log from the base model, and then agrees with the others on every
later step without being corrected — the run is the single-process run, bit for bit.

As ``tests/test_ray_faults.py`` (whose hooks it uses): the trainer's 4-step ES run on the tiny model
with the Digits reward, replica 1 told to hang in its member of step 1 and SIGKILLed while that
member is in flight.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from ray_helpers import local_cluster, ray, tiny_ray  # noqa: E402

from digits_objective import Digits  # noqa: E402
from test_ray_faults import STEPS, TINY, hang_then_kill, pid  # noqa: E402
from zoopt.config import load_config  # noqa: E402
from zoopt.workflows.train import Trainer  # noqa: E402

RULE = ["update.rule=adam", "update.b1=0.8", "update.weight_decay=0.1", "lr=0.01"]


def run(run_dir: Path, engine=None, before_step=None, on_member=None) -> dict:
    trainer = Trainer(load_config(overrides=[*TINY, *RULE, f"run_dir={run_dir}"]), run_dir, engine=engine,
                      objective=Digits())
    masters = []
    while trainer.steps_done < STEPS:
        step = trainer.steps_done
        if before_step:
            before_step(step)
        trainer.step(on_member=(lambda i, reward: on_member(step, i)) if on_member else None)
        masters.append(trainer.engine.master_checksum())
    out = {"updates": [(u["seeds"], u["coefficients"]) for u in trainer.seedlog.updates], "masters": masters,
           "checksum": trainer.engine.checksum(), "rule": trainer.seedlog.header["update"]}
    if engine is None:
        trainer.close()
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as a replica runs
    try:
        return run(tmp_path_factory.mktemp("reference") / "run")
    finally:
        torch.set_num_threads(threads)


def test_a_killed_replica_rebuilds_the_rule_state_and_agrees_afterwards(reference, tmp_path):
    assert reference["rule"]["kind"] == "chain" and [r["kind"] for r in reference["rule"]["rules"]] == \
        ["adam", "weight_decay"]
    with local_cluster():
        engine = tiny_ray(2, call_timeout_s=60)
        try:
            old_pid = pid(engine, 1)
            before_step, on_member = hang_then_kill(engine, 1, lambda actor: os.kill(old_pid, signal.SIGKILL))
            got = run(tmp_path / "run", engine, before_step, on_member)
            stats = engine.ray_stats
            assert stats.restarts >= 1 and stats.replays >= 1 and stats.requeued >= 1, stats
            assert stats.disagreements == 0, "the rejoined replica's rule state was wrong: its master was corrected"
            assert pid(engine, 1) != old_pid and [r["state"] for r in engine.replicas] == ["ready", "ready"]
            assert ray.get(engine.actor(1).info.remote())["version"] == STEPS
        finally:
            engine.close()
    assert got["updates"] == reference["updates"], "the seed log differs from the single-process run"
    assert got["masters"] == reference["masters"], "a step's master differs from the single-process run"
    assert got["checksum"] == reference["checksum"]
