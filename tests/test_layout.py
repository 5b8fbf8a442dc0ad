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
import re
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
    assert {"zoopt", "zoopt.workflows.builders", "zoopt.cli", "sweeps.objective"} <= found.keys()
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


# -- the layout shows the architecture (issue: docs/concepts.md's package map) ----------------
CONCEPTS = ROOT / "docs" / "concepts.md"
# the plugin packages are named by the user's layout, and cli/sweep.py after the command it
# implements: these two singular/plural pairs are the only names one letter apart
NEAR_NAMES_ALLOWED = {frozenset({"objective", "objectives"}), frozenset({"sweep", "sweeps"})}


def group_of(name: str) -> str:
    """The map's unit a module belongs to: a subpackage of ``zoopt`` (``zoopt.engines``), a root
    module of ``zoopt`` (``zoopt.noise``), the package face ``zoopt``, or a plugin package."""
    parts = name.split(".")
    return parts[0] if parts[0] != "zoopt" else ".".join(parts[:2])


def package_map() -> dict[str, set[str]]:
    """``{group: groups it may import}`` from the table under "## Package map" in docs/concepts.md
    (first cell the group in backticks, last cell the groups it may import, or —)."""
    text = CONCEPTS.read_text()
    section = text.split("## Package map", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        rows[cells[0].strip("`")] = set(re.findall(r"`([\w.]+)`", cells[-1]))
    return rows


def test_the_package_map_in_the_docs_matches_the_imports(modules):
    documented = package_map()
    groups = {group_of(n) for n in modules}
    assert groups <= documented.keys(), f"packages missing from docs/concepts.md's map: {sorted(groups - documented.keys())}"
    assert documented.keys() <= groups, f"the map names packages that do not exist: {sorted(documented.keys() - groups)}"
    bad = sorted({f"{group_of(e.source)} imports {group_of(e.target)} ({modules[e.source].relative_to(ROOT)}:{e.line})"
                  for name, path in modules.items() for e in imports_of(name, path, modules)
                  if group_of(e.source) != group_of(e.target)
                  and group_of(e.target) not in documented[group_of(e.source)]})
    assert not bad, "imports the map in docs/concepts.md does not allow:\n" + "\n".join(bad)


def test_no_import_runs_up_into_workflows_or_the_cli(modules):
    """The commands (``zoopt.cli``) sit on top, the workflows under them; below that, nothing
    imports either — but the package face and ``zoopt.trl`` (which hand ``fit``/``optimize`` to
    users) and the ``sweeps`` plugin (which starts runs)."""
    above_workflows = {"zoopt", "zoopt.trl", "zoopt.cli", "zoopt.workflows", "sweeps"}
    bad = [f"{modules[e.source].relative_to(ROOT)}:{e.line} imports {e.target}"
           for name, path in modules.items() for e in imports_of(name, path, modules)
           if (group_of(e.target) == "zoopt.cli" and group_of(name) != "zoopt.cli")
           or (group_of(e.target) == "zoopt.workflows" and group_of(name) not in above_workflows)]
    assert not bad, "upward imports:\n" + "\n".join(bad)


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def test_edit_distance():
    assert [_edit_distance(*p) for p in [("math_check", "math_checker"), ("run", "runs"), ("ray", "run"),
                                         ("abc", "abc"), ("", "ab")]] == [2, 1, 2, 0, 2]


def test_no_two_module_names_differ_by_one_character(modules):
    names = {path.stem if path.name != "__init__.py" else path.parent.name for path in modules.values()}
    names.discard("__main__")
    close = sorted(f"{a} / {b}" for a in names for b in names
                   if a < b and _edit_distance(a, b) == 1 and frozenset({a, b}) not in NEAR_NAMES_ALLOWED)
    assert not close, f"module names one character apart: {close}"


def test_every_module_says_what_it_holds(modules):
    missing = [str(path.relative_to(ROOT)) for path in modules.values()
               if not (ast.get_docstring(ast.parse(path.read_text())) or "").strip()]
    assert not missing, f"modules without a docstring: {missing}"


def test_objectives_holds_only_objectives(modules):
    """Process management (subprocesses, signals, namespaces) lives in ``zoopt.sandbox`` and
    ``zoopt.deadline``; the objectives package only uses them."""
    process_modules = {"subprocess", "ctypes", "multiprocessing", "selectors", "signal"}
    bad = [f"{path.relative_to(ROOT)} imports {alias.name}" for name, path in modules.items()
           if name.split(".")[0] == "objectives"
           for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, (ast.Import, ast.ImportFrom))
           for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
           if alias.name.split(".")[0] in process_modules]
    assert not bad, "\n".join(bad)
    assert {"zoopt.sandbox.programs", "zoopt.sandbox.program_tests", "zoopt.deadline.pool"} <= modules.keys()


def test_engines_are_grouped_by_backend(modules):
    """vLLM and Ray are imported only inside their engine's package, and no flat module of
    ``zoopt/engines/`` carries a backend prefix."""
    assert {"zoopt.engines.vllm", "zoopt.engines.ray"} <= modules.keys()
    flat = [p.name for p in (ROOT / "zoopt" / "engines").glob("*.py") if p.stem.startswith(("vllm", "ray"))]
    assert not flat, flat
    bad = [f"{path.relative_to(ROOT)} imports {alias.name}" for name, path in modules.items()
           for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, (ast.Import, ast.ImportFrom))
           for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])
           if isinstance(node, ast.Import) or not node.level
           for backend in ("vllm", "ray") if alias.name.split(".")[0] == backend
           and not name.startswith(f"zoopt.engines.{backend}")]
    assert not bad, "\n".join(bad)
