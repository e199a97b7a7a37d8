"""GAT attention aggregation: the plain-JAX reference and the public entry `gat_aggregate`.

Graph Attention Networks (Velickovic et al., ICLR 2018), eq. (1)-(4), per head:

    e_ij     = LeakyReLU(s_dst[i] + s_src[j])          s_src[j] = <a_src, h_j>, s_dst[i] = <a_dst, h_i>
    alpha_ij = exp(e_ij - max_k e_ik) / sum_k exp(e_ik - max_k e_ik)      over j in N(i)
    out[i]   = sum_{j in N(i)} alpha_ij h[j]

``N(i)`` are the senders of the edges received by ``i`` (duplicate edges count once each;
``edge_weight`` is ignored). Rows without edges give exactly zero.

Two implementations:
  * `gat_aggregate_reference`: gather + ``segment_max``/``segment_sum``; it materializes the E x H
    attention and, under autodiff, keeps E x H (and E x H x F) arrays alive for the backward.
  * ``codesign.kernels.pallas_gat.gat_pallas``: one fused Pallas (Triton) kernel with an online
    softmax over each receiver's CSR row; its ``custom_vjp`` saves O(N*H*F + E) and recomputes the
    attention from the saved per-row logsumexp.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

import jax
import jax.numpy as jnp

from codesign.kernels.api import auto_impl as _auto_impl
from codesign.kernels.api import feature_dtype
from codesign.kernels.coo import CooAdjacency
from codesign.kernels.pallas_gat import GatKernelConfig, gat_pallas

DEFAULT_NEGATIVE_SLOPE = 0.2  # LeakyReLU slope of the GAT paper


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CsrByReceiver:
    """Edges grouped by receiver (CSR, rows = receivers) plus the transposed grouping.

    Fields (E edges, N nodes):
      indptr:   int32 [N+1]  edges of receiver i are positions ``indptr[i]:indptr[i+1]``.
      col:      int32 [E]    sender of each CSR edge; ascending within a row.
      row:      int32 [E]    receiver of each CSR edge (non-decreasing).
      perm:     int32 [E]    COO position of each CSR edge: ``col == adj.senders[perm]``
                             (use it to bring per-edge COO data into CSR order).
      t_indptr: int32 [N+1]  CSR over senders: edges sent by j are ``t_indptr[j]:t_indptr[j+1]``.
      t_row:    int32 [E]    receiver of each sender-grouped edge; ascending within a sender.
      n_nodes:  int (static) N.
    """

    indptr: jax.Array
    col: jax.Array
    row: jax.Array
    perm: jax.Array
    t_indptr: jax.Array
    t_row: jax.Array
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))

    @property
    def n_edges(self) -> int:
        return int(self.col.shape[0])


GraphLike = Union[CooAdjacency, CsrByReceiver]


def _indptr(keys: jax.Array, n: int) -> jax.Array:
    counts = jnp.zeros((n,), jnp.int32).at[keys].add(1)
    return jnp.concatenate([jnp.zeros((1,), jnp.int32), jnp.cumsum(counts, dtype=jnp.int32)])


def csr_by_receiver(adj: CooAdjacency) -> CsrByReceiver:
    """Groups the COO edges of ``adj`` by receiver (and, transposed, by sender). Jittable.

    Raises:
      ValueError: ``adj.senders``/``adj.receivers`` are not integer arrays of equal length.
    """
    snd, rcv = jnp.asarray(adj.senders), jnp.asarray(adj.receivers)
    if snd.shape != rcv.shape or snd.ndim != 1 or not jnp.issubdtype(snd.dtype, jnp.integer):
        raise ValueError(f"csr_by_receiver: need int senders[E], receivers[E]; got {snd.shape=}, "
                         f"{rcv.shape=}, {snd.dtype=}")
    snd, rcv, n = snd.astype(jnp.int32), rcv.astype(jnp.int32), adj.n_nodes
    perm = jnp.lexsort((snd, rcv)).astype(jnp.int32)  # primary key: receiver
    t_perm = jnp.lexsort((rcv, snd))  # primary key: sender
    return CsrByReceiver(indptr=_indptr(rcv, n), col=snd[perm], row=rcv[perm], perm=perm,
                         t_indptr=_indptr(snd, n), t_row=rcv[t_perm], n_nodes=n)


def _edges(graph: GraphLike) -> tuple[jax.Array, jax.Array]:
    if isinstance(graph, CsrByReceiver):
        return graph.col, graph.row
    if isinstance(graph, CooAdjacency):
        return graph.senders, graph.receivers
    raise TypeError(f"expected CooAdjacency or CsrByReceiver, got {type(graph).__name__}")


def _validate(graph: GraphLike, h, s_src, s_dst, where: str) -> None:
    n = graph.n_nodes
    if h.ndim != 3 or h.shape[0] != n:
        raise ValueError(f"{where}: h must be [n_nodes={n}, H, F], got shape {h.shape}")
    for name, s in (("s_src", s_src), ("s_dst", s_dst)):
        if s.shape != h.shape[:2]:
            raise ValueError(f"{where}: {name} must be [N, H] = {h.shape[:2]}, got shape {s.shape}")


def gat_aggregate_reference(graph: GraphLike, h: jax.Array, s_src: jax.Array, s_dst: jax.Array,
                            *, negative_slope: float = DEFAULT_NEGATIVE_SLOPE) -> jax.Array:
    """GAT aggregation in plain JAX (the baseline; it stores the E x H attention).

    Args:
      graph: `CooAdjacency` or `CsrByReceiver` with N nodes and E edges (rows = receivers).
      h: float [N, H, F] projected node features per head.
      s_src: float [N, H] sender terms ``<a_src, h_j>``.
      s_dst: float [N, H] receiver terms ``<a_dst, h_i>``.
      negative_slope: LeakyReLU slope.

    Returns:
      float32 [N, H, F]; zero for rows without edges.
    """
    _validate(graph, h, s_src, s_dst, "gat_aggregate_reference")
    senders, receivers = _edges(graph)
    n = graph.n_nodes
    z = s_dst[receivers].astype(jnp.float32) + s_src[senders].astype(jnp.float32)  # [E, H]
    e = jnp.where(z > 0, z, negative_slope * z)
    e_max = jax.ops.segment_max(e, receivers, num_segments=n)  # -inf on empty rows
    e_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(e_max), e_max, 0.0))  # softmax is shift-invariant
    p = jnp.exp(e - e_max[receivers])
    denom = jax.ops.segment_sum(p, receivers, num_segments=n)
    alpha = p / denom[receivers]  # [E, H], every edge's row has denom >= 1
    msgs = alpha[..., None] * h[senders].astype(jnp.float32)  # [E, H, F]
    return jax.ops.segment_sum(msgs, receivers, num_segments=n)


_IMPLS = ("auto", "reference", "pallas")


def gat_aggregate(graph: GraphLike, h: jax.Array, s_src: jax.Array, s_dst: jax.Array, *,
                  negative_slope: float = DEFAULT_NEGATIVE_SLOPE, impl: str = "auto",
                  interpret: Optional[bool] = None,
                  config: Optional[GatKernelConfig] = None) -> jax.Array:
    """GAT attention aggregation ``out[i] = sum_{j in N(i)} softmax_j(LeakyReLU(s_dst[i] + s_src[j])) h[j]``.

    Integer and bool ``h`` / ``s_src`` / ``s_dst`` are converted to float32 first (as `aggregate`
    does), so both impls compute in float32; complex ones are refused.

    Args:
      graph: `CsrByReceiver` (build it once with `csr_by_receiver`) or `CooAdjacency` (converted on
        every call for the Pallas path).
      h: float, integer or bool [N, H, F]; s_src, s_dst: float, integer or bool [N, H] (see
        `gat_aggregate_reference`).
      negative_slope: LeakyReLU slope (0.2 in the paper).
      impl: "auto" (`codesign.kernels.auto_impl`, ``op="attention"``: the lower modeled cost of
        the two on the device's preset; "pallas" is a candidate on GPU only), "reference" (XLA gather + segment ops) or
        "pallas" (fused kernel + recomputing custom_vjp).
      interpret: run Pallas in interpret mode; None means "when the default backend is not GPU".
      config: `GatKernelConfig` for the Pallas path (default: ``GatKernelConfig()``).

    Returns:
      float32 [N, H, F]; zero for rows without edges.

    Raises:
      ValueError: unknown ``impl``, mis-shaped ``h``/``s_src``/``s_dst``, or a complex /
        non-numeric one (one line naming it and its dtype).
    """
    if impl not in _IMPLS:
        raise ValueError(f"gat_aggregate: unknown impl {impl!r}; choose from {list(_IMPLS)}")
    h, s_src, s_dst = (v.astype(feature_dtype(v, f"gat_aggregate: {name}"))
                       for name, v in (("h", h), ("s_src", s_src), ("s_dst", s_dst)))
    _validate(graph, h, s_src, s_dst, "gat_aggregate")
    on_gpu = jax.default_backend() == "gpu"
    name = _auto_impl(graph, h, op="attention", heads=h.shape[1], allowed=("reference", "pallas")) if impl == "auto" else impl
    if name == "reference":
        return gat_aggregate_reference(graph, h, s_src, s_dst, negative_slope=negative_slope)
    csr = graph if isinstance(graph, CsrByReceiver) else csr_by_receiver(graph)
    if csr.n_edges == 0:  # nothing to gather; avoids zero-sized kernel operands
        return jnp.zeros(h.shape, jnp.float32)
    interpret = (not on_gpu) if interpret is None else interpret
    structure = (csr.indptr, csr.col, csr.row, csr.t_indptr, csr.t_row)
    return gat_pallas(float(negative_slope), config or GatKernelConfig(), bool(interpret),
                      structure, h, s_src, s_dst)
