"""Relational GCN (Schlichtkrull et al., "Modeling Relational Data with Graph Convolutional
Networks", ESWC 2018) in Flax NNX, with the co-design hooks of `codesign.models.gcn`.

Layer (paper eq. 2, with its basis decomposition eq. 3):

    h_i' = W_0 h_i + sum_r sum_{j in N_i^r} (1 / c_{i,r}) W_r h_j + b,   W_r = sum_b a_rb V_b

``N_i^r``: the senders of relation-``r`` edges into ``i``; ``c_{i,r} = max(1, sum_j w_j)`` the
(gated) number of them, so the sum is a mean over each relation's neighbours (an edge mask's gates
``w_j`` leave the count as they leave the sum; the floor of 1 keeps nearly-pruned neighbourhoods
from being scaled up).

Aggregation formulation: **one `CooAdjacency` per relation**, each aggregated with its own
`codesign.kernels.aggregate` call (static shapes per relation, so the executed work is sum_r E_r
rows, exactly what `RGCN.workload` counts). `relation_adjacencies` splits a `Graph` by
``edge_type``. Order inside a layer, as in `GCNConv`: when the layer narrows (out <= in) every
relation's ``X W_r`` is formed first (one GEMM against the stacked ``[W_0, W_1..W_R]``) and the
narrower result is aggregated; otherwise the R aggregations of X come first and one GEMM
``[A_1 X, .., A_R X, X] @ [W_1; ..; W_R; W_0]`` follows.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, Union, final

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from codesign import hwmodel
from codesign.graph import Graph
from codesign.kernels import CooAdjacency, aggregate
from codesign.models.base import GNN, check_input, check_widths
from codesign.models.dropout import HashDropout
from codesign.sparsify import learns_edge_weights
from codesign.models.layers import (FP32_BITS, GraphCounts, Layer, derived_message_passing, graph_counts,
                                    input_nnz, mask_densities, override_bits, quant_bits, run_weighted_sum,
                                    model_workload)
from codesign.quant import FakeQuant
from codesign.sparsify import EdgeMask, FeatureMask
from codesign.vertex import layers as vertex_layers

RELATION_PROGRAM = vertex_layers.weighted_sum
"""The vertex program of one relation's aggregation: `RGCNConv` runs it per relation and
`rgcn_layer_workloads` costs each relation from it."""

Adjacencies = Union[CooAdjacency, Sequence[CooAdjacency]]


def relation_adjacencies(graph: Graph, n_relations: Optional[int] = None) -> tuple[CooAdjacency, ...]:
    """The graph's edges split by ``edge_type`` into one `CooAdjacency` per relation.

    Edges are ordered stably by relation, so gate ``e`` of an `RGCN` edge mask belongs to edge
    ``e`` of the concatenation of the result; for a graph already sorted by relation (as
    `codesign.data.hetero_sbm` makes them) that is the graph's own edge order. A graph without
    ``edge_type`` is one relation. Call outside ``jit`` (the split sizes become static shapes).

    Args:
      graph: a `Graph`.
      n_relations: R (default ``1 + max(edge_type)``); relations without edges get empty adjacencies.

    Raises:
      ValueError: an ``edge_type`` outside ``[0, n_relations)`` (naming ``edge_type``).
    """
    if graph.edge_type is None:
        types = np.zeros(graph.n_edges, np.int64)
    else:
        types = np.asarray(graph.edge_type, np.int64)
    r_count = max(1, int(types.max(initial=0)) + 1) if n_relations is None else int(n_relations)
    if r_count < 1 or (types.size and (types.min() < 0 or types.max() >= r_count)):
        raise ValueError(f"relation_adjacencies: edge_type must be in [0, n_relations={r_count}), got range "
                         f"[{types.min(initial=0)}, {types.max(initial=0)}]")
    order = np.argsort(types, kind="stable")
    bounds = np.searchsorted(types[order], np.arange(r_count + 1))
    s, r = np.asarray(graph.senders)[order], np.asarray(graph.receivers)[order]
    w = None if graph.edge_weight is None else np.asarray(graph.edge_weight)[order]
    return tuple(CooAdjacency(jnp.asarray(s[a:b]), jnp.asarray(r[a:b]),
                              None if w is None else jnp.asarray(w[a:b]), graph.n_nodes)
                 for a, b in zip(bounds[:-1], bounds[1:]))


def relation_mean_normalize(adjs: Sequence[CooAdjacency], edge_weight: Optional[jax.Array] = None
                            ) -> tuple[CooAdjacency, ...]:
    """Weights ``w_j / c_{i,r}`` with ``c_{i,r} = max(1, sum of w over relation-r edges into i)``.

    Args:
      adjs: one `CooAdjacency` per relation (E_r edges each, no self-loops).
      edge_weight: float [sum_r E_r] or None; multiplies the adjacencies' own weights in the
        order of their concatenation (an edge mask's gates). Gradients flow into it.

    Returns:
      The same patterns with normalized weights.
    """
    out, offset = [], 0
    for adj in adjs:
        e = adj.n_edges
        w = jnp.ones((e,), jnp.float32) if adj.edge_weight is None else adj.edge_weight.astype(jnp.float32)
        if edge_weight is not None:
            w = w * edge_weight[offset:offset + e]
        count = jax.ops.segment_sum(w, adj.receivers, num_segments=adj.n_nodes)
        out.append(adj.with_weight(w / jnp.maximum(count, 1.0)[adj.receivers]))
        offset += e
    return tuple(out)


@final
class RGCNConv(Layer):
    """One R-GCN layer with fake quantization Q of its input and (composed) weights.

    Parameters: ``basis_kernel`` V [B, in, out] and ``coefficients`` a [R, B] (basis decomposition,
    eq. 3; with ``n_bases=None`` a free ``relation_kernel`` W [R, in, out] instead), ``kernel`` W_0
    [in, out] (the self-connection) and ``bias`` [out]. Glorot-uniform init (as PyG's
    ``RGCNConv``), zero bias. ``aggregate_fn(adj, x, impl=...)`` is each relation's aggregation
    (default `codesign.kernels.aggregate`), injected as in `GCNConv`.

    Shapes: ``__call__(x float32 [N, in_features], adjs: R normalized CooAdjacency) -> [N, out_features]``.
    """

    def __init__(self, in_features: int, out_features: int, n_relations: int, *, n_bases: Optional[int] = None,
                 bits: Optional[int] = None, signed_input: bool = True, impl: str = "auto",
                 aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        self.in_features, self.out_features, self.impl = in_features, out_features, impl
        self.aggregate_fn = aggregate_fn
        self.n_relations, self.n_bases = n_relations, n_bases
        init = jax.nn.initializers.glorot_uniform()
        if n_bases is None:
            self.relation_kernel = nnx.Param(init(rngs.params(), (n_relations, in_features, out_features),
                                                  jnp.float32))
        else:
            self.basis_kernel = nnx.Param(init(rngs.params(), (n_bases, in_features, out_features), jnp.float32))
            self.coefficients = nnx.Param(init(rngs.params(), (n_relations, n_bases), jnp.float32))
        self.kernel = nnx.Param(init(rngs.params(), (in_features, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32))
        self.quant_x = FakeQuant(bits, signed=signed_input)
        self.quant_w = FakeQuant(bits, signed=True)

    def relation_weights(self) -> jax.Array:
        """W_r, float32 [R, in, out] (``sum_b a_rb V_b`` with bases)."""
        if self.n_bases is None:
            return self.relation_kernel[...]
        return jnp.einsum("rb,bkf->rkf", self.coefficients[...], self.basis_kernel[...])

    def __call__(self, x: jax.Array, adjs: Sequence[CooAdjacency]) -> jax.Array:
        x = self.quant_x(x)
        w = self.quant_w(jnp.concatenate([self.kernel[...][None], self.relation_weights()]))  # [R+1, in, out]
        if self.out_features <= self.in_features:  # combine first: aggregate the narrower matrix
            xw = jnp.einsum("nk,rkf->rnf", x, w)
            out = xw[0] + sum(self._relation(adj, xw[r + 1]) for r, adj in enumerate(adjs))
        else:
            agg = jnp.stack([x] + [self._relation(adj, x) for adj in adjs])
            out = jnp.einsum("rnk,rkf->nf", agg, w)
        return out + self.bias[...]

    def _relation(self, adj, h: jax.Array) -> jax.Array:
        """One relation's aggregation: `RELATION_PROGRAM` on its normalized adjacency."""
        return run_weighted_sum(RELATION_PROGRAM, adj, h, impl=self.impl, aggregate_fn=self.aggregate_fn)

    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 scalar: the bits of its input features (``quant_x``)."""
        return quant_bits(self.quant_x, hard)

    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=FP32_BITS,
                 hard: bool = False, bits=None, in_nnz=None,
                 training: bool = False) -> tuple[hwmodel.LayerWorkload, ...]:
        """`rgcn_layer_workloads` over ``graph.relation_edges`` (kept edges per relation; None =
        all kept edges as one relation); `Layer.workload` for the arguments; ``training``: add the
        forward of the basis composition (`rgcn_layer_workloads`)."""
        x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.quant_w, hard))
        rel = (graph.kept_edges,) if graph.relation_edges is None else graph.relation_edges
        return rgcn_layer_workloads(name, graph.n_nodes, rel, self.in_features if in_dim is None else in_dim,
                                    self.out_features if out_dim is None else out_dim, x_bits, w_bits, out_bits,
                                    n_bases=self.n_bases, training=training, locality=graph.locality,
                                    edge_density=graph.edge_density, in_features=self.in_features,
                                    out_features=self.out_features, in_nnz=in_nnz)


def rgcn_layer_workloads(name: str, n_nodes: int, relation_nnz: Sequence, in_dim, out_dim, x_bits, w_bits,
                         out_bits, *, n_bases: Optional[int] = None, training: bool = False,
                         locality: Optional[hwmodel.LocalityProfile] = None, edge_density=1.0,
                         in_features: Optional[int] = None, out_features: Optional[int] = None,
                         in_nnz=None) -> tuple[hwmodel.LayerWorkload, ...]:
    """`hwmodel.LayerWorkload`s of one R-GCN layer: one per relation plus the self-connection.

    ``"<name>/rel<r>"``: relation r's aggregation and its share of the combination, in both orders
    (aggregate-first: SpMM over ``in_dim`` columns at ``x_bits`` then GEMM N x in x out;
    combine-first: the GEMM then SpMM over ``out_dim`` columns at ``out_bits``); ``"<name>/self"``:
    the GEMM with W_0 and one elementwise stage summing the R + 1 partial results with bias and
    activation (N x out x (R + 1) ops). With ``n_bases`` and ``training``, ``"<name>/basis"`` adds
    composing W_r = sum_b a_rb V_b (a GEMM R x B x in*out; at inference the composed weights are
    stored). All stages are one forward: a training step is `hwmodel.autograd_training` of the
    model's workload (`RGCN.workload`), which charges the basis GEMM x3 (``da``, ``dV``). Relations are separate `LayerWorkload`s because the estimator keys stages by kind
    within a layer.

    Each relation's SpMM stages are derived from the `codesign.vertex.layers.weighted_sum` program,
    the per-relation schedule `RGCNConv` runs (`derived_aggregation` with ``self_loops=False``:
    nnz = the relation's kept edges, edge weights taken as given, the graph's edge density and
    locality). The GEMMs, the self-connection's elementwise stage and the basis
    composition stay hand-written (dense work outside the program).

    Args:
      relation_nnz: kept edges of each relation (floats; may be expected counts, traced).
      in_dim, out_dim: kept input columns (may be expected) and output columns.
      x_bits, w_bits, out_bits, locality, edge_density: as in `hwmodel.message_passing_layer` (the
        graph's locality profile stands for every relation).
      training: include the basis composition (run every training step; see above).
      in_features, out_features: the layer's full widths (ints; the shapes the program is traced
        with); default ``in_dim`` / ``out_dim``, which must then be ints.
      in_nnz: stored nonzeros of the input when it is stored CSR: every GEMM on it runs over them
        (`hwmodel.input_gemm_stage`) and each relation runs combine-first; None = stored dense.

    Raises:
      ValueError: ``in_features`` / ``out_features`` missing while ``in_dim`` / ``out_dim`` is not an
        int; a negative count or a bit-width outside [1, 32] (`codesign.vertex.Program.workload`,
        `hwmodel`).
    """
    full = []
    for field, given, dim in (("in_features", in_features, in_dim), ("out_features", out_features, out_dim)):
        if given is None:
            if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
                raise ValueError(f"rgcn_layer_workloads: {field} (the full width) is required when the kept width "
                                 f"is not an int, got {dim!r}")
            given = int(dim)
        full.append(given)
    gemm = (hwmodel.input_gemm_stage(n_nodes, in_dim, out_dim, x_bits, w_bits, out_bits, in_nnz),)
    layers = []
    for r, nnz in enumerate(relation_nnz):
        rel = GraphCounts(n_nodes, nnz, edge_density, locality)
        layers.append(derived_message_passing(RELATION_PROGRAM, f"{name}/rel{r}", rel, gemm, (),
                                              widths=tuple(full), kept=(in_dim, out_dim), bits=(x_bits, out_bits),
                                              combine_first_only=in_nnz is not None, blocks=False, self_loops=False))
    terms = len(relation_nnz) + 1  # the relations' and the self term's results, summed; a fused epilogue reads all
    elem = (hwmodel.elementwise_stage(n_nodes, out_dim * terms, out_bits, epilogue_reads=(terms - 1) / terms),)
    layers.append(hwmodel.LayerWorkload(f"{name}/self", gemm, gemm, elem))
    if n_bases is not None and training:
        compose = (hwmodel.gemm_stage(len(relation_nnz), n_bases, in_dim * out_dim, 32, 32, 32),)
        layers.append(hwmodel.LayerWorkload(f"{name}/basis", compose, compose, ()))
    return tuple(layers)


@final
class RGCN(GNN):
    """Two-layer R-GCN for node classification (Schlichtkrull et al. 2018, entity classification)
    with optional edge mask, feature mask and N-bit fake quantization.

    Args:
      in_features, hidden, n_classes: layer widths (paper: hidden = 16).
      n_relations: R, the number of relation ids (with inverse relations counted separately).
      n_bases: B bases of the decomposition W_r = sum_b a_rb V_b; None = a free W_r per relation.
      n_edges: if given, an `EdgeMask` with one gate per edge (E, all relations, in the order of
        `relation_adjacencies`).
      feature_mask: if True, a `FeatureMask` gating the ``in_features`` input columns.
      bits: fake-quantization bit-width of features and weights (None = fp32). The second layer's
        input is quantized unsigned (ReLU outputs).
      signed_input: the first layer's input on a signed grid (the default: raw features may be
        negative); `codesign.train.build_model` sets it from the data
        (`codesign.graph.Graph.signed_features`).
      dropout: dropout rate on each layer's input (paper: none).
      aggregate_fn: the aggregation of every relation in both layers (`RGCNConv`; default
        `codesign.kernels.aggregate`).

    Shapes: ``__call__(x float32 [N, in_features], adjs) -> logits [N, n_classes]`` with ``adjs``
    a tuple of R `CooAdjacency` (`relation_adjacencies`), or one `CooAdjacency` when R = 1 (so
    `codesign.train`, which passes the graph's edges without types, runs it as one relation).

    Raises:
      ValueError: ``n_relations`` or ``n_bases`` not a positive int; in ``__call__``, a number of
        adjacencies other than R or edge counts that disagree with the edge mask.
    """

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_relations: int = 1,
                 n_bases: Optional[int] = None, n_edges: Optional[int] = None, feature_mask: bool = False,
                 bits: Optional[int] = None, signed_input: bool = True, dropout: float = 0.0, impl: str = "auto",
                 aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        check_widths("RGCN", in_features=in_features, hidden=hidden, n_classes=n_classes, n_relations=n_relations)
        self.in_features = in_features
        for field, v in (("n_relations", n_relations), ("n_bases", n_bases)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"RGCN: {field} must be a positive int, got {v!r}")
        self.bits, self.n_relations, self.n_bases = bits, int(n_relations), n_bases
        self.edge_mask = EdgeMask(n_edges, rngs=rngs) if n_edges else None
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        conv = dict(n_bases=n_bases, bits=bits, impl=impl, aggregate_fn=aggregate_fn, rngs=rngs)
        self.conv1 = RGCNConv(in_features, hidden, self.n_relations, signed_input=signed_input, **conv)
        self.conv2 = RGCNConv(hidden, n_classes, self.n_relations, signed_input=False, **conv)

    def _check(self, adjs: Adjacencies) -> tuple[CooAdjacency, ...]:
        adjs = (adjs,) if isinstance(adjs, CooAdjacency) else tuple(adjs)
        if len(adjs) != self.n_relations:
            raise ValueError(f"RGCN: expected one CooAdjacency per relation (n_relations={self.n_relations}), got "
                             f"{len(adjs)}; build them with relation_adjacencies(graph, n_relations)")
        e = sum(a.n_edges for a in adjs)
        if self.edge_mask is not None and e != self.edge_mask.n_edges:
            raise ValueError(f"RGCN: the adjacencies hold {e} edges but the edge mask has n_edges="
                             f"{self.edge_mask.n_edges}")
        return adjs

    def __call__(self, x: jax.Array, adjs: Adjacencies) -> jax.Array:
        adjs = self._check(adjs)
        check_input("RGCN", x, self.in_features, adjs[0].n_nodes)
        adjs = relation_mean_normalize(adjs, self.edge_mask() if self.edge_mask is not None else None)
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        h = jax.nn.relu(self.conv1(self.dropout(x), adjs))
        return self.conv2(self.dropout(h), adjs)

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (float32 scalars; 1.0 without a mask).
        ``hard=False``: expected (differentiable); ``hard=True``: of the deterministic hard masks."""
        return mask_densities(self.edge_mask, self.feature_mask, hard)

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None, locality: Optional[hwmodel.LocalityProfile] = None,
                 relation_edges: Optional[Sequence[int]] = None, feature_nnz=None) -> hwmodel.Workload:
        """The `hwmodel.Workload` of this model on a graph with ``n_nodes`` nodes and ``n_edges``
        edges: per layer, one aggregation per relation plus the GEMMs (`rgcn_layer_workloads`).

        ``relation_edges``: edges of each relation (default ``n_edges`` split evenly over R); each
        relation keeps the model's edge density. Other arguments (``feature_nnz`` too) as in `GCN.workload`.
        """
        d = hwmodel.resolve_densities(self.densities(hard), densities)
        b = override_bits(bits)
        if relation_edges is None:
            relation_edges = [n_edges / self.n_relations] * self.n_relations
        if len(relation_edges) != self.n_relations:
            raise ValueError(f"RGCN.workload: relation_edges has {len(relation_edges)} entries, expected "
                             f"n_relations={self.n_relations}")
        graph = graph_counts(n_nodes, n_edges, d, hard=hard, locality=locality, relation_edges=relation_edges)
        return model_workload(
            self.conv1.workload("layer0", graph, in_dim=d["feature"] * self.conv1.in_features,
                                out_bits=self.conv2.input_bits(hard) if b is None else b, hard=hard, bits=b,
                                in_nnz=input_nnz(self, feature_nnz, densities, d, hard), training=training)
            + self.conv2.workload("layer1", graph, out_bits=FP32_BITS, hard=hard, bits=b, training=training),
            training=training, learned_edge_weights=learns_edge_weights(self.edge_mask))  # fp32 logits
