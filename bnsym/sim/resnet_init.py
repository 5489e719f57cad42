"""Convolutional CIFAR ResNets at initialisation, as Bjorck et al. (2018) build them (Sec. 1.2, App. B), batched.

ResNet-(6n+2) (He et al. 2016): a 3x3 stem conv to C channels, three stages of n basic blocks with C, 2C, 4C
channels (stride 2 at the first block of stages 2 and 3), identity shortcuts with option A (subsample and
zero-pad channels), global average pooling and a linear layer to K classes. A basic block is
conv-[BN]-ReLU-conv-[BN]-add-ReLU. Xavier-uniform weights, zero biases, train-mode BN with gamma = 1, beta = 0.
M networks run as one: their channels are stacked, (B, M C, H, W), and every conv is grouped (groups = M), so
batch norm's per-channel statistics stay per network.

Conv layers are numbered as in the paper: 1 is the stem, block k of stage s holds layers 2 + 2(s n + k - 1) and
the next one. For each recorded layer, the summands of eq. (4), d^{bxy}_{c_o c_i i j} = dL/dOUT(b, c_o, x, y)
IN(b, c_i, x+i, y+j), give the four sums of Table 1 (:class:`SummandStats`), each scaled by 1/(|B| X Y) and
averaged over the kernel's parameters. Every conv layer also records its channels' bias gradients (Fig. 19); one
layer the summands of its most aligned parameter (Fig. 22) and one layer its kernel gradients with the output
gradient masked to one class at a time (App. L, Figs. 20, 21).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from ..core.device import configure_torch, default_device, generator
from ..core.validation import check_whole_number

EPS = 1e-5  # batch norm's epsilon (PyTorch's default, the paper's framework)


def layer_numbers(blocks_per_stage: int) -> list[tuple[int, int]]:
    """The paper's Table 1 layers scaled to ResNet-(6n+2): the first and second conv of the middle block
    (block ceil(n/2)) of each stage, (layer, stage). For n = 18 these are 18/19, 54/55, 90/91."""
    n = check_whole_number(blocks_per_stage, "blocks per stage n", 3, 10**4,
                           "the middle block must not be a stage's first (strided) block")
    middle = (n + 1) // 2
    return [(2 + 2 * (stage * n + middle - 1) + second, stage) for stage in range(3) for second in (0, 1)]


def _xavier(gen: torch.Generator, m: int, c_out: int, c_in: int, k: int, device, dtype) -> torch.Tensor:
    """(m c_out, c_in, k, k) Xavier-uniform: bound sqrt(6 / (fan_in + fan_out)), fans c k^2."""
    bound = (6 / ((c_in + c_out) * k * k)) ** 0.5
    return (2 * torch.rand(m * c_out, c_in, k, k, generator=gen, device=device, dtype=dtype) - 1) * bound


@dataclass(frozen=True)
class SummandStats:
    """Per recorded layer (axis 1) and network (axis 0): T1 = sum |d|, T2 = sum_b |sum_xy d|, T3 = sum_xy |sum_b d|,
    T4 = |sum d|, each / (|B| X Y) and averaged over the kernel; ``n`` = |B| X Y summands per parameter."""

    layers: tuple[int, ...]
    t: np.ndarray  # (M, layers, 4)
    n: np.ndarray  # (layers,)


@dataclass(frozen=True)
class InitRun:
    """One batch through M networks at initialisation: Table 1 statistics; per recorded layer the kernel gradients
    sum d (M, numel), the sums sum |d| of the summands' absolute values (M, numel), the channel means of the layer's
    input over batch and positions (M, C_in) and the layer's output before
    batch norm, what BN measures (M, B, C, H, W); the logits (M, B, K) and dL_b/dz_bj (M, B, K) of the per-example
    cross-entropy. ``bias_grads``: per conv layer (1 .. 6n+1) the gradients (M, C) of the biases added after it,
    sum over b, x, y of dL/dh at the conv output (no BN) or at batch norm's output (beta's gradient), Fig. 19.
    ``top_summands``: the summands d^{bxy} (M, |B| X Y) of the parameter with the largest |sum d| / sum |d|, among
    those with an above-median |sum d|, at ``summand_layer`` (Fig. 22; None if not asked). ``class_grads``: the mean
    |dL/dK| (M, K) at ``masked_layer`` when only class j's column of dL/dz is propagated (App. L, Figs. 20/21;
    None if not asked)."""

    summands: SummandStats
    kernel_grads: dict[int, np.ndarray]
    abs_sums: dict[int, np.ndarray]
    input_means: dict[int, np.ndarray]
    activations: dict[int, np.ndarray]
    logits: np.ndarray
    output_grads: np.ndarray
    bias_grads: dict[int, np.ndarray]
    top_summands: np.ndarray | None
    class_grads: np.ndarray | None


def _patches(inp: torch.Tensor, grad_out: torch.Tensor, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The input patches (B, m, C_i 9, P) and output gradients (B, m, C_o, P) of a stride-1 3x3 conv of m grouped
    networks, input (B, m C_i, H, W), output gradient (B, m C_o, H, W), P = H W positions."""
    b, _, h, w = grad_out.shape
    return F.unfold(inp, 3, padding=1).view(b, m, -1, h * w), grad_out.reshape(b, m, -1, h * w)


