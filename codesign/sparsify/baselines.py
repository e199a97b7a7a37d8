"""Pruning baselines as small pure pieces (a trainer elsewhere composes them).

* `random_edge_removal`: a uniformly random subset of edges of a fixed size (random pruning, the
  "RP" baseline of UGS).
* `DropEdge`: Rong et al., "DropEdge: Towards Deep Graph Convolutional Networks on Node
  Classification", ICLR 2020 — a fresh random edge subset every training step, all edges at test.
* UGS pieces: Chen et al., "A Unified Lottery Ticket Hypothesis for Graph Neural Networks",
  ICML 2021 (Alg. 1, iterative magnitude pruning of a trainable graph mask ``m_g`` and weight
  mask ``m_theta`` with rewinding): `magnitude_prune` / `global_magnitude_prune`, `UGSSchedule`
  (sparsity after k rounds) and `EdgeWeightMask` (the trainable graph mask).

Details checked against the official UGS code (github.com/VITA-Group/Unified-LTH-GNN,
``NodeClassification/pruning.py`` and ``main_pruning_imp.py``):
  * the pruning scores are the magnitudes of the *trained mask values* ``|m|`` (``adj_mask1_train``,
    ``weight_mask_train``), not of the weights;
  * each round prunes a fraction of the entries that are still nonzero (``get_mask_distribution``
    drops zeros before sorting);
  * the graph mask is pruned on its own; the weight masks of all layers are concatenated and
    pruned with one global threshold (``get_final_mask_epoch``) -> `global_magnitude_prune`;
  * the L1 penalty is applied as a subgradient ``s * sign(m)`` (``subgradient_update_mask``), i.e.
    ``s * ||m||_1`` -> `EdgeWeightMask.l1_norm`;
  * after a round the weights are rewound to their initial values and the trainable masks reset to
    the new binary masks (``rewind_weight[...] = final_mask_dict[...]``) -> `EdgeWeightMask.prune`.
  The paper's per-round rates are p_g = 5 % of the graph mask and p_theta = 20 % of the weights
  (also the README's commands: ``--pruning_percent_adj 0.05 --pruning_percent_wei 0.2``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from collections.abc import Sequence
from typing import Optional, final

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from codesign.sparsify.masks import EdgeItems, check_count, check_edge_index

UGS_GRAPH_RATE = 0.05
"""p_g: fraction of the remaining graph-mask entries pruned per UGS round (Chen et al. 2021, Alg. 1
setting p_g = 5 %; the official README commands use ``--pruning_percent_adj 0.05``)."""
UGS_WEIGHT_RATE = 0.2
"""p_theta: fraction of the remaining weights pruned per UGS round (Chen et al. 2021, Alg. 1 setting
p_theta = 20 %; README: ``--pruning_percent_wei 0.2``)."""


def check_fraction(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0.0 <= float(value) <= 1.0):
        raise ValueError(f"{name} must be a float in [0, 1], got {name}={value!r}")
    return float(value)


def prune_count(n: int, fraction: float) -> int:
    """``round(fraction * n)`` with halves rounded up: how many of ``n`` entries a fraction selects.

    Rounded, not truncated as UGS's ``int(total * percent)``, so that float error cannot lose an
    entry (``0.29 * 100 = 28.999...``). Used by `random_edge_removal`, `DropEdge` and
    `magnitude_prune`.

    Raises:
      ValueError: ``n`` not a non-negative int or ``fraction`` outside [0, 1].
    """
    if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 0:
        raise ValueError(f"n must be a non-negative int, got n={n!r}")
    return int(math.floor(check_fraction(fraction, "fraction") * int(n) + 0.5))


# ------------------------------------------------------------------------------------------------
# random pruning and DropEdge
# ------------------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=1)
def _random_subset(key: jax.Array, n_edges: int, n_keep: jax.Array) -> jax.Array:
    """The first ``n_keep`` entries of a random permutation of ``range(n_edges)`` (one compile per E)."""
    perm = jax.random.permutation(key, n_edges)
    return jnp.zeros((n_edges,), bool).at[perm].set(jnp.arange(n_edges) < n_keep)


def random_edge_removal(key: jax.Array, n_edges: int, keep_fraction: float) -> jax.Array:
    """A uniformly random subset of exactly ``prune_count(n_edges, keep_fraction)`` kept edges.

    Every subset of that size is equally likely (a random permutation's prefix), so each edge is
    kept with probability ``n_keep / n_edges``. Works inside ``jit`` / ``vmap`` over ``key``
    (``n_edges`` and ``keep_fraction`` are Python numbers).

    Args:
      key: a JAX PRNG key.
      n_edges: E, a positive int.
      keep_fraction: fraction of edges to keep, in [0, 1].

    Returns:
      bool [E], True for kept edges.

    Raises:
      ValueError: ``n_edges`` not a positive int; ``keep_fraction`` outside [0, 1].
    """
    n_edges = check_count(n_edges, "n_edges")
    n_keep = prune_count(n_edges, check_fraction(keep_fraction, "keep_fraction"))
    return _random_subset(key, n_edges, jnp.asarray(n_keep, jnp.int32))


@final
class DropEdge(EdgeItems):
    """DropEdge (Rong et al., ICLR 2020, ``A_drop = A - A'``): in training every call removes a fresh
    uniformly random set of ``round(rate * E)`` edges; at test time all edges are kept.

    The paper "randomly enforces V p non-zero elements of the adjacency matrix A to be zeros"
    (V edges, p the drop rate); its official sampler keeps a random permutation's prefix of
    ``int(nnz * percent)`` entries, as `random_edge_removal` does (rounded here). Each directed
    edge is drawn independently of its reverse. The caller renormalizes the adjacency after
    masking (pass the gates as edge weights to ``gcn_normalize``), as the paper does.

    Modes: the ``deterministic`` attribute (``model.train()`` / ``model.eval()``; a call argument
    overrides it). ``expected_density()`` is the kept fraction: ``(E - round(rate E)) / E``
    (``1 - rate`` up to rounding) in training and 1 at test time; it is a constant, not a learned
    quantity (zero gradient). ``hard_mask()`` is all True (test time keeps every edge).

    Shapes: ``E = n_edges``; ``edge_gates(...) -> float32 [E]`` of 0/1.

    Example (inside your own ``nnx.Module``)::

      self.drop_edge = DropEdge(graph.senders.shape[0], 0.3, rngs=rngs)      # in __init__
      w = self.drop_edge.edge_gates() * edge_weight                          # in __call__, [E]
      # no loss term; model.eval() keeps all edges
    """

    def __init__(self, n_edges: int, rate: float, *, rng_collection: str = "dropout", rngs: nnx.Rngs):
        """Args:
          n_edges: E, a positive int.
          rate: p, fraction of edges removed per training step, in [0, 1].
          rng_collection: stream of ``rngs`` that draws the subsets (``default`` when absent).
          rngs: `nnx.Rngs`.

        Raises:
          ValueError: ``n_edges`` not a positive int, ``rate`` outside [0, 1].
          TypeError: ``rngs`` not an `nnx.Rngs`.
        """
        self.n_edges = check_count(n_edges, "n_edges")
        self.rate = check_fraction(rate, "rate")
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs, got {type(rngs).__name__}")
        self.n_kept = self.n_edges - prune_count(self.n_edges, self.rate)
        self.deterministic = False
        self.rngs = rngs[rng_collection].fork()

    def _training(self, deterministic: Optional[bool]) -> bool:
        return not (self.deterministic if deterministic is None else deterministic)

    def edge_gates(self, x=None, senders=None, receivers=None, deterministic: Optional[bool] = None) -> jax.Array:
        """float32 [E] of 0/1: a fresh random subset in training, all ones at test time.

        Raises:
          ValueError: ``senders`` / ``receivers`` given with a shape other than ``(E,)``.
        """
        check_edge_index(senders, receivers, self.n_edges, "DropEdge")
        if not self._training(deterministic):
            return jnp.ones((self.n_edges,), jnp.float32)
        return random_edge_removal(self.rngs(), self.n_edges, self.n_kept / self.n_edges).astype(jnp.float32)

    def expected_density(self) -> jax.Array:
        """float32 scalar: ``n_kept / E`` in training, 1 at test time (by ``self.deterministic``)."""
        return jnp.asarray(self.n_kept / self.n_edges if self._training(None) else 1.0, jnp.float32)

    def hard_mask(self) -> jax.Array:
        """bool [E], all True: DropEdge keeps every edge at test time."""
        return jnp.ones((self.n_edges,), bool)

    def hard_density(self) -> jax.Array:
        """float32 scalar 1.0."""
        return jnp.ones((), jnp.float32)

    def set_view(self, deterministic: bool | None = None):
        """Hook of ``nnx.view`` (flax >= 0.12): ``nnx.view(model, deterministic=True)``."""
        if deterministic is not None:
            self.deterministic = deterministic


# ------------------------------------------------------------------------------------------------
# UGS: iterative magnitude pruning
# ------------------------------------------------------------------------------------------------


@jax.jit
def _prune_smallest(scores: jax.Array, mask: jax.Array, n_prune: jax.Array) -> jax.Array:
    """Drops the ``n_prune`` entries of ``mask`` (bool [n]) with the smallest ``|scores|`` (NaN as
    +inf), lower index first among ties."""
    key = jnp.nan_to_num(jnp.abs(scores).astype(jnp.float32), nan=jnp.inf)
    index = jnp.arange(mask.shape[0])
    order = jnp.lexsort((index, key, ~mask))  # remaining entries first, by |score|, then by index
    rank = jnp.zeros_like(index).at[order].set(index)
    return mask & (rank >= n_prune)


def magnitude_prune(scores: jax.Array, current_mask: jax.Array, fraction: float) -> jax.Array:
    """Prunes ``prune_count(n_remaining, fraction)`` of the entries still in ``current_mask``: those
    with the smallest ``|score|`` (one UGS pruning step, Chen et al. 2021, Alg. 1).

    Deterministic: among equal ``|score|`` the lower flat index is pruned first; NaN scores count
    as ``+inf`` (pruned last); subnormal scores compare equal to 0 (XLA on CPU flushes them).
    Entries outside ``current_mask`` stay pruned (never revived). Host-side (outside ``jit``): the count is computed exactly from the concrete mask, then one
    compiled sort per shape does the selection.

    Args:
      scores: float [...] scores (for UGS: the trained mask values).
      current_mask: bool [...] of the same shape; True = still present.
      fraction: fraction of the *remaining* entries to prune, in [0, 1].

    Returns:
      bool [...] new mask, ``new <= current_mask`` elementwise, with
      ``sum(new) = n_remaining - round(fraction * n_remaining)`` (halves rounded up).

    Raises:
      ValueError: shapes differ, ``current_mask`` not bool, ``fraction`` outside [0, 1].
    """
    fraction = check_fraction(fraction, "fraction")
    scores, current_mask = jnp.asarray(scores), jnp.asarray(current_mask)
    if scores.shape != current_mask.shape:
        raise ValueError(f"magnitude_prune: invalid {scores.shape=} for {current_mask.shape=} (must be equal)")
    if current_mask.dtype != jnp.bool_:
        raise ValueError(f"magnitude_prune: current_mask must be bool, got {current_mask.dtype}")
    n_prune = prune_count(int(np.count_nonzero(np.asarray(current_mask))), fraction)
    out = _prune_smallest(scores.ravel(), current_mask.ravel(), jnp.asarray(n_prune, jnp.int32))
    return out.reshape(current_mask.shape)


def global_magnitude_prune(scores: Sequence[jax.Array], masks: Sequence[jax.Array], fraction: float) -> list[jax.Array]:
    """`magnitude_prune` with one threshold across several arrays (UGS prunes the weight masks of
    all layers together: ``get_final_mask_epoch`` concatenates them before sorting).

    Args:
      scores: sequence of float arrays.
      masks: sequence of bool arrays, ``masks[i].shape == scores[i].shape``.
      fraction: fraction of the remaining entries (over all arrays) to prune, in [0, 1].

    Returns:
      list of bool arrays shaped like ``masks``.

    Raises:
      ValueError: different lengths, a shape mismatch (naming the index), empty sequences, or as
        `magnitude_prune`.
    """
    if len(scores) != len(masks) or not scores:
        raise ValueError(f"global_magnitude_prune: need equally many (> 0) scores and masks, got "
                         f"{len(scores)} and {len(masks)}")
    for i, (s, m) in enumerate(zip(scores, masks)):
        if jnp.shape(s) != jnp.shape(m):
            raise ValueError(f"global_magnitude_prune: invalid scores[{i}].shape={jnp.shape(s)} for "
                             f"masks[{i}].shape={jnp.shape(m)}")
    flat = magnitude_prune(jnp.concatenate([jnp.ravel(s).astype(jnp.float32) for s in scores]),
                           jnp.concatenate([jnp.ravel(m) for m in masks]), fraction)
    sizes = np.cumsum([int(np.prod(jnp.shape(m))) for m in masks])[:-1]
    return [part.reshape(jnp.shape(m)) for part, m in zip(jnp.split(flat, sizes), masks)]


@dataclasses.dataclass(frozen=True)
class UGSSchedule:
    """Nominal sparsity levels of UGS rounds: after ``k`` rounds pruning a fraction ``p`` of the
    remaining entries each, the sparsity is ``1 - (1 - p)^k`` (Chen et al. 2021, Alg. 1;
    e.g. p_g = 5 %: 5 %, 9.75 %, 14.26 %, ...). Actual counts differ by the per-round rounding of
    `prune_count` (at most one entry per round).

    Fields:
      graph_rate: p_g in [0, 1], default ``UGS_GRAPH_RATE = 0.05``.
      weight_rate: p_theta in [0, 1], default ``UGS_WEIGHT_RATE = 0.2``.

    Raises:
      ValueError: a rate outside [0, 1] (at construction).
    """

    graph_rate: float = UGS_GRAPH_RATE
    weight_rate: float = UGS_WEIGHT_RATE

    def __post_init__(self):
        check_fraction(self.graph_rate, "graph_rate")
        check_fraction(self.weight_rate, "weight_rate")

    def sparsity(self, k: int) -> tuple[float, float]:
        """``(graph, weight)`` sparsity (pruned fractions) after ``k >= 0`` rounds.

        Raises:
          ValueError: ``k`` not a non-negative int.
        """
        if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0:
            raise ValueError(f"k must be a non-negative int, got k={k!r}")
        return 1.0 - (1.0 - self.graph_rate) ** int(k), 1.0 - (1.0 - self.weight_rate) ** int(k)

    def levels(self, n_rounds: int) -> list[tuple[float, float]]:
        """``[sparsity(1), ..., sparsity(n_rounds)]``.

        Raises:
          ValueError: ``n_rounds`` not a positive int.
        """
        return [self.sparsity(k) for k in range(1, check_count(n_rounds, "n_rounds") + 1)]


class MaskWeight(nnx.Param):
    """Variable type of the continuous trainable masks of UGS (``m_g`` of `EdgeWeightMask`).

    An ordinary weight, trained with the model's optimizer as in UGS (one Adam over weights and
    masks); the type lets a trainer select the masks, e.g. for the L1 term.
    """


class PruneMask(nnx.Variable):
    """Variable type of a fixed binary pruning mask (UGS's ``*_mask_fixed``; not trained)."""


@final
class EdgeWeightMask(EdgeItems):
    """The trainable graph mask of UGS (Chen et al. 2021; objective
    ``L({m_g * A, X}, m_theta * Theta) + gamma_1 ||m_g||_1 + gamma_2 ||m_theta||_1``): a continuous
    per-edge weight ``m_g`` initialized to 1, multiplied into the edge weights, with the L1 penalty
    ``gamma_1 ||m_g||_1`` (`l1_norm`) in the loss; pruning rounds zero it through a fixed binary mask.

    UGS's ``'all_one'`` init adds uniform noise of relative size 1e-5 to break ties; here
    `magnitude_prune` breaks ties deterministically by index instead, so the init is exactly 1.

    Shapes: ``E = n_edges``; ``edge_gates(...) -> float32 [E] = weight * keep``.

    Contract: `EdgeSparsifier`. Densities are those of the fixed mask ``keep``: UGS controls
    sparsity by pruning rounds, not by a differentiable density, so ``expected_density()`` is
    a constant (zero gradient) equal to ``mean(keep)``; ``hard_mask()`` = ``keep & (weight != 0)``.

    Example (inside your own ``nnx.Module``)::

      self.graph_mask = EdgeWeightMask(graph.senders.shape[0])                 # in __init__
      w = self.graph_mask.edge_gates() * edge_weight                           # in __call__, [E]
      loss = task_loss + s1 * model.graph_mask.l1_norm()                       # in the loss
      # after a round: model.graph_mask.prune(0.05); rewind the weights to their init
    """

    def __init__(self, n_edges: int):
        """Args:
          n_edges: E, a positive int.

        Raises:
          ValueError: ``n_edges`` not a positive int.
        """
        self.n_edges = check_count(n_edges, "n_edges")
        self.weight = MaskWeight(jnp.ones((self.n_edges,), jnp.float32))
        self.keep = PruneMask(jnp.ones((self.n_edges,), bool))

    def edge_gates(self, x=None, senders=None, receivers=None, deterministic: Optional[bool] = None) -> jax.Array:
        """float32 [E]: ``weight * keep`` (the same in training and at test time).

        Raises:
          ValueError: ``senders`` / ``receivers`` given with a shape other than ``(E,)``.
        """
        check_edge_index(senders, receivers, self.n_edges, "EdgeWeightMask")
        return self.weight[...] * self.keep[...].astype(jnp.float32)

    def l1_norm(self) -> jax.Array:
        """float32 scalar ``sum_e |weight_e * keep_e|`` (UGS's L1 term; multiply by gamma_1, ``--s1``
        in the official code, which its README sets to 1e-2 on Cora and Citeseer)."""
        return jnp.sum(jnp.abs(self.edge_gates()))

    def expected_density(self) -> jax.Array:
        """float32 scalar: ``mean(keep)``, kept fraction after the pruning rounds so far."""
        return jnp.mean(self.keep[...].astype(jnp.float32))

    def hard_mask(self) -> jax.Array:
        """bool [E]: ``keep & (weight != 0)``."""
        return self.keep[...] & (self.weight[...] != 0)

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction of edges in `hard_mask`."""
        return jnp.mean(self.hard_mask().astype(jnp.float32))

    def prune(self, fraction: float = UGS_GRAPH_RATE) -> jax.Array:
        """One UGS round on the graph mask (host-side, outside ``jit``): prunes ``fraction`` of the
        remaining edges with the smallest ``|weight|`` (`magnitude_prune`), then resets the
        trainable weights to the new binary mask (UGS's rewind of ``adj_mask1_train``).
        Rewinding the model weights is the trainer's job.

        Returns:
          bool [E], the new ``keep``.

        Raises:
          ValueError: ``fraction`` outside [0, 1].
        """
        keep = magnitude_prune(self.weight[...], self.keep[...], fraction)
        self.keep[...] = keep
        self.weight[...] = keep.astype(jnp.float32)
        return keep
