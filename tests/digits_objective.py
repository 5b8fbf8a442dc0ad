"""A toy verifiable reward for the tiny model: the share of digit characters in a completion.

The tiny random model writes ~12 % digits; ES must raise that.  Used by the trainer tests
(also as ``--objective tests/digits_objective.py:Digits`` from a subprocess).
"""

import datasets

from zoopt.objective import Objective, completion_text


class Digits(Objective):
    name = "digits"

    def __call__(self, prompts, completions, **columns):
        texts = [completion_text(c) for c in completions]  # strings, or TRL's chat messages
        return [sum(ch.isdigit() for ch in c) / len(c) if c else 0.0 for c in texts]

    def split_size(self, split):
        return 16

    def dataset(self, split, n=None):
        offset = 0 if split == "train" else 100
        rows = [f"{i} + {i + 1} =" for i in range(offset, offset + 16)]
        return datasets.Dataset.from_dict({"prompt": rows[:n], "answer": ["0"] * len(rows[:n])})