def kernel_gradient(inp: torch.Tensor, grad_out: torch.Tensor, m: int) -> torch.Tensor:
    """dL/dK (m, C_o, C_i 9) = sum over b, x, y of the summands d^{bxy} of eq. (4), for a stride-1 3x3 conv of m
    grouped networks (input (B, m C_i, H, W), output gradient (B, m C_o, H, W))."""
    unf, g = _patches(inp, grad_out, m)
    return torch.einsum("bmop,bmkp->mok", g, unf)


def _summand_sums(inp: torch.Tensor, grad_out: torch.Tensor, m: int) -> torch.Tensor:
    """T1..T4 per network (m, 4) of :func:`kernel_gradient`'s summands, each / (B X Y), averaged over the kernel."""
    unf, g = _patches(inp, grad_out, m)
    t1 = torch.einsum("bmop,bmkp->mok", g.abs(), unf.abs())  # |d| = |g| |in| factorises
    t2 = torch.einsum("bmop,bmkp->bmok", g, unf).abs().sum(0)
    t3 = torch.einsum("bmop,bmkp->pmok", g, unf).abs().sum(0)
    t4 = kernel_gradient(inp, grad_out, m).abs()
    return torch.stack([t.mean((-2, -1)) for t in (t1, t2, t3, t4)], -1) / (g.shape[0] * g.shape[-1])


def init_run(blocks_per_stage: int, channels: int, side: int, batch: int, n_networks: int, batch_norm: bool,
             seed: int, classes: int = 10, extra_layers: tuple[int, ...] = (), chunk: int = 8, device=None,
             dtype=torch.float64, summand_layer: int | None = None, masked_layer: int | None = None) -> InitRun:
    """Forward and backward of a synthetic batch (inputs N(0, 1) of shape 3 x side x side, uniform labels) through
    each of ``n_networks`` fresh ResNet-(6n+2) with or without batch norm (``chunk`` networks at a time, batched,
    each chunk its own inputs); statistics at :func:`layer_numbers`, kernel gradients also at ``extra_layers``
    (stride-1 conv layers), which must include ``summand_layer`` and ``masked_layer`` where given."""
    n_networks = check_whole_number(n_networks, "n_networks", 1, 10**6, "networks are simulated in chunks")
    n = check_whole_number(blocks_per_stage, "blocks per stage n", 3, 10**4,
                           "the middle block must not be a stage's first (strided) block")
    strided = {2 + 2 * n, 2 + 4 * n}
    for layer in extra_layers:
        check_whole_number(layer, "an extra layer", 1, 6 * n + 1, f"ResNet-{6 * n + 2} has conv layers 1..{6 * n + 1}")
        if layer in strided:
            raise ValueError(f"layer {layer} is a strided conv (a stage's first); pick a stride-1 layer")
    for layer, name in ((summand_layer, "summand_layer"), (masked_layer, "masked_layer")):
        if layer is not None and layer not in set(extra_layers) | set(dict(layer_numbers(n))):
            raise ValueError(f"{name} {layer} must be a recorded layer (a Table 1 layer or in extra_layers)")
    runs = [_init_chunk(n, channels, side, batch, min(chunk, n_networks - start), batch_norm,
                        seed + start, classes, tuple(extra_layers), device, dtype, summand_layer, masked_layer)
            for start in range(0, n_networks, chunk)]
    first = runs[0]
    return InitRun(SummandStats(first.summands.layers, np.concatenate([r.summands.t for r in runs]), first.summands.n),
                   {k: np.concatenate([r.kernel_grads[k] for r in runs]) for k in first.kernel_grads},
                   {k: np.concatenate([r.abs_sums[k] for r in runs]) for k in first.abs_sums},
                   {k: np.concatenate([r.input_means[k] for r in runs]) for k in first.input_means},
                   {k: np.concatenate([r.activations[k] for r in runs]) for k in first.activations},
                   np.concatenate([r.logits for r in runs]), np.concatenate([r.output_grads for r in runs]),
                   {k: np.concatenate([r.bias_grads[k] for r in runs]) for k in first.bias_grads},
                   None if summand_layer is None else np.concatenate([r.top_summands for r in runs]),
                   None if masked_layer is None else np.concatenate([r.class_grads for r in runs]))


