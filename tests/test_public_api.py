"""Every public name that README.md and docs/python.md show still imports.

The names are read from the docs themselves: ``from X import a, b`` and ``import X`` lines of
their Python blocks, and dotted names in backticks that start with a package of this project
(``zoopt.workflows.loop.run_loop``, ``objectives.get``).  A dotted name resolves by importing
its longest importable module prefix and taking the rest as attributes, as a reader would.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_DOCS = [ROOT / "README.md", ROOT / "docs" / "python.md"]
PACKAGES = ("zoopt", "objectives", "estimators", "sweeps")
_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?([\w\s,]+?)\)?\s*(?:#.*)?$", re.M)
_IMPORT = re.compile(r"^\s*import\s+([\w.]+)\s*(?:#.*)?$", re.M)
_DOTTED = re.compile(r"`@?((?:%s)(?:\.\w+)+)(?:\([^`]*\))?`" % "|".join(PACKAGES))


def public_names(text: str) -> set[str]:
    """``module:name`` for from-imports, ``module`` for imports, ``dotted`` for backticked names."""
    names = set()
    for module, imported in _FROM.findall(text):
        if module.split(".")[0] in PACKAGES:
            names |= {f"{module}:{n.strip()}" for n in imported.split(",") if n.strip()}
    names |= {m for m in _IMPORT.findall(text) if m.split(".")[0] in PACKAGES}
    names |= set(_DOTTED.findall(text))
    return names


def resolve(name: str):
    """The object ``name`` names (``module:attr`` or a dotted path); raises when it does not import."""
    if ":" in name:
        module, attr = name.split(":")
        return getattr(importlib.import_module(module), attr)
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ModuleNotFoundError:
            continue
        for attr in parts[end:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(name)


def test_the_reader_finds_every_kind_of_name():
    text = ("```python\nfrom zoopt import ES, fit  # two\nfrom os import path\nimport objectives\n```\n"
            "`zoopt.workflows.loop.run_loop`, `@objectives.register(\"x\")`, not `torch.nn`")
    assert public_names(text) == {"zoopt:ES", "zoopt:fit", "objectives", "zoopt.workflows.loop.run_loop",
                                  "objectives.register"}
    with pytest.raises(AttributeError):
        resolve("zoopt.no_such_name")


def entry_point_groups() -> set[str]:
    """The registries' entry-point groups (``zoopt.estimators``, ...): names the docs cite that
    are not modules."""
    from zoopt import registry

    return {r.entry_point_group for r in vars(registry).values() if isinstance(r, registry.Registry)}


NAMES = sorted({name for doc in PUBLIC_DOCS for name in public_names(doc.read_text())} - entry_point_groups())


def test_the_docs_name_the_public_api():
    assert {"zoopt:ES", "zoopt:fit", "zoopt.engines.hf:HFEngine", "objectives.register", "zoopt.trl:ESTrainer"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_public_name_imports(name):
    assert resolve(name) is not None
