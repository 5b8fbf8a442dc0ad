"""The Ray engine runs the engine conformance suite unchanged, spreads generation over its
replicas with the single-process results, and is reached through the registry and config.

One module-scoped local cluster (loopback, ``num_cpus=0`` replicas of the tiny model); the
fault-tolerance tests (T1–T5 of issue 15) are in ``tests/test_ray_faults.py``.
"""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from ray_helpers import local_cluster, ray, tiny_ray  # noqa: E402

from engine_conformance import LLMEngineConformance  # noqa: E402
from zoopt.config import ConfigError, load_config  # noqa: E402
from zoopt.engines.base import Sampling  # noqa: E402
from zoopt.engines.hf import HFEngine  # noqa: E402
from zoopt.noise import Gaussian, LowRank, Rademacher  # noqa: E402
from zoopt.registry import ENGINES  # noqa: E402
from zoopt.types import Member, Population  # noqa: E402
from zoopt.workflows.builders import build_engine  # noqa: E402

PROMPTS = ["1 + 2 =", "hello world", "The cat sat on", "3 + 4 =", "a b c", "x", "the end of"]


@pytest.fixture(scope="module", autouse=True)
def cluster():
    with local_cluster():
        yield
        if shared_engine.cache_info().currsize:
            shared_engine().close()
        shared_engine.cache_clear()


@functools.lru_cache(maxsize=None)
def shared_engine():
    return tiny_ray(2, batch_size=8)


class TestRayEngine(LLMEngineConformance):
    make_engine = staticmethod(shared_engine)


def tokens(results):
    return [[c.token_ids for c in per_prompt] for per_prompt in results]


def local_like(engine) -> HFEngine:
    """A single-process tiny engine on ``engine``'s current weights (the module's earlier tests,
    the conformance suite's update-rule steps among them, apply updates to the shared engine)."""
    import torch

    local = HFEngine.from_pretrained("tiny", batch_size=8)
    with torch.no_grad():
        for name, tensor in engine.state_dict().items():
            local.weights.params[name].copy_(tensor)
    local.sync_master()
    assert local.master_checksum() == engine.master_checksum()
    return local


def test_generate_splits_prompts_over_replicas_with_single_process_results(one_thread):
    engine = shared_engine()
    local = local_like(engine)
    for sampling in (Sampling(temperature=0.0, max_new_tokens=5),
                     Sampling(temperature=1.0, max_new_tokens=5, n=2, seed=9)):
        got = engine.generate(PROMPTS, sampling)
        assert tokens(got) == tokens(local.generate(PROMPTS, sampling))
        assert {c.meta.get("replica") for r in got for c in r} <= {0, 1}
    calls = engine.ray_stats.replica_seconds
    engine.generate(PROMPTS, Sampling(temperature=0.0, max_new_tokens=2))
    assert engine.ray_stats.replica_seconds > calls


def test_population_members_spread_over_both_replicas_and_counters_move():
    engine = shared_engine()
    population = Population(step=0, sigma=0.05, members=tuple(Member(s) for s in range(6)))
    before = dict(engine.ray_stats.as_dict())
    out = engine.generate_population(Gaussian(), population, PROMPTS[:2], Sampling(temperature=0.0, max_new_tokens=3))
    replicas = {c.meta["replica"] for member in out for per_prompt in member for c in per_prompt}
    assert replicas == {0, 1}, "one replica did every member"
    after = engine.ray_stats.as_dict()
    assert after["populations"] == before["populations"] + 1 and after["members"] == before["members"] + 6
    assert after["requeued"] == before["requeued"] and after["lost"] == 0
    assert [r["state"] for r in engine.replicas] == ["ready", "ready"]
    assert {r["ip"] for r in engine.replicas} == {"127.0.0.1"}


@pytest.mark.parametrize("noise", [Gaussian(), Rademacher(), LowRank(rank=1)], ids=lambda n: n.kind)
def test_a_replica_draws_the_noise_bits_this_process_draws(noise, one_thread):
    """Each replica regenerates ε(seed, name) in its own process: its perturbed weights are this
    process's, bit for bit (rank 1: the low-rank product has no sum to round differently).  The
    local engine starts from the replicas' master (earlier tests applied updates to them)."""
    engine = shared_engine()
    local = local_like(engine)
    base = local.checksum()
    engine.perturb(noise, 5, 0.01)
    local.perturb(noise, 5, 0.01)
    try:
        assert local.checksum() != base and engine.checksum() == local.checksum()
    finally:
        engine.restore()
    assert engine.checksum() == base


