"""``RayEngine``: ES on K engine replicas in Ray actors, surviving dead and hung replicas, with
replicas proven in agreement.

The driver (this process) holds no weights.  It holds the run's **update log** — every
``apply(noise, update)`` in order — and, for each version v (updates applied), the
**expected master digest** after v updates, agreed by the replicas.  Each replica
(:class:`~zoopt.engines.ray_replica.Replica`, an actor) holds an inner engine (``hf``, or
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
  can sample from a prompt offset: ``hf``; see :func:`~zoopt.engines.ray_replica.generate_from`).

Counters (re-queued members, restarts, replays, timeouts, lost replicas) are in
:attr:`RayEngine.ray_stats`; events go to the ``zoopt.engines.ray`` logger.  Options and the
multi-node set-up: ``docs/ray.md``.
"""

from __future__ import annotations

import heapq
import logging
import math
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..atomic import atomic_directory
from ..noise import Noise
from ..types import Population, Update
from .base import Completion, Engine, Prompt, Sampling
from .ray_cluster import connect, placement, require_ray
from .ray_replica import Refused, Replica, can_offset
from .weights import check_finite

ray = require_ray()
from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError  # noqa: E402

log = logging.getLogger(__name__)


class NoReplicaLeft(RuntimeError):
    """Every replica is dead (or was left out); nothing can be evaluated."""


@dataclass
class RayStats:
    """Counters over the engine's life: population calls and members, members queued again,
    restarts seen, replays done (catch-ups and rebuilds), timed-out calls, refusals, replicas
    that disagreed with the expected digest, replicas lost for good, seconds spent inside
    replica calls; ``events``: the last 200 messages, with ``time.time()`` stamps."""

    populations: int = 0
    members: int = 0
    requeued: int = 0
    restarts: int = 0
    replays: int = 0
    timeouts: int = 0
    refusals: int = 0
    disagreements: int = 0
    lost: int = 0
    replica_seconds: float = 0.0
    events: deque = field(default_factory=lambda: deque(maxlen=200))

    def as_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "events"}


@dataclass(eq=False)
class _Slot:
    index: int
    handle: Any
    state: str = "ready"        # ready | syncing | dead
    sync: Any = None            # the ref of the replay in flight
    sync_reload: bool = False
    sync_failures: int = 0
    failing_since: float | None = None
    info: dict = field(default_factory=dict)


