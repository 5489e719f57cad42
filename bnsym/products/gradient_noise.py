"""Gradient statistics of Bjorck et al. (2018): SGD noise (eq. 2), summand alignment (Table 1), output bias (Fig. 4).

* Eq. (2): a minibatch of n indices drawn with replacement from N examples has
  E||alpha grad f - alpha grad_SGD||^2 = alpha^2 V / n, V = (1/N) sum_i ||grad f_i - grad f||^2; without
  replacement the finite-population factor (N - n)/(N - 1) multiplies it (:func:`derive_sgd_noise`).
* The null model of Table 1: n i.i.d. summands N(m s, s^2) of one parameter's gradient have
  E sum abs(d) / E abs(sum d) = sqrt(n) E abs(Z + m) / E abs(Z + sqrt(n) m) (:func:`derive_alignment_ratio`):
  sqrt(n) for zero-mean summands, E abs(Z + m) / abs(m) for many aligned ones.
* Fig. 4: if one class leads every logit by Delta, the gradient of its output bias tends to n (K - 1)/K under
  uniform labels, against O(sqrt(n)) for input-dependent logits (:func:`derive_bias_dominance`).
"""

from __future__ import annotations

from functools import cache
from itertools import permutations, product

import numpy as np
import sympy as sp

from ..core.derivation import Derivation
from ..core.symbols import N_width, m_align, n_batch
from ..core.validation import check_finite_result, check_range, check_real_array, check_whole_number

MAX_COUNT = 2**53  # batch sizes, populations and class counts: whole numbers that float64 holds exactly


def _count(value: object, name: str, minimum: int) -> int:
    return check_whole_number(value, name, minimum, MAX_COUNT, "float64 holds whole numbers exactly up to 2^53")


@cache
def derive_sgd_noise() -> Derivation:
    """Eq. (2) with and without replacement: general derivation, and exact enumeration for N = 3, n = 2."""
    d = Derivation("SGD noise of a minibatch mean (eq. 2)")
    alpha_lr, variance, cov = sp.symbols("alpha V c", positive=True)
    d.step("The error term is (alpha/n) sum_k e_k with e_k = grad f_(I_k) - grad f, E e_k = 0, E||e_k||^2 = V; "
           "with c = E e_k . e_l (k != l),", sp.Eq(sp.Symbol("E||error||^2"),
                                                  alpha_lr**2 * (n_batch * variance + n_batch * (n_batch - 1) * cov)
                                                  / n_batch**2))
    general = d.steps[-1][1].rhs
    d.step("With replacement the draws are independent, c = 0 (eq. 2):",
           sp.Eq(sp.Symbol("E||error||^2"), sp.simplify(general.subs(cov, 0))), name="with_replacement")
    d.step("Without replacement sum_i e_i = 0 over the N examples forces c = -V/(N-1):",
           sp.Eq(sp.Symbol("E||error||^2"), sp.factor(general.subs(cov, -variance / (N_width - 1)))),
           name="without_replacement")
    g = sp.symbols("g_1:4", real=True)
    mean_g = sum(g) / 3
    v_pop = sum((gi - mean_g) ** 2 for gi in g) / 3
    for name, draws in (("with_replacement", list(product(range(3), repeat=2))),
                        ("without_replacement", list(permutations(range(3), 2)))):
        enumerated = sum(((g[a] + g[b]) / 2 - mean_g) ** 2 for a, b in draws) / len(draws)
        formula = d[name].subs({alpha_lr: 1, variance: v_pop, n_batch: 2, N_width: 3})
        difference = sp.expand(enumerated - formula)
        if difference != 0:
            raise RuntimeError(f"enumeration disagrees with the {name} formula: {difference}")
        d.step(f"Check ({name.replace('_', ' ')}): N = 3 scalars g_i, n = 2, all {len(draws)} ordered draws "
               "enumerated, minus the formula:", sp.Eq(sp.Symbol("difference"), difference, evaluate=False))
    d.result = d["with_replacement"]
    return d


def sgd_noise(lr: float, batch: int, variance: float, population: int | None = None) -> float:
    """E||lr grad f - lr grad_SGD||^2: lr^2 V / n (eq. 2); times (N - n)/(N - 1) when drawn without replacement
    from a population of N (``population``)."""
    lr, batch = check_range(lr, "lr", 0.0, open_low=True), _count(batch, "batch n", 1)
    variance = check_range(variance, "variance V", 0.0)
    d = derive_sgd_noise()
    alpha_lr, v = sp.symbols("alpha V", positive=True)
    if population is None:
        noise = float(d["with_replacement"].subs({alpha_lr: lr, v: variance, n_batch: batch}))
    else:
        population = _count(population, "population N", 1)
        if not batch <= population:
            raise ValueError(f"a batch drawn without replacement has at most N = {population} examples, got "
                             f"batch n = {batch}")
        # n = N: the batch is the population and the gradient exact (at N = 1 the factor (N - n)/(N - 1) is 0/0)
        noise = 0.0 if batch == population else float(d["without_replacement"].subs(
            {alpha_lr: lr, v: variance, n_batch: batch, N_width: population}))
    return check_finite_result(noise, f"the SGD noise lr^2 V / n for lr = {lr:g}, variance V = {variance:g}")


