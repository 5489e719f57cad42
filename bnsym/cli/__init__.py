"""The ``bnsym`` command (``command``, whose names are imported here on first use) and the answers of
``bnsym predict`` cached on disk (``cache``)."""

from ..core.lazy import lazy_attributes

__all__ = ["MAX_CLI_MOMENT", "arch_prediction", "main", "predict", "products_prediction"]
__getattr__, __dir__ = lazy_attributes(__name__, dict.fromkeys(__all__ + ["_cross_batch_predictions", "_parser"],
                                                               "command"))
