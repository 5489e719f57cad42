"""The neural tangent kernel of an architecture (Jacot et al. 2018; Yang 2020, Tensor Programs II), batch norm's
batch coupling included, by forward propagation of one B x B tangent block per layer.

f = v . x_out / sqrt(n) with v standard normal and trained, every Dense in the NTK parametrisation
(:mod:`bnsym.arch`), train-mode BN over the batch. The tangent kernel of a node x of the per-neuron graph
(:mod:`bnsym.arch.graph`) is Theta^x_ab = lim (1/n) sum_i sum_theta dx_i(a)/dtheta dx_i(b)/dtheta over the
parameters theta upstream of x, and

* input: Theta = 0;
* Dense h = sqrt(w) W x / sqrt(n) + sqrt(b) beta: Theta^h = w Theta^x + w K^x + b = w Theta^x + K^h (its own W and
  beta, plus the earlier parameters through a fresh W, whose quadratic form concentrates);
* a per-neuron map y = F(x) with B x B Jacobian J (phi, BN, BN -> phi, affine): Theta^y = T(Theta^x) =
  E[J Theta^x J^T] over the forward law, the tangent independent of J in the limit;
* Gaussian sums and rescalings: the sources' tangents are uncorrelated (fresh weights), so they add with the squared
  coefficients; a sum of dependent non-Gaussian parts (a residual stream) carries the cross term E[J_x Theta J_y^T]
  through shared tangent injections (:func:`_columns`);
* the readout: Theta_f = K^out + Theta^out (v trained, and the earlier parameters through v).

T is the adjoint of the backward map Pi -> E[J^T Pi J] of :mod:`bnsym.arch.backward` (tr(Pi T(Theta)) =
tr(T*(Pi) Theta) sample by sample, :func:`~bnsym.arch.derivations.derive_ntk_adjoint`), so this one forward pass
equals the B(B+1)/2 per-entry backward recursions of Yang's reference computation.

A plain [Dense (no bias), BN (train, eps = 0), phi (positive-homogeneous of degree 1 to 3)] * L MLP, on one batch or
on batches of one size, takes the Laplace route (:mod:`bnsym.meanfield.ntk_laplace`: T as the derivative of the
cross-batch Laplace integral in the cross covariance, near exact). Otherwise, routes per node: closed forms for Dense,
sums and affine maps; Price's theorem E[phi'(h) phi'(h)^T] o Theta for phi of a Gaussian (arc-cosine closed form for
positive-homogeneous phi, the arcsine kernel's derivative for erf, Gauss-Hermite for other smooth phi); a chain with one
train-mode BN on one Gaussian leaf summed in closed form over the graph's quasi-Monte Carlo samples
(:func:`~bnsym.arch.backward._sandwich` with the Jacobian transposed); any other segment by per-sample tangent columns.
A train-mode BN with eps = 0 after an activation that is constant over the batch with positive probability, or after a
Gaussian spread over at most 2 dimensions, has an infinite tangent kernel (its Jacobian grows like 1/r, as for the
gradient; :func:`~bnsym.arch.graph.divergent_spread`).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..core.activations import identity
from ..core.estimate import Estimate
from ..core.geometry import bsb1_mu
from ..core.layers import Activation, BatchNorm, Dense, Serial
from ..core.validation import (
    MIN_BATCH_SIZE,
    check_covariance,
    check_finite_result,
    check_resolved,
    check_whole_number,
    shown,
)
from ..meanfield.ntk_laplace import ntk_joint, tangent_nodes
from .backward import (
    _factor,
    _product,
    _sandwich,
    _slope_kernel,
    _sphere_moments,
    gaussian_moments,
    radial_weight,
)
from .derivations import lambdified
from .graph import (
    Divergent,
    Graph,
    Moment,
    Node,
    Sampling,
    divergent_spread,
    exchangeable,
    low_rank_spread,
    scaled_bound,
)
from .network import _estimate, _float64_range, build, check_inputs, check_sampling
from .ops import Affine, Elementwise, TrainBN


def _refuse_divergent(why: str | None) -> None:
    """:class:`~bnsym.arch.graph.Divergent` (a ValueError) where a train-mode BN with eps = 0 has E[r^-2] = inf
    (``why``: :func:`~bnsym.arch.graph.divergent_spread`)."""
    if why is not None:
        raise Divergent(f"the tangent kernel is infinite: a train-mode BatchNorm with eps = 0 acts on {why}; its "
                        "Jacobian grows like 1/r, r the spread of its input over the batch, and E[r^-2] diverges; "
                        "any eps > 0 bounds it")


def tangent_kernel(graph: Graph, node: Node) -> Moment:
    """Theta at ``node`` of ``graph`` (per replicate, with a deterministic bound), computing only the nodes it
    needs (a chain's Theta comes from its leaf's, not through its intermediate nodes)."""
    return _Forward(graph).tangent(node)


class _Forward:
    def __init__(self, graph: Graph):
        self.graph, self.batch = graph, graph.batch
        self.theta: dict[Node, Moment] = {}

    @cached_property
    def rng(self) -> np.random.Generator:
        """The random signs of :meth:`_columns`, seeded when a segment first needs them (a Generator costs more
        than a small network's closed forms)."""
        return np.random.default_rng([self.graph.sampling.seed, 0x7A6])

    def tangent(self, node: Node) -> Moment:
        """Theta at ``node``: the nodes it needs, found walking back, computed in the graph's (forward) order."""
        needed, stack = {node}, [node]
        while stack:
            for other in self._needs(stack.pop()):
                if other not in needed:
                    needed.add(other)
                    stack.append(other)
        for member in self.graph.nodes:
            if member in needed and member not in self.theta:
                self.theta[member] = self._node(member)
        return self.theta[node]

    def _needs(self, node: Node) -> list[Node]:
        """The nodes whose Theta the route at ``node`` reads: a Gaussian's links, a disjoint sum's or an affine map's
        parents, else its segment's Gaussian leaves (a chain's one leaf)."""
        if node.kind == "gaussian":
            kind = node.link[0]
            return [] if kind == "input" else [part for part, _ in node.link[1]] if kind == "sum" else [node.link[1]]
        disjoint = node.kind == "sum" and not node.parents[0].sources & node.parents[1].sources
        if disjoint or isinstance(node.op, Affine):
            return list(node.parents)
        return [leaf for leaf in self.graph.segment(node)[1] if leaf.index < node.index]  # later ones: downstream

    def _node(self, node: Node) -> Moment:
        if node.kind == "gaussian":
            return self._gaussian(node)
        if node.kind == "sum":
            x, y = node.parents
            if x.sources & y.sources:
                return self._columns(node)
            tx, ty = self.theta[x], self.theta[y]
            return Moment(tx.value + node.alpha**2 * ty.value, tx.bound + node.alpha**2 * ty.bound)
        parent = node.parents[0]
        _refuse_divergent(divergent_spread(node))
        if isinstance(node.op, Affine):  # a constant Jacobian diag(1 / scale)
            theta, scale = self.theta[parent], node.op.scale
            value = theta.value / (scale[:, :, None] * scale[:, None, :])
            return Moment(np.where(np.isfinite(value), value, 0.0), scaled_bound(theta.relative, value))
        if isinstance(node.op, Elementwise) and parent.kind == "gaussian":
            slope = _slope_kernel(node.op.phi, parent)
            if slope is not None:
                theta = self.theta[parent]
                value = slope[0] * theta.value
                relative = theta.relative + parent.kernel().relative + Moment(*slope).relative
                return Moment(value, scaled_bound(relative, value) if relative else self.graph.exact)
        chain = self._chain(node)
        if chain is None:
            return self._columns(node)
        exact = self._bsb1(chain)
        return exact if exact is not None else self._sampled_chain(chain)

    def _bsb1(self, chain: list[Node]) -> Moment | None:
        """BN [-> phi] (eps = 0, one batch) at a BSB1 input with Theta = a I + b 11^T, exactly: T(Theta) = x1 I +
        x2 11^T by symmetry, and by the adjoint (tr(Pi T(Theta)) = tr(T*(Pi) Theta)) with the backward map's closed
        form T*(Pi) = c(Pi) G (:func:`~bnsym.arch.derivations.derive_bsb1_backward`), tr T(Theta) = c(I) a (B - 1) and
        1^T T(Theta) 1 = c(11^T) a (B - 1). None where the pattern does not apply."""
        ops = [member.op for member in chain]
        fused = len(ops) == 2 and isinstance(ops[1], Elementwise)
        if not (isinstance(ops[0], TrainBN) and ops[0].eps == 0 and not ops[0].sizes and (len(ops) == 1 or fused)):
            return None
        leaf = chain[0].parents[0]
        mus = [bsb1_mu(sigma) for sigma in leaf.kernel().value]
        parts = [exchangeable(theta) for theta in self.theta[leaf].value]
        if any(m is None or m <= 0 for m in mus) or any(p is None for p in parts):
            return None
        batch, mu, a = self.batch, np.array(mus), np.array([p[0] for p in parts])
        moments, error = _sphere_moments(ops[1].phi if fused else identity(), batch)
        rule = lambdified("fused" if fused else "alone")
        trace = rule(1.0, 0.0, batch, mu, *moments) * a * (batch - 1)
        total = rule(0.0, 1.0, batch, mu, *moments) * a * (batch - 1)
        off = (total - trace) / (batch**2 - batch)
        value = (trace / batch - off)[:, None, None] * np.eye(batch) + off[:, None, None]
        relative = (self.theta[leaf].relative + leaf.kernel().relative
                    + error / max(float(np.abs(moments).max()), 1e-300))
        return Moment(value, scaled_bound(relative, value))

    def _gaussian(self, node: Node) -> Moment:
        kind = node.link[0]
        if kind == "input":
            return Moment(np.zeros((1, self.batch, self.batch)), self.graph.exact)
        if kind == "dense":  # w Theta^x + (w K^x + b), the latter the node's own kernel
            theta, kernel = self.theta[node.link[1]], node.kernel()
            value = node.link[2] * theta.value
            value += kernel.value
            if not (theta.relative or kernel.relative):
                return Moment(value, self.graph.exact)
            return Moment(value, node.link[2] * theta.bound + kernel.bound)
        if kind == "scale":
            theta, scale = self.theta[node.link[1]], node.link[2]
            value = theta.value / (scale[:, :, None] * scale[:, None, :])
            return Moment(value, scaled_bound(theta.relative, value))
        parts = [(self.theta[part], coefficient**2) for part, coefficient in node.link[1]]
        return Moment(sum(c * t.value for t, c in parts), sum(c * t.bound for t, c in parts))

    # ----------------------------------------------------------------------------------- sampled routes

    def _chain(self, node: Node) -> list[Node] | None:
        """The map nodes from ``node``'s Gaussian leaf to it, first to last, if that path is a chain of per-neuron
        maps with at most one train-mode BN (whose input is never constant, or eps > 0); else None."""
        chain = [node]
        while chain[0].parents[0].kind != "gaussian":
            parent = chain[0].parents[0]
            if parent.kind != "map":
                return None
            chain.insert(0, parent)
        norms = [m for m in chain if isinstance(m.op, TrainBN)]
        return chain if len(norms) <= 1 and not any(m.op.sizes for m in norms) else None

    def _sampled_chain(self, chain: list[Node]) -> Moment:
        """E[J Theta J^T] over the forward samples (:func:`chain_jacobian`): J^T has the form :func:`_sandwich` takes,
        with the diagonals swapped (J_BN is symmetric)."""
        for member in chain:
            _refuse_divergent(divergent_spread(member))
        theta = self.theta[chain[0].parents[0]]
        before, norm, after = chain_jacobian(chain)
        value = _sandwich(theta.value, after, norm, before)
        relative = theta.relative + self.graph._inherited(chain[-1])
        return Moment(value, scaled_bound(relative, value))

    def _columns(self, node: Node) -> Moment:
        """Any segment: per-sample tangent columns t (R, P, B, B) pushed forward through the ops (each Jacobian is
        symmetric, so an op's vector-Jacobian product is its Jacobian-vector product), each Gaussian leaf injecting
        C E (C C^T its Theta, E a fresh diagonal of random signs, so E E^T = I and leaves do not correlate), shared by
        every member of the segment it feeds; Theta = E[t t^T]. Fills every member of ``node``'s segment."""
        members, leaves = self.graph.segment(node)
        node.samples()
        shape = (self.graph.sampling.replicates, self.graph.sampling.points, self.batch)
        columns: dict[Node, np.ndarray] = {}
        relative = 0.0

        def column(source: Node) -> np.ndarray:
            """A member's or a leaf's columns; a leaf's Theta (which may depend on earlier members) on first use."""
            nonlocal relative
            if source not in columns:
                theta = self.tangent(source)
                relative = max(relative, theta.relative)
                factor = np.broadcast_to(_factor(theta.value), (shape[0], self.batch, self.batch))
                signs = self.rng.choice([-1.0, 1.0], size=shape)
                columns[source] = factor[:, None, :, :] * signs[..., None, :]
            return columns[source]

        for member in members:
            if member.kind == "sum":
                x, y = (column(p) for p in member.parents)
                columns[member] = x + member.alpha * y
            else:
                parent = member.parents[0]
                _refuse_divergent(divergent_spread(member))
                member.samples()
                columns[member] = member.op.vjp(member._input, member._samples, column(parent))
            value = np.einsum("rpak,rpbk->rab", columns[member], columns[member]) / shape[1]
            bound = scaled_bound(relative + self.graph._inherited(member), value)
            self.theta[member] = Moment(value, bound)
        return self.theta[node]


def _diagonal(member: Node) -> np.ndarray:
    """The per-sample diagonal of a non-BN op's Jacobian (R, P, B)."""
    member.samples()
    if isinstance(member.op, Affine):
        return np.broadcast_to(1.0 / member.op.scale[:, None, :], member._input.shape)
    return member.op.phi.numpy_derivative(member._input)


def chain_jacobian(chain: list[Node]) -> tuple[np.ndarray | None, tuple[np.ndarray, np.ndarray] | None,
                                               np.ndarray | None]:
    """The per-sample Jacobian J = diag(after) J_BN diag(before) of a chain of per-neuron maps on one Gaussian leaf
    with at most one train-mode BN, as (before, norm, after) for :func:`~bnsym.arch.backward._sandwich` (norm = (u, w):
    J_BN = (G - u u^T) w^(1/2), u = BN(x) / sqrt(B); None without a BN). With eps = 0 right after the leaf, w is
    its conditional mean given the direction (:func:`~bnsym.arch.backward.radial_weight`)."""
    position = next((i for i, m in enumerate(chain) if isinstance(m.op, TrainBN)), None)
    diagonals = [None if isinstance(m.op, TrainBN) else _diagonal(m) for m in chain]
    if position is None:
        return _product(diagonals), None, None
    member, batch = chain[position], chain[0].graph.batch
    output, source = member.samples(), member._input
    centred = source - source.mean(-1, keepdims=True)
    spread = np.mean(centred * centred, -1) + member.op.eps
    norm = (output / np.sqrt(batch), np.where(spread > 0, 1.0 / np.where(spread > 0, spread, 1.0), 0.0))
    if position == 0 and member.op.eps == 0:
        norm = (norm[0], radial_weight(chain[0].parents[0].kernel().value, norm[0], norm[1]))
    return _product(diagonals[:position]), norm, _product(diagonals[position + 1:])


def ntk(net: object, Sigma0: object, with_error: bool = False, points: int = 2**12, replicates: int = 16,
        seed: int = 0, method: str = "auto") -> np.ndarray | Estimate:
    """The B x B neural tangent kernel Theta_ab = lim sum_theta df(x_a)/dtheta df(x_b)/dtheta of ``net`` for one
    batch with input Gram Sigma0, f = v . x_out / sqrt(n) with v trained (conventions in :mod:`bnsym.arch`).

    Theta_f = K^out + Theta^out, Theta propagated forward one B x B block per layer (Theta' = Sigma' + T(Theta),
    module docstring). Routes and arguments as for :func:`~bnsym.arch.kernel`; returns the matrix, or with
    ``with_error=True`` its :class:`~bnsym.core.estimate.Estimate`. ValueError as for ``kernel``, for an
    activation whose slope has an infinite second moment, and where the tangent kernel is infinite (eps = 0 BN
    after an activation constant over the batch with positive probability). ``method``: "auto" (the Laplace route
    where ``ntk_route`` takes it) or "qmc" (the sampled route always).
    """
    sampling = check_sampling(points, replicates, seed)
    network, sigma = check_inputs(net, Sigma0, gradient=True, sampling=sampling)
    result = ntk_route(network, sigma, sampling, laplace=_check_method(method))
    return result if with_error else result.value


def _check_method(method: object) -> bool:
    """Whether ``method`` ("auto" or "qmc") lets ``ntk_route`` take the Laplace route."""
    if method not in ("auto", "qmc"):
        raise ValueError(f"method must be 'auto' or 'qmc', got {method!r:.40}")
    return method == "auto"


def ntk_route(network: Serial, sigma: np.ndarray, sampling: Sampling, sizes: tuple[int, ...] | None = None,
              laplace: bool = True) -> Estimate:
    """The NTK of validated arguments (``sizes``: batches normalised separately, :func:`ntk_cross`), its error
    checked (ValueError where it exceeds 1% of the result: raise the points). A [Dense (no bias), BN (train, eps =
    0), phi (degree 1 to 3)] * L MLP on batches of one size takes the Laplace route instead
    (:mod:`bnsym.meanfield.ntk_laplace`, near exact; its error is the change from 3/4 of the nodes)."""
    laplace = _laplace_mlp(network) if laplace else None
    batch = len(sigma) if sizes is None else sizes[0]
    if laplace is not None and (sizes is None or len(set(sizes)) == 1):
        _refuse_divergent(low_rank_spread(sigma[None], sizes))  # the first BN's input is Gaussian, w Sigma0
        nodes = tangent_nodes(batch)
        with _float64_range(sigma):
            value = ntk_joint(*laplace[:1], sigma, laplace[1], batch, nodes)
            error = np.abs(value - ntk_joint(*laplace[:1], sigma, laplace[1], batch, 3 * nodes // 4))
        result = Estimate(check_finite_result(value, "the tangent kernel"), error, "laplace")
    else:
        with _float64_range(sigma):
            graph, outputs, _ = build(network, sigma, sampling, sizes)
            output = outputs[-1]
            theta, kernel = tangent_kernel(graph, output), output.kernel()
            result = _estimate(Moment(theta.value + kernel.value, theta.bound + kernel.bound), "exact")
    check_resolved(result.value, result.error, f"the tangent kernel for this Sigma0 with {sampling.points} points "
                   "(raise points)")
    return result


def _laplace_mlp(network: Serial) -> tuple[object, int] | None:
    """(phi, depth) if ``network`` is [Dense (no bias), BatchNorm (train, eps = 0), phi] * depth with phi
    positive-homogeneous of degree 1, 2 or 3, whose NTK the Laplace route computes; else None."""
    layers = list(network)
    if not layers or len(layers) % 3:
        return None
    for dense, norm, act in zip(layers[::3], layers[1::3], layers[2::3]):
        if not (isinstance(dense, Dense) and dense.bias_var == 0 and norm == BatchNorm()  # eps 0, train, plain
                and isinstance(act, Activation) and act == layers[2]):
            return None
    phi = layers[2].phi
    return (phi, len(layers) // 3) if phi.is_homogeneous and phi.degree in (1, 2, 3) else None



def ntk_per_entry(net: object, Sigma0: object, entries: list[tuple[int, int]] | None = None, points: int = 2**12,
                  replicates: int = 16, seed: int = 0) -> Estimate:
    """The NTK's ``entries`` (default every a <= b) by Yang's (2020) reference route, one backward recursion per
    entry: Theta_ab = K^out_ab + sum over the Dense outputs h of tr(Pi_h K^h), Pi_h the gradient's second moment at h
    for the output cotangent E = (e_a e_b^T + e_b e_a^T) / 2, through the backward maps of
    :mod:`bnsym.arch.backward` (polarised, E = ((e_a + e_b)(e_a + e_b)^T - (e_a - e_b)(e_a - e_b)^T) / 4, as those
    take PSD cotangents). The adjoint of :func:`ntk`, on the same samples: a reference and a baseline, B(B+1)/2
    times the work. Returns the entries, in order, as an :class:`~bnsym.core.estimate.Estimate`."""
    sampling = check_sampling(points, replicates, seed)
    network, sigma = check_inputs(net, Sigma0, gradient=True, sampling=sampling)
    batch = sigma.shape[0]
    pairs = [(a, b) for a in range(batch) for b in range(a, batch)] if entries is None else list(entries)
    with _float64_range(sigma):
        graph, outputs, _ = build(network, sigma, sampling)
        output, dense = outputs[-1], [node for node in graph.nodes if node.link[:1] == ("dense",)]
        values = []
        for a, b in pairs:
            total = output.kernel().value[:, a, b]
            for sign in (1.0, -1.0):
                u = np.eye(batch)[a] + sign * np.eye(batch)[b]
                moments = gaussian_moments(graph, output, np.outer(u, u) / 4)
                total = total + sign * sum(np.sum(moments[h] * h.kernel().value, (-2, -1)) for h in dense)
            values.append(total)
        return _estimate(Moment(np.stack(values, -1), np.zeros(len(pairs))), "exact")


def ntk_cross(net: object, Sigma0: object, sizes: tuple[int, ...], with_error: bool = False, points: int = 2**12,
              replicates: int = 16, seed: int = 0, method: str = "auto") -> np.ndarray | Estimate:
    """The NTK of ``net`` on several batches at once, each normalised on its own by every train-mode BatchNorm (as
    Yang et al.'s networks see a data set cut into batches): the joint matrix of sum_theta df(x_a)/dtheta
    df(x_b)/dtheta over all the batches' examples, ``Sigma0`` their joint input Gram, ``sizes`` the batches' sizes in
    order (each at least 4). Its diagonal blocks are :func:`ntk` of each batch; the others are the NTK across
    batches. The per-neuron maps act on the joint vector (BN block by block), so every BN is sampled (tangent
    columns over the joint law) unless the Laplace route applies. Arguments and errors otherwise as for
    :func:`ntk`."""
    sampling = check_sampling(points, replicates, seed)
    network, sigma = check_inputs(net, Sigma0, gradient=True, sampling=sampling)
    listed = np.asarray(getattr(sizes, "tolist", lambda: sizes)(), dtype=object)
    if listed.ndim > 1:
        raise ValueError(f"sizes must be a flat sequence of batch sizes, one per batch (e.g. (4, 4)), got "
                         f"{shown(sizes)}")
    parts = tuple(check_whole_number(size, "a batch size", MIN_BATCH_SIZE, len(sigma))
                  for size in np.ravel(listed).tolist())
    if sum(parts) != len(sigma):
        raise ValueError(f"the batch sizes {list(parts)} must add up to Sigma0's {len(sigma)} rows")
    for start, size in zip(np.cumsum((0, *parts[:-1])), parts):
        check_covariance(sigma[start:start + size, start:start + size], batch_norm=True)
    result = ntk_route(network, sigma, sampling, parts, _check_method(method))
    return result if with_error else result.value
