"""Learnable sparsity: hard-concrete (L0) gates and the mask layers built on them."""

from codesign.sparsify.hard_concrete import (
    BETA,
    GAMMA,
    ZETA,
    GateLogit,
    HardConcreteGate,
    deterministic,
    prob_nonzero,
    sample,
)
from codesign.sparsify.masks import EdgeMask, FeatureMask

__all__ = [
    "BETA",
    "GAMMA",
    "ZETA",
    "GateLogit",
    "HardConcreteGate",
    "deterministic",
    "prob_nonzero",
    "sample",
    "EdgeMask",
    "FeatureMask",
]
