"""Tests as units with strict comparisons (zoopt/sandbox/strict_tests.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from zoopt.sandbox.strict_tests import (HELPERS, UNIT, check_units, compare_chain, statement_units,
                                      strict_contains, strict_equal)

EQUAL = [(1, 1), (1, 1.0), (2.0, 2), (1 + 0j, 1), ("a", "a"), ([1, (2,)], [1, (2,)]),
         ({1: [True]}, {1: [True]}), ({(1, "a")}, {(1, "a")}), (None, None), (Fraction(1, 2), 0.5)]
NOT_EQUAL = [(True, 1), (1, True), (False, 0), (0.0, False), ([1], (1,)), ((1,), [1]),
             ({1: True}, {1: 1}), ({True: 1}, {1: 1}), ({1}, frozenset({1})), ({1, 2}, {1, 3}),
             ([True], [1]), ("1", 1), (b"a", "a"), (None, 0), (float("nan"), float("nan"))]


@pytest.mark.parametrize("a, b", EQUAL, ids=repr)
def test_strictly_equal(a, b):
    assert strict_equal(a, b) and strict_equal(b, a)


@pytest.mark.parametrize("a, b", NOT_EQUAL, ids=repr)
def test_not_strictly_equal(a, b):
    assert not strict_equal(a, b) and not strict_equal(b, a)


def test_membership():
    assert strict_contains([1, 2], 1) and not strict_contains([1, 2], True)
    assert not strict_contains({1}, True) and strict_contains({1: 2}, 1)
    assert strict_contains("abc", "bc") and not strict_contains((0,), False)


def run_units(source: str, namespace: dict) -> dict:
    """``{unit: passed}`` after running ``source`` with a recording unit context."""
    outcomes = {}
    exec(source, {UNIT: lambda i: _Recorder(outcomes, i), **HELPERS, **namespace})
    return outcomes


def test_statement_units_rewrite_only_the_asserts_comparisons():
    source, count = statement_units(["assert f() == 1", "x = f() == 1\nassert x",
                                     "assert f() in [1, 2]", "assert 0 < f() != True < 2",
                                     "assert f(", "assert f() is True"])
    assert count == 6 and source.count(f"with {UNIT}(") == 6
    # f() returns True: strict in the asserts, Python's == outside them (the second test)
    assert run_units(source, {"f": lambda: True}) == {0: False, 1: True, 2: False, 3: False,
                                                      4: False, 5: True}


def test_a_chain_evaluates_lazily_left_to_right():
    calls = []

    def value(x):
        calls.append(x)
        return x

    assert not compare_chain(value(1), [("==", lambda: value(2)), ("==", lambda: value(3))])
    assert calls == [1, 2]
    assert compare_chain(1, [("<", lambda: 2), ("!=", lambda: 3), ("not in", lambda: [4])])


def test_check_units_are_the_top_level_statements_with_an_assert():
    code = ("def check(candidate):\n    import math\n    assert candidate(1) == 1\n"
            "    for i in range(3):\n        assert candidate(i) == i\n    x = 2\n"
            "    assert math.isclose(candidate(x), 2.0)\n\ndef helper():\n    assert False\n")
    source, count = check_units(code)
    assert count == 3
    outcomes = run_units(source + "\ncheck(lambda v: True if v == 1 else v)\n", {})
    assert outcomes == {0: False, 1: False, 2: True}  # True is not 1; the loop's first call is True


class _Recorder:
    def __init__(self, outcomes, i):
        self.outcomes, self.i = outcomes, i

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.outcomes[self.i] = kind is None
        return True
