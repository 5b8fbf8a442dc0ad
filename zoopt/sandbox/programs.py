"""Run untrusted Python programs (model-written code) in a sandbox: :func:`run_program`.

Each program runs in its own child process tree (see ``zoopt/sandbox/boot.py`` and
docs/sandbox.md for the threat model):

* ``python -I -S`` (no environment variables, user site or site-packages), stdin from
  /dev/null, a minimal environment, its own session;
* fresh PID, network, mount, IPC and UTS namespaces (as root; as another user through a user
  namespace where the kernel allows one): no network at all (not even loopback), a private
  ``/proc`` that shows only the program's processes, and when the program ends or the deadline
  passes the namespace's init exits and the kernel kills everything left in it — double-forked
  ``setsid`` daemons included — before the call returns;
* a file system that holds only what the program needs (``runtime_files.py``, ``file_view.py``):
  the interpreter, its standard library and shared libraries, the packages the caller names,
  four ``/dev`` nodes, that ``/proc``, and size-limited tmpfs at ``/tmp`` (the working
  directory) and ``/dev/shm`` — no site-packages, checkout, dataset, cache or ``/etc``;
* an unprivileged uid/gid when the parent is root (a fresh uid per run by default, so the
  process limit counts this program's processes only), ``no_new_privs``;
* resource limits: CPU seconds, address space, file size, open files, processes, no core
  dumps;
* a seccomp filter (pyseccomp over the system's libseccomp) denying ``execve`` (unless
  ``allow_exec``), ``socket`` (a stream ``socketpair`` stays), namespace creation, ``ptrace``, ``mount``,
  ``bpf``, ``io_uring``, keyrings, module loading and similar kernel attack surface;
* stdout and stderr read by a bounded reader: past ``max_output_bytes`` on either stream the
  program is stopped (status ``"output_limit"``);
* optionally a ``channel``: one end of a stream ``socketpair`` that the program finds as fd 3
  (the only descriptor besides 0-2 it keeps) — how a trusted process talks to it while it
  runs (:mod:`zoopt.sandbox.judged_tests`).

Where the kernel refuses a network namespace, ``network="refuse"`` (default) does not run the
program (status ``"refused"``) and ``network="warn"`` runs it with a RuntimeWarning; either way
``SandboxResult.network_isolated`` records it.  ``filesystem`` does the same for the file-system
view (``SandboxResult.private_filesystem``); ``filesystem="visible"`` asks for the machine's
file system, read-only, instead.  :func:`isolation` probes once what this
machine gives.

Example, for a user objective::

    from zoopt.sandbox.programs import run_program
    result = run_program("print(sum(range(10)))", timeout_s=5)
    assert result.ok and result.stdout == "45\\n"

:func:`run_programs` runs many in parallel (a thread pool of child processes) under one
deadline.
"""

from __future__ import annotations

import concurrent.futures as futures
import ctypes.util
import functools
import importlib.util
import json
import math
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .runtime_files import runtime_view

BOOTSTRAP = Path(__file__).with_name("boot.py")
STATUSES = ("ok", "failed", "timeout", "output_limit", "cancelled", "refused", "skipped",
            "sandbox_error")
