"""Full-batch co-design training: task loss + hardware cost term.

    penalty mode:  loss = cross_entropy(train nodes) + cost_weight * log(cost / dense_cost)
    budget mode:   loss = cross_entropy(train nodes) + lam * log(cost / (budget * dense_cost))

plus, when set in `TrainConfig`, terms independent of the hardware model: a bit-width penalty
(``bits_weight``), an L0 pressure on the kept edges (``edge_l0_weight``) and self-distillation
from a dense teacher over all nodes (``distill_weight``; see the fields).

``cost`` is the modeled inference cost (`codesign.hwmodel.estimate`) of the model at its
*expected* densities and bit-widths, so its gradient reaches the gate logits; ``dense_cost`` is
that of the dense FP32 model, so the term is scale-free (0 for the dense model). After training
the gates are hardened (deterministic hard-concrete, exact zeros) and the hardened model is
evaluated and costed at its hard densities.

Budget mode (``TrainConfig.budget``) enforces ``cost <= budget * dense_cost`` with a Lagrange
multiplier ``lam >= 0`` on the constraint ``g = log(hard_cost / (budget * dense_cost)) <= 0``,
updated once per epoch by projected dual ascent with a proportional term -- the PI multiplier
update of Sohrabi et al., "On PI Controllers for Updating Lagrange Multipliers in Constrained
Optimization", ICML 2024:

    xi  <- max(0, xi + budget_lr * g * [|g| < budget_band])      (integral, conditional)
    lam  = max(0, xi + budget_kp * g)                            (plus proportional)

Three choices, each measured on Cora GCN (feature mask + 8 bits, h100 energy, budget 0.1):
  * ``g`` uses the *hardened* cost (deterministic gates), the proxy-Lagrangian of Cotter et al.
    (ALT 2019), while the gradient uses the expected cost: the expected cost (P(z > 0) per
    gate) stays above the hardened one, and a multiplier driven by it over-prunes (hardened
    cost 0.36-0.72 of the budget).
  * Plain dual ascent (``budget_kp = 0``) winds up while the gates travel towards the pruning
    threshold and then over-prunes (0.68 of the budget); the proportional term drops ``lam``
    the epoch the hardened cost falls under the budget.
  * The integral only moves within ``budget_band`` of the budget (conditional integration, the
    anti-windup of K. J. Astrom & T. Hagglund, "PID Controllers", 1995, sec. 3.5), so it only
    removes the steady-state error near the budget.
Measured: hardened cost 0.96-1.02 of a 0.1 budget (2 seeds). With per-element Adam every
gate with a positive multiplier moves at full speed, so a loose budget (0.2, where 8-bit alone
is at 0.21) ends under it (0.83-0.85), and a tight one (0.05) needs more than 200 epochs.
GAT and GraphSAGE (their `MODEL_DEFAULTS`, best-validation selection made cost-aware, see
``TrainConfig.select``): 0.98 / 0.99 (GAT) and 0.95 / 1.00 (GraphSAGE) of a 0.1 budget, seeds 0 / 1.
A budget within ``budget_band`` of the starting cost winds the integral up while the gates
travel to the pruning threshold (~75 epochs): GAT at 0.15 overshoots to 0.90-0.93.

Optimizers (optax): weights use Adam with L2 weight decay on the first layer, as Kipf & Welling
(ICLR 2017) do (``weight_decay_scope="all"``: on every weight, as GAT, GraphSAGE and GIN do);
gate parameters (`codesign.sparsify.GATE_PARAMS`: gate logits and `EdgeScorer` weights) have their
own Adam with a larger step, because they must travel several units of log-odds within a few
hundred epochs; quantizer parameters (`QUANT_PARAMS`: LSQ steps, learned bit-width ranges) a third
optimizer with steps relative to their size, since their units differ per tensor.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import numbers
import time
from typing import Callable, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from codesign import hwmodel
from codesign.graph import Graph
from codesign.kernels import CooAdjacency
from codesign.models import MODEL_DEFAULTS, MODELS
from codesign.kernels.bsr import _REORDERINGS as REORDERINGS
from codesign.models.layers import FP32_BITS, QUANTIZERS
from codesign.models.sage import AGGREGATORS as SAGE_AGGREGATORS
from codesign.quant import BitParam, QuantStep, pin_ranges
from codesign.sparsify import GATE_PARAMS, BlockEdgeMask, DropEdge, EdgeScorer

OBJECTIVES = ("energy_j", "latency_s", "dram_bytes")
SELECTIONS = ("last", "best_val")
DECAY_SCOPES = ("first", "all")
GATE_OPTIMIZERS = ("adam", "tensor_adam")
EDGE_SPARSIFIERS = ("edge", "block", "scorer", "dropedge")
QUANT_PARAMS = nnx.Any(QuantStep, BitParam)
"""Filter of the quantizer optimizer group: learned step sizes and bit-width ranges."""
MODEL_OPTIONS = ("heads", "aggr", "k_hops", "alpha")  # TrainConfig fields passed to the model when not None


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of one training run (defaults: Kipf & Welling 2017 for Cora).

    Fields:
      model: key of `codesign.models.MODELS`.
      hidden, dropout, lr, weight_decay, epochs: the usual (paper: 16, 0.5, 0.01, 5e-4, 200).
      bits: fake-quantization bit-width of features and weights; None = fp32.
      cost_weight: weight of the log-cost term (0 = accuracy only).
      objective: which `CostReport` total is the cost: "energy_j", "latency_s" or "dram_bytes".
      edge_mask, feature_mask: learn an `EdgeMask` / `FeatureMask`; None = only when cost_weight > 0.
      gate_lr: Adam step size of the gate logits.
      seed: PRNG seed for init, dropout and gate sampling.
      heads, aggr, k_hops, alpha: model options (GAT heads; GraphSAGE aggregator "mean"/"max";
        APPNP steps and teleport probability), passed to the model's constructor when not None
        (None = the model's default).
      select: which weights are evaluated: "last" (after the final epoch) or "best_val" (those of
        the epoch with the highest validation accuracy of the deterministic (eval-mode) model,
        ties broken by lower validation loss). With a cost term the selection is cost-aware
        (`_track_best`): penalty mode keeps the epoch of the lowest validation *objective*
        (validation cross-entropy + ``cost_weight`` x log hardened cost ratio), budget mode the
        best validation accuracy among the epochs whose hardened cost meets the budget (the
        least violating one while none does). Selecting on accuracy alone picked an epoch before
        the gates had moved (hard-concrete gates need ~100 epochs to cross the pruning threshold
        at ``gate_lr`` 0.05): GAT / GraphSAGE at cost weight 0.3 reported densities 1.0.
      weight_decay_scope: "first" (the model's first layer, ``FIRST_LAYER``, default "conv1") or
        "all" (every weight and bias; gate logits never).
      budget: if set, a fraction in (0, 1]: train under the constraint ``cost <= budget *
        dense_cost`` (Lagrange multiplier, see the module docstring) instead of the fixed
        ``cost_weight`` penalty (which must then be 0). Masks default to on.
      budget_lr, budget_kp, budget_band: the multiplier's integral gain, proportional gain and
        integration band (units of the log cost ratio), see the module docstring.
      gate_optimizer: "adam" (per-element) or "tensor_adam" (per-tensor second moment,
        `scale_by_tensor_rms`) for the gate logits.
      edge_sparsifier: what the edge mask is when one is learned: "edge" (`EdgeMask`, a gate
        per edge), "block" (`BlockEdgeMask`, a gate per ``block_size`` tile after ``reorder``;
        the aggregation is then costed as the BSR kernel), "scorer" (`EdgeScorer`, PTDNet-style
        MLP on endpoint features) or "dropedge" (`DropEdge` at ``dropedge_rate``, a baseline:
        random in training, all edges at test time). GCN, GAT and GraphSAGE only for all but
        "edge" (for GraphSAGE the tiles are those of the graph without self-loops).
      channel_mask: learn a `ChannelMask` on the hidden channels (GCN, GraphSAGE; GAT: the
        heads x hidden concatenated channels of its first layer).
      quantizer: `codesign.models.layers.QUANTIZERS` kind ("fixed", "lsq", "learned",
        "degree", "a2q"; GCN, GAT and GraphSAGE only for all but "fixed"); ``bits`` is the
        initial width of learned ones.
      quant_lr: relative step of the quantizer parameters (`QuantStep`, `BitParam`): Adam
        directions scaled by each tensor's RMS (`optax.scale_by_param_block_rms`), so a step
        changes a step size or range by about ``quant_lr`` of its value whatever its units.
      bits_weight: weight (per bit) of a bit-width penalty ``bits_weight * mean_t E[b_t]`` over
        the model's quantized tensors (`layer_bits`), added to the loss. It is independent of the
        hardware model: the cost term weighs each tensor by its energy share, so on Cora the
        2708 x 1433 input features take all the pressure and the small tensors stay at their
        initial width; the penalty pushes every tensor, as Uhlich et al. (ICLR 2020, Sec. 3) do
        with a memory constraint. Needs a learned bit-width quantizer ("learned", "a2q").
        Measured on Cora GCN (learned quantizer from 8 bits, cost weight 0.3, 2 seeds): it acts
        all or nothing under the quantizers' Adam (weight 0.05: no tensor leaves 8 bits; 0.1, 0.3
        and 1.0: every tensor falls to 1-2 bits and test accuracy to 69-75 %). A hinge on the
        excess over a target mean (tried with target 4) was worse: 6-16 %. Both were measured with
        learned ranges; with ``pin_ranges`` it works (see there). Under the quantizers' relative
        Adam step a width moves at most about ``log2(1 + quant_lr)`` bits per epoch (0.03 at
        0.02), so the weight sets the direction, not the speed: the end widths depend on the
        initial width, ``quant_lr`` and ``epochs`` (pinned, 8 bits: weights 0.05-0.2 all end at
        (x0, w0, x1, w1) = (2, 5, 5, 4); from 6 bits, or at ``quant_lr`` 0.04, at means 2.5-3.0
        and validation accuracy 76-77 %, 2 seeds).
      pin_ranges: pin the range of the learned bit-width quantizers of the weights and hidden
        features to the data max (`codesign.quant.pin_ranges`: only the bit-width is learned);
        the first layer's input quantizer keeps its learned range (it may clip, which binarizes
        a bag-of-words input). Needs a learned bit-width quantizer ("learned", "a2q"). Measured
        on Cora GCN (learned quantizer from 8 bits, cost weight 0.3, best-validation epoch, 5
        seeds; dense FP32 81.02 %): hardened bits (x0, w0, x1, w1) = (2, 4.8, 3.6, 6.8), test
        80.52 +- 1.22 %; with ``bits_weight`` 0.1 (2, 5, 5, 4), 81.56 +- 0.92 %; learned ranges
        (last epoch) end at (2, 8, 7.8, 8), 80.82 %. Without a cost term at 8 bits (seed 0):
        75.4 % learned, 81.1 % all pinned.
      edge_l0_weight: weight of the expected kept-edge fraction (the hard-concrete gates' closed-form
        L0 norm over E, Louizos et al., ICLR 2018, Eq. 12) added to the loss: a sparsity pressure
        independent of the hardware model. On Cora GCN the modeled energy hardly depends on the
        edges (the 2708 x 1433 input GEMM dominates on h100 and gnnear alike: 93 % of the edges
        kept cost 0.999 of the dense energy), so the cost term alone does not prune them.
      distill_weight, distill_temperature: self-distillation from the dense model (Hinton,
        Vinyals and Dean, "Distilling the Knowledge in a Neural Network", 2015): a dense FP32
        teacher with this config's architecture is trained first (no sparsifiers, no cost),
        and ``distill_weight * T^2 * KL(softmax(teacher / T) || softmax(student / T))``,
        averaged over *all* nodes (transductive; no labels beyond the training ones), is added
        to the loss. Free edge gates otherwise only get task gradient within the receptive field
        of the 140 training nodes; the KL term tells every gate whether removing its edge
        changes a prediction. Measured on Cora GCN (5 seeds, `experiments/sparsify_quant.py`):
        the distillation also lifts a model trained on a *random* half of the edges (74.1 % ->
        79.1 % at weight 1, 80.3 % at weight 3, teacher of the full graph via ``train(
        teacher_logits=)``); learned gates add +1.6 points over it at weight 1, +0.1-0.7 at weight 3.

    `for_model` builds a config from a model's `codesign.models.MODEL_DEFAULTS`.
    """

    model: str = "gcn"
    hidden: int = 16
    dropout: float = 0.5
    lr: float = 0.01
    weight_decay: float = 5e-4
    epochs: int = 200
    bits: Optional[int] = None
    cost_weight: float = 0.0
    objective: str = "energy_j"
    edge_mask: Optional[bool] = None
    feature_mask: Optional[bool] = None
    gate_lr: float = 0.05
    seed: int = 0
    heads: Optional[int] = None
    aggr: Optional[str] = None
    k_hops: Optional[int] = None
    alpha: Optional[float] = None
    select: str = "last"
    weight_decay_scope: str = "first"
    budget: Optional[float] = None
    budget_lr: float = 0.1
    budget_kp: float = 2.0
    gate_optimizer: str = "adam"
    budget_band: float = 0.5
    edge_sparsifier: str = "edge"
    block_size: int = 16
    reorder: Optional[str] = "rcm"
    channel_mask: bool = False
    quantizer: str = "fixed"
    quant_lr: float = 0.02
    dropedge_rate: float = 0.2
    bits_weight: float = 0.0
    pin_ranges: bool = False
    edge_l0_weight: float = 0.0
    distill_weight: float = 0.0
    distill_temperature: float = 1.0

    @classmethod
    def for_model(cls, model: str, **overrides) -> "TrainConfig":
        """``model``'s `MODEL_DEFAULTS`, then ``overrides``, then the field defaults.

        Raises:
          ValueError: unknown ``model`` or an invalid field (see the field checks).
        """
        if model not in MODELS:
            raise ValueError(f"TrainConfig.model: unknown model {model!r}; choose from {sorted(MODELS)}")
        return cls(model=model, **{**MODEL_DEFAULTS.get(model, {}), **overrides})

    def model_options(self) -> dict:
        """The model-specific constructor keywords of this config (`MODEL_OPTIONS` that are set)."""
        return {k: getattr(self, k) for k in MODEL_OPTIONS if getattr(self, k) is not None}

    def __post_init__(self):
        """Checks every field against its domain (`FIELD_DOMAINS`), then the combinations.

        Raises:
          ValueError / TypeError: a field outside its domain or of the wrong type, or an invalid
            combination; the message names the field.
        """
        for f in dataclasses.fields(self):
            FIELD_DOMAINS[f.name].check(f"TrainConfig.{f.name}", getattr(self, f.name))
        if self.budget is not None and self.cost_weight != 0:
            raise ValueError(f"TrainConfig.budget: set either budget or cost_weight, not both "
                             f"(got budget={self.budget}, cost_weight={self.cost_weight})")
        if self.bits_weight > 0 and self.quantizer not in ("learned", "a2q"):
            raise ValueError(f"TrainConfig.bits_weight: needs a learned bit-width quantizer ('learned' or 'a2q'), "
                             f"got quantizer={self.quantizer!r}")
        if self.pin_ranges and self.quantizer not in ("learned", "a2q"):
            raise ValueError(f"TrainConfig.pin_ranges: needs a learned bit-width quantizer ('learned' or 'a2q'), "
                             f"got quantizer={self.quantizer!r}")
        if self.edge_l0_weight > 0 and not self.uses_edge_mask:
            raise ValueError("TrainConfig.edge_l0_weight: needs an edge mask (edge_mask=True, or a cost term "
                             "with edge_mask left at None)")
        accepted = inspect.signature(MODELS[self.model].__init__).parameters
        for name in self.model_options():
            if name not in accepted:
                raise ValueError(f"TrainConfig.{name}: model {self.model!r} has no option {name!r}")

    @property
    def costed(self) -> bool:
        """True when the loss has a cost term (a positive ``cost_weight`` or a ``budget``)."""
        return self.cost_weight > 0 or self.budget is not None

    @property
    def uses_edge_mask(self) -> bool:
        return self.costed if self.edge_mask is None else self.edge_mask

    @property
    def uses_feature_mask(self) -> bool:
        return self.costed if self.feature_mask is None else self.feature_mask



