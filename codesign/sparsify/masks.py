"""Mask layers built on hard-concrete gates, and the sparsifier protocol every mask implements.

* `EdgeMask`: one gate per edge (transductive).
* `FeatureMask`: one gate per input-feature column.
* `ChannelMask`: one gate per hidden channel (structured hidden-unit sparsity).

All three are final wrappers around a `HardConcreteGate` (held as ``.gate``); the train / eval mode
lives in ``.gate.deterministic`` and is switched by flax NNX ``model.train()`` / ``model.eval()``
(or ``nnx.view(model, deterministic=...)``) on any model that contains the layer.

The protocols `Sparsifier` and `EdgeSparsifier` below name the methods that models and the cost
model call; the other edge sparsifiers (`BlockEdgeMask`, `EdgeScorer`, `DropEdge`,
`EdgeWeightMask`) implement them as well.
"""

from __future__ import annotations

import numbers
from typing import Optional, Protocol, final, runtime_checkable

import jax
import jax.numpy as jnp
from flax import nnx

from codesign.sparsify.hard_concrete import BETA, HardConcreteGate


@runtime_checkable
class Sparsifier(Protocol):
    """What the cost model reads from any mask (all values float32 scalars / bool arrays).

    * ``expected_density()``: expected kept fraction of what the mask gates, differentiable in the
      gate parameters (the training-time cost term).
    * ``hard_mask()``: bool array, what is kept at test time.
    * ``hard_density()``: float32 scalar, the kept fraction of ``hard_mask()``.
    """

    def expected_density(self) -> jax.Array: ...

    def hard_mask(self) -> jax.Array: ...

    def hard_density(self) -> jax.Array: ...


@runtime_checkable
class EdgeSparsifier(Sparsifier, Protocol):
    """A `Sparsifier` of edges. Shapes: ``E`` edges (no self-loops), ``N`` nodes, ``F`` features.

    * ``edge_gates(x, senders, receivers, deterministic=None) -> float32 [E]``: per-edge multiplier
      in ``[0, 1]`` for the edge weights. ``x`` float [N, F] node features (or the layer's input
      embeddings), ``senders`` / ``receivers`` int [E]; sparsifiers that do not need them ignore
      them (all three may then be None). ``deterministic`` overrides the module's train/eval mode.
    * ``expected_edge_density()``: float32 scalar, expected kept fraction of the E edges
      (differentiable). Equal to ``expected_density()`` except for `BlockEdgeMask`, whose
      ``expected_density()`` counts tiles.
    * ``hard_edge_mask()``: bool [E], edges kept at test time; ``hard_edge_density()`` its mean.
    """

    def edge_gates(self, x=None, senders=None, receivers=None, deterministic: Optional[bool] = None) -> jax.Array: ...

    def expected_edge_density(self) -> jax.Array: ...

    def hard_edge_mask(self) -> jax.Array: ...

    def hard_edge_density(self) -> jax.Array: ...


def check_count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {name}={value!r}")
    return int(value)


def check_edge_index(senders, receivers, n_edges: int, owner: str) -> None:
    """Shape check of optional ``senders`` / ``receivers`` passed to ``edge_gates``."""
    for name, idx in (("senders", senders), ("receivers", receivers)):
        if idx is not None and jnp.shape(idx) != (n_edges,):
            raise ValueError(f"{owner}.edge_gates: {name} must have shape ({n_edges},), got {jnp.shape(idx)}")


def _gate_last_axis(gate: HardConcreteGate, x: jax.Array, deterministic: Optional[bool], name: str) -> jax.Array:
    """``x * z`` with ``z = gate(deterministic)`` float [n] broadcast over the leading axes of ``x``
    (shared by `FeatureMask` and `ChannelMask`; ``name`` is the size's name in errors)."""
    n = gate.log_alpha.shape[0]
    if jnp.ndim(x) == 0 or x.shape[-1] != n:
        raise ValueError(f"x.shape[-1] must equal {name}={n}, got x.shape={jnp.shape(x)}")
    z = gate(deterministic).astype(x.dtype)
    return x * z.reshape((1,) * (x.ndim - 1) + (n,))


