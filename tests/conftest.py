"""Independent reference methods shared by the unit tests of bnsym.

Everything here is written from the definitions in the theory catalogue (Yang et al. 2019 as restated
in shared/theory/yang_catalogue.md) and deliberately does *not* call bnsym, so that a test comparing
bnsym with one of these helpers compares two different computations:

* :func:`homogeneous` - phi(z) = a max(z, 0)^alpha - b max(-z, 0)^alpha written out by hand;
* :func:`gaussian_pair_moment` - E[phi(h_1) phi(h_2)] for a 2 x 2 covariance in *polar* coordinates
  (radial moment in closed form, angular integral by adaptive quadrature split at the kinks), a
  different parametrisation from bnsym's hypergeometric / Price-ladder arccosine kernels;
* :func:`bn_monte_carlo` - plain Monte Carlo of batch norm on Gaussian samples, with standard errors;
* :func:`sphere_single` and :func:`sphere_pair` - expectations over one and two coordinates of the
  batch-norm output, by a 1-D quadrature of the marginal density (1 - t^2)^((B-4)/2) and by the
  catalogue's angular (theta_1, theta_2) parametrisation (R4 / Thm F.5), where bnsym uses a polar
  projection onto the plane of the two coordinates instead.
"""

from __future__ import annotations

import time
from typing import Callable

import numpy as np
import pytest
from scipy import integrate
from scipy.special import gammaln, roots_legendre

Function2 = Callable[[np.ndarray, np.ndarray], np.ndarray]

# name -> (alpha, a, b) with phi = a rho_alpha(z) - b rho_alpha(-z): the catalogue's Prop E.17 table,
# typed in here rather than read from bnsym.Activation.ab.
HOMOGENEOUS = {
    "relu": (1.0, 1.0, 0.0),
    "relu^1.5": (1.5, 1.0, 0.0),
    "relu^2": (2.0, 1.0, 0.0),
    "leaky_relu(0.2)": (1.0, 1.0, 0.2),
    "identity": (1.0, 1.0, 1.0),
}


def homogeneous(alpha: float, a: float = 1.0, b: float = 0.0) -> Callable[[np.ndarray], np.ndarray]:
    """phi(z) = a max(z, 0)^alpha - b max(-z, 0)^alpha (phi(0) = 0; alpha = 0 gives a step function)."""

    def phi(x):
        x = np.asarray(x, dtype=float)
        power = np.where(x != 0, np.abs(x), 1.0) ** alpha
        return np.where(x > 0, a * power, np.where(x < 0, -b * power, 0.0))

    return phi


def relu(x):
    return np.maximum(x, 0.0)


def centring(batch_size: int) -> np.ndarray:
    """G = I - 11^T / B."""
    return np.eye(batch_size) - 1.0 / batch_size


def random_psd(batch_size: int, rank: int | None = None, seed: int = 0) -> np.ndarray:
    """A Wishart-type B x B covariance A A^T / rank (generic: not BSB1), entries O(1)."""
    rank = batch_size if rank is None else rank
    factor = np.random.default_rng(seed).standard_normal((batch_size, rank))
    return factor @ factor.T / rank


def bsb1(batch_size: int, q: float, c: float) -> np.ndarray:
    """q ((1 - c) I + c 11^T)."""
    return q * ((1 - c) * np.eye(batch_size) + c * np.ones((batch_size, batch_size)))


def gaussian_pair_moment(alpha: float, a: float, b: float, cov: np.ndarray) -> float:
    """E[phi(h_1) phi(h_2)], h ~ N(0, cov) (2 x 2), phi = a rho_alpha - b rho_alpha(-.), in polar coordinates.

    With cov = L L^T (Cholesky), h = r (L e_t), e_t = (cos t, sin t), and phi positive-homogeneous,
    E[phi(h_1) phi(h_2)] = (1/2pi) int_0^oo r^(2 alpha + 1) e^(-r^2/2) dr * int_0^2pi phi(l_1.e_t) phi(l_2.e_t) dt
    with the radial factor 2^alpha Gamma(alpha + 1). The angular integrand is smooth between the zeros
    of l_1.e_t and l_2.e_t, where the quadrature is split.
    """
    cov = np.asarray(cov, dtype=float)
    l11 = np.sqrt(cov[0, 0])
    l21 = cov[0, 1] / l11
    l22 = np.sqrt(max(cov[1, 1] - l21**2, 0.0))
    phi = homogeneous(alpha, a, b)

    def angular(t):
        return phi(l11 * np.cos(t)) * phi(l21 * np.cos(t) + l22 * np.sin(t))

    zero = np.arctan2(-l21, l22)  # l21 cos t + l22 sin t = 0 here and half a turn later
    cuts = sorted({p % (2 * np.pi) for p in (np.pi / 2, 3 * np.pi / 2, zero, zero + np.pi)} | {0.0})
    edges = cuts + [2 * np.pi]
    total = sum(integrate.quad(angular, lo, hi, epsabs=1e-15, epsrel=1e-13, limit=200)[0]
                for lo, hi in zip(edges[:-1], edges[1:]) if hi > lo)
    return total * np.exp(alpha * np.log(2.0) + gammaln(alpha + 1)) / (2 * np.pi)


