"""SAR-style sequential aggregation over remote partitions, inside `shard_map`.

``sar_aggregate`` computes, on each device ``p``, its block of ``A @ Y`` for a block-partitioned
adjacency (rows = receivers) one source partition at a time (Mostafa, "Sequential Aggregation
and Rematerialization: Distributed Full-batch Training of Graph Neural Networks on Large
Graphs", MLSys 2022, Alg. 1):

    acc = A_pp Y_p                                            (local edges, step 0)
    for s in 1 .. P-1:                                         (ring step; source q = (p - s) % P)
        halo = ppermute(Y_q[send_rows_s])                      (only the rows p's edges read)
        acc += A_pq halo

With ``remat=True`` (the default) the ring has a custom VJP (`_sar_remat`) that saves only its
inputs: the backward pass walks the ring again, one step at a time, **fetching each step's halo
again** (SAR's rematerialization) instead of keeping the P-1 received buffers, computes the step's
edge-weight gradient (``dw_e = <ct[rcv_e], src[snd_e]>``, needed with edge gates) and the halo's
gradient in chunks of `REMAT_CHUNK_EDGES` edge slots, and sends the latter back to its owner
(inverse permutation, in the cotangent's dtype). A `jax.checkpoint` per step did not survive the compiler: XLA's
common-subexpression elimination merged the re-fetch with the forward exchange, so every step's
gathered [L_s, F] messages stayed live from the forward to the backward pass (it compiled to the
same 12 collective-permutes as no rematerialization; with edge gates and ``remat=False`` about
ten times this VJP's memory per device: `experiments/remat_memory.py`,
results/remat_memory_cpu.json, docs/log/scale_out_rss.md). The re-fetch
and each step's gradients depend on the gradient the previous step left (an
`jax.lax.optimization_barrier` and an added ``0 * dy[0, 0]``, which XLA does not fold for floats),
so the steps run in sequence and are not merged. Without edge gates the re-fetched rows feed
nothing and XLA removes the exchange. In the forward pass each step's send depends on the previous
step's sum (an `jax.lax.optimization_barrier` and an added ``0 * acc[0, 0]``: XLA removes barriers
before it schedules, so a barrier alone let it issue all exchanges at once), so one halo buffer is
received at a time.

What one device holds at once during aggregation (B block rows, F columns, H_s halo rows of
step s, L_s edge slots of step s): its own Y block [B, F], the accumulator [B, F], one halo
buffer [H_s, F] being sent and one being received, and one chunk's gathered messages [C, F]
(`REMAT_CHUNK_EDGES` slots; with ``remat=False`` the forward pass gathers a whole step's [L_s, F],
which autodiff keeps anyway) -- never the features of all remote partitions.

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


def _gather(src, scale, idx, kernel=None):
    """``(scale * src @ kernel)[idx]`` without forming ``scale * src @ kernel``: the rows gathered,
    then multiplied (``scale`` None: 1; ``kernel`` None: the identity)."""
    rows = src[idx] if kernel is None else src[idx] @ kernel
    return rows if scale is None else scale[idx] * rows


def _step_sum(acc, src, snd, rcv, w, chunked, scale=None):
    """``acc + segment_sum(w[:, None] * (scale * src)[snd], rcv)`` (``scale`` [R, 1] or None: 1);
    ``chunked``: over `REMAT_CHUNK_EDGES` slots at a time (a `jax.lax.scan` adding into ``acc`` in
    place), so no [L, F] message buffer of the whole step is formed (the rematerializing ring,
    whose backward pass does not need it)."""
    if not chunked or snd.shape[0] <= REMAT_CHUNK_EDGES:
        return acc + jax.ops.segment_sum(w[:, None].astype(src.dtype) * _gather(src, scale, snd), rcv,
                                         num_segments=acc.shape[0])

    def body(a, chunk):
        s_c, r_c, w_c = chunk
        return a.at[r_c].add((w_c[:, None].astype(src.dtype) * _gather(src, scale, s_c)).astype(a.dtype)), None

    return jax.lax.scan(body, acc, _chunks(snd, rcv, w))[0]


def _zero_of(a: jax.Array, dtype) -> jax.Array:
    """A scalar 0 of ``dtype`` computed from ``a[0, 0]`` (0 also when that is not finite): adding it
    makes a value depend on ``a``, which the compiler cannot fold away (``0 * x`` is not simplified
    for floats), so the value is computed after ``a`` exists."""
    a0 = jax.lax.stop_gradient(a[0, 0])  # an ordering device only: no gradient flows through it
    return (jnp.where(jnp.isfinite(a0), a0, 0.0) * 0.0).astype(dtype)


def _remote_step(acc, y, rows, snd, rcv, w, *, perm, int8, chunked, zero, scale=None):
    # ``zero``: `_zero_of` the previous step's sum; the halo rows are sent scaled
    halo = exchange(_gather(y, scale, rows) + zero, perm, int8)
    return _step_sum(acc, halo, snd, rcv, w, chunked)


def _forward(y, send_rows, senders, receivers, weight, offsets, lengths, int8, chunked=False, scale=None,
             init=None):
    """The ring of `sar_aggregate`'s forward pass, ``init + A @ (scale * y)`` (``scale`` [B, 1] or
    None: 1; ``init`` [B, F] or None: 0; without rematerialization autodiff keeps what it needs;
    ``chunked``: each step's sum in chunks, `_step_sum`)."""
    n_parts = len(offsets)
    acc = jnp.zeros_like(y) if init is None else init
    o, n = offsets[0], lengths[0]
    if n:
        acc = _step_sum(acc, y, senders[o:o + n], receivers[o:o + n], weight[o:o + n], chunked, scale)
    for s in range(1, n_parts):
        rows = send_rows[s - 1]
        o, n = offsets[s], lengths[s]
        if rows.shape[0] == 0:
            continue  # no device sends anything at this step
        # order: this step's send waits for the previous step's sum (one halo buffer at a time):
        # a barrier, and a data dependence (``+ 0 * acc[0, 0]``), since XLA removes barriers
        # before it schedules
        y_b, acc = jax.lax.optimization_barrier((y, acc))
        acc = _remote_step(acc, y_b, rows, senders[o:o + n], receivers[o:o + n], weight[o:o + n],
                           perm=ring_perm(n_parts, s), int8=int8, chunked=chunked, zero=_zero_of(acc, y.dtype),
                           scale=scale)
    return acc


