"""The public maps of :mod:`bnsym.arch`: a network description in, its infinite-width kernels and gradients out."""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from functools import singledispatch

import numpy as np

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
    parse_architecture,
    serial,
    walk,
)
from ..core.validation import (
    MIN_BATCH_SIZE,
    check_activation,
    check_covariance,
    check_memory,
    check_resolved,
    check_whole_number,
)
from .backward import backward
from .graph import Divergent, Graph, Moment, Node, Sampling
from .ops import Elementwise, TrainBN

MAX_POINTS = 2**20  # quasi-Monte Carlo points per replicate; the samples of a node take replicates x points x B floats
MAX_NETWORK_LAYERS = 10_000  # layers counted with the residual branches': each is a node of the per-neuron graph


def check_network(net: object) -> Serial:
    """``net`` as a :class:`Serial` (a layer, a list of layers, a Serial or a spec string for
    :func:`~bnsym.core.layers.parse_architecture`), starting with a Dense."""
    network = parse_architecture(net) if isinstance(net, str) else serial(net)
    if not len(network):
        raise ValueError("the network has no layers")
    if not isinstance(network.layers[0], Dense):
        raise ValueError(f"the first layer must be a Dense, got {describe(network.layers[0])}: it acts on the inputs, "
                         "and only a Dense's output law is fixed by the inputs' Gram matrix Sigma0 alone")
    return network


def check_sizes(network: Serial, batch: int, sampling: Sampling) -> None:
    """What the routes would hold must fit, checked before any work: at most ``MAX_NETWORK_LAYERS`` layers (with the
    residual branches', which repeats of nested blocks multiply); one (replicates, points, B) array of samples per
    layer (a sampled segment keeps its nodes' samples); and with a train-mode BatchNorm, the Laplace route's
    (B(B+1)/2) x B products and its quadrature's arrays of that size, about B^3 floats. Each within
    ``MAX_ENTRIES`` (8 GiB of float64) of :func:`~bnsym.core.validation.check_memory`."""
    layers = 0
    for layers, _ in enumerate(walk(network), 1):
        if layers > MAX_NETWORK_LAYERS:
            raise ValueError(f"the network has more than {MAX_NETWORK_LAYERS:,} layers (counting those of residual "
                             "branches): each is a node of the per-neuron graph with its own samples")
    check_memory(layers, sampling.replicates * sampling.points, batch,
                 "the samples of the layers, layers x (replicates x points) x B")
    if any(isinstance(layer, BatchNorm) and layer.mode == "train" for layer in walk(network)):
        check_memory(batch, batch, batch, "a train-mode BatchNorm's Laplace route (eq. 11), about B x B x B")


def check_sampling(points: object, replicates: object, seed: object) -> Sampling:
    """The quasi-Monte Carlo sizes: points a power of 2 (Sobol balance), at least 2 replicates (a spread)."""
    count = check_whole_number(points, "points", 16, MAX_POINTS, "points per replicate of the quasi-Monte Carlo routes")
    if count & (count - 1):
        raise ValueError(f"points must be a power of 2 (scrambled Sobol points are balanced only then), got {count}")
    return Sampling(count, check_whole_number(replicates, "replicates", 2, 1024, "a standard error needs at least 2"),
                    check_whole_number(seed, "seed", 0, 2**63 - 1))