@dataclasses.dataclass(frozen=True)
class Interval:
    """A numeric field's domain: ``lo <= v <= hi`` (``<`` on an open end), finite, an integer
    where ``integer``; None too where ``optional``."""

    lo: float = -math.inf
    hi: float = math.inf
    lo_open: bool = False
    hi_open: bool = False
    integer: bool = False
    optional: bool = False

    def describe(self, with_none: bool = True) -> str:
        """The domain in words, e.g. "an integer in [1, 32] or None" ("or None" only ``with_none``)."""
        kind = "an integer" if self.integer else "a finite number"
        if math.isinf(self.lo) and math.isinf(self.hi):
            where = ""
        elif math.isinf(self.hi):
            where = f" {'>' if self.lo_open else '>='} {self.lo:g}"
        else:
            where = f" in {'(' if self.lo_open else '['}{self.lo:g}, {self.hi:g}{')' if self.hi_open else ']'}"
        return kind + where + (" or None" if self.optional and with_none else "")

    def check(self, name: str, v) -> None:
        if v is None and self.optional:
            return
        ok_type = (isinstance(v, numbers.Integral) if self.integer else isinstance(v, numbers.Real))
        if isinstance(v, bool) or not ok_type:
            raise TypeError(f"{name}: must be {self.describe()}, got {v!r} ({type(v).__name__})")
        v = float(v)
        inside = (math.isfinite(v) and (v > self.lo if self.lo_open else v >= self.lo)
                  and (v < self.hi if self.hi_open else v <= self.hi))
        if not inside:
            raise ValueError(f"{name}: must be {self.describe()}, got {v:g}")


