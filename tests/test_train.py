"""The trainer end to end on the tiny model: real learning, resume after kill, export, config errors."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from zoopt.cli import main
from zoopt.config import load_config
from zoopt.engines.base import Sampling
from zoopt.objective import step_indices
from zoopt.workflows.train import Trainer, export_from_seedlog, train

sys.path.insert(0, str(Path(__file__).parent))
from digits_objective import Digits  # noqa: E402

DIGITS = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
TINY = ["model=tiny", "dtype=float32", "prompts_per_step=8", "sampling.max_new_tokens=8",
        "eval.n_problems=0", "export=false", "population_size=8", "sigma=0.05", "lr=0.05"]


def center_reward(trainer):
    prompts = list(trainer.train_data["prompt"])
    out = trainer.engine.generate(prompts, Sampling(temperature=0.0, max_new_tokens=8))
    return float(np.mean(trainer.objective(prompts, [c[0].text for c in out])))


def test_es_raises_a_verifiable_reward_on_the_tiny_model(tmp_path):
    cfg = load_config(overrides=[*TINY, "steps=15", f"run_dir={tmp_path / 'run'}"])
    trainer = Trainer(cfg, tmp_path / "run", objective=Digits())
    before = center_reward(trainer)
    t0 = time.perf_counter()
    records = [trainer.step() for _ in range(15)]
    seconds = time.perf_counter() - t0
    after = center_reward(trainer)
    print(f"digit share {before:.3f} -> {after:.3f} in {seconds:.1f} s")
    assert after > before + 0.1, (before, after)
    vocab = trainer.engine.module.config.vocab_size
    assert all(0.0 < r["entropy"] <= np.log(vocab) for r in records)  # logged per step, in nats


def test_members_share_prompts_and_steps_are_reproducible():
    a = step_indices(100, seed=3, step=7, k=10)
    assert np.array_equal(a, step_indices(100, seed=3, step=7, k=10)) and len(set(a)) == 10
    assert not np.array_equal(a, step_indices(100, seed=3, step=8, k=10))


def run_cli(args, **kw):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "zoopt.cli", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw)


def test_resume_after_kill_gives_the_uninterrupted_checksum(tmp_path):
    common = ["train", "--quiet", "--objective", DIGITS] + [x for s in TINY for x in ("--set", s)]
    steps = ["--set", "steps=8"]
    full = run_cli([*common, *steps, "--set", f"run_dir={tmp_path / 'full'}"])
    killed = run_cli([*common, *steps, "--set", f"run_dir={tmp_path / 'killed'}"])
    log = tmp_path / "killed" / "seedlog.json"
    deadline = time.time() + 900  # generous: on a loaded 2-core machine a tiny step can take many seconds
    while time.time() < deadline and killed.poll() is None:
        if log.exists() and len(json.loads(log.read_text())["updates"]) >= 3:
            break
        time.sleep(0.05)
    if killed.poll() is not None:  # it ended by itself: say why, instead of "did not interrupt"
        pytest.fail(f"the run to be killed exited by itself (status {killed.returncode}): {killed.stdout.read()[-2000:]}")
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    done = len(json.loads(log.read_text())["updates"])
    assert 3 <= done < 8, f"killed after {done} steps: the test did not interrupt the run"
    assert full.wait(timeout=300) == 0, full.stdout.read()
    resumed = run_cli(["train", "--quiet", "--resume", str(tmp_path / "killed")])
    assert resumed.wait(timeout=300) == 0, resumed.stdout.read()
    full_sum = (tmp_path / "full" / "checksum.txt").read_text()
    assert (tmp_path / "killed" / "checksum.txt").read_text() == full_sum
    assert len(json.loads(log.read_text())["updates"]) == 8
    coefs = json.loads(log.read_text())["updates"]
    assert any(c != 0 for u in coefs for c in u["coefficients"]), "all updates were zero: nothing was tested"


def test_seed_log_reproduces_the_exported_weights(tmp_path):
    cfg = load_config(overrides=[*TINY, "steps=10", "export=true", f"run_dir={tmp_path / 'run'}",
                                 f"objective={DIGITS}"])
    result = train(cfg, show_progress=False)
    assert (result.run_dir / "training.png").read_bytes()[:4] == b"\x89PNG"
    path, checksum = export_from_seedlog(result.run_dir, tmp_path / "rebuilt")
    trained = load_file(str(result.run_dir / "model" / "model.safetensors"))
    rebuilt = load_file(str(Path(path) / "model.safetensors"))
    assert trained.keys() == rebuilt.keys()
    assert all(torch.equal(trained[k], rebuilt[k]) for k in trained)
    base = Trainer(load_config(overrides=[*TINY, f"run_dir={tmp_path / 'base'}"]), tmp_path / "base",
                   objective=Digits()).engine
    assert base.checksum() != result.checksum, "training did not move the weights"
    # and through the CLI
    assert main(["export", str(result.run_dir), "--out", str(tmp_path / "cli")]) == 0
    cli = load_file(str(tmp_path / "cli" / "model.safetensors"))
    assert all(torch.equal(trained[k], cli[k]) for k in trained)


@pytest.mark.parametrize("override,needle", [("sampling.temprature=1", "sampling.temperature"),
                                             ("popsize=3", "popsize"),
                                             ("sigma=-1", "sigma"),
                                             ("engine_args.max_model_len=512", "engine_args.max_model_len")])
def test_bad_config_is_a_one_line_error_naming_the_key(override, needle, capsys, tmp_path):
    code = main(["train", "--quiet", "--model", "tiny", "--set", override, "--set", f"run_dir={tmp_path}/r"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and needle in err and "\n" not in err, err


def test_resume_refuses_a_changed_run_key(tmp_path):
    cfg = load_config(overrides=[*TINY, "steps=1", f"run_dir={tmp_path / 'run'}"])
    Trainer(cfg, tmp_path / "run", objective=Digits()).step()
    cfg2 = dict(cfg, sigma=0.5)
    with pytest.raises(ValueError, match="'sigma'"):
        Trainer(cfg2, tmp_path / "run", objective=Digits())


def test_noise_cache_setting():
    from zoopt.config import ConfigError
    from zoopt.workflows.builders import noise_cache_bytes

    assert noise_cache_bytes(0, "cpu") == 0 and noise_cache_bytes(1.5, "cpu") == int(1.5 * 2**30)
    assert noise_cache_bytes("auto", "cuda:0") == 0 and noise_cache_bytes("auto", "cpu") > 0
    # a budget per host: the engines sharing it split it
    assert noise_cache_bytes(3, "cpu", engines_on_host=4) == 3 * 2**30 // 4
    assert 0 < noise_cache_bytes("auto", "cpu", engines_on_host=8) < noise_cache_bytes("auto", "cpu") // 4
    with pytest.raises(ValueError, match="engines_on_host"):
        noise_cache_bytes(1, "cpu", engines_on_host=0)
    with pytest.raises(ConfigError, match="noise_cache_gb"):
        noise_cache_bytes("lots", "cpu")
