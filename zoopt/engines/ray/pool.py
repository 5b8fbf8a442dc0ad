"""The driver's side of :class:`~zoopt.engines.ray.RayEngine`: replicas, the update log, and what
happens when a replica dies, hangs, refuses or disagrees.

A :class:`ReplicaPool` holds one :class:`_Slot` per replica actor (``ready``, ``syncing`` — a
replay in flight — or ``dead``), the **update log** (every ``(noise, update)`` applied, in order)
and the **expected master digest** after each number of updates.  Every call it makes carries
the current update count and expected digest, which the replica checks (see
:mod:`zoopt.engines.ray.replica`).

- :meth:`ReplicaPool.schedule` runs tasks (population members, prompt slices) on idle ready
  replicas, one call each at a time, with its own ref → (replica, task) map: the task of a dead
  (``RayActorError``), hung (older than ``call_timeout_s``) or refusing replica is queued again
  (lowest first), never lost or done twice.
- A replica that died with restarts on, was killed for hanging, refused, or disagreed is
  **synced**: one ``replay`` call sends it the whole log, and it catches up from its own
  version when its master is the expected one there, else from the base model.  The call
  waits for Ray to restart the actor (``ActorUnavailableError`` in the meantime is retried up
  to ``start_timeout_s``); a synced replica takes work again only once its digest is the
  expected one.  A permanently dead replica (``ActorDiedError``, restarts off) is dropped.
- :meth:`ReplicaPool.apply` appends to the log, applies on every ready replica and takes the
  majority of their digests as the expected one (others are rebuilt and replayed; an even
  split rebuilds all, and the first to finish sets the digest).
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Callable

from ...noise import Noise
from ...types import Update
from .cluster import require_ray
from .replica import Refused

ray = require_ray()
from ray.exceptions import ActorDiedError, GetTimeoutError, RayActorError  # noqa: E402

log = logging.getLogger("zoopt.engines.ray")


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


class ReplicaPool:
    """Replica actors, the update log and the expected digests (see the module docstring)."""

    def __init__(self, handles: list, base_master: str, *, max_restarts: int, call_timeout_s: float | None,
                 start_timeout_s: float, stats: RayStats) -> None:
        self.slots = [_Slot(i, h) for i, h in enumerate(handles)]
        self.log: list[tuple[Noise, Update]] = []
        self.expected: list[str | None] = [base_master]
        self.perturbation: tuple | None = None   # the driver's perturb, re-applied to a replica that rejoins
        self.system_prompt: str | None = None    # likewise
        self.max_restarts, self.call_timeout_s, self.start_timeout_s = max_restarts, call_timeout_s, start_timeout_s
        self.stats = stats

    @property
    def version(self) -> int:
        return len(self.log)

    def apply(self, noise: Noise, update: Update) -> None:
        """Append the update (checked finite by the caller) to the log, apply it on every
        replica, and check their masters agree (the majority digest becomes the expected one;
        the others are replayed)."""
        self.settle()
        version, expected = self.version, self.expected[-1]
        update = Update(tuple(int(s) for s in update.seeds), tuple(float(c) for c in update.coefficients),
                        rule=update.rule, rule_step=int(update.rule_step))  # a rule's state: replayed with the log
        self.log.append((noise, update))
        self.expected.append(None)
        self.perturbation = None  # apply sets the working weights to the new master
        refs = {s.handle.apply.remote(version, expected, noise, update): s for s in self.ready()}
        answers = self.collect(refs)
        votes = Counter(master for _, (_, master) in answers)
        if votes:
            (top, count), = votes.most_common(1)
            if count * 2 > len(answers):
                self.expected[-1] = top
                wrong = [slot for slot, (_, master) in answers if master != top]
            else:
                wrong = [slot for slot, _ in answers]
            for slot in wrong:
                self.stats.disagreements += 1
                self._event(f"replica {slot.index} disagrees after update {version + 1}: replaying it from the base model")
                self._start_sync(slot, reload=True)
        self.settle()
        if not self.ready():
            raise self.no_replica()

    def reset(self) -> None:
        """Back to the base model on every live replica, keeping the actors (the update log is
        dropped): a started cluster can serve another run."""
        self.settle()
        self.log, self.expected, self.perturbation = [], [self.expected[0]], None
        for slot in self.slots:
            if slot.state != "dead":
                self._start_sync(slot, reload=True)
        self.settle()
        if not self.ready():
            raise self.no_replica()

    # -- scheduling ------------------------------------------------------------------------------------
    def ready(self) -> list[_Slot]:
        return [s for s in self.slots if s.state == "ready"]

    def schedule(self, n_tasks: int, submit: Callable, done: Callable) -> None:
        """Run tasks ``0..n_tasks-1`` on idle ready replicas, one at a time each; re-queue the
        task of a dead, hung or refusing replica (lowest task first); ``done(t, result, slot)``."""
        queue = list(range(n_tasks))
        inflight: dict = {}  # ref -> (slot, task, started)
        while queue or inflight:
            busy = {slot.index for slot, _, _ in inflight.values()}
            for slot in self.ready():
                if queue and slot.index not in busy:
                    t = heapq.heappop(queue)
                    inflight[submit(slot, t)] = (slot, t, time.monotonic())
            syncing = {s.sync: s for s in self.slots if s.state == "syncing"}
            if not inflight:
                if not syncing:
                    raise self.no_replica()
                self.settle(one=True)
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
                    self.stats.requeued += 1
                    continue
                done(t, value, slot)
            if self.call_timeout_s is not None:
                now = time.monotonic()
                for ref, (slot, t, started) in list(inflight.items()):
                    if now - started > self.call_timeout_s:
                        del inflight[ref]
                        self._hung(slot)
                        heapq.heappush(queue, t)
                        self.stats.requeued += 1

    def collect(self, refs: dict) -> list[tuple[_Slot, Any]]:
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

    def broadcast(self, method: str, *args, rounds: int = 3) -> dict[int, Any]:
        """``method(version, expected, *args)`` on every replica; one that refuses or rejoins
        is caught up and asked again (up to ``rounds`` times)."""
        answers: dict[int, Any] = {}
        for _ in range(rounds):
            self.settle()
            todo = [s for s in self.ready() if s.index not in answers]
            if not todo:
                break
            refs = {getattr(s.handle, method).remote(self.version, self.expected[-1], *args): s for s in todo}
            answers.update((slot.index, value) for slot, value in self.collect(refs))
        if not answers:
            raise self.no_replica()
        return answers

    def agreed(self, method: str, *args) -> Any:
        values = self.broadcast(method, *args)
        if len(set(values.values())) != 1:
            raise RuntimeError(f"ray replicas disagree on {method}{args}: {values}")
        return next(iter(values.values()))

    def versioned_one(self, method: str) -> Any:
        """``method`` on one replica that holds the expected weights."""
        for _ in range(3):
            self.settle()
            for slot in self.ready():
                answers = self.collect({getattr(slot.handle, method).remote(self.version, self.expected[-1]): slot})
                if answers:
                    return answers[0][1]
        raise self.no_replica()

    def plain(self, method: str, *args) -> Any:
        """``method(*args)`` (weights play no part) on the first replica that answers."""
        for slot in self.ready() or [s for s in self.slots if s.state != "dead"]:
            try:
                return ray.get(getattr(slot.handle, method).remote(*args), timeout=self.start_timeout_s)
            except (RayActorError, GetTimeoutError):
                continue
        raise self.no_replica()

    # -- replicas that fail, and their way back ----------------------------------------------------------
    def _event(self, message: str) -> None:
        log.warning(message)
        self.stats.events.append((time.time(), message))

    def _lost(self, slot: _Slot, exc: BaseException) -> None:
        if isinstance(exc, ActorDiedError) or self.max_restarts == 0:
            self._drop(slot, f"replica {slot.index} died ({type(exc).__name__}); going on with the others")
            return
        self.stats.restarts += 1
        self._event(f"replica {slot.index} is unavailable ({type(exc).__name__}): it restarts and replays "
                    f"{self.version} updates before it takes work")
        self._start_sync(slot)

    def _hung(self, slot: _Slot) -> None:
        self.stats.timeouts += 1
        self._event(f"replica {slot.index} did not answer within {self.call_timeout_s} s: killed")
        try:
            ray.kill(slot.handle, no_restart=self.max_restarts == 0)
        except Exception:
            pass
        if self.max_restarts == 0:
            self._drop(slot, f"replica {slot.index} is left out (restarts are off)")
        else:
            self.stats.restarts += 1
            self._start_sync(slot)

    def _refused(self, slot: _Slot, refusal: Refused) -> None:
        self.stats.refusals += 1
        self._event(f"replica {slot.index} refused a call: {refusal.reason}; replaying the update log")
        self._start_sync(slot)

    def _drop(self, slot: _Slot, message: str) -> None:
        slot.state, slot.sync = "dead", None
        self.stats.lost += 1
        self._event(message)
        try:
            ray.kill(slot.handle)
        except Exception:
            pass

    def _start_sync(self, slot: _Slot, reload: bool = False) -> None:
        slot.state, slot.sync_reload = "syncing", reload
        slot.sync = slot.handle.replay.remote(list(self.log), list(self.expected), reload, self.system_prompt,
                                              self.perturbation)

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
        if self.expected[-1] is None:
            self.expected[-1] = master
        elif master != self.expected[-1]:
            if not slot.sync_reload:
                self._start_sync(slot, reload=True)
            else:
                self._drop(slot, f"replica {slot.index} replayed the log from the base model and still holds another "
                                 f"master (another device type or library version?): left out")
            return
        slot.state, slot.sync_failures, slot.failing_since = "ready", 0, None
        self.stats.replays += 1
        self._event(f"replica {slot.index} replayed {applied} updates and rejoined at update {version}")

    def settle(self, one: bool = False) -> None:
        """Wait for replays in flight (all, or the first to finish with ``one``)."""
        while True:
            syncing = {s.sync: s for s in self.slots if s.state == "syncing"}
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

    def verify(self) -> None:
        """Fresh master digests of every replica against the expected one; replay those that differ."""
        want = self.expected[-1]
        refs = {s.handle.verify.remote(): s for s in self.ready()}
        for slot, master in self.collect(refs):
            if want is not None and master != want:
                self.stats.disagreements += 1
                self._event(f"replica {slot.index}'s master changed at rest (update {self.version}): replaying it")
                self._start_sync(slot, reload=True)
        self.settle()

    def no_replica(self) -> NoReplicaLeft:
        return NoReplicaLeft(f"no ray replica left ({self.stats.lost} of {len(self.slots)} lost) at update "
                             f"{self.version}: a trainer's seed log holds every finished step (zoopt train --resume RUN_DIR)")


def _last_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__
