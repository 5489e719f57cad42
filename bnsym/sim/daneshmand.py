"""Daneshmand et al. 2020's networks: random MLPs at initialisation and small ReLU MLPs trained on digits.

Figs. 1, 2, 4, 5 and 6 of the paper in miniature. H is d features x N samples, as in the paper; n networks run at
once (one batched matmul per layer, weights (n, d_out, d_in)). Inits (fan_in = layer input size):

* ``"torch"``: nn.Linear's default, weights and biases U(-1/sqrt(fan_in), 1/sqrt(fan_in));
* ``"asymmetric"``: weights U(0, 2/sqrt(fan_in)) (same variance, mean 1/sqrt(fan_in); Fig. 5), default biases;
* ``"he"``: weights N(0, 2/fan_in), no bias; ``"gaussian"``: weights N(0, 1/fan_in), no bias (linear nets).

Batch norm is train-mode with or without centring and no affine parameters (their initial values, gain 1 and
shift 0, are what the paper's analysis assumes). Training is plain SGD, after Algorithm 1's rank pre-training
(Adam steps that maximise r(H_L), eq. 4, of the last hidden layer on fresh minibatches) if asked. The theory that
these networks check (the mean-field cosine map, the rank notions) is :mod:`bnsym.rank`; it reaches a simulator
through its caller.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from ..core.batchnorm import batch_norm, batch_norm_forward
from ..core.device import generator
from ..core.digits import digits
from ..core.validation import (
    check_choice,
    check_draws,
    check_eps,
    check_flag,
    check_float_dtype,
    check_layers,
    check_memory,
    check_real_array,
    check_real_tensor,
    check_seed,
    check_variance,
    check_whole_number,
    check_width,
)
from ..train.loop import Optimizer

INITS = ("torch", "asymmetric", "he", "gaussian")
INIT_VARIANCES = {"torch": (1 / 3, 1 / 3), "he": (2.0, 0.0), "gaussian": (1.0, 0.0)}  # (s_w^2, s_b^2 fan_in)
RankBound = Callable[[torch.Tensor], torch.Tensor]
Alignment = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
MAX_EPOCHS = 10**5  # epochs and rank pre-training steps run one after another
MAX_LR = float(torch.finfo(torch.float32).max)  # a larger learning rate is not a float32 number
PRETRAIN_BATCH = 64  # samples per step of Algorithm 1's rank pre-training
PROBE = 128  # training digits on which the alignment of per-example gradients is measured


def init_variances(init: str, fan_in: int) -> tuple[float, float]:
    """(s_w^2, s_b^2) of a zero-mean init: weights of variance s_w^2 / fan_in, biases of variance s_b^2."""
    init = check_choice(init, "init (a zero-mean init)", INIT_VARIANCES)
    fan_in = check_width(fan_in, name="fan_in")
    return INIT_VARIANCES[init][0], INIT_VARIANCES[init][1] / fan_in


def _layer(gen: torch.Generator, n: int, fan_in: int, fan_out: int, init: str, dtype: torch.dtype
           ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights (n, fan_out, fan_in) and biases (n, fan_out, 1) or None, for the named init."""
    shape, bound = (n, fan_out, fan_in), 1 / math.sqrt(fan_in)
    device = gen.device
    if init in ("torch", "asymmetric"):
        u = torch.rand(shape, generator=gen, device=device, dtype=dtype)
        w = (2 * u - 1) * bound if init == "torch" else 2 * u * bound
        b = (2 * torch.rand(n, fan_out, 1, generator=gen, device=device, dtype=dtype) - 1) * bound
        return w, b
    variance = {"he": 2.0, "gaussian": 1.0}[init] / fan_in
    return math.sqrt(variance) * torch.randn(shape, generator=gen, device=device, dtype=dtype), None


