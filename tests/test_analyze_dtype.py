"""`zoopt analyze` compares a run with its base in the dtype the run worked in.

A run in bf16/fp16 loads its base in that dtype and keeps an fp32 master made of those weights,
so its exported ``model/`` starts from ``fp32(cast(θ₀))``, not from the fp32 ``θ₀``.  A run whose
every coefficient is 0.0 (the tiny model never solves arithmetic: every reward is 0, z-scoring
gives a zero update) must report D_rel 0 and no weight moved, in each dtype; compared with the
fp32 base instead, the base's own rounding showed up as movement (the numbers below).
"""

import json

import pytest

from zoopt.cli import main
from zoopt.models import load_model
from zoopt.runs.references import load_base, run_dtype
from zoopt.metrics import relative_drift

TINY_WEIGHTS = 79_360  # named parameters of the tiny model (tied lm_head once)
# Weights that differ between fp32 θ₀ and fp32(cast(θ₀)) on the tiny model: what the old fp32
# comparison reported as "moved" for a run that did not move (the 78,975 of 79,360 in bf16).
ROUNDED = {"bfloat16": (78_975, 1.3993e-3), "float16": (78_967, 1.7428e-4), "float32": (0, 0.0)}


def sets(*items):
    return [x for item in items for x in ("--set", item)]


@pytest.fixture(scope="module", params=["bfloat16", "float16", "float32"])
def zero_run(request, tmp_path_factory):
    dtype = request.param
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    run = tmp_path_factory.mktemp(f"zero-{dtype}") / "run"
    try:
        assert main(["train", "--model", "tiny", "--quiet",
                     *sets(f"dtype={dtype}", "steps=1", "population_size=2", "prompts_per_step=2",
                           "sampling.max_new_tokens=2", "eval.n_problems=0", "noise_cache_gb=0",
                           f"run_dir={run}")]) == 0
    finally:
        torch.set_num_threads(before)
    updates = json.loads((run / "seedlog.json").read_text())["updates"]
    assert [c for u in updates for c in u["coefficients"]] == [0.0, 0.0]  # a zero update, really
    return dtype, run


def _analyze(run, out, *extra):
    assert main(["analyze", str(run), "--out", str(out), "--quiet", *extra]) == 0
    return json.loads((out / "analysis.json").read_text())


def test_a_zero_update_reports_no_drift_and_nothing_moved(zero_run, tmp_path):
    dtype, run = zero_run
    assert run_dtype(run) == dtype
    report = _analyze(run, tmp_path / "a")
    assert report["dtype"] == dtype
    assert report["drift"] == {g: 0.0 for g in ("all", "attention", "embeddings", "mlp", "norms")}
    shares = report["shares"]
    assert (shares["total"], shares["zero"], shares["nonzero"], shares["small"], shares["large"]) == (
        TINY_WEIGHTS, TINY_WEIGHTS, 0, 0, 0)
    assert all(s["nonzero"] == 0 for s in report["shares_by_group"].values())
    assert sum(report["histogram"]["counts"]) == 0


def test_against_the_fp32_base_the_rounding_counted_as_movement(zero_run, tmp_path):
    """What the analysis did before it knew the run's dtype (and still does with --dtype float32)."""
    dtype, run = zero_run
    report = _analyze(run, tmp_path / "b", "--dtype", "float32")
    assert report["dtype"] == "float32"
    moved, d_rel = ROUNDED[dtype]
    assert report["shares"]["nonzero"] == moved
    assert report["drift"]["all"] == pytest.approx(d_rel, rel=1e-3, abs=0.0), report["drift"]["all"]


def test_load_base_is_the_engines_cast_widened(zero_run):
    """``load_base`` equals the run's own exported master at step 0, tensor for tensor."""
    dtype, run = zero_run
    base = load_base("tiny", dtype).params
    trained = {n: p.detach() for n, p in load_model(str(run / "model"), "float32")[0].named_parameters()}
    assert all(t.dtype.is_floating_point and t.dtype == base[n].dtype for n, t in trained.items())
    assert all(bool((base[n] == t).all()) for n, t in trained.items())
    assert relative_drift(base, trained) == 0.0


def test_a_compare_methods_dtype_is_its_phases(tmp_path):
    """``zoopt analyze BASE STUDY/runs/es/model``: a compare method keeps its config per phase."""
    method = tmp_path / "es"
    (method / "model").mkdir(parents=True)
    (method / "model" / "config.json").write_text("{}")
    assert run_dtype(method / "model") == "float32"  # nothing says otherwise
    (method / "phase0-es").mkdir()
    (method / "phase0-es" / "config.yaml").write_text("dtype: bfloat16\nmodel: tiny\n")
    assert run_dtype(method / "model") == run_dtype(method) == "bfloat16"
    assert run_dtype(tmp_path / "missing") == run_dtype("tiny") == "float32"