def rho_second_moment(alpha: float) -> float:
    """c_alpha = E[max(z, 0)^(2 alpha)], z ~ N(0, 1), by quadrature of the Gaussian density."""
    value, _ = integrate.quad(lambda x: x ** (2 * alpha) * np.exp(-x * x / 2) / np.sqrt(2 * np.pi), 0, np.inf,
                              epsabs=0, epsrel=1e-13, limit=200)
    return value


def bn_monte_carlo(phi: Callable[[np.ndarray], np.ndarray], sigma: np.ndarray, n: int, seed: int,
                   eps: float = 0.0, chunk: int = 50_000) -> tuple[np.ndarray, np.ndarray]:
    """Plain Monte Carlo of V_{B_phi}(Sigma) = E[x x^T], x = phi((h - mean h) / sqrt(var h + eps)), h ~ N(0, Sigma).

    Returns (mean, standard error); the SE of each entry is the sample std of x_i x_j over the n
    independent draws divided by sqrt(n).
    """
    rng = np.random.default_rng(seed)
    lam, vecs = np.linalg.eigh(sigma)
    factor = vecs * np.sqrt(np.clip(lam, 0.0, None))
    first = np.zeros_like(sigma, dtype=float)
    second = np.zeros_like(first)
    for start in range(0, n, chunk):
        h = rng.standard_normal((min(chunk, n - start), sigma.shape[0])) @ factor.T
        y = h - h.mean(axis=1, keepdims=True)
        x = phi(y / np.sqrt(np.mean(y * y, axis=1, keepdims=True) + eps))
        first += x.T @ x
        second += (x * x).T @ (x * x)
    mean = first / n
    variance = (second / n - mean**2) * n / (n - 1)
    return mean, np.sqrt(np.clip(variance, 0.0, None) / n)


def sphere_single(f: Callable[[np.ndarray], np.ndarray], batch_size: int, kinks: tuple[float, ...] = ()) -> float:
    """E[f(x_1)] for one coordinate x_1 = sqrt(B-1) t of the BN output: density of t proportional to (1-t^2)^((B-4)/2).

    Both the normaliser and the moment are computed by scipy.integrate.quad (split at the kinks).
    """
    root = np.sqrt(batch_size - 1.0)

    def density(t):
        return (1 - t * t) ** ((batch_size - 4) / 2)

    points = [k / root for k in kinks if abs(k) < root] or None
    options = dict(epsabs=0, epsrel=1e-13, limit=400)
    mass = integrate.quad(density, -1, 1, **options)[0]
    return integrate.quad(lambda t: f(root * t) * density(t), -1, 1, points=points, **options)[0] / mass


