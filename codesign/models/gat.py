"""Graph attention network (Veličković, Cucurull, Casanova, Romero, Liò & Bengio, "Graph
Attention Networks", ICLR 2018) in Flax NNX, with co-design hooks.

Per layer and head (paper eq. 1-4), over the graph with self-loops added:

    h_j      = Q(x_j) @ Q(W)                                   [H, F] per node
    e_ij     = LeakyReLU_0.2(<a_dst, h_i> + <a_src, h_j>)
    alpha_ij = g_ij exp(e_ij) / sum_{k in N(i)} g_ik exp(e_ik)          (g = 1 without an edge mask)
    h_i'     = ||_heads sum_j alpha_ij h_j + b     (concat)   or   mean_heads(...) + b

One mechanism computes the attention-weighted aggregation: `GATConv` runs the vertex program
`codesign.vertex.layers.gat_attention` (the `gat` program with the layer's slope; one head;
the H heads a `jax.vmap` axis, which the fused kernels and scipy's CSR take as their head axis,
or, on the XLA reference, H disjoint copies of the graph, node n's head h at row n * H + h, so
that XLA's scatters keep contiguous rows) through its lowering (`codesign.vertex.lower`), and `GATConv.workload`
derives the attention stages from the same program. `codesign.kernels.auto_impl`
(``op="attention"``, the layer's H heads and shapes) picks the backend (or ``impl`` names it); the
lowering then runs:
  * no edge gates, no active attention dropout: the fused attention (rule 2 of
    `codesign.vertex.fusion`): "pallas" (the online-softmax kernel, GPU), "reference" (XLA gather
    + segment ops) or "csr" (edge softmax + one multi-head scipy CSR SpMM, CPU, when the adjacency
    carries a `codesign.kernels.CsrPattern` built with ``self_loops=True``); the vmapped heads run
    as one H-head kernel.
  * edge gates or active attention dropout: an edge softmax with the gates multiplying ``exp``,
    the dropout mask / (1 - rate) (an edge input ``keep`` [E', H]) on the normalized coefficients,
    then one fused SpMM through ``aggregate_fn`` (rule 1) with the kernel that backend implies
    ("csr": scipy's CSR, "reference": segment_sum; one host call for all heads).
Same values on every path up to summation order.

Edge sparsifier (any `codesign.sparsify.EdgeSparsifier`: `EdgeMask`, `BlockEdgeMask`,
`EdgeScorer`, `DropEdge`, `EdgeWeightMask`): the gate of edge ``j -> i`` multiplies its
unnormalized attention weight ``exp(e_ij)`` and the softmax is renormalized over the row
(equivalently, ``log g_ij`` is added to the logit). A hard gate of 0 removes the edge exactly;
self-loops are never gated, so every row keeps at least its own node. The graph's
``edge_weight`` is ignored, as in the paper.

Channel mask (a `codesign.sparsify.ChannelMask` over the ``heads * hidden`` concatenated channels
of layer 0): one gate sample ``z`` multiplies the projected features ``h = Q(x) Q(W)`` *before*
the attention scores and the aggregation, and the layer's output after ELU. A hard-zero channel
``c`` then takes part in neither the scores nor the aggregation nor layer 1, so deployment drops
column ``c`` of layer 0's ``W`` and bias and row ``c`` of layer 1's ``W`` exactly. (Gating only the
output, as GCN does, would leave the channel in the attention scores ``<a, h>``, so the GEMM
column could not be dropped.)

Cost model (`GAT.workload`): edge sparsity is costed as kept edges in the COO/CSR attention stages
(SDDMM, softmax, SpMM), also for a `BlockEdgeMask`: the attention runs edge-wise
(`gat_aggregate`'s Pallas kernel walks CSR rows, not B x B tiles), its coefficients differ per
head, and `hwmodel.attention_stages` has no block-sparse form, so kept tiles count only through
the edges they hold.
"""

from __future__ import annotations

