"""One answer shape (the convention of bnsym.api's docstring): a float for one B, an array of B's shape for an array
of B, an Estimate with with_error=True; a quantity with parts is a dict of such answers; the fixed point is a
FixedPoint whose q and c follow the same rule."""

from __future__ import annotations

import numpy as np
import pytest

import bnsym
from bnsym import Estimate, FixedPoint

BATCHES = np.array([8, 16])
PER_B = {
    "gradient_rate": bnsym.gradient_rate, "depth_scale": bnsym.depth_scale,
    "max_trainable_depth": bnsym.max_trainable_depth, "forward_eigenvalues": bnsym.forward_eigenvalues,
    "backward_eigenvalues": bnsym.backward_eigenvalues, "cross_batch_fixed_point": bnsym.cross_batch_fixed_point,
    "cross_batch_rate": bnsym.cross_batch_rate,
}


def _parts(answer):
    return list(answer.values()) if isinstance(answer, dict) else [answer]


@pytest.mark.parametrize("phi", ["relu", "tanh"])
@pytest.mark.parametrize("name", sorted(PER_B))
def test_every_quantity_has_one_answer_shape(name, phi):
    function = PER_B[name]
    assert all(type(part) is float for part in _parts(function(phi, 8)))
    looped = function(phi, BATCHES)
    assert all(isinstance(part, np.ndarray) and part.shape == BATCHES.shape for part in _parts(looped))
    estimates = function(phi, BATCHES, with_error=True)
    assert all(isinstance(part, Estimate) and np.shape(part.value) == BATCHES.shape for part in _parts(estimates))
    for part, estimate in zip(_parts(looped), _parts(estimates)):
        np.testing.assert_array_equal(part, estimate.value)


@pytest.mark.parametrize("phi", ["relu", "tanh"])
def test_the_fixed_point_follows_the_rule(phi):
    one, many = bnsym.fixed_point(phi, 8), bnsym.fixed_point(phi, BATCHES)
    assert isinstance(one, FixedPoint) and type(one.q) is float and type(one.c) is float
    assert many.q.shape == many.c.shape == BATCHES.shape
    assert all(isinstance(e, Estimate) for e in many.estimates().values())
