"""Where an objective's data comes from: the dataset hub, local files in the hub's format, or an
offline source shipped in a Python package.

``source`` (an objective argument):

* ``"hub"`` — ``datasets.load_dataset(path, name, split=split)`` with the hub's usual id.  On a
  machine with the hub this downloads once into the ``datasets`` cache (``HF_HOME``); with
  ``HF_HUB_OFFLINE=1`` it reads that cache only.
* ``"offline"`` — the objective's offline source (a package's data files); an objective that
  has none raises :class:`~zoopt.objective.DataUnavailable`.
* ``"auto"`` (default) — the hub (its cache when offline); when that fails, the offline
  source, with a :class:`DataSourceNote` saying so; when there is none either,
  :class:`~zoopt.objective.DataUnavailable` naming both failures.

``data_files`` (an objective argument) replaces the hub download by local files in the hub's
format, read by ``datasets`` (``.parquet``, ``.jsonl``/``.json``, ``.csv``; one file, a list,
or ``{hub split: files}``): the real loading and column mapping, without the hub — what the
tests use, and a way to evaluate a copy of a benchmark kept on disk.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from zoopt.objective import DataUnavailable, ZooptWarning

SOURCES = ("auto", "hub", "offline")
_FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


class DataSourceNote(ZooptWarning):
    """``source="auto"`` could not read the hub and used the offline source instead."""


@dataclass(frozen=True)
class HubDataset:
    """A dataset on the hub: ``load_dataset(path, name, split=split)``; ``license`` for the docs."""

    path: str
    split: str
    name: str | None = None
    license: str = "see the dataset card"


def check_source(source: str, what: str, has_offline: bool) -> str:
    """``source`` if it is one of :data:`SOURCES` (and ``offline`` only where there is one)."""
    if source not in SOURCES:
        raise ValueError(f"{what}: unknown source {source!r}; expected one of {', '.join(SOURCES)}")
    if source == "offline" and not has_offline:
        raise DataUnavailable(f"{what} has no offline source; use source='hub' (or data_files=...)")
    return source


def load_hub(hub: HubDataset, data_files: Any = None, split: str | None = None) -> list[dict]:
    """The rows of ``hub``'s split ``split`` (default ``hub.split``): from the hub, or from
    ``data_files`` in the hub's format."""
    from datasets import load_dataset

    split = split or hub.split
    if data_files is None:
        return load_dataset(hub.path, hub.name, split=split).to_list()
    if isinstance(data_files, dict):
        if split not in data_files:
            raise ValueError(f"data_files has no {split!r} split (has {', '.join(map(str, data_files))})")
        data_files = data_files[split]
    files = [data_files] if isinstance(data_files, (str, Path)) else list(data_files)
    suffixes = {Path(f).suffix.lower() for f in files}
    if len(suffixes) != 1 or next(iter(suffixes)) not in _FORMATS:
        raise ValueError(f"data_files must be .parquet, .jsonl, .json or .csv files of one kind, got {files}")
    return load_dataset(_FORMATS[suffixes.pop()], data_files=[str(f) for f in files], split="train").to_list()


def load_rows(what: str, source: str, hub: Callable[[], list[dict]],
              offline: Callable[[], list[dict]] | None) -> tuple[list[dict], str]:
    """``(rows, "hub" | "offline")`` for ``source`` (see the module doc)."""
    if source == "offline":
        if offline is None:
            raise DataUnavailable(f"{what} has no offline source; use source='hub' (or data_files=...)")
        return offline(), "offline"
    try:
        return hub(), "hub"
    except Exception as exc:  # noqa: BLE001 - whatever the hub client raised, said in one line
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
        if source == "hub":
            raise DataUnavailable(f"{what}: the hub dataset could not be loaded ({reason})") from exc
        if offline is None:
            raise DataUnavailable(f"{what}: the hub dataset could not be loaded ({reason}) and {what} "
                                  f"has no offline source; run once where the hub is reachable, or pass "
                                  f"data_files=...") from exc
        warnings.warn(f"{what}: the hub dataset could not be loaded ({reason}); using the offline source",
                      DataSourceNote, stacklevel=3)
        return offline(), "offline"


def first_n(rows: list, n: int | None, what: str, split: str) -> list:
    """``rows[:n]`` (all for ``None``); asking for more than there are is a one-line ``ValueError``
    naming ``what`` (``zoopt.objective.load_split`` clamps before it asks)."""
    if n is not None and n > len(rows):
        raise ValueError(f"{what} has {len(rows)} {split!r} problems, {n} asked; ask for at most {len(rows)} "
                         "(zoopt.objective.load_split clamps)")
    return rows if n is None else rows[:n]
