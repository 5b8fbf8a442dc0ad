"""Rich progress for long runs: a training bar (step, reward, tokens/s, ETA) and eval bars.

The training bar counts *units*: ES advances it once per population member, GRPO once per
step; each finished step prints the trainer's one-line summary of its record.
"""

from __future__ import annotations

import contextlib

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table


class TrainProgress:
    def __init__(self, console: Console | None = None, enabled: bool = True) -> None:
        self.console = console or Console(stderr=True)
        self.enabled = enabled

    def note(self, text: str) -> None:
        if self.enabled:
            self.console.print(f"[dim]zoopt[/dim] {text}")

    @contextlib.contextmanager
    def train_progress(self, label: str, steps: int, done: int, units_per_step: int, enabled: bool = True):
        """A bar over ``steps`` steps (``done`` already done) of ``units_per_step`` units each
        (none drawn with ``enabled=False``: a finished run has no step to show)."""
        bar = _StepBar(self, steps, done, units_per_step)
        if not (self.enabled and enabled):
            yield bar
            return
        with Progress(TextColumn(f"[bold]{label}[/bold] step {{task.fields[step]}}/{{task.fields[steps]}}"),
                      BarColumn(), MofNCompleteColumn(),
                      TextColumn("reward {task.fields[reward]}  {task.fields[tps]} tok/s"),
                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                      console=self.console, transient=False) as progress:
            bar.attach(progress)
            yield bar

    @contextlib.contextmanager
    def eval_progress(self, label: str):
        if not self.enabled:
            yield None
            return
        with Progress(TextColumn(f"[bold]{label}[/bold] {{task.description}}"), BarColumn(),
                      MofNCompleteColumn(), TimeElapsedColumn(), console=self.console, transient=True) as progress:
            tasks: dict[str, int] = {}

            def callback(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = progress.add_task(stage, total=total)
                progress.update(tasks[stage], completed=done, total=total)

            yield callback

    def compare(self, before: dict | None, after: dict | None) -> None:
        if not self.enabled or not after:
            return
        table = Table(title="held-out evaluation")
        table.add_column("metric")
        table.add_column("before", justify="right")
        table.add_column("after", justify="right")
        table.add_column("Δ", justify="right")
        for key, value in after.items():
            if key.endswith("_ci") or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if not key.startswith(("greedy_", "pass@", "maj@", "mean_reward", "entropy")):
                continue
            b = (before or {}).get(key)
            delta = f"{value - b:+.4f}" if isinstance(b, (int, float)) else ""
            table.add_row(key, f"{b:.4f}" if isinstance(b, (int, float)) else "-", f"{value:.4f}", delta)
        self.console.print(table)


class _StepBar:
    def __init__(self, ui: TrainProgress, steps: int, done: int, units_per_step: int) -> None:
        self.ui, self.steps, self.units = ui, steps, units_per_step
        self.step = self._first = done
        self.progress = None
        self.task = None

    def attach(self, progress: Progress) -> None:
        self.progress = progress
        total = max(1, (self.steps - self.step) * self.units)
        self.task = progress.add_task("train", total=total, step=self.step + 1, steps=self.steps, reward="-", tps="-")

    def member_done(self, i: int, reward: float | None) -> None:
        """One unit (an ES member) is done."""
        if self.progress is not None:
            self.progress.advance(self.task)

    def step_done(self, record: dict, line: str) -> None:
        """A step is done: show its reward and tokens/s, print ``line``."""
        self.step = record["step"] + 1
        if self.progress is not None:
            reward, best, tps = (record.get(k) for k in ("reward_mean", "reward_max", "tokens_per_s"))
            shown = "-" if reward is None else f"{reward:.3f}" + ("" if best is None else f"/{best:.3f}")
            self.progress.update(self.task, step=min(self.step + 1, self.steps), reward=shown,
                                 completed=(self.step - self._first) * self.units,
                                 tps="-" if tps is None else f"{tps:.0f}")
            self.progress.console.print(line)
