"""Time limits for calls into user code: :func:`call_with_timeout` (the reward guard's timer)
and :func:`guard_time_left` (how long a reward may still work before that timer fires).

Core and dependency-free: the reward guard (:mod:`zoopt.rewards.guard`), objectives that bound
their own checks, and the objectives' deadline pool use it.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable


class _Timeout(BaseException):
    """Raised by our SIGALRM handler.  A BaseException, so a reward's ``except Exception``
    cannot swallow it."""


def _raise_timeout(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _Timeout()


OK, ERROR, TIMEOUT = "ok", "error", "timeout"  # call_with_timeout's statuses


def _call_in_main_thread(fn: Callable[[], Any], timeout_s: float) -> tuple[str, Any]:
    """Run ``fn()`` under ``ITIMER_REAL``; restore the previous SIGALRM handler and timer.

    If an outer timer was running, ours is shortened to its remaining time and the outer timer
    is re-armed afterwards with whatever it had left (at least 1 µs, so it still fires).
    """
    previous_handler = signal.getsignal(signal.SIGALRM)
    previous_delay, previous_interval = signal.getitimer(signal.ITIMER_REAL)
    limit = min(timeout_s, previous_delay) if previous_delay > 0 else timeout_s
    start = time.monotonic()
    signal.signal(signal.SIGALRM, _raise_timeout)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, max(limit, 1e-6))
            try:
                return OK, fn()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except _Timeout:
            return TIMEOUT, None
        except Exception as exc:  # the reward's own failure
            return ERROR, exc
    finally:
        signal.signal(signal.SIGALRM, signal.SIG_DFL if previous_handler is None else previous_handler)
        if previous_delay > 0:
            left = previous_delay - (time.monotonic() - start)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-6), previous_interval)


def _call_in_thread(fn: Callable[[], Any], timeout_s: float) -> tuple[str, Any]:
    """Run ``fn()`` in a daemon thread; abandon it (it keeps running) after ``timeout_s``."""
    box: list[tuple[str, Any]] = []

    def target() -> None:
        try:
            box.append((OK, fn()))
        except Exception as exc:
            box.append((ERROR, exc))

    worker = threading.Thread(target=target, name="zoopt-reward", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return box[0] if box else (TIMEOUT, None)


def call_with_timeout(fn: Callable[[], Any], timeout_s: float) -> tuple[str, Any]:
    """``("ok", value)``, ``("error", exception)`` or ``("timeout", None)``.

    From the main thread this uses ``signal.setitimer(ITIMER_REAL)``, which interrupts Python
    code (including ``time.sleep``), and ``KeyboardInterrupt``/``SystemExit`` propagate;
    elsewhere (or without ``setitimer``) the call runs in a daemon thread that is abandoned,
    still running, after ``timeout_s``.  Neither can interrupt one long C call that never
    returns to the interpreter (e.g. ``9**9**9**9``): reward code must bound such work itself.
    """
    if hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread():
        return _call_in_main_thread(fn, timeout_s)
    return _call_in_thread(fn, timeout_s)


def guard_time_left(limit_s: float, margin_s: float = 0.25) -> float:
    """``limit_s``, cut to end ``margin_s`` before an ``ITIMER_REAL`` armed in this (main) thread
    — the reward guard's, :func:`call_with_timeout` — would fire (at least 0.05 s), so that a
    reward bounding its own work finishes before the guard gives up on the whole batch."""
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "getitimer"):
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        if left > 0:
            return min(limit_s, max(left - margin_s, 0.05))
    return limit_s
