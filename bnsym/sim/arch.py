"""The finite torch twin of a network description (:mod:`bnsym.core.layers`), and the reader of a user's torch model.

:func:`torch_network` builds M independent networks of width n as one module, with the law the conventions of
:mod:`bnsym.arch` state (this module does not import the theory; it reads the same description): Dense layers
with standard normal weights and biases scaled by sqrt(weight_var / n_in) and sqrt(bias_var), train-mode batch norm
by ``bnsym.sim.batch_norm`` (the one batch-norm forward), eval-mode batch norm with the population
statistics of its input (all n x B entries of a network, held constant for the gradient), LayerNorm and RMSNorm over
the features, activations by their torch form. Tensors are (M, B, n): networks, batch, features.

:func:`simulate_signal_propagation` measures, for M networks, each top-level layer's Gram x x^T / n and the
gradient statistic S^l (the sum over examples a of the squared norm of df(x_a)/dx^l) by autograd, one backward pass
per example a, f = v . x_out / sqrt(n) with v standard normal. :func:`from_torch` reads a user's ``nn.Sequential``
(nn.Linear, nn.BatchNorm1d, nn.LayerNorm, nn.RMSNorm, activations, :class:`ResidualBlock` and modules whose forward is
``return x + self.f(x)``) into a description.

Each layer kind has its twin module (:func:`twin_module`) and its torch reader (``READERS``, or a reason in
``NOT_READABLE``), keyed by kind (``tests/test_layer_kinds.py`` holds every kind complete).
"""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
from dataclasses import dataclass
from functools import singledispatch
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..core.activations import Activation as Phi
from ..core.device import configure_torch, default_device, generator, haar_orthogonal
from ..core.estimate import Estimate
from ..core.layers import (
    Activation,
    BatchNorm,
    Dense,
    Layer,
    LayerNorm,
    Residual,
    RMSNorm,
    Serial,
    describe,
    serial,
    walk,
)
from ..core.statistics import extrapolate_to_infinite_width, mean_and_se
from ..core.validation import check_whole_number
from .networks import batch_norm, chunk_budget, inputs_with_gram


class ResidualBlock(nn.Module):
    """skip(x) + alpha * branch(x): the residual block :func:`from_torch` reads (``branch`` and ``skip`` any readable
    modules; ``skip=None`` the identity). Write a residual x + f(x) of your model as ``ResidualBlock(f)``, or subclass
    it keeping its forward: from_torch never runs a model's own forward, so this class is how it knows that a module
    is a residual."""

    def __init__(self, branch: torch.nn.Module, alpha: float = 1.0, skip: torch.nn.Module | None = None):
        super().__init__()
        self.branch, self.alpha, self.skip = branch, float(alpha), skip

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """skip(x) + alpha branch(x)."""
        return (x if self.skip is None else self.skip(x)) + self.alpha * self.branch(x)


def haar_frames(networks: int, n_out: int, n_in: int, gen: torch.Generator, device: torch.device,
                dtype: torch.dtype) -> torch.Tensor:
    """(networks, n_out, n_in) Haar-random matrices with orthonormal columns (n_out >= n_in) or rows: a Haar frame
    of :func:`~bnsym.core.device.haar_orthogonal`, transposed when the layer is wide."""
    q = haar_orthogonal(max(n_out, n_in), gen, device, dtype, (networks,), columns=min(n_out, n_in))
    return q if n_out >= n_in else q.mT


def _mirrored(pairs: torch.Tensor, axis: int) -> torch.Tensor:
    """(p, -p) interleaved along the negative ``axis``: entries 2i and 2i + 1 are p_i and -p_i."""
    return torch.stack([pairs, -pairs], dim=axis).flatten(axis - 1, axis)


def _uniform(shape: tuple[int, ...], positive: bool, gen: torch.Generator, device: torch.device,
             dtype: torch.dtype) -> torch.Tensor:
    """Entries of variance 1: uniform on [-sqrt(3), sqrt(3)], or on [0, 2 sqrt(3)] (mean sqrt(3)) if ``positive``."""
    u = torch.rand(shape, generator=gen, device=device, dtype=dtype)
    return math.sqrt(3) * (2 * u if positive else 2 * u - 1)


