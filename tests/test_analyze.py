"""`zoopt analyze`: drift, magnitude shares and thresholded checkpoints, checked against
direct computations on the saved tensors."""

import json
import math

import pytest
import torch
import yaml
from safetensors.torch import load_file

from zoopt.reporting.plots import plot_run
from zoopt.cli import main
from zoopt.engines.hf import HFEngine
from zoopt.models import load_model
from zoopt.noise import Gaussian
from zoopt.types import Update

PNG = b"\x89PNG\r\n\x1a\n"
TAU = 1.5e-3
REWARD = "def digit_first(completions, **kw):\n    return [float(c[:1].isdigit()) for c in completions]\n"


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """BASE = tiny (fp32); TRAINED = BASE + 1e-3·ε(1) − 2e-3·ε(2), Δ ~ N(0, 5e-6) elementwise."""
    root = tmp_path_factory.mktemp("ckpts")
    engine = HFEngine.from_pretrained("tiny", dtype="float32")
    base = engine.export_pretrained(root / "base")
    engine.apply(Gaussian(), Update((1, 2), (1e-3, -2e-3)))
    trained = engine.export_pretrained(root / "trained")
    return base, trained


@pytest.fixture(scope="module")
def analysis(ckpts, tmp_path_factory):
    out = tmp_path_factory.mktemp("analysis")
    base, trained = ckpts
    assert main(["analyze", str(base), str(trained), "--threshold", f"0,{TAU},inf",
                 "--out", str(out), "--quiet"]) == 0
    return out, json.loads((out / "analysis.json").read_text())


def _group(name):
    for word, group in (("embed_tokens", "embeddings"), ("norm", "norms"),
                        ("self_attn", "attention"), ("mlp", "mlp")):
        if word in name:
            return group
    return "other"


def _tensors(ckpts):
    b, t = (load_file(str(d / "model.safetensors")) for d in ckpts)
    assert b.keys() == t.keys() and "lm_head.weight" not in b  # tied: saved once
    return b, t


def test_drift_equals_a_direct_float64_computation(ckpts, analysis):
    _, report = analysis
    b, t = _tensors(ckpts)
    num, den = {}, {}
    for k in b:
        for g in (_group(k), "all"):
            num[g] = num.get(g, 0.0) + float(((t[k].double() - b[k].double()) ** 2).sum())
            den[g] = den.get(g, 0.0) + float((b[k].double() ** 2).sum())
    assert set(report["drift"]) == set(num) == {"all", "embeddings", "attention", "mlp", "norms"}
    for g in num:
        assert report["drift"][g] == pytest.approx(math.sqrt(num[g] / den[g]), rel=1e-12), g
    # Δ has std √5·1e-3 and the base weights std 0.1 (norms 1.0): D_rel ≈ 0.0224 off the norms
    assert report["drift"]["mlp"] == pytest.approx(math.sqrt(5e-6) / 0.1, rel=0.03)


def test_shares_count_every_weight_once(ckpts, analysis):
    _, report = analysis
    b, t = _tensors(ckpts)
    d = torch.cat([(t[k].float() - b[k].float()).abs().flatten() for k in b])
    s = report["shares"]
    assert s["total"] == d.numel() == sum(v.numel() for v in b.values())
    assert (s["zero"], s["small"], s["large"]) == (int((d == 0).sum()),
                                                    int(((d > 0) & (d <= TAU)).sum()), int((d > TAU).sum()))
    assert s["zero"] + s["small"] + s["large"] == s["total"]
    assert s["share_small"] + s["share_large"] == pytest.approx(1.0, abs=1e-15)
    # P(|N(0, 5e-6)| ≤ 1.5e-3) = erf(1.5e-3 / (√5e-3·√2)) = 0.4977; 79 360 draws: sd 0.0018
    assert s["share_small"] == pytest.approx(math.erf(TAU / math.sqrt(1e-5)), abs=0.01)
    groups = report["shares_by_group"].values()
    for key in ("total", "zero", "small", "large"):
        assert sum(g[key] for g in groups) == s[key], key
    assert sum(report["histogram"]["counts"]) == s["nonzero"]
    assert len(report["histogram"]["edges"]) == 61