class EdgeItems:
    """Mixin of sparsifiers whose gated items are the graph's edges themselves: the
    `EdgeSparsifier` names (``expected_edge_density``, ``hard_edge_mask``,
    ``hard_edge_density``) are their `Sparsifier` ones (``expected_density``, ``hard_mask``,
    ``hard_density``). `BlockEdgeMask` gates tiles and defines its own."""

    def expected_edge_density(self) -> jax.Array:
        """float32 scalar: the same as ``expected_density`` (the gated items are edges)."""
        return self.expected_density()

    def hard_edge_mask(self) -> jax.Array:
        """bool [E]: the same as ``hard_mask``."""
        return self.hard_mask()

    def hard_edge_density(self) -> jax.Array:
        """float32 scalar: the same as ``hard_density``."""
        return self.hard_density()


@final
class EdgeMask(EdgeItems, nnx.Module):
    """Learnable per-edge sparsity: one free hard-concrete gate per edge (transductive).

    One free logit per edge of a fixed graph, like the trainable graph mask of UGS (Chen et al.,
    "A Unified Lottery Ticket Hypothesis for Graph Neural Networks", ICML 2021), relaxed with the
    hard-concrete L0 gates of Louizos et al. (ICLR 2018) as PTDNet does (Luo et al., "Learning to
    Drop", WSDM 2021; PTDNet predicts its logits with an MLP, see `EdgeScorer`; here they are free
    parameters). The caller multiplies the gates into its edge weights and adds
    ``expected_density()`` (expected fraction of kept edges) to its loss. Implements
    `EdgeSparsifier` (``x``, ``senders``, ``receivers`` of ``edge_gates`` are only shape-checked).

    Shapes: ``E = n_edges``; ``__call__() -> float32 [E]``, ``hard_mask() -> bool [E]``.

    Example (inside your own ``nnx.Module``)::

      self.edge_mask = EdgeMask(graph.senders.shape[0], rngs=rngs)     # in __init__
      w = self.edge_mask() * edge_weight                                # in __call__, float32 [E]
      loss = task_loss + lam * model.edge_mask.expected_density()       # in the loss

    ``model.eval()`` then makes the gates deterministic and ``model.train()`` stochastic again.
    """

    def __init__(
        self, n_edges: int, *, init_log_alpha: float = 3.0, beta: float = BETA, rngs: nnx.Rngs
    ):
        """Args:
          n_edges: E, number of (directed) edges; a positive int.
          init_log_alpha: initial logit of every gate (finite).
          beta: hard-concrete temperature (> 0).
          rngs: `nnx.Rngs`; the ``"gates"`` stream (else ``default``) feeds the sampling.

        Raises:
          ValueError: ``n_edges`` not a positive int; ``init_log_alpha`` / ``beta`` invalid.
        """
        self.n_edges = check_count(n_edges, "n_edges")
        self.gate = HardConcreteGate((self.n_edges,), init_log_alpha=init_log_alpha, beta=beta, rngs=rngs)

    def __call__(self, deterministic: bool | None = None) -> jax.Array:
        """Gate per edge, float32 [E] in [0, 1]; ``deterministic`` overrides the module's mode."""
        return self.gate(deterministic)

    def edge_gates(self, x=None, senders=None, receivers=None, deterministic: bool | None = None) -> jax.Array:
        """`EdgeSparsifier` entry: the same as ``self(deterministic)``, float32 [E].

        Raises:
          ValueError: ``senders`` / ``receivers`` given with a shape other than ``(E,)``.
        """
        check_edge_index(senders, receivers, self.n_edges, "EdgeMask")
        return self.gate(deterministic)

    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept-edge fraction, mean of P(z_e > 0) (Louizos et al. eq. 12)."""
        return self.gate.expected_density()

    def hard_mask(self) -> jax.Array:
        """bool [E]: edges kept at test time."""
        return self.gate.hard_mask()

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction of edges kept at test time."""
        return self.gate.hard_density()


