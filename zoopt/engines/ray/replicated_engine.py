"""``RayEngine``: ES on K engine replicas in Ray actors, surviving dead and hung replicas, with
replicas proven in agreement.

The driver (this process) holds no weights.  It holds the run's **update log** — every
``apply(noise, update)`` in order — and, for each version v (updates applied), the
**expected master digest** after v updates, agreed by the replicas.  Each replica
(:class:`~zoopt.engines.ray.replica.Replica`, an actor) holds an inner engine (``hf``, or
``vllm`` where installed) built from the same model, dtype and options.  Only seeds, scales,
coefficients, prompts and completions cross the wire.

- **The population call** hands members to idle replicas, one call per member (a chunk of
  ``⌈N/K⌉`` members when the inner engine runs them batched): perturb → generate → restore in
  the replica, restore in a ``finally``.  Every call carries the driver's version and expected
  digest, and a replica whose own differ refuses; it is then replayed from the update log and
  the member goes to another replica.  The driver keeps its own ref → (replica, member) map:
  the member of a dead replica (``RayActorError``) is queued again, never lost or counted
  twice; a call older than ``call_timeout_s`` is a hung replica, killed (so Ray restarts it)
  and its member queued again.  ``on_member(i, completions)`` is called in member order as
  results arrive (later members wait in a buffer), so scoring overlaps generation.
- **Restarts.** Actors run with ``max_restarts`` (default -1: always) and ``max_task_retries=0``:
  Ray's own retry would re-run a member on a restarted actor whose constructor reloaded the
  base weights.  A restarted replica replays the update log from the base model before it
  takes work; with restarts off, the run continues on the survivors; with none left,
  :class:`NoReplicaLeft` (the trainer's seed log holds every finished step: ``--resume``).
- **Agreement.** After every ``apply``, each replica returns its master digest: the majority
  becomes the expected digest of that version, and a replica that disagrees is replayed from
  the base model (an even split replays them all).  ``verify="step"`` also re-hashes every
  master at the start of each population call (weights that rotted at rest); a digest costs
  ~1.4 s for a 135 M model's fp32 master on a loaded 2-core CPU.  ``checksum()`` and
  ``master_checksum()`` ask every replica and raise if they differ.
- ``perturb``/``restore`` are broadcast (and re-applied to a replica that rejoins);
  ``generate`` splits the prompts over the replicas (a sampled call only where the inner engine
  can sample from a prompt offset: ``hf``; see :func:`~zoopt.engines.ray.replica.generate_from`).

Counters (re-queued members, restarts, replays, timeouts, lost replicas) are in
:attr:`RayEngine.ray_stats` (per step: :meth:`RayEngine.population_info`); events go to the
``zoopt.engines.ray`` logger.  Scheduling and failure handling: :mod:`zoopt.engines.ray.pool`;
the cluster: :mod:`zoopt.engines.ray.cluster`.  Options and the multi-node set-up: ``docs/ray.md``.
"""

from __future__ import annotations

import json

import math
import time
from pathlib import Path
from typing import Callable, Sequence

from ...noise import Noise
from ...runs.atomic import atomic_directory
from ...types import Population, Update
from ..base import Completion, Engine, Prompt, Sampling, check_request
from ..rule_state import RuleState, next_rule_state
from ..weights import check_finite
from .cluster import connect, placement, require_ray
from .pool import NoReplicaLeft, RayStats, ReplicaPool, _last_line, _Slot
from .replica import Replica, can_offset

ray = require_ray()
from ray.exceptions import GetTimeoutError, RayActorError  # noqa: E402


