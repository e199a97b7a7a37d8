"""Graph convolutional network (Kipf & Welling, "Semi-Supervised Classification with Graph
Convolutional Networks", ICLR 2017) in Flax NNX, with co-design hooks.

A layer is a composition (STYLE.md 1): [feature mask] -> dropout -> quantize features and
weights -> combine (GEMM) -> aggregate (`codesign.kernels.aggregate`) -> bias [-> channel mask].
The edge sparsifier's gates (any `codesign.sparsify.EdgeSparsifier`: `EdgeMask`, `BlockEdgeMask`,
`EdgeScorer`, `DropEdge`, `EdgeWeightMask`) multiply the edge weights before normalization.
"""

from __future__ import annotations

from typing import Callable, Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.kernels import CooAdjacency, SparseFeatures, aggregate
from codesign.models.base import GNN, check_input, check_widths
from codesign.models.dropout import HashDropout
from codesign.sparsify import learns_edge_weights
from codesign.models.layers import (FP32_BITS, GraphCounts, Layer, derived_message_passing, graph_counts,
                                    hidden_elementwise_ops, input_nnz, make_quantizer, mask_densities,
                                    override_bits, quant_bits, relu_then_input_dropout, run_weighted_sum,
                                    model_workload)
from codesign.models.norm import gcn_normalize
from codesign.sparsify import ChannelMask, EdgeMask, EdgeScorer, FeatureMask
from codesign.vertex import layers as vertex_layers



