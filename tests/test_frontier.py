"""zoopt frontier: constructed runs with known per-problem rates give the known frontier."""

import json

import numpy as np
import pytest

from zoopt.cli import main
from zoopt.study.frontier import interpolate, load_study, matched, report, share


def evaluation(pass1, pass8, golds=None):
    golds = golds or [str(i) for i in range(len(pass1))]
    return {"summary": {}, "per_problem": [{"gold": g, "pass@1": a, "pass@8": b}
                                          for g, a, b in zip(golds, pass1, pass8)]}


def write_run(study, name, points, phases):
    """``points``: [(file name or 'final', pass1, pass8)]; ``phases``: steps of each phase."""
    run = study / "runs" / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"phases": [{"steps": s} for s in phases]}))
    for fname, p1, p8 in points:
        path = run / "eval.json" if fname == "final" else run / "checkpoints" / fname
        path.write_text(json.dumps(evaluation(p1, p8)))


@pytest.fixture
def study(tmp_path):
    """4 problems; base Pass@1 0.2, Pass@8 0.5 on each.  Per-problem deltas are constant, so every
    mean is exact and every bootstrap resample gives the same value (the CI is a point)."""
    base = tmp_path / "runs" / "base"
    base.mkdir(parents=True)
    (base / "eval.json").write_text(json.dumps(evaluation([0.2] * 4, [0.5] * 4)))
    # grpo: step 10 (Δ1 +0.2, Δ8 −0.2), final step 20 (+0.4, −0.3)
    write_run(tmp_path, "grpo", [("phase0-grpo-10.json", [0.4] * 4, [0.3] * 4), ("final", [0.6] * 4, [0.2] * 4)], [20])
    # es: two phases of 10 steps: phase0 step 10 (+0.1, +0.05), phase1 step 5 = step 15 (+0.3, 0.0),
    # final step 20 (+0.3, −0.1)
    write_run(tmp_path, "es", [("phase0-es-10.json", [0.3] * 4, [0.55] * 4), ("phase1-es-5.json", [0.5] * 4, [0.5] * 4),
                               ("final", [0.5] * 4, [0.4] * 4)], [10, 10])
    return tmp_path


def test_curves_follow_training_order_across_phases(study):
    base, curves = load_study(study)
    by = {c.name: c for c in curves}
    assert by["es"].steps == (10, 15, 20) and by["grpo"].steps == (10, 20)
    assert by["es"].method == "es" and by["es"].seed == 0


def test_the_points_and_matched_gains_are_the_hand_computed_ones(study):
    rep = report([study], ks=[8], targets=[0.1, 0.2, 0.35])
    pts = {(p["run"], p["step"]): (p["d_pass@1"], p["d_pass@8"]) for p in rep["points"]}
    assert pts[("grpo", 10)] == pytest.approx((0.2, -0.2)) and pts[("es", 15)] == pytest.approx((0.3, 0.0))
    rows = {r["target_d_pass@1"]: r for r in rep["matched"]}
    # t = 0.1: grpo halfway from the base (0, 0) to (0.2, −0.2): −0.1; es exactly at step 10: +0.05
    assert rows[0.1]["methods"]["grpo"]["value"] == pytest.approx(-0.1)
    assert rows[0.1]["methods"]["es"]["value"] == pytest.approx(0.05)
    assert rows[0.1]["methods"]["grpo"]["segments"] == {"grpo": [0, 10]}
    # t = 0.2: grpo at step 10: −0.2; es halfway between (0.1, 0.05) and (0.3, 0.0): +0.025
    assert rows[0.2]["methods"]["es"]["value"] == pytest.approx(0.025)
    assert rows[0.2]["differences"]["es - grpo"]["value"] == pytest.approx(0.225)
    assert rows[0.2]["differences"]["es - grpo"]["ci"] == pytest.approx([0.225, 0.225])  # constant deltas
    assert rows[0.2]["methods"]["es"]["segments"] == {"es": [10, 15]}
    # t = 0.35: es never gets there (its best is +0.3); grpo a quarter of the way from step 10 to 20
    assert rows[0.35]["methods"]["es"]["value"] is None and rows[0.35]["methods"]["es"]["reached"] == 0.0
    assert rows[0.35]["methods"]["grpo"]["value"] == pytest.approx(-0.2 + 0.75 * -0.1)


