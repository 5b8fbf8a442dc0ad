"""Every ``zoopt …`` command line shown in README.md and docs/*.md runs, with tiny settings.

**Which lines.** A line of a fenced code block (any language but ``python``, whose blocks
``test_docs.py`` runs) that starts with ``zoopt `` (continuation lines ending in ``\\`` joined,
a trailing ``# comment`` dropped) — the commands a reader copies.  Commands named inside prose
(inline code) are not lines to run.

**How.** :data:`LINES` has one entry per distinct line, in the order they run (README first:
its ``runs/arithmetic-...`` run is the one later lines use).  Each is run in-process through
``zoopt.cli.main`` in one shared working directory, as written, with

* the substitutions of its entry (``SUBS``: the embedded model → ``tiny``, a run directory the
  doc assumes → the README's run, ``/tmp/...`` → the working directory; a Postgres URL → SQLite,
  since tests send nothing off the machine; ``device=cuda`` → ``cpu``);
* the tiny settings of its command appended (:data:`TINY`: one or two short steps, two
  evaluation problems, ...; a ``--set`` given later wins), and its own ``run_dir``/``--out``;
* what it must give: exit 0, or exit 2 with a one-line error (``--engine vllm`` where vLLM is
  not installed must name the extra; ``--ray-address auto`` with no cluster must say so — Ray's
  "no running instance" error is simulated, as ``auto`` would otherwise attach to any cluster
  another process on the machine runs).

``test_every_doc_line_is_in_the_table`` fails when a doc gains a ``zoopt`` line the table does
not know (or the table keeps one no doc shows), so a new documented command gets its tiny
settings here and runs from then on.  ``test_fresh_shell_outside_make`` runs README's train and
eval lines as a user would outside ``make``: the ``zoopt`` executable, only ``.venv/bin`` on
``PATH``, an empty ``HOME``, no ``ZOOPT_CACHE``, from a directory outside the checkout.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
HAVE_VLLM = importlib.util.find_spec("vllm") is not None

_FENCE = re.compile(r"^```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^```[ \t]*$", re.S | re.M)


@dataclass(frozen=True)
class DocLine:
    doc: str
    line: int
    text: str  # the command, whitespace collapsed, comment dropped


def command_text(line: str) -> str:
    """``line`` without its trailing ``# comment`` (outside quotes), whitespace collapsed."""
    kept, quote = [], None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break
        kept.append(ch)
    return " ".join("".join(kept).split())


def doc_lines(text: str, doc: str) -> list[DocLine]:
    """The ``zoopt`` lines of ``text``'s fenced blocks (see the module docstring)."""
    found = []
    for match in _FENCE.finditer(text):
        if match.group("lang") == "python":
            continue
        first = text.count("\n", 0, match.start("body")) + 1
        pending, start = "", 0
        for i, raw in enumerate(match.group("body").splitlines()):
            line = raw.strip()
            if pending:
                line, pending = pending + " " + line, ""
            elif line.startswith("$ "):
                line = line[2:]
            if not line.startswith("zoopt "):
                continue
            start = start or first + i
            if line.endswith("\\"):
                pending = line[:-1].rstrip()
                continue
            found.append(DocLine(doc, start, command_text(line)))
            start = 0
    return found


def all_doc_lines() -> list[DocLine]:
    return [d for path in DOCS for d in doc_lines(path.read_text(), str(path.relative_to(ROOT)))]


# -- how each line runs ---------------------------------------------------------------------------
def sets(*items: str) -> list[str]:
    return [x for item in items for x in ("--set", item)]


SMALL_EVAL = ("eval.n_problems=2", "eval.max_new_tokens=2")
TINY = {  # appended to every line of the command (later --set items win)
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
    "study": ["--profile", "smoke", *sets("claims=[C1]"), "--quiet"],
    "frontier": [],  # reads committed evaluations only: the real study is already small
}
RUN = "{work}/run"  # the README's runs/arithmetic-...
SUBS = {"smollm2-135m": "tiny", "runs/arithmetic-...": RUN, "runs/es-run": RUN, "final/": "{work}/final",
        "device=cuda": "device=cpu"}
NO_VLLM = 'pip install "zoopt-llm[vllm]"'
NO_CLUSTER = "no Ray cluster at 'auto' (start one with `ray start --head`)"


@dataclass(frozen=True)
class Case:
    """How a doc line runs: extra substitutions, extra arguments (after :data:`TINY`), what it must
    give (0, or the text of its one-line error), and whether it needs the README's run first."""

    subs: dict = field(default_factory=dict)
    extra: tuple = ()
    expect: int | str = 0
    needs_run: bool = False
    out: bool = True  # append its own run_dir (train/grpo/compare) or --out (eval/analyze/study)