REMAT_CHUNK_EDGES = 1 << 14
"""Edge slots per chunk of a rematerialized ring step, forward and backward (ASSUMPTION: a size that keeps the chunk's
[C, F] buffers small, 4 MB at F = 64, while a chunk is still thousands of rows of work)."""


def _chunks(snd, rcv, w) -> tuple:
    """``(snd, rcv, w)`` [L] of one step as [ceil(L / C), C] rows of `REMAT_CHUNK_EDGES` slots,
    the last one padded with slots of weight 0 at node 0 (they add 0; their ``dw`` is dropped)."""
    pad = -snd.shape[0] % REMAT_CHUNK_EDGES
    return tuple(jnp.pad(a, (0, pad)).reshape(-1, REMAT_CHUNK_EDGES) for a in (snd, rcv, w))


def _step_grads(ct, src, snd, rcv, w, zero, scale=None, ct_scale=None):
    """``(dw [L], d_src [R, F])`` of one step's ``segment_sum(w[:, None] * (scale * src)[snd], rcv)``
    (``scale`` [R, 1] or None: 1) for the cotangent ``ct_scale * ct`` [B, F] (``ct_scale`` [B, 1]
    or None: 1, applied as rows are gathered): ``dw_e = <ct[rcv_e], (scale * src)[snd_e]>``,
    ``d_src = segment_sum(w * ct[rcv], snd)`` (the cotangent of ``scale * src``),
    over `REMAT_CHUNK_EDGES` slots at a time (a `jax.lax.scan`), so no [L, F] buffer of the whole
    step is formed. ``zero``: a scalar 0 computed from the gradient so far (`_zero_of`), from
    which the scan's initial ``d_src`` is broadcast, so the compiler cannot materialize every
    step's zeros at the start of the program."""
    n = snd.shape[0]
    if n <= REMAT_CHUNK_EDGES:
        ct_e = _gather(ct, ct_scale, rcv) + zero
        return (jnp.sum(ct_e * _gather(src, scale, snd), axis=1),
                jax.ops.segment_sum(w[:, None].astype(ct.dtype) * ct_e, snd, num_segments=src.shape[0]))

    def body(d_src, chunk):
        s_c, r_c, w_c = chunk
        # ``+ zero`` on the gathered rows: ordered after the gradient so far, no copy of ``ct`` per step
        ct_e = _gather(ct, ct_scale, r_c) + zero
        return (d_src.at[s_c].add(w_c[:, None].astype(ct.dtype) * ct_e),
                jnp.sum(ct_e * _gather(src, scale, s_c), axis=1))

    # (the initial zeros are varying over the mesh axis, as ``src`` is: ``zero`` comes from ``dy``)
    d_src, dw = jax.lax.scan(body, jnp.broadcast_to(zero.astype(ct.dtype), (src.shape[0], ct.shape[1])),
                             _chunks(snd, rcv, w))
    return dw.reshape(-1)[:n], d_src


