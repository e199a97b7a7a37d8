"""Graph attention network (Veličković, Cucurull, Casanova, Romero, Liò & Bengio, "Graph
Attention Networks", ICLR 2018) in Flax NNX, with co-design hooks.

Per layer and head (paper eq. 1-4), over the graph with self-loops added:

    h_j      = Q(x_j) @ Q(W)                                   [H, F] per node
    e_ij     = LeakyReLU_0.2(<a_dst, h_i> + <a_src, h_j>)
    alpha_ij = g_ij exp(e_ij) / sum_{k in N(i)} g_ik exp(e_ik)          (g = 1 without an edge mask)
    h_i'     = ||_heads sum_j alpha_ij h_j + b     (concat)   or   mean_heads(...) + b

Two paths compute the attention-weighted aggregation, with the same result when they both apply:
  * fused: `codesign.kernels.gat_aggregate` (Pallas kernel on GPU, its plain-JAX reference on
    CPU) — used when there are neither edge gates nor active attention dropout (inference without
    an edge mask, or training with ``attn_dropout = 0``). The kernel takes per-node score terms
    only, so it can carry neither a per-edge gate nor a dropout mask on the coefficients.
  * edge path (`edge_attention` + `codesign.kernels.aggregate`): numerically stable edge softmax
    in plain JAX, then the paper's dropout on the normalized coefficients (training only), then
    one SpMM over a head-expanded adjacency (node ``n``, head ``h`` -> row ``n * H + h``). Used
    whenever the model has an edge mask (training and inference) or attention dropout is active.
  * CSR path (CPU, when the adjacency carries a `codesign.kernels.CsrPattern` built with
    ``self_loops=True`` and ``impl="auto"``): the edge path computed over the edges in CSR order
    (sorted by receiver, so the segment reductions run on sorted ids), with the H-head SpMM and
    its backward run by scipy's CSR kernel (`codesign.kernels.csr_spmm`). Used in training and
    inference. Same values as the other paths up to summation order; attention dropout draws its
    mask over the CSR-ordered [E', H] array, so for one seed it drops other coefficients than the
    edge path does.

Edge mask: the gate of edge ``j -> i`` multiplies its unnormalized attention weight
``exp(e_ij)`` and the softmax is renormalized over the row (equivalently, ``log g_ij`` is added to
the logit). A hard gate of 0 removes the edge exactly; self-loops are never gated, so every row
keeps at least its own node. The graph's ``edge_weight`` is ignored, as in the paper.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency, CsrPattern, aggregate, csr_by_receiver, csr_spmm, gat_aggregate
from codesign.models.dropout import HashDropout
from codesign.models.layers import FP32_BITS, mask_densities
from codesign.quant import FakeQuant
from codesign.sparsify import EdgeMask, FeatureMask

NEGATIVE_SLOPE = 0.2  # LeakyReLU slope of the paper


def edge_attention(senders: jax.Array, receivers: jax.Array, n_nodes: int, s_src: jax.Array, s_dst: jax.Array,
                   gate: Optional[jax.Array] = None, *, negative_slope: float = NEGATIVE_SLOPE,
                   indices_are_sorted: bool = False) -> jax.Array:
    """Attention coefficients ``alpha [E, H]``: a gated, numerically stable softmax over each
    receiver's incoming edges (the row maximum is subtracted before ``exp``).

    Args:
      senders, receivers: int32 [E].
      n_nodes: N.
      s_src, s_dst: float [N, H] score terms ``<a_src, h_j>`` and ``<a_dst, h_i>``.
      gate: float [E] in [0, 1] or None (= 1); multiplies ``exp(e_ij)`` before normalizing.
      indices_are_sorted: ``receivers`` is non-decreasing (CSR order); passed to the segment ops.

    Returns:
      float32 [E, H]; every row with a positive total weight sums to 1, other rows are 0.
    """
    z = s_dst[receivers].astype(jnp.float32) + s_src[senders].astype(jnp.float32)  # [E, H]
    e = jnp.where(z > 0, z, negative_slope * z)
    seg = dict(num_segments=n_nodes, indices_are_sorted=indices_are_sorted)
    e_max = jax.ops.segment_max(e, receivers, **seg)  # -inf on empty rows
    e_max = jax.lax.stop_gradient(jnp.where(jnp.isfinite(e_max), e_max, 0.0))  # shift-invariant
    p = jnp.exp(e - e_max[receivers])
    if gate is not None:
        p = p * gate[:, None].astype(p.dtype)
    denom = jax.ops.segment_sum(p, receivers, **seg)
    denom = jnp.where(denom > 0, denom, 1.0)
    return p / denom[receivers]


def head_adjacency(senders: jax.Array, receivers: jax.Array, n_nodes: int, alpha: jax.Array) -> CooAdjacency:
    """Block-diagonal adjacency over ``N * H`` rows (row ``n * H + h`` = node ``n``, head ``h``)
    whose entry for edge ``e`` and head ``h`` is ``alpha[e, h]``, so that one `aggregate` over
    ``x.reshape(N * H, F)`` applies every head's attention. ``alpha``: float [E, H]."""
    heads = alpha.shape[1]
    offs = jnp.arange(heads, dtype=senders.dtype)
    return CooAdjacency((senders[:, None] * heads + offs).reshape(-1), (receivers[:, None] * heads + offs).reshape(-1),
                        alpha.reshape(-1), n_nodes * heads)


