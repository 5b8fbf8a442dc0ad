"""A small pool of worker processes that runs one function with a hard deadline per call.

Why processes: a time limit inside the calling process cannot stop work that never returns to
the interpreter.  ``signal.alarm``/``setitimer`` (math-verify's own limit, and
:func:`zoopt.rewards.timeouts.call_with_timeout`) interrupt Python bytecode only, and a thread cannot
be stopped at all; sympy evaluating ``5^{5^{5^5}}`` sits in one big-integer C call and eats
memory until it is killed.  So the work runs in a child process, and a child that overruns its
call's deadline is killed (SIGKILL) and replaced by a fresh one.

Contract of :meth:`DeadlinePool.map`:

* ``calls`` is a list of argument tuples for ``function`` of the module file ``path``; the
  result is one :class:`Outcome` per call, in order: ``"ok"`` (``value`` is what ``function``
  returned), ``"error"`` (``function`` raised, or the worker
  died — e.g. past its memory limit; ``value`` is a one-line description), ``"timeout"`` (the
  call ran past ``timeout_s``; its worker was killed and replaced) or ``"cancelled"`` (the
  batch's ``deadline`` came before the call started).
* It returns once every call has an outcome — after at most about
  ``⌈len(calls)/workers⌉·timeout_s`` plus worker start-up, and never much later than
  ``deadline_s`` (the time to kill the busy workers) — and never raises because of what
  ``function`` does.
* At most ``workers`` worker processes are alive at any time; a killed worker is reaped (no
  zombie is left) before :meth:`map` returns.  :meth:`close` ends them all (also at exit).
* If :meth:`map` is interrupted (an exception in the caller's thread, such as the reward guard's
  timer), every worker that was busy is killed and replaced, so no stale answer is ever read.
* Each worker is a fresh interpreter (``python zoopt/deadline/worker.py``, a
  :class:`~zoopt.deadline.process.WorkerProcess`) that loads the target's module **file** on
  its own — not its package, so a worker imports sympy, not torch.  It is used once it says it
  is ready (about 0.7 s after its start on an idle machine), its address space then capped at
  its size plus ``memory_mb`` (``RLIMIT_AS``); a killed worker's replacement starts at once, so
  it is usually warm by the next call.  No ``multiprocessing`` start method is involved:
  nothing re-runs the caller's ``__main__``.

Threads: one :meth:`map` at a time (a lock); a second caller waits for the first.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Sequence

from .process import START_TIMEOUT_S, WorkerProcess, kill_all

STATUSES = ("ok", "error", "timeout", "cancelled")
WORKER = Path(__file__).with_name("worker.py")
MAX_FAILED_STARTS = 3  # workers dying before they are ready, in a row: the calls fail instead


@dataclass(frozen=True)
class Outcome:
    """What one call did: ``status`` is one of :data:`STATUSES`; ``value`` its result or error."""

    status: str
    value: Any = None
    seconds: float = 0.0


class _Worker(WorkerProcess):
    """One worker process, the parent's ends of its two pipes, and the call it runs."""

    def __init__(self, path: str, function: str, memory_mb: int | None) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        self.inbox = Connection(from_child_r, writable=False)
        self.outbox = Connection(to_child_w, readable=False)
        super().__init__([str(WORKER), path, function, str(to_child_r), str(from_child_w)],
                         (to_child_r, from_child_w), (self.inbox, self.outbox), memory_mb)
        self.job: int | None = None  # the index of the call it runs
        self.started = 0.0