def _ring_out(y, scale, send_rows, senders, receivers, weight, offsets, lengths, int8):
    """``(out, acc)``: `sar_aggregate`'s value ``out`` and the ring's result ``acc``: without
    ``scale`` both are ``A @ y``, else ``acc = scale * y + A @ (scale * y)`` and ``out = scale * acc``."""
    if scale is None:
        acc = _forward(y, send_rows, senders, receivers, weight, offsets, lengths, int8, chunked=True)
        return acc, acc
    # the ring adds into ``scale * y``, so ``out`` is one product of the ring's result: the compiler
    # fuses ``out`` into its later readers (the ReLU's backward pass) and then keeps that result
    # alone from the forward to the backward pass (from ``scale * (scale * y + agg)`` it kept ``y``
    # and ``agg``)
    acc = _forward(y, send_rows, senders, receivers, weight, offsets, lengths, int8, chunked=True, scale=scale,
                   init=scale * y)
    return scale * acc, acc


def _varying(a):
    """``a`` (None passes) cast to varying over `AXIS` where it is replicated (a GCN kernel): inside
    `_sar_remat` its gradient is then per device, and autodiff sums it over the devices (the
    transpose of the cast), as it does for a replicated kernel used in a per-device product."""
    if a is None:
        return a
    t = jax.typeof(a)
    kinds = getattr(t, "manual_axis_type", None)  # JAX 0.10; earlier releases: ``vma``
    varying = kinds.varying if kinds is not None else getattr(t, "vma", None)
    if varying is not None:
        return a if AXIS in varying else jax.lax.pcast(a, AXIS, to="varying")
    try:  # a release that names it otherwise: the cast refuses an array that already varies
        return jax.lax.pcast(a, AXIS, to="varying")
    except ValueError:
        return a


def _combine(x, kernel):
    """``x @ kernel`` (``kernel`` None: ``x``): the combine GEMM `sar_aggregate` may run first."""
    return x if kernel is None else x @ kernel


@functools.partial(jax.custom_vjp, nondiff_argnums=(7, 8, 9, 10, 11))
def _sar_remat(x, kernel, scale, send_rows, senders, receivers, weight, offsets, lengths, int8, thread, scale_grad):
    out = _ring_out(_combine(x, kernel), scale, send_rows, senders, receivers, weight, offsets, lengths, int8)[0]
    return (out, weight) if thread else out


