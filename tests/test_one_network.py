"""One network: weights are drawn, and batch norm is written, only where the layout says (issue 42, item 3).

Read from the source with ``ast``: in the rooms that build and train networks (``bnsym.sim``, ``bnsym.train``,
``bnsym.core``), a weight draw (``torch.randn``, ``torch.rand``, ``normal_``, ``uniform_``, ``nn.Linear``, an
``nn.init`` initialiser) or a normalisation (a call of ``batch_norm``/``layer_norm``/``nn.BatchNorm1d``/...
of torch's own, or a hand-written ``x / sqrt(mean of x^2 ...)``) may sit only in the twin
(sim/arch.py), the two fast paths (sim/networks.py, sim/gradients.py), the conv ResNet (sim/resnet_init.py), the
one forward (core/batchnorm.py), the random streams (core/device.py), or in a function listed below with the
reason it is not yet a description run by the twin. The theory rooms' Monte Carlo draws (random matrix products,
Markov chains) build no network and are not scanned.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bnsym"
ROOMS = ("sim", "train", "core")
ALLOWED_FILES = {
    "sim/arch.py": "the twin of every description",
    "sim/networks.py": "fast path: the Gram sampler",
    "sim/gradients.py": "fast path: the hand-written backward",
    "sim/resnet_init.py": "the conv ResNet of chapter 12b stays as it is",
    "core/batchnorm.py": "the one batch-norm forward",
    "core/device.py": "the random streams (Normals, the Haar sampler) that the others draw from",
}
REMAINING = {  # (file, function): why it still draws or normalises itself
    ("sim/batches.py", "simulate_batched_gram"): "the Gram sampler on several batches (App. H), a fast path",
    ("sim/bjorck.py", "gaussian_factors"): "Gaussian factors of a random matrix product, no network",
    ("sim/bjorck.py", "minibatch_noise"): "draws minibatch indices, no weights",
    ("sim/daneshmand.py", "gaussian_relu_cosines"): "a Gram fast path (rows drawn from their N x N covariance)",
    ("sim/daneshmand.py", "representations"): "h / rms(h) over all entries is a rank-neutral rescaling of networks "
                                              "without batch norm, not a batch norm",
    ("sim/ntk.py", "empirical_ntk"): "draws the read-out vector v; the body is the twin",
    ("train/tangent.py", "train_on_batches"): "draws the read-out matrix V; the body is the twin",
    ("sim/moments.py", "simulate_moments"): "draws the read-out vectors v of the gradient statistic; the body is the "
                                            "twin",
    ("sim/philipp.py", "gaussian_noise"): "draws inputs, no weights",
    ("sim/philipp.py", "unit_sphere"): "draws inputs, no weights",
    ("sim/philipp.py", "_gaussian_matrix"): "Table 3's block weights (skew-symmetric, -C^T C, correlated across "
                                            "blocks, unit qm norm) are no Dense init",
    ("sim/philipp.py", "normalised_unit_gsc"): "draws a stationary input and Gaussian labels, no weights",
}
DRAWS = {"randn", "rand", "randn_like", "rand_like", "normal_", "uniform_", "Linear", "orthogonal_",
         "xavier_normal_", "xavier_uniform_", "kaiming_normal_", "kaiming_uniform_", "trunc_normal_"}
NORMALISATIONS = {"batch_norm", "layer_norm", "group_norm", "instance_norm", "BatchNorm1d", "BatchNorm2d",
                  "LayerNorm", "GroupNorm"}
TORCH = {"F", "nn", "torch", "functional"}  # a normalisation called from torch (a bare batch_norm is the one forward)
ROOTS, STATISTICS = {"sqrt", "rsqrt", "hypot", "std"}, {"mean", "var", "std"}


def _called(node: ast.AST) -> set[str]:
    """Names of every function or method called inside ``node``."""
    found = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            found.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return found


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _is_root(node: ast.AST) -> bool:
    """A square root (or standard deviation) of a statistic: sqrt(mean x^2 + eps), x.var().sqrt(), ..."""
    called = _called(node)
    return bool(called & ROOTS and called & STATISTICS)


def findings(function: ast.FunctionDef) -> set[str]:
    """What ``function`` does that only the allowed places may: weight draws and normalisations."""
    found = set()
    roots = {}  # a name bound to a root of a statistic -> the names that statistic reads
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and _is_root(node.value):
            roots[node.targets[0].id] = _names(node.value)
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in DRAWS:
                found.add(f"weight draw ({called})")
            owner = getattr(func, "value", None)
            if called in NORMALISATIONS and isinstance(owner, ast.Name) and owner.id in TORCH:
                found.add(f"normalisation ({called})")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and not _called(node.left) & ROOTS:
            right = _names(node.right)
            read = right.union(*(roots[name] for name in right & set(roots)))
            if (_is_root(node.right) or right & set(roots)) and _names(node.left) & read:
                found.add("hand-written normalisation (x / sqrt(mean of x^2))")
    return found


def scan(package: Path = PACKAGE) -> dict[tuple[str, str], set[str]]:
    """(file, function) -> findings, for every function of the network rooms outside the allowed files."""
    result = {}
    for room in ROOMS:
        for path in sorted((package / room).rglob("*.py")):
            relative = path.relative_to(package).as_posix()
            if relative in ALLOWED_FILES:
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (found := findings(node)):
                    result[relative, node.name] = found
    return result


def test_weights_are_drawn_and_batch_norm_written_only_where_allowed():
    offending = {f"{path}:{function}": sorted(found) for (path, function), found in scan().items()
                 if (path, function) not in REMAINING}
    assert offending == {}, ("a network drawn or normalised outside the twin, the fast paths, the conv ResNet and "
                             f"core/batchnorm.py: build it from a description (bnsym.sim.arch) instead: {offending}")


def test_every_listed_exception_is_still_needed():
    """A listed function that no longer draws or normalises (or is gone) leaves the list: it cannot go stale."""
    stale = sorted(set(REMAINING) - set(scan()))
    assert stale == [], f"remove these from REMAINING, they no longer draw or normalise: {stale}"


@pytest.mark.parametrize("source, expected", [
    ("def f(x):\n    c = x - x.mean(-1, keepdim=True)\n    return c / torch.sqrt(c.square().mean() + 1e-5)\n",
     {"hand-written normalisation (x / sqrt(mean of x^2))"}),
    ("def f(h):\n    rms = h.square().mean(-1).sqrt()\n    return h / torch.hypot(rms, eps)\n",
     {"hand-written normalisation (x / sqrt(mean of x^2))"}),
    ("def f(n):\n    return torch.randn(n, n) / n ** 0.5\n", {"weight draw (randn)"}),
    ("def f(n):\n    return nn.Linear(n, n)\n", {"weight draw (Linear)"}),
    ("def f(x):\n    return F.layer_norm(x, x.shape[-1:])\n", {"normalisation (layer_norm)"}),
    ("def f(x):\n    return batchnorm.batch_norm(x) + batch_norm(x, 0.1)\n", set()),
    ("def f(x):\n    return nn.BatchNorm1d(3)(x)\n", {"normalisation (BatchNorm1d)"}),
    ("def f(g):\n    return g / torch.sqrt(g.square().sum())\n", set()),
    ("def f(u, v):\n    return u.square().mean().sqrt() / v.square().mean().sqrt()\n", set()),
])
def test_the_reader_sees_draws_and_normalisations(source, expected):
    """The reader must find what it forbids, or the tests above could not fail."""
    assert findings(ast.parse(source).body[0]) == expected
