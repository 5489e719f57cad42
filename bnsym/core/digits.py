"""scikit-learn's bundled digits (1797 images of 8 x 8, 10 classes) as standardised torch tensors: the one split.

Every chapter that uses digits (the BN-NNGP, trainability, rank-collapse and products chapters) and every
training harness uses this split, so their numbers are comparable. Nothing is downloaded: the data ship with
scikit-learn. The split is a fixed-seed, class-stratified 80/20 split (1437 training and 360 test images); each
of the 64 pixels is standardised with the training set's mean and standard deviation (pixels that are constant on
the training set, the image corners, keep standard deviation 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import torch

N_CLASSES = 10
TEST_FRACTION = 0.2
SPLIT_SEED = 0


@dataclass(frozen=True)
class Digits:
    """Inputs (n, 64) and integer labels (n,) of the training and test sets."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def n_features(self) -> int:
        return self.x_train.shape[1]

    @property
    def chance(self) -> float:
        """The test accuracy of always answering the most frequent test class."""
        return torch.bincount(self.y_test, minlength=N_CLASSES).max().item() / len(self.y_test)


@cache
def _split() -> tuple[np.ndarray, ...]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=TEST_FRACTION, random_state=SPLIT_SEED,
                                                        stratify=y)
    mean, std = x_train.mean(0), x_train.std(0)
    std = np.where(std > 0, std, 1.0)
    return (x_train - mean) / std, y_train, (x_test - mean) / std, y_test


def n_train() -> int:
    """The number of training images of the split (1437): the most examples one step can take."""
    return len(_split()[1])


def digits(dtype: torch.dtype = torch.float32, device: torch.device | str = "cpu") -> Digits:
    """The standardised digits split (the same in every process: the split's seed is fixed)."""
    x_train, y_train, x_test, y_test = _split()
    floats = {"dtype": dtype, "device": device}
    labels = {"dtype": torch.long, "device": device}
    return Digits(torch.as_tensor(x_train, **floats), torch.as_tensor(y_train, **labels),
                  torch.as_tensor(x_test, **floats), torch.as_tensor(y_test, **labels))
