"""Reference aggregation: gather by senders, ``segment_sum`` by receivers (jraph style).

This is the plain-XLA reference every other backend is tested against.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from codesign.kernels.coo import CooAdjacency


def segment_spmm(adj: CooAdjacency, x: jax.Array) -> jax.Array:
    """Sparse-dense product ``out[i] = sum_{j: receivers[j] = i} w_j * x[senders[j]]``.

    Args:
      adj: `CooAdjacency` with E edges over N nodes.
      x: float [N, F] node features.

    Returns:
      float [N, F], same dtype as ``x`` (accumulation in that dtype).
    """
    msgs = x[adj.senders]
    if adj.edge_weight is not None:
        msgs = msgs * adj.edge_weight[:, None].astype(x.dtype)
    return jax.ops.segment_sum(msgs, adj.receivers, num_segments=adj.n_nodes)


def dense_spmm(adj: CooAdjacency, x: jax.Array) -> jax.Array:
    """The same product through a dense ``A[N, N]`` (for tests and small graphs only)."""
    w = jnp.ones(adj.senders.shape, x.dtype) if adj.edge_weight is None else adj.edge_weight.astype(x.dtype)
    a = jnp.zeros((adj.n_nodes, adj.n_nodes), x.dtype).at[adj.receivers, adj.senders].add(w)
    return a @ x