NETWORK_MODES = ("refuse", "warn")
FILESYSTEM_MODES = ("refuse", "warn", "visible")
UID_RANGE = (1_000_000_000, 2_000_000_000)  # no account uses these: a fresh uid per run
_GRACE_S = 3.0  # the parent's own deadline is the bootstrap's plus this
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run did.

    ``status``: ``"ok"`` (exit code 0), ``"failed"`` (non-zero exit, uncaught exception or a
    signal), ``"timeout"`` (killed at the deadline), ``"output_limit"`` (stdout or stderr past
    ``max_output_bytes``), ``"cancelled"`` (the caller's cancel event or batch deadline),
    ``"refused"`` (no network namespace and ``network="refuse"``, or no allowlist file-system
    view and ``filesystem="refuse"``), ``"skipped"`` (a batch
    deadline passed before it started), ``"sandbox_error"`` (the sandbox could not be set up;
    the program never ran).  ``returncode`` is the exit code, or ``-signal`` as in
    ``subprocess``; None when the program did not finish.
    """

    status: str
    returncode: int | None = None
    stdout: str = ""
    stderr: str = ""
    timed_out: bool = False
    network_isolated: bool = False
    pid_namespace: bool = False
    private_tmp: bool = False
    private_filesystem: bool = False
    seccomp: bool = False
    uid: int | None = None
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        """The program ran to the end and exited with code 0."""
        return self.status == "ok"


@functools.lru_cache(maxsize=1)
def _seccomp_paths() -> dict:
    """Where pyseccomp and the C libraries are (resolved once: ``find_library`` runs ldconfig)."""
    spec = importlib.util.find_spec("pyseccomp")
    library = ctypes.util.find_library("seccomp")
    if spec is None or spec.origin is None or library is None:
        return {}
    return {"pyseccomp": spec.origin, "libseccomp": library, "libc": ctypes.util.find_library("c")}


def run_program(source: str, *, timeout_s: float = 10.0, memory_mb: int | None = 512,
                cpu_s: float | None = None, file_mb: int = 16, disk_mb: int = 64,
                max_processes: int = 16, max_open_files: int = 64,
                max_output_bytes: int = 256 * 1024, network: str = "refuse",
                filesystem: str = "refuse", packages: Sequence[str] = (),
                uid: int | None = None, allow_exec: bool = False, seccomp: bool = True,
                namespaces: bool = True, env: dict[str, str] | None = None,
                cancel: threading.Event | None = None,
                channel: socket.socket | None = None) -> SandboxResult:
    """Run the Python program ``source`` in the sandbox and return what it did; never raises
    because of the program.

    * ``timeout_s`` — wall-clock limit (the bootstrap kills the whole namespace at it).
    * ``memory_mb`` — address space of each process (``RLIMIT_AS``; None for none); a 1 TB
      allocation fails with MemoryError.  Total memory is bounded by this times
      ``max_processes``.  (Threaded numpy/BLAS reserves far more address space than it uses:
      raise this for such programs.)
    * ``cpu_s`` — CPU seconds of each process (``RLIMIT_CPU``; default ``ceil(timeout_s)``).
    * ``file_mb`` — largest file it may write (``RLIMIT_FSIZE``); ``disk_mb`` — size of each
      private tmpfs (``/tmp`` holding the working directory, ``/var/tmp``, ``/dev/shm``, ``/run``).
    * ``max_processes`` — processes and threads of the program's uid (``RLIMIT_NPROC``; a fresh
      uid per run, so this counts the program's own only); ``max_open_files`` — ``RLIMIT_NOFILE``.
    * ``max_output_bytes`` — cap on each of stdout and stderr; past it the program is stopped.
    * ``network`` — ``"refuse"`` or ``"warn"``: what to do where no network namespace can be made.
    * ``filesystem`` — ``"refuse"`` or ``"warn"``: what to do where the allowlist view (only the
      interpreter, its standard library and libraries, ``packages``, ``/dev`` nodes, a private
      ``/proc``, ``/tmp`` and ``/dev/shm``) cannot be built — the program would read everything
      any user may read, answer keys included; ``"visible"``: the machine's file system,
      read-only, on purpose (what the sandbox gave before the view).
    * ``packages`` — names of installed packages the program may import (``("numpy",)``): each
      package's folder is bound in read-only and put on the program's ``sys.path``; name every
      one it imports (their dependencies are not followed).
    * ``uid`` — the uid/gid to run as when the parent is root (default: a fresh one from
      ``UID_RANGE``; 65534 is ``nobody``).
    * ``allow_exec`` — let the program ``execve`` (``os.system``, ``subprocess``); off by default.
    * ``seccomp`` — install the syscall filter when pyseccomp and libseccomp are available.
    * ``namespaces`` — False skips the namespaces (tests of the fallback; not for real use).
    * ``env`` — extra environment variables; ``cancel`` — an event that stops the run early.
    * ``channel`` — a connected stream socket (one end of ``socket.socketpair()``) that the
      program gets as fd 3.  run_program closes this process's copy as soon as the child holds
      it (or when it cannot start), so the peer sees end-of-file exactly when the program's
      processes are gone; the bootstrap's own processes close theirs before the program runs.
    """
    if network not in NETWORK_MODES:
        raise ValueError(f"network must be one of {', '.join(NETWORK_MODES)}, got {network!r}")
    if filesystem not in FILESYSTEM_MODES:
        raise ValueError(f"filesystem must be one of {', '.join(FILESYSTEM_MODES)}, "
                         f"got {filesystem!r}")
    view = _view(filesystem, tuple(packages))
    if not (isinstance(timeout_s, (int, float)) and timeout_s > 0):
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    start = time.monotonic()
    if cancel is not None and cancel.is_set():
        _close(channel)
        return SandboxResult("cancelled")
    workdir = tempfile.mkdtemp(prefix="zoopt-sbx-")
    try:
        Path(workdir, "program.py").write_text(source, encoding="utf-8", errors="surrogatepass")
        report_r, report_w = os.pipe()
        config = {
            "workdir": workdir, "timeout_s": float(timeout_s), "report_fd": report_w,
            "cpu_s": math.ceil(cpu_s if cpu_s is not None else timeout_s),
            "memory_mb": int(memory_mb) if memory_mb else 0, "file_mb": int(file_mb),
            "disk_mb": int(disk_mb), "max_processes": int(max_processes),
            "max_open_files": int(max_open_files), "network": network,
            "uid": int(uid) if uid is not None else secrets.randbelow(UID_RANGE[1] - UID_RANGE[0])
            + UID_RANGE[0],
            "allow_exec": bool(allow_exec), "namespaces": bool(namespaces),
            "filesystem": filesystem, "view": view,
            "executable": os.path.realpath(sys.executable),
            "sys_path": view["sys_path"] if view is not None else [],
            "env": {str(k): str(v) for k, v in (env or {}).items()},
            "channel_fd": channel.fileno() if channel is not None else None,
            **(_seccomp_paths() if seccomp else {}),
        }
        passed = (report_w,) if channel is None else (report_w, channel.fileno())
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", str(BOOTSTRAP), json.dumps(config)],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                pass_fds=passed, start_new_session=True, env=dict(_ENV), cwd=workdir)
        except OSError as exc:
            os.close(report_r)
            return SandboxResult("sandbox_error", notes=(f"could not start: {exc}",))
        finally:
            os.close(report_w)
            _close(channel)
        result = _collect(proc, report_r, start, float(timeout_s), int(max_output_bytes), cancel)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if not result.network_isolated and result.status != "refused" and network == "warn":
        warnings.warn("sandbox: no network namespace could be made; the program ran with the "
                      "machine's network (network='warn')", RuntimeWarning, stacklevel=2)
    if not result.private_filesystem and result.status != "refused" and filesystem == "warn":
        warnings.warn("sandbox: no allowlist file-system view could be made; the program could "
                      "read every file any user may read (filesystem='warn')", RuntimeWarning,
                      stacklevel=2)
    return result


def _view(filesystem: str, packages: tuple[str, ...]) -> dict | None:
    """The allowlist for ``packages`` (``runtime_files.runtime_view``); None for
    ``filesystem="visible"`` or when the probe failed (the child then cannot build the view, and
    ``filesystem`` decides)."""
    if filesystem == "visible":
        if packages:
            raise ValueError("packages: only the allowlist view binds packages; "
                             "filesystem='visible' shows every installed one")
        return None
    try:
        return runtime_view(packages)
    except RuntimeError:
        return None


def _collect(proc: subprocess.Popen, report_r: int, start: float, timeout_s: float,
             max_output: int, cancel: threading.Event | None) -> SandboxResult:
    """Read stdout, stderr and the report with a bounded reader; stop the run on cancel, on
    output past the cap, or past the parent's own deadline."""
    fds = {proc.stdout.fileno(): "stdout", proc.stderr.fileno(): "stderr", report_r: "report"}
    data = {"stdout": bytearray(), "stderr": bytearray(), "report": bytearray()}
    truncated = {"stdout": False, "stderr": False}
    selector = selectors.DefaultSelector()
    for fd in fds:
        os.set_blocking(fd, False)
        selector.register(fd, selectors.EVENT_READ)
    stop_reason, stopped_at, killed = None, None, False
    exited_at = None
    try:
        while selector.get_map():
            for key, _ in selector.select(timeout=0.05):
                name = fds[key.fd]
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                buffer = data[name]
                limit = max_output if name != "report" else 1 << 20
                room = limit - len(buffer)
                buffer += chunk[:max(room, 0)]
                if len(chunk) > room and name != "report":
                    truncated[name] = True
                    stop_reason = stop_reason or "output_limit"
            now = time.monotonic()
            if stop_reason is None and cancel is not None and cancel.is_set():
                stop_reason = "cancelled"
            if stop_reason is None and now > start + timeout_s + _GRACE_S:
                stop_reason = "timeout"
            if stop_reason and stopped_at is None:
                stopped_at = now
                _signal(proc, signal.SIGTERM)  # the bootstrap kills the namespace and reports
            if not killed and stopped_at is not None and now > stopped_at + _GRACE_S:
                killed = True
                _killpg(proc)
            if proc.poll() is not None:
                exited_at = exited_at or now
                if now > exited_at + 1.0:  # something outside the namespace holds a pipe
                    break
    finally:
        selector.close()
        os.close(report_r)
        if proc.poll() is None:
            _killpg(proc)
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return _result(data, truncated, stop_reason, time.monotonic() - start)


def _result(data: dict, truncated: dict, stop_reason: str | None, duration: float) -> SandboxResult:
    try:
        report = json.loads(bytes(data["report"]).decode().splitlines()[-1])
    except (ValueError, IndexError, UnicodeDecodeError):
        report = {"status": "sandbox_error", "notes": ["the bootstrap sent no report"]}
    status = stop_reason if stop_reason in ("output_limit", "cancelled") else report["status"]
    if stop_reason == "timeout" and status in (None, "sandbox_error", "cancelled"):
        status = "timeout"
    if status not in STATUSES:
        status = "sandbox_error"
    decode = lambda b: bytes(b).decode("utf-8", errors="replace")  # noqa: E731
    return SandboxResult(
        status=status,
        returncode=report.get("returncode") if status in ("ok", "failed") else None,
        stdout=decode(data["stdout"]), stderr=decode(data["stderr"]),
        timed_out=status == "timeout",
        network_isolated=bool(report.get("network_isolated")),
        pid_namespace=bool(report.get("pid_namespace")),
        private_tmp=bool(report.get("private_tmp")),
        private_filesystem=bool(report.get("private_filesystem")),
        seccomp=bool(report.get("seccomp")), uid=report.get("uid"),
        duration_s=duration, stdout_truncated=truncated["stdout"],
        stderr_truncated=truncated["stderr"], notes=tuple(report.get("notes") or ()))


def _close(channel: socket.socket | None) -> None:
    if channel is not None:
        channel.close()


def _signal(proc: subprocess.Popen, signum: int) -> None:
    try:
        proc.send_signal(signum)
    except (ProcessLookupError, OSError):
        pass


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run_programs(sources: Sequence[str], *, workers: int | None = None,
                 deadline_s: float | None = None, timeout_s: float = 10.0,
                 envs: Sequence[dict[str, str] | None] | None = None,
                 **options) -> list[SandboxResult]:
    """:func:`run_program` for each source, up to ``workers`` at a time (default: the CPU
    count), in order; ``envs[i]`` is program ``i``'s extra environment.  ``deadline_s`` bounds the whole batch: each program's ``timeout_s`` is
    cut to what is left; programs still running at the deadline are cancelled, those not yet
    started are ``"skipped"``.  An exception in the calling thread (a reward guard's timer)
    cancels every running program before it propagates."""
    if envs is not None and len(envs) != len(sources):
        raise ValueError(f"run_programs got {len(envs)} envs for {len(sources)} sources")
    workers = max(1, int(workers or os.cpu_count() or 1))
    end = time.monotonic() + deadline_s if deadline_s is not None else math.inf
    cancel = threading.Event()
    results: list[SandboxResult | None] = [None] * len(sources)

    def one(i: int) -> None:
        left = end - time.monotonic()
        if cancel.is_set() or left <= 0:
            results[i] = SandboxResult("skipped")
            return
        results[i] = run_program(sources[i], timeout_s=min(timeout_s, left), cancel=cancel,
                                 env=envs[i] if envs is not None else None, **options)

    run_until(one, len(sources), workers, end, cancel, "zoopt-sandbox")
    return [r if r is not None else SandboxResult("skipped") for r in results]


def run_until(one: Callable[[int], None], count: int, workers: int, end: float,
              cancel: threading.Event, thread_name: str) -> None:
    """Run ``one(0) … one(count − 1)`` on ``workers`` threads until all return or the monotonic
    time ``end`` passes; then ``cancel`` is set (each ``one`` must watch it and return).  An
    exception in the calling thread (a reward guard's timer) sets ``cancel`` before it propagates;
    every thread has ended when this returns."""
    pool = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=thread_name)
    try:
        pending = [pool.submit(one, i) for i in range(count)]
        while pending:
            wait_s = None if end == math.inf else max(end - time.monotonic(), 0.0)
            _, not_done = futures.wait(pending, timeout=wait_s)
            pending = list(not_done)
            if pending and time.monotonic() >= end:
                cancel.set()
    except BaseException:
        cancel.set()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


@functools.lru_cache(maxsize=1)
def isolation() -> SandboxResult:
    """What the sandbox gives on this machine: a trivial program's result (its
    ``network_isolated``, ``pid_namespace``, ``private_tmp``, ``private_filesystem``,
    ``seccomp``, ``uid``), run once."""
    return run_program("pass", timeout_s=30, network="refuse", filesystem="refuse")
