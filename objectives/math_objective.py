r"""A math benchmark as an objective: problems with one final answer each, answered in ``\boxed{}``.

:class:`MathBenchmark` is one class for every such set; a subclass names its :class:`Benchmark`
(where the rows come from and which columns hold the question, the gold answer and an id) —
see :mod:`objectives.math_benchmarks` for the registered ones.

Data.  The rows come from ``source`` (:mod:`objectives.sources`: ``auto``, ``hub``,
``offline``; ``data_files`` for local files in the hub's format).  Each row becomes
``prompt`` = ``template.format(question=...)``, ``answer`` = the gold answer as text (a list of
answers, as OlympiadBench's ``final_answer``, joined with ``", "``; a float with an integer
value, as in some AMC copies, written as that integer) and ``id``.  Every gold answer is
checked when the data loads: an empty one, or one math-verify cannot parse, is a one-line
ValueError naming the row — never a silent 0 later.  ``data_source`` says where the rows came
from.  Splits: a problem is in ``test`` iff ``blake2b(name + ":" + question) < test_fraction``
(:mod:`objectives.splits`); evaluation sets default to ``test_fraction = 1.0`` (all of it is
``test``; asking for ``train`` is an error that says so), the training set ``deepscaler`` to
0.01.

Reward (:class:`~objectives.math_grader.MathChecker`): 1.0 when the completion's last
``\boxed{}`` states the gold answer — exactly after normalisation, or by math-verify in a
worker process with TRL's settings and guards — else 0.0.  A check that runs past
``check_timeout_s`` scores 0.0 and is counted as a timeout (``reward_timed_out``).  The batch's
checks end before the reward guard's own timer would fire (``reward_timeout_s``); checks not
done by then score 0.0, as timeouts.  ``extract_answer``/``gold_answer`` give the normalised
boxed answer and gold for majority voting.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable

from zoopt.objective import Objective, check_split, completion_text
from zoopt.registry import resolve_target
from zoopt.rewards.timeouts import guard_time_left

from .boxed import MAX_ANSWER_CHARS, normalize
from .math_grader import MathChecker
from .sources import HubDataset, check_source, first_n, load_hub, load_rows
from .splits import split_of

TEMPLATE = "{question}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."


@dataclass(frozen=True)
class Benchmark:
    """Where a benchmark's rows come from and which of their columns hold what.

    ``hub``: the hub dataset (None: offline only); ``offline``: a lazy ``"module:function"``
    returning the rows of the offline source (None: none); ``question``/``answer``/``id``: the
    rows' columns (``id`` None: rows are named by their index); ``size``: the number of
    problems, for the docs; ``test_fraction``: the default share that is ``test``.
    """

    name: str
    hub: HubDataset | None
    question: str
    answer: str
    id: str | None = None
    offline: str | None = None
    size: int | None = None
    test_fraction: float = 1.0


def gold_text(value: Any) -> str:
    """A gold answer cell as text (see the module doc)."""
    if value is None:
        return ""
    if isinstance(value, (list, tuple)):
        return ", ".join(gold_text(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


_cache: dict[tuple, tuple[list[dict], str]] = {}
_cache_lock = threading.Lock()


class MathBenchmark(Objective):
    """See the module doc; subclasses set ``benchmark``."""

    benchmark: Benchmark

    def __init__(self, source: str = "auto", data_files: Any = None, template: str = TEMPLATE,
                 system_prompt: str | None = None, test_fraction: float | None = None,
                 check_timeout_s: float = 1.0, check_workers: int = 2, check_memory_mb: int | None = 1024,
                 max_answer_chars: int = MAX_ANSWER_CHARS, batch_timeout_s: float = 120.0) -> None:
        spec = self.benchmark
        self.name = spec.name
        self.source = check_source(source, spec.name, spec.offline is not None)
        if data_files is not None and self.source == "offline":
            raise ValueError(f"{spec.name}: data_files replaces the hub; it cannot go with source='offline'")
        if spec.hub is None and (self.source == "hub" or data_files is not None):
            raise ValueError(f"{spec.name} is not on the hub (source='hub' and data_files do not apply); "
                             f"its data is offline")
        try:
            template.format(question="q")
        except (KeyError, IndexError, ValueError, AttributeError) as exc:  # AttributeError: not a str
            raise ValueError(f"template must use only {{question}}: {exc!r}") from None
        fraction = spec.test_fraction if test_fraction is None else float(test_fraction)
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"test_fraction must be in [0, 1], got {test_fraction!r}")
        self.data_files, self.template, self.system_prompt = data_files, template, system_prompt
        self.test_fraction = fraction
        self.batch_timeout_s = float(batch_timeout_s)
        self.checker = MathChecker(timeout_s=check_timeout_s, workers=check_workers,
                                   memory_mb=check_memory_mb, max_answer_chars=max_answer_chars)
        self.data_source: str | None = None

    # -- data --------------------------------------------------------------------------------
    def rows(self) -> list[dict]:
        """Every problem as ``{"question", "answer", "id"}``, golds checked (cached per process)."""
        spec = self.benchmark
        key = (spec, self.source, _freeze(self.data_files))
        with _cache_lock:
            if key not in _cache:
                _cache[key] = self._load()
            rows, self.data_source = _cache[key]
        return rows

    def _load(self) -> tuple[list[dict], str]:
        spec = self.benchmark
        hub: Callable[[], list[dict]] | None = None
        if spec.hub is not None:
            hub = lambda: load_hub(spec.hub, self.data_files)  # noqa: E731
        offline = (lambda: list(resolve_target(spec.offline)())) if spec.offline else None
        if hub is None:
            raw, used = offline(), "offline"
        else:
            raw, used = load_rows(spec.name, self.source, hub, offline)
        if self.data_files is not None and used == "hub":
            used = "files"
        rows = []
        for i, row in enumerate(raw):
            missing = [c for c in (spec.question, spec.answer) if c not in row]
            if missing:
                raise ValueError(f"{spec.name}: row {i} has no column {missing[0]!r} (columns: "
                                 f"{', '.join(sorted(row))})")
            name = f"row {i}" + (f" ({spec.id}={row[spec.id]!r})" if spec.id and spec.id in row else "")
            rows.append({"question": str(row[spec.question]).strip(), "answer": gold_text(row[spec.answer]),
                         "id": str(row[spec.id]) if spec.id and spec.id in row else str(i), "name": name})
        self.checker.check_golds([r["answer"] for r in rows], [r["name"] for r in rows], spec.name)
        return [{k: r[k] for k in ("question", "answer", "id")} for r in rows], used

    def problems(self, split: str) -> list[dict]:
        """The rows of ``split`` (see the module doc), in the source's order."""
        check_split(split)
        return [r for r in self.rows()
                if split_of(f"{self.name}:{r['question']}", self.test_fraction) == split]

    def split_size(self, split: str) -> int:
        """Problems in ``split``."""
        return len(self.problems(split))

    def dataset(self, split: str, n: int | None = None):
        from datasets import Dataset

        rows = self.problems(split)
        if not rows:
            raise ValueError(f"{self.name} has no {split!r} problems at test_fraction={self.test_fraction:g}"
                             + (" (an evaluation set: train on deepscaler or gsm8k, or set "
                                "objective_args.test_fraction below 1)" if split == "train" else ""))
        rows = first_n(rows, n, self.name, split)
        return Dataset.from_dict({
            "prompt": [self.template.format(question=r["question"]) for r in rows],
            "answer": [r["answer"] for r in rows],
            "id": [r["id"] for r in rows],
        })

    # -- reward ------------------------------------------------------------------------------
    def __call__(self, prompts: list, completions: list, answer: list, **_: list) -> list[float]:
        """1.0 or 0.0 per completion against ``answer`` (gold texts; see the module doc)."""
        if len(answer) != len(completions):
            raise ValueError(f"column 'answer' has {len(answer)} values for {len(completions)} completions")
        texts = [completion_text(c) for c in completions]
        golds = [gold_text(a) for a in answer]
        return self.checker.score(golds, texts, deadline_s=guard_time_left(self.batch_timeout_s))

    def take_timeouts(self) -> int:
        return self.checker.take_timeouts()

    def extract_answer(self, completion: str) -> str | None:
        """The normalised content of the last ``\\boxed{}`` (for majority voting), or None."""
        return self.checker.answer(completion)

    def gold_answer(self, row: dict) -> str | None:
        return normalize(gold_text(row["answer"]))


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return None if value is None else str(value)
