"""The first SGD steps of BN MLPs on digits, layer by layer (Yang et al. 2019, Sec. 4, Fig 4; R18).

With eps = 0 each BN layer's loss is scale invariant in its weights, L(c W^l) = L(W^l), so
<W^l, dL/dW^l> = 0 and one SGD step W <- W - lr g gives exactly (``|.|`` the Frobenius norm)::

    |W^l_{t+1}|^2 = |W^l_t|^2 + lr^2 |dL/dW^l_t|^2                                   (R18)

(:meth:`FirstSteps.scale_invariance_residual`). At step 0 the network is the random network of the theory, and
``|dL/dh^l|^2`` grows by lambda_G per layer towards the input (Thm 7).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

import numpy as np
import sympy as sp
import torch

from ..core.derivation import Derivation
from ..core.digits import N_CLASSES, digits
from ..core.validation import check_whole_number
from .loop import Optimizer, batch_loss, check_network, check_training, minibatches
from .networks import init_weights

MAX_STEPS = 10**5  # SGD steps recorded one after another


@dataclass(frozen=True)
class FirstSteps:
    """Frobenius norms per seed, step t = 0..T and layer: ``weights`` ``|W^l_t|`` and ``grad_w`` ``|dL/dW^l_t|``
    for l = 1..L+1 (the last is the read-out), ``grad_h`` ``|dL/dh^l_t|`` for the BN layers l = 1..L; ``lr`` of the
    steps.
    Arrays (S, T + 1, layers)."""

    weights: np.ndarray
    grad_w: np.ndarray
    grad_h: np.ndarray
    lr: float

    def scale_invariance_residual(self) -> np.ndarray:
        """``(|W_{t+1}|^2 - |W_t|^2 - lr^2 |g_t|^2) / |W_{t+1}|^2`` of the BN layers, (S, T, L); 0 up to rounding."""
        w2, g2 = self.weights[..., :-1] ** 2, self.grad_w[..., :-1] ** 2
        return (w2[:, 1:] - w2[:, :-1] - self.lr**2 * g2[:, :-1]) / w2[:, 1:]

    def log_growth(self, first: int, last: int, step: int = 0) -> np.ndarray:
        """Per seed, minus the least-squares slope of ``log |dL/dh^l|^2`` over layers l = first..last at ``step``.

        Estimates log lambda_G (squared gradient norms grow by lambda_G per layer towards the input). Layers are
        counted from 1; leave out the first and last few, where the input and the loss are not yet forgotten.
        """
        n_steps, n_layers = self.grad_h.shape[1:]
        first = check_whole_number(first, "first", 1, n_layers - 1, f"layers are counted 1..{n_layers}")
        last = check_whole_number(last, "last", first + 1, n_layers, "a slope needs two layers")
        step = check_whole_number(step, "step", 0, n_steps - 1, f"steps are counted 0..{n_steps - 1}")
        layers = np.arange(first, last + 1)
        logs = np.log(self.grad_h[:, step, first - 1:last] ** 2)
        centred = layers - layers.mean()
        return -(logs - logs.mean(1, keepdims=True)) @ centred / (centred @ centred)


def first_steps(phi: str, depth: int, width: int, batch_size: int, *, lr: float, steps: int = 10,
                eps: float = 0.0, n_seeds: int = 1, seed: int = 0, dtype: torch.dtype = torch.float64,
                device: torch.device | str = "cpu") -> FirstSteps:
    """``steps`` SGD steps of ``n_seeds`` BN MLPs on digits, recording the per-layer norms before each step and after
    the last (so T + 1 records); float64 by default, so that the identity (R18) holds to float64 rounding."""
    depth, width, batch_size, _, _, lr, _, n_seeds = check_training(depth, width, batch_size, batch_size, "sgd", lr, 1,
                                                                     n_seeds)
    steps = check_whole_number(steps, "steps", 0, MAX_STEPS, "the steps run one after another")
    activation, eps, seed, dtype, device = check_network(phi, batch_size, eps, seed, dtype, device)
    data = digits(dtype, device)
    gen = torch.Generator().manual_seed(seed)
    weights = init_weights(n_seeds, depth, width, data.n_features, N_CLASSES, gen, dtype, device)
    opt = Optimizer(weights, "sgd", lr)
    records: dict[str, list] = {"weights": [], "grad_w": [], "grad_h": []}
    for t, index in enumerate(islice(minibatches(len(data.y_train), batch_size, n_seeds, gen), steps + 1)):
        losses, preactivations = batch_loss(weights, data, index.to(device), activation, eps)
        grads = torch.autograd.grad(losses.sum(), weights + preactivations)
        norms = {"weights": weights, "grad_w": grads[:len(weights)], "grad_h": grads[len(weights):]}
        for name, tensors in norms.items():
            records[name].append(torch.stack([x.detach().flatten(1).norm(dim=1) for x in tensors], 1))
        if t < steps:
            opt.apply(grads[:len(weights)])
    arrays = {name: torch.stack(values, 1).cpu().numpy() for name, values in records.items()}
    return FirstSteps(**arrays, lr=lr)


def derive_scale_invariance(n: int = 2) -> Derivation:
    """R18 in SymPy for a weight row w of n entries: a loss of ``w / |w|`` has <w, grad L> = 0, hence one SGD step
    grows ``|w|^2`` by exactly ``eta^2 |grad L|^2``. Named results: "euler" (<w, grad L>) and "residual" (of the
    identity)."""
    d = Derivation("Scale invariance and the growth of the weights under SGD (R18)")
    w = sp.symbols(f"w1:{n + 1}", real=True)
    g = sp.symbols(f"g1:{n + 1}", real=True)
    eta = sp.Symbol("eta", positive=True)
    norm = sp.sqrt(sum(x**2 for x in w))
    loss = sp.Function("F")(*(x / norm for x in w))
    d.step("With eps = 0, batch norm sees W only through W/|W|: the loss is", sp.Eq(sp.Symbol("L(w)"), loss))
    euler = sp.simplify(sum(x * sp.diff(loss, x) for x in w))
    d.step("Euler's identity for a function homogeneous of degree 0:", sp.Eq(sp.Symbol("<w, grad L>"), euler),
           name="euler")
    step = sp.expand(sum((x - eta * y) ** 2 for x, y in zip(w, g)) - sum(x**2 for x in w)
                     - eta**2 * sum(y**2 for y in g))
    d.step("One SGD step w' = w - eta g leaves", sp.Eq(sp.Symbol("|w'|^2 - |w|^2 - eta^2 |g|^2"), step))
    residual = sp.simplify(step.subs({y: sp.diff(loss, x) for x, y in zip(w, g)}))
    d.step("and with g = grad L, by Euler's identity:", sp.Eq(sp.Symbol("|w'|^2 - |w|^2 - eta^2 |grad L|^2"), residual),
           name="residual")
    d.result = residual
    return d
