"""Graph isomorphism network (Xu, Hu, Leskovec & Jegelka, "How Powerful are Graph Neural
Networks?", ICLR 2019) for node classification in Flax NNX, with co-design hooks.

A GIN layer (eq. 4.1, GIN-eps) is ``h_i' = MLP((1 + eps) h_i + sum_{j in N(i)} h_j)`` with a
learnable scalar ``eps`` and a two-layer MLP ``Linear -> ReLU -> Linear``. The sum and the
``(1 + eps)`` self term are one run of the `codesign.vertex.layers.weighted_sum` program (one
`codesign.kernels.aggregate` call) over the adjacency with self-loops of weight ``1 + eps``; an edge mask's gates multiply the edge weights (a removed edge
contributes nothing, the self term stays).

This module also holds `QuantLinear`, the fake-quantized dense layer that GIN, GraphSAGE and
APPNP share.
"""

from __future__ import annotations

from typing import Callable, Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency, aggregate
from codesign.models.base import GNN, check_input, check_widths
from codesign.models.dropout import HashDropout
from codesign.sparsify import learns_edge_weights
from codesign.models.layers import (FP32_BITS, GraphCounts, Layer, QuantLinear, graph_counts, mask_densities,
                                    input_nnz, override_bits, quant_bits, derived_message_passing,
                                    run_weighted_sum,
                                    model_workload)
from codesign.vertex import layers as vertex_layers
from codesign.sparsify import EdgeMask, FeatureMask


def gin_adjacency(adj: CooAdjacency, eps: jax.Array, edge_weight: Optional[jax.Array] = None) -> CooAdjacency:
    """``A + (1 + eps) I`` as a `CooAdjacency` with E + N entries (self-loops last).

    Args:
      adj: E edges, no self-loops; its own weights (None = 1) are kept.
      eps: float scalar (GIN's learnable epsilon); gradients flow into it.
      edge_weight: float [E] or None, multiplied into the edge weights (an edge mask's gates).
    """
    w = jnp.ones(adj.senders.shape, jnp.float32) if adj.edge_weight is None else adj.edge_weight
    if edge_weight is not None:
        w = w * edge_weight
    senders, receivers = add_self_loops(adj.senders, adj.receivers, adj.n_nodes)
    w = jnp.concatenate([w, jnp.broadcast_to(1.0 + eps, (adj.n_nodes,)).astype(w.dtype)])
    return CooAdjacency(senders, receivers, w, adj.n_nodes)