def _init_chunk(blocks_per_stage: int, channels: int, side: int, batch: int, n_networks: int, batch_norm: bool,
                seed: int, classes: int, extra_layers: tuple[int, ...], device, dtype, summand_layer: int | None,
                masked_layer: int | None) -> InitRun:
    """:func:`init_run` for ``n_networks`` networks in one batched pass."""
    configure_torch()
    n = blocks_per_stage
    side = check_whole_number(side, "side (input height and width)", 4, 10**4, "two stride-2 stages halve it twice")
    if side % 4:
        raise ValueError(f"side must be a multiple of 4 (two stride-2 stages halve it), got {side}")
    device = device or default_device()
    gen, m = generator(seed, device), n_networks
    x = torch.randn(batch, 3, side, side, generator=gen, device=device, dtype=dtype).repeat(1, m, 1, 1)
    x.requires_grad_()  # so that the recorded conv outputs keep their gradients
    y = torch.randint(classes, (m, batch), generator=gen, device=device)
    recorded = set(dict(layer_numbers(n))) | set(extra_layers)
    inputs, outputs, bias_grads = {}, {}, {}

    def record_bias_gradient(h, layer):  # the gradient of a bias added to h: its sum over b, x, y per channel
        h.register_hook(lambda g: bias_grads.__setitem__(layer, g.sum((0, 2, 3)).view(m, -1).cpu().numpy()))
        return h

    def conv(h, layer, c_in, c_out, stride=1):
        weight = _xavier(gen, m, c_out, c_in, 3, device, dtype)
        out = F.conv2d(h, weight, stride=stride, padding=1, groups=m)
        if layer in recorded:
            inputs[layer] = h.detach()
            out.retain_grad()
            outputs[layer] = out
        return out

    def norm(h, layer):
        return record_bias_gradient(F.batch_norm(h, None, None, training=True, eps=EPS) if batch_norm else h, layer)

    h = torch.relu(norm(conv(x, 1, 3, channels), 1))
    layer, c = 2, channels
    for stage in range(3):
        for block in range(n):
            c_out, stride = channels * 2**stage, 2 if stage and not block else 1
            branch = torch.relu(norm(conv(h, layer, c, c_out, stride), layer))
            branch = norm(conv(branch, layer + 1, c_out, c_out), layer + 1)
            shortcut = h
            if stride == 2:  # option A: subsample, zero-pad the new channels
                shortcut = h[:, :, ::2, ::2].reshape(batch, m, c, side >> stage, side >> stage)
                shortcut = F.pad(shortcut, (0, 0, 0, 0, 0, c_out - c)).reshape(batch, m * c_out, *branch.shape[-2:])
            h = torch.relu(shortcut + branch)
            layer, c = layer + 2, c_out
    pooled = h.mean((-2, -1)).view(batch, m, c).transpose(0, 1)  # (M, B, C)
    bound = (6 / (c + classes)) ** 0.5
    w_fc = (2 * torch.rand(m, classes, c, generator=gen, device=device, dtype=dtype) - 1) * bound
    logits = (pooled @ w_fc.mT).detach().requires_grad_()
    loss = F.cross_entropy(logits.reshape(-1, classes), y.reshape(-1), reduction="none").view(m, batch).mean(1)
    # the whole network's backward, but from the logits on: dL/dz is the leaf we inspect for Fig. 4
    (out_grad,) = torch.autograd.grad(loss.sum(), logits, retain_graph=False)
    top = pooled @ w_fc.mT
    class_grads = None
    if masked_layer is not None:  # App. L: one backward per class, down to the masked layer only
        masks = torch.eye(classes, dtype=dtype, device=device)
        masked = (torch.autograd.grad(top, outputs[masked_layer], out_grad * masks[j], retain_graph=True)[0]
                  for j in range(classes))
        class_grads = np.stack([kernel_gradient(inputs[masked_layer], g, m).abs().mean((-2, -1)).cpu().numpy()
                                for g in masked], -1)
        for out in outputs.values():  # autograd.grad also fills the retained .grad: start the full backward afresh
            out.grad = None
    top.backward(out_grad)
    stats, grads, abs_sums, means, acts = [], {}, {}, {}, {}
    for layer in sorted(recorded):
        out, inp = outputs[layer], inputs[layer]
        grads[layer] = kernel_gradient(inp, out.grad, m).reshape(m, -1).cpu().numpy()
        unf, g = _patches(inp, out.grad, m)
        abs_sums[layer] = torch.einsum("bmop,bmkp->mok", g.abs(), unf.abs()).reshape(m, -1).cpu().numpy()
        means[layer] = inp.mean((0, 2, 3)).view(m, -1).cpu().numpy()
        acts[layer] = out.detach().view(batch, m, -1, *out.shape[-2:]).transpose(0, 1).cpu().numpy()
    for layer, _stage in layer_numbers(n):
        stats.append(_summand_sums(inputs[layer], outputs[layer].grad, m))
    sides = [side >> stage for _, stage in layer_numbers(n)]
    summands = SummandStats(tuple(layer for layer, _ in layer_numbers(n)), torch.stack(stats, 1).cpu().numpy(),
                            np.array([batch * s * s for s in sides]))
    top_summands = None
    if summand_layer is not None:
        unf, g = _patches(inputs[summand_layer], outputs[summand_layer].grad, m)
        total = np.abs(grads[summand_layer])  # among the parameters with an above-median gradient
        share = np.where(total >= np.median(total, -1, keepdims=True),
                         total / np.maximum(abs_sums[summand_layer], np.finfo(float).tiny), -1.0)
        index = torch.as_tensor(share.argmax(-1), device=g.device)  # (m,) flat index c_o (C_i 9) + k
        c_o, k = index // unf.shape[2], index % unf.shape[2]
        nets = torch.arange(m, device=g.device)
        top_summands = (g[:, nets, c_o] * unf[:, nets, k]).transpose(0, 1).reshape(m, -1).cpu().numpy()
    return InitRun(summands, grads, abs_sums, means, acts, logits.detach().cpu().numpy(),
                   (out_grad * batch).cpu().numpy(), bias_grads, top_summands, class_grads)


