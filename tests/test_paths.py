"""A run's config.yaml holds absolute local paths: a relative ``--objective dir/file.py:attr`` or
``--model DIR`` given in one directory still works for ``--resume`` and ``zoopt eval`` from another."""

import json
import shutil
from pathlib import Path

import yaml

from zoopt.cli import main
from zoopt.config import absolute_paths, load_config
from zoopt.workflows.builders import objective_label

TESTS = Path(__file__).resolve().parent


def test_absolute_paths_touches_only_existing_local_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rewards").mkdir()
    (tmp_path / "rewards" / "mine.py").write_text("")
    (tmp_path / "model").mkdir()
    (tmp_path / "tiny").mkdir()  # a directory named like a model name does not change the name's meaning
    cfg = absolute_paths({"objective": "rewards/mine.py:fn", "model": "model"})
    assert cfg == {"objective": f"{tmp_path}/rewards/mine.py:fn", "model": str(tmp_path / "model")}
    for unchanged in ({"objective": "gsm8k", "model": "tiny"}, {"objective": "pkg.mod:fn", "model": "org/name"},
                      {"objective": "missing.py:fn", "model": "smollm2-135m"}):
        assert absolute_paths(dict(unchanged)) == unchanged
    assert load_config(None, ["objective=rewards/mine.py:fn"])["objective"] == f"{tmp_path}/rewards/mine.py:fn"
    assert objective_label(f"{tmp_path}/rewards/mine.py:fn") == "mine_fn" and objective_label("gsm8k") == "gsm8k"


def test_a_relative_objective_works_from_another_directory(tmp_path, monkeypatch):
    work, elsewhere = tmp_path / "work", tmp_path / "elsewhere"
    (work / "rewards").mkdir(parents=True)
    elsewhere.mkdir()
    shutil.copy(TESTS / "digits_objective.py", work / "rewards" / "digits.py")
    monkeypatch.chdir(work)
    tiny = ["--model", "tiny", "--set", "population_size=2", "--set", "prompts_per_step=2",
            "--set", "eval.n_problems=2", "--quiet"]
    assert main(["train", "--objective", "rewards/digits.py:Digits", *tiny, "--set", "steps=1",
                 "--set", "run_dir=run"]) == 0
    saved = yaml.safe_load((work / "run" / "config.yaml").read_text())
    assert saved["objective"] == f"{work}/rewards/digits.py:Digits"
    monkeypatch.chdir(elsewhere)
    assert main(["train", "--resume", str(work / "run"), "--set", "steps=2", "--quiet"]) == 0
    assert len((work / "run" / "metrics.jsonl").read_text().splitlines()) == 2
    assert main(["eval", "--model", str(work / "run"), "--n", "0", "--out", "ev", "--quiet"]) == 0
    summary = json.loads((elsewhere / "ev" / "summary.json").read_text())
    assert summary["objective"] == saved["objective"] and summary["n_problems"] == 2


def test_the_cache_is_zoopt_cache_else_xdg_else_home(tmp_path, monkeypatch):
    """README "Running it yourself": where the embedded model is built outside make."""
    from zoopt.models import cache_dir

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("ZOOPT_CACHE", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_dir() == tmp_path / "home" / ".cache" / "zoopt"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir() == tmp_path / "xdg" / "zoopt"
    monkeypatch.setenv("ZOOPT_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
