"""Philipp et al.'s architectures trained on scikit-learn's digits, a substitute for CIFAR-10 (Sec. 4.4, I.3, I.4).

A network is a :class:`bnsym.sim.philipp.Architecture` (nonlinearity, normalisation, matrix type, skip type) with
``depth`` linear layers of ``width`` neurons between the 64 pixels and the 10 classes, no biases, normalisation
without scale or shift (I.1). Vanilla: [linear, norm, phi] x (depth - 1), then linear, norm. ResNet (identity
skips): a linear layer, (depth - 2) / 2 skips around [norm, phi, linear] x 2, then norm, phi, linear, norm. The
error is the paper's KL error f_0 = -ln softmax(f_1)_y per datapoint (I.1); SGD minimises its mean over a
minibatch. ``S`` independent networks (seeds, and copies of each seed for several step sizes) train side by side:
weights are (S, fan_out, fan_in), activations (S, batch, features).

Step sizes (I.3): a *single* step size c for every layer, or a *layer-wise* one c_l, set so that a gradient step
on the probe set moves layer l by the relative update ||c_l grad_l|| / ||W_l|| = s delta_l / max(delta). The
targets delta_l come from the selection of I.4, cut down to one full-batch step: for each layer alone, the relative
update size whose single gradient step lowers the mean error most (:func:`best_relative_updates`, Fig. 2A),
smoothed by a least-squares line in log scale over the layers (:func:`smoothed`); the joint scale s is searched
on a grid, as the single step size is.

Measured on a fixed probe set of training images (I.3 "GSC, pre-activation standard deviation and sign
diversity"): GSC_D(l, 0) at each linear layer's output (:func:`bnsym.sim.philipp.gsc_from_gradients`), and the
pre-activation St. Dev. and sign diversity of the highest nonlinearity; after training, the operator norm of each
residual weight matrix W_l(T) - W_l(0) (the residual trick, Sec. 4.2; Fig. 2E).
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from ..core.activations import parse_activation
from ..core.digits import N_CLASSES, digits
from ..core.validation import check_choice, check_real_array, check_seed, check_settings, check_whole_number
from ..sim import philipp as sim
from .loop import Optimizer

SCHEMES = ("single", "layerwise")
DEFAULTS: dict[str, Any] = {"matrix": "gaussian", "skip": "none", "depth": 10, "width": 32, "epochs": 8,
                            "batch_size": 128, "n_seeds": 4, "n_probe": 256,
                            "single_steps": (0.01, 0.03, 0.1, 0.3, 1.0),
                            "layer_scales": (0.01, 0.03, 0.1, 0.3, 1.0), "deltas": tuple(np.logspace(-3, 1, 17))}
MAX_DEPTH, MAX_WIDTH, MAX_SEEDS, MAX_EPOCHS = 200, 1024, 256, 10_000
# Table 2's rows, (phi, norm, matrix, skip), and the paper's CIFAR-10 training errors in per cent (layer-wise
# "custom" step sizes, single step size), printed values for reference
TABLE2 = {
    ("relu", "none", "gaussian", "none"): (31.48, 19.24), ("relu", "layer", "gaussian", "none"): (42.48, 21.23),
    ("relu", "batch", "gaussian", "none"): (34.83, 76.65), ("tanh", "none", "gaussian", "none"): (23.42, 16.22),
    ("tanh", "layer", "gaussian", "none"): (1.92, 17.5), ("tanh", "batch", "gaussian", "none"): (12.31, 23.8),
    ("selu", "none", "gaussian", "none"): (0.24, 1.78), ("relu", "none", "looks-linear", "none"): (0.002, 0.008),
    ("relu", "layer", "looks-linear", "none"): (0.77, 1.2), ("relu", "batch", "looks-linear", "none"): (0.38, 0.19),
    ("tanh", "layer", "gaussian", "identity"): (0.35, 0.27), ("tanh", "batch", "gaussian", "identity"): (0.13, 0.24),
    ("relu", "layer", "gaussian", "identity"): (2.09, 1.49), ("relu", "batch", "gaussian", "identity"): (0.06, 0.096),
    ("selu", "layer", "gaussian", "identity"): (1.55, 1.55),
}


def _layout(arch: sim.Architecture, depth: int, width: int, n_features: int) -> list[tuple[int, int, str, bool]]:
    """(fan_out, fan_in, position, after_relu) of each linear layer, lowest first."""
    relu = arch.phi == "relu"
    shapes = [(width, n_features)] + [(width, width)] * (depth - 2) + [(N_CLASSES, width)]
    return [(m, n, sim._position(j, depth), relu and j > 0) for j, (m, n) in enumerate(shapes)]


def init_weights(arch: sim.Architecture, depth: int, width: int, n_seeds: int, seed: int,
                 n_features: int = 64) -> list[torch.Tensor]:
    """The weights W_1 (lowest) .. W_depth, each (S, fan_out, fan_in) in float32, drawn as in I.1 (Gaussian with the
    He gain after a ReLU, orthogonal, looks-linear), one independent network per seed."""
    gen = torch.Generator().manual_seed(seed)
    layers = [[] for _ in range(depth)]
    for _ in range(n_seeds):
        for j, (m, n, position, after_relu) in enumerate(_layout(arch, depth, width, n_features)):
            layers[j].append(sim.weight(m, n, arch.matrix, after_relu, position, gen, "cpu"))
    return [torch.stack(ws).float() for ws in layers]


def forward(arch: sim.Architecture, weights: Sequence[torch.Tensor],
            x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """The prediction f_1 (S, B, 10) for inputs x (B, 64) or (S, B, 64), the output of every linear layer (lowest
    first) and the pre-activations of every nonlinearity (lowest first)."""
    phi = parse_activation(arch.phi).torch
    outputs, pres = [], []

    def linear(v: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        outputs.append(v @ w.mT)
        return outputs[-1]

    def unit(v: torch.Tensor) -> torch.Tensor:
        pres.append(sim.normalize(v, arch.norm))
        return phi(pres[-1])

    if arch.skip == "none":
        v = x
        for w in weights[:-1]:
            v = unit(linear(v, w))
        return sim.normalize(linear(v, weights[-1]), arch.norm), outputs, pres
    v = linear(x, weights[0])
    inner = weights[1:-1]
    for first, second in zip(inner[::2], inner[1::2]):
        v = v + linear(unit(linear(unit(v), first)), second)
    return sim.normalize(linear(unit(v), weights[-1]), arch.norm), outputs, pres


def errors(prediction: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The KL error f_0 = -ln softmax(f_1)_y of each datapoint, (S, B)."""
    return F.cross_entropy(prediction.mT, labels.expand(len(prediction), -1), reduction="none")


