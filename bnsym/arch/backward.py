"""The backward pass over the per-neuron graph (:mod:`bnsym.arch.graph`): the gradient statistic of every node.

The backward pass (:func:`backward`) computes S = E[g . g], g = sqrt(n) df/dx, for every node, f = v.x_out /
sqrt(n) with v standard normal. With the gradient-independence property of such a readout (Yang 2019/2020),
W^T g behind a Dense is a fresh Gaussian, independent of the forward pass: at a Gaussian node the second moment
Pi = E[g g^T] is all that matters, and a Dense maps it to weight_var Pi. Inside a segment g is carried per sample
(vector-Jacobian products of the ops), with fresh Gaussian injections N(0, Pi) where the segment feeds a Dense.
Chains phi -> affine (Pi o E[phi'(h) phi'(h)^T]) and BN [-> phi] at a BSB1 input with Pi in span{I, 11^T}
(:func:`~bnsym.arch.derivations.derive_bsb1_backward`) are exact; other chains with one BN are summed in closed form
over their forward samples (:func:`_sandwich`). A train-mode BN with eps = 0 whose input's spread r over the batch
has E[r^-2] = inf (:func:`~bnsym.arch.graph.divergent_spread`: an input constant over the batch with positive
probability, a relu of a Gaussian, or a Gaussian spread over at most 2 dimensions) has an infinite gradient second
moment below it (the eps -> 0 Jacobian blows up like 1/r): S is inf there.
"""

from __future__ import annotations

from collections import defaultdict
from functools import cache

import numpy as np

from ..core.activations import Activation as Phi
from ..core.activations import identity
from ..core.geometry import bsb1_mu, centring
from ..meanfield.kernels import erf_kernel
from ..meanfield.sphere import expect_pair_with_error
from .derivations import lambdified
from .graph import Graph, Moment, Node, divergent_spread, exchangeable, hermite_kernel, homogeneous_map
from .ops import Affine, Elementwise, TrainBN


def backward(graph: Graph, output: Node) -> dict[Node, Moment]:
    """S = E[g . g] at every node (per replicate, with a relative bound), g the scaled gradient of
    f = v.x_out / sqrt(n); inf (``infinite``) where the second moment diverges."""
    return _Backward(graph, output).run()


def gaussian_moments(graph: Graph, output: Node, cotangent: np.ndarray) -> dict[Node, np.ndarray]:
    """Pi = E[g g^T] (R, B, B) at every Gaussian node for the PSD second moment ``cotangent`` at the output."""
    sweep = _Backward(graph, output, cotangent)
    sweep.run()
    return sweep.moments


