"""The per-neuron graph of a network at infinite width: the law of one neuron's batch vector after every layer.

At infinite width the neurons of a layer are i.i.d. given the inputs, so a layer is described by the law of one
neuron's vector x in R^B. A Dense draws fresh weights: its output is a Gaussian N(0, w K + b 11^T), K the kernel
of its input, and independent (per neuron) of everything before it. So the law after any layer is a function F
of independent Gaussian *sources* (the Dense outputs it depends on): a node of this graph is one such x, kind

* "gaussian": N(0, K), made by a Dense (a source), by the sum of independent Gaussians or by LayerNorm or eval-mode
  BatchNorm of a Gaussian (a rescaling), or the network's input (whose Gram is all a Dense needs);
* "map": a per-neuron op of its parent (:class:`Elementwise` phi, :class:`TrainBN`, :class:`Affine`);
* "sum": x + alpha y.

Every node carries its kernel K = E[x x^T] and mean m = E[x], each from the first route that applies:

* closed forms and quadratures: arc-cosine V_phi (positive-homogeneous phi), arcsine (erf) or Gauss-Hermite (other
  smooth phi) for phi of a Gaussian; the Laplace (eq. 11) or spherical (Thm 4) route of :mod:`bnsym.meanfield` for BN
  and BN -> phi of a Gaussian; the derived affine map (:mod:`.derivations`) for LayerNorm and eval-mode BN; the derived
  sum rule for independent parts; (B p / (B - 1)) G for phi -> BN (eps = 0) of an exchangeable Gaussian;
* otherwise randomised quasi-Monte Carlo over the node's *segment* (the connected non-Gaussian nodes with their
  Gaussian leaves): R independent runs (one scrambled Sobol set per source, principal components first, an
  independent digital shift per run), each an unbiased estimate; the reported error is their standard error. This
  is how phi -> BN at a general input and the post-activation residual sum (a non-Gaussian stream) are computed:
  the exact law, sampled. phi -> BN has no Laplace shortcut: it normalises by the spread of phi(h), not a quadratic
  form of the Gaussian h, so Schwinger's e^(-s r^2) does not keep the integral Gaussian.

Arrays carry a leading replicate axis: length 1 where every route upstream is deterministic, else R, replicate r
of a node depending only on replicate r upstream, so the spread over replicates is an honest error of the whole
computation. Deterministic route errors (quadrature, about 1e-12) are carried as a bound, relative to the
kernel's size, added along the way.

The gradient statistics are computed on this graph by :mod:`bnsym.arch.backward`; the per-neuron ops are in
:mod:`bnsym.arch.ops`.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass, field
from functools import cache

import numpy as np
from scipy.optimize import linprog
from scipy.special import ndtr, ndtri, roots_hermitenorm
from scipy.stats import qmc

from ..core.activations import Activation as Phi
from ..core.activations import identity
from ..core.estimate import Estimate
from ..core.geometry import bsb1_mu, centring
from ..meanfield.forward import bn_kernel_spherical
from ..meanfield.kernels import (
    c_alpha_of,
    erf_kernel,
    gauss_hermite_kernel,
    gauss_hermite_pair,
    is_odd,
    phi_kernel,
    phi_kernel_derivative,
)
from ..meanfield.laplace import bn_kernel_laplace
from ..meanfield.sphere import expect_pair_with_error
from .derivations import lambdified
from .ops import Affine, Elementwise, Op, TrainBN

EXACT_RTOL = 1e-12  # a matrix is BSB1 / exchangeable / in span{I, 11^T} to this relative tolerance
SOBOL_BITS = 30  # digits of the Sobol points (SciPy's default), and of their random digital shifts


@dataclass(frozen=True)
class Sampling:
    """The quasi-Monte Carlo routes' sizes: ``points`` per replicate (a power of 2, Sobol balance), ``replicates``
    independent scramblings (their spread is the error), ``seed``."""

    points: int = 2**12
    replicates: int = 16
    seed: int = 0


# --------------------------------------------------------------------------------------------- moments


@dataclass(frozen=True)
class Moment:
    """A kernel (R, B, B) or mean (R, B) per replicate and a deterministic error bound (B, B) or (B,); ``infinite``:
    a gradient statistic whose second moment diverges (its value is inf by the theory, not by overflow), ``why``
    (:func:`divergent_spread`)."""

    value: np.ndarray
    bound: np.ndarray
    infinite: bool = False
    why: str = ""

    @property
    def relative(self) -> float:
        """max bound / max |value| (0 for a zero bound, without a pass over the values); kept after the first read
        (functools.cached_property takes a lock per read on Python 3.11)."""
        if "_relative" not in self.__dict__:
            largest = float(self.bound.max()) if self.bound.size else 0.0
            scale = float(np.abs(self.value).max()) if largest else 0.0
            object.__setattr__(self, "_relative", largest / scale if scale > 0 else 0.0)
        return self.__dict__["_relative"]


def scaled_bound(relative: float, value: np.ndarray) -> np.ndarray:
    """``relative`` times the largest |value| over the replicates (the leading axis): a relative error as a bound;
    zeros, without a pass over the values, where ``relative`` is 0 (an exact route)."""
    if relative == 0:
        return np.zeros(value.shape[1:])
    return relative * np.abs(value).max(0)


def _each(function, *arrays: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``function`` (returning an Estimate or None) on each replicate of the arrays; None if any replicate is."""
    count = max(len(a) for a in arrays)
    values, errors = [], []
    for r in range(count):
        estimate = function(*(a[min(r, len(a) - 1)] for a in arrays))
        if estimate is None:
            return None
        values.append(np.asarray(estimate.value, dtype=float))
        errors.append(np.asarray(estimate.error, dtype=float))
    return np.stack(values), np.max(errors, axis=0)


