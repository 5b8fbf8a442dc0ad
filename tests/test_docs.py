"""The docs are tested: every fenced ``python`` block of README.md and docs/*.md runs, every line
of README's "Using it" block runs on the tiny model, and every ``*.md`` a file cites exists.

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

**"Using it".** Each line of README's ``## Using it`` bash block runs in-process through
``zoopt.cli.main`` with tiny settings appended (``TINY``: the tiny model, one or two short
steps, a few evaluation problems; ``--set`` given later wins), in order, sharing one run
directory for the lines that name ``runs/arithmetic-...``.  A line for a command this test
does not know fails, so a new README line needs its tiny settings here.  ``--engine vllm`` lines
run in ``.venv-vllm`` (``tests/test_vllm_cli.py``); here, without vLLM, they must fail with the
one-line error that names the extra.  ``test_fresh_shell_outside_make`` runs the train and eval
lines as a user would outside ``make``: the ``zoopt`` executable, only ``.venv/bin`` on ``PATH``,
an empty ``HOME``, no ``ZOOPT_CACHE``, from a directory outside the checkout.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

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


# -- the "Using it" block -------------------------------------------------------------------
def using_it_lines(readme: str | None = None) -> list[str]:
    text = readme if readme is not None else (ROOT / "README.md").read_text()
    section = text.split("## Using it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    return [line.split(" #")[0].strip() for line in block.splitlines() if line.strip() and not line.startswith("#")]


def sets(*items: str) -> list[str]:
    return [x for item in items for x in ("--set", item)]


SMALL_EVAL = ("eval.n_problems=2", "eval.max_new_tokens=2")
TINY = {  # tiny settings appended to each command (later --set items win)
    "train": ["--model", "tiny", "--quiet", *sets("steps=2", "population_size=2", "prompts_per_step=2",
                                                  "sampling.max_new_tokens=2", *SMALL_EVAL, "noise_cache_gb=0")],
    "grpo": ["--model", "tiny", "--quiet", *sets("steps=1", "prompts_per_step=2", "sampling.n=2",
                                                 "sampling.max_new_tokens=2", *SMALL_EVAL)],
    "compare": ["--model", "tiny", "--quiet", *sets("budget=16", "isolate=false", "es.population_size=2",
                                                    "es.prompts_per_step=2", "grpo.prompts_per_step=2",
                                                    "grpo.sampling.n=2", "eval.n_problems=2", "eval.n_samples=2",
                                                    "eval.ks=[1,2]", "eval.max_new_tokens=2",
                                                    "es.sampling.max_new_tokens=2", "grpo.sampling.max_new_tokens=2")],
    "eval": ["--n-problems", "2", "--max-new-tokens", "2", "--quiet"],
    "analyze": ["--quiet"],
    "export": [],
    "sweep": ["--n-trials", "2"],
}
RUN = "runs/arithmetic-..."


def tiny_argv(line: str, work: Path) -> list[str]:
    """The argv of a README line with tiny settings (see the module docstring)."""
    argv = shlex.split(line)
    assert argv[0] == "zoopt" and argv[1] in TINY, f"README line {line!r}: add its tiny settings to TINY"
    command, rest = argv[1], [work / "run" if a == RUN else a for a in argv[2:]]
    rest = [str(a) for a in rest]
    rest = ["tiny" if a == "smollm2-135m" else a for a in rest]
    extra = list(TINY[command])
    engine = rest[rest.index("--engine") + 1] if "--engine" in rest else None
    if command == "train" and "--resume" in rest:
        extra = ["--quiet"]
    elif command == "train":  # the run of the README's runs/arithmetic-...; another engine's elsewhere
        extra += sets(f"run_dir={work / ('run' if engine is None else 'train-' + engine)}")
    elif command in ("grpo", "compare"):
        extra += sets(f"run_dir={work / (command if engine is None else command + '-' + engine)}")
    elif command in ("eval", "analyze"):
        extra += ["--out", str(work / command)]
    elif command == "export":
        rest = [str(work / "final") if a == "final/" else a for a in rest]
    elif command == "sweep":  # the packaged spec at tiny settings, in the work directory
        spec = yaml.safe_load((ROOT / "sweeps" / "specs" / "tiny.yaml").read_text())
        spec.update(name=rest[0], set={"prompts_per_step": 2, "eval": {"n_problems": 2, "max_new_tokens": 2},
                                       "sampling": {"max_new_tokens": 2}}, budget={"steps": 1})
        (work / "spec.yaml").write_text(yaml.safe_dump(spec))
        rest = [str(work / "spec.yaml"), *rest[1:]]
        extra += ["--run-root", str(work / "sweeps")]
    return [command, *rest, *extra]


def test_tiny_argv_adapts_each_kind_of_line(tmp_path):
    assert tiny_argv("zoopt export runs/arithmetic-... --out final/", tmp_path) == [
        "export", str(tmp_path / "run"), "--out", str(tmp_path / "final")]
    argv = tiny_argv("zoopt train --model smollm2-135m --set steps=20", tmp_path)
    assert argv[:3] == ["train", "--model", "tiny"] and argv.index("steps=20") < argv.index("steps=2")
    with pytest.raises(AssertionError, match="add its tiny settings"):
        tiny_argv("zoopt frobnicate", tmp_path)


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("using-it")


HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.parametrize("line", using_it_lines(), ids=lambda line: " ".join(line.split()[:3]))
def test_using_it_line_runs_on_the_tiny_model(line, work, monkeypatch, capsys, one_thread):
    from zoopt.cli import main

    monkeypatch.chdir(work)
    argv = tiny_argv(line, work)
    if "--engine" in argv and argv[argv.index("--engine") + 1] == "vllm":
        if HAVE_VLLM:
            pytest.skip("vLLM is installed: tests/test_vllm_cli.py runs the commands on it")
        assert main(argv) == 2
        assert 'pip install "zoopt-llm[vllm]"' in capsys.readouterr().err
        return
    if argv[0] != "train" or "--resume" in argv:
        assert (work / "run" / "seedlog.json").is_file(), "runs after the README's first train line"
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    if argv[0] == "train":
        assert (work / "run" / "eval_after.json").is_file()


def test_fresh_shell_outside_make(tmp_path):
    """The README's first train line and an eval of its run, in a fresh environment (see the module doc)."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "zoopt").is_file():
        pytest.skip("no zoopt executable beside this Python (not a venv install)")
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": str(bin_dir), "HOME": str(home), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    lines = using_it_lines()
    train, evaluate = lines[0], next(x for x in lines if x.startswith("zoopt eval"))
    script = "\n".join(["set -e", "cd " + shlex.quote(str(tmp_path)),
                        "zoopt " + shlex.join(tiny_argv(train, tmp_path)),
                        "zoopt " + shlex.join(tiny_argv(evaluate, tmp_path)),
                        "python -c 'from zoopt.models import cache_dir; print(cache_dir())'"])
    out = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "eval" / "summary.json").is_file()
    assert out.stdout.strip().splitlines()[-1] == str(home / ".cache" / "zoopt")  # README: the default cache


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
