"""Calls with a hard deadline: a small pool of worker processes (:mod:`.pool`) that kills and
replaces a worker whose call runs past its time (math answer checks use it)."""

from .pool import DeadlinePool

__all__ = ["DeadlinePool"]