class DeadlinePool:
    """``workers`` processes running ``function`` of the module file ``path`` with a deadline
    per call (see the module doc)."""

    def __init__(self, path: str | Path, function: str, *, workers: int = 2,
                 memory_mb: int | None = 1024) -> None:
        if not Path(path).is_file():
            raise ValueError(f"no module file {str(path)!r}")
        if not (isinstance(workers, int) and workers >= 1):
            raise ValueError(f"workers must be an integer ≥ 1, got {workers!r}")
        self.path, self.function = str(path), function
        self.n_workers, self.memory_mb = workers, memory_mb
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
        self.killed = 0  # workers killed for overrunning, over the pool's life
        self._failed_starts = 0
        self._finalizer = weakref.finalize(self, kill_all, self._workers)

    def _spawn(self) -> _Worker:
        return _Worker(self.path, self.function, self.memory_mb)

    def _replace(self, i: int) -> None:
        self._workers[i].kill()
        self._workers[i] = self._spawn()

    def pids(self) -> list[int]:
        """The pids of the worker processes alive now."""
        return [w.process.pid for w in self._workers if w.alive()]

    def close(self) -> None:
        """End every worker (they also end when the pool is collected or the parent exits)."""
        with self._lock:
            kill_all(self._workers)

    def warm(self, timeout_s: float = START_TIMEOUT_S) -> bool:
        """Start the missing workers and wait until every worker is ready (at most ``timeout_s``);
        whether they all are."""
        with self._lock:
            while len(self._workers) < self.n_workers:
                self._workers.append(self._spawn())
            end = time.monotonic() + timeout_s
            while not all(w.ready for w in self._workers) and time.monotonic() < end:
                waiting = [w for w in self._workers if not w.ready]
                for inbox in wait([w.inbox for w in waiting], timeout=max(0.0, end - time.monotonic())):
                    worker = next(w for w in waiting if w.inbox is inbox)
                    try:
                        if worker.inbox.recv() == ("ready",):
                            worker.became_ready()
                    except (EOFError, OSError):
                        self._replace(self._workers.index(worker))
            return all(w.ready for w in self._workers)

    def map(self, calls: Sequence[tuple], timeout_s: float, deadline_s: float | None = None) -> list[Outcome]:
        """Run ``function(*args)`` for each ``args`` in ``calls``; see the module doc.

        ``timeout_s``: the limit of one call; ``deadline_s``: of the whole batch (a call not
        started by then is ``"cancelled"``; one running then is killed as a ``"timeout"``).
        """
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        if not calls:
            return []
        outcomes: list[Outcome | None] = [None] * len(calls)
        with self._lock:
            end = time.monotonic() + deadline_s if deadline_s is not None else float("inf")
            try:
                self._run(calls, outcomes, timeout_s, end)
            finally:  # interrupted or not: a worker still busy holds a stale call
                for i, worker in enumerate(self._workers):
                    if worker.job is not None:
                        if outcomes[worker.job] is None:
                            outcomes[worker.job] = Outcome("timeout", None, time.monotonic() - worker.started)
                        worker.job = None
                        self._replace(i)
        return [o if o is not None else Outcome("cancelled") for o in outcomes]

    def _run(self, calls, outcomes: list, timeout_s: float, end: float) -> None:
        queue = deque(range(len(calls)))
        while len(self._workers) < self.n_workers:
            self._workers.append(self._spawn())
        while queue or any(w.job is not None for w in self._workers):
            now = time.monotonic()
            if now >= end and not any(w.job is not None for w in self._workers):
                return  # what is left in the queue stays None: cancelled
            for i, worker in enumerate(self._workers):
                if worker.ready and worker.job is None and queue and now < end:
                    job = queue.popleft()
                    try:
                        worker.outbox.send((job, tuple(calls[job])))
                    except (OSError, ValueError) as exc:
                        outcomes[job] = Outcome("error", f"could not reach the worker: {exc}")
                        self._replace(i)
                        continue
                    worker.job, worker.started = job, time.monotonic()
            if not any(w.ready for w in self._workers) and all(
                    now - w.born > START_TIMEOUT_S for w in self._workers):
                for job in queue:
                    outcomes[job] = Outcome("error", f"no worker started within {START_TIMEOUT_S:g} s")
                return
            wakes = [w.started + timeout_s for w in self._workers if w.job is not None]
            wake = min(wakes + [end, now + 1.0])
            ready = wait([w.inbox for w in self._workers], timeout=max(0.0, wake - time.monotonic()))
            now = time.monotonic()
            for i, worker in enumerate(self._workers):
                if worker.inbox in ready:
                    try:
                        message = worker.inbox.recv()
                    except (EOFError, OSError):
                        message = None
                    if message == ("ready",):
                        worker.became_ready()
                        if worker.ready:  # not when it could not be capped (then killed)
                            self._failed_starts = 0
                        continue
                    if message is None and not worker.ready:  # died while starting
                        self._failed_starts += 1
                        if self._failed_starts >= MAX_FAILED_STARTS:
                            for job in queue:
                                outcomes[job] = Outcome("error", "the worker process cannot start (its error "
                                                                 "is on stderr)")
                            queue.clear()
                    if message is not None and worker.job is not None and message[0] == worker.job:
                        outcomes[worker.job] = Outcome(message[1], message[2], now - worker.started)
                        worker.job = None
                        continue
                    # EOF (the worker died) or a message out of turn
                    if worker.job is not None:
                        outcomes[worker.job] = Outcome("error", f"the worker died (exit code {worker.process.poll()})",
                                                       now - worker.started)
                        worker.job = None
                    self._replace(i)
                elif worker.job is not None and (now >= worker.started + timeout_s or now >= end):
                    outcomes[worker.job] = Outcome("timeout", None, now - worker.started)
                    worker.job = None
                    self.killed += 1
                    self._replace(i)