class GATConv(nnx.Module):
    """One multi-head graph attention layer (Veličković et al. 2018, eq. 4 / eq. 6).

    Args:
      in_features: K.
      out_features: F, width per head.
      heads: H.
      concat: concatenate the heads ([N, H*F]) or average them ([N, F]; the paper's output layer).
      bits: fake-quantization bit-width of the input features and ``W`` (the attention vectors and
        the softmax stay fp32).
      signed_input: quantize the input on a signed grid (ELU outputs can be negative).
      attn_dropout: dropout rate on the normalized attention coefficients (training only; paper 0.6).
      impl: `gat_aggregate` implementation of the fused path ("auto", "reference", "pallas");
        "auto" also takes the CSR path on CPU when ``loops.pattern`` is a `CsrPattern`.

    Shapes: ``x [N, K], loops (E' edges incl. self-loops) -> [N, H*F] or [N, F]``.
    Parameters use Glorot-uniform init; the bias starts at 0.
    """

    def __init__(self, in_features: int, out_features: int, heads: int, *, concat: bool = True,
                 bits: Optional[int] = None, signed_input: bool = False, attn_dropout: float = 0.0,
                 negative_slope: float = NEGATIVE_SLOPE, impl: str = "auto", rngs: nnx.Rngs):
        self.in_features, self.out_features, self.heads, self.concat = in_features, out_features, heads, concat
        self.negative_slope, self.impl = negative_slope, impl
        init = jax.nn.initializers.glorot_uniform()
        self.kernel = nnx.Param(init(rngs.params(), (in_features, heads * out_features), jnp.float32))
        self.att_src = nnx.Param(init(rngs.params(), (heads, out_features), jnp.float32))
        self.att_dst = nnx.Param(init(rngs.params(), (heads, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((heads * out_features if concat else out_features,), jnp.float32))
        self.quant_x = FakeQuant(bits, signed=signed_input)
        self.quant_w = FakeQuant(bits, signed=True)
        self.attn_dropout = HashDropout(attn_dropout, rngs=rngs)

    @property
    def out_width(self) -> int:
        return self.heads * self.out_features if self.concat else self.out_features

    def __call__(self, x: jax.Array, loops: CooAdjacency, gate: Optional[jax.Array] = None,
                 fused_graph=None) -> jax.Array:
        """``loops``: the edges with self-loops (receivers = rows); ``gate``: float [E'] or None;
        ``fused_graph``: what to hand `gat_aggregate` (a `CsrByReceiver` built once per forward
        for the Pallas path; None = ``loops``). A `CsrPattern` in ``loops.pattern`` (E' entries)
        selects the CSR path on CPU with ``impl="auto"``."""
        n = x.shape[0]
        h = (self.quant_x(x) @ self.quant_w(self.kernel[...])).reshape(n, self.heads, self.out_features)
        s_src = jnp.sum(h * self.att_src[...], axis=-1)  # [N, H]; an einsum here transposes h on CPU
        s_dst = jnp.sum(h * self.att_dst[...], axis=-1)
        dropout_active = not self.attn_dropout.deterministic and self.attn_dropout.rate > 0
        if self._uses_csr(loops):
            p = loops.pattern
            alpha = edge_attention(p.indices, p.rows, n, s_src, s_dst, None if gate is None else gate[p.perm],
                                   negative_slope=self.negative_slope, indices_are_sorted=True)
            out = csr_spmm(p, self.attn_dropout(alpha), h)
        elif gate is None and not dropout_active:
            out = gat_aggregate(loops if fused_graph is None else fused_graph, h, s_src, s_dst,
                                negative_slope=self.negative_slope, impl=self.impl)
        else:
            alpha = edge_attention(loops.senders, loops.receivers, n, s_src, s_dst, gate,
                                   negative_slope=self.negative_slope)
            alpha = self.attn_dropout(alpha)
            a = head_adjacency(loops.senders, loops.receivers, n, alpha)
            out = aggregate(a, h.reshape(n * self.heads, self.out_features)).reshape(h.shape)
        out = out.reshape(n, -1) if self.concat else out.mean(axis=1)
        return out + self.bias[...]

    def _uses_csr(self, loops: CooAdjacency) -> bool:
        if not isinstance(loops.pattern, CsrPattern) or self.impl != "auto" or jax.default_backend() != "cpu":
            return False
        if loops.pattern.n_entries != loops.n_edges:
            raise ValueError(f"GATConv: loops.pattern has {loops.pattern.n_entries} entries for {loops.n_edges} "
                             f"edges with self-loops: build it with with_csr_pattern(adj, self_loops=True)")
        return True


class GAT(nnx.Module):
    """Two-layer GAT for node classification (the paper's transductive architecture) with
    optional edge mask, feature mask and N-bit fake quantization:
    dropout -> GATConv(heads x hidden, concat) -> ELU -> dropout -> GATConv(out_heads x n_classes, mean).

    Args:
      in_features, n_classes: input width and classes.
      hidden: width per head of the first layer (paper, Cora: 8).
      n_edges: if given, an `EdgeMask` with one hard-concrete gate per edge (E, no self-loops).
      feature_mask: if True, a `FeatureMask` gating the input columns.
      bits: fake-quantization bit-width of features and weights (None = fp32).
      dropout: dropout rate on each layer's input (paper: 0.6).
      heads: first-layer heads (paper: 8); out_heads: output-layer heads, averaged (paper: 1).
      attn_dropout: dropout on the attention coefficients; None = ``dropout`` (paper: 0.6 both).
      impl: `gat_aggregate` implementation ("auto": Pallas on GPU, reference otherwise; on CPU the
        CSR path when ``adj.pattern`` is a `CsrPattern` built with ``self_loops=True``).

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges, no self-loops)
    -> logits [N, n_classes]``.
    """

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 feature_mask: bool = False, bits: Optional[int] = None, dropout: float = 0.6,
                 heads: int = 8, out_heads: int = 1, attn_dropout: Optional[float] = None,
                 impl: str = "auto", rngs: nnx.Rngs):
        attn = dropout if attn_dropout is None else attn_dropout
        self.bits, self.impl = bits, impl
        self.edge_mask = EdgeMask(n_edges, rngs=rngs) if n_edges else None
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        self.conv1 = GATConv(in_features, hidden, heads, concat=True, bits=bits, attn_dropout=attn,
                             impl=impl, rngs=rngs)
        self.conv2 = GATConv(heads * hidden, n_classes, out_heads, concat=False, bits=bits, signed_input=True,
                             attn_dropout=attn, impl=impl, rngs=rngs)

    def _fused_uses_pallas(self) -> bool:
        return self.impl == "pallas" or (self.impl == "auto" and jax.default_backend() == "gpu")

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        senders, receivers = add_self_loops(adj.senders, adj.receivers, adj.n_nodes)
        csr = adj.pattern if isinstance(adj.pattern, CsrPattern) else None  # built with self_loops=True
        loops = CooAdjacency(senders, receivers, None, adj.n_nodes, csr)
        gate = None
        if self.edge_mask is not None:
            gate = jnp.concatenate([self.edge_mask(), jnp.ones((adj.n_nodes,), jnp.float32)])
        fused = csr_by_receiver(loops) if gate is None and self._fused_uses_pallas() else None
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        h = jax.nn.elu(self.conv1(self.dropout(x), loops, gate, fused))
        return self.conv2(self.dropout(h), loops, gate, fused)

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (see `GCN.densities`)."""
        return mask_densities(self.edge_mask, self.feature_mask, hard)

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None,
                 locality: Optional[hwmodel.LocalityProfile] = None) -> hwmodel.Workload:
        """The `hwmodel.Workload` (arguments as `GCN.workload`). Each layer is combine-first only
        (attention needs the projected features), so both dataflow orders hold the same stages:
        GEMM N x K x (H*F), then `hwmodel.attention_stages` (SDDMM of the score terms, edge
        softmax, attention-weighted SpMM over H*F columns; nnz = kept edges + N self-loops), and
        one elementwise stage (`score_and_activation_stage`). Layer 1 writes fp32 logits.
        """
        d = {**self.densities(hard), **(densities or {})}
        b = jnp.asarray(bits if bits is not None else (self.bits or FP32_BITS), jnp.float32)
        nnz = d["edge"] * n_edges + n_nodes
        layers = []
        for i, (conv, k) in enumerate(((self.conv1, d["feature"] * self.conv1.in_features),
                                       (self.conv2, self.conv2.in_features))):
            out_bits = FP32_BITS if i == 1 else b
            stages = (hwmodel.gemm_stage(n_nodes, k, conv.heads * conv.out_features, b, b, out_bits),
                      *hwmodel.attention_stages(n_nodes, nnz, conv.heads, conv.out_features, out_bits, out_bits,
                                                locality, d["edge"]))
            elem = (score_and_activation_stage(n_nodes, conv.heads, conv.out_features, conv.out_width, out_bits),)
            if training:
                stages, elem = hwmodel.with_backward(stages), hwmodel.with_backward(elem)
            layers.append(hwmodel.LayerWorkload(f"layer{i}", stages, stages, elem))
        return hwmodel.Workload(tuple(layers), training)


def score_and_activation_stage(n, heads, head_dim, out_width, bits) -> hwmodel.Stage:
    """The per-node work around a GAT layer's aggregation, as one elementwise stage:

      score terms ``<a_src, h_j>``, ``<a_dst, h_i>``: 2 MACs per element of h [N, H*F]; reads h,
        writes 2 fp32 scores per node and head;
      head mean (``out_width < H*F``): one add per element of h;
      bias + activation: one op per output element, read and written once (as
        `hwmodel.elementwise_stage`).
    """
    f32 = lambda v: jnp.asarray(v, jnp.float32)
    n, hf, width, bits = f32(n), f32(heads * head_dim), f32(out_width), f32(bits)
    mean_ops = n * hf if heads > 1 and out_width < heads * head_dim else jnp.zeros((), jnp.float32)
    ops = 2.0 * n * hf + mean_ops + n * width
    nbytes = n * hf * bits / 8.0 + 2.0 * n * heads * 4.0 + 2.0 * n * width * bits / 8.0
    zero = jnp.zeros((), jnp.float32)
    return hwmodel.Stage("elementwise", ops, bits, nbytes, zero, zero)