@dataclasses.dataclass(frozen=True)
class OneOf:
    """A field's domain: one of ``values``, of the same type (so 1 is not True; None only if listed)."""

    values: tuple

    def check(self, name: str, v) -> None:
        if not any(v is c or (type(v) is type(c) and v == c) for c in self.values):
            raise ValueError(f"{name}: must be one of {self.values}, got {v!r}")


_POSITIVE = Interval(0, lo_open=True)
_NON_NEGATIVE = Interval(0)
_FRACTION = Interval(0, 1, hi_open=True)  # [0, 1): a rate
_FLAG, _OPTIONAL_FLAG = OneOf((False, True)), OneOf((None, False, True))
FIELD_DOMAINS = {
    "model": OneOf(tuple(sorted(MODELS))),
    "hidden": Interval(1, integer=True),
    "dropout": _FRACTION,
    "lr": _POSITIVE,
    "weight_decay": _NON_NEGATIVE,
    "epochs": Interval(1, integer=True),
    "bits": Interval(1, FP32_BITS, integer=True, optional=True),  # 32 (or None): no quantization
    "cost_weight": _NON_NEGATIVE,
    "objective": OneOf(OBJECTIVES),
    "edge_mask": _OPTIONAL_FLAG,
    "feature_mask": _OPTIONAL_FLAG,
    "gate_lr": _POSITIVE,
    "seed": Interval(0, integer=True),
    "heads": Interval(1, integer=True, optional=True),
    "aggr": OneOf((None, *SAGE_AGGREGATORS)),
    "k_hops": Interval(0, integer=True, optional=True),
    "alpha": Interval(0, 1, optional=True),
    "select": OneOf(SELECTIONS),
    "weight_decay_scope": OneOf(DECAY_SCOPES),
    "budget": Interval(0, 1, lo_open=True, optional=True),  # fraction of the dense cost
    "budget_lr": _NON_NEGATIVE,
    "budget_kp": _NON_NEGATIVE,
    "gate_optimizer": OneOf(GATE_OPTIMIZERS),
    "budget_band": _NON_NEGATIVE,
    "edge_sparsifier": OneOf(EDGE_SPARSIFIERS),
    "block_size": Interval(1, integer=True),
    "reorder": OneOf(REORDERINGS),
    "channel_mask": _FLAG,
    "quantizer": OneOf(QUANTIZERS),
    "quant_lr": _POSITIVE,
    "dropedge_rate": _FRACTION,
    "bits_weight": _NON_NEGATIVE,
    "pin_ranges": _FLAG,
    "edge_l0_weight": _NON_NEGATIVE,
    "distill_weight": _NON_NEGATIVE,
    "distill_temperature": _POSITIVE,
}
"""Every `TrainConfig` field's domain, checked by ``TrainConfig.__post_init__`` (a new field needs
an entry here; ``tests/test_errors_cli.py`` checks that the keys are the fields)."""

