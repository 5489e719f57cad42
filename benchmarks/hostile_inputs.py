"""Hostile inputs to the surface added since the first audit: does every public function keep the input contract?

Each case calls one public function of ``bnsym.api`` (with the wave-3 audit's reproducers), ``bnsym.rank``,
``bnsym.products``, ``bnsym.nngp``, ``bnsym.nngp.ntk``, ``bnsym.train``, ``bnsym.sweep``, ``bnsym.arch`` or
``bnsym.dilution.shallow`` (or the ``bnsym`` command) with one argument of a valid call replaced by a hostile value of a
category: NaN, inf, huge, tiny, negative, empty, wrong type or dtype, complex, a numpy integer, a half-precision
tensor, an absurd size. The outcome is

* **clean**: a finite, possible value, or a ``ValueError`` with a message (the command: exit 0 with strict JSON, or
  exit 2 with one ``bnsym: error:`` line);
* **defect**: any other exception, a NaN or inf returned, a valid input (a numpy integer, the same array as a list or
  rescaled where the function is scale free) refused, or a call that runs past the timeout (20 s of CPU time, or
  120 s of wall clock).

The record lists the counts per function and every defect with its reproducer (function, argument, value).
It is not a test (``make test`` never runs it): it measures how much of the contract holds.

The ``wave3.*`` functions hold the wave-3 audit's surface (issue 41): user activations of every kind (a kinked relu
must give the closed form within 1e-6 relative with a stated error that covers the gap, what is not elementwise or
has no usable slope must be refused), the architecture calculus at rank-deficient, deeply nested and absurd inputs,
from_torch, the kernel regressors and bn_ntk at absurd sizes (refused up front), and the command's sweep and plot
arguments and planted result files (never imported; the message names the file).

    python benchmarks/hostile_inputs.py            # every case (about 5,300; minutes on one thread)
    python benchmarks/hostile_inputs.py --smoke    # a handful of cases per module (seconds)
    python benchmarks/hostile_inputs.py --only wave3 --output /tmp/wave3.json   # the wave-3 cases only
"""

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import resource
import signal
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from harness import parse, threads, write

# no ``from __future__ import annotations``: the harness loads this file under a name that is not in sys.modules,
# where dataclasses cannot resolve string annotations

SIZES = {"default": {"timeout_s": 20, "stride": 1}, "smoke": {"timeout_s": 20, "stride": 40}}
WALL_FACTOR = 6
MEMORY_HEADROOM = 6 * 2**30  # bytes of address space a case may add: an absurd size is a MemoryError, not a swap storm


class Timeout(BaseException):
    """A case ran past its time limit."""


@dataclasses.dataclass(frozen=True)
class Value:
    """A hostile (or valid) replacement for one argument; ``valid``: it must be accepted (no ValueError);
    ``check`` and ``reason``: what a clean answer or refusal must further satisfy (a value, a message)."""

    category: str
    value: Any
    valid: bool = False
    check: Callable[[Any], str] | None = None  # what is wrong with a returned value ("" if nothing)
    reason: Callable[[str], str] | None = None  # what is wrong with a ValueError's message ("" if nothing)


@dataclasses.dataclass
class Spec:
    """A valid call ``function(**arguments)`` and the arguments replaced one at a time (``scale_free``: those whose
    rescaling by 1e-150 or 1e150 is a valid input; ``nonfinite_ok``: a result may be inf by the docstring)."""

    name: str
    function: Callable[..., Any]
    arguments: dict[str, Any]
    hostile: Sequence[str]
    scale_free: Sequence[str] = ()
    nonfinite_ok: bool = False
    values: dict[str, list[Value]] = dataclasses.field(default_factory=dict)


def numbers(value: Any) -> list[Value]:
    """Hostile replacements for a number (int or float) argument."""
    out = [Value("nan", math.nan), Value("inf", math.inf), Value("-inf", -math.inf), Value("negative", -1),
           Value("zero", 0), Value("huge", 1e308), Value("huge int", 10**400), Value("tiny", 5e-324),
           Value("wrong type", str(value)), Value("wrong type", None), Value("wrong type", True),
           Value("complex", complex(value, 1.0)), Value("wrong type", [value]),
           Value("numpy float", np.float64(value), valid=True)]
    if isinstance(value, int) and not isinstance(value, bool):
        out += [Value("absurd size", 10**9), Value("absurd size", 2**62), Value("fraction", 2.5),
                Value("numpy integer", np.int64(value), valid=True),
                Value("numpy integer", np.int32(value), valid=True),
                Value("fraction", Fraction(value, 1), valid=True)]
    else:
        out += [Value("negative", -value if value else -1.0), Value("tiny", 1e-300), Value("numpy float",
                                                                                            np.float32(value))]
    return out


def arrays(value: Any, scale_free: bool) -> list[Value]:
    """Hostile replacements for an array or tensor argument (``scale_free``: rescalings are valid)."""
    tensor = isinstance(value, torch.Tensor)
    base = value.detach().numpy() if tensor else np.asarray(value, dtype=float)

    def like(array: np.ndarray) -> Any:
        return torch.as_tensor(array) if tensor else array

    nan, inf = base.copy(), base.copy()
    nan.flat[0], inf.flat[-1] = np.nan, np.inf
    out = [Value("nan", like(nan)), Value("inf", like(inf)), Value("huge", like(1e300 * base), valid=scale_free),
           Value("tiny", like(1e-300 * base)), Value("scaled", like(1e150 * base), valid=scale_free),
           Value("scaled", like(1e-150 * base), valid=scale_free), Value("negative", like(-base)),
           Value("zero", like(np.zeros_like(base))), Value("empty", like(np.zeros((0,) + base.shape[1:]))),
           Value("empty", like(np.zeros(base.shape[:-1] + (0,)))),
           Value("complex", like(base + 1j)), Value("wrong type", "abc"), Value("wrong type", None),
           Value("wrong type", {"a": 1}), Value("wrong shape", like(base[None, None])),
           Value("wrong shape", like(base.ravel()[:1].reshape(()))),
           Value("ragged", [[1.0, 2.0], [3.0]]), Value("object", np.array([None] * base.size).reshape(base.shape)),
           Value("list", base.tolist(), valid=True), Value("float32", like(base.astype(np.float32))),
           Value("integer dtype", like(np.round(base).astype(np.int64))),
           Value("half", torch.as_tensor(base, dtype=torch.float16)),
           Value("bfloat16", torch.as_tensor(base, dtype=torch.float32).to(torch.bfloat16))]
    return out


def words(value: Any) -> list[Value]:
    """Hostile replacements for a string argument (an activation, a choice, a path, a task)."""
    return [Value("empty", ""), Value("nonsense", "no such thing"), Value("wrong type", None), Value("wrong type", 3),
            Value("wrong type", [value]), Value("nan", "nan"), Value("huge", "x" * 10_000), Value("nul byte", "a\0b")]


def flags(value: Any) -> list[Value]:
    return [Value("wrong type", None), Value("wrong type", "yes"), Value("wrong type", 2),
            Value("numpy bool", np.bool_(value), valid=True)]


def dtypes(value: Any) -> list[Value]:
    return [Value("integer dtype", torch.int64), Value("half", torch.float16), Value("wrong type", "float64"),
            Value("wrong type", None), Value("complex", torch.complex128)]


