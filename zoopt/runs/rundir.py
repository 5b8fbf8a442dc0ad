"""``RunDir``: the files of one run directory, each read and written in one place.

| file | written by | what |
|---|---|---|
| ``config.yaml`` | every run | the full config the run was started with |
| ``seedlog.json`` | ES runs (:class:`zoopt.runs.seedlog.SeedLog`) | the base model + every update |
| ``base_model/`` | ``zoopt.fit`` on an engine not loaded by name | the weights the seed log replays onto |
| ``metrics.jsonl`` | every step | one JSON record per line, flushed as it is written |
| ``eval_{tag}.json`` | held-out evaluations | ``eval_before.json``, ``eval_after.json`` |
| ``checksum.txt`` | the end of a run | the final working weights' digest |
| ``model/`` | ``export: true`` | an HF directory of the final weights |
| ``checkpoint-N/`` | ``checkpoint_every: k`` | an HF directory of the weights after step N (every k-th) |
| ``training.png`` | the end of a run | reward (and entropy) curves of ``metrics.jsonl`` |
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from ..config import ConfigError
from .atomic import write_text_atomic


class _Member:
    """A fixed file or directory of a run directory: ``run.<attr>`` is the read-only ``Path``
    ``run.path / name`` (a data descriptor, as a ``property`` is)."""

    def __init__(self, name: str, doc: str | None = None) -> None:
        self.name = name
        self.__doc__ = doc or f"``{name}`` of the run directory."

    def __set_name__(self, owner: type, attr: str) -> None:
        self.attr = attr

    def __get__(self, run: "RunDir | None", owner: type | None = None):
        return self if run is None else run.path / self.name

    def __set__(self, run: "RunDir", value) -> None:
        raise AttributeError(f"RunDir.{self.attr} is read-only: it is path / {self.name!r}")


class RunDir:
    """One run directory (it need not exist yet)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # -- paths: each fixed file or directory is ``run.path / name`` (the table above) ------------
    config_path = _Member("config.yaml")
    metrics_path = _Member("metrics.jsonl")
    seedlog_path = _Member("seedlog.json")
    base_model_path = _Member("base_model")
    checksum_path = _Member("checksum.txt")
    model_path = _Member("model")
    training_plot_path = _Member("training.png")
    trainer_state_path = _Member("trainer_state.pt",
                                 "A GRPO run's resumable state (weights, AdamW, step): ``trainer_state.pt``.")

    def checkpoint_path(self, steps_done: int) -> Path:
        return self.path / f"checkpoint-{int(steps_done)}"

    def eval_path(self, tag: str) -> Path:
        return self.path / f"eval_{tag}.json"

    # -- state -----------------------------------------------------------------------------
    def holds_run(self) -> bool:
        """True when a run has started here (a seed log or a metrics log exists)."""
        return self.seedlog_path.exists() or self.metrics_path.exists()

    def refuse_if_used(self, hint: str = "") -> None:
        """A one-line :class:`ConfigError` when the directory already holds a run."""
        if self.holds_run():
            raise ConfigError(f"run_dir {str(self.path)!r} already holds a run{hint}")

    def mkdir(self) -> "RunDir":
        self.path.mkdir(parents=True, exist_ok=True)
        return self

    # -- files -----------------------------------------------------------------------------
    def write_config(self, cfg: dict) -> Path:
        self.mkdir()
        self.config_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return self.config_path

    def read_config(self) -> dict | None:
        """``config.yaml`` as a mapping, or ``None`` when there is none."""
        if not self.config_path.is_file():
            return None
        cfg = yaml.safe_load(self.config_path.read_text())
        return cfg if isinstance(cfg, dict) else None

    def append_metrics(self, record: dict) -> None:
        """Append one record as a line of ``metrics.jsonl`` and flush it."""
        self.mkdir()
        with open(self.metrics_path, "a") as fh:
            fh.write(json.dumps(record) + "\n")
            fh.flush()

    def read_metrics(self) -> list[dict]:
        """Every record of ``metrics.jsonl``, in order (a FileNotFoundError names a missing log)."""
        if not self.metrics_path.is_file():
            raise FileNotFoundError(f"no metrics.jsonl in run directory {str(self.path)!r}")
        return [json.loads(line) for line in self.metrics_path.read_text().splitlines() if line.strip()]

    def keep_metrics_before(self, steps: int) -> None:
        """Drop the records of step ``steps`` and later from ``metrics.jsonl`` (a run resumed from
        a state saved after ``steps`` steps logs them again)."""
        if not self.metrics_path.is_file():
            return
        kept = [r for r in self.read_metrics() if int(r.get("step", -1)) < steps]
        write_text_atomic(self.metrics_path, "".join(json.dumps(r) + "\n" for r in kept))

    def write_eval(self, tag: str, summary: dict) -> Path:
        self.mkdir()
        path = self.eval_path(tag)
        path.write_text(json.dumps(summary, indent=2, default=str))
        return path

    def read_eval(self, tag: str) -> dict | None:
        path = self.eval_path(tag)
        return json.loads(path.read_text()) if path.exists() else None

    def write_checksum(self, checksum: str) -> Path:
        self.mkdir()
        self.checksum_path.write_text(checksum + "\n")
        return self.checksum_path

    def read_checksum(self) -> str | None:
        return self.checksum_path.read_text().strip() if self.checksum_path.exists() else None
