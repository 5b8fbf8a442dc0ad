"""Evaluate an arithmetic expression from model output without ``eval``.

``safe_eval(expr)`` parses with ``ast.parse(expr, mode="eval")`` and evaluates by walking a
whitelist of node types: ``Expression``, ``BinOp`` with ``Add``/``Sub``/``Mult``/``Div``,
``UnaryOp`` with ``USub``/``UAdd``, and ``Constant`` holding an ``int`` or ``float`` (not
``bool``).  Everything else — names, calls, attributes, subscripts, ``**``, ``//``, ``%``,
strings, lambdas, comparisons — is rejected before anything is computed.

Bounds, each a rejection: at most ``MAX_CHARS`` = 200 characters (checked before parsing, so a
megabyte string or 10 000 nested parentheses cost nothing), an AST depth of at most
``MAX_DEPTH`` = 32 (``1+1+…+1`` with 40 terms is 40 deep), every constant and intermediate value
finite with ``|v| ≤ MAX_ABS`` = 1e12, and no division by zero.  ``+ - *`` on ints stay exact ints
(bounded, so never big); ``/`` is true division, as in Python.  A rejection raises
:class:`UnsafeExpression` (a ValueError); the result is a float.
"""

from __future__ import annotations

import ast
import math
import operator

MAX_CHARS = 200
MAX_DEPTH = 32
MAX_ABS = 1e12

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
           ast.Div: operator.truediv}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos}


class UnsafeExpression(ValueError):
    """The expression is not plain bounded arithmetic (or divides by zero)."""


def safe_eval(expr: str) -> float:
    """The value of the arithmetic expression ``expr``; see the module doc for what is allowed."""
    if not isinstance(expr, str):
        raise UnsafeExpression(f"expected a string, got {type(expr).__name__}")
    if len(expr) > MAX_CHARS:
        raise UnsafeExpression(f"expression has {len(expr)} characters (limit {MAX_CHARS})")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise UnsafeExpression(f"not an expression: {type(exc).__name__}") from None
    return float(_eval(tree.body, 1))


def _eval(node: ast.AST, depth: int) -> int | float:
    if depth > MAX_DEPTH:
        raise UnsafeExpression(f"expression nested deeper than {MAX_DEPTH}")
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnsafeExpression(f"constant {type(value).__name__} not allowed")
        return _bounded(value)
    if isinstance(node, ast.BinOp):
        op = _BINARY.get(type(node.op))
        if op is None:
            raise UnsafeExpression(f"operator {type(node.op).__name__} not allowed")
        left, right = _eval(node.left, depth + 1), _eval(node.right, depth + 1)
        if op is operator.truediv and right == 0:
            raise UnsafeExpression("division by zero")
        return _bounded(op(left, right))
    if isinstance(node, ast.UnaryOp):
        op = _UNARY.get(type(node.op))
        if op is None:
            raise UnsafeExpression(f"operator {type(node.op).__name__} not allowed")
        return _bounded(op(_eval(node.operand, depth + 1)))
    raise UnsafeExpression(f"{type(node).__name__} not allowed")


def _bounded(value: int | float) -> int | float:
    if isinstance(value, float) and not math.isfinite(value):
        raise UnsafeExpression("non-finite value")
    if abs(value) > MAX_ABS:
        raise UnsafeExpression(f"value beyond ±{MAX_ABS:g}")
    return value
