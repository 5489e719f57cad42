"""The premises that theory (:mod:`bnsym.meanfield`) and simulator (:mod:`bnsym.sim`) share.

activations (phi as a SymPy expression with numpy/torch callables), geometry (the centring G, BSB1
matrices, the G/L/M directions), derivation (named SymPy steps), validation (input checks that raise
ValueError), quadrature (Gauss-Jacobi rules), estimate (a route's value with its absolute error), batchnorm (the
one batch-norm forward, in torch). Nothing here imports the theory or the simulator.
"""
