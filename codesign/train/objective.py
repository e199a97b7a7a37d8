"""The training objective as a sum of small pure loss terms.

    loss = task + cost + bits + edge_l0 + distillation          (each present only when configured)

    task          masked cross-entropy over the training nodes (what the problem's forward returns)
    cost          penalty mode: cost_weight * log(cost / dense_cost); budget mode:
                  multiplier * log(cost / (budget * dense_cost))   (`codesign.train.budget`)
    bits          bits_weight * mean_t E[b_t] over the quantized tensors (Uhlich et al., ICLR 2020)
    edge_l0       edge_l0_weight * E[kept edge fraction] (closed-form L0 of the hard-concrete
                  gates; Louizos et al., ICLR 2018, Eq. 12)
    distillation  distill_weight * T^2 * KL(softmax(teacher/T) || softmax(student/T)) over all
                  nodes (Hinton, Vinyals and Dean, 2015)

``cost`` is the modeled inference cost (`codesign.hwmodel.estimate`) at the *expected* densities
and bit-widths, so its gradient reaches the gate logits and the learned widths; ``dense_cost`` is
that of the dense FP32 model, so the term is scale-free (0 for the dense model).

A term is a function ``term(ctx: LossContext) -> float32 scalar``; `objective(cfg)` returns the
active ones. Adding a term is one function here and one line in `objective`
(docs/architecture.md shows it).
"""

from __future__ import annotations

import math
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import optax

__all__ = ["LossContext", "LossTerm", "objective", "task_term", "cost_penalty", "cost_constraint", "bits_penalty",
           "edge_l0", "distillation", "masked_cross_entropy", "masked_accuracy", "distill_kl"]


class LossContext(NamedTuple):
    """What a loss term may read: ``model`` (the `codesign.models.GNN` being trained), ``logits``
    float [N, C] of this step's forward, ``task_loss`` (float32 scalar, from the problem's
    forward), ``cost_ratio`` (float32 scalar, modeled cost / dense cost at expected densities and
    bits), ``multiplier`` (float32 scalar, the budget controller's Lagrange multiplier; 0 in
    penalty mode) and ``targets`` (`codesign.train.Problem.targets`: arrays the terms read besides
    the model's output, e.g. the distillation teacher's float32 [N, C] logits; None if the problem
    has none). ``targets`` reach the jitted step as an argument: closed over, an [N, C] array would
    be a constant of the program, and XLA constant-folds ``log_softmax`` of it at every compile
    (docs/architecture.md, "A loss term", has the measured compile times)."""

    model: object
    logits: jax.Array
    task_loss: jax.Array
    cost_ratio: jax.Array
    multiplier: jax.Array
    targets: Any = None


LossTerm = Callable[[LossContext], jax.Array]


def masked_cross_entropy(logits: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean softmax cross-entropy over the ``mask`` nodes (float32 scalar; 0 for an empty mask).

    Args: logits float [N, C]; y int [N] labels in [0, C); mask bool [N]."""
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return jnp.sum(ce * mask) / jnp.maximum(mask.sum(), 1)


def masked_accuracy(logits: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    """Fraction of ``mask`` nodes whose argmax logit equals the label (float32 scalar)."""
    hit = (jnp.argmax(logits, -1) == y) & mask
    return hit.sum() / jnp.maximum(mask.sum(), 1)


def distill_kl(student_logits: jax.Array, teacher_logits: jax.Array, temperature: float = 1.0) -> jax.Array:
    """``T^2 * mean_i KL(softmax(t_i / T) || softmax(s_i / T))`` over all rows (Hinton et al., 2015:
    the ``T^2`` keeps the gradient scale independent of ``T``).

    Args:
      student_logits, teacher_logits: float [N, C].
      temperature: T > 0.

    Returns:
      float32 scalar, >= 0; 0 when the two agree.
    """
    t = jax.nn.log_softmax(teacher_logits.astype(jnp.float32) / temperature, axis=-1)
    s = jax.nn.log_softmax(student_logits.astype(jnp.float32) / temperature, axis=-1)
    return temperature ** 2 * jnp.mean(jnp.sum(jnp.exp(t) * (t - s), axis=-1))


def task_term(ctx: LossContext) -> jax.Array:
    return ctx.task_loss


def cost_penalty(weight: float) -> LossTerm:
    """``weight * log(cost / dense_cost)`` (penalty mode)."""
    return lambda ctx: weight * jnp.log(ctx.cost_ratio)


def cost_constraint(budget: float) -> LossTerm:
    """``multiplier * log(cost / (budget * dense_cost))`` (budget mode; the multiplier comes from
    `codesign.train.budget.pi_controller`)."""
    log_budget = math.log(budget)
    return lambda ctx: ctx.multiplier * (jnp.log(ctx.cost_ratio) - log_budget)


def bits_penalty(weight: float) -> LossTerm:
    """``weight * mean_t E[b_t]`` over the model's quantized tensors (`layer_bits`)."""
    return lambda ctx: weight * jnp.mean(jnp.stack(list(ctx.model.layer_bits().values())))


def edge_l0(weight: float) -> LossTerm:
    """``weight * E[kept edge fraction]``."""
    return lambda ctx: weight * ctx.model.densities()["edge"]


def distillation(weight: float, temperature: float) -> LossTerm:
    """``weight * distill_kl(logits, teacher_logits, temperature)``, the teacher's logits being the
    problem's ``targets`` (float [N, C]; `LossContext`).

    The term raises ValueError when traced without targets."""

    def term(ctx: LossContext) -> jax.Array:
        if ctx.targets is None:
            raise ValueError("distillation: the problem has no targets (Problem.targets = the teacher's logits)")
        return weight * distill_kl(ctx.logits, ctx.targets, temperature)

    return term


def objective(cfg) -> list[LossTerm]:
    """The active loss terms of ``cfg`` (a `codesign.train.TrainConfig`), task term first.

    Args:
      cfg: the config; its ``cost_weight`` / ``budget``, ``bits_weight``, ``edge_l0_weight`` and
        ``distill_weight`` switch the terms on (distillation reads the teacher's logits from the
        problem's targets, `codesign.train.Problem`).
    """
    terms: list[LossTerm] = [task_term]
    if cfg.cost.budget is not None:
        terms.append(cost_constraint(cfg.cost.budget))
    elif cfg.cost.weight > 0:
        terms.append(cost_penalty(cfg.cost.weight))
    if cfg.quant.bits_weight > 0:
        terms.append(bits_penalty(cfg.quant.bits_weight))
    if cfg.masks.edge_l0_weight > 0:
        terms.append(edge_l0(cfg.masks.edge_l0_weight))
    if cfg.distill.weight > 0:
        terms.append(distillation(cfg.distill.weight, cfg.distill.temperature))
    return terms
