"""SAR-style sequential aggregation over remote partitions, inside `shard_map`.

``sar_aggregate`` computes, on each device ``p``, its block of ``A @ Y`` for a block-partitioned
adjacency (rows = receivers) one source partition at a time (Mostafa, "Sequential Aggregation
and Rematerialization: Distributed Full-batch Training of Graph Neural Networks on Large
Graphs", MLSys 2022, Alg. 1):

    acc = A_pp Y_p                                            (local edges, step 0)
    for s in 1 .. P-1:                                         (ring step; source q = (p - s) % P)
        halo = ppermute(Y_q[send_rows_s])                      (only the rows p's edges read)
        acc += A_pq halo

Each step is a `jax.checkpoint` (nothing saved): the backward pass fetches the halo again
(SAR's rematerialization) instead of keeping the P-1 received buffers, and sends the halo's
gradient back to its owner (the transpose of `jax.lax.ppermute`). An
`jax.lax.optimization_barrier` ties each step's send to the previous step's result, so the
scheduler cannot issue all exchanges at once.

What one device holds at once during aggregation (B block rows, F columns, H_s halo rows of
step s, L_s edge slots of step s): its own Y block [B, F], the accumulator [B, F], one halo
buffer [H_s, F] being sent and one being received, and one step's gathered messages [L_s, F]
-- never the features of all remote partitions. Forward and backward both hold at most one
step's halo.

With ``int8=True`` the halo rows are sent as int8 codes with one float32 scale per row
(`codesign.quant.export.quantize_rows_int8`); the gradient returns in float32 (straight-through:
the rounding is treated as the identity, Bengio et al., arXiv:1308.3432).
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np

from codesign.distributed.mesh import AXIS
from codesign.quant.export import quantize_rows_int8


def ring_perm(n_parts: int, step: int) -> tuple:
    """``((q, (q + step) % P) for q)``: device q sends to q + step at ring step ``step``."""
    return tuple((q, (q + step) % n_parts) for q in range(n_parts))


def _inverse(perm: tuple) -> tuple:
    return tuple((d, s) for s, d in perm)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
def int8_exchange(rows: jax.Array, perm: tuple) -> jax.Array:
    """Sends ``rows`` float32 [H, F] along ``perm`` as int8 codes + float32 row scales and returns
    the dequantized rows received (float32 [H, F]). Gradient: straight-through, sent back along
    the inverse permutation in float32. Call inside `shard_map` over axis `AXIS`."""
    codes, scales = quantize_rows_int8(rows)
    codes = jax.lax.ppermute(codes, AXIS, perm)
    scales = jax.lax.ppermute(scales, AXIS, perm)
    return codes.astype(rows.dtype) * scales[:, None].astype(rows.dtype)


def _int8_fwd(rows, perm):
    return int8_exchange(rows, perm), None


def _int8_bwd(perm, _, ct):
    return (jax.lax.ppermute(ct, AXIS, _inverse(perm)),)


int8_exchange.defvjp(_int8_fwd, _int8_bwd)


def exchange(rows: jax.Array, perm: tuple, int8: bool = False) -> jax.Array:
    """``jax.lax.ppermute`` of ``rows`` [H, F] along ``perm`` (float), or `int8_exchange`."""
    return int8_exchange(rows, perm) if int8 else jax.lax.ppermute(rows, AXIS, perm)


def _local_step(acc, y, snd, rcv, w):
    msgs = w[:, None].astype(y.dtype) * y[snd]
    return acc + jax.ops.segment_sum(msgs, rcv, num_segments=acc.shape[0])


def _remote_step(acc, y, rows, snd, rcv, w, *, perm, int8):
    halo = exchange(y[rows], perm, int8)
    msgs = w[:, None].astype(y.dtype) * halo[snd]
    return acc + jax.ops.segment_sum(msgs, rcv, num_segments=acc.shape[0])


_NOTHING = jax.checkpoint_policies.nothing_saveable


def sar_aggregate(y: jax.Array, send_rows: tuple, senders: jax.Array, receivers: jax.Array, weight: jax.Array,
                  offsets: tuple, lengths: tuple, *, int8: bool = False, remat: bool = True) -> jax.Array:
    """One device's block of ``A @ Y`` by sequential aggregation over the ring (module docstring).

    Call inside `shard_map` over the mesh axis `AXIS` (P devices).

    Args:
      y: float [B, F]  this device's block of Y.
      send_rows: tuple of P-1 int32 [H_s]  rows of ``y`` to send at step s = 1..P-1.
      senders, receivers: int32 [S]  edge slots (`codesign.distributed.Partition` layout).
      weight: float [S]  edge values (0 on padding slots).
      offsets, lengths: static slot ranges of each step (``Partition.edge_offsets/_lengths``).
      int8: send halo rows as int8 + per-row scales.
      remat: checkpoint every step (rematerialize the halo in the backward pass).

    Returns:
      float [B, F]: ``sum_s A_{p, p-s} Y_{p-s}``.
    """
    n_parts = len(offsets)
    ck = (lambda f, **kw: jax.checkpoint(functools.partial(f, **kw), policy=_NOTHING)) if remat else \
        (lambda f, **kw: functools.partial(f, **kw))
    acc = jnp.zeros_like(y)
    o, n = offsets[0], lengths[0]
    if n:
        acc = ck(_local_step)(acc, y, senders[o:o + n], receivers[o:o + n], weight[o:o + n])
    for s in range(1, n_parts):
        rows = send_rows[s - 1]
        o, n = offsets[s], lengths[s]
        if rows.shape[0] == 0:
            continue  # no device sends anything at this step
        # order: this step's send waits for the previous step's sum (one halo buffer at a time)
        y_b, acc = jax.lax.optimization_barrier((y, acc))
        step = ck(_remote_step, perm=ring_perm(n_parts, s), int8=int8)
        acc = step(acc, y_b, rows, senders[o:o + n], receivers[o:o + n], weight[o:o + n])
    return acc


_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_PERMUTE = re.compile(r"=\s*(\w+)\[([\d,]*)\][^=]*?\bcollective-permute\(")


def collective_permute_bytes(hlo_text: str) -> dict:
    """Bytes every device sends through ``collective-permute`` ops in an optimized HLO module
    (``jax.jit(f).lower(...).compile().as_text()``), by element type: ``{"s8": ..., "f32": ...,
    "total": ..., "ops": count, "shapes": [(dtype, dims), ...]}``. Synchronous permutes only (the
    CPU backend's form).

    Raises:
      ValueError: an element type not in the table.
    """
    out = {"total": 0, "ops": 0, "shapes": []}
    for dtype, dims in _PERMUTE.findall(hlo_text):
        if dtype not in _DTYPE_BYTES:
            raise ValueError(f"collective_permute_bytes: unknown HLO element type {dtype!r}")
        shape = tuple(int(d) for d in dims.split(",") if d)
        out["shapes"].append((dtype, shape))
        n = int(np.prod(shape)) * _DTYPE_BYTES[dtype]
        out[dtype] = out.get(dtype, 0) + n
        out["total"] += n
        out["ops"] += 1
    return out