def build_model(cfg: TrainConfig, graph: Graph, rngs: nnx.Rngs, *, dense: bool = False):
    """The model of ``cfg`` for ``graph``; ``dense=True`` gives its dense FP32 reference.

    Raises:
      ValueError: a co-design option (``edge_sparsifier`` other than "edge", ``channel_mask``,
        ``quantizer`` other than "fixed") that ``cfg.model`` does not take.
    """
    kw = dict(n_edges=None if dense or not cfg.uses_edge_mask else graph.n_edges,
              feature_mask=False if dense else cfg.uses_feature_mask, bits=None if dense else cfg.bits)
    if not dense:
        if cfg.uses_edge_mask and cfg.edge_sparsifier != "edge":
            kw["edge_sparsifier"] = _edge_sparsifier(cfg, graph, rngs)
        if cfg.channel_mask:
            kw["channel_mask"] = True
        if cfg.quantizer != "fixed":
            kw["quantizer"] = cfg.quantizer
            if cfg.quantizer in ("degree", "a2q"):
                kw["in_degree"] = np.bincount(np.asarray(graph.receivers), minlength=graph.n_nodes) + 1
    accepted = inspect.signature(MODELS[cfg.model].__init__).parameters
    for name in ("edge_sparsifier", "channel_mask", "quantizer"):
        if name in kw and name not in accepted:
            raise ValueError(f"TrainConfig.{name}: model {cfg.model!r} does not take a {name}")
    model = MODELS[cfg.model](graph.n_features, cfg.hidden, graph.n_classes, dropout=cfg.dropout, rngs=rngs,
                              **kw, **cfg.model_options())
    if cfg.pin_ranges and not dense:  # the input quantizer keeps its learned range (TrainConfig.pin_ranges)
        pin_ranges(model, skip=(getattr(getattr(model, getattr(model, "FIRST_LAYER", "conv1")), "quant_x"),))
    return model