def classification_error(arch: sim.Architecture, weights: Sequence[torch.Tensor], x: torch.Tensor,
                         labels: torch.Tensor) -> np.ndarray:
    """The fraction of x misclassified by each network (S,), batch norm over all of x (full-batch statistics)."""
    with torch.no_grad():
        prediction = forward(arch, weights, x)[0]
        wrong = (prediction.argmax(-1) != labels) | ~torch.isfinite(prediction).all(-1)
    return wrong.double().mean(-1).numpy()


def measure(arch: sim.Architecture, weights: Sequence[torch.Tensor], x: torch.Tensor,
            labels: torch.Tensor) -> dict[str, np.ndarray]:
    """On the probe set x: GSC_D(l, 0) at every linear layer's output (S, depth; lowest first), and the
    pre-activation St. Dev. and sign diversity of the highest nonlinearity (S,)."""
    prediction, outputs, pres = forward(arch, [w.detach() for w in weights], x.detach().requires_grad_(True))
    error = errors(prediction, labels)
    grads = torch.autograd.grad(error.sum(), outputs)
    gsc = np.array([sim.gsc_from_gradients([o[s] for o in outputs], [g[s] for g in grads], error[s])
                    for s in range(len(error))])
    top = pres[-1].detach()
    return {"gsc": gsc, "std": np.array([sim.preactivation_std(p) for p in top]),
            "sign_diversity": np.array([sim.sign_diversity(p) for p in top])}


def _mean_error_gradients(arch: sim.Architecture, weights: Sequence[torch.Tensor], x: torch.Tensor,
                          labels: torch.Tensor) -> list[torch.Tensor]:
    """The gradient of each network's mean error on (x, labels) with respect to each weight matrix."""
    params = [w.detach().requires_grad_(True) for w in weights]
    return list(torch.autograd.grad(errors(forward(arch, params, x)[0], labels).mean(-1).sum(), params))


