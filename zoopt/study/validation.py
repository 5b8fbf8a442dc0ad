"""The validation split of the tuning stage, carved from an objective's train split.

``ValidationSplit(objective, objective_args, n_validation)`` wraps the objective ``O`` named by
``objective`` (a registered name or ``module:attr``):

    train = O.train[n_validation:]      test = O.train[:n_validation]

so a tuning run trains on the rest of train and is scored ("test", the split every evaluation
reads) on the first ``n_validation`` train problems — never on ``O``'s held-out problems.  It
is reached as the objective ``zoopt.study.validation:ValidationSplit`` with those three
``objective_args``, so a sweep trial (a separate process or not) builds it by name.  The
reward, answers, success threshold and system prompt are ``O``'s.
"""

from __future__ import annotations

from ..config import ConfigError
from ..objective import Objective, check_split, load_objective, load_split

TARGET = "zoopt.study.validation:ValidationSplit"


class ValidationSplit(Objective):
    """See the module docstring."""

    def __init__(self, objective: str, objective_args: dict | None = None, n_validation: int = 32) -> None:
        if isinstance(n_validation, bool) or not isinstance(n_validation, int) or n_validation < 1:
            raise ConfigError(f"tuning.validation must be an integer ≥ 1, got {n_validation!r}")
        self.inner = load_objective(objective, **(objective_args or {}))
        size = self.inner.split_size("train")
        if size is not None and size <= n_validation:
            raise ConfigError(f"tuning.validation: {n_validation} problems leave none of the {size} train "
                              f"problems of {objective!r} to train on")
        self.n_validation = n_validation
        self.name = f"{self.inner.name}-validation"
        self.success_threshold = self.inner.success_threshold
        self.system_prompt = self.inner.system_prompt
        self._rows = {}

    def _train_rows(self):
        if "train" not in self._rows:
            self._rows["train"] = load_split(self.inner, "train")
        return self._rows["train"]

    def split_size(self, split: str) -> int | None:
        check_split(split)
        if split == "test":
            return self.n_validation
        return len(self._train_rows()) - self.n_validation

    def dataset(self, split: str, n: int | None = None):
        check_split(split)
        rows = self._train_rows()
        lo, hi = (0, self.n_validation) if split == "test" else (self.n_validation, len(rows))
        if n is not None:
            hi = min(hi, lo + int(n))
        return rows.select(range(lo, hi))

    def __call__(self, prompts, completions, **columns):
        return self.inner(prompts, completions, **columns)

    def extract_answer(self, completion: str):
        return self.inner.extract_answer(completion)

    def gold_answer(self, row: dict):
        return self.inner.gold_answer(row)

    def is_correct(self, rewards):
        return self.inner.is_correct(rewards)