def _edge_sparsifier(cfg: TrainConfig, graph: Graph, rngs: nnx.Rngs):
    if cfg.edge_sparsifier == "block":
        return BlockEdgeMask.from_graph(graph.senders, graph.receivers, graph.n_nodes, cfg.block_size, cfg.reorder,
                                        self_loops=getattr(MODELS[cfg.model], "SELF_LOOPS", True), rngs=rngs)
    if cfg.edge_sparsifier == "scorer":
        return EdgeScorer(graph.n_features, rngs=rngs)
    return DropEdge(graph.n_edges, cfg.dropedge_rate, rngs=rngs)


def adjacency(graph: Graph) -> CooAdjacency:
    """The graph's edges as a `CooAdjacency` (the models add self-loops and normalize)."""
    return CooAdjacency(graph.senders, graph.receivers, graph.edge_weight, graph.n_nodes)


def masked_accuracy(logits: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    """Fraction of ``mask`` nodes whose argmax logit equals the label (float32 scalar)."""
    hit = (jnp.argmax(logits, -1) == y) & mask
    return hit.sum() / jnp.maximum(mask.sum(), 1)


def _masked_ce(logits, y, mask):
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
    return jnp.sum(ce * mask) / jnp.maximum(mask.sum(), 1)


def _decay_mask(scope: str, first_layer: str = "conv1"):
    """The `optax.add_decayed_weights` mask: True for the first layer's parameters (``scope="first"``:
    weight decay on layer 1 only, as Kipf & Welling do) or for all of them (``"all"``)."""
    def mask(params):
        return jax.tree_util.tree_map_with_path(
            lambda path, _: scope == "all" or first_layer in jax.tree_util.keystr(path), params)
    return mask


class _TensorRmsState(NamedTuple):
    count: jax.Array
    nu: optax.Updates


def scale_by_tensor_rms(b1: float = 0.9, b2: float = 0.999, eps: float = 1e-12) -> optax.GradientTransformation:
    """Adam with one second-moment scalar per tensor instead of one per element.

    ``m = b1 m + (1 - b1) g``, ``v = b2 v + (1 - b2) mean(g^2)`` (a scalar per leaf), update
    ``m_hat / (sqrt(v_hat) + eps)`` with Adam's bias corrections (Kingma & Ba, ICLR 2015, Alg. 1).

    Why our own: per-element Adam gives every gate logit the same step size whatever its
    gradient, so gates that the task needs and gates it does not move together, and a whole mask
    crosses the pruning threshold in the same few epochs. Normalizing per tensor keeps the
    step scale-free (the cost gradient per gate is ~1/E) while keeping the *relative* gradient
    magnitudes inside a mask, so the gates the loss cares least about close first. optax has
    per-element (``scale_by_adam``) and factored (``scale_by_factored_rms``, >= 2-D only) second
    moments, not a per-tensor one.
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


def gate_optimizer(cfg: "TrainConfig") -> optax.GradientTransformation:
    """The optimizer of the gate logits: Adam (``cfg.gate_optimizer="adam"``) or Adam with a
    per-tensor second moment (``"tensor_adam"``, `scale_by_tensor_rms`), step ``cfg.gate_lr``."""
    if cfg.gate_optimizer == "adam":
        return optax.adam(cfg.gate_lr)
    return optax.chain(scale_by_tensor_rms(), optax.scale(-cfg.gate_lr))


def dense_cost(cfg: TrainConfig, graph: Graph, hw: hwmodel.HardwareSpec,
               locality: Optional[hwmodel.LocalityProfile] = None) -> hwmodel.CostReport:
    """Modeled inference cost of the dense FP32 version of ``cfg``'s model on ``graph``."""
    ref = build_model(cfg, graph, nnx.Rngs(0), dense=True)
    return hwmodel.estimate(ref.workload(graph.n_nodes, graph.n_edges, hard=True, locality=locality), hw)


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


def teacher_config(cfg: TrainConfig) -> TrainConfig:
    """The dense FP32 teacher of ``cfg``'s self-distillation: the same model, data and training
    settings, with no sparsifier, quantizer, cost term or distillation."""
    return dataclasses.replace(cfg, cost_weight=0.0, budget=None, edge_mask=False, feature_mask=False,
                               channel_mask=False, bits=None, quantizer="fixed", bits_weight=0.0,
                               pin_ranges=False, edge_l0_weight=0.0, distill_weight=0.0, edge_sparsifier="edge")


_TEACHERS: dict = {}  # (id(graph), teacher config) -> (weakref to graph, logits, test accuracy)


def dense_teacher(graph: Graph, cfg: TrainConfig, hw: hwmodel.HardwareSpec) -> tuple[jax.Array, float]:
    """``(logits float32 [N, C], test accuracy)`` of ``cfg``'s dense teacher (`teacher_config`)
    on ``graph``, trained once per graph and teacher config in this process: the methods and cost
    weights of a sweep that share a seed share it (the teacher does not depend on ``hw``)."""
    import weakref
    tcfg = teacher_config(cfg)
    key = (id(graph), tcfg)
    hit = _TEACHERS.get(key)
    if hit is not None and hit[0]() is graph:
        return hit[1], hit[2]
    res = train(graph, tcfg, hw, return_logits=True)
    _TEACHERS[key] = (weakref.ref(graph), jax.lax.stop_gradient(res["logits"]), res["test_accuracy"])
    return _TEACHERS[key][1], _TEACHERS[key][2]


def train(graph: Graph, cfg: TrainConfig, hw: hwmodel.HardwareSpec,
          on_epoch: Optional[Callable[[int, dict], None]] = None,
          also_cost: Sequence[hwmodel.HardwareSpec] = (), return_logits: bool = False,
          teacher_logits: Optional[jax.Array] = None) -> dict:
    """Trains ``cfg``'s model on ``graph`` full-batch, hardens it, evaluates and costs it.

    Args:
      graph: a `Graph` with train/val/test masks.
      cfg: `TrainConfig`.
      hw: the `HardwareSpec` the cost term (and the reported cost) refers to.
      on_epoch: optional callback ``(epoch, {"loss", "cost_ratio"})`` (e.g. a progress bar).
      also_cost: more `HardwareSpec` targets to cost the hardened model on (training only ever
        sees ``hw``), e.g. to place one trained baseline on every target's front.
      return_logits: also return the hardened model's logits.
      teacher_logits: float [N, C] (N = ``graph.n_nodes``, C = its classes), the distillation
        teacher's logits when ``cfg.distill_weight > 0``; None = `dense_teacher` trained on
        ``graph``. Pass them to distill from a teacher trained on another graph, e.g. the full
        graph's dense model into a student trained on a random subset of its edges (the control
        of a learned edge mask: distillation without learned gates).

    Raises:
      ValueError: ``teacher_logits`` given while ``cfg.distill_weight`` is 0, or of the wrong
        shape, or not finite; ``cfg.budget`` below the cost floor (`_check_budget_feasible`).
      FloatingPointError: the final training loss is not finite; the message names the first
        epoch with a non-finite loss and the settings used.

    Returns:
      dict with ``test_accuracy``, ``val_accuracy``, ``train_accuracy`` (hardened model),
      ``modeled`` / ``dense_modeled`` (``latency_s``, ``energy_j``, ``dram_bytes`` of the hardened
      and the dense FP32 model), ``densities`` (hard kept fractions), ``bits``, ``final_loss``,
      ``train_time_s``, ``selected_epoch`` (the evaluated epoch: the last, or the best-validation
      one with ``cfg.select="best_val"``), ``breakdown`` / ``dense_breakdown`` (per-stage costs,
      `hwmodel.CostReport.breakdown`), and ``by_hw``: ``{name: {"modeled", "dense_modeled",
      "breakdown", "dense_breakdown"}}`` for ``hw`` and every ``also_cost`` target. With
      ``cfg.distill_weight > 0`` also ``teacher_accuracy`` (test accuracy of the dense teacher);
      with ``return_logits``, ``logits`` (the hardened model's float32 [N, C] output).
    """
    teacher = None
    if teacher_logits is not None:
        teacher = _check_teacher_logits(teacher_logits, graph, cfg)
        teacher_accuracy = float(masked_accuracy(teacher, graph.y, graph.test_mask))
    elif cfg.distill_weight > 0:
        teacher, teacher_accuracy = dense_teacher(graph, cfg, hw)
    locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
    dense = dense_cost(cfg, graph, hw, locality)
    dense_c = float(getattr(dense, cfg.objective))
    model = build_model(cfg, graph, nnx.Rngs(params=cfg.seed, dropout=cfg.seed + 1, gates=cfg.seed + 2, quant=cfg.seed + 3))
    if cfg.budget is not None:
        _check_budget_feasible(cfg, model, graph, hw, locality, dense_c)
    model.train()
    weights = nnx.All(nnx.Param, nnx.Not(nnx.Any(GATE_PARAMS, QUANT_PARAMS)))
    decay = _decay_mask(cfg.weight_decay_scope, getattr(model, "FIRST_LAYER", "conv1"))
    opt_w = nnx.Optimizer(model, optax.chain(optax.add_decayed_weights(cfg.weight_decay, mask=decay),
                                             optax.adam(cfg.lr)), wrt=weights)
    opt_g = nnx.Optimizer(model, gate_optimizer(cfg), wrt=GATE_PARAMS)
    opt_q = nnx.Optimizer(model, optax.chain(optax.scale_by_adam(), optax.scale_by_param_block_rms(1e-12),
                                             optax.scale(-cfg.quant_lr)), wrt=QUANT_PARAMS)
    adj, n, e = adjacency(graph), graph.n_nodes, graph.n_edges

    log_budget = 0.0 if cfg.budget is None else math.log(cfg.budget)

    def loss_fn(m, g, adj, lam):
        logits = m(g.x, adj)
        loss = _masked_ce(logits, g.y, g.train_mask)
        ratio = getattr(hwmodel.estimate(m.workload(n, e, locality=locality), hw), cfg.objective) / dense_c
        weight = cfg.cost_weight if cfg.budget is None else lam[1]
        loss = loss + weight * (jnp.log(ratio) - log_budget)
        if cfg.bits_weight > 0:
            loss = loss + cfg.bits_weight * jnp.mean(jnp.stack(list(m.layer_bits().values())))
        if cfg.edge_l0_weight > 0:
            loss = loss + cfg.edge_l0_weight * m.densities()["edge"]
        if teacher is not None:
            loss = loss + cfg.distill_weight * distill_kl(logits, teacher, cfg.distill_temperature)
        return loss, ratio

    @nnx.jit
    def step(m, opt_w, opt_g, opt_q, g, adj, lam):
        (loss, ratio), grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, nnx.Param), has_aux=True)(
            m, g, adj, lam)
        g_gates, g_quant, g_weights = nnx.split_state(grads, GATE_PARAMS, QUANT_PARAMS, ...)
        opt_w.update(m, g_weights)
        opt_g.update(m, g_gates)
        opt_q.update(m, g_quant)
        hard = jnp.ones((), jnp.float32)  # hardened cost ratio of the updated model (cost-aware selection)
        if cfg.costed:
            hard = getattr(hwmodel.estimate(m.workload(n, e, hard=True, locality=locality), hw),
                           cfg.objective) / dense_c
        if cfg.budget is not None:  # PI multiplier update on the hardened cost (module docstring)
            gap = jnp.log(hard) - log_budget
            xi = jnp.maximum(0.0, lam[0] + cfg.budget_lr * gap * (jnp.abs(gap) < cfg.budget_band))
            lam = jnp.stack([xi, jnp.maximum(0.0, xi + cfg.budget_kp * gap)])  # [integral, multiplier]
        return loss, ratio, lam, hard

    t0 = time.perf_counter()
    loss = ratio = jnp.nan
    lam = jnp.zeros((2,), jnp.float32)
    best = _BestVal.start(model) if cfg.select == "best_val" else None
    first_bad = jnp.int32(-1)  # first epoch with a non-finite loss (-1: none), kept on the device
    for epoch in range(cfg.epochs):
        loss, ratio, lam, hard = step(model, opt_w, opt_g, opt_q, graph, adj, lam)
        first_bad = _first_nonfinite(first_bad, epoch, loss)
        if best is not None:
            model.eval()  # validation forward: no dropout, deterministic gates
            best = _track_best(model, graph, adj, best, epoch, *_selection_terms(cfg, hard))
            model.train()
        if on_epoch is not None:
            on_epoch(epoch, {"loss": loss, "cost_ratio": ratio, "multiplier": lam[1]})
    jax.block_until_ready(loss)
    train_time_s = time.perf_counter() - t0
    if best is not None:
        nnx.update(model, best.params)
    if not np.isfinite(float(loss)):
        raise FloatingPointError(_divergence_message(cfg, float(loss), int(first_bad)))

    model.eval()  # harden: deterministic gates, exact zeros for pruned edges/features
    logits = _eval_logits(model, graph.x, adj)
    by_hw = {}
    for target in (hw, *also_cost):
        rep = hwmodel.estimate(model.workload(n, e, hard=True, locality=locality), target)
        ref = dense if target is hw else dense_cost(cfg, graph, target, locality)
        by_hw[target.name] = {"modeled": rep.summary(), "dense_modeled": ref.summary(),
                              "breakdown": rep.breakdown(target), "dense_breakdown": ref.breakdown(target)}
    acc = lambda mask: float(masked_accuracy(logits, graph.y, mask))
    extra = {}
    if teacher is not None:
        extra["teacher_accuracy"] = teacher_accuracy
    if return_logits:
        extra["logits"] = logits
    return {**extra,
        "test_accuracy": acc(graph.test_mask), "val_accuracy": acc(graph.val_mask),
        "train_accuracy": acc(graph.train_mask),
        "modeled": by_hw[hw.name]["modeled"], "dense_modeled": dense.summary(),
        "breakdown": by_hw[hw.name]["breakdown"], "dense_breakdown": by_hw[hw.name]["dense_breakdown"],
        "densities": {k: float(v) for k, v in model.densities(hard=True).items()},
        "bits": cfg.bits or 32,
        "layer_bits": {k: float(v) for k, v in model.layer_bits(hard=True).items()} if hasattr(model, "layer_bits") else {},
        "tiles": _tile_stats(model),
        "final_loss": float(loss), "final_cost_ratio": float(ratio),
        "multiplier": float(lam[1]), "train_time_s": train_time_s, "selected_epoch": cfg.epochs - 1 if best is None else int(best.epoch),
        "by_hw": by_hw,
    }