@final
class GCNConv(Layer):
    """``H' = A_hat @ Q(H) @ Q(W) + b`` (Kipf & Welling 2017, eq. 2) with fake quantization Q.

    Shapes: x float32 [N, in_features] -> float32 [N, out_features]; ``adj`` is the normalized
    adjacency. Weights use Glorot-uniform init, as in the paper. ``aggregate_fn(adj, x, impl=...)``
    is the aggregation (default `codesign.kernels.aggregate`), injected as in jraph's
    ``GraphConvolution(aggregate_nodes_fn=...)``, so another aggregation (a fused or a
    distributed one) runs the same layer. ``combine_aggregate_fn`` (default None), when set,
    replaces the combine-first pair ``aggregate_fn(adj, x @ W)`` by ``combine_aggregate_fn(adj, x,
    W)`` (dense ``x``): an aggregation that runs the GEMM inside its own backward rule
    (`codesign.distributed.sar_gcn_combine_aggregate`, whose backward pass neither keeps ``x @ W``
    from the forward pass nor holds it through its ring).

    The aggregation is the `PROGRAM` vertex program (`codesign.vertex.layers.weighted_sum` over
    A_hat's weights): the forward runs its lowering (`run_weighted_sum`, whose fused SpMM calls
    ``aggregate_fn``) and `workload` derives the SpMM stages from the same program.
    """

    PROGRAM = vertex_layers.weighted_sum

    def __init__(self, in_features: int, out_features: int, *, bits: Optional[int] = None,
                 quantizer: str = "fixed", in_degree=None, signed_input: bool = False, impl: str = "auto",
                 aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        self.in_features, self.out_features, self.impl = in_features, out_features, impl
        self.aggregate_fn = aggregate_fn
        self.combine_aggregate_fn: Optional[Callable] = None
        init = jax.nn.initializers.glorot_uniform()
        self.kernel = nnx.Param(init(rngs.params(), (in_features, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32))
        # unsigned grid for inputs >= 0 (bag-of-words, ReLU outputs); signed for raw features that
        # may be negative (dense embeddings: an unsigned grid would clip every negative value to 0)
        self.quant_x = make_quantizer(quantizer, bits, signed=signed_input, node_wise=True, in_degree=in_degree,
                                      rngs=rngs)
        self.quant_w = make_quantizer(quantizer, bits, signed=True, node_wise=False, rngs=rngs)

    @property
    def combine_first(self) -> bool:
        """Whether the layer runs the GEMM before the aggregation (``out_features <= in_features``:
        the aggregation then reads the narrower matrix). Its aggregation width is
        ``out_features`` if so, else ``in_features``."""
        return self.out_features <= self.in_features

    def __call__(self, x, adj, dropout: Optional[Callable] = None) -> jax.Array:
        """``x``: float32 [N, in_features], or its nonzeros as `SparseFeatures` (combine-first
        only: ``x @ W`` is then `codesign.kernels.features_matmul`; the input quantizer runs on the
        stored entries, exact for the quantizers `GCN.takes_sparse_input` names).
        ``adj``: whatever ``aggregate_fn`` takes (the normalized `CooAdjacency` for the default).
        ``dropout`` (optional, a callable ``x -> x``) is applied to the *quantized* input: a
        learned step size is then fitted to the un-scaled values that inference sees (dropout's
        1/(1-p) scaling before the quantizer made LSQ steps rounding test-time features to zero on
        Cora)."""
        if isinstance(x, SparseFeatures) and not self.combine_first:
            raise ValueError(f"x: GCNConv takes SparseFeatures only combine-first (out_features <= in_features), "
                             f"got {self.in_features} -> {self.out_features}")
        w = self.quant_w(self.kernel[...])
        x = self.quant_x(x)  # SparseFeatures in, SparseFeatures out (`GCN.takes_sparse_input`'s quantizers)
        if dropout is not None:
            x = dropout(x)
        if self.combine_first and self.combine_aggregate_fn is not None and not isinstance(x, SparseFeatures):
            return self.combine_aggregate_fn(adj, x, w) + self.bias[...]
        agg = lambda h: run_weighted_sum(self.PROGRAM, adj, h, impl=self.impl, aggregate_fn=self.aggregate_fn)
        out = agg(x @ w) if self.combine_first else agg(x) @ w
        return out + self.bias[...]

    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 scalar: the bits of its input features (``quant_x``; expected or deployed)."""
        return quant_bits(self.quant_x, hard)

    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=FP32_BITS,
                 hard: bool = False, bits=None, in_nnz=None, elementwise_ops=1) -> tuple[hwmodel.LayerWorkload, ...]:
        """One `hwmodel.LayerWorkload`, both dataflow orders (`Layer.workload` for the arguments):
        aggregate-first = SpMM over ``in_dim`` columns at the input bits, then the GEMM
        N x in_dim x out_dim; combine-first = the GEMM, then SpMM over ``out_dim`` columns at
        ``out_bits``; + bias (one elementwise op per output). The SpMMs are derived from the
        layer's `PROGRAM` (the one its forward runs; `derived_aggregation`: nnz = kept edges + N
        self-loops, the BSR kernel over the kept tiles with a `BlockEdgeMask`); edge weights are
        taken as given (A_hat's normalization, `gcn_normalize`, is not costed). The GEMM and the
        bias stay hand-written (dense, outside the program). ``in_nnz``: stored nonzeros of the
        input when it is stored sparse (CSR): the GEMM is then `hwmodel.csr_gemm_stage` and the
        layer runs combine-first in both orders (no sparse x sparse product); None = dense.
        ``elementwise_ops``: elementwise ops per output, the bias included (the model's activation,
        channel gate and run-time quantization add theirs; `hwmodel.elementwise_stage`)."""
        x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.quant_w, hard))
        k = self.in_features if in_dim is None else in_dim
        f = self.out_features if out_dim is None else out_dim
        gemm = (hwmodel.input_gemm_stage(graph.n_nodes, k, f, x_bits, w_bits, out_bits, in_nnz),)
        elem = (hwmodel.elementwise_stage(graph.n_nodes, f, out_bits, elementwise_ops),)
        layer = derived_message_passing(self.PROGRAM, name, graph, gemm, elem,
                                        widths=(self.in_features, self.out_features), kept=(k, f),
                                        bits=(x_bits, out_bits), combine_first_only=in_nnz is not None)
        return (layer,)


@final
class GCN(GNN):
    """Two-layer GCN for node classification with optional edge sparsifier, feature mask, channel
    mask and quantizers.

    Args:
      in_features, hidden, n_classes: layer widths (paper: hidden = 16).
      n_edges: if given (and no ``edge_sparsifier``), an `EdgeMask` with one hard-concrete gate
        per edge (E, no self-loops).
      edge_sparsifier: any `codesign.sparsify.EdgeSparsifier` module (`BlockEdgeMask`,
        `EdgeScorer`, `DropEdge`, ...) whose ``edge_gates`` multiply the edge weights.
      feature_mask: if True, a `FeatureMask` gating the ``in_features`` input columns.
      channel_mask: if True, a `ChannelMask` gating the ``hidden`` channels (shrinks the first
        GEMM's output and the second GEMM's input).
      bits: bit-width of features and weights (None = fp32); the initial one for learned kinds.
      quantizer: `codesign.models.layers.QUANTIZERS` kind (see `make_quantizer`).
      in_degree: int [N] in-degrees (self-loops included) for the "degree" / "a2q" quantizers.
      signed_input: quantize the input features on a signed grid (features that may be negative:
        LSA, embeddings, Gaussian cSBM features); False: unsigned, for features >= 0 (bag-of-words),
        where a negative value would be clipped to 0. `codesign.train.build_model` sets it from
        the data (`codesign.graph.Graph.signed_features`).
      dropout: dropout rate on each layer's input (paper: 0.5).
      input_dropout: if False, dropout only on the hidden layer's input, not on the raw features
        (UGS's ``net_gcn``, Chen et al. ICML 2021).
      aggregate_fn: the aggregation both layers run (`GCNConv`; default `codesign.kernels.aggregate`).

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges) -> logits [N, n_classes]``;
    ``x`` may be `SparseFeatures` where `takes_sparse_input` says so.
    """

    HOOKS = frozenset({"edge_sparsifier", "channel_mask", "quantizer"})

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 edge_sparsifier: Optional[nnx.Module] = None, feature_mask: bool = False,
                 channel_mask: bool = False, bits: Optional[int] = None, quantizer: str = "fixed",
                 in_degree=None, signed_input: bool = False, dropout: float = 0.5, input_dropout: bool = True,
                 impl: str = "auto", aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        check_widths("GCN", in_features=in_features, hidden=hidden, n_classes=n_classes)
        self.in_features = in_features
        self.bits, self.input_dropout = bits, input_dropout
        if edge_sparsifier is None and n_edges:
            edge_sparsifier = EdgeMask(n_edges, rngs=rngs)
        self.edge_mask = edge_sparsifier
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.channel_mask = ChannelMask(hidden, rngs=rngs) if channel_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        q = dict(bits=bits, quantizer=quantizer, in_degree=in_degree, impl=impl, aggregate_fn=aggregate_fn, rngs=rngs)
        self.conv1 = GCNConv(in_features, hidden, signed_input=signed_input, **q)
        self.conv2 = GCNConv(hidden, n_classes, **q)

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        check_input("GCN", x, self.in_features, adj.n_nodes)
        gates = None if self.edge_mask is None else self.edge_mask.edge_gates(x, adj.senders, adj.receivers)
        adj = gcn_normalize(adj, gates)
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        z = self.conv1(x, adj, self.dropout if self.input_dropout else None)
        h, dropout = relu_then_input_dropout(z, self.channel_mask, self.conv2, self.dropout)
        return self.conv2(h, adj, dropout)

    def takes_sparse_input(self) -> bool:
        """`GNN.takes_sparse_input`: True when the first layer runs combine-first (``X @ W``
        first), its input quantizer takes the nonzeros (`codesign.quant.Quantizer.takes_sparse`:
        `FakeQuant`, `LearnedBitQuant` per tensor or A^2Q's per node, max-calibrated
        `DegreeQuant`; not LSQ, whose initial step reads ``mean |x|``) and there is no
        `EdgeScorer` (it scores edges from the features). A `FeatureMask` gates the stored
        entries by column."""
        return (self.conv1.combine_first and self.conv1.quant_x.takes_sparse()
                and not isinstance(self.edge_mask, EdgeScorer))

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (+ ``"channel"`` with a channel mask;
        float32 scalars; 1.0 without a mask). ``hard=False``: expected (differentiable);
        ``hard=True``: of the deterministic hard masks."""
        return mask_densities(self.edge_mask, self.feature_mask, hard, self.channel_mask)

    def layer_bits(self, hard: bool = False) -> dict:
        """Mean bit-widths (float32 scalars) ``{"x0", "w0", "x1", "w1"}`` of each layer's input
        features and weights: expected (differentiable for learned bit-widths) or deployed."""
        return {"x0": quant_bits(self.conv1.quant_x, hard), "w0": quant_bits(self.conv1.quant_w, hard),
                "x1": quant_bits(self.conv2.quant_x, hard), "w1": quant_bits(self.conv2.quant_w, hard)}

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None,
                 locality: Optional[hwmodel.LocalityProfile] = None, feature_nnz=None) -> hwmodel.Workload:
        """The `hwmodel.Workload` of this model on a graph with ``n_nodes`` nodes and ``n_edges``
        edges (no self-loops): kept edges, features and channels from `densities` (or the given
        ``densities`` dict, for what-if costing), bit-widths from the quantizers (`layer_bits`;
        ``bits`` overrides them all, e.g. with a traced array for gradients). With a
        `BlockEdgeMask` the aggregation is costed as the BSR kernel over the kept tiles.
        ``locality``: the graph's measured `hwmodel.LocalityProfile` (None = uniform re-reference).
        ``feature_nnz``: float [in_features] stored nonzeros of each input column when the features
        are stored sparse (CSR: `codesign.graph.feature_column_nnz`; the first GEMM is then a
        `hwmodel.csr_gemm_stage` over the kept columns' nonzeros, `input_nnz`); None = features
        stored dense. Every model's ``workload`` takes it.

        Raises:
          ValueError: ``feature_nnz`` not of shape ``[in_features]``."""
        d = hwmodel.resolve_densities({"channel": jnp.ones((), jnp.float32), **self.densities(hard)}, densities)
        b = override_bits(bits)
        graph = graph_counts(n_nodes, n_edges, d, sparsifier=self.edge_mask, hard=hard, locality=locality)
        width = d["channel"] * self.conv1.out_features
        mid_bits = self.conv2.input_bits(hard) if b is None else b
        in_nnz = input_nnz(self, feature_nnz, densities, d, hard)
        return model_workload(
            self.conv1.workload("layer0", graph, in_dim=d["feature"] * self.conv1.in_features, out_dim=width,
                                out_bits=mid_bits, hard=hard, bits=b, in_nnz=in_nnz,
                                elementwise_ops=hidden_elementwise_ops(self.channel_mask is not None,
                                                                       self.conv2.input_bits(hard)))
            + self.conv2.workload("layer1", graph, in_dim=width, out_bits=FP32_BITS, hard=hard, bits=b),  # fp32 logits
            training=training, learned_edge_weights=learns_edge_weights(self.edge_mask))
