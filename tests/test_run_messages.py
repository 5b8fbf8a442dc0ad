"""What a run says: plain numbers (never ``np.float64(...)``) in messages and ``metrics.jsonl``; a
finished run resumed has nothing to train (no "step 3/2"); ``zoopt export --upto`` past the end
of the log says how many steps it exported."""

import json

import pytest

from zoopt.cli import main


def sets(*items):
    return [x for item in items for x in ("--set", item)]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A 2-step tiny run on arithmetic: every reward is 0.0, so both updates are degenerate."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp("messages") / "run"
    try:
        assert main(["train", "--model", "tiny", "--quiet",
                     *sets("steps=2", "population_size=2", "prompts_per_step=2", "sampling.max_new_tokens=2",
                           "eval.n_problems=2", "eval.max_new_tokens=2", "noise_cache_gb=0", f"run_dir={run}")]) == 0
    finally:
        torch.set_num_threads(before)
    return run


def test_no_numpy_reprs_in_metrics_or_seed_log(finished):
    records = [json.loads(line) for line in (finished / "metrics.jsonl").read_text().splitlines()]
    assert [r["degenerate"] for r in records] == ["all 2 rewards equal 0.0"] * 2
    for name in ("metrics.jsonl", "seedlog.json", "eval_after.json"):
        assert "np." not in (finished / name).read_text(), name


def test_the_degenerate_warning_is_plain():
    import numpy as np

    from estimators.base import DegenerateRewardsWarning
    from estimators.one_point import OnePoint
    from estimators.shaping import zscore
    from zoopt.es import ES

    es = ES(OnePoint(zscore), lr=0.1, sigma=0.1, population_size=2)
    es.ask()
    with pytest.warns(DegenerateRewardsWarning) as caught:
        es.tell(np.zeros(2, dtype=np.float32))
    assert [str(w.message) for w in caught] == ["degenerate rewards at step 0: all 2 rewards equal 0.0; update is zero"]


def test_resuming_a_finished_run_trains_nothing_and_says_so(finished, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    eval_after = (finished / "eval_after.json").read_text()
    checksum = (finished / "checksum.txt").read_text()
    assert main(["train", "--resume", str(finished)]) == 0
    err = capsys.readouterr().err
    assert "the run already has its 2 steps: nothing to train" in err
    assert "step 3/2" not in err and "ES step" not in err
    assert (finished / "eval_after.json").read_text() == eval_after  # read back, not evaluated again
    assert (finished / "checksum.txt").read_text() == checksum
    assert len((finished / "metrics.jsonl").read_text().splitlines()) == 2


def test_export_upto_past_the_end_says_how_many_steps(finished, tmp_path, capsys):
    assert main(["export", str(finished), "--upto", "99", "--out", str(tmp_path / "all")]) == 0
    out = capsys.readouterr()
    assert "zoopt: warning: --upto 99: the seed log has 2 steps; exporting all 2" in out.err
    assert f"(weights checksum {(finished / 'checksum.txt').read_text().strip()})" in out.out
    assert main(["export", str(finished), "--upto", "2", "--out", str(tmp_path / "two")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["export", str(finished), "--upto", "-1", "--out", str(tmp_path / "neg")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--upto must be an integer ≥ 0, got -1" in err
