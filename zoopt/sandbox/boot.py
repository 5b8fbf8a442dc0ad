"""The sandbox's bootstrap: the child side of :func:`zoopt.sandbox.programs.run_program`.

Run as ``python -I -S boot.py CONFIG_JSON`` by the parent, in its own session, with a
minimal environment, stdin from /dev/null and the program's stdout/stderr pipes as fds 1 and 2.
It imports nothing outside the standard library (``-S``: no site-packages) except pyseccomp,
loaded by file path when the parent found it.  Three processes:

* **B** (this script, still root when the parent is): creates the namespaces with
  ``unshare(2)`` (PID, network, mount, IPC, UTS; as a non-root user, a user namespace first),
  forks I, enforces the wall-clock deadline, and writes one JSON report line to ``report_fd``.
  B stays outside the namespaces' view: nothing in the sandbox can see or signal it.
* **I** (the PID namespace's init, pid 1): makes every mount private and builds the program's
  file-system view (``file_view.py``: a new root holding only the interpreter, its standard
  library and shared libraries, the named packages, four ``/dev`` nodes, a fresh ``/proc`` and
  size-limited tmpfs at ``/tmp`` — the working directory lives there — and ``/dev/shm``;
  or, with ``filesystem="visible"`` or where that fails, the machine's file system remounted
  read-only, ``layers.visible_filesystem``), forks P, reaps everything and exits with P.
  When a PID
  namespace's init exits, the kernel SIGKILLs every process left in it (double-forked,
  ``setsid``-ed daemons included) before B's ``waitpid`` on I returns.
* **P** (the program): resource limits, an unprivileged uid/gid, ``no_new_privs``, the
  seccomp filter, every other fd closed (except the caller's ``channel``, moved to fd 3; B and
  I close their copies, so its peer sees end-of-file once P and its children are gone), then
  the program, compiled and run as ``__main__``.

Without a PID namespace (the kernel refused it), I and B are child subreapers and kill every
descendant left behind: the fallback, recorded in the report.  The layers themselves are in
``layers.py``.
"""

import json
import os
import select
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # -I leaves the script's folder out
try:
    import file_view
    from layers import (MS_PRIVATE, MS_REC, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS,
                        PR_SET_PDEATHSIG, PRELOAD, build_filter, check, enter_namespaces, libc,
                        mount, set_limits, visible_filesystem, working_directory)
finally:
    del sys.path[0]  # the program must not import the project


class Stop(BaseException):
    """Raised by B's SIGTERM handler: the parent cancelled the run."""


def run_program(cfg: dict, info: dict, workdir: str, seccomp_filter, ready_w: int) -> None:
    """P: never returns.  Writes one byte to ``ready_w`` once the sandbox is in place."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.setpgid(0, 0)
        os.chdir(workdir)
        os.umask(0o077)
        if info["uid"] is not None:
            os.chown(workdir, info["uid"], info["uid"])
        import atexit
        import builtins
        import traceback
        import types

        if info["uid"] is not None and not info["mount_namespace"]:
            for name in PRELOAD:  # the uid may not reach the standard library (under /root)
                try:
                    __import__(name)
                except ImportError:
                    pass
        set_limits(cfg)
        if info["uid"] is not None:
            os.setgroups([])
            os.setresgid(info["uid"], info["uid"], info["uid"])
            os.setresuid(info["uid"], info["uid"], info["uid"])
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        if seccomp_filter is not None:
            seccomp_filter.load()
        os.write(ready_w, b"1")
        channel = cfg.get("channel_fd")
        if channel is not None and channel != 3:
            os.dup2(channel, 3)
        os.closerange(3 if channel is None else 4, 65536)
        os.environ.clear()
        os.environ.update(cfg["env"], HOME=workdir, TMPDIR=workdir)
        sys.argv = ["program.py"]
        sys.executable = cfg["executable"]  # the real binary, the one the view holds
        sys.path.extend(cfg["sys_path"])  # the folders of the packages the caller named
    except BaseException as exc:  # the sandbox could not be set up: never run the program
        os.write(2, f"zoopt sandbox: setup failed: {exc!r}\n".encode())
        os._exit(1)
    try:
        main = types.ModuleType("__main__")
        main.__file__, main.__builtins__ = "program.py", builtins
        sys.modules["__main__"] = main
        with open("program.py", "rb") as f:
            program = compile(f.read(), "program.py", "exec", dont_inherit=True)
        # Running the model's program is this sandbox's whole purpose: it happens only here, in
        # the isolated child, after every layer above (namespaces, fresh uid, rlimits, seccomp,
        # no_new_privs) is in place; a failed set-up exits before this line (docs/sandbox.md).
        exec(program, main.__dict__)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, (int, type(None))):
            print(exc.code, file=sys.stderr)
    except BaseException as exc:  # the traceback from the program's own frames on
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != "program.py":
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)


def close_channel(cfg: dict) -> None:
    """Close this process's copy of the caller's channel (only the program keeps one)."""
    if cfg.get("channel_fd") is not None:
        try:
            os.close(cfg["channel_fd"])
        except OSError:
            pass


def kill_descendants(pid: int) -> None:
    """Kill and reap the children of ``pid`` (a subreaper) until none is left (fallback mode)."""
    for _ in range(1000):
        children = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as f:
                        stat = f.read()
                except OSError:
                    continue
                if int(stat.rsplit(b")", 1)[1].split()[1]) == pid:
                    children.append(int(entry))
        if not children:
            return
        for child in children:
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for child in children:
            try:
                os.waitpid(child, 0)
            except ChildProcessError:
                pass


def file_system(cfg: dict, info: dict) -> str:
    """I's file system (docs/sandbox.md): the allowlist view where ``cfg["view"]`` is given and
    the kernel allows it, else the machine's, read-only; returns the working directory."""
    if not info["mount_namespace"]:
        return cfg["workdir"]
    with open(os.path.join(cfg["workdir"], "program.py"), "rb") as f:
        program = f.read()
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    if cfg["view"] is not None:
        try:
            file_view.build(cfg["workdir"], cfg["view"], cfg["disk_mb"], info["pid_namespace"])
            info.update(private_filesystem=True, private_proc=info["pid_namespace"],
                        read_only_root=True)
        except OSError as exc:
            info["notes"].append(f"allowlist file-system view: {exc}")
            file_view.undo(cfg["workdir"])
    if not info["private_filesystem"]:
        visible_filesystem(cfg, info)
    return working_directory(program, info, cfg["workdir"])


