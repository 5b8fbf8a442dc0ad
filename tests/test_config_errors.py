"""Bad settings are one line naming the key (or file) and, for malformed YAML, the position;
exit status 2, like every other bad input, and nothing is loaded or written first."""

import subprocess
import sys
from pathlib import Path

import pytest

from zoopt.cli import main
from zoopt.config import ConfigError, config_items, parse_yaml

ROOT = Path(__file__).resolve().parents[1]


def one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith(f"zoopt {command}: error:"), err
    return err


def test_parse_yaml_names_where_and_the_position():
    with pytest.raises(ConfigError) as err:
        parse_yaml("[1,2", "--set eval.ks=[1,2")
    assert str(err.value) == ("--set eval.ks=[1,2: malformed YAML at line 1, column 5: expected ',' or ']', "
                              "but got '<stream end>'")
    with pytest.raises(ConfigError, match=r"^config file x.yaml: malformed YAML at line 3, column 1: "):
        parse_yaml("a: 1\nb: [c: d\n", "config file x.yaml")
    assert parse_yaml("[1, 2]", "w") == [1, 2]
    assert config_items(None, ["eval.ks=[1,2]", "sigma=5e-3"]) == [("eval.ks", [1, 2]), ("sigma", "5e-3")]


@pytest.mark.parametrize("command", ["train", "grpo", "compare", "eval", "study"])
def test_malformed_yaml_in_set_is_one_line_exit_2(command, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = {"eval": ["eval", "--model", "tiny"], "study": ["study", "paper-toy", "--profile", "smoke"]}.get(
        command, [command, "--model", "tiny"])
    assert main([*argv, "--set", "eval.ks=[1,2"]) == 2
    err = one_line(capsys, command)
    assert "--set eval.ks=[1,2: malformed YAML at line 1, column 5" in err
    assert not any(tmp_path.iterdir())  # nothing written before the error


@pytest.mark.parametrize("command", ["train", "grpo", "compare"])
def test_malformed_yaml_in_a_config_file_is_one_line_exit_2(command, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps: 2\nsampling: {n: 2\nlr: 0.1\n")
    assert main([command, "--config", str(bad)]) == 2
    err = one_line(capsys, command)
    assert f"config file {bad}: malformed YAML at line 3, column 3" in err


def test_malformed_yaml_in_a_spec_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "spec.yaml"
    bad.write_text("model: tiny\nclaims: [C1\n")
    assert main(["study", str(bad)]) == 2
    assert f"study spec {bad}: malformed YAML at line 3, column 1" in one_line(capsys, "study")


def test_the_cli_exit_status_is_2_and_no_traceback():
    out = subprocess.run([sys.executable, "-m", "zoopt.cli", "train", "--set", "eval.ks=[1,2"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [
        "zoopt train: error: --set eval.ks=[1,2: malformed YAML at line 1, column 5: expected ',' or ']', but got "
        "'<stream end>' (zoopt --debug train ... shows the traceback)"]


@pytest.mark.parametrize("setting, message", [
    ("eval.n_problems=-1", "config key 'eval.n_problems' must be an integer ≥ 0, got -1"),
    ("eval.n_problems=abc", "config key 'eval.n_problems' must be an integer ≥ 0, got 'abc'"),
    ("batch_size=0", "config key 'batch_size' must be an integer ≥ 1, got 0"),
])
def test_eval_settings_are_checked_by_their_rules_and_named(setting, message, tmp_path, capsys):
    assert main(["eval", "--model", "tiny", "--set", setting, "--out", str(tmp_path / "e")]) == 2
    assert message in one_line(capsys, "eval")
    assert not (tmp_path / "e").exists()


def test_grpo_dtype_rule_is_the_documented_one(tmp_path, capsys):
    """docs/configuration.md: GRPO's dtype is one of float32, fp32; bf16 is refused before any model loads."""
    assert main(["grpo", "--model", "tiny", "--set", "dtype=bf16", "--set", f"run_dir={tmp_path / 'g'}"]) == 2
    assert "config key 'dtype' must be one of float32, fp32, got 'bf16'" in one_line(capsys, "grpo")
    assert not (tmp_path / "g").exists()