def batch_norm_rows(h: torch.Tensor, centre: bool = True, eps: float = 0.0) -> torch.Tensor:
    """Batch norm of every feature (row) of h (..., d, N) over the N samples, with or without centring."""
    h = check_real_tensor(h, "h (a matrix (..., d, N) of d features x N samples)", min_ndim=2)
    centre, eps = check_flag(centre, "centre"), check_eps(eps)
    largest = h.abs().amax(-1, keepdim=True)
    exponent = torch.frexp(torch.where(largest > 0, largest, 1))[1]
    unit = torch.ldexp(h, -exponent)  # each row by a power of 2 (exact): its mean and square never overflow
    normalised, rms = batch_norm_forward(unit, torch.ldexp(torch.full_like(largest, eps), -2 * exponent),
                                         centre=centre)  # eps scaled as the row: the same map
    if eps == 0 and (rms == 0).any():
        raise ValueError("h has a feature (row) that is " + ("constant over the samples" if centre else "0")
                         + ": batch norm divides by its root mean square, 0 (eps > 0 keeps it from 0)")
    return normalised


def representations(x: torch.Tensor, depths: list[int], width: int, n_networks: int, init: str = "torch",
                    bn: bool = False, centre: bool = True, relu: bool = True, seed: int = 0,
                    dtype: torch.dtype = torch.float32) -> dict[int, torch.Tensor]:
    """The hidden representations H_l (n_networks, width, N) of random MLPs at the given depths.

    ``x`` is the input batch, d_in features x N samples (shared by all networks). Layer: h = W x + b, batch norm
    of each feature over the batch if ``bn``, then ReLU if ``relu``. ``dtype`` float32 mimics the paper's runs.
    Networks without batch norm or biases are rescaled by one number per layer (rank and cosines unchanged).
    """
    x = check_real_tensor(x, "x (d_in features x N samples)", min_ndim=2)
    if x.ndim != 2:
        raise ValueError(f"x must be one matrix of d_in features x N samples, got shape {tuple(x.shape)}")
    depths = {check_layers(layer, "every entry of depths (the layers to return)")
              for layer in check_real_array(depths, "depths (the layers to return)", min_ndim=1).ravel().tolist()}
    width, n_networks = check_width(width), check_draws(n_networks, "n_networks", 1)
    init, seed, dtype = check_choice(init, "init", INITS), check_seed(seed), check_float_dtype(dtype)
    bn, centre, relu = check_flag(bn, "bn"), check_flag(centre, "centre"), check_flag(relu, "relu")
    if bn and x.shape[1] < 2:
        raise ValueError("x must have N >= 2 samples (columns) with bn: batch norm of one sample divides by 0")
    check_memory(n_networks * (len(depths) + 1), max(width, x.shape[0]), x.shape[1],
                 "n_networks (x the layers returned) x max(width, d_in) x N")
    gen = generator(seed, x.device)
    h = x.to(dtype).expand(n_networks, *x.shape)
    out = {}
    for layer in range(1, max(depths) + 1):
        w, b = _layer(gen, n_networks, h.shape[-2], width, init, dtype)
        h = w @ h + (b if b is not None else 0)
        if bn:
            h = batch_norm(h, centre=centre)  # every feature (row) over the N samples; NaN if diverged
        if relu:
            h = torch.relu(h)
        if not bn and b is None:  # rank-neutral global rescaling, so deep float32 products neither overflow nor vanish
            h = h / h.square().mean((-2, -1), keepdim=True).sqrt()
        if layer in depths:
            out[layer] = h
    if not all(torch.isfinite(h).all() for h in out.values()):
        raise ValueError(f"the representations leave {dtype}'s range: x is too large or too small for it, or (with "
                         "bn) a feature is constant over the samples of x")
    return out