def test_thresholded_checkpoints_reload_bit_for_bit(ckpts, analysis):
    out, report = analysis
    base, _ = (load_model(str(d), "float32")[0] for d in ckpts)
    trained = load_model(str(ckpts[1]), "float32")[0]
    recs = {r["tau"]: r for r in report["thresholds"]}
    assert recs["inf"]["reverted"] == report["shares"]["nonzero"] and recs[0.0]["reverted"] == 0
    assert recs[TAU]["reverted"] == report["shares"]["small"]
    for tau, ref in ((0.0, trained), ("inf", base)):
        model = load_model(recs[tau]["dir"], "float32")[0]
        got, want = model.state_dict(), ref.state_dict()
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want), tau
        assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    mid = dict(load_model(recs[TAU]["dir"], "float32")[0].named_parameters())
    bp, tp = dict(base.named_parameters()), dict(trained.named_parameters())
    differs = 0
    for k, p in mid.items():
        keep = (tp[k] - bp[k]).abs() > TAU
        assert torch.equal(p, torch.where(keep, tp[k], bp[k])), k
        differs += int((p != tp[k]).sum())
    assert differs == recs[TAU]["reverted"]
    assert recs[TAU]["share_reverted"] == pytest.approx(report["shares"]["share_small"], abs=0)
    assert not list(out.glob(".tau-*"))  # no temporary directories left behind


def test_histogram_png(analysis):
    out, report = analysis
    assert (out / "magnitude_histogram.png").read_bytes()[:8] == PNG
    assert report["plots"]["magnitude_histogram"] == str(out / "magnitude_histogram.png")


def test_thresholds_are_evaluated_on_their_own_weights(ckpts, tmp_path, capsys):
    spec = tmp_path / "digit_reward.py"
    spec.write_text(REWARD)
    out = tmp_path / "out"
    assert main(["analyze", str(ckpts[0]), str(ckpts[1]), "--threshold", "0,inf",
                 "--eval-objective", f"{spec}:digit_first", "--n-problems", "8", "--n", "2",
                 "--dtype", "float32", "--out", str(out), "--quiet"]) == 0
    report = json.loads((out / "analysis.json").read_text())
    ev, (t0, tinf) = report["eval"], report["thresholds"]
    assert ev["settings"]["n_problems"] == 8 and ev["settings"]["n_samples"] == 2
    assert t0["eval"]["checksum"] == ev["trained"]["checksum"] != ev["base"]["checksum"]
    assert tinf["eval"]["checksum"] == ev["base"]["checksum"]
    for key in ("greedy_accuracy", "pass@1"):
        assert t0[f"{key}_change"] == 0.0
        assert tinf[f"{key}_change"] == ev["base"][key] - ev["trained"][key]
    assert 0 < ev["base"]["pass@1"] < 1
    assert "retained" in capsys.readouterr().out


def test_run_dir_alone_and_training_plot(ckpts, tmp_path, capsys):
    run = tmp_path / "run"
    trained = load_model(str(ckpts[1]), "float32")
    (run / "model").mkdir(parents=True)
    for part in trained:
        part.save_pretrained(str(run / "model"))
    (run / "config.yaml").write_text(yaml.safe_dump({"model": str(ckpts[0])}))
    lines = [{"step": 0, "reward_mean": 0.1, "reward_max": 0.3},
             {"step": 0, "eval_accuracy": 0.2},  # the trainer's separate periodic-eval line
             {"step": 1, "reward_mean": 0.2, "reward_max": 0.4}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    out = tmp_path / "out"
    assert main(["analyze", str(run), "--run", str(run), "--out", str(out), "--quiet"]) == 0
    report = json.loads((out / "analysis.json").read_text())
    assert report["base_path"] == str(ckpts[0]) and report["trained_path"] == str(run / "model")
    assert report["drift"]["all"] == pytest.approx(0.0189, abs=5e-4)
    assert (run / "training.png").read_bytes()[:8] == PNG
    assert plot_run(run) == run / "training.png"
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval_accuracy": 0.2}) + "\n")
    with pytest.raises(ValueError, match="reward_mean"):
        plot_run(run)


@pytest.mark.parametrize("argv, words", [
    ([], ["BASE TRAINED"]),
    (["{base}"], ["BASE and TRAINED"]),
    (["{base}", "{trained}", "--threshold", "1e-3,-1"], ["--threshold", "'1e-3,-1'"]),
    (["{base}", "{trained}", "--tau", "-1"], ["--tau", "-1"]),
    (["{base}", "{trained}", "--n-problems", "3"], ["--n-problems", "--eval-objective"]),
    (["--run", "{base}"], ["metrics.jsonl"]),
])
def test_bad_arguments_exit_2_with_one_line(ckpts, argv, words, capsys):
    argv = [a.format(base=ckpts[0], trained=ckpts[1]) for a in argv]
    assert main(["analyze", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("zoopt analyze: error:")
    for word in words:
        assert word in err
