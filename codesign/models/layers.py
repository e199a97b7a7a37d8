"""Pieces shared by the models: the quantizer factory, a fake-quantized linear layer, mask
densities and bit-widths as the cost model sees them, `GraphCounts` (what a layer's workload reads
of its graph), the workload of a graph-free dense layer."""

from __future__ import annotations

import abc
import dataclasses
from typing import Any, Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.hwmodel.workload import FAKE_QUANT_OPS
from codesign import quant as q
from codesign.quant import NO_QUANT_BITS, FakeQuant
from codesign.sparsify import BlockEdgeMask, EdgeMask, FeatureMask

FP32_BITS = 32
QUANTIZERS = ("fixed", "lsq", "learned", "degree", "a2q")
"""Quantizer kinds of `make_quantizer`."""
A2Q_MIN_BITS, A2Q_MAX_BITS = 2, 8
"""Bounds of the per-node bit-widths of ``quantizer="a2q"`` (A^2Q, Zhu et al., ICLR 2023, search
bit-widths in [1, 8]; 2 keeps the signed grid non-degenerate)."""


def make_quantizer(kind: str, bits: Optional[int], *, signed: bool, node_wise: bool,
                   in_degree=None, rngs: Optional[nnx.Rngs] = None) -> nnx.Module:
    """The quantizer of one tensor of a layer.

    Args:
      kind: one of `QUANTIZERS`:
        "fixed"   `FakeQuant` (per-tensor max scale, STE; Jacob et al., CVPR 2018);
        "lsq"     `LSQQuant` (learned step size; Esser et al., ICLR 2020);
        "learned" `LearnedBitQuant`, one learned bit-width per tensor (Uhlich et al., ICLR 2020);
        "degree"  Degree-Quant (Tailor et al., ICLR 2021): `DegreeQuant` with protective masking
                  on node-wise tensors, `FakeQuant` on weights;
        "a2q"     A^2Q-style (Zhu et al., ICLR 2023): one learned bit-width per node on node-wise
                  tensors, initialised by in-degree (`a2q_init_bits`), one per tensor on weights.
      bits: initial / fixed bit-width, an int in [2, 32] (signed) / [1, 32] (unsigned); None or 32
        = no quantization (always a `FakeQuant(None)`).
      signed: signed grid (weights, signed activations) or unsigned (ReLU outputs, bag-of-words).
      node_wise: the tensor is ``[N, F]`` node features (rows = nodes); needed by "degree", "a2q".
      in_degree: int [N] in-degrees (with self-loops) of the graph; required by node-wise
        "degree" / "a2q".
      rngs: `nnx.Rngs` (its ``quant`` stream, else ``default``) for "degree".

    Raises:
      ValueError: unknown ``kind``; ``bits`` out of range (`codesign.quant.check_bits`);
        ``in_degree`` missing where it is required.
      TypeError: ``bits`` not an int or None.
    """
    if kind not in QUANTIZERS:
        raise ValueError(f"quantizer: unknown kind {kind!r}; choose from {QUANTIZERS}")
    if q.check_bits(bits, signed) is None:  # None or 32: float32; 33 and up are refused, not run as fp32
        return FakeQuant(None, signed=signed)
    if kind in ("degree", "a2q") and node_wise and in_degree is None:
        raise ValueError(f"quantizer {kind!r} on node features needs the graph's in_degree [N]")
    if kind == "lsq":
        # LSQ's 2 mean|x| / sqrt(Qp) initial step clips almost every nonzero of a sparse
        # activation (bag-of-words rows, ReLU outputs: mean|x| is mostly zeros); measured on Cora
        # GCN at 4 bits it saturated both layers' inputs and training never left ln(7). Node
        # features start from the max-calibrated step instead, weights from the paper's.
        # cap_step: the node-feature step then still drifted up (0.067 -> 0.093, a gain the
        # weight decay does not see), zeroing rows with > 21 words: 76.5 % -> 80.5 % with the
        # cap (2 seeds; fixed 4-bit 80.95 %).
        return q.LSQQuant(bits, signed=signed, init_method="max" if node_wise else "lsq",
                          cap_step=node_wise)
    if kind == "learned" or (kind == "a2q" and not node_wise):
        return q.LearnedBitQuant(float(bits), signed=signed, max_bits=max(bits, A2Q_MAX_BITS), cap_range=node_wise)
    if kind == "degree" and node_wise:
        return q.DegreeQuant(bits, jnp.asarray(in_degree), signed=signed, rngs=rngs)
    if kind == "a2q":
        # pin_range: learned per-node ranges are N free gains (train 99 %, test 37.5 % on Cora's
        # hidden features); pinned to each row's max only the bits are learned (36.9 -> 67 %, 2
        # seeds; still short of fixed: open).
        lo = A2Q_MIN_BITS if signed else 1
        init = q.a2q_init_bits(jnp.asarray(in_degree), float(bits), lo, max(bits, A2Q_MAX_BITS))
        return q.LearnedBitQuant(init, signed=signed, per_node=int(init.shape[0]), min_bits=lo,
                                 max_bits=max(bits, A2Q_MAX_BITS), pin_range=True)
    return FakeQuant(bits, signed=signed)