def mean_pair_cosine(H: torch.Tensor) -> np.ndarray:
    """The mean over sample pairs a < b of cos(h_a, h_b), per network, for H (..., d, N)."""
    H = check_real_tensor(H, "H (a matrix (..., d, N) of d features x N samples)", min_ndim=2)
    if H.shape[-1] < 2:
        raise ValueError(f"H must have N >= 2 samples (columns) to have a pair, got shape {tuple(H.shape)}")
    largest = H.abs().amax(-2, keepdim=True)
    if (largest == 0).any():
        raise ValueError("H has a sample (column) equal to 0, whose cosine with another is undefined")
    return _mean_pair_cosine(torch.ldexp(H, -torch.frexp(largest)[1]))  # each column by a power of 2: no overflow


def _mean_pair_cosine(H: torch.Tensor) -> np.ndarray:
    """:func:`mean_pair_cosine` without checks."""
    unit = H / H.norm(dim=-2, keepdim=True)
    cos = unit.mT @ unit
    n = H.shape[-1]
    return ((cos.sum((-2, -1)) - cos.diagonal(0, -2, -1).sum(-1)) / (n * (n - 1))).double().cpu().numpy()


def gaussian_relu_cosines(depth: int, s_w2: float, s_b2: float, width: int, n_samples: int, n_networks: int,
                          seed: int = 0) -> np.ndarray:
    """Simulated mean post-ReLU pair cosine at layers 1..depth, (depth, n_networks): Gaussian weights of variance
    s_w2 / width, biases of variance s_b2 (:func:`init_variances` gives an init's).

    Orthogonal inputs (cosine 0, unit second moment). Given the layer's input x (width x N), the rows of W x + b are
    i.i.d. N(0, s_w^2 x^T x / fan_in + s_b^2 11^T): sampling them from that N x N covariance is equal in law to
    drawing W (Gaussian), at a cost of O(width N^2) instead of O(width^2 N).
    """
    depth, width = check_layers(depth, "depth"), check_width(width)
    s_w2, s_b2 = check_variance(s_w2, "s_w2", positive=True), check_variance(s_b2, "s_b2", positive=False)
    n_samples = check_whole_number(n_samples, "n_samples", 2, width,
                                   "the inputs are orthogonal, at most width of them, and a cosine needs a pair")
    n_networks, seed = check_draws(n_networks, "n_networks", 1), check_seed(seed)
    check_memory(n_networks, width, n_samples, "n_networks x width x n_samples")
    gen = generator(seed, "cpu")
    q, _ = torch.linalg.qr(torch.randn(n_networks, width, n_samples, generator=gen, dtype=torch.float64))
    x = math.sqrt(width) * q
    ones = torch.ones(n_samples, n_samples, dtype=torch.float64)
    eye = torch.eye(n_samples, dtype=torch.float64)
    out = []
    for _ in range(depth):
        cov = s_w2 * x.mT @ x / width + s_b2 * ones
        root = torch.linalg.cholesky_ex(cov + 1e-12 * cov.diagonal(0, -2, -1).mean(-1)[:, None, None] * eye)[0]
        z = torch.randn(n_networks, width, n_samples, generator=gen, dtype=torch.float64)
        x = torch.relu(z @ root.mT)
        out.append(_mean_pair_cosine(x))
    cosines = np.stack(out)
    if not np.isfinite(cosines).all():
        raise ValueError(f"s_w2 = {s_w2:g} and s_b2 = {s_b2:g} over depth = {depth} layers give a sample with no "
                         f"cosine: its representation overflows float64, vanishes, or has all {width} ReLUs off "
                         "(likely at a small width: use a larger one, or another seed)")
    return cosines



# --- training on digits (the training split of bnsym.core.digits) -----------------------------------------------------