def replacements(value: Any, scale_free: bool) -> list[Value]:
    """The hostile values for an argument of ``value``'s kind."""
    if isinstance(value, bool):
        return flags(value)
    if isinstance(value, (int, float)):
        return numbers(value)
    if isinstance(value, str):
        return words(value)
    if isinstance(value, torch.dtype):
        return dtypes(value)
    if isinstance(value, (np.ndarray, torch.Tensor, list)):
        return arrays(value, scale_free)
    if isinstance(value, dict):
        return [Value("wrong type", None), Value("wrong type", [1]), Value("nan", {k: math.nan for k in value}),
                Value("empty", {}), Value("wrong type", {k: "abc" for k in value})]
    raise TypeError(f"no hostile values for {type(value).__name__}")


def specs(scratch: Path) -> list[Spec]:
    """Every public function of the new surface with a small valid call."""
    from bnsym import arch, nngp, products, rank, sweep, train
    from bnsym.dilution import shallow
    from bnsym.nngp import BatchNormNNGPClassifier, BatchNormNNGPRegressor, ntk
    from bnsym.train.dynamics import first_steps

    gen = np.random.default_rng(0)
    H = gen.standard_normal((4, 6))
    M = np.corrcoef(H)  # a batch-norm output's second moment: unit diagonal
    wide = gen.standard_normal((16, 16))
    X = gen.standard_normal((8, 3))
    y = X[:, 0] + 0.1 * gen.standard_normal(8)
    labels = (X[:, 1] > 0).astype(int)
    factors = gen.standard_normal((3, 4, 4))
    sigma0 = np.eye(4) + 0.3
    net = arch.serial(arch.Dense(), arch.BatchNorm(), arch.Activation("relu"))

    def regressor(X, y, X_test, batch_size, depth, noise):
        return BatchNormNNGPRegressor(batch_size=batch_size, depth=depth, noise=noise).fit(X, y).predict(X_test)

    def classifier(X, y, batch_size):
        return BatchNormNNGPClassifier(batch_size=batch_size, depth=1).fit(X, y).predict(X)

    def sampler_lyapunov(width, gamma, depth, n_products):
        return products.qr_lyapunov_exponents(products.ginibre_sampler(width, gamma=gamma), width, depth, n_products)

    def store_path(directory, key):
        return sweep.Store(directory).path(key)

    def sweep_run(task, configs, out):
        return sweep.run(task, configs, out)

    grid_rows = [{"depth": 5, "batch_size": 8, "accuracy": [0.9, 0.8], "chance": 0.1, "classes": 10}]
    return api_specs(H, factors) + wave3_specs(scratch) + [
        # bnsym.rank
        Spec("rank.rank_tau", rank.rank_tau, {"H": H, "tau": 0.5}, ("H", "tau"), scale_free=()),
        Spec("rank.rank_lower_bound", rank.rank_lower_bound, {"H": H}, ("H",), scale_free=("H",)),
        Spec("rank.numerical_rank", rank.numerical_rank, {"H": H, "rtol": 1e-10}, ("H", "rtol"), scale_free=("H",)),
        Spec("rank.second_moment", rank.second_moment, {"H": H}, ("H",)),
        Spec("rank.predicted_numerical_rank", rank.predicted_numerical_rank,
             {"exponents": np.array([0.0, -0.5, -1.0]), "depth": 10, "rtol": 1e-6}, ("exponents", "depth", "rtol")),
        Spec("rank.bn_chain", rank.bn_chain, {"start": H, "depth": 3, "gamma": 1.0, "n_chains": 2, "seed": 0,
                                              "kind": "H", "every": 1, "dtype": torch.float64, "law": "gaussian"},
             ("start", "depth", "gamma", "n_chains", "seed", "kind", "every", "dtype", "law"), scale_free=("start",)),
        Spec("rank.bn_lyapunov", rank.bn_lyapunov, {"width": 3, "gamma": 1.0, "depth": 5, "burn": 2, "n_chains": 2,
                                                    "samples": 4, "seed": 0},
             ("width", "gamma", "depth", "burn", "n_chains", "samples", "seed")),
        Spec("rank.chain_statistics", rank.chain_statistics,
             {"width": 3, "gamma": 1.0, "depth": 4, "burn": 2, "n_chains": 2, "every": 2, "samples": 4, "seed": 0},
             ("width", "gamma", "depth", "burn", "n_chains", "every", "samples")),
        Spec("rank.delta_F", rank.delta_F, {"M": M}, ("M",)),
        Spec("rank.delta_F_spectral", rank.delta_F_spectral, {"eigenvalues": np.array([2.0, 1.0, 0.5, 0.5])},
             ("eigenvalues",)),
        Spec("rank.second_order_drift", rank.second_order_drift, {"M": M, "n_draws": 50, "seed": 0},
             ("M", "n_draws", "seed")),
        Spec("rank.relu_cosines", rank.relu_cosines, {"depth": 5, "s_w2": 2.0, "s_b2": 0.1, "c0": 0.2},
             ("depth", "s_w2", "s_b2", "c0")),
        Spec("rank.asymmetric_unit_correlation", rank.asymmetric_unit_correlation,
             {"x": torch.as_tensor(H), "lower": 0.0, "upper": 2.0}, ("x", "lower", "upper")),
        Spec("rank.last_layer_gradient_cosines", rank.last_layer_gradient_cosines,
             {"H": torch.as_tensor(H), "errors": torch.as_tensor(H[:2])}, ("H", "errors")),
        Spec("rank.stationary_alpha", rank.stationary_alpha,
             {"width": 4, "frobenius": np.array([5.0]), "trace_m3": np.array([8.0])},
             ("width", "frobenius", "trace_m3")),
        Spec("rank.residual_gap_series", rank.residual_gap_series, {"width": 4, "gamma_value": 0.5},
             ("width", "gamma_value")),
        Spec("rank.uniform_sampler", lambda width, gamma_value: rank.uniform_sampler(width, gamma_value)(
            torch.Generator().manual_seed(0), 2), {"width": 3, "gamma_value": 0.5}, ("width", "gamma_value")),
        # bnsym.products
        Spec("products.closed_form_density", products.closed_form_density, {"x_values": np.array([0.5, 1.0]),
                                                                            "m": 2}, ("x_values", "m")),
        Spec("products.fuss_catalan_density", products.fuss_catalan_density, {"x_values": np.array([0.5, 1.0]),
                                                                              "m": 2}, ("x_values", "m"),
             nonfinite_ok=True),
        Spec("products.fuss_catalan_moment", products.fuss_catalan_moment, {"order": 3, "m": 2}, ("order", "m")),
        Spec("products.density_moment", products.density_moment, {"order": 2, "m": 2, "nodes": 50},
             ("order", "m", "nodes")),
        Spec("products.soft_edge", products.soft_edge, {"m": 2}, ("m",)),
        Spec("products.hard_edge", products.hard_edge, {"m": 2}, ("m",)),
        Spec("products.gd_rate", products.gd_rate, {"condition": 3.0}, ("condition",)),
        Spec("products.log_condition_number", products.log_condition_number, {"factors": factors}, ("factors",),
             scale_free=("factors",)),
        Spec("products.qr_log_stretches", products.qr_log_stretches, {"factors": factors}, ("factors",)),
        Spec("products.max_stable_lr", products.max_stable_lr, {"abar": factors[0], "x": factors[1][:, :3]},
             ("abar", "x")),
        Spec("products.alignment_ratio", products.alignment_ratio, {"n": 10.0, "m": 0.5}, ("n", "m")),
        Spec("products.bias_grad_dominance", products.bias_grad_dominance, {"delta": 2.0, "classes": 10, "batch": 8},
             ("delta", "classes", "batch")),
        Spec("products.sgd_noise", products.sgd_noise, {"lr": 0.1, "batch": 8, "variance": 2.0, "population": 100},
             ("lr", "batch", "variance", "population")),
        Spec("products.ginibre_lyapunov_exponents", products.ginibre_lyapunov_exponents, {"width": 4, "s2": 1.0},
             ("width", "s2")),
        Spec("products.lyapunov_slope", products.lyapunov_slope, {"width": 4}, ("width",)),
        Spec("products.residual_top_exponent", products.residual_top_exponent, {"width": 4, "gamma": 0.5,
                                                                                "nodes": 20},
             ("width", "gamma", "nodes")),
        Spec("products.qr_lyapunov_exponents", sampler_lyapunov, {"width": 3, "gamma": 0.5, "depth": 4,
                                                                  "n_products": 2},
             ("width", "gamma", "depth", "n_products")),
        Spec("products.lyapunov_samples", lambda width, depth, n_products, seed: products.lyapunov_samples(
            products.ginibre_sampler(3), width, depth, n_products, seed), {"width": 3, "depth": 4, "n_products": 2,
                                                                            "seed": 0},
             ("width", "depth", "n_products", "seed")),
        Spec("products.ginibre_sampler", lambda width, s2, gamma, dtype: products.ginibre_sampler(
            width, s2, gamma, dtype)(torch.Generator().manual_seed(0), 2), {"width": 3, "s2": 1.0, "gamma": 0.5,
                                                                           "dtype": torch.float64},
             ("width", "s2", "gamma", "dtype")),
        Spec("products.residual_growth", products.residual_growth, {"blocks": 3, "batch_norm": False, "q0": 1.0},
             ("blocks", "batch_norm", "q0")),
        # bnsym.nngp and bnsym.nngp.ntk
        Spec("nngp.fill_batches", nngp.fill_batches, {"n": 10, "batch_size": 4}, ("n", "batch_size")),
        Spec("nngp.input_covariance", nngp.input_covariance, {"left": X, "right": X[:3]}, ("left", "right")),
        Spec("nngp.default_nodes", nngp.default_nodes, {"batch_size": 8}, ("batch_size",)),
        Spec("nngp.first_layer_nodes", nngp.first_layer_nodes, {"batch_size": 8, "n_features": 3},
             ("batch_size", "n_features")),
        Spec("nngp.bn_nngp_prior", nngp.bn_nngp_prior, {"phi": "relu", "X": X, "depth": 2, "batch_size": 4,
                                                        "X_test": X[:2], "nodes": 6},
             ("phi", "X", "depth", "batch_size", "X_test", "nodes"), scale_free=("X",)),
        Spec("nngp.bn_nngp_priors", lambda phi, X, depths, batch_size: nngp.bn_nngp_priors(
            phi, X, depths, batch_size, nodes=6), {"phi": "relu", "X": X, "depths": [1, 2], "batch_size": 4},
             ("phi", "X", "depths", "batch_size"), scale_free=("X",)),
        Spec("nngp.arccos_nngp_kernel", nngp.arccos_nngp_kernel, {"phi": "relu", "X1": X, "X2": X[:2], "depth": 2},
             ("phi", "X1", "X2", "depth")),
        Spec("nngp.gp_posterior", nngp.gp_posterior, {"kernel": M, "targets": np.arange(4.0), "noise": 0.1},
             ("kernel", "targets", "noise"), nonfinite_ok=True),  # log p(y) = -inf for huge targets, documented
        Spec("nngp.BatchNormNNGPRegressor", regressor, {"X": X, "y": y, "X_test": X[:3], "batch_size": 4,
                                                        "depth": 2, "noise": 0.01},
             ("X", "y", "X_test", "batch_size", "depth", "noise"), scale_free=("X", "X_test")),
        Spec("nngp.BatchNormNNGPClassifier", classifier, {"X": X, "y": labels, "batch_size": 4},
             ("X", "y", "batch_size"), scale_free=("X",)),
        Spec("ntk.bn_ntk", ntk.bn_ntk, {"phi": "relu", "X": X[:4], "depth": 1, "batch_size": 4, "points": 2**14,
                                        "replicates": 8, "seed": 0},
             ("phi", "X", "depth", "batch_size", "points", "replicates", "seed")),
        # bnsym.arch
        Spec("arch.kernel", lambda Sigma0, points, replicates, seed: arch.kernel(net, Sigma0, False, points,
                                                                                 replicates, seed),
             {"Sigma0": sigma0, "points": 64, "replicates": 2, "seed": 0}, ("Sigma0", "points", "replicates", "seed"),
             scale_free=()),
        Spec("arch.signal_propagation", lambda Sigma0, points: arch.signal_propagation(net, Sigma0, points, 2),
             {"Sigma0": sigma0, "points": 64}, ("Sigma0", "points")),
        Spec("arch.ntk", lambda Sigma0, points: arch.ntk(net, Sigma0, False, points, 2), {"Sigma0": sigma0,
                                                                                          "points": 64},
             ("Sigma0", "points")),
        Spec("arch.ntk_cross", lambda Sigma0, sizes: arch.ntk_cross(net, Sigma0, sizes, False, 2**12, 8),
             {"Sigma0": wide @ wide.T / 16, "sizes": [8, 8]}, ("Sigma0", "sizes")),
        Spec("arch.parse_architecture", arch.parse_architecture, {"spec": "Dense,BatchNorm,relu"}, ("spec",)),
        Spec("arch.repeat", lambda count: arch.repeat(arch.Dense(), count), {"count": 3}, ("count",)),
        # bnsym.dilution.shallow
        Spec("shallow.residual_orders", shallow.residual_orders, {"p": np.array([0.5, 0.2])}, ("p",)),
        Spec("shallow.infinite_depth_orders", shallow.infinite_depth_orders, {"x": 0.5, "r": 1.5, "n_orders": 5},
             ("x", "r", "n_orders")),
        Spec("shallow.orders_effective_depth", shallow.orders_effective_depth,
             {"orders": np.array([0.5, 0.3, 0.1, 0.05]), "threshold": 0.9}, ("orders", "threshold")),
        Spec("shallow.theorem1_update_bound", shallow.theorem1_update_bound, {"depth": 10.0, "r": 1.5, "c": 1.0,
                                                                              "c_prime": 1.0, "h": 1.0},
             ("depth", "r", "c", "c_prime", "h")),
        Spec("shallow.theorem2_rate", shallow.theorem2_rate, {"delta": 0.1, "eps": 0.2}, ("delta", "eps")),
        Spec("shallow.theorem2_bound", shallow.theorem2_bound, {"dim": 10, "delta": 0.1, "eps": 0.2, "layers": 5.0},
             ("dim", "delta", "eps", "layers")),
        Spec("shallow.spread_probability", shallow.spread_probability, {"singular_values": np.array([1.0, 0.5]),
                                                                        "eps": 0.2}, ("singular_values", "eps")),
        Spec("shallow.parameter_ratio", shallow.parameter_ratio, {"w": H, "x": H[1]}, ("w", "x")),
        Spec("shallow.minibatch_noise", shallow.minibatch_noise, {"b": 8.0}, ("b",)),
        Spec("shallow.minibatch_noise_ratio", shallow.minibatch_noise_ratio, {"gsc": 1.5, "b": 8.0}, ("gsc", "b")),
        Spec("shallow.variance_map", shallow.variance_map, {"phi": "tanh", "sigma_w": 1.5, "q": 1.0},
             ("phi", "sigma_w", "q")),
        Spec("shallow.unnormalised_gsc_rate", shallow.unnormalised_gsc_rate, {"phi": "tanh", "q": 1.0}, ("phi", "q")),
        Spec("shallow.mean_field_gsc_curve", shallow.mean_field_gsc_curve, {"phi": "tanh", "sigma_w": 1.5, "q0": 1.0,
                                                                            "depth": 5},
             ("phi", "sigma_w", "q0", "depth")),
        Spec("shallow.resnet_gsc", shallow.resnet_gsc, {"a": 1.0, "r2": 0.5, "n_blocks": 5.0, "alpha": 1.0},
             ("a", "r2", "n_blocks", "alpha")),
        Spec("shallow.resnet_gsc_limit", shallow.resnet_gsc_limit, {"a": 1.0, "r2": 0.5}, ("a", "r2")),
        # bnsym.train
        Spec("train.train", lambda phi, depth, width, batch_size, lr, epochs, eps, n_seeds: train.train(
            phi, depth, width, batch_size, lr=lr, epochs=epochs, eps=eps, n_seeds=n_seeds),
             {"phi": "relu", "depth": 2, "width": 8, "batch_size": 256, "lr": 0.05, "epochs": 1, "eps": 1e-3,
              "n_seeds": 1}, ("phi", "depth", "width", "batch_size", "lr", "epochs", "eps", "n_seeds")),
        Spec("train.first_steps", lambda depth, width, batch_size, lr, steps: first_steps(
            "relu", depth, width, batch_size, lr=lr, steps=steps), {"depth": 2, "width": 8, "batch_size": 8,
                                                                     "lr": 0.05, "steps": 2},
             ("depth", "width", "batch_size", "lr", "steps")),
        Spec("train.grid", lambda depths, batch_sizes: train.grid(depths, batch_sizes), {"depths": [5, 10],
                                                                                          "batch_sizes": [8, 16]},
             ("depths", "batch_sizes")),
        Spec("train.run_cell", train.run_cell, {"config": {"depth": 2, "batch_size": 256, "width": 8, "epochs": 1,
                                                           "seeds": 1, "seed": 0}}, ("config",)),
        Spec("train.trains", lambda rows: train.trains(rows), {"rows": grid_rows}, ()),
        # NaN: the fraction of no cells (documented)
        Spec("train.line_agreement", train.line_agreement, {"depths": np.array([5.0, 10.0, 20.0]),
                                                            "max_depths": np.array([8.0, 8.0, 8.0]),
                                                            "trained": np.array([True, False, False])},
             ("depths", "max_depths"), nonfinite_ok=True),
        Spec("train.best_factor", train.best_factor, {"depths": np.array([5.0, 10.0, 20.0]),
                                                      "xi": np.array([2.0, 2.0, 2.0]),
                                                      "trained": np.array([True, False, False])}, ("depths", "xi"),
             nonfinite_ok=True),  # high = inf: every cell predicted to train (documented)
        # bnsym.sweep
        Spec("sweep.config_key", sweep.config_key, {"task": "trainability", "config": {"depth": 5}, "version": "1"},
             ("task", "config", "version")),
        Spec("sweep.seed_of", sweep.seed_of, {"key": "ab" * 32}, ("key",)),
        Spec("sweep.resolve", sweep.resolve, {"name": "trainability"}, ("name",)),
        Spec("sweep.task_name", sweep.task_name, {"task": "trainability"}, ("task",)),
        Spec("sweep.Store.path", store_path, {"directory": str(scratch / "store"), "key": "ab" * 32},
             ("directory", "key")),
        Spec("sweep.run", sweep_run, {"task": "trainability", "configs": [], "out": str(scratch / "sweep")},
             ("task", "configs", "out"), values={"configs": CONFIGS}),
    ]