@cache
def derive_alignment_ratio() -> Derivation:
    """The expected T1/T4 = E sum abs(d) / E abs(sum d) for n i.i.d. N(m s, s^2) summands (folded normal means)."""
    d = Derivation("Alignment ratio of gradient summands (null model of Table 1)")
    zz, mu = sp.Symbol("Z", real=True), sp.Symbol("mu", real=True)
    phi = sp.exp(-zz**2 / 2) / sp.sqrt(2 * sp.pi)
    folded = (sp.integrate((zz + mu) * phi, (zz, -mu, sp.oo)) - sp.integrate((zz + mu) * phi, (zz, -sp.oo, -mu)))
    folded = sp.simplify(folded.rewrite(sp.erf))
    d.step("Folded normal mean:", sp.Eq(sp.Symbol("E|Z + mu|"), folded), name="folded_mean")
    ratio = n_batch * folded.subs(mu, m_align) / (sp.sqrt(n_batch) * folded.subs(mu, sp.sqrt(n_batch) * m_align))
    d.step("sum|d| = s sum|Z_b + m| and |sum d| = s sqrt(n)|Z + sqrt(n) m|, so", sp.Eq(sp.Symbol("T1/T4"), ratio),
           name="ratio")
    d.step("Zero-mean summands:", sp.Eq(sp.Symbol("T1/T4 (m = 0)"), sp.simplify(ratio.subs(m_align, 0))),
           name="ratio_unaligned")
    scaled = sp.expand(folded / mu)  # E|Z + mu| / mu: tends to 1, no overflow for any float mu > 0
    stable = scaled.subs(mu, m_align) / scaled.subs(mu, sp.sqrt(n_batch) * m_align)
    if sp.simplify(stable - ratio) != 0:
        raise RuntimeError("dividing by sqrt(n) m changed the alignment ratio")
    d.step("Divided through by sqrt(n) m (the form evaluated where sqrt(n) m >= 1: n m^2 never overflows; the "
           "ratio is even in m):", sp.Eq(sp.Symbol("T1/T4"), stable), name="stable")
    d.result = ratio
    return d


def alignment_ratio(n: int | np.ndarray, m: float | np.ndarray) -> np.ndarray:
    """E T1 / E T4 for n i.i.d. summands N(m s, s^2): sqrt(n) at m = 0, falling to about E abs(Z + m) / abs(m)
    (vectorised)."""
    n_values = check_real_array(n, "n (the number of summands)", low=1.0)
    m_values = check_real_array(m, "m (the mean-to-std ratio)")
    try:
        np.broadcast_shapes(n_values.shape, m_values.shape)
    except ValueError:
        raise ValueError(f"n and m must broadcast together, got shapes {n_values.shape} and {m_values.shape}") from None
    d = derive_alignment_ratio()
    kernel, stable = (sp.lambdify((n_batch, m_align), d[name], "scipy", cse=True) for name in ("ratio", "stable"))
    m_values = np.abs(m_values)  # the ratio is even in m
    with np.errstate(all="ignore"):
        ratio = np.where(np.sqrt(n_values) * m_values >= 1, stable(n_values, m_values), kernel(n_values, m_values))
    return check_finite_result(ratio, "the alignment ratio for these n and m")


@cache
def derive_bias_dominance() -> Derivation:
    """Gradient of the output bias of a class that leads every logit by Delta (softmax cross-entropy)."""
    d = Derivation("Output-bias dominance (Fig. 4)")
    delta, classes = sp.symbols("Delta K", positive=True)
    p_lead = sp.exp(delta) / (sp.exp(delta) + classes - 1)
    d.step("Softmax probability of the leading class (the others tied):", sp.Eq(sp.Symbol("p_j'"), p_lead))
    d.step("dL_b/dz_bj = p_bj - 1[y_b = j]; summed over a batch with uniform labels, the expected bias gradient is",
           sp.Eq(sp.Symbol("E dL/db_j'"), n_batch * (p_lead - 1 / classes)), name="bias_gradient")
    d.step("which tends, as Delta -> infinity, to", sp.Eq(sp.Symbol("E dL/db_j'"),
                                                         sp.limit(n_batch * (p_lead - 1 / classes), delta, sp.oo)),
           name="limit")
    stable = n_batch * (1 / (1 + (classes - 1) * sp.exp(-delta)) - 1 / classes)
    if sp.simplify(stable - d["bias_gradient"]) != 0:
        raise RuntimeError("dividing by e^Delta changed the bias gradient")
    d.step("Divided through by e^Delta (the form evaluated: no e^Delta to overflow at large Delta):",
           sp.Eq(sp.Symbol("E dL/db_j'"), stable), name="stable")
    d.result = d["bias_gradient"]
    return d


def bias_grad_dominance(delta: float | np.ndarray, classes: int, batch: int) -> np.ndarray:
    """n (p_j'(Delta) - 1/K): the expected output-bias gradient of a class leading by Delta (vectorised in Delta)."""
    delta = check_real_array(delta, "Delta (the logit lead)")
    classes, batch = _count(classes, "classes K", 2), _count(batch, "batch n", 1)
    delta_s, k_s = sp.symbols("Delta K", positive=True)
    kernel = sp.lambdify((delta_s, k_s, n_batch), derive_bias_dominance()["stable"], "numpy", cse=True)
    with np.errstate(over="ignore"):  # exp(-Delta) = inf for Delta << 0: the probability is then 0
        return kernel(delta, classes, batch)
