"""``zoopt study`` reads its data before any work: without the hub, ``paper-easy`` stops at once
with the cause in one line (docs/study.md), and no study directory is left behind.  The hub is
never contacted: ``datasets.load_dataset`` is replaced by one that fails as an offline hub does."""

import pytest

from zoopt.cli import main


@pytest.fixture
def no_hub(monkeypatch):
    import datasets

    def load_dataset(path, *args, **kwargs):
        raise ConnectionError(f"Couldn't reach '{path}' on the Hub (simulated)")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


def one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("zoopt: warning:")]
    assert len(err) == 1, err
    return err[0]


def test_paper_easy_without_the_hub_says_so_before_any_work(no_hub, tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["study", "paper-easy", "--out", str(out), "--quiet"]) == 2
    assert one_line(capsys).startswith("zoopt study: error: gsm8k: the hub dataset could not be loaded "
                                       "(ConnectionError: Couldn't reach 'openai/gsm8k' on the Hub (simulated))")
    assert not out.exists()  # no model was loaded (Qwen is not here either), nothing written


def test_the_offline_fallback_names_the_too_small_split(no_hub, tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["study", "paper-easy", "--set", "objective_args.source=auto", "--out", str(out), "--quiet"]) == 2
    assert one_line(capsys).startswith("zoopt study: error: tuning.validation: 256 problems leave none of the "
                                       "43 train problems of 'gsm8k' to train on")
    assert not out.exists()
