"""A dataset's tests as units, with comparisons that do not let ``True`` pass for ``1``.

Standard library only (the judge worker loads it by path; :mod:`zoopt.sandbox.judged_tests` imports
it to count units).  Two shapes of test code, both trusted (the dataset's, never the model's):

* :func:`statement_units` — a list of tests, each Python statements (MBPP's
  ``assert f(x) == y``): test ``i`` becomes ``with _zoopt_test(i): <its statements>``; a test
  that does not parse becomes a unit that fails.
* :func:`check_units` — HumanEval's ``def check(candidate): ...``: each top-level statement of
  ``check``'s body that contains an ``assert`` becomes ``with _zoopt_test(i): <statement>``;
  the other statements (imports, helper values) run as they are, in order.

In every ``assert``, each comparison that uses ``==``, ``!=``, ``in`` or ``not in`` is rewritten
to call :func:`compare` (chains keep Python's left-to-right, short-circuit evaluation):

* :func:`strict_equal` — equal values of the same exact type, recursively through lists,
  tuples, dicts (keys too) and sets; ``bool`` equals only ``bool`` (``True`` is not ``1``), a
  list is never a tuple, a set never a frozenset; ``int``, ``float`` and ``complex`` compare by
  value (``== 240`` accepts ``240.0``, as the dataset's own ``==`` does); a value of any other type
  (a ``Fraction`` the test built) compares as Python compares it.
* membership (``in``) in a list, tuple, set, frozenset or dict keys is "some element is
  strictly equal"; in a ``str`` or ``bytes`` it is Python's substring test.

Everything else in the test (``math.isclose``, ``abs(a - b) < eps``, ``<``, ``is``) is the
dataset's code, run unchanged.
"""

import ast
import operator

UNIT = "_zoopt_test"
COMPARE = "_zoopt_compare"
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.In: "in", ast.NotIn: "not in", ast.Lt: "<",
        ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Is: "is", ast.IsNot: "is not"}
_STRICT = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
_NUMBERS = (int, float, complex)
_PLAIN = frozenset((type(None), bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict))


def statement_units(tests):
    """``(source, number of units)`` for a list of test snippets (see the module doc)."""
    body = []
    for i, test in enumerate(tests):
        try:
            statements = ast.parse(test).body or [ast.Pass()]
        except (SyntaxError, ValueError):
            statements = ast.parse("raise SyntaxError('this test does not parse')").body
        body.append(_unit(i, [_Strict().visit(s) for s in statements]))
    return _unparse(body), len(tests)


def check_units(test_code, function="check"):
    """``(source, number of units)`` for HumanEval-style test code; ``check``'s top-level
    statements that contain an ``assert`` are the units (none: 0, and the caller makes the
    call of ``check`` one unit)."""
    tree = ast.parse(test_code)
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            body = []
            for statement in node.body:
                if any(isinstance(n, ast.Assert) for n in ast.walk(statement)):
                    body.append(_unit(count, [_Strict().visit(statement)]))
                    count += 1
                else:
                    body.append(statement)
            node.body = body
    return _unparse(tree.body), count


def _unit(i, statements):
    return ast.With(items=[ast.withitem(ast.Call(ast.Name(UNIT, ast.Load()), [ast.Constant(i)], []))],
                    body=statements)


def _unparse(body):
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=body, type_ignores=[])))


class _Strict(ast.NodeTransformer):
    """Rewrites the comparisons inside ``assert`` statements (see the module doc)."""

    def __init__(self):
        self.in_assert = False

    def visit_Assert(self, node):
        self.in_assert = True
        node.test = self.visit(node.test)
        self.in_assert = False
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if not self.in_assert or not any(isinstance(op, _STRICT) for op in node.ops):
            return node
        steps = [ast.Tuple([ast.Constant(_OPS[type(op)]),
                            ast.Lambda(ast.arguments([], [], None, [], [], None, []), right)], ast.Load())
                 for op, right in zip(node.ops, node.comparators)]
        if len(steps) == 1:  # eager, as Python evaluates a single comparison
            return ast.Call(ast.Name(COMPARE, ast.Load()),
                            [node.left, ast.Constant(_OPS[type(node.ops[0])]), node.comparators[0]], [])
        return ast.Call(ast.Name(COMPARE + "_chain", ast.Load()), [node.left, ast.List(steps, ast.Load())], [])


def strict_equal(a, b):
    """``a == b`` with exact types (see the module doc)."""
    ta, tb = type(a), type(b)
    if ta not in _PLAIN or tb not in _PLAIN:
        return a == b
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta in _NUMBERS and tb in _NUMBERS:
        return a == b
    if ta is not tb:
        return False
    if ta is list or ta is tuple:
        return len(a) == len(b) and all(strict_equal(x, y) for x, y in zip(a, b))
    if ta is dict:
        if len(a) != len(b):
            return False
        keys = {k: k for k in b}
        return all(k in keys and strict_equal(k, keys[k]) and strict_equal(v, b[k]) for k, v in a.items())
    if ta is set or ta is frozenset:
        if len(a) != len(b):
            return False
        members = {x: x for x in b}
        return all(x in members and strict_equal(x, members[x]) for x in a)
    return a == b


def strict_contains(container, item):
    """``item in container`` with :func:`strict_equal` for lists, tuples, sets and dicts."""
    kind = type(container)
    if kind is list or kind is tuple:
        return any(strict_equal(item, x) for x in container)
    if kind is set or kind is frozenset or kind is dict:
        if item not in container:
            return False
        members = {x: x for x in container}
        return strict_equal(item, members[item])
    return item in container


def compare(left, op, right):
    """``left op right`` with the strict rules for ``==``, ``!=``, ``in``, ``not in``."""
    if op == "==":
        return strict_equal(left, right)
    if op == "!=":
        return not strict_equal(left, right)
    if op == "in":
        return strict_contains(right, left)
    if op == "not in":
        return not strict_contains(right, left)
    return _PYTHON[op](left, right)


def compare_chain(left, steps):
    """A chained comparison ``left op1 b op2 c ...``: ``steps`` are ``(op, thunk)`` pairs,
    evaluated left to right until one comparison is false."""
    for op, thunk in steps:
        right = thunk()
        if not compare(left, op, right):
            return False
        left = right
    return True


_PYTHON = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
           "is": operator.is_, "is not": operator.is_not}
HELPERS = {COMPARE: compare, COMPARE + "_chain": compare_chain}
