"""``--engine vllm`` through the command line: ``zoopt grpo``, ``zoopt eval`` (one benchmark and a suite) and ``zoopt compare``.

Run inside ``.venv-vllm`` with ``pytest -m vllm``.  Each command runs as a user runs it, in its
own process (``python -m zoopt.cli``), on the tiny model with 2×32 heads (``tiny_hd32``) and
the digit-share objective; ``zoopt train --engine vllm`` is covered in test_vllm_engine.py.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

sys.path.insert(0, str(Path(__file__).parent))
from test_vllm_engine import tiny_hd32  # noqa: E402

OBJECTIVE = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
LOGP_TOL = 1e-4  # as in test_vllm_grpo.py


def zoopt(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", "zoopt.cli", *args], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def sets(*items: str) -> list[str]:
    return [x for item in items for x in ("--set", item)]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_cli"))


@pytest.fixture(scope="module")
def grpo_run(model, tmp_path_factory):
    run = tmp_path_factory.mktemp("grpo") / "run"
    zoopt("grpo", "--engine", "vllm", "--model", str(model), "--objective", OBJECTIVE, "--quiet",
          *sets("steps=3", "prompts_per_step=4", "sampling.n=4", "sampling.max_new_tokens=8", "lr=0.01",
                "micro_batch_size=16", "eval.n_problems=8", "eval.max_new_tokens=8", "engine_args.max_model_len=512",
                f"run_dir={run}"))
    return run


def test_zoopt_grpo_engine_vllm_trains_syncs_and_exports(grpo_run):
    from zoopt.engines.hf import HFEngine

    records = [json.loads(line) for line in (grpo_run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(r["sampler_logp_gap_max"] <= LOGP_TOL for r in records)  # every step sampled the synced policy
    after = json.loads((grpo_run / "eval_after.json").read_text())
    before = json.loads((grpo_run / "eval_before.json").read_text())
    checksum = (grpo_run / "checksum.txt").read_text().strip()
    assert after["checksum"] == checksum != before["checksum"]
    assert HFEngine.from_pretrained(str(grpo_run / "model")).checksum() == checksum  # the export is the trained model


def test_zoopt_eval_engine_vllm_equals_hf_greedy(grpo_run, tmp_path):
    """The GRPO-trained model, evaluated on each engine: same weights, same greedy completions."""
    rows = {}
    for engine in ("hf", "vllm"):
        zoopt("eval", "--model", str(grpo_run / "model"), "--objective", OBJECTIVE, "--engine", engine, "--k", "1,4",
              "--n", "4", "--n-problems", "8", "--max-new-tokens", "8", "--dtype", "float32", "--quiet",
              "--out", str(tmp_path / engine))
        summary = json.loads((tmp_path / engine / "summary.json").read_text())
        assert summary["checksum"] == (grpo_run / "checksum.txt").read_text().strip()
        with open(tmp_path / engine / "per_problem.csv") as fh:
            rows[engine] = [(r["greedy_completion"], r["greedy_reward"]) for r in csv.DictReader(fh)]
    assert rows["vllm"] == rows["hf"] and len(rows["hf"]) == 8
    # (the tiny model's greedy answers barely depend on the prompt; test_vllm_engine.py compares
    # diverse perturbed outputs token for token — this test is about the flag and the files)


def test_zoopt_compare_engine_vllm_runs_both_schedules(model, tmp_path):
    """GRPO→ES (the policy synced into vLLM, then ES on it) and ES→GRPO (the policy built from
    the ES-trained master), each in its own process, at an equal budget."""
    run = tmp_path / "cmp"
    zoopt("compare", "--engine", "vllm", "--model", str(model), "--objective", OBJECTIVE, "--quiet",
          "--methods", "grpo_es,es_grpo",
          *sets("budget=64", "es.population_size=4", "es.prompts_per_step=8", "es.sampling.max_new_tokens=6",
                "es.sigma=0.05", "es.lr=0.05", "grpo.prompts_per_step=8", "grpo.sampling.n=4",
                "grpo.sampling.max_new_tokens=6", "grpo.lr=1e-2", "eval.n_problems=4", "eval.n_samples=4",
                "eval.ks=[1,2,4]", "eval.max_new_tokens=6", "engine_args.max_model_len=512", f"run_dir={run}"))
    table = {row["method"]: row for row in json.loads((run / "compare.json").read_text())["table"]}
    assert list(table) == ["grpo_es", "es_grpo"]
    for row in table.values():
        assert row["completions"] == row["completions_generated"] == 64
        assert row["d_rel"] > 0
    grpo_phase = [json.loads(x) for x in (run / "grpo_es" / "phase0-grpo" / "metrics.jsonl").read_text().splitlines()]
    assert all(r["sampler_logp_gap_max"] <= LOGP_TOL for r in grpo_phase)


def test_zoopt_eval_suite_engine_vllm_equals_hf(model, tmp_path):
    """A suite of two benchmarks (local files in their hub format, short problems: the tiny
    model has 512 positions) on each engine: the same greedy completions and table rows."""
    data = tmp_path / "bench.jsonl"
    rows = [{"problem": f"{a}+{b}=", "answer": str(a + b), "id": i, "unique_id": f"u{i}"}
            for i, (a, b) in enumerate([(1, 2), (3, 4), (5, 6), (7, 8)])]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for engine in ("hf", "vllm"):
        zoopt("eval", "--model", str(model), "--objective", "math500,aime24", "--engine", engine,
              "--k", "1,2", "--n", "2", "--n-problems", "4", "--max-new-tokens", "8", "--dtype", "float32",
              "--quiet", "--out", str(tmp_path / engine),
              *sets(f"objective_args.data_files={data}", "objective_args.template='{question}'"),
              *sets("engine_args.max_model_len=512") * (engine == "vllm"))
    for name in ("math500", "aime24"):
        greedy = {}
        for engine in ("hf", "vllm"):
            with open(tmp_path / engine / name / "per_problem.csv") as fh:
                greedy[engine] = [(r["greedy_completion"], r["greedy_reward"]) for r in csv.DictReader(fh)]
        assert greedy["vllm"] == greedy["hf"] and len(greedy["hf"]) == 4
    tables = {e: json.loads((tmp_path / e / "suite.json").read_text())["rows"] for e in ("hf", "vllm")}
    assert [r["benchmark"] for r in tables["vllm"]] == ["math500", "aime24", "average"]
    assert all(r["source"] == "files" for r in tables["vllm"][:2])
