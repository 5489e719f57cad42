"""Torch simulators of wide random batch-normalized networks (CPU or CUDA, float64, TF32 off)."""

from bnsym.sim.device import configure_torch, default_device, generator
from bnsym.sim.networks import (
    SAMPLERS,
    batch_norm,
    gram,
    inputs_with_gram,
    mean_diagonal,
    mean_off_diagonal,
    simulate_forward,
)
from bnsym.sim.gradients import GradientRun, backward_rayleigh, per_layer_growth, simulate_gradients
from bnsym.sim.statistics import extrapolate_to_infinite_width, mean_and_se

__all__ = [
    "GradientRun",
    "SAMPLERS",
    "backward_rayleigh",
    "batch_norm",
    "configure_torch",
    "default_device",
    "extrapolate_to_infinite_width",
    "generator",
    "gram",
    "inputs_with_gram",
    "mean_and_se",
    "mean_diagonal",
    "mean_off_diagonal",
    "per_layer_growth",
    "simulate_forward",
    "simulate_gradients",
]
