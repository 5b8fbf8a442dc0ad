"""The supervised warm-up: exact batches and labels, a deterministic order, bit-exact repeats,
and a named warm-up built once and read from the cache."""

import json

import pytest
import torch

from zoopt import models, warmups
from zoopt.engines.prompts import encode_prompt
from zoopt.models import load_model
from zoopt.warmups.finetune import batch_tensors, encode_pairs, order, sft

pytestmark = pytest.mark.usefixtures("one_thread")


def test_order_is_epochs_of_seeded_permutations():
    steps = order(5, steps=4, batch_size=3, seed=7)
    assert [len(b) for b in steps] == [3, 3, 3, 3]
    flat = sum(steps, [])
    assert sorted(flat[:5]) == sorted(flat[5:10]) == list(range(5))  # each epoch visits every pair once
    assert order(5, 4, 3, 7) == steps and order(5, 4, 3, 8) != steps
    with pytest.raises(ValueError, match="batch_size ≥ 1"):
        order(5, 1, 0, 0)


def test_batch_tensors_mask_the_prompt_and_the_padding():
    input_ids, mask, labels = batch_tensors([([5, 6, 7, 8], 2), ([9, 10, 11], 1)], pad_id=0)
    assert input_ids.tolist() == [[5, 6, 7, 8], [9, 10, 11, 0]]
    assert mask.tolist() == [[1, 1, 1, 1], [1, 1, 1, 0]]
    assert labels.tolist() == [[-100, -100, 7, 8], [-100, 10, 11, -100]]


def test_pairs_are_the_engine_prompt_then_target_and_eos():
    _, tok = load_model("tiny")
    pairs = encode_pairs(tok, ["What is 1 + 2?"], ["3"])
    ids, n = pairs[0]
    assert ids[:n] == encode_prompt(tok, "What is 1 + 2?") and ids[n:] == tok("3", add_special_tokens=False)[
        "input_ids"] + [tok.eos_token_id]
    with pytest.raises(ValueError, match="2 prompts for 1 targets"):
        encode_pairs(tok, ["a", "b"], ["1"])


def _trained(seed: int, steps: int = 6):
    model, tok = load_model("tiny")
    pairs = encode_pairs(tok, [f"What is {i} + 1?" for i in range(6)], [str(i + 1) for i in range(6)])
    losses = sft(model, tok, pairs, steps=steps, lr=1e-2, batch_size=4, seed=seed)
    return model, losses


def test_sft_learns_and_repeats_bit_for_bit():
    a, losses = _trained(0, steps=12)
    b, again = _trained(0, steps=12)
    c, _ = _trained(1, steps=12)
    assert losses == again and len(losses) == 12
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:3]) / 3  # the targets are learnt
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    assert not all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), c.state_dict().values()))
    assert not a.training  # back in eval mode


def test_a_named_warmup_is_built_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOOPT_CACHE", str(tmp_path))
    recipe = {"base": "tiny", "objective": "arithmetic", "objective_args": {"digits": 1}, "problems": 8,
              "target": "{answer}", "steps": 3, "lr": 1e-2, "batch_size": 4, "seed": 0}
    monkeypatch.setitem(warmups.WARMUPS, "tiny-sft-test", recipe)
    assert models.cached_build("tiny-sft-test") is None  # not built yet
    assert warmups.ensure_warmup("tiny-sft-test") == tmp_path / "models" / "tiny-sft-test"
    model, _ = load_model("tiny-sft-test")
    built = json.loads((tmp_path / "models" / "tiny-sft-test" / "zoopt_build.json").read_text())
    assert built["recipe"] == recipe and len(built["losses"]) == 3
    monkeypatch.setattr(warmups, "build_warmup", lambda *a, **k: pytest.fail("built twice"))
    assert warmups.ensure_warmup("tiny-sft-test") == tmp_path / "models" / "tiny-sft-test"
    again, _ = load_model("tiny-sft-test")
    assert all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), again.state_dict().values()))
    base, _ = load_model("tiny")
    assert not all(torch.equal(p, q) for p, q in zip(model.state_dict().values(), base.state_dict().values()))


def test_the_loss_on_kept_positions_equals_the_loss_on_all():
    model, tok = load_model("tiny")
    batch = encode_pairs(tok, ["What is 1 + 2?", "What is 10 + 20?"], ["3", "30"])
    input_ids, mask, labels = batch_tensors(batch, tok.pad_token_id)
    full = model(input_ids=input_ids, attention_mask=mask).logits[:, :-1]
    whole = torch.nn.functional.cross_entropy(full.reshape(-1, full.shape[-1]), labels[:, 1:].reshape(-1))
    first = min(n for _, n in batch) - 1
    kept = model(input_ids=input_ids, attention_mask=mask,
                 logits_to_keep=torch.arange(first, input_ids.shape[1] - 1)).logits
    part = torch.nn.functional.cross_entropy(kept.reshape(-1, kept.shape[-1]), labels[:, first + 1:].reshape(-1))
    assert float(part) == pytest.approx(float(whole), rel=1e-6) and kept.shape[1] < full.shape[1]


def test_label_noise_moves_the_stated_share_by_the_stated_offsets():
    answers = [str(i) for i in range(20000)]
    moved = warmups.noisy_answers(answers, 0.5, [-10, -1, 1, 10], 12345)
    deltas = [int(m) - int(a) for m, a in zip(moved, answers)]
    assert set(deltas) == {0, -10, -1, 1, 10}
    share = sum(d != 0 for d in deltas) / len(deltas)
    assert abs(share - 0.5) < 4 * (0.25 / len(deltas)) ** 0.5  # within 4 standard errors (0.5059)
    assert all(abs(deltas.count(o) / sum(d != 0 for d in deltas) - 0.25) < 0.03 for o in (-10, -1, 1, 10))
    assert moved == warmups.noisy_answers(answers, 0.5, [-10, -1, 1, 10], 12345)  # a function of the seed
    assert warmups.noisy_answers(answers[:50], 0.0, [1], 0) == answers[:50]
    with pytest.raises(ValueError, match="label_noise"):
        warmups.noisy_answers(answers, 1.5, [1], 0)


def test_a_warmup_with_label_noise_trains_on_the_moved_answers(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(warmups, "sft", lambda model, tok, pairs, *a, **k: seen.setdefault("pairs", pairs) and [])
    recipe = {"base": "tiny", "objective": "arithmetic", "objective_args": {"digits": 1}, "problems": 16,
              "target": "{answer}", "steps": 1, "lr": 1e-2, "batch_size": 4, "seed": 0,
              "label_noise": {"share": 1.0, "offsets": [100], "seed": 0}}
    warmups.build_warmup(tmp_path / "m", recipe)
    _, tok = load_model("tiny")
    targets = [tok.decode(ids[n:-1]) for ids, n in seen["pairs"]]
    assert all(int(t) >= 100 - 9 for t in targets) and len(targets) == 16  # one digit ± one digit, then +100
