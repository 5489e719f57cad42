"""The batch-norm kernel V_{B_relu}(Sigma) by the Laplace method: bnsym against a GP4A-style quadrature.

Both evaluate eq. (11) of Yang et al. (2019), V_{B_phi}(Sigma) = B^alpha / Gamma(alpha) int_0^oo s^(alpha-1)
det(I + 2 s Sigma^G)^(-1/2) V_phi(Sigma^G (I + 2 s Sigma^G)^(-1)) ds, Sigma^G = G Sigma G, for relu (alpha = 1):

* bnsym (``bnsym.bn_kernel``, method "laplace"): Gauss-Jacobi in x = 2 m s / (1 + 2 m s), node count doubled
  until two rules agree to 1e-11, with an error estimate, on the upper triangle of V;
* GP4A style, written here from the published method (Yang, "Tensor Programs I", and its GP4A notebooks, as
  described: Gauss-Laguerre quadrature of the Schwinger integral, split at the integrand's peak): in
  t = log s the integrand s * (...) rises like s^alpha and falls like s^(-(B-1)/2); it is split at its peak s*,
  and each half, s = s* exp(-u / alpha) and s = s* exp(u / ((B - 1) / 2)), decays like e^(-u), which n-node
  Gauss-Laguerre integrates (n + n nodes in all). It assumes Sigma^G has full rank B - 1.

The workload is "depth 2": Sigma (a random Wishart matrix, B = 32) -> V_1 -> V_2, two kernel evaluations. The
error of each method is its largest entrywise distance to a reference: the GP4A-style rule with 400 + 400
nodes (checked against 120 + 120 and against bnsym). Robustness cases: a Sigma of rank 3 and a Sigma scaled by 1e-30.

    python benchmarks/bn_kernel_speed.py
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from harness import parse, row, threads, time_interleaved, write
from scipy.optimize import minimize_scalar
from scipy.special import roots_laguerre

import bnsym

SIZES = {"default": {"batch": 32, "depth": 2, "gp4a_nodes": "10,20,40,80", "reference_nodes": 160},
         "smoke": {"batch": 6, "depth": 1, "gp4a_nodes": "10", "reference_nodes": 40}}
# Gauss-Laguerre weights times e^u overflow beyond about 170 nodes, hence the default reference of 160 + 160


def relu_gaussian_kernel(cov: np.ndarray) -> np.ndarray:
    """V_relu(C) = sqrt(C_ii C_jj) (sin t + (pi - t) cos t) / (2 pi), t = arccos(C_ij / sqrt(C_ii C_jj)) (Cho-Saul)."""
    root = np.sqrt(np.clip(np.diagonal(cov, axis1=-2, axis2=-1), 0.0, None))
    scale = root[..., :, None] * root[..., None, :]
    corr = np.clip(np.divide(cov, scale, out=np.zeros_like(cov), where=scale > 0), -1.0, 1.0)
    angle = np.arccos(corr)
    return scale * (np.sin(angle) + (np.pi - angle) * corr) / (2 * np.pi)


def gp4a_style_laplace(sigma: np.ndarray, nodes: int) -> np.ndarray:
    """V_{B_relu}(Sigma) by eq. (11), split at the peak of s I(s) in log s, Gauss-Laguerre on each half."""
    batch = sigma.shape[0]
    g = np.eye(batch) - 1.0 / batch
    lam, vecs = np.linalg.eigh(g @ sigma @ g)
    lam = np.clip(lam, 0.0, None)

    def log_envelope(t: float) -> float:  # log of s det(I + 2 s Sigma^G)^(-1/2) tr(Sigma^G (I + 2 s Sigma^G)^-1)
        s = np.exp(t)
        return t - 0.5 * np.log1p(2 * s * lam).sum() + np.log((lam / (1 + 2 * s * lam)).sum())

    centre = -np.log(2 * lam.max())
    peak = minimize_scalar(lambda t: -log_envelope(t), bounds=(centre - 30, centre + 30), method="bounded").x
    u, w = roots_laguerre(nodes)
    total = np.zeros((batch, batch))
    for rate in (1.0, -(batch - 1) / 2):  # head: s = s* e^(-u), tail: s = s* e^(u / ((B-1)/2))
        s = np.exp(peak - u / rate)
        det = np.exp(-0.5 * np.log1p(2 * s[:, None] * lam).sum(axis=1))
        cov = (vecs * (lam / (1 + 2 * s[:, None] * lam))[:, None, :]) @ vecs.T
        integrand = det[:, None, None] * relu_gaussian_kernel(cov) * s[:, None, None]  # ds = s dt, dt = du/|rate|
        total += np.tensordot(w * np.exp(u) / abs(rate), integrand, axes=1)
    return batch * total  # B^alpha / Gamma(alpha) with alpha = 1


def _relative_error(kernel, sigma: np.ndarray, truth: np.ndarray) -> float | str:
    """max |kernel(sigma) - truth| / max |truth|, or the reason the kernel failed."""
    try:
        return float(np.abs(kernel(sigma) - truth).max() / np.abs(truth).max())
    except (ValueError, FloatingPointError, np.linalg.LinAlgError) as error:
        return f"fails: {error}"


def chain(kernel, sigma: np.ndarray, depth: int) -> np.ndarray:
    """V^depth(Sigma): ``depth`` layers of the batch-norm kernel."""
    for _ in range(depth):
        sigma = kernel(sigma)
    return sigma


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=20)
    batch, depth = args.size["batch"], args.size["depth"]
    node_counts = [int(n) for n in args.size["gp4a_nodes"].split(",")]
    nodes = args.size["reference_nodes"]
    rng = np.random.default_rng(0)
    factor = rng.standard_normal((batch, batch + 8))
    cases_sigma = {
        "Wishart": factor @ factor.T / (batch + 8),
        "rank 3": factor[:, :3] @ factor[:, :3].T / 3,
        "scale 1e-30": 1e-30 * factor @ factor.T / (batch + 8),
    }
    ours = lambda sigma: bnsym.bn_kernel("relu", sigma)  # noqa: E731
    rows = []
    for count in args.threads:
        with threads(count) as used:
            sigma = cases_sigma["Wishart"]
            reference = chain(lambda s: gp4a_style_laplace(s, nodes), sigma, depth)
            cases = {"bnsym": lambda: chain(ours, sigma, depth)}
            cases.update({n: (lambda n=n: chain(lambda s: gp4a_style_laplace(s, n), sigma, depth))
                          for n in node_counts})
            times = time_interleaved(cases, args.repeats)
            ours_error = float(np.abs(cases["bnsym"]() - reference).max())
            scale = float(np.abs(reference).max())
            for n in node_counts:
                peer_error = float(np.abs(cases[n]() - reference).max())
                rows.append(row(f"depth {depth}, B = {batch}, Wishart Sigma", "bnsym laplace", times["bnsym"],
                                f"GP4A style, {n}+{n} nodes", times[n], threads=used,
                                ours_cpu=times.cpu["bnsym"], peer_cpu=times.cpu[n],
                                ours_error=ours_error / scale, peer_error=peer_error / scale,
                                target="no peer setting both as accurate and faster",
                                met=bool(peer_error > ours_error or np.median(times[n]) > np.median(times["bnsym"]))))
            for label in ("rank 3", "scale 1e-30"):
                sigma_case = cases_sigma[label]
                truth = bnsym.bn_kernel("relu", sigma_case / np.abs(sigma_case).max())  # scale invariant (eps = 0)
                ours_case = _relative_error(ours, sigma_case, truth)
                for n in node_counts:
                    rows.append({"case": f"robustness: {label} Sigma, B = {batch}", "ours": "bnsym laplace",
                                 "peer": f"GP4A style, {n}+{n} nodes", "threads": used, "ours_error": ours_case,
                                 "peer_error": _relative_error(lambda s, n=n: gp4a_style_laplace(s, n), sigma_case,
                                                               truth),
                                 "note": "errors relative to max |V|, against bnsym at the unit scale"})
            reference_check = float(np.abs(chain(ours, sigma, depth) - reference).max() / scale)
    question = (f"How fast is bnsym's Laplace route for V_(B_relu) at B = {batch} (depth {depth}) against a "
                "GP4A-style Gauss-Laguerre quadrature, at equal accuracy, and where does each fail?")
    return write("bn_kernel_speed", question, args, rows,
                 reference=f"GP4A style with {nodes}+{nodes} nodes; it differs from bnsym by "
                           f"{reference_check:.1e} (relative)")


if __name__ == "__main__":
    main()
