"""The input contract of bnsym's public surface (:mod:`bnsym.api`, :mod:`bnsym.dilution`, :mod:`bnsym.rank`,
:mod:`bnsym.products`, :mod:`bnsym.train`, :mod:`bnsym.nngp`, :mod:`bnsym.sweep`, the ``bnsym`` command, and the
networks of :mod:`bnsym.sim.daneshmand` that check the rank theory).

Every public function calls these checks at its top. Bad input raises ``ValueError`` whose message names the
argument and says why; any other input gives finite values that satisfy the theory's invariants (lambda_G >=
(B-2)/(B-3), forward eigenvalues >= 0, q* > 0, abs(c*) <= 1). No public function answers NaN or inf, except where
its docstring says that the true value is infinite or undefined (the Fuss-Catalan density at its hard edge x = 0,
the loss of a training run that diverged, the fraction of an empty set of cells), and none raises another
exception type for bad input.

* **A number** is an int, a float, a numpy integer or floating scalar, or a Fraction: never a bool, a string,
  a Decimal, a complex number or None (the command line parses its strings before it calls the API).
* **A batch size** B is a whole number with ``MIN_BATCH_SIZE`` <= B <= ``MAX_BATCH_SIZE`` (:func:`check_batch_size`,
  which says why at each end). **An array of B**, where a function takes one, is a non-empty array or (nested)
  list of batch sizes; functions that take one B at a time refuse it.
* **eps** is a finite number >= 0 (:func:`check_eps`); **tol** a finite number > 0 (:func:`check_tol`).
* **Other numbers** are finite and in their range (:func:`check_range`; a whole number, such as a width, a depth
  or a count, by :func:`check_whole_number`, bounded above where the cost grows with it: the widths, numbers of
  layers and numbers of draws of the random-matrix products and networks by :func:`check_width`,
  :func:`check_layers` and :func:`check_draws`, the matrices they hold at once by :func:`check_memory`; a seed by
  :func:`check_seed`; a residual strength gamma by :func:`check_gamma`); **arrays** are regular, non-empty, real
  and finite (:func:`check_real_array`, with a range for their entries; tensors by :func:`check_real_tensor`);
  **a choice** is one of its names (:func:`check_choice`) and **a flag** a bool (:func:`check_flag`).
* **Sigma** is a real, finite, symmetric, positive semi-definite B x B matrix with B a batch size and
  G Sigma G != 0 (:func:`check_covariance`).
* **An activation** is an :class:`~bnsym.Activation`, or a string, SymPy expression or callable
  that :func:`~bnsym.core.activations.parse_activation` understands, each parameter finite and given once, and
  0 < abs(gamma) <= ``MAX_GAMMA`` of :mod:`~bnsym.core.activations` (3; it says why) for tanh, erf and sin. At a
  batch size B it must be *usable on the BN sphere* (:func:`check_activation`), where each coordinate x of the
  batch-norm output lies in [-sqrt(B-1), sqrt(B-1)]:

  - *not constant*: a phi constant there (``relu(beta=-50)`` at B = 8 is identically 0) makes every next-layer
    pre-activation equal across the batch, and batch norm divides by their variance, 0;
  - *not overflowing*: phi(x)^2 (and phi'(x)^2 for gradient quantities), times B (the largest factor the moments
    multiply them by), are finite float64 numbers (``leaky_relu(1e308)``, ``relu^1e300`` fail);
  - *not underflowing*: the variance of phi(x) is a normal float64 number with full precision (>=
    ``MIN_VARIANCE``); ``tanh(gamma=1e-300)`` fails, phi^2 ~ 1e-600 being 0 in float64;
  - *not nearly constant*: its variance is at least ``MIN_RELATIVE_VARIANCE`` of its mean square, since
    mu* = q* (1 - c*) is a difference of two numbers of size q*, and every quantity divided by mu* (rates,
    eigenvalues) would keep fewer than half of float64's digits (``relu(beta=1e9)``: an offset 1e9 times its
    variation);
  - for gradients (``slope=True``): E[phi'^2] finite, i.e. no kink of power <= 1/2 (``relu^0.4``) inside the
    sphere.
* **Results**: a numeric route whose own error estimate exceeds ``MAX_RELATIVE_ERROR`` of its result's scale (and
  the rounding floor ``ROUNDING_FLOOR``) has not resolved phi (:func:`check_resolved`): the default method moves on
  to the next route, a named one raises.
"""

from __future__ import annotations

import math
import numbers
import weakref
from functools import lru_cache
from typing import Iterable, Mapping

import numpy as np
from scipy.linalg.lapack import dpotrf as potrf
from scipy.special import gammaln, roots_legendre