def test_seeds_average_and_the_ci_comes_from_the_per_problem_data(tmp_path):
    """Heterogeneous problems: the matched value is the hand interpolation of the means, the
    CI brackets it, and two seeds' mean is the mean of their interpolations."""
    base = tmp_path / "runs" / "base"
    base.mkdir(parents=True)
    (base / "eval.json").write_text(json.dumps(evaluation([0.0, 0.5, 0.2, 0.1], [0.2, 0.9, 0.5, 0.3])))
    write_run(tmp_path, "es", [("final", [0.2, 0.5, 0.4, 0.1], [0.2, 1.0, 0.6, 0.3])], [10])   # Δ1 .1, Δ8 .05
    write_run(tmp_path, "es-s1", [("final", [0.2, 0.7, 0.2, 0.1], [0.2, 0.9, 0.5, 0.1])], [10])  # Δ1 .1, Δ8 -.05
    _, curves = load_study(tmp_path)
    (row,) = matched(curves, 8, [0.05])
    es = row["methods"]["es"]
    assert es["per_seed"] == pytest.approx({"es": 0.025, "es-s1": -0.025})
    assert es["value"] == pytest.approx(0.0)
    assert es["ci"][0] < 0.0 < es["ci"][1]
    # the same run twice as two methods: their paired difference is exactly 0 in every resample
    write_run(tmp_path, "copy", [("final", [0.2, 0.5, 0.4, 0.1], [0.2, 1.0, 0.6, 0.3])], [10])
    _, curves = load_study(tmp_path)
    (row,) = matched([c for c in curves if c.name in ("es", "copy")], 8, [0.05])
    assert row["differences"]["copy - es"]["ci"] == [0.0, 0.0]


def test_interpolate_reads_the_first_crossing():
    m1 = np.array([[0.0, 0.2, 0.1, 0.4]])
    mk = np.array([[0.0, -0.2, 0.0, 0.4]])
    assert interpolate(m1, mk, 0.1)[0] == pytest.approx(-0.1)  # on the way up to 0.2, not the later dip
    assert interpolate(m1, mk, 0.3)[0] == pytest.approx(0.4 * 2 / 3)  # w = (0.3 − 0.1) / (0.4 − 0.1) from (0.1, 0) to (0.4, 0.4)
    assert np.isnan(interpolate(m1, mk, 0.5)[0])
    with pytest.raises(ValueError, match="must be > 0"):
        interpolate(m1, mk, 0.0)


def test_the_reached_share_never_rounds_to_an_end_it_is_not():
    assert share(0.0) == "0 %" and share(1.0) == "100 %" and share(0.5) == "50 %"
    assert share(7 / 2000) == "0.4 %" and share(1 / 2000) == "0.1 %"  # a CI over 7 or 1 resamples
    assert share(1996 / 2000) == "99.8 %" and share(1999 / 2000) == "99.9 %"
    assert share(0.9935) == "99.3 %" and share(0.01) == "1 %" and share(0.99) == "99 %"


def test_cli_writes_the_report_and_refuses_what_is_not_a_study(study, tmp_path, capsys):
    out = tmp_path / "frontier"
    assert main(["frontier", str(study), "--k", "8", "--at", "0.1,0.2", "--out", str(out)]) == 0
    rep = json.loads((out / "frontier.json").read_text())
    assert [r["target_d_pass@1"] for r in rep["matched"]] == [0.1, 0.2]
    assert (out / "frontier.png").stat().st_size > 0 and "es - grpo" in (out / "frontier.md").read_text()
    capsys.readouterr()
    assert main(["frontier", str(tmp_path / "nowhere"), "--out", str(out)]) == 2
    assert "has no runs/ directory" in capsys.readouterr().err
    assert main(["frontier", str(study), "--k", "8", "--at", "x", "--out", str(out)]) == 2
    assert "--at: expected comma-separated numbers" in capsys.readouterr().err
    assert main(["frontier", str(study), "--k", "8", "--xmax", "0", "--out", str(out)]) == 2
    assert "--xmax: expected a positive number" in capsys.readouterr().err


def test_a_run_on_other_problems_is_refused(study):
    (study / "runs" / "grpo" / "eval.json").write_text(json.dumps(evaluation([0.6] * 4, [0.2] * 4, golds=list("abcd"))))
    with pytest.raises(ValueError, match="grpo at step 20 is not evaluated on the base's problems"):
        report([study], ks=[8], targets=[0.1])


def test_a_labelled_study_counts_as_other_methods(study, tmp_path):
    """One study per GRPO beta: DIR=LABEL keeps their runs apart; unlabelled, the names collide."""
    other = tmp_path / "beta"
    base = other / "runs" / "base"
    base.mkdir(parents=True)
    (base / "eval.json").write_text(json.dumps(evaluation([0.2] * 4, [0.5] * 4)))
    # grpo with a KL penalty: step 10 (+0.2, −0.1), final step 20 (+0.4, −0.2)
    write_run(other, "grpo", [("phase0-grpo-10.json", [0.4] * 4, [0.4] * 4), ("final", [0.6] * 4, [0.3] * 4)], [20])
    rep = report([study, f"{other}=beta 0.04"], ks=[8], targets=[0.2])
    row = rep["matched"][0]
    assert set(row["methods"]) == {"es", "grpo", "grpo (beta 0.04)"}
    assert row["methods"]["grpo (beta 0.04)"]["value"] == pytest.approx(-0.1)
    assert row["differences"]["grpo - grpo (beta 0.04)"]["value"] == pytest.approx(-0.1)
    with pytest.raises(ValueError, match=f"run 'grpo' repeats in {other} with another evaluation at step 10"):
        report([study, other], ks=[8], targets=[0.2])
    with pytest.raises(ValueError, match="an empty label"):
        report([study, f"{other}="], ks=[8], targets=[0.2])


