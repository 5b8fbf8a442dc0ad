"""zoopt's rollout types in vLLM's terms: a :class:`~zoopt.engines.base.Sampling` as vLLM
``SamplingParams``, and vLLM's outputs as :class:`~zoopt.engines.base.Completion` s.

- Greedy (``temperature == 0``) is vLLM's argmax, so it equals ``HFEngine``'s output token for
  token up to floating-point differences in the logits; vLLM samples one sequence and the
  ``n > 1`` greedy samples are copies of it.
- Sampling uses vLLM's own sampler with a per-prompt seed drawn from ``(sampling.seed, prompt
  index)`` (:func:`prompt_seed`; sample j gets that seed + j), so it is reproducible but
  differs from ``HFEngine``'s stream.
- ``logprobs=True`` gives the chosen tokens' log-probabilities after temperature (vLLM's
  ``processed_logprobs``: equal to ``HFEngine``'s when ``top_p == 1``; with ``top_p < 1`` vLLM
  renormalises over the nucleus).  ``entropies`` are not available (None): vLLM does not return
  the full distribution.
- A completion stops at its first stop token (kept, ``finish_reason="stop"``), else after
  ``max_new_tokens`` (``"length"``); ``text`` skips special tokens.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..base import Completion, Sampling


def prompt_seed(seed: int, index: int) -> int:
    """vLLM's sampling seed for prompt ``index`` of a call with ``Sampling.seed == seed``."""
    return int(np.random.SeedSequence([int(seed), int(index), 0x711]).generate_state(1, np.uint32)[0] >> 1)


def sampling_params(sampling: Sampling, indices: Sequence[int], stop_ids: set[int]) -> list:
    """One ``vllm.SamplingParams`` per row; row k samples with prompt ``indices[k]``'s seed."""
    from vllm import SamplingParams

    return [SamplingParams(
        n=1 if sampling.greedy else sampling.n, temperature=0.0 if sampling.greedy else float(sampling.temperature),
        top_p=1.0 if sampling.greedy else float(sampling.top_p), max_tokens=sampling.max_new_tokens,
        seed=None if sampling.greedy else prompt_seed(sampling.seed, i),
        logprobs=0 if sampling.logprobs else None, stop_token_ids=sorted(stop_ids),
        detokenize=False,
    ) for i in indices]


def completions(outputs: Sequence, sampling: Sampling, stop_ids: set[int], tokenizer) -> list[list[Completion]]:
    """``sampling.n`` completions per vLLM ``RequestOutput``, in sample order."""
    results = []
    for out in outputs:
        samples = [completion(o, sampling.logprobs, stop_ids, tokenizer)
                   for o in sorted(out.outputs, key=lambda o: o.index)]
        results.append(samples if len(samples) == sampling.n else
                       [samples[0]] + [_copy(samples[0]) for _ in range(sampling.n - 1)])
    return results


def completion(out, want_logprobs: bool, stop_ids: set[int], tokenizer) -> Completion:
    """One vLLM ``CompletionOutput`` as a :class:`Completion`, cut after its first stop token."""
    ids = list(out.token_ids)
    stop_at = next((t for t, tok in enumerate(ids) if tok in stop_ids), None)
    ids = ids if stop_at is None else ids[: stop_at + 1]
    logprobs = None
    if want_logprobs and out.logprobs is not None:
        logprobs = [float(step[tok].logprob) for step, tok in zip(out.logprobs, ids)]
    return Completion(text=tokenizer.decode(ids, skip_special_tokens=True), token_ids=ids,
                      logprobs=logprobs, entropies=None,
                      finish_reason="length" if stop_at is None else "stop")


def _copy(c: Completion) -> Completion:
    return Completion(c.text, list(c.token_ids), None if c.logprobs is None else list(c.logprobs),
                      None, c.finish_reason, dict(c.meta))


__all__ = ["prompt_seed", "sampling_params", "completions", "completion"]
