"""CSR edge-chunk SpMM ``Y = diag(r) A diag(c) X`` as Pallas kernels (Triton lowering), with a custom VJP.

The natural-graph aggregation kernel of issue 19: no tiles, so a program moves only the bytes a
CSR gather must move (row pointers, column ids, the gathered X rows, Y once), against ~2,900
bytes per edge of 16 x 16 BSR tiles on an RCM-ordered R-MAT graph. Design after GE-SpMM's
row-split CSR (Huang et al., SC'20), with work items bounded in edges on the host so a hub row
never serializes one program (the nonzero-split idea of merge-based SpMV: Merrill & Garland,
SC'16; here a plain split of the heavy rows, not a merge path).

Layout (STYLE 5: kernel, the function building its ``pallas_call``, a public ``custom_vjp``
entry and the plain-JAX reference side by side; tile sizes in `CsrBlockSizes`):

* Host side, once per graph (`csr_chunks`): the entries sorted by receiver (CSR of A and of
  A^T), and the *work items* of each: a window of up to ``max_item_rows`` consecutive light rows
  (fewer than ``2 * max_item_edges`` edges), or one bounded segment (``max_item_edges`` edges)
  of a heavy row. A heavy row's segments write f32 partial sums to their own *slots*; a second,
  deterministic pass (the same kernel over the slot CSR "split row -> its slots") adds them and
  the result is scattered into Y with unique indices: no atomics anywhere.
* `_spmm_kernel`: one program per work item. For each of its rows, for each chunk of
  ``chunk`` edges: one vector load of the column ids (and of the edge values, if any), one
  gathered ``[chunk, block_f]`` tile of X per feature tile (all F looped inside the program, the
  ids loaded once), f32 multiply by the edge weight and reduction over the chunk. The per-row
  f32 sums are scaled by ``row_scale[row]`` and stored once. With ``rows_per_step`` > 1 a window
  is walked that many rows at a time (``[rows, chunk]`` id tiles, ``[rows, chunk, block_f]``
  gathers, uneven rows masked).
* `_sddmm_kernel`: the edge-value gradient ``dv[e] = r[i] c[j] <dY[i], X[j]>`` over the same
  work items and chunks (each edge belongs to exactly one item, so the masked stores never
  overlap).
* `csr_chunk_spmm` (differentiable in ``x`` and ``values``; ``dX = diag(c) A^T diag(r) dY``
  is the forward kernel on the transposed CSR), `csr_chunk_spmm_int8` (int8 X with per-row
  scales dequantized in the kernel, f32 accumulation; forward only), and the plain-JAX
  references `csr_chunk_spmm_reference` / `csr_chunk_spmm_int8_reference` (gather +
  ``segment_sum``).

GCN normalization folded: ``D^-1/2 A D^-1/2 X`` is ``row_scale = col_scale = deg^-1/2`` with no
``values`` (`gcn_scales`): no per-edge value is loaded, only a node vector gathered by the same
column ids (N x 4 bytes: 4 MiB at 2^20 nodes, small beside an H100's 50 MB L2).

Triton specifics live in three helpers (`_masked_load`, `_masked_store`, `_compiler_params`):
JAX 0.11 deprecates the Pallas Triton backend in favour of Mosaic GPU; the kernels use only
scalar ref reads, ``pl.ds`` slices, integer-array (gather) indexers, ``lax.fori_loop`` and
``pl.when`` besides those helpers, so a port is confined to this file.

Limits: int32 offsets, so ``E + chunk < 2^31`` (checked; an array past 4 GiB of offsets is not
supported: an R-MAT scale-20 graph has 1.5e7 edges, 1/140 of the limit). Scales are treated as
constants of the graph: no gradient flows into ``row_scale`` / ``col_scale`` (they are
``stop_gradient``-ed; learned per-edge weights go in ``values``).

Interpret mode: ``interpret=None`` runs the Pallas interpreter unless ``jax.default_backend() ==
"gpu"`` (`codesign.kernels.pallas_spmm.resolve_interpret`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from codesign.kernels.config import CsrBlockSizes
from codesign.kernels.coo import CooAdjacency
from codesign.kernels.pallas_spmm import resolve_interpret

__all__ = ["CsrChunks", "csr_chunks", "with_csr_chunks", "csr_chunk_spmm", "csr_chunk_spmm_int8",
           "csr_chunk_spmm_reference", "csr_chunk_spmm_int8_reference", "csr_chunk_aggregate", "gcn_scales",
           "work_item_stats"]

Array = jax.Array

_FEATURE_DTYPES = (jnp.float32, jnp.bfloat16)
_INT32_LIMIT = 2 ** 31 - 1
# columns of the work-item table: first row, end row, first edge, end edge, slot (-1: rows go to Y)
_ROW_LO, _ROW_HI, _EDGE_LO, _EDGE_HI, _SLOT = range(5)


# --------------------------------------------------------------------------------------------
# Triton-specific pieces (the only ones; a Mosaic GPU port replaces these three)
# --------------------------------------------------------------------------------------------

def _masked_load(ref, mask, other=0):
    """``ref[...]`` where ``mask``, ``other`` elsewhere; masked-off addresses are not read."""
    return plgpu.load(ref, mask=mask, other=other)


def _masked_store(ref, value, mask):
    """``ref[...] = value`` where ``mask``."""
    plgpu.store(ref, value, mask=mask)


def _compiler_params(cfg: "_Config"):
    return plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages)


# --------------------------------------------------------------------------------------------
# Host-side structure
# --------------------------------------------------------------------------------------------

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CsrPlan:
    """One CSR matrix with its work items (all int32; built on the host by `csr_chunks`).

    Fields (R rows, E entries, C = chunk, K work items, S split rows, P slots, padded):
      indptr:    [R + 1]    row pointers.
      indices:   [E + C]    column of each entry in row order (C zeros of padding, so a chunk read
                            past the end stays inside the array in interpret mode).
      items:     [K, 5]     work items: first row, end row, first edge, end edge, slot (-1: the
                            rows' sums go to Y; >= 0: a heavy row's segment, its sum to slot).
      split_rows:[S]        the heavy rows, in slot order (padding: R, dropped by the scatter).
      c_indptr:  [S + 1]    slot ranges of the split rows (CSR of "split row -> slots").
      c_indices: [P + C]    0..P-1 (the slot CSR's column ids) and C zeros.
      c_items:   [Kc, 5]    work items of the slot CSR (never split).
    """

    indptr: Array
    indices: Array
    items: Array
    split_rows: Array
    c_indptr: Array
    c_indices: Array
    c_items: Array

    @property
    def n_rows(self) -> int:
        return int(self.indptr.shape[0]) - 1

    @property
    def n_split_rows(self) -> int:
        return int(self.split_rows.shape[0])


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CsrChunks:
    """A square sparse adjacency prepared for the Pallas CSR edge-chunk kernels.

    Fields (N nodes, E entries, C = ``sizes.chunk``):
      n_nodes:  int (static) N.
      sizes:    `CsrBlockSizes` (static) the tiling the work items were built for.
      n_slots:  int (static) slots of the forward plan's split rows (padded).
      t_n_slots: int (static) the same for the transposed plan.
      fwd:      `CsrPlan` of A (rows = receivers, columns = senders).
      tr:       `CsrPlan` of A^T (rows = senders, columns = receivers).
      perm:     int32 [E + C]  original (COO) edge index of each CSR entry of A (C zeros of padding).
      inv_perm: int32 [E]      CSR position of each COO edge (``perm``'s inverse).
      t_perm:   int32 [E + C]  original (COO) edge index of each CSR entry of A^T (C zeros of padding).
      row_degree: int32 [N]    entries per row of A (receiver in-degree, multiplicity counted).

    Build with `csr_chunks` (outside ``jit``: the partition is computed with NumPy).
    """

    fwd: CsrPlan
    tr: CsrPlan
    perm: Array
    inv_perm: Array
    t_perm: Array
    row_degree: Array
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))
    sizes: CsrBlockSizes = dataclasses.field(default=CsrBlockSizes(), metadata=dict(static=True))
    n_slots: int = dataclasses.field(default=0, metadata=dict(static=True))
    t_n_slots: int = dataclasses.field(default=0, metadata=dict(static=True))

    @property
    def n_edges(self) -> int:
        return int(self.inv_perm.shape[0])


def _round_up(n: int, m: int) -> int:
    return -(-n // m) * m


def _work_items(indptr: np.ndarray, sizes: CsrBlockSizes, split: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Work items of one CSR (see `CsrPlan.items`), the heavy rows and their segment counts.

    A window starts at every row whose first edge crosses a multiple of ``max_item_edges``, every
    ``max_item_rows`` rows, and around every heavy row (> ``max_item_edges`` edges, split into
    ``ceil(deg / max_item_edges)`` segments when ``split``). Heavy segments come first (longest
    work first). Items are padded with empty ones to a multiple of ``items_multiple``.
    """
    n = indptr.shape[0] - 1
    b, rows_per = sizes.max_item_edges, sizes.max_item_rows
    deg = np.diff(indptr)
    heavy = deg > b if split else np.zeros(n, bool)
    h_rows = np.flatnonzero(heavy)
    n_seg = -(-deg[h_rows] // b)
    seg_row = np.repeat(h_rows, n_seg)
    seg_idx = np.arange(seg_row.size) - np.repeat(np.cumsum(n_seg) - n_seg, n_seg)
    seg_lo = indptr[seg_row] + seg_idx * b
    seg_hi = np.minimum(seg_lo + b, indptr[seg_row + 1])
    segs = np.stack([seg_row, seg_row + 1, seg_lo, seg_hi, np.arange(seg_row.size)], 1)
    r = np.arange(n)
    start = indptr[:-1]
    new = np.ones(n, bool)
    new[1:] = heavy[1:] | heavy[:-1] | (start[1:] // b != start[:-1] // b) | (r[1:] // rows_per != r[:-1] // rows_per)
    firsts = np.flatnonzero(new)
    ends = np.append(firsts[1:], n)
    light = ~heavy[firsts]
    w_lo, w_hi = firsts[light], ends[light]
    wins = np.stack([w_lo, w_hi, indptr[w_lo], indptr[w_hi], np.full(w_lo.size, -1)], 1)
    items = np.concatenate([segs.reshape(-1, 5), wins.reshape(-1, 5)]).astype(np.int64)
    pad = _round_up(max(items.shape[0], 1), sizes.items_multiple) - items.shape[0]
    items = np.concatenate([items, np.tile(np.array([[0, 0, 0, 0, -1]]), (pad, 1))])
    return items, h_rows, n_seg


def _plan(indptr: np.ndarray, indices: np.ndarray, sizes: CsrBlockSizes) -> tuple[CsrPlan, int]:
    """The `CsrPlan` of one CSR and its (padded) slot count."""
    n, c, m = indptr.shape[0] - 1, sizes.chunk, sizes.items_multiple
    items, h_rows, n_seg = _work_items(indptr, sizes, split=True)
    n_split = _round_up(h_rows.size, m) if h_rows.size else 0
    n_slots = _round_up(int(n_seg.sum()), m) if h_rows.size else 0
    split_rows = np.full(n_split, n, np.int64)
    split_rows[:h_rows.size] = h_rows
    c_indptr = np.full(n_split + 1, int(n_seg.sum()), np.int64)
    c_indptr[:h_rows.size + 1] = np.concatenate([[0], np.cumsum(n_seg)])
    c_items = _work_items(c_indptr, sizes, split=False)[0] if n_split else np.zeros((0, 5), np.int64)
    i32 = lambda a: jnp.asarray(np.asarray(a, np.int32))  # noqa: E731
    plan = CsrPlan(indptr=i32(indptr), indices=i32(np.concatenate([indices, np.zeros(c, np.int64)])),
                   items=i32(items), split_rows=i32(split_rows), c_indptr=i32(c_indptr),
                   c_indices=i32(np.concatenate([np.arange(n_slots), np.zeros(c, np.int64)])),
                   c_items=i32(c_items))
    return plan, n_slots


def _sort_order(key: np.ndarray) -> np.ndarray:
    """Stable argsort of int64 ``key``; the identity without sorting when it is already sorted."""
    if key.size < 2 or np.all(key[1:] >= key[:-1]):
        return np.arange(key.size)
    return np.argsort(key, kind="stable")


def csr_chunks(adj: CooAdjacency, sizes: CsrBlockSizes = CsrBlockSizes()) -> CsrChunks:
    """Sorts ``adj``'s entries by receiver (and by sender for A^T) and partitions both CSRs into
    work items (host-side, NumPy: 8.8-12 s for the 1.5e7 edges of R-MAT scale 20 on this project's
    2-core CPU under load, mostly the stable argsort of A^T's order; measured 2026-11-25).

    Args:
      adj: `CooAdjacency` with concrete (not traced) ``senders`` / ``receivers``; its
        ``edge_weight`` is not stored (values are passed per call, in COO order).
      sizes: `CsrBlockSizes`.

    Returns:
      `CsrChunks`.

    Raises:
      TypeError: ``adj`` is not a `CooAdjacency`, ``sizes`` not a `CsrBlockSizes`, or the index
        arrays are traced.
      ValueError: ``E + chunk`` does not fit int32 offsets.
    """
    if not isinstance(adj, CooAdjacency):
        raise TypeError(f"csr_chunks: adj must be a CooAdjacency, got {type(adj).__name__}")
    if not isinstance(sizes, CsrBlockSizes):
        raise TypeError(f"csr_chunks: sizes must be a CsrBlockSizes, got {type(sizes).__name__}")
    if isinstance(adj.senders, jax.core.Tracer) or isinstance(adj.receivers, jax.core.Tracer):
        raise TypeError("csr_chunks: adj.senders / adj.receivers must be concrete (build the plan outside jit)")
    n, e = adj.n_nodes, adj.n_edges
    if e + sizes.chunk > _INT32_LIMIT:
        raise ValueError(f"csr_chunks: adj has E={e} edges; int32 offsets need E + chunk < 2^31")
    s = np.asarray(adj.senders, np.int64)
    r = np.asarray(adj.receivers, np.int64)
    perm = _sort_order(r * n + s)  # CSR order of A: by receiver, then sender
    t_perm = _sort_order(s * n + r)  # CSR order of A^T
    inv_perm = np.empty(e, np.int64)
    inv_perm[perm] = np.arange(e)
    row_degree = np.bincount(r, minlength=n)
    indptr = np.concatenate([[0], np.cumsum(row_degree)])
    t_indptr = np.concatenate([[0], np.cumsum(np.bincount(s, minlength=n))])
    fwd, n_slots = _plan(indptr, s[perm], sizes)
    tr, t_n_slots = _plan(t_indptr, r[t_perm], sizes)
    pad = np.zeros(sizes.chunk, np.int64)
    i32 = lambda a: jnp.asarray(np.asarray(a, np.int32))  # noqa: E731
    return CsrChunks(fwd=fwd, tr=tr, perm=i32(np.concatenate([perm, pad])), inv_perm=i32(inv_perm),
                     t_perm=i32(np.concatenate([t_perm, pad])), row_degree=i32(row_degree),
                     n_nodes=n, sizes=sizes, n_slots=n_slots, t_n_slots=t_n_slots)


def with_csr_chunks(adj: CooAdjacency, sizes: CsrBlockSizes = CsrBlockSizes()) -> CooAdjacency:
    """``adj`` with a `CsrChunks` of its entries attached as ``pattern`` (for
    ``aggregate(adj, x, impl="pallas_csr")``)."""
    return dataclasses.replace(adj, pattern=csr_chunks(adj, sizes))


def work_item_stats(chunks: CsrChunks) -> dict:
    """Host-side counts of the forward plan: items, empty (padding) items, heavy rows, slots, the
    largest item in edges, and the largest row degree."""
    items = np.asarray(chunks.fwd.items)
    edges = items[:, _EDGE_HI] - items[:, _EDGE_LO]
    return {"items": int(items.shape[0]), "empty_items": int(np.sum(items[:, _ROW_HI] == items[:, _ROW_LO])),
            "split_rows": int(np.sum(np.asarray(chunks.fwd.split_rows) < chunks.n_nodes)),
            "slots": chunks.n_slots, "max_item_edges": int(edges.max(initial=0)),
            "max_row_degree": int(np.asarray(chunks.row_degree).max(initial=0))}


def gcn_scales(chunks: CsrChunks) -> tuple[Array, Array]:
    """``(row_scale, col_scale) = (deg^-1/2, deg^-1/2)`` of the symmetric GCN normalization
    ``D^-1/2 A D^-1/2`` (Kipf & Welling, ICLR 2017, eq. 2), deg = entries per row (the self-loops
    must already be in the graph); 0 for a row without entries. float32 [N] each.

    Assumption: A is symmetric (the row degree is also the column degree), as in
    `codesign.models.norm.gcn_normalize`, which uses the receiver degree for both sides."""
    deg = chunks.row_degree.astype(jnp.float32)
    inv = jnp.where(deg > 0, lax.rsqrt(jnp.maximum(deg, 1.0)), 0.0)
    return inv, inv


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------

def _gather_index(cols, j: int, block_f: int):
    """Integer indexers of the ``[chunk, block_f]`` tile ``x[cols, j * block_f : (j + 1) * block_f]``
    (two broadcast arrays: the interpreter discharges all-array indexers as a gather)."""
    shape = (cols.shape[0], block_f)
    feats = j * block_f + lax.broadcasted_iota(jnp.int32, shape, 1)
    return jnp.broadcast_to(cols[:, None], shape), feats


def _spmm_kernel(items_ref, indptr_ref, cols_ref, vals_ref, x_ref, cs_ref, rs_ref, o_ref, p_ref, *,
                 chunk: int, block_f: int, n_ftiles: int, rows_per_step: int = 1):
    """Sums of the rows of work item ``program_id(0)``.

    ``rows_per_step`` > 1: a window item walks its rows ``rows_per_step`` at a time (a
    ``[rows, chunk]`` tile of column ids and a ``[rows, chunk, block_f]`` gathered tile per step,
    rows shorter than the longest masked), heavy-row segments one row at a time.

    Refs: items int32[K, 5], indptr int32[R+1], cols int32[E+C], vals float[E+C] or None (weight 1),
    x [N, F_pad] (float or int8), cs f32[N] or None (scale of each gathered X row: GCN's
    deg^-1/2, int8 dequantization), rs f32[R] or None (scale of each output row), o [R, F_pad]
    (rows of window items), p f32[P, F_pad] or None (slots of heavy-row segments).
    """
    k = pl.program_id(0)
    row_lo, row_hi = items_ref[k, _ROW_LO], items_ref[k, _ROW_HI]
    e_lo, e_hi, slot = items_ref[k, _EDGE_LO], items_ref[k, _EDGE_HI], items_ref[k, _SLOT]
    lanes = lax.broadcasted_iota(jnp.int32, (chunk,), 0)

    def chunk_body(start, end, c, accs):
        e0 = start + c * chunk
        valid = e0 + lanes < end
        cols = _masked_load(cols_ref.at[pl.ds(e0, chunk)], valid, 0)
        w = jnp.where(valid, 1.0, 0.0).astype(jnp.float32)
        if vals_ref is not None:
            w = _masked_load(vals_ref.at[pl.ds(e0, chunk)], valid, 0).astype(jnp.float32)
        if cs_ref is not None:
            w = w * _masked_load(cs_ref.at[cols], valid, 0.0)
        valid2 = jnp.broadcast_to(valid[:, None], (chunk, block_f))
        out = []
        for j in range(n_ftiles):
            xs = _masked_load(x_ref.at[_gather_index(cols, j, block_f)], valid2, 0)
            out.append(accs[j] + jnp.sum(xs.astype(jnp.float32) * w[:, None], axis=0))
        return tuple(out)

    def row_body(r, carry):
        start = jnp.maximum(indptr_ref[r], e_lo)
        end = jnp.minimum(indptr_ref[r + 1], e_hi)
        n_chunks = (end - start + chunk - 1) // chunk
        accs = lax.fori_loop(0, n_chunks, functools.partial(chunk_body, start, end),
                             tuple(jnp.zeros((block_f,), jnp.float32) for _ in range(n_ftiles)))
        if rs_ref is not None:
            accs = tuple(a * rs_ref[r] for a in accs)

        @pl.when(slot < 0)
        def _():
            for j in range(n_ftiles):
                o_ref[r, pl.ds(j * block_f, block_f)] = accs[j].astype(o_ref.dtype)

        if p_ref is not None:
            @pl.when(slot >= 0)
            def _():
                for j in range(n_ftiles):
                    p_ref[slot, pl.ds(j * block_f, block_f)] = accs[j]
        return carry

    if rows_per_step == 1:
        lax.fori_loop(row_lo, row_hi, row_body, 0)
        return

    @pl.when(slot >= 0)
    def _():
        lax.fori_loop(row_lo, row_hi, row_body, 0)

    rps = rows_per_step
    rlanes = lax.broadcasted_iota(jnp.int32, (rps,), 0)
    shape2, shape3 = (rps, block_f), (rps, chunk, block_f)

    def group_body(g, carry):
        rows = row_lo + g * rps + rlanes
        rvalid = rows < row_hi
        starts = _masked_load(indptr_ref.at[rows], rvalid, 0)
        ends = _masked_load(indptr_ref.at[rows + 1], rvalid, 0)

        def chunk_rows(c, accs):
            e = starts[:, None] + c * chunk + lanes[None, :]  # [rows, chunk]
            valid = e < ends[:, None]
            cols = _masked_load(cols_ref.at[e], valid, 0)
            w = jnp.where(valid, 1.0, 0.0).astype(jnp.float32)
            if vals_ref is not None:
                w = _masked_load(vals_ref.at[e], valid, 0).astype(jnp.float32)
            if cs_ref is not None:
                w = w * _masked_load(cs_ref.at[cols], valid, 0.0)
            valid3 = jnp.broadcast_to(valid[:, :, None], shape3)
            cols3 = jnp.broadcast_to(cols[:, :, None], shape3)
            out = []
            for j in range(n_ftiles):
                feats3 = j * block_f + lax.broadcasted_iota(jnp.int32, shape3, 2)
                xs = _masked_load(x_ref.at[cols3, feats3], valid3, 0)
                out.append(accs[j] + jnp.sum(xs.astype(jnp.float32) * w[:, :, None], axis=1))
            return tuple(out)

        n_chunks = jnp.max((ends - starts + chunk - 1) // chunk)
        accs = lax.fori_loop(0, n_chunks, chunk_rows, tuple(jnp.zeros(shape2, jnp.float32) for _ in range(n_ftiles)))
        if rs_ref is not None:
            r_scale = _masked_load(rs_ref.at[rows], rvalid, 0.0)
            accs = tuple(a * r_scale[:, None] for a in accs)
        rows2 = jnp.broadcast_to(rows[:, None], shape2)
        rvalid2 = jnp.broadcast_to(rvalid[:, None], shape2)
        for j in range(n_ftiles):
            feats2 = j * block_f + lax.broadcasted_iota(jnp.int32, shape2, 1)
            _masked_store(o_ref.at[rows2, feats2], accs[j].astype(o_ref.dtype), rvalid2)
        return carry

    @pl.when(slot < 0)
    def _():
        lax.fori_loop(0, (row_hi - row_lo + rps - 1) // rps, group_body, 0)


def _sddmm_kernel(items_ref, indptr_ref, cols_ref, dy_ref, x_ref, cs_ref, rs_ref, dv_ref, *,
                  chunk: int, block_f: int, n_ftiles: int):
    """``dv[e] = rs[i] * cs[j] * <dy[i], x[j]>`` for the edges ``e = (i, j)`` of work item
    ``program_id(0)``. Refs as in `_spmm_kernel`; dy [R, F_pad], dv f32[E+C]."""
    k = pl.program_id(0)
    row_lo, row_hi = items_ref[k, _ROW_LO], items_ref[k, _ROW_HI]
    e_lo, e_hi = items_ref[k, _EDGE_LO], items_ref[k, _EDGE_HI]
    lanes = lax.broadcasted_iota(jnp.int32, (chunk,), 0)

    def row_body(r, carry):
        start = jnp.maximum(indptr_ref[r], e_lo)
        end = jnp.minimum(indptr_ref[r + 1], e_hi)
        dys = [dy_ref[r, pl.ds(j * block_f, block_f)].astype(jnp.float32) for j in range(n_ftiles)]
        r_scale = 1.0 if rs_ref is None else rs_ref[r]

        def chunk_body(c, carry):
            e0 = start + c * chunk
            valid = e0 + lanes < end
            cols = _masked_load(cols_ref.at[pl.ds(e0, chunk)], valid, 0)
            valid2 = jnp.broadcast_to(valid[:, None], (chunk, block_f))
            d = jnp.zeros((chunk,), jnp.float32)
            for j in range(n_ftiles):
                xs = _masked_load(x_ref.at[_gather_index(cols, j, block_f)], valid2, 0)
                d = d + jnp.sum(xs.astype(jnp.float32) * dys[j][None, :], axis=1)
            if cs_ref is not None:
                d = d * _masked_load(cs_ref.at[cols], valid, 0.0)
            _masked_store(dv_ref.at[pl.ds(e0, chunk)], d * r_scale, valid)
            return carry

        return lax.fori_loop(0, (end - start + chunk - 1) // chunk, chunk_body, carry)

    lax.fori_loop(row_lo, row_hi, row_body, 0)


# --------------------------------------------------------------------------------------------
# pallas_call builders
# --------------------------------------------------------------------------------------------

class _Config(NamedTuple):
    """Static parameters of one call (hashable; the custom_vjp's nondiff argument)."""
    chunk: int
    block_f: int
    rows_per_step: int
    num_warps: int
    num_stages: int
    interpret: bool
    has_values: bool
    n_slots: int
    t_n_slots: int


def _spmm_call(cfg: _Config, plan: CsrPlan, n_slots: int, vals, x, cs, rs, out_dtype, name: str):
    """``diag(rs) A diag(cs) x`` over ``plan`` ([R, F_pad] in ``out_dtype``), both passes."""
    n_rows, f_pad = plan.n_rows, x.shape[1]
    whole = pl.BlockSpec()
    kernel = functools.partial(_spmm_kernel, chunk=cfg.chunk, block_f=cfg.block_f, n_ftiles=f_pad // cfg.block_f,
                               rows_per_step=cfg.rows_per_step)
    out_shape = [jax.ShapeDtypeStruct((n_rows, f_pad), out_dtype)]
    if n_slots:
        out_shape.append(jax.ShapeDtypeStruct((n_slots, f_pad), jnp.float32))
    outs = pl.pallas_call(
        lambda *refs: kernel(*refs, *([None] if not n_slots else [])),
        grid=(plan.items.shape[0],),
        in_specs=[whole, whole, whole, None if vals is None else whole, whole,
                  None if cs is None else whole, None if rs is None else whole],
        out_specs=[whole] * len(out_shape),
        out_shape=out_shape,
        compiler_params=_compiler_params(cfg),
        interpret=cfg.interpret,
        name=name,
    )(plan.items, plan.indptr, plan.indices, vals, x, cs, rs)
    y = outs[0]
    if not n_slots:
        return y
    # second pass: each heavy row's slots added in slot order (the slot CSR, unit weights)
    combine = functools.partial(_spmm_kernel, chunk=cfg.chunk, block_f=cfg.block_f, n_ftiles=f_pad // cfg.block_f)
    summed = pl.pallas_call(
        lambda *refs: combine(*refs, None),
        grid=(plan.c_items.shape[0],),
        in_specs=[whole, whole, whole, None, whole, None, None],
        out_specs=whole,
        out_shape=jax.ShapeDtypeStruct((plan.n_split_rows, f_pad), out_dtype),
        compiler_params=_compiler_params(cfg),
        interpret=cfg.interpret,
        name=name + "_combine",
    )(plan.c_items, plan.c_indptr, plan.c_indices, None, outs[1], None, None)
    return y.at[plan.split_rows].set(summed, mode="drop", unique_indices=True, indices_are_sorted=True)


def _sddmm_call(cfg: _Config, plan: CsrPlan, dy, x, cs, rs):
    """f32[E + C] edge gradients in CSR order of ``plan`` (entries past E undefined)."""
    whole = pl.BlockSpec()
    kernel = functools.partial(_sddmm_kernel, chunk=cfg.chunk, block_f=cfg.block_f,
                               n_ftiles=x.shape[1] // cfg.block_f)
    return pl.pallas_call(
        kernel,
        grid=(plan.items.shape[0],),
        in_specs=[whole, whole, whole, whole, whole, None if cs is None else whole, None if rs is None else whole],
        out_specs=whole,
        out_shape=jax.ShapeDtypeStruct(plan.indices.shape, jnp.float32),
        compiler_params=_compiler_params(cfg),
        interpret=cfg.interpret,
        name="csr_sddmm",
    )(plan.items, plan.indptr, plan.indices, dy, x, cs, rs)


# --------------------------------------------------------------------------------------------
# custom VJP
# --------------------------------------------------------------------------------------------

class _Graph(NamedTuple):
    """Arrays of a call that get no gradient: the structure and the node scales."""
    fwd: CsrPlan
    tr: CsrPlan
    perm: Array
    inv_perm: Array
    t_perm: Array
    cs: Optional[Array]
    rs: Optional[Array]


def _sorted_values(values, perm):
    """``values`` (COO order, [E]) in CSR order with the ``chunk`` padding entries ([E + C])."""
    if values.shape[0] == 0:
        return jnp.zeros(perm.shape, values.dtype)
    return values[perm]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _spmm_vjp(cfg: _Config, values, x, g: _Graph):
    vals = _sorted_values(values, g.perm) if cfg.has_values else None
    return _spmm_call(cfg, g.fwd, cfg.n_slots, vals, x, g.cs, g.rs, x.dtype, "csr_spmm")


def _spmm_vjp_fwd(cfg, values, x, g):
    return _spmm_vjp(cfg, values, x, g), (values, x, g)


def _spmm_vjp_bwd(cfg, res, dy):
    values, x, g = res
    # dX = diag(cs) A^T diag(rs) dY: the forward kernel over A^T's CSR (deterministic, no atomics)
    t_vals = _sorted_values(values, g.t_perm) if cfg.has_values else None
    dx = _spmm_call(cfg, g.tr, cfg.t_n_slots, t_vals, dy, g.rs, g.cs, x.dtype, "csr_spmm_t")
    dvalues = jnp.zeros_like(values)
    if cfg.has_values:  # CSR-order SDDMM, gathered back to COO order (a gather: no scatter-add)
        dvalues = _sddmm_call(cfg, g.fwd, dy, x, g.cs, g.rs)[g.inv_perm].astype(values.dtype)
    return dvalues, dx, None


_spmm_vjp.defvjp(_spmm_vjp_fwd, _spmm_vjp_bwd)


# --------------------------------------------------------------------------------------------
# Public entries
# --------------------------------------------------------------------------------------------

def _check(fn: str, chunks, x, dtypes, values, row_scale, col_scale) -> None:
    if not isinstance(chunks, CsrChunks):
        raise TypeError(f"{fn}: chunks must be a CsrChunks (build it with csr_chunks), got {type(chunks).__name__}")
    if x.ndim != 2 or x.shape[0] != chunks.n_nodes:
        raise ValueError(f"{fn}: x must be [n_nodes={chunks.n_nodes}, F], got shape {x.shape}")
    if not any(x.dtype == d for d in dtypes):
        raise TypeError(f"{fn}: x.dtype must be one of {[jnp.dtype(d).name for d in dtypes]}, got {x.dtype}")
    if values is not None and (values.shape != (chunks.n_edges,) or not jnp.issubdtype(values.dtype, jnp.floating)):
        raise ValueError(f"{fn}: values must be float [E={chunks.n_edges}] in COO order, got "
                         f"{values.dtype} {values.shape}")
    for name, v in (("row_scale", row_scale), ("col_scale", col_scale)):
        if v is not None and v.shape != (chunks.n_nodes,):
            raise ValueError(f"{fn}: {name} must be [n_nodes={chunks.n_nodes}], got shape {v.shape}")


def _cfg(chunks: CsrChunks, n_features: int, has_values: bool, interpret: Optional[bool]) -> _Config:
    sz = chunks.sizes
    return _Config(chunk=sz.chunk, block_f=sz.feature_tile(n_features), rows_per_step=sz.rows_per_step,
                   num_warps=sz.num_warps,
                   num_stages=sz.num_stages, interpret=resolve_interpret(interpret), has_values=has_values,
                   n_slots=chunks.n_slots, t_n_slots=chunks.t_n_slots)


def _scale(v):
    return None if v is None else lax.stop_gradient(v.astype(jnp.float32))


@functools.partial(jax.jit, static_argnames=("cfg",))
def _csr_jit(chunks: CsrChunks, x, values, row_scale, col_scale, cfg: _Config):
    n_feat = x.shape[1]
    extra = -n_feat % cfg.block_f
    xp = jnp.pad(x, ((0, 0), (0, extra))) if extra else x
    values = values if cfg.has_values else jnp.zeros((0,), jnp.float32)
    g = _Graph(chunks.fwd, chunks.tr, chunks.perm, chunks.inv_perm, chunks.t_perm, _scale(col_scale),
               _scale(row_scale))
    return _spmm_vjp(cfg, values, xp, g)[:, :n_feat]


def csr_chunk_spmm(chunks: CsrChunks, x: Array, values: Optional[Array] = None, *,
                   row_scale: Optional[Array] = None, col_scale: Optional[Array] = None,
                   interpret: Optional[bool] = None) -> Array:
    """``Y = diag(row_scale) A diag(col_scale) X`` with the Pallas CSR edge-chunk kernel.

    ``Y[i] = row_scale[i] * sum_{e = (i, j)} values[e] * col_scale[j] * X[j]``; differentiable in
    ``x`` (``dX = diag(col_scale) A^T diag(row_scale) dY``, the same kernel on A^T's CSR) and in
    ``values`` (an SDDMM over the same chunks). The scales get no gradient.

    Args:
      chunks: `CsrChunks` of the adjacency (rows = receivers).
      x: float32 / bfloat16 [N, F]. F is zero-padded to a multiple of the feature tile (no copy
        when F is a multiple of ``sizes.block_f`` or a power of two below it).
      values: float [E] edge weights in the COO order ``chunks`` was built from, or None for 1
        (then no per-edge value is loaded).
      row_scale, col_scale: float [N] or None (1). GCN: `gcn_scales`.
      interpret: run the Pallas interpreter; None = True unless on a GPU.

    Returns:
      [N, F] in ``x.dtype``, accumulated in float32.

    Raises:
      TypeError: ``chunks`` not a `CsrChunks`, ``x`` of another dtype.
      ValueError: shapes of ``x``, ``values``, the scales (naming the argument).
    """
    _check("csr_chunk_spmm", chunks, x, _FEATURE_DTYPES, values, row_scale, col_scale)
    cfg = _cfg(chunks, x.shape[1], values is not None, interpret)
    return _csr_jit(chunks, x, values, row_scale, col_scale, cfg)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _csr_int8_jit(chunks, x_q, scales, values, row_scale, cfg: _Config):
    n_feat = x_q.shape[1]
    extra = -n_feat % cfg.block_f
    xp = jnp.pad(x_q, ((0, 0), (0, extra))) if extra else x_q
    vals = _sorted_values(values, chunks.perm) if cfg.has_values else None
    return _spmm_call(cfg, chunks.fwd, cfg.n_slots, vals, xp, scales.astype(jnp.float32), _scale(row_scale),
                      jnp.float32, "csr_spmm_int8")[:, :n_feat]


def csr_chunk_spmm_int8(chunks: CsrChunks, x_q: Array, scales: Array, values: Optional[Array] = None, *,
                        row_scale: Optional[Array] = None, interpret: Optional[bool] = None) -> Array:
    """``diag(row_scale) A (x_q * scales[:, None])`` with the dequantization in the kernel
    (int8 loads, 1 byte per gathered feature; f32 accumulation). Forward only.

    Args:
      chunks: `CsrChunks`.
      x_q: int8 [N, F] quantized features.
      scales: float [N] per-row (per-node) quantization scale; for GCN multiply in the column
        scale (``scales * gcn_scales(chunks)[1]``).
      values, row_scale, interpret: as in `csr_chunk_spmm`.

    Returns:
      float32 [N, F].

    Raises:
      TypeError / ValueError: as in `csr_chunk_spmm`; ``scales`` not [N].
    """
    _check("csr_chunk_spmm_int8", chunks, x_q, (jnp.int8,), values, row_scale, scales)
    cfg = _cfg(chunks, x_q.shape[1], values is not None, interpret)
    return _csr_int8_jit(chunks, x_q, scales, values, row_scale, cfg)


def csr_chunk_spmm_reference(chunks: CsrChunks, x: Array, values: Optional[Array] = None, *,
                             row_scale: Optional[Array] = None, col_scale: Optional[Array] = None) -> Array:
    """Plain-JAX ``diag(row_scale) A diag(col_scale) X``: gather by column, ``segment_sum`` by row
    over the sorted CSR (f32 accumulation; returns ``x.dtype``, float32 for int8 ``x``)."""
    _check("csr_chunk_spmm_reference", chunks, x, (*_FEATURE_DTYPES, jnp.float64, jnp.int8), values, row_scale,
           col_scale)
    e, acc = chunks.n_edges, jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    cols, rows = chunks.fwd.indices[:e], jnp.repeat(jnp.arange(chunks.n_nodes), chunks.row_degree,
                                                    total_repeat_length=e)
    xs = x.astype(acc) if col_scale is None else x.astype(acc) * col_scale.astype(acc)[:, None]
    msgs = xs[cols]
    if values is not None:
        msgs = msgs * values[chunks.perm[:e]].astype(acc)[:, None]
    y = jax.ops.segment_sum(msgs, rows, num_segments=chunks.n_nodes, indices_are_sorted=True)
    if row_scale is not None:
        y = y * row_scale.astype(acc)[:, None]
    return y.astype(jnp.float32 if x.dtype == jnp.int8 else x.dtype)


def csr_chunk_spmm_int8_reference(chunks: CsrChunks, x_q: Array, scales: Array, values: Optional[Array] = None,
                                  *, row_scale: Optional[Array] = None) -> Array:
    """`csr_chunk_spmm_reference` of the dequantized ``x_q * scales[:, None]`` (float32)."""
    return csr_chunk_spmm_reference(chunks, x_q, values, row_scale=row_scale, col_scale=scales)


def csr_chunk_aggregate(adj: CooAdjacency, x: Array) -> Array:
    """The ``"pallas_csr"`` backend of `codesign.kernels.aggregate`: `csr_chunk_spmm` over the
    `CsrChunks` attached to ``adj`` (`with_csr_chunks`), with ``adj.edge_weight`` as values.

    Raises:
      ValueError: no `CsrChunks` attached, or one built for another node count.
    """
    if not isinstance(adj.pattern, CsrChunks):
        raise ValueError("aggregate: impl 'pallas_csr' needs a CsrChunks: attach it with with_csr_chunks(adj)")
    if adj.pattern.n_nodes != adj.n_nodes or adj.pattern.n_edges != adj.n_edges:
        raise ValueError(f"aggregate: the attached CsrChunks has {adj.pattern.n_nodes} nodes / {adj.pattern.n_edges} "
                         f"edges, adj has {adj.n_nodes} / {adj.n_edges}")
    return csr_chunk_spmm(adj.pattern, x, adj.edge_weight)
