"""The ``bnsym`` command: ``bnsym predict --phi relu --batch-size 8 --json``; ``bnsym arch "dense,bn,relu*20"
--batch-size 32`` (signal propagation of any architecture, :mod:`bnsym.arch`, imported only for it);
``bnsym sweep ...`` (:mod:`.sweep`); ``bnsym products --factors 3 --x 0.5,1`` (Bjorck et al.'s random-matrix
products: the Fuss-Catalan law, condition numbers, the stable step)."""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import warnings
from importlib import metadata

import numpy as np

from ..core.grammar import SPEC_GRAMMAR
from ..sweep.cli import add_sweep_parser, run_sweep_command
from .cache import cached

# The theory (torch, SymPy, SciPy: about 3 s of CPU) is imported by the commands that use it, not by --help.


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line, without the usage block."""

    def error(self, message: str) -> None:  # noqa: D401 - argparse API
        self.exit(2, f"bnsym: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="bnsym", description="Mean field predictions for batch-normalised networks.")
    parser.add_argument("--version", action="version", version=f"bnsym {metadata.version('bnsym')}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    predict = commands.add_parser("predict", help="theory predictions for one activation and batch size")
    predict.add_argument("--phi", required=True,
                         help="activation, e.g. relu, tanh, gelu, silu, relu^1.5, leaky_relu(0.2), tanh(gamma=0.5), "
                         "or a formula in one variable, e.g. 'x*sigmoid(1.702*x)'")
    predict.add_argument("--batch-size", "-B", required=True,
                         help="batch size B (an integer >= 4; 2 and 3 give the fixed point and lambda_G only)")
    predict.add_argument("--eps", default="0", help="batch-norm epsilon (>= 0, default 0)")
    predict.add_argument("--sigma-w2", default="1", help="weight variance sigma_w^2 (> 0, default 1; with eps > 0 "
                         "only eps / sigma_w^2 matters)")
    predict.add_argument("--method", default=None,
                         help="fixed-point method: closed_form (alias laplace), spherical, gegenbauer or radial "
                         "(default: best available)")
    predict.add_argument("--json", action="store_true", help="print one JSON object")
    arch = commands.add_parser("arch", help="predicted signal propagation and gradient growth of an architecture",
                               description="Infinite-width signal propagation (Brock et al.'s statistics and the "
                               "gradient statistic S) of a network, layer by layer, for one batch.",
                               epilog=SPEC_GRAMMAR, formatter_class=argparse.RawDescriptionHelpFormatter)
    arch.add_argument("spec", help='the network, e.g. "dense,bn,relu*20" (grammar below)')
    arch.add_argument("--batch-size", "-B", required=True, help="batch size B (>= 4 with a train-mode bn)")
    arch.add_argument("--correlation", default="0", help="the inputs' Gram matrix is (1 - c) I + c 11^T (default 0)")
    arch.add_argument("--points", default=str(2**12), help="quasi-Monte Carlo points per replicate (a power of 2)")
    arch.add_argument("--json", action="store_true", help="print one JSON object")
    arch.add_argument("--plot", default=None, help="write the signal-propagation plot to this image file (its "
                      "extension names the format: .png, .pdf, .svg, ...)")
    add_sweep_parser(commands, _Parser)
    _add_products_parser(commands)
    return parser


def _number(text: object, name: str, kind: type = float) -> object:
    """A command-line string as a number of ``kind`` (int, or float where it has a point or an exponent); other
    values pass through, for the API's checks (which also judge the range)."""
    if not isinstance(text, str):
        return text
    try:
        return float(text) if kind is float or any(ch in text for ch in ".eE") else int(text)
    except ValueError:
        raise ValueError(f"{name} must be a {'whole number' if kind is int else 'number'}, got {text!r}") from None


