"""bnsym.arch's speed, by counts rather than the clock: what a call recomputes (the activation check once per
activation, phi and batch size, not once per layer and call)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import random_psd

from bnsym import arch
from bnsym.arch import Activation, Dense, Residual, repeat, serial
from bnsym.arch import graph as arch_graph
from bnsym.core import validation
from bnsym.core.activations import parse_activation
from bnsym.meanfield import kernels


@pytest.fixture
def usable_calls(monkeypatch) -> list[tuple]:
    """The arguments of every run of the activation check's body (``_check_usable``)."""
    calls, check = [], validation._check_usable
    monkeypatch.setattr(validation, "_check_usable", lambda *args: (calls.append(args), check(*args))[1])
    return calls


def test_activation_check_runs_once_per_activation_and_batch(usable_calls):
    """A 10-layer network of one activation, called three times: one check (it ran 30 times)."""
    phi = parse_activation("relu(beta=0.125)")  # a fresh object: no earlier test has checked it
    net = repeat([Dense(2.0, 0.1), Activation(phi)], 10)
    sigma = random_psd(8, 16, 0)
    for _ in range(3):
        arch.kernel(net, sigma)
    assert usable_calls == [(phi, None, False)]
    arch.ntk(net, sigma)  # the slope is checked too, once
    assert usable_calls == [(phi, None, False), (phi, None, True)]


def test_an_unusable_activation_is_refused_every_time(usable_calls):
    """The kept verdict is the refusal itself: the same ValueError on every call, decided once."""
    phi = parse_activation("relu(beta=-50)")  # identically 0 on the BN sphere of B = 8
    messages = []
    for _ in range(2):
        with pytest.raises(ValueError, match="is constant") as raised:
            validation.check_activation(phi, 8)
        messages.append(str(raised.value))
    assert messages[0] == messages[1] and len(usable_calls) == 1


def test_the_coordinate_rule_is_shared_and_read_only():
    nodes, weights = validation._coordinate_rule(8, (0.0,))
    assert validation._coordinate_rule(8, (0.0,))[0] is nodes
    assert not (nodes.flags.writeable or weights.flags.writeable)
    assert np.isclose(weights.sum(), 1.0, rtol=1e-12)


def test_covariance_check_factors_instead_of_eigenvalues(monkeypatch):
    """Sigma0's PSD check is a Cholesky factor of Sigma/max|Sigma| + 1e-10 I (eigvalsh, ten times the work, only
    to name the smallest eigenvalue of a refused one), and G Sigma G = 0 is found from row means, not two products."""
    eigenvalues = np.linalg.eigvalsh
    calls = []
    monkeypatch.setattr(np.linalg, "eigvalsh", lambda a: (calls.append(a.shape), eigenvalues(a))[1])
    sigma = random_psd(8, 3, 0)  # rank 3: PSD with five zero eigenvalues
    validation.check_covariance(sigma)
    assert calls == []
    null = np.linalg.eigh(sigma)[1][:, 0]  # a unit vector of its null space
    with pytest.raises(ValueError, match="smallest eigenvalue is -0.01"):
        validation.check_covariance(sigma - 0.01 * np.outer(null, null))
    with pytest.raises(ValueError, match="G Sigma G = 0"):
        validation.check_covariance(np.full((8, 8), 2.0))
    assert validation.check_covariance(np.full((8, 8), 2.0), batch_norm=False)[0, 0] == 2.0


def test_hermite_doubling_computes_each_rule_once(monkeypatch):
    """arch's Gauss-Hermite kernel doubles the nodes from 64 until its error estimate (the change from half the nodes)
    is below 1e-12: each rule once (32, 64, ..., 512: 5 rules for tanh(gamma=2) at variance 4, where it was 8), with
    the value and error of a fresh gauss_hermite_kernel at the last degree."""
    degrees, rule = [], kernels._gauss_hermite_rule
    monkeypatch.setattr(kernels, "_gauss_hermite_rule", lambda *args: (degrees.append(args[-1]), rule(*args))[1])
    phi, sigma = parse_activation("tanh(gamma=2)"), 4.0 * random_psd(5, 8, 1)[None]
    value, error = arch_graph.hermite_kernel(phi, sigma)
    assert degrees == [64, 32, 128, 256, 512]
    fresh = kernels.gauss_hermite_kernel(phi, sigma, 512)
    assert np.array_equal(value, fresh.value) and np.array_equal(error, fresh.error.max(0))


def test_hermite_rule_holds_a_bounded_block_of_values(monkeypatch):
    """The tensor-product rule evaluates psi on blocks of at most HERMITE_BLOCK values (degree^2 per entry), not on
    every entry at once (tanh at B = 128 and 512 nodes took 2.2e9 values, 17 GB, per temporary); the blocked sums
    equal the one-block ones to rounding, here with blocks of two entries."""
    sizes = []

    def tanh(x: np.ndarray) -> np.ndarray:
        sizes.append(x.size)
        return np.tanh(x)

    sigma = 2.0 * random_psd(16, 24, 2)[None]  # 136 entries
    kernels.gauss_hermite_kernel(tanh, sigma, 512)  # 136 x 512^2 = 3.6e7 values of psi > 2^22
    assert max(sizes) <= kernels.HERMITE_BLOCK < 136 * 512**2
    whole = kernels.gauss_hermite_kernel(tanh, sigma, 64)  # 136 x 64^2 = 557,056 values: one block
    monkeypatch.setattr(kernels, "HERMITE_BLOCK", 2 * 64**2)
    sizes.clear()
    blocked = kernels.gauss_hermite_kernel(tanh, sigma, 64)
    assert max(sizes) == 2 * 64**2 and sizes.count(2 * 64**2) == 68 + 17  # 2 entries at 64 nodes, 8 at 32
    np.testing.assert_allclose(blocked.value, whole.value, rtol=0, atol=1e-15)
    np.testing.assert_allclose(blocked.error, whole.error, rtol=0, atol=1e-15)


def test_the_kernel_and_slope_maps_share_one_correlation_per_layer(monkeypatch):
    """The NTK of [Dense, relu] x 10 reads each pre-activation's correlation K_ab / sqrt(K_aa K_bb) once, for the
    kernel map and the slope map both (each computed its own: 20)."""
    calls, correlation = [], arch_graph.unit_correlation
    monkeypatch.setattr(arch_graph, "unit_correlation", lambda kernel: (calls.append(1), correlation(kernel))[1])
    arch.ntk(repeat([Dense(2.0, 0.1), Activation("relu")], 10), random_psd(8, 16, 0))
    assert len(calls) == 10


@pytest.mark.parametrize("what", ["kernel", "ntk", "signal_propagation"])
def test_a_call_leaves_no_reference_cycles(what):
    """The per-neuron graph holds no reference cycles (weak references to the graph and to children, sources by
    index): a call's nodes are freed when it returns, and the cyclic collector finds none of bnsym's objects (it
    found 37 objects per call, and its passes over the heap cost small networks 40 % of a call). Other libraries'
    garbage that the collector happens to free meanwhile is not counted."""
    import gc

    call = getattr(arch, what)
    for net in (repeat([Dense(1.0, 0.1), Activation("erf")], 3),
                serial(Dense(), repeat(Residual([Activation("relu"), Dense()]), 2))):
        call(net, random_psd(8, 16, 0))
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            call(net, random_psd(8, 16, 0))
            gc.collect()
            ours = [type(o).__name__ for o in gc.garbage if type(o).__module__.startswith("bnsym")]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
        assert ours == []
