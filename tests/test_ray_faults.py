"""ES on Ray replicas gives the single-process run, bit for bit, through dead, hung and corrupted
replicas (issue 15, T1–T5).

Every run is the trainer's 4-step ES run on the tiny model with the Digits reward; the reference
is the same run on the in-process HF engine.  A run "gives the reference" when its seed log
(every step's seeds and coefficients), every step's master digest and the final working-weights
digest are the reference's — so no member was lost, counted twice or scored on wrong weights.
Replicas are killed *while a member is in flight*: the replica is told to hang in its next
member (a test hook), and is killed from ``on_member`` of an earlier member.
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
from zoopt.config import load_config  # noqa: E402
from zoopt.engines.base import Sampling  # noqa: E402
from zoopt.engines.ray.pool import NoReplicaLeft  # noqa: E402
from zoopt.runs.rundir import RunDir  # noqa: E402
from zoopt.workflows.train import Trainer  # noqa: E402

STEPS = 4
TINY = ["model=tiny", "dtype=float32", "prompts_per_step=8", "sampling.max_new_tokens=8", "eval.n_problems=0",
        "export=false", "population_size=8", "sigma=0.05", "lr=0.05", "noise_cache_gb=0", f"steps={STEPS}"]


def config(run_dir: Path) -> dict:
    return load_config(overrides=[*TINY, f"run_dir={run_dir}"])


def outcome(trainer: Trainer, masters: list[str]) -> dict:
    updates = [(u["seeds"], u["coefficients"]) for u in trainer.seedlog.updates]
    return {"updates": updates, "masters": masters, "checksum": trainer.engine.checksum()}


def run(engine, run_dir: Path, before_step=None, on_member=None, steps: int = STEPS) -> dict:
    """The ES run on ``engine``; ``before_step(step)`` and ``on_member(step, i)`` are the hooks."""
    trainer = Trainer(config(run_dir), run_dir, engine=engine, objective=Digits())
    masters, infos = [], []
    while trainer.steps_done < steps:
        step = trainer.steps_done
        if before_step:
            before_step(step)
        record = trainer.step(on_member=(lambda i, reward: on_member(step, i)) if on_member else None)
        infos.append({k: v for k, v in record.items() if k.startswith("ray_")})  # the engine's population_info()
        masters.append(engine.master_checksum())  # every replica's, equal (else RuntimeError)
    logged = [u["stats"]["master"] for u in trainer.seedlog.updates]  # the seed log's step digests
    assert logged == masters[-len(logged):], "the seed log's step digests are not the replicas' masters"
    return {**outcome(trainer, masters), "infos": infos}


@pytest.fixture(scope="module")
def cluster():
    with local_cluster():
        yield


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The single-process run (HF engine in this process)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run_dir = tmp_path_factory.mktemp("reference") / "run"
        trainer = Trainer(config(run_dir), run_dir, objective=Digits())
        masters = []
        for _ in range(STEPS):
            trainer.step()
            masters.append(trainer.engine.master_checksum())
        result = outcome(trainer, masters)
        trainer.close()
        return result
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def shared(cluster):
    engine = tiny_ray(2, call_timeout_s=60)
    yield engine
    engine.close()


@pytest.fixture
def engine(shared):
    """The module's 2-replica engine (restarts on), back at the base model with fresh counters."""
    shared.reset()
    shared.call_timeout_s, shared.verify = 60.0, "apply"
    shared.ray_stats.__init__()
    shared.population_info()  # counts start from here
    return shared


def pid(engine, index: int) -> int:
    return ray.get(engine.actor(index).info.remote())["pid"]


def hang_then_kill(engine, at_step: int, kill) -> tuple:
    """Hooks: replica 1 hangs in its member of ``at_step`` (member 1: members go to idle replicas
    in order); ``kill(actor)`` when member 0 is scored, while member 1 is in flight on it."""
    def before_step(step):
        if step == at_step:
            ray.get(engine.actor(1).debug_hang.remote(600))

    def on_member(step, i):
        if step == at_step and i == 0:
            kill(engine.actor(1))

    return before_step, on_member


def assert_same_run(got: dict, reference: dict) -> None:
    assert got["updates"] == reference["updates"], "the seed log differs from the single-process run"
    assert got["masters"] == reference["masters"], "a step's master differs from the single-process run"
    assert got["checksum"] == reference["checksum"]


def test_T1_parity_with_the_single_process_run(engine, reference, tmp_path):
    got = run(engine, tmp_path / "run")
    assert_same_run(got, reference)
    assert engine.expected_masters[1:] == reference["masters"]  # what every replica reported after each apply
    records = RunDir(tmp_path / "run").read_metrics()
    assert [r["ray_replicas_ready"] for r in records] == [2] * STEPS and all(r["ray_requeued"] == 0 for r in records)
    stats = engine.ray_stats
    assert stats.members == STEPS * 8 and stats.requeued == stats.restarts == stats.disagreements == 0


