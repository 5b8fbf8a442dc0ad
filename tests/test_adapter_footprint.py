"""``zoopt.adapters.footprint``: the "what fits where" model against the committed measurement
(``docs/results/adapter_memory.json``, from ``tests/benchmarks/adapter_memory.py``) and by hand."""

import json
from pathlib import Path

import pytest

from zoopt.adapters import footprint as fp
from zoopt.adapters.footprint import BENCH_SHAPE, MODELS, Shape, footprint, fits_table, load_measured

RESULTS = json.loads(fp.DEFAULT_RESULTS.read_text())
CASES = RESULTS["cases"]
BASE = {"none": "bf16", "int8": "int8", "int4": "int4"}


@pytest.fixture(scope="module")
def measured():
    return load_measured()


def by_name(name: str) -> Shape:
    return next(m for m in MODELS if m.name == name)


@pytest.mark.parametrize("name, params", [
    ("Qwen2.5-0.5B", 494_032_768), ("Qwen2.5-1.5B", 1_543_714_304), ("Qwen2.5-3B", 3_085_938_688),
    ("Qwen2.5-7B", 7_615_616_512), ("Llama-3.1-8B", 8_030_261_248), ("Qwen2.5-14B", 14_770_033_664)])
def test_shapes_count_the_published_parameters(name, params):
    assert by_name(name).params == params


