"""Held-out evaluation of an engine on an objective: greedy accuracy, pass@k, maj@k, entropy.

``evaluate`` asks the engine for one greedy completion per problem (``greedy=True``) and, when
``n_samples`` is given, for ``n_samples`` sampled completions per problem (with per-token
entropies).  From those it reports

* greedy accuracy — mean of ``objective.is_correct`` over the greedy completions;
* pass@k — the unbiased estimator of Chen et al. (2021) from ``(n_samples, #correct)``;
* maj@k — majority vote over ``objective.extract_answer`` of the samples against the gold answer
  (``objective.gold_answer(row)`` when the objective has it, else ``str(row["answer"])``), ties
  scored by their expected value (see :mod:`zoopt.metrics.majority`); a sample the reward judged
  correct votes for the gold answer, so equivalent forms the verifier accepts (``\\frac{1}{2}``
  and ``0.5``) are one vote, and maj@k never calls a vote wrong that the reward calls right;
* mean reward over the sampled completions whose reward is not ``None``;
* mean token entropy over all sampled tokens (token-weighted);
* 95 % percentile-bootstrap CIs over problems for greedy accuracy and pass@k.

Per-problem records hold the greedy completion's text unless the objective says its text must not
be published (``objective.publish_text`` False, e.g. GPQA, whose completions may quote the question).

Rewards go through a :class:`zoopt.rewards.scoring.Scorer`: in the shape TRL would pass for the
engine's prompts, under :func:`zoopt.rewards.guard.score`'s per-call time limit (a reward that raises
or hangs scores 0.0 and is counted in ``score_failed``/``score_timed_out``; ``None`` rewards are
kept and counted in ``score_skipped``); the first failure is shown once, and an evaluation in
which every reward failed raises :class:`~zoopt.rewards.scoring.RewardError` unless
``reward_errors="zero"``.
"""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from rich.progress import Progress
from rich.table import Table

from ..engines.base import Completion, Sampling
from ..metrics import bootstrap_ci, maj_at_k, mean_token_entropy, pass_at_k
from ..objective import Objective, load_split
from ..rewards.scoring import Scorer
from ..runs.atomic import write_text_atomic

ProgressFn = Callable[[str, int, int], None]  # (stage, done, total)


@dataclass
class EvalResult:
    """``summary``: flat JSON-able metrics; ``per_problem``: one record per problem."""

    summary: dict
    per_problem: list[dict] = field(default_factory=list)

    def to_json(self, path: str | Path) -> None:
        """Write ``{"summary", "per_problem"}`` (to a temporary file, then renamed: a kill leaves
        either the whole file or none, so a resumed study never reads half of one)."""
        write_text_atomic(path, json.dumps({"summary": self.summary, "per_problem": self.per_problem}, indent=2))

    def to_csv(self, path: str | Path) -> None:
        """Per-problem records, one row each; non-scalar values are JSON-encoded."""
        keys: list[str] = []
        for rec in self.per_problem:
            keys += [k for k in rec if k not in keys]
        with open(path, "w", newline="") as fh:
            writer = csv.DictWriter(fh, fieldnames=keys)
            writer.writeheader()
            for rec in self.per_problem:
                writer.writerow({k: v if v is None or isinstance(v, (str, int, float, bool))
                                 else json.dumps(v) for k, v in rec.items()})

    def table(self):
        """A :class:`rich.table.Table` of the summary metrics with their CIs."""
        table = Table(title=f"evaluation ({self.summary.get('split')}, "
                            f"{self.summary.get('n_problems')} problems)")
        table.add_column("metric")
        table.add_column("value", justify="right")
        table.add_column("95% CI", justify="right")
        for key, value in self.summary.items():
            metric = key.startswith(("greedy_", "pass@", "maj@", "mean_", "entropy"))
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if key.endswith("_ci") or not (metric and numeric):
                continue
            ci = self.summary.get(f"{key}_ci")
            table.add_row(key, f"{value:.4f}", f"[{ci[0]:.4f}, {ci[1]:.4f}]" if ci else "")
        return table