class RayEngine(Engine):
    """K replicas of an inner engine in Ray actors (see the module docstring and ``docs/ray.md``).

    Options (``engine_args``): ``replicas`` (K), ``inner`` (``hf`` | ``vllm``), ``num_cpus`` and
    ``num_gpus`` per replica (GPUs default to 1 on a CUDA ``device``), ``placement`` (``PACK`` |
    ``SPREAD``, or ``STRICT_``), ``max_restarts`` (-1: always; 0: off), ``call_timeout_s``
    (None: wait forever; every replica call but a replay), ``address`` (attach to a cluster,
    e.g. ``auto``; default: start a local one, shut down by :meth:`close`), ``threads`` (torch
    threads per replica), ``verify`` (``apply`` | ``step``), ``object_store_memory`` (bytes,
    local cluster), ``inner_args`` (more options of the inner engine's ``from_pretrained``),
    ``start_timeout_s`` (a replica's start or replay).  ``noise_cache_bytes`` (the host's
    budget) is split among the replicas.
    """

    def __init__(self, model: str, *, dtype: str = "float32", device: str = "cpu", batch_size: int = 64,
                 replicas: int = 1, inner: str = "hf", num_cpus: float = 1, num_gpus: float | None = None,
                 placement: str = "PACK", max_restarts: int = -1, call_timeout_s: float | None = None,
                 address: str | None = None, threads: int | None = None, verify: str = "apply",
                 object_store_memory: int | None = None, inner_args: dict | None = None,
                 system_prompt: str | None = None, noise_cache_bytes: int = 0, population: str = "auto",
                 start_timeout_s: float = 600.0, adapter=None, quantization: str = "none") -> None:
        super().__init__()
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
            raise ValueError(f"engine_args.replicas must be an integer ≥ 1, got {replicas!r}")
        if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) or max_restarts < -1:
            raise ValueError(f"engine_args.max_restarts must be an integer ≥ -1, got {max_restarts!r}")
        if call_timeout_s is not None and not float(call_timeout_s) > 0:
            raise ValueError(f"engine_args.call_timeout_s must be > 0 or null, got {call_timeout_s!r}")
        if verify not in ("apply", "step"):
            raise ValueError(f"engine_args.verify must be 'apply' or 'step', got {verify!r}")
        if inner == "ray":
            raise ValueError("engine_args.inner: a replica cannot itself be a ray engine")
        self.inner, self.verify = str(inner), verify
        self.space = "full" if adapter is None else "adapter"  # every replica holds the same space (its inner engine's)
        self.ray_stats = RayStats()
        self.pool: ReplicaPool | None = None
        self._timeouts = (int(max_restarts), None if call_timeout_s is None else float(call_timeout_s),
                          float(start_timeout_s))
        self._paths: dict[str, str] = {}
        self._pad_id: int | None = None
        self._reported: dict[str, int] = {}
        self._group, self._handles = None, []
        self._owns_cluster = connect(address, object_store_memory=object_store_memory)
        try:
            self._start(model, dtype, device, batch_size, replicas, num_cpus, num_gpus, placement, threads,
                        {**(inner_args or {}), "noise_cache_bytes": int(noise_cache_bytes) // replicas,
                         "population": population,
                         **({"adapter": adapter, "quantization": quantization} if adapter is not None else {})})
            if system_prompt is not None:
                self.system_prompt = system_prompt
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_pretrained(cls, name_or_path: str, dtype="float32", device: str = "cpu", batch_size: int = 64,
                        **options) -> "RayEngine":
        """K replicas of ``inner`` on ``name_or_path`` (options: see the class docstring)."""
        return cls(name_or_path, dtype=str(dtype), device=str(device), batch_size=int(batch_size), **options)

    def _start(self, model, dtype, device, batch_size, replicas, num_cpus, num_gpus, strategy, threads, inner_args):
        max_restarts, call_timeout_s, start_timeout_s = self._timeouts
        if num_gpus is None:
            num_gpus = 1 if str(device).startswith("cuda") else 0
        self._group, options = placement(replicas, num_cpus, num_gpus, strategy, timeout_s=start_timeout_s)
        actor = ray.remote(Replica)
        handles = [actor.options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=max_restarts, max_task_retries=0,
                                 **options[i]).remote(self.inner, model, dtype, device, batch_size, inner_args, threads)
                   for i in range(replicas)]
        self._handles = handles
        try:
            infos = ray.get([h.info.remote() for h in handles], timeout=start_timeout_s)
        except RayActorError as exc:
            raise RuntimeError(f"a ray replica failed to start: {_last_line(exc)}") from None
        except GetTimeoutError:
            raise RuntimeError(f"ray replicas did not start within {start_timeout_s:.0f} s") from None
        masters = {info["master"] for info in infos}
        if len(masters) != 1:
            raise RuntimeError(f"ray replicas loaded different base weights ({len(masters)} digests) from {model!r}")
        self.pool = ReplicaPool(handles, masters.pop(), max_restarts=max_restarts, call_timeout_s=call_timeout_s,
                                start_timeout_s=start_timeout_s, stats=self.ray_stats)
        for slot, info in zip(self.pool.slots, infos):
            slot.info = info

    # -- attributes ----------------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str | None:  # type: ignore[override]
        return self.pool.system_prompt if self.pool is not None else None

    @system_prompt.setter
    def system_prompt(self, value: str | None) -> None:
        self.pool.system_prompt = value  # a replica that rejoins gets it with the replay
        self.pool.collect({s.handle.set_system_prompt.remote(value): s for s in self.pool.ready()})

    @property
    def call_timeout_s(self) -> float | None:
        """Seconds after which a replica call counts as hung (None: never); settable."""
        return self.pool.call_timeout_s

    @call_timeout_s.setter
    def call_timeout_s(self, value: float | None) -> None:
        self.pool.call_timeout_s = None if value is None else float(value)

    @property
    def replicas(self) -> list[dict]:
        """One dict per replica: ``index``, ``state`` (ready | syncing | dead) and what it
        reported when it started (``pid``, ``node``, ``ip``)."""
        return [{"index": s.index, "state": s.state, **s.info} for s in self.pool.slots]

    def actor(self, index: int):
        """The Ray actor handle of replica ``index`` (its :class:`~zoopt.engines.ray.replica.Replica`
        methods, ``debug_*`` test hooks included, are ``handle.method.remote(...)``)."""
        return self.pool.slots[index].handle

    @property
    def version(self) -> int:
        """Updates applied so far (the length of the driver's update log)."""
        return self.pool.version

    @property
    def expected_masters(self) -> list[str | None]:
        """The master digest every replica agreed on after 0, 1, … updates (the base model's first)."""
        return list(self.pool.expected)

    def population_info(self) -> dict:
        """What the replicas went through since the last call, for a step's metrics record:
        ``ray_requeued``, ``ray_restarts``, ``ray_replays``, ``ray_timeouts``, ``ray_refusals``,
        ``ray_disagreements``, ``ray_lost`` (counts) and ``ray_replicas_ready`` (now)."""
        now = self.ray_stats.as_dict()
        keys = ("requeued", "restarts", "replays", "timeouts", "refusals", "disagreements", "lost")
        info = {f"ray_{k}": now[k] - self._reported.get(k, 0) for k in keys}
        self._reported = {k: now[k] for k in keys}
        info["ray_replicas_ready"] = len(self.pool.ready())
        return info

    def applied_checksum(self) -> str | None:
        """The master digest the replicas agreed on after the last ``apply`` (or at the start)."""
        return self.pool.expected[-1]

    def population_path(self, noise: Noise) -> str:
        key = repr(noise)
        if key not in self._paths:
            self._paths[key] = self.pool.plain("population_path", noise)
        return self._paths[key]

    def num_parameters(self, noise: Noise | None = None) -> int:
        return self.pool.plain("num_parameters", noise)

    def encode(self, prompt: Prompt) -> list[int]:
        return self.pool.plain("encode", prompt)

    @property
    def pad_id(self) -> int:
        if self._pad_id is None:
            self._pad_id = self.pool.plain("pad_id")
        return self._pad_id

    # -- the population call -----------------------------------------------------------------------
    def generate_population(self, noise: Noise, population: Population, prompts: Sequence[Prompt],
                            sampling: Sampling, on_member: Callable | None = None) -> list[list[list[Completion]]]:
        """The contract's population call (see the module docstring); ``result[i]`` equals the
        inner engine's ``generate`` after ``perturb(noise, seed_i, scale_i)``.  An override of
        the whole call (every path is scheduled over the replicas, ``on_member`` as results
        arrive), opened with the contract's :func:`~zoopt.engines.base.check_request`."""
        prompts = check_request(prompts, sampling, "generate_population")
        t0 = time.perf_counter()
        pool = self.pool
        pool.perturbation = None  # each replica call perturbs from the master and restores
        pool.settle()
        if self.verify == "step":
            pool.verify()
        n = len(population)
        chunk = 1 if self.population_path(noise) == "sequential" else math.ceil(n / max(1, len(pool.ready())))
        tasks = [list(range(a, min(a + chunk, n))) for a in range(0, n, chunk)]
        noise_ref, prompts_ref, sampling_ref = ray.put(noise), ray.put(prompts), ray.put(sampling)
        results: list = [None] * n
        reported, scoring_s = 0, 0.0

        def submit(slot: _Slot, t: int):
            part = Population(population.step, population.sigma, tuple(population.members[i] for i in tasks[t]))
            return slot.handle.evaluate.remote(pool.version, pool.expected[-1], noise_ref, part, prompts_ref,
                                               sampling_ref)

        def done(t: int, out: dict, slot: _Slot) -> None:
            nonlocal reported, scoring_s
            self.ray_stats.replica_seconds += out["seconds"]
            for i, member in zip(tasks[t], out["completions"]):
                _tag(member, slot)
                results[i] = member
            while reported < n and results[reported] is not None:
                if on_member is not None:
                    s0 = time.perf_counter()
                    on_member(reported, results[reported])
                    scoring_s += time.perf_counter() - s0
                reported += 1

        pool.schedule(len(tasks), submit, done)
        self.ray_stats.populations += 1
        self.ray_stats.members += n
        # stats.seconds: the population call's wall time less scoring (replicas run in parallel)
        self.stats.record([per_prompt for member in results for per_prompt in member], t0 + scoring_s)
        return results

    def _generate(self, prompts: list[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """The prompts in contiguous slices, one per replica (the inner engine's results)."""
        pool = self.pool
        pool.settle()
        k = len(pool.ready()) if (sampling.greedy or can_offset(self.inner)) else 1
        k = max(1, min(k, len(prompts)))
        bounds = [(len(prompts) * j // k, len(prompts) * (j + 1) // k) for j in range(k)]
        results: list = [None] * len(prompts)

        def submit(slot: _Slot, t: int):
            a, b = bounds[t]
            return slot.handle.generate.remote(pool.version, pool.expected[-1], prompts[a:b], sampling, a)

        def done(t: int, out: dict, slot: _Slot) -> None:
            self.ray_stats.replica_seconds += out["seconds"]
            _tag(out["completions"], slot)
            results[bounds[t][0]:bounds[t][1]] = out["completions"]

        if prompts:
            pool.schedule(k, submit, done)
        return results

    # -- weights ---------------------------------------------------------------------------------------
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """On every replica (and on a replica that rejoins while perturbed)."""
        check_finite("scale", scale)
        self.pool.perturbation = (noise, int(seed), float(scale))
        self.pool.broadcast("perturb", noise, int(seed), float(scale))

    def restore(self) -> None:
        self.pool.perturbation = None
        self.pool.broadcast("restore")

    def apply(self, noise: Noise, update: Update) -> None:
        """Append the update to the driver's log, apply it on every replica, and check that
        their masters agree (the majority digest becomes the expected one; the others are
        replayed).  Non-finite coefficients are a ``ValueError`` before anything is sent."""
        for c in update.coefficients:
            check_finite("update coefficient", c)
        if update.rule is not None:  # the replicas' rule state is the log's: refuse a wrong step before any sees it
            last = next((u for _, u in reversed(self.pool.log) if u.rule is not None), None)
            next_rule_state(None if last is None else RuleState(last.rule, last.rule_step + 1), update)
        self.pool.apply(noise, update)

    def checksum(self) -> str:
        """The working weights' digest, the same on every replica (else a ``RuntimeError``)."""
        return self.pool.agreed("checksum", False)

    def master_checksum(self) -> str:
        return self.pool.agreed("checksum", True)

    def space_record(self) -> dict:
        """The inner engines' :meth:`~zoopt.engines.base.WeightsEngine.space_record`, the same on
        every replica (else a ``RuntimeError``): in adapter space each replica holds the adapter
        on its own frozen base, and their base digests must agree."""
        return json.loads(self.pool.agreed("space_record"))

    def base_checksum(self) -> str:
        record = self.space_record()
        return record["base_weights"] if "base_weights" in record else self.checksum()

    def state_dict(self):
        return self.pool.versioned_one("state_dict")

    def export_pretrained(self, directory: str | Path) -> Path:
        """The inner engine's HF directory, written here (the replica may be on another node)."""
        files = self.pool.versioned_one("export_files")
        with atomic_directory(directory) as tmp:
            for rel, data in files.items():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_bytes(data)
        return Path(directory).absolute()

    def reset(self) -> None:
        """Back to the base model on every live replica, keeping the actors (the update log is
        dropped): a started cluster can serve another run."""
        self.pool.reset()

    def close(self) -> None:
        """Kill the replicas and, when this engine started the cluster, shut it down (closing
        twice is a no-op)."""
        handles, self._handles = getattr(self, "_handles", []), []
        self.pool = None
        for handle in handles:
            try:
                ray.kill(handle)
            except Exception:  # already gone
                pass
        if self._group is not None:
            try:
                ray.util.remove_placement_group(self._group)
            except Exception:
                pass
            self._group = None
        if self._owns_cluster and ray.is_initialized():
            ray.shutdown()
        self._owns_cluster = False


def _tag(completions: list, slot: _Slot) -> None:
    """``meta["replica"]``: which replica generated each completion."""
    for per_prompt in completions:
        for c in per_prompt:
            c.meta["replica"] = slot.index


__all__ = ["RayEngine", "RayStats", "NoReplicaLeft"]
