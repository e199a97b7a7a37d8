"""`aggregate`: the one entry point through which every model aggregates messages, and the one
``(format, impl)`` dispatch table behind it.

    format               impl            backend                                           x rows
    CooAdjacency         segment         XLA gather + segment_sum (`segment_spmm`, the reference)   N
    CooAdjacency         dense           dense N x N product (tests, tiny graphs)                   N
    CooAdjacency         csr_scipy       scipy CSR through a host callback (needs a `CsrPattern`)   N
    CooAdjacency         bsr_xla/pallas  the BSR backends over an attached `BlockPattern`           N
    CooAdjacency         pallas_csr      Triton CSR edge-chunk SpMM (`csr_chunk_spmm`; needs a `CsrChunks`) N
    BlockSparseAdjacency bsr_xla         einsum over tiles + segment_sum (`bsr_spmm_reference`)     n_pad
    BlockSparseAdjacency pallas          Triton BSR SpMM (`bsr_spmm`; interpreter off GPU)          n_pad
    CondensedRowWindows  condensed_xla   `condensed_spmm_reference`                                 n_pad
    CondensedRowWindows  pallas          Triton condensed SpMM (`condensed_spmm`)                   n_pad

``impl="auto"`` is resolved by `auto_impl`, the only place that chooses a backend.
"""

from __future__ import annotations

from typing import Callable, Union

import jax
import jax.numpy as jnp
import numpy as np

from codesign.kernels.bsr import BlockPattern, BlockSparseAdjacency
from codesign.kernels.condensed import CondensedRowWindows, condensed_spmm_reference
from codesign.kernels.coo import CooAdjacency
from codesign.kernels.csr_cpu import CsrPattern, csr_aggregate
from codesign.kernels.pallas_condensed import condensed_spmm
from codesign.kernels.pallas_csr import CsrChunks, csr_chunk_aggregate
from codesign.kernels.pallas_spmm import bsr_spmm, bsr_spmm_reference
from codesign.kernels.segment import dense_spmm, segment_spmm

__all__ = ["aggregate", "auto_impl", "feature_dtype", "IMPLS", "CSR_AUTO_MIN_WORK"]

Adjacency = Union[CooAdjacency, BlockSparseAdjacency, CondensedRowWindows]

# Below this many entries x feature columns, "auto" keeps segment_sum even with a CsrPattern: the
# callback's fixed cost outweighs the gain (Cora GCN, 13k entries x 16: 13 ms vs 10 ms per training
# epoch; R-MAT GCN, 2.2M entries x 64 and x 8: 0.54 s vs 0.70 s; 2-core CPU under load, 2026-11-22).
CSR_AUTO_MIN_WORK = 1 << 20


def _coo_on_blocks(kernel: Callable) -> Callable:
    """A BSR backend run on a `CooAdjacency` with a `BlockPattern`: the edge weights are scattered
    into the pattern's tiles and x is permuted in and out."""
    def run(adj: CooAdjacency, x: jax.Array) -> jax.Array:
        w = jnp.ones(adj.senders.shape, x.dtype) if adj.edge_weight is None else adj.edge_weight
        bsr = adj.pattern.tiles(w)
        return bsr.unpermute(kernel(bsr, bsr.permute_features(x)))
    return run


IMPLS: dict[tuple[type, str], Callable] = {
    (CooAdjacency, "segment"): segment_spmm,
    (CooAdjacency, "dense"): dense_spmm,
    (CooAdjacency, "csr_scipy"): csr_aggregate,
    (CooAdjacency, "bsr_xla"): _coo_on_blocks(bsr_spmm_reference),
    (CooAdjacency, "pallas"): _coo_on_blocks(bsr_spmm),
    (CooAdjacency, "pallas_csr"): csr_chunk_aggregate,
    (BlockSparseAdjacency, "bsr_xla"): bsr_spmm_reference,
    (BlockSparseAdjacency, "pallas"): bsr_spmm,
    (CondensedRowWindows, "condensed_xla"): condensed_spmm_reference,
    (CondensedRowWindows, "pallas"): condensed_spmm,
}
"""The dispatch table: ``(format class, impl name) -> backend(adj, x)``."""


def auto_impl(adj: Adjacency, x: jax.Array) -> str:
    """The backend ``impl="auto"`` runs: Pallas for the block formats on a GPU, their XLA references
    elsewhere; for a `CooAdjacency` the Pallas CSR kernel where a `CsrChunks` is attached, the
    backend is a GPU and x is float32 / bfloat16, scipy's CSR kernel where a `CsrPattern` is attached, the backend is the CPU
    and E x F >= `CSR_AUTO_MIN_WORK`, else segment_sum."""
    gpu = jax.default_backend() == "gpu"
    if isinstance(adj, CooAdjacency) and isinstance(adj.pattern, CsrChunks) and gpu \
            and x.dtype in (jnp.float32, jnp.bfloat16):
        return "pallas_csr"
    if isinstance(adj, BlockSparseAdjacency):
        return "pallas" if gpu else "bsr_xla"
    if isinstance(adj, CondensedRowWindows):
        return "pallas" if gpu else "condensed_xla"
    big = adj.n_edges * (x.shape[1] if x.ndim == 2 else 1) >= CSR_AUTO_MIN_WORK
    return "csr_scipy" if isinstance(adj.pattern, CsrPattern) and jax.default_backend() == "cpu" and big \
        else "segment"


