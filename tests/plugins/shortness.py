"""A user's reward registered the README's way, for ``--plugin tests/plugins/shortness.py``.

``zoopt train --objective shortness`` only finds it when this file is imported first: with
``--plugin``, ``ZOOPT_PLUGINS`` or an entry point.
"""

import objectives
from objectives.arithmetic import Arithmetic
from zoopt.objective import Objective


@objectives.register("shortness")
class Shortness(Objective):
    """Shorter completions score higher: 1 / (1 + characters), on arithmetic's prompts."""

    name = "shortness"

    def __init__(self, **data_args):
        self.data = Arithmetic(**data_args)

    def reward(self, prompt, completion, **row):
        return 1.0 / (1.0 + len(completion))

    def dataset(self, split, n=None):
        return self.data.dataset(split, n)

    def split_size(self, split):
        return self.data.split_size(split)
