"""Where :class:`~zoopt.engines.ray.RayEngine` runs: attaching to (or starting) a Ray cluster and
placing its replicas.

- :func:`connect`: an ``address`` (``"auto"``, ``"host:port"``, ``"ray://…"``) attaches to a
  running cluster, which the engine never shuts down; without one, a session that already
  called ``ray.init`` is used as it is, else a **local** cluster is started (and shut down by
  ``close``).  A local cluster gets ``RAY_AUTH_MODE=disabled`` (token auth is on by default
  in Ray 2.60, and one machine needs none), ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (without
  it Ray registers the machine's interface address instead of 127.0.0.1 — with it, the node,
  raylet and actors all stay on loopback), no dashboard, and its temp dir under the project
  cache (``zoopt.models.cache_dir() / "ray"``), not ``/tmp/ray``, and ``RAY_worker_niceness=0``:
  the replicas are the run's work, so they do not yield the CPU to everything else (Ray's
  default niceness for workers is 15), and ``RAY_USAGE_STATS_ENABLED=0`` (``ray.init`` turns usage
  reports off for the clusters it starts anyway; this says so for every process of the
  cluster).  Variables already set in the environment win.
- :func:`placement`: ``PACK`` (one machine when it fits), ``SPREAD`` (across nodes) and their
  ``STRICT_`` forms, through a placement group of one bundle per replica.  A replica that
  asks for no resource at all (``num_cpus=0`` and no GPU) cannot be in a bundle (Ray refuses
  empty bundles): then ``SPREAD`` is Ray's spread scheduling and ``PACK`` its default.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ...models import cache_dir

STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
LOCAL_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_worker_niceness": "0",
             "RAY_USAGE_STATS_ENABLED": "0"}


class NoRayCluster(ConnectionError, ValueError):
    """``--ray-address`` names no running cluster: a ``ConnectionError`` that is also the user's
    input to mend (a ``ValueError``), so ``zoopt`` reports it as one line, exit status 2."""


def require_ray():
    """``import ray``, or a one-line ``ImportError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ImportError('the ray engine needs Ray, which is not installed: pip install "zoopt-llm[ray]"') from None
    return ray


def temp_dir() -> str:
    """Ray's session directory for a local cluster: under the project cache when the path is
    short enough for Ray's Unix sockets (~107 bytes with Ray's own suffix), else the system
    temp dir."""
    path = cache_dir() / "ray"
    if len(str(path.absolute())) > 48:
        path = Path(tempfile.gettempdir()) / f"zoopt-ray-{os.getuid()}"
    path.mkdir(parents=True, exist_ok=True)
    return str(path.absolute())


def connect(address: str | None, *, num_cpus: int | None = None, object_store_memory: int | None = None) -> bool:
    """Make sure this process is connected to a Ray cluster (see the module docstring);
    return True when this call started a local one (the caller then owns it)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    if address:
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=True)
        except ConnectionError as exc:
            raise NoRayCluster(f"no Ray cluster at {address!r} (start one with `ray start --head`): "
                               f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        return False
    start_local(num_cpus=num_cpus, object_store_memory=object_store_memory)
    return True


def start_local(num_cpus: int | None = None, object_store_memory: int | None = None, log_to_driver: bool = True) -> None:
    """``ray.init`` a one-node cluster (see the module docstring); with
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` it is checked to be on 127.0.0.1 (else shut down
    and a ``RuntimeError``).

    Ray reads that variable once, when ``ray`` is first imported (``ray_constants``), and
    decides the node's address from it in the driver; when ``ray`` was imported before the
    variable was set, the constant is set for the duration of ``ray.init`` (and put back).
    """
    for key, value in LOCAL_ENV.items():
        os.environ.setdefault(key, value)
    loopback = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"].strip().lower() in ("0", "false")
    ray = require_ray()
    from ray._private import ray_constants

    before = ray_constants.ENABLE_RAY_CLUSTER
    ray_constants.ENABLE_RAY_CLUSTER = not loopback
    try:
        ray.init(num_cpus=num_cpus, object_store_memory=object_store_memory, include_dashboard=False,
                 _temp_dir=temp_dir(), log_to_driver=log_to_driver)
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before
    if loopback and not loopback_only():
        addresses = sorted({n.get("NodeManagerAddress") for n in ray.nodes()})
        ray.shutdown()
        raise RuntimeError(f"the local Ray cluster registered {addresses}, not 127.0.0.1: shut down")


def placement(replicas: int, num_cpus: float, num_gpus: float, strategy: str, timeout_s: float = 60.0):
    """``(placement group or None, [options for ray.remote(...).options(...) of each replica])``."""
    ray = require_ray()
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    strategy = str(strategy).upper()
    if strategy not in STRATEGIES:
        raise ValueError(f"engine_args.placement must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    bundle = {k: v for k, v in (("CPU", num_cpus), ("GPU", num_gpus)) if v}
    if not bundle:
        return None, [{"scheduling_strategy": "SPREAD"} if "SPREAD" in strategy else {} for _ in range(replicas)]
    group = placement_group([dict(bundle) for _ in range(replicas)], strategy=strategy)
    ready, _ = ray.wait([group.ready()], timeout=timeout_s)
    if not ready:
        ray.util.remove_placement_group(group)
        raise RuntimeError(f"Ray could not place {replicas} replicas of {bundle} with {strategy} within {timeout_s:.0f} s "
                           f"(cluster resources: {ray.cluster_resources()}); STRICT_SPREAD needs one node per replica")
    return group, [{"scheduling_strategy": PlacementGroupSchedulingStrategy(placement_group=group,
                                                                           placement_group_bundle_index=i)}
                   for i in range(replicas)]


def loopback_only() -> bool:
    """Whether every node of the connected cluster registered 127.0.0.1 (a local cluster here)."""
    ray = require_ray()
    return all(n.get("NodeManagerAddress") == "127.0.0.1" for n in ray.nodes() if n.get("Alive"))
