import json

import numpy as np
import pytest

from zoopt.reporting.plots import (frontier_figure, plot_entropy, plot_frontier, plot_magnitude_histogram,
                                   plot_pass_at_k, plot_training_log)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5000   # axes, ticks and a curve; an empty canvas is ~2 KB
    # width/height from the IHDR chunk: 5x3.5 in at 120 dpi at least 400 px wide
    assert int.from_bytes(data[16:20], "big") >= 400


def test_pass_at_k_plot(tmp_path):
    out = plot_pass_at_k({"base": {1: 0.2, 2: 0.3, 4: 0.45, 8: 0.6},
                          "es": {1: 0.3, 2: 0.4, 4: 0.5, 8: 0.62}}, tmp_path / "sub" / "p.png")
    assert out == tmp_path / "sub" / "p.png"
    assert_png(out)


def test_entropy_plot(tmp_path):
    assert_png(plot_entropy({"es": [(0, 1.2), (10, 1.1), (20, 1.15)],
                             "grpo": [(0, 1.2), (10, 0.6), (20, 0.3)]}, tmp_path / "e.png"))


def test_magnitude_histogram_plot(tmp_path):
    rng = np.random.default_rng(0)
    counts, edges = np.histogram(rng.normal(-3, 0.5, 10000), bins=40)
    assert_png(plot_magnitude_histogram(counts, edges, 1.5e-3, tmp_path / "h.png"))
    with pytest.raises(ValueError, match="len\\(counts\\)\\+1=41"):
        plot_magnitude_histogram(counts, edges[:-1], 1.5e-3, tmp_path / "bad.png")


def test_training_log_plot(tmp_path):
    log = tmp_path / "metrics.jsonl"
    lines = [{"step": s, "reward_mean": 0.1 + 0.01 * s, "reward_max": 0.2 + 0.01 * s,
              "entropy": 1.0 - 0.01 * s} for s in range(20)]
    for s in (0, 10, 19):
        lines[s]["eval_accuracy"] = 0.06 + 0.005 * s
    log.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert_png(plot_training_log(log, tmp_path / "t.png"))
    minimal = tmp_path / "min.jsonl"
    minimal.write_text('{"step": 0, "reward_mean": 0.1}\n{"step": 1, "reward_mean": 0.2}\n')
    assert_png(plot_training_log(minimal, tmp_path / "m.png"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"step": 0}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        plot_training_log(bad, tmp_path / "x.png")


def test_frontier_zoom_fits_the_y_range_to_the_points_shown(tmp_path):
    """--xmax: every panel ends at xmax, and a point beyond it (ΔPass@8 −30 at ΔPass@1 +40) does
    not stretch the y range, which spans the shown points (−2 … +1) and the base (0) plus 5 %."""
    pts = [{"run": "es", "method": "es", "seed": 0, "step": 10, "d_pass@1": 0.02, "d_pass@8": 0.01},
           {"run": "grpo", "method": "grpo", "seed": 0, "step": 1, "d_pass@1": 0.03, "d_pass@8": -0.02},
           {"run": "grpo", "method": "grpo", "seed": 0, "step": 20, "d_pass@1": 0.40, "d_pass@8": -0.30}]
    (ax,) = frontier_figure(pts, [8], xmax=5.0).axes
    assert ax.get_xlim() == pytest.approx((-0.5, 5.0))
    assert ax.get_ylim() == pytest.approx((-2.15, 1.15))
    (ax,) = frontier_figure(pts, [8]).axes  # no zoom: the far point is inside
    assert ax.get_xlim()[1] > 40 and ax.get_ylim()[0] < -30
    assert_png(plot_frontier(pts, [8], tmp_path / "f.png", xmax=5.0))
