"""Learnable sparsity: hard-concrete (L0) gates, the sparsifiers built on them, and pruning baselines.

Every mask subclasses the abstract base `Sparsifier` (``expected_density``, ``hard_mask``,
``hard_density``); edge sparsifiers its abstract `EdgeSparsifier` (``edge_gates(x, senders,
receivers, deterministic=None)``, ``expected_edge_density``, ``hard_edge_mask``,
``hard_edge_density``). Abstract or final: the concrete masks are ``@final`` (a new one
subclasses an abstract base, never a concrete mask).

* gates: `HardConcreteGate`, `sample`, `deterministic`, `prob_nonzero`, `GateLogit`.
* masks: `EdgeMask` (per edge), `BlockEdgeMask` (per B x B adjacency tile), `EdgeScorer` (MLP
  on endpoint features, PTDNet), `FeatureMask` (input features), `ChannelMask` (hidden channels).
* `learns_edge_weights`: whether a model's training step forms ``dA`` (the training-cost rule).
* baselines: `random_edge_removal`, `DropEdge`, UGS's `magnitude_prune`,
  `global_magnitude_prune`, `UGSSchedule`, `EdgeWeightMask`.

``GATE_PARAMS = nnx.Any(GateLogit, ScorerParam)`` selects the parameters of the gate optimizer
group (gate logits and scorer weights); ``nnx.All(nnx.Param, nnx.Not(GATE_PARAMS))`` the rest.
"""

from flax import nnx

from codesign.sparsify.baselines import (
    UGS_GRAPH_RATE,
    UGS_WEIGHT_RATE,
    DropEdge,
    EdgeWeightMask,
    MaskWeight,
    PruneMask,
    UGSSchedule,
    global_magnitude_prune,
    magnitude_prune,
    prune_count,
    random_edge_removal,
)
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
from codesign.sparsify.masks import (ChannelMask, EdgeMask, EdgeSparsifier, FeatureMask, LastAxisMask, Sparsifier,
                                     learns_edge_weights)
from codesign.sparsify.scorer import EdgeScorer, ScorerLogits, ScorerParam

GATE_PARAMS = nnx.Any(GateLogit, ScorerParam)
"""Filter of the gate optimizer group: `GateLogit` and `ScorerParam` variables."""

__all__ = [
    "learns_edge_weights",
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
    "EdgeScorer",
    "ScorerParam",
    "ScorerLogits",
    "FeatureMask",
    "LastAxisMask",
    "ChannelMask",
    "GATE_PARAMS",
    "random_edge_removal",
    "DropEdge",
    "prune_count",
    "magnitude_prune",
    "global_magnitude_prune",
    "UGSSchedule",
    "UGS_GRAPH_RATE",
    "UGS_WEIGHT_RATE",
    "EdgeWeightMask",
    "MaskWeight",
    "PruneMask",
]
