"""The batched low-rank population path (EGGROLL) against the dense sequential perturbation.

Exactness is checked in float64 on tiny Llama models with tied and untied embeddings, with
antithetic pairs, r ∈ {1, 2}, prompts of different lengths, and σ large enough that members'
outputs differ (asserted).  The dense reference is built in float64 from the same factors.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch

import engine_conformance as conformance
from engine_conformance import LLMEngineConformance
from zoopt.engines.batched import BatchedLowRank, RowLayout
from zoopt.engines.base import Sampling
from zoopt.engines import weights as weights_module
from zoopt.engines.hf import MIN_SHARED_PREFIX, HFEngine, shared_prefix
from zoopt.engines.weights import MasterWeights, Piece
from zoopt.models import tiny_tokenizer
from zoopt.noise import Gaussian, LowRank
from zoopt.types import Member, Population, Update

PROMPTS = ["1 + 2 =", "hello world, how are you", "7", "The cat sat on the"]
SIGMA = 0.5
POP = Population(step=0, sigma=SIGMA, members=(Member(21), Member(21, -1), Member(22), Member(22, -1)))


@functools.lru_cache(maxsize=None)
def tiny64(tied: bool, bias: bool = False):
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = tiny_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      initializer_range=0.2, tie_word_embeddings=tied, attention_bias=bias,
                      pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        model = LlamaForCausalLM(cfg).to(torch.float64).eval()
        if bias:
            with torch.no_grad():
                for n, p in model.named_parameters():
                    if n.endswith(".bias"):
                        p.normal_(0, 0.2)
    return model, tok


def dense_member(model, noise: LowRank, seed: int, scale: float):
    """A float64 copy of ``model`` with every parameter at W + scale·ε, ε from the same factors."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in out.named_parameters():
            if not noise.selects(name):
                continue
            if p.ndim >= 2:
                a, b = noise.factors(seed, name, p.shape)
                eps = (a.double() @ b.double().T) / noise.rank ** 0.5
            else:
                eps = noise.sample(seed, name, p.shape).double()
            p.add_(scale * eps.view(p.shape))
    return out


def batch_inputs(tok, prompts):
    ids = [tok(p)["input_ids"] for p in prompts]
    width = max(map(len, ids))
    input_ids = torch.full((len(ids), width), tok.pad_token_id)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for k, row in enumerate(ids):
        input_ids[k, width - len(row):] = torch.tensor(row)
        mask[k, width - len(row):] = 1
    return input_ids, mask, (mask.cumsum(-1) - 1).clamp(min=0)


def logits(model, inputs):
    input_ids, mask, pos = inputs
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=mask, position_ids=pos, use_cache=False).logits


def batched_logits(engine, noise, population, members, inputs):
    batch = BatchedLowRank(RowLayout(engine.module, engine.weights, noise), engine.weights, noise, population)
    with batch.rows(members):
        return logits(engine.module, inputs)


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_batched_logits_equal_dense_members_in_float64(tied, rank):
    model, tok = tiny64(tied)
    engine = HFEngine(model, tok, batch_size=16)
    noise = LowRank(rank=rank)
    rows = [(i, p) for p in range(len(PROMPTS)) for i in range(len(POP))]  # members mix in one batch
    inputs = batch_inputs(tok, [PROMPTS[p] for _, p in rows])
    got = batched_logits(engine, noise, POP, [i for i, _ in rows], inputs)
    base = logits(model, inputs)
    for i, member in enumerate(POP.members):
        want = logits(dense_member(model, noise, member.seed, POP.scale(i)), inputs)
        ks = [k for k, (m, _) in enumerate(rows) if m == i]
        err = (got[ks] - want[ks]).abs().max().item()
        assert err < 1e-10, f"member {i}: batched logits are {err:.2e} from the dense perturbation"
        assert (want[ks] - base[ks]).abs().max().item() > 1e-2, "σ too small: the member equals the base"
    assert engine.checksum() == HFEngine(model, tok).checksum()  # nothing was written