def _sar_remat_fwd(x, kernel, scale, send_rows, senders, receivers, weight, offsets, lengths, int8, thread,
                   scale_grad):
    out, acc = _ring_out(_combine(x, kernel), scale, send_rows, senders, receivers, weight, offsets, lengths, int8)
    # its inputs only (no halo, no message, not ``y = x @ kernel``: the backward pass computes it
    # again) and, with a row scale, the ring's result ``acc``: the next operation's backward keeps
    # that array anyway (the GCN's ReLU takes its mask from ``out = scale * acc``, recomputed in
    # one fused loop), so it costs nothing here
    res = (x, kernel, scale, send_rows, senders, receivers, weight, acc if scale is not None and scale_grad else None)
    return ((out, weight) if thread else out), res


def _ring_grads(y, send_rows, senders, receivers, weight, offsets, lengths, int8, ct, dw, scale=None,
                after=None, kernel=None):
    """SAR's backward pass of ``A @ (scale * y)`` (``scale`` [B, 1] or None: 1) for the cotangent
    ``scale * ct`` [B, F] (``ct`` alone without ``scale``; scaled as its rows are gathered, so the
    product is never formed), one ring step at a time, after ``after`` (an array [R, C], default
    ``ct``: the ring starts from zeros computed from its first element): re-fetch the step's
    halo, then its gradients ``dw_e = <ct[rcv_e], src[snd_e]>`` (added into ``dw`` [S]) and
    ``d_src = segment_sum(w * ct[rcv], snd)``,
    the halo's part sent back to its owner (inverse permutation, float32; straight-through for
    int8) and added at the rows it came from. The rows are scaled as they are gathered or sent,
    so ``scale * y`` is never formed; with ``kernel`` [K, F], ``y`` [B, K] stands for ``y @
    kernel``: the local step (which reads about every row) forms that product for itself alone,
    each remote step multiplies only the rows it re-fetches, so it is not held through the remote
    steps. Each step starts from the gradient the previous one left,
    through an `jax.lax.optimization_barrier` and a data dependence (``+ 0 * dy[0, 0]`` on the rows
    re-fetched, which XLA does not fold for floats; a non-finite ``dy[0, 0]`` counts as 0), so the
    steps run in sequence, holding one step's buffers, and the re-fetch cannot be merged with the
    forward exchange by common-subexpression elimination.

    Returns ``(dz [B, F], dw [S])``, ``dz`` the cotangent of ``scale * y`` (of ``scale * y @ kernel``)."""
    n_parts = len(offsets)
    # the sum starts as zeros computed from ``ct``: a constant [B, F] broadcast was scheduled at
    # the start of the program and held through the forward pass
    dy = jnp.broadcast_to(_zero_of(ct if after is None else after, ct.dtype), ct.shape)
    for s in range(n_parts):
        o, n = offsets[s], lengths[s]
        if n == 0 or (s and send_rows[s - 1].shape[0] == 0):
            continue
        snd, rcv, w = senders[o:o + n], receivers[o:o + n], weight[o:o + n]
        dy, dw, ct_b, y_b = jax.lax.optimization_barrier((dy, dw, ct, y))
        zero = _zero_of(dy, ct.dtype)  # (0 also where dy[0, 0] is not finite: not NaN, which 0 * inf is)
        if s == 0:  # the local step reads about every row: ``y @ kernel`` formed for it alone
            y_k = y_b if kernel is None else y_b @ (kernel + zero.astype(kernel.dtype))
            dw_s, d_src = _step_grads(ct_b, y_k, snd, rcv, w, zero, scale, scale)
        else:
            rows = send_rows[s - 1]
            perm = ring_perm(n_parts, s)
            # the re-fetch (SAR's rematerialization); its rows' indices depend on ``dy`` too: with a
            # kernel the gather reads ``y`` (= ``x``), which exists from the forward pass on, and
            # the compiler issued every step's gather at once
            src = exchange(_gather(y_b, scale, rows + zero.astype(rows.dtype), kernel) + zero, perm, int8)
            dw_s, d_src = _step_grads(ct_b, src, snd, rcv, w, zero, None, scale)
        dw = dw.at[o:o + n].add(dw_s.astype(dw.dtype))
        if s == 0:
            dy = dy + d_src
        else:
            dy = dy.at[rows].add(jax.lax.ppermute(d_src, AXIS, _inverse(perm)))
    return dy, dw


