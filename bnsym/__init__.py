"""bnsym: the mean field theory of batch normalization, derived in SymPy and checked by Monte Carlo.

Public API: :func:`fixed_point`, :func:`bn_kernel`, :func:`forward_eigenvalues`, :func:`alpha_transition`,
:func:`gradient_rate`, :func:`backward_eigenvalues`, :func:`depth_scale`, :func:`max_trainable_depth`,
:func:`collapse_eps`, :func:`cross_batch_fixed_point`, :func:`cross_batch_rate`, :func:`cross_batch_kernel`
(two batches, App. H), :func:`parse_activation`, :class:`Activation`, :class:`Estimate` (a value with its absolute
error, returned by
``with_error=True``); :mod:`bnsym.dilution` (Philipp et al.); :mod:`bnsym.arch` (any architecture at infinite
width, imported on its own).
"""

from . import dilution
from .api import (
                  alpha_transition,
                  backward_eigenvalues,
                  bn_kernel,
                  collapse_eps,
                  cross_batch_fixed_point,
                  cross_batch_kernel,
                  cross_batch_rate,
                  depth_scale,
                  fixed_point,
                  forward_eigenvalues,
                  gradient_rate,
                  max_trainable_depth,
)
from .core.activations import Activation, parse_activation
from .core.estimate import Estimate
from .meanfield.forward import FixedPoint

__version__ = "0.1.0"
__all__ = ["Activation", "Estimate", "FixedPoint", "alpha_transition", "backward_eigenvalues", "bn_kernel",
           "collapse_eps", "cross_batch_fixed_point", "cross_batch_kernel", "cross_batch_rate",
           "depth_scale", "dilution", "fixed_point", "forward_eigenvalues", "gradient_rate",
           "max_trainable_depth", "parse_activation"]