def _norms(t: torch.Tensor) -> torch.Tensor:
    """Frobenius norm of each network's matrix, (S, 1, 1)."""
    return t.flatten(1).norm(dim=-1)[:, None, None]


def best_relative_updates(arch: sim.Architecture, weights: Sequence[torch.Tensor], x: torch.Tensor,
                          labels: torch.Tensor, deltas: Sequence[float]) -> np.ndarray:
    """For each network and linear layer l alone, the relative update size delta = ||Delta W_l|| / ||W_l|| (one of
    ``deltas``) of the single gradient step on W_l that lowers the mean error on (x, labels) most; (S, depth).

    The selection of I.4 (one epoch of one layer per step size, the lowest training error wins) cut down to one
    full-batch step per step size: the paper's Fig. 2A compares these sizes with 1/GSC(l, 0).
    """
    grads, n, g = _mean_error_gradients(arch, weights, x, labels), len(weights[0]), len(deltas)
    sizes = torch.tensor(list(deltas), dtype=weights[0].dtype).repeat_interleave(n)[:, None, None]
    best = np.empty((n, len(weights)))
    with torch.no_grad():
        for j, (w, grad) in enumerate(zip(weights, grads)):
            step = w.repeat(g, 1, 1) - sizes * (_norms(w) / _norms(grad).clamp_min(1e-30) * grad).repeat(g, 1, 1)
            trial = [step if i == j else v.repeat(g, 1, 1) for i, v in enumerate(weights)]
            loss = errors(forward(arch, trial, x)[0], labels).mean(-1).nan_to_num(math.inf).reshape(g, n)
            best[:, j] = np.asarray(deltas)[loss.argmin(0).numpy()]
    return best


def smoothed(best: np.ndarray) -> np.ndarray:
    """I.4's smoothing: the least-squares line through log(best) against the layer index (all networks' points),
    evaluated at every layer; (depth,)."""
    best = check_real_array(best, "best", 2, low=0.0, open_low=True)
    layers = np.broadcast_to(np.arange(best.shape[-1]), best.shape)
    slope, intercept = np.polyfit(layers.ravel(), np.log(best).ravel(), 1)
    return np.exp(intercept + slope * np.arange(best.shape[-1]))


def train(arch: sim.Architecture, weights: Sequence[torch.Tensor], steps: torch.Tensor, epochs: int,
          batch_size: int, seed: int, n_probe: int) -> dict[str, np.ndarray]:
    """SGD (:class:`bnsym.train.loop.Optimizer`) with step size ``steps[s, l]`` for network s and layer l, on the
    digits training set; ``epochs`` passes of minibatches of ``batch_size`` (a fresh order per network and epoch, the
    remainder dropped).

    Returns per epoch (index 0: at initialisation) the training classification error and, on the first
    ``n_probe`` training images, GSC_D(L, 0) at the lowest linear layer, the St. Dev. and sign diversity of the
    highest nonlinearity, (S, epochs + 1) each; the largest relative update ||Delta W_l|| / ||W_l|| of each layer
    over training and the operator norm of W_l(T) - W_l(0), (S, depth) each.
    """
    data = digits()
    x, y, n = data.x_train, data.y_train, len(weights[0])
    gen = torch.Generator().manual_seed(seed)
    initial = [w.detach().clone() for w in weights]
    params = [w.detach().clone().requires_grad_(True) for w in weights]
    curves: dict[str, list[np.ndarray]] = {"error": [], "gsc": [], "std": [], "sign_diversity": []}
    largest = torch.zeros(n, len(params), dtype=torch.float64)

    def record() -> None:
        curves["error"].append(classification_error(arch, params, x, y))
        probe = measure(arch, params, x[:n_probe], y[:n_probe])
        curves["gsc"].append(probe["gsc"][:, 0])
        curves["std"].append(probe["std"])
        curves["sign_diversity"].append(probe["sign_diversity"])

    record()
    opt = Optimizer(params, "sgd", steps)  # layer-wise: network s moves layer j by steps[s, j] times its gradient
    for _ in range(epochs):
        order = torch.stack([torch.randperm(len(y), generator=gen) for _ in range(n)])
        for index in order[:, :len(y) - len(y) % batch_size].split(batch_size, dim=1):
            grads = torch.autograd.grad(errors(forward(arch, params, x[index])[0], y[index]).mean(-1).sum(), params)
            with torch.no_grad():
                norms = [_norms(w) for w in params]
                for j, (update, norm) in enumerate(zip(opt.apply(grads), norms)):
                    largest[:, j] = torch.maximum(largest[:, j], (_norms(update) / norm).flatten().double())
        record()
    with torch.no_grad():
        diffs = [w - w0 for w, w0 in zip(params, initial)]
        residual = torch.stack([torch.linalg.matrix_norm(d.nan_to_num(0.0, 0.0, 0.0), ord=2)
                                .where(torch.isfinite(d).flatten(1).all(-1), math.inf) for d in diffs], -1)
    return {**{key: np.stack(value, -1) for key, value in curves.items()},
            "largest_relative_update": largest.nan_to_num(math.inf).numpy(),
            "residual_norm": residual.double().nan_to_num(math.inf).numpy()}