def test_state_dict_and_export_come_from_a_replica(tmp_path):
    from zoopt.engines.weights import digest

    engine = shared_engine()
    assert digest(engine.state_dict().items()) == engine.master_checksum()
    out = engine.export_pretrained(tmp_path / "model")
    assert HFEngine.from_pretrained(str(out)).master_checksum() == engine.master_checksum()


def test_ray_is_a_registered_engine_and_engine_args_are_checked(tmp_path):
    assert "ray" in ENGINES.names()
    cfg = load_config(overrides=["model=tiny", "dtype=float32", "engine=ray", "engine_args.bogus=1",
                                 "noise_cache_gb=0"])
    with pytest.raises(ConfigError, match="engine_args.bogus"):
        build_engine(cfg)
    with pytest.raises(ValueError, match="replicas"):
        tiny_ray(0)
    with pytest.raises(ValueError, match="placement"):
        tiny_ray(1, placement="EVERYWHERE")


def test_grpo_on_ray_is_a_one_line_config_error(tmp_path):
    with pytest.raises(ConfigError, match="config key 'engine': GRPO runs on hf or vllm") as err:
        load_config(overrides=["model=tiny", "engine=ray"], base="grpo")
    assert "\n" not in str(err.value)
    out = subprocess.run([sys.executable, "-m", "zoopt.cli", "grpo", "--engine", "ray", "--set", "model=tiny",
                          "--set", f"run_dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr and "GRPO runs on hf or vllm" in out.stderr, out.stderr
    assert not (tmp_path / "run").exists()


def run_python(code: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=timeout, cwd=Path(__file__).parents[1])


def test_importing_zoopt_does_not_import_ray_and_a_missing_ray_is_one_line():
    out = run_python("""
        import sys, zoopt, zoopt.registry, zoopt.workflows.builders
        assert "ray" not in sys.modules, "import zoopt imported ray"
        sys.modules["ray"] = None  # as if it were not installed
        try:
            zoopt.registry.ENGINES.get("ray")
        except ImportError as exc:
            print("ERR", exc)
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == 'ERR the ray engine needs Ray, which is not installed: pip install "zoopt-llm[ray]"'


def test_an_engine_without_a_cluster_starts_a_local_one_on_loopback_and_shuts_it_down():
    # (another process: this module's cluster is already up)
    out = run_python("""
        import os
        os.environ.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None); os.environ.pop("RAY_AUTH_MODE", None)
        import ray
        from zoopt.engines.ray import RayEngine
        from zoopt.models import cache_dir
        engine = RayEngine.from_pretrained("tiny", replicas=1, num_cpus=0, threads=1, object_store_memory=80 * 2**20)
        print("NODES", sorted({n["NodeManagerAddress"] for n in ray.nodes()}))
        print("REPLICA", engine.replicas[0]["ip"])
        print("TEMP", ray._private.worker._global_node.get_temp_dir_path().startswith(str(cache_dir().absolute())))
        engine.close()
        print("UP", ray.is_initialized())
    """)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert lines["NODES"] == "['127.0.0.1']" and lines["REPLICA"] == "127.0.0.1"
    assert lines["TEMP"] == "True" and lines["UP"] == "False"


def test_zoopt_train_on_ray_attaches_with_ray_address_and_leaves_the_cluster_up(tmp_path):
    address = ray.get_runtime_context().gcs_address
    digits = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
    sets = ["model=tiny", "dtype=float32", "prompts_per_step=4", "sampling.max_new_tokens=4", "eval.n_problems=0",
            "export=false", "population_size=4", "sigma=0.05", "lr=0.05", "noise_cache_gb=0", "steps=2",
            "engine_args.replicas=2", "engine_args.inner=hf", "engine_args.num_cpus=0", "engine_args.threads=1",
            f"run_dir={tmp_path / 'run'}"]
    out = subprocess.run([sys.executable, "-m", "zoopt.cli", "train", "--quiet", "--engine", "ray", "--ray-address",
                          address, "--objective", digits, *[x for s in sets for x in ("--set", s)]],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    log = json.loads((tmp_path / "run" / "seedlog.json").read_text())
    assert len(log["updates"]) == 2 and log["config"]["engine_args"]["address"] == address
    assert (tmp_path / "run" / "checksum.txt").read_text().strip()
    assert shared_engine().checksum()  # the attached cluster is still up: the run did not shut it down
