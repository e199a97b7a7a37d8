"""Mask layers built on hard-concrete gates, and the sparsifier contract every mask implements.

* `EdgeMask`: one gate per edge (transductive).
* `FeatureMask`: one gate per input-feature column.
* `ChannelMask`: one gate per hidden channel (structured hidden-unit sparsity).

All three are final wrappers around a `HardConcreteGate` (held as ``.gate``); the train / eval mode
lives in ``.gate.deterministic`` and is switched by flax NNX ``model.train()`` / ``model.eval()``
(or ``nnx.view(model, deterministic=...)``) on any model that contains the layer.

The abstract bases `Sparsifier` and `EdgeSparsifier` below declare the methods that models and
the cost model call; the other edge sparsifiers (`BlockEdgeMask`, `EdgeScorer`, `DropEdge`,
`EdgeWeightMask`) subclass them as well. Abstract or final (equinox's pattern, as
`codesign.quant.Quantizer`): every class here is either abstract (`Sparsifier`, `EdgeSparsifier`,
`EdgeItems`, `LastAxisMask`) or ``@final``; a concrete mask is never subclassed, and one that
misses a method cannot be instantiated (``TypeError``).
"""

from __future__ import annotations

import abc
import numbers
from typing import Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign.kernels.features import SparseFeatures
from codesign.sparsify.hard_concrete import BETA, HardConcreteGate, prob_nonzero


