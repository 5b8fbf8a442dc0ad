"""Quiet two messages that libraries print on every import on a machine without CUDA.

- torchao ships CUDA-only kernel libraries (``_C_mxfp8…so``, ``_C_cutlass_90a…so``) and logs
  ``Failed to load <file>: …`` at WARNING for each when the machine has no CUDA — transformers
  imports torchao whenever it is installed, so every zoopt command printed them, full space too;
- torch logs, for every ``Enum`` torchao registers as a pytree constant, that the call is
  deprecated (``… is an Enum subclass and is now natively supported by torch.compile …``).

:func:`quiet_library_logs` adds a filter to those two loggers that drops exactly these records
(on a CUDA machine torchao's message is kept: there a kernel that fails to load is news).
Everything else those loggers say still reaches the user.  ``zoopt/__init__.py`` calls it before
anything imports transformers.
"""

from __future__ import annotations

import logging
import re

_TORCHAO_KERNEL = re.compile(r"^Failed to load .*/torchao/_C_\w*(mxfp8|cutlass)\w*[.\w-]*\.so")
_PYTREE_ENUM = re.compile(r"is an Enum subclass and is now natively supported by torch\.compile")


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


class _Drop(logging.Filter):
    def __init__(self, pattern: re.Pattern, when=lambda: True) -> None:
        super().__init__()
        self.pattern, self.when = pattern, when

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.pattern.search(record.getMessage()) and self.when())


def _no_cuda_now() -> bool:  # looked up at call time, so tests can stand in for the machine
    return _no_cuda()


def quiet_library_logs() -> None:
    """Install the two filters (idempotent)."""
    for name, drop in (("torchao", _Drop(_TORCHAO_KERNEL, _no_cuda_now)), ("torch.utils._pytree", _Drop(_PYTREE_ENUM))):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(drop)


__all__ = ["quiet_library_logs"]