def api_specs(H: np.ndarray, factors: np.ndarray) -> list[Spec]:
    """The public functions of :mod:`bnsym.api` (and the rank and products calls of the wave-3 audit), each with the
    audit's reproducers among its values: a value marked valid must be answered (issue 41, part 5)."""
    import bnsym
    from bnsym import api, nngp, products, rank

    sigma = 0.5 * np.eye(8) + 0.5
    joint = np.stack([np.eye(8) + 0.3, 0.8 * np.eye(8) + 0.2])
    eps_grid = np.array([[0.05, 0.1], [0.2, 0.3]])
    pivot = np.array([np.diag([1.0, 1e-300, 1.0]), np.eye(3)])

    def posterior(kernel, targets, noise):
        """gp_posterior's weights and log p(y), whose -inf (y^T alpha / 2 beyond float64) is documented."""
        fitted = nngp.gp_posterior(kernel, targets, noise)
        return fitted.alpha, (0.0 if fitted.log_marginal_likelihood == -math.inf else fitted.log_marginal_likelihood)

    def extra(value: Any, *more: Value) -> list[Value]:
        return replacements(value, False) + list(more)

    return [
        Spec("api.fixed_point", bnsym.fixed_point, {"phi": "sin", "B": 8, "eps": 0.5, "sigma_w2": 1.0},
             ("phi", "B", "eps", "sigma_w2"),
             values={"eps": extra(0.5, Value("collapse threshold", 1.0, valid=True))}),
        Spec("api.fixed_point (relu^0.75)", bnsym.fixed_point, {"phi": "relu^0.75", "B": 8, "eps": 0.5}, ("eps",)),
        Spec("api.gradient_rate", bnsym.gradient_rate, {"phi": "relu", "B": 8, "eps": 0.1}, ("phi", "B", "eps"),
             values={"eps": extra(0.1, Value("2-D array", eps_grid, valid=True))}),
        Spec("api.gradient_rate (batch_size=)", lambda phi, batch_size: bnsym.gradient_rate(phi, batch_size=batch_size),
             {"phi": "relu", "batch_size": 8}, ("batch_size",)),
        Spec("api.depth_scale", bnsym.depth_scale, {"phi": "relu", "B": 8, "eps": 0.1}, ("B", "eps"),
             nonfinite_ok=True),  # inf where lambda_G is within its error of 1 (documented)
        Spec("api.max_trainable_depth", bnsym.max_trainable_depth, {"phi": "tanh", "B": 8}, ("phi", "B"),
             nonfinite_ok=True),  # as depth_scale
        Spec("api.backward_eigenvalues", bnsym.backward_eigenvalues, {"phi": "relu", "B": 8, "eps": 0.1},
             ("B", "eps")),
        Spec("api.forward_eigenvalues", bnsym.forward_eigenvalues, {"phi": "relu^1.5", "B": 8, "eps": 0.1},
             ("phi", "B", "eps"), values={"eps": extra(0.1, Value("past the collapse", 0.195, valid=True))}),
        Spec("api.collapse_eps", bnsym.collapse_eps, {"phi": "tanh(gamma=3)", "B": 8, "sigma_w2": 1.0},
             ("phi", "B", "sigma_w2")),
        Spec("api.alpha_transition", bnsym.alpha_transition, {"B": 8}, ("B",)),
        Spec("api.cross_batch_fixed_point", bnsym.cross_batch_fixed_point, {"phi": "relu", "B": 8}, ("phi", "B")),
        Spec("api.cross_batch_rate", bnsym.cross_batch_rate, {"phi": "relu", "B": 8}, ("phi", "B")),
        Spec("api.bn_kernel", bnsym.bn_kernel, {"phi": "tanh", "Sigma": sigma, "eps": 0.0}, ("phi", "Sigma", "eps"),
             scale_free=("Sigma",)),
        Spec("api.cross_batch_kernel", lambda Sigma, B1: bnsym.cross_batch_kernel("relu", Sigma, B1),
             {"Sigma": joint, "B1": 4}, ("Sigma", "B1"),
             values={"Sigma": arrays(joint, False) + [Value("empty stack", np.zeros((0, 8, 8)), valid=True)]}),
        Spec("api.log_condition_number", api.log_condition_number, {"factors": factors}, ("factors",),
             values={"factors": arrays(factors, True) + [Value("tiny pivot", pivot, valid=True)]}),
        Spec("api.fuss_catalan_density", api.fuss_catalan_density, {"x": np.array([0.5, 1.0]), "M": 2}, ("x", "M"),
             nonfinite_ok=True,  # inf at x = 0 (documented)
             values={"x": arrays(np.array([0.5, 1.0]), False) + [Value("empty", np.array([]), valid=True)]}),
        Spec("api.max_stable_lr", api.max_stable_lr, {"Abar": factors[0], "x": factors[1][:, :3]}, ("Abar", "x")),
        Spec("rank measures of a boolean H", lambda function: getattr(rank, function)(H > 0),
             {"function": "rank_tau"}, ("function",),
             values={"function": [Value("boolean H", name, valid=True)
                                  for name in ("rank_tau", "rank_lower_bound", "numerical_rank")]}),
        Spec("rank.bn_chain (gamma)", lambda gamma: rank.bn_chain(H, 3, gamma=gamma, n_chains=2), {"gamma": 1.0},
             ("gamma",), values={"gamma": extra(1.0, Value("huge", 1e300, valid=True))}),
        Spec("rank.delta_F_spectral (huge)", rank.delta_F_spectral, {"eigenvalues": np.ones(3)}, ("eigenvalues",),
             values={"eigenvalues": [Value("huge", np.array([1e200] * 3))]}),  # about 10^801: refused, with why
        Spec("products.lyapunov_slope (width)", products.lyapunov_slope, {"width": 4}, ("width",),
             values={"width": extra(4, Value("huge width", 10**18, valid=True))}),
        Spec("products.alignment_ratio (huge)", products.alignment_ratio, {"n": 1e300, "m": 1e200}, ("n", "m")),
        Spec("products.residual_growth (blocks)", products.residual_growth, {"blocks": 3}, ("blocks",),
             values={"blocks": extra(3, Value("long", 2000))}),
        Spec("nngp.gp_posterior (huge targets)", posterior, {"kernel": np.corrcoef(H), "targets": np.arange(4.0),
                                                             "noise": 0.1}, ("targets",),
             values={"targets": arrays(np.arange(4.0), False) + [Value("huge", 1e200 * np.arange(4.0), valid=True)]}),
    ]


