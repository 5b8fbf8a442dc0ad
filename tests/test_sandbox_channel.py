"""The sandbox's ``channel`` (zoopt/sandbox/programs.py): the program gets one end of a
socketpair as fd 3 and no other descriptor; the peer sees end-of-file exactly when the
program's processes are gone; every isolation layer stays in place."""

from __future__ import annotations

import socket
import threading
import time

from zoopt.sandbox.programs import run_program

FDS = "import os\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))\n"


def test_the_program_gets_fd_3_and_nothing_else():
    ours, theirs = socket.socketpair()
    ours.sendall(b"ping")
    program = FDS + "import os\nos.write(3, os.read(3, 4).upper())\n"
    result = run_program(program, timeout_s=5, channel=theirs)
    assert result.ok and result.stdout == "[0, 1, 2, 3, 4]\n", result  # 4: listdir's own
    assert result.seccomp and result.network_isolated and result.pid_namespace
    assert theirs.fileno() == -1  # closed in the parent once the child held it
    assert ours.recv(16) == b"PING" and ours.recv(16) == b""
    ours.close()
    assert run_program(FDS, timeout_s=5).stdout == "[0, 1, 2, 3]\n"  # without a channel: 3 is listdir's


def test_end_of_file_comes_when_the_program_and_its_children_are_gone():
    """A forked child that keeps fd 3 open dies with the namespace: the peer is never left
    waiting on a program that is over."""
    ours, theirs = socket.socketpair()
    program = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\ntime.sleep(0.3)\n"
    got = {}
    runner = threading.Thread(target=lambda: got.setdefault("result", run_program(program, timeout_s=5,
                                                                                   channel=theirs)))
    start = time.monotonic()
    runner.start()
    assert ours.recv(16) == b""
    waited = time.monotonic() - start
    runner.join()
    assert got["result"].ok and waited < 4.0
    ours.close()


def test_the_filter_still_refuses_new_sockets_with_a_channel():
    ours, theirs = socket.socketpair()
    program = "import socket\ntry:\n    socket.socket()\nexcept PermissionError:\n    print('refused')\n"
    result = run_program(program, timeout_s=5, channel=theirs)
    assert result.ok and result.stdout == "refused\n", result
    ours.close()