@dataclass(frozen=True)
class TrainingRun:
    """Per-network results: ``loss`` (n, epochs + 1) full-batch training loss per epoch (index 0: before SGD; inf
    once a network has diverged),
    ``accuracy`` (n,) final training accuracy, ``rank_bound`` (n, epochs + 1) r(H_L) on all the training digits used,
    ``test_loss`` and ``test_accuracy`` (n, epochs + 1) on the test digits (batch norm over the test set),
    ``alignment`` (n, epochs + 1, ...) the ``alignment`` function's values on the first ``PROBE`` training digits
    (NaN without one)."""

    loss: np.ndarray
    accuracy: np.ndarray
    rank_bound: np.ndarray
    lrs: np.ndarray
    test_loss: np.ndarray
    test_accuracy: np.ndarray
    alignment: np.ndarray


def _forward(params: list[tuple[torch.Tensor, torch.Tensor]], x: torch.Tensor, bn: bool, centre: bool = True
             ) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(logits (n, 10, N), the hidden layers [(n, d, N)] from the first to the last) of every network on x (64, N)."""
    h, hidden = x, []
    for w, b in params[:-1]:
        h = w @ h + b
        h = torch.relu(batch_norm(h, centre=centre) if bn else h)
        hidden.append(h)
    w, b = params[-1]
    return w @ h + b, hidden


def train_digits(depth: int, bn: bool, lrs: list[float], epochs: int, *, rank_bound: RankBound, width: int = 128,
                 batch: int = 128, n_networks: int = 1, pretrain_steps: int = 0, init: str = "torch",
                 n_samples: int | None = None, seed: int = 0, centre: bool = True, layerwise: bool = False,
                 pretrain_lr: float = 1e-3, alignment: Alignment | None = None) -> TrainingRun:
    """SGD on the first ``n_samples`` training digits (all 1437 by default) for networks with ``depth`` hidden
    layers, ``n_networks`` per learning rate; batch norm (if ``bn``) with or without centring.

    ``rank_bound`` is r(H) (eq. 4) of the last hidden layers (n, d, N) -> (n,), differentiable: Algorithm 1
    maximises it (``layerwise``: the sum of r(H_l) over every hidden layer, the paper's Fig. 6) for
    ``pretrain_steps`` Adam steps of learning rate ``pretrain_lr``, and it is recorded after every epoch.
    ``alignment`` (optional) maps the last hidden layers (n, d, P) and the loss gradients in the logits (n, 10, P)
    of ``PROBE`` training digits to values (n, ...) per network (Prop. 19's gradient alignment), recorded after
    every epoch.
    """
    depth, bn, width = check_layers(depth, "depth"), check_flag(bn, "bn"), check_width(width)
    centre, layerwise = check_flag(centre, "centre"), check_flag(layerwise, "layerwise")
    pretrain_lr = float(check_real_array(pretrain_lr, "pretrain_lr (Adam's learning rate)", 0, 0.0, MAX_LR,
                                         open_low=True, why="Adam multiplies float32 steps by it"))
    if alignment is not None and not callable(alignment):
        raise ValueError(f"alignment must be None or a function of (H (n, d, P), errors (n, 10, P)) -> (n,), got "
                         f"{alignment!r:.80}")
    lrs = check_real_array(lrs, "lrs (learning rates)", 1, 0.0, MAX_LR, open_low=True,
                           why="SGD multiplies float32 gradients by it")
    if lrs.ndim != 1:
        raise ValueError(f"lrs must be a list of learning rates, got shape {lrs.shape}")
    epochs = check_whole_number(epochs, "epochs", 0, MAX_EPOCHS, "the epochs run one after another")
    pretrain_steps = check_whole_number(pretrain_steps, "pretrain_steps", 0, MAX_EPOCHS,
                                        "the steps run one after another")
    if not callable(rank_bound):
        raise ValueError(f"rank_bound must be a function of the last hidden layers (n, d, N) -> (n,), r(H) "
                         f"(bnsym.rank.differentiable_rank_bound), got {rank_bound!r:.80}")
    n_networks, init = check_draws(n_networks, "n_networks", 1), check_choice(init, "init", INITS)
    seed, data = check_seed(seed), digits()
    n_train, smallest = len(data.y_train), 2 if bn else 1
    why_bn = " (batch norm of one sample divides by 0)" if bn else ""
    if n_samples is not None:
        n_samples = check_whole_number(n_samples, "n_samples", smallest, n_train, "the training digits" + why_bn)
    used = n_train if n_samples is None else n_samples
    batch = check_whole_number(batch, "batch", smallest, used, f"a step takes batch of the {used} training samples"
                               + why_bn)
    check_memory(len(lrs) * n_networks, depth * width, max(width, used),
                 "networks (lrs x n_networks) x depth x width x max(width, n_samples)")
    x, y = data.x_train[:n_samples].T.contiguous(), data.y_train[:n_samples]  # x: 64 features x N samples
    gen = generator(seed, "cpu")
    rates = torch.tensor(np.repeat(lrs, n_networks), dtype=torch.float32)
    n = len(rates)
    sizes = [x.shape[0]] + [width] * depth + [10]
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        w, b = _layer(gen, n, fan_in, fan_out, init if fan_out != 10 else "torch", torch.float32)
        params.append((w.requires_grad_(), (b if b is not None else torch.zeros(n, fan_out, 1)).requires_grad_()))
    flat = [p for pair in params for p in pair]
    adam = Optimizer(flat, "adam", pretrain_lr)
    for _ in range(pretrain_steps):
        idx = torch.randperm(x.shape[1], generator=gen)[:PRETRAIN_BATCH]
        hidden = _forward(params, x[:, idx], bn, centre)[1]
        objective = -sum(rank_bound(h).sum() for h in (hidden if layerwise else hidden[-1:]))
        adam.apply(torch.autograd.grad(objective, flat, allow_unused=True, materialize_grads=True))  # read-out: 0
    x_test, y_test = data.x_test.T.contiguous(), data.y_test
    probe = min(PROBE, x.shape[1])
    if alignment is not None and probe < 2:
        raise ValueError("alignment compares pairs of examples: it needs n_samples >= 2")
    losses, ranks, test_losses, test_accuracies, alignments = [], [], [], [], []

    def cross_entropy(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(logits, labels.expand(n, -1), reduction="none").mean(-1)

    def record() -> torch.Tensor:
        with torch.no_grad():
            logits, (*_, h) = _forward(params, x, bn, centre)
            losses.append(cross_entropy(logits, y))
            ranks.append(rank_bound(h.double()))
            test_logits, _ = _forward(params, x_test, bn, centre)
            test_losses.append(cross_entropy(test_logits, y_test))
            test_accuracies.append((test_logits.argmax(1) == y_test).float().mean(-1))
            if alignment is None:
                alignments.append(torch.full((n,), math.nan))
            else:
                logits_p, (*_, h_p) = _forward(params, x[:, :probe], bn, centre)
                errors = logits_p.double().softmax(1) - torch.nn.functional.one_hot(y[:probe], 10).T.double()
                alignments.append(alignment(h_p.double(), errors))
            return (logits.argmax(1) == y).float().mean(-1)

    accuracy = record()
    sgd = Optimizer(flat, "sgd", rates)  # not parked: a diverged network's loss is recorded as inf
    for _ in range(epochs):
        order = torch.randperm(x.shape[1], generator=gen)
        for start in range(0, x.shape[1] - batch + 1, batch):
            idx = order[start:start + batch]
            sgd.step(cross_entropy(_forward(params, x[:, idx], bn, centre)[0], y[idx]))
        accuracy = record()
    def stacked(values: list[torch.Tensor]) -> np.ndarray:
        return torch.stack(values, 1).numpy()

    return TrainingRun(torch.stack(losses, 1).nan_to_num(nan=np.inf).numpy(), accuracy.numpy(), stacked(ranks),
                       rates.numpy(), torch.stack(test_losses, 1).nan_to_num(nan=np.inf).numpy(),
                       stacked(test_accuracies), stacked(alignments))