class Sparsifier(nnx.Module):
    """The abstract base of every mask: what the cost model reads from it (all values float32
    scalars / bool arrays).

    * ``expected_density()``: expected kept fraction of what the mask gates, differentiable in the
      gate parameters (the training-time cost term).
    * ``hard_mask()``: bool array, what is kept at test time.
    * ``hard_density()``: float32 scalar, the kept fraction of ``hard_mask()``.
    """

    @abc.abstractmethod
    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept fraction (differentiable)."""

    @abc.abstractmethod
    def hard_mask(self) -> jax.Array:
        """bool array: what is kept at test time."""

    @abc.abstractmethod
    def hard_density(self) -> jax.Array:
        """float32 scalar: the kept fraction of ``hard_mask()``."""


class EdgeSparsifier(Sparsifier):
    """The abstract base of a `Sparsifier` of edges. Shapes: ``E`` edges (no self-loops), ``N`` nodes, ``F`` features.

    * ``edge_gates(x, senders, receivers, deterministic=None) -> float32 [E]``: per-edge multiplier
      in ``[0, 1]`` for the edge weights. ``x`` float [N, F] node features (or the layer's input
      embeddings), ``senders`` / ``receivers`` int [E]; sparsifiers that do not need them ignore
      them (all three may then be None). ``deterministic`` overrides the module's train/eval mode.
    * ``expected_edge_density()``: float32 scalar, expected kept fraction of the E edges
      (differentiable). Equal to ``expected_density()`` except for `BlockEdgeMask`, whose
      ``expected_density()`` counts tiles.
    * ``hard_edge_mask()``: bool [E], edges kept at test time; ``hard_edge_density()`` its mean.
    """

    @abc.abstractmethod
    def edge_gates(self, x=None, senders=None, receivers=None, deterministic: Optional[bool] = None) -> jax.Array:
        """float32 [E]: per-edge multiplier in [0, 1] for the edge weights."""

    @abc.abstractmethod
    def expected_edge_density(self) -> jax.Array:
        """float32 scalar: expected kept fraction of the E edges (differentiable)."""

    @abc.abstractmethod
    def hard_edge_mask(self) -> jax.Array:
        """bool [E]: edges kept at test time."""

    @abc.abstractmethod
    def hard_edge_density(self) -> jax.Array:
        """float32 scalar: the mean of ``hard_edge_mask()``."""


def check_count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {name}={value!r}")
    return int(value)


def check_edge_index(senders, receivers, n_edges: int, owner: str) -> None:
    """Shape check of optional ``senders`` / ``receivers`` passed to ``edge_gates``."""
    for name, idx in (("senders", senders), ("receivers", receivers)):
        if idx is not None and jnp.shape(idx) != (n_edges,):
            raise ValueError(f"{owner}.edge_gates: {name} must have shape ({n_edges},), got {jnp.shape(idx)}")


def _gate_last_axis(gate: HardConcreteGate, x, deterministic: Optional[bool], name: str):
    """``x * z`` with ``z = gate(deterministic)`` float [n] broadcast over the leading axes of ``x``
    (shared by `FeatureMask` and `ChannelMask`; ``name`` is the size's name in errors). ``x`` may
    be `SparseFeatures` [N, n]: each stored entry is multiplied by its column's gate, the dense
    product's nonzeros (a gate maps 0 to 0), and the result is `SparseFeatures` again."""
    n = gate.log_alpha.shape[0]
    shape = x.shape if isinstance(x, SparseFeatures) else jnp.shape(x)
    if len(shape) == 0 or shape[-1] != n:
        raise ValueError(f"x.shape[-1] must equal {name}={n}, got x.shape={tuple(shape)}")
    z = gate(deterministic).astype(x.dtype)
    if isinstance(x, SparseFeatures):
        return x.with_values(x.values * z[x.cols])
    return x * z.reshape((1,) * (x.ndim - 1) + (n,))


class EdgeItems(EdgeSparsifier):
    """Abstract base of the edge sparsifiers whose gated items are the graph's edges themselves: the
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
class EdgeMask(EdgeItems):
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


class LastAxisMask(Sparsifier):
    """One hard-concrete gate per entry of the last axis: ``__call__(x [..., n]) -> x * z``.

    Abstract: the one implementation behind the final `FeatureMask` (input-feature columns) and
    `ChannelMask` (hidden channels), which differ only in the name of their width
    (``WIDTH_NAME``: ``n_features`` / ``n_channels``), the one thing a subclass must give; the
    errors name it. Group sparsity with L0 gates on whole neurons: Louizos et al. (ICLR 2018).

    Shapes: ``n`` = the width; ``__call__(x [..., n]) -> [..., n]`` (dtype of x),
    ``hard_mask() -> bool [n]``.
    """

    @property
    @abc.abstractmethod
    def WIDTH_NAME(self) -> str:  # noqa: N802  a class constant in every final subclass
        """The width's name in errors and as an attribute (``n_features`` / ``n_channels``)."""

    def __init__(self, n: int, *, init_log_alpha: float = 3.0, beta: float = BETA, rngs: nnx.Rngs):
        """Args:
          n: the width (positive int).
          init_log_alpha: initial logit of every gate (finite).
          beta: hard-concrete temperature (> 0).
          rngs: `nnx.Rngs`; the ``"gates"`` stream (else ``default``) feeds the sampling.

        Raises:
          ValueError: the width not a positive int (named as ``WIDTH_NAME``); ``init_log_alpha`` /
            ``beta`` invalid.
        """
        self.width = check_count(n, self.WIDTH_NAME)
        self.gate = HardConcreteGate((self.width,), init_log_alpha=init_log_alpha, beta=beta, rngs=rngs)

    def __call__(self, x: jax.Array, deterministic: bool | None = None) -> jax.Array:
        """Returns ``x * z`` with ``z`` float [n] broadcast over the leading axes of ``x``.

        Args:
          x: float [..., n], or `codesign.kernels.SparseFeatures` [N, n] (then its stored entries
            times their column's gate, as `SparseFeatures`).
          deterministic: overrides the module's mode when not None.

        Raises:
          ValueError: ``x.shape[-1]`` differs from the width, or ``x`` is a scalar.
        """
        return _gate_last_axis(self.gate, x, deterministic, self.WIDTH_NAME)

    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept fraction, mean of P(z > 0) (Louizos et al. eq. 12)."""
        return self.gate.expected_density()

    def hard_mask(self) -> jax.Array:
        """bool [n]: entries kept at test time."""
        return self.gate.hard_mask()

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction kept at test time."""
        return self.gate.hard_density()

    def keep_probability(self, hard: bool = False) -> jax.Array:
        """float32 [n]: each entry's P(z > 0) (Louizos et al. eq. 12; differentiable) or, with
        ``hard``, its test-time mask as 0 / 1 -- the weights of a count that differs per entry
        (e.g. the stored nonzeros of each feature column, `codesign.models.GCN.workload`)."""
        if hard:
            return self.hard_mask().astype(jnp.float32)
        return prob_nonzero(self.gate.log_alpha[...], self.gate.beta)


@final
class FeatureMask(LastAxisMask):
    """Learnable input-feature sparsity: one gate per feature column (`LastAxisMask`). Pruned
    features shrink the first GEMM's K dimension and the bytes of X read.

    Example (inside your own ``nnx.Module``)::

      self.feat_mask = FeatureMask(graph.x.shape[1], rngs=rngs)          # in __init__
      h = self.linear(self.feat_mask(x))                                 # in __call__
      loss = task_loss + lam * model.feat_mask.expected_density()        # in the loss
    """

    WIDTH_NAME = "n_features"

    @property
    def n_features(self) -> int:
        return self.width


@final
class ChannelMask(LastAxisMask):
    """Learnable hidden-unit sparsity: one gate per channel of a hidden layer (`LastAxisMask`).
    Gating channel ``c`` of ``h = X W1`` removes column ``c`` of ``W1`` and row ``c`` of the next
    layer's ``W2``: the producing GEMM's output and the consuming GEMM's K dimension shrink.

    Example (inside your own ``nnx.Module``)::

      self.chan_mask = ChannelMask(hidden, rngs=rngs)                        # in __init__
      h = self.lin2(self.chan_mask(jax.nn.relu(self.lin1(x))))               # in __call__
    """

    WIDTH_NAME = "n_channels"

    @property
    def n_channels(self) -> int:
        return self.width


def learns_edge_weights(sparsifier, attention: bool = False) -> bool:
    """Whether a model's training step forms the gradient of its edge weights (``dA``,
    `codesign.hwmodel.autograd_training`'s ``learned_edge_weights``): True with attention (GAT:
    the weights are computed from the features) or when the model's edge sparsifier has trainable
    parameters (`nnx.Param`: `EdgeMask`, `BlockEdgeMask`, `EdgeScorer`, `EdgeWeightMask`; their
    gates multiply the messages, so their gradient needs ``dZ_i . H_j`` on every stored edge);
    False for no sparsifier or one without parameters (`DropEdge`: a random constant mask)."""
    if attention:
        return True
    return sparsifier is not None and bool(jax.tree_util.tree_leaves(nnx.state(sparsifier, nnx.Param)))
