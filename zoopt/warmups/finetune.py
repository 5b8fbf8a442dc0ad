"""Supervised fine-tuning in plain torch: the short warm-up that can turn the embedded model into a
calibrated base for a coverage study (:data:`zoopt.warmups.WARMUPS`).

A training pair is a prompt and its target completion.  The sequence is
``encode_prompt(prompt) ‖ tokens(target) ‖ EOS`` — the prompt exactly as the engines feed it to
the model (chat template with the generation prompt), so the model learns the completion it
will be asked for — and the loss is the mean token cross-entropy over the target and EOS tokens
of the batch (the prompt and the padding carry no loss):

    L = − Σ_b Σ_{t ∈ target_b} log p_θ(x_{b,t} | x_{b,<t}) / Σ_b |target_b|

One step is one AdamW update (no weight decay, gradient norm clipped at 1) on ``batch_size``
pairs.  Pairs are visited in epochs, each in the order of a permutation drawn from
``numpy.random.default_rng([seed, epoch])``; nothing else is random (the model's dropout rates
are 0 for Llama), and the global RNGs are never touched.  So a warm-up is a function of
(base weights, pairs, steps, lr, batch_size, seed) — bit for bit on the same machine with the
same number of threads (float reductions may differ across thread counts).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import torch

from ..engines.prompts import encode_prompt, ensure_pad_token


def encode_pairs(tokenizer, prompts: Sequence, targets: Sequence[str],
                 system_prompt: str | None = None) -> list[tuple[list[int], int]]:
    """``[(token ids, prompt length)]``: each prompt as the engines encode it, then its target
    and the tokenizer's EOS."""
    if len(prompts) != len(targets):
        raise ValueError(f"encode_pairs: {len(prompts)} prompts for {len(targets)} targets")
    if tokenizer.eos_token_id is None:
        raise ValueError("supervised fine-tuning needs a tokenizer with an EOS token")
    out = []
    for prompt, target in zip(prompts, targets):
        ids = encode_prompt(tokenizer, prompt, system_prompt)
        tail = tokenizer(str(target), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        out.append((ids + tail, len(ids)))
    return out


def batch_tensors(pairs: Sequence[tuple[list[int], int]], pad_id: int) -> tuple[torch.Tensor, ...]:
    """Right-padded ``(input_ids, attention_mask, labels)``; labels are -100 on prompt and padding."""
    width = max(len(ids) for ids, _ in pairs)
    input_ids = torch.full((len(pairs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    labels = torch.full((len(pairs), width), -100, dtype=torch.long)
    for b, (ids, prompt_len) in enumerate(pairs):
        input_ids[b, :len(ids)] = torch.tensor(ids)
        mask[b, :len(ids)] = 1
        labels[b, prompt_len:len(ids)] = torch.tensor(ids[prompt_len:])
    return input_ids, mask, labels


def order(n: int, steps: int, batch_size: int, seed: int) -> list[list[int]]:
    """The pairs of each step: epochs of ``permutation(n)`` drawn from ``default_rng([seed, epoch])``,
    cut into consecutive batches (a batch may span two epochs)."""
    if n < 1 or steps < 0 or batch_size < 1:
        raise ValueError(f"need n ≥ 1, steps ≥ 0, batch_size ≥ 1, got n={n}, steps={steps}, batch_size={batch_size}")
    stream: list[int] = []
    epoch = 0
    while len(stream) < steps * batch_size:
        stream += [int(i) for i in np.random.default_rng([int(seed), epoch]).permutation(n)]
        epoch += 1
    return [stream[s * batch_size:(s + 1) * batch_size] for s in range(steps)]


def sft(model, tokenizer, pairs: Sequence[tuple[list[int], int]], steps: int, lr: float, batch_size: int,
        seed: int, on_step: Callable[[int, float], None] | None = None) -> list[float]:
    """Train ``model`` in place (module doc); the loss of every step."""
    if not lr > 0:
        raise ValueError(f"lr must be > 0, got {lr!r}")
    pad_id = ensure_pad_token(tokenizer)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    device = next(model.parameters()).device
    model.train()
    losses = []
    try:
        for step, rows in enumerate(order(len(pairs), steps, batch_size, seed)):
            batch = [pairs[i] for i in rows]
            input_ids, mask, labels = (t.to(device) for t in batch_tensors(batch, pad_id))
            # logits only where a target token is predicted: from the shortest prompt's last token on
            # (the LM head over a 49k vocabulary is a fifth of a small model's compute)
            first = min(n for _, n in batch) - 1
            keep = torch.arange(first, input_ids.shape[1] - 1, device=device)
            logits = model(input_ids=input_ids, attention_mask=mask, logits_to_keep=keep).logits.float()
            target = labels[:, first + 1:]
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1),
                                                     ignore_index=-100)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optimizer.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step, losses[-1])
    finally:
        model.eval()
    return losses