def predict(phi: str, batch_size: object, eps: object = 0.0, method: str | None = None,
            sigma_w2: object = 1.0) -> dict:
    """All predictions for (phi, B, eps, sigma_w^2) as a JSON-ready dict."""
    from .. import api
    from ..core.activations import parse_activation
    from ..dilution import normalised_gsc_rate
    from ..meanfield.small_batch import small_batch_size

    batch_size, eps = _number(batch_size, "batch size B", int), _number(eps, "eps")
    sigma_w2 = _number(sigma_w2, "sigma_w2")
    point = api.fixed_point(phi, batch_size, eps=eps, sigma_w2=sigma_w2, method=method)
    if small_batch_size(batch_size) is not None:
        return _small_batch_prediction(phi, point)
    # forward linearization: per-layer factors and depth scales -1/log(lambda), null (infinite) where lambda >= 1
    eigenvalues = api.forward_eigenvalues(phi, point.batch_size, point.eps, sigma_w2, with_error=True)
    result = {
        "phi": str(parse_activation(phi)),
        "batch_size": point.batch_size,
        "eps": point.eps,
        "sigma_w2": point.sigma_w2,
        "fixed_point": {"q": point.q, "c": point.c, "mu": point.mu, "method": point.method, "error": point.error,
                        "collapsed": point.collapsed},
        "collapse_eps": _finite_or_none(api.collapse_eps(phi, point.batch_size, sigma_w2)),
        "forward_eigenvalues": {key: lam.value for key, lam in eigenvalues.items()},
        "depth_scales": {key: _finite_or_none(xi) for key, xi in api.forward_depth_scales(eigenvalues).items()},
        # Philipp et al.'s per-layer GSC rate in the mean-field, large-batch limit (bnsym.dilution)
        "gsc_rate": {norm: normalised_gsc_rate(phi, norm) for norm in ("batch", "layer")},
    }
    result.update(_gradient_predictions(phi, point.batch_size, point.eps, sigma_w2))
    cross_batch = _cross_batch_predictions(phi, point.batch_size, point.eps)
    if cross_batch is not None:  # the cross-batch routes need eps = 0; the key is left out otherwise
        result["cross_batch"] = cross_batch
    return result


def _small_batch_prediction(phi: str, point) -> dict:
    """B = 2 or 3 at eps = 0 (App. J): the fixed point and lambda_G (0, or infinite: null with ``note``); the
    eigenvalues and cross-batch quantities need B >= 4 and are left out."""
    from .. import api
    from ..core.activations import parse_activation

    rate = api.gradient_rate(phi, point.batch_size)
    return {
        "phi": str(parse_activation(phi)), "batch_size": point.batch_size, "eps": point.eps,
        "sigma_w2": point.sigma_w2,
        "fixed_point": {"q": point.q, "c": point.c, "mu": point.mu, "method": point.method, "error": point.error,
                        "collapsed": point.collapsed},
        "gradient_rate": _finite_or_none(rate),
        "depth_scale": api.depth_scale(phi, point.batch_size),
        "note": ("B = 2: batch norm's Jacobian is zero, every gradient vanishes" if point.batch_size == 2 else
                 "B = 3: the mean-field gradient rate is infinite (E[1/r^2] diverges)")
        + "; the forward and backward eigenvalues and the cross-batch quantities need B >= 4 (App. J)",
    }


def _cross_batch_predictions(phi: str, batch_size: int, eps: float) -> dict | None:
    """Two batches through one network (App. H): c*_cross, lambda_x^2 and the gradient-correlation factor
    (None for eps > 0, where no route exists)."""
    from .. import api

    if eps != 0:
        return None
    rate = api.cross_batch_rate(phi, batch_size)
    return {"fixed_point": api.cross_batch_fixed_point(phi, batch_size), "rate": rate,
            "gradient_correlation_rate": rate / api.gradient_rate(phi, batch_size)}


def _finite_or_none(value: float) -> float | None:
    """JSON has no Infinity: an infinite value (a rate, a depth scale, a density at 0) becomes null (text: inf).
    Every value passed here is a number or +-inf, never NaN (the API refuses what it cannot resolve)."""
    return value if math.isfinite(value) else None


