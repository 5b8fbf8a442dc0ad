"""The engine conformance suite: what every :class:`zoopt.engines.WeightsEngine` / ``Engine`` must do.

In the style of optax's shared optimizer tests, every engine runs the same checks.  A new
engine passes them by adding one class to a test module::

    class TestMyEngine(EngineConformance):          # or LLMEngineConformance
        make_engine = staticmethod(lambda: MyEngine(...))

``make_engine()`` may return the same engine every time (a vLLM engine is expensive to start):
each check measures what it needs before and after, and leaves the weights as it found them,
except ``apply``, which moves them.  The checks are plain functions too (``check_*``), so a
test can show that a broken engine fails them.

The checks:

- **restore is bit-exact** after many perturb/restore cycles (working weights and master),
  and a perturbation does change the weights (so the check can fail);
- **apply equals the float64 dense sum** M + Σᵢ cᵢ·ε(seedᵢ, name), to fp32 accumulation
  precision, and leaves working weights = cast(master) (restore changes nothing afterwards);
- **the checksum is stable**: repeated calls agree, and perturb → restore returns to it;
- **the population call equals the sequential loop** (perturb → evaluate/generate → restore),
  member for member;
- **a failure inside a member leaves the weights restored**, and the error propagates;
- **non-finite coefficients and scales are refused** with the weights untouched;
- **the rollout calls open alike** (``Engine.generate``'s template): a single prompt or a
  ``sampling`` that is not a ``Sampling`` is a ``TypeError`` in ``generate`` and in
  ``generate_population``, counted nowhere, and ``stats`` counts a ``generate`` call — one
  call, its completions, their tokens and some seconds;
- **an update rule** (``update.rule``: clip → adam → weight decay, and Nesterov momentum → decay
  towards zero) **gives the reference's bits**: three steps equal, bit for bit, the rule applied
  to whole tensors of the fp32 ``state_dict`` (:func:`rule_reference`), so engines that hold a
  tensor in pieces (vLLM's fused and tensor-parallel parameters) or in other processes (Ray
  replicas) end where the HF engine does; an update for the wrong step is refused, untouched.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from zoopt.engines import Engine, Sampling, WeightsEngine
from zoopt.engines.rule_state import block_sum_of_squares
from zoopt.noise import ROW_BLOCK_BYTES, Gaussian, Noise
from zoopt.types import Member, Population, Update
from zoopt.updates import StepContext, UpdateRule, adam, applied_rule, chain, clip_by_norm, momentum, weight_decay

NOISE = Gaussian()
POPULATION = Population(step=0, sigma=0.05, members=(Member(11), Member(11, -1), Member(12), Member(13)))
GREEDY = Sampling(temperature=0.0, max_new_tokens=6)
PROMPTS = ["1 + 2 =", "hello world", "The cat sat on"]


class MemberFailed(RuntimeError):
    pass


# -- the checks ---------------------------------------------------------------------------------
def check_restore_is_bit_exact(engine: WeightsEngine, noise: Noise = NOISE, cycles: int = 200,
                               scale: float = 1e-3) -> None:
    start, master = engine.checksum(), engine.master_checksum()
    engine.perturb(noise, 1, scale)
    assert engine.checksum() != start, "perturb changed no weight: the check below would prove nothing"
    engine.restore()
    for cycle in range(cycles):
        engine.perturb(noise, cycle, scale if cycle % 2 else -scale)
        engine.restore()
    assert engine.checksum() == start, f"working weights differ after {cycles} perturb/restore cycles"
    assert engine.master_checksum() == master, "perturb/restore changed the master"


def check_apply_equals_float64_dense_sum(engine: WeightsEngine, noise: Noise = NOISE,
                                         atol: float = 1e-6) -> None:
    before = {n: t.detach().to("cpu", torch.float64, copy=True) for n, t in engine.state_dict().items()}
    update = Update((3, 4, 5), (2e-3, -1e-3, 5e-4))
    engine.apply(noise, update)
    after = engine.state_dict()
    assert list(after) == list(before)
    moved = 0
    for name, m0 in before.items():
        expected = m0.clone()
        if noise.selects(name):
            for seed, c in zip(update.seeds, update.coefficients):
                expected += c * noise.sample(seed, name, m0.shape).double()
            moved += 1
        got = after[name].detach().to("cpu", torch.float64)
        assert after[name].dtype == torch.float32, f"{name}: master is {after[name].dtype}, not fp32"
        err = (got - expected).abs().max().item() if got.numel() else 0.0
        assert err <= atol, f"{name}: apply is {err:.3g} away from the float64 dense sum"
    assert moved, "the noise selected no parameter"
    working = engine.checksum()
    engine.restore()
    assert engine.checksum() == working, "apply left working weights that restore() changes"
    engine.apply(noise, Update(update.seeds, tuple(-c for c in update.coefficients)))  # roughly back


def check_checksum_is_stable(engine: WeightsEngine, noise: Noise = NOISE) -> None:
    first = engine.checksum()
    assert isinstance(first, str) and first
    assert engine.checksum() == first
    engine.restore()
    assert engine.checksum() == first, "restore() without a perturbation changed the checksum"
    engine.perturb(noise, 7, 0.05)
    perturbed = engine.checksum()
    engine.perturb(noise, 7, 0.05)
    assert engine.checksum() == perturbed, "perturbing twice with the same seed stacked"
    engine.restore()
    assert perturbed != first and engine.checksum() == first


def check_evaluate_population_equals_loop(engine: WeightsEngine, noise: Noise = NOISE,
                                          population: Population = POPULATION) -> None:
    start = engine.checksum()
    loop = []
    for i, member in enumerate(population.members):
        engine.perturb(noise, member.seed, population.scale(i))
        loop.append((i, engine.checksum()))
        engine.restore()
    got = engine.evaluate_population(noise, population, lambda i: (i, engine.checksum()))
    assert got == loop, "evaluate_population saw other weights than the sequential loop"
    assert len({c for _, c in got}) == len(population), "members did not differ"
    assert engine.checksum() == start


def check_evaluate_failure_restores(engine: WeightsEngine, noise: Noise = NOISE,
                                    population: Population = POPULATION) -> None:
    start, master = engine.checksum(), engine.master_checksum()

    def evaluate(i):
        if i == 1:
            raise MemberFailed("member 1 failed")
        return i

    with pytest.raises(MemberFailed):
        engine.evaluate_population(noise, population, evaluate)
    assert engine.checksum() == start, "a failing member left the weights perturbed"
    assert engine.master_checksum() == master


def check_non_finite_refused(engine: WeightsEngine, noise: Noise = NOISE) -> None:
    start, master = engine.checksum(), engine.master_checksum()
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ValueError):
            engine.apply(noise, Update((1, 2), (0.1, bad)))
        with pytest.raises(ValueError):
            engine.perturb(noise, 1, bad)
    engine.restore()
    assert engine.checksum() == start and engine.master_checksum() == master, "a refused write changed weights"


RULE_UPDATES = (((21, 22, 23), (2e-2, -1e-2, 5e-3)), ((24, 25), (-1e-2, 2e-2)), ((21, 26), (1e-2, 1e-2)))


def rule_reference(before: dict, noise: Noise, rule: UpdateRule, updates: list[Update]) -> dict:
    """The master after ``updates`` (rule steps 0, 1, …) from ``before`` (fp32 whole tensors by
    name): per selected tensor, ĝ in ``noise.combine_rows``'s row blocks, ``θ += rule.update(ĝ,
    state, θ, ctx)`` on whole blocks, state from ``rule.init(θ)`` at step 0; ‖ĝ‖ summed over the
    blocks with :func:`~zoopt.engines.rule_state.block_sum_of_squares` (the norm's fixed order)."""
    theta = {n: t.detach().to("cpu", torch.float32, copy=True) for n, t in before.items()}
    names = [n for n in theta if noise.selects(n)]
    state = {n: rule.init(theta[n]) for n in names}

    def blocks(update, name):
        return noise.combine_rows(update.seeds, update.coefficients, name, theta[name].shape, "cpu",
                                  block_bytes=ROW_BLOCK_BYTES)

    for update in updates:
        norm = None
        if rule.needs_norm:
            norm = math.sqrt(sum(block_sum_of_squares(b) for n in names for _, b in blocks(update, n)))
        ctx = StepContext(update.rule_step, norm)
        for name in names:
            for start, block in blocks(update, name):
                at = (slice(start, start + block.shape[0]),) if block.ndim else ()
                t = theta[name][at]
                t.add_(rule.update(block, {k: v[at] for k, v in state[name].items()}, t, ctx))
    return theta


def check_rule_apply_equals_reference(engine: WeightsEngine, noise: Noise = NOISE, lr: float = 1e-3) -> None:
    for direction in (adam(b1=0.8, b2=0.9), chain(momentum(0.9, nesterov=True), weight_decay(0.1, "zero"))):
        before = {n: t.detach().to("cpu", torch.float32, copy=True) for n, t in engine.state_dict().items()}
        first = Update(*RULE_UPDATES[0])
        norm = math.sqrt(sum(block_sum_of_squares(b) for n in before if noise.selects(n)
                             for _, b in noise.combine_rows(first.seeds, first.coefficients, n, before[n].shape,
                                                            "cpu", block_bytes=ROW_BLOCK_BYTES)))
        rule = applied_rule(chain(clip_by_norm(0.5 * norm), direction, weight_decay(0.5)), lr)  # clips step 0
        updates = [Update(seeds, coefs, rule=rule, rule_step=t) for t, (seeds, coefs) in enumerate(RULE_UPDATES)]
        for update in updates:
            engine.apply(noise, update)
        expected = rule_reference(before, noise, rule, updates)
        after = engine.state_dict()
        assert list(after) == list(expected)
        for name, want in expected.items():
            got = after[name].detach().to("cpu")
            assert torch.equal(got, want), (f"{name}: {rule.label} moved the master "
                                            f"{(got - want).abs().max().item():.3g} away from the reference")
        assert any(not torch.equal(after[n].detach().cpu(), before[n]) for n in before), "the rule moved nothing"
        working, master = engine.checksum(), engine.master_checksum()
        engine.restore()
        assert engine.checksum() == working, "a rule's apply left working weights that restore() changes"
        with pytest.raises(ValueError, match="step 7"):
            engine.apply(noise, Update(updates[-1].seeds, updates[-1].coefficients, rule=rule, rule_step=7))
        assert engine.checksum() == working and engine.master_checksum() == master, "a refused update changed weights"


def tokens(completions) -> list:
    return [[c.token_ids for c in per_prompt] for per_prompt in completions]


def check_generate_population_equals_loop(engine: Engine, noise: Noise = NOISE, population: Population = POPULATION,
                                          prompts=PROMPTS, sampling: Sampling = GREEDY) -> None:
    start = engine.checksum()
    base = tokens(engine.generate(prompts, sampling))
    loop = []
    for i, member in enumerate(population.members):
        engine.perturb(noise, member.seed, population.scale(i))
        try:
            loop.append(tokens(engine.generate(prompts, sampling)))
        finally:
            engine.restore()
    seen = []
    got = engine.generate_population(noise, population, prompts, sampling,
                                     on_member=lambda i, completions: seen.append((i, tokens(completions))))
    assert [tokens(member) for member in got] == loop, "generate_population differs from the sequential loop"
    assert seen == list(enumerate(loop)), "on_member was not called once per member, in order, with its completions"
    assert any(member != base for member in loop), "no member changed any output: σ is too small to check"
    assert engine.checksum() == start


def check_generate_population_failure_restores(engine: Engine, noise: Noise = NOISE,
                                               population: Population = POPULATION) -> None:
    start = engine.checksum()

    def on_member(i, completions):
        if i == 2:
            raise MemberFailed("scoring member 2 failed")

    with pytest.raises(MemberFailed):
        engine.generate_population(noise, population, PROMPTS, GREEDY, on_member=on_member)
    assert engine.checksum() == start, "a failing member left the weights perturbed"


def check_stats_count_population_completions(engine: Engine, noise: Noise = NOISE,
                                             population: Population = POPULATION) -> None:
    before = engine.stats.sequences
    sampling = Sampling(temperature=1.0, max_new_tokens=3, n=2, seed=5)
    engine.generate_population(noise, population, PROMPTS, sampling)
    assert engine.stats.sequences - before == len(population) * len(PROMPTS) * sampling.n


def check_generate_opening(engine: Engine, noise: Noise = NOISE, population: Population = POPULATION) -> None:
    start = engine.checksum()
    before = dataclasses.replace(engine.stats)
    for single in ("1 + 2 =", {"role": "user", "content": "1 + 2 ="}):
        with pytest.raises(TypeError, match="takes a sequence of prompts"):
            engine.generate(single, GREEDY)
        with pytest.raises(TypeError, match="takes a sequence of prompts"):
            engine.generate_population(noise, population, single, GREEDY)
    for not_sampling in ({"temperature": 0.0}, None):
        with pytest.raises(TypeError, match="sampling must be a zoopt.engines.base.Sampling"):
            engine.generate(PROMPTS, not_sampling)
        with pytest.raises(TypeError, match="sampling must be a zoopt.engines.base.Sampling"):
            engine.generate_population(noise, population, PROMPTS, not_sampling)
    assert engine.stats == before, "a refused call was counted in stats"
    assert engine.checksum() == start, "a refused call changed the weights"
    sampling = Sampling(temperature=1.0, max_new_tokens=3, n=2, seed=5)
    results = engine.generate(tuple(PROMPTS), sampling)  # any sequence of prompts
    assert [len(per_prompt) for per_prompt in results] == [sampling.n] * len(PROMPTS)
    tokens_out = sum(len(c.token_ids) for per_prompt in results for c in per_prompt)
    assert 0 < tokens_out <= len(PROMPTS) * sampling.n * sampling.max_new_tokens
    stats = engine.stats
    assert stats.calls - before.calls == 1, "generate was not counted as one call"
    assert stats.sequences - before.sequences == len(PROMPTS) * sampling.n
    assert stats.generated_tokens - before.generated_tokens == tokens_out
    assert stats.seconds > before.seconds, "generate's time was not counted"
    assert engine.generate([], sampling) == [] and engine.stats.calls - before.calls == 2


WEIGHT_CHECKS = (check_restore_is_bit_exact, check_apply_equals_float64_dense_sum, check_checksum_is_stable,
                 check_evaluate_population_equals_loop, check_evaluate_failure_restores, check_non_finite_refused,
                 check_rule_apply_equals_reference)
LLM_CHECKS = (check_generate_opening, check_generate_population_equals_loop, check_generate_population_failure_restores,
              check_stats_count_population_completions)


# -- the suites ---------------------------------------------------------------------------------
class EngineConformance:
    """Mix into a test class and set ``make_engine`` (a no-argument callable)."""

    make_engine = None

    @pytest.fixture
    def engine(self):
        engine = type(self).make_engine()
        assert isinstance(engine, WeightsEngine)
        return engine

    def test_restore_is_bit_exact(self, engine):
        check_restore_is_bit_exact(engine)

    def test_apply_equals_float64_dense_sum(self, engine):
        check_apply_equals_float64_dense_sum(engine)

    def test_checksum_is_stable(self, engine):
        check_checksum_is_stable(engine)

    def test_evaluate_population_equals_loop(self, engine):
        check_evaluate_population_equals_loop(engine)

    def test_failure_inside_a_member_restores(self, engine):
        check_evaluate_failure_restores(engine)

    def test_non_finite_refused(self, engine):
        check_non_finite_refused(engine)

    def test_rule_apply_equals_reference(self, engine):
        check_rule_apply_equals_reference(engine)


class LLMEngineConformance(EngineConformance):
    """:class:`EngineConformance` plus the rollout checks, for :class:`zoopt.engines.Engine` s."""

    def test_is_an_engine(self, engine):
        assert isinstance(engine, Engine)

    def test_generate_opening(self, engine):
        check_generate_opening(engine)

    def test_generate_population_equals_loop(self, engine):
        check_generate_population_equals_loop(engine)

    def test_generate_population_failure_restores(self, engine):
        check_generate_population_failure_restores(engine)

    def test_stats_count_population_completions(self, engine):
        check_stats_count_population_completions(engine)
