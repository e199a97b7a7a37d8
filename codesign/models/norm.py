"""Adjacency normalization used by the models (differentiable in the edge weights)."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp

from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency, structural_degree


def gcn_normalize(adj: CooAdjacency, edge_weight: Optional[jax.Array] = None) -> CooAdjacency:
    """``D^-1/2 (A + I) D^-1/2`` of Kipf & Welling (ICLR 2017, eq. 2), with self-loops of weight 1.

    Args:
      adj: `CooAdjacency` with E edges and no self-loops.
      edge_weight: float [E] or None; multiplies ``adj``'s own weights (an edge mask's gates),
        so a removed edge (weight 0) also leaves the degrees. Gradients flow into it.

    Returns:
      `CooAdjacency` with E + N entries (the N self-loops last) and normalized weights; a block
      pattern on ``adj`` is passed on (build it with ``self_loops=True``). Unweighted and ungated,
      with a `CsrPattern` built with self-loops, ``D`` is read from the pattern
      (`structural_degree`) instead of scatter-added every call.
    """
    w = jnp.ones(adj.senders.shape, jnp.float32) if adj.edge_weight is None else adj.edge_weight
    if edge_weight is not None:
        w = w * edge_weight
    senders, receivers = add_self_loops(adj.senders, adj.receivers, adj.n_nodes)
    w = jnp.concatenate([w, jnp.ones((adj.n_nodes,), w.dtype)])
    deg = structural_degree(adj, self_loops=True) if edge_weight is None else None
    if deg is None:  # weighted or gated: sum the weights
        deg = jax.ops.segment_sum(w, receivers, num_segments=adj.n_nodes)
    inv_sqrt = jax.lax.rsqrt(jnp.maximum(deg, 1e-12))
    return CooAdjacency(senders, receivers, w * inv_sqrt[senders] * inv_sqrt[receivers], adj.n_nodes, adj.pattern)