def test_biases_and_tied_head_are_perturbed_exactly():
    model, tok = tiny64(True, bias=True)
    assert any(n.endswith(".bias") for n, _ in model.named_parameters())
    engine = HFEngine(model, tok)
    noise = LowRank(rank=2)
    inputs = batch_inputs(tok, PROMPTS[:2])
    got = batched_logits(engine, noise, POP, [3, 0], inputs)
    for k, i in enumerate([3, 0]):
        want = logits(dense_member(model, noise, POP.members[i].seed, POP.scale(i)), inputs)[k]
        assert (got[k] - want).abs().max().item() < 1e-10


def test_row_order_and_sigma_zero():
    model, tok = tiny64(False)
    engine = HFEngine(model, tok)
    noise = LowRank(rank=1)
    inputs = batch_inputs(tok, PROMPTS)
    members = [0, 1, 2, 3]
    got = batched_logits(engine, noise, POP, members, inputs)
    perm = [2, 0, 3, 1]
    shuffled = batched_logits(engine, noise, POP, [members[k] for k in perm],
                              tuple(t[perm] for t in inputs))
    assert (shuffled - got[perm]).abs().max().item() < 1e-12
    zero = Population(step=0, sigma=0.0, members=POP.members)
    assert torch.equal(batched_logits(engine, noise, zero, members, inputs), logits(model, inputs))


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_generate_population_equals_sequential_greedy_tokens(tied):
    model, tok = tiny64(tied)
    batched = HFEngine(model, tok, batch_size=5)  # micro-batches that cut across members
    sequential = HFEngine(copy.deepcopy(model), tok, population="sequential")
    noise = LowRank(rank=2)
    greedy = conformance.GREEDY
    got = batched.generate_population(noise, POP, PROMPTS, greedy)
    want = []
    for i, member in enumerate(POP.members):  # the dense reference, in float64 from the factors
        ref = HFEngine(dense_member(model, noise, member.seed, POP.scale(i)), tok)
        want.append(conformance.tokens(ref.generate(PROMPTS, greedy)))
    assert [conformance.tokens(m) for m in got] == want
    assert len({str(w) for w in want}) > 1, "members' outputs do not differ"
    assert batched.population_path(noise) == "batched" and sequential.population_path(noise) == "sequential"
    assert batched.stats.sequences == len(POP) * len(PROMPTS)


