"""A first `bnsym predict` (nothing cached) derives nothing and imports neither torch nor scipy.stats (nor, for relu,
SymPy, scipy.integrate and scipy.optimize).

Counted, not timed, so that it holds on any machine: a derivation (a :class:`~bnsym.core.derivation.Derivation`), a
``sympy.lambdify`` and the import of a heavy module are what made the first relu answer cost 7.5 s of CPU; with
the kernels' code stored (:mod:`bnsym.core.kernels`) and torch imported on first use it was about 1.2 s, of which
SymPy's import was about 0.3 s and scipy.integrate's 0.2 s; with both left out (SymPy objects built on first use),
the 11 backward classes in one quadrature and the interpreter's last collection skipped, about 0.5 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import HANG_SECONDS

PROBE = """
import json, sys
import sympy
from bnsym.core import derivation

counts = {"derivations": 0, "lambdified": 0}
init, lambdify = derivation.Derivation.__init__, sympy.lambdify

def counted_init(self, *args, **kwargs):
    counts["derivations"] += 1
    init(self, *args, **kwargs)

def counted_lambdify(*args, **kwargs):
    counts["lambdified"] += 1
    return lambdify(*args, **kwargs)

derivation.Derivation.__init__, sympy.lambdify = counted_init, counted_lambdify
from bnsym.cli import main

assert main(["predict", "--phi", sys.argv[1], "--batch-size", "32", "--json"]) == 0
counts["imported"] = [name for name in ("torch", "scipy.stats", "scipy.integrate", "scipy.optimize")
                      if name in sys.modules]
print(json.dumps(counts))
"""


def _first_answer(phi: str, cache_dir: os.PathLike) -> tuple[dict, dict]:
    env = {**os.environ, "BNSYM_CACHE_DIR": str(cache_dir), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", PROBE, phi], capture_output=True, text=True, timeout=HANG_SECONDS,
                          env=env)
    assert done.returncode == 0, done.stderr
    answer, counts = done.stdout.splitlines()
    return json.loads(answer), json.loads(counts)


def test_first_relu_answer_derives_nothing_and_imports_no_torch(tmp_path):
    """Nor scipy.integrate and scipy.optimize (about 0.2 s of CPU): relu's Gaussian moments are closed forms."""
    answer, counts = _first_answer("relu", tmp_path)
    assert counts == {"derivations": 0, "lambdified": 0, "imported": []}
    assert answer["phi"] == "relu" and answer["gradient_rate"] > 1 and answer["fixed_point"]["method"] == "closed_form"


def test_first_relu_answer_imports_no_sympy(tmp_path):
    """relu's answer comes from closed forms and stored kernel code: its Activation builds its SymPy expression only
    when a route reads it, and the theory modules import SymPy (about 0.3 s of CPU) when a derivation runs."""
    probe = ("import json, sys\nfrom bnsym.cli import main\n"
             "assert main(['predict', '--phi', 'relu', '--batch-size', '32', '--json']) == 0\n"
             "print(json.dumps([name for name in ('sympy', 'torch', 'scipy.integrate') if name in sys.modules]))")
    env = {**os.environ, "BNSYM_CACHE_DIR": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_SECONDS, env=env)
    assert done.returncode == 0, done.stderr
    answer, imported = map(json.loads, done.stdout.splitlines())
    assert imported == [] and answer["backward_eigenvalues"]["L"] > 1


@pytest.mark.parametrize("phi, lambdified", [("tanh", 0), ("gelu", 2)])
def test_first_smooth_answer_lambdifies_only_phi_and_imports_no_torch(tmp_path, phi, lambdified):
    """A smooth phi is lambdified (its numpy value and slope; tanh, erf and sin are written by hand), its torch
    callables are not built, and the spherical routes read their kernels from the stored code."""
    answer, counts = _first_answer(phi, tmp_path)
    # scipy.optimize may be: the collapse eps of a phi without a maximum of H on its grid is refined by it
    assert not {"torch", "scipy.stats", "scipy.integrate"} & set(counts.pop("imported"))
    assert counts == {"derivations": 0, "lambdified": lambdified}
    assert answer["fixed_point"]["method"] == "spherical" and answer["gradient_rate"] > 1


def test_a_module_stand_in_pickles_as_its_module():
    """A function shipped to a Dask worker may refer to a stand-in (the activations' torch before torch is imported):
    it pickles as the import of its module, whatever was imported first."""
    import pickle

    from bnsym.core.lazy import _ImportedOnFirstUse

    assert pickle.loads(pickle.dumps(_ImportedOnFirstUse("json"))) is __import__("json")
