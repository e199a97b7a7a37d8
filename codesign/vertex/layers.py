"""The aggregations of the `codesign.models` layers as vertex programs, and the per-graph inputs
they read. Each program is the layer's equation for one vertex ``v``; the dense parts of a layer
(the GEMM ``X W``, the attention score terms, bias, activation) stay ordinary JAX around the call.

    gcn     ``sum_{u in N(v)} h_u norm_u * norm_v``, norm = deg^-1/2 (Kipf & Welling, ICLR 2017, eq. 2;
            the user-facing example with the normalization inside the program;
            `codesign.models.GCNConv` runs `weighted_sum` over `codesign.models.norm.gcn_normalize`'s
            A_hat, whose weights are these products)
    gat     ``sum_u softmax_u(LeakyReLU(el_u + er_v)) h_u`` for one head; heads by `jax.vmap` over a
            leading axis of h, el, er (Velickovic et al., ICLR 2018, eq. 1-4); `gat_attention(slope,
            edge_scale)` the same with another slope and attention dropout's per-edge scale, the
            forward of `codesign.models.GATConv`
    rgcn    ``sum_{(u, e)} h_u[type_e] w_e + self_v``, ``h [N, R, F]`` the per-relation ``X W_r``,
            ``w = 1 / c_{v,r}`` (Schlichtkrull et al., ESWC 2018, eq. 2): the whole layer's relation
            sum as one segment kernel over all edges (the user-facing example; not the schedule
            `codesign.models.RGCNConv` runs)
    weighted_sum   ``sum_{(u, e) in in_edges(v)} h_u w_e``: the aggregation the conv layers run as
            their forward and cost as their workload (`codesign.models.layers.run_weighted_sum`,
            `derived_message_passing`): `GCNConv` over A_hat, `SAGEConv` (mean) over D^-1 A, `GINConv`
            over A + (1 + eps) I, and `RGCNConv` once per relation r of eq. 2 (no self-loops,
            ``w = 1 / c_{v,r}``, `codesign.models.rgcn.relation_mean_normalize`)
    appnp_step(alpha)   ``(1 - alpha) sum_{(u, e)} z_u w_e + alpha h_v`` (Klicpera et al., ICLR 2019,
            eq. 5; one step of `codesign.models.Propagation`, which runs and costs it;
            w = the normalized edge weights)
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from codesign.kernels import CooAdjacency
from codesign.vertex import trace as vx
from codesign.vertex.program import Program, program

__all__ = ["gcn", "gat", "gat_attention", "rgcn", "weighted_sum", "appnp_step", "degree_norm"]


@program
def gcn(v):
    return vx.sum(u.h * u.norm for u in v.in_nbrs) * v.norm


@functools.cache
def gat_attention(negative_slope: float = 0.2, edge_scale: bool = False) -> Program:
    """GAT's attention for one head with LeakyReLU slope ``negative_slope`` (a Python float):
    ``sum_u softmax_u(LeakyReLU(el_u + er_v)) h_u``; with ``edge_scale``, each normalized
    coefficient is multiplied by an edge input ``keep`` float [E] (attention dropout's mask /
    (1 - rate), Velickovic et al. 2018, sec. 3.3). Inputs: nodes ``h`` [N, F], ``el``, ``er`` [N].
    What `codesign.models.GATConv` runs, heads by `jax.vmap`. Without ``edge_scale`` and edge gates
    the attention lowers to the fused kernel (rule 2); with either, to an edge softmax and one
    fused SpMM (rule 1). ``gat`` is ``gat_attention(0.2)``."""
    slope = float(negative_slope)
    if edge_scale:
        @program
        def gat_keep(v):
            s = [vx.leaky_relu(u.el + v.er, slope) for u in v.in_nbrs]
            return vx.sum(a * e.keep * u.h for a, (u, e) in zip(vx.softmax(s), v.in_edges))
        return gat_keep

    @program
    def gat(v):
        s = [vx.leaky_relu(u.el + v.er, slope) for u in v.in_nbrs]
        return vx.sum(a * u.h for a, u in zip(vx.softmax(s), v.in_nbrs))
    return gat


gat = gat_attention(0.2)


@program
def rgcn(v):
    """R-GCN's layer (eq. 2) after the GEMMs, all relations at once: ``sum_{(u, e)} h_u[type_e] w_e
    + self_v``. Inputs: nodes ``h`` float [N, R, F] (``X W_r`` per relation), ``self`` float [N, F]
    (``X W_0``); edges ``type`` int [E] in [0, R), ``w`` float [E] (``1 / c_{v,r}``). Returns
    [N, F]. Lowers to one gather + segment-sum over every edge from the ``[N * R, F]`` table (the
    one-kernel schedule); `codesign.models.RGCNConv` runs R SpMMs instead, one per relation, and
    costs them from `weighted_sum`."""
    return vx.sum(u.h[e.type] * e.w for u, e in v.in_edges) + v.self


@program
def weighted_sum(v):
    """One relation of R-GCN (eq. 2): ``sum_{(u, e) in in_edges(v)} h_u w_e``. Inputs: nodes ``h``
    float [N, F] (X, or ``X W_r`` when the layer combines first), edges ``w`` float [E_r] (relation
    r's mean-normalization weights ``1 / c_{v,r}``, edge gates multiplied in; the adjacency holds
    relation r's edges only, no self-loops). Returns [N, F]. One fused SpMM (rule 1) through the
    caller's ``aggregate`` (`codesign.kernels.aggregate` by default). The forward of `GCNConv`,
    `SAGEConv` (mean), `GINConv` and `RGCNConv` (one run per relation), with ``w`` the layer's
    normalized edge weights; their ``workload`` takes the SpMM stages from this program
    (`codesign.models.layers.derived_message_passing`)."""
    return vx.sum(u.h * e.w for u, e in v.in_edges)


@functools.lru_cache(maxsize=None)
def appnp_step(alpha: float) -> Program:
    """One APPNP propagation step with teleport probability ``alpha`` (a Python float in [0, 1]).

    Raises:
      ValueError: ``alpha`` outside [0, 1].
    """
    alpha = float(alpha)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"appnp_step: alpha must be in [0, 1], got {alpha}")

    @program
    def appnp(v):
        return (1.0 - alpha) * vx.sum(u.z * e.w for u, e in v.in_edges) + alpha * v.h

    return appnp


def degree_norm(adj: CooAdjacency, gates: Optional[jax.Array] = None) -> jax.Array:
    """``deg^-1/2`` float32 [N] of ``adj`` (self-loops included if ``adj`` has them), the degree
    being the (gated) in-edge count: ``deg_i = sum_{e: receivers[e] = i} g_e`` (g = 1 without
    gates; gates of E - N entries leave the last N edges, the self-loops, at 1)."""
    w = jnp.ones(adj.senders.shape, jnp.float32)
    if gates is not None:
        g = jnp.asarray(gates, jnp.float32)
        w = jnp.concatenate([g, w[g.shape[0]:]])
    deg = jax.ops.segment_sum(w, adj.receivers, num_segments=adj.n_nodes)
    return jax.lax.rsqrt(jnp.maximum(deg, 1e-12))
