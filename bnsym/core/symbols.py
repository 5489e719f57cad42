"""Every SymPy symbol of the theory, declared once with its assumptions (in the manner of ``sympy.abc``).

Derivations, tests and notebooks import these, so an expression built in one module can be substituted,
compared or lambdified in another. A scratch symbol that never leaves one derivation may stay local.
"""

from __future__ import annotations

import sympy as sp

# Yang et al. 2019 ------------------------------------------------------------------------------------------

B = sp.Symbol("B", integer=True, positive=True)  # batch size; every derivation is for B >= 4
alpha = sp.Symbol("alpha", positive=True)  # degree of positive homogeneity, phi(r z) = r^alpha phi(z)
z = sp.Symbol("z", real=True)  # the argument of phi
c = sp.Symbol("c", real=True)  # the correlation argument of a kernel J_phi(c)
rho = sp.Symbol("rho", real=True)  # a correlation; at the BSB1 point rho = -1/(B-1), two coordinates of G
t = sp.Symbol("t", real=True)  # one coordinate of v uniform on the unit sphere S^(B-2); a path parameter
R = sp.Symbol("R", positive=True)  # the length of the projection of v onto a 2-plane
x1, x2 = sp.symbols("x_1 x_2", real=True)  # two coordinates of the batch-norm output x = sqrt(B) v
s = sp.Symbol("s", positive=True)  # Schwinger's parameter, |y|^(-2 alpha) = int s^(alpha-1) e^(-s|y|^2) ds / Gamma
u = sp.Symbol("u", positive=True)  # s rescaled, u = 2 mu s (Euler's Beta integral)
mu = sp.Symbol("mu", positive=True)  # Sigma^G = mu G for a BSB1 Sigma
mu_star = sp.Symbol("mu^*", positive=True)  # mu at the fixed point Sigma*
ell = sp.Symbol("ell", positive=True)  # an eigenvalue of a perturbation Lam of Sigma^G
g = sp.Symbol("g", positive=True)  # the diagonal (B-1)/B of G
epsilon = sp.Symbol("epsilon", nonnegative=True)  # the batch-norm stabiliser, n_eps(y) = sqrt(B) y/sqrt(|y|^2 + B eps)
kappa = sp.Symbol("kappa", positive=True)  # |y| / sqrt(|y|^2 + B eps): the radial shrink of the BN output
sigma_w2, sigma_b2 = sp.symbols("sigma_w^2 sigma_b^2", positive=True)  # weight and bias variances
v_star = sp.Symbol("v^*", positive=True)  # the coefficient that Thm 6 divides by, as printed

# J_phi(1), J_phi(rho) and J_phi'(rho), with J_phi(c) the normalised kernel of phi (Prop E.10)
J1, Jrho, dJrho = sp.symbols("J_phi(1) J_phi(rho) J_phi'(rho)", real=True)
# J_phi and its first two derivatives at c = 0 (the B -> oo limits, Prop F.34)
J0, dJ0, d2J0 = sp.symbols("J_phi(0) J_phi'(0) J_phi''(0)", real=True)
# phi = a rho_alpha(z) - b rho_alpha(-z), the general positive-homogeneous phi (Prop E.17)
phi_a, phi_b = sp.symbols("a b", real=True)

# moments of two BN coordinates that fix the forward Jacobian at the BSB1 point (R7)
S0, S2, P00, P20, P11 = sp.symbols("E[phi_1^2] E[phi_1^2*x_1^2] E[phi_1*phi_2] E[phi_1*phi_2*x_1^2] "
                                   "E[phi_1*phi_2*x_1*x_2]")
# ... and the backward one (Thm 7)
M11, M12, N11, N12 = sp.symbols("E[phi'_1^2] E[phi'_1*phi'_2] E[x_1^2*phi'_1^2] E[x_1*x_2*phi'_1*phi'_2]")

# Architectures (bnsym.arch): one neuron's batch vector x (and a second, independent part y) at examples a, b ----