def _graded_rule(n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre in s on [0, 1] mapped by t = lo + (hi - lo)(1 - cos(pi s))/2 (nodes clustered at both ends)."""
    x, w = roots_legendre(n)
    s = (x + 1) / 2
    return lo + (hi - lo) * (1 - np.cos(np.pi * s)) / 2, w * (hi - lo) * np.pi / 4 * np.sin(np.pi * s)


def sphere_pair(f: Function2, batch_size: int, kinks: tuple[float, ...] = (), n: int = 200) -> float:
    """E[f(x_1, x_2)] for two BN output coordinates by the catalogue's angular form (R4 / Thm F.5).

    x_1 = -sqrt(B-1) cos theta_1, x_2 = (cos theta_1 - sqrt(B(B-2)) sin theta_1 cos theta_2) / sqrt(B-1),
    density (B-3)/(2 pi) sin^(B-3) theta_1 sin^(B-4) theta_2 on [0, pi]^2. The theta_2 rule is split where
    x_2 crosses a kink; the theta_1 rule is split where x_1 crosses a kink and where a theta_2 split
    appears or disappears (there the inner integral is only algebraically smooth, hence the graded rule).
    """
    root1, root2 = np.sqrt(batch_size - 1.0), np.sqrt(batch_size * (batch_size - 2.0))
    # x_2 = k at theta_2 in {0, pi} <=> cos theta_1 -+ sqrt(B(B-2)) sin theta_1 = k sqrt(B-1)
    #                                <=> (B-1) cos(theta_1 +- delta) = k sqrt(B-1), tan delta = sqrt(B(B-2))
    delta = np.arctan(root2)
    cuts1 = {0.0, np.pi}
    for k in kinks:
        if abs(k) < root1:
            gap = np.arccos(k / root1)
            cuts1 |= {float(np.arccos(-k / root1))}
            cuts1 |= set(np.mod([delta + gap, delta - gap, -delta + gap, -delta - gap], 2 * np.pi).tolist())
    edges = sorted(c for c in cuts1 if 0 <= c <= np.pi)
    nodes, weights = zip(*(_graded_rule(n, lo, hi) for lo, hi in zip(edges[:-1], edges[1:])))
    theta1, w1 = np.concatenate(nodes), np.concatenate(weights)
    sin1, cos1 = np.sin(theta1), np.cos(theta1)
    breaks = [np.zeros_like(theta1), np.full_like(theta1, np.pi)]
    for k in kinks:
        breaks.append(np.arccos(np.clip((cos1 - k * root1) / (root2 * sin1), -1, 1)))
    breaks = np.sort(np.stack(breaks, axis=1), axis=1)
    x, w = roots_legendre(n)
    lo, width = breaks[:, :-1, None], np.diff(breaks, axis=1)[:, :, None]
    theta2 = lo + width * (x + 1) / 2
    w2 = width * w / 2 * np.sin(theta2) ** (batch_size - 4)
    x1 = (-root1 * cos1)[:, None, None]
    x2 = (cos1[:, None, None] - root2 * sin1[:, None, None] * np.cos(theta2)) / root1
    inner = np.sum(w2 * f(x1, x2), axis=(1, 2))
    return float((batch_size - 3) / (2 * np.pi) * np.sum(w1 * sin1 ** (batch_size - 3) * inner))


def sphere_fixed_point(f: Callable[[np.ndarray], np.ndarray], batch_size: int,
                       kinks: tuple[float, ...] = ()) -> tuple[float, float]:
    """(q*, c*) of Thm 4 / F.5: q* = E[f(x_1)^2] (1-D quadrature), q* c* = E[f(x_1) f(x_2)] (angular form)."""
    q = sphere_single(lambda x: f(x) ** 2, batch_size, kinks)
    qc = sphere_pair(lambda u, v: f(u) * f(v), batch_size, kinks)
    return q, qc / q


@pytest.fixture
def generic_sigma() -> np.ndarray:
    """A generic (non-BSB1) full-rank 6 x 6 covariance."""
    return random_psd(6, 8, seed=3)


@pytest.fixture(autouse=True, scope="session")
def _private_answer_cache(tmp_path_factory):
    """The command line's cached answers (bnsym.cli.cache) go to a folder of this session, not the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNSYM_CACHE_DIR", str(tmp_path_factory.mktemp("answer-cache")))
        yield


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    """bnsym.cli.main(argv) in process: (exit status, stdout, stderr); argparse errors exit through SystemExit."""
    from bnsym.cli import main

    try:
        status = main(argv)
    except SystemExit as stop:
        status = stop.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


# Tests wait for the condition they need, never for a guessed time: this bound is reached only by a real hang (a
# loaded CI machine, load average 8 on 2 cores, makes every step several times slower, never 15 minutes).
HANG_SECONDS = 900


def wait_until(condition: Callable[[], object], what: str, bound: float = HANG_SECONDS) -> object:
    """Poll ``condition`` (every 10 ms) until it returns a true value, and return that value; fail the test as a
    hang, naming ``what``, if ``bound`` seconds pass first."""
    deadline = time.monotonic() + bound
    while not (value := condition()):
        if time.monotonic() > deadline:
            pytest.fail(f"hang: {what} did not happen within {bound:.0f} s, a bound only a hang reaches")
        time.sleep(0.01)
    return value