def quant_bits(quantizer, hard: bool) -> jax.Array:
    """Mean bit-width (float32 scalar) of the values ``quantizer`` emits: expected (differentiable
    for learned bit-widths) when ``hard=False``, the deployed integer bits otherwise (the mean over
    nodes for per-node bit-widths; traffic is linear in bits, so the mean is exact for bytes)."""
    if hard:
        return jnp.mean(jnp.asarray(q.hard_bits(quantizer), jnp.float32))
    return q.expected_bits(quantizer)


def edge_density(sparsifier, hard: bool) -> jax.Array:
    """Kept fraction of the graph's edges (float32 scalar; 1.0 without a sparsifier): expected
    (differentiable) or of the hardened mask, for any `codesign.sparsify.EdgeSparsifier`."""
    if sparsifier is None:
        return jnp.ones((), jnp.float32)
    return sparsifier.hard_edge_density() if hard else sparsifier.expected_edge_density()


def kept_tiles(sparsifier, hard: bool):
    """Kept B x B tiles (float32 scalar) of a `codesign.sparsify.BlockEdgeMask`, else None."""
    if not isinstance(sparsifier, BlockEdgeMask):
        return None
    return sparsifier.hard_kept_tiles() if hard else sparsifier.expected_kept_tiles()


@dataclasses.dataclass(frozen=True)
class GraphCounts:
    """What a layer's `workload` reads of the graph it runs on. Counts are float32 scalars (jax
    arrays, possibly traced: expected counts carry gradients into the gates) or Python numbers.

    Fields:
      n_nodes: N.
      kept_edges: kept edges (expected, or of the hard mask), self-loops not counted.
      edge_density: kept fraction of the graph's edges, in [0, 1].
      locality: the graph's measured `hwmodel.LocalityProfile` (None = uniform re-reference).
      nnz_blocks, block_size: kept B x B tiles and B of a `BlockEdgeMask` (both None otherwise):
        a sum aggregation that can run as the BSR kernel is costed so.
      relation_edges: kept edges of each relation (R-GCN; None = one untyped relation).
    """

    n_nodes: int
    kept_edges: Any
    edge_density: Any
    locality: Optional[hwmodel.LocalityProfile] = None
    nnz_blocks: Any = None
    block_size: Optional[int] = None
    relation_edges: Optional[tuple] = None

    def aggregation(self, blocks: bool = True) -> dict:
        """Keyword arguments of `hwmodel.message_passing_layer` about the graph (``blocks=False``:
        without the BSR tiles, for an aggregation with no block form)."""
        kw = dict(locality=self.locality, edge_density=self.edge_density)
        if blocks and self.nnz_blocks is not None:
            kw.update(nnz_blocks=self.nnz_blocks, block_size=self.block_size)
        return kw


