"""Block-sparse SpMM ``A @ X`` as Pallas kernels (Triton lowering), with a custom VJP.

Layout (STYLE 5: kernel, the function building its ``pallas_call``, a public ``custom_vjp`` entry
and the plain-JAX reference side by side):

* `_spmm_kernel`: one program per (block row ``i``, feature tile ``j``). It reads the row's tile
  range ``indptr[i]:indptr[i + 1]`` with scalar loads from a ref, loops over the stored tiles with
  ``lax.fori_loop``, loads the ``B x B`` tile and the ``B x block_f`` slab of X at the tile's
  block column (``pl.ds(col * B, B)``), multiplies on tensor cores (``dot_general``, f32
  accumulation) and writes one ``B x block_f`` output block. Index arrays are whole-array refs and
  read inside the kernel: there is no scalar prefetch (``PrefetchScalarGridSpec`` is TPU-only).
  The same kernel computes ``A^T @ dY`` on the transposed structure (tiles read through
  ``t_perm`` and contracted along their first axis), so the backward pass needs no atomics and is
  deterministic.
* `_sddmm_kernel`: one program per stored tile ``(r, c)``: ``dA_tile = dY[r-block] @ X[c-block]^T``
  summed over feature tiles (block SDDMM, the gradient w.r.t. tile data).
* `bsr_spmm` (differentiable in ``x`` and ``adj.data``), `bsr_spmm_int8` (int8 features with a
  per-row scale, dequantized in the kernel; forward only) and the references `bsr_spmm_reference`
  / `bsr_spmm_int8_reference` (einsum over tiles + ``segment_sum`` over block rows), which are also
  the ``"bsr_xla"`` backend of `codesign.kernels.aggregate`.

Feature padding: F is zero-padded up to a multiple of the feature tile
(``BlockSizes.feature_tile``, a power of two >= 16, as Triton's ``dot`` needs) and sliced back,
so any F works; F = 80 with ``block_f = 64`` computes on 128 columns.

Interpret mode: ``interpret=None`` (the default) runs the Pallas interpreter unless
``jax.default_backend() == "gpu"``, so the same call works on CPU; the module switch `INTERPRET`
(True / False / None) overrides that default for every call that does not pass ``interpret``.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from codesign.kernels.bsr import BlockSparseAdjacency
from codesign.kernels.config import BlockSizes

__all__ = ["bsr_spmm", "bsr_spmm_int8", "bsr_spmm_reference", "bsr_spmm_int8_reference", "INTERPRET",
           "resolve_interpret", "PALLAS_BLOCK_SIZES"]

Array = jax.Array

INTERPRET: Optional[bool] = None  # None: interpret everywhere except on a GPU backend
PALLAS_BLOCK_SIZES = (16, 32, 64, 128)  # Triton dot needs B >= 16; {16, 32, 64} are tested
_FEATURE_DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
_CONTRACT_ROWS = (((1,), (0,)), ((), ()))  # tile @ x
_CONTRACT_COLS = (((0,), (0,)), ((), ()))  # tile^T @ x
_CONTRACT_FEATURES = (((1,), (1,)), ((), ()))  # dy @ x^T


def resolve_interpret(interpret: Optional[bool] = None) -> bool:
    """``interpret`` if given, else the module switch `INTERPRET`, else ``default_backend() != "gpu"``."""
    if interpret is None:
        interpret = INTERPRET
    if interpret is None:
        return jax.default_backend() != "gpu"
    return bool(interpret)


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------

def _spmm_kernel(indptr_ref, indices_ref, tile_ref, data_ref, x_ref, scale_ref, o_ref, *,
                 block_size: int, transpose_tiles: bool):
    """``o[i-block, j-tile] = sum_k op(data[tile_k]) @ x[indices[k]-block, j-tile]``.

    Refs: indptr int32[R+1], indices int32[nnzb], tile int32[nnzb] or None (tile k is data[k]),
    data float[nnzb, B, B], x [n_pad, block_f] (the j-th feature tile), scale f32[n_pad] or None
    (int8 ``x``: dequantize ``x * scale[row]``), o [B, block_f]. ``op`` is the transpose when
    ``transpose_tiles``.
    """
    row = pl.program_id(0)
    start, end = indptr_ref[row], indptr_ref[row + 1]
    compute_dtype = jnp.float32 if scale_ref is not None else x_ref.dtype
    dims = _CONTRACT_COLS if transpose_tiles else _CONTRACT_ROWS

    def body(k, acc):
        col = indices_ref[k]
        tile = k if tile_ref is None else tile_ref[k]
        a = data_ref[tile, :, :].astype(compute_dtype)
        rows = pl.ds(pl.multiple_of(col * block_size, block_size), block_size)
        xs = x_ref[rows, :]
        if scale_ref is not None:
            xs = xs.astype(jnp.float32) * scale_ref[rows][:, None]
        return acc + lax.dot_general(a, xs, dims, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(start, end, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


def _sddmm_kernel(row_ref, col_ref, dy_ref, x_ref, o_ref, *, block_size: int, block_f: int):
    """``o = sum_j dy[r-block, j-tile] @ x[c-block, j-tile]^T`` for stored tile ``(r, c)``.

    Refs: row/col int32[nnzb] (block row / column of each tile), dy and x [n_pad, F_pad],
    o [B, B] (this program's tile).
    """
    k = pl.program_id(0)
    r_rows = pl.ds(pl.multiple_of(row_ref[k] * block_size, block_size), block_size)
    c_rows = pl.ds(pl.multiple_of(col_ref[k] * block_size, block_size), block_size)

    def body(j, acc):
        feats = pl.ds(pl.multiple_of(j * block_f, block_f), block_f)
        dy = dy_ref[r_rows, feats]
        xs = x_ref[c_rows, feats].astype(dy.dtype)
        return acc + lax.dot_general(dy, xs, _CONTRACT_FEATURES, preferred_element_type=jnp.float32)

    acc = lax.fori_loop(0, x_ref.shape[1] // block_f, body, jnp.zeros(o_ref.shape, jnp.float32))
    o_ref[...] = acc.astype(o_ref.dtype)


# --------------------------------------------------------------------------------------------
# pallas_call builders
# --------------------------------------------------------------------------------------------

class _Config(NamedTuple):
    """Static parameters of one differentiable call (hashable; the custom_vjp's nondiff arg)."""
    block_size: int
    block_f: int
    block_f_sddmm: int
    num_warps: int
    num_stages: int
    interpret: bool


def _spmm_call(cfg: _Config, indptr, indices, tile_ids, data, x, scales=None, *, transpose_tiles=False,
               out_dtype=None, name="bsr_spmm"):
    """``[n_pad, F]`` output of `_spmm_kernel`; F must be a multiple of ``cfg.block_f``."""
    n_pad, n_feat = x.shape
    out_dtype = x.dtype if out_dtype is None else out_dtype
    if data.shape[0] == 0:  # no stored tiles: nothing to launch
        return jnp.zeros((n_pad, n_feat), out_dtype)
    b, bf = cfg.block_size, cfg.block_f
    whole = pl.BlockSpec()  # the full array; sliced dynamically inside the kernel
    kernel = functools.partial(_spmm_kernel, block_size=b, transpose_tiles=transpose_tiles)
    return pl.pallas_call(
        kernel,
        grid=(n_pad // b, n_feat // bf),
        in_specs=[whole, whole, None if tile_ids is None else whole, whole,
                  pl.BlockSpec((n_pad, bf), lambda i, j: (0, j)),
                  None if scales is None else whole],
        out_specs=pl.BlockSpec((b, bf), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((n_pad, n_feat), out_dtype),
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=cfg.interpret,
        name=name,
    )(indptr, indices, tile_ids, data, x, scales)


def _sddmm_call(cfg: _Config, row_of_tile, indices, dy, x, out_dtype):
    """``float[nnzb, B, B]`` tile gradients of `_sddmm_kernel`."""
    nnzb, b = indices.shape[0], cfg.block_size
    if nnzb == 0:
        return jnp.zeros((0, b, b), out_dtype)
    whole = pl.BlockSpec()
    kernel = functools.partial(_sddmm_kernel, block_size=b, block_f=cfg.block_f_sddmm)
    return pl.pallas_call(
        kernel,
        grid=(nnzb,),
        in_specs=[whole, whole, whole, whole],
        out_specs=pl.BlockSpec((None, b, b), lambda k: (k, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((nnzb, b, b), out_dtype),
        compiler_params=plgpu.CompilerParams(num_warps=cfg.num_warps, num_stages=cfg.num_stages),
        interpret=cfg.interpret,
        name="bsr_sddmm",
    )(row_of_tile, indices, dy, x)


# --------------------------------------------------------------------------------------------
# custom VJP
# --------------------------------------------------------------------------------------------

class _Structure(NamedTuple):
    """The integer arrays of a `BlockSparseAdjacency` the kernels read (no gradient)."""
    indptr: Array
    indices: Array
    row_of_tile: Array
    t_indptr: Array
    t_indices: Array
    t_perm: Array


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _spmm_vjp(cfg: _Config, data, x, st: _Structure):
    return _spmm_call(cfg, st.indptr, st.indices, None, data, x)


def _spmm_vjp_fwd(cfg, data, x, st):
    return _spmm_call(cfg, st.indptr, st.indices, None, data, x), (data, x, st)


def _spmm_vjp_bwd(cfg, res, dy):
    data, x, st = res
    # dX = A^T dY: the forward kernel over the transposed structure (deterministic, no atomics).
    dx = _spmm_call(cfg, st.t_indptr, st.t_indices, st.t_perm, data, dy, transpose_tiles=True,
                    name="bsr_spmm_t")
    # dA = (dY X^T) restricted to the stored tiles: block SDDMM.
    ddata = _sddmm_call(cfg, st.row_of_tile, st.indices, dy, x, data.dtype)
    return ddata, dx.astype(x.dtype), None


_spmm_vjp.defvjp(_spmm_vjp_fwd, _spmm_vjp_bwd)


# --------------------------------------------------------------------------------------------
# Public entries
# --------------------------------------------------------------------------------------------

def _check_inputs(fn: str, adj, x, dtypes) -> None:
    if not isinstance(adj, BlockSparseAdjacency):
        raise ValueError(f"{fn}: adj must be a BlockSparseAdjacency, got {type(adj).__name__}")
    if x.ndim != 2 or x.shape[0] != adj.n_pad:
        raise ValueError(f"{fn}: x must be [n_pad={adj.n_pad}, F] in the adjacency's reordered, padded "
                         f"node order (see BlockSparseAdjacency.permute_features), got shape {x.shape}")
    if not any(x.dtype == d for d in dtypes):
        raise ValueError(f"{fn}: x.dtype must be one of {[jnp.dtype(d).name for d in dtypes]}, got {x.dtype}")


def _config(adj: BlockSparseAdjacency, n_features: int, block_sizes: BlockSizes, interpret: bool) -> _Config:
    if adj.block_size not in PALLAS_BLOCK_SIZES:
        raise ValueError(f"Pallas bsr_spmm needs block_size in {PALLAS_BLOCK_SIZES} (Triton dot dims >= 16), "
                         f"got block_size={adj.block_size}")
    return _Config(block_size=adj.block_size,
                   block_f=BlockSizes.feature_tile(block_sizes.block_f, n_features),
                   block_f_sddmm=BlockSizes.feature_tile(block_sizes.block_f_sddmm, n_features),
                   num_warps=block_sizes.warps(adj.block_size), num_stages=block_sizes.num_stages,
                   interpret=interpret)


def _pad_features(x: Array, multiple: int) -> Array:
    extra = -x.shape[1] % multiple
    return jnp.pad(x, ((0, 0), (0, extra))) if extra else x


def _structure(adj: BlockSparseAdjacency) -> _Structure:
    return _Structure(adj.indptr, adj.indices, adj.row_of_tile, adj.t_indptr, adj.t_indices, adj.t_perm)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _bsr_spmm_jit(adj: BlockSparseAdjacency, x: Array, cfg: _Config) -> Array:
    n_feat = x.shape[1]
    xp = _pad_features(x, max(cfg.block_f, cfg.block_f_sddmm))
    return _spmm_vjp(cfg, adj.data, xp, _structure(adj))[:, :n_feat]


def bsr_spmm(adj: BlockSparseAdjacency, x: Array, *, block_sizes: BlockSizes = BlockSizes(),
             interpret: Optional[bool] = None) -> Array:
    """Block-sparse ``A @ x`` as a Pallas (Triton) kernel; differentiable in ``x`` and ``adj.data``.

    Args:
      adj: `BlockSparseAdjacency` with ``block_size`` in {16, 32, 64, 128}.
      x: float32 / bfloat16 / float16 [n_pad, F] in the adjacency's reordered, padded node order.
      block_sizes: feature tiling and launch parameters (`BlockSizes`).
      interpret: run the Pallas interpreter; None = `resolve_interpret` (True unless on GPU).

    Returns:
      [n_pad, F] in ``x.dtype``; tiles are cast to ``x.dtype`` for the dot, accumulation in f32.
      Gradients: ``dx = A^T dy`` (same kernel on the transposed structure) and
      ``d data[k] = dy[r-block] @ x[c-block]^T`` for each stored tile (dense over the tile: entries
      without an edge get a gradient too; mask it if you only want edge gradients).

    Raises:
      ValueError: wrong adjacency type, shape or dtype of ``x``, or ``block_size`` < 16.
    """
    _check_inputs("bsr_spmm", adj, x, _FEATURE_DTYPES)
    cfg = _config(adj, x.shape[1], block_sizes, resolve_interpret(interpret))
    return _bsr_spmm_jit(adj, x, cfg)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _bsr_spmm_int8_jit(adj: BlockSparseAdjacency, x_q: Array, scales: Array, cfg: _Config) -> Array:
    n_feat = x_q.shape[1]
    xp = _pad_features(x_q, cfg.block_f)
    out = _spmm_call(cfg, adj.indptr, adj.indices, None, adj.data, xp, scales.astype(jnp.float32),
                     out_dtype=jnp.float32, name="bsr_spmm_int8")
    return out[:, :n_feat]


def bsr_spmm_int8(adj: BlockSparseAdjacency, x_q: Array, scales: Array, *,
                  block_sizes: BlockSizes = BlockSizes(), interpret: Optional[bool] = None) -> Array:
    """``A @ (x_q * scales[:, None])`` with the dequantization inside the kernel (forward only).

    Args:
      adj: `BlockSparseAdjacency` with ``block_size`` in {16, 32, 64, 128}.
      x_q: int8 [n_pad, F] quantized features (reordered, padded node order).
      scales: float32 [n_pad] per-row (per-node) scale.
      block_sizes, interpret: as in `bsr_spmm`.

    Returns:
      float32 [n_pad, F]. Not differentiable (int8 inputs); train through `bsr_spmm` on the
      fake-quantized float features instead.

    Raises:
      ValueError: wrong types or shapes, naming the argument.
    """
    _check_inputs("bsr_spmm_int8", adj, x_q, (jnp.int8,))
    if scales.shape != (adj.n_pad,):
        raise ValueError(f"bsr_spmm_int8: scales must be [n_pad={adj.n_pad}], got shape {scales.shape}")
    cfg = _config(adj, x_q.shape[1], block_sizes, resolve_interpret(interpret))
    return _bsr_spmm_int8_jit(adj, x_q, scales, cfg)


def bsr_spmm_reference(adj: BlockSparseAdjacency, x: Array) -> Array:
    """Plain-XLA ``A @ x`` over the BSR tiles: einsum per tile + ``segment_sum`` over block rows.

    Args:
      adj: `BlockSparseAdjacency` (any block size).
      x: float [n_pad, F] in the reordered, padded node order.

    Returns:
      [n_pad, F] in ``x.dtype`` (tiles cast to ``x.dtype``, f32 accumulation).
    """
    _check_inputs("bsr_spmm_reference", adj, x, (*_FEATURE_DTYPES, jnp.float64))
    b, n_feat = adj.block_size, x.shape[1]
    x_tiles = x.reshape(adj.n_block_rows, b, n_feat)[adj.indices]  # [nnzb, B, F]
    acc = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    part = jnp.einsum("kij,kjf->kif", adj.data.astype(x.dtype), x_tiles, preferred_element_type=acc)
    out = jax.ops.segment_sum(part, adj.row_of_tile, num_segments=adj.n_block_rows)
    return out.reshape(adj.n_pad, n_feat).astype(x.dtype)


def bsr_spmm_int8_reference(adj: BlockSparseAdjacency, x_q: Array, scales: Array) -> Array:
    """`bsr_spmm_reference` on the dequantized features ``x_q * scales[:, None]`` (float32)."""
    return bsr_spmm_reference(adj, x_q.astype(jnp.float32) * scales.astype(jnp.float32)[:, None])
