"""Bjorck, Gomes & Selman (2018), "Understanding Batch Normalization": random-matrix products and conditioning.

Theorem 1 (Fuss-Catalan density of squared singular values of Gaussian products), condition numbers without
float64 saturation, the Lyapunov spectra of random-matrix products (:mod:`.lyapunov`, which the rank-collapse
theory of :mod:`bnsym.rank` uses too), Proposition 1 (gradient descent on one layer of a linear net),
the SGD noise identity (eq. 2), the null model of gradient-summand alignment (Table 1), output-bias dominance
(Fig. 4) and the mean-field growth of activations in residual networks (Fig. 3).
"""

from .conditioning import derive_one_layer_gd, gd_rate, log_condition_number, max_stable_lr, qr_log_stretches
from .fuss_catalan import (
    closed_form_density,
    density_moment,
    derive_density,
    derive_moments,
    fuss_catalan_density,
    fuss_catalan_moment,
    hard_edge,
    soft_edge,
)
from .gradient_noise import (
    alignment_ratio,
    bias_grad_dominance,
    derive_alignment_ratio,
    derive_bias_dominance,
    derive_sgd_noise,
    sgd_noise,
)
from .lyapunov import (
    derive_lyapunov,
    ginibre_lyapunov_exponents,
    ginibre_sampler,
    lyapunov_samples,
    lyapunov_slope,
    qr_lyapunov_exponents,
    residual_top_exponent,
)
from .residual import derive_relu_shift_moment, residual_growth

__all__ = [
    "alignment_ratio",
    "bias_grad_dominance",
    "closed_form_density",
    "density_moment",
    "derive_alignment_ratio",
    "derive_bias_dominance",
    "derive_density",
    "derive_lyapunov",
    "derive_moments",
    "derive_one_layer_gd",
    "derive_relu_shift_moment",
    "derive_sgd_noise",
    "fuss_catalan_density",
    "fuss_catalan_moment",
    "gd_rate",
    "ginibre_lyapunov_exponents",
    "ginibre_sampler",
    "hard_edge",
    "log_condition_number",
    "lyapunov_samples",
    "lyapunov_slope",
    "max_stable_lr",
    "qr_log_stretches",
    "qr_lyapunov_exponents",
    "residual_growth",
    "residual_top_exponent",
    "sgd_noise",
    "soft_edge",
]
