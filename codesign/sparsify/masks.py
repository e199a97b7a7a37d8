"""Mask layers built on hard-concrete gates: `EdgeMask` (one gate per edge), `FeatureMask` (one per input feature).

Both are final wrappers around a `HardConcreteGate` (held as ``.gate``); the train / eval mode
lives in ``.gate.deterministic`` and is switched by flax NNX ``model.train()`` / ``model.eval()``
(or ``nnx.view(model, deterministic=...)``) on any model that contains the layer.
"""

from __future__ import annotations

import numbers
from typing import final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign.sparsify.hard_concrete import BETA, HardConcreteGate


def _check_count(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {name}={value!r}")
    return int(value)


@final
class EdgeMask(nnx.Module):
    """Learnable per-edge sparsity: one free hard-concrete gate per edge (transductive).

    One free logit per edge of a fixed graph, like the trainable graph mask of UGS (Chen et al.,
    "A Unified Lottery Ticket Hypothesis for Graph Neural Networks", ICML 2021), relaxed with the
    hard-concrete L0 gates of Louizos et al. (ICLR 2018) as PTDNet does (Luo et al., "Learning to
    Drop", WSDM 2021; PTDNet predicts its logits with an MLP, here they are free parameters).
    The caller multiplies the gates into its edge weights and adds ``expected_density()``
    (expected fraction of kept edges) to its loss.

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
        self.n_edges = _check_count(n_edges, "n_edges")
        self.gate = HardConcreteGate((self.n_edges,), init_log_alpha=init_log_alpha, beta=beta, rngs=rngs)

    def __call__(self, deterministic: bool | None = None) -> jax.Array:
        """Gate per edge, float32 [E] in [0, 1]; ``deterministic`` overrides the module's mode."""
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
        self.n_features = _check_count(n_features, "n_features")
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
        if jnp.ndim(x) == 0 or x.shape[-1] != self.n_features:
            raise ValueError(
                f"x.shape[-1] must equal n_features={self.n_features}, got x.shape={jnp.shape(x)}"
            )
        z = self.gate(deterministic).astype(x.dtype)
        return x * z.reshape((1,) * (x.ndim - 1) + (self.n_features,))

    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept-feature fraction, mean of P(z_f > 0) (Louizos et al. eq. 12)."""
        return self.gate.expected_density()

    def hard_mask(self) -> jax.Array:
        """bool [F]: features kept at test time."""
        return self.gate.hard_mask()

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction of features kept at test time."""
        return self.gate.hard_density()
