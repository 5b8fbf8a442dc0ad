"""Help text that lists names is built from the registries and the spec folders, so it never
names an engine a command refuses, nor misses a spec that ships."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from zoopt.cli import build_parser, main
from zoopt.registry import ENGINE_REFUSALS, ENGINES, engines_for

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def wide_help(monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps (and splits hyphenated names) at the terminal width


def help_of(command: str) -> str:
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    return " ".join(sub.format_help().split())


def engine_list(command: str) -> list[str]:
    text = help_of(command)
    listed = re.search(r"--engine ENGINE one of ([a-z0-9_, ()-]+?)(?:[;:]| \(default: |--)", text).group(1)
    return [name.replace(" (default)", "").strip() for name in listed.split(",")]


@pytest.mark.parametrize("command, engines", [
    ("train", ["hf", "ray", "vllm"]),
    ("grpo", ["hf", "vllm"]),       # GRPO refuses ray; nobody runs 'module' by name
    ("compare", ["hf", "ray", "vllm"]),
    ("eval", ["hf", "ray", "vllm"]),
    ("analyze", ["hf", "ray", "vllm"]),
])
def test_each_command_lists_the_engines_it_runs(command, engines):
    assert sorted(ENGINES.names()) == ["hf", "module", "ray", "vllm"]
    assert engine_list(command) == engines == engines_for(command if command != "analyze" else "eval")
    assert ("--ray-address" in help_of(command)) == (command in ("train", "compare"))


def test_a_registered_engine_appears_in_the_help(monkeypatch):
    monkeypatch.setitem(ENGINES._targets, "my_engine", "my_pkg.engine:MyEngine")
    assert "my_engine" in engine_list("train") and "my_engine" in engine_list("grpo")
    monkeypatch.setitem(ENGINE_REFUSALS, "my_engine", {"grpo": "no gradients here"})
    assert "my_engine" in engine_list("train") and "my_engine" not in engine_list("grpo")


@pytest.mark.parametrize("argv, command", [
    (["train", "--model", "tiny", "--engine", "module"], "train"),
    (["grpo", "--model", "tiny", "--engine", "module"], "grpo"),
    (["compare", "--model", "tiny", "--engine", "module"], "compare"),
    (["eval", "--model", "tiny", "--engine", "module"], "eval"),
])
def test_an_engine_a_command_refuses_is_one_line_before_any_model_loads(argv, command, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"zoopt {command}: error:")
    assert "'module' engine wraps a torch module" in err


def test_sweep_help_lists_every_packaged_spec():
    shipped = sorted(p.stem for p in (ROOT / "sweeps" / "specs").glob("*.yaml"))
    assert {"tiny", "default", "pareto", "grpo-tiny", "embedded-small"} <= set(shipped)
    assert f"a packaged spec: {' | '.join(shipped)}" in help_of("sweep")


def test_study_help_lists_every_shipped_study():
    shipped = sorted(p.stem for p in (ROOT / "zoopt" / "configs" / "studies").glob("*.yaml"))
    assert shipped == ["coverage", "paper-easy", "paper-hard", "paper-toy"]
    assert " | ".join(shipped) in help_of("study")


def test_help_imports_neither_sweeps_nor_vllm():
    out = subprocess.run([sys.executable, "-c", "import sys; from zoopt.cli import build_parser; build_parser(); "
                          "print(sorted(m for m in ('sweeps', 'vllm', 'ray', 'optuna') if m in sys.modules))"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
