"""Torch simulators of the networks of Philipp, Song & Carbonell (2018) and their gradient scale coefficient.

Layout: activations are row vectors, tensors (B, d): B datapoints, width d (the paper's convention;
batch norm acts per column over the B rows, layer norm per row). Layers are counted from the
error layer: f_0 = f_1 . y (dot-product error), f_1 the prediction, f_L the first (lowest) linear
layer. Normalisation layers have no trainable scale or shift, linear layers no bias (paper, I.1).

The networks built at initialisation are twins (:mod:`bnsym.sim.arch`) of :mod:`bnsym.arch` descriptions
(:func:`description`, :func:`twin_network`); weight matrices handed out alone are the twin's Dense draws
(:func:`dense_weight`). Networks on given weights (:func:`vanilla_layers`, Prop. 1's :func:`rescaled_tanh_mlp`) and
Table 3's block weights (skew-symmetric, -C^T C, correlated: no Dense init) are written out, through
:func:`normalize`, the one batch-norm forward.

The dataset-level GSC of every experiment in the paper (section I.2, "Expected GSC") is

    GSC_D(l, 0) = Q_D ||J_l^0||_qm  Q_D ||f_l||_2 / Q_D |f_0|,   ||J_l^0||_qm = ||d f_0 / d f_l||_2 / sqrt(d_l),

three separate quadratic means over the datapoints (not Q_D of the per-datapoint GSC); the gradient rows
come from backpropagating sum_i f_0^(i), which includes batch norm's cross-datapoint terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from ..core.activations import parse_activation
from ..core.batchnorm import batch_norm
from ..core.device import configure_torch, default_device, generator, haar_orthogonal
from ..core.layers import Activation, BatchNorm, Dense, LayerNorm, Residual, Serial, repeat, serial
from .arch import ActivationLayer, ArchNetwork, DenseLayer, twin_module

NORMS = ("none", "layer", "batch", "lolayer")
MATRICES = ("gaussian", "orthogonal", "looks-linear")
SKIPS = ("none", "identity", "gaussian")
Layer = Callable[[torch.Tensor], torch.Tensor]
_NORM_LAYERS = {"none": [], "batch": [BatchNorm()], "layer": [LayerNorm()], "lolayer": [LayerNorm(centre=False)]}
BATCH_ELEMENTS = 2**19  # activation entries per batch of networks in simulate_architecture (bounds its memory)


# --------------------------------------------------------------------------------------------
# the GSC of a torch network


def dataset_gsc(outputs: Sequence[torch.Tensor], error: torch.Tensor) -> np.ndarray:
    """GSC_D(l, 0) of each layer output f_l (..., B, d_l) in ``outputs`` w.r.t. the per-datapoint error f_0 (..., B).

    Leading axes (...) index independent networks: one backward pass of the summed errors gives each network's
    gradients. Returns (..., L). ``outputs`` must be in the autograd graph of ``error`` (the graph is freed afterwards).
    """
    for f in outputs:
        if error.ndim == 0 or f.shape[:-1] != error.shape:
            raise ValueError(f"error must hold one value f_0 per datapoint, shape {tuple(f.shape[:-1])} for an "
                             f"output of shape {tuple(f.shape)}, got {tuple(error.shape)}")
    grads = torch.autograd.grad(error.sum(), list(outputs))
    return gsc_from_gradients(outputs, grads, error)


def gsc_from_gradients(outputs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor],
                       error: torch.Tensor) -> np.ndarray:
    """GSC_D(l, 0) from layer outputs f_l (..., B, d_l), their gradient rows d f_0 / d f_l and the error f_0 (..., B).

    Q_D ||J_l^0||_qm = ||d f_0 / d f_l||_F / sqrt(B d_l) and Q_D ||f_l||_2 = ||f_l||_F / sqrt(B), one pass each;
    returns (..., L), leading axes as in :func:`dataset_gsc`.
    """
    q_error = error.detach().square().mean(-1).sqrt()
    if (q_error == 0).any():
        raise ValueError("the GSC divides by Q_D |f_0|, which is 0 here")
    values = []
    for f, g in zip(outputs, grads):
        n_points, width = f.shape[-2:]
        q_grad = torch.linalg.vector_norm(g, dim=(-2, -1)) / math.sqrt(n_points * width)
        q_norm = torch.linalg.vector_norm(f.detach(), dim=(-2, -1)) / math.sqrt(n_points)
        values.append(q_grad * q_norm / q_error)
    return torch.stack(values, -1).cpu().numpy()


def network_gsc(layers: Sequence[Layer], inputs: torch.Tensor, labels: torch.Tensor) -> np.ndarray:
    """GSC_D(l, 0), l = 0..L, of the network f_1 o ... o f_L with the dot-product error f_0 = f_1 . y.

    ``layers`` lists f_L, ..., f_1 in the order they are applied (f_L first, to the inputs (B, d));
    ``labels`` y has the shape of the prediction f_1. Entry l of the result is GSC_D(l, 0) in the
    paper's numbering (entry 0 is GSC(0, 0) = 1, entry L that of the lowest layer f_L).
    """
    if len(layers) == 0:
        raise ValueError("the network needs at least one layer")
    outputs, x = [], inputs.detach().requires_grad_(True)
    for layer in layers:
        x = layer(x)
        outputs.append(x)
    if labels.shape != x.shape:
        raise ValueError(f"labels have shape {tuple(labels.shape)}, the prediction f_1 {tuple(x.shape)}")
    error = (x * labels).sum(-1)
    return np.concatenate([[1.0], dataset_gsc(outputs, error)[::-1]])


# --------------------------------------------------------------------------------------------
# layers of the paper (I.1)


def normalize(x: torch.Tensor, norm: str) -> torch.Tensor:
    """Batch norm (per column over the batch), layer norm (per row), length-only layer norm x / qm(x), or none.

    All three are :func:`~bnsym.core.batchnorm.batch_norm` with eps = 0: over the batch axis, over the feature
    axis, and over the feature axis without centring.
    """
    if norm == "none":
        return x
    if norm not in NORMS:
        raise ValueError(f"unknown normalization {norm!r}; choose from {NORMS}")
    return batch_norm(x, dim=-2 if norm == "batch" else -1, centre=norm != "lolayer")


def looks_linear(m: int, n: int, position: str, gen: torch.Generator, device) -> torch.Tensor:
    """Looks-linear m x n matrix of section H (0-based pairs (2i, 2i + 1)); position lowest/intermediate/highest.

    relu(a) - relu(-a) = a makes a ReLU network of such layers an orthogonal linear map at init.
    """
    if position == "lowest":
        base = haar_orthogonal(max(m // 2, n), gen, device)[: m // 2, :n] * max(math.sqrt(m / (2 * n)), 1.0)
        return torch.stack([base, -base], dim=1).reshape(m, n)
    if position == "highest":
        base = haar_orthogonal(max(m, n // 2), gen, device)[:m, : n // 2] * max(math.sqrt(2 * m / n), 1.0)
        return torch.stack([base, -base], dim=2).reshape(m, n)
    base = haar_orthogonal(max(m // 2, n // 2), gen, device)[: m // 2, : n // 2] * max(math.sqrt(m / n), 1.0)
    block = torch.stack([torch.stack([base, -base], dim=-1), torch.stack([-base, base], dim=-1)], dim=1)
    return block.reshape(m, n)


def weight(m: int, n: int, matrix: str, after_relu: bool, position: str, gen: torch.Generator, device) -> torch.Tensor:
    """An m x n weight matrix (acting as x W^T on rows x of width n), initialized as in I.1: the weight of the twin
    of ``Dense(gain, init=...)`` (:mod:`bnsym.sim.arch`), gain 2 after a ReLU (He), else 1.

    Gaussian: variance gain / n. Orthogonal (square only): sqrt(gain) times a Haar matrix (the gain the paper's ReLU
    St. Dev. of 0.20 requires; the GSC of a ReLU network does not depend on it). Looks-linear: the intermediate
    layers are the twin's ``init="looks_linear"`` at weight_var 2 (section H's blocks [[Q, -Q], [-Q, Q]] with Q
    max(sqrt(m / n), 1) times a Haar frame); the lowest (outputs paired, inputs not) and highest (inputs paired)
    layers are :func:`looks_linear`, which no Dense init pairs one side of.
    """
    if matrix not in MATRICES:
        raise ValueError(f"unknown matrix type {matrix!r}; choose from {MATRICES}")
    if matrix == "orthogonal" and m != n:
        raise ValueError("orthogonal initialization is used only for square matrices (paper, I.1)")
    if matrix == "looks-linear" and position in ("lowest", "highest"):
        return looks_linear(m, n, position, gen, device)
    gain = 2.0 if after_relu or matrix == "looks-linear" else 1.0
    return dense_weight(m, n, gen, device, gain, matrix.replace("-", "_"))


def dense_weight(m: int, n: int, gen: torch.Generator, device, weight_var: float = 1.0, init: str = "gaussian",
                 networks: int | None = None) -> torch.Tensor:
    """The m x n weight sqrt(weight_var / n) W of the twin of ``Dense(weight_var, init=init)`` (:mod:`bnsym.sim.arch`)
    with n inputs and m outputs, float64, drawn from ``gen`` (the twin draws its bias after it); with ``networks``
    those of that many networks, (networks, m, n)."""
    dense, _ = twin_module(Dense(weight_var, init=init), n, m, networks or 1, gen, torch.device(device),
                           torch.float64)
    weights = dense.scale * dense.weight.detach()
    return weights[0] if networks is None else weights


# --------------------------------------------------------------------------------------------
# the architectures of Table 1


@dataclass(frozen=True)
class Architecture:
    """One row of Table 1: nonlinearity, normalisation, matrix type, skip type, width (100, 200 or "100/200")."""

    phi: str
    norm: str
    matrix: str = "gaussian"
    skip: str = "none"
    width: str = "100"

    def __post_init__(self) -> None:
        parse_activation(self.phi)
        for value, allowed, what in ((self.norm, NORMS, "normalisation"), (self.matrix, MATRICES, "matrix type"),
                                     (self.skip, SKIPS, "skip type")):
            if value not in allowed:
                raise ValueError(f"unknown {what} {value!r}; choose from {allowed}")
        if self.width not in ("100", "200", "100/200"):
            raise ValueError(f"width must be '100', '200' or '100/200', got {self.width!r}")
        if self.matrix == "looks-linear" and self.phi != "relu":
            raise ValueError("looks-linear initialization needs ReLU (relu(a) - relu(-a) = a)")

    @property
    def label(self) -> str:
        return f"{self.phi} | {self.norm} | {self.matrix} | {self.skip} | {self.width}"


@dataclass
class RowResult:
    """Per-seed metrics of one architecture: GSC_D(L, 0) at the lowest linear layer, St. Dev. and Sign Div.
    of the pre-activations of the highest nonlinearity, the GSC_D(l, 0) curve (index l, paper order), and
    St. Dev. and Sign Div. of every nonlinearity's pre-activations (lowest first; Fig. 1B-C, 3B)."""

    gsc: np.ndarray
    std: np.ndarray
    sign_diversity: np.ndarray
    curves: np.ndarray
    std_curves: np.ndarray
    sign_curves: np.ndarray


