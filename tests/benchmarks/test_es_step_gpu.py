"""The GPU benchmark script (``es_step_gpu.py``) runs its small CPU version, so it is known to
work before a GPU is lent: the table prints, every case is timed, the stream check passes."""

from __future__ import annotations

import es_step_gpu


def test_the_small_cpu_version_runs_and_its_stream_check_passes(capsys, tmp_path, one_thread):
    result = es_step_gpu.main(["--device", "cpu", "--reps", "2", "--json", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert "| generate (pure batch) |" in out and "| ES step, counter stream |" in out and "| ES step, numpy stream |" in out
    assert result["stream_equal"] is True and "stream bits, CPU vs CPU (1 thread, other chunks) | equal" in out
    # the small Qwen2: embedding, final norm, and per layer q/k/v weights and biases, o, gate, up, down, 2 norms
    assert (result["stream_tensors"], result["stream_elements"]) == (2 + 2 * 12, 107_072)
    for case in ("generate", "es_counter", "es_numpy"):
        assert result[case]["step_s"] > 0 and result[case]["peak_mib"] is None
    assert all(result["es_counter"][k] > 0 for k in ("population_s", "update_s"))
    assert (tmp_path / "r.json").read_text().startswith("{")
    adapter = result["adapter"]  # issue 42: adapter space on an int8 base, the population in one call
    assert adapter["quantization"] == "int8" and adapter["base_untouched"] is True
    assert adapter["es"]["step_s"] > 0 and adapter["generate"]["step_s"] > 0
    assert adapter["base_bytes"] < 2 * adapter["base_parameters"]  # int8 linears: below fp32's 4 and bf16's 2 bytes
    assert "| adapter space: ES step |" in out