def graph_counts(n_nodes: int, n_edges, densities: dict, *, sparsifier=None, hard: bool = False,
                 locality: Optional[hwmodel.LocalityProfile] = None,
                 relation_edges=None) -> GraphCounts:
    """`GraphCounts` of a graph with ``n_edges`` edges of which ``densities["edge"]`` are kept; the
    kept tiles of ``sparsifier`` when it is a `BlockEdgeMask` (`kept_tiles`); ``relation_edges``:
    edges of each relation, scaled by the same density."""
    d = densities["edge"]
    tiles = kept_tiles(sparsifier, hard)
    return GraphCounts(n_nodes, d * n_edges, d, locality, tiles,
                       None if tiles is None else sparsifier.block_size,
                       None if relation_edges is None else tuple(d * e for e in relation_edges))


def derived_aggregation(program, name: str, graph: GraphCounts, widths: dict, *, kept_widths: Optional[dict] = None,
                        bits: Optional[dict] = None, out_bits=FP32_BITS, heads: int = 1,
                        blocks: bool = True, self_loops: bool = True) -> hwmodel.LayerWorkload:
    """The aggregation of a conv layer, derived from its vertex program (`codesign.vertex.layers`)
    on ``graph``: `codesign.vertex.Program.workload` over nnz = kept edges + N self-loops
    (``self_loops=False``: the kept edges alone, as each relation of `RGCNConv`) at the graph's
    edge density and locality (one forward), the BSR kernel over
    ``graph.nnz_blocks`` kept tiles when the graph has them and ``blocks``.

    Convention: edge weights are taken as given (``weight_products=False``): the per-edge
    normalization (`gcn_normalize`, the model's edge gates multiplied into A_hat) is precomputed
    and not costed, and the plan is the ungated one (a model's sparsifier enters as counts).

    Args:
      program: a `codesign.vertex.Program`.
      name: the layer name.
      widths: ``{input name: int width}`` of one item (the traced, full shapes).
      kept_widths: ``{1-D input name: kept columns}`` (float or traced; feature / channel masks).
      bits: ``{input name: bits}`` (default 32 each). out_bits: bits of the results.
      heads: H, a leading vmapped axis (GAT).
      blocks: cost a fused weighted sum as the BSR kernel when ``graph`` has kept tiles.
      self_loops: the adjacency holds the N self-loops (A_hat of GCN, GAT, APPNP) besides the
        ``graph.kept_edges`` kept edges; False for an adjacency without them (R-GCN's relations).

    Returns:
      `hwmodel.LayerWorkload` whose both orders hold the program's stages and whose elementwise
      holds its edge / vertex elementwise work outside the kernels.
    """
    kw = {}
    if blocks and graph.nnz_blocks is not None:
        kw["blocks"] = (graph.nnz_blocks, graph.block_size)
    nnz = graph.kept_edges + graph.n_nodes if self_loops else graph.kept_edges
    (layer,) = program.workload(graph.n_nodes, nnz, widths, bits=bits or 32.0,
                                out_bits=out_bits, heads=heads, locality=graph.locality,
                                weight_products=False, edge_density=graph.edge_density, kept_widths=kept_widths,
                                name=name, **kw).layers
    return layer


