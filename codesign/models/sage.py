"""GraphSAGE (Hamilton, Ying & Leskovec, "Inductive Representation Learning on Large Graphs",
NeurIPS 2017) for full-batch node classification in Flax NNX, with co-design hooks.

A layer is ``h_i' = W_root h_i + W_neigh AGG_{j in N(i)} h_j + b`` — the root weight plus the
neighbour weight, i.e. the paper's ``W [h_i || AGG]`` (Algorithm 1, line 5) with ``W`` split in
two, as PyG's ``SAGEConv`` does (no self-loops; no output l2-normalization, which the paper uses
for unsupervised embeddings and PyG turns off by default).

Aggregators (``aggr``):
  * ``"mean"``: ``sum_j g_ij h_j / sum_j g_ij`` — the `codesign.vertex.layers.weighted_sum`
    program over the row-normalized adjacency (one weighted SpMM, `codesign.kernels.aggregate`); with an edge mask the gates ``g`` weight the mean, so a removed
    edge also leaves the degree (without a mask ``g = 1``: the plain mean).
  * ``"max"``: element-wise ``max_{j: g_ij > 0} g_ij h_j`` (0 for a node without kept
    neighbours). `aggregate` computes sums ``A @ X`` only (the (+, x) semiring of SpMM), and a
    max is not a sum, so this aggregator gathers the messages and reduces them with
    ``jax.ops.segment_max`` directly. It is the element-wise max of PyG's ``SAGEConv(aggr="max")``;
    the paper's pooling aggregator first passes each neighbour through a dense layer + ReLU.

Co-design hooks (as `codesign.models.GCN`): an edge sparsifier (any
`codesign.sparsify.EdgeSparsifier`) whose gates weight the neighbour term as above; a
`FeatureMask` on the input columns; a `ChannelMask` on the hidden channels (after ReLU: a closed
channel drops its column of both layer-0 weights and the bias and its row of both layer-1
weights); quantizers of any `codesign.models.layers.QUANTIZERS` kind. Each layer quantizes its
input once (node-wise) and both weights (per tensor); the root and the neighbour branch read the
same quantized input, which is also what the aggregation reads (the bits the cost model charges
to the SpMM).

A `codesign.sparsify.BlockEdgeMask` must be built *without* self-loops (GraphSAGE aggregates none:
``BlockEdgeMask.from_graph(..., self_loops=False)``; ``GraphSAGE.SELF_LOOPS`` says so to
`codesign.train`); the mean aggregation is then costed as the BSR kernel over the kept tiles. The
max aggregator has no BSR form (a block kernel computes sums), so it stays costed as a gather over
the kept edges.
"""

from __future__ import annotations

from typing import Callable, Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.kernels import CooAdjacency, aggregate, structural_degree
from codesign.models.base import GNN, check_input, check_widths
from codesign.models.dropout import HashDropout
from codesign.sparsify import learns_edge_weights
from codesign.models.layers import (FP32_BITS, GraphCounts, Layer, graph_counts, hidden_elementwise_ops,
                                    make_quantizer, mask_densities, input_nnz, override_bits, quant_bits,
                                    derived_message_passing, relu_then_input_dropout, run_weighted_sum,
                                    model_workload)
from codesign.sparsify import BlockEdgeMask, ChannelMask, EdgeMask, FeatureMask
from codesign.vertex import layers as vertex_layers

AGGREGATORS = ("mean", "max")


def mean_adjacency(adj: CooAdjacency, edge_weight: Optional[jax.Array] = None) -> CooAdjacency:
    """Row-normalized ``D^-1 A`` (E entries, no self-loops): ``aggregate`` with it is the
    (weighted) neighbour mean; rows without edges aggregate to 0. An unweighted ``adj`` with a
    `CsrPattern` of its edges takes ``D`` from the pattern (`structural_degree`), not a scatter-add.

    Args:
      adj: E edges; its own weights (None = 1) are kept.
      edge_weight: float [E] or None, multiplied in before normalizing (an edge mask's gates).
    """
    w = jnp.ones(adj.senders.shape, jnp.float32) if adj.edge_weight is None else adj.edge_weight
    if edge_weight is not None:
        w = w * edge_weight
    deg = structural_degree(adj, self_loops=False) if edge_weight is None else None
    if deg is None:
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


