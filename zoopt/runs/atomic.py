"""Write a directory or a file so that it appears whole or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_directory(directory: str | Path) -> Iterator[Path]:
    """Yield a temp directory beside ``directory``; on success rename it into place.

    An existing ``directory`` is replaced (moved aside, then deleted); on any error the temp
    directory is removed and ``directory`` is left as it was.
    """
    directory = Path(directory).absolute()
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        yield tmp
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            os.replace(directory, old / directory.name)
            os.replace(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@contextmanager
def atomic_file(path: str | Path) -> Iterator[Path]:
    """Yield ``<path>.tmp`` to write; on success rename it onto ``path``.

    A kill or an error leaves ``path`` as it was (the old file, or none), never half a file; on
    an error the temporary file is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> Path:
    """``Path(path).write_text(text)``, whole or not at all (:func:`atomic_file`)."""
    with atomic_file(path) as tmp:
        tmp.write_text(text)
    return Path(path)
