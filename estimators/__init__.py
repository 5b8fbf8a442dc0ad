"""Gradient estimators and fitness shaping for zoopt (a plugin package over zoopt's contracts)."""

from .base import DegenerateRewardsWarning, Estimator, SignedEstimator, member_seeds
from .one_point import OnePoint
from .shaping import centered_rank, mean_baseline, raw, zscore
from .two_point import TwoPoint

__all__ = ["OnePoint", "TwoPoint", "zscore", "centered_rank", "raw", "mean_baseline",
           "Estimator", "SignedEstimator", "member_seeds", "DegenerateRewardsWarning"]
