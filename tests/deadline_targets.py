"""Functions for tests/test_deadline_pool.py, loaded by path in pool workers (imports nothing heavy)."""

import time


def echo(value):
    return value


def sleep_then(seconds, value):
    """A real overrun: sleeps past the deadline, then answers (stale if ever read)."""
    time.sleep(seconds)
    return value


def hog(megabytes):
    """Allocates ``megabytes`` (past the worker's memory limit: MemoryError)."""
    return len(bytearray(megabytes * 2**20))


def fail(message):
    raise RuntimeError(message)
