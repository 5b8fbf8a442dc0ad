"""A local Ray cluster for tests: loopback only, no token auth, no dashboard, temp dir under the
project cache, a small object store (docs/design.md, "Scaling out and up")."""

from __future__ import annotations

import contextlib

import pytest

ray = pytest.importorskip("ray")

from zoopt.engines.ray.cluster import LOCAL_ENV, start_local  # noqa: E402

OBJECT_STORE = 128 * 2**20


@contextlib.contextmanager
def local_cluster(num_cpus: int = 2):
    """``ray.init`` a one-node cluster on 127.0.0.1 for the duration of the block."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in LOCAL_ENV.items():
            mp.setenv(key, value)
        start_local(num_cpus=num_cpus, object_store_memory=OBJECT_STORE, log_to_driver=False)
        try:
            addresses = {n["NodeManagerAddress"] for n in ray.nodes()}
            assert addresses == {"127.0.0.1"}, f"the local Ray cluster left loopback: {addresses}"
            yield
        finally:
            ray.shutdown()


def tiny_ray(replicas: int = 2, **options):
    """A :class:`RayEngine` of ``replicas`` tiny-model replicas that share the 2 cores
    (``num_cpus=0``, one torch thread each), on the running cluster."""
    from zoopt.engines.ray import RayEngine

    options = {"num_cpus": 0, "threads": 1, "batch_size": 64, **options}
    return RayEngine.from_pretrained("tiny", dtype="float32", replicas=replicas, **options)