def derived_message_passing(program, name: str, graph: GraphCounts, gemm: tuple, elem: tuple, *, widths: tuple,
                            kept: tuple, bits: tuple, combine_first_only: bool = False,
                            **kw) -> hwmodel.LayerWorkload:
    """Both dataflow orders of ``act(A X W)`` with the aggregation derived from ``program`` (whose
    aggregated input is named ``h``; `derived_aggregation`): aggregate-first = the program's stages
    over the input columns, then ``gemm``; combine-first = ``gemm``, then the program's stages over
    the output columns; ``elem``: the layer's own elementwise stages.

    Args:
      gemm, elem: the layer's hand-written dense stages (forward).
      widths: (input, output) full widths (ints, the traced shapes).
      kept: (input, output) kept columns (float or traced).
      bits: (input, output) bit-widths of the aggregated features.
      combine_first_only: both orders hold the combine-first stages (an input stored CSR,
        `Layer`'s ``in_nnz``: no sparse x sparse product).
      kw: further `derived_aggregation` arguments (``blocks``, ``self_loops``).
    """
    def aggregation(full, k, b):
        return derived_aggregation(program, name, graph, {"h": full}, kept_widths={"h": k}, bits={"h": b},
                                   out_bits=b, **kw)
    comb_first = aggregation(widths[1], kept[1], bits[1])
    combine_then = gemm + comb_first.combine_first + comb_first.elementwise
    if combine_first_only:
        return hwmodel.LayerWorkload(name, combine_then, combine_then, elem)
    agg_first = aggregation(widths[0], kept[0], bits[0])
    return hwmodel.LayerWorkload(name, agg_first.combine_first + gemm + agg_first.elementwise, combine_then, elem)


def run_weighted_sum(program, adj, x: jax.Array, *, impl: str, aggregate_fn) -> jax.Array:
    """A conv layer's aggregation as its vertex program: ``program`` (a
    `codesign.vertex.layers.weighted_sum`-shaped `codesign.vertex.Program`, nodes ``h``, edges
    ``w``) on ``adj`` with ``h = x`` [N, F] and ``w`` = the adjacency's edge weights [E] (ones
    when it has none); its fused SpMM calls ``aggregate_fn(adj, x, impl=impl)`` (the layer's
    injected aggregation). The layer's ``workload`` derives its stages from the same program
    (`derived_message_passing`), so forward and cost cannot drift apart. Returns [N, F]."""
    w = adj.edge_weight
    if w is None:
        w = jnp.ones(adj.senders.shape, x.dtype)
    return program(adj, nodes={"h": x}, edges={"w": w}, impl=impl, aggregate=aggregate_fn)


def input_nnz(model, feature_nnz, densities: Optional[dict], d: dict, hard: bool) -> Optional[jax.Array]:
    """float32 scalar: the stored nonzeros of a model's input features when they are stored CSR,
    for its ``workload(feature_nnz=...)`` (None when ``feature_nnz`` is None: stored dense).

    ``feature_nnz``: float [in_features] nonzeros of each input column
    (`codesign.graph.feature_column_nnz`); each column counts with its feature gate's P(z > 0)
    (its hard mask with ``hard``; all columns without a feature mask); a ``densities["feature"]``
    what-if override keeps that fraction of all nonzeros (``d``: the resolved densities).

    Raises:
      ValueError: ``feature_nnz`` not of shape ``[model.in_features]``."""
    if feature_nnz is None:
        return None
    feature_nnz = jnp.asarray(feature_nnz, jnp.float32)
    if feature_nnz.shape != (model.in_features,):
        raise ValueError(f"{type(model).__name__}.workload(feature_nnz): expected shape ({model.in_features},), "
                         f"got {feature_nnz.shape}")
    if densities is not None and "feature" in densities:  # what-if: columns kept at random
        return d["feature"] * jnp.sum(feature_nnz)
    keep = jnp.ones_like(feature_nnz) if model.feature_mask is None else model.feature_mask.keep_probability(hard)
    return jnp.sum(keep * feature_nnz)


def override_bits(bits) -> Optional[jax.Array]:
    """A model ``workload``'s ``bits`` argument as a float32 scalar for every tensor (None: each
    layer reads its own quantizers). Raises ValueError outside [1, 32] (`hwmodel.check_bits`)."""
    return None if bits is None else jnp.asarray(hwmodel.check_bits(bits), jnp.float32)