@dataclasses.dataclass(frozen=True)
class Call:
    """A whole call as one hostile value (an absurd size in any argument), shown as its text."""

    text: str
    function: Callable[[], Any]

    def __call__(self) -> Any:
        return self.function()

    def __repr__(self) -> str:
        return self.text


def refused(result: Any) -> str:
    """The check of a value that must be refused: any answer is a defect."""
    return f"answered {_shown(result)} where a ValueError with the reason is due"


def _estimates(result: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """(value, stated error) of each number a ``with_error=True`` result holds: an Estimate, or a dict of them."""
    items = result.items() if isinstance(result, dict) else [("value", result)]
    return {name: (np.asarray(item.value, dtype=float), np.asarray(item.error, dtype=float)) for name, item in items}


def agrees_with(reference: Callable[[], Any], scale: float = 1.0, rtol: float = 1e-6) -> Callable[[Any], str]:
    """The check that a ``with_error=True`` result is ``reference()`` (a closed form) times ``scale`` (for the
    entries named q and value; c is scale free) within ``rtol`` relative, with a stated error that covers the gap."""
    def check(result: Any) -> str:
        expected = _estimates(reference())
        for name, (value, error) in _estimates(result).items():
            if name not in expected or name == "mu":
                continue
            target, target_error = expected[name]
            factor = 1.0 if name == "c" else scale
            gap = np.abs(value - factor * target)
            size = np.abs(factor * target).max()
            if gap.max() > rtol * size:
                return f"{name} is {gap.max() / size:.1e} relative off the closed form (more than {rtol:g})"
            if np.any(gap > error + factor * target_error + 4 * np.finfo(float).eps * size):
                return f"{name}'s stated error {error.max():.1e} does not cover its gap {gap.max():.1e}"
        return ""
    return check


def rate_above_one(result: Any) -> str:
    """Thm 9: lambda_G > 1 at eps = 0 for any activation (gradients explode under batch norm)."""
    value = float(_estimates(result)["value"][0])
    return "" if value > 1 else f"lambda_G = {value:.3g}, not above 1 (Thm 9)"


def user_activations(function: str) -> list[Value]:
    """Every way a user brings an activation (issue 41, parts 3 and 5) for ``bnsym.<function>`` at B = 4 with
    ``with_error=True``: a kinked relu or leaky relu must give the closed form (or be refused), what is not elementwise
    or has no usable derivative must be refused (for the gradient), complex or undefined formulas refused."""
    import sympy as sp
    from torch import nn

    x = sp.Symbol("x")

    def call(phi):
        return user_call(function, phi)

    gradient = function == "gradient_rate"
    relu_like = agrees_with(lambda: call("relu"))
    # relu(x) + x/10 = 1.1 leaky_relu(1/11): q and the kernel scale by 1.1^2, lambda_G and c do not
    leaky = agrees_with(lambda: call(f"leaky_relu({1 / 11!r})"), scale=1.0 if gradient else 1.1**2)
    no_slope = refused if gradient else None  # phi' = 0 almost everywhere: no gradient, a forward kernel
    return [
        Value("sympy kink", sp.Max(0, x), check=relu_like),
        Value("sympy kink", sp.Piecewise((x, x > 0), (0, True)), check=relu_like),
        Value("sympy kink", (x + sp.Abs(x)) / 2, check=relu_like),
        Value("sympy step", sp.Heaviside(x), check=no_slope),
        Value("sympy step", sp.sign(x), check=no_slope),
        Value("sympy staircase", sp.floor(x), check=no_slope),
        Value("sympy complex", sp.I * x, check=refused),
        Value("sympy undefined", sp.zoo * x, check=refused),
        Value("sympy near step", sp.tanh(1e300 * x), check=rate_above_one if gradient else None),
        Value("formula", "x", valid=True, check=agrees_with(lambda: call("leaky_relu(1)"))),
        Value("formula with relu", "relu(x) + 0.1*x", check=leaky),
        Value("numpy callable (lambda z: np.maximum(z, 0))", lambda z: np.maximum(z, 0), check=relu_like),
        Value("torch function", torch.relu, check=relu_like),
        Value("torch function", torch.sign, check=no_slope),
        Value("torch function", torch.round, check=no_slope),
        Value("nn.Module", nn.ReLU(), check=relu_like),
        Value("not elementwise", nn.Softmax(dim=0), check=refused),
        Value("not elementwise (lambda t: t - t.mean())", lambda t: t - t.mean(), check=refused),
    ]


def _not_unresolved(message: str) -> str:
    """A refusal at a rank-deficient input must say why, not that the sampling did not resolve it."""
    return "says 'not resolved' or 'raise points' where more points cannot help" \
        if "not resolved" in message or "raise points" in message else ""


def _inf_with_note(result: Any) -> str:
    """signal_propagation: an infinite gradient statistic comes with a note saying where and why."""
    gradient = result.gradient
    if not np.all(np.isfinite(gradient.value)) and not gradient.note:
        return "an infinite gradient statistic without a note"
    return "a NaN gradient statistic" if np.isnan(gradient.value).any() else ""


def _regressor_cases(estimator: type) -> tuple[Callable[..., Any], dict[str, Any], dict[str, list[Value]]]:
    """A fit-and-predict call of a BN kernel regressor and its wave-3 hostile inputs (up front, quickly)."""
    gen = np.random.default_rng(1)
    X = gen.standard_normal((8, 3))
    y = X[:, 0].copy()

    def fit_predict(X, y, depth):
        return estimator(batch_size=4, depth=depth).fit(X, y).predict(X[:4])

    big = gen.standard_normal((20_000, 3))
    values = {"X": [Value("subnormal", 1e-310 * X, valid=True),  # a BN network is blind to the input's scale
                    Value("absurd size", big)],
              "y": [Value("strings", np.array(list("abcdefgh")))],
              "depth": [Value("absurd depth", 10_000)]}
    return fit_predict, {"X": X, "y": y, "depth": 2}, values


def wave3_specs(scratch: Path) -> list[Spec]:
    """The wave-3 surface named in issue 41 (parts 3 and 5), each spec named ``wave3.*``: user activations of every
    kind, the architecture calculus at rank-deficient, deeply nested and absurd inputs, from_torch, the kernel
    regressors and bn_ntk at absurd sizes."""
    from torch import nn

    import bnsym
    from bnsym import arch
    from bnsym.nngp import BatchNormNNGPRegressor, ntk
    from bnsym.nngp.estimators import BatchNormNTKRegressor
    from bnsym.sim.arch import from_torch

    gen = np.random.default_rng(2)
    net = arch.parse_architecture("dense,bn,relu*3")
    spread = [gen.standard_normal((8, rank)) for rank in (1, 2)]
    sigma8 = 0.5 * np.eye(8) + 0.5

    def linear(scale, device="cpu"):
        layer = nn.Linear(4, 4, device=device)
        if device != "meta":
            with torch.no_grad():
                layer.weight.mul_(scale)
        return nn.Sequential(layer, nn.BatchNorm1d(4, device=device), nn.ReLU())

    def possible(result: Any) -> str:
        """A fixed point is a covariance: q >= 0 (0 only collapsed, as sin past eps*) and |c| <= 1."""
        return "" if result.q >= 0 and -1 <= result.c <= 1 else f"q = {result.q:.3g}, c = {result.c:.3g}"

    ntk_fit, ntk_arguments, ntk_values = _regressor_cases(BatchNormNTKRegressor)
    nngp_fit, nngp_arguments, nngp_values = _regressor_cases(BatchNormNNGPRegressor)
    return [
        *(Spec(f"wave3.{function} (user activations)", lambda phi, f=function: user_call(f, phi),
               {"phi": "relu"}, ("phi",), values={"phi": user_activations(function)})
          for function in ("gradient_rate", "fixed_point", "bn_kernel")),
        Spec("wave3.fixed_point (a covariance)", lambda eps: bnsym.fixed_point("sin", 8, eps=eps), {"eps": 0.5},
             ("eps",),
             values={"eps": [Value("collapse threshold", eps, valid=True, check=possible)
                             for eps in (0.5, 1.0, 2.0)]}),
        Spec("wave3.arch.signal_propagation (rank-deficient)",
             lambda Sigma0: arch.signal_propagation(net, Sigma0), {"Sigma0": sigma8}, ("Sigma0",),
             nonfinite_ok=True, values={"Sigma0": [Value(f"rank {a.shape[1]}", a @ a.T, check=_inf_with_note,
                                                         reason=_not_unresolved) for a in spread]}),
        Spec("wave3.arch.ntk (rank-deficient)", lambda Sigma0: arch.ntk(net, Sigma0, False, 256, 2),
             {"Sigma0": sigma8}, ("Sigma0",),
             values={"Sigma0": [Value(f"rank {a.shape[1]}", a @ a.T, reason=_not_unresolved) for a in spread]}),
        Spec("wave3.arch.parse_architecture (nesting)", arch.parse_architecture, {"spec": "dense"}, ("spec",),
             values={"spec": [Value("deep nesting", "(" * 3000 + "dense" + ")" * 3000),
                              Value("deep nesting", "res(" * 500 + "dense" + ")" * 500),
                              Value("deep nesting", "res(" * 500 + "dense,relu" + ")" * 500)]}),
        Spec("wave3.arch.ntk_cross (sizes)", lambda sizes: arch.ntk_cross("dense,bn,relu*2", sigma8, sizes, False,
                                                                          256, 2),
             {"sizes": (4, 4)}, ("sizes",),
             values={"sizes": [Value("nested", ((4, 4),), check=refused), Value("short", (4,), check=refused),
                               Value("long", (4, 8), check=refused), Value("long", (8, 8), check=refused)]}),
        Spec("wave3.arch (absurd sizes)", lambda case: case(), {"case": None}, ("case",),
             values={"case": [
                 Value("absurd batch", Call("kernel(net, eye(4096))", lambda: arch.kernel(
                     net, np.eye(4096), points=256, replicates=2))),
                 Value("absurd depth", Call("kernel('res(dense,relu)*2000', eye(4) + 0.3)", lambda: arch.kernel(
                     "res(dense,relu)*2000", np.eye(4) + 0.3, points=256, replicates=2))),
                 Value("absurd points", Call("kernel(net, Sigma0, points=2**40)", lambda: arch.kernel(
                     net, sigma8, points=2**40, replicates=2))),
                 Value("absurd points", Call("signal_propagation(net, Sigma0, points=2**40)",
                                             lambda: arch.signal_propagation(net, sigma8, points=2**40, replicates=2))),
                 Value("absurd replicates", Call("ntk(net, Sigma0, replicates=2**40)", lambda: arch.ntk(
                     net, sigma8, points=256, replicates=2**40)))]}),
        Spec("wave3.sim.from_torch", lambda module: from_torch(module()), {"module": None}, ("module",),
             values={"module": [Value("huge weights", Call("Linear with weights 1e200", lambda: linear(1e200))),
                                Value("tiny weights", Call("Linear with weights 1e-200", lambda: linear(1e-200))),
                                Value("meta device", Call("Linear on the meta device",
                                                          lambda: linear(1.0, "meta")))]}),
        Spec("wave3.ntk.BatchNormNTKRegressor", ntk_fit, ntk_arguments, ("X", "y", "depth"), values=ntk_values),
        Spec("wave3.nngp.BatchNormNNGPRegressor", nngp_fit, nngp_arguments, ("X", "y", "depth"), values=nngp_values),
        Spec("wave3.ntk.bn_ntk (depth)", lambda depth: ntk.bn_ntk("relu", gen.standard_normal((4, 3)), depth, 4),
             {"depth": 1}, ("depth",), values={"depth": [Value("absurd depth", 10**4), Value("absurd depth", 10**6)]}),
    ]


def user_call(function: str, phi: Any) -> Any:
    """``bnsym.<function>(phi, ...)`` at B = 4 with its error, as :func:`user_activations` compares it."""
    import bnsym

    if function == "bn_kernel":
        return bnsym.bn_kernel(phi, 0.5 * np.eye(4) + 0.5, with_error=True)
    return getattr(bnsym, function)(phi, 4, with_error=True)


def wave3_cli_cases(scratch: Path) -> Iterator[tuple[str, list[str], Callable[[int, str, str], str]]]:
    """The command's wave-3 cases (issue 41, parts 2, 4 and 5): each a label, the arguments and what the outcome must
    further satisfy (a function of the exit status, stdout and stderr giving what is wrong, "" if nothing)."""
    from bnsym.sweep import config_key
    from bnsym.sweep.experiments import resolve, version

    plot = scratch / "w3 plot folder"
    plot.mkdir(exist_ok=True)
    yield ("bnsym arch dense,bn,relu -B 4 --plot <a directory>",
           ["arch", "dense,bn,relu", "-B", "4", "--points", "256", "--plot", str(plot)],
           lambda status, out, err: "" if status == 2 else f"exit {status} with no plot: a folder is not an image")
    yield ("bnsym arch dense,relu,bn -B 4 (text)", ["arch", "dense,relu,bn", "-B", "4", "--points", "256"],
           lambda status, out, err: "prints inf without a note" if "inf" in out and "infinite" not in out else "")
    sweep = ["sweep", "trainability", "--depths", "2", "--batch-sizes", "8", "--width", "8", "--epochs", "1",
             "--seeds", "1", "--scheduler", "tcp://127.0.0.1:1", "--out"]
    out = scratch / "w3 sweep out"
    yield (f"bnsym {' '.join(sweep[:5])} <'2'> ... (before any cluster)", sweep[:4] + ["2"] + sweep[5:] + [str(out)],
           lambda status, stdout, err: ("leaves --out behind" if out.exists() else "") or
           ("" if "batch" in err.lower() or "B =" in err else "the message is not about the batch size"))
    kept = scratch / "w3 a file"
    kept.write_text("kept")
    for target in (kept, Path("/dev/null"), Path("/proc/w3/not creatable")):
        yield (f"bnsym sweep trainability ... --out <{target}>", sweep + [str(target)],
               lambda status, stdout, err, t=target: ("overwrote the file" if t == kept and kept.read_text() != "kept"
                                                      else "") or
               ("" if str(t) in err or "--out" in err else "the message names neither --out nor its path"))
    planted = scratch / "w3 planted"
    planted.mkdir(exist_ok=True)
    (planted / "planted.json").write_text(json.dumps({"key": "0" * 24, "task": "w3_canary:run", "config": {},
                                                      "result": {}, "error": None}))
    (scratch / "w3_canary.py").write_text("run = None\n")
    if str(scratch) not in sys.path:
        sys.path.append(str(scratch))  # so that importing the record's task would succeed
    yield ("bnsym sweep show <a folder with a record whose task names a module>", ["sweep", "show", str(planted)],
           planted_check)
    task = "trainability"
    for name, result in (("no test_accuracy", {"train_accuracy": 0.5}), ("string test_accuracy",
                                                                         {"test_accuracy": "high"})):
        folder = scratch / f"w3 {name}"
        folder.mkdir(exist_ok=True)
        config = {"depth": 2, "batch_size": 8}
        key = config_key(task, config, version(resolve(task)))
        (folder / f"{key}.json").write_text(json.dumps({"key": key, "task": task, "config": config, "result": result,
                                                        "error": None}))
        yield (f"bnsym sweep show <a folder with a record of {name}>", ["sweep", "show", str(folder)],
               lambda status, out, err, k=key: "" if k in out + err else "the message names no file")


def planted_check(status: int, out: str, err: str) -> str:
    """A record's task must never be imported (the planted module is importable from the working folder)."""
    if "w3_canary" in sys.modules:
        return "imported the module a result file named"
    return "" if "planted.json" in out + err else "the message names no file"


CONFIGS = [Value("wrong type", None), Value("wrong type", "abc"), Value("wrong type", [None]),
           Value("wrong type", [[1, 2]]), Value("nan", [{"depth": math.nan}]), Value("inf", [{"depth": math.inf}]),
           Value("wrong type", [{1: 2}]), Value("wrong type", [{"depth": object()}]),
           Value("wrong type", [{"depth": 1 + 2j}]), Value("huge", [{"depth": 10**400}]),
           Value("wrong type", {"depth": 5})]
CLI_BASES = [
    ["predict", "--phi", "relu", "-B", "8", "--eps", "0", "--json"],
    ["predict", "--phi", "relu", "-B", "8", "--eps", "0.1", "--json"],
    ["predict", "--phi", "tanh", "-B", "3"],
    ["arch", "Dense,BatchNorm,relu", "-B", "4", "--points", "64", "--json"],
    ["sweep", "show", "DIR"],
    ["sweep", "trainability", "--depths", "2", "--batch-sizes", "8", "--width", "8", "--epochs", "1", "--seeds",
     "1", "--out", "OUT", "--scheduler", "tcp://127.0.0.1:1"],
]
CLI_WORDS = ["nan", "inf", "-inf", "-1", "0", "1e308", "1e-320", "1e400", "99999999999999999999999", "abc", "",
             "3+4j", "0x10", "1_6", "5:1:1", "1:100000000:1", ",", "relu^-1", "tanh(nan)", "relu(beta=inf)",
             "/nonexistent/dir", "a\tb"]


def cli_cases(scratch: Path) -> Iterator[tuple[str, list[str]]]:
    """The command line with each option's value replaced by a hostile word."""
    (scratch / "show").mkdir(exist_ok=True)
    (scratch / "show" / "junk.json").write_text("{not json")
    for base in CLI_BASES:
        base = [str(scratch / "show") if a == "DIR" else str(scratch / "out") if a == "OUT" else a for a in base]
        for index in range(1, len(base)):
            if base[index].startswith("-") and not base[index][1:2].isdigit():
                continue
            if (index == 1 and base[0] != "arch") or base[index - 1] == "--scheduler":
                continue  # the subcommand itself; a scheduler address that works would start a cluster
            for word in CLI_WORDS:
                yield f"bnsym {' '.join(base[:index])} <{word!r}>", base[:index] + [word] + base[index + 1:]


def finite(result: Any) -> bool:
    """Whether every number in ``result`` (nested containers, arrays, tensors, dataclasses) is finite."""
    if isinstance(result, torch.Tensor):
        return bool(torch.isfinite(result).all()) if result.is_floating_point() or result.is_complex() else True
    if isinstance(result, np.ndarray):
        return bool(np.isfinite(result).all()) if result.dtype.kind in "fc" else True
    if isinstance(result, (float, complex, np.floating, np.complexfloating)):
        return bool(np.isfinite(result))
    if isinstance(result, dict):
        return all(finite(v) for v in result.values())
    if isinstance(result, (list, tuple)):
        return all(finite(v) for v in result)
    if dataclasses.is_dataclass(result) and not isinstance(result, type):
        return all(finite(getattr(result, f.name)) for f in dataclasses.fields(result))
    return True


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """``seconds`` of CPU time (a busy shared machine does not count against a case), and 6 times that of wall
    clock (a call that waits without computing)."""
    def expired(signum, frame):
        raise Timeout(f"ran past {seconds:g} s of CPU time" if signum == signal.SIGPROF
                      else f"ran past {WALL_FACTOR * seconds:g} s of wall clock")

    previous = {sig: signal.signal(sig, expired) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, WALL_FACTOR * seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def outcome(call: Callable[[], Any], value: Value, nonfinite_ok: bool, seconds: float) -> tuple[str, str]:
    """("clean" | "defect", what happened) for one case."""
    try:
        with time_limit(seconds), contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            result = call()
    except ValueError as error:
        if type(error) is not ValueError and not str(error):
            return "defect", f"{type(error).__name__} without a message"
        if value.valid:
            return "defect", f"valid input refused: {str(error)[:200]}"
        if not str(error):
            return "defect", "ValueError without a message"
        problem = value.reason(str(error)) if value.reason else ""
        return ("defect", f"{problem}: {str(error)[:200]}") if problem else ("clean", "ValueError")
    except Timeout as error:
        return "defect", f"hang: {error}"
    except Exception as error:  # noqa: BLE001 - every other exception type is what is counted
        return "defect", f"{type(error).__module__}.{type(error).__name__}: {str(error)[:200]}"
    if not (nonfinite_ok or finite(result)):
        return "defect", "non-finite value returned"
    problem = value.check(result) if value.check else ""
    return ("defect", problem) if problem else ("clean", "value")


def cli_outcome(argv: list[str], seconds: float,
                check: Callable[[int, str, str], str] | None = None) -> tuple[str, str]:
    """A command is clean if it exits 0 with strict JSON (or text), or 2 with one ``bnsym: error:`` line, and
    ``check(status, stdout, stderr)`` (if given) finds nothing wrong."""
    from bnsym.cli import main

    out, err = io.StringIO(), io.StringIO()
    try:
        with time_limit(seconds), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = main(argv)
    except Timeout as error:
        return "defect", f"hang: {error}"
    except SystemExit as error:  # argparse's usage errors: exit status 2 and one line, as the command ends
        status = error.code
    except BaseException as error:  # noqa: BLE001 - a command must never raise (SystemExit included)
        return "defect", f"raised {type(error).__name__}: {str(error)[:200]}"
    lines = err.getvalue().splitlines()
    problem = check(status, out.getvalue(), err.getvalue()) if check else ""
    if problem:
        return "defect", f"exit {status}, {problem}: {(err.getvalue() or out.getvalue())[-200:]!r}"
    if status == 0:
        if "--json" in argv:
            try:
                json.loads(out.getvalue(), parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
            except ValueError as error:
                return "defect", f"exit 0 with invalid JSON ({error})"
        return "clean", "exit 0"
    if status == 2 and len(lines) == 1 and lines[0].startswith("bnsym: error:") and "internal error" not in lines[0]:
        return "clean", "one error line"
    return "defect", f"exit {status}, stderr {err.getvalue()[-300:]!r}"


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(1,), default_repeats=1, options=_only_option)
    if args.only and args.output is None:  # the record is written by a full run only
        args.output = Path(tempfile.gettempdir()) / "hostile_inputs_only.json"
    seconds, stride = args.size["timeout_s"], args.size["stride"]
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    rows, defects, totals = [], [], {"cases": 0, "clean": 0, "defect": 0}
    with tempfile.TemporaryDirectory() as folder, threads(1):
        scratch = Path(folder)
        home = Path.cwd()
        os.chdir(scratch)  # a relative --out the command accepts is made here
        used = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        resource.setrlimit(resource.RLIMIT_AS, (max(used, 2**31) + MEMORY_HEADROOM, hard))
        try:
            work: list[tuple[str, Callable[[], tuple[str, str]], str]] = []
            for spec in specs(scratch):
                for name in spec.hostile:
                    for value in spec.values.get(name) or replacements(spec.arguments[name],
                                                                       name in spec.scale_free):
                        arguments = {**spec.arguments, name: value.value}
                        work.append((spec.name, lambda f=spec.function, a=arguments, v=value, s=spec:
                                     outcome(lambda: f(**a), v, s.nonfinite_ok, seconds),
                                     f"{name} = {value.category}: {_shown(value.value)}"))
            for label, argv_case in cli_cases(scratch):
                work.append(("bnsym (command line)", lambda a=argv_case: cli_outcome(a, seconds), label))
            for label, argv_case, check in wave3_cli_cases(scratch):
                work.append(("wave3.bnsym (command line)", lambda a=argv_case, c=check: cli_outcome(a, seconds, c),
                             label))
            if args.only:
                work = [case for case in work if case[0].startswith(tuple(args.only))]
            work = work[::stride]
            counts: dict[str, dict[str, Any]] = {}
            for function, run_case, label in work:
                start = time.perf_counter()
                kind, what = run_case()
                line = counts.setdefault(function, {"case": function, "ours": "bnsym", "cases": 0, "clean": 0,
                                                    "defect": 0, "seconds": 0.0})
                line["cases"] += 1
                line[kind] += 1
                line["seconds"] += time.perf_counter() - start
                totals["cases"] += 1
                totals[kind] += 1
                if kind == "defect":
                    defects.append({"function": function, "case": label, "outcome": what})
            rows = list(counts.values())
        finally:
            os.chdir(home)
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    for line in rows:
        print(f"{line['case']}: {line['cases']} cases, {line['defect']} defects, {line['seconds']:.1f} s")
    print(f"total: {totals['cases']} cases, {totals['clean']} clean, {totals['defect']} defects")
    question = "Does every public function of the new surface keep the input contract on hostile input?"
    return write("hostile_inputs", question, args, rows, totals=totals, defects=defects)


def _only_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--only", type=lambda text: [p for p in text.split(",") if p], default=[],
                        metavar="PREFIX[,PREFIX]", help="run only the functions whose name starts with a prefix, e.g. "
                        "wave3 (the record then goes to a temporary file unless --output says where)")


def _shown(value: Any) -> str:
    if isinstance(value, (np.ndarray, torch.Tensor)):
        return f"{type(value).__name__}(shape {tuple(value.shape)}, {value.dtype})"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


if __name__ == "__main__":
    main()
