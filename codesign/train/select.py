"""Which epoch's weights are evaluated (``TrainConfig.select``), tracked on the device.

"last": the final epoch. "best_val": the epoch with the best validation accuracy of the
deterministic (eval-mode) model, ties broken by lower validation loss; with a cost term it is
cost-aware: penalty mode keeps the epoch of the lowest validation *objective* (validation
cross-entropy + ``cost_weight`` x log hardened cost ratio), budget mode the best validation
accuracy among the epochs whose hardened cost meets the budget (the least violating one while
none does). Selecting on accuracy alone picked epochs before the gates had moved.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from flax import nnx

__all__ = ["BestVal", "selection_terms", "track_best", "track_best_seeds"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class BestVal:
    """The best-validation epoch so far: ``val_accuracy``, ``val_loss`` (float32 scalars; the
    loss includes the penalty-mode cost term), ``epoch`` (int32 scalar, -1 before the first), a
    copy of the model's `nnx.Param` state then, and its budget ``violation`` (float32 scalar)."""

    val_accuracy: jax.Array
    val_loss: jax.Array
    epoch: jax.Array
    params: nnx.State
    violation: jax.Array

    @classmethod
    def start(cls, model) -> "BestVal":
        return cls(jnp.float32(-1.0), jnp.float32(jnp.inf), jnp.int32(-1),
                   jax.tree.map(jnp.copy, nnx.state(model, nnx.Param)), jnp.float32(jnp.inf))


def selection_terms(cfg, hard_ratio: jax.Array) -> tuple:
    """``(cost_term, violation, by_objective)`` of `track_best` for ``cfg`` at the epoch's hardened
    cost ratio (float32 scalar, cost / dense cost):

      no cost term: ``(0, 0, False)``: best validation accuracy, ties by validation loss;
      penalty mode: ``(cost_weight * log(ratio), 0, True)``: lowest validation objective;
      budget mode: ``(0, max(0, log(ratio / budget)), False)``: the least violating epoch, and
        among feasible ones (violation 0) the best validation accuracy.
    """
    zero = jnp.zeros((), jnp.float32)
    if cfg.cost.budget is not None:
        return zero, jnp.maximum(0.0, jnp.log(hard_ratio) - math.log(cfg.cost.budget)), jnp.asarray(False)
    if cfg.cost.weight > 0:
        return cfg.cost.weight * jnp.log(hard_ratio), zero, jnp.asarray(True)
    return zero, zero, jnp.asarray(False)


@functools.partial(jax.jit, static_argnums=(0, 2))
def track_best(graphdef, state, evaluate, data, best: BestVal, epoch, cost_term=0.0, violation=0.0,
               by_objective=False) -> BestVal:
    """``best`` updated with the epoch's model if it is better (see `selection_terms`).

    Args:
      graphdef, state: the split ``(model, optimizer)`` of `codesign.train.make_step` (static
        graphdef); the model is merged and put in eval mode (no dropout, deterministic gates).
      evaluate: ``(model, data) -> (val_accuracy, val_loss)`` (static).
      data, best, epoch: the problem's data, the best so far, this epoch (int).
      cost_term, violation, by_objective: from `selection_terms`.

    On device: no host sync per epoch."""
    model, _ = nnx.merge(graphdef, state)
    model.eval()
    acc, loss = evaluate(model, data)
    loss = loss + cost_term
    by_acc = (acc > best.val_accuracy) | ((acc == best.val_accuracy) & (loss < best.val_loss))
    better = jnp.where(by_objective, loss < best.val_loss,
                       (violation < best.violation) | ((violation == best.violation) & by_acc))
    pick = lambda new, old: jnp.where(better, new, old)
    return BestVal(pick(acc, best.val_accuracy), pick(loss, best.val_loss), pick(jnp.int32(epoch), best.epoch),
                   jax.tree.map(pick, nnx.state(model, nnx.Param), best.params), pick(violation, best.violation))


@functools.partial(jax.jit, static_argnums=(0, 2))
def track_best_seeds(graphdef, state, evaluate, data, best: BestVal, epoch, cost_term=0.0, violation=0.0,
                     by_objective=False) -> BestVal:
    """`track_best` of S seeds at once (`codesign.train.fit_seeds`): ``state``, ``best`` and the
    per-seed ``cost_term`` / ``violation`` (``[S]``, or scalars shared by all) stacked along a
    leading seed axis, ``data`` shared; each seed selects exactly as `track_best` alone."""
    n = jax.tree.leaves(best.epoch)[0].shape[0]
    per_seed = lambda v: jnp.broadcast_to(jnp.asarray(v, jnp.float32), (n,))
    one = lambda s, b, c, v: track_best(graphdef, s, evaluate, data, b, epoch, c, v, by_objective)
    return jax.vmap(one)(state, best, per_seed(cost_term), per_seed(violation))
