"""An adapter-space engine that starts from a saved adapter directory (what an adapter run exports).

``HFEngine.from_pretrained(ADAPTER_DIR, adapter=...)`` loads the base the directory names, attaches
the configured adapter and loads the directory's tensors as the weights (fp32 master exactly as
saved).  This is what ``zoopt eval --model RUN`` of an adapter-space run builds: before it did,
the run's config (``space: adapter``) attached a fresh adapter over the loaded one and the
evaluation scored the base (the adapter learning comparison caught it: 0.07 against the run's
own 0.20).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from zoopt.adapters import AdapterSpace
from zoopt.cli import main
from zoopt.engines.base import Sampling
from zoopt.engines.hf import HFEngine
from zoopt.noise import Gaussian
from zoopt.types import Update

sys.path.insert(0, str(Path(__file__).parent))
OBJECTIVE = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"
PROMPTS = ["12+30=", "7+8=", "hello"]
GREEDY = Sampling(temperature=0.0, max_new_tokens=6)
SPACE = AdapterSpace(r=4)  # B = 0 at the start: a fresh adapter is the base, a loaded one is not


def tokens(results):
    return [[c.token_ids for c in per_prompt] for per_prompt in results]


def trained(dtype: str) -> HFEngine:
    e = HFEngine.from_pretrained("tiny:0", dtype=dtype, adapter=SPACE)
    e.apply(Gaussian(), Update(seeds=(1, 2), coefficients=(0.5, -0.3)))
    return e


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_an_engine_starts_from_the_saved_adapter_bit_for_bit(tmp_path, dtype):
    e = trained(dtype)
    out = e.export_pretrained(tmp_path / "adapter")
    fresh = HFEngine.from_pretrained("tiny:0", dtype=dtype, adapter=SPACE)
    loaded = HFEngine.from_pretrained(str(out), dtype=dtype, adapter=AdapterSpace(r=4, init_seed=7))
    assert (loaded.master_checksum(), loaded.checksum()) == (e.master_checksum(), e.checksum())
    assert loaded.checksum() != fresh.checksum()
    assert loaded.base_checksum() == e.base_checksum() and loaded.model_name == "tiny:0"
    want = tokens(e.generate(PROMPTS, GREEDY))
    assert tokens(loaded.generate(PROMPTS, GREEDY)) == want != tokens(fresh.generate(PROMPTS, GREEDY))
    loaded.perturb(Gaussian(), 3, 0.1)  # and it trains on from there: restore returns to the saved bits
    loaded.restore()
    assert loaded.master_checksum() == e.master_checksum()


def test_a_saved_adapter_of_another_scale_is_one_line(tmp_path):
    out = trained("float32").export_pretrained(tmp_path / "adapter")
    with pytest.raises(ValueError, match=r"^adapter: .* has r=4, lora_alpha=16; the configured adapter r=8"):
        HFEngine.from_pretrained(str(out), adapter=AdapterSpace(r=8))


def test_loading_weights_names_what_is_missing_and_writes_nothing():
    e = trained("float32")
    before = (e.master_checksum(), e.checksum())
    state = e.state_dict()
    first = next(iter(e.weights.shapes))
    partial = {n: t for n, t in e.weights.items() if n != first}
    with pytest.raises(ValueError, match=f"lacks '{first}'"):
        e.load_weights(partial)
    wrong = {n: torch.zeros(1) if n == first else t for n, t in e.weights.items()}
    with pytest.raises(ValueError, match="has shape"):
        e.load_weights(wrong)
    assert (e.master_checksum(), e.checksum()) == before and len(state) == len(e.weights.shapes)


def test_zoopt_eval_of_an_adapter_run_scores_its_trained_adapter(tmp_path):
    run, out = tmp_path / "run", tmp_path / "eval"
    sets = ["space=adapter", "sigma=0.3", "lr=0.5", "steps=3", "population_size=8", "prompts_per_step=8",
            "sampling.max_new_tokens=8", "eval.n_problems=16", "eval.max_new_tokens=8", f"run_dir={run}"]
    assert main(["train", "--model", "tiny", "--objective", OBJECTIVE, "--quiet",
                 *[x for s in sets for x in ("--set", s)]]) == 0
    before, after = (json.loads((run / f"eval_{w}.json").read_text()) for w in ("before", "after"))
    assert after["checksum"] != before["checksum"]  # the adapter moved: scoring the base would show
    assert main(["eval", "--model", str(run), "--n", "0", "--quiet", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["checksum"] == after["checksum"]
    assert summary["greedy_accuracy"] == after["greedy_accuracy"]


def test_state_dict_and_load_weights_speak_the_saved_names(tmp_path):
    """In adapter space the master is named as PEFT saves it (the noise's keys), on every engine."""
    from safetensors.torch import load_file

    e = trained("float32")
    saved = load_file(str(e.export_pretrained(tmp_path / "adapter") / "adapter_model.safetensors"))
    state = e.state_dict()
    assert list(state) == list(e.weights.shapes) and set(state) == set(saved)
    assert all(torch.equal(state[n], saved[n]) for n in saved)
    fresh = HFEngine.from_pretrained("tiny:0", adapter=SPACE)
    fresh.load_weights(state)
    assert fresh.master_checksum() == e.master_checksum()
