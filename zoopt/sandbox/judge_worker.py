"""A judge worker of :class:`zoopt.sandbox.judge_pool.JudgePool`, run by path (never imported).

``python -I judge_worker.py CONTROL_FD MEMORY_MB``: loads ``trusted_judge.py`` and its two
helpers by path (not the ``objectives`` package, which would import torch), limits its address
space to its size now plus ``MEMORY_MB`` (0: no limit) and says ``{"ready": true}``.  Then, for
each job on the control socket — one byte with a file descriptor attached (``SCM_RIGHTS``: the
judge's end of the channel to a sandboxed program) and a frame with the tests' JSON spec — it
runs :func:`trusted_judge.judge`, sends ``{"unit": [i, outcome]}`` as each unit finishes and
``{"done": notes}`` at the end, and closes the channel.  It exits at end of file.
"""

import json
import os
import resource
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import plain_data
    import trusted_judge
finally:
    del sys.path[0]

SPEC_LIMIT = 1 << 26  # the spec comes from the trusted parent; this only guards a broken one


def main(control_fd: int, memory_mb: int) -> None:
    control = socket.socket(fileno=control_fd)

    def send(message) -> None:
        plain_data.write_frame(control_fd, json.dumps(message).encode())

    if memory_mb > 0:
        with open("/proc/self/statm") as fh:
            size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = size + memory_mb * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    send({"ready": True})
    while True:
        try:
            marker, fds, _, _ = socket.recv_fds(control, 1, 1)
            if not marker:
                return
            spec = json.loads(plain_data.read_frame(control_fd, SPEC_LIMIT))
        except (OSError, EOFError, ValueError):
            return
        if len(fds) != 1:
            for fd in fds:
                os.close(fd)
            send({"done": ["the job came without its channel"]})
            continue
        try:
            notes = trusted_judge.judge(spec, fds[0], lambda i, outcome: send({"unit": [i, outcome]}))
        finally:
            os.close(fds[0])
        send({"done": notes})


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