def exchangeable(sigma: np.ndarray) -> tuple[float, float] | None:
    """(sigma^2, beta) if sigma = sigma^2 I + beta 11^T (to EXACT_RTOL), else None."""
    batch = sigma.shape[-1]
    diagonal = float(np.trace(sigma)) / batch
    beta = (float(sigma.sum()) - batch * diagonal) / (batch * (batch - 1))
    fitted = (diagonal - beta) * np.eye(batch) + beta
    if np.abs(sigma - fitted).max() > EXACT_RTOL * max(np.abs(sigma).max(), 1e-300):
        return None
    return diagonal - beta, beta


@cache
def _flat_side(phi: Phi) -> tuple[float, int] | None:
    """(k, side) if phi is constant on (-inf, k) (side -1) or (k, inf) (side +1) at one of its kinks, else None."""
    steps = np.array([1e-3, 0.1, 1.0, 3.0, 10.0])
    for kink in phi.kinks:
        for side in (-1, 1):
            if np.all(np.asarray(phi.numpy_derivative(kink + side * steps)) == 0):
                return kink, side
    return None


@cache
def _hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    nodes, weights = roots_hermitenorm(n)
    return nodes, weights / weights.sum()


def _all_in_flat(phi: Phi, sigma: np.ndarray) -> float | None:
    """P(phi(h) constant over the batch) for h ~ N(0, sigma) with sigma exchangeable, by 1-D Gauss-Hermite; None
    where sigma is not exchangeable or no route applies."""
    parts = exchangeable(sigma)
    if parts is None:
        return None
    variance, beta = parts
    flat = _flat_side(phi)
    if variance <= 0 or flat is None:  # h constant over the batch; else phi(h) constant with probability 0
        return float(variance <= 0)
    kink, side = flat
    batch = sigma.shape[-1]
    if beta < 0:  # h = sigma (z - kappa zbar 1): only the rank-(B-1) case K = sigma^2 G with kink 0 is simple
        return 0.0 if kink == 0 and abs(variance + batch * beta) <= EXACT_RTOL * variance else None
    nodes, weights = _hermite(200)
    # all h_a = sqrt(variance) z_a + sqrt(beta) w on the flat side of the kink, given the common part w
    probability = weights @ ndtr(-side * (kink - math.sqrt(beta) * nodes) / math.sqrt(variance)) ** batch
    return float(probability)


