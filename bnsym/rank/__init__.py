"""Rank collapse, and why batch norm avoids it (Daneshmand, Kohler, Bach, Hofmann & Lucchi 2020).

H is always d features x N samples, as in the paper, with M(H) = H H^T / N.

* rank notions: :func:`rank_tau` (eq. 3), :func:`rank_lower_bound` (r(H), eq. 4; :func:`differentiable_rank_bound`
  for training), :func:`numerical_rank`, :func:`predicted_numerical_rank`; Lemma 1 in :func:`derive_rank_bounds`;
* vanilla collapse (Lemma 3): the Lyapunov spectra of ``bnsym.products.lyapunov``, shared with Bjorck et al.;
* the BN chain: :func:`bn_chain` (H-chain and M-chain), :func:`delta_F` (Lemma 7), :func:`delta_F_spectral`
  (Prop. 8), :func:`second_order_drift`, :func:`chain_statistics`, :func:`bn_lyapunov`; derived in
  :func:`derive_delta_F`, :func:`derive_spectral_delta_F`, :func:`derive_rank_bound` (Lemma 13, Theorem 14);
* the other proof steps (``bnsym.rank.proofs``): :func:`derive_rank_one_step` (Lemmas 5, 6),
  :func:`derive_regularity` and
  :func:`stationary_alpha` (Lemma 10, Examples 11, 12), :func:`derive_finite_depth` (Lemma 16, Cor. 15),
  :func:`derive_residual_gap` and :func:`residual_gap_series` (claim 4), :func:`derive_centring` (claim 9),
  :func:`derive_invariant_union` (Example 17),
  :func:`uniform_sampler` (Lemma 3 (b));
* correlations at initialisation: :func:`relu_cosines` (the mean-field map), :func:`asymmetric_unit_correlation`
  (Fig. 5), :func:`last_layer_gradient_cosines` (Prop. 19), :func:`gradient_alignment` (Fig. 10, batched).

The networks, at initialisation and in training, are the simulator's: :mod:`bnsym.sim.daneshmand`.
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
from .correlations import (
    asymmetric_unit_correlation,
    gradient_alignment,
    last_layer_gradient_cosines,
    relu_cosines,
)
from .measures import (
    derive_rank_bounds,
    differentiable_rank_bound,
    numerical_rank,
    predicted_numerical_rank,
    rank_lower_bound,
    rank_tau,
    second_moment,
)
from .proofs import (
    derive_centring,
    derive_finite_depth,
    derive_invariant_union,
    derive_rank_one_step,
    derive_regularity,
    derive_residual_gap,
    residual_gap_series,
    stationary_alpha,
    uniform_sampler,
)

__all__ = [
    "asymmetric_unit_correlation",
    "bn_chain",
    "bn_lyapunov",
    "chain_statistics",
    "delta_F",
    "delta_F_spectral",
    "derive_delta_F",
    "derive_centring",
    "derive_finite_depth",
    "derive_invariant_union",
    "derive_rank_bound",
    "derive_rank_bounds",
    "derive_rank_one_step",
    "derive_regularity",
    "derive_residual_gap",
    "derive_spectral_delta_F",
    "differentiable_rank_bound",
    "gradient_alignment",
    "last_layer_gradient_cosines",
    "numerical_rank",
    "predicted_numerical_rank",
    "rank_lower_bound",
    "rank_tau",
    "relu_cosines",
    "residual_gap_series",
    "second_moment",
    "second_order_drift",
    "stationary_alpha",
    "uniform_sampler",
]
