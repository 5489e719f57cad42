"""Yang et al. (2019), a mean field theory of batch normalization: each module keeps a result's SymPy
derivation and its lambdified numeric kernel together.

sphere (the law of a batch-normed vector), kernels (arccosine kernels, V_phi), laplace (eq. 11), qmc,
ultrasymmetric (operators and their eigenspaces), forward (the BSB1 fixed point), forward_linear (forward
eigenvalues), backward (gradient explosion), gegenbauer (the Gegenbauer basis). Imports :mod:`bnsym.core`
only, never :mod:`bnsym.sim`.
"""
