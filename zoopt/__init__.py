"""zoopt: zeroth-order (evolution strategies) post-training of LLMs.

An ES run is a base model plus a log of (seed, coefficient) pairs; see docs/concepts.md.
"""

from .es import ES
from .noise import Gaussian, LowRank, Noise, Rademacher
from .optimize import optimize
from .types import Member, Population, Update

__version__ = "0.1.0"
__all__ = ["ES", "Gaussian", "Rademacher", "LowRank", "Noise", "optimize", "Member", "Population",
           "Update"]
