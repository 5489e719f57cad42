"""Where and how the simulators compute: CUDA when present, full float32/float64 precision, seeded."""

from __future__ import annotations

import torch


def default_device() -> torch.device:
    """The CUDA device when one is available, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def configure_torch() -> None:
    """Turn TF32 off for matrix products and cuDNN (idempotent).

    TF32 keeps 10 mantissa bits (relative error ~1e-3), far above the Monte Carlo
    standard errors the theory is checked against.
    """
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False


def generator(seed: int, device: torch.device | str | None = None) -> torch.Generator:
    """A random generator on ``device`` (default :func:`default_device`) seeded with ``seed``.

    CPU and CUDA streams differ for the same seed: compare across devices statistically.
    """
    return torch.Generator(device=device or default_device()).manual_seed(seed)
