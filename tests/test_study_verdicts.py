"""The study's verdict logic on constructed inputs: reproduced, contradicted, inconclusive, not drawn."""

import numpy as np
import pytest

from zoopt.study import claims as C
from zoopt.study.verdict import CONTRADICTED, INCONCLUSIVE, NOT_DRAWN, REPRODUCED, decide, judge, paired
from zoopt.workflows.coverage import coverage_from_counts


def test_decide_reads_the_ci_against_the_margin():
    assert decide((0.01, 0.2)) == REPRODUCED
    assert decide((-0.2, -0.01)) == CONTRADICTED
    assert decide((-0.01, 0.2)) == INCONCLUSIVE          # crosses zero
    assert decide((-0.004, 0.01), margin=-0.005) == REPRODUCED   # a tolerance: "loses at most 0.5 points"
    assert decide((-0.02, -0.006), margin=-0.005) == CONTRADICTED
    assert decide((float("nan"), 1.0)) == INCONCLUSIVE


def test_paired_bootstrap_verdicts_on_constructed_differences():
    rng = np.random.default_rng(0)
    up = judge("C1", "a > b", 0.10 + 0.05 * rng.standard_normal(200))
    down = judge("C1", "a > b", -0.10 + 0.05 * rng.standard_normal(200))
    noise = judge("C1", "a > b", 0.5 * rng.standard_normal(200) - 0.5 * rng.standard_normal(200).mean())
    assert (up.verdict, down.verdict, noise.verdict) == (REPRODUCED, CONTRADICTED, INCONCLUSIVE)
    assert up.ci[0] > 0 and down.ci[1] < 0 and noise.ci[0] < 0 < noise.ci[1]
    assert up.mean == pytest.approx(0.10, abs=0.01) and up.n_problems == 200


def test_pairing_removes_the_between_problem_spread():
    # problems differ a lot (0..1), A is B + 0.02 on every problem: unpaired CIs would overlap, paired is sure
    b = np.linspace(0, 0.9, 50)
    assert judge("C4", "a > b", paired(b + 0.02, b)).verdict == REPRODUCED
    with pytest.raises(ValueError, match="equal-length"):
        paired([1.0, 2.0], [1.0])


def _ev(per_problem: dict[str, list[float]]) -> dict:
    n = len(next(iter(per_problem.values())))
    rows = [{k: v[i] for k, v in per_problem.items()} for i in range(n)]
    return {"per_problem": rows, "summary": {k: float(np.mean(v)) for k, v in per_problem.items()}}


def test_c1_constructed_es_widens_grpo_narrows():
    n = 100
    base = _ev({"pass@1": [0.2] * n, "pass@8": [0.5] * n})
    es = _ev({"pass@1": [0.3] * n, "pass@8": [0.7] * n})     # gains 0.1 at 1, 0.2 at 8
    grpo = _ev({"pass@1": [0.4] * n, "pass@8": [0.45] * n})  # gains 0.2 at 1, -0.05 at 8: below base at 8
    out = C.c1({"base": base, "es": es, "grpo": grpo}, [1, 8], {"es": True, "grpo": True})
    assert [v.verdict for v in out["verdicts"]] == [REPRODUCED, REPRODUCED, REPRODUCED]
    assert out["verdicts"][2].mean == pytest.approx((0.2 - 0.1) - (-0.05 - 0.2))
    assert out["numbers"]["grpo_below_base_at_k"] == [8]
    assert out["numbers"]["gain_ratio_K_over_1"]["es"] == pytest.approx(2.0)
    # the reverse world contradicts, and a method that never moved draws no verdict
    rev = C.c1({"base": base, "es": grpo, "grpo": es}, [1, 8], {"es": True, "grpo": True})
    assert rev["verdicts"][2].verdict == CONTRADICTED
    still = C.c1({"base": base, "es": es, "grpo": grpo}, [1, 8], {"es": True, "grpo": False})
    assert [v.verdict for v in still["verdicts"]] == [REPRODUCED, REPRODUCED, NOT_DRAWN]
    assert "grpo did not move" in still["verdicts"][2].note
    assert C.summarise(still["verdicts"]) == "mixed"


def test_c3_ratio_and_tolerance():
    es = _ev({"pass@1": [0.5] * 40})
    near = {"tau": 1e-3, "share_reverted": 0.8, "eval": _ev({"pass@1": [0.5] * 39 + [0.4]})}  # loses 0.25 points
    out = C.c3({"es": 4e-3, "grpo": 1e-4}, {}, [near], {"es": es}, 0.005, {"es": True, "grpo": True})
    assert out["numbers"]["ratio"] == pytest.approx(40.0)
    assert [v.verdict for v in out["verdicts"]] == [REPRODUCED, INCONCLUSIVE]  # one bad problem of 40: CI crosses −0.005
    far = {**near, "eval": _ev({"pass@1": [0.3] * 40})}
    assert C.c3({"es": 1e-4, "grpo": 4e-3}, {}, [far], {"es": es}, 0.005,
                {"es": True, "grpo": True})["verdicts"][1].verdict == CONTRADICTED


def test_population_coverage_from_counts_matches_pass_at_k():
    # 4 members: on problem 0 members 0 and 1 are right (c_pop = 2); the center got 2 of 4 right too
    members = np.array([[1, 0], [1, 0], [0, 0], [0, 1]])
    out = coverage_from_counts(members, [2, 0], [1, 2], sigma=0.01)
    # pass@2 from 4 with c = 2: 1 − C(2,2)/C(4,2) = 5/6; problem 1: pop c = 1 → 1 − C(3,2)/C(4,2) = 1/2, center 0
    assert out["by_k"]["2"]["population"] == pytest.approx((5 / 6 + 1 / 2) / 2)
    assert out["by_k"]["2"]["center"] == pytest.approx((5 / 6 + 0) / 2)
    assert out["by_k"]["1"]["difference"] == pytest.approx(0.125)
    assert out["member_success"]["mean"] == pytest.approx(3 / 8)
    assert out["member_success"]["max"] == 0.5 and out["member_success"]["min"] == 0.0