def check_inputs(net: object, Sigma0: object, gradient: bool,
                 sampling: Sampling | None = None) -> tuple[Serial, np.ndarray]:
    """The network and its input Gram: with ``sampling``, sizes that fit (:func:`check_sizes`, before anything
    walks the network or factors Sigma0); Sigma0 PSD; B >= 4 and G Sigma0 G != 0 where a train-mode BatchNorm is;
    every activation usable (its slope too for ``gradient``)."""
    network = check_network(net)
    try:
        shape = np.shape(Sigma0)
    except ValueError:  # ragged: check_covariance says so
        shape = ()
    if sampling is not None and len(shape) == 2:
        check_sizes(network, shape[0], sampling)
    layers = list(walk(network))
    train = any(isinstance(layer, BatchNorm) and layer.mode == "train" for layer in layers)
    try:
        sigma = check_covariance(Sigma0, batch_norm=train)
    except ValueError as error:
        if train and str(error).startswith("batch size"):
            raise ValueError(f"with a train-mode BatchNorm, Sigma0 must be at least {MIN_BATCH_SIZE} x "
                             f"{MIN_BATCH_SIZE}: {error}") from None
        raise
    batch = sigma.shape[0]
    for layer in layers:
        refused = refused_field(layer)
        if refused:
            raise ValueError(refused)
        if isinstance(layer, Activation):
            check_activation(layer.phi, batch if train else None, slope=gradient)
    return network, sigma


@contextmanager
def _float64_range(sigma: np.ndarray):
    """Numerical failures inside the routes (an overflow turned NaN, an eigensolver that does not converge on
    non-finite entries) become one ValueError naming Sigma0's scale; the layers' maps are not scale invariant. A
    moment that is infinite by the theory (:class:`~bnsym.arch.graph.Divergent`) passes on unchanged."""
    try:
        with np.errstate(all="ignore"):
            yield
    except Divergent:
        raise
    except (ValueError, FloatingPointError) as error:
        raise ValueError(f"the network's kernels leave float64's range for this Sigma0 (largest entry "
                         f"{np.abs(sigma).max():.3g}): {str(error).splitlines()[0][:200]}") from None


#: Layer kinds without an infinite-width map, each with the reason (:func:`theory_map` refuses them with it).
NO_LIMIT: dict[type, str] = {}


@singledispatch
def theory_map(layer: object, graph: Graph, x: Node, sizes: tuple[int, ...] | None) -> tuple[Node, Node | None]:
    """The node after ``layer`` (and, for a residual block, its branch's output) in the per-neuron graph;
    ``sizes``: the batches that a train-mode BatchNorm normalises separately (None: one). One function per layer
    kind (``theory_map.register``); a kind in :data:`NO_LIMIT` is refused with its reason."""
    reason = NO_LIMIT.get(type(layer), "no infinite-width map is registered for it")
    raise ValueError(f"the layer kind {type(layer).__name__} has no infinite-width limit in bnsym.arch: {reason}")


def refused_field(layer: object) -> str | None:
    """Why a field of ``layer`` has no infinite-width map here (the field named), or None."""
    if isinstance(layer, Dense) and layer.init == "looks_linear":
        return ("Dense init='looks_linear' has no infinite-width map in bnsym.arch: its neurons come in mirrored "
                "pairs (h, -h), not independent ones, so the per-neuron law the theory propagates does not describe "
                "them; use init='gaussian' or 'orthogonal' (the same limit)")
    if isinstance(layer, Dense) and layer.init == "uniform_positive":
        return ("Dense init='uniform_positive' has no infinite-width map in bnsym.arch: its weights have a non-zero "
                "mean, which adds sqrt(3 weight_var n_in) times the input's feature mean to every neuron, a common "
                "term growing like sqrt(n_in), not a per-neuron Gaussian of fixed variance; use init='uniform' (the "
                "Gaussian limit)")
    if isinstance(layer, BatchNorm) and layer.statistics == "reference":
        return ("BatchNorm statistics='reference' (per-neuron statistics of a reference set, a trained network's "
                "eval mode) has no map in bnsym.arch: its limit depends on the reference set, which a description "
                "does not hold; statistics='population' is the eval mode at initialisation")
    if isinstance(layer, BatchNorm) and layer.statistics == "batch" and not layer.centre:
        return ("BatchNorm centre=False with statistics='batch' (x / sqrt(mean x^2 + eps) over the batch) has no "
                "map in bnsym.arch: its per-neuron op is not derived here; centre=True, or statistics='population'")
    if isinstance(layer, (BatchNorm, LayerNorm)) and layer.affine is not None and layer.affine[0] == 0 \
            and layer.affine[1] != 0:
        return (f"{type(layer).__name__} affine={layer.affine}: a zero scale with a shift makes every neuron the "
                f"constant {layer.affine[1]:g}, which the theory's affine map (x - shift) / scale does not hold; a "
                "zero scale needs a zero shift")
    return None


