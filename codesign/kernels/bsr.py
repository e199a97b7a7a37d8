"""BSR tiles for tiled SpMM, and `BlockPattern`: the tile slot of every COO entry, so that COO-valued
models run on the BSR kernels (`with_block_pattern`).

Built on the host (numpy/scipy) from a `CooAdjacency` after an optional node reordering
(`codesign.kernels.reorder`); JAX pytrees whose array fields may be passed through ``jax.jit``.
Rows are receivers, so ``A @ X`` sums each node's incoming messages, as in `segment_spmm`. Node ids
inside the format are *reordered* ids, padded up to a multiple of the tile height: use
``permute_features`` / ``unpermute`` to go between original and reordered order.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from codesign.kernels.coo import CooAdjacency
from codesign.kernels.reorder import inverse_permutation
from codesign.kernels.tiling import (REORDERINGS, VALID_BLOCK_SIZES, coo_numpy, csr_to_tiles, node_permutation,
                                     permute_rows, reordered_csr, unpermute_rows, validate_tile_dim)

__all__ = ["BlockSparseAdjacency", "BlockPattern", "with_block_pattern", "node_permutation",
           "VALID_BLOCK_SIZES", "REORDERINGS"]

Array = jax.Array

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
        block_size = validate_tile_dim(block_size, "block_size")
        csr, perm, n = reordered_csr(adj, block_size, reorder, n_parts)
        indptr, indices, data, tile_nnz = csr_to_tiles(csr, block_size)
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
        return permute_rows(self, x)

    def unpermute(self, y: Array) -> Array:
        """Reordered ``y[n_pad, ...]`` -> original-order ``[N, ...]`` (padding rows dropped)."""
        return unpermute_rows(self, y)


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
        s, r, _, n = coo_numpy(adj)
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


def with_block_pattern(adj: CooAdjacency, block_size: int, reorder: Optional[str] = "rcm",
                       self_loops: bool = False) -> CooAdjacency:
    """``adj`` with a `BlockPattern` attached (host-side, once per graph), so that
    ``aggregate(adj, x, impl="bsr_xla" | "pallas")`` runs it on the block-sparse kernels. Pass
    ``self_loops=True`` for models that append self-loops (GCN's `gcn_normalize`)."""
    return dataclasses.replace(adj, pattern=BlockPattern.from_coo(adj, block_size, reorder, self_loops))
