"""zoopt: zeroth-order (evolution strategies) post-training of LLMs.

An ES run is a base model plus a log of (seed, coefficient) pairs; see docs/concepts.md.
``optimize`` trains any torch module on a Python fitness; ``fit`` trains an LLM engine on a
verifier objective (docs/python.md); ``zoopt.trl.ESTrainer`` is the same with TRL's names.
"""

from .library_logs import quiet_library_logs

quiet_library_logs()  # before anything imports transformers (and with it torchao)

from .callbacks import Callback, EarlyStopping  # noqa: E402
from .engines.base import Sampling  # noqa: E402
from .es import ES  # noqa: E402
from .noise import Gaussian, LowRank, Noise, Rademacher  # noqa: E402
from .rewards.functions import RewardFunctions  # noqa: E402
from .types import Member, Population, Update  # noqa: E402
from .workflows.fit import fit  # noqa: E402
from .workflows.optimize import optimize  # noqa: E402

__version__ = "0.1.0"
__all__ = ["ES", "Gaussian", "Rademacher", "LowRank", "Noise", "optimize", "fit", "Sampling", "RewardFunctions",
           "Callback", "EarlyStopping", "Member", "Population", "Update"]
