"""bnsym: the mean field theory of batch normalization, derived in SymPy and checked by Monte Carlo.

Public API: :func:`fixed_point`, :func:`bn_kernel`, :func:`parse_activation`, :class:`Activation`.
"""

from . import dilution
from .activations import Activation, parse_activation
from .api import bn_kernel, fixed_point
from .forward import FixedPoint

__version__ = "0.1.0"
__all__ = ["Activation", "FixedPoint", "bn_kernel", "dilution", "fixed_point", "parse_activation"]
