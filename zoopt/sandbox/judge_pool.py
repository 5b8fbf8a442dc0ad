"""Worker processes that run a dataset's tests (trusted code) with a hard deadline per job.

The judge of a program's tests (``trusted_judge.py``) runs the dataset's code, which can loop
(a ``while`` over the model's answers) or take long; it therefore runs in a worker process
(:class:`zoopt.deadline.process.WorkerProcess`, as the deadline pool's workers do) that is
killed (SIGKILL, reaped) and replaced when its job overruns.  It is not a
:class:`zoopt.deadline.pool.DeadlinePool`, whose ``map`` sends a batch of argument tuples
over pipes: a job here talks to a sandboxed program while it runs, so it comes with a file
descriptor — the judge's end of the program's channel, passed over a Unix socket
(``SCM_RIGHTS``) — and reports each test as it finishes, so a job that is killed keeps the
tests it had already judged.  Each calling thread checks out a worker of its own
(:meth:`JudgePool.checkout`); a pool of ``size`` workers serves ``size`` threads at once.

A worker is a fresh, isolated interpreter (``python -I zoopt/sandbox/judge_worker.py``), not a
fork of the trainer: it is the trusted side, so it loads only the judge's three
standard-library files — no ``objectives`` package, no torch, no ``PYTHON*`` variable or user
site-packages — starts in a fraction of a second, and can be killed at any moment without
harm to the trainer.  Its address space is capped at its size when ready plus ``memory_mb``;
started once and reused, it costs one interpreter start per pool rather than per program.
Its stdout goes to /dev/null (a test's prints are not the trainer's output).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from zoopt.deadline.process import WorkerProcess, kill_all

WORKER = Path(__file__).with_name("judge_worker.py")


@dataclass
class JudgeReport:
    """What a job's judge said: ``outcomes[i]`` for each test it finished; ``status`` is
    ``"done"``, ``"timeout"`` (killed at its deadline), ``"cancelled"``, ``"died"`` (the worker
    ended or broke the protocol) or ``"not_started"`` (no worker became ready)."""

    outcomes: dict[int, str] = field(default_factory=dict)
    status: str = "done"
    notes: list[str] = field(default_factory=list)


class _Frames:
    """Length-prefixed JSON frames from a socket, read with a deadline."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock, self.buffer = sock, bytearray()

    def next(self, until: float, cancel: threading.Event | None = None):
        """The next message; None at ``until`` or on ``cancel``; EOFError when the peer is gone."""
        while True:
            if len(self.buffer) >= 4:
                size = int.from_bytes(self.buffer[:4], "big")
                if len(self.buffer) >= 4 + size:
                    message = json.loads(bytes(self.buffer[4:4 + size]))
                    del self.buffer[:4 + size]
                    return message
            left = until - time.monotonic()
            stop = left <= 0 or (cancel is not None and cancel.is_set())
            ready, _, _ = select.select([self.sock], [], [], 0 if stop else min(left, 0.05))
            if ready:  # what already came is read even when stopping: finished tests count
                chunk = self.sock.recv(1 << 16)
                if not chunk:
                    raise EOFError("the judge worker is gone")
                self.buffer += chunk
            elif stop:
                return None


class JudgeWorker(WorkerProcess):
    """One worker process; used by one thread at a time (see :meth:`JudgePool.checkout`)."""

    def __init__(self, memory_mb: int | None) -> None:
        ours, theirs = socket.socketpair()
        fd = theirs.detach()
        self.sock, self.frames, self.broken = ours, _Frames(ours), False
        super().__init__(["-I", str(WORKER), str(fd)], (fd,), (ours,), memory_mb,
                         stdout=subprocess.DEVNULL)

    def wait_ready(self, until: float) -> bool:
        try:
            while not self.ready:
                message = self.frames.next(until)
                if message is None:
                    return False
                if message == {"ready": True}:
                    self.became_ready()
        except (EOFError, OSError, ValueError):
            self.broken = True
        return self.ready and not self.broken

    def start(self, spec: dict, channel: socket.socket) -> bool:
        """Hand the job over (the worker gets its own copy of ``channel``); False if it could not."""
        data = json.dumps(spec).encode()
        try:
            socket.send_fds(self.sock, [b"J"], [channel.fileno()])
            self.sock.sendall(len(data).to_bytes(4, "big") + data)
        except OSError:
            self.broken = True
            return False
        return True

    def collect(self, until: float, cancel: threading.Event | None = None) -> JudgeReport:
        """The job's reports until it is done, ``until`` passes or ``cancel`` is set (then
        the worker is marked broken, to be killed)."""
        report = JudgeReport()
        try:
            while True:
                message = self.frames.next(until, cancel)
                if message is None:
                    report.status = "cancelled" if cancel is not None and cancel.is_set() else "timeout"
                    self.broken = True
                    return report
                if "unit" in message:
                    i, outcome = message["unit"]
                    report.outcomes[int(i)] = str(outcome)
                elif "done" in message:
                    report.notes = [str(n) for n in message["done"]]
                    return report
        except (EOFError, OSError, ValueError) as exc:
            report.status, self.broken = "died", True
            report.notes.append(f"the judge worker died ({exc}; exit code {self.process.poll()})")
            return report


class JudgePool:
    """Up to ``size`` judge workers; :meth:`checkout` lends one to the calling thread."""

    def __init__(self, size: int, memory_mb: int | None = 1024) -> None:
        if not (isinstance(size, int) and size >= 1):
            raise ValueError(f"size must be an integer ≥ 1, got {size!r}")
        self.size, self.memory_mb = size, memory_mb
        self._idle: list[JudgeWorker] = []
        self._all: list[JudgeWorker] = []
        self._lock = threading.Condition()
        self.killed = 0  # workers killed (overrun, cancelled, died) over the pool's life
        self._finalizer = weakref.finalize(self, kill_all, self._all)

    def pids(self) -> list[int]:
        """The pids of the worker processes alive now."""
        with self._lock:
            return [w.process.pid for w in self._all if w.alive()]

    @contextlib.contextmanager
    def checkout(self) -> Iterator[JudgeWorker]:
        """A worker for the calling thread (started if needed; not necessarily ready — see
        :meth:`JudgeWorker.wait_ready`); given back on exit, or killed if it broke (a new one
        starts at a later checkout)."""
        with self._lock:
            while not self._idle and len(self._all) >= self.size:
                self._lock.wait()
            if self._idle:
                worker = self._idle.pop()
            else:
                worker = JudgeWorker(self.memory_mb)
                self._all.append(worker)
        healthy = False
        try:
            yield worker
            healthy = not worker.broken and worker.alive()
        finally:
            with self._lock:
                if healthy:
                    self._idle.append(worker)
                else:  # its replacement starts at the next checkout, not while a batch ends
                    self._all.remove(worker)
                    self.killed += 1
                    worker.kill()
                self._lock.notify()

    def close(self) -> None:
        """End every worker (they also end when the pool is collected or the parent exits)."""
        with self._lock:
            kill_all(self._all)
            self._idle.clear()
