"""Fused GAT aggregation as a Pallas kernel for the GPU Triton lowering, with a recomputing VJP.

One program per (receiver row i, head): it walks the row's CSR edges in chunks of ``C``, gathers
``s_src`` and the ``h`` rows of the chunk's senders, and keeps a flash-attention style online
softmax (running max ``m``, running denominator ``l``, running accumulator ``acc[F]``, all
rescaled by ``exp(m_old - m_new)`` per chunk), so attention scores never reach memory. It writes
``out[i, head]`` and the row's logsumexp ``lse = m + log(l)``.

The backward (``jax.custom_vjp``) saves only ``(h, s_src, s_dst, out, lse)`` and the graph
structure -- O(N*H*F + E) -- and RECOMPUTES ``alpha_ij = exp(e_ij - lse_i)`` (rematerialization
as in SAR / FlashAttention) instead of keeping the E*H attention matrix alive between the passes.
Two backward implementations (``GatKernelConfig.backward``):

* ``"xla"``: plain edge-parallel JAX. Correct everywhere; it still builds E*H (and the E*H*F
  gathered ``h[col]``/``dout[row]``) temporaries *transiently inside the backward*, so peak memory
  during the backward is that of the reference, only the memory held from forward to backward
  shrinks.
* ``"pallas"``: two kernels without any E-sized float temporaries: a row kernel (CSR over
  receivers) for ``ds_dst`` and a column kernel (CSR over senders, the transposed structure) for
  ``dh`` and ``ds_src``.

Gathers in the Triton lowering (``jax/_src/pallas/triton/lowering.py``,
``_compute_offsets_from_indices``): integer-array indexers are lowered to tensors of pointers, so
``ref.at[idx_a, idx_b, ...]`` with integer arrays broadcasting to a common (power-of-2) shape is a
true gather (``tt.load`` of a pointer tensor, with ``mask``/``other``). Mixed array + slice
indexers also lower for Triton, but the interpret-mode discharge rule (``_load_discharge_rule``)
only supports all-slice/scalar or all-integer-array indexers, so every gather here uses integer
arrays only (feature offsets as ``arange`` broadcast against the sender ids) and keeps every index
in bounds (clamped; masked lanes read a valid address and are replaced by ``other``).

Shapes (N nodes, E edges, H heads, F features per head):
  indptr int32[N+1], col int32[E] (CSR over receivers), t_indptr int32[N+1], t_row int32[E]
  (CSR over senders, for the Pallas backward), h float[N, H, F], s_src/s_dst float[N, H];
  out float32[N, H, F], lse float32[N, H].
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

# A finite "minus infinity" for masked lanes (as in JAX's flash attention): exp(MASK - m) == 0
# and MASK - MASK == 0, so no inf - inf NaN can appear.
_MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)


@dataclasses.dataclass(frozen=True)
class GatKernelConfig:
    """Tile sizes and launch parameters of the GAT kernels (hashable; a static argument).

    Attributes:
      chunk: edges processed per loop step (C); a power of 2. Larger chunks mean fewer
        rescalings of ``acc`` and wider gathers, but more masked lanes on low-degree rows.
      num_warps: Triton warps per program.
      num_stages: Triton software-pipelining stages for the edge loop.
      backward: "xla" (edge-parallel JAX recompute) or "pallas" (row + column kernels).
    """

    chunk: int = 16
    num_warps: int = 4
    num_stages: int = 1
    backward: str = "pallas"

    def __post_init__(self):
        if self.chunk < 1 or self.chunk & (self.chunk - 1):
            raise ValueError(f"GatKernelConfig: chunk must be a power of 2, got {self.chunk}")
        if self.backward not in ("xla", "pallas"):
            raise ValueError(f"GatKernelConfig: backward must be 'xla' or 'pallas', got {self.backward!r}")


def _leaky_relu(z, slope):
    return jnp.where(z > 0, z, slope * z)


def _leaky_relu_grad(z, slope):
    return jnp.where(z > 0, 1.0, slope).astype(z.dtype)


def _chunk_edges(idx_ref, start, end, k, chunk):
    """Edge positions ``start + k*C + [0, C)``: (valid mask, neighbour ids (0 where invalid))."""
    pos = start + k * chunk + jnp.arange(chunk, dtype=jnp.int32)
    valid = pos < end
    pos = jnp.minimum(pos, idx_ref.shape[0] - 1)  # in bounds even for the masked tail
    nbr = plgpu.load(idx_ref.at[pos], mask=valid, other=0)
    return valid, nbr


def _gather_rows(ref, nbr, head, valid, n_feat, f_pad):
    """``ref[nbr, head, :F]`` as float32 [C, F_pad]; zero on masked edges and padded features."""
    f = jnp.arange(f_pad, dtype=jnp.int32)
    f_ok = f < n_feat
    f = jnp.minimum(f, n_feat - 1)
    rows = plgpu.load(ref.at[nbr[:, None], head, f[None, :]], mask=valid[:, None] & f_ok[None, :], other=0.0)
    return rows.astype(jnp.float32)


def _load_row(ref, i, head, n_feat, f_pad):
    """``ref[i, head, :F]`` as float32 [F_pad] (zero-padded)."""
    f = jnp.arange(f_pad, dtype=jnp.int32)
    f_ok = f < n_feat
    row = plgpu.load(ref.at[i, head, jnp.minimum(f, n_feat - 1)], mask=f_ok, other=0.0)
    return row.astype(jnp.float32)


def _n_chunks(start, end, chunk):
    return lax.div(end - start + (chunk - 1), chunk)


# --------------------------------------------------------------------------------------------
# Forward kernel
# --------------------------------------------------------------------------------------------


def _gat_fwd_kernel(indptr_ref, col_ref, h_ref, s_src_ref, s_dst_ref, out_ref, lse_ref, *,
                    chunk: int, n_feat: int, negative_slope: float):
    i, head = pl.program_id(0), pl.program_id(1)
    f_pad = out_ref.shape[-1]
    start, end = indptr_ref[i], indptr_ref[i + 1]
    s_i = s_dst_ref[i, head].astype(jnp.float32)

    def body(k, carry):
        m, l, acc = carry
        valid, j = _chunk_edges(col_ref, start, end, k, chunk)
        s_j = plgpu.load(s_src_ref.at[j, head], mask=valid, other=0.0).astype(jnp.float32)
        e = jnp.where(valid, _leaky_relu(s_i + s_j, negative_slope), _MASK_VALUE)
        m_new = jnp.maximum(m, jnp.max(e))  # every chunk holds >= 1 valid edge: m_new is real
        p = jnp.where(valid, jnp.exp(e - m_new), 0.0)
        rescale = jnp.exp(m - m_new)
        h_j = _gather_rows(h_ref, j, head, valid, n_feat, f_pad)
        acc = rescale * acc + jnp.sum(p[:, None] * h_j, axis=0)
        return m_new, rescale * l + jnp.sum(p), acc

    init = (jnp.float32(_MASK_VALUE), jnp.float32(0.0), jnp.zeros((f_pad,), jnp.float32))
    m, l, acc = lax.fori_loop(0, _n_chunks(start, end, chunk), body, init)
    has_edges = l > 0
    safe_l = jnp.where(has_edges, l, 1.0)
    out_ref[...] = acc / safe_l  # an empty row: acc == 0 -> 0
    lse_ref[...] = jnp.where(has_edges, m + jnp.log(safe_l), 0.0)  # 0 for empty rows (never read)


def _out_spec(f_pad):
    return pl.BlockSpec((None, None, f_pad), lambda i, k: (i, k, 0))


def _whole_spec(x):
    """The whole array ``x`` for every program (gathers index it directly)."""
    return pl.BlockSpec(x.shape, lambda *_: (0,) * x.ndim)


def _scalar_spec():
    return pl.BlockSpec((None, None), lambda i, k: (i, k))


def _compiler_params(config: GatKernelConfig):
    return plgpu.CompilerParams(num_warps=config.num_warps, num_stages=config.num_stages)


def gat_forward_pallas(indptr, col, h, s_src, s_dst, *, negative_slope: float,
                       config: GatKernelConfig, interpret: bool):
    """Runs the forward kernel. Returns ``(out float32[N, H, F], lse float32[N, H])``."""
    n, n_heads, n_feat = h.shape
    f_pad = pl.next_power_of_2(n_feat)
    kernel = functools.partial(_gat_fwd_kernel, chunk=config.chunk, n_feat=n_feat,
                               negative_slope=negative_slope)
    out, lse = pl.pallas_call(
        kernel,
        grid=(n, n_heads),
        in_specs=[_whole_spec(x) for x in (indptr, col, h, s_src, s_dst)],
        out_specs=[_out_spec(f_pad), _scalar_spec()],
        out_shape=[jax.ShapeDtypeStruct((n, n_heads, f_pad), jnp.float32),
                   jax.ShapeDtypeStruct((n, n_heads), jnp.float32)],
        compiler_params=_compiler_params(config),
        interpret=interpret,
        name="gat_forward",
    )(indptr, col, h, s_src, s_dst)
    return out[..., :n_feat], lse


# --------------------------------------------------------------------------------------------
# Backward kernels (recompute alpha from lse; no E-sized float temporaries)
# --------------------------------------------------------------------------------------------
#
# With z_ij = s_dst[i] + s_src[j], e_ij = LeakyReLU(z_ij), alpha_ij = exp(e_ij - lse_i),
# out_i = sum_j alpha_ij h_j and the incoming cotangent g_i = dout_i:
#   dh_j      = sum_i alpha_ij g_i                                  (column kernel)
#   dalpha_ij = g_i . h_j,   delta_i = g_i . out_i = sum_k alpha_ik dalpha_ik
#   dz_ij     = alpha_ij (dalpha_ij - delta_i) LeakyReLU'(z_ij)
#   ds_dst_i  = sum_j dz_ij  (row kernel),   ds_src_j = sum_i dz_ij  (column kernel)


def _gat_bwd_row_kernel(indptr_ref, col_ref, h_ref, s_src_ref, s_dst_ref, lse_ref, delta_ref,
                        g_ref, ds_dst_ref, *, chunk: int, n_feat: int, negative_slope: float):
    i, head = pl.program_id(0), pl.program_id(1)
    f_pad = pl.next_power_of_2(n_feat)
    start, end = indptr_ref[i], indptr_ref[i + 1]
    s_i, lse_i, delta_i = s_dst_ref[i, head], lse_ref[i, head], delta_ref[i, head]
    g_i = _load_row(g_ref, i, head, n_feat, f_pad)

    def body(k, acc):
        valid, j = _chunk_edges(col_ref, start, end, k, chunk)
        z = s_i.astype(jnp.float32) + plgpu.load(s_src_ref.at[j, head], mask=valid, other=0.0).astype(jnp.float32)
        alpha = jnp.where(valid, jnp.exp(_leaky_relu(z, negative_slope) - lse_i), 0.0)
        dalpha = jnp.sum(_gather_rows(h_ref, j, head, valid, n_feat, f_pad) * g_i[None, :], axis=1)
        return acc + jnp.sum(alpha * (dalpha - delta_i) * _leaky_relu_grad(z, negative_slope))

    ds_dst_ref[...] = lax.fori_loop(0, _n_chunks(start, end, chunk), body, jnp.float32(0.0))


def _gat_bwd_col_kernel(t_indptr_ref, t_row_ref, h_ref, s_src_ref, s_dst_ref, lse_ref, delta_ref,
                        g_ref, dh_ref, ds_src_ref, *, chunk: int, n_feat: int, negative_slope: float):
    j, head = pl.program_id(0), pl.program_id(1)
    f_pad = dh_ref.shape[-1]
    start, end = t_indptr_ref[j], t_indptr_ref[j + 1]
    s_j = s_src_ref[j, head].astype(jnp.float32)
    h_j = _load_row(h_ref, j, head, n_feat, f_pad)

    def body(k, carry):
        dh, ds = carry
        valid, i = _chunk_edges(t_row_ref, start, end, k, chunk)
        z = plgpu.load(s_dst_ref.at[i, head], mask=valid, other=0.0).astype(jnp.float32) + s_j
        lse_i = plgpu.load(lse_ref.at[i, head], mask=valid, other=0.0)
        delta_i = plgpu.load(delta_ref.at[i, head], mask=valid, other=0.0)
        alpha = jnp.where(valid, jnp.exp(_leaky_relu(z, negative_slope) - lse_i), 0.0)
        g_i = _gather_rows(g_ref, i, head, valid, n_feat, f_pad)
        dh = dh + jnp.sum(alpha[:, None] * g_i, axis=0)
        dalpha = jnp.sum(g_i * h_j[None, :], axis=1)
        ds = ds + jnp.sum(alpha * (dalpha - delta_i) * _leaky_relu_grad(z, negative_slope))
        return dh, ds

    init = (jnp.zeros((f_pad,), jnp.float32), jnp.float32(0.0))
    dh, ds = lax.fori_loop(0, _n_chunks(start, end, chunk), body, init)
    dh_ref[...] = dh
    ds_src_ref[...] = ds


def gat_backward_pallas(graph, h, s_src, s_dst, lse, delta, g, *, negative_slope: float,
                        config: GatKernelConfig, interpret: bool):
    """Gradients ``(dh float32[N,H,F], ds_src float32[N,H], ds_dst float32[N,H])`` by two kernels.

    ``graph`` is ``(indptr, col, row, t_indptr, t_row)``; ``delta[i, h] = g_i . out_i``.
    """
    indptr, col, _, t_indptr, t_row = graph
    n, n_heads, n_feat = h.shape
    f_pad = pl.next_power_of_2(n_feat)
    common = dict(chunk=config.chunk, n_feat=n_feat, negative_slope=negative_slope)
    dense = (h, s_src, s_dst, lse, delta, g)
    ds_dst = pl.pallas_call(
        functools.partial(_gat_bwd_row_kernel, **common),
        grid=(n, n_heads),
        in_specs=[_whole_spec(x) for x in (indptr, col, *dense)],
        out_specs=_scalar_spec(),
        out_shape=jax.ShapeDtypeStruct((n, n_heads), jnp.float32),
        compiler_params=_compiler_params(config),
        interpret=interpret,
        name="gat_backward_rows",
    )(indptr, col, *dense)
    dh, ds_src = pl.pallas_call(
        functools.partial(_gat_bwd_col_kernel, **common),
        grid=(n, n_heads),
        in_specs=[_whole_spec(x) for x in (t_indptr, t_row, *dense)],
        out_specs=[_out_spec(f_pad), _scalar_spec()],
        out_shape=[jax.ShapeDtypeStruct((n, n_heads, f_pad), jnp.float32),
                   jax.ShapeDtypeStruct((n, n_heads), jnp.float32)],
        compiler_params=_compiler_params(config),
        interpret=interpret,
        name="gat_backward_cols",
    )(t_indptr, t_row, *dense)
    return dh[..., :n_feat], ds_src, ds_dst


def gat_backward_xla(graph, h, s_src, s_dst, lse, delta, g, *, negative_slope: float):
    """The same gradients by edge-parallel JAX (builds E x H and E x H x F temporaries)."""
    _, col, row, _, _ = graph
    n = h.shape[0]
    z = s_dst[row].astype(jnp.float32) + s_src[col].astype(jnp.float32)  # [E, H]
    alpha = jnp.exp(_leaky_relu(z, negative_slope) - lse[row])  # recomputed, not stored
    g_r = g[row]  # [E, H, F]
    dh = jax.ops.segment_sum(alpha[..., None] * g_r, col, num_segments=n)
    dalpha = jnp.sum(g_r * h[col].astype(jnp.float32), axis=-1)
    dz = alpha * (dalpha - delta[row]) * _leaky_relu_grad(z, negative_slope)
    return (dh, jax.ops.segment_sum(dz, col, num_segments=n),
            jax.ops.segment_sum(dz, row, num_segments=n))


# --------------------------------------------------------------------------------------------
# custom_vjp entry
# --------------------------------------------------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def gat_pallas(negative_slope: float, config: GatKernelConfig, interpret: bool, graph, h, s_src, s_dst):
    """Fused GAT aggregation ``out float32[N, H, F]`` (see the module docstring).

    Args:
      negative_slope: LeakyReLU slope (static).
      config: `GatKernelConfig` (static).
      interpret: run the kernels in the Pallas interpreter (CPU) instead of Triton (static).
      graph: ``(indptr int32[N+1], col int32[E], row int32[E], t_indptr int32[N+1],
        t_row int32[E])``: the CSR over receivers, each CSR edge's receiver, and the CSR over
        senders (receivers grouped by sender). Not differentiated.
      h: float [N, H, F]; s_src, s_dst: float [N, H].
    """
    out, _ = gat_forward_pallas(graph[0], graph[1], h, s_src, s_dst, negative_slope=negative_slope,
                                config=config, interpret=interpret)
    return out


def _gat_pallas_fwd(negative_slope, config, interpret, graph, h, s_src, s_dst):
    out, lse = gat_forward_pallas(graph[0], graph[1], h, s_src, s_dst, negative_slope=negative_slope,
                                  config=config, interpret=interpret)
    # O(N*H*F + E) residuals: no E x H attention is saved.
    return out, (graph, h, s_src, s_dst, out, lse)


def _gat_pallas_bwd(negative_slope, config, interpret, res, g):
    graph, h, s_src, s_dst, out, lse = res
    g = g.astype(jnp.float32)
    delta = jnp.sum(g * out, axis=-1)  # [N, H]
    if config.backward == "pallas":
        dh, ds_src, ds_dst = gat_backward_pallas(graph, h, s_src, s_dst, lse, delta, g,
                                                 negative_slope=negative_slope, config=config,
                                                 interpret=interpret)
    else:
        dh, ds_src, ds_dst = gat_backward_xla(graph, h, s_src, s_dst, lse, delta, g,
                                              negative_slope=negative_slope)
    return (None, dh.astype(h.dtype), ds_src.astype(s_src.dtype), ds_dst.astype(s_dst.dtype))


gat_pallas.defvjp(_gat_pallas_fwd, _gat_pallas_bwd)