def _has_flat_point(sigma: np.ndarray, phi: Phi) -> bool:
    """Whether h ~ N(0, sigma) lies on phi's flat side in every coordinate with positive probability: some vector
    of the range of sigma has every coordinate strictly inside it (always, for sigma of full rank B; else a linear
    program)."""
    flat = _flat_side(phi)
    if flat is None:
        return False
    kink, side = flat
    if -side * kink > 0:  # the origin is inside the flat side
        return True
    lam, vecs = np.linalg.eigh(sigma)
    basis = vecs[:, lam > 1e-12 * max(lam.max(), 1e-300)]
    if basis.shape[1] == 0:
        return False
    if basis.shape[1] == len(basis):  # the range is all of R^B: c = side * basis^T 1 solves the program below
        return True
    # find c with side * (basis c) >= 1 in every coordinate: a multiple of basis c then lies past the kink
    result = linprog(np.zeros(basis.shape[1]), A_ub=-side * basis, b_ub=-np.ones(len(basis)),
                     bounds=[(None, None)] * basis.shape[1], method="highs")
    return result.status == 0



class Divergent(ValueError):
    """A moment that is infinite by the theory, not by overflow (the routes' numerical guard passes it on)."""


def centred_rank(kernel: np.ndarray, sizes: tuple[int, ...] | None = None) -> int:
    """The smallest rank over replicates (and over the batches of ``sizes``, each centred on its own) of G K G for
    kernels (R, B, B): the dimension a Gaussian's batch vector spreads over around its batch mean (eigenvalues below
    1e-12 of the largest count as 0)."""
    cuts = np.cumsum((0, *(sizes or (kernel.shape[-1],))))
    ranks = []
    for start, stop in zip(cuts[:-1], cuts[1:]):
        block = centring(stop - start) @ kernel[..., start:stop, start:stop] @ centring(stop - start)
        lam = np.linalg.eigvalsh(block)
        ranks.append(int((lam > 1e-12 * np.maximum(lam[..., -1:], 1e-300)).sum(-1).min()))
    return min(ranks)


def low_rank_spread(kernel: np.ndarray, sizes: tuple[int, ...] | None = None, via: str = "") -> str | None:
    """Why E[r^-2] is infinite for r = |G h|, h ~ N(0, K) (``kernel`` (R, B, B)), or None: G K G of rank d <= 2 makes
    r^2 a weighted chi-square with d degrees of freedom, whose density near 0 is of order r^(d - 2), and
    E[r^-2] = integral r^(d - 3) dr diverges at 0 for d <= 2. ``via``: the words for a map of h in between."""
    rank = centred_rank(kernel, sizes)
    if rank > 2:
        return None
    return (f"{via}a Gaussian spread over only {rank} dimension(s) around its batch mean (its centred kernel G K G has "
            f"rank "
            f"{rank}, as after an input Gram Sigma0 of low rank), so r^2 is a chi-square with {rank} degree(s) of "
            "freedom; more points cannot resolve it, inputs whose centred Gram G Sigma0 G has rank >= 3 can")


def divergent_spread(norm: Node) -> str | None:
    """Why E[r^-2] is infinite for r = |G x|, the spread over the batch of the vector x that the train-mode BN with
    eps = 0 ``norm`` normalises, or None (also for any other node): the BN's Jacobian is of size 1/r, so the
    gradient and tangent moments behind it are infinite. x is constant over the batch with positive probability
    (``flat``, a relu of a Gaussian: r -> 0 in two dimensions around that set), or x is a Gaussian h spread over at
    most 2 dimensions (:func:`low_rank_spread`), or phi(h) of one for a locally Lipschitz phi: |G phi(h)| <=
    |phi(h) - phi(m) 1| <= L |h - m 1| = L |G h| with m the batch mean of h, so E[r^-2] >= E[|G h|^-2] / L^2."""
    if not (isinstance(norm.op, TrainBN) and norm.op.eps == 0):
        return None
    x = norm.parents[0]
    if x.flat is not None:
        return ("an activation that is constant over the batch with positive probability (a relu of a Gaussian), "
                "where the spread r of the batch tends to 0 in two dimensions")
    if x.kind == "gaussian":
        return low_rank_spread(x.kernel().value, norm.op.sizes)
    if (isinstance(x.op, Elementwise) and x.parents[0].kind == "gaussian"
            and not (x.op.phi.is_homogeneous and x.op.phi.degree < 1)):
        return low_rank_spread(x.parents[0].kernel().value, norm.op.sizes, f"{x.op.phi.name} (Lipschitz) of ")
    return None

# ------------------------------------------------------------------------------------------------ nodes