def _impls_of(fmt: type) -> list[str]:
    return ["auto", *(impl for f, impl in IMPLS if f is fmt)]


def feature_dtype(x, name: str = "aggregate: x") -> jnp.dtype:
    """The dtype in which the aggregation kernels compute on ``x``: ``x``'s own dtype if it is a
    float, float32 for integer and bool ``x`` (see `aggregate`; `gat_aggregate` uses it too).

    Raises:
      ValueError: ``x`` is complex or not numeric (one line: ``name`` and the dtype).
    """
    dt = jnp.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)
    if jnp.issubdtype(dt, jnp.floating):
        return dt
    if jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_:
        return jnp.dtype(jnp.float32)
    raise ValueError(f"{name} must have a real (float, integer or bool) dtype, got {dt}")


def aggregate(adj: Adjacency, x: jax.Array, impl: str = "auto") -> jax.Array:
    """Sum-aggregation ``A @ x`` over the adjacency ``adj`` (rows = receivers).

    Feature dtypes: float features run as given (each backend accepts its own set: all take
    float32; bf16 / f16 / f64 as the dispatch table's backends document). Integer and bool
    features (int8, uint8, int16, int32, ...) are converted to float32 here, before dispatch, so
    every backend behaves the same: edge weights stay float, sums accumulate in float32 (never in
    the integer dtype, which would wrap: int8 100 + 100 is not -56) and the result is float32.
    This is exact while the weighted values and partial sums are integers below 2^24 in magnitude
    (e.g. int8 features with weights 1 on rows of fewer than 2^16 edges); otherwise it is rounded
    as float32 arithmetic is (int32 values above 2^24 lose low bits). Quantized int8 features with per-row scales have their own forward
    kernels, which load one byte per feature: `bsr_spmm_int8`, `csr_chunk_spmm_int8`.

    Args:
      adj: `CooAdjacency` over N nodes, `BlockSparseAdjacency` or `CondensedRowWindows`.
      x: float, integer or bool [N, F] for a `CooAdjacency`; [n_pad, F] in the block format's
        reordered, padded node order (``adj.permute_features(x)``) for the block formats.
      impl: "auto" (`auto_impl`) or a name of the dispatch table (module docstring) for ``adj``'s
        format; "bsr_xla" / "pallas" on a `CooAdjacency` need an attached `BlockPattern`
        (`codesign.kernels.with_block_pattern`), "csr_scipy" a `CsrPattern` (`with_csr_pattern`).

    Returns:
      [N, F] (COO) or [n_pad, F] (block formats, same order as ``x``): ``x``'s dtype for float
      ``x``, float32 for integer / bool ``x``.

    Raises:
      ValueError: an unknown ``impl`` or one that does not fit the adjacency (the message lists
        the valid ones, or says what to attach), ``x`` whose first dimension does not match, or a
        float dtype the chosen backend does not support (the backend's message), or complex /
        non-numeric ``x`` (one line naming the dtype).
    """
    acc = feature_dtype(x)
    if x.dtype != acc:
        x = x.astype(acc)
    fmt = type(adj)
    if fmt not in (CooAdjacency, BlockSparseAdjacency, CondensedRowWindows):
        raise ValueError(f"aggregate: adj must be a CooAdjacency, BlockSparseAdjacency or CondensedRowWindows, "
                         f"got {fmt.__name__}")
    name = auto_impl(adj, x) if impl == "auto" else impl
    if (fmt, name) not in IMPLS:
        if fmt is BlockSparseAdjacency and (CooAdjacency, name) in IMPLS:
            raise ValueError(f"aggregate: impl {impl!r} needs a CooAdjacency; for a BlockSparseAdjacency pass "
                             f"impl='auto', 'bsr_xla' or 'pallas'")
        raise ValueError(f"aggregate: unknown impl {impl!r} for {fmt.__name__}; choose from {_impls_of(fmt)}")
    if fmt is CooAdjacency:
        if name in ("bsr_xla", "pallas") and not isinstance(adj.pattern, BlockPattern):
            raise ValueError(f"aggregate: impl {impl!r} needs block structure: attach it with "
                             f"with_block_pattern(adj, block_size) (or pass a BlockSparseAdjacency, or use "
                             f"impl='segment' / 'dense')")
        if name not in ("bsr_xla", "pallas") and (x.ndim != 2 or x.shape[0] != adj.n_nodes):
            raise ValueError(f"aggregate: x must be [n_nodes={adj.n_nodes}, F], got shape {x.shape}")
    elif x.ndim != 2 or x.shape[0] != adj.n_pad:
        raise ValueError(f"aggregate: x must be [n_pad={adj.n_pad}, F] in the adjacency's reordered, padded "
                         f"order (adj.permute_features(x)), got shape {x.shape}")
    return IMPLS[(fmt, name)](adj, x)