@jax.jit
def _first_nonfinite(first_bad: jax.Array, epoch, loss: jax.Array) -> jax.Array:
    """``epoch`` if ``loss`` is the first non-finite loss seen, else ``first_bad`` (-1: none yet)."""
    return jnp.where((first_bad < 0) & ~jnp.isfinite(loss), epoch, first_bad).astype(jnp.int32)


def _divergence_message(cfg: TrainConfig, final_loss: float, first_bad: int) -> str:
    """One line: where the loss stopped being finite and the settings that were used."""
    cost = f"budget={cfg.budget}" if cfg.budget is not None else f"cost_weight={cfg.cost_weight}"
    return (f"training diverged: loss not finite from epoch {first_bad} of {cfg.epochs} (final loss {final_loss}); "
            f"settings used: model={cfg.model}, lr={cfg.lr}, gate_lr={cfg.gate_lr}, weight_decay={cfg.weight_decay}, "
            f"{cost}, bits={cfg.bits or 32}, quantizer={cfg.quantizer}, seed={cfg.seed}")


def _check_teacher_logits(teacher_logits, graph: Graph, cfg: TrainConfig) -> jax.Array:
    """``teacher_logits`` as a float32 [N, C] constant (no gradient), checked against ``graph``.

    Raises:
      ValueError: ``cfg.distill_weight`` is 0 (the logits would be ignored), the shape is not
        ``(graph.n_nodes, graph.n_classes)`` or a value is not finite.
    """
    if not cfg.distill_weight > 0:
        raise ValueError("train: teacher_logits given but TrainConfig.distill_weight is 0 (they would be ignored)")
    t = jnp.asarray(teacher_logits, jnp.float32)
    want = (graph.n_nodes, graph.n_classes)
    if t.shape != want:
        raise ValueError(f"train: invalid teacher_logits.shape={t.shape}, expected (n_nodes, n_classes)={want}")
    if not bool(jnp.all(jnp.isfinite(t))):
        raise ValueError("train: teacher_logits has non-finite values")
    return jax.lax.stop_gradient(t)


