"""Monte Carlo samplers of bnsym.sim: exact conditional (Gram) sampling against explicit weights.

Times forward + backward passes (bnsym.sim.simulate_gradients) and forward-only passes (simulate_forward) of
M ReLU networks of width N, batch B, depth L, float64, with each sampler, interleaved, for each CPU thread
count (or on a GPU with --device cuda). The explicit-weight sampler draws each W^l (N^2 normals per network
and layer, torch's generator) and back-propagates through it; the Gram sampler draws 2 N (B - 1) normals and
does about 7 N B^2 multiply-adds per network and layer (bnsym.sim.gradients).

The Gram sampler's time per network and layer is also set against a memory roofline: an ideal fused
implementation moves about ROOFLINE_PASSES reads or writes of an N x B float64 tensor per network and layer
(forward: draw Z, H = Z R^T, batch norm and phi in one sweep, X^T X; backward: phi' and the batch-norm
backward in two sweeps, delta^T delta and H^T delta, draw Z', Y = Z' R'^T, X^T Y, X C + Y), at the device's
measured copy bandwidth. That bound ignores the two costs that do not shrink with fusion: the sampler's
WORK_PRODUCTS (B, N) by (N, B)-sized products per network and layer, and its 2 N (B - 1) normals; the work bound
times both at the device's measured rates (a cache-sized batch of such products, bnsym's normal generator).

    python benchmarks/sampler_speed.py                  # N = 1024, B = 32, M = 32, depth 10, 1 and 2 threads
    python benchmarks/sampler_speed.py --device cuda    # on a GPU, with a run at BNSYM_SCALE=paper sizes
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch
from harness import parse, row, synchronizer, threads, time_interleaved, write

from bnsym.scale import SCALES
from bnsym.sim import Normals, generator, inputs_with_gram, simulate_forward, simulate_gradients

SIZES = {"default": {"width": 1024, "batch": 32, "networks": 32, "depth": 10},
         "smoke": {"width": 64, "batch": 8, "networks": 2, "depth": 2}}
TARGET_RATIO = 20.0  # issue 18: the Gram sampler at least 20x faster than explicit weights, forward + backward
ROOFLINE_PASSES = 22
WORK_PRODUCTS = 7  # forward: R Z and the Gram; backward: (M / s) [H_c | M / s]^T (two), X^T Z', Z' R'^T and X C
WORK_CHUNK, WORK_LOOPS = 8, 20  # networks per timed product batch (as a CPU chunk), products or draws per timing


def copy_bandwidth(device: str, megabytes: int = 256, repeats: int = 5) -> float:
    """Bytes per second of a tensor copy on ``device`` (read + write counted), fastest of ``repeats``."""
    source = torch.ones(megabytes * 2**20 // 8, dtype=torch.float64, device=device)
    target = torch.empty_like(source)
    sync = synchronizer(device)
    times = time_interleaved({"copy": lambda: target.copy_(source)}, repeats, sync)["copy"]
    return 2 * source.numel() * 8 / min(times)


def normal_sources(m: int, n: int, device: str, repeats: int) -> dict[str, float]:
    """Seconds to draw one layer's weights, M N^2 normals, with torch's generator (what the explicit sampler
    uses) and with bnsym's :class:`~bnsym.core.device.Normals` (what the Gram sampler uses), fastest of repeats."""
    gen, normals, sync = generator(0, device), Normals(0, device), synchronizer(device)
    times = time_interleaved({"torch": lambda: torch.randn(m, n, n, generator=gen, device=device, dtype=torch.float64),
                              "bnsym": lambda: normals(m, n, n)}, repeats, sync)
    return {key: min(value) for key, value in times.items()}


