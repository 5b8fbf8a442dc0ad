"""One worker process of a pool that kills overruns: what both pools of trusted work share.

:class:`zoopt.deadline.pool.DeadlinePool` (math checks) and
:class:`zoopt.sandbox.judge_pool.JudgePool` (a program's tests) differ in what they say to a
worker, not in how they start, cap and end one — that is this module.  Why a worker is a fresh
interpreter running a script by path (``sys.executable [flags] SCRIPT …``, no
``multiprocessing``): it loads only the files its script names — standard-library code and the
module file it serves, never the caller's package (which imports torch) nor the caller's
``__main__`` — so it is ready in well under a second; and a worker whose job overruns is killed
(SIGKILL, the only stop for work stuck in one C call) and replaced, so nothing of a killed job
survives into the next one.

Contract of :class:`WorkerProcess`:

* ``WorkerProcess(args, child_fds, ends, memory_mb)`` starts ``sys.executable *args`` with
  ``child_fds`` passed to it (and closed here once it has them), stdin at ``/dev/null``;
  ``ends`` are the parent's ends of its channels.  If it cannot start, the ends and
  ``child_fds`` are closed before the error propagates.
* :meth:`became_ready` — called when the worker says it is ready, i.e. idle after loading what
  it needs — caps its address space (``RLIMIT_AS``, set from the parent with ``prlimit``) at its
  size then plus ``memory_mb`` (``None``/0: no cap), so a job that eats memory gets a
  ``MemoryError`` or dies alone.  A worker that cannot be capped is killed, never used: its
  channel then ends, as any dead worker's does.
* :meth:`kill` sends SIGKILL, reaps the process (no zombie is left) and closes the ends;
  calling it again does no harm.  :func:`kill_all` kills a pool's list of workers and empties it.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from typing import IO, Protocol, Sequence

START_TIMEOUT_S = 60.0  # a worker that is not ready by then is reported as failed


class _Closable(Protocol):
    def close(self) -> None: ...


class WorkerProcess:
    """A fresh interpreter and the parent's ends of its channels (see the module doc);
    ``born`` is when it started, ``ready`` whether it said so and is capped."""

    def __init__(self, args: Sequence[str], child_fds: Sequence[int], ends: Sequence[_Closable],
                 memory_mb: int | None, *, stdout: int | IO | None = None) -> None:
        self.ends, self.memory_mb = tuple(ends), memory_mb
        try:
            self.process = subprocess.Popen([sys.executable, *args], pass_fds=tuple(child_fds),
                                            stdin=subprocess.DEVNULL, stdout=stdout)
        except BaseException:
            self._close_ends()
            raise
        finally:
            for fd in child_fds:
                os.close(fd)
        self.born, self.ready = time.monotonic(), False

    def became_ready(self) -> None:
        """The worker said it is ready: cap its address space, then mark it ready."""
        if self.memory_mb:
            pid = self.process.pid
            try:
                with open(f"/proc/{pid}/statm") as fh:
                    size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
                limit = size + self.memory_mb * 2**20
                resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))
            except (OSError, ValueError, IndexError) as exc:  # gone, or not cappable: never run uncapped
                if self.process.poll() is None:
                    print(f"zoopt: could not cap worker {pid}'s memory ({exc}); killed it", file=sys.stderr)
                    self.process.kill()
                return
        self.ready = True

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL, reap, close the ends."""
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(5.0)
        except subprocess.TimeoutExpired:
            pass
        self._close_ends()

    def _close_ends(self) -> None:
        for end in self.ends:
            end.close()


def kill_all(workers: list) -> None:
    """Kill every worker of ``workers`` (a list of :class:`WorkerProcess`) and empty the list."""
    for worker in workers:
        worker.kill()
    workers.clear()