@theory_map.register
def _dense(layer: Dense, graph: Graph, x: Node, sizes: tuple[int, ...] | None) -> tuple[Node, None]:
    """Gaussian, orthogonal and uniform weights of the same entry variance have the same limit (the kernel and the
    gradient's second moment depend on the weights' variance only; uniform ones by the central limit theorem)."""
    return graph.dense(x, layer.weight_var, layer.bias_var), None


@theory_map.register
def _activation(layer: Activation, graph: Graph, x: Node, sizes: tuple[int, ...] | None) -> tuple[Node, None]:
    return graph.apply(x, Elementwise(layer.phi)), None


def _normalised(graph: Graph, x: Node, shift: np.ndarray, variance: np.ndarray, eps: float, centred: bool) -> Node:
    """(x - shift) / sqrt(variance + eps) with constants per example; a zero variance with eps = 0 maps to 0
    (eps -> 0+)."""
    total = np.clip(variance, 0.0, None) + eps
    scale = np.sqrt(np.where(total > 0, total, np.inf))
    shift, scale = np.broadcast_arrays(shift, scale)
    return graph.affine(x, shift.copy(), scale.copy(), centred)


@theory_map.register
def _batch_norm(layer: BatchNorm, graph: Graph, x: Node, sizes: tuple[int, ...] | None) -> tuple[Node, None]:
    """Train mode: the per-neuron op over the batch; eval mode with population statistics: over the examples and
    neurons (derive_eval_batch_norm); reference statistics are refused (:func:`refused_field`)."""
    if layer.statistics == "batch":
        normed = graph.apply(x, TrainBN(layer.eps, sizes))
    else:
        kernel, mean = x.kernel().value, x.mean().value
        second = np.diagonal(kernel, axis1=-2, axis2=-1).mean(-1, keepdims=True)
        population = mean.mean(-1, keepdims=True) if layer.centre else np.zeros_like(second)
        shift, variance = np.broadcast_arrays(population, second - population**2)
        normed = _normalised(graph, x, shift, variance, layer.eps, x.zero_mean)
    return _scaled(graph, normed, layer.affine), None


def _scaled(graph: Graph, x: Node, affine: tuple[float, float] | None) -> Node:
    """scale x + shift, constants (no node for affine=None); a zero scale with a zero shift maps to 0."""
    if affine is None:
        return x
    scale, shift = affine
    inverse = np.full((1, graph.batch), np.inf if scale == 0 else 1 / scale)
    return graph.affine(x, np.full((1, graph.batch), 0.0 if scale == 0 else -shift / scale), inverse,
                        x.zero_mean and shift == 0)


@theory_map.register(LayerNorm)
@theory_map.register(RMSNorm)
def _layer_norm(layer: LayerNorm, graph: Graph, x: Node, sizes: tuple[int, ...] | None) -> tuple[Node, None]:
    """Each example over its features (derive_layer_norm); RMSNorm is the uncentred one (c_a = 0)."""
    kernel, mean = x.kernel().value, x.mean().value
    diagonal = np.diagonal(kernel, axis1=-2, axis2=-1)
    shift = mean if layer.centre else np.zeros_like(mean)
    shift, variance = np.broadcast_arrays(shift, diagonal - shift**2)
    return _scaled(graph, _normalised(graph, x, shift, variance, layer.eps, layer.centre or x.zero_mean),
                   layer.affine), None


