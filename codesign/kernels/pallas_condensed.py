"""TC-GNN condensed row-window SpMM ``A @ X`` as Pallas kernels (Triton lowering), with a custom VJP.

Format: `codesign.kernels.condensed.CondensedRowWindows` (Y. Wang et al., "TC-GNN: Bridging Sparse GNN
Computation and Dense Tensor Cores on GPUs", USENIX ATC 2023, Sec. 4.1): per window of ``B`` rows
the distinct neighbour columns are compacted into dense ``B x K`` tiles; X rows are gathered by
column id.

Layout (as `codesign.kernels.pallas_spmm`: kernels, the functions building their ``pallas_call``,
the ``custom_vjp`` and the public entry side by side):

* `_condensed_kernel`: one program per (row window ``w``, feature tile ``j``). It reads the
  window's tile range ``win_ptr[w]:win_ptr[w + 1]`` with scalar loads from a ref, loops over the
  tiles with ``lax.fori_loop``, gathers the ``K`` rows of X named by the tile (a masked gather
  load with integer-array indexers: ``x_ref.at[rows[:, None], feats[None, :]]``, padding columns
  read a clamped, valid address and are replaced by 0), multiplies the ``B x K`` tile with the
  ``K x block_f`` gathered block on tensor cores (f32 accumulation) and writes one
  ``B x block_f`` output block. No scalar prefetch (``PrefetchScalarGridSpec`` is TPU-only).
* Backward ``dX = A^T dY`` without atomics, deterministic, exact for any ``tile_data``:
  `_tile_t_kernel` computes ``P[t] = tile_data[t]^T @ dY[window rows of t]`` (``K x F`` per tile,
  one program per (tile, feature tile)); then the SAME `_condensed_kernel` runs over the slot
  windows built on the host by ``CondensedRowWindows.from_coo`` (``t_win_ptr / t_slots /
  t_rows``): for each window of ``B`` nodes it gathers the rows of ``P`` (viewed as
  ``[T * K, F]``) of the slots naming those nodes and multiplies them by a 0/1 selection tile
  built in registers from ``t_rows`` (``onehot=True``), summing in a fixed order. A literal
  condensed ``A^T`` over the graph's edges would miss stored tile entries without an edge (their
  values can become non-zero through `CondensedRowWindows.with_data`); a condensed ``A^T`` over
  every stored entry degenerates to BSR tiles. The slot windows have ``ceil(slots / K)`` tiles per
  node window, about ``T`` + ``W`` in all, so the backward costs about two forward passes plus the
  ``[T * K, F]`` intermediate ``P`` (the size of the gathered X of `condensed_spmm_reference`).
* `_sddmm_kernel`: ``d tile_data[t] = dY[window rows] @ X[tile_cols[t]]^T`` (one program per
  tile, loop over feature tiles; gathered X as in the forward; 0 on padding columns).

Feature padding, dtypes and interpret mode are those of `codesign.kernels.pallas_spmm.bsr_spmm`:
F is zero-padded to a multiple of the feature tile; f32 / bf16 / f16 features (tiles cast to the
feature dtype for the dot, f32 accumulation); ``interpret=None`` runs the Pallas interpreter
unless ``jax.default_backend() == "gpu"`` (`resolve_interpret`). In interpret mode every gather
uses integer-array indexers only (the discharge rule of ``load`` rejects mixed array + slice
indexers) with clamped indices. Dots use the default precision (TF32 for f32 on GPU unless run
under ``jax.default_matmul_precision("highest")``); the backward's 0/1 selection dot rounds ``P``
the same way.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from codesign.kernels.condensed import CondensedRowWindows
from codesign.kernels.config import BlockSizes
from codesign.kernels.pallas_spmm import PALLAS_BLOCK_SIZES, resolve_interpret

__all__ = ["condensed_spmm"]

Array = jax.Array

_FEATURE_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
_CONTRACT_ROWS = (((1,), (0,)), ((), ()))  # tile @ x
_CONTRACT_COLS = (((0,), (0,)), ((), ()))  # tile^T @ x
_CONTRACT_FEATURES = (((1,), (1,)), ((), ()))  # dy @ x^T


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------

def _gather_rows(x_ref, idx, feats):
    """``x_ref[idx, feats]`` as ``[K, len(feats)]``: rows ``idx`` (-1 = padding, read as 0).

    Integer-array indexers only (interpret-mode discharge), indices clamped into bounds.
    """
    valid = idx >= 0
    rows = jnp.maximum(idx, 0)
    shape = (idx.shape[0], feats.shape[0])
    return plgpu.load(x_ref.at[rows[:, None], feats[None, :]], mask=jnp.broadcast_to(valid[:, None], shape),
                      other=0.0)


def _condensed_kernel(win_ptr_ref, idx_ref, tile_ref, x_ref, o_ref, *, window: int, onehot: bool):
    """``o[w-window, j-tile] = sum_t tile(t) @ x[idx[t], j-tile]`` over ``t in win_ptr[w]:win_ptr[w+1]``.

    Refs: win_ptr int32[W+1], idx int32[T, K] (row of x per tile column, -1 = padding), tile
    float[T, B, K] (``onehot=False``) or int32[T, K] rows (``onehot=True``: ``tile(t)[a, c] =
    (tile[t, c] == a)``), x [n_x, block_f] (the j-th feature tile), o [B, block_f].
    """
    w = pl.program_id(0)
    start, end = win_ptr_ref[w], win_ptr_ref[w + 1]
    compute_dtype = x_ref.dtype
    feats = jnp.arange(x_ref.shape[1], dtype=jnp.int32)

    def body(t, acc):
        xs = _gather_rows(x_ref, idx_ref[t, :], feats)
        if onehot:
            hit = jnp.arange(window, dtype=jnp.int32)[:, None] == tile_ref[t, :][None, :]
            a = jnp.where(hit, 1.0, 0.0).astype(compute_dtype)  # f32 select, then one truncation
        else:
            a = tile_ref[t, :, :].astype(compute_dtype)
        return acc + lax.dot_general(a, xs, _CONTRACT_ROWS, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(start, end, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def _tile_t_kernel(tile_window_ref, data_ref, dy_ref, o_ref, *, window: int):
    """``o = data[t]^T @ dy[tile_window[t]-window, j-tile]`` (``[K, block_f]``) for tile ``t``."""
    t = pl.program_id(0)
    rows = pl.ds(pl.multiple_of(tile_window_ref[t] * window, window), window)
    dy = dy_ref[rows, :]
    a = data_ref[t, :, :].astype(dy.dtype)
    o_ref[...] = lax.dot_general(a, dy, _CONTRACT_COLS, preferred_element_type=jnp.float32).astype(o_ref.dtype)


def _sddmm_kernel(tile_window_ref, idx_ref, dy_ref, x_ref, o_ref, *, window: int, block_f: int):
    """``o = sum_j dy[tile_window[t]-window, j-tile] @ x[idx[t], j-tile]^T`` (``[B, K]``) for tile ``t``.

    Refs: tile_window int32[T], idx int32[T, K] (-1 = padding: zero gradient column), dy and x
    [n_pad, F_pad], o [B, K] (this program's tile).
    """
    t = pl.program_id(0)
    r_rows = pl.ds(pl.multiple_of(tile_window_ref[t] * window, window), window)
    idx = idx_ref[t, :]
    feats = jnp.arange(block_f, dtype=jnp.int32)

    def body(j, acc):
        f0 = pl.multiple_of(j * block_f, block_f)
        dy = dy_ref[r_rows, pl.ds(f0, block_f)]
        xs = _gather_rows(x_ref, idx, f0 + feats).astype(dy.dtype)
        return acc + lax.dot_general(dy, xs, _CONTRACT_FEATURES, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, x_ref.shape[1] // block_f, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


# --------------------------------------------------------------------------------------------
# pallas_call builders
# --------------------------------------------------------------------------------------------

class _Config(NamedTuple):
    """Static parameters of one differentiable call (hashable; the custom_vjp's nondiff arg)."""
    window: int
    k: int
    block_f: int
    block_f_sddmm: int
    num_warps: int
    num_stages: int
    interpret: bool


def _compiler_params(cfg: _Config):
    return plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages)


def _condensed_call(cfg: _Config, win_ptr, idx, tiles, x, *, onehot=False, name="condensed_spmm"):
    """``[W * B, F]`` output of `_condensed_kernel` (``W = len(win_ptr) - 1``); F a multiple of
    ``cfg.block_f``."""
    n_x, n_feat = x.shape
    n_out = (win_ptr.shape[0] - 1) * cfg.window
    if idx.shape[0] == 0:  # no tiles: nothing to launch
        return jnp.zeros((n_out, n_feat), x.dtype)
    b, bf = cfg.window, cfg.block_f
    whole = pl.BlockSpec()  # the full array; indexed dynamically inside the kernel
    kernel = functools.partial(_condensed_kernel, window=b, onehot=onehot)
    return pl.pallas_call(
        kernel,
        grid=(n_out // b, n_feat // bf),
        in_specs=[whole, whole, whole, pl.BlockSpec((n_x, bf), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((b, bf), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((n_out, n_feat), x.dtype),
        compiler_params=_compiler_params(cfg),
        interpret=cfg.interpret,
        name=name,
    )(win_ptr, idx, tiles, x)


def _tile_t_call(cfg: _Config, tile_window, data, dy):
    """``[T, K, F]`` per-tile products ``data[t]^T @ dy[window rows]`` of `_tile_t_kernel`."""
    n_tiles, (n_pad, n_feat) = data.shape[0], dy.shape
    b, k, bf = cfg.window, cfg.k, cfg.block_f
    whole = pl.BlockSpec()
    return pl.pallas_call(
        functools.partial(_tile_t_kernel, window=b),
        grid=(n_tiles, n_feat // bf),
        in_specs=[whole, whole, pl.BlockSpec((n_pad, bf), lambda t, j: (0, j))],
        out_specs=pl.BlockSpec((None, k, bf), lambda t, j: (t, 0, j)),
        out_shape=jax.ShapeDtypeStruct((n_tiles, k, n_feat), dy.dtype),
        compiler_params=_compiler_params(cfg),
        interpret=cfg.interpret,
        name="condensed_tile_t",
    )(tile_window, data, dy)


def _sddmm_call(cfg: _Config, tile_window, idx, dy, x, out_dtype):
    """``float[T, B, K]`` tile gradients of `_sddmm_kernel`."""
    n_tiles, b, k = idx.shape[0], cfg.window, cfg.k
    whole = pl.BlockSpec()
    return pl.pallas_call(
        functools.partial(_sddmm_kernel, window=b, block_f=cfg.block_f_sddmm),
        grid=(n_tiles,),
        in_specs=[whole, whole, whole, whole],
        out_specs=pl.BlockSpec((None, b, k), lambda t: (t, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((n_tiles, b, k), out_dtype),
        compiler_params=_compiler_params(cfg),
        interpret=cfg.interpret,
        name="condensed_sddmm",
    )(tile_window, idx, dy, x)


# --------------------------------------------------------------------------------------------
# custom VJP
# --------------------------------------------------------------------------------------------

class _Structure(NamedTuple):
    """The integer arrays of a `CondensedRowWindows` the kernels read (no gradient)."""
    win_ptr: Array
    tile_window: Array
    cols: Array  # int32 [T, K]: tile_cols, -1 where col_mask is False
    t_win_ptr: Array
    t_slots: Array
    t_rows: Array


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _condensed_vjp(cfg: _Config, data, x, st: _Structure):
    return _condensed_call(cfg, st.win_ptr, st.cols, data, x)


def _condensed_vjp_fwd(cfg, data, x, st):
    return _condensed_call(cfg, st.win_ptr, st.cols, data, x), (data, x, st)


def _condensed_vjp_bwd(cfg, res, dy):
    data, x, st = res
    n_tiles, n_feat = data.shape[0], dy.shape[1]
    if n_tiles == 0:
        return jnp.zeros_like(data), jnp.zeros_like(x), None
    # dX = A^T dY: per-tile products P[t] = data[t]^T dY[window], then the forward kernel over the
    # slot windows (0/1 selection tiles) sums each node's slots in a fixed order: no atomics.
    p = _tile_t_call(cfg, st.tile_window, data, dy).reshape(n_tiles * cfg.k, n_feat)
    dx = _condensed_call(cfg, st.t_win_ptr, st.t_slots, st.t_rows, p, onehot=True, name="condensed_spmm_t")
    # d tile_data = dY[window rows] @ X[tile_cols]^T per tile: block SDDMM with gathered X.
    ddata = _sddmm_call(cfg, st.tile_window, st.cols, dy, x, data.dtype)
    return ddata, dx.astype(x.dtype), None


_condensed_vjp.defvjp(_condensed_vjp_fwd, _condensed_vjp_bwd)


# --------------------------------------------------------------------------------------------
# Public entry
# --------------------------------------------------------------------------------------------

def _check_inputs(fn: str, adj, x) -> None:
    if not isinstance(adj, CondensedRowWindows):
        raise ValueError(f"{fn}: adj must be a CondensedRowWindows, got {type(adj).__name__}")
    if adj.t_win_ptr is None or adj.t_slots is None or adj.t_rows is None:
        raise ValueError(f"{fn}: adj has no slot windows (t_win_ptr / t_slots / t_rows); build it with "
                         f"CondensedRowWindows.from_coo")
    if x.ndim != 2 or x.shape[0] != adj.n_pad:
        raise ValueError(f"{fn}: x must be [n_pad={adj.n_pad}, F] in the adjacency's reordered, padded "
                         f"node order (see CondensedRowWindows.permute_features), got shape {x.shape}")
    if not any(x.dtype == d for d in _FEATURE_DTYPES):
        raise ValueError(f"{fn}: x.dtype must be one of {[jnp.dtype(d).name for d in _FEATURE_DTYPES]}, "
                         f"got {x.dtype}")


def _config(adj: CondensedRowWindows, n_features: int, block_sizes: BlockSizes, interpret: bool) -> _Config:
    if adj.window not in PALLAS_BLOCK_SIZES or adj.k not in PALLAS_BLOCK_SIZES:
        raise ValueError(f"Pallas condensed_spmm needs window and k in {PALLAS_BLOCK_SIZES} (Triton dot dims "
                         f">= 16), got window={adj.window}, k={adj.k}")
    return _Config(window=adj.window, k=adj.k,
                   block_f=BlockSizes.feature_tile(block_sizes.block_f, n_features),
                   block_f_sddmm=BlockSizes.feature_tile(block_sizes.block_f_sddmm, n_features),
                   num_warps=block_sizes.warps(max(adj.window, adj.k)), num_stages=block_sizes.num_stages,
                   interpret=interpret)


def _pad_features(x: Array, multiple: int) -> Array:
    extra = -x.shape[1] % multiple
    return jnp.pad(x, ((0, 0), (0, extra))) if extra else x


def _structure(adj: CondensedRowWindows) -> _Structure:
    cols = jnp.where(adj.col_mask, adj.tile_cols, -1).astype(jnp.int32)
    return _Structure(adj.win_ptr, adj.tile_window, cols, adj.t_win_ptr, adj.t_slots, adj.t_rows)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _condensed_spmm_jit(adj: CondensedRowWindows, x: Array, cfg: _Config) -> Array:
    n_feat = x.shape[1]
    xp = _pad_features(x, max(cfg.block_f, cfg.block_f_sddmm))
    return _condensed_vjp(cfg, adj.tile_data, xp, _structure(adj))[:, :n_feat]


def condensed_spmm(adj: CondensedRowWindows, x: Array, *, block_sizes: BlockSizes = BlockSizes(),
                   interpret: Optional[bool] = None) -> Array:
    """TC-GNN condensed row-window ``A @ x`` as a Pallas (Triton) kernel; differentiable in ``x`` and
    ``adj.tile_data``.

    Args:
      adj: `CondensedRowWindows` from ``from_coo`` with ``window`` and ``k`` in {16, 32, 64, 128}.
      x: float32 / bfloat16 / float16 [n_pad, F] in the adjacency's reordered, padded node order
        (``adj.permute_features``).
      block_sizes: feature tiling and launch parameters (`BlockSizes`; ``block_f_sddmm`` is the
        feature step of the tile-gradient kernel).
      interpret: run the Pallas interpreter; None = `resolve_interpret` (True unless on GPU).

    Returns:
      [n_pad, F] in ``x.dtype``; tiles are cast to ``x.dtype`` for the dot, accumulation in f32.
      Gradients: ``dx = A^T dy`` (per-tile ``tile^T @ dy`` then the same kernel over the slot
      windows; deterministic, no atomics) and ``d tile_data[t] = dy[window rows] @ x[tile_cols[t]]^T``
      (dense over the tile's real columns, 0 on padding columns).

    Raises:
      ValueError: wrong adjacency type or one without slot windows, shape or dtype of ``x``, or
        ``window`` / ``k`` < 16.
    """
    _check_inputs("condensed_spmm", adj, x)
    cfg = _config(adj, x.shape[1], block_sizes, resolve_interpret(interpret))
    return _condensed_spmm_jit(adj, x, cfg)
