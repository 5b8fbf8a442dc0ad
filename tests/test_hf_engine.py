"""HFEngine: batching invariance, reproducible sampling, log-probs, perturb/restore, export."""

from __future__ import annotations

import math

import pytest
import torch

from zoopt import Gaussian
from zoopt.engines.base import Engine, Sampling
from zoopt.engines.hf import MIN_SHARED_PREFIX, HFEngine, _sample, shared_prefix
from zoopt.engines.module import ModuleEngine
from zoopt.models import load_model

PROMPTS = ["12 + 34 =", "7*8=", "hello world, how are you", "a", "The answer is (", "99-1"]
GREEDY = Sampling(temperature=0, max_new_tokens=12)


@pytest.fixture(scope="module")
def engine() -> HFEngine:
    return HFEngine.from_pretrained("tiny:7", batch_size=64)


def tokens(result):
    return [[c.token_ids for c in row] for row in result]


def test_is_a_rollout_engine(engine):
    assert isinstance(engine, Engine)


def test_greedy_batched_equals_one_at_a_time_and_hf_generate(engine):
    batched = tokens(engine.generate(PROMPTS, GREEDY))
    single = [tokens(engine.generate([p], GREEDY))[0] for p in PROMPTS]
    assert batched == single
    small = HFEngine(engine.module, engine.tokenizer, batch_size=2)  # three micro-batches
    assert tokens(small.generate(PROMPTS, GREEDY)) == batched
    assert len({len(engine.tokenizer(p)["input_ids"]) for p in PROMPTS}) > 3  # really padded

    tok = engine.tokenizer
    enc = tok(PROMPTS, padding=True, return_tensors="pt")
    with torch.inference_mode():
        ref = engine.module.generate(**enc, max_new_tokens=12, do_sample=False,
                                     pad_token_id=tok.pad_token_id, eos_token_id=sorted(engine.stop_ids))
    for row, ids in zip(batched, ref[:, enc["input_ids"].shape[1]:].tolist()):
        assert row[0] == ids[: len(row[0])]


def test_sampling_n_seeds_and_batching(engine):
    s = Sampling(temperature=1.0, max_new_tokens=10, n=4, seed=11)
    a = engine.generate(PROMPTS[:3], s)
    assert [len(row) for row in a] == [4, 4, 4]
    assert tokens(engine.generate(PROMPTS[:3], s)) == tokens(a)
    other = tokens(engine.generate(PROMPTS[:3], Sampling(temperature=1.0, max_new_tokens=10, n=4, seed=12)))
    assert other != tokens(a)
    assert len({tuple(ids) for ids in tokens(a)[0]}) > 1  # the 4 samples of a prompt differ
    # a completion depends on (seed, prompt index, sample index), not on micro-batching
    small = HFEngine(engine.module, engine.tokenizer, batch_size=3)
    assert tokens(small.generate(PROMPTS[:3], s)) == tokens(a)


def test_a_prompts_samples_share_one_prefill_and_equal_prefilling_every_row(engine):
    """generate(n > 1) prefills each prompt once and fans the KV cache out to its n rows; the
    completions equal those of prefilling all rows (tokens exactly, log-probs to rounding)."""
    s = Sampling(temperature=1.0, max_new_tokens=10, n=3, seed=4, logprobs=True)
    encoded = [engine.encode(p) for p in PROMPTS[:4]]
    keys = [(i, j) for i in range(4) for j in range(3)]
    prompts = [encoded[i] for i, _ in keys]
    calls = []
    hook = engine.module.register_forward_pre_hook(lambda mod, args, kw: calls.append(kw["input_ids"].shape),
                                                   with_kwargs=True)
    try:
        with torch.inference_mode():
            every_row = engine._generate_batch(prompts, keys, s)
            shared = engine._generate_batch(prompts, keys, s, prompt_of=[i for i, _ in keys],
                                            weights_of=[0] * len(keys))
    finally:
        hook.remove()
    prefills = [shape for shape in calls if shape[1] > 1]
    assert [shape[0] for shape in prefills] == [12, 4]  # 12 rows prefilled, then 4 distinct prompts
    assert [c.token_ids for c in shared] == [c.token_ids for c in every_row]
    for a, b in zip(shared, every_row):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert len({tuple(c.token_ids) for c in shared[:3]}) > 1  # a prompt's samples still differ
    assert tokens(engine.generate(PROMPTS[:4], s)) == [[c.token_ids for c in shared[3 * i:3 * i + 3]] for i in range(4)]