@dataclass(eq=False)
class Node:
    """One per-neuron value x in R^B (see the module docstring). It refers to its graph and to its children weakly,
    and to its sources by index: no reference cycles, so a call's graph is freed when the call returns, not by the
    cyclic garbage collector (whose passes over the heap cost small networks 40 % of a call)."""

    graph: Graph  # a weak proxy: the caller of Graph's builders holds the graph while it reads the nodes
    kind: str
    index: int
    parents: tuple[Node, ...] = ()
    op: Op | None = None
    alpha: float = 1.0
    # gaussian nodes: ("input",), ("dense", x, w), ("sum", ((node, coefficient), ...)) or ("scale", x, s)
    link: tuple = ()
    sources: frozenset = frozenset()  # the indices of the independent Gaussian sources this node is a function of
    zero_mean: bool = False
    _flat: np.ndarray | None = None
    _flat_known: bool = False
    _children: list[weakref.ref] = field(default_factory=list)
    _kernel: Moment | None = None
    _mean: Moment | None = None
    _samples: np.ndarray | None = None
    _input: np.ndarray | None = None  # a map node's parent samples, as its segment drew them
    _correlation: tuple[np.ndarray, np.ndarray, bool] | None = None

    def __hash__(self) -> int:
        return self.index

    @property
    def children(self) -> list[Node]:
        """The nodes made from this one (held by the graph)."""
        return [child() for child in self._children]

    @property
    def flat(self) -> np.ndarray | None:
        """The constant value (R, B) the node takes with positive probability, if any (decided when first asked:
        only a train-mode BN needs it, and deciding it may take a linear program)."""
        if not self._flat_known:
            self.graph.decide_flat(self)
        return self._flat

    def kernel(self) -> Moment:
        if self._kernel is None:
            self._kernel = self.graph.kernel_of(self)
        return self._kernel

    def mean(self) -> Moment:
        if self._mean is None:
            self._mean = self.graph.mean_of(self)
        return self._mean

    def correlation(self) -> tuple[np.ndarray, np.ndarray, bool]:
        """:func:`unit_correlation` of the node's kernel, kept: the kernel map and the slope map of a
        positive-homogeneous phi (the NTK's and the gradient's) both read it."""
        if self._correlation is None:
            self._correlation = unit_correlation(self.kernel().value)
        return self._correlation

    def samples(self) -> np.ndarray:
        """(R, P, B) samples of x, consistent with every other node of its segment."""
        if self._samples is None:
            self.graph.sample_segment(self)
        return self._samples


