"""Torch simulators of wide random batch-normalised networks (CPU or CUDA, float64, TF32 off): every network
that is built, one module per paper.

* Yang et al.: :mod:`.networks` (forward passes, the Gram sampler), :mod:`.gradients` (back-propagation),
  :mod:`.probes` (decays and Rayleigh quotients), :mod:`.batches` (networks on several batches);
* :mod:`.philipp` (Philipp et al.), :mod:`.bjorck` (Bjorck et al.), :mod:`.daneshmand` (Daneshmand et al.).
* :mod:`.digit_resnet`: Bjorck et al.'s digit ResNet (parts of batch norm, its placement), trained by
  :mod:`bnsym.train.bjorck`.

The simulators import only :mod:`bnsym.core`: they get every theoretical quantity (a fixed point, a direction, a
rank statistic) from the caller, and never import a theory (:mod:`bnsym.meanfield`, :mod:`bnsym.dilution`,
:mod:`bnsym.products`, :mod:`bnsym.rank`, :mod:`bnsym.nngp`). The device and random streams
(:mod:`bnsym.core.device`), the standard errors (:mod:`bnsym.core.statistics`) and the one batch-norm forward
that every network here normalises with (:func:`batch_norm`, :mod:`bnsym.core.batchnorm`) live in core; their
public names are re-exported here.
"""

from ..core.device import Normals, configure_torch, default_device, generator
from ..core.statistics import extrapolate_to_infinite_width, mc_tolerance, mean_and_se
from .gradients import GradientRun, per_layer_growth, simulate_gradients
from .networks import (
    SAMPLERS,
    batch_norm,
    gram,
    inputs_with_gram,
    mean_diagonal,
    mean_off_diagonal,
    simulate_forward,
)
from .probes import (
    backward_rayleigh,
    backward_rayleigh_autograd,
    layer_jacobian,
    layer_jacobian_mean_square,
    network_gradient_norms,
    neuron_gradient_ratios,
    simulated_decay,
)

__all__ = [
    "GradientRun",
    "Normals",
    "SAMPLERS",
    "backward_rayleigh",
    "backward_rayleigh_autograd",
    "batch_norm",
    "configure_torch",
    "default_device",
    "extrapolate_to_infinite_width",
    "generator",
    "gram",
    "inputs_with_gram",
    "layer_jacobian",
    "layer_jacobian_mean_square",
    "network_gradient_norms",
    "neuron_gradient_ratios",
    "mc_tolerance",
    "mean_and_se",
    "mean_diagonal",
    "mean_off_diagonal",
    "per_layer_growth",
    "simulate_forward",
    "simulate_gradients",
    "simulated_decay",
]
