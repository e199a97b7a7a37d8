"""`aggregate`: the one entry point through which every model aggregates messages."""

from __future__ import annotations

import jax

from codesign.kernels.coo import CooAdjacency
from codesign.kernels.segment import dense_spmm, segment_spmm

_IMPLS = {"segment": segment_spmm, "dense": dense_spmm}


def aggregate(adj: CooAdjacency, x: jax.Array, impl: str = "auto") -> jax.Array:
    """Sum-aggregation ``A @ x`` over the adjacency ``adj`` (rows = receivers).

    Args:
      adj: `CooAdjacency` over N nodes.
      x: float [N, F].
      impl: "auto" (currently "segment"), "segment" (XLA gather + segment_sum reference) or
        "dense" (dense N x N product; tests and tiny graphs only).

    Returns:
      float [N, F].

    Raises:
      ValueError: unknown ``impl``, or ``x`` whose first dimension is not N.
    """
    if x.ndim != 2 or x.shape[0] != adj.n_nodes:
        raise ValueError(f"aggregate: x must be [n_nodes={adj.n_nodes}, F], got shape {x.shape}")
    name = "segment" if impl == "auto" else impl
    if name not in _IMPLS:
        raise ValueError(f"aggregate: unknown impl {impl!r}; choose from {['auto', *_IMPLS]}")
    return _IMPLS[name](adj, x)
