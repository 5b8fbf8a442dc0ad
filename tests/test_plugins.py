"""User plugins reach every command: ``--plugin``, ``ZOOPT_PLUGINS`` and the ``zoopt.objectives`` entry points."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zoopt import plugins
from zoopt.cli import main
from zoopt.plugins import PluginError, import_plugin
from zoopt.registry import OBJECTIVES, Registry

TESTS = Path(__file__).resolve().parent
SHORTNESS = TESTS / "plugins" / "shortness.py"
TINY = ["--model", "tiny", "--set", "steps=1", "--set", "population_size=2", "--set", "prompts_per_step=2",
        "--set", "eval.n_problems=0", "--set", "export=false", "--quiet"]


def test_a_registered_name_is_unknown_without_the_plugin_and_trains_with_it(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(plugins.ENV, raising=False)
    if "shortness" not in OBJECTIVES._targets:  # (an earlier test of this process may have imported it)
        assert main(["train", "--objective", "shortness", *TINY, "--set", f"run_dir={tmp_path / 'a'}"]) == 2
        assert "unknown objective 'shortness'" in capsys.readouterr().err
    assert main(["train", "--plugin", str(SHORTNESS), "--objective", "shortness", *TINY,
                 "--set", f"run_dir={tmp_path / 'b'}"]) == 0
    assert (tmp_path / "b" / "metrics.jsonl").read_text().count("\n") == 1
    # --plugin is exported to ZOOPT_PLUGINS (as an absolute path) for the processes zoopt starts
    assert str(SHORTNESS) in os.environ[plugins.ENV].split(os.pathsep)


def test_zoopt_plugins_variable_in_a_fresh_process(tmp_path):
    env = {**os.environ, plugins.ENV: os.pathsep.join(["", str(SHORTNESS)])}
    code = "import objectives; print(type(objectives.get('shortness')).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.stdout.split() == ["Shortness"], out.stderr[-2000:]


def test_a_module_plugin_and_a_file_plugin_are_imported_once(tmp_path, monkeypatch):
    (tmp_path / "my_counting_plugin.py").write_text("import builtins\n"
                                                    "builtins.ZOOPT_TEST_IMPORTS = getattr(builtins, 'ZOOPT_TEST_IMPORTS', 0) + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import builtins

    first = import_plugin("my_counting_plugin")
    assert import_plugin("my_counting_plugin") is first and builtins.ZOOPT_TEST_IMPORTS == 1
    # a file given as a plugin and as --objective FILE:attr is one module
    from objectives import load

    module = import_plugin(str(SHORTNESS))
    assert type(load(f"{SHORTNESS}:Shortness")) is module.Shortness


@pytest.mark.parametrize("item, message", [
    ("no_such_plugin_module", "plugin module 'no_such_plugin_module' not found"),
    ("missing/file.py", "plugin file 'missing/file.py' does not exist"),
])
def test_a_plugin_that_does_not_import_is_a_one_line_error(item, message, capsys):
    with pytest.raises(PluginError, match=message):
        import_plugin(item)
    assert main(["eval", "--plugin", item, "--model", "tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err


def test_a_plugin_that_raises_names_itself_and_its_error(tmp_path):
    bad = tmp_path / "broken_plugin.py"
    bad.write_text("raise RuntimeError('half-written plugin')\n")
    with pytest.raises(PluginError, match=r"importing plugin .*broken_plugin.py' failed: RuntimeError: half-written"):
        import_plugin(str(bad))


def test_every_name_resolving_command_takes_plugin():
    from zoopt.cli import build_parser

    parser = build_parser()
    for command in ("train", "grpo", "compare", "eval", "analyze"):
        assert parser.parse_args([command, "--plugin", "a", "--plugin", "b.py"]).plugin == ["a", "b.py"]
    assert parser.parse_args(["sweep", "tiny", "--plugin", "a"]).plugin == ["a"]
    assert parser.parse_args(["export", "RUN", "--out", "x"]).plugin == []


def test_the_entry_point_group_of_the_readme(tmp_path):
    """An installed distribution's ``[project.entry-points."zoopt.objectives"]`` (as README shows)."""
    (tmp_path / "my_rewards.py").write_text(SHORTNESS.read_text().replace('"shortness"', '"shortness_ep"'))
    info = tmp_path / "my_rewards-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: my-rewards\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[zoopt.objectives]\nshortness_ep = my_rewards:Shortness\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    code = "import objectives; print(type(objectives.get('shortness_ep')).__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=TESTS.parent,
                         timeout=120)
    assert out.stdout.split() == ["Shortness"], out.stderr[-2000:]


def test_registries_look_up_after_importing_the_variable_s_plugins(tmp_path, monkeypatch):
    plugin = tmp_path / "registers_a_thing.py"
    plugin.write_text("from zoopt.registry import Registry\nimport sys\nsys.modules['zoopt_test_thing'] = 1\n")
    monkeypatch.setenv(plugins.ENV, str(plugin))
    assert "anything" not in Registry("thing")  # a lookup imports ZOOPT_PLUGINS first
    assert "zoopt_test_thing" in sys.modules