def _widths(width: str, n_linear: int, dim: int = 100) -> list[int]:
    """d_0 (input), d_1..d_n of the linear layers (I.1: 200 for all but the input/output; 100/200 alternating)."""
    if width == "100":
        inner = [dim] * n_linear
    elif width == "200":
        inner = [200] * (n_linear - 1) + [dim]
    else:
        inner = [200 if j % 2 else dim for j in range(1, n_linear + 1)]
        inner[-1] = dim
    return [dim, *inner]


def _position(j: int, n_linear: int) -> str:
    return "lowest" if j == 0 else "highest" if j == n_linear - 1 else "intermediate"


def gaussian_noise(n_points: int, gen: torch.Generator, device, dim: int = 100) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and labels of I.2: entries N(0, 1/dim), inputs rescaled to length 10 (labels not)."""
    x = torch.randn(n_points, dim, generator=gen, device=device, dtype=torch.float64) / math.sqrt(dim)
    y = torch.randn(n_points, dim, generator=gen, device=device, dtype=torch.float64) / math.sqrt(dim)
    return 10 * x / x.norm(dim=-1, keepdim=True), y


def description(arch: Architecture, depth: int = 50, alpha: float = 1.0) -> Serial:
    """Table 1's network as a :mod:`bnsym.arch` description (I.1; its widths per layer are :func:`_widths`).

    Vanilla: [Dense, norm, phi] x ``depth``, the last without phi; Dense(2) after a ReLU (He), Dense(1) otherwise,
    ``init`` the matrix type (looks-linear at weight_var 2; its lowest and highest layers pair one side only, see
    :func:`weight`). ResNet: Dense(), ``depth // 2`` residuals with the identity or a Dense() skip around
    [norm, phi, Dense] x 2 (the branch times ``alpha``), a final norm. No biases (bias_var 0), norms with eps 0 and no
    affine map.
    """
    phi, norm = Activation(arch.phi), _NORM_LAYERS[arch.norm]
    gain = 2.0 if arch.phi == "relu" else 1.0
    if arch.skip == "none":
        init, looks = arch.matrix.replace("-", "_"), arch.matrix == "looks-linear"
        return serial(*([Dense(gain if j or looks else 1.0, init=init), *norm, *[phi] * (j < depth - 1)]
                        for j in range(depth)))
    if arch.matrix != "gaussian" or arch.width != "100":
        raise ValueError("the paper's ResNets use Gaussian matrices and width 100")
    block = Residual([*norm, phi, Dense(gain)] * 2, alpha, Dense() if arch.skip == "gaussian" else None)
    return serial(Dense(), repeat(block, depth // 2), *norm)


def twin_network(net: Serial, dim: int, gen: torch.Generator, device,
                 widths: Sequence[int] | None = None) -> ArchNetwork:
    """One network of the description ``net`` on ``dim`` input features: its twin modules
    (:func:`~bnsym.sim.arch.twin_module`) in float64, weights drawn from ``gen`` in order, the top-level Dense
    layers of widths ``widths`` (default: all ``dim``), frozen (gradients flow to the activations only)."""
    widths, device = iter(widths or [dim] * len(net)), torch.device(device)
    modules, n_in = [], dim
    for layer in net:
        module, n_in = twin_module(layer, n_in, next(widths) if isinstance(layer, Dense) else n_in, 1, gen, device,
                                   torch.float64)
        modules.append(module.requires_grad_(False))
    return ArchNetwork(modules)


def _twin(arch: Architecture, depth: int, gen: torch.Generator, device, dim: int = 100,
          alpha: float = 1.0) -> ArchNetwork:
    """One network of ``arch``: :func:`twin_network` of :func:`description`, each Dense at its width of :func:`_widths`;
    the lowest and highest looks-linear layers hold :func:`looks_linear`'s one-sided pairs (drawn after the layer's
    own)."""
    widths = _widths(arch.width, depth, dim)[1:] if arch.skip == "none" else None
    twin = twin_network(description(arch, depth, alpha), dim, gen, device, widths)
    if arch.matrix == "looks-linear":
        denses = [m for m in twin.modules() if isinstance(m, DenseLayer)]
        for module, position in ((denses[0], "lowest"), (denses[-1], "highest")):
            m, n = module.weight.shape[-2:]
            module.weight.data = looks_linear(m, n, position, gen, device)[None] / module.scale
    return twin


def _rows(layers: Sequence[object], d: int, gen: torch.Generator, device) -> Layer:
    """The twin of the description ``layers`` at width d (one network, :func:`twin_network`) as a map of rows (n, d)."""
    twin = twin_network(serial(*layers), d, gen, device)
    return lambda v: twin(v[None])[0]


def _stacked(networks: Sequence[ArchNetwork]) -> ArchNetwork:
    """The twins of one description side by side as one twin of len(networks) networks (parameters concatenated
    along the networks' axis)."""
    first = networks[0]
    for name, parameter in first.named_parameters():
        parameter.data = torch.cat([twin.get_parameter(name).data for twin in networks])
    return first


def _forward(network: ArchNetwork, x: torch.Tensor) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Run the twin on x (M, B, d); returns (every top-level layer's output, lowest first; the input of every
    activation, lowest first: a vanilla network's [Dense, norm, phi] outputs and pre-activations, a ResNet's values
    between skip connections (as in Fig. 3) and its branches' normalised pre-activations)."""
    pres: list[torch.Tensor] = []
    hooks = [module.register_forward_pre_hook(lambda _, args: pres.append(args[0]))
             for module in network.modules() if isinstance(module, ActivationLayer)]
    try:
        outputs = network.layer_outputs(x)
    finally:
        for hook in hooks:
            hook.remove()
    return outputs, pres


def _values(t: torch.Tensor) -> float | np.ndarray:
    return t.item() if t.ndim == 0 else t.cpu().numpy()


def preactivation_std(pre: torch.Tensor) -> float | np.ndarray:
    """sqrt((1/d) sum_i Var_D f(i)): quadratic mean over neurons of the std over the datapoints (I.2).

    ``pre`` (B, d) gives a float; (..., B, d), independent networks on the leading axes, an array (...).
    """
    return _values(pre.var(-2, unbiased=False).mean(-1).sqrt())


def sign_diversity(pre: torch.Tensor) -> float | np.ndarray:
    """(1/d) sum_i min(p_i, 1 - p_i), p_i the fraction of datapoints with f(i) > 0 (I.2); 0.5 = fully diverse.

    Shapes as in :func:`preactivation_std`.
    """
    positive = (pre > 0).sum(-2, dtype=torch.float64) / pre.shape[-2]
    return _values(torch.minimum(positive, 1 - positive).mean(-1))


def _simulate_batch(arch: Architecture, n_points: int, seeds: Sequence[int], depth: int,
                    device) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GSC_D curves (lowest recorded layer first), St. Dev. and Sign Div. curves (S, ...) of one network per seed.

    Each seed's generator draws its dataset, then its network (:func:`_twin`); the networks then run side by side,
    as one twin of S networks on inputs (S, n_points, d), with one backward pass of the summed errors.
    """
    inputs, labels, networks = [], [], []
    for seed in seeds:
        gen = generator(seed, device)
        x, y = gaussian_noise(n_points, gen, device)
        inputs.append(x)
        labels.append(y)
        networks.append(_twin(arch, depth, gen, device))
    outputs, pres = _forward(_stacked(networks), torch.stack(inputs).requires_grad_(True))
    curves = dataset_gsc(outputs, (outputs[-1] * torch.stack(labels)).sum(-1))
    return (curves, np.stack([preactivation_std(pre.detach()) for pre in pres], -1),
            np.stack([sign_diversity(pre.detach()) for pre in pres], -1))


def simulate_architecture(
    arch: Architecture, n_points: int, seeds: Sequence[int], depth: int = 50, device: torch.device | str | None = None
) -> RowResult:
    """Table 1's metrics for one architecture on Gaussian noise, one fresh dataset and network per seed (I.2).

    The networks run in batches of seeds whose activations (seeds x n_points x width) stay within
    ``BATCH_ELEMENTS``: the graph of a 50-layer network holds about 3 kB per activation entry.
    """
    if len(seeds) == 0:
        raise ValueError("simulate_architecture needs at least one seed")
    configure_torch()
    device = device or default_device()
    width = 100 if arch.width == "100" else 200
    per_batch = max(1, BATCH_ELEMENTS // (n_points * width))
    batches = [_simulate_batch(arch, n_points, seeds[i:i + per_batch], depth, device)
               for i in range(0, len(seeds), per_batch)]
    curves, std_curves, sign_curves = (np.concatenate(parts) for parts in zip(*batches))
    # paper order: entry 0 of a curve is the highest recorded layer; GSC_D(L, 0) is that of the lowest
    return RowResult(curves[:, 0], std_curves[:, -1], sign_curves[:, -1], curves[:, ::-1].copy(), std_curves,
                     sign_curves)


def table1_cell(config: Mapping[str, Any]) -> dict[str, list[float]]:
    """A sweep task: Table 1's per-seed metrics ``{"gsc", "std", "sign_diversity"}`` of the architecture
    ``config["phi"], ["norm"], ["matrix"], ["skip"], ["width"]`` on ``config["n_points"]`` points, one network and
    dataset per seed of ``config["seeds"]`` (:func:`simulate_architecture`, depth 50)."""
    arch = Architecture(*(str(config[key]) for key in ("phi", "norm", "matrix", "skip", "width")))
    torch.set_num_threads(1)  # one single-threaded task per worker process
    result = simulate_architecture(arch, int(config["n_points"]), [int(seed) for seed in config["seeds"]],
                                   device="cpu")
    return {"gsc": result.gsc.tolist(), "std": result.std.tolist(), "sign_diversity": result.sign_diversity.tolist()}


table1_cell.version = "1"  # part of each result's cache key: bump when the results change


# --------------------------------------------------------------------------------------------
# dilution of a block f(u) = S u + rho(u)


def block_statistics(
    skip: Layer, residual: Layer, u: torch.Tensor, g: torch.Tensor
) -> dict[str, float]:
    """k, the undiluted rate r and the measured block rate r_d of f = skip + residual (Theorem 3).

    u (n, d): block inputs; g (n, d): incoming gradient rows. With Q the quadratic mean over the n rows:
    k = Q||Su|| / Q||rho(u)||, r = Q||g R(u)|| Q||u|| / (Q||rho(u)|| Q||g||) (R the Jacobian of rho),
    r_d the same ratio for f. Also the correlations the theorem assumes to vanish.
    """
    u = u.detach().requires_grad_(True)
    su, rho = skip(u), residual(u)
    (g_r,) = torch.autograd.grad((rho * g).sum(), u, retain_graph=True)
    (g_s,) = torch.autograd.grad((su * g).sum(), u)
    su, rho = su.detach(), rho.detach()

    def q(t: torch.Tensor) -> float:
        return t.square().sum(-1).mean().sqrt().item()

    q_u, q_g = q(u.detach()), q(g)
    return {
        "k": q(su) / q(rho),
        "r": q(g_r) * q_u / (q(rho) * q_g),
        "r_skip": q(g_s) * q_u / (q(su) * q_g),
        "r_d": q(g_r + g_s) * q_u / (q(rho + su) * q_g),
        "forward_correlation": ((su * rho).sum(-1).mean() / (q(su) * q(rho))).item(),
        "backward_correlation": ((g_s * g_r).sum(-1).mean() / (q(g_s) * q(g_r))).item(),
    }


def unit_sphere(n: int, d: int, gen: torch.Generator, device) -> torch.Tensor:
    """n vectors uniform on the unit sphere of R^d (rows)."""
    v = torch.randn(n, d, generator=gen, device=device, dtype=torch.float64)
    return v / v.norm(dim=-1, keepdim=True)


def _gaussian_matrix(m: int, n: int, gen: torch.Generator, device) -> torch.Tensor:
    """Table 3's Gaussian matrices, entries N(0, 1/n): the raw material of :func:`dynamical_weights`."""
    return torch.randn(m, n, generator=gen, device=device, dtype=torch.float64) / math.sqrt(n)


def tanh_residual(beta: float, d: int, gen: torch.Generator, device) -> Layer:
    """rho(v) = W_2 tanh(beta LO(W_1 v)): an SSD residual (Gaussian last layer) whose undiluted rate grows with beta;
    the twin of [Dense, LayerNorm(centre=False, affine=(beta, 0)), tanh, Dense]."""
    return _rows([Dense(), LayerNorm(centre=False, affine=(beta, 0.0)), Activation("tanh"), Dense()], d, gen, device)


def relu_residual(d: int, gen: torch.Generator, device) -> Layer:
    """rho(v) = V relu(W v), Gaussian V, W: positively homogeneous, hence SSD (E.7); the twin of
    [Dense, relu, Dense]."""
    return _rows([Dense(), Activation("relu"), Dense()], d, gen, device)


def layer_tanh_residual(d: int, gen: torch.Generator, device) -> Layer:
    """rho(v) = V tanh(LN(v)): starts with a normalisation layer, so it discards ||v|| and is not SSD; the twin of
    [LayerNorm, tanh, Dense]."""
    return _rows([LayerNorm(), Activation("tanh"), Dense()], d, gen, device)


def scaled(layer: Layer, alpha: float) -> Layer:
    return lambda v: alpha * layer(v)


def calibrate(residual: Layer, u: torch.Tensor, k: float) -> Layer:
    """alpha * residual with alpha chosen so that the identity skip k-dilutes it w.r.t. the samples u."""
    with torch.no_grad():
        ratio = u.square().sum(-1).mean().sqrt() / residual(u).square().sum(-1).mean().sqrt()
    return scaled(residual, (ratio / k).item())


def dilution_of(residual: Layer, v: torch.Tensor) -> float:
    """k of the identity skip against ``residual`` w.r.t. the samples v: Q||v|| / Q||rho(v)||."""
    with torch.no_grad():
        return (v.square().sum(-1).mean().sqrt() / residual(v).square().sum(-1).mean().sqrt()).item()


def compose_identity_blocks(residuals: Sequence[Layer], u: torch.Tensor) -> dict[str, object]:
    """Apply f_b(v) = v + rho_b(v) for b = B, ..., 1 (residuals[0] applied first) to u.

    Returns the composite's measured dilution Q||u|| / Q||f(u) - u|| (S = product of identities) and
    each block's dilution measured in situ, w.r.t. the block's actual input.
    """
    in_situ, v = [], u
    with torch.no_grad():
        for residual in residuals:
            in_situ.append(dilution_of(residual, v))
            v = v + residual(v)
        composite = (u.square().sum(-1).mean().sqrt() / (v - u).square().sum(-1).mean().sqrt()).item()
    return {"composite": composite, "in_situ": np.array(in_situ)}


def normalised_unit_gsc(phi: str, norm: str, width: int, n_points: int, seed: int, device=None) -> float:
    """Measured GSC_D rate of one unit [linear, norm, phi] fed with its mean-field stationary input.

    Input x = phi(z'), z' a batch-standardized Gaussian (B, N); the unit is followed by the dot-product
    error with Gaussian labels; the rate is GSC_D(unit input, 0) / GSC_D(unit output, 0).
    """
    configure_torch()
    device = device or default_device()
    gen = generator(seed, device)
    f = parse_activation(phi).torch
    x = f(normalize(torch.randn(n_points, width, generator=gen, device=device, dtype=torch.float64), "batch"))
    unit = twin_network(serial(Dense(), *_NORM_LAYERS[norm], Activation(phi)), width, gen, device)
    y = torch.randn(n_points, width, generator=gen, device=device, dtype=torch.float64)
    values = network_gsc([lambda v, layer=layer: layer(v[None])[0] for layer in unit.layers], x, y)
    return float(values[-1] / values[1])


# --------------------------------------------------------------------------------------------
# Table 3: ResNets whose blocks mimic dynamical systems (section B.1.2)

DYNAMICAL_INITS = ("gaussian", "skew", "negative-gram", "correlated")


def dynamical_weights(init: str, n_blocks: int, d: int, gen: torch.Generator, device) -> list[torch.Tensor]:
    """Block weights of Table 3, each rescaled to unit qm norm (||W||_F = sqrt(d)).

    (i) gaussian; (ii) skew-symmetric A - A^T; (iii) -C^T C; (iv) gaussian with correlation 0.5 between
    successive blocks, W_{b+1} = 0.5 W_b + sqrt(0.75) N_b.
    """
    if init not in DYNAMICAL_INITS:
        raise ValueError(f"unknown initialization {init!r}; choose from {DYNAMICAL_INITS}")
    weights, previous = [], None
    for _ in range(n_blocks):
        a = _gaussian_matrix(d, d, gen, device)
        if init == "skew":
            a = a - a.T
        elif init == "negative-gram":
            a = -a.T @ a
        elif init == "correlated" and previous is not None:
            a = 0.5 * previous + math.sqrt(0.75) * a
        previous = a
        weights.append(a * math.sqrt(d) / a.norm())
    return weights


def simulate_dynamical_resnet(phi: str, norm: str, init: str, n_points: int, seed: int, n_blocks: int = 50,
                              device=None) -> dict[str, np.ndarray]:
    """One network of Table 3: a linear layer, ``n_blocks`` identity skips around [norm, phi, linear], a final norm.

    Returns log10 GSC_D(L, 0) at the lowest (linear) layer and, per block from the input up, its in-situ
    dilution k_b, its measured (diluted) GSC rate r_d and the undiluted rate r of its residual branch.
    """
    configure_torch()
    device = device or default_device()
    gen = generator(seed, device)
    f = parse_activation(phi).torch
    x, y = gaussian_noise(n_points, gen, device)
    d = x.shape[-1]
    first = _gaussian_matrix(d, d, gen, device)
    weights = dynamical_weights(init, n_blocks, d, gen, device)
    residuals = [lambda v, w=w: f(normalize(v, norm)) @ w.T for w in weights]
    h = (x @ (first * math.sqrt(d) / first.norm()).T).requires_grad_(True)
    inputs, v = [], h
    for residual in residuals:
        inputs.append(v)
        v = v + residual(v)
    outputs = inputs[1:] + [v]
    error = (normalize(v, norm) * y).sum(-1)
    grad_h, *grads = torch.autograd.grad(error.sum(), [h, *outputs])
    value = gsc_from_gradients([h], [grad_h], error)[0]
    blocks = [block_statistics(lambda t: t, res, u.detach(), g) for res, u, g in zip(residuals, inputs, grads)]
    return {
        "log10_gsc": math.log10(value),
        **{key: np.array([b[key] for b in blocks]) for key in ("k", "r_d", "r")},
    }


# --------------------------------------------------------------------------------------------
# Theorem 1: gradient terms by their number of residual factors


def residual_order_terms(g: torch.Tensor, initial: Sequence[torch.Tensor],
                         residual: Sequence[torch.Tensor]) -> torch.Tensor:
    """The gradient g prod_n (i_n + r_n) split by the number j of residual factors: (..., N + 1, d).

    g (..., d) rows (d f_0 / d f_1); ``initial`` and ``residual`` list the Jacobians i_n, r_n (..., d, d) from the
    top (n = 1) down. Entry j sums the C(N, j) terms with exactly j residual factors (section 4.1, F.1), by the
    recursion M_j <- M_j i_n + M_{j-1} r_n.
    """
    if len(initial) != len(residual) or not initial:
        raise ValueError("initial and residual must list the same positive number of Jacobians")
    terms = g.unsqueeze(-2)
    for i_n, r_n in zip(initial, residual):
        through_initial = terms @ i_n
        through_residual = terms @ r_n
        terms = torch.cat([through_initial, torch.zeros_like(through_initial[..., :1, :])], -2)
        terms[..., 1:, :] += through_residual
    return terms


def scaled_orthogonal(n_networks: int, d: int, norms: Sequence[float], gen: torch.Generator,
                      device) -> list[torch.Tensor]:
    """Haar orthogonal (n_networks, d, d) matrices times norms[n]: operator norm exactly norms[n] each; the weights
    of the twin's Dense(norms[n]^2, init="orthogonal")."""
    return [dense_weight(d, d, gen, device, float(norm)**2, "orthogonal", n_networks) for norm in norms]


# --------------------------------------------------------------------------------------------
# Theorem 2 and Proposition 6: macro-layers on the sphere


def macro_layer(x: torch.Tensor, w: torch.Tensor, phi: str) -> torch.Tensor:
    """g(x) = LO(W phi(x)) = sqrt(d) W phi(x) / ||W phi(x)||: [phi, linear, length-only layer norm] (E.6, F.2)."""
    return normalize(parse_activation(phi).torch(x) @ w.transpose(-1, -2), "lolayer")


def macro_tangent_jacobian(x: torch.Tensor, w: torch.Tensor, phi: str) -> torch.Tensor:
    """d g / d x restricted to the sphere's tangent space at x (radius sqrt(d)): (..., d, d), rank d - 1.

    d g / d x = sqrt(d)/||h|| (I - h h^T/||h||^2) W diag(phi'(x)), h = W phi(x), times I - x x^T / ||x||^2.
    """
    f = parse_activation(phi)
    d = x.shape[-1]
    h = f.torch(x) @ w.transpose(-1, -2)
    hn = h / h.norm(dim=-1, keepdim=True)
    eye = torch.eye(d, dtype=x.dtype, device=x.device)
    out_proj = eye - hn.unsqueeze(-1) * hn.unsqueeze(-2)
    xn = x / x.norm(dim=-1, keepdim=True)
    in_proj = eye - xn.unsqueeze(-1) * xn.unsqueeze(-2)
    slope = torch.autograd.functional.vjp(lambda t: f.torch(t), x, torch.ones_like(x))[1]  # phi'(x), elementwise
    jac = (math.sqrt(d) / h.norm(dim=-1))[..., None, None] * out_proj @ (w * slope.unsqueeze(-2))
    return jac @ in_proj


def circle_angles(w: torch.Tensor, phi: str, thetas: torch.Tensor) -> torch.Tensor:
    """Angle of g(x) at x = sqrt(2) (cos theta, sin theta), unwrapped along ``thetas`` (d = 2, Prop. 6)."""
    x = math.sqrt(2) * torch.stack([thetas.cos(), thetas.sin()], -1)
    out = macro_layer(x, w, phi)
    return torch.from_numpy(np.unwrap(torch.atan2(out[..., 1], out[..., 0]).cpu().numpy()))


def fibonacci_sphere(n: int, device=None) -> torch.Tensor:
    """n nearly equal-area points on the unit sphere of R^3 (Fibonacci lattice): an equal-weight quadrature."""
    i = torch.arange(n, dtype=torch.float64, device=device) + 0.5
    z = 1 - 2 * i / n
    angle = math.pi * (1 + math.sqrt(5)) * i
    rho = (1 - z**2).sqrt()
    return torch.stack([rho * angle.cos(), rho * angle.sin(), z], -1)


# --------------------------------------------------------------------------------------------
# Propositions 1, 4 and section 4.5: networks with given weights


def vanilla_layers(phi: str, norm: str, weights: Sequence[torch.Tensor]) -> list[Layer]:
    """f_L, ..., f_1 of a vanilla network: each W (rows act as x W^T) followed by ``norm``, phi between them (I.1)."""
    f, layers = parse_activation(phi).torch, []
    for j, w in enumerate(weights):
        layers.append(lambda v, w=w: v @ w.T)
        if norm != "none":
            layers.append(lambda v: normalize(v, norm))
        if j < len(weights) - 1:
            layers.append(f)
    return layers


def gaussian_weights(widths: Sequence[int], sigma_w: float, gen: torch.Generator, device) -> list[torch.Tensor]:
    """W_j ~ N(0, sigma_w^2 / n_in) of shape (widths[j+1], widths[j]): the twin's Dense(sigma_w^2) weights."""
    return [dense_weight(m, n, gen, device, sigma_w**2) for n, m in zip(widths, widths[1:])]


def rescaled_tanh_mlp(weights: Sequence[torch.Tensor], x: torch.Tensor, big_r: float) -> list[torch.Tensor]:
    """Outputs f'_L, ..., f'_1 of Prop. 1's network f'_l = R^-l f_l(R^l theta', R^(l+1) F') for the MLP
    f_l = tanh(theta_l F) (l >= 2), f_1 = theta_1 F; ``weights`` are theta'_L, ..., theta'_1 (lowest first)."""
    n = len(weights)
    outputs, v = [], x
    for j, w in enumerate(weights):
        level = n - j  # the paper's l of this layer
        inner = v if level == n else big_r ** (level + 1) * v
        h = inner @ (big_r**level * w).T
        v = (torch.tanh(h) if level > 1 else h) / big_r ** (level if level > 1 else 0)
        outputs.append(v)
    return outputs


def train_rescaled_tanh_mlp(weights0: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor, big_r: float,
                            lr: float, n_steps: int) -> dict[str, np.ndarray]:
    """Prop. 1's construction: gradient descent on f' fed R^-1(d f'/d theta') and applying R^-1(Delta theta).

    ``weights0`` are the original theta^(0) (lowest first); f' starts at theta'_l = R^-l theta_l. Returns the final
    predictions f'_1 (B, d) and the Q_D of ||d f'_0 / d f'_l|| for every layer output (lowest first).
    """
    n = len(weights0)
    levels = [n - j for j in range(n)]
    params = [(w / big_r**lv).clone().requires_grad_(True) for w, lv in zip(weights0, levels)]
    for _ in range(n_steps):
        error = (rescaled_tanh_mlp(params, x, big_r)[-1] * y).sum(-1).mean()
        grads = torch.autograd.grad(error, params)
        with torch.no_grad():
            for p, g, lv in zip(params, grads, levels):
                p -= lr * g / big_r**lv / big_r**lv  # R^-1 of the gradient, then R^-1 of the update
    outputs = rescaled_tanh_mlp(params, x, big_r)
    grads = torch.autograd.grad((outputs[-1] * y).sum(), outputs)
    return {"predictions": outputs[-1].detach().cpu().numpy(),
            "gradient_norms": np.array([g.norm(dim=-1).square().mean().sqrt().item() for g in grads])}


def minibatch_error_change(phi: str, weights: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                           batch_size: int) -> dict[str, float]:
    """f_0 of a batch-norm network with full-batch statistics against minibatches of ``batch_size`` (section 4.5).

    Returns the relative change Q_D|f_0^mb - f_0| / Q_D|f_0| and the correlation of the two error vectors.
    """
    layers = vanilla_layers(phi, "batch", weights)

    def error(inputs: torch.Tensor) -> torch.Tensor:
        v = inputs
        for layer in layers:
            v = layer(v)
        return v

    with torch.no_grad():
        full = (error(x) * y).sum(-1)
        mini = torch.cat([(error(xb) * yb).sum(-1) for xb, yb in zip(x.split(batch_size), y.split(batch_size))])
    full_c, mini_c = full - full.mean(), mini - mini.mean()
    return {"relative_change": ((mini - full).square().mean().sqrt() / full.square().mean().sqrt()).item(),
            "correlation": ((full_c * mini_c).sum() / (full_c.norm() * mini_c.norm())).item()}


# --------------------------------------------------------------------------------------------
# ResNets with scaled branches (Fig. 3, B.1.2)


def resnet_profile(phi: str, norm: str, n_blocks: int, n_points: int, seed: int, alpha: float = 1.0,
                   device=None) -> dict[str, np.ndarray]:
    """One ResNet of Fig. 3: a linear layer, ``n_blocks`` identity skips around alpha [norm, phi, linear] x 2,
    a final norm, on the Gaussian noise of I.2.

    Returns GSC_D(l, 0) at every block output (from the input up, the first linear layer first), the sign
    diversity of each block's top pre-activations, and per block its in-situ k_b, undiluted r_b and diluted r_d.
    """
    configure_torch()
    device = device or default_device()
    gen = generator(seed, device)
    x, y = gaussian_noise(n_points, gen, device)
    twin = _twin(Architecture(phi, norm, skip="identity"), 2 * n_blocks, gen, device, alpha=alpha)
    outputs, pres = _forward(twin, x[None].requires_grad_(True))
    body = outputs if norm == "none" else outputs[:-1]  # the first Dense and every block; then the final norm
    error = (outputs[-1] * y).sum(-1)
    grads = torch.autograd.grad(error.sum(), body)
    curve = gsc_from_gradients(body, grads, error)[0]
    blocks = [block_statistics(lambda t: t, lambda t, b=block: b.alpha * b.branch(t), u.detach(), g)
              for block, u, g in zip(twin.layers[1:n_blocks + 1], body, grads[1:])]
    return {"gsc": curve, "sign_diversity": np.array([sign_diversity(p[0]) for p in pres[1::2]]),
            **{key: np.array([b[key] for b in blocks]) for key in ("k", "r", "r_d")}}