@theory_map.register
def _residual(layer: Residual, graph: Graph, x: Node, sizes: tuple[int, ...] | None) -> tuple[Node, Node]:
    """skip(x) + alpha branch(x): a Dense skip draws fresh weights, independent of the branch's."""
    skip, branch = x, x
    for inner in layer.skip:
        skip = theory_map(inner, graph, skip, sizes)[0]
    for inner in layer.branch:
        branch = theory_map(inner, graph, branch, sizes)[0]
    return graph.add(skip, branch, layer.alpha), branch


def build(net: Serial, sigma0: np.ndarray, sampling: Sampling,
          sizes: tuple[int, ...] | None = None) -> tuple[Graph, list[Node], dict[int, Node]]:
    """The graph of ``net`` on inputs with Gram ``sigma0``: the output node of each top-level layer, and the branch
    output of each top-level residual block by its position. ``sizes``: the batches the inputs form (default one)."""
    graph = Graph(sigma0.shape[0], sampling)
    x, outputs, branches = graph.input(sigma0), [], {}
    for position, layer in enumerate(net):
        x, branch = theory_map(layer, graph, x, sizes)
        outputs.append(x)
        if branch is not None:
            branches[position] = branch
    return graph, outputs, branches


def _estimate(moment: Moment, method: str) -> Estimate:
    """A per-replicate moment as an Estimate: the replicates' mean, their standard error plus the bound."""
    values = moment.value
    if len(values) == 1:
        return Estimate(values[0].copy(), moment.bound.copy(), method)  # copies: the caller owns them
    spread = values.std(0, ddof=1) / np.sqrt(len(values))
    return Estimate(values.mean(0), spread + moment.bound, "qmc")


def kernel(net: object, Sigma0: object, with_error: bool = False, points: int = 2**12, replicates: int = 16,
           seed: int = 0) -> np.ndarray | Estimate:
    """The B x B output kernel K_ab = lim E[x_a . x_b / n] of ``net`` (a layer, list or Serial) for one batch whose
    input Gram is Sigma0 (conventions in :mod:`bnsym.arch`).

    Closed forms and quadratures where a layer's law allows them, randomised quasi-Monte Carlo otherwise
    (``replicates`` scramblings of ``points`` Sobol points each; the error is their standard error). Returns the
    matrix, or with ``with_error=True`` its :class:`~bnsym.core.estimate.Estimate`. ValueError for an unknown layer,
    a network not starting with a Dense, a Sigma0 that is not PSD, B < 4 with a train-mode BatchNorm, or a
    result whose error exceeds 1% of its size (raise ``points``).
    """
    sampling = check_sampling(points, replicates, seed)
    network, sigma = check_inputs(net, Sigma0, gradient=False, sampling=sampling)
    with _float64_range(sigma):
        graph, outputs, _ = build(network, sigma, sampling)  # the graph held while its nodes are read
        result = _estimate(outputs[-1].kernel(), "exact")
    check_resolved(result.value, result.error, f"the output kernel for this Sigma0 with {sampling.points} points "
                   "(raise points)")
    return result if with_error else result.value


