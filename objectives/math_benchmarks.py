r"""The registered math benchmarks: one :class:`~objectives.math_objective.Benchmark` each.

| name | hub id (split) | question / answer columns | problems |
|---|---|---|---|
| ``math500`` | ``HuggingFaceH4/MATH-500`` (test) | ``problem`` / ``answer`` | 500 |
| ``aime24`` | ``HuggingFaceH4/aime_2024`` (train) | ``problem`` / ``answer`` | 30 |
| ``aime25`` | ``math-ai/aime25`` (test) | ``problem`` / ``answer`` | 30 |
| ``amc23`` | ``math-ai/amc23`` (test) | ``question`` / ``answer`` | 40 |
| ``minerva`` | ``math-ai/minervamath`` (test) | ``question`` / ``answer`` | 272 |
| ``olympiadbench`` | ``math-ai/olympiadbench`` (test) | ``question`` / ``final_answer`` (a list) | 675 |
| ``deepscaler`` | ``agentica-org/DeepScaleR-Preview-Dataset`` (train) | ``problem`` / ``answer`` | 40,315 |
| ``champ`` | offline only: ``champ-dataset`` | see :mod:`objectives.champ` | 85 |

All but ``deepscaler`` are evaluation sets (``test_fraction = 1.0``); ``deepscaler``, the hard
setting's training set, keeps 1 % of its problems (by hash) as ``test`` for held-out
evaluation during training.  None of the hub sets ships in a Python package (docs/objectives.md
says what was searched), so they need the hub once (or ``data_files``); ``champ`` is the
offline math set.
"""

from __future__ import annotations

from .math_objective import Benchmark, MathBenchmark
from .sources import HubDataset

MATH500 = Benchmark("math500", HubDataset("HuggingFaceH4/MATH-500", "test"), "problem", "answer",
                    id="unique_id", size=500)
AIME24 = Benchmark("aime24", HubDataset("HuggingFaceH4/aime_2024", "train"), "problem", "answer",
                   id="id", size=30)
AIME25 = Benchmark("aime25", HubDataset("math-ai/aime25", "test"), "problem", "answer", id="id", size=30)
AMC23 = Benchmark("amc23", HubDataset("math-ai/amc23", "test"), "question", "answer", id="id", size=40)
MINERVA = Benchmark("minerva", HubDataset("math-ai/minervamath", "test"), "question", "answer", size=272)
OLYMPIADBENCH = Benchmark("olympiadbench", HubDataset("math-ai/olympiadbench", "test"), "question",
                          "final_answer", id="id", size=675)
DEEPSCALER = Benchmark("deepscaler", HubDataset("agentica-org/DeepScaleR-Preview-Dataset", "train"),
                       "problem", "answer", size=40_315, test_fraction=0.01)
CHAMP = Benchmark("champ", None, "problem", "answer", id="id", offline="objectives.champ:numeric_problems",
                  size=85)


class Math500(MathBenchmark):
    """MATH-500 (Lightman et al. 2023's subset of MATH)."""

    name, benchmark = "math500", MATH500


class AIME24(MathBenchmark):
    """AIME 2024, both papers (I and II)."""

    name, benchmark = "aime24", AIME24


class AIME25(MathBenchmark):
    """AIME 2025, both papers (I and II)."""

    name, benchmark = "aime25", AIME25


class AMC23(MathBenchmark):
    """AMC 2023 (the 40 problems of the usual evaluation set)."""

    name, benchmark = "amc23", AMC23


class Minerva(MathBenchmark):
    """Minerva Math (Lewkowycz et al. 2022's OCWCourses problems)."""

    name, benchmark = "minerva", MINERVA


class OlympiadBench(MathBenchmark):
    """OlympiadBench's English, text-only, open-ended math competition problems."""

    name, benchmark = "olympiadbench", OLYMPIADBENCH


class DeepScaleR(MathBenchmark):
    """DeepScaleR-Preview (the paper's hard-setting training set)."""

    name, benchmark = "deepscaler", DEEPSCALER


class Champ(MathBenchmark):
    """CHAMP's one-number-answer problems, offline (see :mod:`objectives.champ`)."""

    name, benchmark = "champ", CHAMP
