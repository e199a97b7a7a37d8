"""One optimizer over typed parameters: `optax.multi_transform` keyed by variable type.

    weights  (every `nnx.Param` that is neither a gate nor a quantizer parameter):
             L2 weight decay on the first layer (Kipf & Welling, ICLR 2017) or on all weights,
             then Adam at ``lr``
    gates    (`codesign.sparsify.GATE_PARAMS`: gate logits, `EdgeScorer` weights): Adam at
             ``gate_lr`` (they must travel several units of log-odds within a few hundred
             epochs), or Adam with a per-tensor second moment (`scale_by_tensor_rms`)
    quant    (`QUANT_PARAMS`: LSQ steps, learned bit-width ranges): Adam directions scaled by
             each tensor's RMS (`optax.scale_by_param_block_rms`) at the relative step ``quant_lr``,
             since their units differ per tensor
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from codesign.quant import BitParam, QuantStep
from codesign.sparsify import GATE_PARAMS

__all__ = ["QUANT_PARAMS", "param_labels", "optimizer", "gate_transform", "scale_by_tensor_rms", "decay_mask"]

QUANT_PARAMS = nnx.Any(QuantStep, BitParam)
"""Filter of the quantizer group: learned step sizes and bit-width ranges."""

_GATES, _QUANT = nnx.filterlib.to_predicate(GATE_PARAMS), nnx.filterlib.to_predicate(QUANT_PARAMS)


class _TensorRmsState(NamedTuple):
    count: jax.Array
    nu: optax.Updates


def scale_by_tensor_rms(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-12) -> optax.GradientTransformation:
    """Adam with one second-moment scalar per tensor instead of one per element.

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) mean(g^2)`` (a scalar per leaf), update
    ``m_hat / (sqrt(v_hat) + eps)`` with Adam's bias corrections (Kingma & Ba, ICLR 2015, Alg. 1).

    Why our own: per-element Adam gives every gate logit the same step size whatever its
    gradient, so a whole mask crosses the pruning threshold in the same few epochs; normalizing
    per tensor keeps the step scale-free while keeping the *relative* gradient magnitudes inside a
    mask. optax has per-element (``scale_by_adam``) and factored (``scale_by_factored_rms``, >= 2-D
    only) second moments, not a per-tensor one.
    """
    def init(params):
        return (optax.trace(b1).init(params), _TensorRmsState(
            jnp.zeros((), jnp.int32), jax.tree.map(lambda p: jnp.zeros((), jnp.float32), params)))

    def update(updates, state, params=None):
        trace_state, rms = state
        m, trace_state = optax.trace(b1).update(jax.tree.map(lambda g: (1 - b1) * g, updates), trace_state)
        count = rms.count + 1
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.mean(jnp.square(g)), rms.nu, updates)
        c1, c2 = 1 - b1 ** count, 1 - b2 ** count
        out = jax.tree.map(lambda mi, v: (mi / c1) / (jnp.sqrt(v / c2) + eps), m, nu)
        return out, (trace_state, _TensorRmsState(count, nu))

    return optax.GradientTransformation(init, update)


def gate_transform(cfg) -> optax.GradientTransformation:
    """The gate group's transformation: Adam (``cfg.gate_optimizer="adam"``) or Adam with a
    per-tensor second moment (``"tensor_adam"``), step ``cfg.masks.gate_lr``."""
    if cfg.masks.gate_optimizer == "adam":
        return optax.adam(cfg.masks.gate_lr)
    return optax.chain(scale_by_tensor_rms(), optax.scale(-cfg.masks.gate_lr))


def decay_mask(scope: str, first_layer: str = "conv1"):
    """The `optax.add_decayed_weights` mask: True for the first layer's parameters (``scope="first"``)
    or for all of them (``"all"``)."""
    def mask(params):
        return jax.tree_util.tree_map_with_path(
            lambda path, _: scope == "all" or first_layer in jax.tree_util.keystr(path), params)
    return mask


def param_labels(model) -> nnx.State:
    """``"weights"`` / ``"gates"`` / ``"quant"`` per `nnx.Param` of ``model``, in the structure
    `nnx.Optimizer` hands to optax (the variables' raw values)."""
    def label(variable):
        if _GATES((), variable):
            return "gates"
        return "quant" if _QUANT((), variable) else "weights"
    return jax.tree.map(label, nnx.state(model, nnx.Param), is_leaf=lambda x: isinstance(x, nnx.Variable))


def optimizer(cfg, model, first_layer: str = "conv1") -> nnx.Optimizer:
    """One `nnx.Optimizer` over every `nnx.Param` of ``model``: `optax.multi_transform` of the three
    groups in the module docstring, labelled by variable type (`param_labels`).

    Args:
      cfg: `codesign.train.TrainConfig` (``lr``, ``weight_decay``, ``weight_decay_scope``,
        ``gate_lr``, ``gate_optimizer``, ``quant_lr``).
      model: the model to train.
      first_layer: the attribute name of its first layer (weight decay with scope "first").
    """
    groups = {
        "weights": optax.chain(optax.add_decayed_weights(cfg.optim.weight_decay,
                                                         mask=decay_mask(cfg.optim.weight_decay_scope, first_layer)),
                               optax.adam(cfg.optim.lr)),
        "gates": gate_transform(cfg),
        "quant": optax.chain(optax.scale_by_adam(), optax.scale_by_param_block_rms(1e-12), optax.scale(-cfg.quant.lr)),
    }
    inner = optax.multi_transform(groups, param_labels(model))
    # nnx.Optimizer initializes from the variables and updates with their raw values; the labels
    # have the raw-value structure, so the initialization sees raw values too.
    tx = optax.GradientTransformation(lambda params: inner.init(nnx.as_pure(params)), inner.update)
    return nnx.Optimizer(model, tx, wrt=nnx.Param)