def test_the_same_runs_in_two_studies_are_one_curve_over_both_studies_steps(study, tmp_path):
    """A short study that retrains grpo to step 10 with a checkpoint at step 5, under the same
    label: grpo's curve is steps 5, 10, 20, its step 10 checked equal to the first study's; the
    matched gain is read on the finer segment.  Another evaluation at a shared step, no shared
    step, or another base, is refused."""
    short = tmp_path / "short"
    base = short / "runs" / "base"
    base.mkdir(parents=True)
    (base / "eval.json").write_text(json.dumps(evaluation([0.2] * 4, [0.5] * 4)))
    # step 5 (+0.1, 0.0), final step 10 = the first study's step 10 (+0.2, −0.2)
    write_run(short, "grpo", [("phase0-grpo-5.json", [0.3] * 4, [0.5] * 4), ("final", [0.4] * 4, [0.3] * 4)], [10])
    rep = report([study, short], ks=[8], targets=[0.1, 0.15])
    assert rep["runs"]["grpo"]["steps"] == [5, 10, 20] and rep["runs"]["es"]["steps"] == [10, 15, 20]
    rows = {r["target_d_pass@1"]: r for r in rep["matched"]}
    assert rows[0.1]["methods"]["grpo"]["value"] == pytest.approx(0.0)  # at step 5, not −0.1 on 0–10
    assert rows[0.15]["methods"]["grpo"]["value"] == pytest.approx(-0.1) and rows[0.15]["methods"]["grpo"]["segments"] == {"grpo": [5, 10]}
    (short / "runs" / "grpo" / "eval.json").write_text(json.dumps(evaluation([0.4] * 4, [0.35] * 4)))
    with pytest.raises(ValueError, match=f"run 'grpo' repeats in {short} with another evaluation at step 10"):
        report([study, short], ks=[8], targets=[0.1])
    (short / "runs" / "grpo" / "eval.json").write_text(json.dumps(evaluation([0.4] * 4, [0.3] * 4)))
    (short / "runs" / "grpo" / "result.json").write_text(json.dumps({"phases": [{"steps": 8}]}))  # final at step 8
    with pytest.raises(ValueError, match=f"run 'grpo' repeats in {short} with no step in common"):
        report([study, short], ks=[8], targets=[0.1])
    (short / "runs" / "grpo" / "result.json").write_text(json.dumps({"phases": [{"steps": 10}]}))
    (base / "eval.json").write_text(json.dumps(evaluation([0.2] * 4, [0.55] * 4)))
    with pytest.raises(ValueError, match=f"run 'grpo' repeats in {short}, whose base is another evaluation"):
        report([study, short], ks=[8], targets=[0.1])


def test_each_study_is_measured_against_its_own_base(study, tmp_path):
    """A later study on a rebuilt base (Pass@1 0.25 here, not 0.2): its run's differences are taken
    against its own base; the report lists both bases with their digests; a base evaluated on
    other problems is refused, naming the study."""
    other = tmp_path / "rebuilt"
    base = other / "runs" / "base"
    base.mkdir(parents=True)
    (base / "eval.json").write_text(json.dumps(evaluation([0.25] * 4, [0.5] * 4)))
    (other / "base.json").write_text(json.dumps({"digest": "abc"}))
    # grpo on the rebuilt base: final step 10 at (0.45, 0.4): (+0.2, −0.1) against its own base
    write_run(other, "grpo", [("final", [0.45] * 4, [0.4] * 4)], [10])
    rep = report([study, f"{other}=rebuilt"], ks=[8], targets=[0.2])
    pts = {(p["run"], p["step"]): (p["d_pass@1"], p["d_pass@8"]) for p in rep["points"]}
    assert pts[("grpo (rebuilt)", 10)] == pytest.approx((0.2, -0.1))
    assert pts[("grpo", 10)] == pytest.approx((0.2, -0.2))  # the first study's runs: unchanged
    assert rep["matched"][0]["methods"]["grpo (rebuilt)"]["value"] == pytest.approx(-0.1)
    assert [(b["digest"], b["pass@1"]) for b in rep["bases"]] == [(None, pytest.approx(0.2)), ("abc", pytest.approx(0.25))]
    (base / "eval.json").write_text(json.dumps(evaluation([0.25] * 4, [0.5] * 4, golds=list("abcd"))))
    with pytest.raises(ValueError, match=f"the base of {other} is not evaluated on the base's problems"):
        report([study, f"{other}=rebuilt"], ks=[8], targets=[0.2])
