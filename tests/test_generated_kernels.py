"""The kernels' generated code kept in the package (bnsym.core.kernels) is what the SymPy derivations give."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.special
import sympy as sp
from conftest import HANG_SECONDS

from bnsym import generate
from bnsym.core import generated_kernels, kernels

REGENERATE = "python -m bnsym.generate"


@pytest.mark.skipif(sp.__version__ != generated_kernels.SYMPY_VERSION,
                    reason=f"the stored code was printed by SymPy {generated_kernels.SYMPY_VERSION}, another SymPy "
                    "may print the same kernel differently")
def test_stored_code_equals_the_derivations():
    """Every declared kernel derived anew prints to the stored code, names and modules included; a changed
    derivation, a new or removed kernel fails here until the file is regenerated. Derived in a fresh interpreter, as
    the generator runs: the names of cse's Dummy symbols, and so the order of printed terms, depend on the Dummies a
    process has created before (in a test worker, other tests' derivations)."""
    stored = Path(generated_kernels.__file__).read_text()
    derived = subprocess.run([sys.executable, "-c", "from bnsym import generate; "
                              "print(generate.generated_source(), end='')"], capture_output=True, text=True,
                             timeout=HANG_SECONDS, check=True).stdout
    assert derived == stored, f"bnsym/core/generated_kernels.py is out of date: run `{REGENERATE}`"


def test_every_stored_kernel_is_declared():
    declared = generate.declared()
    owners = {key.partition(":")[0] for key in generated_kernels.KERNELS}
    assert owners == set(declared), f"run `{REGENERATE}`"


def test_stored_and_derived_kernels_give_the_same_answers():
    """The CLI's answers for relu (closed forms) and tanh (quadrature routes) with the stored kernels equal, bit for
    bit, those with every kernel derived and lambdified in the process (the stored code set aside)."""
    probe = ("import json, sys; from bnsym import cli; from bnsym.core import kernels\n"
             "if sys.argv[1] == 'derived': kernels._stored = lambda: {}\n"
             "print(json.dumps([cli.predict(phi, 8) for phi in ('relu', 'tanh')]))")
    answers = {}
    for how in ("stored", "derived"):
        done = subprocess.run([sys.executable, "-c", probe, how], capture_output=True, text=True, timeout=HANG_SECONDS)
        assert done.returncode == 0, done.stderr
        answers[how] = json.loads(done.stdout)
    assert answers["stored"] == answers["derived"]


def test_lambdify_names_are_read_from_their_modules():
    """A stored kernel's global names are read from numpy, scipy.special or math as lambdify's namespace had them;
    a name outside them (a function of the caller's, or one that lambdify left untranslated) is refused."""
    x = sp.Symbol("x")
    function = sp.lambdify(x, sp.sqrt(x) + sp.loggamma(x) + sp.pi, modules="scipy")
    origins = kernels._origins(function)
    assert origins["sqrt"] == ("numpy", "sqrt") and origins["gammaln"] == ("scipy.special", "gammaln")
    compiled = kernels._compile(origins, kernels._numbered(inspect.getsource(function)))
    assert compiled(2.5) == function(2.5) == np.sqrt(2.5) + scipy.special.gammaln(2.5) + np.pi
    with pytest.raises(ValueError, match="none of"):
        kernels._origins(sp.lambdify(x, sp.Function("f")(x), modules=[{"f": lambda v: v}, "numpy"]))
    with pytest.raises(ValueError, match="lacks"):
        kernels._origins(sp.lambdify(x, sp.besselj(x, x), modules="numpy"))
