"""TC-GNN condensed row windows (Y. Wang et al., "TC-GNN", USENIX ATC 2023): per window of B rows,
the distinct neighbour columns compacted into dense B x K tiles, and its plain-JAX SpMM reference
(`condensed_spmm_reference`; the Pallas kernel is `codesign.kernels.pallas_condensed`)."""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from codesign.kernels.coo import CooAdjacency
from codesign.kernels.reorder import inverse_permutation
from codesign.kernels.tiling import permute_rows, reordered_csr, unpermute_rows, validate_tile_dim

__all__ = ["CondensedRowWindows", "condensed_spmm_reference"]

Array = jax.Array

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
        window = validate_tile_dim(window, "window")
        k = validate_tile_dim(window if k is None else k, "k")
        csr, perm, n = reordered_csr(adj, window, reorder, n_parts)
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
        return permute_rows(self, x)

    def unpermute(self, y: Array) -> Array:
        """Reordered ``y[n_pad, ...]`` -> original-order ``[N, ...]`` (padding rows dropped)."""
        return unpermute_rows(self, y)


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
