"""A judge worker of :class:`zoopt.sandbox.judge_pool.JudgePool`, run by path (never imported).

``python -I judge_worker.py CONTROL_FD``: loads ``trusted_judge.py`` and its two helpers by
path (not the ``objectives`` package, which would import torch) and says ``{"ready": true}``
(the pool then caps its memory: :mod:`zoopt.deadline.process`).  Then, for
each job on the control socket — one byte with a file descriptor attached (``SCM_RIGHTS``: the
judge's end of the channel to a sandboxed program) and a frame with the tests' JSON spec — it
runs :func:`trusted_judge.judge`, sends ``{"unit": [i, outcome]}`` as each unit finishes and
``{"done": notes}`` at the end, and closes the channel.  It exits at end of file.
"""

import json
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import plain_data
    import trusted_judge
finally:
    del sys.path[0]

SPEC_LIMIT = 1 << 26  # the spec comes from the trusted parent; this only guards a broken one


def main(control_fd: int) -> None:
    control = socket.socket(fileno=control_fd)

    def send(message) -> None:
        plain_data.write_frame(control_fd, json.dumps(message).encode())

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
    main(int(sys.argv[1]))
