"""Ultrasymmetric operators on symmetric B x B matrices (Yang et al. 2019, Thm 1 / 3.6, Thms E.61, E.62, E.72).

A linear map T{Lam}_ij = sum_kl T_{ij|kl} Lam_kl is *ultrasymmetric* if T_{pi(i)pi(j)|pi(k)pi(l)} = T_{ij|kl}
for every permutation pi of the batch and T_{ij|kl} = T_{ji|lk}. An entry then depends only on the equality
pattern of (i, j, k, l): 15 set partitions of four positions, paired by (ij|kl) -> (ji|lk) into 11 classes
(:data:`CLASSES`, named by a representative).

Why the eigenspaces do not depend on the entries (Schur's lemma). Under simultaneous permutation of rows and
columns, the symmetric matrices H_B split as  trivial (x2: I and 11^T)  +  standard (x2: diag(v) and
v1^T + 1v^T, v in 1^perp)  +  one irreducible of dimension B(B-3)/2 (zero diagonal, zero row sums: M).
An operator commuting with every permutation maps each isotypic part into itself, acts there as a 2 x 2
matrix on the multiplicity space (trivial and standard) or as a scalar (M). Hence two 1-dimensional BSB1
eigenspaces, two (B-1)-dimensional ones and the B(B-3)/2-dimensional M, for every B >= 4.

Everything here is symbolic in B: :func:`apply_symbolic` evaluates one entry of T{Lam} for a *structured*
matrix Lam (a few special indices, all others equivalent) by counting index patterns, with the number
of "other" indices B - (special) a polynomial in B.
"""

from __future__ import annotations

from functools import cache
from typing import Callable, Mapping

from ..core.derivation import Derivation
from ..core.kernels import lambdified
from ..core.lazy import lazy_module

sp = lazy_module("sympy")  # SymPy (0.3 s of CPU to import) for the derivations, on first use

CLASSES = ("11|11", "11|12", "11|22", "11|23", "12|11", "12|12", "12|21", "12|13", "12|23", "12|33", "12|34")


@cache
def class_symbols() -> dict[str, sp.Symbol]:
    """T_{ij|kl}, one SymPy symbol per class, also read as the module's ``T`` (built on first use: SymPy's import
    is for the derivations)."""
    return {name: sp.Symbol(f"T_{{{name}}}") for name in CLASSES}


def __getattr__(name: str) -> dict[str, sp.Symbol]:
    if name == "T":
        return class_symbols()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

Structured = Callable[[int, int], "sp.Expr"]  # Lam(k, l); indices above `special` are interchangeable


def _relabel(indices: tuple[int, ...]) -> str:
    """Equality pattern by first occurrence: (5, 2, 5, 7) -> '12|13'."""
    first: dict[int, int] = {}
    labels = [str(first.setdefault(i, len(first) + 1)) for i in indices]
    return "".join(labels[:2]) + "|" + "".join(labels[2:])


def pattern_class(i: int, j: int, k: int, l: int) -> str:
    """The class of T_{ij|kl}: the pattern of (i,j,k,l) or of (j,i,l,k), whichever names a class."""
    for pattern in (_relabel((i, j, k, l)), _relabel((j, i, l, k))):
        if pattern in CLASSES:
            return pattern
    raise AssertionError(f"no class for {(i, j, k, l)}")  # pragma: no cover - the 11 classes are complete


def apply_symbolic(values: Mapping[str, sp.Expr], lam: Structured, special: int, i: int, j: int,
                   size: sp.Expr | None = None) -> sp.Expr:
    """T{Lam}_ij for symbolic batch size ``size``.

    ``lam(k, l)`` must not change under permutations of the indices > ``special``. Indices are split into
    the concrete ones C = {1..max(special, i, j)} and n = size - |C| "others"; each sum over others is one
    representative times its count (n for one free index, n (n - 1) for two distinct ones).
    """
    from ..core.symbols import B

    concrete = range(1, max(special, i, j) + 1)
    n = (B if size is None else size) - len(concrete)
    o1, o2 = len(concrete) + 1, len(concrete) + 2

    def term(k: int, l: int) -> sp.Expr:
        return values[pattern_class(i, j, k, l)] * lam(k, l)

    total = sum(term(k, l) for k in concrete for l in concrete)
    total += n * sum(term(k, o1) + term(o1, k) for k in concrete)
    total += n * term(o1, o1) + n * (n - 1) * term(o1, o2)
    return sp.expand(total)


