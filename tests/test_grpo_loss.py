"""The GRPO loss and advantages against independent references and TRL's own code.

The reference below is written per sequence and per token in plain Python from TRL's
published definition (``GRPOTrainer._compute_loss``, TRL 1.16); when TRL is importable the
loss is also checked against ``GRPOTrainer._compute_loss`` itself, run on a stand-in object.
"""

import math
import types

import pytest
import torch

from zoopt.grpo import LOSS_TYPES, group_advantages, grpo_loss, token_weights
from zoopt.grpo.loss import token_logps

L_MAX = 6  # max_completion_length


def batch(seed=0):
    """Hand-made logits for 4 sequences × 5 tokens over a 7-token vocabulary, lengths 5, 2, 4, 1."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(4, 5, 7, generator=g, dtype=torch.float64)
    ids = torch.randint(0, 7, (4, 5), generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 1, 0], [1, 0, 0, 0, 0]])
    old = torch.log_softmax(logits + 0.3 * torch.randn(4, 5, 7, generator=g, dtype=torch.float64), -1)
    old = old.gather(-1, ids[..., None])[..., 0]
    ref = old - 0.1 * torch.randn(4, 5, generator=g, dtype=torch.float64)
    adv = torch.tensor([1.3, -0.7, 0.25, -1.1], dtype=torch.float64)
    return logits, ids, mask, old, ref, adv


def reference_loss(logps, old, ref, adv, mask, loss_type, eps, eps_high, beta):
    """Scalar loops over TRL's formula (nothing shared with zoopt.grpo.loss)."""
    B, T = mask.shape
    per_seq_sums, per_seq_lens, total = [], [], 0
    for i in range(B):
        s, n = 0.0, 0
        for t in range(T):
            if not mask[i, t]:
                continue
            ratio = torch.exp(logps[i, t] - old[i, t])
            term = -torch.min(ratio * adv[i], torch.clamp(ratio, 1 - eps, 1 + eps_high) * adv[i])
            if beta:
                d = ref[i, t] - logps[i, t]
                term = term + beta * (torch.exp(d) - d - 1)
            s, n = s + term, n + 1
        per_seq_sums.append(s)
        per_seq_lens.append(n)
        total += n
    if loss_type == "grpo":
        return sum(s / max(n, 1) for s, n in zip(per_seq_sums, per_seq_lens)) / B
    if loss_type in ("bnpo", "dapo"):
        return sum(per_seq_sums) / total
    return sum(per_seq_sums) / (B * L_MAX)


CASES = [(lt, eps, eh, beta) for lt in LOSS_TYPES
         for eps, eh, beta in ((0.2, None, 0.0), (0.2, 0.28, 0.04), (0.05, 0.1, 0.5))]


@pytest.mark.parametrize("loss_type,eps,eps_high,beta", CASES)
def test_loss_and_gradient_equal_the_reference(loss_type, eps, eps_high, beta):
    logits, ids, mask, old, ref, adv = batch()
    grads = []
    values = []
    for impl in ("zoopt", "reference"):
        x = logits.clone().requires_grad_(True)
        logps, _ = token_logps(x, ids)
        if impl == "zoopt":
            loss = grpo_loss(logps, old, adv, mask, loss_type=loss_type, epsilon=eps, epsilon_high=eps_high,
                             beta=beta, ref_logps=ref, max_completion_length=L_MAX).loss
        else:
            loss = reference_loss(logps, old, ref, adv, mask, loss_type, eps, eps if eps_high is None else eps_high, beta)
        loss.backward()
        grads.append(x.grad)
        values.append(float(loss.detach()))
    assert values[0] == pytest.approx(values[1], abs=1e-6)
    assert torch.allclose(grads[0], grads[1], atol=1e-6, rtol=0)
    assert grads[0].abs().max() > 1e-3  # a real gradient was compared
    # some tokens are clipped in the ε = 0.05 cases, so the clip branch is exercised too
    if eps == 0.05:
        out = grpo_loss(token_logps(logits, ids)[0], old, adv, mask, loss_type=loss_type, epsilon=eps,
                        epsilon_high=eps_high, beta=beta, ref_logps=ref, max_completion_length=L_MAX)
        assert out.low_clipped + out.high_clipped > 0