@dataclass(frozen=True)
class SignalPropagation:
    """Per top-level layer of a network (``layers``, in the spec grammar): the kernel and Brock et al.'s (2021)
    signal-propagation summaries, each an :class:`~bnsym.core.estimate.Estimate` over the layers.

    * ``kernels``: the B x B kernel after each layer;
    * ``diagonal`` (1/B) sum_a K_aa and ``off_diagonal`` the mean of K_ab over a != b; ``correlation`` the mean
      of K_ab / sqrt(K_aa K_bb) over a != b;
    * ``channel_mean_squared`` = 1^T K 1 / B^2, the limit of the average over neurons of the squared batch mean,
      and ``channel_variance`` = tr(G K) / B, the average over neurons of the batch variance;
    * ``branch_variance``: for each top-level residual block (by position), the channel variance of its branch's
      output (before alpha);
    * ``gradient``: S^l in the limit, the sum over examples a of the squared Frobenius norm of df(x_a)/dx^l, with
      f = v . x_out / sqrt(n), v standard normal, and x^l the n x B output of layer l; S = B after the last layer.
      inf where the gradient's second moment diverges (``note`` says where and why);
    * ``block`` = (start, length): the layers from ``start`` on repeat a block of ``length`` layers (the smallest
      period covering the most layers, compared by kind, a Dense's variances left out; (0, 1) if nothing repeats);
      ``gradient_growth``: the growth factor S(before block k) / S(after block k) of each block that has a layer
      before it (all blocks but the first when start = 0), its error the sum of the two relative errors; inf (with
      the note) where S is.
    """

    layers: tuple[str, ...]
    kernels: tuple[Estimate, ...]
    diagonal: Estimate
    off_diagonal: Estimate
    correlation: Estimate
    channel_mean_squared: Estimate
    channel_variance: Estimate
    branch_variance: dict[int, Estimate]
    gradient: Estimate
    block: tuple[int, int]
    gradient_growth: Estimate


def _summaries(kernel: Moment) -> dict[str, Moment]:
    """The signal-propagation summaries of a kernel, per replicate, with their bounds."""
    values, bound = kernel.value, kernel.bound
    batch = values.shape[-1]
    off = ~np.eye(batch, dtype=bool)
    diagonal = np.diagonal(values, axis1=-2, axis2=-1)
    root = np.sqrt(np.clip(diagonal, 0.0, None))
    scale = root[:, :, None] * root[:, None, :]
    correlation = np.divide(values, scale, out=np.zeros_like(values), where=scale > 0)
    total, trace = values.sum((-2, -1)), diagonal.sum(-1)
    parts = {
        "diagonal": (diagonal.mean(-1), np.diagonal(bound).mean()),
        "off_diagonal": (values[:, off].mean(-1) if batch > 1 else np.zeros(len(values)), bound[off].mean() if batch > 1
                         else 0.0),
        "correlation": (correlation[:, off].mean(-1) if batch > 1 else np.ones(len(values)), 2 * kernel.relative),
        "channel_mean_squared": (total / batch**2, bound.sum() / batch**2),
        "channel_variance": (trace / batch - total / batch**2, np.trace(bound) / batch + bound.sum() / batch**2),
    }
    return {key: Moment(value, np.asarray(error)) for key, (value, error) in parts.items()}


INFINITE_NOTE = ("is infinite at layers {}: a train-mode BatchNorm with eps = 0 acts on {}; its Jacobian grows like "
                 "1/r, r the spread of its input over the batch, and E[r^-2] diverges; any eps > 0 bounds it")


def _stack(moments: list[Moment], what: str) -> Estimate:
    """One Estimate over the layers from per-layer moments (replicates may differ in number: 1 or R)."""
    estimates = [Estimate(np.inf, 0.0, "exact") if m.infinite else
                 _estimate(Moment(np.atleast_1d(m.value), np.asarray(m.bound)), "exact") for m in moments]
    value = np.array([e.value for e in estimates])
    infinite = [position for position, m in enumerate(moments) if m.infinite]
    why = " and on ".join(dict.fromkeys(m.why for m in moments if m.infinite))
    return Estimate(value, np.array([e.error for e in estimates]),
                    "qmc" if "qmc" in {e.method for e in estimates} else "exact",
                    f"{what} {INFINITE_NOTE.format(infinite, why)}" if infinite else "")


def _kind(layer: Layer) -> str:
    """A layer's name with its Dense variances left out (also inside a residual branch): the blocks of a network
    repeat by kind, and a model read by ``from_torch`` estimates each Linear's variances from its own weights."""
    if isinstance(layer, Dense):
        return "dense" if layer.init == "gaussian" else f"dense({layer.init})"
    if isinstance(layer, Residual):
        skip = "".join(f"{_kind(inner)}," for inner in layer.skip)
        return f"res({layer.alpha!r},{skip}{','.join(_kind(inner) for inner in layer.branch)})"
    return describe(layer)