@final
class FeatureMask(nnx.Module):
    """Learnable input-feature sparsity: one hard-concrete gate per feature column.

    Louizos et al. (ICLR 2018) put their L0 gates on the input neurons of MLP layers in the same
    way (group sparsity). Pruned features shrink the combination GEMM's K dimension and the bytes
    of X read by the first layer.

    Shapes: ``F = n_features``; ``__call__(x [..., F]) -> [..., F]`` (dtype of x),
    ``hard_mask() -> bool [F]``.

    Example (inside your own ``nnx.Module``)::

      self.feat_mask = FeatureMask(graph.x.shape[1], rngs=rngs)          # in __init__
      h = self.linear(self.feat_mask(x))                                 # in __call__
      loss = task_loss + lam * model.feat_mask.expected_density()        # in the loss
    """

    def __init__(
        self, n_features: int, *, init_log_alpha: float = 3.0, beta: float = BETA, rngs: nnx.Rngs
    ):
        """Args:
          n_features: F, number of input features; a positive int.
          init_log_alpha: initial logit of every gate (finite).
          beta: hard-concrete temperature (> 0).
          rngs: `nnx.Rngs`; the ``"gates"`` stream (else ``default``) feeds the sampling.

        Raises:
          ValueError: ``n_features`` not a positive int; ``init_log_alpha`` / ``beta`` invalid.
        """
        self.n_features = check_count(n_features, "n_features")
        self.gate = HardConcreteGate(
            (self.n_features,), init_log_alpha=init_log_alpha, beta=beta, rngs=rngs
        )

    def __call__(self, x: jax.Array, deterministic: bool | None = None) -> jax.Array:
        """Returns ``x * z`` with ``z`` float [F] broadcast over the leading axes of ``x``.

        Args:
          x: float [..., F] (typically [N, F] node features).
          deterministic: overrides the module's mode when not None.

        Returns:
          [..., F], the dtype of ``x`` (gates are cast to it).

        Raises:
          ValueError: ``x.shape[-1] != n_features`` or ``x`` is a scalar.
        """
        return _gate_last_axis(self.gate, x, deterministic, "n_features")

    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept-feature fraction, mean of P(z_f > 0) (Louizos et al. eq. 12)."""
        return self.gate.expected_density()

    def hard_mask(self) -> jax.Array:
        """bool [F]: features kept at test time."""
        return self.gate.hard_mask()

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction of features kept at test time."""
        return self.gate.hard_density()


@final
class ChannelMask(nnx.Module):
    """Learnable structured hidden-unit sparsity: one hard-concrete gate per channel of a hidden layer.

    The group-sparsity use of L0 gates in Louizos et al. (ICLR 2018; their MLP and LeNet-5
    experiments gate whole neurons and convolutional feature maps). Gating channel ``c`` of ``h = X W1`` to zero removes
    column ``c`` of ``W1`` and row ``c`` of the next layer's ``W2``: it shrinks the producing
    GEMM's output dimension and the consuming GEMM's K dimension (and the aggregation's feature
    width when the layer aggregates ``h``). The cost model consumes ``expected_density()`` as the
    kept fraction of the C channels (training) and ``hard_density()`` after hardening.

    Shapes: ``C = n_channels``; ``__call__(h [..., C]) -> [..., C]`` (dtype of h),
    ``hard_mask() -> bool [C]``.

    Example (inside your own ``nnx.Module``)::

      self.chan_mask = ChannelMask(hidden, rngs=rngs)                        # in __init__
      h = self.lin2(self.chan_mask(jax.nn.relu(self.lin1(x))))               # in __call__
      loss = task_loss + lam * model.chan_mask.expected_density()            # in the loss
    """

    def __init__(
        self, n_channels: int, *, init_log_alpha: float = 3.0, beta: float = BETA, rngs: nnx.Rngs
    ):
        """Args:
          n_channels: C, width of the gated hidden layer; a positive int.
          init_log_alpha: initial logit of every gate (finite).
          beta: hard-concrete temperature (> 0).
          rngs: `nnx.Rngs`; the ``"gates"`` stream (else ``default``) feeds the sampling.

        Raises:
          ValueError: ``n_channels`` not a positive int; ``init_log_alpha`` / ``beta`` invalid.
        """
        self.n_channels = check_count(n_channels, "n_channels")
        self.gate = HardConcreteGate(
            (self.n_channels,), init_log_alpha=init_log_alpha, beta=beta, rngs=rngs
        )

    def __call__(self, h: jax.Array, deterministic: bool | None = None) -> jax.Array:
        """Returns ``h * z`` with ``z`` float [C] broadcast over the leading axes of ``h``.

        Args:
          h: float [..., C] hidden activations (typically [N, C]).
          deterministic: overrides the module's mode when not None.

        Returns:
          [..., C], the dtype of ``h``.

        Raises:
          ValueError: ``h.shape[-1] != n_channels`` or ``h`` is a scalar.
        """
        return _gate_last_axis(self.gate, h, deterministic, "n_channels")

    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept-channel fraction, mean of P(z_c > 0) (Louizos et al. eq. 12)."""
        return self.gate.expected_density()

    def hard_mask(self) -> jax.Array:
        """bool [C]: channels kept at test time."""
        return self.gate.hard_mask()

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction of channels kept at test time."""
        return self.gate.hard_density()