def test_loss_types_differ_on_uneven_lengths():
    logits, ids, mask, old, ref, adv = batch()
    logps = token_logps(logits, ids)[0]
    vals = {lt: float(grpo_loss(logps, old, adv, mask, loss_type=lt, max_completion_length=L_MAX).loss)
            for lt in LOSS_TYPES}
    assert vals["bnpo"] == vals["dapo"]  # one process, one optimizer step: the same normaliser
    assert len({round(vals[k], 9) for k in ("grpo", "bnpo", "dr_grpo")}) == 3, vals
    # dr_grpo = bnpo · (tokens / (B · L)) = bnpo · 12 / 24
    assert vals["dr_grpo"] == pytest.approx(vals["bnpo"] * 12 / 24, abs=1e-12)


def test_one_iteration_is_the_policy_gradient():
    """old = logps.detach(): ratio 1, loss −Σ w A, gradient −Σ w A ∇ℓ."""
    logits, ids, mask, *_ , adv = batch()
    x = logits.clone().requires_grad_(True)
    logps = token_logps(x, ids)[0]
    out = grpo_loss(logps, logps.detach(), adv, mask, loss_type="grpo")
    out.loss.backward()
    w = token_weights(mask, "grpo", dtype=torch.float64)
    assert float(out.loss.detach()) == pytest.approx(float(-(w * adv[:, None]).sum()), abs=1e-12)
    y = logits.clone().requires_grad_(True)
    (-(w * adv[:, None] * token_logps(y, ids)[0]).sum()).backward()
    assert torch.allclose(x.grad, y.grad, atol=1e-12)
    assert out.low_clipped == out.high_clipped == 0


def test_kl_is_exactly_zero_when_the_policy_is_the_reference():
    logits, ids, mask, old, _, adv = batch()
    logps = token_logps(logits, ids)[0]
    with_kl = grpo_loss(logps, old, adv, mask, beta=0.3, ref_logps=logps.clone())
    without = grpo_loss(logps, old, adv, mask, beta=0.0)
    assert with_kl.kl_sum == 0.0
    assert float(with_kl.loss) == float(without.loss)
    moved = grpo_loss(logps, old, adv, mask, beta=0.3, ref_logps=logps - 0.2)
    # k3 with ref − logp = −0.2 on each of the 12 tokens: exp(−0.2) + 0.2 − 1
    assert moved.kl_sum == pytest.approx(12 * (math.exp(-0.2) + 0.2 - 1), rel=1e-12)


def test_micro_batch_weights_add_up_to_the_full_loss():
    logits, ids, mask, old, ref, adv = batch()
    logps = token_logps(logits, ids)[0]
    for lt in LOSS_TYPES:
        full = grpo_loss(logps, old, adv, mask, loss_type=lt, beta=0.1, ref_logps=ref, max_completion_length=L_MAX)
        w = token_weights(mask, lt, L_MAX, dtype=torch.float64)
        parts = sum(float(grpo_loss(logps[s], old[s], adv[s], mask[s], loss_type=lt, beta=0.1, ref_logps=ref[s],
                                    weights=w[s]).loss) for s in (slice(0, 3), slice(3, 4)))
        assert parts == pytest.approx(float(full.loss), abs=1e-12)


def test_bad_arguments_are_one_line_errors():
    logits, ids, mask, old, _, adv = batch()
    with pytest.raises(ValueError, match="loss_type must be one of grpo, bnpo, dr_grpo, dapo, got 'ppo'"):
        grpo_loss(old, old, adv, mask, loss_type="ppo")
    with pytest.raises(ValueError, match="beta ≠ 0 needs ref_logps"):
        grpo_loss(old, old, adv, mask, beta=0.1)
    with pytest.raises(ValueError, match="dr_grpo needs max_completion_length"):
        token_weights(mask, "dr_grpo")


