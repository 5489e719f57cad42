"""Test scores of the BN-NTK, the BN-NNGP, the NTK without batch norm and SGD-trained BN networks (a record).

Issue 26's accuracy table at the BN-NNGP chapter's book sizes: digits (all ten classes, 384 training and 256 test
images of the book's split) and diabetes (the whole training split, 353 patients, and its 89 test patients,
features and targets standardised on the training set), B = 32, depths 1, 2, 5 and 10. Each row comes from
:func:`bnsym.train.kernel_regime.accuracy_rows` (the chapter's own function): the BN-NTK estimator at t = infinity,
the BN-NNGP posterior mean (noise 0.01), the arc-cosine NTK without batch norm, and the mean over seeds of the same
BN MLP at width N trained by SGD over the fixed batches. Digits are scored by accuracy, diabetes by the mean squared
error of the standardised targets (1 is the training mean's).

    python benchmarks/ntk_accuracy.py                  # CPU
    python benchmarks/ntk_accuracy.py --device cuda    # on a GPU (the committed record)
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch
from harness import parse, row, synchronizer, threads, write
from sklearn.datasets import load_diabetes
from sklearn.model_selection import train_test_split

from bnsym.core.digits import digits
from bnsym.train.kernel_regime import accuracy_rows

SIZES = {"default": {"n_digits": 384, "n_digits_test": 256, "batch": 32, "depths": "1,2,5,10", "width": 1024,
                     "seeds": 8, "steps": 800},
         "smoke": {"n_digits": 16, "n_digits_test": 8, "batch": 8, "depths": "1", "width": 32, "seeds": 2,
                   "steps": 5}}


def diabetes(n_train: int | None = None, n_test: int | None = None) -> tuple[np.ndarray, ...]:
    """scikit-learn's diabetes, split 80/20 (random_state 0), features and targets standardised on the training set
    (its first ``n_train`` and ``n_test`` points; None: all)."""
    data = load_diabetes()
    X_train, X_test, y_train, y_test = train_test_split(data.data, data.target, test_size=0.2, random_state=0)
    X_train, y_train, X_test, y_test = X_train[:n_train], y_train[:n_train], X_test[:n_test], y_test[:n_test]
    centre, spread = X_train.mean(0), X_train.std(0)
    X_train, X_test = (X_train - centre) / spread, (X_test - centre) / spread
    mean, sd = y_train.mean(), y_train.std()
    return X_train, (y_train - mean) / sd, X_test, (y_test - mean) / sd


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse(__doc__, SIZES, argv, default_threads=(2,), default_repeats=1)
    size = args.size
    depths = [int(d) for d in size["depths"].split(",")]
    split = digits(torch.float64)
    n, n_test = size["n_digits"], size["n_digits_test"]
    tasks = {"digits": ("classification", split.x_train.numpy()[:n], split.y_train.numpy()[:n],
                        split.x_test.numpy()[:n_test], split.y_test.numpy()[:n_test]),
             "diabetes": ("regression", *diabetes(*((n, n_test) if args.smoke else (None, None))))}
    rows = []
    with threads(args.threads[0]) as used:
        for name, (task, *data) in tasks.items():
            start = time.perf_counter()
            scores = accuracy_rows(task, *data, depths, size["batch"], size["width"], size["seeds"], size["steps"],
                                   device=args.device)
            synchronizer(args.device)()
            elapsed = time.perf_counter() - start
            rows.append(row(f"{name}: {len(data[0])} training and {len(data[2])} test points, B = {size['batch']}, "
                            f"depths {depths}", "accuracy_rows (four models, every depth)", [elapsed], threads=used,
                            data=name, score="accuracy" if task == "classification" else "mean squared error",
                            scores=scores))
    question = ("How well do the BN-NTK, the BN-NNGP, the NTK without batch norm and SGD-trained BN networks score on "
                "digits and diabetes at depths 1, 2, 5 and 10?")
    return write("ntk_accuracy", question, args, rows)


if __name__ == "__main__":
    main()
