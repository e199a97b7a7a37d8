"""`TrainConfig`: the hyper-parameters of one training run, each field checked against its
domain in `FIELD_DOMAINS` (one table; the command line derives its flag types from it)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Optional

from codesign.kernels import REORDERINGS
from codesign.models import MODEL_DEFAULTS, MODELS
from codesign.models.layers import FP32_BITS, QUANTIZERS
from codesign.models.sage import AGGREGATORS as SAGE_AGGREGATORS

OBJECTIVES = ("energy_j", "latency_s", "dram_bytes")
SELECTIONS = ("last", "best_val")
DECAY_SCOPES = ("first", "all")
GATE_OPTIMIZERS = ("adam", "tensor_adam")
EDGE_SPARSIFIERS = ("edge", "block", "scorer", "dropedge")
MODEL_OPTIONS = ("heads", "aggr", "k_hops", "alpha")  # TrainConfig fields passed to the model when not None


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of one training run (defaults: Kipf & Welling 2017 for Cora).

    Every field's domain is in `FIELD_DOMAINS` (checked on construction); what was measured with
    these settings is in docs/results.md ("Training settings as measured").

    Fields:
      model: key of `codesign.models.MODELS`.
      hidden, dropout, lr, weight_decay, epochs: the usual (paper: 16, 0.5, 0.01, 5e-4, 200).
      bits: fake-quantization bit-width of features and weights in [1, 32]; None or 32 = fp32.
      cost_weight: weight of the log-cost term (0 = accuracy only; `codesign.train.objective`).
      objective: which `CostReport` total is the cost: "energy_j", "latency_s" or "dram_bytes".
      edge_mask, feature_mask: learn an edge sparsifier / `FeatureMask`; None = only with a cost term.
      gate_lr: step size of the gate logits.
      seed: PRNG seed for init, dropout and gate sampling.
      heads, aggr, k_hops, alpha: model options (GAT heads; GraphSAGE aggregator "mean"/"max";
        APPNP steps and teleport probability), passed to the model when not None.
      select: "last" (the final epoch's weights) or "best_val" (`codesign.train.select`: best
        validation accuracy; with a cost term cost-aware: the lowest validation objective in
        penalty mode, the best feasible epoch in budget mode).
      weight_decay_scope: "first" (the model's ``FIRST_LAYER``) or "all" (every weight and bias;
        gate logits and quantizer parameters never).
      budget: a fraction in (0, 1]: train under ``cost <= budget * dense_cost`` (a Lagrange
        multiplier, `codesign.train.budget`) instead of the ``cost_weight`` penalty (then 0).
      budget_lr, budget_kp, budget_band: the multiplier's integral gain, proportional gain and
        integration band (units of the log cost ratio).
      gate_optimizer: "adam" (per element) or "tensor_adam" (per-tensor second moment,
        `scale_by_tensor_rms`) for the gate logits.
      edge_sparsifier: the learned edge mask: "edge" (`EdgeMask`, a gate per edge), "block"
        (`BlockEdgeMask`, a gate per ``block_size`` tile after ``reorder``, costed as the BSR
        kernel), "scorer" (`EdgeScorer`, PTDNet-style) or "dropedge" (`DropEdge` at
        ``dropedge_rate``, a baseline: random in training, every edge at test time).
      channel_mask: learn a `ChannelMask` on the hidden channels.
      quantizer: `codesign.models.layers.QUANTIZERS` kind; ``bits`` is the initial width of learned ones.
      quant_lr: relative step of the quantizer parameters (`QuantStep`, `BitParam`): Adam
        directions scaled by each tensor's RMS, so a step changes a step size or range by about
        ``quant_lr`` of its value whatever its units.
      bits_weight: weight (per bit) of the penalty ``mean_t E[b_t]`` over the quantized tensors,
        independent of the hardware (Uhlich et al., ICLR 2020, Sec. 3). Needs "learned" / "a2q".
      pin_ranges: pin the ranges of the learned bit-width quantizers of weights and hidden features
        to the data max (`codesign.quant.pin_ranges`); the input quantizer keeps its learned range.
        Needs "learned" / "a2q".
      edge_l0_weight: weight of the expected kept-edge fraction (the closed-form L0 norm of the
        hard-concrete gates, Louizos et al., ICLR 2018, Eq. 12).
      distill_weight, distill_temperature: self-distillation from a dense FP32 teacher of the same
        architecture (Hinton, Vinyals and Dean, 2015): ``distill_weight * T^2 * KL(teacher ||
        student)`` over all nodes.

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
        for name in self.model_options():
            if not MODELS[self.model].accepts(name):
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