def _repeated_block(layers: list[str]) -> tuple[int, int]:
    """(start, p): the layers (their :func:`_kind`) from ``start`` on repeat with the smallest period p covering
    the most layers, (0, 1) if nothing repeats; the repeated units are the blocks whose gradient growth is
    reported."""
    best = (len(layers), 0, 1)  # (uncovered layers, start, period)
    for period in range(1, len(layers) // 2 + 1):
        start = len(layers) - period
        while start > 0 and layers[start - 1] == layers[start - 1 + period]:
            start -= 1
        start += (len(layers) - start) % period
        if len(layers) - start >= 2 * period and start < best[0]:
            best = (start, start, period)
    return best[1], best[2]


def _growth(gradient: Estimate, start: int, period: int) -> Estimate:
    """S before / S after each repeated block from ``start`` (period ``period``) that has a layer before it."""
    ends = np.arange(start - 1 + period, len(gradient.value), period)
    ends = ends[ends - period >= 0]
    before, after = gradient.value[ends - period], gradient.value[ends]
    relative = gradient.error[ends - period] / before + gradient.error[ends] / after
    infinite = ~(np.isfinite(before) & np.isfinite(after))
    with np.errstate(invalid="ignore", divide="ignore"):
        value = np.where(infinite, np.inf, before / after)
        error = np.where(infinite, 0.0, value * relative)
    return Estimate(value, error, gradient.method, gradient.note)


def _result(network: Serial, kernels: list[Moment], summaries: list[dict[str, Moment]], branches: dict[int, Node],
            gradients: list[Moment]) -> SignalPropagation:
    layers = tuple(describe(layer) for layer in network)
    gradient = _stack(gradients, "the gradient statistic S")
    start, period = _repeated_block([_kind(layer) for layer in network])
    return SignalPropagation(
        layers=layers,
        kernels=tuple(_estimate(k, "exact") for k in kernels),
        **{key: _stack([s[key] for s in summaries], key) for key in summaries[0]},
        branch_variance={position: _estimate(_summaries(node.kernel())["channel_variance"], "exact")
                         for position, node in branches.items()},
        gradient=gradient,
        block=(start, period),
        gradient_growth=_growth(gradient, start, period),
    )


def signal_propagation(net: object, Sigma0: object, points: int = 2**12, replicates: int = 16,
                       seed: int = 0) -> SignalPropagation:
    """The predicted signal propagation of ``net`` on one batch with input Gram Sigma0 (:class:`SignalPropagation`),
    each top-level layer's kernel and summaries and the gradient statistic S^l, each with its error. Routes and
    arguments as for :func:`kernel`; the gradient follows each layer's backward map, batch norm's coupling included
    (``bnsym.arch.graph``). ValueError as for :func:`kernel`, and for an activation whose slope has an infinite
    second moment."""
    sampling = check_sampling(points, replicates, seed)
    network, sigma = check_inputs(net, Sigma0, gradient=True, sampling=sampling)
    with _float64_range(sigma):
        graph, outputs, branches = build(network, sigma, sampling)
        kernels = [node.kernel() for node in outputs]
        gradients = backward(graph, outputs[-1])
        summaries = [_summaries(k) for k in kernels]
        result = _result(network, kernels, summaries, branches, [gradients[node] for node in outputs])
    where = f"for this Sigma0 with {sampling.points} points (raise points)"
    for position, estimate in enumerate(result.kernels):
        check_resolved(estimate.value, estimate.error,
                       f"the kernel after layer {position} ({result.layers[position]}) {where}")
    for position in range(len(outputs)):
        if not gradients[outputs[position]].infinite:
            check_resolved(result.gradient.value[position], result.gradient.error[position],
                           f"the gradient statistic after layer {position} ({result.layers[position]}) {where}")
    return result