def init(cfg: dict, info: dict, status_w: int, seccomp_filter) -> None:
    """I: never returns."""
    try:
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if not info["pid_namespace"]:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        workdir = file_system(cfg, info)
        if not info["mount_namespace"] and info["uid"] is not None:
            os.chown(cfg["workdir"], info["uid"], info["uid"])
        os.write(status_w, (json.dumps(info) + "\n").encode())
        if not info["private_filesystem"] and cfg["filesystem"] == "refuse":
            os._exit(0)  # answer keys would be in reach: B reports "refused"
        ready_r, ready_w = os.pipe()
        program = os.fork()
        if program == 0:
            os.close(status_w)
            os.close(ready_r)
            run_program(cfg, info, workdir, seccomp_filter, ready_w)
        os.close(ready_w)
        close_channel(cfg)
        while True:  # reap orphans until the program itself is done
            pid, status = os.waitpid(-1, 0)
            if pid == program:
                break
        if not info["pid_namespace"]:
            kill_descendants(os.getpid())
        started = os.read(ready_r, 1) == b"1"
        os.write(status_w, f"{status} {int(started)}\n".encode())
    except BaseException as exc:
        os.write(2, f"zoopt sandbox: init failed: {exc!r}\n".encode())
        os._exit(1)
    os._exit(0)


def wait_until(pid: int, deadline: float) -> bool:
    """Wait for child ``pid`` to exit until ``deadline``; True when it did."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if fd is not None:
                select.select([fd], [], [], left)
            else:
                time.sleep(min(left, 0.01))
    finally:
        if fd is not None:
            os.close(fd)


def main() -> None:
    start = time.monotonic()
    cfg = json.loads(sys.argv[1])
    report = os.fdopen(cfg["report_fd"], "w")
    deadline = start + cfg["timeout_s"]
    info = {"status": None, "returncode": None, "timed_out": False, "network_isolated": False,
            "pid_namespace": False, "mount_namespace": False, "user_namespace": False,
            "private_proc": False, "private_tmp": False, "read_only_root": False,
            "private_filesystem": False, "seccomp": False,
            "uid": None, "notes": []}

    def finish(**fields) -> None:
        info.update(fields)
        report.write(json.dumps(info) + "\n")
        report.flush()
        os._exit(0)

    def on_term(signum, frame):  # noqa: ARG001
        raise Stop()

    signal.signal(signal.SIGTERM, on_term)
    try:
        try:
            seccomp_filter = build_filter(cfg)
        except Exception as exc:  # noqa: BLE001 - pyseccomp or libseccomp unusable
            seccomp_filter = None
            info["notes"].append(f"seccomp unavailable: {exc!r}")
        info["seccomp"] = seccomp_filter is not None
        if os.getuid() == 0:
            info["uid"] = int(cfg["uid"])
        enter_namespaces(cfg, info)
        if not info["network_isolated"] and cfg["network"] == "refuse":
            finish(status="refused")
        if not info["mount_namespace"] and cfg["filesystem"] == "refuse":
            finish(status="refused")
        if not info["pid_namespace"]:
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        status_r, status_w = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(status_r)
            report.close()
            init(cfg, info, status_w, seccomp_filter)
        os.close(status_w)
        close_channel(cfg)
        finished = wait_until(child, deadline)
        if not finished:
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
    except Stop:
        if "child" in locals():
            os.kill(child, signal.SIGKILL)
            os.waitpid(child, 0)
            if not info["pid_namespace"]:
                kill_descendants(os.getpid())
        finish(status="cancelled")
    if not info["pid_namespace"]:
        kill_descendants(os.getpid())
    with os.fdopen(status_r) as f:
        lines = f.read().splitlines()
    if lines:
        info.update(json.loads(lines[0]), notes=json.loads(lines[0])["notes"])
        if not info["private_filesystem"] and cfg["filesystem"] == "refuse":
            finish(status="refused")  # I ran nothing: see init
    if not finished:
        finish(status="timeout", timed_out=True)
    if len(lines) < 2:
        finish(status="sandbox_error")
    status, started = (int(x) for x in lines[1].split())
    code = os.waitstatus_to_exitcode(status)
    if not started:
        finish(status="sandbox_error", returncode=code)
    finish(status="ok" if code == 0 else "failed", returncode=code)


if __name__ == "__main__":
    main()
