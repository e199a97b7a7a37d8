"""The model contract (`GNN`) and what every model checks at its boundary: its widths at
construction, its input at each call.

One place for the checks that turn a shape mistake into one line naming the field, instead of a
``ZeroDivisionError`` in an initializer or a ``dot_general`` error deep inside JAX. Shapes are
static, so `check_input` also works under ``jit``.
"""

from __future__ import annotations

import abc
from typing import ClassVar

import jax
import numpy as np
from flax import nnx

from codesign.kernels.features import SparseFeatures
from codesign.models.layers import Layer, quant_bits
from codesign.quant import Quantizer

__all__ = ["GNN", "Layer", "check_widths", "check_input"]


def check_widths(owner: str, **widths) -> None:
    """Each keyword (``in_features``, ``hidden``, ``n_classes``, ``heads``, ...) must be an int >= 1.

    Args:
      owner: the model's name, used in the message (e.g. ``"GCN"``).
      **widths: name -> value.

    Raises:
      ValueError: ``"GCN: in_features must be an int >= 1, got 0"``.
    """
    for name, v in widths.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{owner}: {name} must be an int >= 1, got {v!r}")


def check_input(owner: str, x: jax.Array, in_features: int, n_nodes: int) -> None:
    """``x`` must be float [n_nodes, in_features].

    Args:
      owner: the model's name, used in the message.
      x: the node features given to the model (an array or `codesign.kernels.SparseFeatures`).
      in_features: the width the model was built for.
      n_nodes: the adjacency's N.

    Raises:
      ValueError: ``"x: GCN expects 1433 input features, got 100"`` (or the wrong row count / rank).
    """
    shape = x.shape if isinstance(x, SparseFeatures) else np.shape(x)
    if len(shape) != 2:
        raise ValueError(f"x: {owner} expects node features [N, {in_features}], got shape {shape}")
    if x.shape[1] != in_features:
        raise ValueError(f"x: {owner} expects {in_features} input features, got {x.shape[1]}")
    if x.shape[0] != n_nodes:
        raise ValueError(f"x: {owner} got {x.shape[0]} rows of features for an adjacency of {n_nodes} nodes")


class GNN(nnx.Module):
    """The abstract base every model of `codesign.models` derives from (abstract or final, as in
    equinox: this class declares the contract, the six models implement it; a subclass that misses
    an abstract method cannot be instantiated, ``TypeError``, so callers never probe for one).

    Class-level facts, as data (read by `codesign.train` instead of probing the constructor):
      FIRST_LAYER: attribute name of the first layer (weight decay with scope "first"; the input
        quantizer that ``pin_ranges`` leaves learned); `first_layer` returns that module.
      SELF_LOOPS: whether the model appends self-loops to the graph (`BlockEdgeMask` tiles).
      OPTIONS: model-specific constructor options a `TrainConfig` may set (heads, aggr, ...).
      HOOKS: the co-design hooks the constructor takes beyond edge mask, feature mask and bits:
        a subset of {"edge_sparsifier", "channel_mask", "quantizer"}.

    Attributes every model sets in its constructor: ``edge_mask`` (its edge sparsifier, a
    `codesign.sparsify.EdgeSparsifier`, or None) and ``feature_mask`` (a `FeatureMask` or None).

    Abstract methods: ``__call__(x [N, F], adj) -> logits [N, C]`` (calls `check_input` first),
    ``densities(hard) -> dict`` and ``workload(n_nodes, n_edges, *, hard, training, bits,
    densities, locality) -> hwmodel.Workload``. ``layer_bits(hard) -> dict`` has a default (every
    `Quantizer` in the model by its path); models with named tensors override it.
    """

    FIRST_LAYER: ClassVar[str] = "conv1"
    SELF_LOOPS: ClassVar[bool] = True
    OPTIONS: ClassVar[tuple] = ()
    HOOKS: ClassVar[frozenset] = frozenset()

    @abc.abstractmethod
    def __call__(self, x, adj):
        """Logits float32 [N, n_classes] of node features ``x`` float32 [N, in_features] on ``adj``."""

    @abc.abstractmethod
    def densities(self, hard: bool = False) -> dict:
        """Kept fractions (float32 scalars) ``{"edge", "feature"}`` (+ ``"channel"``): expected
        (differentiable) or, with ``hard``, of the deterministic masks."""

    @abc.abstractmethod
    def workload(self, n_nodes: int, n_edges: int, **kw):
        """The `hwmodel.Workload` of the model on a graph of ``n_nodes`` nodes and ``n_edges`` edges."""

    @property
    def first_layer(self) -> nnx.Module:
        """The module named by `FIRST_LAYER`."""
        return getattr(self, self.FIRST_LAYER)

    def layer_bits(self, hard: bool = False) -> dict:
        """Mean bit-width (float32 scalar) of every quantizer in the model, keyed by its path
        (expected, or deployed with ``hard``)."""
        return {"/".join(map(str, path)): quant_bits(node, hard)
                for path, node in nnx.iter_graph(self) if isinstance(node, Quantizer)}

    def takes_sparse_input(self) -> bool:
        """Whether ``__call__`` takes its ``x`` as `codesign.kernels.SparseFeatures` (the
        nonzeros of a mostly-zero input, `codesign.train` then trains on them) with the logits
        it gives for the dense ``x`` (to float rounding). False here; a model whose first layer
        only applies zero-preserving element-wise ops before its input product says when."""
        return False

    @classmethod
    def accepts(cls, name: str) -> bool:
        """Whether a `TrainConfig` option or co-design hook ``name`` applies to this model."""
        return name in cls.OPTIONS or name in cls.HOOKS