@final
class GINConv(Layer):
    """``h' = lin2(ReLU(lin1((1 + eps) h_i + sum_j h_j)))`` (Xu et al. 2019, eq. 4.1).

    ``lin1`` is linear, so ``A' (X W1) = (A' X) W1``: like `GCNConv`, the layer aggregates the
    narrower of ``X`` [N, K] and ``X W1`` [N, hidden]; ``lin1``'s bias is added after aggregating
    (the exact GIN formula). ``eps`` is an `nnx.Param` initialised to 0 (GIN-eps).
    ``aggregate_fn(adj, x, impl=...)`` is the sum aggregation (default `codesign.kernels.aggregate`),
    injected as in `GCNConv`.

    The sum is the `PROGRAM` vertex program (`codesign.vertex.layers.weighted_sum` over
    ``A + (1 + eps) I``, `gin_adjacency`): the forward runs its lowering and `workload` derives
    the aggregation's stages from it.

    Shapes: ``x [N, in_features], adj`` (E edges, no self-loops) ``-> [N, out_features]``.
    """

    PROGRAM = vertex_layers.weighted_sum

    def __init__(self, in_features: int, hidden: int, out_features: int, *, bits: Optional[int] = None,
                 signed_input: bool = False, impl: str = "auto", aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        self.impl, self.aggregate_fn = impl, aggregate_fn
        self.eps = nnx.Param(jnp.zeros((), jnp.float32))
        self.lin1 = QuantLinear(in_features, hidden, bits=bits, signed_input=signed_input, rngs=rngs)
        self.lin2 = QuantLinear(hidden, out_features, bits=bits, rngs=rngs)  # ReLU outputs >= 0
        self.in_features, self.hidden, self.out_features = in_features, hidden, out_features

    def __call__(self, x: jax.Array, adj: CooAdjacency, edge_weight: Optional[jax.Array] = None) -> jax.Array:
        a = gin_adjacency(adj, self.eps[...], edge_weight)
        agg = lambda h: run_weighted_sum(self.PROGRAM, a, h, impl=self.impl, aggregate_fn=self.aggregate_fn)
        # combine first: aggregate the narrower matrix
        h = agg(self.lin1.combine(x)) if self.hidden <= self.in_features else self.lin1.combine(agg(x))
        return self.lin2(jax.nn.relu(self.lin1.add_bias(h)))

    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 scalar: the bits its input is read at (``lin1.quant_x``)."""
        return self.lin1.input_bits(hard)

    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=FP32_BITS,
                 hard: bool = False, bits=None, in_nnz=None) -> tuple[hwmodel.LayerWorkload, ...]:
        """Two `hwmodel.LayerWorkload`s (`Layer.workload` for the arguments; ``out_dim`` is
        ``lin2``'s output; with ``in_nnz`` ``lin1``'s GEMM runs first, over the stored nonzeros:
        ``((1+eps) X + A X) W1 = (1+eps) X W1 + A (X W1)``):

          ``name``:        SpMM over ``A + (1+eps) I`` (nnz = kept edges + N) and ``lin1``'s GEMM,
                           both orders, + bias/ReLU (the SpMMs derived from `PROGRAM`,
                           `derived_message_passing`); the hidden
                           activations are stored at ``lin2``'s input bits;
          ``name.mlp``:    ``lin2``'s GEMM N x hidden x out + bias (`QuantLinear.workload`).
        """
        x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.lin1.quant_w, hard))
        mid_bits = self.lin2.input_bits(hard) if bits is None else bits
        n, k = graph.n_nodes, self.in_features if in_dim is None else in_dim
        gemm = (hwmodel.input_gemm_stage(n, k, self.hidden, x_bits, w_bits, mid_bits, in_nnz),)
        elem = (hwmodel.elementwise_stage(n, self.hidden, mid_bits),)
        agg = derived_message_passing(self.PROGRAM, name, graph, gemm, elem, widths=(self.in_features, self.hidden),
                                      kept=(k, self.hidden), bits=(x_bits, mid_bits),
                                      combine_first_only=in_nnz is not None, blocks=False)
        return (agg,) + self.lin2.workload(f"{name}.mlp", graph, out_dim=out_dim, out_bits=out_bits, hard=hard,
                                           bits=bits)


@final
class GIN(GNN):
    """Two GIN-eps layers for node classification with optional edge mask, feature mask and
    N-bit fake quantization: ``GINConv(in, hidden, hidden) -> ReLU -> dropout ->
    GINConv(hidden, hidden, n_classes)``, dropout also on the input.

    Args:
      in_features, hidden, n_classes: widths (hidden is also each MLP's inner width).
      n_edges: if given, an `EdgeMask` with one hard-concrete gate per edge (E, no self-loops).
      feature_mask: if True, a `FeatureMask` gating the input columns.
      bits: fake-quantization bit-width of features and weights (None = fp32).
      signed_input: quantize the input features on a signed grid (features that may be negative:
        LSA, embeddings, Gaussian cSBM features); False: unsigned, for features >= 0 (bag-of-words),
        where a negative value would be clipped to 0. `codesign.train.build_model` sets it from
        the data (`codesign.graph.Graph.signed_features`).
      dropout: dropout rate on each layer's input.
      aggregate_fn: the aggregation both layers run (`GINConv`; default `codesign.kernels.aggregate`).

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges) -> logits [N, n_classes]``.
    """

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 feature_mask: bool = False, bits: Optional[int] = None, signed_input: bool = False,
                 dropout: float = 0.5, impl: str = "auto", aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        check_widths("GIN", in_features=in_features, hidden=hidden, n_classes=n_classes)
        self.in_features = in_features
        self.bits = bits
        self.edge_mask = EdgeMask(n_edges, rngs=rngs) if n_edges else None
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        conv = dict(bits=bits, impl=impl, aggregate_fn=aggregate_fn, rngs=rngs)
        self.conv1 = GINConv(in_features, hidden, hidden, signed_input=signed_input, **conv)
        self.conv2 = GINConv(hidden, hidden, n_classes, **conv)

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        check_input("GIN", x, self.in_features, adj.n_nodes)
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
                 locality: Optional[hwmodel.LocalityProfile] = None, feature_nnz=None) -> hwmodel.Workload:
        """The `hwmodel.Workload` (arguments as `GCN.workload`, ``feature_nnz`` too). Per GIN layer ``l``:

          ``layer{l}``:     SpMM over ``A + (1+eps) I`` (nnz = kept edges + N) and ``lin1``'s GEMM,
                            both orders, + bias/ReLU (`GINConv.workload`);
          ``layer{l}.mlp``: ``lin2``'s GEMM N x hidden x out + bias (and ReLU).
        The logits (``layer1.mlp``) are fp32.
        """
        d = hwmodel.resolve_densities(self.densities(hard), densities)
        b = override_bits(bits)
        graph = graph_counts(n_nodes, n_edges, d, hard=hard, locality=locality)
        return model_workload(
            self.conv1.workload("layer0", graph, in_dim=d["feature"] * self.conv1.in_features,
                                out_bits=self.conv2.input_bits(hard) if b is None else b, hard=hard, bits=b,
                                in_nnz=input_nnz(self, feature_nnz, densities, d, hard))
            + self.conv2.workload("layer1", graph, out_bits=FP32_BITS, hard=hard, bits=b),  # fp32 logits
            training=training, learned_edge_weights=learns_edge_weights(self.edge_mask))