class DenseLayer(nn.Module):
    """sqrt(weight_var / n_in) x W^T + sqrt(bias_var) b for M networks: W (M, n_out, n_in) and b (M, n_out) with
    entries of variance 1 as the layer's ``init`` says (:class:`~bnsym.core.layers.Dense`)."""

    def __init__(self, layer: Dense, n_in: int, n_out: int, networks: int, gen: torch.Generator,
                 device: torch.device, dtype: torch.dtype):
        super().__init__()
        self.scale, self.bias_scale = math.sqrt(layer.weight_var / n_in), math.sqrt(layer.bias_var)
        if layer.init == "gaussian":
            weight = torch.randn(networks, n_out, n_in, generator=gen, device=device, dtype=dtype)
            bias = torch.randn(networks, 1, n_out, generator=gen, device=device, dtype=dtype)
        elif layer.init in ("uniform", "uniform_positive"):
            weight = _uniform((networks, n_out, n_in), layer.init == "uniform_positive", gen, device, dtype)
            bias = _uniform((networks, 1, n_out), False, gen, device, dtype)
        elif layer.init == "orthogonal":
            weight = math.sqrt(max(n_out, n_in)) * haar_frames(networks, n_out, n_in, gen, device, dtype)
            bias = torch.randn(networks, 1, n_out, generator=gen, device=device, dtype=dtype)
        else:
            if n_in % 2 or n_out % 2:
                raise ValueError(f"Dense init='looks_linear' pairs neurons: it needs even widths, got {n_in} -> "
                                 f"{n_out}")
            base = math.sqrt(max(n_out, n_in) / 2) * haar_frames(networks, n_out // 2, n_in // 2, gen, device, dtype)
            weight = _mirrored(_mirrored(base, -1), -2)
            bias = _mirrored(torch.randn(networks, 1, n_out // 2, generator=gen, device=device, dtype=dtype), -1)
        self.weight, self.bias = nn.Parameter(weight), nn.Parameter(bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * torch.matmul(x, self.weight.mT) + self.bias_scale * self.bias


def dense_parameters(layer: Dense, n_in: int, n_out: int, networks: int, gen: torch.Generator,
                     device: torch.device | str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """The weights sqrt(weight_var / n_in) W (networks, n_out, n_in) and biases sqrt(bias_var) b (networks, n_out)
    of the twin of ``layer`` from n_in to n_out features, drawn from ``gen`` as :class:`DenseLayer` draws them: how
    a network laid out otherwise (features x examples, its own forward) takes its weights from a description."""
    dense = DenseLayer(layer, n_in, n_out, networks, gen, torch.device(device), dtype)
    return (dense.scale * dense.weight).detach(), (dense.bias_scale * dense.bias).detach()[:, 0]


class BatchNormLayer(nn.Module):
    """statistics "batch" (mode train): batch norm over the batch axis per neuron (:func:`bnsym.sim.networks.
    batch_norm`, uncentred with centre=False); with eps = 0 a neuron constant over the batch maps to 0 (its 0/0).
    "population" (mode eval): (x - m) / sqrt(v + eps) with m, v the mean and variance of all n x B entries of each
    network's input (m = 0 uncentred), constants for autograd: the description's population statistics at
    initialisation. "reference" (mode eval): the per-neuron mean and variance of a reference set, a trained network's
    eval mode. Then scale y + shift where the layer has an affine map.

    ``reference_rows`` (set by :meth:`ArchNetwork.layer_outputs`): the first that many examples of the batch are
    the reference set; they are normalised with their own statistics per neuron (batch norm), the others as
    ``statistics`` says, the reference set's statistics being theirs for "reference"."""

    def __init__(self, layer: BatchNorm):
        super().__init__()
        self.eps, self.statistics = layer.eps, layer.statistics
        self.centre, self.affine = layer.centre, layer.affine
        self.reference_rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.reference_rows
        if rows:
            reference, x = x[..., :rows, :], x[..., rows:, :]
            out = torch.cat([self._batch(reference), self._normalised(x, reference)], dim=-2)
        elif self.statistics == "reference":
            raise ValueError("a BatchNorm with statistics='reference' normalises with a reference set's statistics: "
                             "pass the reference inputs, layer_outputs(x, reference=...)")
        else:
            out = self._normalised(x, None)
        return out if self.affine is None else self.affine[0] * out + self.affine[1]

    def _batch(self, x: torch.Tensor, reference: torch.Tensor | None = None) -> torch.Tensor:
        out = batch_norm(x, self.eps, dim=-2, centre=self.centre, reference=reference)
        return torch.nan_to_num(out, nan=0.0) if self.eps == 0 else out

    def _normalised(self, x: torch.Tensor, reference: torch.Tensor | None) -> torch.Tensor:
        if self.statistics != "population":
            return self._batch(x, reference if self.statistics == "reference" else None)
        with torch.no_grad():
            if self.centre:
                mean, variance = x.mean((-2, -1), keepdim=True), x.var((-2, -1), keepdim=True, unbiased=False)
            else:
                mean, variance = 0.0, x.square().mean((-2, -1), keepdim=True)
        return (x - mean) / torch.sqrt(variance + self.eps)


class LayerNormLayer(nn.Module):
    """Layer norm over the features, population variance (uncentred with centre=False: x / sqrt(mean x^2 + eps)); a
    zero variance with eps = 0 maps to 0; then scale y + shift where the layer has an affine map."""

    def __init__(self, layer: LayerNorm):
        super().__init__()
        self.eps, self.centre, self.affine = layer.eps, layer.centre, layer.affine

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(x, x.shape[-1:], eps=self.eps) if self.centre else batch_norm(x, self.eps, centre=False)
        out = torch.nan_to_num(out, nan=0.0) if self.eps == 0 else out
        return out if self.affine is None else self.affine[0] * out + self.affine[1]


class ActivationLayer(nn.Module):
    """phi coordinatewise, by its torch form."""

    def __init__(self, phi: Phi):
        super().__init__()
        self.phi = phi

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.phi.torch(x)


class ArchNetwork(nn.Module):
    """M networks of one description; ``layer_outputs`` gives every top-level layer's output."""

    def __init__(self, layers: list[torch.nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def layer_outputs(self, x: torch.Tensor, reference: torch.Tensor | None = None) -> list[torch.Tensor]:
        """The output of every top-level layer for inputs x (M, B, in_features); ``reference`` (M, B', in_features):
        the reference set whose per-neuron statistics the BatchNorms with statistics="reference" use (it passes
        the network beside x, batch-normed by its own statistics; the outputs are x's)."""
        norms = [m for m in self.modules() if isinstance(m, BatchNormLayer)]
        rows = 0 if reference is None else reference.shape[-2]
        if rows:
            x = torch.cat([reference.expand(*x.shape[:-2], *reference.shape[-2:]), x], dim=-2)
        outputs = []
        try:
            for norm in norms:
                norm.reference_rows = rows
            for layer in self.layers:
                x = layer(x)
                outputs.append(x[..., rows:, :] if rows else x)  # x itself: autograd.grad w.r.t. the outputs
        finally:
            for norm in norms:
                norm.reference_rows = 0
        return outputs

    def forward(self, x: torch.Tensor, reference: torch.Tensor | None = None) -> torch.Tensor:
        """The networks' outputs (M, B, width) (``reference`` as for :meth:`layer_outputs`)."""
        return self.layer_outputs(x, reference)[-1]


@singledispatch
def twin_module(layer: object, n_in: int, width: int, networks: int, gen: torch.Generator, device: torch.device,
                dtype: torch.dtype) -> tuple[nn.Module, int]:
    """The twin of one layer for ``networks`` networks of width ``width`` on ``n_in`` input features, and its
    output width. One function per layer kind (``twin_module.register``)."""
    raise ValueError(f"the layer kind {type(layer).__name__} has no torch twin: no module builder is registered")


@twin_module.register
def _dense(layer: Dense, n_in: int, width: int, networks: int, gen: torch.Generator, device: torch.device,
           dtype: torch.dtype) -> tuple[nn.Module, int]:
    return DenseLayer(layer, n_in, width, networks, gen, device, dtype), width


@twin_module.register
def _batch_norm(layer: BatchNorm, n_in: int, width: int, networks: int, gen: torch.Generator, device: torch.device,
                dtype: torch.dtype) -> tuple[nn.Module, int]:
    return BatchNormLayer(layer), n_in


@twin_module.register(LayerNorm)
@twin_module.register(RMSNorm)
def _layer_norm(layer: LayerNorm, n_in: int, width: int, networks: int, gen: torch.Generator, device: torch.device,
                dtype: torch.dtype) -> tuple[nn.Module, int]:
    return LayerNormLayer(layer), n_in


@twin_module.register
def _activation(layer: Activation, n_in: int, width: int, networks: int, gen: torch.Generator, device: torch.device,
                dtype: torch.dtype) -> tuple[nn.Module, int]:
    return ActivationLayer(layer.phi), n_in


def _chain(layers: Serial, n_in: int, width: int, networks: int, gen: torch.Generator, device: torch.device,
           dtype: torch.dtype) -> tuple[list[nn.Module], int]:
    """The twins of ``layers`` in order, and the width after them."""
    modules, n_out = [], n_in
    for layer in layers:
        module, n_out = twin_module(layer, n_out, width, networks, gen, device, dtype)
        modules.append(module)
    return modules, n_out


@twin_module.register
def _residual(layer: Residual, n_in: int, width: int, networks: int, gen: torch.Generator, device: torch.device,
              dtype: torch.dtype) -> tuple[nn.Module, int]:
    skip, n_skip = _chain(layer.skip, n_in, width, networks, gen, device, dtype)
    branch, n_out = _chain(layer.branch, n_in, width, networks, gen, device, dtype)
    if n_out != n_skip:
        skipped = f" and its skip to {n_skip}" if skip else ""
        raise ValueError(f"the residual branch {describe(layer)} maps {n_in} features to {n_out}{skipped}: "
                         "skip(x) + alpha branch(x) needs equal widths")
    return ResidualBlock(nn.Sequential(*branch), layer.alpha, nn.Sequential(*skip) if skip else None), n_out


def _check_size(value: object, name: str) -> int:
    return check_whole_number(value, name, 1, 2**31, "a tensor dimension")


def torch_network(net: object, width: int, n_networks: int = 1, in_features: int | None = None, seed: int = 0,
                  device: torch.device | str | None = None, dtype: torch.dtype = torch.float64,
                  out_features: int | None = None) -> ArchNetwork:
    """The finite twin of ``net``: ``n_networks`` independent networks of width ``width`` in one module, mapping
    inputs (M, B, in_features) (default in_features = width) to (M, B, width), or to (M, B, out_features) where
    given: the last top-level Dense is then a read-out to that many features (ValueError if there is none); weights
    drawn from ``seed`` on ``device`` (default CUDA where present)."""
    configure_torch()
    network = serial(net)
    width, n_networks = _check_size(width, "width"), _check_size(n_networks, "n_networks")
    in_features = width if in_features is None else _check_size(in_features, "in_features")
    device = torch.device(device or default_device())
    gen = generator(check_whole_number(seed, "seed", 0, 2**62), device)
    if out_features is None:
        return ArchNetwork(_chain(network, in_features, width, n_networks, gen, device, dtype)[0])
    out_features = _check_size(out_features, "out_features")
    last = max((i for i, layer in enumerate(network) if isinstance(layer, Dense)), default=None)
    if last is None:
        raise ValueError(f"out_features={out_features} sets the width of the last top-level Dense (the read-out), "
                         "but the network has none")
    body, n_in = _chain(network.layers[:last], in_features, width, n_networks, gen, device, dtype)
    readout, n_out = twin_module(network.layers[last], n_in, out_features, n_networks, gen, device, dtype)
    tail, _ = _chain(network.layers[last + 1:], n_out, width, n_networks, gen, device, dtype)
    return ArchNetwork([*body, readout, *tail])


@dataclass(frozen=True)
class TwinRun:
    """Per network (axis 0) and top-level layer (axis 1): ``grams`` x x^T / n (M, L, B, B) and ``gradient`` S^l
    (M, L), float64 numpy arrays."""

    grams: np.ndarray
    gradient: np.ndarray


def simulate_signal_propagation(net: object, Sigma0: np.ndarray, width: int, n_networks: int, seed: int = 0,
                                device: torch.device | str | None = None, chunk: int | None = None) -> TwinRun:
    """Grams and gradient statistics of ``n_networks`` twins of width ``width`` on inputs whose Gram is exactly
    Sigma0 (``inputs_with_gram`` of :mod:`bnsym.sim.networks`, input dimension = width), ``chunk`` networks at a
    time (default: their weights within the simulators' memory budget per chunk)."""
    network = serial(net)
    width, n_networks = _check_size(width, "width"), _check_size(n_networks, "n_networks")
    seed = check_whole_number(seed, "seed", 0, 2**40)
    device = torch.device(device or default_device())
    dense_count = sum(isinstance(layer, Dense) for layer in walk(network))
    chunk = chunk or max(1, chunk_budget(device) // (8 * width * width * max(dense_count, 1) * 3))
    grams, gradients = [], []
    for start in range(0, n_networks, chunk):
        count = min(chunk, n_networks - start)
        x = inputs_with_gram(Sigma0, width, count, seed=seed + 7919 * start, device=device).mT.contiguous()
        model = torch_network(network, width, count, seed=seed + 104729 * start + 1, device=device)
        outputs = model.layer_outputs(x)
        readout = torch.randn(count, width, 1, generator=generator(seed + 15485863 * start + 2, device), device=device,
                              dtype=x.dtype)
        f = (outputs[-1] @ readout).squeeze(-1) / math.sqrt(width)  # (M, B)
        squares = torch.zeros(count, len(outputs), dtype=torch.float64, device=device)
        for a in range(f.shape[-1]):
            grads = torch.autograd.grad(f[:, a].sum(), outputs, retain_graph=a + 1 < f.shape[-1])
            squares += torch.stack([g.square().sum((-2, -1)) for g in grads], dim=1)
        grams.append(torch.stack([(o @ o.mT / width).detach() for o in outputs], dim=1).cpu())
        gradients.append(squares.cpu())
    return TwinRun(torch.cat(grams).numpy(), torch.cat(gradients).numpy())


#: The per-layer statistics :func:`extrapolated_signal_propagation` measures, by the names of
#: :class:`bnsym.arch.SignalPropagation`'s fields.
MEASURED = ("diagonal", "off_diagonal", "channel_mean_squared", "channel_variance", "gradient")


def _layer_statistics(run: TwinRun) -> dict[str, np.ndarray]:
    """Per network and layer (M, L): Brock et al.'s summaries of each Gram, and S."""
    batch = run.grams.shape[-1]
    diagonal = np.diagonal(run.grams, axis1=-2, axis2=-1).sum(-1)
    total = run.grams.sum((-2, -1))
    return {"diagonal": diagonal / batch, "off_diagonal": (total - diagonal) / (batch * (batch - 1)),
            "channel_mean_squared": total / batch**2, "channel_variance": diagonal / batch - total / batch**2,
            "gradient": run.gradient}


@dataclass(frozen=True)
class Extrapolated:
    """The twin's per-layer statistics (``MEASURED``) at each width (``per_width[name][i]``, an Estimate over
    the layers: the mean over networks and its standard error) and extrapolated to infinite width
    (``infinite[name]``). ``exact[name]`` marks the layers where the twin holds the statistic exactly (no spread
    over networks, e.g. a batch-normed layer's diagonal): there ``infinite`` is the widest width's value with
    error 0."""

    widths: tuple[int, ...]
    n_networks: int
    per_width: dict[str, list[Estimate]]
    infinite: dict[str, Estimate]
    exact: dict[str, np.ndarray]


def extrapolated_signal_propagation(net: object, Sigma0: np.ndarray, widths: tuple[int, ...], n_networks: int,
                                    seed: int = 0, device: torch.device | str | None = None,
                                    gradient: bool = True) -> Extrapolated:
    """The twin's signal propagation (:func:`simulate_signal_propagation`, ``n_networks`` per width, a fresh seed
    per width) fitted per layer by weighted least squares as a + b / width: the O(1/n) bias of a smooth function
    of the layer Grams (``bnsym.core.statistics.extrapolate_to_infinite_width``); the intercept a and its
    standard error are the infinite-width estimate. ``gradient=False`` leaves S out (e.g. relu -> BN at eps = 0,
    whose gradient has no finite second moment); a non-finite S is a ValueError."""
    widths = tuple(_check_size(w, "width") for w in widths)
    if len(widths) < 3:
        raise ValueError(f"extrapolating in 1/width needs at least 3 widths, got {widths}")
    names = MEASURED if gradient else MEASURED[:-1]
    per_width: dict[str, list[Estimate]] = {name: [] for name in names}
    for width in widths:
        run = simulate_signal_propagation(net, Sigma0, width, n_networks, seed=seed + width, device=device)
        statistics = _layer_statistics(run)
        if gradient and not np.all(np.isfinite(statistics["gradient"])):
            raise ValueError(f"the twin's gradient statistic is not finite at width {width} (a batch norm with eps = 0 "
                             "of a neuron constant over the batch): pass gradient=False, or use eps > 0")
        for name in names:
            per_width[name].append(mean_and_se(statistics[name]))
    infinite, exact = {}, {}
    for name, estimates in per_width.items():
        means, ses = np.array([e.value for e in estimates]), np.array([e.error for e in estimates])
        held = ses.max(0) <= 1e-12 * np.maximum(np.abs(means).max(0), 1.0)
        fits = [(means[-1, i], 0.0) if held[i] else extrapolate_to_infinite_width(np.array(widths), means[:, i],
                                                                                   ses[:, i])[:2]
                for i in range(means.shape[1])]
        infinite[name] = Estimate(np.array([f[0] for f in fits]), np.array([f[1] for f in fits]), "1/width fit")
        exact[name] = held
    return Extrapolated(widths, n_networks, per_width, infinite, exact)


# ---------------------------------------------------------------------------------------------- from_torch


def _softplus(module: nn.Softplus) -> str:
    """softplus(beta); torch's switch to the identity above beta z = threshold is read only where it moves phi by
    less than float32's rounding there, log(1 + e^-threshold) <= threshold 2^-24 (threshold >= 14.0; torch's default
    20 moves it by 2e-9)."""
    threshold = float(module.threshold)
    if not (threshold > 0 and math.log1p(math.exp(-threshold)) <= threshold * 2.0**-24):
        raise ValueError(f"its threshold {threshold:g} switches it to the identity above beta z = {threshold:g}, "
                         f"which moves phi by log(1 + e^-threshold) / beta = {math.log1p(math.exp(-threshold)):.2g} "
                         "/ beta, above float32's rounding; bnsym's softplus is the smooth one (use threshold >= 14)")
    return f"softplus(beta={float(module.beta)!r})"


def _hardtanh(module: nn.Hardtanh) -> str:
    """hardtanh: z clipped to [-1, 1], torch's defaults only."""
    if (module.min_val, module.max_val) != (-1.0, 1.0):
        raise ValueError(f"it clips to [{module.min_val:g}, {module.max_val:g}]; bnsym's hardtanh clips to [-1, 1]")
    return "hardtanh"


def _gelu(module: nn.GELU) -> str:
    """gelu (approximate='none', z Phi(z)) or gelu_tanh (approximate='tanh')."""
    return {"none": "gelu", "tanh": "gelu_tanh"}[module.approximate]


#: torch's elementwise activation modules (exact types: a subclass may compute something else) and the bnsym
#: activation each is, with its parameters (bnsym.core.activations; sigmoid as the formula 1 / (1 + e^-x)).
_ACTIVATIONS = {nn.ReLU: lambda m: "relu", nn.Tanh: lambda m: "tanh", nn.Identity: lambda m: "identity",
                nn.LeakyReLU: lambda m: f"leaky_relu({float(m.negative_slope)!r})",
                nn.Sigmoid: lambda m: "sigmoid(x)", nn.GELU: _gelu, nn.SiLU: lambda m: "silu",
                nn.ELU: lambda m: f"elu(alpha={float(m.alpha)!r})", nn.Softplus: _softplus,
                nn.Mish: lambda m: "mish", nn.Hardtanh: _hardtanh}
_READABLE = ("nn.Sequential (nested), nn.Linear, nn.BatchNorm1d, nn.LayerNorm, nn.RMSNorm, "
             + ", ".join(f"nn.{kind.__name__}" for kind in _ACTIVATIONS) + ", bnsym.sim.arch.ResidualBlock and a "
             "module whose forward is `return x + self.f(x)`")


def _affine_of(module: torch.nn.Module, name: str) -> tuple[float, float] | None:
    """A norm layer's elementwise affine map as the description's (scale, shift): None where it has none or it is
    the identity (weight 1, bias 0); ValueError where the weight or the bias differs between neurons."""
    parts = []
    for what, default in (("weight", 1.0), ("bias", 0.0)):
        values = getattr(module, what, None)
        values = None if values is None else values.detach().double().flatten()
        if values is not None and not bool(torch.isfinite(values).all()):
            raise ValueError(f"cannot read {name}: its affine {what} holds NaN or inf")
        if values is not None and bool(torch.any(values != values[0])):
            raise ValueError(f"cannot read {name}: its affine {what} differs between neurons (from "
                             f"{float(values.min()):.4g} to {float(values.max()):.4g}); a description's affine map is "
                             "one (scale, shift) for every neuron, as at initialisation, and neurons with their own "
                             "scales are no longer exchangeable, which the infinite-width theory assumes")
        parts.append(default if values is None else float(values[0]))
    return None if tuple(parts) == (1.0, 0.0) else (parts[0], parts[1])


_STRUCTURES = (nn.Sequential, nn.Linear, nn.BatchNorm1d, nn.LayerNorm, nn.RMSNorm)  # with ResidualBlock: read by _read


def _plain(module: torch.nn.Module, kind: type) -> bool:
    """``module`` is a ``kind`` that computes what ``kind`` does: a subclass that overrides forward is not read."""
    return isinstance(module, kind) and type(module).forward is kind.forward


def _unreadable(module: torch.nn.Module) -> str:
    """Why a module that is none of the readable kinds cannot be read."""
    if isinstance(module, (nn.ModuleList, nn.ModuleDict)):
        return (f"an nn.{type(module).__name__} holds modules but has no forward, so their order of use is unknown; "
                "if they run one after the other, pass nn.Sequential(*modules)")
    for kind in (*_STRUCTURES, ResidualBlock):
        if isinstance(module, kind):
            return (f"it subclasses {kind.__name__} and overrides its forward, so it may compute something else; "
                    f"use {kind.__name__} itself")
    return (f"from_torch reads {_READABLE}, and never runs a model's own forward (a custom module's may compute "
            "anything); write it as an nn.Sequential, a residual x + alpha f(x) as ResidualBlock(f, alpha) or as a "
            "module whose forward is the one line `return x + self.f(x)` (or x + alpha * self.f(x), alpha a number "
            "or a float attribute; f any child module)")


def _call_of_child(node: ast.expr, me: str, x: str, module: nn.Module) -> str | None:
    """The child's name if ``node`` is ``me.child(x)`` for a child module of ``module``."""
    if (isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1
            and isinstance(node.args[0], ast.Name) and node.args[0].id == x
            and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
            and node.func.value.id == me and node.func.attr in module._modules):
        return node.func.attr
    return None


def _coefficient(node: ast.expr, me: str, module: nn.Module) -> float | None:
    """The number ``node`` is: a literal, or ``me.name`` with a float or int attribute of ``module``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == me:
        value = getattr(module, node.attr, None)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return None


def _branch(node: ast.expr, me: str, x: str, module: nn.Module) -> tuple[str, float] | None:
    """(child, alpha) if ``node`` is ``me.child(x)``, or that times a coefficient (either side)."""
    child = _call_of_child(node, me, x, module)
    if child is not None:
        return child, 1.0
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        for call, weight in ((node.left, node.right), (node.right, node.left)):
            child, alpha = _call_of_child(call, me, x, module), _coefficient(weight, me, module)
            if child is not None and alpha is not None:
                return child, alpha
    return None


def residual_pattern(module: nn.Module) -> tuple[str, float] | None:
    """(child, alpha) if ``module``'s forward is the documented residual pattern, read from its source (never run):
    ``def forward(self, x): return x + self.f(x)``, the sum either way round, the branch optionally times alpha (a
    number, or an int or float attribute of the module); a docstring may precede the return. None otherwise (or
    where the source is not available, e.g. a class defined in an interactive session)."""
    forward = type(module).forward
    if forward is nn.Module.forward:
        return None
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(forward)))
    except (OSError, TypeError, SyntaxError):
        return None
    function = tree.body[0] if tree.body else None
    if not isinstance(function, ast.FunctionDef) or len(function.args.args) != 2 or function.args.vararg \
            or function.args.kwarg or function.args.kwonlyargs:
        return None
    body = [line for line in function.body
            if not (isinstance(line, ast.Expr) and isinstance(line.value, ast.Constant))]
    me, x = (argument.arg for argument in function.args.args)
    if len(body) != 1 or not isinstance(body[0], ast.Return) or not isinstance(body[0].value, ast.BinOp) \
            or not isinstance(body[0].value.op, ast.Add):
        return None
    total = body[0].value
    for skip, rest in ((total.left, total.right), (total.right, total.left)):
        if isinstance(skip, ast.Name) and skip.id == x:
            found = _branch(rest, me, x, module)
            if found is not None:
                return found
    return None


def _mean_square(values: torch.Tensor, what: str, name: str) -> float:
    """mean(values^2) in float64, scaled by max |values| so that it neither overflows nor underflows on the way;
    ValueError where the values are not finite or their mean square itself is outside float64's range."""
    values = values.detach().double()
    if not bool(torch.isfinite(values).all()):
        raise ValueError(f"cannot read {name}: its {what} hold NaN or inf")
    peak = float(values.abs().max()) if values.numel() else 0.0
    if peak == 0.0:
        return 0.0
    square = float((values / peak).square().mean()) * peak * peak
    if not np.isfinite(square) or square == 0.0:
        log10 = 2 * np.log10(peak) + np.log10(float((values / peak).square().mean()))
        raise ValueError(f"cannot read {name}: the mean square of its {what}, 1e{log10:.0f} (largest |value| "
                         f"{peak:.3g}), is outside float64's range, and a description holds it as a variance")
    return square


def _need(name: str, features: int, width: int | None) -> None:
    """A layer taking ``features`` features must receive that many (``width``; None: not known yet)."""
    if width is not None and features != width:
        raise ValueError(f"cannot read {name}: it takes {features} features but receives {width}")


def _read_linear(module: nn.Linear, name: str, where: str, width: int | None) -> tuple[list[Layer], int | None]:
    _need(name, module.in_features, width)
    weight_var = module.in_features * _mean_square(module.weight, "weights", name)
    if not np.isfinite(weight_var) or weight_var == 0.0:
        raise ValueError(f"cannot read {name}: its weight variance n_in mean(w^2) is {weight_var:.3g}, where a "
                         "description needs a finite variance > 0 (a zero one cuts the network)")
    bias = 0.0 if module.bias is None else _mean_square(module.bias, "biases", name)
    return [Dense(weight_var, bias)], module.out_features


def _read_batch_norm(module: nn.BatchNorm1d, name: str, where: str,
                     width: int | None) -> tuple[list[Layer], int | None]:
    _need(name, module.num_features, width)
    affine = _affine_of(module, name)
    if not module.training and module.track_running_stats:
        raise ValueError(f"cannot read {name}: in eval mode it normalises by its per-neuron running statistics, "
                         "which a description does not hold; call .train() to read it as train-mode batch norm, "
                         "or write BatchNorm(mode='eval') (population statistics) yourself")
    return [BatchNorm(module.eps, affine=affine)], width


def _read_layer_norm(module: nn.LayerNorm | nn.RMSNorm, name: str, where: str,
                     width: int | None) -> tuple[list[Layer], int | None]:
    """nn.LayerNorm as a LayerNorm, nn.RMSNorm as an RMSNorm (its eps None: torch's machine epsilon of the
    input's dtype, read as that of its weight, or of torch's default dtype without one)."""
    if len(module.normalized_shape) != 1:
        raise ValueError(f"cannot read {name}: it normalises over {tuple(module.normalized_shape)}; a "
                         "description's LayerNorm normalises over the one feature axis")
    _need(name, module.normalized_shape[0], width)
    eps = module.eps
    if eps is None:
        weight = getattr(module, "weight", None)
        eps = torch.finfo(torch.get_default_dtype() if weight is None else weight.dtype).eps
    affine = _affine_of(module, name)
    return [RMSNorm(eps, affine) if _plain(module, nn.RMSNorm) else LayerNorm(eps, affine=affine)], width


def _read_activation(module: nn.Module, name: str, where: str, width: int | None) -> tuple[list[Layer], int | None]:
    try:
        return [Activation(_ACTIVATIONS[type(module)](module))], width
    except ValueError as error:  # a parameter bnsym's phi does not take (softplus beta <= 0, a clipped hardtanh)
        raise ValueError(f"cannot read {name}: {error}") from None


def _read_residual(module: nn.Module, name: str, where: str, width: int | None) -> tuple[list[Layer], int | None]:
    """A ResidualBlock, or a module following the pattern x + alpha * self.f(x) (:func:`residual_pattern`)."""
    if not _plain(module, ResidualBlock):
        child, alpha = residual_pattern(module)
        branch, after = _read(getattr(module, child), _inside(where, child), width)
        if width is not None and after != width:
            raise ValueError(f"cannot read {name}: its branch maps {width} features to {after}, and x + alpha "
                             "f(x) needs equal widths")
        return [Residual(branch, alpha)], after
    branch, after = _read(module.branch, _inside(where, "branch"), width)
    skip, skipped = ([], width) if module.skip is None else _read(module.skip, _inside(where, "skip"), width)
    if after != skipped and None not in (after, skipped):
        raise ValueError(f"cannot read {name}: its branch maps {width} features to {after} and its skip to "
                         f"{skipped}, and skip(x) + alpha branch(x) needs equal widths")
    return [Residual(branch, module.alpha, skip)], after if skipped is None else skipped


@dataclass(frozen=True)
class Reader:
    """How :func:`from_torch` reads a layer kind: ``accepts(module)`` says whether a torch module is one, and
    ``read(module, name, path, width)`` gives its layers and the width after them (ValueError naming it otherwise)."""

    accepts: Callable[[nn.Module], bool]
    read: Callable[[nn.Module, str, str, int | None], tuple[list[Layer], int | None]]


#: The torch reader of each layer kind (a torch module is read by the first that accepts it).
READERS: dict[type, Reader] = {
    Dense: Reader(lambda m: _plain(m, nn.Linear), _read_linear),
    BatchNorm: Reader(lambda m: _plain(m, nn.BatchNorm1d), _read_batch_norm),
    LayerNorm: Reader(lambda m: _plain(m, nn.LayerNorm), _read_layer_norm),
    RMSNorm: Reader(lambda m: _plain(m, nn.RMSNorm), _read_layer_norm),
    Activation: Reader(lambda m: type(m) in _ACTIVATIONS, _read_activation),
    Residual: Reader(lambda m: _plain(m, ResidualBlock) or residual_pattern(m) is not None, _read_residual),
}

#: Layer kinds that no torch module is read as, each with the reason.
NOT_READABLE: dict[type, str] = {}


def _inside(where: str, child: str) -> str:
    """The path of ``child`` of the module at path ``where`` ("" the model itself)."""
    return f"{where}.{child}" if where else child


def _read(module: torch.nn.Module, where: str, width: int | None) -> tuple[list[Layer], int | None]:
    """The description of one module at path ``where`` (as ``named_modules`` spells it; "" the model itself) and
    the width after it (None: not known yet)."""
    name = f"layer {where} ({type(module).__name__})" if where else f"the model ({type(module).__name__})"
    if any(p.is_meta for p in module.parameters(recurse=False)):
        raise ValueError(f"cannot read {name}: its parameters are on the meta device (shapes without values), and a "
                         "description is read from their values (the weight and bias variances; a norm layer's "
                         "affine map at the identity); materialise the model first (module.to_empty(device='cpu') "
                         "and initialise it)")
    if _plain(module, nn.Sequential):
        layers = []
        for child, inner in module.named_children():
            read, width = _read(inner, _inside(where, child), width)
            layers.extend(read)
        return layers, width
    for reader in READERS.values():
        if reader.accepts(module):
            return reader.read(module, name, where, width)
    raise ValueError(f"cannot read {name}: {_unreadable(module)}")


def from_torch(module: object) -> Serial:
    """The description of a torch model: an ``nn.Sequential`` (nested ones too; or one module) of nn.Linear
    (weight_var = n_in times the mean square of its weights, bias_var = the mean square of its bias: the variances
    of the law its parameters were drawn from, estimated from them), nn.BatchNorm1d in train mode (any eps; or in
    eval mode without running statistics), nn.LayerNorm and nn.RMSNorm (an RMSNorm: the uncentred LayerNorm),
    each with no affine map or one whose weight and bias are each the same for every neuron (the description's
    ``affine``; none at the identity, as initialised), the activations nn.ReLU, nn.LeakyReLU (its slope), nn.Tanh,
    nn.Sigmoid, nn.GELU (approximate 'none' or 'tanh'), nn.SiLU, nn.ELU (its alpha), nn.Softplus (its beta; the
    default threshold), nn.Mish, nn.Hardtanh (clipping to [-1, 1]) and nn.Identity, and residuals skip(x) + alpha f(x).

    A model's own forward is never run. A residual is read from :class:`ResidualBlock` (``ResidualBlock(f, alpha,
    skip)``, or a subclass that keeps its forward) or from a small module of the documented pattern, read from its
    source (:func:`residual_pattern`)::

        class Block(nn.Module):
            def __init__(self, f, alpha=1.0):
                super().__init__()
                self.f, self.alpha = f, alpha

            def forward(self, x):
                return x + self.alpha * self.f(x)   # or x + self.f(x), self.f(x) + x, x + 0.5 * self.f(x)

    ValueError naming the path of any module it cannot read (as ``named_modules`` spells it, e.g. ``layers.3.act``;
    "the model" for the module passed), and why: an nn.ModuleList or custom module, a norm layer whose affine map
    differs between neurons (each neuron its own scale: no longer exchangeable), an eval-mode BatchNorm1d with
    running statistics."""
    if not isinstance(module, nn.Module):
        raise ValueError(f"from_torch reads a torch nn.Module, got {type(module).__name__}")
    layers, _ = _read(module, "", None)
    if not layers:
        raise ValueError("the module has no layers to read")
    return serial(*layers)
