"""bnsym.core.digits: the one digits split of the book, against scikit-learn's raw data."""

from __future__ import annotations

import numpy as np
import torch
from sklearn.datasets import load_digits

from bnsym.core.digits import N_CLASSES, TEST_FRACTION, digits

ROUNDING = 1e-12


def test_digits_split():
    data = digits(torch.float64)
    assert (len(data.y_train), len(data.y_test), data.n_features) == (1437, 360, 64)
    assert data.x_train.mean(0).abs().max() < ROUNDING
    assert data.chance == np.bincount(data.y_test.numpy()).max() / 360


def test_the_split_is_a_stratified_partition_standardised_on_its_training_part():
    _, raw_y = load_digits(return_X_y=True)
    data = digits(torch.float64)
    labels = np.concatenate([data.y_train.numpy(), data.y_test.numpy()])
    assert np.array_equal(np.sort(labels), np.sort(raw_y))  # every image once
    for part, share in ((data.y_train, 1 - TEST_FRACTION), (data.y_test, TEST_FRACTION)):
        assert np.all(np.abs(np.bincount(part.numpy(), minlength=N_CLASSES) - share * np.bincount(raw_y)) <= 1)
    std = data.x_train.std(0, correction=0)
    np.testing.assert_allclose(std[std > 0].numpy(), 1.0, rtol=1e-12)
    assert torch.equal(digits(torch.float64).x_test, data.x_test)  # the same split in every call