@dataclass(frozen=True)
class ClassBias:
    """Per network: the favoured class j' (the most frequent argmax of the logits), the fraction of inputs it
    wins, the leads Delta_b = z_bj' - max_(j != j') z_bj (M, B), and the column mean of dL_b/dz_bj' over the
    batch (the output-bias gradient per example, Fig. 4)."""

    favoured: np.ndarray
    win_fraction: np.ndarray
    lead: np.ndarray
    column_mean: np.ndarray


def class_bias(logits: np.ndarray, output_grads: np.ndarray) -> ClassBias:
    """:class:`ClassBias` of logits and dL_b/dz_bj, both (M, B, K)."""
    logits, output_grads = np.asarray(logits), np.asarray(output_grads)
    if logits.ndim != 3 or logits.shape != output_grads.shape:
        raise ValueError(f"logits and output gradients must both be (M, B, K), got {logits.shape} and "
                         f"{output_grads.shape}")
    classes = logits.shape[-1]
    winners = logits.argmax(-1)
    counts = np.stack([np.bincount(w, minlength=classes) for w in winners])
    favoured = counts.argmax(-1)
    rows = np.arange(len(favoured))
    lead_logit = logits[rows, :, favoured]  # (M, B)
    others = logits.copy()
    others[rows, :, favoured] = -np.inf
    return ClassBias(favoured, counts[rows, favoured] / logits.shape[1], lead_logit - others.max(-1),
                     output_grads[rows, :, favoured].mean(-1))