def _threaded_dw(ct, weight, thread):
    """``(ct, dw)``: with ``thread`` the cotangent of the weights passed on (the later layers'
    edge-weight gradient, which this layer's adds into), else zeros computed from ``ct`` (``0 *
    ct[0, 0]``, 0 also when that is not finite), so the compiler cannot materialize the [S] zeros
    at the start of the program and keep them through the forward pass."""
    if thread:
        ct, dw = ct
        return ct, dw.astype(weight.dtype)
    return ct, jnp.broadcast_to(_zero_of(ct, weight.dtype), weight.shape)


def _sar_remat_bwd(offsets, lengths, int8, thread, scale_grad, res, ct):
    """SAR's backward pass (`_ring_grads`). With a row scale ``s`` (``out = s * (z + agg)``, ``z =
    s * y``, ``agg = A z``, ``y = x @ kernel``, or ``x`` without a kernel): the cotangent of ``z`` is
    ``g = s * ct + A^T (s * ct)``; ``dy = s * g`` and ``ds = <ct, z + agg> + <g, y>`` per row (``z
    + agg`` is the ring's result ``acc``, kept; ``<g, y>`` through `_row_dot_y`). Then ``dx = dy
    kernel^T`` and ``dkernel = x^T dy``. ``y`` is not kept from the forward pass and not held
    through the ring: `_ring_grads` forms it for the local step alone and multiplies the rows each
    remote step re-fetches. Without ``scale_grad`` the row scale is a constant: ``ds`` is returned
    as zeros, not computed."""
    x, kernel, scale, send_rows, senders, receivers, weight, acc = res
    ct, dw = _threaded_dw(ct, weight, thread)
    if scale is None:
        dy, dw = _ring_grads(x, send_rows, senders, receivers, weight, offsets, lengths, int8, ct, dw, kernel=kernel)
        d_scale = None
    else:
        # ``<ct, acc>`` first (with ``scale_grad``: ``acc`` kept), and the ring made to wait for it,
        # so ``acc`` can be freed before the ring's buffers exist (computed at the end, it kept one
        # more [B, F] array through the ring)
        d_acc = None if acc is None else jnp.sum(ct * acc, axis=1, keepdims=True)
        dz, dw = _ring_grads(x, send_rows, senders, receivers, weight, offsets, lengths, int8, ct, dw, scale, d_acc,
                             kernel)
        g = scale * ct + dz
        d_scale = jnp.zeros_like(scale) if acc is None else (d_acc + _row_dot_y(g, x, kernel)).astype(scale.dtype)
        dy = scale * g
    if kernel is None:
        return dy, None, d_scale, None, None, None, dw
    d_kernel = x.T @ dy
    # ``dx`` waits for all of ``d_kernel`` and ``d_scale`` (``+ 0 * sum(...)``; of one element, the
    # compiler computed that element alone): left to the end of the program (only the optimizer
    # and the degrees' gradient read them), these reductions kept ``x``, the previous layer's
    # output, through that layer's backward ring
    done = jnp.sum(d_kernel, keepdims=True) + (jnp.sum(d_scale, keepdims=True) if acc is not None else 0.0)
    dx = dy @ kernel.T + _zero_of(done, dy.dtype)
    return dx, d_kernel, d_scale, None, None, None, dw


def _row_dot_y(g, x, kernel):
    """``<g, y>`` per row, float [B, 1], for ``y = x @ kernel`` [B, F] (``x`` without a kernel),
    through the narrower of the two products: ``y`` itself where F <= K, else ``<g kernel^T, x>``
    (``g kernel^T`` [B, K]), computed after ``g``."""
    if kernel is None:
        return jnp.sum(g * x, axis=1, keepdims=True)
    if kernel.shape[1] <= kernel.shape[0]:  # (``+ 0 * g[0, 0]``: not merged with the forward pass's product)
        return jnp.sum(g * (x @ (kernel + _zero_of(g, kernel.dtype))), axis=1, keepdims=True)
    return jnp.sum((g @ kernel.T) * x, axis=1, keepdims=True)


