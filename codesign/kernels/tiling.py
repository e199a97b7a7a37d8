"""Host-side tiling shared by the block formats (`codesign.kernels.bsr`, `codesign.kernels.condensed`):
node reordering, the reordered padded CSR, CSR -> B x B tiles, and moving rows between original
and reordered, padded node order."""

from __future__ import annotations

import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from codesign.kernels.coo import CooAdjacency
from codesign.kernels.reorder import apply_permutation, metis_permutation, rcm_permutation

__all__ = ["VALID_BLOCK_SIZES", "REORDERINGS", "validate_tile_dim", "coo_numpy", "node_permutation",
           "reordered_csr", "csr_to_tiles", "permute_rows", "unpermute_rows"]

Array = jax.Array

VALID_BLOCK_SIZES = (8, 16, 32, 64, 128)
REORDERINGS = (None, "rcm", "metis")


def validate_tile_dim(value, name: str) -> int:
    """``value`` as an int, which must be one of `VALID_BLOCK_SIZES` (raises ValueError naming ``name``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) not in VALID_BLOCK_SIZES:
        raise ValueError(f"{name} must be a power of two in {VALID_BLOCK_SIZES}, got {value!r}")
    return int(value)


def coo_numpy(adj: CooAdjacency) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``(senders, receivers, weight float32, n_nodes)`` of ``adj`` on the host, validated."""
    if not isinstance(adj, CooAdjacency):
        raise ValueError(f"expected a CooAdjacency, got {type(adj).__name__}")
    n = int(adj.n_nodes)
    if n < 1:
        raise ValueError(f"CooAdjacency.n_nodes must be >= 1, got {n}")
    s, r = np.asarray(adj.senders, np.int64), np.asarray(adj.receivers, np.int64)
    if s.ndim != 1 or s.shape != r.shape:
        raise ValueError(f"CooAdjacency: invalid {s.shape=} / {r.shape=} (need equal 1-D [E])")
    if s.size and (min(s.min(), r.min()) < 0 or max(s.max(), r.max()) >= n):
        raise ValueError(f"CooAdjacency.senders/receivers: indices out of range [0, {n})")
    w = np.ones(s.shape, np.float32) if adj.edge_weight is None else np.asarray(adj.edge_weight, np.float32)
    if w.shape != s.shape:
        raise ValueError(f"CooAdjacency.edge_weight: invalid {w.shape=} for {s.shape[0]} edges")
    return s, r, w, n


def node_permutation(senders, receivers, n_nodes: int, reorder: Optional[str], block_size: int,
                     n_parts: Optional[int] = None) -> np.ndarray:
    """``perm int32[N]`` for ``reorder`` in {None (identity), "rcm", "metis"}.

    For "metis" the default ``n_parts`` is ``ceil(N / (8 * block_size))`` (parts of ~8 block rows).
    """
    if reorder not in REORDERINGS:
        raise ValueError(f"reorder must be one of {REORDERINGS}, got {reorder!r}")
    if reorder is None:
        return np.arange(n_nodes, dtype=np.int32)
    if reorder == "rcm":
        return rcm_permutation(senders, receivers, n_nodes)
    parts = n_parts if n_parts is not None else max(1, math.ceil(n_nodes / (8 * block_size)))
    return metis_permutation(senders, receivers, n_nodes, parts)


def reordered_csr(adj: CooAdjacency, block_size: int, reorder, n_parts) -> tuple[sp.csr_matrix, np.ndarray, int]:
    """The reordered, padded ``[n_pad, n_pad]`` csr matrix (duplicates summed), perm and N."""
    s, r, w, n = coo_numpy(adj)
    perm = node_permutation(s, r, n, reorder, block_size, n_parts)
    s2, r2 = apply_permutation(s, r, perm)
    n_pad = max(1, math.ceil(n / block_size)) * block_size
    csr = sp.csr_matrix((w, (r2, s2)), shape=(n_pad, n_pad))  # sums duplicates, keeps explicit zeros
    csr.sort_indices()
    return csr, perm, n


def csr_to_tiles(csr: sp.csr_matrix, block_size: int):
    """BSR tiles of a square ``[n_pad, n_pad]`` csr matrix (sorted, no duplicates; n_pad a multiple
    of B): ``(indptr int64[R+1], indices int64[nnzb], data float32[nnzb, B, B], tile_nnz int32[nnzb])``,
    tiles sorted by (block row, block column), explicit zeros counted in ``tile_nnz``.

    Written with int64 NumPy instead of ``scipy.sparse.bsr_matrix``: SciPy's csr -> bsr conversion
    indexes the tile values with 32-bit integers and crashes (segmentation fault, SciPy 1.17.1) once
    ``nnzb * B * B`` passes 2^31, e.g. the 8.6M tiles of a 2^20-node R-MAT graph at B = 16.
    """
    b = int(block_size)
    n_pad = csr.shape[0]
    n_block = n_pad // b
    rows = np.repeat(np.arange(n_pad, dtype=np.int64), np.diff(csr.indptr))
    cols = csr.indices.astype(np.int64)
    keys = (rows // b) * n_block + cols // b
    tile_keys, tile_of_entry, tile_nnz = np.unique(keys, return_inverse=True, return_counts=True)
    data = np.zeros((tile_keys.size, b, b), np.float32)
    data[tile_of_entry, rows % b, cols % b] = csr.data
    block_rows = tile_keys // n_block
    indptr = np.searchsorted(block_rows, np.arange(n_block + 1), side="left").astype(np.int64)
    return indptr, tile_keys % n_block, data, tile_nnz.astype(np.int32)


def permute_rows(fmt, x: Array) -> Array:
    """``x[N, ...]`` in original order -> ``[n_pad, ...]`` in ``fmt``'s node order, zero-padded
    (``fmt``: any format with ``perm``, ``n_nodes``, ``n_pad``)."""
    if x.shape[0] != fmt.n_nodes:
        raise ValueError(f"permute_features: x must have n_nodes={fmt.n_nodes} rows, got shape {x.shape}")
    return jnp.pad(x[fmt.perm], [(0, fmt.n_pad - fmt.n_nodes)] + [(0, 0)] * (x.ndim - 1))


def unpermute_rows(fmt, y: Array) -> Array:
    """Inverse of `permute_rows`: ``y[n_pad, ...]`` -> original order ``[N, ...]``."""
    if y.shape[0] != fmt.n_pad:
        raise ValueError(f"unpermute: y must have n_pad={fmt.n_pad} rows, got shape {y.shape}")
    return y[fmt.inv_perm]
