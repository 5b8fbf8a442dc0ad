r"""The equivalence check that runs inside :class:`zoopt.deadline.pool.DeadlinePool` workers.

Never call these in the main process on model output: sympy can spend unbounded time and
memory on an answer (``5^{5^{5^5}}``, ``100000000!``), and only killing the worker stops it
(:mod:`objectives.math_grader` does that).  math-verify's own time limits are switched off
(``parsing_timeout=None``, ``timeout_seconds=None``): the worker's deadline replaces them.

:func:`equivalent` ``(gold, prediction)``:

1. the gold first (math-verify's ``verify`` is not symmetric): ``parse`` with its default
   extraction (LaTeX and plain expressions); a gold with no ``$``/``\(``/``\[``/``\boxed`` is
   wrapped in ``$...$`` first, since a bare ``\dfrac{9}{7}`` does not parse on its own;
2. the prediction as TRL's ``accuracy_reward`` parses it:
   ``LatexExtractionConfig(normalization_config=NormalizationConfig(units=True),
   boxed_match_priority=0, try_extract_without_anchor=False)``, ``extraction_mode="first_match"``
   (boxed first, no anchor-free extraction); the caller passes only the last ``\boxed{}``;
3. ``verify(gold, prediction)``; then, when it says equal, guards against math-verify's known
   false positives (Math-Verify issue #14 and others):

   * numbers compare **exactly**: two exact numbers (no floating-point literal in either) are
     equal iff their difference is 0 at 50 significant digits, relative to their size
     (``|a − b| ≤ 1e-12·max(|a|, |b|)``; exact rationals compare as rationals), so
     ``1/2^{99}`` is not ``1/2^{98}`` (math-verify rounds both to 0);
   * an equation whose left side has no variable must hold: ``1+1=5`` is not the answer ``5``
     (math-verify reduces an equation to its right-hand side); ``x = 5`` and ``2+3=5`` are.

:func:`gold_parses` ``(gold)``: whether the gold parses to a mathematical object (checked when a
dataset loads).
"""

from __future__ import annotations

import logging

import sympy
from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify

PREDICTION_CONFIG = [LatexExtractionConfig(normalization_config=NormalizationConfig(units=True),
                                           boxed_match_priority=0, try_extract_without_anchor=False)]
DIGITS = 50
RELATIVE_TOLERANCE = 1e-12
_DELIMITERS = ("$", "\\(", "\\[", "\\boxed")

for _name in ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)


def parse_gold(gold: str) -> list:
    """math-verify's parse of a gold answer (see the module doc, step 1)."""
    text = gold if any(d in gold for d in _DELIMITERS) else f"${gold}$"
    return parse(text, parsing_timeout=None)


def gold_parses(gold: str) -> bool:
    """Whether ``gold`` parses to a mathematical object (math-verify falls back to the bare
    string when its parsers fail: ``\\frac{`` stays ``'\\frac{'``; that does not count)."""
    parsed = parse_gold(gold)
    return bool(parsed) and isinstance(parsed[0], sympy.Basic)


def equivalent(gold: str, prediction: str) -> bool:
    """Whether ``prediction`` states the answer ``gold`` (see the module doc)."""
    gold_parsed = parse_gold(gold)
    pred_parsed = parse(prediction, extraction_config=PREDICTION_CONFIG, extraction_mode="first_match",
                        parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return False
    if not verify(gold_parsed, pred_parsed, timeout_seconds=None):
        return False
    return _guards_pass(gold_parsed[0], pred_parsed[0])


def call(name: str, *args):
    """The pool's one target: ``equivalent`` or ``gold_parses`` by name."""
    return {"equivalent": equivalent, "gold_parses": gold_parses}[name](*args)


def _guards_pass(gold, pred) -> bool:
    if not isinstance(gold, sympy.Basic) or not isinstance(pred, sympy.Basic):
        return True
    if isinstance(pred, sympy.Eq) and not isinstance(gold, sympy.Eq):
        if not pred.lhs.free_symbols and not _numbers_equal(pred.lhs, pred.rhs, default=True):
            return False
        pred = pred.rhs
    if isinstance(gold, sympy.Eq) and not isinstance(pred, sympy.Eq):
        gold = gold.rhs
    if _exact_number(gold) and _exact_number(pred):
        return _numbers_equal(gold, pred, default=True)
    return True


def _exact_number(expr) -> bool:
    return isinstance(expr, sympy.Expr) and expr.is_number and not expr.atoms(sympy.Float)


def _numbers_equal(a, b, default: bool) -> bool:
    """``a = b`` for numbers: rationals exactly, others at ``DIGITS`` digits; ``default`` when
    they cannot be evaluated."""
    try:
        if isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr) and a.is_Rational and b.is_Rational:
            return bool(a == b)
        difference = abs(sympy.N(a - b, DIGITS))
        size = max(abs(sympy.N(a, DIGITS)), abs(sympy.N(b, DIGITS)))
        if difference.is_zero:
            return True
        return bool(difference <= RELATIVE_TOLERANCE * size)
    except (TypeError, ValueError, ArithmeticError, AttributeError):
        return default
