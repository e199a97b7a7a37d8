"""GraphSAGE (Hamilton, Ying & Leskovec, "Inductive Representation Learning on Large Graphs",
NeurIPS 2017) for full-batch node classification in Flax NNX, with co-design hooks.

A layer is ``h_i' = W_root h_i + W_neigh AGG_{j in N(i)} h_j + b`` — the root weight plus the
neighbour weight, i.e. the paper's ``W [h_i || AGG]`` (Algorithm 1, line 5) with ``W`` split in
two, as PyG's ``SAGEConv`` does (no self-loops; no output l2-normalization, which the paper uses
for unsupervised embeddings and PyG turns off by default).

Aggregators (``aggr``):
  * ``"mean"``: ``sum_j g_ij h_j / sum_j g_ij`` — a weighted SpMM through
    `codesign.kernels.aggregate`; with an edge mask the gates ``g`` weight the mean, so a removed
    edge also leaves the degree (without a mask ``g = 1``: the plain mean).
  * ``"max"``: element-wise ``max_{j: g_ij > 0} g_ij h_j`` (0 for a node without kept
    neighbours). `aggregate` computes sums ``A @ X`` only (the (+, x) semiring of SpMM), and a
    max is not a sum, so this aggregator gathers the messages and reduces them with
    ``jax.ops.segment_max`` directly. It is the element-wise max of PyG's ``SAGEConv(aggr="max")``;
    the paper's pooling aggregator first passes each neighbour through a dense layer + ReLU.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.kernels import CooAdjacency, aggregate
from codesign.models.dropout import HashDropout
from codesign.models.layers import FP32_BITS, QuantLinear, mask_densities
from codesign.sparsify import EdgeMask, FeatureMask

AGGREGATORS = ("mean", "max")


def mean_adjacency(adj: CooAdjacency, edge_weight: Optional[jax.Array] = None) -> CooAdjacency:
    """Row-normalized ``D^-1 A`` (E entries, no self-loops): ``aggregate`` with it is the
    (weighted) neighbour mean; rows without edges aggregate to 0.

    Args:
      adj: E edges; its own weights (None = 1) are kept.
      edge_weight: float [E] or None, multiplied in before normalizing (an edge mask's gates).
    """
    w = jnp.ones(adj.senders.shape, jnp.float32) if adj.edge_weight is None else adj.edge_weight
    if edge_weight is not None:
        w = w * edge_weight
    deg = jax.ops.segment_sum(w, adj.receivers, num_segments=adj.n_nodes)
    inv = jnp.where(deg > 0, 1.0 / jnp.where(deg > 0, deg, 1.0), 0.0)
    return adj.with_weight(w * inv[adj.receivers])


def max_aggregate(adj: CooAdjacency, x: jax.Array, edge_weight: Optional[jax.Array] = None) -> jax.Array:
    """``out[i] = max_{e: receivers[e] = i, w_e > 0} w_e * x[senders[e]]`` element-wise, 0 for rows
    without kept edges; ``w`` = ``adj``'s weights times ``edge_weight`` (None = 1).

    Shapes: ``x [N, F] -> [N, F]``. Gradients reach ``x`` (and ``w``) at the arg-max entries.
    """
    w = jnp.ones(adj.senders.shape, jnp.float32) if adj.edge_weight is None else adj.edge_weight
    if edge_weight is not None:
        w = w * edge_weight
    msgs = jnp.where((w > 0)[:, None], w[:, None] * x[adj.senders], -jnp.inf)  # [E, F]
    out = jax.ops.segment_max(msgs, adj.receivers, num_segments=adj.n_nodes)
    return jnp.where(jnp.isfinite(out), out, 0.0)


class SAGEConv(nnx.Module):
    """``h' = Q(h) @ Q(W_root) + AGG(Q(h)) @ Q(W_neigh) + b`` (Hamilton et al. 2017, Alg. 1).

    With ``aggr="mean"`` the neighbour term aggregates the narrower of ``h`` and ``h @ W_neigh``
    (the mean is linear); ``"max"`` must aggregate first.

    Shapes: ``x [N, in_features], adj (E edges, no self-loops) -> [N, out_features]``.
    """

    def __init__(self, in_features: int, out_features: int, *, aggr: str = "mean",
                 bits: Optional[int] = None, impl: str = "auto", rngs: nnx.Rngs):
        if aggr not in AGGREGATORS:
            raise ValueError(f"SAGEConv: aggr must be one of {AGGREGATORS}, got {aggr!r}")
        self.in_features, self.out_features, self.aggr, self.impl = in_features, out_features, aggr, impl
        self.lin_neigh = QuantLinear(in_features, out_features, bits=bits, rngs=rngs)  # inputs >= 0
        self.lin_root = QuantLinear(in_features, out_features, bits=bits, use_bias=False, rngs=rngs)

    def __call__(self, x: jax.Array, adj: CooAdjacency, edge_weight: Optional[jax.Array] = None) -> jax.Array:
        root = self.lin_root(x)
        if self.aggr == "max":
            neigh = self.lin_neigh.combine(max_aggregate(adj, x, edge_weight))
        else:
            a = mean_adjacency(adj, edge_weight)
            if self.out_features <= self.in_features:  # combine first: aggregate the narrower matrix
                neigh = aggregate(a, self.lin_neigh.combine(x), impl=self.impl)
            else:
                neigh = self.lin_neigh.combine(aggregate(a, x, impl=self.impl))
        return self.lin_neigh.add_bias(neigh + root)


class GraphSAGE(nnx.Module):
    """Two-layer GraphSAGE for node classification with optional edge mask, feature mask and
    N-bit fake quantization: dropout -> SAGEConv -> ReLU -> dropout -> SAGEConv.

    Args:
      in_features, hidden, n_classes: layer widths.
      n_edges: if given, an `EdgeMask` with one hard-concrete gate per edge (E, no self-loops).
      feature_mask: if True, a `FeatureMask` gating the input columns.
      bits: fake-quantization bit-width of features and weights (None = fp32).
      dropout: dropout rate on each layer's input.
      aggr: "mean" or "max" (see the module docstring).

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges) -> logits [N, n_classes]``.
    """

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 feature_mask: bool = False, bits: Optional[int] = None, dropout: float = 0.5,
                 aggr: str = "mean", impl: str = "auto", rngs: nnx.Rngs):
        self.bits, self.aggr = bits, aggr
        self.edge_mask = EdgeMask(n_edges, rngs=rngs) if n_edges else None
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        self.conv1 = SAGEConv(in_features, hidden, aggr=aggr, bits=bits, impl=impl, rngs=rngs)
        self.conv2 = SAGEConv(hidden, n_classes, aggr=aggr, bits=bits, impl=impl, rngs=rngs)

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        gates = self.edge_mask() if self.edge_mask is not None else None
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        h = jax.nn.relu(self.conv1(self.dropout(x), adj, gates))
        return self.conv2(self.dropout(h), adj, gates)

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (see `GCN.densities`)."""
        return mask_densities(self.edge_mask, self.feature_mask, hard)

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None,
                 locality: Optional[hwmodel.LocalityProfile] = None) -> hwmodel.Workload:
        """The `hwmodel.Workload` (arguments as `GCN.workload`). Per layer ``l``:

          ``layer{l}``:      neighbour aggregation over the kept edges (nnz = kept edges, no
                             self-loops) and the neighbour GEMM, + bias/ReLU. Mean: both dataflow
                             orders (`hwmodel.message_passing_layer`). Max: aggregate-first only
                             (a max does not commute with the GEMM); its "spmm" stage counts one
                             compare per gathered element where a SpMM counts one MAC.
          ``layer{l}.root``: the root GEMM N x K x F (its sum with the neighbour term is the GEMM's
                             accumulate, no separate stage).
        The logits (layer 1) are fp32.
        """
        d = {**self.densities(hard), **(densities or {})}
        b = jnp.asarray(bits if bits is not None else (self.bits or FP32_BITS), jnp.float32)
        nnz = d["edge"] * n_edges
        layers = []
        for i, (conv, k) in enumerate(((self.conv1, d["feature"] * self.conv1.in_features),
                                       (self.conv2, self.conv2.in_features))):
            out_bits, f = (FP32_BITS if i == 1 else b), conv.out_features
            if self.aggr == "mean":
                layers.append(hwmodel.message_passing_layer(f"layer{i}", n_nodes, nnz, k, f, b, b, out_bits,
                                                            training=training, locality=locality,
                                                            edge_density=d["edge"]))
            else:
                agg = (hwmodel.spmm_stage(n_nodes, nnz, k, b, b, locality, d["edge"]),
                       hwmodel.gemm_stage(n_nodes, k, f, b, b, out_bits))
                elem = (hwmodel.elementwise_stage(n_nodes, f, out_bits),)
                if training:
                    agg, elem = hwmodel.with_backward(agg), hwmodel.with_backward(elem)
                layers.append(hwmodel.LayerWorkload(f"layer{i}", agg, agg, elem))
            gemm = (hwmodel.gemm_stage(n_nodes, k, f, b, b, out_bits),)
            if training:
                gemm = hwmodel.with_backward(gemm)
            layers.append(hwmodel.LayerWorkload(f"layer{i}.root", gemm, gemm, ()))
        return hwmodel.Workload(tuple(layers), training)