from .activations import Activation
from .lazy import lazy_module

torch = lazy_module("torch")

MIN_BATCH_SIZE = 4
WHY_MIN_BATCH = (
    "this quantity needs B >= 4: for B = 2 batch norm outputs are +-(1, -1) and all gradients vanish, and for "
    "B = 3 the gradient moments diverge (E[1/r^2] is infinite for r^2 ~ chi^2 with 2 degrees of freedom); only "
    "fixed_point, gradient_rate, depth_scale and max_trainable_depth answer B = 2 and 3 (at eps = 0, App. J)"
)
WHY_NO_BATCH_OF_ONE = (
    "batch norm divides by the batch variance, which is 0 for one input (B = 2 and 3 are answered by fixed_point, "
    "gradient_rate, depth_scale and max_trainable_depth at eps = 0, App. J; everything else needs B >= 4)"
)
MAX_BATCH_SIZE = 10**7
WHY_MAX_BATCH = (
    "the theory's quantities approach their B -> infinity limits like 1/B, and float64 resolves them only to "
    "about B x 1e-17: 1 - lambda_L ~ 1/B loses log10(B) of float64's 16 digits to cancellation (measured against "
    "exact SymPy values: relative error 1e-13 at B = 1e3, 1e-12 at B = 1e5), so B <= 1e7 keeps at least 9 digits"
)
MIN_VARIANCE = np.finfo(float).tiny / np.finfo(float).eps  # ~1e-292: below it a variance loses digits (subnormal)
MIN_RELATIVE_VARIANCE = 1e-8  # mu*/q* below it leaves fewer than 8 of float64's 16 digits in mu* = q* - q* c*
MAX_RELATIVE_ERROR = 1e-2  # a route's error estimate above 1% of its result's scale: phi is not resolved
ROUNDING_FLOOR = 1e-12  # an error estimate below it is rounding, whatever the result's size
_SPHERE_NODES = 32  # Gauss-Legendre nodes per smooth piece of one BN coordinate's range (check_activation)
MAX_SEED = 2**64 - 1  # numpy and torch seed their generators with 64-bit unsigned integers
MAX_WIDTH = 4096  # d: every layer multiplies d x d matrices, O(d^3) per chain or product
MAX_LAYERS = 10**6  # depth and burn: one batched product per layer
MAX_DRAWS = 10**7  # chains, products, samples N and Monte Carlo draws: each holds its own d x d (or d x N) matrix
MAX_ENTRIES = 2**30  # float64 entries of the matrices held at once (8 GiB)


class ValueTypeError(ValueError, TypeError):
    """Bad input where a convention outside bnsym expects a TypeError (scikit-learn's estimator checks: an object
    that is not a number among X's entries): a ValueError, as the input contract says, and a TypeError too."""