x_a, x_b, y_a, y_b = sp.symbols("x_a x_b y_a y_b", real=True)
K_ab, K_aa, K_bb = sp.symbols("K_ab K_aa K_bb", real=True)  # the kernel E[x_a x_b]
m_a, m_b = sp.symbols("m_a m_b", real=True)  # the mean E[x_a]
c_a, c_b = sp.symbols("c_a c_b", real=True)  # the shift of a per-example affine normalisation
s_a, s_b = sp.symbols("s_a s_b", positive=True)  # its scale
L_ab, n_a, n_b = sp.symbols("L_ab n_a n_b", real=True)  # kernel and mean of the second part y
m_pop, v_pop = sp.symbols("mbar vbar", real=True)  # population mean and variance of a neuron (eval-mode BN)
p_const = sp.Symbol("p", positive=True)  # probability that a batch-norm input is not constant over the batch
a_pi, b_pi = sp.symbols("a_Pi b_Pi", real=True)  # a gradient covariance Pi = a_Pi I + b_Pi 11^T
rank_c = sp.Symbol("C", integer=True, positive=True)  # the rank of G Sigma G (linear batch norm, Lemma F.1)
sigma0, delta_k, delta_sum = sp.symbols("sigma_0 delta_k S_delta", real=True)  # an eigenvalue and its perturbation
lam_f = sp.Symbol("lambda_F", real=True)  # the Fourier frequency of the Fourier method (Thm 3)
p_f = sp.Symbol("p_F")  # its complex Laplace variable p = c + i lambda (a complex symbol)
zeta = sp.Symbol("zeta")  # 1 + 2 p mu / B at a BSB1 input (complex)
w_q = sp.Symbol("w", positive=True)  # a quadratic form (a, b) C^-1 (a, b)^T of the Fourier method

# Philipp 2021 (gradient scale coefficient, dilution) -------------------------------------------------------

r, k, r_d = sp.symbols("r k r_d", positive=True)  # GSC rate, dilution ratio, diluted rate
P_n = sp.Symbol("P_n", positive=True)  # prod_{b <= n} (1 + k_b^-2) over n composed blocks (Proposition 7)
E_phi = sp.Symbol(r"E[\phi]", real=True)  # Gaussian moments of phi, z ~ N(0, 1)
E_phi2, E_dphi2 = sp.symbols(r"E[\phi^2] E[\phi'^2]", positive=True)

# Daneshmand et al. 2020 (rank collapse) ---------------------------------------------------------------------

d = sp.Symbol("d", integer=True, positive=True)  # width: H is d features x N samples, M = H H^T / N is d x d
gamma = sp.Symbol("gamma", positive=True)  # strength of the residual branch, H + gamma W H
tau = sp.Symbol("tau", positive=True)  # threshold of the soft rank rank_tau (eq. 3)
n_dof = sp.Symbol("nu", positive=True)  # degrees of freedom of a chi-square variable
weight_bound = sp.Symbol("B_W", positive=True)  # weight entries in [-B_W, B_W] (Daneshmand Lemmas 5, 6; their B)
alpha_reg = sp.Symbol("alpha_reg", positive=True)  # the regularity constant alpha of Def. 3 (not Yang's alpha)
# the invariants of a d x d matrix M that Lemma 7's delta_F is written in
frob2, trace_m3, diag_m2_sq = sp.symbols("||M||_F^2 Tr(M^3) Tr(diag(M^2)^2)", positive=True)

# Bjorck et al. 2018 (products of random matrices, conditioning, SGD noise) ----------------------------------

M_factors = sp.Symbol("M", integer=True, positive=True)  # number of Gaussian factors in X = X_1 X_2 ... X_M
x_sq = sp.Symbol("x", positive=True)  # a squared singular value of X (an eigenvalue of X X^T)
varphi = sp.Symbol("varphi", positive=True)  # the angle that parametrises Theorem 1's density, 0 < varphi < pi/(M+1)
vartheta = sp.Symbol("vartheta", positive=True)  # distance to the hard edge, vartheta = pi/(M+1) - varphi
k_moment = k  # the order of a moment E[x^k] (the same positive symbol as the dilution ratio k)
N_width = sp.Symbol("N", integer=True, positive=True)  # the size of each N x N factor; a dataset size in eq. (2)
# kappa (declared above) also names a condition number sigma_max / sigma_min here
eta = sp.Symbol("eta", positive=True)  # a (gradient-descent) learning rate
n_batch = sp.Symbol("n", integer=True, positive=True)  # minibatch size |B| in eq. (2); summands in Table 1
m_align = sp.Symbol("m", real=True)  # mean-to-standard-deviation ratio of a gradient summand
