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
      float [N, F], same dtype as ``x``. Sums of 16-bit floats (bf16, f16) accumulate in float32,
      as the Pallas kernels do: a bf16 running sum stops growing at 256 when adding ones, and
      XLA:GPU's bf16 scatter-add (compare-and-swap loops on contended rows) measured 8-400x slower
      than its f32 one on R-MAT graphs on an H100 (``results/gpu/hwmodel_validation_h100.json``).
    """
    acc = jnp.float32 if jnp.issubdtype(x.dtype, jnp.floating) and jnp.finfo(x.dtype).bits < 32 else x.dtype
    msgs = x[adj.senders].astype(acc)
    if adj.edge_weight is not None:
        msgs = msgs * adj.edge_weight[:, None].astype(acc)
    return jax.ops.segment_sum(msgs, adj.receivers, num_segments=adj.n_nodes).astype(x.dtype)


def dense_spmm(adj: CooAdjacency, x: jax.Array) -> jax.Array:
    """The same product through a dense ``A[N, N]`` (for tests and small graphs only)."""
    w = jnp.ones(adj.senders.shape, x.dtype) if adj.edge_weight is None else adj.edge_weight.astype(x.dtype)
    a = jnp.zeros((adj.n_nodes, adj.n_nodes), x.dtype).at[adj.receivers, adj.senders].add(w)
    return a @ x