def shown(value: object) -> str:
    """repr(value), shortened to about 60 characters for error messages (a 600-digit int stays readable)."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"


def check_number(value: object, name: str) -> float:
    """``value`` as a float if it is a real number (see the module docstring; a 0-d real numpy array is one too);
    an int too large for a float is inf."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value.item()
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {shown(value)}")
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def _whole(value: object) -> int | None:
    """``value`` as an exact int if it is a whole real number (see the module docstring), else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    number = float(value)
    return int(number) if math.isfinite(number) and number == round(number) else None


def check_whole_number(value: object, name: str, minimum: int, maximum: int, why: str = "") -> int:
    """``value`` as an int: a whole number in [minimum, maximum]; ``why`` explains the range in the message."""
    whole = _whole(value)
    if whole is None:
        raise ValueError(f"{name} must be a whole number, got {shown(value)}")
    if not minimum <= whole <= maximum:
        raise ValueError(f"{name} must be between {_count(minimum)} and {_count(maximum)}, got {shown(whole)}"
                         + (f": {why}" if why else ""))
    return whole


def _count(value: int) -> str:
    """A whole number for a message: with thousands separators (2**64 - 1 included), as 1e300 past 21 digits."""
    return f"{value:,}" if abs(value) < 10**21 else f"{value:.0e}".replace("e+", "e")


def check_seed(seed: object) -> int:
    """A random seed: a whole number in [0, 2^64 - 1]."""
    return check_whole_number(seed, "seed", 0, MAX_SEED, "generators are seeded with 64-bit unsigned integers")


def check_width(width: object, minimum: int = 1, name: str = "width d") -> int:
    """A width (``name``): the number of features, or the size of square random factors, at most ``MAX_WIDTH``."""
    return check_whole_number(width, name, minimum, MAX_WIDTH, "every layer multiplies d x d matrices")


def check_layers(value: object, name: str, minimum: int = 1) -> int:
    """A number of layers or factors (``depth``, ``burn``), at most ``MAX_LAYERS``."""
    return check_whole_number(value, name, minimum, MAX_LAYERS, "the layers run one product after another")


def check_draws(value: object, name: str, minimum: int = 2) -> int:
    """A number of chains, products, networks, samples or draws, at most ``MAX_DRAWS``; at least 2 where a standard
    error is taken across them."""
    why = "each holds its own matrix" + ("; a standard error needs 2" if minimum == 2 else "")
    return check_whole_number(value, name, minimum, MAX_DRAWS, why)


def check_memory(copies: int, rows: int, columns: int, names: str) -> None:
    """``copies`` matrices of rows x columns float64 entries must fit in ``MAX_ENTRIES``; ``names`` the three sizes."""
    if copies * rows * columns > MAX_ENTRIES:
        raise ValueError(f"{names} = {copies} x {rows} x {columns} entries exceed {MAX_ENTRIES:.2g} (8 GiB of float64)")


def check_gamma(gamma: object) -> float:
    """gamma, the strength of the residual branch: > 0, or inf for no skip connection."""
    return check_range(gamma, "gamma", 0.0, open_low=True, infinite_ok=True,
                       why="the strength of the residual branch (inf: no skip connection)")


def _interval(low: float, high: float, open_low: bool, open_high: bool) -> str:
    """'> 0', '>= 1', '< 1', 'in (0, 1)' or '' (no bound) for error messages."""
    if low > -math.inf and high < math.inf:
        return f"in {'(' if open_low else '['}{low:g}, {high:g}{')' if open_high else ']'}"
    if low > -math.inf:
        return f"{'>' if open_low else '>='} {low:g}"
    if high < math.inf:
        return f"{'<' if open_high else '<='} {high:g}"
    return ""


def _inside(values: float | np.ndarray, low: float, high: float, open_low: bool, open_high: bool) -> bool:
    above = values > low if open_low else values >= low
    below = values < high if open_high else values <= high
    return bool(np.all(above & below))


def check_range(value: object, name: str, low: float = -math.inf, high: float = math.inf, *, open_low: bool = False,
                open_high: bool = False, infinite_ok: bool = False, why: str = "") -> float:
    """``value`` as a float: a finite number (see the module docstring) between ``low`` and ``high``, each end
    included unless ``open_low`` / ``open_high``; ``infinite_ok``: +inf is accepted too (e.g. gamma = inf for no
    skip connection). ``why`` explains the range in the message."""
    number = check_number(value, name)
    if not ((math.isfinite(number) or (infinite_ok and number == math.inf))
            and _inside(number, low, high, open_low, open_high)):
        bounds = " ".join(part for part in ("finite" if not infinite_ok else "", "number",
                                            _interval(low, high, open_low, open_high),
                                            "or inf" if infinite_ok else "") if part)
        raise ValueError(f"{name} must be a {bounds}, got {shown(value)}" + (f": {why}" if why else ""))
    return number


def check_choice(value: object, name: str, choices: Iterable[str]) -> str:
    """``value``, one of the names ``choices``."""
    choices = tuple(choices)
    if not (isinstance(value, str) and value in choices):
        raise ValueError(f"{name} must be one of {', '.join(map(repr, choices))}, got {shown(value)}")
    return value


def check_flag(value: object, name: str) -> bool:
    """``value``, a bool (True or False; numpy's bool too)."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {shown(value)}")
    return bool(value)


def check_device(device: object) -> torch.device:
    """A torch device that exists here: ``"cpu"``, ``"cuda"`` or ``"cuda:1"`` (a torch.device too)."""
    try:
        checked = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"device must name a torch device ('cpu', 'cuda', 'cuda:0'), got {shown(device)}") from None
    if checked.type == "cuda" and (checked.index or 0) >= torch.cuda.device_count():
        raise ValueError(f"device {shown(device)} is not available: this machine has {torch.cuda.device_count()} "
                         "CUDA devices")
    if checked.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be a CPU or CUDA device, got {shown(device)}")
    return checked


def check_float_dtype(dtype: object) -> torch.dtype:
    """A torch floating dtype (torch.float32, torch.float64, ...)."""
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise ValueError(f"dtype must be a torch floating dtype (torch.float32, torch.float64), got {shown(dtype)}")
    return dtype


def check_finite_result(value: object, what: str) -> object:
    """``value`` if every entry is finite, else ValueError: ``what`` (naming the arguments) overflows float64."""
    if not np.all(np.isfinite(np.asarray(value, dtype=float))):
        raise ValueError(f"{what} is not finite in float64")
    return value


