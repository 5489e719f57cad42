"""The BN-NNGP's blocks as tasks: run on this machine or on a Dask cluster, each task the same float operations.

The k batches (and the pairs of them asked for) are cut into chunks of ``chunk_batches`` consecutive batches. One
task per chunk iterates each of its batches' own (within-batch) block through the layers, K^l_aa =
V_B(K^{l-1}_aa); one task per tile, a pair of chunks, iterates the cross block of every asked pair (a, b) between
them, K^l_ab = [V(joint 2B x 2B covariance of K^{l-1}_aa, K^{l-1}_ab, K^{l-1}_bb)]_ab (the cross-batch layer map,
Yang et al. 2019, App. H, Defn H.1), which needs nothing but the two batches' within-batch trajectories: the pairs
are independent of each other once those are known. The BN-NTK's blocks (``tangent``) travel the same way, each
block carrying the kernel and the tangent kernel together (:mod:`bnsym.meanfield.ntk_laplace`: ``within_step``,
``cross_step``).

**Same bits everywhere.** A task's arithmetic depends only on its own arguments (the chunks are fixed by the batch
order and ``chunk_batches``), and every task runs torch on one thread: on this machine in a pool of Python threads
(as many as torch had threads), on a cluster in its workers. So no cluster, 1 worker and many workers give the
same matrix bit for bit, on workers with the same CPU kind and software as this machine. A worker lost while it
holds or runs a task is replaced and the task rerun from its arguments (Dask reschedules it; ``retries`` more for
an exception).
"""

from __future__ import annotations

import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch

from ..core.activations import Activation
from ..core.progress import progress_bar
from ..core.validation import check_device, check_whole_number, shown
from ..meanfield.crossbatch import cross_batch_kernel_laplace, phi_kernel_and_slope_torch, phi_kernel_torch
from ..meanfield.ntk_laplace import cross_step, within_step

CHUNK_BATCHES = 4  # most batches per chunk by default: tiles of up to 16 pairs (tasks of seconds at B = 32)
MAX_CHUNK_BATCHES = 4096
MAX_TILE_ENTRIES = 2**27  # float64 entries of the joint 2B x 2B covariances of one tile (1 GiB)
RETRIES = 3  # reruns of a task that raised on a worker (a lost worker is rescheduled by Dask on its own)

Blocks = dict[int, np.ndarray]  # depth -> blocks (P, B, B)


