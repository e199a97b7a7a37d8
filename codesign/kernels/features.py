"""`SparseFeatures`: a node-feature matrix stored by its nonzeros, and its product with a dense
weight matrix (`features_matmul`), for training a model whose input is mostly zeros.

Why: Cora's bag-of-words features are 1.27 % nonzero, and a GCN's training step spent most of
its time on the dense [2708, 1433] input: dropout's hashed mask over every element and the GEMM
``X @ W`` and its transpose, where the product over the nonzeros reads 1.27 % of it. Under
`jax.vmap` over seeds (`codesign.train.train_seeds`) the dense path was worse still (XLA:CPU's
batched dot and an [S, N, F] mask); results/bench_seeds.json has the timings.

The values are exact: an element-wise op that maps 0 to 0 (dropout, an unquantized input, a
column gate) gives the dense result's nonzeros, so the product equals the dense one up to the
order of the float additions. `codesign.models.HashDropout` draws its mask from each element's
flat index in the dense tensor (`flat_index`), so a seed drops the same features either way.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

__all__ = ["SparseFeatures", "sparse_features", "features_matmul"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SparseFeatures:
    """An [N, F] feature matrix by its nonzeros (COO, sorted by row, then column).

    Fields (nnz stored entries):
      values:  float [nnz]  the entries.
      rows:    int32 [nnz]  row (node) of each entry; non-decreasing.
      cols:    int32 [nnz]  column (feature) of each entry.
      n_rows:  int (static) N.
      n_cols:  int (static) F.

    ``shape``, ``ndim`` and ``dtype`` are those of the dense matrix, so the models' input checks
    read it as they read a dense ``x``. Build it with `sparse_features`; ``with_values`` gives the
    same structure with other entries (the result of an element-wise op that keeps zeros zero).
    """

    values: jax.Array
    rows: jax.Array
    cols: jax.Array
    n_rows: int = dataclasses.field(default=0, metadata=dict(static=True))
    n_cols: int = dataclasses.field(default=0, metadata=dict(static=True))

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n_rows, self.n_cols)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def nnz(self) -> int:
        return int(self.values.shape[-1])

    def with_values(self, values: jax.Array) -> "SparseFeatures":
        """The same structure with ``values`` (float [nnz]) as its entries."""
        return dataclasses.replace(self, values=values)

    def flat_index(self) -> jax.Array:
        """uint32 [nnz]: each entry's flat index ``row * F + col`` in the dense [N, F] matrix."""
        return self.rows.astype(jnp.uint32) * jnp.uint32(self.n_cols) + self.cols.astype(jnp.uint32)

    def todense(self) -> jax.Array:
        """float [N, F]: the dense matrix."""
        return jnp.zeros(self.shape, self.dtype).at[self.rows, self.cols].add(self.values)

    def __matmul__(self, w: jax.Array) -> jax.Array:
        return features_matmul(self, w)


def sparse_features(x) -> SparseFeatures:
    """`SparseFeatures` of a dense feature matrix (host-side NumPy, once per graph).

    Args:
      x: float [N, F] (NumPy or a concrete JAX array), N, F >= 1, fewer than 2^32 elements.

    Raises:
      ValueError: naming ``x`` if it is not a 2-D float matrix or has 2^32 or more elements.
    """
    a = np.asarray(x)
    if a.ndim != 2 or not np.issubdtype(a.dtype, np.floating) or 0 in a.shape:
        raise ValueError(f"sparse_features: x must be a non-empty float [N, F] matrix, got shape {a.shape}, "
                         f"dtype {a.dtype}")
    if a.size >= 2**32:
        raise ValueError(f"sparse_features: x has {a.size} elements; flat indices must fit uint32 (< 2^32)")
    rows, cols = np.nonzero(a)  # row-major order: sorted by row, then column
    return SparseFeatures(values=jnp.asarray(a[rows, cols]), rows=jnp.asarray(rows, jnp.int32),
                          cols=jnp.asarray(cols, jnp.int32),
                          n_rows=int(a.shape[0]), n_cols=int(a.shape[1]))


def _materialized(v: jax.Array) -> jax.Array:
    """``v`` [nnz], computed once into its own buffer: XLA:CPU otherwise fuses the entries'
    producer (dropout's integer hash) into the [nnz, K] product and recomputes it K times (more
    than half of Cora's first-layer product, K = 16). A scatter is never fused into its
    consumers; this one writes each entry to its own place. (``jax.lax.optimization_barrier`` is dropped before
    XLA:CPU's fusion.)"""
    index = jnp.arange(v.shape[-1])
    return jnp.zeros_like(v).at[index].set(v, indices_are_sorted=True, unique_indices=True)


def features_matmul(x: SparseFeatures, w: jax.Array) -> jax.Array:
    """``x @ w`` over ``x``'s nonzeros: ``out[i] = sum_{e: rows[e] = i} values[e] * w[cols[e]]``
    (gather + sorted ``segment_sum``); differentiable in ``x.values`` and ``w`` by JAX's own
    transposes (``dW``: a scatter-add of ``values[e] * dY[rows[e]]`` into W's rows).

    Args:
      x: `SparseFeatures` [N, F].
      w: float [F, K].

    Returns:
      float [N, K] in the promoted dtype of ``x.values`` and ``w``.

    Raises:
      ValueError: naming ``w`` if it is not [F, K].
    """
    if w.ndim != 2 or w.shape[0] != x.n_cols:
        raise ValueError(f"features_matmul: w must be [F={x.n_cols}, K], got shape {w.shape}")
    dt = jnp.result_type(x.values, w)
    msgs = _materialized(x.values.astype(dt))[:, None] * w.astype(dt)[x.cols]
    return jax.ops.segment_sum(msgs, x.rows, num_segments=x.n_rows, indices_are_sorted=True)
