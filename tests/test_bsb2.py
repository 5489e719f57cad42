"""BSB2 fixed points (Yang et al. 2019, App. K): the block structure, its eigenvalues, the iterated map."""

from __future__ import annotations

import numpy as np
import pytest

import bnsym
from bnsym.core.geometry import centring
from bnsym.meanfield.bsb2 import bsb2_entries, bsb2_fixed_point, bsb2_matrix, derive_bsb2_eigenvalues


def test_entries_invert_the_matrix_and_project_symmetrically():
    entries = np.array([2.0, 0.3, 0.5, 0.1, -0.05])
    for dominant in (1, 3, 7):
        assert np.allclose(bsb2_entries(bsb2_matrix(8, dominant, entries), dominant)[[0, 2, 4]], entries[[0, 2, 4]])
    assert np.allclose(bsb2_entries(bsb2_matrix(8, 3, entries), 3), entries)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8))
    projected = bsb2_matrix(8, 3, bsb2_entries(a @ a.T, 3))
    assert np.isclose(np.trace(projected), np.trace(a @ a.T))  # block averages keep the block sums


def test_eigenvalues_of_the_centred_matrix_numerically():
    """The four eigenvalues of the derivation against numpy's eigenvalues of G Sigma G (another route)."""
    derivation = derive_bsb2_eigenvalues(8, 3)
    d1, o1, d2, o2, x = 2.0, 0.3, 0.5, 0.1, -0.05
    r1, r2 = (d1 + 2 * o1) / 3, (d2 + 4 * o2) / 5
    g = centring(8)
    numeric = np.sort(np.linalg.eigvalsh(g @ bsb2_matrix(8, 3, (d1, o1, d2, o2, x)) @ g))
    expected = np.sort([0.0] + [d1 - o1] * 2 + [d2 - o2] * 4 + [15 / 8 * (r1 + r2 - 2 * x)])
    assert np.allclose(numeric, expected, atol=1e-12)
    assert derivation.result.shape == (8, 8)


def test_fixed_point_is_a_fixed_point_of_the_kernel():
    """One more layer of the exact kernel (not projected) moves the returned point by at most its error bound."""
    phi = bnsym.parse_activation("relu^2.4")
    point = bsb2_fixed_point(phi, 8, 1)
    kernel = bnsym.bn_kernel(phi, point.matrix)
    assert np.abs(kernel / np.diagonal(kernel).mean() - point.matrix).max() <= 2 * point.error + 1e-9
    assert point.entries[0] > 5 * point.entries[2]  # one sample dominates


@pytest.mark.parametrize("kwargs, message", [({"dominant": 0}, "1 to B - 1"), ({"dominant": 8}, "1 to B - 1"),
                                             ({"phi": "tanh"}, "positive-homogeneous"),
                                             ({"max_layers": 2}, "did not settle")])
def test_bad_input(kwargs, message):
    arguments = {"phi": "relu^2.4", "dominant": 1} | kwargs
    with pytest.raises(ValueError, match=message):
        bsb2_fixed_point(bnsym.parse_activation(arguments.pop("phi")), 8, **arguments)
