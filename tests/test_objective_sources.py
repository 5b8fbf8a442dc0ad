"""docs/objectives.md: every data-backed objective takes ``source=auto|hub|offline``, and data it
cannot have is one line naming the objective (never a traceback), hub or no hub.  No test here
reaches the hub: ``datasets.load_dataset`` is replaced where a hub read is simulated."""

import re
from pathlib import Path

import pytest

import objectives
from objectives.humaneval import HumanEval, load_problems
from objectives.mbpp import MBPP
from zoopt.cli import main
from zoopt.objective import DataUnavailable

ROOT = Path(__file__).resolve().parents[1]
GENERATED = {"arithmetic", "countdown"}


def data_backed() -> list[str]:
    """The built-ins whose table row in docs/objectives.md names a hub or an offline source."""
    rows = re.findall(r"^\| `(\w+)` \|[^|]*\| ([^|]*) \|", (ROOT / "docs" / "objectives.md").read_text(), re.M)
    names = [name for name, data in rows if name not in GENERATED and ("hub" in data or "offline" in data)]
    assert {"gsm8k", "math500", "champ", "gpqa_diamond", "humaneval", "mbpp"} <= set(names)
    return names


@pytest.mark.parametrize("name", data_backed())
def test_every_data_backed_objective_takes_source(name):
    for source in ("auto", "hub", "offline"):
        try:
            objective = objectives.get(name, source=source)
        except DataUnavailable as exc:  # no offline source: said at construction, in one line
            assert source == "offline" and "\n" not in str(exc) and name in str(exc)
            continue
        except ValueError as exc:  # champ ships offline only: not on the hub, said in one line
            assert source == "hub" and "\n" not in str(exc) and f"{name} is not on the hub" in str(exc)
            continue
        assert objective.source == source
    with pytest.raises(ValueError, match="unknown source 'disk'"):
        objectives.get(name, source="disk")


def test_the_table_names_the_real_data_arguments():
    doc = (ROOT / "docs" / "objectives.md").read_text()
    row = {name: data for name, data in re.findall(r"^\| `(\w+)` \|[^|]*\| ([^|]*) \|", doc, re.M)}
    assert "`data_files`" in row["mbpp"] and "`data_file`" in row["humaneval"]
    MBPP(data_files={"test": "t.jsonl"})
    HumanEval(data_file="h.jsonl")
    with pytest.raises(TypeError):
        MBPP(data_file="t.jsonl")


def fail_hub(*args, **kwargs):
    raise ConnectionError("Couldn't reach the hub (simulated)")


def test_mbpp_without_a_hub_is_one_line(monkeypatch, tmp_path, capsys):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", fail_hub)
    assert main(["eval", "--model", "tiny", "--objective", "mbpp", "--out", str(tmp_path / "e"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith("zoopt eval: error: mbpp: the hub dataset could not be loaded (ConnectionError: Couldn't "
                          "reach the hub (simulated)) and mbpp has no offline source")
    with pytest.raises(DataUnavailable, match="^mbpp has no offline source"):
        MBPP(source="offline")


def test_humaneval_sources(monkeypatch):
    package = HumanEval(source="offline").problems("test")
    assert HumanEval().problems("test") == package and len(load_problems()) == 164
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", fail_hub)
    with pytest.raises(DataUnavailable, match=r"^humaneval: the hub dataset could not be loaded \(ConnectionError"):
        HumanEval(source="hub").problems("test")
    rows = [dict(p) for p in load_problems()]

    class Rows:  # what the hub's openai/openai_humaneval gives: the package's columns
        def to_list(self):
            return rows

    monkeypatch.setattr(datasets, "load_dataset", lambda path, name=None, split=None: Rows())
    assert HumanEval(source="hub").problems("test") == package
    with pytest.raises(ValueError, match="data_file replaces the package's problems"):
        HumanEval(source="hub", data_file="h.jsonl")
