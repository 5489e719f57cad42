"""bnsym: the mean field theory of batch normalization, derived in SymPy and checked by Monte Carlo.

Public API: :func:`fixed_point`, :func:`bn_kernel`, :func:`forward_eigenvalues`, :func:`alpha_transition`, :func:`parse_activation`, :class:`Activation`.
"""

from .activations import Activation, parse_activation
from .api import alpha_transition, bn_kernel, fixed_point, forward_eigenvalues
from .forward import FixedPoint

__version__ = "0.1.0"
__all__ = ["Activation", "FixedPoint", "alpha_transition", "bn_kernel", "fixed_point", "forward_eigenvalues", "parse_activation"]
