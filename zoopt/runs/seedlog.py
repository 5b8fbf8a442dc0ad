"""The seed log: a whole ES run as a base model plus its (seed, coefficient) updates.

``seedlog.json`` holds the base model id, the dtype, the noise config (with the ``stream`` that
drew its bits: a log without one was written by the numpy stream and replays with it), the ES
state, the update rule (``update``: :meth:`zoopt.updates.UpdateRule.to_dict`) and every step's
update.  Under ``sgd`` — and in a log whose header names no rule, written before rules existed —
a record's coefficients are the step α·ĝ; under any other rule they are ĝ's, and replaying hands
the engine ĝ with ``chain(rule, scale(α))`` at that step, so the rule's state (momentum buffer,
moments) is rebuilt exactly as the run built it.  The log is rewritten atomically after each
step (temp file + fsync + rename), so a run killed at any moment leaves either the previous or
the next complete log, never half of one.  Replaying the updates in order onto the base model's
fp32 master reproduces the trained weights bit for bit (``zoopt export`` does exactly that).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..noise import Noise, noise_from_record
from ..types import Update
from ..updates import UpdateRule, is_identity, rule_from_dict, sgd, step_update

FORMAT = "zoopt.seedlog/1"


class SeedLog:
    def __init__(self, path: str | Path, header: dict, updates: list[dict] | None = None) -> None:
        self.path = Path(path)
        self.header = header
        self.updates: list[dict] = list(updates or [])

    @classmethod
    def create(cls, path: str | Path, *, model: str, dtype: str, noise: Noise, es_state: dict,
               config: dict | None = None, rule: UpdateRule | None = None, **extra) -> "SeedLog":
        """A new log; ``rule`` the run's update rule (default ``sgd``); ``extra`` header fields
        (JSON-able): ``base_checksum``, the weights' checksum the run started from, and
        ``objects``, what a run started from Python was given as objects (:mod:`zoopt.workflows.train`)."""
        header = {"format": FORMAT, "model": model, "dtype": dtype, "noise": noise.to_dict(),
                  "update": (rule or sgd()).to_dict(), "es": es_state, "config": config or {}, **extra}
        log = cls(path, header)
        log.save()
        return log

    @classmethod
    def load(cls, path: str | Path) -> "SeedLog":
        path = Path(path)
        if path.is_dir():
            path = path / "seedlog.json"
        if not path.is_file():
            raise FileNotFoundError(f"no seed log at {path}")
        data = json.loads(path.read_text())
        if data.get("format") != FORMAT:
            raise ValueError(f"{path} is not a zoopt seed log (format {data.get('format')!r})")
        updates = data.pop("updates")
        return cls(path, data, updates)

    @property
    def noise(self) -> Noise:
        """The run's noise; a header that names no ``stream`` was written by the numpy stream
        (:func:`~zoopt.noise.noise_from_record`), and replays with it."""
        return noise_from_record(self.header["noise"])

    @property
    def rule(self) -> UpdateRule:
        """The run's update rule; ``sgd`` for a log whose header names none."""
        return rule_from_dict(self.header.get("update", {"kind": "sgd"}))

    @property
    def steps_done(self) -> int:
        return len(self.updates)

    def append(self, step: int, update: Update, stats: dict | None = None) -> None:
        if step != len(self.updates):
            raise ValueError(f"seed log has {len(self.updates)} steps; cannot append step {step}")
        self.updates.append({"step": step, **update.to_dict(), **({"stats": stats} if stats else {})})
        self.save()

    def iter_updates(self):
        """The updates to apply, in order: a record as it is under ``sgd``; else ĝ's coefficients
        with the header's rule and α at the record's step (:func:`zoopt.updates.step_update`)."""
        rule = self.rule
        linear = is_identity(rule)
        lr = None if linear else float(self.header["es"]["lr"])
        for record in self.updates:
            update = Update.from_dict(record)
            yield update if linear else step_update(rule, update, lr, int(record["step"]))

    def replay(self, engine, upto: int | None = None) -> None:
        """Apply the first ``upto`` (default: all) updates to ``engine``, in order.  Where a step
        recorded its master digest (``stats.master``) and the engine reports one after the
        apply (:meth:`~zoopt.engines.base.WeightsEngine.applied_checksum`), they must be equal,
        else a ``RuntimeError`` naming the step."""
        noise = self.noise
        for i, update in enumerate(self.iter_updates()):
            if upto is not None and i >= upto:
                break
            engine.apply(noise, update)
            logged, replayed = self.updates[i].get("stats", {}).get("master"), engine.applied_checksum()
            if logged and replayed and logged != replayed:
                raise RuntimeError(f"seed log step {self.updates[i]['step']}: replayed master {replayed} "
                                   f"differs from the logged {logged}")

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as fh:
            json.dump({**self.header, "updates": self.updates}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