@pytest.mark.parametrize("sampling", [GREEDY, Sampling(temperature=1.0, max_new_tokens=10, n=2, seed=9, logprobs=True)])
def test_a_common_prompt_prefix_is_prefilled_once_and_changes_no_completion(engine, sampling):
    """Prompts that share a head (a chat template's system turn) prefill it once for the batch;
    each completion equals that of the same row with nothing shared (every row prefilled whole)."""
    prompts = [f"Answer in one word, please. {q}" for q in ("12 + 34 =", "7*8=", "hello", "The answer is (")]
    encoded = [engine.encode(p) for p in prompts]
    assert shared_prefix(encoded) == len(engine.encode("Answer in one word, please. ")) >= MIN_SHARED_PREFIX
    shapes = []
    hook = engine.module.register_forward_pre_hook(lambda mod, args, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                                   with_kwargs=True)
    try:
        together = engine.generate(prompts, sampling)
    finally:
        hook.remove()
    assert shapes[0] == (1, shared_prefix(encoded))  # the prefix ran once, for 4 × n rows
    keys = [(i, j) for i in range(len(prompts)) for j in range(sampling.n)]
    with torch.inference_mode():
        whole = engine._generate_batch([encoded[i] for i, _ in keys], keys, sampling)  # nothing shared
    for (i, j), ref in zip(keys, whole):
        assert together[i][j].token_ids == ref.token_ids
        if sampling.logprobs:
            assert together[i][j].logprobs == pytest.approx(ref.logprobs, abs=1e-5)
    if sampling.greedy:  # and, greedy, equal to each prompt generated alone
        assert tokens(together) == [tokens(engine.generate([p], sampling))[0] for p in prompts]


def test_shared_prefix_leaves_every_row_a_token_of_its_own():
    head = list(range(10))
    assert shared_prefix([head + [1], head + [2, 3]]) == 10
    assert shared_prefix([head, head + [2, 3]]) == 9  # a whole prompt: its last token stays its own
    assert shared_prefix([head + [1]]) == 0 and shared_prefix([[1, 2, 3, 4] + [5], [1, 2, 3, 4, 6]]) == 0


@pytest.mark.parametrize("n", [1, 3])
def test_a_ray_replica_samples_a_prompt_slice_as_the_whole_call_would(engine, n):
    """Ray replicas sample prompts[k:] as prompts k, k+1, … of the whole call (generate_from)."""
    from zoopt.engines.ray.replica import generate_from

    s = Sampling(temperature=1.0, max_new_tokens=8, n=n, seed=2)
    whole = tokens(engine.generate(PROMPTS, s))
    assert tokens(generate_from(engine, PROMPTS[2:], s, first_index=2)) == whole[2:]
    assert "_generate_batch" not in vars(engine)  # the shift is undone


def test_generate_leaves_global_rng_alone(engine):
    state = torch.get_rng_state()
    engine.generate(PROMPTS, Sampling(temperature=0.8, top_p=0.9, max_new_tokens=8, n=2))
    engine.generate(PROMPTS, GREEDY)
    assert torch.equal(torch.get_rng_state(), state)


def test_tiny_top_p_is_greedy(engine):
    nucleus = Sampling(temperature=1.0, top_p=1e-6, max_new_tokens=12, seed=3)
    assert tokens(engine.generate(PROMPTS, nucleus)) == tokens(engine.generate(PROMPTS, GREEDY))


@pytest.mark.parametrize("temperature", [1.0, 0.7, 0.0])
def test_logprobs_match_a_separate_forward_pass(engine, temperature):
    s = Sampling(temperature=temperature, max_new_tokens=10, n=2 if temperature else 1, logprobs=True, seed=5)
    log_v = math.log(engine.module.config.vocab_size)
    for prompt, row in zip(PROMPTS, engine.generate(PROMPTS, s)):
        prompt_ids = engine.encode(prompt)
        for c in row:
            assert len(c.logprobs) == len(c.entropies) == len(c.token_ids) > 0
            assert all(lp <= 0 for lp in c.logprobs)
            assert all(0 <= h <= log_v + 1e-5 for h in c.entropies)
            ids = torch.tensor([prompt_ids + c.token_ids])
            with torch.no_grad():
                logits = engine.module(ids).logits[0, len(prompt_ids) - 1 : -1].float()
            logq = torch.log_softmax(logits / (temperature or 1.0), dim=-1)
            want_lp = logq.gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
            want_h = -(logq.exp() * logq).sum(-1)
            assert torch.allclose(torch.tensor(c.logprobs), want_lp, atol=1e-4)
            assert torch.allclose(torch.tensor(c.entropies), want_h, atol=1e-4)