def test_a_shared_prompt_head_runs_once_per_member_and_changes_nothing():
    """Prompts with a common head (a chat template's system turn): each micro-batch prefills the
    head once per member in it; sampled tokens and log-probs equal the dense float64 members'."""
    model, tok = tiny64(True)
    batched = HFEngine(model, tok, batch_size=6)  # micro-batches that cut across members
    prompts = [f"Answer in one word, please. {p}" for p in PROMPTS]
    head = shared_prefix([batched.encode(p) for p in prompts])
    assert head >= MIN_SHARED_PREFIX
    sampling = Sampling(temperature=1.0, max_new_tokens=6, n=2, seed=5, logprobs=True)
    noise = LowRank(rank=1)
    shapes = []
    hook = model.register_forward_pre_hook(lambda mod, args, kw: shapes.append(tuple(kw["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        got = batched.generate_population(noise, POP, prompts, sampling)
    finally:
        hook.remove()
    heads = [rows for rows, width in shapes if width == head]
    assert heads and sum(heads) < len(POP) * len(prompts) * sampling.n and all(rows <= len(POP) for rows in heads)
    for i, member in enumerate(POP.members):
        ref = HFEngine(dense_member(model, noise, member.seed, POP.scale(i)), tok).generate(prompts, sampling)
        assert conformance.tokens(got[i]) == conformance.tokens(ref)
        for row, want in zip(got[i], ref):
            for a, b in zip(row, want):
                assert a.logprobs == pytest.approx(b.logprobs, abs=1e-9)


def test_fast_low_rank_apply_equals_the_dense_sum():
    noise = LowRank(rank=3)
    seeds, coefs = (4, 5, 6, 7), (0.3, -0.2, 0.0, 0.05)
    fast = noise.combine(seeds, coefs, "w", (40, 24))
    dense = sum(c * noise.sample(s, "w", (40, 24)).double() for s, c in zip(seeds, coefs))
    assert (fast.double() - dense).abs().max().item() < 1e-6
    assert torch.equal(noise.combine(seeds, coefs, "b", (40,)), Gaussian().combine(seeds, coefs, "b", (40,)))


def test_low_rank_update_is_added_in_row_blocks_equal_to_the_whole(monkeypatch):
    """``apply`` adds a low-rank update in row blocks of at most ``ROW_BLOCK_BYTES`` (a big
    embedding's fp32 update never exists whole), also where pieces split the logical tensor
    (vLLM's fused and tensor-parallel layouts); the result equals the whole update's."""
    noise, seeds, coefs = LowRank(rank=2), (4, 5, 6), (0.3, -0.2, 0.05)
    whole = noise.combine(seeds, coefs, "w", (40, 24))
    blocks = list(noise.combine_rows(seeds, coefs, "w", (40, 24), block_bytes=7 * 24 * 4))
    assert [start for start, _ in blocks] == [0, 7, 14, 21, 28, 35]
    assert (torch.cat([b for _, b in blocks]) - whole).abs().max().item() < 1e-6
    [(start, one)] = Gaussian().combine_rows(seeds, coefs, "w", (40, 24))  # dense noise: one block
    assert start == 0 and torch.equal(one, Gaussian().combine(seeds, coefs, "w", (40, 24)))

    # logical w (40, 24): rows 0-17 in p1; rows 17-40 in p2's rows 3-26, after v (3, 24) in rows 0-3
    w0, v0 = torch.randn(40, 24), torch.randn(3, 24)
    p1, p2 = w0[:17].clone(), torch.cat([v0, w0[17:], torch.zeros(4, 24)])
    layout = {"w": [Piece("p1", ((0, 17), (0, 24)), ((0, 17), (0, 24))),
                    Piece("p2", ((3, 26), (0, 24)), ((17, 40), (0, 24)))],
              "v": [Piece("p2", ((0, 3), (0, 24)), ((0, 3), (0, 24)))]}
    weights = MasterWeights({"p1": p1, "p2": p2}, {"w": (40, 24), "v": (3, 24)}, layout)
    seen = []
    real = LowRank.combine_rows

    def spy(self, *args, **kw):
        for start, block in real(self, *args, **kw):
            seen.append(block.shape[0])
            yield start, block
    monkeypatch.setattr(LowRank, "combine_rows", spy)
    monkeypatch.setattr(weights_module, "ROW_BLOCK_BYTES", 5 * 24 * 4)
    weights.apply(noise, Update(seeds, coefs))
    assert max(seen) == 5 and sum(seen) == 40 + 3
    got_w = torch.cat([weights.master["p1"], weights.master["p2"][3:26]])
    assert (got_w - (w0 + whole)).abs().max().item() < 1e-6
    assert (weights.master["p2"][:3] - (v0 + noise.combine(seeds, coefs, "v", (3, 24)))).abs().max().item() < 1e-6
    assert torch.equal(weights.master["p2"][26:], torch.zeros(4, 24))  # what no piece holds is untouched
    assert torch.equal(p1, weights.master["p1"]) and torch.equal(p2, weights.master["p2"])


def test_what_it_cannot_perturb_is_refused_by_name():
    model, tok = tiny64(True)
    engine = HFEngine(model, tok)

    class Scaler(torch.nn.Module):  # a vector parameter outside any known rule
        def __init__(self):
            super().__init__()
            self.gain = torch.nn.Parameter(torch.ones(3, dtype=torch.float64))

    model.extra = Scaler()
    try:
        engine = HFEngine(model, tok)
        with pytest.raises(ValueError, match=r"cannot perturb parameter 'extra.gain' exactly.*exclude=\['extra.gain'\]"):
            engine.generate_population(LowRank(), POP, PROMPTS, conformance.GREEDY)
        out = engine.generate_population(LowRank(exclude=("extra.*",)), POP, PROMPTS[:1], conformance.GREEDY)
        assert len(out) == len(POP)
    finally:
        del model.extra
    with pytest.raises(ValueError, match="population: batched needs noise.kind low_rank"):
        HFEngine(model, tok, population="batched").generate_population(Gaussian(), POP, PROMPTS, conformance.GREEDY)
    with pytest.raises(ValueError, match="population must be one of"):
        HFEngine(model, tok, population="fast")


def test_three_low_rank_steps_same_seed_log_both_paths():
    """A low-rank run's updates on the batched and sequential paths: same rewards → same seed
    log, and weights that agree to rounding."""
    from zoopt import ES

    model, tok = tiny64(True)
    engines = [HFEngine(copy.deepcopy(model), tok, population=mode) for mode in ("batched", "sequential")]
    logs = []
    for engine in engines:
        es = ES("one_point", noise=LowRank(rank=1), lr=0.05, sigma=0.3, population_size=4, seed=1)
        log = []
        for _ in range(3):
            pop = es.ask()
            out = engine.generate_population(es.noise, pop, PROMPTS, conformance.GREEDY)
            rewards = [sum(len(c.token_ids) + sum(c.token_ids) % 7 for r in m for c in r) for m in out]
            update = es.tell(rewards)
            engine.apply(es.noise, update)
            log.append(update.to_dict())
        logs.append(log)
    assert logs[0] == logs[1]
    assert any(any(c != 0 for c in u["coefficients"]) for u in logs[0])
    a, b = (e.state_dict() for e in engines)
    assert all(torch.equal(a[n], b[n]) for n in a)  # the same updates through the same fp32 apply


@functools.lru_cache(maxsize=None)
def tiny_batched_engine() -> HFEngine:
    return HFEngine.from_pretrained("tiny", dtype="float32", batch_size=8, population="batched")


class TestBatchedHFEngineConformance(LLMEngineConformance):
    """The batched engine passes the whole suite with low-rank noise."""

    make_engine = staticmethod(tiny_batched_engine)

    def test_generate_population_equals_loop(self, engine):
        # fp32: the batched path rounds differently from dense weights, so compare greedy tokens
        # of a model where σ changes outputs but ties are unlikely
        conformance.check_generate_population_equals_loop(engine, noise=LowRank(rank=2))

    def test_generate_population_failure_restores(self, engine):
        conformance.check_generate_population_failure_restores(engine, noise=LowRank(rank=2))

    def test_stats_count_population_completions(self, engine):
        conformance.check_stats_count_population_completions(engine, noise=LowRank(rank=2))

    def test_apply_low_rank_equals_dense_sum(self, engine):
        conformance.check_apply_equals_float64_dense_sum(engine, noise=LowRank(rank=2), atol=1e-5)

    def test_rule_apply_low_rank_equals_reference(self, engine):
        conformance.check_rule_apply_equals_reference(engine, noise=LowRank(rank=2))

    def test_update_apply_is_no_nan(self, engine):
        with pytest.raises(ValueError):
            engine.apply(LowRank(), Update((1,), (float("nan"),)))


def test_trainer_runs_low_rank_batched_and_sequential_to_the_same_seed_log(tmp_path):
    """Three ES steps through the trainer on the tiny fp32 model: the batched and sequential paths
    give the same rewards (their logits differ only by rounding, which flips no greedy token
    here), hence the same seed log; both apply it through the same fp32 apply, so the final
    weights agree bit for bit (tolerance 0)."""
    from digits_objective import Digits

    from zoopt.config import load_config
    from zoopt.workflows.train import Trainer

    results = {}
    for mode in ("batched", "sequential"):
        cfg = load_config(overrides=["model=tiny", "dtype=float32", "prompts_per_step=6", "sampling.max_new_tokens=6",
                                     "eval.n_problems=0", "export=false", "population_size=6", "sigma=0.1",
                                     "lr=0.05", "noise.kind=low_rank", "noise.rank=2", f"population={mode}",
                                     f"run_dir={tmp_path / mode}"])
        trainer = Trainer(cfg, tmp_path / mode, objective=Digits())
        records = [trainer.step() for _ in range(3)]
        assert {r["population_path"] for r in records} == {mode}
        results[mode] = (trainer.seedlog.updates, trainer.engine.checksum(), [r["reward_std"] for r in records])
        trainer.close()
    assert results["batched"][0] == results["sequential"][0]
    assert any(s > 0 for s in results["batched"][2]), "members' rewards never differed"
    assert results["batched"][1] == results["sequential"][1]
