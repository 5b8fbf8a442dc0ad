"""The sandbox (zoopt/sandbox/programs.py) against hostile programs.

Each hostile program (tests/hostile_programs.py) would exit 0 only if its attack worked; every one
must fail (or be stopped) within 15 s, leave no file outside its own temporary directory, leave
no process behind, reach no network (a listener this test opens on 127.0.0.1 — loopback only)
and leave the test process, its files and its working directory as they were.  Processes are
found by the sandbox uid of the run and by a unique marker in the bootstrap's command line,
which every process of the run inherits.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

import pytest

from hostile_programs import (EXPECTED, HOSTILE, Listener, hostile_source, listener,  # noqa: F401
                              open_dir, sandbox_processes, sandbox_root)
from zoopt.sandbox import programs as sandbox
from zoopt.sandbox.programs import SandboxResult, isolation, run_program, run_programs

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"),
                                reason="the sandbox needs Linux")

TIMEOUT_S = 3.0


def assert_contained(result: SandboxResult, mark: str, outside, listener: Listener,
                     precious, cwd: str, sandbox_root) -> None:
    assert not outside.exists(), f"the program wrote {outside}"
    assert not (precious.parent / f"private-{mark}").exists(), "the program wrote in tmp_path"
    for scratch in ("/tmp", "/var/tmp", "/dev/shm"):
        assert not any(mark in name for name in os.listdir(scratch)), f"a file in {scratch}"
    assert os.listdir(sandbox_root) == [], "the working directory was not removed"
    assert sandbox_processes(mark, result.uid) == [], "a process of the run is still alive"
    assert listener.connections == 0, "the program reached the listener"
    assert precious.read_text() == "precious" and os.getcwd() == cwd


def test_machine_gives_full_isolation():
    """This project's machines run as root on a kernel that allows namespaces (docs/design.md):
    the hostile table below runs with every layer on."""
    probe = isolation()
    if os.getuid() != 0:
        pytest.skip("not root: the user-namespace path is tested where it exists")
    assert probe.ok, probe
    assert probe.network_isolated and probe.pid_namespace and probe.private_tmp, probe
    assert probe.private_filesystem, probe.notes
    assert probe.seccomp, probe.notes
    assert sandbox.UID_RANGE[0] <= probe.uid < sandbox.UID_RANGE[1]


def test_a_correct_program_runs():
    result = run_program("import math\nprint(math.comb(5, 2))", timeout_s=TIMEOUT_S)
    assert result.ok and result.returncode == 0 and result.stdout == "10\n", result
    assert not result.timed_out and result.stderr == ""


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained(name, tmp_path, open_dir, listener, sandbox_root):
    mark = f"zoopt-test-{uuid.uuid4().hex}"
    outside = open_dir / f"outside-{mark}"
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    cwd = os.getcwd()
    start = time.monotonic()
    result = run_program(hostile_source(name, outside, listener.port, mark,
                                        private=tmp_path / f"private-{mark}"),
                         timeout_s=TIMEOUT_S, max_output_bytes=64 * 1024,
                         env={"ZOOPT_TEST_MARK": mark})
    elapsed = time.monotonic() - start
    assert elapsed < 15.0
    assert result.status != "ok" and result.status in EXPECTED.get(name, {"failed"}), result
    assert_contained(result, mark, outside, listener, precious, cwd, sandbox_root)
    if name == "setsid_daemon":  # the daemon would have woken up by now
        time.sleep(1.5)
        assert_contained(result, mark, outside, listener, precious, cwd, sandbox_root)
    if name == "stdout_flood":
        assert result.stdout_truncated and len(result.stdout) == 64 * 1024


@pytest.mark.parametrize("filesystem", ["refuse", "visible"])
@pytest.mark.parametrize("name", ["os_system", "subprocess", "ctypes_system", "reload_os",
                                  "socket_to_listener"])
def test_each_layer_holds_without_seccomp(name, filesystem, tmp_path, open_dir, listener,
                                          sandbox_root):
    """With the syscall filter off (``execve`` and AF_INET allowed), the file-system view and
    the network namespace still contain the program: in the allowlist view there is no shell
    and no ``open_dir`` at all; in the visible one the shell runs and meets a read-only mount."""
    mark = f"zoopt-test-{uuid.uuid4().hex}"
    outside = open_dir / f"outside-{mark}"
    precious = tmp_path / "precious.txt"
    precious.write_text("precious")
    result = run_program(hostile_source(name, outside, listener.port, mark),
                         timeout_s=TIMEOUT_S, seccomp=False, allow_exec=True,
                         filesystem=filesystem, env={"ZOOPT_TEST_MARK": mark})
    assert result.status == "failed" and not result.seccomp, result
    assert result.private_filesystem == (filesystem == "refuse")
    assert_contained(result, mark, outside, listener, precious, os.getcwd(), sandbox_root)
    if name == "socket_to_listener":
        assert "Network is unreachable" in result.stderr, result.stderr
    elif filesystem == "visible":  # the shell ran, as the sandbox uid, and met a read-only mount
        assert "Read-only file system" in result.stderr, result.stderr
    elif name == "subprocess":  # no /bin/sh in the view
        assert "No such file or directory" in result.stderr, result.stderr


def test_the_syscall_filter():
    program = """