# Representatives of the isotypic parts; v = e_1 - e_2 spans the standard representation's copy in 1^perp.
def _v(k: int) -> int:
    return {1: 1, 2: -1}.get(k, 0)


def identity(k: int, l: int) -> sp.Expr:
    return sp.Integer(k == l)


def ones(k: int, l: int) -> sp.Expr:
    return sp.Integer(1)


def diag_v(k: int, l: int) -> sp.Expr:
    """D = diag(e_1 - e_2)."""
    return sp.Integer(_v(k) * (k == l))


def sym_v(k: int, l: int) -> sp.Expr:
    """S = v 1^T + 1 v^T, v = e_1 - e_2."""
    return sp.Integer(_v(k) + _v(l))


def lambda_m(k: int, l: int) -> sp.Expr:
    """Lam_M = E12 + E21 + E34 + E43 - E13 - E31 - E24 - E42: zero diagonal, zero row sums."""
    signs = {(1, 2): 1, (3, 4): 1, (1, 3): -1, (2, 4): -1}
    return sp.Integer(signs.get((min(k, l), max(k, l)), 0))


# (structured matrix, number of special indices) for the representatives
REPRESENTATIVES: dict[str, tuple[Structured, int]] = {
    "I": (identity, 0), "11^T": (ones, 0), "D": (diag_v, 2), "S": (sym_v, 2), "Lam_M": (lambda_m, 4)}


def _entry_patterns(special: int) -> list[tuple[int, int]]:
    """Target entries (i, j) covering every equality pattern relative to the special indices."""
    o1, o2 = special + 1, special + 2
    inside = [(i, j) for i in range(1, special + 1) for j in range(1, special + 1)]
    return inside + [(i, o1) for i in range(1, special + 1)] + [(o1, o1), (o1, o2)]


def _decompose(image: Structured, basis: list[tuple[Structured, int]], special: int) -> list[sp.Expr]:
    """Coefficients c with image = sum_b c_b basis_b, checked on *every* entry pattern (so valid for all B)."""
    coefficients = [sp.Dummy(f"x{n}") for n in range(len(basis))]  # never clash with symbols in the values
    equations = [sp.expand(image(i, j) - sum(c * b(i, j) for c, (b, _) in zip(coefficients, basis)))
                 for i, j in _entry_patterns(special)]
    solution = sp.solve(equations, coefficients, dict=True)
    if len(solution) != 1 or set(solution[0]) != set(coefficients):
        raise ValueError("T{Lam} is not in the span of the basis: the operator is not ultrasymmetric "
                         "(its values are not constant on the 11 index-pattern classes)")
    return [sp.factor(solution[0][c]) for c in coefficients]


def _image(values: Mapping[str, sp.Expr], name: str) -> tuple[Structured, int]:
    lam, special = REPRESENTATIVES[name]
    cache_: dict[tuple[int, int], sp.Expr] = {}

    def image(i: int, j: int) -> sp.Expr:
        if (i, j) not in cache_:
            cache_[(i, j)] = apply_symbolic(values, lam, special, i, j)
        return cache_[(i, j)]

    return image, special


def block_matrices(values: Mapping[str, sp.Expr] | None = None) -> dict[str, sp.Matrix]:
    """The 2 x 2 blocks of T on the trivial part (basis I, 11^T) and the standard part (basis D, S), and M's scalar.

    Column b of a block holds the coordinates of T{basis_b}, checked entry pattern by entry pattern.
    """
    values = class_symbols() if values is None else values
    trivial = [(identity, 0), (ones, 0)]
    standard = [(diag_v, 2), (sym_v, 2)]
    blocks = {}
    for key, basis, names in (("trivial", trivial, ("I", "11^T")), ("standard", standard, ("D", "S"))):
        columns = [_decompose(_image(values, name)[0], basis, 2) for name in names]
        blocks[key] = sp.Matrix(columns).T
    (m_value,) = _decompose(_image(values, "Lam_M")[0], [(lambda_m, 4)], 4)
    blocks["M"] = sp.Matrix([[m_value]])
    return blocks


