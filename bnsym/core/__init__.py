"""The premises that every paper's theory (:mod:`bnsym.meanfield`, :mod:`bnsym.rank`, ...) and the simulator
(:mod:`bnsym.sim`) share.

activations (phi as a SymPy expression with numpy/torch callables), symbols (every SymPy symbol), geometry (the
centring G, BSB1 matrices, the G/L/M directions), derivation (named SymPy steps), validation (input checks that
raise ValueError), quadrature (Gauss-Jacobi rules), estimate (a route's value with its absolute error), progress
(progress bars), device (the device, TF32 off, random streams), statistics (mean_and_se as an Estimate,
mc_tolerance, extrapolation to infinite width), digits (the one split of scikit-learn's digits), batchnorm (the
one batch-norm forward, in torch). Nothing here imports anything else of bnsym.
"""