class Layer(nnx.Module):
    """The abstract base of a conv layer: its forward and the cost-model stages of that forward
    come from one class, so they cannot drift apart, and a model's ``workload`` is the
    concatenation of its layers'. (A layer written once as a vertex program can supply both.)

    ``__call__(x, ...)`` is the forward (a conv layer's arguments: ``x, adj`` and its own extras:
    edge gates, a dropout). ``workload(name, graph, *, in_dim, out_dim, out_bits, hard, bits)`` returns
    the `hwmodel.LayerWorkload`s of one forward on ``graph`` (`GraphCounts`): ``in_dim`` /
    ``out_dim`` are the kept input / output columns (None: all; a feature or channel mask of the
    model shrinks them), ``out_bits`` the width the output is stored at (the next layer's
    `input_bits`, fp32 for logits), ``bits`` a float32 override of every quantizer's width (None:
    the layer's quantizers, expected or with ``hard`` deployed), ``in_nnz`` the stored nonzeros of
    the input when it is stored CSR (the first layer's bag-of-words features, `input_nnz`): the
    layer's GEMMs on its input are then `hwmodel.input_gemm_stage` over those nonzeros and an
    aggregation of the input moves after the GEMM (combine-first); None = stored dense.
    ``input_bits(hard)`` is the width the layer reads its input at.
    """

    @abc.abstractmethod
    def __call__(self, x: jax.Array, *args, **kwargs) -> jax.Array:
        """Output features of the layer."""

    @abc.abstractmethod
    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 scalar: the bit-width the layer reads its input at."""

    @abc.abstractmethod
    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=32,
                 hard: bool = False, bits=None, in_nnz=None) -> tuple[hwmodel.LayerWorkload, ...]:
        """The stages of one forward of this layer on ``graph``."""


@final
class QuantLinear(Layer):
    """``y = Q(x) @ Q(W) + b`` with per-tensor fake quantization Q (`FakeQuant`).

    Args:
      in_features, out_features: K and F.
      bits: bit-width of ``x`` and ``W`` (None = fp32).
      signed_input: quantize ``x`` on a signed grid (False for non-negative inputs: bag-of-words
        features, ReLU outputs; values below 0 would be clipped to 0).
      use_bias: add a bias ``b [F]`` (zeros at init).

    Weights use Glorot-uniform init. Shapes: ``x [N, K] -> [N, F]``; `quantize` and `combine`
    expose the two halves so a caller can aggregate between the GEMM and the bias.
    """

    def __init__(self, in_features: int, out_features: int, *, bits: Optional[int] = None,
                 signed_input: bool = False, use_bias: bool = True, rngs: nnx.Rngs):
        self.in_features, self.out_features = in_features, out_features
        init = jax.nn.initializers.glorot_uniform()
        self.kernel = nnx.Param(init(rngs.params(), (in_features, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32)) if use_bias else None
        self.quant_x = FakeQuant(bits, signed=signed_input)
        self.quant_w = FakeQuant(bits, signed=True)

    def combine(self, x: jax.Array) -> jax.Array:
        """``Q(x) @ Q(W)`` without the bias: [N, K] -> [N, F]."""
        return self.quant_x(x) @ self.quant_w(self.kernel[...])

    def add_bias(self, y: jax.Array) -> jax.Array:
        return y if self.bias is None else y + self.bias[...]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.add_bias(self.combine(x))

    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 scalar: the bits its input is read at (``quant_x``)."""
        return quant_bits(self.quant_x, hard)

    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=FP32_BITS,
                 hard: bool = False, bits=None, in_nnz=None) -> tuple[hwmodel.LayerWorkload, ...]:
        """`dense_layer` of this GEMM on ``graph.n_nodes`` rows: ``in_dim`` / ``out_dim`` kept
        columns (default: all), bits from its quantizers (``bits``: one override for both),
        ``in_nnz`` as `Layer`."""
        x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.quant_w, hard))
        return (dense_layer(name, graph.n_nodes, self.in_features if in_dim is None else in_dim,
                            self.out_features if out_dim is None else out_dim, x_bits, w_bits, out_bits,
                            a_nnz=in_nnz),)


