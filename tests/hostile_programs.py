"""Hostile programs and the probes that check a sandboxed run left nothing behind, shared by
tests/test_sandbox.py and tests/test_objectives_code.py.

Each hostile program would exit 0 only if its attack worked.  Network probes use a listener on
127.0.0.1 (loopback only), never any other address.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
from pathlib import Path

import pytest


def _uid_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Uid:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def sandbox_processes(mark: str, uid: int | None) -> list[str]:
    """Live processes of a run: its marker in their command line, or its uid."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if mark.encode() in cmdline or (uid is not None and _uid_of(pid) == uid):
            found.append(pid)
    return found


class Listener:
    """A TCP listener on 127.0.0.1 (loopback only) that counts connections."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (socket.timeout, OSError):
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


HOSTILE = {
    "fork_bomb": """
import os
while True:
    os.fork()
""",
    "infinite_loop": """
while True:
    pass
""",
    "allocate_1tb": """
block = bytearray(10 ** 12)
block[-1] = 1
""",
    "write_outside": """
written = []
for path in ({outside!r}, {private!r}, "/tmp/{mark}", "/var/tmp/{mark}", "/dev/shm/{mark}"):
    try:
        with open(path, "w") as f:
            f.write("escaped")
        written.append(path)
    except OSError:
        pass
assert len(written) == 5, written
""",
    "os_system": """
import os
assert os.system("echo escaped > {outside}") == 0
""",
    "subprocess": """
import subprocess
subprocess.run(["/bin/sh", "-c", "echo escaped > {outside}"], check=True)
""",
    "ctypes_system": """
import ctypes
assert ctypes.CDLL(None).system(b"echo escaped > {outside}") == 0
""",
    "reload_os": """
import importlib, os
os.system = lambda command: 1  # what a monkeypatching guard would do
importlib.reload(os)
assert os.system("echo escaped > {outside}") == 0
""",
    "socket_to_listener": """
import socket
connection = socket.create_connection(("127.0.0.1", {port}), timeout=2)
connection.sendall(b"escaped")
""",
    "setsid_daemon": """
import os, time
child = os.fork()
if child == 0:
    os.setsid()
    if os.fork() == 0:  # the daemon: outlives its parent and the program
        time.sleep(1.0)
        try:
            with open({outside!r}, "w") as f:
                f.write("daemon")
        except OSError:
            pass
        os._exit(0)
    os._exit(0)
os.waitpid(child, 0)
raise SystemExit(1)  # what counts is the daemon; the program itself fails
""",
    "stdout_flood": """
import sys
while True:
    sys.stdout.write("x" * 65536)
""",
    "kill_parent": """
import os, signal
for pid in (os.getppid(), 1, {test_pid}):
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
try:
    os.kill(-1, signal.SIGKILL)
except OSError:
    pass
raise SystemExit(1)
""",
}

EXPECTED = {
    "infinite_loop": {"timeout"},
    "stdout_flood": {"output_limit"},
}


def hostile_source(name: str, outside, port: int, mark: str, private="/root/x") -> str:
    """``outside``: a path in a world-writable directory; ``private``: one in a directory of
    the test's own (root's, 0700)."""
    return HOSTILE[name].format(outside=str(outside), private=str(private), port=port,
                                mark=mark, test_pid=os.getpid())


@pytest.fixture
def listener():
    server = Listener()
    yield server
    server.close()


# the sandbox puts a private tmpfs over these: a directory below one of them is not there inside
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm", "/run")


def visible_in_the_sandbox(path: Path) -> bool:
    """Whether the sandbox's program sees ``path`` as it is here: not below a scratch
    directory it gets a private tmpfs for, and every ancestor traversable by others (the
    sandbox hides a 0700 ancestor, such as ``/root``, under a tmpfs too)."""
    path = path.resolve()
    if any(path == Path(s) or Path(s) in path.parents for s in SCRATCH):
        return False
    return all(p.stat().st_mode & 0o001 for p in path.parents if p != Path(p.anchor))


def open_dir_parent() -> Path:
    """Where to make a world-writable directory the sandbox sees: the checkout's ``.cache``
    when the checkout is visible in the sandbox, else the first visible system directory that
    this process can write (a checkout under /tmp is hidden by the sandbox's private /tmp)."""
    for candidate in (Path(__file__).resolve().parents[1] / ".cache", Path("/var/cache"),
                      Path("/var/lib"), Path("/opt"), Path("/srv")):
        if not visible_in_the_sandbox(candidate.parent / "x"):
            continue
        try:
            candidate.mkdir(exist_ok=True)
        except OSError:
            continue
        if visible_in_the_sandbox(candidate / "x") and os.access(candidate, os.W_OK):
            return candidate
    pytest.skip("no directory outside the sandbox's scratch space is writable here")


@pytest.fixture
def open_dir():
    """A world-writable directory that the sandbox's program sees (as a cache's can be): only
    the read-only remount keeps the unprivileged uid from writing there."""
    path = Path(tempfile.mkdtemp(prefix="sandbox-open-", dir=open_dir_parent()))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def sandbox_root(tmp_path, monkeypatch):
    """The parent's temporary directories go under the test's own tmp_path."""
    root = tmp_path / "sandbox-root"
    root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(root))
    return root