def test_bench_shape_is_the_measured_model():
    """The counts of the benchmark's shape are the ones the benchmark took from the built model."""
    assert BENCH_SHAPE.params == RESULTS["base_params"] == 1_385_838_080
    assert BENCH_SHAPE.linear == RESULTS["linear_params"]
    assert BENCH_SHAPE.head == RESULTS["head_params"] and BENCH_SHAPE.tied == RESULTS["head_tied"]
    config = json.loads((fp.DEFAULT_RESULTS.parents[2] / RESULTS["config"]).read_text())
    assert (config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"], config["vocab_size"]) \
        == (BENCH_SHAPE.hidden, BENCH_SHAPE.intermediate, BENCH_SHAPE.layers, BENCH_SHAPE.vocab)
    for case in CASES.values():
        expected = BENCH_SHAPE.params if case["space"] == "full" else BENCH_SHAPE.lora(RESULTS["adapter"]["r"])
        assert case["trained_params"] == expected


@pytest.mark.parametrize("case", sorted(CASES))
def test_reproduces_the_measured_step_peak(case, measured):
    """host_bytes of the measured shape is its measured step peak (within 1 %), and so is the
    JSON's bytes per base parameter × base parameters."""
    c = CASES[case]
    got = footprint(BENCH_SHAPE, c["space"], BASE[c["quantization"]], measured)
    assert got["host_bytes"] == pytest.approx(c["step_peak_bytes"], rel=0.01)
    assert c["bytes_per_base_param"] * c["base_params"] == pytest.approx(c["step_peak_bytes"], rel=0.01)
    assert got["params"] == c["base_params"] and got["trained"] == c["trained_params"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_base_bytes_formula_matches_the_stored_bytes(case, measured):
    """W of the formula against stored_bytes of the real (quantized) model; bf16 exactly 2·n."""
    c = CASES[case]
    w = fp.base_bytes(BENCH_SHAPE, BASE[c["quantization"]], measured)
    assert w == pytest.approx(c["base_stored_bytes"], rel=1e-9)
    if c["quantization"] == "none":
        assert c["base_stored_bytes"] == 2 * c["base_params"]
    else:  # every linear weight and the LM head at about a byte: well under bf16's 2·n
        assert 1.0 <= measured.q[c["quantization"]] < 1.1
        # (bf16 embedding beside a quantized copy of the tied head; CPU int4 is unpacked in int8)
        assert c["base_stored_bytes"] < 1.25 * c["base_params"]


def test_device_formula_matches_what_the_engine_holds(measured):
    """The GPU model's parts are what the CPU engine held: full space bf16 working + fp32 master
    (6 bytes per parameter), adapter space base + adapter + fp32 master."""
    full = CASES["full-bf16"]
    assert full["working_bytes"] + full["master_bytes"] == 6 * full["base_params"]
    assert footprint(BENCH_SHAPE, "full", "bf16", measured)["device_bytes"] == 6 * full["base_params"]
    for name in ("adapter-bf16", "adapter-int8"):
        c = CASES[name]
        held = c["base_stored_bytes"] + c["adapter_stored_bytes"] + c["master_bytes"]
        assert footprint(BENCH_SHAPE, "adapter", BASE[c["quantization"]], measured)["device_bytes"] == \
            pytest.approx(held, rel=1e-9)


def test_hand_computed_rows(measured):
    """Qwen2.5-7B (untied, 152 064 tokens) by hand.  n = 7 615 616 512, L = 6 525 288 448,
    h = 544 997 376, a = 8·28·90 112 = 20 185 088.  GPU int4 (packed, 0.625 B/weight): W =
    2·(n − L − h) + 0.625·(L + h) = 5 509 590 016; + fp32 working adapter and master 8·a
    = 5 671 070 720.  Full space with adam: (2 + 4 + 8)·n."""
    assert measured.adapter_bytes_per_weight == 4.0  # PEFT's fp32 adapter on a bf16 base
    seven = by_name("Qwen2.5-7B")
    assert footprint(seven, "adapter", "int4", measured)["device_bytes"] == 5_671_070_720
    assert footprint(seven, "full", "bf16", measured, rule="adam")["device_bytes"] == 14 * 7_615_616_512
    # host: the measured process, the 7B's own base bytes, and the measured rest per base parameter
    c = CASES["adapter-int8"]
    rest = (c["step_peak_bytes"] - c["runtime_rss_bytes"] - c["base_stored_bytes"]) / c["base_params"]
    q8 = measured.q["int8"]
    hand = c["runtime_rss_bytes"] + 2 * (7_615_616_512 - 6_525_288_448 - 544_997_376) \
        + q8 * (6_525_288_448 + 544_997_376) + rest * 7_615_616_512
    assert footprint(seven, "adapter", "int8", measured)["host_bytes"] == pytest.approx(hand, rel=1e-12)


def test_int4_on_the_cpu(measured):
    """int4 on the CPU: the measured case when there is one; otherwise int8's figure, because
    torchao stores it unpacked there (int4_packed false) — never the packed GPU 0.5 byte."""
    assert RESULTS["int4_packed"] is False
    int4 = footprint(BENCH_SHAPE, "adapter", "int4", measured)
    int8 = footprint(BENCH_SHAPE, "adapter", "int8", measured)
    if "adapter-int4" in CASES:
        assert int4["host_bytes"] == pytest.approx(CASES["adapter-int4"]["step_peak_bytes"], rel=0.01)
    else:
        assert int4["host_bytes"] == int8["host_bytes"]
    assert int4["host_bytes"] > int8["host_bytes"] - 0.25 * BENCH_SHAPE.linear  # no packed saving on the CPU
    assert int4["device_bytes"] < int8["device_bytes"] - 0.3 * BENCH_SHAPE.linear  # packed on a GPU


def test_fits_table(measured):
    rows = fits_table(measured=measured)
    assert len(rows) == 4 * len(MODELS) == 24
    for model in MODELS:
        mine = {(r["space"], r["base"]): r for r in rows if r["model"] == model.name}
        full, a16, a8, a4 = (mine[k] for k in (("full", "bf16"), ("adapter", "bf16"), ("adapter", "int8"),
                                               ("adapter", "int4")))
        assert full["device_bytes"] > 2.5 * a16["device_bytes"] > 2.5 * a8["device_bytes"]
        assert a8["device_bytes"] > a4["device_bytes"]
        assert full["host_bytes"] > a16["host_bytes"] > a8["host_bytes"]
        for r in mine.values():
            if r["gpu_gib"] is not None:
                assert r["device_bytes"] <= 0.8 * r["gpu_gib"] * fp.GIB
    table = fp.markdown(rows)
    assert table.count("\n| Qwen2.5-14B |") == 4 and "| model | params |" in table


def test_bare_parameter_count_scales_the_measured_shape(measured):
    n = RESULTS["base_params"]
    for space, base in (("full", "bf16"), ("adapter", "int8")):
        assert footprint(n, space, base, measured) == pytest.approx(footprint(BENCH_SHAPE, space, base, measured))
    with pytest.raises(ValueError, match="r=16"):
        footprint(n, "adapter", "bf16", measured, r=16)


def test_refusals(measured):
    with pytest.raises(ValueError, match="full space trains every weight"):
        footprint(BENCH_SHAPE, "full", "int8", measured)
    with pytest.raises(ValueError, match="base must be"):
        footprint(BENCH_SHAPE, "adapter", "fp8", measured)
    with pytest.raises(ValueError, match="rule must be"):
        footprint(BENCH_SHAPE, "adapter", "bf16", measured, rule="lion")


def test_module_prints_the_table(capsys):
    fp.main([])
    out = capsys.readouterr().out
    assert out.startswith("| model | params | space | base |") and "Llama-3.1-8B" in out


def test_the_population_held_at_once_counts_in_adapter_space(measured):
    """N members' adapters (fp32 on a bf16 base): 32 × 4 × 20 185 088 bytes more on the 7B's
    device; on the host only the members beyond the measured population."""
    seven = by_name("Qwen2.5-7B")
    assert footprint(seven, "adapter", "int4", measured, members=32)["device_bytes"] == \
        5_671_070_720 + 32 * 4 * 20_185_088
    n0 = measured.members
    assert n0 == RESULTS["members"]
    same = footprint(seven, "adapter", "int8", measured, members=n0)["host_bytes"]
    assert same == footprint(seven, "adapter", "int8", measured)["host_bytes"]
    assert footprint(seven, "adapter", "int8", measured, members=n0 + 1)["host_bytes"] == \
        pytest.approx(same + 4 * 20_185_088, rel=1e-12)
    full = footprint(seven, "full", "bf16", measured)
    assert footprint(seven, "full", "bf16", measured, members=32) == full  # members run one at a time
    with pytest.raises(ValueError, match="members must be an integer"):
        footprint(seven, "adapter", "int8", measured, members=-1)


def test_the_docs_table_is_the_function_s_output(measured):
    """docs/adapters.md holds `python -m zoopt.adapters.footprint`'s table as it is now."""
    table = fp.markdown(fp.fits_table(measured=measured, members=fp.DOC_MEMBERS), members=fp.DOC_MEMBERS)
    assert table in (Path(__file__).resolve().parents[1] / "docs" / "adapters.md").read_text()
