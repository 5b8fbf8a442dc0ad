"""GRPO resume (zoopt.workflows.grpo): a run continued from its trainer_state.pt is, on the same
machine, the run that was never stopped — the same weights bit for bit and the same step records."""

import json
import sys
from pathlib import Path

import pytest

from zoopt.config import ConfigError, load_config
from zoopt.workflows.grpo import GRPOTrainer, train_grpo

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

TINY = ["model=tiny", "prompts_per_step=4", "sampling.max_new_tokens=6", "sampling.n=4", "eval.n_problems=0",
        "export=false", "lr=1e-2", "steps=4"]
TIMES = ("time_generate_s", "time_score_s", "time_train_s", "time_step_s", "time_sync_s")

pytestmark = pytest.mark.usefixtures("one_thread")


def config(run_dir, *overrides):
    return load_config(overrides=[*TINY, f"run_dir={run_dir}", *overrides], base="grpo")


def records(run_dir) -> list[dict]:
    lines = (Path(run_dir) / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMES} for x in lines]


@pytest.mark.parametrize("beta", ["0.0", "0.1"])  # 0.1: the KL reference is rebuilt from the start weights before the state loads
def test_a_resumed_run_is_the_uninterrupted_run_bit_for_bit(tmp_path, beta):
    whole = train_grpo(config(tmp_path / "whole", f"beta={beta}"), show_progress=False, objective=Digits())

    cut = tmp_path / "cut"
    first = GRPOTrainer(config(cut, "state_every=2", f"beta={beta}"), cut, objective=Digits())
    try:
        for _ in range(3):  # the state is saved after step 2; step 3 is lost with the kill
            first.step()
    finally:
        first.close()
    assert len(records(cut)) == 3
    resumed = train_grpo(config(cut, "state_every=2", f"beta={beta}"), show_progress=False, objective=Digits(),
                         resume=cut)

    assert resumed.checksum == whole.checksum
    assert records(cut) == records(tmp_path / "whole")  # the lost step logged once, as it was
    assert [r["step"] for r in records(cut)] == [0, 1, 2, 3]


def test_the_state_is_saved_after_the_last_step_too(tmp_path):
    train_grpo(config(tmp_path / "r", "state_every=3"), show_progress=False, objective=Digits())
    import torch

    assert torch.load(tmp_path / "r" / "trainer_state.pt", weights_only=True)["step_count"] == 4
    assert not (tmp_path / "r" / "trainer_state.pt.tmp").exists()


def test_a_used_directory_without_a_state_is_refused(tmp_path):
    train_grpo(config(tmp_path / "r"), show_progress=False, objective=Digits())
    with pytest.raises(ConfigError, match="already holds a run; .*--resume"):
        train_grpo(config(tmp_path / "r"), show_progress=False, objective=Digits())
    with pytest.raises(ConfigError, match="--resume: no trainer_state.pt in"):
        train_grpo(config(tmp_path / "r"), show_progress=False, objective=Digits(), resume=tmp_path / "r")


def test_a_resume_with_another_run_key_names_it(tmp_path):
    train_grpo(config(tmp_path / "r", "state_every=2", "steps=2"), show_progress=False, objective=Digits())
    with pytest.raises(ConfigError, match="config key 'lr' is 0.5 but the run .* was started with 0.01"):
        train_grpo(config(tmp_path / "r", "state_every=2", "lr=0.5"), show_progress=False, objective=Digits(),
                   resume=tmp_path / "r")


def test_zoopt_grpo_resume_reads_the_runs_own_config(tmp_path):
    from zoopt.cli import build_parser

    digits = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
    sets = [x for s in [*TINY, "steps=2", "state_every=1", f"run_dir={tmp_path / 'r'}"] for x in ("--set", s)]
    parser = build_parser()
    args = parser.parse_args(["grpo", "--quiet", "--objective", digits, *sets])
    assert args.func(args) == 0
    more = parser.parse_args(["grpo", "--quiet", "--objective", digits, "--resume", str(tmp_path / "r"),
                              "--set", "steps=3"])
    assert more.func(more) == 0
    assert [r["step"] for r in records(tmp_path / "r")] == [0, 1, 2]