def _json(values: np.ndarray) -> list:
    """Nested lists of floats, None where a value is not finite (a diverged network): JSON has no NaN or inf."""
    return np.where(np.isfinite(values), values, None).tolist()


def validate(config: Mapping[str, Any]) -> dict:
    """The configuration completed with ``DEFAULTS`` and checked; ValueError naming a bad or unknown setting.

    ``phi`` and ``norm`` are required; a ResNet (``skip="identity"``) needs an even depth of at least 4."""
    c = check_settings(config, DEFAULTS, ("phi", "norm"))
    norm = check_choice(c["norm"], "norm", sim.NORMS)
    matrix = check_choice(c["matrix"], "matrix", ("gaussian", "looks-linear"))  # orthogonal: square matrices only
    skip = check_choice(c["skip"], "skip", ("none", "identity"))
    if matrix == "looks-linear" and c["phi"] != "relu":
        raise ValueError(f"looks-linear initialization needs phi = 'relu' (relu(a) - relu(-a) = a), got "
                         f"{c['phi']!r:.40}")
    c["arch"] = sim.Architecture(c["phi"], norm, matrix, skip)
    c["depth"] = check_whole_number(c["depth"], "depth", 2, MAX_DEPTH, "the layers run one after another")
    if c["skip"] == "identity" and (c["depth"] < 4 or c["depth"] % 2 or c["matrix"] != "gaussian"):
        raise ValueError(f"a ResNet needs an even depth >= 4 (a first and a last linear layer around blocks of two) "
                         f"and Gaussian matrices, got depth {c['depth']} and {c['matrix']!r}")
    c["width"] = check_whole_number(c["width"], "width", 2, MAX_WIDTH, "a layer holds width^2 weights per network")
    if c["matrix"] == "looks-linear" and c["width"] % 2:
        raise ValueError(f"looks-linear layers pair neurons: the width must be even, got {c['width']}")
    c["epochs"] = check_whole_number(c["epochs"], "epochs", 1, MAX_EPOCHS)
    c["n_seeds"] = check_whole_number(c["n_seeds"], "n_seeds", 2, MAX_SEEDS, "a spread needs two networks")
    c["batch_size"] = check_whole_number(c["batch_size"], "batch_size", 2, 1437, "a step takes that many of the 1437 "
                                         "training images, and batch norm of one image is 0")
    c["n_probe"] = check_whole_number(c["n_probe"], "n_probe", 2, 1437, "the probe set is a part of the training set")
    for key in ("single_steps", "layer_scales", "deltas"):
        c[key] = check_real_array(c[key], key, 1, low=0.0, open_low=True).ravel().tolist()
    c["seed"] = check_seed(c["seed"])
    return c


