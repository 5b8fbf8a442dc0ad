"""The docs are tested: every fenced ``python`` block of README.md and docs/*.md runs, and every
``*.md`` a file cites exists.  Every ``zoopt`` command line they show runs too, on the tiny
model: ``tests/test_doc_commands.py``.

**Python blocks.** Each block runs as a script (``__name__ == "__main__"``) in a fresh namespace,
in a temporary working directory, with two aids:

* a ``<!-- test-setup ... -->`` HTML comment right above the fence is Python run first in the
  same namespace — it defines what the surrounding prose has already introduced (an ``engine``,
  a ``noise``); ``<!-- test-setup [vllm] ...`` marks the block ``vllm`` (it runs in
  ``.venv-vllm`` with ``pytest -m vllm``, as ``make test`` does);
* the string literal ``"smollm2-135m"`` in a block becomes the name ``DOCS_MODEL``, which is
  ``"tiny"`` unless the setup sets it, so blocks written for the embedded model run in seconds.

A block that raises fails its test with the doc's file and line in the traceback;
``test_a_broken_block_fails`` shows that on a fixture with a deliberately broken block.
"""

from __future__ import annotations

import re
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
EMBEDDED = '"smollm2-135m"'

_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SETUP = re.compile(r"<!--\s*test-setup(?P<flags>\s*\[[^\]]*\])?[^\n]*\n(?P<code>.*)-->\Z", re.S)


@dataclass(frozen=True)
class Block:
    doc: str
    line: int
    code: str
    setup: str = ""
    vllm: bool = False

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def python_blocks(text: str, doc: str) -> list[Block]:
    """The fenced ``python`` blocks of ``text`` with their ``test-setup`` comments."""
    blocks = []
    for match in _FENCE.finditer(text):
        before = text[:match.start()].rstrip()
        comment = before[before.rfind("<!--"):] if before.endswith("-->") else ""
        setup = _SETUP.fullmatch(comment)
        code, flags = (textwrap.dedent(setup.group("code")), setup.group("flags") or "") if setup else ("", "")
        blocks.append(Block(doc, text.count("\n", 0, match.start()) + 2, match.group(1), code, "vllm" in flags))
    return blocks


def run_block(block: Block) -> dict:
    """Run ``block`` (its setup first) as described in the module docstring; its namespace."""
    namespace = {"__name__": "__main__", "DOCS_MODEL": "tiny"}
    if block.setup:
        exec(compile(block.setup, f"{block.doc}:{block.line} (test-setup)", "exec"), namespace)
    code = block.code.replace(EMBEDDED, "DOCS_MODEL")
    exec(compile(code, block.id, "exec"), namespace)
    return namespace


def all_blocks() -> list:
    params = []
    for path in DOCS:
        for block in python_blocks(path.read_text(), str(path.relative_to(ROOT))):
            marks = [pytest.mark.vllm] if block.vllm else []
            params.append(pytest.param(block, id=block.id, marks=marks))
    return params


@pytest.mark.parametrize("block", all_blocks())
def test_python_block_runs(block, tmp_path, monkeypatch, one_thread):
    if block.vllm:
        pytest.importorskip("vllm")
    monkeypatch.chdir(tmp_path)
    run_block(block)


def test_every_doc_has_its_blocks_found():
    blocks = {b.values[0].doc for b in all_blocks()}
    assert {"README.md", "docs/concepts.md", "docs/vllm.md"} <= blocks
    readme = [b.values[0] for b in all_blocks() if b.values[0].doc == "README.md"]
    assert any("optimize(module, fitness" in b.code for b in readme)


BROKEN_DOC = '''# A page

Some prose.

<!-- test-setup:
x = 2
-->
```python
assert x == 2
print(y)          # y was never defined: the block is broken
```

```python
z = "smollm2-135m"
```
'''


def test_a_broken_block_fails(tmp_path, monkeypatch):
    """The runner's own fixture: a page whose first block is broken on purpose."""
    monkeypatch.chdir(tmp_path)
    broken, fine = python_blocks(BROKEN_DOC, "fixture.md")
    assert (broken.line, broken.setup.strip(), broken.vllm) == (9, "x = 2", False)
    with pytest.raises(NameError, match="name 'y' is not defined") as info:
        run_block(broken)
    assert any(frame.filename == "fixture.md:9" for frame in traceback.extract_tb(info.tb))
    assert run_block(fine)["z"] == "tiny"  # the embedded model's name becomes the test model


# -- cited files exist ------------------------------------------------------------------------
# a citation: a Markdown link to a .md file, a docs/NAME.md path, or an upper-case NAME.md (README.md);
# lower-case bare names are output files (compare.md) and are not citations
_CITED_MD = re.compile(r"\]\(([^)#\s]+\.md)|(?<![\w/.-])(docs/[\w.-]+\.md|[A-Z][A-Z0-9_-]*\.md)\b")


def cited_markdown(text: str) -> set[str]:
    return {link or path for link, path in _CITED_MD.findall(text) if not (link or path).startswith("http")}


def test_every_cited_markdown_file_exists():
    """README, docs, code and configs cite Markdown files of this repository, which must exist
    (the design notes were once cited as a DESIGN.md that a checkout did not have)."""
    assert cited_markdown("see [x](docs/a.md#s), docs/b.md, DESIGN.md; wrote compare.md") == {
        "docs/a.md", "docs/b.md", "DESIGN.md"}
    sources = [*DOCS, *ROOT.glob("*.toml"), ROOT / "Makefile"]
    for package in ("zoopt", "objectives", "estimators", "sweeps", "tests"):
        sources += (ROOT / package).rglob("*.py")
        sources += (ROOT / package).rglob("*.yaml")
    missing = []
    for source in sources:
        if source == Path(__file__).resolve():
            continue
        for cited in cited_markdown(source.read_text(errors="replace")):
            candidates = [source.parent / cited, ROOT / cited, ROOT / "docs" / cited]
            if not any(c.is_file() for c in candidates):
                missing.append(f"{source.relative_to(ROOT)} cites {cited}")
    assert not missing, missing


def test_no_volatile_test_counts_in_the_docs():
    for path in DOCS:
        assert not re.search(r"\b\d+ (?:tests|passed)\b", path.read_text()), path
