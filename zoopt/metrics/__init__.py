"""Analysis metrics: pass@k, maj@k, token entropy, weight drift, update sparsity, bootstrap CIs,
the spread of per-problem success rates and paired sample sizes.

See docs/metrics.md for the formulas and references.
"""

from .bootstrap import bootstrap_ci
from .drift import GROUPS, drift_by_group, param_group, relative_drift
from .entropy import mean_token_entropy, token_entropy
from .majority import maj_at_k, majority_vote_score
from .passk import pass_at_k, pass_at_k_table
from .power import paired_sample_size
from .sparsity import TAU, magnitude_histogram, magnitude_shares, threshold_state_dict
from .success_rates import RATE_BINS, rate_histogram, share_between

__all__ = [
    "pass_at_k", "pass_at_k_table", "maj_at_k", "majority_vote_score", "token_entropy",
    "mean_token_entropy", "relative_drift", "param_group", "drift_by_group", "GROUPS",
    "magnitude_shares", "magnitude_histogram", "threshold_state_dict", "TAU", "bootstrap_ci",
    "share_between", "rate_histogram", "RATE_BINS", "paired_sample_size",
]