@pytest.mark.parametrize("how", ["ray.kill", "SIGKILL"])
def test_T2_a_replica_killed_mid_step_restarts_replays_and_the_run_is_unchanged(engine, reference, tmp_path, how):
    old_pid = pid(engine, 1)
    if how == "ray.kill":
        kill = lambda actor: ray.kill(actor, no_restart=False)  # noqa: E731
    else:
        kill = lambda actor: os.kill(old_pid, signal.SIGKILL)  # noqa: E731
    before_step, on_member = hang_then_kill(engine, 1, kill)
    got = run(engine, tmp_path / "run", before_step, on_member)
    assert_same_run(got, reference)
    stats = engine.ray_stats
    assert stats.requeued >= 1 and stats.restarts >= 1 and stats.replays >= 1, stats
    assert stats.members == STEPS * 8 and stats.lost == 0
    assert [r["state"] for r in engine.replicas] == ["ready", "ready"]
    assert pid(engine, 1) != old_pid, "replica 1 was not restarted"
    step1 = got["infos"][1]
    assert step1["ray_requeued"] >= 1 and step1["ray_restarts"] >= 1 and step1["ray_replicas_ready"] == 2, got["infos"]
    assert all(info["ray_requeued"] == info["ray_restarts"] == 0 for i, info in enumerate(got["infos"]) if i != 1)
    assert ray.get(engine.actor(1).info.remote())["version"] == STEPS


def test_T3_without_restarts_the_run_finishes_on_the_survivors_and_none_left_is_resumable(cluster, reference,
                                                                                         tmp_path):
    engine = tiny_ray(2, max_restarts=0)
    try:
        before_step, on_member = hang_then_kill(engine, 1, lambda actor: os.kill(pid_1, signal.SIGKILL))
        pid_1 = pid(engine, 1)
        got = run(engine, tmp_path / "survivors", before_step, on_member)
        assert_same_run(got, reference)
        assert [r["state"] for r in engine.replicas] == ["ready", "dead"]
        assert engine.ray_stats.lost == 1 and engine.ray_stats.restarts == 0

        # the last replica dies in step 2: a clear error; the seed log holds steps 0 and 1
        engine.reset()
        with pytest.raises(NoReplicaLeft, match="--resume"):
            run(engine, tmp_path / "none", on_member=lambda step, i: step == 2 and i == 0 and ray.kill(engine.actor(0)))
        with pytest.raises(NoReplicaLeft):
            engine.generate(["1 + 2 ="], Sampling(temperature=0.0, max_new_tokens=2))
    finally:
        engine.close()
    resumed = Trainer(config(tmp_path / "none"), tmp_path / "none", objective=Digits())  # in-process HF engine
    try:
        assert resumed.steps_done == 2
        while resumed.steps_done < STEPS:
            resumed.step()
        assert resumed.engine.checksum() == reference["checksum"]
    finally:
        resumed.close()


def test_T4_a_hung_replica_is_timed_out_and_its_member_requeued(engine, reference, tmp_path):
    old_pid = pid(engine, 1)

    def before_step(step):
        if step == 1:
            engine.call_timeout_s = 5.0
            ray.get(engine.actor(1).debug_hang.remote(600))

    got = run(engine, tmp_path / "run", before_step)
    assert_same_run(got, reference)
    stats = engine.ray_stats
    assert stats.timeouts == 1 and stats.requeued >= 1 and stats.replays >= 1, stats
    assert pid(engine, 1) != old_pid and [r["state"] for r in engine.replicas] == ["ready", "ready"]


def test_T5_a_replica_whose_apply_went_wrong_is_detected_and_replayed(engine, reference, tmp_path):
    def before_step(step):
        if step == 1:
            ray.get(engine.actor(1).debug_corrupt.remote(1e-3, "next_apply"))

    got = run(engine, tmp_path / "run", before_step)
    assert_same_run(got, reference)
    stats = engine.ray_stats
    # two replicas, two digests: no majority, so both are rebuilt from the base model and replayed
    assert stats.disagreements == 2 and stats.replays >= 2 and stats.restarts == 0, stats


def test_T5_weights_that_rot_at_rest_are_caught_before_the_step_with_verify_step(engine, reference, tmp_path):
    engine.verify = "step"

    def before_step(step):
        if step == 2:
            ray.get(engine.actor(0).debug_corrupt.remote(0.05, "now"))

    got = run(engine, tmp_path / "run", before_step)
    assert_same_run(got, reference)
    assert engine.ray_stats.disagreements == 1 and engine.ray_stats.replays == 1
    assert any("changed at rest" in message for _, message in engine.ray_stats.events)