def _check_filled(name: str, shape: tuple[int, ...], min_ndim: int, finite: bool, infinite_ok: bool = False,
                  empty_ok: bool = False) -> None:
    """An array's shape has at least ``min_ndim`` axes, none empty (unless ``empty_ok``), and its entries are
    ``finite`` (or +inf where ``infinite_ok``)."""
    if 0 in shape and not empty_ok:
        raise ValueError(f"{name} must not be empty, got shape {shape}")
    if len(shape) < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} axes, got shape {shape}")
    if not finite:
        raise ValueError(f"{name} must be finite{' or +inf' if infinite_ok else ''}, got non-finite entries "
                         "(NaN or inf)")


def check_real_array(value: object, name: str, min_ndim: int = 0, low: float = -math.inf, high: float = math.inf, *,
                     open_low: bool = False, open_high: bool = False, infinite_ok: bool = False,
                     empty_ok: bool = False, why: str = "") -> np.ndarray:
    """``value`` (a number, a list or an array of numbers, see the module docstring) as a finite float array with at
    least ``min_ndim`` axes, none of them empty (unless ``empty_ok``: a function applied entry by entry answers an
    empty array with an empty one), every entry between ``low`` and ``high`` (as :func:`check_range`,
    whose ``infinite_ok`` also admits +inf entries). A torch tensor comes to the host; half precision (float16,
    bfloat16, which numpy lacks) becomes float32 first, exactly."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        value = value.to(torch.float32) if value.dtype in (torch.float16, torch.bfloat16) else value
    try:
        array = np.asarray(value)
    except ValueError:  # a ragged list
        raise ValueError(f"{name} must be a regular array of real numbers, got {shown(value)}") from None
    if array.dtype.kind == "O":
        array = np.array([check_number(item, f"every entry of {name}") for item in array.ravel().tolist()],
                         dtype=float).reshape(array.shape)
    if array.dtype.kind not in "iuf":
        raise ValueError(f"{name} must hold real numbers, got {array.dtype} entries")
    array = array.astype(float)
    finite = np.isfinite(array) | (infinite_ok & (array == math.inf))
    _check_filled(name, array.shape, min_ndim, bool(np.all(finite)), infinite_ok, empty_ok)
    if not _inside(array, low, high, open_low, open_high):
        raise ValueError(f"{name} must hold numbers {_interval(low, high, open_low, open_high)}, got {shown(value)}"
                         + (f": {why}" if why else ""))
    return array


def check_real_tensor(value: object, name: str, min_ndim: int = 0) -> torch.Tensor:
    """``value`` (a torch tensor, or anything :func:`check_real_array` takes) as a finite floating torch tensor with
    at least ``min_ndim`` axes, none of them empty. A floating tensor or numpy array keeps its dtype (float32 stays
    float32) and a tensor its device, except half precision (float16, bfloat16), which becomes float32 (exactly:
    torch's linear algebra has none); other numbers become float64."""
    if not isinstance(value, torch.Tensor):
        array = check_real_array(value, name, min_ndim)
        given = np.asarray(value)
        value = torch.as_tensor(given if given.dtype.kind == "f" else array)
    if value.dtype == torch.bool or value.is_complex():
        raise ValueError(f"{name} must hold real numbers, got {value.dtype} entries")
    tensor = value if value.is_floating_point() else value.to(torch.float64)
    if tensor.dtype in (torch.float16, torch.bfloat16):
        tensor = tensor.to(torch.float32)
    _check_filled(name, tuple(tensor.shape), min_ndim, bool(torch.isfinite(tensor).all()))
    return tensor


def check_batch_size(batch_size: object, array_ok: bool = False) -> int | np.ndarray:
    """B must be a whole number with 4 <= B <= 1e7; with ``array_ok`` a non-empty array (or list) of them too.

    Returns an int, or an int array of the same shape. Scalars and arrays share one set of checks and messages;
    a numeric numpy array is checked with vectorised operations (1e5 values of B in about a millisecond).
    """
    if isinstance(batch_size, np.ndarray) and batch_size.dtype.kind in "iuf" and batch_size.size:
        many = batch_size.ndim > 0
        if many and not array_ok:
            raise ValueError(f"batch size B must be one whole number here, got an array of shape {batch_size.shape}")
        values = batch_size.astype(float)
        if not (np.isfinite(values).all() and (values == np.round(values)).all() and np.abs(values).max() < 2**62):
            raise ValueError(f"batch sizes B must be whole numbers, got {shown(batch_size)}" if many
                             else f"batch size B must be a whole number, got {shown(batch_size)}")
        _check_batch_range(int(values.min()), int(values.max()))
        return values.astype(int) if many else int(values)
    try:
        array = np.asarray(batch_size, dtype=object)
    except ValueError:  # a ragged list
        raise ValueError(f"batch sizes B must be whole numbers in a regular array, got {shown(batch_size)}") from None
    many = array.ndim > 0
    if many and not array_ok:
        raise ValueError(f"batch size B must be one whole number here, got an array of shape {array.shape}")
    wholes = [_whole(b) for b in array.ravel().tolist()]
    if not wholes or None in wholes:
        raise ValueError(f"batch sizes B must be whole numbers, got {shown(batch_size)}" if many
                         else f"batch size B must be a whole number, got {shown(batch_size)}")
    _check_batch_range(min(wholes), max(wholes))
    return np.array(wholes, dtype=int).reshape(array.shape) if many else wholes[0]


def _check_batch_range(low: int, high: int) -> None:
    """The smallest and largest B of a call against the theory's range [MIN_BATCH_SIZE, MAX_BATCH_SIZE]."""
    if low < 1:
        raise ValueError(f"batch size B must be positive, got {low}")
    if low == 1:
        raise ValueError(f"batch size B = 1 leaves batch norm undefined: {WHY_NO_BATCH_OF_ONE}")
    if low < MIN_BATCH_SIZE:
        raise ValueError(f"batch size B = {low} is below {MIN_BATCH_SIZE}: {WHY_MIN_BATCH}")
    if high > MAX_BATCH_SIZE:
        size = f"{high:,}" if high < 10**15 else f"about 1e{len(str(high)) - 1}"
        raise ValueError(f"batch size B = {size} is above {MAX_BATCH_SIZE:.0e}: {WHY_MAX_BATCH}")


def check_eps(eps: object, array_ok: bool = False) -> float | np.ndarray:
    """eps (the batch-norm stabiliser) must be a finite number >= 0; with ``array_ok`` a float array of them too."""
    if array_ok and np.ndim(eps) > 0:
        values = [check_eps(item) for item in np.asarray(eps, dtype=object).ravel().tolist()]
        return np.array(values, dtype=float).reshape(np.shape(eps))
    return check_range(eps, "eps", 0.0, why="it is added to a variance")


def check_tol(tol: object) -> float:
    """tol (a route's error target) must be a finite number > 0."""
    return check_range(tol, "tol", 0.0, open_low=True, why="an error target")


def check_variance(value: object, name: str, positive: bool) -> float:
    """A weight or bias variance (``name``): a finite number, > 0 if ``positive`` else >= 0."""
    return check_range(value, name, 0.0, open_low=positive,
                       why="a zero weight variance cuts the network" if positive else "it is a variance")


def check_covariance(sigma: object, batch_norm: bool = True) -> np.ndarray:
    """Sigma must be a real, finite, symmetric, positive semi-definite B x B matrix with B a batch size and
    G Sigma G != 0. Returns it symmetrised, as floats. ``batch_norm`` False (a network without train-mode batch
    norm, whose maps never divide by a batch variance): any B >= 1, and G Sigma G = 0 is allowed."""
    try:
        matrix = np.asarray(sigma)
        if np.iscomplexobj(matrix):
            raise ValueError("Sigma must be a real B x B matrix (a covariance), got complex entries")
        matrix = matrix.astype(float)
    except (TypeError, ValueError, OverflowError) as error:
        message = str(error) if str(error).startswith("Sigma") else f"Sigma must be a real numeric B x B matrix, got " \
            f"{type(sigma).__name__}"
        raise ValueError(message) from None
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"Sigma must be a square B x B matrix, got shape {matrix.shape}")
    if batch_norm:
        check_batch_size(matrix.shape[0])
    elif matrix.size == 0:
        raise ValueError("Sigma must not be empty (a batch has at least one input)")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("Sigma has non-finite entries")
    same = ("G Sigma G = 0: every input of the batch has the same pre-activation, so the batch variance is 0 and "
            "batch norm divides by zero")
    scale = np.abs(matrix).max()
    if scale == 0:
        if batch_norm:
            raise ValueError(same)
        return matrix
    unit = matrix / scale  # the checks below are scale free, and this keeps eigvalsh away from overflow
    if np.abs(unit - unit.T).max() > 1e-10:
        raise ValueError("Sigma must be symmetric (it is a covariance matrix)")
    unit = (unit + unit.T) / 2
    batch = matrix.shape[0]
    shifted = unit.copy()
    shifted.flat[::batch + 1] += 1e-10
    # smallest eigenvalue >= -1e-10: a Cholesky factor of unit + 1e-10 I exists (a tenth of eigvalsh's work; LAPACK's
    # potrf directly, without numpy.linalg's wrapper, which costs more than the factor at B = 16)
    if potrf(shifted, lower=True, overwrite_a=True, clean=False)[1]:
        smallest = np.linalg.eigvalsh(unit).min()
        if smallest < -1e-10:
            raise ValueError(f"Sigma must be positive semi-definite (a covariance matrix); "
                             f"its smallest eigenvalue is {smallest * scale:.3g}") from None
    if batch_norm:  # G unit G, G = I - 11^T / B, by its row and column means
        rows = unit.mean(0)
        if np.abs(unit - rows[:, None] - rows[None, :] + rows.mean()).max() <= 1e-12:
            raise ValueError(same)
    return unit * scale