_sar_remat.defvjp(_sar_remat_fwd, _sar_remat_bwd)


def sar_aggregate(y: jax.Array, send_rows: tuple, senders: jax.Array, receivers: jax.Array, weight: jax.Array,
                  offsets: tuple, lengths: tuple, *, int8: bool = False, remat: bool = True,
                  thread_weight: bool = False, row_scale: jax.Array | None = None, scale_grad: bool = True,
                  kernel: jax.Array | None = None):
    """One device's block of ``A @ Y`` by sequential aggregation over the ring (module docstring).

    Call inside `shard_map` over the mesh axis `AXIS` (P devices).

    Args:
      y: float [B, F]  this device's block of Y.
      send_rows: tuple of P-1 int32 [H_s]  rows of ``y`` to send at step s = 1..P-1.
      senders, receivers: int32 [S]  edge slots (`codesign.distributed.Partition` layout).
      weight: float [S]  edge values (0 on padding slots).
      offsets, lengths: static slot ranges of each step (``Partition.edge_offsets/_lengths``).
      int8: send halo rows as int8 + per-row scales.
      remat: rematerialize: the backward pass fetches each step's halo again (`_sar_remat`).
      thread_weight: also return ``weight`` itself, for the next layer to aggregate with. The
        edge-weight gradient that later layer leaves (its cotangent) is then the buffer this
        layer's backward pass adds its own into, so the layers' edge-weight gradients [S] share
        one buffer instead of one per layer summed at the end (learnable edge gates, with
        ``remat``; without, autodiff sums them as usual).
      row_scale: None, or float [B, 1] ``s`` (this device's rows; each sender scales the rows it
        sends): the result is then ``s * (s * Y + A @ (s * Y))``, the GCN's symmetric
        normalization with self-loops for ``s = D^-1/2`` (Kipf & Welling, ICLR 2017, eq. 2),
        differentiable in ``s``. With ``remat`` its backward pass keeps the ring's result ``s * Y
        + A @ (s * Y)`` alone (autodiff kept ``Y``, ``s * Y`` and the output where the degrees
        have a gradient, i.e. with edge gates).
      scale_grad: whether ``row_scale`` has a gradient (with ``remat``; False: it is taken as
        a constant, its gradient not computed but returned as zeros: a GCN whose degrees are data,
        without edge gates).
      kernel: None, or float [K, F]: ``y`` is then the layer's input X [B, K] and Y = X @ kernel
        (the combine-first GEMM of a GCN layer) is computed inside: with ``remat`` the backward
        pass neither keeps Y nor holds it through the ring (`_sar_remat_bwd`), where the edge-weight
        gradient needs it (edge gates); ``kernel`` may be replicated over the mesh, its gradient is
        then summed over the devices.

    Returns:
      float [B, F]: ``sum_s A_{p, p-s} Y_{p-s}`` (or its normalization, ``row_scale``); with
      ``thread_weight``, ``(that, weight)``.

    Raises:
      ValueError: ``kernel`` not of shape [K, F] with K = ``y``'s columns.
    """
    if kernel is not None and (kernel.ndim != 2 or kernel.shape[0] != y.shape[-1]):
        raise ValueError(f"sar_aggregate: kernel must be [K, F] with K = y's {y.shape[-1]} columns, "
                         f"got shape {tuple(kernel.shape)}")
    if remat:
        return _sar_remat(y, _varying(kernel), row_scale, tuple(send_rows), senders, receivers, weight, tuple(offsets),
                          tuple(lengths), bool(int8), bool(thread_weight), bool(scale_grad))
    y = _combine(y, kernel)
    out = _forward(y, send_rows, senders, receivers, weight, offsets, lengths, int8, scale=row_scale)
    if row_scale is not None:
        out = row_scale * (row_scale * y + out)
    return (out, weight) if thread_weight else out


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