def work_bound(n: int, b: int, device: str, repeats: int) -> dict[str, float]:
    """Seconds per network and layer of the Gram sampler's irreducible work at this device's rates: WORK_PRODUCTS
    products of a (B, N) by an (N, B) matrix (batched as a chunk of WORK_CHUNK networks) and 2 N (B - 1) normals
    (:class:`~bnsym.core.device.Normals`), each the fastest of ``repeats`` timings."""
    x = torch.randn(WORK_CHUNK, b, n, dtype=torch.float64, device=device)
    normals, noise = Normals(0, device), torch.empty(WORK_CHUNK, b - 1, n, dtype=torch.float64, device=device)
    times = time_interleaved({"product": lambda: [x @ x.mT for _ in range(WORK_LOOPS)],
                              "normals": lambda: [normals(out=noise) for _ in range(WORK_LOOPS)]},
                             repeats, synchronizer(device))
    product = min(times["product"]) / (WORK_LOOPS * WORK_CHUNK)
    normal = min(times["normals"]) / (WORK_LOOPS * noise.numel())
    return {"product_per_network_s": product, "normal_s": normal,
            "work_bound_per_network_layer_s": WORK_PRODUCTS * product + 2 * n * (b - 1) * normal}


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_repeats=3)
    n, b, m, depth = (args.size[key] for key in ("width", "batch", "networks", "depth"))
    device = args.device
    x0 = inputs_with_gram(np.eye(b), n, m, seed=0, device=device)
    sync = synchronizer(device)
    runs = {
        "forward+backward": {sampler: lambda s=sampler: simulate_gradients(
            "relu", x0, depth, sampler=s, seed=1, device=device, progress=False) for sampler in ("weights", "gram")},
        "forward only": {sampler: lambda s=sampler: simulate_forward(
            "relu", x0, depth, sampler=s, seed=1, device=device, progress=False) for sampler in ("weights", "gram")},
    }
    cases = {(kind, sampler): run for kind, pair in runs.items() for sampler, run in pair.items()}
    thread_counts = args.threads if device == "cpu" else [torch.get_num_threads()]
    rows, rooflines, sources = [], [], []
    for count in thread_counts:
        with threads(count) as used:
            for kind in runs:  # untimed warm-up of the fast sampler (the explicit one takes seconds)
                runs[kind]["gram"]()
            start = time.perf_counter()
            times = time_interleaved(cases, args.repeats, sync, warmup=False)
            elapsed = time.perf_counter() - start
            bandwidth = copy_bandwidth(device, megabytes=8 if args.smoke else 256)
            draws = normal_sources(m, n, device, args.repeats)
            work = work_bound(n, b, device, args.repeats)
        for kind in runs:
            fb = kind == "forward+backward"
            rows.append(row(kind, "gram sampler", times[(kind, "gram")], "explicit weights",
                            times[(kind, "weights")], threads=used, ours_cpu=times.cpu[(kind, "gram")],
                            peer_cpu=times.cpu[(kind, "weights")],
                            target=f"ratio >= {TARGET_RATIO:g}" if fb else None,
                            met=None if not fb else bool(
                                np.median(times[(kind, "weights")]) / np.median(times[(kind, "gram")])
                                >= TARGET_RATIO)))
        weights_median = float(np.median(times[("forward+backward", "weights")]))
        same_source = weights_median - depth * (draws["torch"] - draws["bnsym"])
        sources.append({"threads": used, "torch_normals_per_layer_s": draws["torch"],
                        "bnsym_normals_per_layer_s": draws["bnsym"],
                        "weights_forward_backward_with_bnsym_normals_s (estimate)": same_source,
                        "ratio_with_equal_normal_sources (estimate)":
                            same_source / float(np.median(times[("forward+backward", "gram")]))})
        per_network_layer = min(times[("forward+backward", "gram")]) / (m * depth)
        roofline = ROOFLINE_PASSES * 8 * n * b / bandwidth
        rooflines.append({"threads": used, "copy_bandwidth_GB_s": bandwidth / 1e9,
                          "gram_forward_backward_per_network_layer_s": per_network_layer,
                          "roofline_per_network_layer_s": roofline,
                          "fraction_of_roofline": roofline / per_network_layer, **work,
                          "fraction_of_work_bound": work["work_bound_per_network_layer_s"] / per_network_layer,
                          "wall_clock_of_timed_runs_s": elapsed})
        print(f"threads={used}: gram forward+backward {per_network_layer * 1e6:.1f} us per network-layer, "
              f"roofline {roofline * 1e6:.1f} us at {bandwidth / 1e9:.1f} GB/s copy bandwidth, work bound "
              f"{work['work_bound_per_network_layer_s'] * 1e6:.1f} us")
    if device != "cpu":  # a chapter's Monte Carlo at BNSYM_SCALE=paper (chapter 3's gradient runs), on the GPU
        paper = SCALES["paper"]
        x_paper = inputs_with_gram(np.eye(b), paper.width, paper.n_networks, seed=0, device=device)
        paper_runs = {s: lambda s=s: simulate_gradients("relu", x_paper, paper.depth, sampler=s, seed=1, device=device,
                                                         progress=False) for s in ("weights", "gram")}
        paper_times = time_interleaved(paper_runs, max(1, args.repeats // 3), sync)
        rows.append(row(f"forward+backward at BNSYM_SCALE=paper (N = {paper.width}, M = {paper.n_networks}, "
                        f"depth {paper.depth}, B = {b})", "gram sampler", paper_times["gram"], "explicit weights",
                        paper_times["weights"], threads=thread_counts[-1]))
    question = ("How much faster is the exact Gram sampler than explicit weights, forward and backward, and how "
                "close is it to the memory roofline?")
    return write("sampler_speed", question, args, rows, roofline=rooflines, normal_sources=sources,
                 normal_sources_note="the explicit sampler draws W with torch's generator, the Gram sampler with "
                                     "bnsym.core.device.Normals; the estimate subtracts the difference of the two "
                                     "for the explicit sampler's depth * M * N^2 draws",
                 roofline_model=f"{ROOFLINE_PASSES} reads or writes of an N x B float64 tensor per network-layer "
                                "(an ideal fused implementation), at the measured copy bandwidth",
                 work_model=f"{WORK_PRODUCTS} products of a (B, N) by an (N, B) matrix (timed in batches of "
                            f"{WORK_CHUNK} networks) and 2 N (B - 1) normals per network-layer, at the measured rates")


if __name__ == "__main__":
    main()
