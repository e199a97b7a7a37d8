"""`aggregate`: the one entry point through which every model aggregates messages."""

from __future__ import annotations

from typing import Union

import jax
import jax.numpy as jnp

from codesign.kernels.bsr import BlockSparseAdjacency, CondensedRowWindows, condensed_spmm_reference
from codesign.kernels.coo import CooAdjacency
from codesign.kernels.csr_cpu import CsrPattern, csr_aggregate
from codesign.kernels.pallas_condensed import condensed_spmm
from codesign.kernels.pallas_spmm import bsr_spmm, bsr_spmm_reference
from codesign.kernels.segment import dense_spmm, segment_spmm

# Backends over a `CooAdjacency` (x in original node order, [N, F]).
# "csr_scipy" needs a `CsrPattern` in ``adj.pattern`` (`with_csr_pattern`); host CPU only.
_IMPLS = {"segment": segment_spmm, "dense": dense_spmm, "csr_scipy": csr_aggregate}
# Backends over a `BlockSparseAdjacency` (x in its reordered, padded order, [n_pad, F]).
# "pallas" picks interpret mode by itself off GPU (`pallas_spmm.resolve_interpret`).
_BSR_IMPLS = {"bsr_xla": bsr_spmm_reference, "pallas": bsr_spmm}
# Backends over `CondensedRowWindows` (TC-GNN condensed tiles; x as for BSR, [n_pad, F]).
_CONDENSED_IMPLS = {"condensed_xla": condensed_spmm_reference, "pallas": condensed_spmm}


def _auto_bsr_impl() -> str:
    return "pallas" if jax.default_backend() == "gpu" else "bsr_xla"


# Below this many entries x feature columns, "auto" keeps segment_sum even with a CsrPattern: the
# callback's fixed cost outweighs the gain (Cora GCN, 13k entries x 16: 13 ms vs 10 ms per training
# epoch; R-MAT GCN, 2.2M entries x 64 and x 8: 0.54 s vs 0.70 s; 2-core CPU under load, 2026-11-22).
CSR_AUTO_MIN_WORK = 1 << 20


def _auto_coo_impl(adj: CooAdjacency, x: jax.Array) -> str:
    """scipy's CSR kernel where a `CsrPattern` is attached, the backend is the CPU and the product
    is large enough (``CSR_AUTO_MIN_WORK``), else segment_sum."""
    big = adj.n_edges * (x.shape[1] if x.ndim == 2 else 1) >= CSR_AUTO_MIN_WORK
    return "csr_scipy" if isinstance(adj.pattern, CsrPattern) and jax.default_backend() == "cpu" and big else "segment"


def _check_padded(adj, x) -> None:
    """``x`` must be [n_pad, F] in a block format's reordered, padded node order."""
    if x.ndim != 2 or x.shape[0] != adj.n_pad:
        raise ValueError(f"aggregate: x must be [n_pad={adj.n_pad}, F] in the adjacency's reordered, padded "
                         f"order (adj.permute_features(x)), got shape {x.shape}")


def aggregate(adj: Union[CooAdjacency, BlockSparseAdjacency, CondensedRowWindows], x: jax.Array,
              impl: str = "auto") -> jax.Array:
    """Sum-aggregation ``A @ x`` over the adjacency ``adj`` (rows = receivers).

    Args:
      adj: `CooAdjacency` over N nodes, or `BlockSparseAdjacency` (BSR tiles of the reordered graph).
      x: float [N, F] for a `CooAdjacency`; float [n_pad, F] in the reordered, padded node order
        (``adj.permute_features(x)``) for a `BlockSparseAdjacency`.
      impl: for a `CooAdjacency`: "auto" ("csr_scipy" on CPU when ``adj.pattern`` is a
        `CsrPattern` and E x F >= ``CSR_AUTO_MIN_WORK``, else "segment"), "segment" (XLA gather + segment_sum reference), "dense"
        (dense N x N product; tests and tiny graphs only), "csr_scipy" (scipy CSR through a host
        callback, `codesign.kernels.csr_cpu`; needs `with_csr_pattern`), or
        "bsr_xla" / "pallas" when ``adj.pattern`` is set (`CooAdjacency.with_block_pattern`): the
        edge weights are scattered into the pattern's tiles and x is permuted in and out.
        For a `BlockSparseAdjacency`: "auto" ("pallas" on GPU, else "bsr_xla"), "bsr_xla" (einsum
        over tiles + segment_sum) or "pallas" (Triton kernel; the interpreter off GPU).
        For `CondensedRowWindows` (x as for BSR): "auto" ("pallas" on GPU, else "condensed_xla"),
        "condensed_xla" (`condensed_spmm_reference`) or "pallas" (`condensed_spmm`).
        `codesign.kernels.choose_format` says which tile format suits a graph.

    Returns:
      float [N, F] (COO) or [n_pad, F] (BSR / condensed, same order as ``x``).

    Raises:
      ValueError: unknown ``impl``, an ``impl`` that does not fit the adjacency type (the message
        says what to pass), or ``x`` whose first dimension does not match.
    """
    if isinstance(adj, BlockSparseAdjacency):
        name = _auto_bsr_impl() if impl == "auto" else impl
        if name in _IMPLS:
            raise ValueError(f"aggregate: impl {impl!r} needs a CooAdjacency; for a BlockSparseAdjacency pass "
                             f"impl='auto', 'bsr_xla' or 'pallas'")
        if name not in _BSR_IMPLS:
            raise ValueError(f"aggregate: unknown impl {impl!r}; for a BlockSparseAdjacency choose from "
                             f"{['auto', *_BSR_IMPLS]}")
        _check_padded(adj, x)
        return _BSR_IMPLS[name](adj, x)
    if isinstance(adj, CondensedRowWindows):
        name = ("pallas" if jax.default_backend() == "gpu" else "condensed_xla") if impl == "auto" else impl
        if name not in _CONDENSED_IMPLS:
            raise ValueError(f"aggregate: unknown impl {impl!r} for CondensedRowWindows; choose from "
                             f"{['auto', *_CONDENSED_IMPLS]}")
        _check_padded(adj, x)
        return _CONDENSED_IMPLS[name](adj, x)
    if not isinstance(adj, CooAdjacency):
        raise ValueError(f"aggregate: adj must be a CooAdjacency, BlockSparseAdjacency or CondensedRowWindows, "
                         f"got {type(adj).__name__}")
    if impl in _BSR_IMPLS:
        if adj.pattern is None or isinstance(adj.pattern, CsrPattern):
            raise ValueError(f"aggregate: impl {impl!r} needs block structure: attach it with "
                             f"adj.with_block_pattern(block_size) (or pass a BlockSparseAdjacency, or use "
                             f"impl='segment' / 'dense')")
        w = jnp.ones(adj.senders.shape, x.dtype) if adj.edge_weight is None else adj.edge_weight
        bsr = adj.pattern.tiles(w)
        return bsr.unpermute(_BSR_IMPLS[impl](bsr, bsr.permute_features(x)))
    if x.ndim != 2 or x.shape[0] != adj.n_nodes:
        raise ValueError(f"aggregate: x must be [n_nodes={adj.n_nodes}, F], got shape {x.shape}")
    name = _auto_coo_impl(adj, x) if impl == "auto" else impl
    if name not in _IMPLS:
        raise ValueError(f"aggregate: unknown impl {impl!r}; choose from {['auto', *_IMPLS, *_BSR_IMPLS]}")
    return _IMPLS[name](adj, x)