ROOT_SUM_OPS = 1.0
"""Elementwise ops per output of a SAGE layer beyond its bias and activation: the sum of the root
term ``x @ W_root`` with the neighbour term (`SAGEConv.workload`)."""


@final
class SAGEConv(Layer):
    """``h' = Q(h) @ Q(W_root) + AGG(Q(h)) @ Q(W_neigh) + b`` (Hamilton et al. 2017, Alg. 1).

    With ``aggr="mean"`` the neighbour term aggregates the narrower of ``Q(h)`` and
    ``Q(h) @ Q(W_neigh)`` (the mean is linear); ``"max"`` must aggregate first.

    Args:
      in_features, out_features: K and F.
      aggr: "mean" or "max".
      bits: bit-width of the input and both weights (None = fp32); initial for learned kinds.
      quantizer: `codesign.models.layers.QUANTIZERS` kind (see `make_quantizer`): the input
        node-wise, ``W_root`` and ``W_neigh`` per tensor.
      in_degree: int [N] node in-degrees for the "degree" / "a2q" quantizers.
      signed_input: quantize the input on a signed grid (raw features that may be negative); False:
        unsigned (bag-of-words, ReLU outputs; a negative value would be clipped to 0).
      aggregate_fn: the mean aggregation's sum, ``aggregate_fn(adj, x, impl=...)`` over the
        row-normalized adjacency (default `codesign.kernels.aggregate`; injected as in `GCNConv`).
        ``aggr="max"`` does not use it (`max_aggregate`: a maximum is not a sum).

    Raises:
      ValueError: ``aggr`` not in `AGGREGATORS`; from `make_quantizer`.

    Parameters: ``kernel_neigh``, ``kernel_root`` float32 [K, F] (Glorot-uniform), ``bias`` [F]
    (zeros). Shapes: ``x [N, in_features], adj (E edges, no self-loops) -> [N, out_features]``.

    The mean aggregation is the `PROGRAM` vertex program (`codesign.vertex.layers.weighted_sum`
    over the row-normalized adjacency, `mean_adjacency`): the forward runs its lowering and
    `workload` derives the aggregation's stages from it. The max aggregation stays
    `max_aggregate`: it excludes zero-weight (pruned) edges from the maximum, which
    ``vx.max`` over gated messages cannot express (a gate multiplies the message, so a pruned
    edge would still contribute 0 to the maximum).
    """

    PROGRAM = vertex_layers.weighted_sum

    def __init__(self, in_features: int, out_features: int, *, aggr: str = "mean",
                 bits: Optional[int] = None, quantizer: str = "fixed", in_degree=None, signed_input: bool = False,
                 impl: str = "auto", aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        if aggr not in AGGREGATORS:
            raise ValueError(f"SAGEConv: aggr must be one of {AGGREGATORS}, got {aggr!r}")
        self.in_features, self.out_features, self.aggr, self.impl = in_features, out_features, aggr, impl
        self.aggregate_fn = aggregate_fn
        init = jax.nn.initializers.glorot_uniform()
        self.kernel_neigh = nnx.Param(init(rngs.params(), (in_features, out_features), jnp.float32))
        self.kernel_root = nnx.Param(init(rngs.params(), (in_features, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32))
        self.quant_x = make_quantizer(quantizer, bits, signed=signed_input, node_wise=True, in_degree=in_degree,
                                      rngs=rngs)
        self.quant_w_neigh = make_quantizer(quantizer, bits, signed=True, node_wise=False, rngs=rngs)
        self.quant_w_root = make_quantizer(quantizer, bits, signed=True, node_wise=False, rngs=rngs)

    def __call__(self, x: jax.Array, adj: CooAdjacency, edge_weight: Optional[jax.Array] = None,
                 dropout: Optional[nnx.Module] = None) -> jax.Array:
        """``edge_weight``: float [E] gates or None; ``dropout`` (optional) acts on the quantized
        input (as in `GCNConv`)."""
        x = self.quant_x(x)
        # aggregate-first mean, dropout active, dense input: the dropout's mask is redrawn in the
        # backward pass (`HashDropout.concat_matmul`) instead of keeping [agg | dropout(x)]
        redraw = (self.aggr == "mean" and self.out_features > self.in_features and dropout is not None
                  and dropout.active and isinstance(x, jax.Array))
        x_in, seed = x, None
        if redraw:
            seed = dropout.draw_seed()
            x = dropout.apply(x_in, seed)
        elif dropout is not None:
            x = dropout(x)
        w_neigh = self.quant_w_neigh(self.kernel_neigh[...])
        w_root = self.quant_w_root(self.kernel_root[...])
        # One GEMM per layer, not one per weight: [agg(x) | x] @ [W_neigh; W_root] aggregate-first,
        # x @ [W_neigh | W_root] combine-first. The same products and sums, but the layer's output
        # (and, in the backward pass, the input gradient) is one [N, F_out] array: with two GEMMs
        # XLA kept both products and both input-gradient terms live (docs/log/large_graphs.md).
        if self.aggr == "max":
            return jnp.concatenate([max_aggregate(adj, x, edge_weight), x], 1) @ jnp.concatenate([w_neigh, w_root]) \
                + self.bias[...]
        a = mean_adjacency(adj, edge_weight)
        agg = lambda h: run_weighted_sum(self.PROGRAM, a, h, impl=self.impl, aggregate_fn=self.aggregate_fn)
        if self.out_features <= self.in_features:  # combine first: aggregate the narrower matrix
            both = x @ jnp.concatenate([w_neigh, w_root], 1)
            return agg(both[:, :self.out_features]) + both[:, self.out_features:] + self.bias[...]
        if redraw:
            return dropout.concat_matmul(agg(x), x_in, seed, jnp.concatenate([w_neigh, w_root])) + self.bias[...]
        return jnp.concatenate([agg(x), x], 1) @ jnp.concatenate([w_neigh, w_root]) + self.bias[...]

    def layer_bits(self, hard: bool = False) -> dict:
        """Mean bit-widths (float32 scalars) ``{"x", "w_neigh", "w_root"}`` (see `quant_bits`)."""
        return {"x": quant_bits(self.quant_x, hard), "w_neigh": quant_bits(self.quant_w_neigh, hard),
                "w_root": quant_bits(self.quant_w_root, hard)}

    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 scalar: the bits of its input (``quant_x``), read by both branches."""
        return quant_bits(self.quant_x, hard)

    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=FP32_BITS,
                 hard: bool = False, bits=None, in_nnz=None,
                 elementwise_ops=1) -> tuple[hwmodel.LayerWorkload, ...]:
        """Two `hwmodel.LayerWorkload`s (`Layer.workload` for the arguments; ``elementwise_ops`` as
        `GCNConv.workload`: the bias and what the model adds, its activation, channel gate and
        run-time quantization):

          ``name``:      the neighbour aggregation over the kept edges (nnz = kept edges, no
                         self-loops) and the neighbour GEMM, + bias/ReLU. Mean: both dataflow
                         orders, the SpMMs derived from `PROGRAM` (`derived_message_passing`; with a `BlockEdgeMask` the BSR
                         kernel over the kept tiles). Max: aggregate-first only (a max does not
                         commute with the GEMM); its "spmm" stage counts one compare per gathered
                         element where a SpMM counts one MAC.
          ``name.root``: the root GEMM N x K x F. Its sum with the neighbour term is one more
                         elementwise op per output (`ROOT_SUM_OPS`) of ``name``'s elementwise
                         stage: fused into the epilogue by XLA, a pass of its own where the
                         executor does not fuse (the deployed program's ``out += x @ W_root``);
                         in a fused epilogue (``HardwareSpec.fuses_epilogue``) it still reads
                         the root term (``epilogue_reads``).

        With ``in_nnz`` (input stored CSR) both GEMMs run over the stored nonzeros and the mean
        aggregation runs combine-first.

        Raises:
          ValueError: ``in_nnz`` with the max aggregation (a max reads its input rows dense)."""
        lb = self.layer_bits(hard) if bits is None else dict(x=bits, w_neigh=bits, w_root=bits)
        k = self.in_features if in_dim is None else in_dim
        f = self.out_features if out_dim is None else out_dim
        x_bits, wn, wr = lb["x"], lb["w_neigh"], lb["w_root"]
        n, nnz = graph.n_nodes, graph.kept_edges
        if self.aggr == "mean":  # derived from the program the forward runs (no self-loops)
            gemm = (hwmodel.input_gemm_stage(n, k, f, x_bits, wn, out_bits, in_nnz),)
            elem = (hwmodel.elementwise_stage(n, f, out_bits, elementwise_ops + ROOT_SUM_OPS, epilogue_reads=1.0),)
            neigh = derived_message_passing(self.PROGRAM, name, graph, gemm, elem,
                                            widths=(self.in_features, self.out_features), kept=(k, f),
                                            bits=(x_bits, out_bits), combine_first_only=in_nnz is not None,
                                            self_loops=False)
        elif in_nnz is not None:
            raise ValueError("SAGEConv.workload(in_nnz): the max aggregation reads its input rows dense; "
                             "a CSR-stored input is costed for aggr='mean' only")
        else:
            agg = (hwmodel.spmm_stage(n, nnz, k, x_bits, x_bits, graph.locality, graph.edge_density),
                   hwmodel.gemm_stage(n, k, f, x_bits, wn, out_bits))
            elem = (hwmodel.elementwise_stage(n, f, out_bits, elementwise_ops + ROOT_SUM_OPS, epilogue_reads=1.0),)
            neigh = hwmodel.LayerWorkload(name, agg, agg, elem)
        gemm = (hwmodel.input_gemm_stage(n, k, f, x_bits, wr, out_bits, in_nnz),)
        return neigh, hwmodel.LayerWorkload(f"{name}.root", gemm, gemm, ())


@final
class GraphSAGE(GNN):
    """Two-layer GraphSAGE for node classification with optional edge sparsifier, feature mask,
    channel mask and quantizers: [feature mask] -> dropout -> SAGEConv -> ReLU [-> channel mask]
    -> dropout -> SAGEConv (dropout acts on each layer's quantized input).

    Args:
      in_features, hidden, n_classes: layer widths.
      n_edges: if given (and no ``edge_sparsifier``), an `EdgeMask` with one hard-concrete gate
        per edge (E, no self-loops).
      edge_sparsifier: any `codesign.sparsify.EdgeSparsifier` module; its ``edge_gates`` weight
        the neighbour aggregation. A `BlockEdgeMask` must be built without self-loops.
      feature_mask: if True, a `FeatureMask` gating the input columns.
      channel_mask: if True, a `ChannelMask` gating the ``hidden`` channels (shrinks both layer-0
        GEMMs' output and both layer-1 GEMMs' K, and the aggregation width where it aggregates them).
      bits: bit-width of features and weights (None = fp32); the initial one for learned kinds.
      quantizer: `codesign.models.layers.QUANTIZERS` kind (see `make_quantizer`).
      in_degree: int [N] in-degrees for the "degree" / "a2q" quantizers (`codesign.train` passes
        them with the self-loop counted, as for GCN; GraphSAGE aggregates none, so they are one
        high, which only shifts the degree ranking's values, not its order).
      signed_input: quantize the input features on a signed grid (features that may be negative:
        LSA, embeddings, Gaussian cSBM features); False: unsigned, for features >= 0 (bag-of-words),
        where a negative value would be clipped to 0. `codesign.train.build_model` sets it from
        the data (`codesign.graph.Graph.signed_features`).
      dropout: dropout rate on each layer's input.
      aggr: "mean" or "max" (see the module docstring).
      aggregate_fn: the aggregation both layers' mean runs (`SAGEConv`; default
        `codesign.kernels.aggregate`).

    Raises:
      ValueError: ``aggr`` invalid; a `BlockEdgeMask` built with self-loops; from `make_quantizer`.

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges) -> logits [N, n_classes]``.
    """

    HOOKS = frozenset({"edge_sparsifier", "channel_mask", "quantizer"})
    OPTIONS = ("aggr",)

    SELF_LOOPS = False
    """GraphSAGE aggregates no self-loops: a `BlockEdgeMask` for it tiles the E edges only."""

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 edge_sparsifier: Optional[nnx.Module] = None, feature_mask: bool = False,
                 channel_mask: bool = False, bits: Optional[int] = None, quantizer: str = "fixed",
                 in_degree=None, signed_input: bool = False, dropout: float = 0.5, aggr: str = "mean",
                 impl: str = "auto", aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        check_widths("GraphSAGE", in_features=in_features, hidden=hidden, n_classes=n_classes)
        self.in_features = in_features
        if isinstance(edge_sparsifier, BlockEdgeMask) and edge_sparsifier.n_entries != edge_sparsifier.n_edges:
            raise ValueError("GraphSAGE: edge_sparsifier is a BlockEdgeMask built with self-loops "
                             f"({edge_sparsifier.n_entries} entries for {edge_sparsifier.n_edges} edges); GraphSAGE "
                             "aggregates none: build it with BlockEdgeMask.from_graph(..., self_loops=False)")
        self.bits, self.aggr = bits, aggr
        if edge_sparsifier is None and n_edges:
            edge_sparsifier = EdgeMask(n_edges, rngs=rngs)
        self.edge_mask = edge_sparsifier
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.channel_mask = ChannelMask(hidden, rngs=rngs) if channel_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        q = dict(aggr=aggr, bits=bits, quantizer=quantizer, in_degree=in_degree, impl=impl,
                 aggregate_fn=aggregate_fn, rngs=rngs)
        self.conv1 = SAGEConv(in_features, hidden, signed_input=signed_input, **q)
        self.conv2 = SAGEConv(hidden, n_classes, **q)

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        check_input("GraphSAGE", x, self.in_features, adj.n_nodes)
        gates = None if self.edge_mask is None else self.edge_mask.edge_gates(x, adj.senders, adj.receivers)
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        z = self.conv1(x, adj, gates, self.dropout)
        h, dropout = relu_then_input_dropout(z, self.channel_mask, self.conv2, self.dropout)
        return self.conv2(h, adj, gates, dropout)

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (+ ``"channel"`` with a channel mask),
        see `GCN.densities`."""
        return mask_densities(self.edge_mask, self.feature_mask, hard, self.channel_mask)

    def layer_bits(self, hard: bool = False) -> dict:
        """Mean bit-widths (float32 scalars) ``{"x0", "w0", "x1", "w1"}``: each layer's input and
        the mean of its two weights' bits (the root and neighbour GEMMs have the same shape, so the
        mean is exact for their bytes and MACs); expected (differentiable) or deployed."""
        out = {}
        for i, conv in enumerate((self.conv1, self.conv2)):
            b = conv.layer_bits(hard)
            out[f"x{i}"], out[f"w{i}"] = b["x"], 0.5 * (b["w_neigh"] + b["w_root"])
        return out

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None,
                 locality: Optional[hwmodel.LocalityProfile] = None, feature_nnz=None) -> hwmodel.Workload:
        """The `hwmodel.Workload` (arguments as `GCN.workload`): ``layer{l}`` and ``layer{l}.root``
        of each layer ``l`` (`SAGEConv.workload`); ``feature_nnz`` as `GCN.workload` (mean
        aggregation only: ValueError with max).

        K of layer 0 = feature density x in_features; F of layer 0 and K of layer 1 = channel
        density x hidden. Bits: layer ``l`` reads its input at the bits of its ``quant_x`` and each
        weight at its own quantizer's (``bits`` overrides all); layer 0 writes at layer 1's input
        bits, layer 1 fp32 logits.
        """
        d = hwmodel.resolve_densities({"channel": jnp.ones((), jnp.float32), **self.densities(hard)}, densities)
        b = override_bits(bits)
        graph = graph_counts(n_nodes, n_edges, d, sparsifier=self.edge_mask if self.aggr == "mean" else None,
                             hard=hard, locality=locality)
        hidden = d["channel"] * self.conv1.out_features
        return model_workload(
            self.conv1.workload("layer0", graph, in_dim=d["feature"] * self.conv1.in_features, out_dim=hidden,
                                out_bits=self.conv2.input_bits(hard) if b is None else b, hard=hard, bits=b,
                                in_nnz=input_nnz(self, feature_nnz, densities, d, hard),
                                elementwise_ops=hidden_elementwise_ops(self.channel_mask is not None,
                                                                       self.conv2.input_bits(hard)))
            + self.conv2.workload("layer1", graph, in_dim=hidden, out_bits=FP32_BITS, hard=hard, bits=b),
            training=training, learned_edge_weights=learns_edge_weights(self.edge_mask))
