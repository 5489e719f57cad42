"""Philipp et al.: gradient scale coefficients, dilution and residual networks (``gsc``, whose names are
imported here on first use), and gradients that explode in deep networks that are shallow (``shallow``)."""

from ..core.lazy import lazy_attributes

__all__ = ["HERMITE_NODES", "MAX_DEPTH", "quadratic_mean", "qm_norm", "datapoint_gsc", "derive_qm_norm",
           "fit_explosion", "residual_tail_bound", "effective_depth", "derive_diluted_rate",
           "derive_first_order_diluted_rate", "diluted_rate", "first_order_diluted_rate", "undiluted_rate",
           "two_block_dilution", "derive_composed_dilution", "composed_dilution", "derive_normalised_gsc_rate",
           "gaussian_moments", "hermite_moments", "homogeneous_moments", "normalised_gsc_rate"]
__getattr__, __dir__ = lazy_attributes(__name__, dict.fromkeys(__all__, "gsc"))