def _check_budget_feasible(cfg: TrainConfig, model, graph: Graph, hw: hwmodel.HardwareSpec,
                           locality, dense_c: float) -> None:
    """Raises ValueError when ``cfg.budget`` is below the cost floor: the modeled cost of the
    untrained ``model`` with every mask the config learns fully closed (the cost left by
    self-loops, kept layers, the bits)."""
    closed = {k: 0.0 for k, on in (("edge", cfg.uses_edge_mask), ("feature", cfg.uses_feature_mask)) if on}
    floor = float(getattr(hwmodel.estimate(model.workload(graph.n_nodes, graph.n_edges, hard=True, densities=closed,
                                                          locality=locality), hw), cfg.objective)) / dense_c
    if cfg.budget < floor:
        raise ValueError(f"TrainConfig.budget: infeasible budget {cfg.budget:g}: the {cfg.model} model with every "
                         f"learned mask closed still costs {floor:.4g} x the dense {cfg.objective} on {hw.name}")


def _tile_stats(model) -> Optional[dict]:
    """Hardened tile counts of a `BlockEdgeMask` model: ``kept`` and ``total`` B x B tiles (the
    kernel's nnz_blocks after and before pruning) and ``kept_fraction``; None for other models."""
    mask = getattr(model, "edge_mask", None)
    if not isinstance(mask, BlockEdgeMask):
        return None
    kept = float(mask.hard_kept_tiles())
    return {"kept": kept, "total": mask.n_tiles, "kept_fraction": kept / mask.n_tiles,
            "gated": mask.n_gated_tiles, "block_size": mask.block_size}