class RayEngine(Engine):
    """K replicas of an inner engine in Ray actors (see the module docstring and ``docs/ray.md``).

    Options (``engine_args``): ``replicas`` (K), ``inner`` (``hf`` | ``vllm``), ``num_cpus`` and
    ``num_gpus`` per replica (GPUs default to 1 on a CUDA ``device``), ``placement`` (``PACK`` |
    ``SPREAD``, or ``STRICT_``), ``max_restarts`` (-1: always; 0: off), ``call_timeout_s``
    (None: wait forever), ``address`` (attach to a cluster, e.g. ``auto``; default: start a
    local one, shut down by :meth:`close`), ``threads`` (torch threads per replica),
    ``verify`` (``apply`` | ``step``), ``object_store_memory`` (bytes, local cluster),
    ``inner_args`` (more options of the inner engine's ``from_pretrained``).
    ``noise_cache_bytes`` (the host's budget) is split among the replicas.
    """

    def __init__(self, model: str, *, dtype: str = "float32", device: str = "cpu", batch_size: int = 64,
                 replicas: int = 1, inner: str = "hf", num_cpus: float = 1, num_gpus: float | None = None,
                 placement: str = "PACK", max_restarts: int = -1, call_timeout_s: float | None = None,
                 address: str | None = None, threads: int | None = None, verify: str = "apply",
                 object_store_memory: int | None = None, inner_args: dict | None = None,
                 system_prompt: str | None = None, noise_cache_bytes: int = 0, population: str = "auto",
                 start_timeout_s: float = 600.0) -> None:
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
        self.inner, self.max_restarts, self.verify = str(inner), int(max_restarts), verify
        self.call_timeout_s = None if call_timeout_s is None else float(call_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.ray_stats = RayStats()
        self._system_prompt = system_prompt
        self._log: list[tuple[Noise, Update]] = []
        self._expected: list[str | None] = []
        self._perturbation: tuple | None = None
        self._paths: dict[str, str] = {}
        self._slots: list[_Slot] = []
        self._group = None
        self._owns_cluster = connect(address, object_store_memory=object_store_memory)
        try:
            self._start(model, dtype, device, batch_size, replicas, num_cpus, num_gpus, placement, threads,
                        {**(inner_args or {}), "noise_cache_bytes": int(noise_cache_bytes) // replicas,
                         "population": population})
        except BaseException:
            self.close()
            raise

    @classmethod
    def from_pretrained(cls, name_or_path: str, dtype="float32", device: str = "cpu", batch_size: int = 64,
                        **options) -> "RayEngine":
        """K replicas of ``inner`` on ``name_or_path`` (options: see the class docstring)."""
        return cls(name_or_path, dtype=str(dtype), device=str(device), batch_size=int(batch_size), **options)

    def _start(self, model, dtype, device, batch_size, replicas, num_cpus, num_gpus, strategy, threads, inner_args):
        if num_gpus is None:
            num_gpus = 1 if str(device).startswith("cuda") else 0
        self._group, options = placement(replicas, num_cpus, num_gpus, strategy, timeout_s=self.start_timeout_s)
        actor = ray.remote(Replica)
        for i in range(replicas):
            handle = actor.options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=self.max_restarts,
                                   max_task_retries=0, **options[i]).remote(
                self.inner, model, dtype, device, batch_size, inner_args, threads)
            self._slots.append(_Slot(i, handle))
        refs = [s.handle.info.remote() for s in self._slots]
        try:
            infos = ray.get(refs, timeout=self.start_timeout_s)
        except RayActorError as exc:
            raise RuntimeError(f"a ray replica failed to start: {_last_line(exc)}") from None
        except GetTimeoutError:
            raise RuntimeError(f"ray replicas did not start within {self.start_timeout_s:.0f} s") from None
        for slot, info in zip(self._slots, infos):
            slot.info = info
        masters = {info["master"] for info in infos}
        if len(masters) != 1:
            raise RuntimeError(f"ray replicas loaded different base weights ({len(masters)} digests) from {model!r}")
        self._expected = [masters.pop()]
        if self._system_prompt is not None:
            self.system_prompt = self._system_prompt

    # -- attributes ----------------------------------------------------------------------------------
    @property
    def system_prompt(self) -> str | None:  # type: ignore[override]
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, value: str | None) -> None:
        self._system_prompt = value
        if self._slots:
            ray.get([s.handle.set_system_prompt.remote(value) for s in self._ready()])

    @property
    def replicas(self) -> list[dict]:
        """One dict per replica: ``index``, ``state`` (ready | syncing | dead) and what it
        reported when it started (``pid``, ``node``, ``ip``)."""
        return [{"index": s.index, "state": s.state, **s.info} for s in self._slots]

    def actor(self, index: int):
        """The Ray actor handle of replica ``index`` (its :class:`~zoopt.engines.ray_replica.Replica`
        methods, ``debug_*`` test hooks included, are ``handle.method.remote(...)``)."""
        return self._slots[index].handle

    @property
    def version(self) -> int:
        """Updates applied so far (the length of the driver's update log)."""
        return len(self._log)

    def population_path(self, noise: Noise) -> str:
        key = repr(noise)
        if key not in self._paths:
            self._paths[key] = self._plain("population_path", noise)
        return self._paths[key]

    def num_parameters(self, noise: Noise | None = None) -> int:
        return self._plain("num_parameters", noise)

    def encode(self, prompt: Prompt) -> list[int]:
        return self._plain("encode", prompt)

    @property
    def pad_id(self) -> int:
        return self._plain("pad_id")

    # -- the population call -----------------------------------------------------------------------
    def generate_population(self, noise: Noise, population: Population, prompts: Sequence[Prompt],
                            sampling: Sampling, on_member: Callable | None = None) -> list[list[list[Completion]]]:
        """The contract's population call (see the module docstring); ``result[i]`` equals the
        inner engine's ``generate`` after ``perturb(noise, seed_i, scale_i)``."""
        if isinstance(prompts, (str, dict)):
            raise TypeError("generate_population takes a sequence of prompts, not a single prompt")
        t0 = time.perf_counter()
        self._perturbation = None  # each replica call perturbs from the master and restores
        self._settle()
        if self.verify == "step":
            self._verify()
        n = len(population)
        chunk = 1 if self.population_path(noise) == "sequential" else math.ceil(n / max(1, len(self._ready())))
        tasks = [list(range(a, min(a + chunk, n))) for a in range(0, n, chunk)]
        noise_ref, prompts_ref, sampling_ref = ray.put(noise), ray.put(list(prompts)), ray.put(sampling)
        results: list = [None] * n
        reported, scoring_s = 0, 0.0

        def submit(slot: _Slot, t: int):
            part = Population(population.step, population.sigma, tuple(population.members[i] for i in tasks[t]))
            return slot.handle.evaluate.remote(self.version, self._expected[-1], noise_ref, part, prompts_ref,
                                               sampling_ref)

        def done(t: int, out: dict, slot: _Slot) -> None:
            nonlocal reported, scoring_s
            self.ray_stats.replica_seconds += out["seconds"]
            for i, member in zip(tasks[t], out["completions"]):
                for c in (c for per_prompt in member for c in per_prompt):
                    c.meta["replica"] = slot.index
                results[i] = member
            while reported < n and results[reported] is not None:
                if on_member is not None:
                    s0 = time.perf_counter()
                    on_member(reported, results[reported])
                    scoring_s += time.perf_counter() - s0
                reported += 1

        self._schedule(len(tasks), submit, done)
        self.ray_stats.populations += 1
        self.ray_stats.members += n
        # stats.seconds: the population call's wall time less scoring (replicas run in parallel)
        self.stats.record([per_prompt for member in results for per_prompt in member], t0 + scoring_s)
        return results

    def generate(self, prompts: Sequence[Prompt], sampling: Sampling) -> list[list[Completion]]:
        """The prompts in contiguous slices, one per replica (the inner engine's results)."""
        if isinstance(prompts, (str, dict)):
            raise TypeError("generate takes a sequence of prompts, not a single prompt")
        t0 = time.perf_counter()
        prompts = list(prompts)
        self._settle()
        k = len(self._ready()) if (sampling.greedy or can_offset(self.inner)) else 1
        k = max(1, min(k, len(prompts)))
        bounds = [(len(prompts) * j // k, len(prompts) * (j + 1) // k) for j in range(k)]
        results: list = [None] * len(prompts)

        def submit(slot: _Slot, t: int):
            a, b = bounds[t]
            return slot.handle.generate.remote(self.version, self._expected[-1], prompts[a:b], sampling, a)

        def done(t: int, out: dict, slot: _Slot) -> None:
            self.ray_stats.replica_seconds += out["seconds"]
            for c in (c for per_prompt in out["completions"] for c in per_prompt):
                c.meta["replica"] = slot.index
            results[bounds[t][0]:bounds[t][1]] = out["completions"]

        if prompts:
            self._schedule(k, submit, done)
        self.stats.record(results, t0)
        return results

    # -- weights ---------------------------------------------------------------------------------------
    def perturb(self, noise: Noise, seed: int, scale: float) -> None:
        """On every replica (and on a replica that rejoins while perturbed)."""
        check_finite("scale", scale)
        self._perturbation = (noise, int(seed), float(scale))
        self._broadcast("perturb", noise, int(seed), float(scale))

    def restore(self) -> None:
        self._perturbation = None
        self._broadcast("restore")

    def apply(self, noise: Noise, update: Update) -> None:
        """Append the update to the log, apply it on every replica, and check their masters
        agree (the majority digest becomes the expected one; the others are replayed)."""
        for c in update.coefficients:
            check_finite("update coefficient", c)
        self._settle()
        version, expected = self.version, self._expected[-1]
        update = Update(tuple(int(s) for s in update.seeds), tuple(float(c) for c in update.coefficients))
        self._log.append((noise, update))
        self._expected.append(None)
        self._perturbation = None  # apply sets the working weights to the new master
        refs = {s.handle.apply.remote(version, expected, noise, update): s for s in self._ready()}
        answers = self._collect(refs)
        votes = Counter(master for _, (_, master) in answers)
        if votes:
            (top, count), = votes.most_common(1)
            if count * 2 > len(answers):
                self._expected[-1] = top
                wrong = [slot for slot, (_, master) in answers if master != top]
            else:
                wrong = [slot for slot, _ in answers]
            for slot in wrong:
                self.ray_stats.disagreements += 1
                self._event(f"replica {slot.index} disagrees after update {version + 1}: replaying it from the base model")
                self._start_sync(slot, reload=True)
        self._settle()
        if not self._ready():
            raise self._no_replica()

    def checksum(self) -> str:
        """The working weights' digest, the same on every replica (else a ``RuntimeError``)."""
        return self._agreed("checksum", False)

    def master_checksum(self) -> str:
        return self._agreed("checksum", True)

    def state_dict(self):
        return self._versioned_one("state_dict")

    def export_pretrained(self, directory: str | Path) -> Path:
        """The inner engine's HF directory, written here (the replica may be on another node)."""
        files = self._versioned_one("export_files")
        with atomic_directory(directory) as tmp:
            for rel, data in files.items():
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_bytes(data)
        return Path(directory).absolute()

    def reset(self) -> None:
        """Back to the base model on every live replica, keeping the actors (the update log is
        dropped): a started cluster can serve another run."""
        self._settle()
        self._log, self._expected, self._perturbation = [], [self._expected[0]], None
        for slot in self._slots:
            if slot.state != "dead":
                self._start_sync(slot, reload=True)
        self._settle()
        if not self._ready():
            raise self._no_replica()

    def close(self) -> None:
        """Kill the replicas and, when this engine started the cluster, shut it down."""
        slots, self._slots = self._slots, []
        for slot in slots:
            try:
                ray.kill(slot.handle)
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

    # -- scheduling ------------------------------------------------------------------------------------
    def _ready(self) -> list[_Slot]:
        return [s for s in self._slots if s.state == "ready"]

    def _schedule(self, n_tasks: int, submit: Callable, done: Callable) -> None:
        """Run tasks ``0..n_tasks-1`` on idle ready replicas, one at a time each; re-queue the
        task of a dead, hung or refusing replica (lowest task first); ``done(t, result, slot)``."""
        queue = list(range(n_tasks))
        inflight: dict = {}  # ref -> (slot, task, started)
        while queue or inflight:
            busy = {slot.index for slot, _, _ in inflight.values()}
            for slot in self._ready():
                if queue and slot.index not in busy:
                    t = heapq.heappop(queue)
                    inflight[submit(slot, t)] = (slot, t, time.monotonic())
            syncing = {s.sync: s for s in self._slots if s.state == "syncing"}
            if not inflight:
                if not syncing:
                    raise self._no_replica()
                self._settle(one=True)
                continue
            wait_s = None
            if self.call_timeout_s is not None:
                oldest = min(started for _, _, started in inflight.values())
                wait_s = max(0.0, oldest + self.call_timeout_s - time.monotonic())
            ready, _ = ray.wait([*inflight, *syncing], num_returns=1, timeout=wait_s)
            for ref in ready:
                if ref in syncing:
                    self._finish_sync(syncing[ref])
                    continue
                slot, t, _ = inflight.pop(ref)
                try:
                    value = ray.get(ref)
                except RayActorError as exc:
                    self._lost(slot, exc)
                    value = None
                if isinstance(value, Refused):
                    self._refused(slot, value)
                if value is None or isinstance(value, Refused):
                    heapq.heappush(queue, t)
                    self.ray_stats.requeued += 1
                    continue
                done(t, value, slot)
            if self.call_timeout_s is not None:
                now = time.monotonic()
                for ref, (slot, t, started) in list(inflight.items()):
                    if now - started > self.call_timeout_s:
                        del inflight[ref]
                        self._hung(slot)
                        heapq.heappush(queue, t)
                        self.ray_stats.requeued += 1

    def _collect(self, refs: dict) -> list[tuple[_Slot, Any]]:
        """Results of one call per replica; dead, hung and refusing replicas are handled
        (and left out of the answer)."""
        answers, pending = [], dict(refs)
        deadline = None if self.call_timeout_s is None else time.monotonic() + self.call_timeout_s
        while pending:
            wait_s = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=wait_s)
            if not ready and deadline is not None:
                for slot in pending.values():
                    self._hung(slot)
                break
            for ref in ready:
                slot = pending.pop(ref)
                try:
                    value = ray.get(ref)
                except RayActorError as exc:
                    self._lost(slot, exc)
                    continue
                if isinstance(value, Refused):
                    self._refused(slot, value)
                    continue
                answers.append((slot, value))
        return answers

    def _broadcast(self, method: str, *args, rounds: int = 3) -> dict[int, Any]:
        """``method(version, expected, *args)`` on every replica; one that refuses or rejoins
        is caught up and asked again (up to ``rounds`` times)."""
        answers: dict[int, Any] = {}
        for _ in range(rounds):
            self._settle()
            todo = [s for s in self._ready() if s.index not in answers]
            if not todo:
                break
            refs = {getattr(s.handle, method).remote(self.version, self._expected[-1], *args): s for s in todo}
            answers.update((slot.index, value) for slot, value in self._collect(refs))
        if not answers:
            raise self._no_replica()
        return answers

    def _agreed(self, method: str, *args) -> Any:
        values = self._broadcast(method, *args)
        if len(set(values.values())) != 1:
            raise RuntimeError(f"ray replicas disagree on {method}{args}: {values}")
        return next(iter(values.values()))

    def _versioned_one(self, method: str) -> Any:
        """``method`` on one replica that holds the expected weights."""
        for _ in range(3):
            self._settle()
            for slot in self._ready():
                answers = self._collect({getattr(slot.handle, method).remote(self.version, self._expected[-1]): slot})
                if answers:
                    return answers[0][1]
        raise self._no_replica()

    def _plain(self, method: str, *args) -> Any:
        """``method(*args)`` (weights play no part) on the first replica that answers."""
        for slot in self._ready() or [s for s in self._slots if s.state != "dead"]:
            try:
                return ray.get(getattr(slot.handle, method).remote(*args), timeout=self.start_timeout_s)
            except (RayActorError, GetTimeoutError):
                continue
        raise self._no_replica()

    # -- replicas that fail, and their way back ----------------------------------------------------------
    def _event(self, message: str) -> None:
        log.warning(message)
        self.ray_stats.events.append((time.time(), message))

    def _lost(self, slot: _Slot, exc: BaseException) -> None:
        if isinstance(exc, ActorDiedError) or self.max_restarts == 0:
            self._drop(slot, f"replica {slot.index} died ({type(exc).__name__}); going on with the others")
            return
        self.ray_stats.restarts += 1
        self._event(f"replica {slot.index} is unavailable ({type(exc).__name__}): it restarts and replays "
                    f"{self.version} updates before it takes work")
        self._start_sync(slot)

    def _hung(self, slot: _Slot) -> None:
        self.ray_stats.timeouts += 1
        self._event(f"replica {slot.index} did not answer within {self.call_timeout_s} s: killed")
        try:
            ray.kill(slot.handle, no_restart=self.max_restarts == 0)
        except Exception:
            pass
        if self.max_restarts == 0:
            self._drop(slot, f"replica {slot.index} is left out (restarts are off)")
        else:
            self.ray_stats.restarts += 1
            self._start_sync(slot)

    def _refused(self, slot: _Slot, refusal: Refused) -> None:
        self.ray_stats.refusals += 1
        self._event(f"replica {slot.index} refused a call: {refusal.reason}; replaying the update log")
        self._start_sync(slot)

    def _drop(self, slot: _Slot, message: str) -> None:
        slot.state, slot.sync = "dead", None
        self.ray_stats.lost += 1
        self._event(message)
        try:
            ray.kill(slot.handle)
        except Exception:
            pass

    def _start_sync(self, slot: _Slot, reload: bool = False) -> None:
        slot.state, slot.sync_reload = "syncing", reload
        slot.sync = slot.handle.replay.remote(list(self._log), list(self._expected), reload, self._system_prompt,
                                              self._perturbation)

    def _finish_sync(self, slot: _Slot) -> None:
        ref, slot.sync = slot.sync, None
        try:
            version, master, applied = ray.get(ref)
        except RayActorError as exc:  # unavailable while Ray restarts it: ask again, up to start_timeout_s
            slot.sync_failures += 1
            slot.failing_since = slot.failing_since or time.monotonic()
            if (isinstance(exc, ActorDiedError) or self.max_restarts == 0
                    or time.monotonic() - slot.failing_since > self.start_timeout_s):
                self._drop(slot, f"replica {slot.index} could not rejoin ({type(exc).__name__}); going on without it")
            else:
                time.sleep(min(1.0, 0.1 * slot.sync_failures))
                self._start_sync(slot, slot.sync_reload)
            return
        except ray.exceptions.RayError as exc:
            self._drop(slot, f"replica {slot.index} failed to replay the update log: {_last_line(exc)}")
            return
        if version != self.version:  # the log moved on while it replayed
            self._start_sync(slot, slot.sync_reload)
            return
        if self._expected[-1] is None:
            self._expected[-1] = master
        elif master != self._expected[-1]:
            if not slot.sync_reload:
                self._start_sync(slot, reload=True)
            else:
                self._drop(slot, f"replica {slot.index} replayed the log from the base model and still holds another "
                                 f"master (another device type or library version?): left out")
            return
        slot.state, slot.sync_failures, slot.failing_since = "ready", 0, None
        self.ray_stats.replays += 1
        self._event(f"replica {slot.index} replayed {applied} updates and rejoined at update {version}")

    def _settle(self, one: bool = False) -> None:
        """Wait for replays in flight (all, or the first to finish with ``one``)."""
        while True:
            syncing = {s.sync: s for s in self._slots if s.state == "syncing"}
            if not syncing:
                return
            ready, _ = ray.wait(list(syncing), num_returns=1, timeout=self.start_timeout_s)
            if not ready:
                for slot in syncing.values():
                    self._drop(slot, f"replica {slot.index} did not finish replaying within {self.start_timeout_s:.0f} s")
                return
            self._finish_sync(syncing[ready[0]])
            if one:
                return

    def _verify(self) -> None:
        """Fresh master digests of every replica against the expected one; replay those that differ."""
        want = self._expected[-1]
        refs = {s.handle.verify.remote(): s for s in self._ready()}
        for slot, master in self._collect(refs):
            if want is not None and master != want:
                self.ray_stats.disagreements += 1
                self._event(f"replica {slot.index}'s master changed at rest (update {self.version}): replaying it")
                self._start_sync(slot, reload=True)
        self._settle()

    def _no_replica(self) -> NoReplicaLeft:
        return NoReplicaLeft(f"no ray replica left ({self.ray_stats.lost} of {len(self._slots)} lost) at update "
                             f"{self.version}: a trainer's seed log holds every finished step (zoopt train --resume RUN_DIR)")


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


__all__ = ["RayEngine", "RayStats", "NoReplicaLeft"]