def _gradient_predictions(phi: str, batch_size: int, eps: float, sigma_w2: float) -> dict:
    """lambda_G, the backward eigenvalues, xi and the predicted maximum trainable depth 16 xi (R19)."""
    from .. import api

    rate = api.gradient_rate(phi, batch_size, eps, sigma_w2)
    backward, why = {"G": rate}, None
    if eps >= api.collapse_eps(phi, batch_size, sigma_w2):  # every output is phi(0): L and M are not derived there
        why = "past the collapse every output is phi(0): the L and M eigenvalues are not derived there"
    else:
        try:
            backward = {k: _finite_or_none(v) for k, v in
                        api.backward_eigenvalues(phi, batch_size, eps, sigma_w2).items()}
        except ValueError as error:  # eps > 0 at small B: the radial rule may not resolve L and M; G stands
            why = f"L and M left out: {error}"
    return {
        "gradient_rate": rate,
        "backward_eigenvalues": backward,
        **({"backward_note": why} if why else {}),
        "depth_scale": _finite_or_none(api.depth_scale(phi, batch_size, eps, sigma_w2)),
        "max_trainable_depth": _finite_or_none(api.max_trainable_depth(phi, batch_size, eps, sigma_w2)),
    }


def arch_prediction(spec: str, batch_size: object, correlation: object = 0.0, points: object = 2**12) -> dict:
    """Signal propagation of the network ``spec`` on B inputs with Gram (1 - c) I + c 11^T, as a JSON-ready dict."""
    from .. import arch  # imported here: `bnsym predict` does not pay for it
    from ..core.validation import check_number, check_whole_number

    batch_size, correlation = _number(batch_size, "batch size B", int), _number(correlation, "correlation")
    points = _number(points, "points", int)
    batch = check_whole_number(batch_size, "batch size B", 1, 4096, "a B x B kernel per layer")
    c = check_number(correlation, "correlation")
    if not -1 / max(batch - 1, 1) <= c <= 1:
        raise ValueError(f"the correlation must lie in [-1/(B-1), 1] (a Gram matrix is PSD), got {correlation}")
    result = arch.signal_propagation(arch.parse_architecture(spec), (1 - c) * np.eye(batch) + c, points=points)
    start, period = result.block
    growth = [None] * (start == 0) + [_finite_or_none(float(g)) for g in result.gradient_growth.value]

    def listed(estimate) -> dict:
        return {"value": [_finite_or_none(float(v)) for v in estimate.value],
                "error": [_finite_or_none(float(v)) for v in estimate.error]}

    return {"spec": spec, "batch_size": batch, "input_correlation": c, "layers": list(result.layers),
            **{key: listed(getattr(result, key)) for key in ("diagonal", "off_diagonal", "correlation",
                                                               "channel_mean_squared", "channel_variance", "gradient")},
            "branch_variance": {str(k): v.value for k, v in result.branch_variance.items()},
            "note": result.gradient.note, "block": {"start": start, "length": period},
            "gradient_growth": growth}


def _check_plot_path(path: str) -> None:
    """``--plot``'s file, checked before any work: not a directory, an image format matplotlib writes (named by
    its extension, so the plot lands at the path given), in an existing folder this process may write to."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    folder = os.path.dirname(os.path.abspath(path))
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if os.path.isdir(path):
        raise ValueError(f"--plot {path} is a directory: give an image file, e.g. {os.path.join(path, 'spp.png')}")
    if extension not in formats:
        given = f".{extension}" if extension else "no extension"
        raise ValueError(f"--plot {path}: the file name must end in an image format matplotlib writes "
                         f"({', '.join('.' + f for f in sorted(formats))}), got {given}")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ValueError(f"--plot {path}: the folder {folder} does not exist or cannot be written to")


def _plot(result: dict, path: str) -> None:
    """Brock et al.'s signal-propagation plot (channel mean squared, channel variance) and the gradient S."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    layers = np.arange(len(result["layers"]))
    for axis, key, title in zip(axes, ("channel_mean_squared", "channel_variance", "gradient"),
                                ("average squared channel mean", "average channel variance", "gradient S")):
        values = np.array([np.nan if v is None else v for v in result[key]["value"]])
        axis.plot(layers, values, marker=".")
        axis.set(title=title, xlabel="layer")
        if key == "gradient" and np.nanmin(values) > 0:
            axis.set_yscale("log")
    figure.suptitle(f"{result['spec']}, B = {result['batch_size']}")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def _as_text(result: dict) -> str:
    """The ``--json`` answer as lines ``name = value`` (a dict: ``name: key = value, ...``), under the same names,
    so that each quantity is named once, in text and JSON alike; JSON's null (:func:`_finite_or_none`) is inf."""

    def shown(value: object) -> str:
        if value is None:
            return "inf"
        if isinstance(value, bool):
            return str(value).lower()
        if isinstance(value, list):  # the density's x and rho: each entry shown as a value is
            return "[" + ", ".join(map(shown, value)) + "]"
        return f"{value:.10g}" if isinstance(value, float) else str(value)

    return "\n".join(f"{name}: " + ", ".join(f"{key} = {shown(v)}" for key, v in value.items())
                     if isinstance(value, dict) else f"{name} = {shown(value)}" for name, value in result.items())


