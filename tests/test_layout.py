"""The import graph of the library: no cycles, and the core reaches its plugins only lazily.

Every module of ``zoopt``, ``estimators``, ``objectives`` and ``sweeps`` is parsed with ``ast``
(nothing is imported).  An edge ``a → b`` is an ``import`` or ``from … import`` in ``a`` — at
module level or inside a function — naming ``b``; relative imports are resolved, and
``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``.
Imports under ``if TYPE_CHECKING:`` (annotations only) never run and are not edges.
A shared helper belongs below all its users, so the graph must have no cycle; and the core
(``zoopt``) reaches the plugin packages only through the registry's lazy ``"module:attr"``
targets (docs/design.md), never by an import.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("zoopt", "estimators", "objectives", "sweeps")
PLUGINS = ("estimators", "objectives", "sweeps")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    module_level: bool


def module_files(root: Path = ROOT, packages=PACKAGES) -> dict[str, Path]:
    """``{dotted module name: file}``; a package is named by its ``__init__.py``."""
    modules = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _known(name: str, modules) -> str | None:
    """``name`` or its longest prefix that is one of ``modules`` (``import a.b.c`` names ``a.b.c``)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def imports_of(name: str, path: Path, modules) -> list[Edge]:
    """The edges out of module ``name`` (see the module docstring); self-imports are dropped."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges: list[Edge] = []

    def add(target: str, node: ast.stmt, module_level: bool) -> None:
        known = _known(target, modules)
        if known is not None and known != name:
            edges.append(Edge(name, known, node.lineno, module_level))

    def visit(node: ast.AST, module_level: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    add(alias.name, child, module_level)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[:len(package.split(".")) - child.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                for alias in child.names:
                    sub = f"{base}.{alias.name}"
                    add(sub if sub in modules else base, child, module_level)
            elif _type_checking_only(child):
                continue
            inside_function = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            visit(child, module_level and not inside_function)

    visit(ast.parse(path.read_text(), filename=str(path)), True)
    return edges


def _type_checking_only(node: ast.AST) -> bool:
    """``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) without an ``else``."""
    if not isinstance(node, ast.If) or node.orelse:
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    return {name: {e.target for e in imports_of(name, path, modules)} for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as a path ``[a, b, …, a]``, or ``None`` when it has none.

    Iterative depth-first search in sorted order (deterministic); a back edge to a node on the
    current path closes a cycle.
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph.get(start, ())))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph.get(nxt, ()))))
    return None


# -- the cycle finder itself ----------------------------------------------------------------
def test_find_cycle_reports_the_cycle_path():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"x": {"y"}, "y": {"z"}, "z": {"y"}}) == ["y", "z", "y"]
    assert find_cycle({"s": {"s"}}) == ["s", "s"]


def test_find_cycle_accepts_a_dag():
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set(), "d": {"a"}}) is None
    assert find_cycle({}) is None


def test_edges_resolve_relative_imports_and_submodules(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .a import thing\n")
    (pkg / "a.py").write_text("import os\nthing = 1\n\ndef later():\n    from .sub import b\n")
    (pkg / "typed.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from .. import a\nfrom ..sub import c\nfrom . import helper\n")
    (pkg / "sub" / "c.py").write_text("import pkg.a\n")
    modules = module_files(tmp_path, ("pkg",))
    edges = {(e.source, e.target, e.module_level) for n, p in modules.items() for e in imports_of(n, p, modules)}
    assert edges == {("pkg", "pkg.a", True), ("pkg.a", "pkg.sub.b", False), ("pkg.sub.b", "pkg.a", True),
                     ("pkg.sub.b", "pkg.sub.c", True), ("pkg.sub.b", "pkg.sub", True), ("pkg.sub.c", "pkg.a", True)}
    assert find_cycle(import_graph(modules)) == ["pkg.a", "pkg.sub.b", "pkg.a"]  # through a function-level import


# -- the library ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def modules():
    found = module_files()
    assert {"zoopt", "zoopt.workflows.run", "zoopt.cli", "sweeps.objective"} <= found.keys()
    return found


def test_the_library_has_no_import_cycle(modules):
    cycle = find_cycle(import_graph(modules))
    assert cycle is None, "import cycle: " + " → ".join(cycle)


def test_the_core_never_imports_a_plugin_package(modules):
    bad = [f"{modules[e.source].relative_to(ROOT)}:{e.line} imports {e.target}"
           + ("" if e.module_level else " (in a function)")
           for name, path in modules.items() if name.split(".")[0] == "zoopt"
           for e in imports_of(name, path, modules) if e.target.split(".")[0] in PLUGINS]
    assert not bad, "the core reaches plugins through registry lazy targets only:\n" + "\n".join(bad)


def test_cli_commands_import_no_other_command(modules):
    commands = {n for n in modules if n.startswith("zoopt.cli.") and n not in ("zoopt.cli.common", "zoopt.cli.__main__")}
    assert {"zoopt.cli.train", "zoopt.cli.grpo", "zoopt.cli.sweep"} <= commands
    bad = [f"{e.source} imports {e.target}" for name in commands for e in imports_of(name, modules[name], modules)
           if e.target in commands | {"zoopt.cli"}]
    assert not bad, "a command module imports another command (shared flags go to zoopt.cli.common): " + "; ".join(bad)


def test_every_package_directory_has_an_init():
    """A directory without ``__init__.py`` is a namespace package, which setuptools'
    ``packages.find`` (pyproject.toml) leaves out of a wheel."""
    dirs = [d for package in PACKAGES for d in [ROOT / package, *(ROOT / package).rglob("*")] if d.is_dir()]
    missing = sorted(str(d.relative_to(ROOT)) for d in dirs
                     if d.name != "__pycache__" and any(d.glob("*.py")) and not (d / "__init__.py").exists())
    assert not missing, f"package directories without __init__.py: {missing}"
