"""APPNP: "Predict then Propagate" (Klicpera, Bojchevski & Günnemann, "Predict then Propagate:
Graph Neural Networks meet Personalized PageRank", ICLR 2019) in Flax NNX, with co-design hooks.

A two-layer MLP predicts per-node logits ``H = f(X)``; K steps of approximate personalized
PageRank then propagate them (paper eq. 5):

    Z^(0) = H,    Z^(k+1) = (1 - alpha) A_hat Z^(k) + alpha H,    logits = Z^(K)

with ``A_hat = D^-1/2 (A + I) D^-1/2`` (`codesign.models.norm.gcn_normalize`; an edge mask's
gates multiply the edge weights before normalizing) and every ``A_hat Z`` one
`codesign.kernels.aggregate` call. ``alpha = 1`` gives the MLP alone.

Departures from the paper (documented choices): the propagation runs in fp32 (the logits are not
fake-quantized between steps, as GCN's last aggregation is fp32 here); no dropout on ``A_hat``
during propagation (the paper drops adjacency entries at each step; PyG's ``APPNP`` defaults to
none and its Cora benchmark uses none).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.kernels import CooAdjacency, aggregate
from codesign.models.base import GNN, check_input, check_widths
from codesign.models.dropout import HashDropout
from codesign.sparsify import learns_edge_weights
from codesign.models.layers import (FP32_BITS, GraphCounts, Layer, QuantLinear, derived_aggregation, graph_counts,
                                    input_nnz, mask_densities, override_bits,
                                    model_workload)
from codesign.models.norm import gcn_normalize
from codesign.sparsify import EdgeMask, FeatureMask
from codesign.vertex.layers import appnp_step


@final
class Propagation(Layer):
    """K steps of approximate personalized PageRank (Klicpera et al. 2019, eq. 5):
    ``Z <- (1 - alpha) A_hat Z + alpha H`` from ``Z = H``, each ``A_hat Z`` one
    ``aggregate_fn(adj, Z, impl=impl)`` call; fp32 (not quantized). ``alpha = 1`` is ``Z = H``.
    Each step is the `codesign.vertex.layers.appnp_step` program (``program``), run by the
    forward (its fused SpMM calls ``aggregate_fn``; ``1 - alpha`` folded into the edge weights)
    and costed by `workload`.

    Args:
      width: C, the columns propagated (the logits).
      k_hops: K >= 0; alpha: teleport probability in [0, 1].
      impl, aggregate_fn: as in `GCNConv`.

    Shapes: ``h float32 [N, width], adj`` (normalized, E + N entries) ``-> [N, width]``.
    """

    def __init__(self, width: int, k_hops: int, alpha: float, *, impl: str = "auto",
                 aggregate_fn: Callable = aggregate):
        self.width, self.k_hops, self.alpha, self.impl, self.aggregate_fn = width, k_hops, float(alpha), impl, aggregate_fn
        self.program = appnp_step(self.alpha)  # one step: the forward runs it, `workload` costs it

    def __call__(self, h: jax.Array, adj: CooAdjacency) -> jax.Array:
        if self.alpha == 1.0:  # Z = H exactly
            return h
        w = jnp.ones(adj.senders.shape, h.dtype) if adj.edge_weight is None else adj.edge_weight
        step = lambda _, z: self.program(adj, nodes={"z": z, "h": h}, edges={"w": w}, impl=self.impl,
                                         aggregate=self.aggregate_fn)
        return jax.lax.fori_loop(0, self.k_hops, step, h)  # static trip count: a scan, differentiable

    def input_bits(self, hard: bool = False) -> jax.Array:
        """float32 32: the propagation runs in fp32."""
        return jnp.asarray(float(FP32_BITS), jnp.float32)

    def workload(self, name: str, graph: GraphCounts, *, in_dim=None, out_dim=None, out_bits=FP32_BITS,
                 hard: bool = False, bits=None) -> tuple[hwmodel.LayerWorkload, ...]:
        """``{name}0`` .. ``{name}{K-1}``, each derived from the `codesign.vertex.layers.appnp_step`
        program (`derived_aggregation`): one fp32 SpMM over ``A_hat`` (nnz = kept edges + N) on
        ``width`` columns, ``(1 - alpha)`` folded into its weights, and the teleport update
        ``alpha * H + S`` (2 ops per element; reads S and H, writes Z); none when ``alpha = 1``.
        Edge weights are taken as given (A_hat's normalization is not costed). fp32 throughout:
        ``in_dim``, ``out_dim``, ``out_bits`` and ``bits`` are not used."""
        if self.alpha == 1.0:
            return ()
        step = derived_aggregation(self.program, name, graph, {"z": self.width, "h": self.width},
                                   out_bits=FP32_BITS, blocks=False)
        return tuple(dataclasses.replace(step, name=f"{name}{k}") for k in range(self.k_hops))


@final
class APPNP(GNN):
    """MLP (``dropout -> lin1 -> ReLU -> dropout -> lin2``) followed by K personalized-PageRank
    propagation steps, with optional edge mask, feature mask and N-bit fake quantization of the
    MLP's features and weights.

    Args:
      in_features, hidden, n_classes: MLP widths (paper: hidden 64).
      n_edges: if given, an `EdgeMask` with one hard-concrete gate per edge (E, no self-loops).
      feature_mask: if True, a `FeatureMask` gating the input columns.
      bits: fake-quantization bit-width of the MLP's features and weights (None = fp32).
      signed_input: quantize the input features on a signed grid (features that may be negative:
        LSA, embeddings, Gaussian cSBM features); False: unsigned, for features >= 0 (bag-of-words),
        where a negative value would be clipped to 0. `codesign.train.build_model` sets it from
        the data (`codesign.graph.Graph.signed_features`).
      dropout: dropout rate on each MLP layer's input (paper: 0.5).
      k_hops: K, propagation steps (paper: 10).
      alpha: teleport probability in [0, 1] (paper: 0.1).
      aggregate_fn: the aggregation of every propagation step, ``aggregate_fn(adj, z, impl=...)``
        (default `codesign.kernels.aggregate`; injected as in `GCNConv`).

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges) -> logits [N, n_classes]``.

    Raises:
      ValueError: ``k_hops < 0`` or ``alpha`` outside [0, 1].
    """

    OPTIONS = ("k_hops", "alpha")

    FIRST_LAYER = "lin1"  # the paper's L2 regularization acts on this layer only

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 feature_mask: bool = False, bits: Optional[int] = None, signed_input: bool = False,
                 dropout: float = 0.5, k_hops: int = 10, alpha: float = 0.1, impl: str = "auto",
                 aggregate_fn: Callable = aggregate, rngs: nnx.Rngs):
        check_widths("APPNP", in_features=in_features, hidden=hidden, n_classes=n_classes)
        self.in_features = in_features
        if not (isinstance(k_hops, int) and k_hops >= 0):
            raise ValueError(f"APPNP: k_hops must be an int >= 0, got {k_hops!r}")
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"APPNP: alpha must be in [0, 1], got {alpha}")
        self.bits = bits
        self.edge_mask = EdgeMask(n_edges, rngs=rngs) if n_edges else None
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        self.lin1 = QuantLinear(in_features, hidden, bits=bits, signed_input=signed_input, rngs=rngs)
        self.lin2 = QuantLinear(hidden, n_classes, bits=bits, rngs=rngs)  # ReLU outputs >= 0
        self.propagation = Propagation(n_classes, k_hops, alpha, impl=impl, aggregate_fn=aggregate_fn)

    @property
    def k_hops(self) -> int:
        return self.propagation.k_hops

    @property
    def alpha(self) -> float:
        return self.propagation.alpha

    def mlp(self, x: jax.Array) -> jax.Array:
        """``H = lin2(dropout(ReLU(lin1(dropout(mask(x))))))``: [N, in_features] -> [N, n_classes]."""
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        h = jax.nn.relu(self.lin1(self.dropout(x)))
        return self.lin2(self.dropout(h))

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        check_input("APPNP", x, self.in_features, adj.n_nodes)
        h = self.mlp(x)
        if self.alpha == 1.0:  # Z = H exactly: skip the propagation (and the edge gates' draw)
            return h
        return self.propagation(h, gcn_normalize(adj, self.edge_mask() if self.edge_mask is not None else None))

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (see `GCN.densities`)."""
        return mask_densities(self.edge_mask, self.feature_mask, hard)

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None,
                 locality: Optional[hwmodel.LocalityProfile] = None, feature_nnz=None) -> hwmodel.Workload:
        """The `hwmodel.Workload` (arguments as `GCN.workload`, ``feature_nnz`` too: ``mlp0``'s input):

          ``mlp0``, ``mlp1``: the MLP's GEMMs N x K x hidden and N x hidden x C (+ bias/ReLU);
            ``mlp1`` writes fp32 logits.
          ``prop0`` .. ``prop{K-1}``: one fp32 SpMM over ``A_hat`` (nnz = kept edges + N) on C
            columns and the teleport update (2 ops per element: read the aggregate and H, write Z).
        """
        d = hwmodel.resolve_densities(self.densities(hard), densities)
        b = override_bits(bits)
        graph = graph_counts(n_nodes, n_edges, d, hard=hard, locality=locality)
        return model_workload(
            self.lin1.workload("mlp0", graph, in_dim=d["feature"] * self.lin1.in_features,
                               out_bits=self.lin2.input_bits(hard) if b is None else b, hard=hard, bits=b,
                               in_nnz=input_nnz(self, feature_nnz, densities, d, hard))
            + self.lin2.workload("mlp1", graph, out_bits=FP32_BITS, hard=hard, bits=b)
            + self.propagation.workload("prop", graph),
            training=training, learned_edge_weights=learns_edge_weights(self.edge_mask))
