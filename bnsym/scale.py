"""Run sizes: ``BNSYM_SCALE=test`` (seconds, CI), ``book`` (default, minutes on a laptop CPU), ``paper`` (GPU).

Notebooks take every simulation size from :func:`current`, so one notebook is a fast test in CI, a
book page, and a paper-scale run on a GPU. A :class:`Scale` holds the sizes that chapters 1-4 and 13 share, and
one record per later chapter whose fields are that chapter's experiments (``current().epsilon.gradients.widths``).
Every experiment's sizes are a :class:`Sizes`: its field names are the one vocabulary of run sizes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields


@dataclass(frozen=True, repr=False)
class Sizes:
    """The sizes of one experiment; a field the experiment does not use is None.

    Attributes (one field each):

    * ``width``: network width N, the neurons per layer (the side n of a square random matrix, the dimension d of
      a batch-norm chain).
    * ``widths``: several widths, increasing: a 1/N extrapolation or a sweep over the width.
    * ``depth``: layers of a network (blocks of a residual network, factors of a matrix product, steps of a chain).
    * ``depths``: several depths, increasing.
    * ``n_networks``: independent random networks (matrix products, chains, trained initialisations) over which a
      mean and its standard error are taken.
    * ``n_draws``: independent Monte Carlo draws of a random object that is not a network (a random block, a
      minibatch, a two-batch map, a drift step).
    * ``n_points``: inputs per draw, where they are not a batch-norm batch.
    * ``batch_size``: B, the inputs that batch norm normalises together.
    * ``batch_sizes``: several batch sizes, increasing.
    * ``n_train``: the first n_train training examples of a data set; None: all of them.
    * ``n_test``: the first n_test test examples of a data set; None: all of them.
    * ``epochs``: passes over the training set.
    * ``n_steps``: optimisation steps.
    * ``burn_in``: steps of a chain discarded before its statistics are taken.
    * ``n_values``: values per parameter of a curve or a map (its resolution).
    * ``learning_rates``: the learning rates tried; None stands for the library's chosen rate.
    """

    width: int | None = None
    widths: tuple[int, ...] | None = None
    depth: int | None = None
    depths: tuple[int, ...] | None = None
    n_networks: int | None = None
    n_draws: int | None = None
    n_points: int | None = None
    batch_size: int | None = None
    batch_sizes: tuple[int, ...] | None = None
    n_train: int | None = None
    n_test: int | None = None
    epochs: int | None = None
    n_steps: int | None = None
    burn_in: int | None = None
    n_values: int | None = None
    learning_rates: tuple[float | None, ...] | None = None

    def __repr__(self) -> str:
        """Only the sizes the experiment uses."""
        values = ((field.name, getattr(self, field.name)) for field in fields(self))
        return f"Sizes({', '.join(f'{name}={value!r}' for name, value in values if value is not None)})"


@dataclass(frozen=True)
class Architectures:
    """Chapter 6, where batch norm goes."""

    twins: Sizes  # the five architectures' twins: depth blocks on one batch of batch_size, n_networks per width
    growth: Sizes  # the table of gradient growth per block: depth blocks, at each of batch_sizes
    downscaling: Sizes  # the sqrt(depth) law: a pre-activation ResNet of depth blocks, its twins as for twins


@dataclass(frozen=True)
class Dilution:
    """Chapter 7, gradient scale and dilution (Philipp et al.); the paper's networks have width 100 and depth 50
    at every scale."""

    blocks: Sizes  # Theorem 3 and Proposition 7: random residual blocks (n_draws), n_points inputs each
    units: Sizes  # the batch-norm GSC rate of one unit of width N on N inputs, extrapolated over widths
    table1: Sizes  # Table 1: every architecture on one batch of batch_size points (the paper's: 10 000)
    batch_sweep: Sizes  # the batch-ReLU GSC against the batch size
    table3: Sizes  # Table 3: the dynamical-system ResNets
    twin: Sizes  # the torch twins of Table 1's vanilla descriptions (n_networks per width), extrapolated to n -> inf


@dataclass(frozen=True)
class Explode:
    """Chapter 7b, gradients explode and deep networks are shallow (Philipp et al.); its vanilla networks have
    width 100 at every scale."""

    orders: Sizes  # Theorem 1: gradient terms split by residual factors, n_networks of width at each of depths
    sphere: Sizes  # Theorem 2 / Prop. 6: n_points of the sphere quadrature, n_networks macro-layer draws, depth
    params: Sizes  # Prop. 3 and 5: n_draws random matrices
    noise: Sizes  # section 4.5: n_draws minibatch draws; networks of depth on batch_size points, batch_sizes b
    meanfield: Sizes  # B.1.1: n_networks bias-free MLPs of width and depth
    resnets: Sizes  # Fig. 3 and B.1.2: ResNets of up to max(depths) blocks on n_points points, n_networks each
    collapse: Sizes  # Fig. 1B-C: one batch of batch_size points per network, n_networks per architecture
    training: Sizes  # chapter 7c, digits for CIFAR-10: n_networks per architecture, measured on n_points images


@dataclass(frozen=True)
class Epsilon:
    """Chapter 5, epsilon, gamma and beta."""

    gradients: Sizes  # gradient networks per width, extrapolated in 1/N
    lines: Sizes  # the maximal-trainable-depth lines of Fig. 5 (n_values points each)


@dataclass(frozen=True)
class CrossBatch:
    """Chapter 8, cross-batch statistics."""

    two_batch_map: Sizes  # Monte Carlo draws of the two-batch map
    forward: Sizes  # forward networks, at width / 4, width / 2 and width
    backward: Sizes  # gradient networks, at width / 2, 3 width / 4 and width
    circle: Sizes  # the network of Figs. 2 and 6


@dataclass(frozen=True)
class Nngp:
    """Chapter 9, the batch-norm NNGP."""

    kernel: Sizes  # finite networks against the kernel, extrapolated in 1/N
    digits: Sizes  # the GP posteriors on digits
    diabetes: Sizes  # the GP regression on diabetes
    sgd: Sizes  # the SGD-trained networks beside the digits posteriors


@dataclass(frozen=True)
class BnNtk:
    """Chapter 9b, the tangent kernel of batch-normalised networks."""

    routes: Sizes  # forward against per-entry routes on the same samples (n_draws: quasi-Monte Carlo points)
    reference: Sizes  # finite networks on the reference setting (12 inputs in batches of 7 and 5)
    finite: Sizes  # finite networks against the theory, extrapolated in 1/N
    batches: Sizes  # one pair of digits among n_draws sets of companions, at each depth
    trained: Sizes  # wide networks trained by gradient descent on digits against the NTK estimator
    accuracy: Sizes  # the accuracy table (BN-NTK, BN-NNGP, no-BN NTK, SGD nets of width `width`)


@dataclass(frozen=True)
class Trainability:
    """Chapter 10, trainability."""

    grid: Sizes  # the depth x batch-size grids of Fig. 3 (n_networks trained per cell)
    ghost: Sizes  # the ghost-batch grid: its batch_size is the ghost batch
    maps: Sizes  # the accuracy maps of Fig. 5
    lr_check: Sizes  # the learning-rate check on shallow networks
    first_steps: Sizes  # the first SGD steps of Fig. 4


@dataclass(frozen=True)
class RankCollapse:
    """Chapter 11, rank collapse (Daneshmand et al.)."""

    lyapunov: Sizes  # Ginibre products for the Lyapunov spectrum
    chains: Sizes  # batch-norm chains at several widths
    drift: Sizes  # the second-order drift
    bn_lyapunov: Sizes  # the top Lyapunov exponent of the batch-norm chain
    depth_curves: Sizes  # the representations of Fig. 2
    slope: Sizes  # the log singular-value ratio of linear networks
    cosines: Sizes  # the mean-field cosines of wide ReLU networks
    init_ranks: Sizes  # the ranks at initialisation of Fig. 1
    asymmetric: Sizes  # one batch-norm layer under the asymmetric init
    crossover: Sizes  # the rank crossover, over widths d and the same values as batch sizes
    training: Sizes  # chapter 11b: the digits grid (depths x models x learning rates, n_networks seeds per cell,
    # n_steps of rank pre-training)
    controls: Sizes  # chapter 11b: the depth of the batch-norm controls (no centring, asymmetric init)
    small_gamma: Sizes  # batch-norm chains at gamma = 0.01 (Fig. 3a)
    proofs: Sizes  # the chains of Lemmas 5, 6, 10, Cor. 15 and the varying-width blocks; the residual Lyapunov gap


@dataclass(frozen=True)
class Products:
    """Chapter 12, products of random matrices and residual networks (Bjorck et al.)."""

    fuss_catalan: Sizes  # Gaussian products per width, extrapolated in 1/N
    conditioning: Sizes  # the condition number of products of up to depth factors
    gradient_descent: Sizes  # gradient descent on deep linear networks
    noise: Sizes  # minibatch gradient noise
    residual: Sizes  # residual networks, with and without batch norm
    alignment: Sizes  # the alignment of minibatch noise
    digits: Sizes  # the digits training grids (depths in blocks)
    resnet_init: Sizes  # chapter 12b: n_networks conv ResNet-(6 depth + 2) of width channels, one batch_size batch each
    training: Sizes  # chapter 12c: digit ResNets of depth blocks, n_networks seeds per rate, n_values curve points
    landscape: Sizes  # Fig. 24: n_networks digit ResNets per arm, the loss along the gradient of a minibatch


@dataclass(frozen=True)
class Normalization:
    """Chapter 14, normalization layers beyond batch norm."""

    kernel_maps: Sizes  # the correlation of two inputs through depth blocks: n_networks twins per width, extrapolated
    float32: Sizes  # the float32 depth rule: n_networks sigmoid networks of width, depth blocks, float32 and float64


@dataclass(frozen=True)
class Reliability:
    """Chapter 15, how far to trust a prediction (the full grid: ``benchmarks/prediction_reliability.py``)."""

    slice: Sizes  # the live slice: every probe at batch_sizes and widths, n_networks at the smallest of both


@dataclass(frozen=True)
class Scale:
    """Sizes of the Monte Carlo runs: network width N, number of independent networks and depth, shared by
    chapters 1-4 and 13, and one record per later chapter."""

    name: str
    width: int
    n_networks: int
    depth: int
    architectures: Architectures
    dilution: Dilution
    explode: Explode
    epsilon: Epsilon
    cross_batch: CrossBatch
    nngp: Nngp
    bn_ntk: BnNtk
    trainability: Trainability
    rank_collapse: RankCollapse
    products: Products
    normalization: Normalization
    reliability: Reliability


ARCHITECTURES = {
    "test": Architectures(twins=Sizes(widths=(64, 128, 256), n_networks=16, depth=2, batch_size=8),
                          growth=Sizes(depth=3, batch_sizes=(8,)),
                          downscaling=Sizes(widths=(64, 128, 256), n_networks=16, depth=6)),
    "book": Architectures(twins=Sizes(widths=(64, 128, 256), n_networks=32, depth=3, batch_size=8),
                          growth=Sizes(depth=3, batch_sizes=(8, 32, 128)),
                          downscaling=Sizes(widths=(64, 128, 256), n_networks=32, depth=12)),
    "paper": Architectures(twins=Sizes(widths=(128, 256, 512), n_networks=128, depth=8, batch_size=32),
                           growth=Sizes(depth=10, batch_sizes=(8, 32, 128)),
                           downscaling=Sizes(widths=(128, 256, 512), n_networks=128, depth=50)),
}

DILUTION = {
    "test": Dilution(blocks=Sizes(n_points=1000, n_draws=6), units=Sizes(widths=(128, 256), n_networks=8),
                     table1=Sizes(batch_size=400, n_networks=4),
                     batch_sweep=Sizes(batch_sizes=(250, 1000), n_networks=24),
                     table3=Sizes(batch_size=400, n_networks=3),
                     twin=Sizes(widths=(64, 128, 256), n_networks=6)),
    "book": Dilution(blocks=Sizes(n_points=2000, n_draws=8), units=Sizes(widths=(128, 256, 512), n_networks=12),
                     table1=Sizes(batch_size=2000, n_networks=8),
                     batch_sweep=Sizes(batch_sizes=(500, 1000, 2000, 5000), n_networks=24),
                     table3=Sizes(batch_size=500, n_networks=4),
                     twin=Sizes(widths=(96, 192, 384), n_networks=12)),
    "paper": Dilution(blocks=Sizes(n_points=4000, n_draws=20),
                      units=Sizes(widths=(256, 512, 1024, 2048), n_networks=40),
                      table1=Sizes(batch_size=10_000, n_networks=20),
                      batch_sweep=Sizes(batch_sizes=(1000, 2000, 5000, 10_000), n_networks=24),
                      table3=Sizes(batch_size=500, n_networks=10),
                      twin=Sizes(widths=(128, 256, 512), n_networks=32)),
}

EXPLODE = {
    "test": Explode(orders=Sizes(width=32, n_networks=64, depths=(10, 40)),
                    sphere=Sizes(n_points=20_000, n_networks=3, depth=6),
                    params=Sizes(n_draws=4000), noise=Sizes(n_draws=20_000, depth=20, batch_size=2000,
                                                            batch_sizes=(20, 100, 500)),
                    meanfield=Sizes(width=100, depth=20, n_networks=4),
                    resnets=Sizes(depths=(10, 25), n_points=150, n_networks=1),
                    collapse=Sizes(batch_size=200, n_networks=1),
                    training=Sizes(depth=4, width=16, epochs=2, n_networks=2, n_points=64, batch_size=128)),
    "book": Explode(orders=Sizes(width=48, n_networks=128, depths=(10, 40, 120)),
                    sphere=Sizes(n_points=60_000, n_networks=4, depth=8),
                    params=Sizes(n_draws=8000), noise=Sizes(n_draws=40_000, depth=50, batch_size=4000,
                                                              batch_sizes=(20, 100, 500, 2000)),
                    meanfield=Sizes(width=200, depth=50, n_networks=6),
                    resnets=Sizes(depths=(10, 25, 50), n_points=400, n_networks=2),
                    collapse=Sizes(batch_size=1000, n_networks=3),
                    training=Sizes(depth=16, width=32, epochs=4, n_networks=4, n_points=256, batch_size=128)),
    "paper": Explode(orders=Sizes(width=64, n_networks=200, depths=(10, 40, 160, 640)),
                     sphere=Sizes(n_points=400_000, n_networks=20, depth=10),
                     params=Sizes(n_draws=100_000), noise=Sizes(n_draws=400_000, depth=50, batch_size=10_000,
                                                                batch_sizes=(20, 100, 1000, 5000)),
                     meanfield=Sizes(width=400, depth=50, n_networks=20),
                     resnets=Sizes(depths=(10, 25, 50, 100), n_points=2000, n_networks=10),
                     collapse=Sizes(batch_size=10_000, n_networks=20),
                     training=Sizes(depth=50, width=100, epochs=30, n_networks=8, n_points=1000, batch_size=128)),
}

EPSILON = {
    "test": Epsilon(gradients=Sizes(widths=(64, 128, 256), n_networks=6, depth=8), lines=Sizes(n_values=4)),
    "book": Epsilon(gradients=Sizes(widths=(128, 256, 512), n_networks=16, depth=10), lines=Sizes(n_values=15)),
    "paper": Epsilon(gradients=Sizes(widths=(250, 500, 1000), n_networks=200, depth=50), lines=Sizes(n_values=60)),
}

CROSS_BATCH = {
    "test": CrossBatch(two_batch_map=Sizes(n_draws=40_000), forward=Sizes(width=256, n_networks=8, depth=8),
                       backward=Sizes(width=256, n_networks=8, depth=6),
                       circle=Sizes(width=128, n_networks=4, depth=120)),
    "book": CrossBatch(two_batch_map=Sizes(n_draws=400_000), forward=Sizes(width=1024, n_networks=24, depth=12),
                       backward=Sizes(width=512, n_networks=24, depth=8),
                       circle=Sizes(width=256, n_networks=12, depth=300)),
    "paper": CrossBatch(two_batch_map=Sizes(n_draws=4_000_000), forward=Sizes(width=2048, n_networks=64, depth=15),
                        backward=Sizes(width=1024, n_networks=64, depth=10),
                        circle=Sizes(width=256, n_networks=32, depth=400)),
}

NNGP = {
    "test": Nngp(kernel=Sizes(widths=(32, 48, 64, 128), n_networks=2000),
                 digits=Sizes(n_train=96, n_test=64, depths=(1, 2, 5, 10)),
                 diabetes=Sizes(n_train=96, depths=(1, 2, 5, 10)), sgd=Sizes(epochs=1)),
    "book": Nngp(kernel=Sizes(widths=(32, 64, 128, 256, 512), n_networks=8000),
                 digits=Sizes(n_train=384, n_test=256, depths=(1, 2, 5, 10, 20)),
                 diabetes=Sizes(depths=(1, 2, 5, 10, 20)), sgd=Sizes(epochs=3)),
    "paper": Nngp(kernel=Sizes(widths=(64, 128, 256, 512, 1024, 2048), n_networks=32000),
                  digits=Sizes(n_train=1024, depths=(1, 2, 5, 10, 20)),
                  diabetes=Sizes(depths=(1, 2, 5, 10, 20)), sgd=Sizes(epochs=10)),
}

BN_NTK = {
    "test": BnNtk(routes=Sizes(n_draws=2**10), reference=Sizes(width=256, n_networks=12),
                  finite=Sizes(widths=(64, 128, 256), n_networks=12, batch_size=8),
                  batches=Sizes(n_draws=2, depths=(1,), batch_size=8),
                  trained=Sizes(widths=(64, 256, 1024), n_networks=4, n_train=16, n_test=8, batch_size=8,
                                n_steps=100),
                  accuracy=Sizes(n_train=8, n_test=8, depths=(1, 2), batch_size=8, width=256, n_networks=2,
                                 n_steps=100)),
    "book": BnNtk(routes=Sizes(n_draws=2**12), reference=Sizes(width=1024, n_networks=32),
                  finite=Sizes(widths=(128, 256, 512, 1024), n_networks=32, batch_size=8),
                  batches=Sizes(n_draws=5, depths=(1, 3), batch_size=8),
                  trained=Sizes(widths=(256, 512, 1024, 2048, 4096), n_networks=8, n_train=32, n_test=16,
                                batch_size=8, n_steps=200),
                  accuracy=Sizes(n_train=16, n_test=8, depths=(1, 2), batch_size=8, width=512,
                                 n_networks=4, n_steps=200)),
    "paper": BnNtk(routes=Sizes(n_draws=2**12), reference=Sizes(width=2048, n_networks=128),
                   finite=Sizes(widths=(256, 512, 1024, 2048, 4096), n_networks=128, batch_size=8),
                   batches=Sizes(n_draws=10, depths=(1, 3, 10), batch_size=8),
                   trained=Sizes(widths=(512, 1024, 2048, 4096), n_networks=16, n_train=256, n_test=64,
                                 batch_size=32, n_steps=400),
                   accuracy=Sizes(n_train=64, n_test=64, depths=(1, 2, 5, 10), batch_size=8, width=1024,
                                  n_networks=8, n_steps=400)),
}

TRAINABILITY = {
    "test": Trainability(
        grid=Sizes(width=32, epochs=1, n_networks=2, depths=(4, 16), batch_sizes=(16, 64)),
        ghost=Sizes(batch_size=64, epochs=1), maps=Sizes(batch_size=32, n_values=2),
        lr_check=Sizes(learning_rates=(1e-5, None), batch_sizes=(32,)),
        first_steps=Sizes(width=64, n_networks=6, depths=(24,))),
    "book": Trainability(
        grid=Sizes(width=64, epochs=1, n_networks=2, depths=(4, 8, 16, 24, 32, 48),
                   batch_sizes=(4, 8, 16, 32, 64, 128)),
        ghost=Sizes(batch_size=64, epochs=3), maps=Sizes(batch_size=32, n_values=5),
        lr_check=Sizes(learning_rates=(1e-5, 1e-4, 1e-3, 1e-2, 3e-2), batch_sizes=(32,)),
        first_steps=Sizes(width=128, n_networks=8, depths=(10, 25, 50))),
    "paper": Trainability(
        grid=Sizes(width=384, epochs=10, n_networks=4, depths=tuple(range(5, 61, 5)),
                   batch_sizes=(4, 8, 16, 32, 64, 128, 256)),
        ghost=Sizes(batch_size=256, epochs=30), maps=Sizes(batch_size=32, n_values=9),
        lr_check=Sizes(learning_rates=(1e-5, 1e-4, 1e-3, 1e-2, 3e-2), batch_sizes=(8, 32)),
        first_steps=Sizes(width=1000, n_networks=16, depths=(10, 25, 50))),
}

RANK_COLLAPSE = {
    "test": RankCollapse(
        lyapunov=Sizes(depth=150, n_networks=8), chains=Sizes(widths=(8, 16, 32), depth=600, burn_in=200, n_networks=6),
        drift=Sizes(n_draws=20_000), bn_lyapunov=Sizes(width=8, depth=400, n_networks=4),
        depth_curves=Sizes(depth=300, n_networks=4), slope=Sizes(depth=300, n_networks=8),
        cosines=Sizes(n_networks=16), init_ranks=Sizes(n_networks=4), asymmetric=Sizes(width=512, n_networks=4),
        crossover=Sizes(widths=(8, 16, 32)),
        training=Sizes(depths=(2, 10, 30), width=32, batch_size=64, epochs=3, learning_rates=(0.03,), n_networks=3,
                       n_train=512, n_steps=10),
        controls=Sizes(depth=10),
        small_gamma=Sizes(widths=(8,), depth=1500, burn_in=1500),
        proofs=Sizes(widths=(8, 16), depth=400, burn_in=100, n_networks=8)),
    "book": RankCollapse(
        lyapunov=Sizes(depth=600, n_networks=16),
        chains=Sizes(widths=(8, 16, 32, 64), depth=2000, burn_in=400, n_networks=8),
        drift=Sizes(n_draws=40_000), bn_lyapunov=Sizes(width=16, depth=1500, n_networks=8),
        depth_curves=Sizes(depth=2000, n_networks=8), slope=Sizes(depth=600, n_networks=16),
        cosines=Sizes(n_networks=32), init_ranks=Sizes(n_networks=8), asymmetric=Sizes(width=512, n_networks=8),
        crossover=Sizes(widths=(8, 16, 32, 64)),
        training=Sizes(depths=(2, 10, 30, 50), width=48, batch_size=64, epochs=6, learning_rates=(0.01, 0.1),
                       n_networks=4, n_steps=75),
        controls=Sizes(depth=30),
        small_gamma=Sizes(widths=(8, 16), depth=6000, burn_in=4000),
        proofs=Sizes(widths=(8, 16, 32), depth=2000, burn_in=400, n_networks=16)),
    "paper": RankCollapse(
        lyapunov=Sizes(depth=5000, n_networks=32),
        chains=Sizes(widths=(8, 16, 32, 64, 128, 256), depth=20_000, burn_in=2000, n_networks=16),
        drift=Sizes(n_draws=200_000), bn_lyapunov=Sizes(width=32, depth=6000, n_networks=16),
        depth_curves=Sizes(depth=5000, n_networks=10), slope=Sizes(depth=1000, n_networks=32),
        cosines=Sizes(n_networks=64), init_ranks=Sizes(n_networks=16), asymmetric=Sizes(width=1024, n_networks=16),
        crossover=Sizes(widths=(8, 16, 32, 64, 128)),
        training=Sizes(depths=(2, 10, 30, 50), width=128, batch_size=64, epochs=30,
                       learning_rates=(0.003, 0.01, 0.03, 0.1, 0.3), n_networks=8, n_steps=75),
        controls=Sizes(depth=30),
        small_gamma=Sizes(widths=(8, 16, 32, 64), depth=40_000, burn_in=10_000),
        proofs=Sizes(widths=(8, 16, 32, 64), depth=10_000, burn_in=2000, n_networks=32)),
}

PRODUCTS = {
    "test": Products(
        fuss_catalan=Sizes(widths=(100, 200), n_networks=6), conditioning=Sizes(width=100, n_networks=4, depth=14),
        gradient_descent=Sizes(depths=(1, 2, 3)), noise=Sizes(n_draws=4000),
        residual=Sizes(width=128, batch_size=64, depth=12, n_networks=16), alignment=Sizes(n_draws=2000),
        digits=Sizes(depths=(1, 6), width=32, n_steps=40, n_networks=1),
        resnet_init=Sizes(depth=18, width=16, batch_size=32, n_networks=12),
        training=Sizes(depth=4, width=16, epochs=2, n_networks=2, n_values=2,
                       learning_rates=(1.0, 0.1, 0.01, 0.001)),
        landscape=Sizes(n_networks=16)),
    "book": Products(
        fuss_catalan=Sizes(widths=(100, 200, 400), n_networks=12),
        conditioning=Sizes(width=200, n_networks=6, depth=14),
        gradient_descent=Sizes(depths=(1, 2, 3)), noise=Sizes(n_draws=20_000),
        residual=Sizes(width=256, batch_size=128, depth=20, n_networks=24), alignment=Sizes(n_draws=20_000),
        digits=Sizes(depths=(1, 4, 16), width=32, n_steps=120, n_networks=2),
        resnet_init=Sizes(depth=18, width=16, batch_size=32, n_networks=24),
        training=Sizes(depth=12, width=32, epochs=6, n_networks=4, n_values=3,
                       learning_rates=(1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001)),
        landscape=Sizes(n_networks=32)),
    "paper": Products(
        fuss_catalan=Sizes(widths=(200, 400, 1000), n_networks=20),
        conditioning=Sizes(width=1000, n_networks=5, depth=12),
        gradient_descent=Sizes(depths=(1, 2, 3)), noise=Sizes(n_draws=100_000),
        residual=Sizes(width=512, batch_size=128, depth=54, n_networks=32), alignment=Sizes(n_draws=100_000),
        digits=Sizes(depths=(1, 4, 16, 32), width=64, n_steps=300, n_networks=3),
        resnet_init=Sizes(depth=18, width=16, batch_size=128, n_networks=32),
        training=Sizes(depth=32, width=64, epochs=40, n_networks=8, n_values=10,
                       learning_rates=(3.0, 1.0, 0.3, 0.1, 0.03, 0.01, 0.003, 0.001, 3e-4, 1e-4)),
        landscape=Sizes(n_networks=64)),
}

NORMALIZATION = {
    "test": Normalization(kernel_maps=Sizes(widths=(64, 128, 256), n_networks=12, depth=6),
                          float32=Sizes(width=256, n_networks=8, depth=24)),
    "book": Normalization(kernel_maps=Sizes(widths=(64, 128, 256), n_networks=24, depth=8),
                          float32=Sizes(width=512, n_networks=16, depth=24)),
    "paper": Normalization(kernel_maps=Sizes(widths=(256, 512, 1024, 2048), n_networks=128, depth=12),
                           float32=Sizes(width=2048, n_networks=64, depth=24)),
}

RELIABILITY = {
    "test": Reliability(slice=Sizes(widths=(32, 64, 128), batch_sizes=(8,), n_networks=256)),
    "book": Reliability(slice=Sizes(widths=(64, 128, 256), batch_sizes=(4, 16), n_networks=2048)),
    "paper": Reliability(slice=Sizes(widths=(64, 256, 1024, 4096), batch_sizes=(4, 16, 128), n_networks=16384)),
}

SCALES = {
    name: Scale(name, width=width, n_networks=n_networks, depth=depth, architectures=ARCHITECTURES[name],
                dilution=DILUTION[name], explode=EXPLODE[name],
                epsilon=EPSILON[name], cross_batch=CROSS_BATCH[name], nngp=NNGP[name], bn_ntk=BN_NTK[name],
                trainability=TRAINABILITY[name], rank_collapse=RANK_COLLAPSE[name], products=PRODUCTS[name],
                normalization=NORMALIZATION[name], reliability=RELIABILITY[name])
    for name, width, n_networks, depth in (("test", 256, 8, 12), ("book", 1024, 32, 30), ("paper", 1000, 200, 50))
}


def current() -> Scale:
    """The scale named by the environment variable BNSYM_SCALE (default ``book``)."""
    name = os.environ.get("BNSYM_SCALE", "book").strip().lower()
    if name not in SCALES:
        raise ValueError(f"BNSYM_SCALE={name!r} is not a known scale; use one of {', '.join(SCALES)}")
    return SCALES[name]
