"""What every LLM engine does with a tokenizer: encode a prompt, know where a sequence stops.

Both engines (HF in this process, vLLM in its workers) call these, so a prompt becomes the same
token ids and a completion stops at the same token whichever engine samples it.
"""

from __future__ import annotations

from .base import Prompt


def encode_prompt(tokenizer, prompt: Prompt, system_prompt: str | None = None) -> list[int]:
    """Token ids of ``prompt``: chat-templated (with the generation prompt) when the tokenizer has
    a template, else plain tokens with special tokens.

    A ``str`` becomes one user message; a list is a conversation of ``{"role", "content"}``
    messages.  ``system_prompt`` is prepended as a system message to a conversation that has none.
    """
    tok = tokenizer
    if isinstance(prompt, str) and not tok.chat_template:
        ids = tok(prompt, add_special_tokens=True)["input_ids"]
        if not ids and tok.bos_token_id is None:
            raise ValueError("an empty prompt needs a tokenizer with a BOS token")
        return ids or [tok.bos_token_id]
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    if not tok.chat_template:
        raise ValueError("a prompt given as chat messages needs a tokenizer with a chat template")
    if system_prompt is not None and not any(m.get("role") == "system" for m in messages):
        messages = [{"role": "system", "content": system_prompt}, *messages]
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return tok(text, add_special_tokens=False)["input_ids"]


def stop_token_ids(tokenizer, generation_config=None) -> set[int]:
    """The ids that end a completion: the tokenizer's EOS and pad, and the generation config's EOS
    (an int or a list), when set."""
    ids = {tokenizer.eos_token_id, tokenizer.pad_token_id}
    eos = None if generation_config is None else generation_config.eos_token_id
    ids.update(eos if isinstance(eos, (list, tuple)) else [eos])
    return {int(i) for i in ids if i is not None}


def ensure_pad_token(tokenizer) -> int:
    """The tokenizer's pad id, set to EOS first when it has none (left padding needs one)."""
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return int(tokenizer.pad_token_id)


def check_system_prompt(tokenizer, system_prompt: str | None) -> None:
    if system_prompt is not None and not tokenizer.chat_template:
        raise ValueError("system_prompt needs a tokenizer with a chat template")


__all__ = ["encode_prompt", "stop_token_ids", "ensure_pad_token", "check_system_prompt"]
