"""The ``zoopt`` command table: one-line user errors, ``--debug`` tracebacks, ``python -m zoopt.cli``."""

import subprocess
import sys

import pytest

from zoopt.cli import COMMANDS, build_parser, main
from zoopt.config import ConfigError


def test_every_command_is_in_the_table_with_help():
    parser = build_parser()
    assert list(COMMANDS) == ["train", "export", "eval", "analyze", "grpo", "compare", "sweep", "study", "frontier", "calibrate"]
    for name, module in COMMANDS.items():
        args = parser.parse_args({"sweep": [name, "x"], "study": [name, "x"], "export": [name, "x", "--out", "y"],
                                  "frontier": [name, "x", "--out", "y"]}.get(name, [name]))
        assert args.func is module.run and module.HELP


def test_a_user_error_is_one_line_that_points_to_debug(capsys, monkeypatch):
    monkeypatch.delenv("ZOOPT_DEBUG", raising=False)
    assert main(["train", "--quiet", "--model", "tiny", "--set", "sigma=-1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoopt train: error: ") and "sigma" in err and "--debug" in err and "\n" not in err


@pytest.mark.parametrize("argv,env", [(["--debug", "train"], None), (["train"], "1")])
def test_debug_raises_the_error_itself(argv, env, monkeypatch):
    if env is None:
        monkeypatch.delenv("ZOOPT_DEBUG", raising=False)
    else:
        monkeypatch.setenv("ZOOPT_DEBUG", env)
    with pytest.raises(ConfigError, match="sigma"):
        main([*argv, "--quiet", "--model", "tiny", "--set", "sigma=-1"])


def test_python_m_zoopt_cli_prints_a_traceback_with_debug():
    run = [sys.executable, "-m", "zoopt.cli"]
    plain = subprocess.run([*run, "train", "--set", "sigma=-1", "--model", "tiny"], capture_output=True, text=True)
    debug = subprocess.run([*run, "--debug", "train", "--set", "sigma=-1", "--model", "tiny"],
                           capture_output=True, text=True)
    assert plain.returncode == 2 and plain.stderr.count("\n") == 1 and "Traceback" not in plain.stderr
    assert debug.returncode == 1 and "Traceback (most recent call last)" in debug.stderr
