"""Reward functions for ``--objective tests/trl_rewards.py:NAME``: TRL's own, unchanged, and a broken one."""

from trl.rewards import think_format_reward  # noqa: F401  (re-exported as TRL ships it)


def always_raises(prompts, completions, **columns):
    """A reward with a bug: it fails on every completion."""
    raise ValueError("my reward is broken: no 'solution' column")