def _answers(objective, texts: list[str]) -> list[str | None] | None:
    """Extracted answers for majority voting, or None when the objective has no answers."""
    try:
        return [objective.extract_answer(x) for x in texts]
    except NotImplementedError:
        return None


def _rows(dataset) -> list[dict]:
    return dataset.to_list() if hasattr(dataset, "to_list") else [dict(r) for r in dataset]


def _generate(engine, prompts: list, sampling: Sampling, batch_size: int | None,
              report: ProgressFn, stage: str) -> list[list[Completion]]:
    """Batches of prompts; batch ``b`` uses sampling seed ``seed + b``."""
    size = batch_size or max(len(prompts), 1)
    out: list[list[Completion]] = []
    for b, start in enumerate(range(0, len(prompts), size)):
        batch = prompts[start:start + size]
        s = Sampling(temperature=sampling.temperature, top_p=sampling.top_p,
                     max_new_tokens=sampling.max_new_tokens, n=sampling.n,
                     seed=sampling.seed + b, logprobs=sampling.logprobs)
        result = engine.generate(batch, s)
        if len(result) != len(batch) or any(len(r) != sampling.n for r in result):
            raise RuntimeError(f"engine returned {[len(r) for r in result]} completions for "
                               f"{len(batch)} prompts × n={sampling.n}")
        out += result
        report(stage, len(out), len(prompts))
    return out


def _rich_progress() -> tuple[ProgressFn, Callable[[], None]]:
    bar = Progress(transient=True)
    bar.start()
    tasks: dict[str, Any] = {}

    def report(stage: str, done: int, total: int) -> None:
        if stage not in tasks:
            tasks[stage] = bar.add_task(stage, total=total)
        bar.update(tasks[stage], completed=done)

    return report, bar.stop


def _ci(values: Sequence[float], seed: int) -> list[float]:
    lo, hi = bootstrap_ci(values, seed=seed)
    return [lo, hi]