def _invariant(pi: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(a, b) per replicate if every pi[r] = a I + b 11^T (to EXACT_RTOL), else None."""
    parts = [exchangeable(p) for p in pi]
    if any(p is None for p in parts):
        return None
    return np.array([p[0] for p in parts]), np.array([p[1] for p in parts])


def _slope_kernel(phi: Phi, x: Node) -> tuple[np.ndarray, np.ndarray] | None:
    """E[phi'(h) phi'(h)^T] of the Gaussian node x by Price's theorem (positive-homogeneous phi, alpha > 1/2), the
    derivative of the arcsine kernel (erf) or Gauss-Hermite (other smooth phi)."""
    kernel = x.kernel().value
    if phi.is_homogeneous:
        return homogeneous_map(phi, x, slope=True), x.graph.exact
    closed = erf_kernel(phi, kernel, slope=True)
    if closed is not None:
        return closed, x.graph.exact
    return None if phi.kinks else hermite_kernel(phi.numpy_derivative, kernel)


@cache
def _sphere_moments(phi: Phi, batch_size: int) -> tuple[np.ndarray, float]:
    """(M11, M12, N11, N12) of Thm 7 on the BN sphere (eps = 0) and their largest quadrature error."""
    dphi = phi.numpy_derivative

    def integrand(a, b):
        da, db = dphi(a), dphi(b)
        return np.stack([da * da, da * db, a * a * da * da, a * b * da * db])

    value, error = expect_pair_with_error(integrand, batch_size, phi.kinks)
    return np.asarray(value), float(np.max(error))


COLUMN_FLOATS = 2**23  # floats of per-sample cotangent columns a general segment holds per node (64 MB)


def _factor(pi: np.ndarray) -> np.ndarray:
    """C with C C^T = pi for each (..., B, B) PSD matrix (eigenvalues below 0 by rounding set to 0)."""
    lam, vecs = np.linalg.eigh(pi)
    return vecs * np.sqrt(np.clip(lam, 0.0, None))[..., None, :]


def _product(diagonals: list[np.ndarray]) -> np.ndarray | None:
    """The elementwise product of per-sample Jacobian diagonals (None for none)."""
    out = None
    for diagonal in diagonals:
        out = diagonal if out is None else out * diagonal
    return out


def _gram(left: np.ndarray, right: np.ndarray, trace: bool = False) -> np.ndarray:
    """E over samples of left right^T, (R, P, B) x (R, P, B) -> (R, B, B), or only its diagonal (R, B)."""
    if trace:
        return np.mean(left * right, 1)
    return np.matmul(left.transpose(0, 2, 1), right) / left.shape[1]


def _sandwich(pi: np.ndarray, before: np.ndarray | None, norm: tuple[np.ndarray, np.ndarray] | None,
              after: np.ndarray | None, trace: bool = False) -> np.ndarray:
    """E[J^T Pi J] over samples (R, B, B), or its trace (R,), for J = diag(after) J_BN diag(before),
    J_BN = (G - u u^T) / s (``norm`` = (u, w): u = BN(x) / sqrt(B), w = 1/s^2), or J = diag(after * before)
    without a BN.

    With M = Pi o (d2 d2^T), d2 = after, and d1 = before: J^T Pi J = w (P M P) o (d1 d1^T), P = G - u u^T, and
    P M P = G M G - G M u u^T - u u^T M G + (u^T M u) u u^T (G u = u). Each term is a product of (P x B) matrices
    (G M G through the row means r = d2 o (Pi d2) / B of M), so the cost is O(P B^2), not O(P B^3).
    """
    if norm is None:
        d = _product([f for f in (before, after) if f is not None])
        if d is None:
            return np.trace(pi, axis1=-2, axis2=-1) if trace else pi
        return (np.diagonal(pi, axis1=-2, axis2=-1) * _gram(d, d, True)).sum(-1) if trace else pi * _gram(d, d)
    u, w = norm
    shape = u.shape
    pi = np.broadcast_to(pi, (shape[0], shape[2], shape[2]))
    v = np.ones(shape) if after is None else after
    z = np.ones(shape) if before is None else before
    root = np.sqrt(w)[..., None] * v * z
    rows = v * np.matmul(v, pi) / shape[2]  # row means of M (pi is symmetric)
    weighted_rows = w[..., None] * rows * z
    e = v * u
    f = np.matmul(e, pi)
    mu = v * f
    across = w[..., None] * (mu - mu.mean(-1, keepdims=True)) * z  # w (G M u) o d1
    c = u * z
    quadratic = w * np.sum(e * f, -1)  # w u^T M u
    first = (np.diagonal(pi, axis1=-2, axis2=-1) * _gram(root, root, True)) if trace else pi * _gram(root, root)
    mixed = _gram(weighted_rows, z, trace) + _gram(across, c, trace)  # each appears with its transpose
    total = (first - mixed - (mixed if trace else mixed.transpose(0, 2, 1))
             + _gram((w * rows.mean(-1))[..., None] * z, z, trace) + _gram(c, quadratic[..., None] * c, trace))
    return total.sum(-1) if trace else total


def radial_weight(kernel: np.ndarray, direction: np.ndarray, weight: np.ndarray) -> np.ndarray:
    """For BN with eps = 0 right after a Gaussian h ~ N(0, K) (``kernel`` (R, B, B)): its Jacobian's factor
    1/s^2 = B / r^2 (``weight`` (R, P), r = norm(G h)) replaced by its conditional mean given the direction u = G h / r
    (``direction`` (R, P, B)). Everything else in J^T Pi J is a function of u, and given u, r^2 is Gamma(d/2, rate
    q/2), q = u^T (G K G)^+ u, d = rank(G K G), so E[B / r^2 | u] = B q / (d - 2): the same mean, without the heavy
    tail of 1/r^2 (whose variance is infinite for d <= 4). d >= 3 here (at d <= 2 the mean itself is infinite, and
    the callers say so: :func:`~bnsym.arch.graph.divergent_spread`); ``weight`` itself where the replicates' ranks
    differ."""
    batch = kernel.shape[-1]
    lam, vecs = np.linalg.eigh(centring(batch) @ kernel @ centring(batch))
    keep = lam > 1e-12 * np.maximum(lam[..., -1:], 1e-300)
    ranks = keep.sum(-1)
    if np.any(ranks != ranks[0]):
        return weight
    inverse = np.einsum("rak,rk,rbk->rab", vecs, np.where(keep, 1 / np.where(keep, lam, 1.0), 0.0), vecs)
    q = np.sum(np.matmul(direction, inverse) * direction, -1)
    return np.where(weight > 0, batch * q / (ranks[0] - 2), 0.0)


class _Backward:
    """One reverse sweep over the graph (see :meth:`Graph.backward`).

    A chain on one Gaussian leaf with at most one train-mode BN is summed in closed form over its forward samples
    (:meth:`_sampled_chain`). Elsewhere cotangents inside a sampled segment are arrays (R, P, B, k), k = min(B,
    memory) randomly mixed columns per sample (:meth:`_sampled`)."""

    def __init__(self, graph: Graph, output: Node, cotangent: np.ndarray | None = None):
        self.graph, self.output = graph, output
        self.cotangent = np.eye(graph.batch) if cotangent is None else cotangent
        self.moments: dict[Node, np.ndarray] = {}
        sampling = graph.sampling
        self.batch, self.replicates, self.points = graph.batch, sampling.replicates, sampling.points
        self.columns = int(min(self.batch, max(1, COLUMN_FLOATS // (self.replicates * self.points * self.batch))))
        self.rng = np.random.default_rng([sampling.seed, 0xBAC])
        self.pi: dict[Node, list[np.ndarray]] = defaultdict(list)  # Gaussian nodes: independent Pi contributions
        self.inject: dict[Node, list[np.ndarray]] = defaultdict(list)  # fresh injections N(0, Pi) at a node
        self.g: dict[Node, np.ndarray] = {}  # per-sample pulled-back cotangents (R, P, B, k)
        self.rel: dict[Node, float] = defaultdict(float)  # relative deterministic error of the node's S
        self.infinite: dict[Node, str] = {}  # nodes whose S diverges, and why
        self.result: dict[Node, Moment] = {}

    def zeros(self) -> np.ndarray:
        return np.zeros((1, self.batch, self.batch))

    def run(self) -> dict[Node, Moment]:
        target = self.pi if self.output.kind == "gaussian" else self.inject
        target[self.output].append(self.cotangent[None])
        chains = self._chains()
        in_chains = {member for chain in chains.values() for member in chain}
        for node in reversed(self.graph.nodes):
            if node.kind == "gaussian":
                self._gaussian(node)
            elif node in chains:
                self._chain(chains[node])
            elif node not in in_chains:
                self._sampled(node)
        return self.result

    def _record(self, node: Node, value: np.ndarray) -> None:
        if node in self.infinite:
            self.result[node] = Moment(np.full((1,), np.inf), np.zeros(()), infinite=True, why=self.infinite[node])
        else:
            self.result[node] = Moment(value, self.rel[node] * np.abs(value).max())
        self._spread(node)

    def _spread(self, node: Node) -> None:
        """Pass the node's relative error, and infinity, to the nodes its gradient flows to."""
        targets = list(node.parents)
        if node.kind == "gaussian" and node.link[0] in ("dense", "scale"):
            targets.append(node.link[1])
        elif node.kind == "gaussian" and node.link[0] == "sum":
            targets.extend(part for part, _ in node.link[1])
        for target in targets:
            self.rel[target] = max(self.rel[target], self.rel[node])
            if node in self.infinite:
                self.infinite.setdefault(target, self.infinite[node])

    def _gaussian(self, node: Node) -> None:
        total = sum(self.pi.pop(node, []), self.zeros())
        if node in self.g:
            g = self.g.pop(node)
            total = total + np.einsum("rpak,rpbk->rab", g, g) / g.shape[1]
        self.moments[node] = total
        self._record(node, np.trace(total, axis1=-2, axis2=-1))
        if node in self.infinite:
            return
        kind = node.link[0]
        if kind == "dense":
            x, weight_var = node.link[1], node.link[2]
            (self.pi if x.kind == "gaussian" else self.inject)[x].append(weight_var * total)
        elif kind == "sum":
            for part, coefficient in node.link[1]:
                self.pi[part].append(coefficient**2 * total)
        elif kind == "scale":
            scale = node.link[2]
            self.pi[node.link[1]].append(total / (scale[:, :, None] * scale[:, None, :]))

    def _pull(self, node: Node, g: np.ndarray, rows: slice = slice(None)) -> list[tuple[Node, np.ndarray]]:
        """The cotangent columns ``g`` at ``node`` (samples ``rows``) passed to its parents."""
        if node.kind == "sum":
            return [(node.parents[0], g), (node.parents[1], node.alpha * g)]
        why = divergent_spread(node)
        if why is not None:  # the BN's own reason, over one spread down from above
            self.infinite[node.parents[0]] = why
        output = node.samples()[:, rows]  # (computes node._input too)
        return [(node.parents[0], node.op.vjp(node._input[:, rows], output, g))]

    def _sampled(self, node: Node) -> None:
        """One node of a general sampled segment: S from its injections' trace plus the pulled-back columns. The
        injections join the columns as C E, C C^T their Pi and E a fresh random B x k matrix with E[E E^T] = I and
        E[E] = 0 (random signs on the diagonal for k = B), so the cross terms with the pulled columns vanish."""
        total = sum(self.inject.pop(node, []), self.zeros())
        pulled = self.g.pop(node, None)
        square = 0.0 if pulled is None else np.mean(np.sum(pulled * pulled, (-2, -1)), -1)
        self._record(node, np.trace(total, axis1=-2, axis2=-1) + square)
        if node in self.infinite:
            return
        if np.any(total):
            k, shape = self.columns, (self.replicates, self.points, self.batch)
            if k == self.batch:
                mixing = self.rng.choice([-1.0, 1.0], size=shape)[..., None] * np.eye(k)
            else:
                mixing = self.rng.choice([-1.0, 1.0], size=(*shape, k)) / np.sqrt(k)
            fresh = np.einsum("rab,rpbk->rpak", np.broadcast_to(_factor(total), (self.replicates, *total.shape[1:])),
                              mixing)
            pulled = fresh if pulled is None else pulled + fresh
        if pulled is None:
            return
        for parent, contribution in self._pull(node, pulled):
            self.g[parent] = self.g[parent] + contribution if parent in self.g else contribution

    # -------------------------------------------------------------------------------- chains

    def _chains(self) -> dict[Node, list[Node]]:
        """Segments that are chains of map nodes on one Gaussian leaf, keyed by their first node."""
        chains, seen = {}, set()
        for node in self.graph.nodes:
            if node.kind == "gaussian" or node in seen:
                continue
            members, leaves = self.graph.segment(node)
            seen.update(members)
            linear = (len(leaves) == 1 and all(m.kind == "map" for m in members) and members[0].parents[0] is leaves[0]
                      and all(b.parents[0] is a for a, b in zip(members, members[1:]))
                      and all(sum(c.kind != "gaussian" for c in m.children) <= 1 for m in members))
            if linear:
                chains[members[0]] = members
        return chains

    def _chain(self, chain: list[Node]) -> None:
        """A chain's backward: exact where a pattern applies (phi -> affines; BN [-> phi] -> affines at a BSB1
        input), else over its forward samples (:meth:`_sampled_chain`, or node by node)."""
        leaf, ops = chain[0].parents[0], [member.op for member in chain]
        if any(isinstance(op, TrainBN) and op.sizes for op in ops):  # batch norm over several batches: node by node
            for member in reversed(chain):
                self._sampled(member)
            return
        tail = 2 if isinstance(ops[0], TrainBN) and len(ops) > 1 and isinstance(ops[1], Elementwise) else 1
        pending = {member: list(self.inject.get(member, [])) for member in chain}
        if all(isinstance(op, Affine) for op in ops[tail:]):
            if isinstance(ops[0], Elementwise) and self._elementwise_chain(chain, leaf):
                return
            if isinstance(ops[0], TrainBN) and ops[0].eps == 0 and self._bsb1_chain(chain, leaf, tail):
                return
        for member, injections in pending.items():
            self.inject[member] = injections
        if not self._sampled_chain(chain, leaf):
            for member in reversed(chain):
                self._sampled(member)

    def _diagonal(self, member: Node) -> np.ndarray | None:
        """The per-sample diagonal of a non-BN op's Jacobian (R, P, B) at ``member``."""
        if isinstance(member.op, Affine):
            return np.broadcast_to(1.0 / member.op.scale[:, None, :], (self.replicates, self.points, self.batch))
        member.samples()
        return member.op.phi.numpy_derivative(member._input)

    def _sampled_chain(self, chain: list[Node], leaf: Node) -> bool:
        """A chain with at most one train-mode BN, over its forward samples: for each injection Pi at node k and
        each node j below it, E[J^T Pi J] with J = D_after J_BN D_before the Jacobian from j to k, by
        :func:`_sandwich` (O(P B^2) matrix products, exact given the forward samples)."""
        norms = [position for position, member in enumerate(chain) if isinstance(member.op, TrainBN)]
        if len(norms) > 1 or any(divergent_spread(m) is not None for m in chain):
            return False
        diagonals = [None if isinstance(m.op, TrainBN) else self._diagonal(m) for m in chain]
        norm = None
        if norms:
            member = chain[norms[0]]
            output, source = member.samples(), member._input
            centred = source - source.mean(-1, keepdims=True)
            spread = np.mean(centred * centred, -1) + member.op.eps
            norm = (output / np.sqrt(self.batch), np.where(spread > 0, 1.0 / np.where(spread > 0, spread, 1.0), 0.0))
            if norms[0] == 0 and member.op.eps == 0:
                norm = (norm[0], radial_weight(leaf.kernel().value, norm[0], norm[1]))
        squares = [np.zeros(1) for _ in chain]
        pi_leaf = self.zeros()
        for top in range(len(chain)):
            pi = sum(self.inject.pop(chain[top], []), self.zeros())
            if not np.any(pi):
                continue
            for target in range(top, -2, -1):  # target -1: the leaf
                ops = range(target + 1, top + 1)
                before = [diagonals[i] for i in ops if norms and i < norms[0]]
                after = [diagonals[i] for i in ops if not norms or i > norms[0]]
                through = bool(norms) and norms[0] in ops
                result = _sandwich(pi, _product(before), norm if through else None, _product(after), target >= 0)
                if target >= 0:
                    squares[target] = squares[target] + result
                else:
                    pi_leaf = pi_leaf + result
        for member, square in zip(reversed(chain), reversed(squares)):
            self._record(member, square)
        self.pi[leaf].append(pi_leaf)
        self.rel[leaf] = max(self.rel[leaf], *(self.rel[m] for m in chain))
        return True

    def _pull_affines(self, chain: list[Node]) -> list[np.ndarray]:
        """Pi at each chain node: its injections, plus what flows back through a following affine node (a constant
        Jacobian diag(1/scale)); nothing flows back through a nonlinear node here (the patterns fuse those)."""
        pis: list[np.ndarray] = [self.zeros()] * len(chain)
        for position in range(len(chain) - 1, -1, -1):
            pi = sum(self.inject.pop(chain[position], []), self.zeros())
            if position + 1 < len(chain) and isinstance(chain[position + 1].op, Affine):
                scale = chain[position + 1].op.scale
                pi = pi + pis[position + 1] / (scale[:, :, None] * scale[:, None, :])
            pis[position] = pi
        return pis

    def _elementwise_chain(self, chain: list[Node], leaf: Node) -> bool:
        """phi -> affines on a Gaussian: Pi_leaf = Pi o E[phi'(h) phi'(h)^T] (Price's theorem)."""
        slope = _slope_kernel(chain[0].op.phi, leaf)
        if slope is None:
            return False
        pis = self._pull_affines(chain)
        rel = leaf.kernel().relative + Moment(*slope).relative
        for member, pi in zip(reversed(chain), reversed(pis)):
            self.rel[member] = max(self.rel[member], rel)
            self._record(member, np.trace(pi, axis1=-2, axis2=-1))
        self.pi[leaf].append(pis[0] * slope[0])
        return True

    def _bsb1_chain(self, chain: list[Node], leaf: Node, tail: int) -> bool:
        """BN [-> phi] -> affines at a BSB1 input with every Pi in span{I, 11^T}: E[J^T Pi J] = c G
        (:func:`~bnsym.arch.derivations.derive_bsb1_backward`)."""
        mus = [bsb1_mu(sigma) for sigma in leaf.kernel().value]
        if any(m is None or m <= 0 for m in mus):
            return False
        pis = self._pull_affines(chain)
        parts = [_invariant(pi) for pi in pis[:tail]]
        if any(p is None for p in parts):
            return False
        batch, mu = self.batch, np.array(mus)
        phi = chain[1].op.phi if tail == 2 else identity()
        moments, error = _sphere_moments(phi, batch)
        coefficient = lambdified("alone")(*parts[0], batch, mu, *moments)
        traces = [np.trace(pi, axis1=-2, axis2=-1) for pi in pis]
        if tail == 2:
            coefficient = coefficient + lambdified("fused")(*parts[1], batch, mu, *moments)
            traces[0] = traces[0] + lambdified("between")(*parts[1], batch, mu, *moments)
        rel = error / max(float(np.abs(moments).max()), 1e-300) + leaf.kernel().relative
        for member, trace in zip(reversed(chain), reversed(traces)):
            self.rel[member] = max(self.rel[member], rel)
            self._record(member, trace)
        self.pi[leaf].append(np.asarray(coefficient, dtype=float).reshape(-1, 1, 1) * centring(batch))
        return True
