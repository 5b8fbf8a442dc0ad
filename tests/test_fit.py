"""``zoopt.fit``: an LLM trained from Python with objects — an estimator never registered — in the
run directory ``zoopt train`` writes, through the same loop (same checksum as the CLI)."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from zoopt import ES, EarlyStopping, Gaussian, Sampling, fit
from zoopt.callbacks import Callback
from zoopt.cli import main
from zoopt.config import ConfigError, load_config
from zoopt.engines.hf import HFEngine
from zoopt.hparams import EvalConfig
from zoopt.types import Member, Population, Update
from zoopt.workflows.train import export_from_seedlog, train

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

DIGITS = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
SAMPLING = Sampling(temperature=0.0, max_new_tokens=8)


class SignOfPairs:
    """An estimator written here and never registered: antithetic pairs θ ± σε, and each pair
    moves by the sign of its reward difference, ĝ = (2/N)·Σ_pairs sign(r₊ − r₋)·ε (sign-ES).
    It satisfies the estimator protocol (``plan``, ``update``) and nothing else."""

    def plan(self, step, population_size, sigma, base_seed):
        state = np.random.SeedSequence([base_seed, step, 0x51]).generate_state(population_size // 2)
        return Population(step, float(sigma), tuple(Member(int(s) >> 1, sign) for s in state for sign in (1, -1)))

    def update(self, population, rewards):
        r = np.asarray(rewards, dtype=np.float64).reshape(-1, 2)
        seeds = tuple(m.seed for m in population.members[::2])
        coefficients = tuple(float(np.sign(plus - minus)) * 2 / len(population) for plus, minus in r)
        return Update(seeds, coefficients)


def make_es(seed=0):
    return ES(SignOfPairs(), noise=Gaussian(), lr=0.02, sigma=0.05, population_size=8, seed=seed)


def center_reward(engine, objective):
    prompts = list(objective.dataset("train")["prompt"])
    out = engine.generate(prompts, SAMPLING)
    return float(np.mean(objective(prompts, [c[0].text for c in out])))


def tiny():
    return HFEngine.from_pretrained("tiny", dtype="float32")


def test_an_unregistered_estimator_trains_the_tiny_model_and_export_replays_it(tmp_path, capsys, one_thread):
    engine, objective = tiny(), Digits()
    before = center_reward(engine, objective)
    result = fit(engine, objective, make_es(), steps=12, prompts_per_step=8, sampling=SAMPLING,
                 run_dir=tmp_path / "run", progress=False)
    after = center_reward(engine, objective)
    print(f"digit share {before:.3f} -> {after:.3f}")
    assert after > before + 0.1, (before, after)
    assert result.steps == 12 and result.checksum == engine.checksum()
    # the run directory of `zoopt train`: seed log, metrics, config, checksum, plot
    run = result.run_dir
    log = json.loads((run / "seedlog.json").read_text())
    assert len(log["updates"]) == 12 and (log["model"], log["dtype"]) == ("tiny", "float32")
    assert "(not registered)" in log["objects"]["estimator"] and "SignOfPairs" in log["objects"]["estimator"]
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 12
    assert (run / "checksum.txt").read_text().strip() == result.checksum
    assert (run / "training.png").read_bytes()[:4] == b"\x89PNG"
    # export defaults to true, as in zoopt train: `zoopt eval --model RUN` reads RUN/model
    digits = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
    assert main(["eval", "--model", str(run), "--objective", digits, "--n", "0", "--n-problems", "2",
                 "--max-new-tokens", "2", "--out", str(tmp_path / "eval"), "--quiet"]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["checksum"] == result.checksum
    # zoopt export rebuilds the trained weights from the seed log alone, bit for bit
    engine.export_pretrained(tmp_path / "trained")
    assert main(["export", str(run), "--out", str(tmp_path / "replayed")]) == 0
    assert f"(weights checksum {result.checksum})" in capsys.readouterr().out
    trained = load_file(str(tmp_path / "trained" / "model.safetensors"))
    replayed = load_file(str(tmp_path / "replayed" / "model.safetensors"))
    assert trained.keys() == replayed.keys() and all(torch.equal(trained[k], replayed[k]) for k in trained)
    # zoopt train --resume cannot rebuild the estimator from a config, and says so in one line
    assert main(["train", "--resume", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "SignOfPairs (not registered)" in err and "resume=True" in err, err


def test_resume_from_python_ends_where_an_uninterrupted_run_does(tmp_path, one_thread):
    common = dict(prompts_per_step=4, sampling=SAMPLING, progress=False)
    full = fit(tiny(), Digits(), make_es(), steps=4, run_dir=tmp_path / "full", **common)
    fit(tiny(), Digits(), make_es(), steps=2, run_dir=tmp_path / "cut", **common)
    with pytest.raises(ConfigError, match="already holds a run; pass resume=True"):
        fit(tiny(), Digits(), make_es(), steps=4, run_dir=tmp_path / "cut", **common)
    resumed = fit(tiny(), Digits(), make_es(), steps=4, run_dir=tmp_path / "cut", resume=True, **common)
    assert resumed.steps == 4 and resumed.checksum == full.checksum
    assert len(resumed.history) == 2  # only the two steps it ran
    # the objects and the weights must be the run's
    with pytest.raises(ConfigError, match=r"config key 'sigma' is 0.1 but the run was started with 0.05"):
        fit(tiny(), Digits(), ES(SignOfPairs(), lr=0.02, sigma=0.1, population_size=8), steps=5,
            run_dir=tmp_path / "cut", resume=True, **common)
    moved = tiny()
    moved.apply(Gaussian(), Update((1,), (0.01,)))
    with pytest.raises(ConfigError, match="are not the ones the run started from"):
        fit(moved, Digits(), make_es(), steps=5, run_dir=tmp_path / "cut", resume=True, **common)


def test_the_cli_and_the_python_api_give_the_same_checksum(tmp_path, one_thread):
    from estimators import OnePoint, zscore

    keys = ["model=tiny", "dtype=float32", "steps=3", "prompts_per_step=4", "population_size=4", "sigma=0.05",
            "lr=0.05", "seed=3", "sampling.max_new_tokens=6", "eval.n_problems=0", "export=false",
            "noise_cache_gb=0", f"objective={DIGITS}", f"run_dir={tmp_path / 'cli'}"]
    cli = train(load_config(overrides=keys), show_progress=False)
    es = ES(OnePoint(zscore), noise=Gaussian(), lr=0.05, sigma=0.05, population_size=4, seed=3)
    python = fit(tiny(), Digits(), es, steps=3, prompts_per_step=4, sampling=Sampling(temperature=0.0, max_new_tokens=6),
                 run_dir=tmp_path / "python", progress=False)
    assert python.checksum == cli.checksum
    assert [r["reward_mean"] for r in python.history] == [r["reward_mean"] for r in cli.history]
    assert len({r["reward_mean"] for r in cli.history}) > 1, "no step moved the reward: nothing was compared"
    # a registered estimator is named by its registry name in config.yaml
    assert "estimator: one_point" in (tmp_path / "python" / "config.yaml").read_text()


class StopAfter(Callback):
    def __init__(self, steps):
        self.steps, self.seen = steps, []

    def on_train_begin(self, trainer):
        self.seen.append(("begin", trainer.steps_done))

    def on_step_end(self, record):
        self.seen.append(("step", record["step"]))
        return record["step"] + 1 >= self.steps

    def on_evaluate(self, summary):
        self.seen.append((summary["tag"], summary["step"], summary["n_problems"]))

    def on_train_end(self, result):
        self.seen.append(("end", result.steps, result.stopped_early))


def test_callbacks_hear_every_step_and_evaluation_and_can_stop_the_run(tmp_path, one_thread):
    callback = StopAfter(2)
    result = fit(tiny(), Digits(), make_es(), steps=5, prompts_per_step=2, sampling=SAMPLING, callbacks=[callback],
                 evaluation=EvalConfig(n_problems=2, max_new_tokens=4), run_dir=tmp_path / "run", progress=False,
                 checkpoint_every=1)
    assert callback.seen == [("begin", 0), ("before", 0, 2), ("step", 0), ("step", 1), ("after", 2, 2),
                             ("end", 2, True)]
    assert result.stopped_early and result.steps == 2
    assert len(json.loads((tmp_path / "run" / "seedlog.json").read_text())["updates"]) == 2
    assert json.loads((tmp_path / "run" / "eval_after.json").read_text())["n_problems"] == 2
    # checkpoint_every (TRL's save_steps): the weights after steps 1 and 2, as the seed log rebuilds them
    assert sorted(p.name for p in (tmp_path / "run").glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]
    _, upto_1 = export_from_seedlog(tmp_path / "run", tmp_path / "upto-1", upto=1)
    checkpoint = load_file(str(tmp_path / "run" / "checkpoint-1" / "model.safetensors"))
    replayed = load_file(str(tmp_path / "upto-1" / "model.safetensors"))
    assert all(torch.equal(checkpoint[k], replayed[k]) for k in checkpoint)
    assert upto_1 != result.checksum


def test_early_stopping_counts_observations_without_improvement():
    stop = EarlyStopping(metric="reward_mean", patience=2, min_delta=0.01)
    values = [0.10, 0.20, 0.205, 0.30, 0.29, 0.295]  # no gain > 0.01 after 0.30: stops at the second
    asked = [stop.on_step_end({"step": i, "reward_mean": v}) for i, v in enumerate(values)]
    assert asked == [False, False, False, False, False, True] and stop.stopped_at == 6 and stop.best == 0.30
    low = EarlyStopping(metric="greedy_accuracy", patience=1, mode="min")
    assert [low.on_evaluate({"step": s, "greedy_accuracy": v}) for s, v in ((0, 0.5), (2, 0.4), (4, 0.45))] == [
        False, False, True]
    assert low.on_step_end({"step": 5, "reward_mean": 1.0}) is False  # records without the metric are not observations
    with pytest.raises(ValueError, match="patience"):
        EarlyStopping(patience=0)


def test_bad_arguments_are_one_line_naming_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"^config key 'steps' must be an integer ≥ 0, got -1$"):
        fit(tiny(), Digits(), make_es(), steps=-1, prompts_per_step=2, sampling=SAMPLING, run_dir=tmp_path / "a")
    with pytest.raises(ConfigError, match=r"^config key 'report_to' must be one of none, tensorboard"):
        fit(tiny(), Digits(), make_es(), steps=1, prompts_per_step=2, sampling=SAMPLING, report_to="mlflow",
            run_dir=tmp_path / "b")
    with pytest.raises(TypeError, match="sampling must be a zoopt.engines.base.Sampling"):
        fit(tiny(), Digits(), make_es(), steps=1, prompts_per_step=2, sampling={"temperature": 0}, run_dir=tmp_path / "c")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
