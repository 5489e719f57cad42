"""The gradient explosion rate lambda_G of any phi (Thm 7): bnsym's spherical route against SciPy's dblquad.

Thm 7 of Yang et al. (2019): lambda_G = E[(B-1-x_1^2) phi'(x_1)^2 + (1 + x_1 x_2) phi'(x_1) phi'(x_2)] / (mu* (B-3)),
mu* = E[phi(x_1)^2] - E[phi(x_1) phi(x_2)], expectations over two coordinates of the batch-norm output, uniform
on its sphere. In the plane of the pair, u = R^2 has density (B-3)/2 (1-u)^((B-5)/2) on [0, 1] and the angle is
uniform, x_1 = sqrt((B-1) u) cos psi, x_2 = sqrt((B-1) u) cos(psi - theta_0), cos theta_0 = -1/(B-1).

* bnsym: ``bnsym.gradient_rate(phi, B)`` (method "spherical" for phi that are not positive-homogeneous): Gauss
  rules split at the kinks of phi, with an error estimate;
* peer: the three expectations by ``scipy.integrate.dblquad`` over (u, psi), at the loosest tolerance in
  PEER_TOLERANCES whose result is within 1e-8 of the reference (bnsym with 4x the nodes).

dblquad's inner integral over psi is adaptive and meets the jumps of phi' at the kinks as they come: for selu
(a kink at 0) it takes seconds, for relu(beta=0.5) (kinks whose position on the circle moves with u) minutes, so
the default set of phi is tanh and selu; ``--set phis=...`` adds others.

    python benchmarks/gradient_rate_speed.py
"""

from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np
from harness import parse, row, threads, time_interleaved, write
from scipy.integrate import IntegrationWarning, dblquad

import bnsym
from bnsym.meanfield.backward import rate_spherical

SIZES = {"default": {"batch": 32, "phis": "tanh,selu"},
         "smoke": {"batch": 8, "phis": "tanh"}}
PEER_TOLERANCES = (1e-6, 1e-8, 1e-10)
TARGET_ERROR = 1e-8
TARGET_RATIO = 100.0


def dblquad_expectation(f: Callable[[float, float], float], batch: int, tol: float) -> float:
    """E[f(x_1, x_2)] over two batch-norm coordinates by dblquad over u = R^2 in [0, 1] and psi in [0, 2 pi]."""
    theta0 = np.arccos(-1.0 / (batch - 1))
    a = (batch - 5) / 2

    def integrand(psi: float, u: float) -> float:
        r = np.sqrt((batch - 1) * u)
        return f(r * np.cos(psi), r * np.cos(psi - theta0)) * (batch - 3) / 2 * (1 - u) ** a / (2 * np.pi)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IntegrationWarning)
        return dblquad(integrand, 0.0, 1.0, 0.0, 2 * np.pi, epsabs=tol, epsrel=tol)[0]


def dblquad_rate(phi: bnsym.core.activations.Activation, batch: int, tol: float) -> float:
    """lambda_G by Thm 7 with three dblquad expectations (q*, q* c* and the numerator)."""
    f, df = phi.numpy, phi.numpy_derivative
    q = dblquad_expectation(lambda a, b: f(a) ** 2, batch, tol)
    qc = dblquad_expectation(lambda a, b: f(a) * f(b), batch, tol)
    numerator = dblquad_expectation(
        lambda a, b: (batch - 1 - a * a) * df(a) ** 2 + (1 + a * b) * df(a) * df(b), batch, tol)
    return numerator / ((q - qc) * (batch - 3))


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=3)
    batch = args.size["batch"]
    rows = []
    for count in args.threads:
        with threads(count) as used:
            for spec in args.size["phis"].split(","):
                phi = bnsym.parse_activation(spec)
                reference = rate_spherical(phi, batch, n=256).value
                ours = bnsym.gradient_rate(phi, batch, with_error=True)
                tolerance, peer_value = next(((tol, value) for tol in PEER_TOLERANCES
                                              if abs((value := dblquad_rate(phi, batch, tol)) - reference)
                                              <= TARGET_ERROR), (PEER_TOLERANCES[-1], None))
                if peer_value is None:
                    peer_value = dblquad_rate(phi, batch, tolerance)
                times = time_interleaved({"ours": lambda: bnsym.gradient_rate(phi, batch),
                                          "peer": lambda: dblquad_rate(phi, batch, tolerance)}, args.repeats,
                                         warmup=False)  # both ran above
                ours_error, peer_error = abs(ours.value - reference), abs(peer_value - reference)
                rows.append(row(f"lambda_G of {spec}, B = {batch}", "bnsym spherical", times["ours"],
                                f"dblquad, tol {tolerance:g}", times["peer"], threads=used,
                                ours_cpu=times.cpu["ours"], peer_cpu=times.cpu["peer"],
                                ours_error=ours_error, ours_error_estimate=float(ours.error),
                                peer_error=peer_error, target=f"ratio >= {TARGET_RATIO:g}, both errors <= 1e-8",
                                met=bool(np.median(times["peer"]) / np.median(times["ours"]) >= TARGET_RATIO
                                         and max(ours_error, peer_error) <= TARGET_ERROR)))
    question = (f"How fast is bnsym's gradient explosion rate lambda_G (Thm 7, any phi) at B = {batch} against SciPy's "
                "dblquad of the same integrals, both within 1e-8?")
    return write("gradient_rate_speed", question, args, rows,
                 reference="bnsym's spherical route with n = 256 (4x its default nodes)")


if __name__ == "__main__":
    main()
