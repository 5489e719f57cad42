"""bnsym.arch without batch norm beside a plain numpy loop of the same closed form: time per call and agreement.

The kernel and NTK of [Dense(2, 0.1), relu] x 10 at B = 32 and 256 (arc-cosine J_1 and J_0) and of [Dense(1, 0.1),
erf] x 3 at B = 16 (the arcsine kernel and its derivative), at a general input: a Wishart Gram F F^T / (B + 8), F a
B x (B + 8) standard normal matrix. One process, one thread, steady state (one untimed warm-up call, the cases
interleaved); the time of a call is the best of the repeats (the least disturbed run on a shared machine), in CPU
seconds of the process. Target (issue 44): within 5x of the loop, the same values to 1e-12 of the largest entry
(``ours_error``). ``--profile`` prints where bnsym's time goes (cProfile, cumulative, top 15 per case).

    python benchmarks/arch_closed_forms.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
from typing import Callable, Sequence

import numpy as np
from harness import parse, row, threads, time_interleaved, write

from bnsym import arch
from bnsym.arch import Activation, Dense, repeat

SIZES = {"default": {"relu_batches": "32,256", "relu_depth": 10, "erf_batch": 16, "erf_depth": 3},
         "smoke": {"relu_batches": "8", "relu_depth": 2, "erf_batch": 8, "erf_depth": 2}}


def relu_loop(sigma: np.ndarray, depth: int, weight: float, bias: float, ntk: bool) -> np.ndarray:
    """[Dense(weight, bias), relu] x depth by the arc-cosine closed form: K' = sqrt(K_aa K_bb) J_1(c) / 2 and, for the
    NTK, Theta' = (Theta_h) J_0(c) / 2 with Theta_h = weight Theta + K_h; returns K (or K + Theta). The correlation's
    diagonal is set to exactly 1, as bnsym does (arccos's rounding there would put 1e-8 into the NTK)."""
    kernel, theta = sigma, np.zeros_like(sigma)
    for _ in range(depth):
        h = weight * kernel + bias
        theta_h = weight * theta + h
        norm = np.sqrt(np.diag(h))
        scale = np.outer(norm, norm)
        corr = np.clip(h / scale, -1.0, 1.0)
        np.fill_diagonal(corr, 1.0)
        angle = np.arccos(corr)
        kernel = scale * (np.sin(angle) + (np.pi - angle) * corr) / (2 * np.pi)
        if ntk:
            theta = theta_h * (np.pi - angle) / (2 * np.pi)
    return kernel + theta if ntk else kernel


def erf_loop(sigma: np.ndarray, depth: int, weight: float, bias: float, ntk: bool) -> np.ndarray:
    """[Dense(weight, bias), erf] x depth by the arcsine kernel (2/pi) arcsin(2 K_ab / sqrt((1 + 2 K_aa)(1 + 2 K_bb)))
    and its derivative (4/pi) / sqrt((1 + 2 K_aa)(1 + 2 K_bb) - 4 K_ab^2) for the NTK."""
    kernel, theta = sigma, np.zeros_like(sigma)
    for _ in range(depth):
        h = weight * kernel + bias
        theta_h = weight * theta + h
        spread = 1 + 2 * np.diag(h)
        product = np.outer(spread, spread)
        kernel = 2 / np.pi * np.arcsin(2 * h / np.sqrt(product))
        if ntk:
            theta = theta_h * 4 / np.pi / np.sqrt(product - 4 * h * h)
    return kernel + theta if ntk else kernel


def networks(size: dict) -> list[tuple[str, int, int, Callable[..., np.ndarray], object]]:
    """(name, B, depth, loop, network) of each case."""
    out = [(f"[Dense, relu] x {size['relu_depth']}", int(b), size["relu_depth"], relu_loop,
            repeat([Dense(2.0, 0.1), Activation("relu")], size["relu_depth"])) for b in size["relu_batches"].split(",")]
    out.append((f"[Dense, erf] x {size['erf_depth']}", size["erf_batch"], size["erf_depth"], erf_loop,
                repeat([Dense(1.0, 0.1), Activation("erf")], size["erf_depth"])))
    return out


def general_input(batch: int) -> np.ndarray:
    """F F^T / (B + 8), F a B x (B + 8) standard normal matrix (seed 0)."""
    factor = np.random.default_rng(0).standard_normal((batch, batch + 8))
    return factor @ factor.T / (batch + 8)


def closed_form_rows(size: dict, used: int, repeats: int, profile: bool = False) -> list[dict]:
    """bnsym.arch's kernel and NTK beside the numpy loop on the networks without batch norm."""
    rows = []
    for name, batch, depth, loop, net in networks(size):
        sigma = general_input(batch)
        weight = net.layers[0].weight_var
        for what, ours in (("kernel", arch.kernel), ("NTK", arch.ntk)):
            cases = {"ours": lambda ours=ours: ours(net, sigma),
                     "loop": lambda: loop(sigma, depth, weight, 0.1, what == "NTK")}
            times = time_interleaved(cases, repeats)
            reference = cases["loop"]()
            error = float(np.abs(cases["ours"]() - reference).max() / np.abs(reference).max())
            best_ours, best_loop = min(times.cpu["ours"]), min(times.cpu["loop"])
            slowdown = best_ours / best_loop
            case = f"{what} of {name}, B = {batch}, general input (no batch norm)"
            rows.append(row(case, f"bnsym.arch.{ours.__name__}", times["ours"], "plain numpy loop of the closed form",
                            times["loop"], threads=used, ours_cpu=times.cpu["ours"], peer_cpu=times.cpu["loop"],
                            ours_best_cpu_s=best_ours, peer_best_cpu_s=best_loop, ours_error=error,
                            cpu_slowdown=slowdown, target="within 5x of the loop (best CPU time), values to 1e-12",
                            met=bool(slowdown <= 5 and error <= 1e-12)))
            if profile:
                profiler = cProfile.Profile()
                profiler.runcall(lambda: [cases["ours"]() for _ in range(repeats)])
                print(f"--- profile: {case}, {repeats} calls")
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(15)
    return rows


def table(rows: Sequence[dict]) -> str:
    """The rows as a markdown table: best CPU ms per call of bnsym and the loop, their ratio, the agreement."""
    lines = ["| case | bnsym ms | numpy loop ms | ratio | max rel. difference |", "|---|---|---|---|---|"]
    for line in rows:
        lines.append(f"| {line['case'].split(', general')[0]} | {line['ours_best_cpu_s'] * 1e3:.3g} | "
                     f"{line['peer_best_cpu_s'] * 1e3:.3g} | {line['cpu_slowdown']:.2f} | {line['ours_error']:.1e} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--profile", action="store_true", help="print a cProfile of each bnsym call")

    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=30, options=options)
    with threads(1) as used:
        rows = closed_form_rows(args.size, used, args.repeats, args.profile)
    print(table(rows))
    question = ("Without batch norm, how far is bnsym.arch's kernel and NTK (best CPU time per call) from a plain "
                "numpy loop of the same closed form, and do they agree to 1e-12?")
    return write("arch_closed_forms", question, args, rows,
                 neural_tangents="not installed in this environment (no dependency of bnsym): not timed")


if __name__ == "__main__":
    main()
