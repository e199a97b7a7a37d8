"""Graph convolutional network (Kipf & Welling, "Semi-Supervised Classification with Graph
Convolutional Networks", ICLR 2017) in Flax NNX, with co-design hooks.

A layer is a composition (STYLE.md 1): [feature mask] -> dropout -> fake-quantize features and
weights -> combine (GEMM) -> aggregate (`codesign.kernels.aggregate`) -> bias. The edge mask's
gates multiply the edge weights before normalization.
"""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.kernels import CooAdjacency, aggregate
from codesign.models.dropout import HashDropout
from codesign.models.layers import FP32_BITS, mask_densities
from codesign.models.norm import gcn_normalize
from codesign.quant import FakeQuant
from codesign.sparsify import EdgeMask, FeatureMask



class GCNConv(nnx.Module):
    """``H' = A_hat @ Q(H) @ Q(W) + b`` (Kipf & Welling 2017, eq. 2) with fake quantization Q.

    Shapes: x float32 [N, in_features] -> float32 [N, out_features]; ``adj`` is the normalized
    adjacency. Weights use Glorot-uniform init, as in the paper.
    """

    def __init__(self, in_features: int, out_features: int, *, bits: Optional[int] = None,
                 impl: str = "auto", rngs: nnx.Rngs):
        self.in_features, self.out_features, self.impl = in_features, out_features, impl
        init = jax.nn.initializers.glorot_uniform()
        self.kernel = nnx.Param(init(rngs.params(), (in_features, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32))
        self.quant_x = FakeQuant(bits, signed=False)  # inputs are >= 0 (bag-of-words, ReLU)
        self.quant_w = FakeQuant(bits, signed=True)

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        x, w = self.quant_x(x), self.quant_w(self.kernel[...])
        if self.out_features <= self.in_features:  # combine first: aggregate the narrower matrix
            out = aggregate(adj, x @ w, impl=self.impl)
        else:
            out = aggregate(adj, x, impl=self.impl) @ w
        return out + self.bias[...]


class GCN(nnx.Module):
    """Two-layer GCN for node classification with optional edge mask, feature mask and
    N-bit fake quantization.

    Args:
      in_features, hidden, n_classes: layer widths (paper: hidden = 16).
      n_edges: if given, an `EdgeMask` with one hard-concrete gate per edge (E, no self-loops).
      feature_mask: if True, a `FeatureMask` gating the ``in_features`` input columns.
      bits: fake-quantization bit-width of features and weights (None = fp32).
      dropout: dropout rate on each layer's input (paper: 0.5).

    Shapes: ``__call__(x float32 [N, in_features], adj CooAdjacency E edges) -> logits [N, n_classes]``.
    """

    def __init__(self, in_features: int, hidden: int, n_classes: int, *, n_edges: Optional[int] = None,
                 feature_mask: bool = False, bits: Optional[int] = None, dropout: float = 0.5,
                 impl: str = "auto", rngs: nnx.Rngs):
        self.bits = bits
        self.edge_mask = EdgeMask(n_edges, rngs=rngs) if n_edges else None
        self.feature_mask = FeatureMask(in_features, rngs=rngs) if feature_mask else None
        self.dropout = HashDropout(dropout, rngs=rngs)
        self.conv1 = GCNConv(in_features, hidden, bits=bits, impl=impl, rngs=rngs)
        self.conv2 = GCNConv(hidden, n_classes, bits=bits, impl=impl, rngs=rngs)

    def __call__(self, x: jax.Array, adj: CooAdjacency) -> jax.Array:
        adj = gcn_normalize(adj, self.edge_mask() if self.edge_mask is not None else None)
        if self.feature_mask is not None:
            x = self.feature_mask(x)
        h = jax.nn.relu(self.conv1(self.dropout(x), adj))
        return self.conv2(self.dropout(h), adj)

    def densities(self, hard: bool = False) -> dict:
        """Kept fractions ``{"edge": ..., "feature": ...}`` (float32 scalars; 1.0 without a mask).
        ``hard=False``: expected (differentiable); ``hard=True``: of the deterministic hard masks."""
        return mask_densities(self.edge_mask, self.feature_mask, hard)

    def workload(self, n_nodes: int, n_edges: int, *, hard: bool = False, training: bool = False,
                 bits=None, densities: Optional[dict] = None,
                 locality: Optional[hwmodel.LocalityProfile] = None) -> hwmodel.Workload:
        """The `hwmodel.Workload` of this model on a graph with ``n_nodes`` nodes and ``n_edges``
        edges (no self-loops): kept edges and features from `densities` (or the given
        ``densities`` dict, for what-if costing), bit-widths from the quantizers (``bits``
        overrides them, e.g. with a traced array for gradients). ``locality``: the graph's measured
        `hwmodel.LocalityProfile` (None = uniform re-reference)."""
        d = {**self.densities(hard), **(densities or {})}
        b = jnp.asarray(bits if bits is not None else (self.bits or FP32_BITS), jnp.float32)
        nnz = d["edge"] * n_edges + n_nodes
        k0 = d["feature"] * self.conv1.in_features
        graph = dict(training=training, locality=locality, edge_density=d["edge"])
        return hwmodel.Workload((
            hwmodel.message_passing_layer("layer0", n_nodes, nnz, k0, self.conv1.out_features, b, b, b, **graph),
            hwmodel.message_passing_layer("layer1", n_nodes, nnz, self.conv2.in_features,
                                          self.conv2.out_features, b, b, FP32_BITS, **graph),  # fp32 logits
        ), training)
