"""Rank collapse, and why batch norm avoids it (Daneshmand, Kohler, Bach, Hofmann & Lucchi 2020).

H is always d features x N samples, as in the paper, with M(H) = H H^T / N.

* rank notions: :func:`rank_tau` (eq. 3), :func:`rank_lower_bound` (r(H), eq. 4), :func:`numerical_rank`;
  Lemma 1 in :func:`derive_rank_bounds`;
* vanilla collapse (Lemma 3): :func:`lyapunov_exponents`, :func:`ginibre_lyapunov`, :func:`residual_top_exponent`,
  :func:`predicted_numerical_rank`, derived in :func:`derive_log_chi_square`;
* the BN chain: :func:`bn_chain` (H-chain and M-chain), :func:`delta_F` (Lemma 7), :func:`delta_F_spectral`
  (Prop. 8), :func:`second_order_drift`, :func:`chain_statistics`, :func:`bn_lyapunov`; derived in
  :func:`derive_delta_F`, :func:`derive_spectral_delta_F`, :func:`derive_rank_bound` (Lemma 13, Theorem 14);
* networks at init and in training: ``bnsym.rank.networks``, ``bnsym.rank.training``;
* the checked ranges of the size arguments (widths, depths, counts): ``bnsym.rank.sizes``.
"""

from .chain import (
    bn_chain,
    bn_lyapunov,
    chain_statistics,
    delta_F,
    delta_F_spectral,
    derive_delta_F,
    derive_rank_bound,
    derive_spectral_delta_F,
    second_order_drift,
)
from .lyapunov import (
    derive_log_chi_square,
    ginibre_lyapunov,
    ginibre_sampler,
    lyapunov_exponents,
    lyapunov_samples,
    predicted_numerical_rank,
    residual_top_exponent,
)
from .measures import derive_rank_bounds, numerical_rank, rank_lower_bound, rank_tau, second_moment

__all__ = [
    "bn_chain",
    "bn_lyapunov",
    "chain_statistics",
    "delta_F",
    "delta_F_spectral",
    "derive_delta_F",
    "derive_log_chi_square",
    "derive_rank_bound",
    "derive_rank_bounds",
    "derive_spectral_delta_F",
    "ginibre_lyapunov",
    "ginibre_sampler",
    "lyapunov_exponents",
    "lyapunov_samples",
    "numerical_rank",
    "predicted_numerical_rank",
    "rank_lower_bound",
    "rank_tau",
    "residual_top_exponent",
    "second_moment",
    "second_order_drift",
]
