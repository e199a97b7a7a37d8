"""`CooAdjacency`: the edge list that aggregation kernels consume."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CooAdjacency:
    """A weighted sparse adjacency in coordinate form; rows are receivers.

    Fields:
      senders:     int32 [E]  column (source node) of each nonzero.
      receivers:   int32 [E]  row (target node) of each nonzero.
      edge_weight: float [E] or None  value of each nonzero (None means 1).
      n_nodes:     int (static)  N; the matrix is N x N.
      pattern:     `codesign.kernels.bsr.BlockPattern` or None: the BSR tiles these entries fall
                   into, which lets ``aggregate(..., impl="bsr_xla" | "pallas")`` run this edge
                   list on the block-sparse kernels (build with `with_block_pattern`).
    """

    senders: jax.Array
    receivers: jax.Array
    edge_weight: Optional[jax.Array] = None
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))
    pattern: Any = None

    @property
    def n_edges(self) -> int:
        return int(self.senders.shape[0])

    def with_weight(self, edge_weight: jax.Array) -> "CooAdjacency":
        """The same pattern with new values ``edge_weight[E]``."""
        return dataclasses.replace(self, edge_weight=edge_weight)

    def with_block_pattern(self, block_size: int, reorder: Optional[str] = "rcm",
                           self_loops: bool = False) -> "CooAdjacency":
        """This adjacency with a `BlockPattern` attached (host-side, once per graph). Pass
        ``self_loops=True`` for models that append self-loops (GCN's `gcn_normalize`)."""
        from codesign.kernels.bsr import BlockPattern
        return dataclasses.replace(self, pattern=BlockPattern.from_coo(self, block_size, reorder, self_loops))
