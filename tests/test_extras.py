"""Optional dependencies: a missing one is one line naming the extra; requirements are ranges."""

import importlib.util
import tomllib
from pathlib import Path

import pytest

from zoopt.cli import main
from zoopt.extras import OPTIONAL, MissingDependency, missing_dependency, require
from zoopt.registry import Registry

ROOT = Path(__file__).resolve().parents[1]
needs_no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


def test_a_missing_optional_module_becomes_one_line_naming_the_extra():
    error = missing_dependency(ModuleNotFoundError("No module named 'vllm'", name="vllm"))
    assert isinstance(error, MissingDependency) and "\n" not in str(error)
    assert 'pip install "zoopt-llm[vllm]"' in str(error) and "make setup-vllm" in str(error)
    assert 'pip install "zoopt-llm[ray]"' in str(missing_dependency(ModuleNotFoundError(name="ray.util")))
    assert missing_dependency(ModuleNotFoundError(name="numpyy")) is None  # not optional: a real bug
    assert missing_dependency(ImportError("cannot import name 'x'")) is None
    with pytest.raises(MissingDependency, match=r'psycopg2.*pip install "zoopt-llm\[postgres\]"'):
        require("psycopg2") if importlib.util.find_spec("psycopg2") is None else require_fake()


def require_fake():
    raise MissingDependency('psycopg2 ... pip install "zoopt-llm[postgres]"')


def test_every_extra_named_exists_in_pyproject():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {extra for extra, _ in OPTIONAL.values()} <= set(extras)
    assert any(req.startswith("psycopg2-binary") for req in extras["postgres"])


def test_library_requirements_are_ranges_and_the_makefile_pins_torch():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert not [d for d in deps if "==" in d], deps
    assert any(d.startswith("torch>=") for d in deps)
    assert "TORCH  ?= torch==2.13.0" in (ROOT / "Makefile").read_text()


def test_a_lazy_target_whose_module_needs_vllm_names_the_extra(tmp_path, monkeypatch):
    (tmp_path / "engine_needing_vllm.py").write_text("import vllm\nclass E: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = Registry("engine")
    registry.register("needs_vllm", "engine_needing_vllm:E")
    if importlib.util.find_spec("vllm") is None:
        with pytest.raises(MissingDependency, match=r'zoopt-llm\[vllm\]'):
            registry.get("needs_vllm")


@needs_no_vllm
def test_engine_vllm_without_vllm_is_one_line(tmp_path, capsys):
    assert main(["train", "--model", "tiny", "--engine", "vllm", "--set", "steps=1", "--set", "eval.n_problems=0",
                 "--set", f"run_dir={tmp_path / 'r'}", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("zoopt train: error: the vLLM engine (--engine vllm) needs the Python package 'vllm'")
    assert 'pip install "zoopt-llm[vllm]"' in err and "\n" not in err
    assert main(["eval", "--model", "tiny", "--engine", "vllm", "--n", "0", "--quiet",
                 "--out", str(tmp_path / "e")]) == 2
    assert 'zoopt-llm[vllm]' in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("psycopg") is not None or importlib.util.find_spec("psycopg2") is not None,
                    reason="a PostgreSQL driver is installed here")
def test_postgres_storage_without_a_driver_is_one_line(tmp_path, capsys):
    assert main(["sweep", "tiny", "--storage", "postgresql://user:secret@localhost/db", "--n-trials", "1",
                 "--run-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert 'storage postgresql://... needs a PostgreSQL driver' in err and 'pip install "zoopt-llm[postgres]"' in err
    assert "secret" not in err and "\n" not in err


def test_plain_postgresql_urls_fall_back_to_psycopg2(monkeypatch):
    from sweeps import study

    installed = {"psycopg2"}
    monkeypatch.setattr(study.importlib.util, "find_spec", lambda name: object() if name in installed else None)
    default = __import__("sqlalchemy.engine", fromlist=["make_url"]).make_url("postgresql://h/db").get_dialect().driver
    expected = "postgresql+psycopg2://u@h/db" if default != "psycopg2" else "postgresql://u@h/db"
    assert study.storage_url("postgresql://u@h/db") == expected
    installed.add(default)  # SQLAlchemy's own default is there: the URL is left alone
    assert study.storage_url("postgresql://u@h/db") == "postgresql://u@h/db"
    assert study.storage_url("sqlite:///x.db") == "sqlite:///x.db"


def test_trl_reward_functions_are_an_installable_extra():
    """README and docs/python.md import ``think_format_reward`` from ``trl.rewards``: the extra that
    installs it exists, the docs name it, and its absence is one line naming it."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert [req.split(">=")[0] for req in extras["trl"]] == ["trl"]
    for doc in ("README.md", "docs/python.md"):
        text = (ROOT / doc).read_text()
        assert "think_format_reward" in text and 'pip install "zoopt-llm[trl]"' in text, doc
    error = missing_dependency(ModuleNotFoundError("No module named 'trl'", name="trl"))
    assert str(error) == ("TRL's reward functions (trl.rewards) needs the Python package 'trl', which is not installed: "
                          'pip install "zoopt-llm[trl]"')
