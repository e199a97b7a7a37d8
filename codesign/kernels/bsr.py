"""Block-sparse adjacency formats for tiled SpMM: BSR tiles and TC-GNN condensed row windows.

Both are built on the host (numpy/scipy) from a `CooAdjacency` after an optional node reordering
(`codesign.kernels.reorder`), and are JAX pytrees whose array fields may be passed through
``jax.jit``. Rows are receivers, so ``A @ X`` sums each node's incoming messages, as in
`segment_spmm`. Node ids inside both formats are *reordered* ids, padded up to a multiple of the
tile height: use ``permute_features`` / ``unpermute`` to go between original and reordered order.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from codesign.kernels.coo import CooAdjacency
from codesign.kernels.reorder import apply_permutation, inverse_permutation, metis_permutation, rcm_permutation

__all__ = ["BlockSparseAdjacency", "CondensedRowWindows", "condensed_spmm_reference", "format_report",
           "node_permutation", "VALID_BLOCK_SIZES"]

Array = jax.Array

VALID_BLOCK_SIZES = (8, 16, 32, 64, 128)
REORDERINGS = (None, "rcm", "metis")


def _validate_tile_dim(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or int(value) not in VALID_BLOCK_SIZES:
        raise ValueError(f"{name} must be a power of two in {VALID_BLOCK_SIZES}, got {value!r}")
    return int(value)


def _coo_numpy(adj: CooAdjacency) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
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


def _reordered_csr(adj: CooAdjacency, block_size: int, reorder, n_parts) -> tuple[sp.csr_matrix, np.ndarray, int]:
    """The reordered, padded ``[n_pad, n_pad]`` csr matrix (duplicates summed), perm and N."""
    s, r, w, n = _coo_numpy(adj)
    perm = node_permutation(s, r, n, reorder, block_size, n_parts)
    s2, r2 = apply_permutation(s, r, perm)
    n_pad = max(1, math.ceil(n / block_size)) * block_size
    csr = sp.csr_matrix((w, (r2, s2)), shape=(n_pad, n_pad))  # sums duplicates, keeps explicit zeros
    csr.sort_indices()
    return csr, perm, n


def _csr_to_tiles(csr: sp.csr_matrix, block_size: int):
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


def _permute_features(fmt, x: Array) -> Array:
    """``x[N, ...]`` in original order -> ``[n_pad, ...]`` in ``fmt``'s node order, zero-padded
    (``fmt``: any format with ``perm``, ``n_nodes``, ``n_pad``)."""
    if x.shape[0] != fmt.n_nodes:
        raise ValueError(f"permute_features: x must have n_nodes={fmt.n_nodes} rows, got shape {x.shape}")
    return jnp.pad(x[fmt.perm], [(0, fmt.n_pad - fmt.n_nodes)] + [(0, 0)] * (x.ndim - 1))


def _unpermute(fmt, y: Array) -> Array:
    """Inverse of `_permute_features`: ``y[n_pad, ...]`` -> original order ``[N, ...]``."""
    if y.shape[0] != fmt.n_pad:
        raise ValueError(f"unpermute: y must have n_pad={fmt.n_pad} rows, got shape {y.shape}")
    return y[fmt.inv_perm]


# --------------------------------------------------------------------------------------------
# BSR
# --------------------------------------------------------------------------------------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BlockSparseAdjacency:
    """Block compressed sparse rows (BSR) of a reordered, padded adjacency; rows are receivers.

    Shapes (``N`` nodes, ``B = block_size``, ``R = ceil(N / B)`` block rows, ``n_pad = R * B``,
    ``nnzb`` stored tiles). Tile ``k`` covers rows ``[row_of_tile[k] * B, +B)`` and columns
    ``[indices[k] * B, +B)`` of the reordered matrix; tiles are sorted by (block row, block column).

    Fields:
      indptr:      int32 [R + 1]  tiles of block row ``i`` are ``indptr[i]:indptr[i + 1]``.
      indices:     int32 [nnzb]  block column of each stored tile.
      data:        float32 [nnzb, B, B]  tile values (``data[k, a, b]`` = A[row a, col b] of tile k);
                   duplicate edges are summed; positions without an edge are 0.
      row_of_tile: int32 [nnzb]  block row of each stored tile (expanded ``indptr``).
      tile_nnz:    int32 [nnzb]  number of distinct graph nonzeros (edges) inside each tile.
      t_indptr:    int32 [R + 1]  the same for ``A^T``: transposed tiles of block row ``j`` of
                   ``A^T`` (= block column ``j`` of ``A``) are ``t_indptr[j]:t_indptr[j + 1]``.
      t_indices:   int32 [nnzb]  block column in ``A^T`` (= block row in ``A``) of transposed tile k.
      t_perm:      int32 [nnzb]  transposed tile ``k`` is ``data[t_perm[k]].T``.
      perm:        int32 [N]  new node ``i`` is original node ``perm[i]`` (identity if no reordering).
      inv_perm:    int32 [N]  ``inv_perm[perm[i]] = i``: new id of each original node.
      n_nodes:     int (static)  N.
      block_size:  int (static)  B, a power of two in {8, 16, 32, 64, 128}.

    Build with `from_coo` / `from_graph`; all array fields are pytree leaves, so the structure can
    be an argument of a jitted function (its shapes, not its values, are part of the trace).
    """

    indptr: Array
    indices: Array
    data: Array
    row_of_tile: Array
    tile_nnz: Array
    t_indptr: Array
    t_indices: Array
    t_perm: Array
    perm: Array
    inv_perm: Array
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))
    block_size: int = dataclasses.field(default=16, metadata=dict(static=True))

    # ---- construction -----------------------------------------------------------------------

    @classmethod
    def from_coo(cls, adj: CooAdjacency, block_size: int, reorder: Optional[str] = "rcm",
                 n_parts: Optional[int] = None) -> "BlockSparseAdjacency":
        """BSR tiles of ``adj`` (rows = receivers) after reordering its nodes.

        Args:
          adj: `CooAdjacency` with concrete (host-readable) arrays.
          block_size: B in {8, 16, 32, 64, 128} (the Pallas kernel needs B >= 16).
          reorder: None (keep node order), "rcm" (reverse Cuthill-McKee) or "metis" (needs pymetis).
          n_parts: METIS partitions (default ``ceil(N / (8 B))``); ignored otherwise.

        Raises:
          ValueError: naming ``block_size`` or ``reorder`` if invalid, or a bad ``adj`` field.
          ImportError: ``reorder="metis"`` without pymetis.
        """
        block_size = _validate_tile_dim(block_size, "block_size")
        csr, perm, n = _reordered_csr(adj, block_size, reorder, n_parts)
        indptr, indices, data, tile_nnz = _csr_to_tiles(csr, block_size)
        return cls._from_tiles(indptr, indices, data, tile_nnz, perm, n, block_size)

    @classmethod
    def from_graph(cls, graph, block_size: int, reorder: Optional[str] = "rcm",
                   n_parts: Optional[int] = None) -> "BlockSparseAdjacency":
        """`from_coo` on a `codesign.graph.Graph` (its ``edge_weight`` if set, else ones)."""
        adj = CooAdjacency(graph.senders, graph.receivers, graph.edge_weight, graph.n_nodes)
        return cls.from_coo(adj, block_size, reorder=reorder, n_parts=n_parts)

    @classmethod
    def _from_tiles(cls, indptr, indices, data, tile_nnz, perm, n_nodes, block_size) -> "BlockSparseAdjacency":
        """Derives ``row_of_tile`` and the transposed structure from a sorted forward structure."""
        indptr = np.asarray(indptr, np.int64)
        indices = np.asarray(indices, np.int64)
        n_rows = indptr.size - 1
        row_of_tile = np.repeat(np.arange(n_rows), np.diff(indptr))
        t_perm = np.lexsort((row_of_tile, indices))  # sort tiles by (block column, block row)
        t_indptr = np.concatenate([[0], np.cumsum(np.bincount(indices, minlength=n_rows))])
        perm = np.asarray(perm, np.int32)
        i32 = lambda a: jnp.asarray(a, jnp.int32)  # noqa: E731
        return cls(indptr=i32(indptr), indices=i32(indices), data=jnp.asarray(data, jnp.float32),
                   row_of_tile=i32(row_of_tile), tile_nnz=i32(tile_nnz), t_indptr=i32(t_indptr),
                   t_indices=i32(row_of_tile[t_perm]), t_perm=i32(t_perm), perm=i32(perm),
                   inv_perm=i32(inverse_permutation(perm)), n_nodes=int(n_nodes), block_size=int(block_size))

    # ---- shapes and statistics --------------------------------------------------------------

    @property
    def n_block_rows(self) -> int:
        """R = ceil(N / B)."""
        return int(self.indptr.shape[0]) - 1

    @property
    def n_pad(self) -> int:
        """R * B, the padded node count (rows of the features this format multiplies)."""
        return self.n_block_rows * self.block_size

    @property
    def nnz_blocks(self) -> int:
        """nnzb, the number of stored B x B tiles."""
        return int(self.indices.shape[0])

    @property
    def fill_ratio(self) -> float:
        """Graph nonzeros / stored tile entries = ``sum(tile_nnz) / (nnzb * B * B)`` (1 = dense tiles)."""
        stored = self.nnz_blocks * self.block_size ** 2
        return float(np.asarray(self.tile_nnz).sum()) / stored if stored else 0.0

    def tile_stats(self) -> dict:
        """Host-side tile statistics: nnz_blocks, nnz (graph nonzeros), fill_ratio, n_block_rows,
        max/mean tiles per block row, empty_block_rows, block_size."""
        per_row = np.diff(np.asarray(self.indptr))
        return dict(block_size=self.block_size, n_block_rows=self.n_block_rows, nnz_blocks=self.nnz_blocks,
                    nnz=int(np.asarray(self.tile_nnz).sum()), fill_ratio=self.fill_ratio,
                    max_tiles_per_row=int(per_row.max(initial=0)),
                    mean_tiles_per_row=float(per_row.mean()) if per_row.size else 0.0,
                    empty_block_rows=int((per_row == 0).sum()))

    # ---- conversions --------------------------------------------------------------------------

    def to_dense(self) -> Array:
        """The reordered, padded matrix ``float32[n_pad, n_pad]`` (tests and small graphs only)."""
        r, b = self.n_block_rows, self.block_size
        tiles = jnp.zeros((r, r, b, b), self.data.dtype).at[self.row_of_tile, self.indices].add(self.data)
        return tiles.transpose(0, 2, 1, 3).reshape(r * b, r * b)

    def transpose(self) -> "BlockSparseAdjacency":
        """``A^T`` in the same format (jittable: gathers and a per-tile transpose)."""
        return dataclasses.replace(
            self, indptr=self.t_indptr, indices=self.t_indices, data=self.data[self.t_perm].transpose(0, 2, 1),
            row_of_tile=self.indices[self.t_perm], tile_nnz=self.tile_nnz[self.t_perm],
            t_indptr=self.indptr, t_indices=self.indices, t_perm=jnp.argsort(self.t_perm).astype(jnp.int32))

    def with_data(self, data: Array) -> "BlockSparseAdjacency":
        """The same structure with new tile values ``data float[nnzb, B, B]``."""
        if data.shape != self.data.shape:
            raise ValueError(f"with_data: invalid {data.shape=} for nnzb={self.nnz_blocks}, B={self.block_size}")
        return dataclasses.replace(self, data=data)

    def with_tile_mask(self, keep) -> "BlockSparseAdjacency":
        """Drops the tiles where ``keep`` (bool [nnzb], concrete) is False; rebuilds the structure.

        This changes array shapes, so it runs on the host, outside ``jit``. To mask tiles inside a
        traced computation keep the structure and scale ``data`` instead (`with_data`).
        """
        keep = np.asarray(keep)
        if keep.shape != (self.nnz_blocks,) or keep.dtype != np.bool_:
            raise ValueError(f"with_tile_mask: keep must be bool [nnzb={self.nnz_blocks}], got "
                             f"{keep.dtype} {keep.shape}")
        rows = np.asarray(self.row_of_tile)[keep]
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=self.n_block_rows))])
        return self._from_tiles(indptr, np.asarray(self.indices)[keep], np.asarray(self.data)[keep],
                                np.asarray(self.tile_nnz)[keep], np.asarray(self.perm), self.n_nodes,
                                self.block_size)

    def permute_features(self, x: Array) -> Array:
        """Original-order ``x[N, ...]`` -> reordered, zero-padded ``[n_pad, ...]``."""
        return _permute_features(self, x)

    def unpermute(self, y: Array) -> Array:
        """Reordered ``y[n_pad, ...]`` -> original-order ``[N, ...]`` (padding rows dropped)."""
        return _unpermute(self, y)


# --------------------------------------------------------------------------------------------
# TC-GNN condensed row windows
# --------------------------------------------------------------------------------------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CondensedRowWindows:
    """TC-GNN "sparse graph translation": per window of B rows, the distinct neighbour columns are
    compacted (in sorted order) and cut into dense B x K tiles; X rows are gathered by column id.

    Source: Y. Wang, B. Feng, Z. Wang, G. Huang, Y. Ding, "TC-GNN: Bridging Sparse GNN Computation
    and Dense Tensor Cores on GPUs", USENIX ATC 2023 (Sec. 4.1, sparse graph translation).

    Shapes (``N`` nodes, ``B = window``, ``W = ceil(N / B)`` windows, ``n_pad = W * B``,
    ``T`` tiles, ``K = k``):
      win_ptr:     int32 [W + 1]  tiles of window ``w`` are ``win_ptr[w]:win_ptr[w + 1]``.
      tile_window: int32 [T]  window of each tile.
      tile_cols:   int32 [T, K]  reordered node id of each tile column (0 where ``col_mask`` is False).
      col_mask:    bool [T, K]  which tile columns are real (the last tile of a window may be partial).
      tile_data:   float32 [T, B, K]  ``tile_data[t, a, j] = A[win * B + a, tile_cols[t, j]]``.
      tile_nnz:    int32 [T]  distinct graph nonzeros inside each tile.
      perm, inv_perm: int32 [N]  node reordering as in `BlockSparseAdjacency`.
      n_nodes, window, k: int (static)  N, B, K.

    Slot windows, the structure of the transposed product ``A^T @ G`` (built by `from_coo`; None
    on instances built otherwise). A *slot* ``s = t * K + j`` is one real tile column; the slots
    are grouped by the window of the node they name (``tile_cols[t, j] // B``), sorted by node
    then slot, and cut into rows of ``K`` (``T2`` slot tiles):
      t_win_ptr:   int32 [W + 1]  slot tiles of node window ``v`` are ``t_win_ptr[v]:t_win_ptr[v + 1]``.
      t_slots:     int32 [T2, K]  slot id of each entry, -1 for padding.
      t_rows:      int32 [T2, K]  row of the entry's node inside its window (``node % B``), -1 for
                   padding.
    With ``P[s] = tile_data[t]^T @ G[window rows of t]`` (row ``j``), ``(A^T G)[node] = sum of P[s]
    over the slots naming the node``: a condensed product whose tiles are 0/1 selections
    (`codesign.kernels.pallas_condensed`). It covers every stored tile entry, not just the
    edges, so it stays exact for any ``tile_data`` (`with_data`).
    """

    win_ptr: Array
    tile_window: Array
    tile_cols: Array
    col_mask: Array
    tile_data: Array
    tile_nnz: Array
    perm: Array
    inv_perm: Array
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))
    window: int = dataclasses.field(default=16, metadata=dict(static=True))
    k: int = dataclasses.field(default=16, metadata=dict(static=True))
    t_win_ptr: Optional[Array] = None
    t_slots: Optional[Array] = None
    t_rows: Optional[Array] = None

    @classmethod
    def from_coo(cls, adj: CooAdjacency, window: int = 16, k: Optional[int] = None,
                 reorder: Optional[str] = None, n_parts: Optional[int] = None) -> "CondensedRowWindows":
        """Condensed row windows of ``adj`` (rows = receivers); ``k`` defaults to ``window``.

        Raises:
          ValueError: ``window`` / ``k`` not in {8, 16, 32, 64, 128} (named), bad ``reorder``.
        """
        window = _validate_tile_dim(window, "window")
        k = _validate_tile_dim(window if k is None else k, "k")
        csr, perm, n = _reordered_csr(adj, window, reorder, n_parts)
        coo = csr.tocoo()
        rows, cols, vals = coo.row.astype(np.int64), coo.col.astype(np.int64), coo.data.astype(np.float32)
        n_win = csr.shape[0] // window
        win = rows // window
        order = np.lexsort((rows, cols, win))  # by window, then column
        rows, cols, vals, win = rows[order], cols[order], vals[order], win[order]
        key = win * csr.shape[1] + cols
        new_pair = np.ones(key.size, bool)
        new_pair[1:] = key[1:] != key[:-1]
        pair_id = np.cumsum(new_pair) - 1  # global id of each distinct (window, column)
        cols_per_win = np.bincount(win[new_pair], minlength=n_win)
        first_pair = np.concatenate([[0], np.cumsum(cols_per_win)])[:-1]
        ci = pair_id - first_pair[win]  # compacted column index within the window
        win_ptr = np.concatenate([[0], np.cumsum(-(-cols_per_win // k))])
        tile, slot = win_ptr[win] + ci // k, ci % k
        n_tiles = int(win_ptr[-1])
        tile_cols = np.zeros((n_tiles, k), np.int32)
        col_mask = np.zeros((n_tiles, k), bool)
        tile_data = np.zeros((n_tiles, window, k), np.float32)
        tile_cols[tile, slot] = cols
        col_mask[tile, slot] = True
        np.add.at(tile_data, (tile, rows % window, slot), vals)
        tile_window = np.repeat(np.arange(n_win), np.diff(win_ptr))
        t_win_ptr, t_slots, t_rows = _slot_windows(tile_cols, col_mask, n_win, window, k)
        i32 = lambda a: jnp.asarray(a, jnp.int32)  # noqa: E731
        return cls(win_ptr=i32(win_ptr), tile_window=i32(tile_window), tile_cols=i32(tile_cols),
                   col_mask=jnp.asarray(col_mask), tile_data=jnp.asarray(tile_data),
                   tile_nnz=i32(np.bincount(tile, minlength=n_tiles)), perm=i32(perm),
                   inv_perm=i32(inverse_permutation(perm)), n_nodes=n, window=window, k=k,
                   t_win_ptr=i32(t_win_ptr), t_slots=i32(t_slots), t_rows=i32(t_rows))

    @property
    def n_windows(self) -> int:
        return int(self.win_ptr.shape[0]) - 1

    @property
    def n_pad(self) -> int:
        """W * B, the padded node count."""
        return self.n_windows * self.window

    @property
    def n_tiles(self) -> int:
        return int(self.tile_window.shape[0])

    @property
    def fill_ratio(self) -> float:
        """Graph nonzeros / stored tile entries = ``sum(tile_nnz) / (T * B * K)``."""
        stored = self.n_tiles * self.window * self.k
        return float(np.asarray(self.tile_nnz).sum()) / stored if stored else 0.0

    def to_dense(self) -> Array:
        """The reordered, padded matrix ``float32[n_pad, n_pad]`` (tests and small graphs only)."""
        rows = self.tile_window[:, None, None] * self.window + jnp.arange(self.window)[None, :, None]
        cols = jnp.broadcast_to(self.tile_cols[:, None, :], self.tile_data.shape)
        vals = jnp.where(self.col_mask[:, None, :], self.tile_data, 0)
        rows = jnp.broadcast_to(rows, self.tile_data.shape)
        return jnp.zeros((self.n_pad, self.n_pad), self.tile_data.dtype).at[rows, cols].add(vals)

    def with_data(self, tile_data: Array) -> "CondensedRowWindows":
        """The same structure with new tile values ``tile_data float[T, B, K]``."""
        if tile_data.shape != self.tile_data.shape:
            raise ValueError(f"with_data: invalid {tile_data.shape=} for T={self.n_tiles}, B={self.window}, "
                             f"K={self.k}")
        return dataclasses.replace(self, tile_data=tile_data)

    def permute_features(self, x: Array) -> Array:
        """Original-order ``x[N, ...]`` -> reordered, zero-padded ``[n_pad, ...]``."""
        return _permute_features(self, x)

    def unpermute(self, y: Array) -> Array:
        """Reordered ``y[n_pad, ...]`` -> original-order ``[N, ...]`` (padding rows dropped)."""
        return _unpermute(self, y)


def _slot_windows(tile_cols: np.ndarray, col_mask: np.ndarray, n_win: int, window: int,
                  k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(t_win_ptr, t_slots, t_rows)`` of `CondensedRowWindows` (see its docstring)."""
    slot = np.flatnonzero(col_mask.ravel())  # real slots, ascending
    node = tile_cols.ravel()[slot].astype(np.int64)
    order = np.argsort(node, kind="stable")  # by node, then slot: a fixed summation order
    slot, node = slot[order], node[order]
    win = node // window
    per_win = np.bincount(win, minlength=n_win)
    t_win_ptr = np.concatenate([[0], np.cumsum(-(-per_win // k))])
    pos = np.arange(slot.size) - np.concatenate([[0], np.cumsum(per_win)])[:-1][win]
    tile = t_win_ptr[win] + pos // k
    t_slots = np.full((int(t_win_ptr[-1]), k), -1, np.int64)
    t_rows = np.full((int(t_win_ptr[-1]), k), -1, np.int64)
    t_slots[tile, pos % k] = slot
    t_rows[tile, pos % k] = node % window
    return t_win_ptr, t_slots, t_rows


def condensed_spmm_reference(adj: CondensedRowWindows, x: Array) -> Array:
    """``A @ x`` through condensed row windows (plain XLA): gather X rows by ``tile_cols``, one
    ``[B, K] @ [K, F]`` product per tile, ``segment_sum`` over windows.

    Args:
      adj: `CondensedRowWindows`.
      x: float [n_pad, F] in reordered, padded node order.

    Returns:
      [n_pad, F] in x.dtype (f32 accumulation).
    """
    if x.ndim != 2 or x.shape[0] != adj.n_pad:
        raise ValueError(f"condensed_spmm_reference: x must be [n_pad={adj.n_pad}, F], got shape {x.shape}")
    xg = jnp.where(adj.col_mask[..., None], x[adj.tile_cols], 0)  # [T, K, F]
    part = jnp.einsum("tbk,tkf->tbf", adj.tile_data.astype(x.dtype), xg, preferred_element_type=jnp.float32)
    out = jax.ops.segment_sum(part, adj.tile_window, num_segments=adj.n_windows)
    return out.reshape(adj.n_pad, x.shape[1]).astype(x.dtype)


def format_report(adj: CooAdjacency, block_size: int, reorders=(None, "rcm")) -> list[dict]:
    """Tile counts and fill ratios of BSR and condensed row windows (``K = B``) for each reordering.

    Returns one dict per (format, reorder): format ("bsr" | "condensed"), reorder, block_size,
    tiles, stored_values (tiles * B * B), nnz (graph nonzeros) and fill_ratio (nnz / stored_values).
    Reorderings that need a missing optional package (pymetis) are skipped.
    """
    rows = []
    for reorder in reorders:
        try:
            bsr = BlockSparseAdjacency.from_coo(adj, block_size, reorder=reorder)
            crw = CondensedRowWindows.from_coo(adj, window=block_size, k=block_size, reorder=reorder)
        except ImportError:
            continue
        for name, tiles, fmt in (("bsr", bsr.nnz_blocks, bsr), ("condensed", crw.n_tiles, crw)):
            rows.append(dict(format=name, reorder=reorder, block_size=block_size, tiles=tiles,
                             stored_values=tiles * block_size ** 2, nnz=int(np.asarray(fmt.tile_nnz).sum()),
                             fill_ratio=fmt.fill_ratio))
    return rows


# --------------------------------------------------------------------------------------------
# Edge -> tile-slot map: run COO-valued models (learned edge weights) on BSR kernels
# --------------------------------------------------------------------------------------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BlockPattern:
    """A BSR structure plus the tile slot of every entry of a COO edge list, so that per-edge
    values computed inside a model (normalized, gated weights) become tile data by one
    differentiable scatter-add: ``data.flat[slots[j]] += w[j]``.

    Fields:
      bsr:   `BlockSparseAdjacency` whose ``data`` is ignored (structure only).
      slots: int32 [E]  flat index into ``data`` ([nnzb * B * B]) of COO entry ``j``.
    """

    bsr: BlockSparseAdjacency
    slots: Array

    @classmethod
    def from_coo(cls, adj: CooAdjacency, block_size: int, reorder: Optional[str] = "rcm",
                 self_loops: bool = False) -> "BlockPattern":
        """The pattern of ``adj``'s entries, followed by one self-loop per node if ``self_loops``
        (the order in which `codesign.models.gcn_normalize` appends them).

        Raises:
          ValueError: as `BlockSparseAdjacency.from_coo`.
        """
        s, r, _, n = _coo_numpy(adj)
        if self_loops:
            s = np.concatenate([s, np.arange(n)])
            r = np.concatenate([r, np.arange(n)])
        full = CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n)
        bsr = BlockSparseAdjacency.from_coo(full, block_size, reorder=reorder)
        b = bsr.block_size
        inv = np.asarray(bsr.inv_perm).astype(np.int64)
        rr, cc = inv[r], inv[s]
        n_block_cols = bsr.n_block_rows
        tile_key = np.asarray(bsr.row_of_tile, np.int64) * n_block_cols + np.asarray(bsr.indices, np.int64)
        k = np.searchsorted(tile_key, (rr // b) * n_block_cols + cc // b)  # tiles are sorted by (row, col)
        slots = k * b * b + (rr % b) * b + cc % b
        return cls(bsr, jnp.asarray(slots, jnp.int32))

    def tiles(self, values: Array) -> BlockSparseAdjacency:
        """The BSR matrix with per-entry ``values[E]`` summed into their slots (duplicates add)."""
        if values.shape != self.slots.shape:
            raise ValueError(f"BlockPattern.tiles: invalid {values.shape=} for {self.slots.shape[0]} entries "
                             f"(was the pattern built with the same edges and self-loop setting?)")
        b = self.bsr.block_size
        flat = jnp.zeros((self.bsr.nnz_blocks * b * b,), values.dtype).at[self.slots].add(values)
        return self.bsr.with_data(flat.reshape(self.bsr.nnz_blocks, b, b).astype(jnp.float32))