# -- advantages ------------------------------------------------------------------------------
def test_advantages_exact_values():
    r = [1.0, 0.0, 0.0, 1.0, 0.5, 0.5, 0.5, 0.5, 2.0, 0.0, 1.0, 1.0]
    s1 = math.sqrt(1 / 3)                     # unbiased std of (1, 0, 0, 1)
    s3 = math.sqrt(2 / 3)                     # unbiased std of (2, 0, 1, 1)
    group = group_advantages(r, 4, "group").tolist()
    assert group == pytest.approx([0.5 / (s1 + 1e-4), -0.5 / (s1 + 1e-4), -0.5 / (s1 + 1e-4), 0.5 / (s1 + 1e-4),
                                   0, 0, 0, 0, 1 / (s3 + 1e-4), -1 / (s3 + 1e-4), 0, 0], abs=1e-12)
    centred = [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, 1, -1, 0, 0]
    assert group_advantages(r, 4, "none").tolist() == pytest.approx(centred, abs=1e-15)
    mean = sum(r) / 12
    sb = math.sqrt(sum((x - mean) ** 2 for x in r) / 11)  # unbiased std of the whole batch
    assert group_advantages(r, 4, "batch").tolist() == pytest.approx([c / (sb + 1e-4) for c in centred], abs=1e-12)


def test_advantages_match_torch_std_and_skip_none():
    r = torch.tensor([3.0, 1.0, 4.0, 1.0, 5.0, 9.0])
    expected = (r.view(2, 3) - r.view(2, 3).mean(1, keepdim=True)) / (r.view(2, 3).std(1, keepdim=True) + 1e-4)
    assert torch.allclose(group_advantages(r.tolist(), 3, "group").float(), expected.reshape(-1), atol=1e-6)
    # None is left out of mean and std and gets advantage 0: group (None, 1, 3) → mean 2, std √2
    adv = group_advantages([None, 1.0, 3.0, 2.0, 2.0, None], 3, "group").tolist()
    s = math.sqrt(2)
    assert adv == pytest.approx([0.0, -1 / (s + 1e-4), 1 / (s + 1e-4), 0.0, 0.0, 0.0], abs=1e-12)
    with pytest.raises(ValueError, match="scale_rewards must be one of group, batch, none, got 'z'"):
        group_advantages([1.0, 2.0], 2, "z")
    with pytest.raises(ValueError, match="3 rewards do not split into groups of 2"):
        group_advantages([1.0, 2.0, 3.0], 2)


# -- TRL itself, when it is importable -------------------------------------------------------
def trl_loss(logits, ids, mask, old, ref, adv, loss_type, eps, eps_high, beta):
    trainer_mod = pytest.importorskip("trl.trainer.grpo_trainer")
    x = logits.clone().requires_grad_(True)

    class Acc:
        num_processes = 1
        def reduce(self, t, reduction="sum"): return t
        def gather(self, t): return t
        gather_for_metrics = gather

    from collections import defaultdict

    fake = types.SimpleNamespace(
        top_entropy_quantile=1.0, off_policy_mask_threshold=None, importance_sampling_level="token",
        beta=beta, loss_type=loss_type, epsilon_low=eps, epsilon_high=eps if eps_high is None else eps_high,
        use_vllm=False, vllm_importance_sampling_correction=False, model=types.SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, max_completion_length=L_MAX, accelerator=Acc(),
        _entropy_bonus_enabled=False, aux_loss_enabled=False, _metrics={"train": defaultdict(list)},
        args=types.SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        _get_per_token_logps_and_entropies=lambda *a, **k: (*token_logps(x, ids), None))
    inputs = {"prompt_ids": torch.zeros(4, 1, dtype=torch.long), "prompt_mask": torch.ones(4, 1, dtype=torch.long),
              "completion_ids": ids, "completion_mask": mask, "advantages": adv, "old_per_token_logps": old,
              "ref_per_token_logps": ref, "num_items_in_batch": mask.sum().double()}
    loss = trainer_mod.GRPOTrainer._compute_loss(fake, None, inputs)
    loss.backward()
    return float(loss.detach()), x.grad


@pytest.mark.parametrize("loss_type,eps,eps_high,beta", CASES)
def test_loss_and_gradient_equal_trl(loss_type, eps, eps_high, beta):
    logits, ids, mask, old, ref, adv = batch(seed=1)
    value, grad = trl_loss(logits, ids, mask, old, ref, adv, loss_type, eps, eps_high, beta)
    x = logits.clone().requires_grad_(True)
    ours = grpo_loss(token_logps(x, ids)[0], old, adv, mask, loss_type=loss_type, epsilon=eps,
                     epsilon_high=eps_high, beta=beta, ref_logps=ref, max_completion_length=L_MAX).loss
    ours.backward()
    assert float(ours.detach()) == pytest.approx(value, abs=1e-6)
    assert torch.allclose(x.grad, grad, atol=1e-6, rtol=0)
