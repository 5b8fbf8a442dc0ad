"""Calls with a hard deadline: a small pool of worker processes (:mod:`.pool`) that kills and
replaces a worker whose call runs past its time (math answer checks use it), on the worker
process of :mod:`.process` — which the sandbox's judge pool uses too."""

from .pool import DeadlinePool

__all__ = ["DeadlinePool"]