def _print_arch(result: dict) -> None:
    print(f"{result['spec']}: B = {result['batch_size']}, input correlation {result['input_correlation']:g}")
    print(f"{'layer':>5}  {'':24}  {'diag':>10}  {'corr':>8}  {'ch.mean^2':>10}  {'ch.var':>10}  {'S':>12}")
    for index, name in enumerate(result["layers"]):
        row = [result[key]["value"][index] for key in ("diagonal", "correlation", "channel_mean_squared",
                                                        "channel_variance", "gradient")]
        text = "  ".join(f"{'inf' if v is None else f'{v:.4g}':>{width}}" for v, width in zip(row, (10, 8, 10, 10, 12)))
        print(f"{index:>5}  {name[:24]:24}  {text}")
    growth = [g for g in result["gradient_growth"] if g is not None]
    if growth:
        block = result["block"]
        print(f"gradient growth per block of {block['length']} layer(s) (from layer {block['start']}): "
              + ", ".join(f"{g:.4g}" for g in growth))
    if result["note"]:
        print(result["note"])


# bnsym products: Bjorck et al. (2018), Theorem 1 and Proposition 1 (chapter 12), through bnsym.api

MAX_CLI_MOMENT = 50  # --moments: the exact Fuss-Catalan integers, k = 0..50


def _add_products_parser(commands: argparse._SubParsersAction) -> None:
    products = commands.add_parser(
        "products", help="products of Gaussian matrices: the Fuss-Catalan law, condition numbers, the stable step",
        description="Bjorck et al. (2018): the Fuss-Catalan density of a squared singular value of a product of M "
        "N x N Gaussian matrices (entries of variance 1/N, N -> infinity), its moments and edges; the condition "
        "number of a product of given factors without float64 saturation; the largest stable gradient-descent "
        "step on ||Abar A_1 x - y||^2 (Proposition 1). Matrices are read from .npy files (a 2-d one may also be "
        "text).")
    products.add_argument("--factors", "-M", default=None, help="M, the number of Gaussian factors (>= 1)")
    products.add_argument("--moments", default="4", help=f"the moments E x^k for k = 0..K (K <= {MAX_CLI_MOMENT}, "
                          "default 4; needs --factors)")
    products.add_argument("--x", default=None, help="squared singular values at which to evaluate the density, "
                          "comma-separated, e.g. 0.5,1,2 (needs --factors)")
    products.add_argument("--condition", default=None, metavar="FILE",
                          help="factors (..., M, N, N) of a product: print its natural log condition number")
    products.add_argument("--max-lr", nargs=2, default=None, metavar=("ABAR", "X"),
                          help="matrices Abar (p, n) and x (n, m): print the largest stable step on A_1")
    products.add_argument("--json", action="store_true", help="print one JSON object")


def _matrix_file(path: str, option: str) -> np.ndarray:
    """The array in ``path`` (.npy, or text that numpy.loadtxt reads), as floats; ValueError if it cannot be read."""
    try:
        return np.load(path, allow_pickle=False) if path.endswith(".npy") else np.loadtxt(path, ndmin=2)
    except (OSError, ValueError) as error:
        raise ValueError(f"{option}: cannot read {path!r} as an array ({error})") from None


