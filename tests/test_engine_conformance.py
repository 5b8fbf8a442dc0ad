"""Every in-process engine runs the conformance suite; broken engines fail it.

(The vLLM engine runs the same suite in ``tests/test_vllm_engine.py``, inside ``.venv-vllm``.)
"""

from __future__ import annotations

import dataclasses
import functools

import pytest
import torch

import engine_conformance as conformance
from engine_conformance import EngineConformance, LLMEngineConformance
from zoopt.engines import ModuleEngine
from zoopt.engines.base import check_request
from zoopt.engines.hf import HFEngine
from zoopt.noise import Gaussian


def small_net(dtype=torch.bfloat16, seed=0) -> torch.nn.Module:
    torch.manual_seed(seed)
    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8))
    return net.to(dtype)


@functools.lru_cache(maxsize=None)
def tiny_hf(dtype: str) -> HFEngine:  # one per dtype: a check leaves the weights as it found them, or moved by apply
    return HFEngine.from_pretrained("tiny", dtype=dtype, batch_size=8)


class TestModuleEngineBF16(EngineConformance):
    make_engine = staticmethod(lambda: ModuleEngine(small_net(torch.bfloat16)))


class TestModuleEngineFP32(EngineConformance):
    make_engine = staticmethod(lambda: ModuleEngine(small_net(torch.float32)))


class TestHFEngine(LLMEngineConformance):
    make_engine = staticmethod(lambda: tiny_hf("float32"))


class TestHFEngineBF16(LLMEngineConformance):
    make_engine = staticmethod(lambda: tiny_hf("bfloat16"))


# -- broken engines fail ------------------------------------------------------------------------
class SubtractingRestore(ModuleEngine):
    """Restores by subtracting the noise it added (the bug the master copy exists to avoid)."""

    def perturb(self, noise, seed, scale):
        super().restore()
        self._last = (noise, seed, scale)
        with torch.no_grad():
            for name in noise.select(self.params):
                p = self.params[name]
                p.add_((scale * noise.sample(seed, name, p.shape)).to(p.dtype))

    def restore(self):
        if getattr(self, "_last", None) is None:
            return
        noise, seed, scale = self._last
        with torch.no_grad():
            for name in noise.select(self.params):
                p = self.params[name]
                p.sub_((scale * noise.sample(seed, name, p.shape)).to(p.dtype))
        self._last = None


class NoFinallyPopulation(ModuleEngine):
    """A population override that forgets to restore when a member fails."""

    def evaluate_population(self, noise, population, evaluate):
        out = []
        for i, member in enumerate(population.members):
            self.perturb(noise, member.seed, population.scale(i))
            out.append(evaluate(i))
            self.restore()
        return out


class IgnoresSign(HFEngine):
    """A population override that perturbs every member with +σ (antithetic pairs collapse)."""

    def generate_population(self, noise, population, prompts, sampling, on_member=None):
        results = []
        for i, member in enumerate(population.members):
            self.perturb(noise, member.seed, population.sigma)
            try:
                results.append(self.generate(prompts, sampling))
            finally:
                self.restore()
            if on_member is not None:
                on_member(i, results[-1])
        return results


class UncountedGenerate(HFEngine):
    """Replaces the contract's ``generate`` (a template) by its own opening, which forgets ``stats``."""

    def generate(self, prompts, sampling):
        return self._generate(check_request(prompts, sampling), sampling)


class AcceptsNaN(ModuleEngine):
    def apply(self, noise, update):
        self.weights.restore()
        with torch.no_grad():
            for name in noise.select(self.params):
                self.params[name].add_(self.delta(noise, update, name).to(self.params[name].dtype))


class RuleStateForgotten(ModuleEngine):
    """Starts an update rule's state afresh at every step (the state not kept beside the master)."""

    def apply(self, noise, update):
        if update.rule is not None:
            update = dataclasses.replace(update, rule_step=0)
        super().apply(noise, update)


class RuleOnTheWorkingWeights(ModuleEngine):
    """Hands the rule the bf16 working weights (weight decay reads θ) instead of the fp32 master."""

    def apply(self, noise, update):
        if update.rule is None:
            return super().apply(noise, update)
        master = self.weights.master
        self.weights.master = {n: p.detach().float() for n, p in self.params.items()}
        try:
            super().apply(noise, update)
        finally:
            for name, m in self.weights.master.items():
                master[name].copy_(m)
            self.weights.master = master


def test_subtracting_restore_fails_the_bit_exact_check():
    with pytest.raises(AssertionError, match="perturb/restore cycles"):
        conformance.check_restore_is_bit_exact(SubtractingRestore(small_net(torch.bfloat16)))


def test_population_without_finally_fails_the_failure_check():
    with pytest.raises(AssertionError, match="left the weights perturbed"):
        conformance.check_evaluate_failure_restores(NoFinallyPopulation(small_net()))


def test_population_that_drops_the_sign_fails_the_loop_check():
    model, tokenizer = HFEngine.from_pretrained("tiny").module, tiny_hf("float32").tokenizer
    with pytest.raises(AssertionError, match="differs from the sequential loop"):
        conformance.check_generate_population_equals_loop(IgnoresSign(model, tokenizer))


def test_generate_with_its_own_opening_fails_the_opening_check():
    model, tokenizer = HFEngine.from_pretrained("tiny").module, tiny_hf("float32").tokenizer
    with pytest.raises(AssertionError, match="not counted as one call"):
        conformance.check_generate_opening(UncountedGenerate(model, tokenizer))


def test_apply_that_accepts_nan_fails_the_refusal_check():
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        conformance.check_non_finite_refused(AcceptsNaN(small_net()))


def test_noise_that_selects_nothing_is_a_clear_error():
    engine = ModuleEngine(small_net())
    with pytest.raises(ValueError, match="selects no parameter"):
        engine.perturb(Gaussian(include=("nothing*",)), 0, 0.1)


@pytest.mark.parametrize("broken", [RuleStateForgotten, RuleOnTheWorkingWeights])
def test_a_rule_applied_differently_fails_the_rule_check(broken):
    with pytest.raises(AssertionError, match="away from the reference"):
        conformance.check_rule_apply_equals_reference(broken(small_net(torch.bfloat16)))