def derive_eigenvalues(values: Mapping[str, sp.Expr] | None = None) -> Derivation:
    """Thm 1 / E.61 (raw operator) and Thm 3.6 / E.62 (projected G T G), symbolic in B.

    Named results: the projected eigenvalues "G", "L", "M" and the raw blocks "trivial", "standard".
    Projection: G (I) G = G, G (11^T) G = 0, G D G = D - S/B, G S G = 0, G Lam_M G = Lam_M. So on
    H^G = span(G) + L + M, lambda_G is the I-coefficient of T{G} = T{I} - T{11^T}/B, lambda_L the
    D-coefficient of T{D - S/B}, lambda_M the M scalar.
    """
    from ..core.symbols import B

    values = class_symbols() if values is None else values
    d = Derivation("Eigen-decomposition of an ultrasymmetric operator, for every B")
    d.step("An ultrasymmetric operator has 11 distinct entries (classes of index patterns):",
           sp.Eq(sp.Symbol("classes"), sp.Tuple(*[values[name] for name in CLASSES])))
    blocks = block_matrices(values)
    tri, std, m = blocks["trivial"], blocks["standard"], blocks["M"][0, 0]
    d.step("On BSB1 matrices $aI + b\\mathbf{1}\\mathbf{1}^T$ it acts on $(a, b)$ by the matrix "
           "(columns: images of $I$, $\\mathbf{1}\\mathbf{1}^T$)",
           sp.Eq(sp.Symbol("A_BSB1"), tri, evaluate=False), name="trivial")
    d.step("On $a\\,\\mathrm{diag}(v) + b\\,(v\\mathbf{1}^T + \\mathbf{1}v^T)$, $v \\perp \\mathbf{1}$ "
           "(each $v$: a copy, so multiplicity $B-1$)",
           sp.Eq(sp.Symbol("A_L"), std, evaluate=False), name="standard")
    d.step("On $\\mathbb{M}$ (zero diagonal, zero row sums; dimension $B(B-3)/2$) it is a scalar",
           sp.Eq(sp.Symbol("lambda_M"), m))
    x = sp.Symbol("x")
    d.step("Raw eigenvalues: roots of the characteristic polynomials of the two blocks "
           "(BSB1: multiplicity 1 each, L-shaped: $B-1$ each)",
           sp.Tuple(sp.Eq(sp.Symbol("p_BSB1"), sp.expand((x * sp.eye(2) - tri).det())),
                    sp.Eq(sp.Symbol("p_L"), sp.expand((x * sp.eye(2) - std).det()))))
    lam_g = sp.factor(tri[0, 0] - tri[0, 1] / B)
    lam_l = sp.factor(std[0, 0] - std[0, 1] / B)
    d.step("Projected operator $G^{\\otimes 2} T G^{\\otimes 2}$ on $\\mathbb{R}G$: "
           "the $I$-coefficient of $T\\{I - \\mathbf{1}\\mathbf{1}^T/B\\}$",
           sp.Eq(sp.Symbol("lambda_G"), lam_g), name="G")
    d.step("on $\\mathbb{L} = \\{GDG\\}$: the $D$-coefficient of $T\\{D - S/B\\}$ (multiplicity $B-1$)",
           sp.Eq(sp.Symbol("lambda_L"), lam_l), name="L")
    d.step("and on $\\mathbb{M}$ the same scalar (multiplicity $B(B-3)/2$); "
           "the kernel $\\{\\Sigma: G\\Sigma G = 0\\}$ has dimension $B$",
           sp.Eq(sp.Symbol("lambda_M"), sp.factor(m)), name="M")
    return d


@cache
def projected_eigenvalue_formulas() -> dict[str, sp.Expr]:
    """lambda_G, lambda_L, lambda_M of the projected operator as expressions in B and the 11 classes."""
    derivation = derive_eigenvalues()
    return {key: sp.expand(derivation[key]) for key in ("G", "L", "M")}


@lambdified()
def _projected_kernel():
    """lambda_G, lambda_L, lambda_M of :func:`projected_eigenvalue_formulas` as functions of (B, the 11 classes)."""
    from ..core.symbols import B

    formulas = projected_eigenvalue_formulas()
    args = [B, *class_symbols().values()]
    return {key: (args, formulas[key]) for key in formulas}