def test_inverse_cdf_sampler_matches_the_distribution():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    n = 2000
    u = (torch.arange(n) + 1.0) / n  # an even grid on (0, 1]
    logits = probs.log().expand(n, 4)
    counts = torch.bincount(_sample(logits, 1.0, u), minlength=4) / n
    assert torch.allclose(counts, probs, atol=2 / n)
    # top_p = 0.8 keeps {0, 1} (mass before token 2 is 0.8, not < 0.8), renormalised to 5/8, 3/8
    counts = torch.bincount(_sample(logits, 0.8, u), minlength=4) / n
    assert torch.allclose(counts, torch.tensor([0.625, 0.375, 0.0, 0.0]), atol=2 / n)
    # a zero-probability token is never chosen, even at u = 1
    z = torch.tensor([[0.0, -float("inf"), 0.0, -float("inf")]])
    assert _sample(z, 1.0, torch.tensor([1.0])).item() == 2


def test_stop_truncation_and_finish_reason(engine):
    tok = engine.tokenizer
    one, two = tok("1")["input_ids"][0], tok("2")["input_ids"][0]
    eos, pad = tok.eos_token_id, tok.pad_token_id
    rows = torch.tensor([[one, two, eos, pad, pad], [one, one, one, one, one]])
    lp = [torch.full((2,), -0.5)] * 5
    a, b = engine._completions(rows, lp, lp)
    assert (a.token_ids, a.text, a.finish_reason, len(a.logprobs)) == ([one, two, eos], "12", "stop", 3)
    assert (b.token_ids, b.text, b.finish_reason, b.logprobs) == ([one] * 5, "11111", "length", [-0.5] * 5)


def test_chat_prompts_need_a_template(engine):
    with pytest.raises(ValueError, match="chat template"):
        engine.generate([[{"role": "user", "content": "hi"}]], GREEDY)
    with pytest.raises(ValueError, match="chat template"):
        HFEngine(engine.module, engine.tokenizer, system_prompt="be brief")


def test_stats_count_generated_tokens(engine):
    engine.stats.reset()
    result = engine.generate(PROMPTS, Sampling(temperature=1.0, max_new_tokens=6, n=2))
    assert engine.stats.generated_tokens == sum(len(c.token_ids) for row in result for c in row)
    assert engine.stats.sequences == 2 * len(PROMPTS) and engine.stats.calls == 1
    assert engine.stats.seconds > 0 and engine.stats.tokens_per_second > 0


def test_perturb_changes_greedy_output_and_restore_is_exact():
    engine = HFEngine.from_pretrained("tiny:7")
    before, checksum = tokens(engine.generate(PROMPTS, GREEDY)), engine.checksum()
    engine.perturb(Gaussian(), seed=1, scale=0.5)
    assert engine.checksum() != checksum
    assert tokens(engine.generate(PROMPTS, GREEDY)) != before
    engine.restore()
    assert engine.checksum() == checksum
    assert tokens(engine.generate(PROMPTS, GREEDY)) == before


def test_export_pretrained_writes_the_fp32_master(tmp_path):
    engine = HFEngine.from_pretrained("tiny:7", dtype="bfloat16")
    engine.perturb(Gaussian(), seed=2, scale=0.1)  # not exported
    out = tmp_path / "export"
    out.mkdir()
    (out / "old-file").write_text("replaced")
    assert engine.export_pretrained(out) == out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]
    assert not (out / "old-file").exists()
    model, tok = load_model(str(out))
    assert ModuleEngine(model).checksum() == engine.master_checksum()
    assert tok("12 + 34 = 46")["input_ids"] == engine.tokenizer("12 + 34 = 46")["input_ids"]
    reloaded = HFEngine(*load_model(str(out), dtype="bfloat16"))
    assert reloaded.checksum() == engine.checksum()
    assert tokens(reloaded.generate(PROMPTS, GREEDY)) == tokens(engine.generate(PROMPTS, GREEDY))


# -- the embedded model ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def smol() -> HFEngine:
    return HFEngine.from_pretrained("smollm2-135m", batch_size=8)


def test_embedded_answers_greedily(smol):
    (c,), = smol.generate(["What is 2 + 3?"], Sampling(temperature=0, max_new_tokens=16))
    assert c.finish_reason == "stop" and c.token_ids[-1] == smol.tokenizer.eos_token_id
    assert "5" in c.text and "<|im_end|>" not in c.text


def test_embedded_batch_of_8(smol):
    prompts = [f"What is {a} + {a + 1}?" for a in range(8)]
    result = smol.generate(prompts, Sampling(temperature=0.7, max_new_tokens=16, seed=1))
    assert len(result) == 8
    for (c,) in result:
        assert 1 <= len(c.token_ids) <= 16 and c.text.strip()
        assert (c.finish_reason == "stop") == (c.token_ids[-1] in smol.stop_ids)
