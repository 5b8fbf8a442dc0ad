"""A test plugin (``--plugin tests/plugins/think_engine.py``): the engine ``think``.

It is ``HFEngine`` on the given model (``tiny`` in the tests) with a chat template added to the
tokenizer, so prompts reach the model — and the reward — as conversations, and every
completion's text replaced by ``TEXT``, so a reward's value on it is known in advance.
"""

import dataclasses

from zoopt.engines.hf import HFEngine
from zoopt.models import load_model
from zoopt.registry import ENGINES

TEXT = "<think>x</think>answer"
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant: {% endif %}")


class ThinkEngine(HFEngine):
    @classmethod
    def from_pretrained(cls, name_or_path, dtype="float32", device="cpu", **kw):
        model, tokenizer = load_model(name_or_path, dtype=dtype, device=device)
        tokenizer.chat_template = CHAT_TEMPLATE
        return cls(model, tokenizer, **kw)

    def generate(self, prompts, sampling):
        return [[dataclasses.replace(c, text=TEXT) for c in per_prompt]
                for per_prompt in super().generate(prompts, sampling)]


ENGINES.register("think", ThinkEngine)