def check_chunk_batches(chunk_batches: object, batch_size: int, n_batches: int, on_gpu: bool = False) -> int:
    """Batches per chunk, a whole number >= 1 whose tile of pairs fits in ``MAX_TILE_ENTRIES``. None: on the CPU,
    k // 4 of the k batches, from 1 to ``CHUNK_BATCHES`` (at least four chunks, so that two workers share even a
    small prior); ``on_gpu``, the largest tile that fits (one tile for up to 181 batches at B = 32: each task a few
    large tensor operations, 13x faster than the CPU's chunks for all 1797 digits at depth 10 on an H200)."""
    if chunk_batches is None:
        most = math.isqrt(MAX_TILE_ENTRIES) // (2 * batch_size)
        chunk = max(1, min(n_batches, most) if on_gpu else min(n_batches // 4, CHUNK_BATCHES))
    else:
        chunk = check_whole_number(chunk_batches, "chunk_batches", 1, MAX_CHUNK_BATCHES,
                                   "batches per task; a tile task holds the pairs of two chunks")
    entries = chunk * chunk * (2 * batch_size) ** 2
    if entries > MAX_TILE_ENTRIES:
        raise ValueError(f"chunk_batches = {chunk} at batch_size B = {batch_size} makes tiles of {chunk * chunk} "
                         f"pairs, {entries:,} entries of joint covariances, above {MAX_TILE_ENTRIES:,} (1 GiB of "
                         "float64): use a smaller chunk_batches or batch_size")
    return chunk


def on_gpu(device: torch.device | str | None, client: object) -> bool:
    """Whether the tasks run on a GPU: ``device`` CUDA, or None with no cluster and CUDA here (a cluster's workers
    pick their own device)."""
    if device is not None:
        return check_device(device).type == "cuda"
    return client is None and torch.cuda.is_available()


def _device(device: str | None) -> torch.device:
    """The task's device: the one named, else CUDA where the worker has it, else the CPU."""
    return torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def _within_step(phi: Activation, within: torch.Tensor, nodes: int, tangent: bool) -> torch.Tensor:
    """One layer of each batch's own block: K (c, B, B), or (K, Theta) (2, c, B, B) with ``tangent``."""
    if tangent:
        return within_step(phi, within, nodes)
    joint = torch.cat([torch.cat([within, within], -1)] * 2, -2)
    block = cross_batch_kernel_laplace(phi, joint, within.shape[-1], nodes=nodes, blocks="cross")
    return (block + block.mT) / 2


def _cross_step(phi: Activation, left: torch.Tensor, cross: torch.Tensor, right: torch.Tensor, nodes: int,
                tangent: bool) -> torch.Tensor:
    """One layer of pairs' cross blocks, from the pairs' own blocks ``left`` and ``right`` (shapes as
    :func:`_within_step`)."""
    if tangent:
        return cross_step(phi, left, cross, right, nodes)
    joint = torch.cat([torch.cat([left, cross], -1), torch.cat([cross.mT, right], -1)], -2)
    return cross_batch_kernel_laplace(phi, joint, left.shape[-1], nodes=nodes, blocks="cross")


def within_task(phi: Activation, x: np.ndarray, depth: int, first: int, nodes: int, device: str | None,
                tangent: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(x, K^l within each batch of x (c, B, d) for l = 0..depth, (depth + 1, c, B, B)); K^0 = x x^T / d. With
    ``tangent``, (K^l, Theta^l) (depth + 1, 2, c, B, B), Theta^0 = K^0.

    Each layer maps the pair (batch, identical copy) with the cross-batch map (``first`` Gauss-Jacobi nodes per
    axis in layer 1, ``nodes`` after) and symmetrises the result."""
    x_t = torch.tensor(x, device=_device(device))  # a fresh, aligned copy: the same memory layout everywhere
    within = x_t @ x_t.mT / x_t.shape[-1]
    within = torch.stack([within, within]) if tangent else within
    trajectory = [within]
    for layer in range(1, depth + 1):
        within = _within_step(phi, within, first if layer == 1 else nodes, tangent)
        trajectory.append(within)
    return x, torch.stack(trajectory).cpu().numpy()


def tile_task(phi: Activation, left: tuple[np.ndarray, np.ndarray], right: tuple[np.ndarray, np.ndarray],
              pairs: np.ndarray, depths: Sequence[int], first: int, nodes: int, device: str | None,
              tangent: bool = False) -> Blocks:
    """Cross blocks K^l_ab (Theta^l_ab with ``tangent``) at each l in ``depths`` (P, B, B) of the P ``pairs`` (a in
    ``left``, b in ``right``, indices into the two chunks), from both chunks' :func:`within_task` results."""
    device_ = _device(device)
    (x_left, within_left), (x_right, within_right) = left, right
    a, b = torch.as_tensor(pairs[:, 0], device=device_), torch.as_tensor(pairs[:, 1], device=device_)
    x_a, x_b = torch.tensor(x_left, device=device_)[a], torch.tensor(x_right, device=device_)[b]
    within_a = torch.tensor(within_left, device=device_)[..., a, :, :]
    within_b = torch.tensor(within_right, device=device_)[..., b, :, :]
    cross = x_a @ x_b.mT / x_a.shape[-1]
    cross = torch.stack([cross, cross]) if tangent else cross
    out = {}
    for layer in range(1, max(depths) + 1):
        cross = _cross_step(phi, within_a[layer - 1], cross, within_b[layer - 1], first if layer == 1 else nodes,
                            tangent)
        if layer in depths:
            out[layer] = (cross[1] if tangent else cross).cpu().numpy()
    return out


def on_one_thread(task: Callable[..., Any], *args: Any) -> Any:
    """Run ``task`` with torch on one thread (Dask's workers are started so; a worker of a cluster started otherwise
    is set so here, for the same arithmetic as every other task)."""
    if torch.get_num_threads() != 1:
        torch.set_num_threads(1)
    return task(*args)


@contextmanager
def resolve_client(client: object) -> Iterator[Any]:
    """None: no cluster; a ``distributed.Client``: that one; a scheduler address (str) or True (a LocalCluster, or
    ``$BNSYM_DASK_SCHEDULER``): a client from ``bnsym.core.cluster.connect``, closed on exit."""
    if client is None:
        yield None
        return
    if client is True or isinstance(client, str):
        from ..core.cluster import connect

        with connect(None if client is True else client) as opened:
            yield opened
        return
    distributed = sys.modules.get("distributed")
    if distributed is None or not isinstance(client, distributed.Client):
        raise ValueError(f"client must be None, True (a local Dask cluster), a scheduler address "
                         f"('tcp://HOST:8786') or a distributed.Client, got {shown(client)}")
    yield client


def run_blocks(phi: Activation, batches: np.ndarray, pairs: np.ndarray, depths: Sequence[int], first: int,
               nodes: int, device: torch.device | str | None, client: object, chunk_batches: int,
               on_within: Callable[[np.ndarray, Blocks], None], on_cross: Callable[[np.ndarray, Blocks], None],
               desc: str = "BN-NNGP blocks", tangent: bool = False) -> None:
    """Compute the within blocks of every batch of ``batches`` (k, B, d) and the cross blocks of ``pairs`` (P, 2)
    at each depth, handing each task's result to ``on_within(batch indices, blocks)`` or ``on_cross(pair indices
    into pairs, blocks)`` as it arrives (in this thread): the prior's K^l, or with ``tangent`` the NTK's Theta^l.
    Arguments are validated by the caller."""
    device = None if device is None else str(check_device(device))
    k = len(batches)
    chunks = [np.arange(start, min(start + chunk_batches, k)) for start in range(0, k, chunk_batches)]
    tiles: dict[tuple[int, int], list[int]] = {}
    for index, (a, b) in enumerate(pairs // chunk_batches):
        tiles.setdefault((int(a), int(b)), []).append(index)
    tiles = {tile: np.array(members) for tile, members in tiles.items()}
    local = {tile: pairs[members] - np.array(tile) * chunk_batches for tile, members in tiles.items()}
    depth = max(depths)
    with resolve_client(client) as cluster, progress_bar(total=len(chunks) + len(tiles), desc=desc) as bar:
        if cluster is None:
            _run_here(phi, batches, chunks, tiles, local, depths, first, nodes, device, tangent, on_within, on_cross,
                      bar)
            return
        within = [cluster.submit(on_one_thread, within_task, phi, batches[chunk], depth, first, nodes, device,
                                 tangent, pure=False, retries=RETRIES) for chunk in chunks]
        futures = {future: ("within", i) for i, future in enumerate(within)}
        futures.update({cluster.submit(on_one_thread, tile_task, phi, within[a], within[b], local[(a, b)], depths,
                                       first, nodes, device, tangent, pure=False, retries=RETRIES): ("tile", (a, b))
                        for a, b in tiles})
        from distributed import as_completed as completed

        for future in completed(list(futures)):
            kind, which = futures.pop(future)
            if kind == "within":
                _hand_within(future.result()[1], chunks[which], depths, tangent, on_within)
            else:
                on_cross(tiles[which], future.result())
                future.release()
            bar.update()


def _hand_within(trajectory: np.ndarray, chunk: np.ndarray, depths: Sequence[int], tangent: bool,
                 on_within: Callable[[np.ndarray, Blocks], None]) -> None:
    on_within(chunk, {layer: trajectory[layer][1] if tangent else trajectory[layer] for layer in depths})


def _run_here(phi: Activation, batches: np.ndarray, chunks: list[np.ndarray], tiles: dict, local: dict,
              depths: Sequence[int], first: int, nodes: int, device: str | None, tangent: bool,
              on_within: Callable[[np.ndarray, Blocks], None], on_cross: Callable[[np.ndarray, Blocks], None],
              bar: Any) -> None:
    """The tasks of :func:`run_blocks` in a pool of Python threads, torch on one thread each (its threads before)."""
    workers = max(1, min(torch.get_num_threads(), len(chunks) + len(tiles)))
    zero = torch.zeros(1, dtype=torch.float64)
    (phi_kernel_and_slope_torch if tangent else phi_kernel_torch)(phi, zero)  # lambdify here: sympy isn't thread-safe
    torch.linalg.eigvalsh(torch.eye(2, dtype=torch.float64, device=_device(device)))  # CUDA's linalg: lazy, unsafe
    with _torch_threads(1), ThreadPoolExecutor(workers) as pool:
        within = []
        for chunk, result in zip(chunks, pool.map(lambda c: within_task(phi, batches[c], max(depths), first, nodes,
                                                                        device, tangent), chunks)):
            within.append(result)
            _hand_within(result[1], chunk, depths, tangent, on_within)
            bar.update()
        futures = {pool.submit(tile_task, phi, within[a], within[b], local[(a, b)], depths, first, nodes, device,
                               tangent): (a, b) for a, b in tiles}
        for future in as_completed(futures):
            on_cross(tiles[futures.pop(future)], future.result())
            bar.update()


@contextmanager
def _torch_threads(count: int) -> Iterator[None]:
    previous = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def allocate(shapes: dict[str, tuple[int, ...]], out: str | os.PathLike | None, max_memory: int) -> dict:
    """Zeroed float64 arrays of ``shapes``: in memory if their total is at most ``max_memory`` bytes and ``out`` is
    None; else memory-mapped files, ``out/<name>.npy`` (kept, np.load reads them) or, without ``out``, unnamed
    temporary files (freed with the arrays)."""
    import shutil
    import tempfile
    from pathlib import Path

    total = sum(8 * math.prod(shape) for shape in shapes.values())
    if out is None and total <= max_memory:
        return {name: np.zeros(shape) for name, shape in shapes.items()}
    folder = Path(tempfile.gettempdir() if out is None else out)
    folder.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(folder).free
    if total > free:
        raise ValueError(f"the prior's {total / 2**30:.3g} GiB do not fit in memory (max_memory = "
                         f"{max_memory / 2**30:.3g} GiB) nor in the {free / 2**30:.3g} GiB free under {folder}: "
                         "use fewer points, or name a larger folder with out=")
    if out is None:
        return {name: np.memmap(tempfile.TemporaryFile(dir=folder), np.float64, "w+", shape=shape)
                for name, shape in shapes.items()}
    return {name: np.lib.format.open_memmap(folder / f"{name}.npy", "w+", np.float64, shape)
            for name, shape in shapes.items()}