LINES: dict[str, Case] = {
    # README.md, "Using it": its first line makes the run the others read
    "zoopt train --model smollm2-135m --objective arithmetic --set sigma=5e-3 --set steps=20": Case(out=False),
    "zoopt train --resume runs/arithmetic-...": Case(needs_run=True, out=False),
    "zoopt export runs/arithmetic-... --out final/": Case(needs_run=True, out=False),
    "zoopt eval --model runs/arithmetic-... --k 1,8 --n 8": Case(needs_run=True),
    "zoopt eval --model smollm2-135m --suite paper-math": Case(extra=("--out", "{work}/suite-base")),
    "zoopt analyze runs/arithmetic-...": Case(needs_run=True),
    "zoopt grpo --set steps=20": Case(),
    "zoopt compare --set budget=4096": Case(),
    "zoopt sweep default --workers 2": Case(),
    "zoopt train --engine vllm": Case(expect=NO_VLLM),
    "zoopt grpo --engine vllm": Case(expect=NO_VLLM),
    # docs/adapters.md
    "zoopt train --set space=adapter": Case(),
    "zoopt train --set space=adapter --set quantization=int8 --set adapter.r=16": Case(),
    "zoopt grpo --set space=adapter": Case(),
    # docs/batched-population.md
    "zoopt train --set noise.kind=low_rank --set noise.rank=1": Case(),
    "zoopt train --set noise.kind=low_rank --set population=sequential": Case(),
    # docs/grpo.md
    "zoopt grpo --model tiny --objective tests/digits_objective.py:Digits --set lr=1e-2 --set steps=12": Case(
        subs={"tests/digits_objective.py": str(ROOT / "tests" / "digits_objective.py")}),
    "zoopt compare --set budget=6144 --set grpo.lr=1e-5": Case(),
    "zoopt compare --methods base,es,grpo --set es.sigma=0.01": Case(),
    # docs/objectives.md
    "zoopt eval --model runs/es-run --suite paper-math": Case(needs_run=True, extra=("--out", "{work}/suite-run")),
    "zoopt eval --model runs/es-run --suite paper-nonmath": Case(needs_run=True),
    "zoopt eval --model runs/es-run --objective math500,aime24,amc23 --n 32 --k 1,16,32": Case(
        needs_run=True, subs={"--n 32": "--n 2", "--k 1,16,32": "--k 1,2"}),
    "zoopt eval --compare runs/eval-base-paper-math-... runs/eval-es-run-paper-math-...": Case(
        subs={"runs/eval-base-paper-math-...": "{work}/suite-base", "runs/eval-es-run-paper-math-...": "{work}/suite-run"}),
    "zoopt eval --model Qwen/Qwen2.5-Math-1.5B --suite paper-math --engine vllm": Case(
        subs={"Qwen/Qwen2.5-Math-1.5B": "tiny"}, expect=NO_VLLM),
    "zoopt train --objective rewards.py:short_answer --set objective_args.dataset=gsm8k": Case(
        subs={"rewards.py": "{work}/rewards.py"}),
    # docs/ray.md: a local cluster for real; an existing one that is not there
    "zoopt train --engine ray --set engine_args.replicas=2": Case(extra=tuple(sets("engine_args.num_cpus=0",
                                                                                    "engine_args.threads=1"))),
    "zoopt train --engine ray --ray-address auto --set engine_args.replicas=8 --set device=cuda": Case(expect=NO_CLUSTER),
    "zoopt train --engine ray --ray-address auto --set device=cuda --set dtype=bfloat16 --set engine_args.replicas=32 "
    "--set engine_args.num_gpus=1 --set engine_args.placement=SPREAD": Case(
        subs={"engine_args.num_gpus=1": "engine_args.num_gpus=0"}, expect=NO_CLUSTER),
    # docs/results.md: the toy study at its smoke profile (C1's runs: base, ES, GRPO)
    "zoopt study paper-toy": Case(),
    # docs/study.md
    "zoopt analyze runs/arithmetic-... --population-coverage --members 32 --coverage-ks 1,4,16,32": Case(
        needs_run=True, subs={"--members 32": "--members 4", "--coverage-ks 1,4,16,32": "--coverage-ks 1,2,4"},
        extra=("--n-problems", "2", "--max-new-tokens", "2")),
    "zoopt frontier docs/results/coverage/study --out docs/results/coverage/frontier": Case(
        subs={"docs/results/coverage/study": str(ROOT / "docs/results/coverage/study"),
              "docs/results/coverage/frontier": "{work}/frontier"}, out=False),
    # docs/sweeps.md (its `default` line is README's)
    "zoopt sweep tiny --run-root /tmp/sweeps": Case(subs={"/tmp/sweeps": "{work}/sweeps"}),
    "zoopt sweep update-rules": Case(),
    # docs/update-rules.md
    "zoopt train --set update.rule=adam --set lr=6.25e-4": Case(),
    "zoopt train --set update.rule=momentum --set update.nesterov=true --set update.weight_decay=0.01": Case(),
    "zoopt sweep my.yaml --study s1 --n-trials 10": Case(),
    "zoopt sweep my.yaml --total-trials 16": Case(subs={"--total-trials 16": "--total-trials 2"}),
    "zoopt sweep my.yaml --storage postgresql://host/db": Case(
        subs={"postgresql://host/db": "sqlite:///{work}/shared-storage.db"}),
    # docs/vllm.md
    "zoopt train --engine vllm --set engine_args.max_loras=16 --set engine_args.max_lora_rank=1 "
    "--set noise.kind=low_rank --set noise.rank=1 --set 'noise.exclude=[model.embed_tokens.weight, \"*norm.weight\"]'":
        Case(expect=NO_VLLM),
}