import functools
from typing import Callable, Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency, CsrPattern, aggregate, auto_impl
from codesign.models.base import GNN, check_input, check_widths
from codesign.models.dropout import HashDropout
from codesign.sparsify import learns_edge_weights
from codesign.models.layers import (
    FP32_BITS,
    model_workload,
    GraphCounts,
    Layer,
    derived_aggregation,
    graph_counts,
    input_nnz,
    make_quantizer,
    mask_densities,
    override_bits,
    quant_bits,
)
from codesign.sparsify import ChannelMask, EdgeMask, FeatureMask
from codesign.vertex import layers as vertex_layers
from codesign.vertex.lower import heads_aggregate

NEGATIVE_SLOPE = 0.2  # LeakyReLU slope of the paper

_SPMM_OF_ATTENTION = {"csr": "csr_scipy", "reference": "segment"}
"""The `codesign.kernels.aggregate` backend of the unfused lowering's SpMM for each attention
backend (scipy's CSR kernel for "csr", segment_sum for the XLA reference, the SpMM chooser
otherwise)."""


@final
class GATConv(Layer):
    """One multi-head graph attention layer (Veličković et al. 2018, eq. 4 / eq. 6).

    Args:
      in_features: K.
      out_features: F, width per head.
      heads: H.
      concat: concatenate the heads ([N, H*F]) or average them ([N, F]; the paper's output layer).
      bits: fake-quantization bit-width of the input features and ``W`` (the attention vectors and
        the softmax stay fp32); the initial one for learned kinds; None = fp32.
      quantizer: `codesign.models.layers.QUANTIZERS` kind (see `make_quantizer`; the input is
        quantized node-wise, ``W`` per tensor).
      in_degree: int [N] in-degrees (self-loops included) for the "degree" / "a2q" quantizers.
      signed_input: quantize the input on a signed grid (ELU outputs can be negative).
      attn_dropout: dropout rate on the normalized attention coefficients (training only; paper 0.6).
      impl: the attention backend: "reference", "pallas" (`gat_aggregate`) or "auto"
        (`attention_backend`: `codesign.kernels.auto_impl` picks by modeled cost, the CSR path
        among the candidates on CPU when ``loops.pattern`` is a `CsrPattern`).
      aggregate_fn: the SpMM of the unfused lowering (edge gates or attention dropout),
        ``aggregate_fn(adj, x [N, F], impl=...)`` per head (default `codesign.kernels.aggregate`;
        injected as in `GCNConv`; the program's `EdgeContext.aggregate`; the default runs as
        `codesign.vertex.lower.heads_aggregate`, its vmap over the heads one call). The fused attention runs
        its own kernels (`gat_aggregate`, `csr_spmm`): the softmax is fused into them.

    Raises:
      ValueError: from `make_quantizer` (unknown ``quantizer``; "degree" / "a2q" without
        ``in_degree``).

    Shapes: ``x [N, K], loops (E' edges incl. self-loops) -> [N, H*F] or [N, F]``.
    Parameters use Glorot-uniform init; the bias starts at 0.
    """

    def __init__(self, in_features: int, out_features: int, heads: int, *, concat: bool = True,
                 bits: Optional[int] = None, quantizer: str = "fixed", in_degree=None,
                 signed_input: bool = False, attn_dropout: float = 0.0,
                 negative_slope: float = NEGATIVE_SLOPE, impl: str = "auto", aggregate_fn: Callable = aggregate,
                 rngs: nnx.Rngs):
        self.in_features, self.out_features, self.heads, self.concat = in_features, out_features, heads, concat
        self.negative_slope, self.impl, self.aggregate_fn = negative_slope, impl, aggregate_fn
        init = jax.nn.initializers.glorot_uniform()
        self.kernel = nnx.Param(init(rngs.params(), (in_features, heads * out_features), jnp.float32))
        self.att_src = nnx.Param(init(rngs.params(), (heads, out_features), jnp.float32))
        self.att_dst = nnx.Param(init(rngs.params(), (heads, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((heads * out_features if concat else out_features,), jnp.float32))
        self.quant_x = make_quantizer(quantizer, bits, signed=signed_input, node_wise=True, in_degree=in_degree,
                                      rngs=rngs)
        self.quant_w = make_quantizer(quantizer, bits, signed=True, node_wise=False, rngs=rngs)
        self.attn_dropout = HashDropout(attn_dropout, rngs=rngs)

    @property
    def out_width(self) -> int:
        return self.heads * self.out_features if self.concat else self.out_features

    def program(self, dropout_active: bool = False):
        """The layer's vertex program, one head (`codesign.vertex.layers.gat_attention` with its
        slope; with the attention-dropout edge input when ``dropout_active``)."""
        return vertex_layers.gat_attention(float(self.negative_slope), dropout_active)

    def __call__(self, x: jax.Array, loops: CooAdjacency, gate: Optional[jax.Array] = None,
                 dropout: Optional[nnx.Module] = None, channel_gate: Optional[jax.Array] = None) -> jax.Array:
        """Runs `program` (one head; ``gate`` attached with ``with_edge_gates``) through its
        lowering, on the backend `attention_backend` picks, the H heads as a `jax.vmap` axis: the
        fused kernels, the edge softmax and scipy's CSR run it as their head axis, XLA's SpMM as
        H disjoint copies of the graph (`codesign.vertex.lower.heads_aggregate`, with the default
        ``aggregate_fn``). ``loops``: the edges with
        self-loops (receivers = rows); ``gate``: float [E'] or None. A `CsrPattern` in
        ``loops.pattern`` (E' entries) makes the CSR kernels candidates on CPU with ``impl="auto"``.
        ``dropout`` (optional) is applied to the *quantized* input (as `GCNConv` does: a learned
        step size is fitted to what inference sees). ``channel_gate``: float [H*F] or None,
        multiplies the projected features before the attention scores and the aggregation (the
        model's channel mask)."""
        n = x.shape[0]
        x = self.quant_x(x)
        if dropout is not None:
            x = dropout(x)
        h = x @ self.quant_w(self.kernel[...])
        if channel_gate is not None:
            h = h * channel_gate[None, :].astype(h.dtype)
        h = h.reshape(n, self.heads, self.out_features)
        s_src = jnp.sum(h * self.att_src[...], axis=-1)  # [N, H]; an einsum here transposes h on CPU
        s_dst = jnp.sum(h * self.att_dst[...], axis=-1)
        dropout_active = not self.attn_dropout.deterministic and self.attn_dropout.rate > 0
        mode = self.attention_backend(loops, h)
        # attention dropout: its mask / (1 - rate) per edge and head, an edge input of the program
        keep = self.attn_dropout(jnp.ones((loops.n_edges, self.heads), jnp.float32)) if dropout_active else None
        # the heads as a vmapped axis: the fused kernels, the edge softmax and scipy's CSR take it as
        # their head axis, the XLA SpMM as H disjoint copies of the graph (`heads_aggregate`)
        out = jax.vmap(functools.partial(self._run, loops, gate, mode), in_axes=(1, 1, 1, None if keep is None else 1),
                       out_axes=1)(h, s_src, s_dst, keep)
        out = out.reshape(n, -1) if self.concat else out.mean(axis=1)
        return out + self.bias[...]

    def _run(self, adj, gate, mode, h, el, er, keep):
        """`program` on ``adj`` for one head (h [N, F], el / er [N], keep [E] or None); ``gate``
        [E] or None attached with ``with_edge_gates``. The unfused lowering's SpMM (gates or
        attention dropout) runs the kernel of the attention backend ``mode``."""
        prog = self.program(keep is not None)
        prog = prog if gate is None else prog.with_edge_gates(gate)
        agg = heads_aggregate if self.aggregate_fn is aggregate else self.aggregate_fn
        return prog(adj, nodes={"h": h, "el": el, "er": er}, edges={} if keep is None else {"keep": keep},
                    impl=_SPMM_OF_ATTENTION.get(mode, "auto"), attention_impl=mode, aggregate=agg)

    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 scalar: the bits of its input features (``quant_x``; expected or deployed)."""
        return quant_bits(self.quant_x, hard)

    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=FP32_BITS,
                 hard: bool = False, bits=None, in_nnz=None) -> tuple[hwmodel.LayerWorkload, ...]:
        """One `hwmodel.LayerWorkload` (`Layer.workload` for the arguments; ``out_dim`` is the kept
        H*F projected channels; ``in_nnz``: the projection over the stored nonzeros). Combine-first
        only (attention needs the projected features), so
        both dataflow orders hold the same stages: GEMM N x K x (H*F), then the attention stages
        derived from the `codesign.vertex.layers.gat` program over H heads (`derived_aggregation`,
        the fused-attention plan: SDDMM of the score terms, edge softmax, attention-weighted SpMM
        over H*F columns; nnz = kept edges + N self-loops), and one elementwise stage
        (`score_and_activation_stage`, hand-written: the score terms, head mean, bias and ELU are
        dense work outside the program). The projected features, the attention SpMM and the output
        are costed at ``out_bits``. Edge gates enter as kept edges only (the costing convention:
        the gated forward's edge softmax + SpMM is costed as the fused kernel's stages); a
        `BlockEdgeMask` counts through its kept edges (see the module docstring)."""
        x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.quant_w, hard))
        n = graph.n_nodes
        k = self.in_features if in_dim is None else in_dim
        hf = self.heads * self.out_features if out_dim is None else out_dim
        width = hf if self.concat else self.out_features
        attention = derived_aggregation(self.program(), name, graph, {"h": self.out_features},
                                        kept_widths={"h": hf / self.heads}, bits={"h": out_bits}, out_bits=out_bits,
                                        heads=self.heads, blocks=False)
        gemm = (hwmodel.input_gemm_stage(n, k, hf, x_bits, w_bits, out_bits, in_nnz),)
        elem = (score_and_activation_stage(n, self.heads, hf, width, out_bits,
                                           head_mean=not self.concat and self.heads > 1),)
        stages = gemm + attention.combine_first
        return (hwmodel.LayerWorkload(name, stages, stages, elem + attention.elementwise),)

    def attention_backend(self, loops: CooAdjacency, h: jax.Array) -> str:
        """The attention backend this layer runs on ``loops`` for h [N, H, F]: ``impl`` if not
        "auto", else `codesign.kernels.auto_impl` (``op="attention"``: the lowest modeled cost on
        the device's preset among "reference" / "pallas" / "csr" where they run; in train mode
        (``nnx.Module.train``) the forward and its backward are priced, in eval mode the forward).

        Raises:
          ValueError: ``loops.pattern`` is a `CsrPattern` whose entry count is not ``loops``'
            edges (built without ``self_loops=True``).
        """
        if isinstance(loops.pattern, CsrPattern) and loops.pattern.n_entries != loops.n_edges:
            raise ValueError(f"GATConv: loops.pattern has {loops.pattern.n_entries} entries for {loops.n_edges} "
                             f"edges with self-loops: build it with with_csr_pattern(adj, self_loops=True)")
        if self.impl != "auto":
            return self.impl
        # in train mode the call is part of a training step: priced with its backward
        return auto_impl(loops, h, op="attention", heads=self.heads, training=not self.attn_dropout.deterministic)


@final
class GAT(GNN):
    """Two-layer GAT for node classification (the paper's transductive architecture) with
    optional edge sparsifier, feature mask, channel mask and quantizers:
    [feature mask] -> dropout -> GATConv(heads x hidden, concat) -> ELU [-> channel mask] -> dropout
    -> GATConv(out_heads x n_classes, mean). (Dropout acts on each layer's quantized input.)

    Args:
      in_features, n_classes: input width and classes.
      hidden: width per head of the first layer (paper, Cora: 8).
      n_edges: if given (and no ``edge_sparsifier``), an `EdgeMask` with one hard-concrete gate
        per edge (E, no self-loops).
      edge_sparsifier: any `codesign.sparsify.EdgeSparsifier` module (`BlockEdgeMask`,
        `EdgeScorer`, `DropEdge`, ...) whose ``edge_gates`` multiply the unnormalized attention
        weights of the E edges (self-loops are never gated).
      feature_mask: if True, a `FeatureMask` gating the input columns.
      channel_mask: if True, a `ChannelMask` gating the ``heads * hidden`` concatenated channels
        of layer 0 (see the module docstring): shrinks layer 0's GEMM output, its attention SpMM
        width and layer 1's GEMM K.
      bits: bit-width of features and weights (None = fp32); the initial one for learned kinds.
      quantizer: `codesign.models.layers.QUANTIZERS` kind (see `make_quantizer`).
      in_degree: int [N] in-degrees (self-loops included) for the "degree" / "a2q" quantizers.
      signed_input: quantize the input features on a signed grid (features that may be negative:
        LSA, embeddings, Gaussian cSBM features); False: unsigned, for features >= 0 (bag-of-words),
        where a negative value would be clipped to 0. `codesign.train.build_model` sets it from
        the data (`codesign.graph.Graph.signed_features`).
      dropout: dropout rate on each layer's input (paper: 0.6).
      heads: first-layer heads (paper: 8); out_heads: output-layer heads, averaged (paper: 1).
      attn_dropout: dropout on the attention coefficients; None = ``dropout`` (paper: 0.6 both).
      impl: attention backend of both layers (`GATConv.attention_backend`; "auto": the lowest
        modeled cost, `codesign.kernels.auto_impl`; the CSR path is a candidate on CPU when
        ``adj.pattern`` is a `CsrPattern` built with ``self_loops=True``).
      aggregate_fn: the edge path's aggregation in both layers (`GATConv`; default
        `codesign.kernels.aggregate`).

    Raises:
      ValueError: from `make_quantizer` (unknown ``quantizer``; "degree" / "a2q" without
        ``in_degree``).

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges, no self-loops)
    -> logits [N, n_classes]``.
    """

    HOOKS = frozenset({"edge_sparsifier", "channel_mask", "quantizer"})
    OPTIONS = ("heads",)

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 edge_sparsifier: Optional[nnx.Module] = None, feature_mask: bool = False,
                 channel_mask: bool = False, bits: Optional[int] = None, quantizer: str = "fixed",
                 in_degree=None, signed_input: bool = False, dropout: float = 0.6, heads: int = 8, out_heads: int = 1,
                 attn_dropout: Optional[float] = None, impl: str = "auto", aggregate_fn: Callable = aggregate,
                 rngs: nnx.Rngs):
        check_widths("GAT", in_features=in_features, hidden=hidden, n_classes=n_classes, heads=heads, out_heads=out_heads)
        self.in_features = in_features
        attn = dropout if attn_dropout is None else attn_dropout
        self.bits, self.impl = bits, impl
        if edge_sparsifier is None and n_edges:
            edge_sparsifier = EdgeMask(n_edges, rngs=rngs)
        self.edge_mask = edge_sparsifier
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.channel_mask = ChannelMask(heads * hidden, rngs=rngs) if channel_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        q = dict(bits=bits, quantizer=quantizer, in_degree=in_degree, attn_dropout=attn, impl=impl,
                 aggregate_fn=aggregate_fn, rngs=rngs)
        self.conv1 = GATConv(in_features, hidden, heads, concat=True, signed_input=signed_input, **q)
        self.conv2 = GATConv(heads * hidden, n_classes, out_heads, concat=False, signed_input=True, **q)

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        check_input("GAT", x, self.in_features, adj.n_nodes)
        senders, receivers = add_self_loops(adj.senders, adj.receivers, adj.n_nodes)
        csr = adj.pattern if isinstance(adj.pattern, CsrPattern) else None  # built with self_loops=True
        loops = CooAdjacency(senders, receivers, None, adj.n_nodes, csr)
        gate = None
        if self.edge_mask is not None:
            g = self.edge_mask.edge_gates(x, adj.senders, adj.receivers).astype(jnp.float32)
            gate = jnp.concatenate([g, jnp.ones((adj.n_nodes,), jnp.float32)])
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        z = None
        if self.channel_mask is not None:  # one sample, used before the scores and after ELU
            z = self.channel_mask(jnp.ones((self.channel_mask.n_channels,), jnp.float32))
        h = jax.nn.elu(self.conv1(x, loops, gate, self.dropout, z))
        if z is not None:
            h = h * z[None, :]
        return self.conv2(h, loops, gate, self.dropout)

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (+ ``"channel"`` with a channel mask),
        see `GCN.densities`."""
        return mask_densities(self.edge_mask, self.feature_mask, hard, self.channel_mask)

    def layer_bits(self, hard: bool = False) -> dict:
        """Mean bit-widths (float32 scalars) ``{"x0", "w0", "x1", "w1"}`` of each layer's input
        features and ``W``: expected (differentiable for learned bit-widths) or deployed."""
        return {"x0": quant_bits(self.conv1.quant_x, hard), "w0": quant_bits(self.conv1.quant_w, hard),
                "x1": quant_bits(self.conv2.quant_x, hard), "w1": quant_bits(self.conv2.quant_w, hard)}

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None,
                 locality: Optional[hwmodel.LocalityProfile] = None, feature_nnz=None) -> hwmodel.Workload:
        """The `hwmodel.Workload` (arguments as `GCN.workload`, ``feature_nnz`` too): ``layer0``,
        ``layer1`` (`GATConv.workload`).

        Counts: K of layer 0 = feature density x in_features; H*F of layer 0 and K of layer 1 =
        channel density x heads x hidden. Bits (`layer_bits`, or ``bits`` for all): layer ``l``'s
        GEMM reads ``x{l}`` / ``w{l}``; layer 0's projected features, attention SpMM and output
        are costed at ``x1`` (what layer 1 reads), layer 1's at fp32 (logits).
        """
        d = hwmodel.resolve_densities({"channel": jnp.ones((), jnp.float32), **self.densities(hard)}, densities)
        b = override_bits(bits)
        graph = graph_counts(n_nodes, n_edges, d, hard=hard, locality=locality)
        hf0 = d["channel"] * (self.conv1.heads * self.conv1.out_features)
        return model_workload(
            self.conv1.workload("layer0", graph, in_dim=d["feature"] * self.conv1.in_features, out_dim=hf0,
                                out_bits=self.conv2.input_bits(hard) if b is None else b, hard=hard, bits=b,
                                in_nnz=input_nnz(self, feature_nnz, densities, d, hard))
            + self.conv2.workload("layer1", graph, in_dim=hf0, out_bits=FP32_BITS, hard=hard, bits=b),
            training=training, learned_edge_weights=learns_edge_weights(self.edge_mask, attention=True))


def score_and_activation_stage(n, heads: int, hf, out_width, bits, *, head_mean: bool) -> hwmodel.Stage:
    """The per-node work around a GAT layer's aggregation, as one elementwise stage:

      score terms ``<a_src, h_j>``, ``<a_dst, h_i>``: 2 MACs per element of h [N, hf]
        (``hf`` = kept heads x width channels); reads h, writes 2 fp32 scores per node and head;
      head mean (``head_mean``, an output layer averaging several heads): one add per element of h;
      bias + activation: one op per output element (``out_width``), read and written once (as
        `hwmodel.elementwise_stage`).

    ``hf`` and ``out_width`` may be expected (traced) counts; ``bits`` the width h is stored at.
    In a fused epilogue (``HardwareSpec.fuses_epilogue``) the score terms are computed in the
    projection GEMM's epilogue and bias + activation in the SpMM's: only the scores are written,
    plus the activation mask (``Stage.epilogue_bytes``, as `hwmodel.elementwise_stage`).
    """
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    n, hf, width, bits = f32(n), f32(hf), f32(out_width), f32(bits)
    mean_ops = n * hf if head_mean else jnp.zeros((), jnp.float32)
    ops = 2.0 * n * hf + mean_ops + n * width
    nbytes = n * hf * bits / 8.0 + 2.0 * n * heads * 4.0 + 2.0 * n * width * bits / 8.0
    zero = jnp.zeros((), jnp.float32)
    fused = 2.0 * n * heads * 4.0 + n * width * hwmodel.ACTIVATION_MASK_BYTES
    return hwmodel.Stage("elementwise", ops, bits, nbytes, zero, zero, epilogue_bytes=fused)
