"""Learnable sparsity: hard-concrete (L0) gates and the mask layers built on them.

Every mask implements `Sparsifier` (``expected_density``, ``hard_mask``, ``hard_density``); edge
masks also `EdgeSparsifier` (``edge_gates(x, senders, receivers, deterministic=None)``,
``expected_edge_density``, ``hard_edge_mask``, ``hard_edge_density``).
"""

from codesign.sparsify.block import BlockEdgeMask
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
from codesign.sparsify.masks import ChannelMask, EdgeMask, EdgeSparsifier, FeatureMask, Sparsifier

__all__ = [
    "BETA",
    "GAMMA",
    "ZETA",
    "GateLogit",
    "HardConcreteGate",
    "deterministic",
    "prob_nonzero",
    "sample",
    "Sparsifier",
    "EdgeSparsifier",
    "EdgeMask",
    "BlockEdgeMask",
    "FeatureMask",
    "ChannelMask",
]