@nnx.jit
def _eval_logits(model, x, adj):
    return model(x, adj)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _BestVal:
    """The best-validation epoch so far: ``val_accuracy``, ``val_loss`` (float32 scalars; the
    loss includes the penalty-mode cost term), ``epoch`` (int32 scalar, -1 before the first), a
    copy of the model's `nnx.Param` state then, and its budget ``violation`` (float32 scalar,
    see `_selection_terms`)."""

    val_accuracy: jax.Array
    val_loss: jax.Array
    epoch: jax.Array
    params: nnx.State
    violation: jax.Array

    @classmethod
    def start(cls, model) -> "_BestVal":
        return cls(jnp.float32(-1.0), jnp.float32(jnp.inf), jnp.int32(-1),
                   jax.tree.map(jnp.copy, nnx.state(model, nnx.Param)), jnp.float32(jnp.inf))


def _selection_terms(cfg: TrainConfig, hard_ratio: jax.Array) -> tuple:
    """``(cost_term, violation, by_objective)`` of `_track_best` for ``cfg`` at the epoch's hardened
    cost ratio (float32 scalar, cost / dense cost):

      no cost term: ``(0, 0, False)``: best validation accuracy, ties by validation loss;
      penalty mode: ``(cost_weight * log(ratio), 0, True)``: lowest validation objective (the
        training loss's form evaluated on the validation nodes);
      budget mode: ``(0, max(0, log(ratio / budget)), False)``: the least violating epoch, and
        among feasible ones (violation 0) the best validation accuracy.
    """
    zero = jnp.zeros((), jnp.float32)
    if cfg.budget is not None:
        return zero, jnp.maximum(0.0, jnp.log(hard_ratio) - math.log(cfg.budget)), jnp.asarray(False)
    if cfg.cost_weight > 0:
        return cfg.cost_weight * jnp.log(hard_ratio), zero, jnp.asarray(True)
    return zero, zero, jnp.asarray(False)


@nnx.jit
def _track_best(model, g, adj, best: _BestVal, epoch, cost_term=0.0, violation=0.0, by_objective=False) -> _BestVal:
    """``best`` updated with the (eval-mode) ``model`` of ``epoch`` if it is better: with
    ``by_objective``, a lower validation loss + ``cost_term``; otherwise a lower ``violation``
    (budget mode: how far the hardened cost is above the budget, 0 when within), then a higher
    validation accuracy, then a lower validation loss (see `_selection_terms`). On device: no
    host sync per epoch."""
    logits = model(g.x, adj)
    acc = masked_accuracy(logits, g.y, g.val_mask)
    loss = _masked_ce(logits, g.y, g.val_mask) + cost_term
    by_acc = (acc > best.val_accuracy) | ((acc == best.val_accuracy) & (loss < best.val_loss))
    better = jnp.where(by_objective, loss < best.val_loss,
                       (violation < best.violation) | ((violation == best.violation) & by_acc))
    pick = lambda new, old: jnp.where(better, new, old)
    return _BestVal(pick(acc, best.val_accuracy), pick(loss, best.val_loss), pick(jnp.int32(epoch), best.epoch),
                    jax.tree.map(pick, nnx.state(model, nnx.Param), best.params), pick(violation, best.violation))
