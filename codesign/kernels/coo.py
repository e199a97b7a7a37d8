"""`CooAdjacency`: the edge list that aggregation kernels consume."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CooAdjacency:
    """A weighted sparse adjacency in coordinate form; rows are receivers.

    Fields:
      senders:     int32 [E]  column (source node) of each nonzero.
      receivers:   int32 [E]  row (target node) of each nonzero.
      edge_weight: float [E] or None  value of each nonzero (None means 1).
      n_nodes:     int (static)  N; the matrix is N x N.
      pattern:     a `codesign.kernels.bsr.BlockPattern` (`codesign.kernels.with_block_pattern`) or a
                   `codesign.kernels.csr_cpu.CsrPattern` (`with_csr_pattern`) or None: extra
                   structure of the same entries that the BSR / scipy backends of `aggregate` use.

    Checked at construction (`validate_coo`): always (shapes and dtypes are static, so also under
    ``jit``) that ``senders`` / ``receivers`` are 1-D integer arrays of one length E,
    ``edge_weight`` is [E] and ``n_nodes`` a positive int; when the index values are concrete
    (outside ``jit``) also that every index is in ``[0, n_nodes)``. Not checked under ``jit``:
    index ranges and finiteness of ``edge_weight`` (the kernels would then give silent,
    backend-dependent results for out-of-range indices, so build adjacencies outside ``jit``).
    Self-loops are allowed (normalized adjacencies carry them).

    Raises:
      ValueError: naming the field (``CooAdjacency.senders``, ``.receivers``, ``.edge_weight``,
        ``.n_nodes``).
    """

    senders: jax.Array
    receivers: jax.Array
    edge_weight: Optional[jax.Array] = None
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))
    pattern: Any = None

    def __post_init__(self):
        validate_coo(self)

    @property
    def n_edges(self) -> int:
        return int(self.senders.shape[0])

    def with_weight(self, edge_weight: jax.Array) -> "CooAdjacency":
        """The same pattern with new values ``edge_weight[E]``."""
        return dataclasses.replace(self, edge_weight=edge_weight)



def _is_array(v) -> bool:
    return isinstance(v, (np.ndarray, jax.Array))


def _is_concrete(v) -> bool:
    return isinstance(v, np.ndarray) or (isinstance(v, jax.Array) and not isinstance(v, jax.core.Tracer))


def validate_coo(adj: CooAdjacency) -> None:
    """The checks of `CooAdjacency` (see its docstring). Pytree reconstruction with non-array
    leaves (``jax.tree`` utilities put placeholders there) is not checked.

    Raises:
      ValueError: naming the field.
    """
    s, r, w = adj.senders, adj.receivers, adj.edge_weight
    if not (_is_array(s) and _is_array(r) and (w is None or _is_array(w))):
        return
    n = adj.n_nodes
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"CooAdjacency.n_nodes: must be a positive int, got {n!r}")
    for name, v in (("senders", s), ("receivers", r)):
        if v.ndim != 1 or not jnp.issubdtype(v.dtype, jnp.integer) or v.dtype == jnp.bool_:
            raise ValueError(f"CooAdjacency.{name}: must be a 1-D integer array [E], got {v.dtype} {v.shape}")
    if r.shape != s.shape:
        raise ValueError(f"CooAdjacency.receivers: length {r.shape[0]} does not match senders length {s.shape[0]}")
    if w is not None and w.shape != s.shape:
        raise ValueError(f"CooAdjacency.edge_weight: must be [E={s.shape[0]}], got shape {w.shape}")
    for name, v in (("senders", s), ("receivers", r)):
        if v.size and _is_concrete(v):
            a = np.asarray(v)
            lo, hi = int(a.min()), int(a.max())
            if lo < 0 or hi >= n:
                raise ValueError(f"CooAdjacency.{name}: index out of range [0, {n}): min {lo}, max {hi}")
