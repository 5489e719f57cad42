"""bnsym: the mean field theory of batch normalization, derived in SymPy and checked by Monte Carlo.

Public API: :func:`fixed_point`, :func:`bn_kernel`, :func:`forward_eigenvalues`, :func:`alpha_transition`,
:func:`forward_depth_scales`, :func:`gradient_rate`, :func:`backward_eigenvalues`, :func:`depth_scale`,
:func:`max_trainable_depth`,
:func:`collapse_eps`, :func:`cross_batch_fixed_point`, :func:`cross_batch_rate`, :func:`cross_batch_kernel`
(two batches, App. H), :func:`parse_activation`, :class:`Activation`, :class:`Estimate` (a value with its absolute
error, returned by ``with_error=True``).

The rooms: :mod:`bnsym.core` (premises shared by theory and simulator: activations, symbols, geometry, estimate,
derivation, validation, quadrature, progress, device, statistics, digits, the run store, the Dask cluster
connection); the theory of each paper, :mod:`bnsym.meanfield` (Yang et al.), :mod:`bnsym.dilution` (Philipp et
al.), :mod:`bnsym.products` (Bjorck et al.), :mod:`bnsym.rank` (Daneshmand et al.), :mod:`bnsym.nngp` (the
BN-NNGP and the BN-NTK: prior, tasks, ntk, estimators); :mod:`bnsym.sim` (the torch Monte Carlo, every network
that is built); :mod:`bnsym.train` (the training harness) and :mod:`bnsym.sweep` (grids on Dask); :mod:`bnsym.cli`
(the ``bnsym`` command); :mod:`bnsym.arch` (any architecture at infinite width, imported on its own);
:mod:`bnsym.report` and :mod:`bnsym.scale` for the book. Names and submodules are imported on first use
(:mod:`bnsym.core.lazy`), so ``import bnsym`` is quick.
"""

from .core.lazy import lazy_attributes

__getattr__, __dir__ = lazy_attributes(__name__, {
    **dict.fromkeys(["alpha_transition", "backward_eigenvalues", "bn_kernel", "collapse_eps", "cross_batch_fixed_point",
                     "cross_batch_kernel", "cross_batch_rate", "depth_scale", "fixed_point", "forward_depth_scales",
                     "forward_eigenvalues", "gradient_rate", "max_trainable_depth"], "api"),
    "Activation": "core.activations", "parse_activation": "core.activations", "Estimate": "core.estimate",
    "FixedPoint": "meanfield.forward",
})
__version__ = "0.1.0"
__all__ = ["Activation", "Estimate", "FixedPoint", "alpha_transition", "backward_eigenvalues", "bn_kernel",
           "collapse_eps", "cross_batch_fixed_point", "cross_batch_kernel", "cross_batch_rate",
           "depth_scale", "dilution", "fixed_point", "forward_depth_scales", "forward_eigenvalues", "gradient_rate",
           "max_trainable_depth", "parse_activation"]
