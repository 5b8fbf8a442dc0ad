r"""The registered math benchmarks: one row of :data:`TABLE` each, one class made by :func:`benchmark_class`.

A row is the class name the registry points at (``objectives/__init__.py``), one line on the
set, and its :class:`~objectives.math_objective.Benchmark`: the registered name, where the rows
come from (a hub dataset and split; ``champ``: offline only, :mod:`objectives.champ`), the
question / answer / id columns, the number of problems, and the share that is ``test``.  All
but ``deepscaler`` are evaluation sets (``test_fraction = 1.0``); ``deepscaler``, the hard
setting's training set, keeps 1 % of its problems (by hash) as ``test`` for held-out evaluation
during training.  None of the hub sets ships in a Python package (docs/objectives.md says what
was searched), so they need the hub once (or ``data_files``); ``champ`` is the offline math set.
"""

from __future__ import annotations

from .math_objective import Benchmark, MathBenchmark
from .sources import HubDataset


def benchmark_class(class_name: str, doc: str, benchmark: Benchmark) -> type[MathBenchmark]:
    """The :class:`MathBenchmark` subclass ``class_name`` that reads ``benchmark`` (the registry builds it
    with the objective's keyword arguments, as any objective class)."""
    return type(class_name, (MathBenchmark,), {"__doc__": doc, "__module__": __name__, "__qualname__": class_name,
                                               "name": benchmark.name, "benchmark": benchmark})


#: class name, what the set is, and its Benchmark(name, source, question, answer, id, offline, size, test_fraction)
TABLE: tuple[tuple[str, str, Benchmark], ...] = (
    ("Math500", "MATH-500 (Lightman et al. 2023's subset of MATH).",
     Benchmark("math500", HubDataset("HuggingFaceH4/MATH-500", "test"), "problem", "answer", id="unique_id", size=500)),
    ("AIME24", "AIME 2024, both papers (I and II).",
     Benchmark("aime24", HubDataset("HuggingFaceH4/aime_2024", "train"), "problem", "answer", id="id", size=30)),
    ("AIME25", "AIME 2025, both papers (I and II).",
     Benchmark("aime25", HubDataset("math-ai/aime25", "test"), "problem", "answer", id="id", size=30)),
    ("AMC23", "AMC 2023 (the 40 problems of the usual evaluation set).",
     Benchmark("amc23", HubDataset("math-ai/amc23", "test"), "question", "answer", id="id", size=40)),
    ("Minerva", "Minerva Math (Lewkowycz et al. 2022's OCWCourses problems).",
     Benchmark("minerva", HubDataset("math-ai/minervamath", "test"), "question", "answer", size=272)),
    ("OlympiadBench", "OlympiadBench's English, text-only, open-ended math competition problems.",
     Benchmark("olympiadbench", HubDataset("math-ai/olympiadbench", "test"), "question", "final_answer", id="id",
               size=675)),
    ("DeepScaleR", "DeepScaleR-Preview (the paper's hard-setting training set).",
     Benchmark("deepscaler", HubDataset("agentica-org/DeepScaleR-Preview-Dataset", "train"), "problem", "answer",
               size=40_315, test_fraction=0.01)),
    ("Champ", "CHAMP's one-number-answer problems, offline (see :mod:`objectives.champ`).",
     Benchmark("champ", None, "problem", "answer", id="id", offline="objectives.champ:numeric_problems", size=85)),
)

#: registered name → its objective class
CLASSES: dict[str, type[MathBenchmark]] = {b.name: benchmark_class(cls, doc, b) for cls, doc, b in TABLE}

# the registry's lazy targets ("objectives.math_benchmarks:Math500", ...): each class bound once, by its name
Math500, AIME24, AIME25, AMC23, Minerva, OlympiadBench, DeepScaleR, Champ = CLASSES.values()

__all__ = ["TABLE", "CLASSES", "benchmark_class", "Math500", "AIME24", "AIME25", "AMC23", "Minerva", "OlympiadBench",
           "DeepScaleR", "Champ"]
