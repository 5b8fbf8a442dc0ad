"""Update rules over ĝ: each rule's trajectory against its closed form, pieces and chunks against whole
tensors bit for bit, refused steps, and the ``update`` config section.

The closed forms hold ĝ fixed — the same seeds and coefficients every step, so every step's ĝ is one
fp32 tensor G (drawn here in float64 from the same noise) — on the parameters of a small module,
whose master is fp32: after T steps of ``θ ← θ + α·rule(G)`` the engine's master equals the
formula, computed in float64, to float32 rounding (a few ulps per step).  A varying ĝ sequence is
checked against the rules' recursions, also in float64.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from zoopt import ES
from zoopt.engines import ModuleEngine
from zoopt.engines.weights import MasterWeights, Piece
from zoopt.hparams import TrainConfig, UpdateConfig, to_dict
from zoopt.hparams.run_configs import DECAY_TOWARDS as HP_DECAY_TOWARDS
from zoopt.hparams.run_configs import UPDATE_RULES as HP_RULES
from zoopt.noise import Gaussian, LowRank
from zoopt.types import Update
from zoopt.updates import (
    SGD, Adam, Chain, Momentum, adam, applied_rule, chain, clip_by_norm, config_of, momentum, rmsprop, rule_from_config,
    rule_from_dict, scale, sgd, step_update, weight_decay,
)
from zoopt.updates.config import DEFAULTS, RULE_NAMES
from zoopt.updates.rules import DECAY_TOWARDS

NOISE = Gaussian()
SEEDS, COEFS = (5, 6, 7), (0.3, -0.2, 0.1)
LR, T = 0.05, 6
EPS32 = float(np.finfo(np.float32).eps)


class Quadratic(torch.nn.Module):
    """Two tensors (a matrix and a vector), so that ‖ĝ‖ is global; θ₀ ≠ 0 for weight decay."""

    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(40, 30, generator=gen))
        self.b = torch.nn.Parameter(torch.randn(50, generator=gen))


def fixed_g(module) -> dict[str, np.ndarray]:
    """ĝ = Σ cᵢ·ε(seedᵢ) per tensor in float64, from the noise the engine draws."""
    return {n: sum(c * NOISE.sample(s, n, p.shape).double().numpy() for s, c in zip(SEEDS, COEFS))
            for n, p in module.named_parameters()}


def run(rule, steps: int = T, updates=None) -> tuple[dict, dict, dict]:
    """(θ₀, ĝ, θ_T) for ``steps`` ES steps of ``rule`` at α = LR with the fixed ĝ (or ``updates``)."""
    module = Quadratic()
    engine = ModuleEngine(module)
    theta0 = {n: t.double().numpy().copy() for n, t in engine.master.items()}
    for t in range(steps):
        seeds, coefs = updates[t] if updates else (SEEDS, COEFS)
        engine.apply(NOISE, step_update(rule, Update(seeds, coefs), LR, t))
    return theta0, fixed_g(module), {n: t.double().numpy() for n, t in engine.master.items()}


def assert_close(got: dict, want: dict, steps: int = T) -> None:
    for name in want:
        scale_ = max(1.0, float(np.abs(want[name]).max()))
        err = float(np.abs(got[name] - want[name]).max())
        assert err <= 4 * (steps + 1) * EPS32 * scale_, f"{name}: {err:.3g} from the formula (fp32 ulp {EPS32 * scale_:.3g})"


def global_norm(g: dict) -> float:
    return math.sqrt(sum(float((v * v).sum()) for v in g.values()))


# -- closed forms with a fixed ĝ = G ---------------------------------------------------------------
def test_sgd_is_theta0_plus_t_alpha_g_and_the_plain_update():
    theta0, g, got = run(sgd())
    assert_close(got, {n: theta0[n] + T * LR * g[n] for n in g})
    update = step_update(sgd(), Update(SEEDS, COEFS), LR, 3)
    assert update.rule is None and update.coefficients == tuple(c * LR for c in COEFS)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_closed_form(nesterov):
    mu = 0.8
    theta0, g, got = run(momentum(mu, nesterov))
    v = [(1 - mu ** t) / (1 - mu) for t in range(1, T + 1)]  # v_t = G·(1 − μᵗ)/(1 − μ)
    total = sum(1 + mu * vt for vt in v) if nesterov else sum(v)  # Nesterov: u_t = G + μ·v_t
    if not nesterov:
        assert math.isclose(total, (T - mu * (1 - mu ** T) / (1 - mu)) / (1 - mu))
    assert_close(got, {n: theta0[n] + LR * total * g[n] for n in g})


def test_adam_closed_form_is_alpha_times_sign_per_step():
    eps = 1e-8
    theta0, g, got = run(adam(0.9, 0.999, eps))  # m̂ = G, ŝ = G²: u = G/(|G| + ε)
    assert_close(got, {n: theta0[n] + T * LR * g[n] / (np.abs(g[n]) + eps) for n in g})


def test_rmsprop_closed_form():
    rho, eps = 0.9, 1e-8
    theta0, g, got = run(rmsprop(rho, eps))  # s_t = G²·(1 − ρᵗ): u_t = G/(|G|·√(1 − ρᵗ) + ε)
    want = {n: theta0[n] + LR * sum(g[n] / (np.abs(g[n]) * math.sqrt(1 - rho ** t) + eps) for t in range(1, T + 1))
            for n in g}
    assert_close(got, want)


@pytest.mark.parametrize("towards", DECAY_TOWARDS)
def test_weight_decay_closed_form(towards):
    lam = 2.0
    theta0, g, got = run(weight_decay(lam, towards))
    keep = (1 - LR * lam) ** T
    if towards == "base":  # d ← d + α(G − λd), d = θ − θ₀: d_T = (G/λ)(1 − (1 − αλ)ᵀ)
        want = {n: theta0[n] + g[n] / lam * (1 - keep) for n in g}
    else:                  # θ ← θ + α(G − λθ): θ_T = G/λ + (θ₀ − G/λ)(1 − αλ)ᵀ
        want = {n: g[n] / lam + (theta0[n] - g[n] / lam) * keep for n in g}
    assert_close(got, want)


def test_clip_by_norm_closed_form_uses_the_global_norm():
    _, g, _ = run(sgd(), steps=0)
    norm = global_norm(g)
    theta0, g, got = run(clip_by_norm(0.25 * norm))  # ‖G‖ over both tensors; each step G·0.25
    assert_close(got, {n: theta0[n] + T * LR * 0.25 * g[n] for n in g})
    theta0, g, got = run(clip_by_norm(2 * norm))     # shorter than the limit: unchanged
    assert_close(got, {n: theta0[n] + T * LR * g[n] for n in g})


def test_adam_then_decay_closed_form():
    lam, eps = 1.5, 1e-8
    theta0, g, got = run(chain(adam(eps=eps), weight_decay(lam)))  # d_T = (u/λ)(1 − (1 − αλ)ᵀ), u = G/(|G|+ε)
    want = {n: theta0[n] + g[n] / (np.abs(g[n]) + eps) / lam * (1 - (1 - LR * lam) ** T) for n in g}
    assert_close(got, want)


# -- a varying ĝ sequence against the recursions ---------------------------------------------------
SEQUENCE = [((11 + t, 30 + t), (0.2 * (-1) ** t, 0.05 * (t + 1))) for t in range(T)]


def g_of(module, seeds, coefs) -> dict[str, np.ndarray]:
    return {n: sum(c * NOISE.sample(s, n, p.shape).double().numpy() for s, c in zip(seeds, coefs))
            for n, p in module.named_parameters()}


@pytest.mark.parametrize("rule", [momentum(0.7), momentum(0.7, nesterov=True), adam(0.8, 0.95), rmsprop(0.8),
                                  chain(clip_by_norm(3.0), momentum(0.5), weight_decay(0.5))], ids=lambda r: r.label)
def test_a_varying_g_sequence_follows_the_recursion(rule):
    theta0, _, got = run(rule, updates=SEQUENCE)
    module = Quadratic()
    theta = {n: v.copy() for n, v in theta0.items()}
    v = {n: np.zeros_like(x) for n, x in theta.items()}
    m = {n: np.zeros_like(x) for n, x in theta.items()}
    for t, (seeds, coefs) in enumerate(SEQUENCE):
        g = g_of(module, seeds, coefs)
        links = list(rule.links)
        if links[0].kind == "clip_by_norm":
            factor = min(1.0, links.pop(0).max_norm / global_norm(g))
            g = {n: x * factor for n, x in g.items()}
        core = links[0]
        for n in theta:
            if core.kind == "momentum":
                v[n] = core.mu * v[n] + g[n]
                u = g[n] + core.mu * v[n] if core.nesterov else v[n]
            elif core.kind == "adam":
                m[n] = core.b1 * m[n] + (1 - core.b1) * g[n]
                v[n] = core.b2 * v[n] + (1 - core.b2) * g[n] ** 2
                u = (m[n] / (1 - core.b1 ** (t + 1))) / (np.sqrt(v[n] / (1 - core.b2 ** (t + 1))) + core.eps)
            else:
                v[n] = core.decay * v[n] + (1 - core.decay) * g[n] ** 2
                u = g[n] / (np.sqrt(v[n]) + core.eps)
            if len(links) > 1:
                u = u - links[1].rate * (theta[n] - theta0[n])
            theta[n] = theta[n] + LR * u
    assert_close(got, theta)
    assert any(float(np.abs(got[n] - theta0[n]).max()) > 1e-3 for n in got), "the rule moved nothing"


# -- pieces, chunks and whole tensors give the same bits ---------------------------------------------
RULE = applied_rule(chain(clip_by_norm(5.0), adam(0.8, 0.9), weight_decay(0.3)), 0.01)


def whole_and_split() -> tuple[MasterWeights, MasterWeights]:
    """One logical 6×5 tensor ``w`` and a vector ``b``: held whole, and split as vLLM holds a fused
    tensor — rows 0-3 of ``w`` in rows 2-5 of working tensor ``fused``, rows 4-5 in ``rest``."""
    gen = torch.Generator().manual_seed(1)
    w, b = torch.randn(6, 5, generator=gen), torch.randn(7, generator=gen)
    shapes = {"w": (6, 5), "b": (7,)}
    whole = MasterWeights({"w": w.clone(), "b": b.clone()}, shapes,
                          {"w": [Piece("w", ((0, 6), (0, 5)), ((0, 6), (0, 5)))], "b": [Piece("b", ((0, 7),), ((0, 7),))]})
    fused, rest = torch.zeros(6, 5), torch.zeros(2, 5)
    fused[2:6], rest[:] = w[:4], w[4:]
    split = MasterWeights({"fused": fused, "rest": rest, "b": b.clone()}, shapes,
                          {"w": [Piece("fused", ((2, 6), (0, 5)), ((0, 4), (0, 5))),
                                 Piece("rest", ((0, 2), (0, 5)), ((4, 6), (0, 5)))],
                           "b": [Piece("b", ((0, 7),), ((0, 7),))]})
    return whole, split


@pytest.mark.parametrize("noise", [Gaussian(), LowRank(rank=2)], ids=["gaussian", "low_rank"])
def test_pieces_and_row_chunks_give_the_bits_of_whole_tensors(noise, monkeypatch):
    whole, split = whole_and_split()
    updates = [Update(s, c, rule=RULE, rule_step=t) for t, (s, c) in enumerate(SEQUENCE[:4])]
    for u in updates:
        whole.apply(noise, u)
    import zoopt.engines.rule_state as rule_state

    monkeypatch.setattr(rule_state, "RULE_CHUNK_BYTES", 40)  # the rule runs on chunks of 2 rows; ĝ's blocks stay the plain apply's
    chunked_whole, _ = whole_and_split()
    for u in updates:
        split.apply(noise, u)
        chunked_whole.apply(noise, u)
    assert whole.checksum(master=True) == split.checksum(master=True) == chunked_whole.checksum(master=True)
    assert whole.checksum() == split.checksum()
    assert split.rule_state.nbytes == 3 * 4 * (8 * 5 + 7)  # m, s and θ₀ of fused (6×5), rest (2×5) and b (7)
    assert torch.equal(split.params["fused"][:2], torch.zeros(2, 5)), "rows of fused that hold no piece were written"


# -- refusals --------------------------------------------------------------------------------------------
def test_a_step_out_of_order_or_another_rule_is_refused_before_anything_is_written():
    engine = ModuleEngine(Quadratic())
    rule = applied_rule(momentum(), LR)
    engine.apply(NOISE, Update(SEEDS, COEFS, rule=rule, rule_step=0))
    master = engine.master_checksum()
    with pytest.raises(ValueError, match="^update rule chain: the update is for step 2 but the engine holds state at step 1"):
        engine.apply(NOISE, Update(SEEDS, COEFS, rule=rule, rule_step=2))
    with pytest.raises(ValueError, match="^update rule changed at step 1"):
        engine.apply(NOISE, Update(SEEDS, COEFS, rule=applied_rule(adam(), LR), rule_step=1))
    fresh = ModuleEngine(Quadratic())
    with pytest.raises(ValueError, match="holds no state"):
        fresh.apply(NOISE, Update(SEEDS, COEFS, rule=rule, rule_step=1))
    assert engine.master_checksum() == master
    engine.apply(NOISE, Update(SEEDS, COEFS, rule=rule, rule_step=1))  # the next step is fine
    engine.apply(NOISE, Update(SEEDS, COEFS, rule=applied_rule(adam(), LR), rule_step=0))  # a new run restarts


@pytest.mark.parametrize("make,message", [
    (lambda: momentum(1.0), "momentum: mu must be a number in [0, 1), got 1.0"),
    (lambda: adam(b2=-0.5), "adam: b2 must be a number in [0, 1), got -0.5"),
    (lambda: adam(eps=0), "adam: eps must be a finite number > 0, got 0"),
    (lambda: rmsprop(eps=float("nan")), "rmsprop: eps must be a finite number > 0, got nan"),
    (lambda: weight_decay(-1), "weight_decay: rate must be a finite number ≥ 0, got -1"),
    (lambda: weight_decay(0.1, "one"), "weight_decay: towards must be one of base, zero, got 'one'"),
    (lambda: clip_by_norm(0), "clip_by_norm: max_norm must be a finite number > 0, got 0"),
    (lambda: chain(momentum(), clip_by_norm(1.0)), "clip_by_norm acts on ĝ itself: put it first in the chain"),
    (lambda: momentum(nesterov=1), "momentum: nesterov must be true or false, got 1"),
])
def test_bad_rule_parameters_are_one_line_errors(make, message):
    with pytest.raises(ValueError) as info:
        make()
    assert str(info.value).startswith(message) and "\n" not in str(info.value), str(info.value)


def test_es_takes_a_rule_and_refuses_what_a_seed_log_could_not_replay():
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Unregistered(SGD):
        kind = "mine"

    with pytest.raises(TypeError, match="rule must be a zoopt.updates.UpdateRule"):
        ES(population_size=4, rule="adam")
    with pytest.raises(Exception, match="unknown update rule 'mine'"):
        ES(population_size=4, rule=Unregistered())
    es = ES(population_size=4, sigma=0.1, lr=0.5, rule=adam())
    es.ask()
    update = es.tell([1.0, 2.0, 3.0, 5.0])
    assert update.rule == chain(adam(), scale(0.5)) and update.rule_step == 0 and update.info["step"] == 0
    other = ES(population_size=4)
    other.load_state_dict(es.state_dict())
    assert other.rule == adam() and other.step == 1


# -- composition and the config section ------------------------------------------------------------------
def test_chain_flattens_and_drops_the_identity_and_dicts_round_trip():
    assert chain() == sgd() and chain(sgd(), sgd()) == sgd() and chain(sgd(), adam()) == adam()
    nested = chain(chain(clip_by_norm(1.0), momentum()), chain(weight_decay(0.1)))
    assert isinstance(nested, Chain) and [r.kind for r in nested.links] == ["clip_by_norm", "momentum", "weight_decay"]
    assert rule_from_dict(nested.to_dict()) == nested and nested.label == "clip_by_norm+momentum+weight_decay"
    assert [r.state_bytes_per_param() for r in (sgd(), momentum(), adam(), rmsprop(), weight_decay(0.1),
                                                  weight_decay(0.1, "zero"), clip_by_norm(1.0), nested)] == [0, 4, 8, 4,
                                                                                                                4, 0, 0, 8]


def test_the_config_section_builds_the_chain_and_back():
    assert rule_from_config({}) == sgd()
    assert rule_from_config({"rule": "momentum", "momentum": 0.5, "nesterov": True, "b1": 0.1}) == Momentum(0.5, True)
    full = rule_from_config({"rule": "adam", "b1": 0.8, "clip_norm": 2.0, "weight_decay": 0.1, "decay_towards": "zero"})
    assert full == chain(clip_by_norm(2.0), Adam(0.8, 0.999, 1e-8), weight_decay(0.1, "zero"))
    assert rule_from_config(config_of(full)) == full and config_of(sgd()) == DEFAULTS
    assert config_of(chain(weight_decay(0.1), adam())) is None  # decay before the rule: no section says that
    assert config_of(scale(2.0)) is None


def test_the_schema_and_the_rules_agree():
    assert HP_RULES == RULE_NAMES and HP_DECAY_TOWARDS == DECAY_TOWARDS
    assert to_dict(UpdateConfig()) == DEFAULTS and to_dict(TrainConfig())["update"] == DEFAULTS