def products_prediction(factors: object = None, moments: object = 4, x: str | None = None,
                        condition: str | None = None, max_lr: list[str] | None = None) -> dict:
    """The answer of ``bnsym products`` as a JSON-ready dict: with ``factors`` M, the soft and hard edges and the
    moments 0..``moments`` of Theorem 1's density (and the density at the comma-separated ``x``); with
    ``condition`` (a file of factors), log kappa of their product; with ``max_lr`` (files Abar, x), the stable step."""
    from .. import api
    from ..core.validation import check_whole_number

    result: dict = {}
    if factors is not None:
        m = _number(factors, "M (--factors)", int)
        edges = api.fuss_catalan_edges(m)
        order = check_whole_number(_number(moments, "--moments", int), "--moments (the highest moment order)", 0,
                                   MAX_CLI_MOMENT, "the moments are printed as exact integers")
        result.update(factors=m, soft_edge=edges["soft"],
                      hard_edge={"coefficient": edges["hard_coefficient"], "exponent": edges["hard_exponent"]},
                      moments={str(k): api.fuss_catalan_moment(k, m) for k in range(order + 1)})
        if x is not None:
            values = [_number(v.strip(), "each value of --x") for v in x.split(",")]
            rho = np.atleast_1d(api.fuss_catalan_density(values, m))
            result["density"] = {"x": values, "rho": [_finite_or_none(float(r)) for r in rho]}
    elif x is not None:
        raise ValueError("--x needs --factors M: the density depends on the number of factors")
    if condition is not None:
        log_kappa = api.log_condition_number(_matrix_file(condition, "--condition"))
        result["log_condition_number"] = np.asarray(log_kappa).tolist()
    if max_lr is not None:
        result["max_stable_lr"] = api.max_stable_lr(_matrix_file(max_lr[0], "--max-lr ABAR"),
                                                    _matrix_file(max_lr[1], "--max-lr X"))
    if not result:
        raise ValueError("bnsym products needs --factors M, --condition FILE or --max-lr ABAR X")
    return result


def main(argv: list[str] | None = None) -> int:
    """Run the command; every error is one ``bnsym: error: ...`` line on stderr and exit status 2, like argparse's.

    Numerical warnings of intermediate steps are not shown: every value printed has passed the input contract of
    :mod:`bnsym.core.validation` and is finite.

    Run as the process's command (``argv`` None), the objects built are frozen (``gc.freeze``) before it exits, so
    that the interpreter's last collection does not walk SymPy's and SciPy's modules (about 0.2 s of CPU).
    """
    status = _command(argv)
    if argv is None:
        gc.freeze()
    return status


def _command(argv: list[str] | None) -> int:
    args = _parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if args.command == "sweep":
                print(run_sweep_command(args))
                return 0
            if args.command == "arch":
                if args.plot:
                    _check_plot_path(args.plot)
                result = arch_prediction(args.spec, args.batch_size, args.correlation, args.points)
                if args.plot:
                    _plot(result, args.plot)
            elif args.command == "products":
                result = products_prediction(args.factors, args.moments, args.x, args.condition, args.max_lr)
            else:
                arguments = {"phi": args.phi, "batch_size": args.batch_size, "eps": args.eps,
                             "method": args.method, "sigma_w2": args.sigma_w2}
                result = cached("predict", arguments, lambda: predict(**arguments))  # once per question and code
        text = json.dumps(result, allow_nan=False) if args.json else None
    except ValueError as error:
        print(f"bnsym: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # one line, as for errors; a sweep keeps every record saved so far
        print("bnsym: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug: still one line, never a traceback
        print(f"bnsym: error: internal error ({type(error).__name__}: {error}); please report it", file=sys.stderr)
        return 2
    if args.json:
        print(text)
    elif args.command == "arch":
        _print_arch(result)
    else:
        print(_as_text(result))
    return 0
