"""CPU sparse-dense products through scipy.sparse CSR, called from JAX as host callbacks.

Why this exists: on this project's 2-core CPU, XLA's gather + ``segment_sum`` (`segment_spmm`)
runs ``A @ X`` over an R-MAT graph with 131k nodes and 2.2M entries at F = 64 in 280-440 ms;
scipy's compiled CSR kernel (``csr_matvecs``) takes 110 ms on one core (measured 2026-11-22).
scipy is the library doing the work; this module is the glue: a CSR structure built once per
graph on the host (`CsrPattern`), a `jax.custom_vjp` (`csr_spmm`) whose backward runs the
transposed product on the precomputed transposed structure, and a thread pool that runs
independent (head, row-block) pieces on all cores (scipy's kernels release the GIL).

Edge values are not part of the pattern: they are passed through the callback on every call
(``data``, in CSR order), so learned, gated or attention-weighted edges work, and their gradient
(an SDDMM, ``d data[e] = <dY[row_e], X[col_e]>``) is computed on the host too, only when the
values are being differentiated. scipy has no SDDMM; it is NumPy here (gathers in 4096-edge
blocks that stay in cache, the sum over F as a BLAS gemv: 130 ms for 2.2M entries x 8 heads x 8
on one core, against 1 s for XLA's gather + reduce).

Costs of the glue: each call crosses to Python (`_callback`; its operands are NumPy views of XLA's
buffers, its results copied into XLA's), the structure is closed over (`HostCsr`) instead of passed
(`jax.pure_callback`, the fallback, copies every operand: about 45 ms per 64 MiB here), values go
across head-major ([H, E], transposed once by XLA and kept for the backward), and the backward's
two cotangents come from one callback, so ``dY`` crosses once.

Multi-head form (GAT): ``data [E, H]`` and ``x [N, H, F]`` give
``out[i, h] = sum_{e in row i} data[e, h] * x[col_e, h]``, H products sharing one structure.

Reference: `codesign.kernels.segment.segment_spmm` (tests/test_csr_cpu.py checks values and
gradients against it).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from codesign.kernels.coo import CooAdjacency

try:  # scipy's CSR x dense kernel, which ``csr_matrix @ ndarray`` calls with a fresh output array;
    # called directly it accumulates into a slice of ours (no product-sized temporary)
    from scipy.sparse._sparsetools import csr_matvecs as _csr_matvecs
except ImportError:  # pragma: no cover - a scipy without it: ``csr_matrix @ x``, one copy more
    _csr_matvecs = None

__all__ = ["CsrPattern", "HostCsr", "csr_pattern", "with_csr_pattern", "csr_spmm", "csr_aggregate", "n_host_threads",
           "structural_degree"]

_SPMM_CHUNK = 1 << 22  # entries per SpMM sub-block: its permuted values are a 16 MiB buffer, not [E]
_SDDMM_CHUNK = 4096  # edges per SDDMM block: the gathered [chunk, H*F] rows stay in L2 cache
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@dataclasses.dataclass(frozen=True, eq=False)
class HostCsr:
    """NumPy views of a `CsrPattern`'s structure that the host callbacks read (closed over, so
    they never travel through the callback's operands). Hashed and compared by identity: it is
    static pytree metadata, one ``jit`` trace per pattern object.

    Fields (E entries, N nodes): indptr int32 [N+1]; indices int32 [E] (column of each CSR entry);
    rows int32 [E] (row of each CSR entry); t_indptr int32 [N+1], t_indices int32 [E] (Aᵀ's CSR;
    the same array as ``indices`` when the structure is symmetric, as an undirected graph's is, so
    it is stored once); t_perm int32 [E] (CSR position of each Aᵀ entry: Aᵀ's values are
    ``data[t_perm]``).
    """

    indptr: np.ndarray
    indices: np.ndarray
    rows: np.ndarray
    t_indptr: np.ndarray
    t_indices: np.ndarray
    t_perm: np.ndarray


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CsrPattern:
    """The CSR structure of a COO edge list (rows = receivers) and of its transpose.

    Fields (E entries, N nodes; "CSR order" = sorted by (receiver, sender), stable):
      indices: int32 [E]    column (sender) of each CSR entry.
      rows:    int32 [E]    row (receiver) of each CSR entry; non-decreasing.
      perm:    int32 [E]    COO position of each CSR entry: ``indices == senders[perm]``;
                            ``w[perm]`` brings COO-ordered values into CSR order. None: the
                            edge list is in CSR order already (senders = indices, receivers =
                            rows; `codesign.vertex.lower` runs a program's edges so).
      degree:  float32 [N]  entries per row (the in-degree; self-loops counted when the pattern
                            was built with them): an unweighted graph's degrees, kept with its
                            structure so a normalization need not scatter-add E ones every step
                            (`structural_degree`).
      host:    `HostCsr` (static)  the row pointers and the transposed structure, on the host.
      n_nodes: int (static) N.

    Build it once per graph with `csr_pattern` (or `with_csr_pattern`).
    """

    indices: jax.Array
    rows: jax.Array
    perm: Optional[jax.Array]
    degree: jax.Array
    host: HostCsr = dataclasses.field(default=None, metadata=dict(static=True))
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))

    @property
    def n_entries(self) -> int:
        return int(self.indices.shape[0])


def _indptr(sorted_keys: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(np.bincount(sorted_keys, minlength=n))]).astype(np.int32)


def csr_pattern(senders, receivers, n_nodes: int, self_loops: bool = False) -> CsrPattern:
    """`CsrPattern` of the edge list ``senders -> receivers`` (host-side NumPy; O(E log E)).

    Args:
      senders, receivers: int [E] in ``[0, n_nodes)``.
      n_nodes: N >= 1.
      self_loops: describe the list followed by one self-loop per node (E + N entries, the order
        in which `codesign.graph.add_self_loops` and `codesign.models.gcn_normalize` append them).

    Raises:
      ValueError: naming ``senders``/``receivers``/``n_nodes`` if shapes, dtypes or ranges are bad.
    """
    s, r = np.asarray(senders), np.asarray(receivers)
    if s.ndim != 1 or s.shape != r.shape:
        raise ValueError(f"csr_pattern: senders and receivers must be 1-D of equal length, got {s.shape=}, {r.shape=}")
    for name, v in (("senders", s), ("receivers", r)):
        if v.size and not np.issubdtype(v.dtype, np.integer):
            raise ValueError(f"csr_pattern: {name} must be integers, got dtype {v.dtype}")
    if not isinstance(n_nodes, (int, np.integer)) or n_nodes < 1:
        raise ValueError(f"csr_pattern: n_nodes must be an int >= 1, got {n_nodes!r}")
    n = int(n_nodes)
    if s.size and (min(s.min(), r.min()) < 0 or max(s.max(), r.max()) >= n):
        raise ValueError(f"csr_pattern: senders/receivers must lie in [0, n_nodes={n})")
    s, r = s.astype(np.int64), r.astype(np.int64)
    if self_loops:
        s, r = np.concatenate([s, np.arange(n)]), np.concatenate([r, np.arange(n)])
    perm = np.lexsort((s, r))  # primary key: receiver
    col, row = s[perm], r[perm]
    t_perm = np.lexsort((row, col))  # CSR positions grouped by sender, receivers ascending
    del s, r
    indices, rows = jnp.asarray(col, jnp.int32), jnp.asarray(row, jnp.int32)
    indptr, t_indptr = _indptr(row, n), _indptr(col[t_perm], n)
    t_indices = row[t_perm].astype(np.int32)
    host_indices = np.asarray(indices)  # a view, no copy
    if np.array_equal(t_indptr, indptr) and np.array_equal(t_indices, host_indices):
        t_indices = host_indices  # structurally symmetric (an undirected graph): Aᵀ's CSR is A's
    host = HostCsr(indptr=indptr, indices=host_indices, rows=np.asarray(rows), t_indptr=t_indptr,
                   t_indices=t_indices, t_perm=t_perm.astype(np.int32))
    return CsrPattern(indices=indices, rows=rows, perm=jnp.asarray(perm, jnp.int32),
                      degree=jnp.asarray(np.diff(indptr), jnp.float32), host=host, n_nodes=n)


def structural_degree(adj: CooAdjacency, self_loops: bool) -> Optional[jax.Array]:
    """float32 [N]: the in-degree of ``adj``'s edges (plus 1 with ``self_loops``) read from its
    `CsrPattern` where that is the degree a normalization would sum: ``adj`` unweighted
    (``edge_weight`` None) and its pattern built over its E edges (E + N with ``self_loops``).
    None otherwise: the caller sums the weights (``segment_sum``; with gates or edge weights the
    degree is not a property of the structure)."""
    p = getattr(adj, "pattern", None)
    if not isinstance(p, CsrPattern) or adj.edge_weight is not None:
        return None
    return p.degree if p.n_entries == adj.n_edges + (adj.n_nodes if self_loops else 0) else None


def with_csr_pattern(adj: CooAdjacency, self_loops: bool = False) -> CooAdjacency:
    """``adj`` with a `CsrPattern` of its edges in ``adj.pattern`` (host-side, once per graph), so
    that ``aggregate(..., impl="csr_scipy")`` (and ``"auto"`` on CPU) runs scipy's CSR kernel.
    Pass ``self_loops=True`` for models that append self-loops (GCN's `gcn_normalize`, GAT), which
    hand the pattern on. Replaces a block pattern, if any."""
    return dataclasses.replace(adj, pattern=csr_pattern(adj.senders, adj.receivers, adj.n_nodes, self_loops))


# ------------------------------------------------------------------------------------ host side

@functools.lru_cache(maxsize=None)
def _pool(n: int) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(n, thread_name_prefix="csr_cpu")


def n_host_threads() -> int:
    """Threads of the host kernels: ``$CODESIGN_CSR_THREADS``, else the CPUs this process may use."""
    env = os.environ.get("CODESIGN_CSR_THREADS")
    if env:
        return max(1, int(env))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _run(jobs) -> None:
    n = n_host_threads()
    if n == 1 or len(jobs) == 1:
        for job in jobs:
            job()
        return
    for f in [_pool(n).submit(job) for job in jobs]:
        f.result()


def _row_blocks(indptr: np.ndarray, n_blocks: int) -> list[tuple[int, int]]:
    """``n_blocks`` contiguous row ranges with about equal numbers of entries."""
    n_rows = indptr.shape[0] - 1
    cuts = np.searchsorted(indptr, np.linspace(0, indptr[-1], n_blocks + 1)[1:-1])
    bounds = np.unique(np.concatenate([[0], np.clip(cuts, 0, n_rows), [n_rows]]))
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _spmm_pieces(indptr, indices, n_cols, pieces, src_perm, dtype) -> None:
    """Run ``out = A(vals) @ x`` for every ``(vals [E], x_of () -> [N, F'], out [R, F'])`` in
    ``pieces`` (one CSR structure, values per piece; ``out`` zeroed), split into row blocks over
    the thread pool. ``x_of`` is called inside the job, so its copy (a strided head slice) runs on
    the pool too.

    Each block runs in sub-blocks of at most `_SPMM_CHUNK` entries, so the values it permutes
    (``src_perm``, the backward pass) are a small buffer, and where ``out``'s rows are contiguous
    scipy's CSR kernel (``csr_matvecs``, what ``csr_matrix @ dense`` calls) accumulates into them
    directly instead of into a product of the block's size that is then copied."""
    blocks = _row_blocks(indptr, max(1, -(-n_host_threads() // len(pieces))))

    def job(vals_all, x_of, out, r0, r1):
        if int(indptr[r1]) == int(indptr[r0]):
            return
        x = np.ascontiguousarray(x_of())
        direct = _csr_matvecs is not None and out.flags.c_contiguous and out.dtype == x.dtype == dtype
        n_sub = max(1, -(-(int(indptr[r1]) - int(indptr[r0])) // _SPMM_CHUNK))
        for s0, s1 in _row_blocks(indptr[r0:r1 + 1], n_sub):
            s0, s1 = s0 + r0, s1 + r0
            lo, hi = int(indptr[s0]), int(indptr[s1])
            if hi == lo:
                continue
            vals = vals_all[lo:hi] if src_perm is None else np.take(vals_all, src_perm[lo:hi])
            vals = np.ascontiguousarray(vals, dtype)
            ptr = (indptr[s0:s1 + 1] - lo).astype(indices.dtype, copy=False)
            if direct:  # out[s0:s1] += A_block @ x, in place
                _csr_matvecs(s1 - s0, n_cols, x.shape[1], ptr, indices[lo:hi], vals, x.reshape(-1),
                             out[s0:s1].reshape(-1))
            else:
                out[s0:s1] = sp.csr_matrix((vals, indices[lo:hi], ptr), shape=(s1 - s0, n_cols)) @ x

    _run([functools.partial(job, *piece, r0, r1) for piece in pieces for r0, r1 in blocks])


def _spmm_host(indptr, indices, data, x, src_perm=None):
    """``out[..., i, h] = sum_{e in row i} data'[..., h, e] x[..., indices[e], h]`` with
    ``data' = data[..., src_perm]`` (``src_perm`` None: ``data`` itself). data [*Bd, H, E]
    (head-major: each head's values contiguous), x [*Bx, N, H, F] -> [*B, N_rows, H, F], where the
    leading batch axes (from ``jax.vmap``, ``vmap_method="expand_dims"``: size 1 where an operand
    is not batched) broadcast to B. One host call for the whole batch: values shared by the batch
    fold its axis into the features (one wider product per head); batched values are more heads."""
    indptr, indices, data, x = (np.asarray(a) for a in (indptr, indices, data, x))
    src_perm = None if src_perm is None else np.asarray(src_perm)
    n_rows, (n_cols, heads, f), n_e = indptr.shape[0] - 1, x.shape[-3:], data.shape[-1]
    batch = np.broadcast_shapes(data.shape[:-2], x.shape[:-3])
    if all(d == 1 for d in data.shape[:-2]):  # values shared: x's batch becomes features
        xb, d2 = x.reshape(-1, n_cols, heads, f), data.reshape(heads, n_e)
        nb = xb.shape[0]
        out = np.zeros((n_rows, heads, nb * f), x.dtype)
        pieces = [(d2[h], functools.partial(lambda h: np.moveaxis(xb[:, :, h], 0, 1).reshape(n_cols, nb * f), h),
                   out[:, h]) for h in range(heads)]
        _spmm_pieces(indptr, indices, n_cols, pieces, src_perm, x.dtype)
        if nb == 1:
            return out.reshape(*batch, n_rows, heads, f)
        return np.ascontiguousarray(np.moveaxis(out.reshape(n_rows, heads, nb, f), 2, 0)).reshape(
            *batch, n_rows, heads, f)
    dv = np.broadcast_to(data, (*batch, heads, n_e))  # views: indexing one batch element copies nothing
    xv = np.broadcast_to(x, (*batch, n_cols, heads, f))
    out = np.zeros((*batch, n_rows, heads, f), x.dtype)
    pieces = []
    for b in np.ndindex(*batch):
        pieces += [(dv[b][h], functools.partial(lambda b, h: xv[b][:, h], b, h), out[b][:, h]) for h in range(heads)]
    _spmm_pieces(indptr, indices, n_cols, pieces, src_perm, x.dtype)
    return out


def _sddmm_host(rows, indices, g, x):
    """``out[..., e, h] = <g[..., rows[e], h], x[..., indices[e], h]>``: g [*Bg, N, H, F],
    x [*Bx, N, H, F] -> [*B, E, H] (leading batch axes broadcast to B, as in `_spmm_host`; a
    batch is folded into the heads)."""
    rows, indices, g, x = (np.asarray(a) for a in (rows, indices, g, x))
    n_edges, (n, heads, f) = rows.shape[0], x.shape[-3:]
    batch = np.broadcast_shapes(g.shape[:-3], x.shape[:-3])
    nb = int(np.prod(batch, dtype=np.int64))

    def heads_last(a):  # [*B', N, H, F] -> [N, nb * H * F], batch folded into the heads
        if nb == 1:
            return a.reshape(n, heads * f)
        a = np.broadcast_to(a, (*batch, n, heads, f)).reshape(nb, n, heads * f)
        return np.ascontiguousarray(np.moveaxis(a, 0, 1)).reshape(n, nb * heads * f)

    x2, g2 = heads_last(x), heads_last(g)
    out = np.empty((nb, n_edges, heads), x.dtype)  # the batch leading, as the caller wants it
    ones = np.ones((f,), x.dtype)

    def job(start, stop):  # one contiguous range per thread, in cache-sized blocks
        for lo in range(start, stop, _SDDMM_CHUNK):
            hi = min(lo + _SDDMM_CHUNK, stop)
            prod = np.take(x2, indices[lo:hi], axis=0)
            prod *= np.take(g2, rows[lo:hi], axis=0)
            d = (prod.reshape(-1, f) @ ones).reshape(-1, nb, heads)  # BLAS gemv: fast sum over F
            out[:, lo:hi] = d[:, 0] if nb == 1 else d.transpose(1, 0, 2)  # per chunk: in cache

    cuts = np.linspace(0, n_edges, n_host_threads() + 1).astype(np.int64)
    _run([functools.partial(job, int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:]) if b > a])
    return out.reshape(*batch, n_edges, heads)


# ---------------------------------------------------------------- the host call without copies
#
# `jax.pure_callback` hands its operands to the function as JAX arrays made by `jax.device_put`
# from the XLA buffers (a copy), and NumPy's view of one copies again: two [N, F] copies per
# operand, alive while the call runs (measured: 381 MiB operand, +381 MiB at ``np.asarray``, 0.49 s
# a call; the primitive below: +0, 0.19 s). The primitive below lowers through the same XLA host
# callback as `jax.pure_callback` (``jax._src.callback.emit_python_callback``, a JAX internal) but
# passes the NumPy views XLA gives it straight to the function, read-only. Its batching rule is
# pure_callback's ``vmap_method="expand_dims"``: batched operands get the batch as a leading axis,
# unbatched ones a leading axis of size 1, and the function handles the batch in one call. Where
# that internal is missing or has another signature (another JAX version), `jax.pure_callback`.

def _direct_host_call():
    try:
        import inspect

        from jax._src import core as jcore
        from jax._src import dispatch
        from jax._src.callback import emit_python_callback
        from jax._src.interpreters import batching, mlir
        params = inspect.signature(emit_python_callback).parameters
        if not {"ctx", "callback", "token", "operands", "operand_avals", "result_avals", "has_side_effect",
                "returns_token"} <= set(params):
            return None
    except Exception:  # noqa: BLE001 - any JAX without this internal: fall back to pure_callback
        return None

    prim = jcore.Primitive("codesign_host_call")
    prim.multiple_results = True
    prim.def_impl(functools.partial(dispatch.apply_primitive, prim))
    prim.def_abstract_eval(lambda *avals, fn, result_avals: list(result_avals))

    def lowering(ctx, *args, fn, result_avals):
        def call(*arrays):
            outs = fn(*arrays)
            return tuple(np.asarray(o, a.dtype).reshape(a.shape) for o, a in zip(outs, result_avals))
        out, _, _ = emit_python_callback(ctx, call, None, list(args), ctx.avals_in, ctx.avals_out,
                                         has_side_effect=False, returns_token=False)
        return out

    mlir.register_lowering(prim, lowering, platform="cpu", cacheable=False)

    def batch(args, dims, *, fn, result_avals):
        unmapped = getattr(batching, "not_mapped", None)  # None in this JAX
        size = next(a.shape[d] for a, d in zip(args, dims) if d is not unmapped)
        args = [jnp.expand_dims(a, 0) if d is unmapped else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)]
        avals = tuple(jcore.ShapedArray((size, *a.shape), a.dtype) for a in result_avals)
        return prim.bind(*args, fn=fn, result_avals=avals), [0] * len(avals)

    batching.primitive_batchers[prim] = batch

    def host_call(fn, shapes, *args):
        avals = tuple(jcore.ShapedArray(s.shape, s.dtype) for s in shapes)
        return prim.bind(*args, fn=fn, result_avals=avals)

    return host_call


_HOST_CALL = _direct_host_call()
"""``(fn, shapes, *args) -> list`` through the primitive above, or None (use `jax.pure_callback`)."""


def _callback(fn, result_shape_dtypes, *args):
    """``fn(*args)`` on the host (NumPy in, NumPy out), batched as ``vmap_method="expand_dims"``:
    under jax.vmap the host functions get the batch as leading axes (size 1 on unbatched operands)
    and handle it in one call, instead of one call per batch element."""
    single = isinstance(result_shape_dtypes, jax.ShapeDtypeStruct)
    shapes = (result_shape_dtypes,) if single else tuple(result_shape_dtypes)
    call = (lambda *a: (fn(*a),)) if single else fn
    if _HOST_CALL is None or jax.default_backend() != "cpu":
        out = jax.pure_callback(call, shapes, *args, vmap_method="expand_dims")
    else:
        out = _HOST_CALL(call, shapes, *args)
    return out[0] if single else tuple(out)


def _bwd_host(host: HostCsr, need_data: bool, need_x: bool, g, *args):
    """The cotangents asked for in one callback, so ``g`` crosses to the host once. ``args``:
    ``x`` [*B, N, H, F] if ``need_data``, then ``data`` [*B, H, E] if ``need_x`` (leading batch
    axes as in `_spmm_host`; each cotangent has the batch shape of all operands together)."""
    g, args = np.asarray(g), [np.asarray(a) for a in args]
    x = args.pop(0) if need_data else None
    data = args.pop(0) if need_x else None
    batch = np.broadcast_shapes(g.shape[:-3], *([] if x is None else [x.shape[:-3]]),
                                *([] if data is None else [data.shape[:-2]]))
    out = []
    if need_data:
        d = _sddmm_host(host.rows, host.indices, g, x)
        out.append(np.broadcast_to(d, (*batch, *d.shape[-2:])))
    if need_x:
        d = _spmm_host(host.t_indptr, host.t_indices, data, g, host.t_perm)
        out.append(np.broadcast_to(d, (*batch, *d.shape[-3:])))
    return tuple(out)


# ------------------------------------------------------------------------------------ JAX side

def _spmm(p: CsrPattern, data_hm, x):
    """data_hm: [H, E] (head-major)."""
    fn = functools.partial(_spmm_host, p.host.indptr, p.host.indices)
    return _callback(fn, jax.ShapeDtypeStruct((p.n_nodes, *x.shape[1:]), x.dtype), data_hm, x)


@jax.custom_vjp
def _csr_spmm3(p: CsrPattern, data, x):
    return _spmm(p, data.T, x)


def _fwd(p, data, x):
    # symbolic_zeros=True: every leaf arrives as a CustomVJPPrimal (value, perturbed)
    p = jax.tree.map(lambda leaf: leaf.value, p)
    data_hm = data.value.T  # one transpose, kept for the backward
    return _spmm(p, data_hm, x.value), (p, data_hm, x.value, data.perturbed, x.perturbed)


def _bwd(res, g):
    p, data_hm, x, need_data, need_x = res
    zero_p = jax.tree.map(lambda a: np.zeros(a.shape, jax.dtypes.float0), p)
    data = jax.ShapeDtypeStruct(data_hm.shape[::-1], data_hm.dtype)  # [E, H]
    d_data, d_x = jnp.zeros(data.shape, data.dtype), jnp.zeros_like(x)
    if isinstance(g, jax.custom_derivatives.SymbolicZero) or not (need_data or need_x):
        return zero_p, d_data, d_x
    shapes = ([jax.ShapeDtypeStruct(data.shape, x.dtype)] if need_data else []) + \
             ([jax.ShapeDtypeStruct(x.shape, x.dtype)] if need_x else [])
    args = ([x] if need_data else []) + ([data_hm] if need_x else [])
    out = list(_callback(functools.partial(_bwd_host, p.host, need_data, need_x), tuple(shapes), g, *args))
    if need_data:
        d_data = out.pop(0).astype(data.dtype)
    if need_x:
        d_x = out.pop(0)
    return zero_p, d_data, d_x


_csr_spmm3.defvjp(_fwd, _bwd, symbolic_zeros=True)


def csr_spmm(pattern: CsrPattern, data: jax.Array, x: jax.Array) -> jax.Array:
    """``out[i] = sum_{e in row i} data[e] * x[indices[e]]`` by scipy's CSR kernel; differentiable
    in ``data`` and ``x`` (backward: Aᵀ·dY on the transposed structure, and the SDDMM
    ``d data[e] = <dY[rows[e]], x[indices[e]]>``, each only when that input is differentiated).

    Args:
      pattern: `CsrPattern` with E entries over N nodes.
      data: float [E] or [E, H], the values in CSR order (``w[pattern.perm]`` for COO values w).
      x: float32/float64 [N, F] (with data [E]) or [N, H, F] (with data [E, H]: H heads).

    Returns:
      same shape and dtype as ``x`` (data is cast to x's dtype; accumulation in that dtype).

    Raises:
      ValueError: naming ``data`` or ``x`` if shapes do not match the pattern or each other, or
        ``x``'s dtype is not float32/float64.
    """
    if not isinstance(pattern, CsrPattern):
        raise ValueError(f"csr_spmm: pattern must be a CsrPattern, got {type(pattern).__name__}")
    if np.dtype(x.dtype) not in _DTYPES:
        raise ValueError(f"csr_spmm: x must be float32 or float64, got {x.dtype}")
    e, n = pattern.n_entries, pattern.n_nodes
    if x.ndim not in (2, 3) or x.shape[0] != n:
        raise ValueError(f"csr_spmm: x must be [n_nodes={n}, F] or [n_nodes, H, F], got shape {x.shape}")
    if x.ndim == 2 and data.shape == (e,):
        return _csr_spmm3(pattern, data.astype(x.dtype)[:, None], x[:, None, :])[:, 0, :]
    if x.ndim == 3 and data.shape == (e, x.shape[1]):
        return _csr_spmm3(pattern, data.astype(x.dtype), x)
    want = (e,) if x.ndim == 2 else (e, x.shape[1])
    raise ValueError(f"csr_spmm: data must be {want} for x of shape {x.shape} (E={e} pattern entries), "
                     f"got shape {data.shape}")


def csr_aggregate(adj: CooAdjacency, x: jax.Array, weight: Optional[jax.Array] = None) -> jax.Array:
    """``A @ x`` for a `CooAdjacency` carrying a `CsrPattern` (`with_csr_pattern`): the COO values
    (``weight`` if given, else ``adj.edge_weight``, else 1; float [E] or [E, H]) are brought into
    CSR order and `csr_spmm` runs. x: float [N, F] (or [N, H, F] with [E, H] values).

    Raises:
      ValueError: ``adj.pattern`` is not a `CsrPattern` or does not have ``adj.n_edges`` entries,
        or as `csr_spmm`.
    """
    p = adj.pattern
    if not isinstance(p, CsrPattern):
        raise ValueError("csr_aggregate: adj.pattern must be a CsrPattern: attach it with "
                         "codesign.kernels.with_csr_pattern(adj, self_loops=...)")
    if p.n_entries != adj.n_edges or p.n_nodes != adj.n_nodes:
        raise ValueError(f"csr_aggregate: adj.pattern describes {p.n_entries} entries over {p.n_nodes} nodes but "
                         f"adj has {adj.n_edges} over {adj.n_nodes} (self_loops= mismatch when building it?)")
    w = adj.edge_weight if weight is None else weight
    data = jnp.ones((p.n_entries,), x.dtype) if w is None else w if p.perm is None else w[p.perm]
    return csr_spmm(p, data, x)
