"""A :class:`zoopt.deadline.pool.DeadlinePool` worker, run by path (never imported).

``python worker.py MODULE_FILE FUNCTION READ_FD WRITE_FD``: load the module file on its own
(not through its package, so the worker imports only what that file imports), send
``("ready",)`` (the pool then caps its memory), then answer each ``(job, args)`` with
``(job, "ok", FUNCTION(*args))`` or ``(job, "error", one line)`` until the pipe closes.
"""

import importlib.util
import sys
from multiprocessing.connection import Connection


def main(path: str, function: str, read_fd: int, write_fd: int) -> None:
    inbox, outbox = Connection(read_fd, writable=False), Connection(write_fd, readable=False)
    spec = importlib.util.spec_from_file_location("_zoopt_deadline_target", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, function)
    outbox.send(("ready",))
    while True:
        try:
            job, args = inbox.recv()
        except (EOFError, OSError):
            return
        try:
            outbox.send((job, "ok", fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - the worker reports whatever happened
            text = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            try:
                outbox.send((job, "error", text))
            except (OSError, ValueError):
                return


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