def run_cell(config: Mapping[str, Any]) -> dict:
    """One architecture of Table 2 on digits: the Fig. 2A selection at initialisation, then both step-size schemes.

    ``config``: ``phi``, ``norm`` and optionally the other keys of ``DEFAULTS`` and ``seed``. The ``n_seeds``
    networks are trained once per value of ``single_steps`` (the single step size c) and once per value of
    ``layer_scales`` (the joint scale of the smoothed layer-wise relative updates), every value from the same
    initial weights. Returns, lowest layer first: ``gsc_init`` (S, depth), ``best_delta`` (S, depth), ``smoothed``
    (depth,), and per scheme its ``values``, ``final_error`` (values, S), the index ``best`` of the value of lowest
    mean final error, and that value's curves and matrices (see :func:`train`).
    """
    c = validate(config)
    torch.set_num_threads(1)  # one single-threaded task per worker process: small products, no oversubscription
    arch, data = c["arch"], digits()
    weights = init_weights(arch, c["depth"], c["width"], c["n_seeds"], c["seed"], data.n_features)
    x, y = data.x_train[:c["n_probe"]], data.y_train[:c["n_probe"]]
    at_init = measure(arch, weights, x, y)
    best = best_relative_updates(arch, weights, x, y, c["deltas"])
    profile = smoothed(best)
    grads = _mean_error_gradients(arch, weights, x, y)
    layerwise = torch.stack([(_norms(w) / _norms(g).clamp_min(1e-30)).flatten() for w, g in zip(weights, grads)], -1)
    layerwise = layerwise * torch.tensor(profile / profile.max(), dtype=layerwise.dtype)
    schemes = {"single": [torch.full_like(layerwise, value) for value in c["single_steps"]],
               "layerwise": [value * layerwise for value in c["layer_scales"]]}
    result = {"gsc_init": _json(at_init["gsc"]), "std_init": _json(at_init["std"]),
              "sign_diversity_init": _json(at_init["sign_diversity"]), "best_delta": _json(best),
              "smoothed": _json(profile)}
    n = c["n_seeds"]
    for scheme, steps in schemes.items():
        runs = train(arch, [w.repeat(len(steps), 1, 1) for w in weights], torch.cat(steps), c["epochs"],
                     c["batch_size"], c["seed"], c["n_probe"])
        final = runs["error"][:, -1].reshape(len(steps), n)
        chosen = int(np.argmin(final.mean(-1)))
        rows = slice(chosen * n, (chosen + 1) * n)
        result[scheme] = {"values": c["single_steps" if scheme == "single" else "layer_scales"],
                          "final_error": _json(final), "best": chosen,
                          **{key: _json(value[rows]) for key, value in runs.items()}}
    return result


run_cell.version = "2"  # part of each result's cache key: bump when the results of run_cell change
run_cell.validate = validate  # the sweep runner checks every configuration before submitting any


def log_slopes(values: object) -> np.ndarray:
    """The least-squares slope of log(values) against the layer index, one per row (per network) of ``values``
    (networks, layers; positive entries): the per-layer growth rate of a profile in log scale (Figs. 2A, 2E)."""
    values = check_real_array(values, "values", 2, low=0.0, open_low=True)
    layers = np.arange(values.shape[-1]) - (values.shape[-1] - 1) / 2
    logs = np.log(values)
    return ((logs - logs.mean(-1, keepdims=True)) * layers).sum(-1) / (layers**2).sum()


#: Table 2's exploding ("chaotic") architectures, whose layer-wise step sizes the paper finds better than one.
EXPLODING = (("relu", "batch", "gaussian", "none"), ("tanh", "layer", "gaussian", "none"),
             ("tanh", "batch", "gaussian", "none"), ("selu", "none", "gaussian", "none"))
LEARNED_ERROR = 0.8  # a final training error below this has left chance (0.9 on ten classes)


def layerwise_gain(row: Mapping[str, Any]) -> tuple[np.ndarray, float]:
    """Table 2's claim for one architecture: per network, the single step size's final training error minus the
    layer-wise one's (positive: layer-wise trains better; both from the same initial weights, each scheme at the
    value of its grid with the lowest mean), over the networks where at least one scheme left chance (below
    ``LEARNED_ERROR``: where neither learns, the schemes are not compared); and the paper's difference (single
    minus custom, CIFAR-10, as a fraction)."""
    single, layerwise = (np.asarray(row[scheme]["error"], dtype=float)[:, -1] for scheme in SCHEMES)
    learned = np.minimum(single, layerwise) < LEARNED_ERROR
    custom, plain = TABLE2[(row["phi"], row["norm"], row["matrix"], row["skip"])]
    return (single - layerwise)[learned], (plain - custom) / 100
