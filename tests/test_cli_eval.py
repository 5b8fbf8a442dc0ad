"""`zoopt eval`: files agree with each other and with the trainer's held-out evaluation."""

import csv
import json

import pytest

from zoopt.cli import build_parser, main
from zoopt.cli.common import eval_config
from zoopt.cli.eval import DEFAULT_KS, SUITE_KS, read_curve
from zoopt.config import load_config
from zoopt.metrics import pass_at_k
from zoopt.runs.references import resolve_model
from zoopt.workflows.builders import build_engine, build_objective, evaluate_run
from zoopt.workflows.train import train

PNG = b"\x89PNG\r\n\x1a\n"



def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_eval_files_agree_and_match_evaluate_run(tmp_path, capsys):
    out = tmp_path / "ev"
    rc = main(["eval", "--model", "tiny", "--objective", "arithmetic", "--n-problems", "8",
               "--k", "1,2", "--n", "2", "--set", "objective_args.digits=1", "--out", str(out),
               "--quiet"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = _rows(out / "per_problem.csv")
    assert len(rows) == summary["n_problems"] == 8
    assert all(0 <= int(r["gold"]) <= 18 for r in rows)  # objective_args.digits=1 took effect
    counts = [(int(r["n_samples"]), int(r["n_correct"])) for r in rows]
    assert all(n == 2 for n, _ in counts)
    for k in (1, 2):
        assert summary[f"pass@{k}"] == pytest.approx(
            sum(pass_at_k(n, c, k) for n, c in counts) / len(counts), abs=1e-12)
        assert [float(r[f"pass@{k}"]) for r in rows] == [pass_at_k(n, c, k) for n, c in counts]
    assert summary["greedy_accuracy"] == sum(r["greedy_correct"] == "True" for r in rows) / 8
    assert (out / "pass_at_k.png").read_bytes()[:8] == PNG
    assert "greedy_accuracy" in capsys.readouterr().out

    cfg = load_config(overrides=["model=tiny", "objective=arithmetic", "objective_args.digits=1",
                                 "eval.n_problems=8", "eval.n_samples=2", "eval.ks=[1,2]"])
    ref = evaluate_run(build_engine(cfg), build_objective(cfg), cfg)
    for key in ("greedy_accuracy", "pass@1", "pass@2", "mean_reward", "entropy"):
        assert summary[key] == ref[key], key
    assert summary["entropy"] > 1.0  # sampled text from a random model: a real, non-zero number


def test_defaults_are_the_trainers_held_out_settings():
    args = build_parser().parse_args(["eval", "--model", "tiny"])
    assert (args.k, args.n) == (None, None)  # --k: DEFAULT_KS, or SUITE_KS for a suite
    assert (DEFAULT_KS, SUITE_KS) == ("1,8,16,32", "1,16,32")
    cfg = eval_config("tiny", None, args, 32, (1, 8, 16, 32))
    defaults = load_config()
    for key in ("n_problems", "temperature", "max_new_tokens"):
        assert cfg["eval"][key] == defaults["eval"][key]
    for key in ("seed", "batch_size", "dtype", "device", "objective", "reward_timeout_s"):
        assert cfg[key] == defaults[key]
    assert (cfg["eval"]["n_problems"], cfg["eval"]["max_new_tokens"], cfg["batch_size"]) == (200, 10, 64)

    args = build_parser().parse_args(["eval", "--model", "tiny", "--n-problems", "5", "--seed", "3",
                                      "--temperature", "0.7", "--batch-size", "2", "--dtype", "float32",
                                      "--set", "eval.n_problems=9", "--set", "objective_args.digits=3"])
    cfg = eval_config("tiny", None, args, 4, (1, 4))
    assert (cfg["eval"]["n_problems"], cfg["seed"], cfg["eval"]["temperature"]) == (5, 3, 0.7)
    assert (cfg["batch_size"], cfg["dtype"], cfg["objective_args"]) == (2, "float32", {"digits": 3})
    assert (cfg["eval"]["n_samples"], cfg["eval"]["ks"]) == (4, [1, 4])


def test_eval_of_a_run_dir_reproduces_the_runs_final_evaluation(tmp_path, reward_spec):
    run = tmp_path / "run"
    cfg = load_config(overrides=[
        "model=tiny", f"objective={reward_spec}", "steps=1", "population_size=4",
        "prompts_per_step=8", "sigma=0.02", "lr=0.02", "eval.n_problems=8", "eval.n_samples=2",
        "eval.ks=[1,2]", f"run_dir={run}"])  # 8 prompts: the step's rewards differ (4 gave all 0s)
    train(cfg, show_progress=False)
    after = json.loads((run / "eval_after.json").read_text())
    before = json.loads((run / "eval_before.json").read_text())
    assert after["checksum"] != before["checksum"]  # training moved the weights
    assert resolve_model(run) == str(run / "model")
    assert resolve_model(run / "model") == str(run / "model")

    out = tmp_path / "ev"
    # no --objective and no --n-problems: both come from the run's config.yaml
    assert main(["eval", "--model", str(run), "--k", "1,2", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["objective"] == reward_spec and summary["n_problems"] == 8
    for key in ("checksum", "greedy_accuracy", "pass@1", "pass@2", "entropy", "mean_reward"):
        assert summary[key] == after[key], key
    assert 0 < summary["pass@2"] < 1 and summary["pass@2"] >= summary["pass@1"]


def test_eval_of_a_grpo_run_dir_takes_only_the_shared_keys(tmp_path, reward_spec, one_thread):
    """A GRPO run's config.yaml holds GRPO keys (loss_type, beta, ...) that train.yaml lacks:
    ``zoopt eval`` reads what evaluation needs from it and reproduces its final evaluation."""
    from zoopt.workflows.grpo import train_grpo

    run = tmp_path / "grpo"
    cfg = load_config(overrides=["model=tiny", f"objective={reward_spec}", "steps=1", "prompts_per_step=4",
                                 "sampling.n=2", "sampling.max_new_tokens=6", "lr=0.01", "eval.n_problems=8",
                                 "eval.max_new_tokens=6", f"run_dir={run}"], base="grpo")
    train_grpo(cfg, show_progress=False)
    after = json.loads((run / "eval_after.json").read_text())
    out = tmp_path / "ev"
    assert main(["eval", "--model", str(run), "--n", "0", "--k", "1", "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["n_problems"] == 8 and summary["dtype"] == "float32"
    assert summary["checksum"] == after["checksum"] and summary["greedy_accuracy"] == after["greedy_accuracy"]


@pytest.mark.parametrize("argv, words", [
    (["--n", "1", "--k", "2"], ["--n 1", "--k 2"]),
    (["--k", "0,2"], ["--k", "'0,2'"]),
    (["--k", "1,x"], ["--k", "'1,x'"]),
    (["--n-problems", "0"], ["--n-problems", "0"]),
    (["--set", "eval.n_problem=3"], ["eval.n_problem", "eval.n_problems"]),
])
def test_bad_flags_exit_2_with_one_line(argv, words, capsys):
    assert main(["eval", "--model", "tiny", "--objective", "arithmetic", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("zoopt eval: error:")
    for word in words:
        assert word in err


def test_missing_model_dir_is_a_one_line_error(tmp_path, capsys):
    assert main(["eval", "--model", str(tmp_path / "nope"), "--n", "0", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "nope" in err


def test_compare_draws_curves_from_summaries(tmp_path, capsys):
    dirs = []
    for name, p1, p4 in (("a", 0.25, 0.5), ("b", 0.5, 0.875)):
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(json.dumps(
            {"model": f"runs/{name}/model", "pass@1": p1, "pass@1_ci": [0, 1], "pass@4": p4,
             "greedy_accuracy": p1}))
        dirs.append(str(d))
    assert read_curve(dirs[1]) == ("b", {1: 0.5, 4: 0.875})
    out = tmp_path / "cmp"
    assert main(["eval", "--compare", *dirs, dirs[0], "--out", str(out)]) == 0
    assert (out / "pass_at_k.png").read_bytes()[:8] == PNG
    text = capsys.readouterr().out
    assert "0.8750" in text and "a (2)" in text  # a repeated directory gets its own label
    assert main(["eval", "--compare", str(tmp_path / "missing")]) == 2