def mask_densities(edge_mask: Optional[EdgeMask], feature_mask: Optional[FeatureMask], hard: bool,
                   channel_mask=None) -> dict:
    """``{"edge": ..., "feature": ...}`` (plus ``"channel"`` when a channel mask is given) kept
    fractions (float32 scalars; 1.0 without a mask): expected (differentiable) when
    ``hard=False``, of the deterministic hard masks otherwise. ``edge`` is the kept fraction of
    *edges* for any edge sparsifier (`edge_density`)."""
    def of(mask):
        if mask is None:
            return jnp.ones((), jnp.float32)
        return mask.hard_density() if hard else mask.expected_density()
    out = {"edge": edge_density(edge_mask, hard), "feature": of(feature_mask)}
    if channel_mask is not None:
        out["channel"] = of(channel_mask)
    return out


def dense_layer(name: str, n_nodes: int, in_dim, out_dim, x_bits, w_bits, out_bits, *,
                a_nnz=None) -> hwmodel.LayerWorkload:
    """A graph-free layer ``act(X @ W + b)``: one GEMM (the same in both dataflow orders;
    `hwmodel.input_gemm_stage`: over ``a_nnz`` stored nonzeros when X is stored CSR) and the
    bias/activation elementwise stage (one forward).
    """
    gemm = (hwmodel.input_gemm_stage(n_nodes, in_dim, out_dim, x_bits, w_bits, out_bits, a_nnz),)
    elem = (hwmodel.elementwise_stage(n_nodes, out_dim, out_bits),)
    return hwmodel.LayerWorkload(name, gemm, gemm, elem)


def model_workload(layers, *, training: bool, learned_edge_weights: bool) -> hwmodel.Workload:
    """A model's `hwmodel.Workload` from its forward ``layers`` (a sequence of
    `hwmodel.LayerWorkload`): the inference workload, or with ``training`` its training step by
    the one training-cost rule, `hwmodel.autograd_training` (``learned_edge_weights``: see
    `codesign.sparsify.learns_edge_weights`)."""
    wl = hwmodel.Workload(tuple(layers))
    return hwmodel.autograd_training(wl, learned_edge_weights) if training else wl


def relu_then_input_dropout(z: jax.Array, channel_mask, next_layer, dropout):
    """``(h, next_dropout)``: ``h = ReLU(z)`` (then the channel mask, when there is one) and the
    dropout the next layer applies to its input (``next_layer(h, ..., next_dropout)``), for the
    two-layer models (GCN, GraphSAGE) whose hidden ReLU feeds the next layer's input dropout.

    Where nothing sits between the two (no channel mask; the next layer's input quantizer is the
    identity: a `FakeQuant` at 32 bits) they are one operation, `HashDropout.relu_apply`, whose
    backward pass keeps only its output, and ``next_dropout`` is None: the same values and
    gradients, one [N, F] array less from the forward to the backward pass (autodiff kept ReLU's
    input beside the dropped output the next GEMM reads). Otherwise as written.

    Shapes: ``z`` float32 [N, F] -> ``h`` float32 [N, F]."""
    qx = next_layer.quant_x
    if channel_mask is None and dropout is not None and dropout.active and type(qx) is FakeQuant \
            and qx.hard_bits() >= NO_QUANT_BITS:
        return dropout.relu_apply(z), None
    h = jax.nn.relu(z)
    if channel_mask is not None:
        h = channel_mask(h)
    return h, dropout


def hidden_elementwise_ops(channel_gate: bool, hidden_bits) -> jax.Array:
    """float32 scalar: elementwise ops per element of a two-layer model's hidden layer (GCN,
    GraphSAGE), its bias included (`hwmodel.elementwise_stage`'s ``ops``): bias and ReLU, the channel
    gate when there is one, and the hidden activation's run-time fake quantization
    (`FAKE_QUANT_OPS`) when ``hidden_bits`` (float, may be traced) is below 32."""
    quantized = jnp.asarray(hidden_bits, jnp.float32) < 32.0
    return 2.0 + float(channel_gate) + jnp.where(quantized, FAKE_QUANT_OPS, 0.0)
