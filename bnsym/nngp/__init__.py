"""The BN-NNGP and the BN-NTK of a batch-normalised network: the prior (``prior``), its blocks as tasks here or
on a Dask cluster (``tasks``), the tangent kernel (``ntk``) and the kernel-regime estimators
(``estimators``). The names of the prior and of the BN-NNGP's estimators are imported here on first use."""

from ..core.lazy import lazy_attributes

_PRIOR = ["MAX_DEPTH", "MAX_LAYER_MAPS", "MAX_NODES", "MAX_MEMORY", "MAX_ROWS", "check_layer_maps", "fill_batches",
          "input_covariance", "default_nodes", "first_layer_nodes", "block_prior", "task_blocks", "BatchedPrior",
          "BatchLayout", "batch_layout", "bn_nngp_priors", "batched_kernels", "bn_nngp_prior", "arccos_nngp_kernel"]
_ESTIMATORS = ["MAX_JITTER", "ARGMAX_NODES", "KernelConditioningWarning", "Posterior", "gp_posterior",
               "regression_targets", "target_units", "classification_targets", "check_distinct", "BatchOrderTags",
               "BatchedEstimator", "BatchNormNNGPRegressor", "BatchNormNNGPClassifier", "argmax_probabilities"]
__all__ = _PRIOR + _ESTIMATORS
__getattr__, __dir__ = lazy_attributes(__name__, {**dict.fromkeys(_PRIOR, "prior"),
                                                   **dict.fromkeys(_ESTIMATORS, "estimators")})