class Graph:
    """The nodes of one network at infinite width, built layer by layer (:meth:`dense`, :meth:`apply`,
    :meth:`affine`, :meth:`add`), with the kernel and mean routes and the sampler."""

    def __init__(self, batch_size: int, sampling: Sampling):
        self.batch, self.sampling = batch_size, sampling
        self.exact = np.zeros((batch_size, batch_size))  # the bound of every exact (B, B) route, shared: read only
        self.exact.flags.writeable = False
        self.nodes: list[Node] = []
        self._cuts: dict[Node, np.ndarray] = {}

    def _node(self, kind: str, parents: tuple[Node, ...] = (), **fields) -> Node:
        node = Node(weakref.proxy(self), kind, len(self.nodes), parents, **fields)
        for parent in parents:
            parent._children.append(weakref.ref(node))
        self.nodes.append(node)
        return node

    # ----------------------------------------------------------------------------------------- building

    def input(self, sigma0: np.ndarray) -> Node:
        node = self._node("gaussian", link=("input",), zero_mean=True)
        node.sources = frozenset({node.index})
        node._kernel = Moment(sigma0[None], np.zeros_like(sigma0))
        return node

    def dense(self, x: Node, weight_var: float, bias_var: float) -> Node:
        """h = sqrt(w) W x / sqrt(n) + sqrt(b) beta: N(0, w K_x + b 11^T), a fresh source."""
        node = self._node("gaussian", link=("dense", x, weight_var), zero_mean=True)
        node.sources = frozenset({node.index})
        kernel = x.kernel()
        value = weight_var * kernel.value
        value += bias_var
        node._kernel = Moment(value, weight_var * kernel.bound if kernel.relative else kernel.bound)
        return node

    def apply(self, x: Node, op: Elementwise | TrainBN) -> Node:
        node = self._node("map", (x,), op=op, sources=x.sources)
        node.zero_mean = isinstance(op, TrainBN) and x.kind == "gaussian"
        return node

    def affine(self, x: Node, shift: np.ndarray, scale: np.ndarray, centred: bool) -> Node:
        """(x - shift) / scale per example; of a Gaussian (shift 0) it is the Gaussian N(0, K / (s s^T))."""
        if x.kind == "gaussian" and not np.any(shift):
            node = self._node("gaussian", link=("scale", x, scale), sources=x.sources, zero_mean=True)
            kernel = x.kernel()
            value = kernel.value / (scale[:, :, None] * scale[:, None, :])
            node._kernel = Moment(value, scaled_bound(kernel.relative, value))
            return node
        return self._node("map", (x,), op=Affine(shift, scale, centred), sources=x.sources, zero_mean=centred)

    def add(self, x: Node, y: Node, alpha: float) -> Node:
        """x + alpha y. Independent Gaussians sum to a Gaussian; dependent parts are sampled jointly."""
        independent = not (x.sources & y.sources)
        if independent and x.kind == y.kind == "gaussian":
            node = self._node("gaussian", link=("sum", ((x, 1.0), (y, alpha))), sources=x.sources | y.sources,
                              zero_mean=True)
            kx, ky = x.kernel(), y.kernel()
            node._kernel = Moment(kx.value + alpha**2 * ky.value, kx.bound + alpha**2 * ky.bound)
            return node
        node = self._node("sum", (x, y), alpha=alpha, sources=x.sources | y.sources,
                          zero_mean=x.zero_mean and y.zero_mean)
        if not independent:
            self._invalidate(node)
        return node

    # ------------------------------------------------------------------------------------------ flat values

    def decide_flat(self, node: Node) -> None:
        """Decide ``flat`` for ``node`` and its undecided ancestors, parents first (a loop, not a recursion: a deep
        non-Gaussian stream must not reach Python's recursion limit)."""
        pending, stack = set(), [node]
        while stack:
            current = stack.pop()
            if not (current._flat_known or current in pending):
                pending.add(current)
                stack.extend(current.parents)
        for member in sorted(pending, key=lambda n: n.index):
            member._flat, member._flat_known = self._flat_of(member), True

    def _flat_of(self, node: Node) -> np.ndarray | None:
        """The constant value a node takes with positive probability, from its parents' (decided): a Gaussian has
        none; phi of a Gaussian has phi's flat value where the Gaussian can lie on phi's flat side in every
        coordinate; a map or a sum of independent parts carries its parents' constant values through."""
        if node.kind == "gaussian":
            return None
        if node.kind == "sum":
            x, y = node.parents
            if x.sources & y.sources or x.flat is None or y.flat is None:
                return None
            return x.flat + node.alpha * y.flat
        x, op = node.parents[0], node.op
        if isinstance(op, TrainBN):
            return None if x.flat is None else np.zeros_like(x.flat)
        if isinstance(op, Affine):
            if x.flat is None:
                return None
            value = (x.flat - op.shift) / op.scale
            constant = np.all(np.abs(value - value[:, :1]) <= EXACT_RTOL * np.maximum(np.abs(value).max(), 1.0))
            return value if constant else None
        if x.flat is not None:
            return op.phi.numpy(x.flat)
        if x.kind == "gaussian" and _has_flat_point(x.kernel().value[0], op.phi):
            kink, side = _flat_side(op.phi)
            return np.full((1, self.batch), float(op.phi.numpy(np.array(kink + side))))
        return None

    # ----------------------------------------------------------------------------------- kernel and mean

    def kernel_of(self, node: Node) -> Moment:
        route = self._kernel_route(node)
        if route is not None:
            return route
        x = node.samples()
        value = np.einsum("rpa,rpb->rab", x, x) / x.shape[1]
        return Moment(value, scaled_bound(self._inherited(node), value))

    def mean_of(self, node: Node) -> Moment:
        if node.zero_mean:
            return Moment(np.zeros((1, self.batch)), np.zeros(self.batch))
        route = self._mean_route(node)
        if route is not None:
            return route
        x = node.samples()
        value = x.mean(1)
        return Moment(value, scaled_bound(self._inherited(node), value))

    def _inherited(self, node: Node) -> float:
        """The relative deterministic error a sampled node inherits: the largest of its segment's leaves."""
        return max((leaf.kernel().relative for leaf in self.segment(node)[1]), default=0.0)

    def _kernel_route(self, node: Node) -> Moment | None:
        if node.kind == "sum":
            x, y = node.parents
            if x.sources & y.sources:
                return None
            kx, ky = x.kernel(), y.kernel()
            means = [np.zeros((1, self.batch))] * 2
            if not (x.zero_mean or y.zero_mean):
                means = [x.mean().value, y.mean().value]
            value = lambdified("residual")(kx.value, ky.value, means[0][:, :, None], means[0][:, None, :],
                                           means[1][:, :, None], means[1][:, None, :], node.alpha)
            bound = kx.bound + node.alpha**2 * ky.bound + scaled_bound(kx.relative + ky.relative, value)
            return Moment(value, bound)
        op, parent = node.op, node.parents[0]
        if isinstance(op, Affine):
            k, m = parent.kernel(), parent.mean()
            value = lambdified("affine")(k.value, m.value[:, :, None], m.value[:, None, :], op.shift[:, :, None],
                                         op.shift[:, None, :], op.scale[:, :, None], op.scale[:, None, :])
            value = np.where(np.isfinite(value), value, 0.0)
            return Moment(value, scaled_bound(k.relative + m.relative, value))
        if parent.kind == "gaussian":
            k = parent.kernel()
            if isinstance(op, Elementwise):
                result = _activation_kernel(op.phi, parent)
            else:
                result = None if op.sizes else _bn_kernel(identity(), k.value, op.eps)
            if result is None:
                return None
            return Moment(*result) if k.relative == 0 else Moment(result[0], result[1] + scaled_bound(k.relative,
                                                                                                      result[0]))
        if (isinstance(op, Elementwise) and isinstance(parent.op, TrainBN) and parent.parents[0].kind == "gaussian"
                and not parent.op.sizes):
            k = parent.parents[0].kernel()
            result = _bn_kernel(op.phi, k.value, parent.op.eps)
            return None if result is None else Moment(result[0], result[1] + scaled_bound(k.relative, result[0]))
        if (isinstance(op, TrainBN) and op.eps == 0 and isinstance(parent.op, Elementwise)
                and parent.parents[0].kind == "gaussian" and not op.sizes):
            k = parent.parents[0].kernel()
            constant = [_all_in_flat(parent.op.phi, sigma) for sigma in k.value]
            if None not in constant:
                scale = lambdified("exchangeable")(self.batch, 1 - np.array(constant))
                return Moment(scale[:, None, None] * centring(self.batch), np.zeros((self.batch, self.batch)))
        return None

    def _mean_route(self, node: Node) -> Moment | None:
        if node.kind == "sum":
            x, y = node.parents
            mx, my = x.mean(), y.mean()
            return Moment(mx.value + node.alpha * my.value, mx.bound + abs(node.alpha) * my.bound)
        op, parent = node.op, node.parents[0]
        if isinstance(op, Affine):
            m = parent.mean()
            value = (m.value - op.shift) / op.scale
            return Moment(np.where(np.isfinite(value), value, 0.0), scaled_bound(m.relative, value))
        if isinstance(op, Elementwise) and parent.kind == "gaussian":
            k = parent.kernel()
            diagonal = np.diagonal(k.value, axis1=-2, axis2=-1)
            if op.phi.is_homogeneous:
                a, b = op.phi.ab
                value = (a - b) * lambdified("gaussian_mean")(op.phi.degree, diagonal)
                return Moment(value, scaled_bound(k.relative, value))
            if not op.phi.kinks:
                if is_odd(op.phi):  # 0 by symmetry: quadrature's rounding-level mean would be its own size's error
                    return Moment(np.zeros_like(diagonal), np.zeros(self.batch))
                estimate = gauss_hermite_pair(op.phi, diagonal, 0.0, 0.0, psi=np.ones_like)
                return Moment(estimate.value, estimate.error.max(0) + scaled_bound(k.relative, estimate.value))
            return None
        if (isinstance(op, Elementwise) and isinstance(parent.op, TrainBN) and parent.op.eps == 0
                and parent.parents[0].kind == "gaussian" and not parent.op.sizes):
            if all(bsb1_mu(sigma) is not None for sigma in parent.parents[0].kernel().value):
                value, error = expect_pair_with_error(lambda a, b: op.phi.numpy(a), self.batch, op.phi.kinks)
                return Moment(np.full((1, self.batch), value), np.full(self.batch, error))
        return None

    # ------------------------------------------------------------------------------------------- sampling

    def segment(self, node: Node) -> tuple[list[Node], list[Node]]:
        """(the non-Gaussian nodes connected to ``node``, in order; their Gaussian leaves)."""
        seen, stack, leaves = {node}, [node], set()
        while stack:
            current = stack.pop()
            for other in (*current.parents, *current.children):
                if other.kind == "gaussian":
                    if other in current.parents:
                        leaves.add(other)
                elif other not in seen:
                    seen.add(other)
                    stack.append(other)
        return sorted(seen, key=lambda n: n.index), sorted(leaves, key=lambda n: n.index)

    def _invalidate(self, node: Node) -> None:
        """Forget the samples of ``node``'s segment: its leaves now share sources and must be drawn jointly."""
        for member in self.segment(node)[0]:
            member._samples = member._input = None

    def _draw(self, node: Node) -> np.ndarray:
        """Fresh (R, P, B) samples of a Gaussian node from its own kernel: one scrambled Sobol point set (principal
        components on its first, best coordinates), randomised per replicate by an independent digital shift (each
        point then uniform, so every replicate is unbiased and the replicates are independent given the set), in a
        random order per replicate (points of independent sources would otherwise pair up), mapped through the
        inverse normal CDF."""
        if node not in self._cuts:
            count, points, kernels = self.sampling.replicates, self.sampling.points, node.kernel().value
            lam, vecs = np.linalg.eigh(kernels)
            lam, vecs = lam[..., ::-1], vecs[..., ::-1]
            keep = lam > 1e-12 * np.maximum(lam[..., :1], 1e-300)
            factors = vecs * np.sqrt(np.where(keep, lam, 0.0))[..., None, :]  # (R', B, B), columns by variance
            rank = int(keep.sum(-1).max())
            out = np.zeros((count, points, self.batch))
            if rank:
                rng = np.random.default_rng([self.sampling.seed, node.index])
                base = qmc.Sobol(d=rank, scramble=True, bits=SOBOL_BITS, seed=rng).random(points)
                digits = np.rint(base * 2.0**SOBOL_BITS).astype(np.uint64)
                shifts = rng.integers(0, 2**SOBOL_BITS, size=(count, 1, rank), dtype=np.uint64)
                order = np.argsort(rng.random((count, points)), axis=1)[..., None]
                shifted = np.take_along_axis(digits[None] ^ shifts, order, axis=1)
                uniform = (shifted + 0.5) / 2.0**SOBOL_BITS  # the cell's midpoint: never 0 or 1
                out = np.matmul(ndtri(uniform), np.broadcast_to(factors[..., :rank], (count, self.batch, rank)).mT)
            self._cuts[node] = out
        return self._cuts[node]

    def _joint(self, node: Node, cache: dict[Node, np.ndarray]) -> np.ndarray:
        """Samples of a Gaussian node as the function of its sources that it is (for leaves sharing sources)."""
        if node not in cache:
            kind = node.link[0]
            if kind in ("input", "dense"):
                cache[node] = self._draw(node)
            elif kind == "scale":
                cache[node] = self._joint(node.link[1], cache) / node.link[2][:, None, :]
            else:
                cache[node] = sum(coefficient * self._joint(part, cache) for part, coefficient in node.link[1])
        return cache[node]

    def leaf_samples(self, leaves: list[Node]) -> dict[Node, np.ndarray]:
        """Samples of a segment's leaves: each drawn on its own, except leaves that share sources, drawn jointly."""
        out, cache = {}, {}
        for leaf in leaves:
            shared = any(leaf.sources & other.sources for other in leaves if other is not leaf)
            out[leaf] = self._joint(leaf, cache) if shared else self._draw(leaf)
        return out

    def sample_segment(self, node: Node) -> None:
        members, leaves = self.segment(node)
        values = self.leaf_samples(leaves)
        for member in members:
            if member._samples is None:
                if member.kind == "sum":
                    x, y = (values.get(p, p._samples) for p in member.parents)
                    member._samples = x + member.alpha * y
                else:
                    parent = member.parents[0]
                    member._input = values.get(parent, parent._samples)
                    member._samples = member.op.apply(member._input)
            values[member] = member._samples