def evaluate(engine, objective, *, split: str = "test", n_problems: int | None = 200,
             ks: Sequence[int] = (1,), n_samples: int | None = None, temperature: float = 1.0,
             top_p: float = 1.0, max_new_tokens: int = 64, greedy: bool = True,
             batch_size: int | None = None, seed: int = 0,
             progress: ProgressFn | bool | None = None,
             timeout_s: float = 5.0, reward_errors: str = "raise") -> EvalResult:
    """Evaluate ``engine`` on ``objective.dataset(split, n_problems)``; see the module doc.

    ``n_problems`` larger than the split (``objective.split_size(split)``) evaluates the whole
    split, with a :class:`~zoopt.objective.SplitSizeWarning` (:func:`zoopt.objective.load_split`).

    ``progress``: ``None``, ``True`` (a rich progress bar) or a callable
    ``(stage, done, total)``.  ``timeout_s`` limits each reward call (see
    :func:`zoopt.rewards.guard.score`); ``reward_errors``: see :mod:`zoopt.rewards.scoring`.
    """
    ks = sorted({int(k) for k in ks})
    if n_samples is not None:
        if not (isinstance(n_samples, int) and n_samples >= 1):
            raise ValueError(f"n_samples must be an integer ≥ 1, got n_samples={n_samples!r}")
        if not ks or ks[0] < 1 or ks[-1] > n_samples:
            raise ValueError(f"ks must lie in [1, n_samples={n_samples}], got ks={ks}")
    if not greedy and n_samples is None:
        raise ValueError("nothing to evaluate: greedy=False and n_samples=None")

    stop = None
    if progress is True:
        report, stop = _rich_progress()
    else:
        report = progress or (lambda stage, done, total: None)
    t0 = time.perf_counter()
    try:
        rows = _rows(load_split(objective, split, n_problems, key="eval.n_problems"))
        if not rows:
            raise ValueError(f"objective.dataset({split!r}, {n_problems!r}) is empty")
        prompts = [r["prompt"] for r in rows]
        columns = {c: [r[c] for r in rows] for c in rows[0] if c != "prompt"}
        per_problem = [{"index": i} for i in range(len(rows))]
        summary: dict[str, Any] = {"split": split, "n_problems": len(rows)}
        scorer = Scorer(objective, engine, timeout_s=timeout_s, reward_errors=reward_errors)

        def rewards_of(prompts_, texts_, columns_):
            return scorer.score(prompts_, texts_, columns_).rewards

        if greedy:
            comps = _generate(engine, prompts, Sampling(temperature=0.0,
                              max_new_tokens=max_new_tokens, n=1, seed=seed),
                              batch_size, report, "greedy")
            texts = [c[0].text for c in comps]
            rewards = rewards_of(prompts, texts, columns)
            correct = [bool(x) for x in objective.is_correct(rewards)]
            publish = not isinstance(objective, Objective) or objective.publish_text
            for rec, text, r, ok in zip(per_problem, texts, rewards, correct):
                if publish:
                    rec["greedy_completion"] = text
                rec.update(greedy_reward=r, greedy_correct=ok)
            summary["greedy_accuracy"] = sum(correct) / len(correct)
            summary["greedy_accuracy_ci"] = _ci([float(c) for c in correct], seed)

        if n_samples is not None:
            sampling = Sampling(temperature=temperature, top_p=top_p,
                                max_new_tokens=max_new_tokens, n=n_samples, seed=seed,
                                logprobs=True)
            comps = _generate(engine, prompts, sampling, batch_size, report, "samples")
            flat_prompts = [p for p in prompts for _ in range(n_samples)]
            flat_cols = {c: [v for v in vals for _ in range(n_samples)]
                         for c, vals in columns.items()}
            texts = [c.text for cs in comps for c in cs]
            rewards = rewards_of(flat_prompts, texts, flat_cols)
            correct = [bool(x) for x in objective.is_correct(rewards)]
            entropies = [c.entropies for cs in comps for c in cs if c.entropies is not None]
            for i, (rec, row) in enumerate(zip(per_problem, rows)):
                sl = slice(i * n_samples, (i + 1) * n_samples)
                c = sum(correct[sl])
                gold = objective.gold_answer(row)
                answers = _answers(objective, texts[sl])
                if answers is not None and gold is not None:
                    answers = [gold if ok else a for a, ok in zip(answers, correct[sl])]
                valid = [r for r in rewards[sl] if r is not None]
                rec.update(gold=gold, n_samples=n_samples, n_correct=c,
                           mean_reward=sum(valid) / len(valid) if valid else None,
                           answers=answers)
                for k in ks:
                    rec[f"pass@{k}"] = pass_at_k(n_samples, c, k)
                    rec[f"maj@{k}"] = maj_at_k(answers, gold, k, seed=seed + i) if answers is not None else None
                ents = [e for cm in comps[i] if cm.entropies is not None for e in cm.entropies]
                rec["entropy"] = sum(ents) / len(ents) if ents else None
            valid = [r for r in rewards if r is not None]
            summary["mean_reward"] = sum(valid) / len(valid) if valid else None
            for k in ks:
                vals = [rec[f"pass@{k}"] for rec in per_problem]
                summary[f"pass@{k}"] = sum(vals) / len(vals)
                summary[f"pass@{k}_ci"] = _ci(vals, seed)
            for k in ks:
                votes = [r[f"maj@{k}"] for r in per_problem]
                summary[f"maj@{k}"] = None if None in votes else sum(votes) / len(rows)
            ent = mean_token_entropy(entropies)
            summary["entropy"] = None if math.isnan(ent) else ent
            summary.update(n_samples=n_samples, temperature=temperature, top_p=top_p)

        counts = scorer.finish(f"the {split!r} evaluation")
        summary.update(max_new_tokens=max_new_tokens, seed=seed, **{f"score_{k}": v for k, v in counts.items()},
                       wall_s=time.perf_counter() - t0)
        return EvalResult(summary=summary, per_problem=per_problem)
    finally:
        if stop is not None:
            stop()