def batch_scales(diagonal: np.ndarray, batch1: int) -> np.ndarray:
    """Powers of 2, one per row of a joint covariance (..., B1 + B2) given its ``diagonal``, that bring each batch's
    largest variance into [1/4, 1): batch norm at eps = 0 is blind to each batch's scale (Sigma -> D Sigma D with
    D = diag(s1 I, s2 I) changes nothing after the layer), and powers of 2 rescale without rounding."""
    scales = np.ones(diagonal.shape)
    for lo, hi in ((0, batch1), (batch1, diagonal.shape[-1])):
        exponent = np.frexp(np.abs(diagonal[..., lo:hi]).max(-1))[1]
        scales[..., lo:hi] = np.ldexp(1.0, -(exponent // 2))[..., None]
    return scales


def check_joint_covariance(sigma: object, batch1: object) -> tuple[np.ndarray, int]:
    """A joint covariance of two batches: (..., B1 + B2, B1 + B2), each matrix symmetric PSD, B1, B2 >= 4.

    ``sigma`` may be a numpy array (or nested list) or a torch tensor; the checks run in float64 on the CPU, on each
    batch rescaled by :func:`batch_scales`, and return it (not rescaled) as a numpy array (the caller keeps its own
    tensor). Every stacked matrix must have G_k Sigma_kk G_k
    != 0 for both batches (batch norm divides by the batch's standard deviation).
    """
    try:
        matrix = np.asarray(sigma.detach().cpu() if hasattr(sigma, "detach") else sigma)
        if np.iscomplexobj(matrix):
            raise TypeError
        matrix = matrix.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"Sigma must be a real numeric (B1 + B2) x (B1 + B2) matrix, got {type(sigma).__name__} "
                         "(complex entries are refused)") from None
    if matrix.ndim < 2 or matrix.shape[-1] != matrix.shape[-2]:
        raise ValueError(f"Sigma must be a square (B1 + B2) x (B1 + B2) matrix or a stack (..., B1 + B2, B1 + B2) "
                         f"of them, got shape {matrix.shape}")
    whole = _whole(batch1)
    if whole is None:
        raise ValueError(f"B1 (the size of the first batch) must be a whole number, got {shown(batch1)}")
    batch1 = whole
    batch2 = matrix.shape[-1] - batch1
    for name, size in (("B1", batch1), ("B2 = Sigma.shape[-1] - B1", batch2)):
        if size < MIN_BATCH_SIZE:
            raise ValueError(f"{name} = {size} is below {MIN_BATCH_SIZE} (Sigma has shape {matrix.shape}): "
                             f"{WHY_MIN_BATCH}")
    if not np.all(np.isfinite(matrix)):
        raise ValueError("Sigma has non-finite entries")
    scales = batch_scales(np.diagonal(matrix, 0, -2, -1), batch1)  # each batch checked at its own scale
    unit = matrix * scales[..., :, None] * scales[..., None, :]  # eps > 0 is not scale free: only the checks
    scale = np.maximum(np.abs(unit).max((-2, -1)), 1e-300)[..., None, None]
    if np.any(np.abs(unit - np.swapaxes(unit, -1, -2)) > 1e-10 * scale):
        raise ValueError("Sigma must be symmetric (it is a covariance matrix)")
    smallest = np.linalg.eigvalsh((unit + np.swapaxes(unit, -1, -2)) / 2)[..., 0]
    if np.any(smallest < -1e-10 * scale[..., 0, 0]):
        raise ValueError(f"Sigma must be positive semi-definite (a joint covariance of two batches); its smallest "
                         f"eigenvalue, each batch scaled to unit variance, is {smallest.min():.3g}")
    for lo, hi in ((0, batch1), (batch1, unit.shape[-1])):
        g = np.eye(hi - lo) - 1.0 / (hi - lo)
        projected = g @ unit[..., lo:hi, lo:hi] @ g
        if np.any(np.abs(projected).max((-2, -1)) <= 1e-12 * scale[..., 0, 0]):
            raise ValueError(f"G Sigma G = 0 for the batch of rows {lo}..{hi - 1}: all its inputs have the same "
                             "pre-activation, so the batch variance is 0 and batch norm divides by zero")
    return matrix, batch1


@lru_cache(maxsize=256)
def _coordinate_rule(batch_size: int | None, kinks: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Nodes x and weights (summing to about 1) for E[f(x)], x one BN coordinate (N(0, 1) for None), split at kinks;
    built once per (B, kinks), read-only.

    x = sqrt(B-1) t has density proportional to (1 - t^2)^((B-4)/2) on |x| <= sqrt(B-1); beyond |x| = 40 it (and
    N(0, 1)) is below e^-800. Gauss-Legendre on each piece, the density in log space, its mass exact (Beta).
    """
    reach = 40.0 if batch_size is None else min(math.sqrt(batch_size - 1), 40.0)
    cuts = sorted({-reach, reach, *(k for k in kinks if -reach < k < reach)})
    s, w = roots_legendre(_SPHERE_NODES)
    nodes = np.concatenate([lo + (hi - lo) * (s + 1) / 2 for lo, hi in zip(cuts, cuts[1:])])
    widths = np.concatenate([(hi - lo) / 2 * w for lo, hi in zip(cuts, cuts[1:])])
    if batch_size is None:
        weights = widths * np.exp(-nodes**2 / 2) / math.sqrt(2 * math.pi)
    else:
        radius, a = math.sqrt(batch_size - 1), (batch_size - 4) / 2
        log_mass = math.log(radius) + gammaln(0.5) + gammaln(a + 1) - gammaln(a + 1.5)  # int (1 - x^2/R^2)^a dx
        weights = widths * np.exp(a * np.log1p(-((nodes / radius) ** 2)) - log_mass)  # Gauss nodes lie inside
    nodes.setflags(write=False)
    weights.setflags(write=False)
    return nodes, weights


def check_activation(phi: Activation, batch_size: int | np.ndarray | None = None, slope: bool = False) -> Activation:
    """phi must be usable on the BN sphere at every B given (see the module docstring); ``slope``: phi' too.

    ``batch_size`` None checks phi on N(0, 1), the law of one BN coordinate as B -> infinity (the mean-field
    setting of :mod:`bnsym.dilution`). For an array of B it checks the smallest and largest (the sphere's range
    grows with B). Returns phi.
    """
    batches = [None] if batch_size is None else sorted({int(np.min(batch_size)), int(np.max(batch_size))})
    for batch in batches:
        verdict = _verdict(phi, batch, slope)
        if verdict is not None:
            raise ValueError(verdict)
    return phi


_VERDICTS: weakref.WeakKeyDictionary[Activation, dict[tuple[int | None, bool], str | None]] = (
    weakref.WeakKeyDictionary())


def _verdict(phi: Activation, batch_size: int | None, slope: bool) -> str | None:
    """Why phi is not usable at ``batch_size`` (:func:`_check_usable`'s message), or None; decided once per
    (phi, B, slope) and kept while phi lives: an Activation is immutable, and a network checks each of its
    activation layers."""
    verdicts = _VERDICTS.setdefault(phi, {})
    if (batch_size, slope) not in verdicts:
        try:
            _check_usable(phi, batch_size, slope)
            verdicts[batch_size, slope] = None
        except ValueError as error:
            verdicts[batch_size, slope] = str(error)
    return verdicts[batch_size, slope]


def _check_usable(phi: Activation, batch_size: int | None, slope: bool) -> None:
    if batch_size is None:
        radius, factor, where = math.inf, 1, "on N(0, 1)"
    else:
        radius, factor = math.sqrt(batch_size - 1), batch_size
        where = f"on the BN sphere of B = {batch_size}, where each coordinate lies in [-{radius:.4g}, {radius:.4g}]"
    inside = [k for k in phi.kinks if -radius < k < radius]
    x, w = _coordinate_rule(batch_size, phi.kinks)
    if slope:
        with np.errstate(all="ignore"):
            if np.all(np.asarray(phi.numpy_derivative(x), dtype=float) == 0):
                raise ValueError(f"activation {phi}: phi' is 0 almost everywhere {where} (a step function, such as "
                                 "sign, Heaviside or round), so every gradient quantity of the mean-field theory, "
                                 "which needs phi', is 0 or undefined")
    if slope and inside and 0.5 < phi.kink_power < 1 and not phi.is_homogeneous:
        raise ValueError(f"activation {phi}: phi' is unbounded at its kink z = {inside[0]:g} (phi ~ |z - kink|^"
                         f"{phi.kink_power:.3g}): E[phi'^2] is finite, but the quadratures converge too slowly there "
                         "for their error estimate to be a bound, so gradient quantities are refused (a "
                         "positive-homogeneous a max(z, 0)^alpha - b max(-z, 0)^alpha is exact by its closed forms)")
    if slope and inside and not phi.kink_power > 0.5:
        raise ValueError(f"activation {phi}: E[phi'^2] is infinite {where} (phi ~ |z - {inside[0]:g}|^"
                         f"{phi.kink_power:g} at its kink, a power <= 1/2; 0 is a jump), so its gradient quantities "
                         "are infinite")
    ends = [] if batch_size is None else [-radius, radius]
    x = np.concatenate([x, ends, inside])
    w = np.concatenate([w, np.zeros(x.size - w.size)])
    with np.errstate(all="ignore"):
        f = np.asarray(phi.numpy(x), dtype=float)
        big = factor * f**2
        if slope:  # phi' matters only to gradient quantities (and a numpy callable's may be unknown)
            big = np.maximum(big, factor * np.asarray(phi.numpy_derivative(x), dtype=float) ** 2)
        if not np.all(np.isfinite(big)):
            squares = "phi(x)^2" + (" or phi'(x)^2" if slope else "") + (" times B" if batch_size else "")
            raise ValueError(f"activation {phi} overflows float64 {where}: {squares} is not finite there")
        if np.ptp(f) == 0:
            raise ValueError(f"activation {phi} is constant (= {f[0]:g}) {where}: the next layer's pre-activations "
                             "are then equal across the batch, and batch norm divides by their variance, 0")
        mean_square = w @ f**2
        variance = w @ (f - (w @ f) / w.sum()) ** 2
    if not variance >= MIN_VARIANCE:
        raise ValueError(f"activation {phi} underflows float64 {where}: the variance of phi(x) is {variance:.3g}, "
                         f"below {MIN_VARIANCE:.3g} (its square underflows, or phi varies only where x has "
                         "negligible probability)")
    if variance < MIN_RELATIVE_VARIANCE * mean_square:
        raise ValueError(f"activation {phi} is nearly constant {where}: the variance of phi(x) is "
                         f"{variance / mean_square:.2g} of its mean square, so mu* = q* (1 - c*) would keep fewer than "
                         "8 of float64's 16 digits")


def check_resolved(value: object, error: object, what: str) -> None:
    """A route's result must be finite and its error estimate at most MAX_RELATIVE_ERROR of the result's scale
    (max |value|)."""
    values, errors = np.abs(np.asarray(value, dtype=float)), np.asarray(error, dtype=float)
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(errors))):
        raise ValueError(f"{what} is not finite in float64")
    scale = values.max() if values.size else 0.0
    # a result that is exactly 0 (the collapsed fixed point Sigma* = phi(0)^2 11^T of an odd phi) has no scale to
    # judge its error by, and one that is 0 up to rounding (c*_cross of the identity) errs by the rounding of the
    # route's sums of order one: ROUNDING_FLOOR
    if errors.size and scale > 0 and errors.max() > max(MAX_RELATIVE_ERROR * scale, ROUNDING_FLOOR):
        raise ValueError(f"{what} is not resolved: its error estimate is {_ratio_above(errors.max() / scale)} of "
                         f"its size {scale:.3g} (error {errors.max():.3g}), more than the {MAX_RELATIVE_ERROR:g} "
                         "allowed")


def _ratio_above(ratio: float, limit: float = MAX_RELATIVE_ERROR) -> str:
    """``ratio`` (> ``limit``) with the fewest significant digits (at least 2) that still show it above ``limit``."""
    for digits in range(2, 17):
        text = f"{ratio:.{digits}g}"
        if float(text) > limit:
            return text
    return repr(ratio)


def check_settings(config: object, defaults: Mapping[str, object], required: Iterable[str] = (),
                   what: str = "") -> dict:
    """A sweep cell's ``config`` (a mapping of settings) completed with ``seed`` 0 and ``defaults``: ValueError for
    anything but a mapping, an unknown setting or a missing ``required`` one (``what`` names the task)."""
    if not isinstance(config, Mapping):
        raise ValueError(f"config must be a dict of settings, got {config!r:.80}")
    known = {*defaults, *required, "seed"}
    unknown = set(config) - known
    if unknown:
        raise ValueError(f"unknown {what + ' ' if what else ''}settings {sorted(unknown)}; known: {sorted(known)}")
    missing = set(required) - set(config)
    if missing:
        raise ValueError(f"a {what + ' ' if what else ''}cell needs {sorted(missing)} (required: "
                         f"{' and '.join(required)})")
    return {"seed": 0, **defaults, **config}