import os, socket
for family in (socket.AF_INET, socket.AF_INET6, socket.AF_UNIX):
    try:
        socket.socket(family, socket.SOCK_STREAM)
    except PermissionError:
        pass
    else:
        raise AssertionError(f"a socket of {family}")
try:
    socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)  # it could sendto() a host socket file
except PermissionError:
    pass
else:
    raise AssertionError("a datagram socketpair")
a, b = socket.socketpair()  # a stream pair reaches nothing but itself: allowed
a.sendall(b"x")
assert b.recv(1) == b"x"
try:
    os.execv("/bin/true", ["true"])
except PermissionError:
    print("no exec")
"""
    result = run_program(program, timeout_s=TIMEOUT_S)
    assert result.ok and result.stdout == "no exec\n", result


def test_no_connection_to_a_unix_socket_file_on_the_host(open_dir):
    """A Unix socket file anyone may write (srwxrwxrwx) is reachable through a read-only mount
    and across network namespaces: in the allowlist view it is not there at all; in the
    visible one the syscall filter (no ``socket()``) is what stops it."""
    path = open_dir / "host.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen(1)
    server.settimeout(5)
    program = f"import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect({str(path)!r})\n"
    try:
        result = run_program(program, timeout_s=TIMEOUT_S)
        assert result.status == "failed" and "PermissionError" in result.stderr, result
        unfiltered = run_program(program, timeout_s=TIMEOUT_S, seccomp=False)
        assert unfiltered.status == "failed", unfiltered  # the file is not in the view
        assert "FileNotFoundError" in unfiltered.stderr, unfiltered
        visible = run_program(program, timeout_s=TIMEOUT_S, seccomp=False, filesystem="visible")
        assert visible.ok, visible  # the gap the filter closes there (docs/sandbox.md)
        server.accept()[0].close()
    finally:
        server.close()


def test_the_program_sees_only_its_own_processes_and_files():
    program = """
import os
print(os.getpid(), os.getuid() != 0, sorted(p for p in os.listdir("/proc") if p.isdigit()))
print(os.getcwd(), os.listdir("."), os.listdir("/tmp"))
"""
    result = run_program(program, timeout_s=TIMEOUT_S)
    assert result.ok, result
    first, second = result.stdout.splitlines()
    assert first == "2 True ['1', '2']"  # init and the program: a fresh PID namespace
    assert second == "/tmp/work ['program.py'] ['work']"


def test_the_program_environment_is_only_home_tmpdir_and_env(monkeypatch):
    """The program's environment: HOME and TMPDIR (its working directory) and the caller's
    ``env`` — not the parent's, and not the PATH/LANG the bootstrap starts with."""
    monkeypatch.setenv("ZOOPT_TEST_PARENT_ONLY", "x")
    program = "import os, json; print(json.dumps(dict(os.environ), sort_keys=True))"
    result = run_program(program, timeout_s=TIMEOUT_S, env={"EXTRA": "1"})
    assert result.ok, result
    assert result.stdout == '{"EXTRA": "1", "HOME": "/tmp/work", "TMPDIR": "/tmp/work"}\n'