def spec_at_tiny_settings(spec: dict) -> dict:
    """A sweep spec shrunk to the tiny model: one step per trial, two evaluation problems."""
    spec = dict(spec)
    spec["set"] = {**(spec.get("set") or {}), "model": "tiny", "prompts_per_step": 2,
                   "eval": {"n_problems": 2, "max_new_tokens": 2}, "sampling": {"max_new_tokens": 2}}
    spec.update(budget={"steps": 1}, n_trials=1, report_every=1)
    spec.pop("heartbeat", None)
    if "prompts_per_step" in spec.get("space", {}):
        spec["space"] = {k: v for k, v in spec["space"].items() if k != "prompts_per_step"}
    return spec


def doc_spec_block() -> dict:
    """The spec shown under docs/sweeps.md's "The spec" (what ``my.yaml`` holds)."""
    text = (ROOT / "docs" / "sweeps.md").read_text().split("## The spec", 1)[1]
    return yaml.safe_load(re.search(r"```yaml\n(.*?)```", text, re.S).group(1))


def readme_rewards_py() -> str:
    """README's ``rewards.py`` block (the file ``--objective rewards.py:short_answer`` names)."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    return next(b for b in blocks if b.startswith("# rewards.py"))


def argv_for(text: str, case: Case, work: Path, index: int) -> list[str]:
    """The argv (without ``zoopt``) of a doc line with its substitutions and tiny settings."""
    line = text
    for old, new in {**SUBS, **case.subs}.items():
        line = line.replace(old, new)
    argv = shlex.split(line.replace("{work}", str(work)))
    command, rest = argv[1], argv[2:]
    assert command in TINY, f"add the tiny settings of `zoopt {command}` to TINY"
    extra = list(TINY[command])
    if command == "train" and "--resume" in rest:
        extra = ["--quiet"]
    if command == "sweep":
        rest = [_tiny_spec(rest[0], work), *rest[1:]]
        if "--total-trials" in rest:  # exclusive with TINY's --n-trials; the line's subs make its count tiny
            extra = []
        if "--run-root" not in rest:
            extra += ["--run-root", str(work / "sweeps")]
    if case.out:
        if command in ("train", "grpo", "compare"):
            extra += sets(f"run_dir={work / f'line{index}-{command}'}")
        elif command in ("eval", "analyze", "study") and "--out" not in rest + list(case.extra):
            extra += ["--out", str(work / f"line{index}-{command}")]
    if text == next(iter(LINES)):  # README's first train line: the run later lines read
        extra += sets(f"run_dir={work / 'run'}")
    return [command, *rest, *extra, *(a.replace("{work}", str(work)) for a in case.extra)]


def _tiny_spec(name: str, work: Path) -> str:
    """A sweep SPEC argument at tiny settings: a packaged spec's own file, or the doc's my.yaml."""
    if name == "my.yaml":
        spec = doc_spec_block()
    else:
        spec = {**yaml.safe_load((ROOT / "sweeps" / "specs" / f"{name}.yaml").read_text()), "name": name}
    path = work / "specs" / f"{Path(name).stem}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(spec_at_tiny_settings(spec)))
    return str(path)


# -- the tests ------------------------------------------------------------------------------------
def test_doc_lines_are_found_as_written():
    text = "# x\n\n```bash\nzoopt a --x 1   # c\n$ zoopt b \\\n   --y 'p # q'\nmake z\n```\n\n```python\nzoopt\n```\n"
    assert doc_lines(text, "x.md") == [DocLine("x.md", 4, "zoopt a --x 1"), DocLine("x.md", 5, "zoopt b --y 'p # q'")]
    found = {d.doc for d in all_doc_lines()}
    assert {"README.md", "docs/ray.md", "docs/sweeps.md", "docs/vllm.md", "docs/study.md"} <= found


def test_every_doc_line_is_in_the_table():
    shown = {d.text for d in all_doc_lines()}
    missing = sorted(shown - set(LINES))
    assert not missing, f"doc lines without tiny settings in LINES: {missing}"
    stale = sorted(set(LINES) - shown)
    assert not stale, f"LINES holds lines no doc shows any more: {stale}"


def test_argv_substitutes_and_appends(tmp_path):
    argv = argv_for("zoopt train --model smollm2-135m --objective arithmetic --set sigma=5e-3 --set steps=20",
                    LINES["zoopt train --model smollm2-135m --objective arithmetic --set sigma=5e-3 --set steps=20"],
                    tmp_path, 0)
    assert argv[:3] == ["train", "--model", "tiny"] and argv.index("steps=20") < argv.index("steps=2")
    assert argv[-2:] == ["--set", f"run_dir={tmp_path / 'run'}"]
    argv = argv_for("zoopt sweep my.yaml --storage postgresql://host/db", LINES["zoopt sweep my.yaml --storage "
                    "postgresql://host/db"], tmp_path, 1)
    assert argv[2:4] == ["--storage", f"sqlite:///{tmp_path}/shared-storage.db"]  # nothing leaves the machine
    assert yaml.safe_load(Path(argv[1]).read_text())["set"]["model"] == "tiny"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    work = tmp_path_factory.mktemp("doc-lines")
    (work / "rewards.py").write_text(readme_rewards_py())
    return work


@pytest.fixture
def no_ray_cluster(monkeypatch):
    """``ray.init(address="auto")`` as Ray answers when no cluster runs (see the module docstring)."""
    ray = pytest.importorskip("ray")

    def init(*args, **kwargs):
        assert kwargs.get("address") == "auto"
        raise ConnectionError("Could not find any running Ray instance. Please specify the one to connect to by "
                              "setting `--address` flag or `RAY_ADDRESS` environment variable.")

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", init)


@pytest.mark.parametrize("index, text", list(enumerate(LINES)), ids=lambda x: x if isinstance(x, int) else
                         " ".join(x.split()[1:4]))
def test_doc_line_runs_on_the_tiny_model(index, text, work, monkeypatch, capsys, one_thread, request):
    from zoopt.cli import main

    case = LINES[text]
    monkeypatch.chdir(work)
    argv = argv_for(text, case, work, index)
    if case.needs_run:
        assert (work / "run" / "seedlog.json").is_file(), "runs after README's first train line"
    if case.expect == NO_VLLM and HAVE_VLLM:
        pytest.skip("vLLM is installed: tests/test_vllm_cli.py runs the commands on it")
    if case.expect == NO_CLUSTER:
        request.getfixturevalue("no_ray_cluster")
    status = main(argv)
    err = capsys.readouterr().err
    if case.expect == 0:
        assert status == 0, err[-3000:]
        return
    lines = [x for x in err.strip().splitlines() if not x.startswith("zoopt: warning:")]
    assert status == 2 and len(lines) == 1 and case.expect in lines[0], err[-3000:]


def test_fresh_shell_outside_make(tmp_path):
    """README's first train line and an eval of its run, in a fresh environment (module docstring)."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "zoopt").is_file():
        pytest.skip("no zoopt executable beside this Python (not a venv install)")
    home = tmp_path / "home"
    home.mkdir()
    env = {"PATH": str(bin_dir), "HOME": str(home), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    train = next(iter(LINES))
    evaluate = "zoopt eval --model runs/arithmetic-... --k 1,8 --n 8"
    script = "\n".join(["set -e", "cd " + shlex.quote(str(tmp_path)),
                        "zoopt " + shlex.join(argv_for(train, LINES[train], tmp_path, 0)),
                        "zoopt " + shlex.join(argv_for(evaluate, LINES[evaluate], tmp_path, 3)),
                        "python -c 'from zoopt.models import cache_dir; print(cache_dir())'"])
    out = subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (tmp_path / "line3-eval" / "summary.json").is_file()
    assert out.stdout.strip().splitlines()[-1] == str(home / ".cache" / "zoopt")  # README: the default cache
