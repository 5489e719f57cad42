"""Bjorck et al.'s fully connected ResNet-v1 on digits (2018, Sec. 3, Table 2, App. G, J): the one network of
chapters 12 and 12c, C networks side by side.

W_in (64 -> n), L blocks x' = ReLU(x + N(W_2 ReLU(N(W_1 x)))), a linear read-out with bias; Xavier-normal weights
(:func:`init_params`, drawn by the twin of :func:`xavier`'s Dense layers). N is batch norm as eq. (1) has it,

    N(h) = gamma (h - mu) / sqrt(sigma^2 + eps) + beta,   mu, sigma^2 the batch mean and (biased) variance per unit,

and a :class:`Norm` says which of its four parts a network keeps (Table 2: a dropped gamma is 1, a dropped beta 0,
a dropped mu 0, a dropped sigma^2 leaves h unscaled), where it sits (``top``: only in the top k blocks; ``head``:
one more after the last block, before the read-out, App. G) and how its statistics are taken (``alternate``:
recomputed only every other step, the other steps reuse the last ones as constants, App. J). The normalisation is
:func:`bnsym.core.batchnorm.batch_norm_forward`, the one forward of the book. Training is in
:mod:`bnsym.train.bjorck`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from ..core.batchnorm import batch_norm_forward
from ..core.device import default_device, generator
from ..core.digits import N_CLASSES
from ..core.layers import Activation, BatchNorm, Dense, Residual, Serial, serial
from .arch import dense_parameters

EPS = 1e-5  # batch norm's epsilon (PyTorch's default, the paper's framework)
PARTS = ("gamma", "beta", "mu", "sigma")
N_FEATURES = 64  # the digits' 8 x 8 pixels


@dataclass(frozen=True)
class Norm:
    """Which parts of batch norm a network keeps, where and how. ``top``: BN in the top ``top`` blocks only (None:
    every block); ``head``: one more BN after the last block; ``alternate``: statistics recomputed every other
    step only."""

    gamma: bool = True
    beta: bool = True
    mu: bool = True
    sigma: bool = True
    top: int | None = None
    head: bool = False
    alternate: bool = False

    @classmethod
    def keeping(cls, parts: Sequence[str], **where: object) -> Norm:
        """The norm that keeps ``parts`` (a subset of gamma, beta, mu, sigma); ``where``: top, head, alternate."""
        return cls(**{part: part in parts for part in PARTS}, **where)

    @property
    def normalises(self) -> bool:
        """Whether N touches h at all (a BN without mu and sigma^2 is an affine map at most)."""
        return self.mu or self.sigma

    def sites(self, blocks: int) -> list[bool]:
        """Per normalisation site (two per block, then the head): whether it has a BN."""
        first = 0 if self.top is None else max(blocks - self.top, 0)
        return [block >= first for block in range(blocks) for _ in (0, 1)] + [self.head]


PLAIN_BN = Norm.keeping(("mu", "sigma"))  # batch norm without gamma and beta (the networks of chapter 12)


def normalise(h: torch.Tensor, norm: Norm, gamma: torch.Tensor | None, beta: torch.Tensor | None,
              reference: torch.Tensor | None, where: torch.Tensor | None = None) -> torch.Tensor:
    """N(h) for h (C, B, n) with the parts ``norm`` keeps, gamma and beta (C, n); statistics of ``reference``
    (C, B', n; population or stale statistics) in place of h's own when given; ``where`` (C,) bool: only those
    networks normalise, the others pass h on."""
    if norm.normalises:
        y, s = batch_norm_forward(h, EPS, -2, reference=reference)
        normalised = y if norm.sigma and norm.mu else (h / s if norm.sigma else y * s)
        h = normalised if where is None else torch.where(where[:, None, None], normalised, h)
    if norm.gamma:
        h = gamma[:, None, :] * h
    return h + beta[:, None, :] if norm.beta else h


def xavier(n_in: int, n_out: int) -> Dense:
    """Xavier-normal (Glorot) weights from n_in to n_out features as a description: a Gaussian Dense of entry
    variance 2 / (n_in + n_out), weight_var = 2 n_in / (n_in + n_out), no bias."""
    return Dense(2 * n_in / (n_in + n_out))


def init_params(n_networks: int, blocks: int, width: int, gen: torch.Generator, device) -> list[torch.Tensor]:
    """Xavier-normal W_in (C, n, 64), blocks (C, L, 2, n, n), W_out (C, 10, n) drawn by the twin of
    :func:`xavier`'s Dense layers (:func:`bnsym.sim.arch.dense_parameters`, in this order), zero b_out; gamma = 1 and
    beta = 0 per site (C, 2L + 1, n). L >= 1."""
    def weight(n_in: int, n_out: int) -> torch.Tensor:
        return dense_parameters(xavier(n_in, n_out), n_in, n_out, n_networks, gen, device,
                                torch.get_default_dtype())[0]

    w_in = weight(N_FEATURES, width)
    w_blocks = torch.stack([weight(width, width) for _ in range(2 * blocks)], 1).unflatten(1, (blocks, 2))
    sites = (n_networks, 2 * blocks + 1, width)
    return [w_in, w_blocks, weight(width, N_CLASSES), torch.zeros(n_networks, N_CLASSES, device=device),
            torch.ones(sites, device=device), torch.zeros(sites, device=device)]


def description(blocks: int, width: int, norm: Norm = PLAIN_BN) -> Serial:
    """The digit ResNet at initialisation as a description: :func:`xavier` Dense 64 -> n, ``blocks`` x
    [Residual([Dense, N, relu, Dense, N]), relu], the head's N, the Dense read-out n -> 10 (the twin's
    ``out_features``), N = BatchNorm(EPS) at the sites ``norm`` puts one (gamma = 1 and beta = 0, their initial
    values, are no affine map; none where ``norm`` keeps neither mu nor sigma). :func:`forward` runs it in
    (C, B, n) with the sites' options (stale statistics, BN in some networks only) that a description has not.
    ValueError for what no BatchNorm describes: mu without sigma (h - mu), sigma without mu (h over the centred
    standard deviation), alternating statistics (a training schedule)."""
    if norm.mu != norm.sigma:
        kept = "mu without sigma (h - mu)" if norm.mu else "sigma without mu (h / sqrt(var h + eps), not centred)"
        raise ValueError(f"a digit ResNet whose batch norm keeps {kept} has no description: a BatchNorm normalises "
                         "by both (centre=False divides by the uncentred sqrt(mean h^2 + eps))")
    if norm.alternate:
        raise ValueError("alternate=True recomputes the statistics every other training step: a schedule of "
                         "training, not a layer of the network at initialisation")
    sites = norm.sites(blocks) if norm.normalises else [False] * (2 * blocks + 1)

    def site(k: int) -> list[BatchNorm]:
        return [BatchNorm(EPS)] if sites[k] else []

    relu, square = Activation("relu"), xavier(width, width)
    layers = [xavier(N_FEATURES, width)]
    for block in range(blocks):
        layers += [Residual([square, *site(2 * block), relu, square, *site(2 * block + 1)]), relu]
    return serial(layers, site(2 * blocks), xavier(width, N_CLASSES))


def init_resnets(configs: int, blocks: int, width: int, seed: int, device=None) -> list[torch.Tensor]:
    """Xavier-normal parameters of ``configs`` digit ResNets: W_in (64 -> n), blocks (n -> n), W_out, b_out; the
    first four of :func:`init_params` (the one initialisation of the digit ResNet)."""
    device = device or default_device()
    return init_params(configs, blocks, width, generator(seed, device), device)[:4]


def forward(params: Sequence[torch.Tensor], x: torch.Tensor, norm: Norm,
            references: Sequence[torch.Tensor | None] | None = None, where: torch.Tensor | None = None,
            moments: list[torch.Tensor] | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (C, B, 10) for inputs x (B, 64) or (C, B, 64) and the pre-normalisation h of every BN site, in order;
    the sites normalise with the statistics of ``references`` (one per site, as returned here) when given, in the
    networks ``where`` (C,) bool only when given. ``params``: those of :func:`init_params`, or its first four when
    ``norm`` keeps neither gamma nor beta. ``moments``: a list that receives each block's mean x^2 (C,)."""
    w_in, w_blocks, w_out, b_out, gamma, beta = (*params, None, None)[:6]
    blocks = w_blocks.shape[1]
    has_bn = norm.sites(blocks)
    taken: list[torch.Tensor] = []

    def site(h, k):
        if not has_bn[k]:
            return h
        taken.append(h)
        reference = None if references is None else references[len(taken) - 1]
        return normalise(h, norm, None if gamma is None else gamma[:, k], None if beta is None else beta[:, k],
                         reference, where)

    h = x @ w_in.mT
    for block in range(blocks):
        branch = torch.relu(site(h @ w_blocks[:, block, 0].mT, 2 * block)) @ w_blocks[:, block, 1].mT
        h = torch.relu(h + site(branch, 2 * block + 1))
        if moments is not None:
            moments.append(h.square().mean((-2, -1)))
    return site(h, 2 * blocks) @ w_out.mT + b_out[:, None, :], taken


def resnet_logits(params: list[torch.Tensor], x: torch.Tensor, batch_norm: torch.Tensor,
                  record: bool = False) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits (C, B, 10) of C networks (the first four parameters of :func:`init_params`) on inputs x (B, 64) or
    (C, B, 64); ``batch_norm`` (C,) bool picks BN (without gamma and beta) per network: :func:`forward`. With
    ``record``, the per-block mean x^2 of each network, (C,) each."""
    moments = [] if record else None
    logits, _ = forward(params, x, PLAIN_BN, where=batch_norm, moments=moments)
    return logits, moments or []