def test_limits_and_exit_codes():
    assert run_program("import sys; sys.exit(3)", timeout_s=TIMEOUT_S).returncode == 3
    result = run_program("raise ValueError('boom')", timeout_s=TIMEOUT_S)
    assert result.status == "failed" and result.returncode == 1
    assert result.stderr.startswith("Traceback") and "ValueError: boom" in result.stderr
    assert 'File "program.py", line 1' in result.stderr and "boot.py" not in result.stderr
    big_file = "open('big', 'wb').write(b'x' * (2 << 20))"
    assert run_program(big_file, timeout_s=TIMEOUT_S, file_mb=1).status == "failed"
    assert run_program(big_file, timeout_s=TIMEOUT_S, file_mb=4).ok
    signalled = run_program("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
                            timeout_s=TIMEOUT_S)
    assert signalled.status == "failed" and signalled.returncode == -11


def test_stderr_is_capped_too():
    result = run_program("import sys\nwhile True: sys.stderr.write('e' * 4096)",
                         timeout_s=TIMEOUT_S, max_output_bytes=10_000)
    assert result.status == "output_limit" and result.stderr_truncated
    assert len(result.stderr) == 10_000


def test_cancel_stops_a_run_and_leaves_nothing(sandbox_root):
    mark = f"zoopt-test-{uuid.uuid4().hex}"
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    start = time.monotonic()
    result = run_program("while True: pass", timeout_s=30, cancel=cancel,
                         env={"ZOOPT_TEST_MARK": mark})
    assert result.status == "cancelled" and time.monotonic() - start < 5
    assert sandbox_processes(mark, result.uid) == [] and os.listdir(sandbox_root) == []


def test_network_and_filesystem_modes_are_checked():
    with pytest.raises(ValueError, match="network"):
        run_program("pass", network="allow")
    with pytest.raises(ValueError, match="filesystem"):
        run_program("pass", filesystem="allow")
    with pytest.raises(ValueError, match="no_such_package_zoopt"):
        run_program("pass", packages=["no_such_package_zoopt"])
    with pytest.raises(ValueError, match="packages"):
        run_program("pass", packages=["numpy"], filesystem="visible")


def test_fallback_without_namespaces_still_kills_daemons(tmp_path, open_dir, sandbox_root):
    """``namespaces=False`` (what a kernel that refuses them gives): a subreaper sweep, not
    the PID namespace, kills the setsid daemon; the run is recorded as not isolated, and
    ``network="refuse"`` would not have run it at all."""
    mark = f"zoopt-test-{uuid.uuid4().hex}"
    source = hostile_source("setsid_daemon", open_dir / "outside", 1, mark)
    refused = run_program(source, timeout_s=TIMEOUT_S, namespaces=False)
    assert refused.status == "refused" and not refused.network_isolated
    no_view = run_program(source, timeout_s=TIMEOUT_S, namespaces=False, network="warn")
    assert no_view.status == "refused" and not no_view.private_filesystem  # filesystem="refuse"
    with pytest.warns(RuntimeWarning, match="network"), \
            pytest.warns(RuntimeWarning, match="every file any user may read"):
        result = run_program(source, timeout_s=TIMEOUT_S, namespaces=False, network="warn",
                             filesystem="warn", env={"ZOOPT_TEST_MARK": mark})
    assert result.status == "failed" and not result.pid_namespace, result
    assert sandbox_processes(mark, result.uid) == []
    time.sleep(1.5)
    assert sandbox_processes(mark, result.uid) == []
    assert not (open_dir / "outside").exists()  # killed before it woke up


def test_run_programs_keeps_order_and_a_batch_deadline(sandbox_root):
    sources = [f"print({i})" for i in range(4)] + ["while True: pass"] * 2
    start = time.monotonic()
    results = run_programs(sources, workers=2, deadline_s=4.0, timeout_s=30)
    assert time.monotonic() - start < 10
    assert [r.stdout for r in results[:4]] == [f"{i}\n" for i in range(4)]
    assert all(r.status in ("cancelled", "timeout") for r in results[4:]), results[4:]
    assert os.listdir(sandbox_root) == []
    envs = [{"X": "a"}, {"X": "b"}]
    results = run_programs(["import os; print(os.environ['X'])"] * 2, workers=2, envs=envs)
    assert [r.stdout for r in results] == ["a\n", "b\n"]
