"""``configure_environment``: the vLLM process settings zoopt chooses, and that a user's win.

Needs no vLLM (runs in the main environment): it only reads and writes ``os.environ``.
"""

import os

import pytest

from zoopt.engines.vllm import environment as vllm_engine

BIND = "VLLM_CPU_OMP_THREADS_BIND"
KEYS = (BIND, "VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_NUM_OF_RESERVED_CPU", "VLLM_CACHE_ROOT")


@pytest.fixture
def env(monkeypatch):
    for key in KEYS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(vllm_engine, "_SET_BY_ZOOPT", {})
    return sorted(os.sched_getaffinity(0))


def test_cores_are_split_into_one_group_per_rank_and_follow_a_later_engine(env):
    cpus = env
    vllm_engine.configure_environment("cpu", 1)
    assert os.environ[BIND] == ",".join(map(str, cpus))
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "1" and os.environ["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    if len(cpus) >= 2:  # a TP = 2 engine after a TP = 1 one in the same process (zoopt's own value is replaced)
        vllm_engine.configure_environment("cpu", 2)
        groups = os.environ[BIND].split("|")
        assert len(groups) == 2 and sorted(int(c) for g in groups for c in g.split(",")) == cpus


def test_a_users_settings_win_and_a_mismatched_bind_is_a_clear_error(env, monkeypatch):
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "4")
    monkeypatch.setenv(BIND, "0")
    vllm_engine.configure_environment("cpu", 1)
    assert os.environ["VLLM_CPU_KVCACHE_SPACE"] == "4" and os.environ[BIND] == "0"
    with pytest.raises(ValueError, match=r"VLLM_CPU_OMP_THREADS_BIND='0' has 1 core group\(s\) for tensor_parallel_size=2"):
        vllm_engine.configure_environment("cpu", 2)


def test_more_ranks_than_cores_is_refused(env):
    with pytest.raises(ValueError, match=f"tensor_parallel_size={len(env) + 1} needs"):
        vllm_engine.configure_environment("cpu", len(env) + 1)
