"""zoopt: zeroth-order (evolution strategies) post-training of LLMs.

An ES run is a base model plus a log of (seed, coefficient) pairs; see docs/concepts.md.
``optimize`` trains any torch module on a Python fitness; ``fit`` trains an LLM engine on a
verifier objective (docs/python.md); ``zoopt.trl.ESTrainer`` is the same with TRL's names.
"""

from .callbacks import Callback, EarlyStopping
from .engines.base import Sampling
from .es import ES
from .noise import Gaussian, LowRank, Noise, Rademacher
from .rewards.functions import RewardFunctions
from .types import Member, Population, Update
from .workflows.fit import fit
from .workflows.optimize import optimize

__version__ = "0.1.0"
__all__ = ["ES", "Gaussian", "Rademacher", "LowRank", "Noise", "optimize", "fit", "Sampling", "RewardFunctions",
           "Callback", "EarlyStopping", "Member", "Population", "Update"]