def projected_eigenvalues(values: Mapping[str, float], batch_size: float) -> dict[str, float]:
    """Numeric lambda_G, lambda_L, lambda_M of G T G for class values ``values`` (lambdified Thm E.62)."""
    missing = set(CLASSES) - set(values)
    if missing:
        raise ValueError(f"missing ultrasymmetric classes: {sorted(missing)}")
    args = [batch_size, *[values[name] for name in CLASSES]]
    return {key: float(f(*args)) for key, f in _projected_kernel().items()}


@lambdified(cse=False)
def _coefficient_kernel():
    """|d lambda_X / d T_c| as functions of B, named "X c": the projected eigenvalues are linear in the classes."""
    from ..core.symbols import B

    formulas = projected_eigenvalue_formulas()
    return {f"{key} {name}": ([B], sp.Abs(sp.diff(formulas[key], class_symbols()[name])))
            for key in formulas for name in CLASSES}


def projected_eigenvalue_errors(errors: Mapping[str, float], batch_size: float) -> dict[str, float]:
    """A bound on the error of :func:`projected_eigenvalues` from bounds on the class errors:
    sum_c |d lambda/d T_c| err_c."""
    coefficients = _coefficient_kernel()
    return {key: float(sum(coefficients[f"{key} {name}"](batch_size) * abs(errors[name]) for name in CLASSES))
            for key in ("G", "L", "M")}


def class_indices(name: str) -> tuple[int, int, int, int]:
    """The representative index tuple (i, j, k, l) of a class name such as "12|34"."""
    return tuple(int(ch) for ch in name.replace("|", ""))


def dos_classes(u: sp.Expr, v: sp.Expr, w: sp.Expr) -> dict[str, sp.Expr]:
    """DOS_B(u, v, w) (Defn E.64): T{S}_ii = u S_ii, T{S}_ij = w S_ij + v (S_ii + S_jj), as class values.

    w is split evenly between T_{12|12} and T_{12|21} (on symmetric matrices only their sum acts).
    """
    values = dict.fromkeys(CLASSES, sp.Integer(0))
    values.update({"11|11": u, "12|11": v, "12|12": w / 2, "12|21": w / 2})
    return values


def operator_matrix(values: Mapping[str, sp.Expr], batch_size: int) -> sp.Matrix:
    """The explicit B^2 x B^2 matrix T[(i,j), (k,l)] = T_{ij|kl} (row-major flattening)."""
    idx = [(i, j) for i in range(1, batch_size + 1) for j in range(1, batch_size + 1)]
    return sp.Matrix(len(idx), len(idx), lambda r, s: values[pattern_class(*idx[r], *idx[s])])


def symmetric_restriction(values: Mapping[str, sp.Expr], batch_size: int) -> sp.Matrix:
    """T restricted to H_B in the basis E_kk, E_kl + E_lk (k < l): a B(B+1)/2 square matrix.

    T maps H_B to itself (T{Lam}^T = T{Lam^T} by T_{ij|kl} = T_{ji|lk}); the coordinates of a symmetric image
    are its entries (k, l), k <= l.
    """
    pairs = [(k, l) for k in range(1, batch_size + 1) for l in range(k, batch_size + 1)]

    def entry(r: int, s: int) -> sp.Expr:
        (i, j), (k, l) = pairs[r], pairs[s]
        value = values[pattern_class(i, j, k, l)]
        return value if k == l else value + values[pattern_class(i, j, l, k)]

    return sp.Matrix(len(pairs), len(pairs), entry)


def centring_operator(batch_size: int) -> sp.Matrix:
    """G^{(x)2} on H_B in the basis of :func:`symmetric_restriction`: Lam -> G Lam G, exact rationals."""
    pairs = [(k, l) for k in range(1, batch_size + 1) for l in range(k, batch_size + 1)]
    g = sp.eye(batch_size) - sp.ones(batch_size, batch_size) / batch_size
    columns = []
    for k, l in pairs:
        basis = sp.zeros(batch_size, batch_size)
        basis[k - 1, l - 1] = basis[l - 1, k - 1] = 1
        image = g * basis * g
        columns.append([image[i - 1, j - 1] for i, j in pairs])
    return sp.Matrix(columns).T