def hermite_kernel(function, kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """E[f(h) f(h)^T] by Gauss-Hermite, the degree doubled from 64 until the error estimate (the change from half
    the degree) is below 1e-12 of the result, or 512 nodes per axis."""
    estimate = None
    for degree in (64, 128, 256, 512):  # each rule's coarser one is the previous rule, computed once
        estimate = gauss_hermite_kernel(function, kernel, degree, None if estimate is None else estimate.value)
        if estimate.error.max() <= 1e-12 * max(np.abs(estimate.value).max(), 1e-300):
            break
    return estimate.value, estimate.error.max(0)


def unit_correlation(kernel: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """(c, r, positive) of a kernel (..., B, B): r_a = sqrt(K_aa), c_ab = K_ab / (r_a r_b) with its diagonal exactly
    1 (0 where a variance is 0, as c is off the diagonal there; rounding below 1 would cost J_phi' about sqrt(machine
    epsilon)), positive whether every variance is > 0."""
    diagonal = np.diagonal(kernel, axis1=-2, axis2=-1)
    root = np.sqrt(np.maximum(diagonal, 0.0))
    scale = root[..., :, None] * root[..., None, :]
    positive = bool((diagonal > 0).all())  # the usual case: no masking
    if positive:
        scale = np.divide(kernel, scale, out=scale)
    else:
        scale = np.divide(kernel, scale, out=np.zeros_like(kernel), where=scale > 0)
    np.einsum("...ii->...i", scale)[...] = 1.0 if positive else np.where(diagonal > 0, 1.0, 0.0)
    return scale, root, positive


def homogeneous_map(phi: Phi, x: Node, slope: bool = False) -> np.ndarray:
    """For positive-homogeneous phi of degree alpha and the Gaussian node x: E[phi(h) phi(h)^T] = c_alpha (K_aa
    K_bb)^(alpha/2) J_phi(c) (``slope``: E[phi'(h) phi'(h)^T] = c_alpha (K_aa K_bb)^((alpha-1)/2) J_phi'(c), Price's
    theorem, alpha > 1/2), from x's kept correlation; 0 where a variance is 0."""
    corr, root, positive = x.correlation()
    value = phi_kernel_derivative(phi, corr) if slope else phi_kernel(phi, corr)  # a new array: scaled in place
    value *= c_alpha_of(phi.degree)
    power = phi.degree - 1 if slope else phi.degree
    if power != 0:
        scale = root ** power if power != 1 else root
        value *= scale[..., :, None]
        value *= scale[..., None, :]
    return value if positive else np.where((root[..., :, None] > 0) & (root[..., None, :] > 0), value, 0.0)


def _activation_kernel(phi: Phi, x: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """V_phi(K) of the Gaussian node x per replicate: arc-cosine (positive-homogeneous phi) or arcsine (erf) closed
    form, or Gauss-Hermite (other smooth phi)."""
    if phi.is_homogeneous:
        return homogeneous_map(phi, x), x.graph.exact
    kernel = x.kernel().value
    closed = erf_kernel(phi, kernel)
    if closed is not None:
        return closed, x.graph.exact
    return None if phi.kinks else hermite_kernel(phi, kernel)


def _bn_kernel(phi: Phi, kernel: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray] | None:
    """V_{B_phi}(K) per replicate by the Laplace route (eq. 11; positive-homogeneous phi, eps = 0) or the spherical
    one (Thm 4 and its radial extension; BSB1-type K); None where neither applies."""
    batch = kernel.shape[-1]

    def route(sigma: np.ndarray) -> Estimate | None:
        projected = centring(batch) @ sigma @ centring(batch)
        if np.abs(projected).max() <= 1e-12 * max(np.abs(sigma).max(), 1e-300):
            return Estimate(np.zeros((batch, batch)), 0.0, "constant")  # batch norm maps a constant neuron to 0
        if eps == 0 and phi.is_homogeneous:
            try:
                return bn_kernel_laplace(phi, sigma)
            except ValueError:  # an ill-conditioned Sigma^G: the sampler takes it
                return None
        if bsb1_mu(sigma) is not None:
            return bn_kernel_spherical(phi, sigma, eps)
        return None

    return _each(route, kernel)
