"""Architectures as data (Yang et al. 2019 for batch norm; De & Smith 2020; Brock et al. 2021): the infinite-width
kernels and gradient statistics of any stack of Dense, BatchNorm, LayerNorm, RMSNorm, activations and residual
blocks.

A network is a value (the layers of :mod:`bnsym.core.layers`, re-exported here)::

    from bnsym.arch import BatchNorm, Dense, Activation, Residual, repeat, serial, signal_propagation
    net = serial(Dense(), repeat(Residual([BatchNorm(), Activation("relu"), Dense()]), 50))
    result = signal_propagation(net, Sigma0)

Conventions (a contract between this theory and the torch twin :func:`bnsym.sim.arch.torch_network`):

* **Dense**: h = sqrt(weight_var) W x / sqrt(n_in) + sqrt(bias_var) b, W and b standard normal (``init``
  "gaussian"; "orthogonal" weights of the same entry variance have the same limit; "looks_linear" has none and is
  refused); the first layer must be a Dense, acting on the inputs (dimension d), whose Gram is Sigma0_ab = x_a . x_b
  / d. Every later Dense maps width n to width n, n -> infinity.
* **BatchNorm** (statistics "batch", mode "train"): per neuron over the batch, biased variance; with eps = 0 a neuron
  that is constant over the batch maps to 0 (the eps -> 0+ limit), which happens with positive probability after a
  relu. (statistics "population", mode "eval"): normalisation by population statistics, the mean and variance over
  the batch's examples and the layer's neurons (in the limit, :func:`derive_eval_batch_norm`), constants for the
  gradient; ``centre=False`` leaves out the mean (refused with batch statistics: not derived here). ``affine``
  (scale, shift): constants after the normalisation, not trained by :func:`ntk`.
* **LayerNorm**: per example over the features, population variance, no affine map; ``centre=False`` leaves out the
  mean.
* **RMSNorm**: x / sqrt(mean over the features of x^2 + eps) per example, the uncentred LayerNorm (``RMSNorm(eps,
  affine)`` is ``LayerNorm(eps, centre=False, affine)`` by another name, one map): its kernel map is K_ab /
  sqrt((K_aa + eps)(K_bb + eps)) whatever the input's mean.
* **Residual(branch, alpha, skip)**: skip(x) + alpha branch(x), skip the identity or layers (a Dense projection
  draws weights independent of the branch's).
* The **kernel** after a layer is K_ab = lim E[x_a . x_b / n] over its output; the **gradient statistic** is
  S^l in the limit, the sum over the examples a of the squared Frobenius norm of df(x_a)/dx^l, f = v . x_out /
  sqrt(n), v standard normal, x^l the n x B output of top-level layer l.

The **neural tangent kernel** (:func:`ntk`, one batch; :func:`ntk_cross`, several batches normalised separately) of
f = v . x_out / sqrt(n) with every W, b and v trained, by forward propagation of one B x B tangent block per layer
(``bnsym.arch.ntk``).

How each layer's law is computed, and with what error, is in ``bnsym.arch.graph``; the new maps are derived in
``bnsym.arch.derivations`` (the ``derive_*`` functions below). The torch twin and :func:`bnsym.sim.arch.from_torch`
live in :mod:`bnsym.sim.arch` (the simulator and the theory never import each other).
"""

from ..core.layers import (
    SPEC_GRAMMAR,
    Activation,
    BatchNorm,
    Dense,
    LayerNorm,
    Residual,
    RMSNorm,
    Serial,
    describe,
    parse_architecture,
    repeat,
    serial,
)
from .derivations import (
    derive_bsb1_backward,
    derive_depth_downscaling,
    derive_eval_batch_norm,
    derive_gaussian_mean,
    derive_layer_norm,
    derive_ntk_adjoint,
    derive_phi_batch_norm_exchangeable,
    derive_residual_sum,
)
from .network import SignalPropagation, kernel, signal_propagation
from .ntk import ntk, ntk_cross

__all__ = [
    "SPEC_GRAMMAR",
    "Activation",
    "BatchNorm",
    "Dense",
    "LayerNorm",
    "RMSNorm",
    "Residual",
    "Serial",
    "SignalPropagation",
    "derive_bsb1_backward",
    "derive_depth_downscaling",
    "derive_eval_batch_norm",
    "derive_gaussian_mean",
    "derive_layer_norm",
    "derive_ntk_adjoint",
    "derive_phi_batch_norm_exchangeable",
    "derive_residual_sum",
    "describe",
    "kernel",
    "ntk",
    "ntk_cross",
    "parse_architecture",
    "repeat",
    "serial",
    "signal_propagation",
]
