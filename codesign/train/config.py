"""`TrainConfig`: the hyper-parameters of one training run, as nested frozen sections (model,
masks, quant, cost, optim, distill), each checked against its own domains where it lives.

The sections are the structure; the *flat names* (`FLAT_FIELDS`: ``bits``, ``cost_weight``,
``edge_mask``, ...) are the vocabulary of the command line, of `codesign.models.MODEL_DEFAULTS`, of
the method registry's overrides (`codesign.experiment`) and of stored records and their keys
(`TrainConfig.flat`), so results stored before the sections existed still match.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import ClassVar, Optional, final

from codesign.hwmodel import MAPPING_OBJECTIVES
from codesign.kernels import REORDERINGS
from codesign.models import MODEL_DEFAULTS, MODELS
from codesign.models.layers import FP32_BITS, QUANTIZERS
from codesign.models.sage import AGGREGATORS as SAGE_AGGREGATORS

OBJECTIVES = MAPPING_OBJECTIVES
"""The `CostReport` totals a run can minimize (``cost.objective``): the ones each layer's mapping can
be chosen by (`codesign.hwmodel.MAPPING_OBJECTIVES`), so a run's objective is always a mapping."""
SELECTIONS = ("last", "best_val")
DECAY_SCOPES = ("first", "all")
GATE_OPTIMIZERS = ("adam", "tensor_adam")
EDGE_SPARSIFIERS = ("edge", "block", "scorer", "dropedge")
LEARNED_BITS = ("learned", "a2q")  # quantizer kinds whose bit-widths are parameters


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
        """Raises TypeError (not a number of the right kind) or ValueError (outside), naming ``name``."""
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
        """Raises ValueError naming ``name`` when ``v`` is not one of ``values``."""
        if not any(v is c or (type(v) is type(c) and v == c) for c in self.values):
            raise ValueError(f"{name}: must be one of {self.values}, got {v!r}")


_POSITIVE = Interval(0, lo_open=True)
_NON_NEGATIVE = Interval(0)
_FRACTION = Interval(0, 1, hi_open=True)  # [0, 1): a rate
_FLAG, _OPTIONAL_FLAG = OneOf((False, True)), OneOf((None, False, True))


def setting(default, domain, flat: Optional[str] = None):
    """A section field: its default, its domain (`Interval` / `OneOf`, checked on construction)
    and its flat name (`FLAT_FIELDS`; default: the field's own name). A new setting is this one
    line in its section."""
    return dataclasses.field(default=default, metadata={"domain": domain, "flat": flat})


class _Section:
    """Base of the frozen config sections: every field's domain (`setting`) checked on
    construction, then the section's own combination rules (``_check``)."""

    SECTION: ClassVar[str]

    def __post_init__(self):
        for f in dataclasses.fields(self):  # named by path, and by its flat name where that differs
            alias = f" ({f.metadata['flat']})" if f.metadata["flat"] else ""
            f.metadata["domain"].check(f"TrainConfig.{self.SECTION}.{f.name}{alias}", getattr(self, f.name))
        self._check()

    def _check(self) -> None:
        pass


@final
@dataclasses.dataclass(frozen=True)
class ModelConfig(_Section):
    """The architecture (defaults: Kipf & Welling 2017's GCN on Cora).

    Fields: ``name`` (a `codesign.models.MODELS` key), ``hidden`` width, ``dropout`` rate in [0, 1);
    model options passed to the model only when set: ``heads`` (GAT), ``aggr`` (GraphSAGE "mean" /
    "max"), ``k_hops`` and ``alpha`` (APPNP steps and teleport probability).
    """

    SECTION: ClassVar[str] = "model"
    OPTIONS: ClassVar[tuple] = ("heads", "aggr", "k_hops", "alpha")

    name: str = setting("gcn", OneOf(tuple(sorted(MODELS))), flat="model")
    hidden: int = setting(16, Interval(1, integer=True))
    dropout: float = setting(0.5, _FRACTION)
    heads: Optional[int] = setting(None, Interval(1, integer=True, optional=True))
    aggr: Optional[str] = setting(None, OneOf((None, *SAGE_AGGREGATORS)))
    k_hops: Optional[int] = setting(None, Interval(0, integer=True, optional=True))
    alpha: Optional[float] = setting(None, Interval(0, 1, optional=True))

    def options(self) -> dict:
        """The model-specific constructor keywords that are set (``OPTIONS`` not None)."""
        return {k: getattr(self, k) for k in self.OPTIONS if getattr(self, k) is not None}

    def _check(self) -> None:
        for name in self.options():
            if not MODELS[self.name].accepts(name):
                raise ValueError(f"TrainConfig.model.{name}: model {self.name!r} has no option {name!r}")


@final
@dataclasses.dataclass(frozen=True)
class MaskConfig(_Section):
    """The learned sparsifiers and their optimizer.

    Fields:
      edge, feature: learn an edge sparsifier / `FeatureMask`; None = only with a cost term.
      channel: learn a `ChannelMask` on the hidden channels.
      edge_sparsifier: "edge" (`EdgeMask`, a gate per edge), "block" (`BlockEdgeMask`, a gate per
        ``block_size`` tile after ``reorder``, costed as the BSR kernel), "scorer" (`EdgeScorer`,
        PTDNet-style) or "dropedge" (`DropEdge` at ``dropedge_rate``: a baseline, random in
        training, every edge at test time).
      gate_lr: step size of the gate logits; gate_optimizer: "adam" (per element) or "tensor_adam"
        (per-tensor second moment, `codesign.train.scale_by_tensor_rms`).
      edge_l0_weight: weight of the expected kept-edge fraction (the closed-form L0 norm of the
        hard-concrete gates, Louizos et al., ICLR 2018, Eq. 12).
    """

    SECTION: ClassVar[str] = "masks"

    edge: Optional[bool] = setting(None, _OPTIONAL_FLAG, flat="edge_mask")
    feature: Optional[bool] = setting(None, _OPTIONAL_FLAG, flat="feature_mask")
    channel: bool = setting(False, _FLAG, flat="channel_mask")
    edge_sparsifier: str = setting("edge", OneOf(EDGE_SPARSIFIERS))
    block_size: int = setting(16, Interval(1, integer=True))
    reorder: Optional[str] = setting("rcm", OneOf(REORDERINGS))
    dropedge_rate: float = setting(0.2, _FRACTION)
    gate_lr: float = setting(0.05, _POSITIVE)
    gate_optimizer: str = setting("adam", OneOf(GATE_OPTIMIZERS))
    edge_l0_weight: float = setting(0.0, _NON_NEGATIVE)


@final
@dataclasses.dataclass(frozen=True)
class QuantConfig(_Section):
    """Quantization.

    Fields:
      bits: fake-quantization bit-width of features and weights in [1, 32]; None or 32 = fp32 (the
        initial width of learned kinds).
      quantizer: a `codesign.models.layers.QUANTIZERS` kind.
      lr: relative step of the quantizer parameters (`QuantStep`, `BitParam`): Adam directions
        scaled by each tensor's RMS, so a step changes a step size or range by about ``lr`` of its
        value whatever its units.
      bits_weight: weight (per bit) of the penalty ``mean_t E[b_t]`` over the quantized tensors,
        independent of the hardware (Uhlich et al., ICLR 2020, Sec. 3). Needs a learned kind.
      pin_ranges: pin the ranges of the learned widths of weights and hidden features to the data
        max (`codesign.quant.pin_ranges`); the input quantizer keeps its learned range. Needs a
        learned kind.
    """

    SECTION: ClassVar[str] = "quant"

    bits: Optional[int] = setting(None, Interval(1, FP32_BITS, integer=True, optional=True))
    quantizer: str = setting("fixed", OneOf(QUANTIZERS))
    lr: float = setting(0.02, _POSITIVE, flat="quant_lr")
    bits_weight: float = setting(0.0, _NON_NEGATIVE)
    pin_ranges: bool = setting(False, _FLAG)

    def _check(self) -> None:
        for name, on in (("bits_weight", self.bits_weight > 0), ("pin_ranges", self.pin_ranges)):
            if on and self.quantizer not in LEARNED_BITS:
                raise ValueError(f"TrainConfig.quant.{name}: needs a learned bit-width quantizer "
                                 f"({' or '.join(map(repr, LEARNED_BITS))}), got quantizer={self.quantizer!r}")


@final
@dataclasses.dataclass(frozen=True)
class CostConfig(_Section):
    """The hardware cost in the loss (`codesign.train.objective`, `codesign.train.budget`).

    Fields:
      weight: weight of the log-cost penalty (0 = accuracy only).
      objective: which `CostReport` total is the cost: "energy_j", "latency_s" or "dram_bytes".
      budget: a fraction in (0, 1]: train under ``cost <= budget * dense_cost`` (a Lagrange
        multiplier) instead of the penalty (``weight`` must then be 0). Both sides are priced as
        reported, with the cheaper feature store (`codesign.train.loss_inputs`), so the budget
        bounds the reported ``modeled / dense_modeled``.
      budget_lr, budget_kp, budget_band: the multiplier's integral gain, proportional gain and
        integration band (units of the log cost ratio).
      sparse_features: let the loss price the input features stored sparse (CSR) where the
        target runs that cheaper: the model and its dense FP32 reference in the cost term are
        each priced with the cheaper of the dense and the CSR store by ``objective``
        (`codesign.train.store_costs`; the CSR first GEMM costs each kept column's nonzeros,
        every model's ``workload(feature_nnz=...)``), as `codesign.deploy` runs bag-of-words
        features where that is faster. Off: the penalty prices them stored dense (a budget prices
        both stores either way). The reported costs (``modeled``, ``dense_modeled``) take the
        cheaper store either way (`codesign.train.workload_inputs`). Not with GraphSAGE's max
        aggregation (it reads its input rows dense).
    """

    SECTION: ClassVar[str] = "cost"

    weight: float = setting(0.0, _NON_NEGATIVE, flat="cost_weight")
    objective: str = setting("energy_j", OneOf(OBJECTIVES))
    budget: Optional[float] = setting(None, Interval(0, 1, lo_open=True, optional=True))
    budget_lr: float = setting(0.1, _NON_NEGATIVE)
    budget_kp: float = setting(2.0, _NON_NEGATIVE)
    budget_band: float = setting(0.5, _NON_NEGATIVE)
    sparse_features: bool = setting(False, _FLAG)

    def _check(self) -> None:
        if self.budget is not None and self.weight != 0:
            raise ValueError(f"TrainConfig.cost.budget: set either budget or cost_weight (cost.weight), not both "
                             f"(got budget={self.budget}, cost_weight={self.weight})")

    @property
    def active(self) -> bool:
        """True when the loss has a cost term (a positive ``weight`` or a ``budget``)."""
        return self.weight > 0 or self.budget is not None


@final
@dataclasses.dataclass(frozen=True)
class OptimConfig(_Section):
    """The weights' optimizer and the schedule (defaults: Kipf & Welling 2017).

    Fields: ``lr`` (Adam), ``weight_decay`` and its ``weight_decay_scope`` ("first": the model's
    ``FIRST_LAYER``; "all": every weight and bias; gate logits and quantizer parameters never),
    ``epochs`` (full-batch steps), ``select`` ("last" epoch's weights, or "best_val":
    `codesign.train.select`, cost-aware when the loss has a cost term).
    """

    SECTION: ClassVar[str] = "optim"

    lr: float = setting(0.01, _POSITIVE)
    weight_decay: float = setting(5e-4, _NON_NEGATIVE)
    weight_decay_scope: str = setting("first", OneOf(DECAY_SCOPES))
    epochs: int = setting(200, Interval(1, integer=True))
    select: str = setting("last", OneOf(SELECTIONS))


@final
@dataclasses.dataclass(frozen=True)
class DistillConfig(_Section):
    """Self-distillation from a dense FP32 teacher of the same architecture (Hinton, Vinyals and
    Dean, 2015): ``weight * T^2 * KL(teacher || student)`` over all nodes, ``T = temperature``."""

    SECTION: ClassVar[str] = "distill"

    weight: float = setting(0.0, _NON_NEGATIVE, flat="distill_weight")
    temperature: float = setting(1.0, _POSITIVE, flat="distill_temperature")


SECTIONS = {"model": ModelConfig, "masks": MaskConfig, "quant": QuantConfig, "cost": CostConfig,
            "optim": OptimConfig, "distill": DistillConfig}
"""Section name -> its frozen dataclass, in `TrainConfig`'s field order."""

_SEED = Interval(0, integer=True)


def _flat_fields() -> dict:
    """flat name -> (section, field), from each field's `setting` ("seed": TrainConfig's own).

    Raises:
      RuntimeError: two fields share a flat name (a programming error caught at import)."""
    out = {}
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            flat = f.metadata["flat"] or f.name
            if flat in out or flat == "seed":
                raise RuntimeError(f"TrainConfig: flat name {flat!r} of {section}.{f.name} is already {out.get(flat)}")
            out[flat] = (section, f.name)
    return {**out, "seed": (None, "seed")}


FLAT_FIELDS = _flat_fields()
"""The flat vocabulary of the command line, `MODEL_DEFAULTS`, the method registry's overrides and
stored records and keys: flat name -> (section, field); ``"seed"`` -> (None, "seed")."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of one training run: ``model``, ``masks``, ``quant``, ``cost``, ``optim``,
    ``distill`` (frozen sections, each validated on construction) and the PRNG ``seed`` (init,
    dropout, gate sampling). What was measured with these settings is in docs/results.md.

    Build one by sections (``TrainConfig(quant=QuantConfig(bits=8))``) or by flat names
    (`from_flat`, `for_model`); `flat` gives the flat view that records and keys store.

    Raises (on construction):
      ValueError / TypeError: a field outside its domain or a section of the wrong type, or an
        invalid combination across sections; the message names the field.
    """

    model: ModelConfig = ModelConfig()
    masks: MaskConfig = MaskConfig()
    quant: QuantConfig = QuantConfig()
    cost: CostConfig = CostConfig()
    optim: OptimConfig = OptimConfig()
    distill: DistillConfig = DistillConfig()
    seed: int = 0

    def __post_init__(self):
        for name, cls in SECTIONS.items():
            if not isinstance(getattr(self, name), cls):
                got = type(getattr(self, name)).__name__
                raise TypeError(f"TrainConfig.{name}: must be a {cls.__name__}, got {got}")
        _SEED.check("TrainConfig.seed", self.seed)
        if self.cost.sparse_features and self.model.name == "sage" and self.model.aggr == "max":
            raise ValueError("TrainConfig.cost.sparse_features: GraphSAGE's max aggregation reads its input rows "
                             "dense (aggr='max'); use aggr='mean' or dense features")
        if self.masks.edge_l0_weight > 0 and not self.uses_edge_mask:
            raise ValueError("TrainConfig.masks.edge_l0_weight: needs an edge mask (masks.edge=True, or a cost term "
                             "with masks.edge left at None)")

    @classmethod
    def from_flat(cls, **flat) -> "TrainConfig":
        """A config from flat names (`FLAT_FIELDS`, e.g. ``bits=8, cost_weight=0.3``); the rest default.

        Raises:
          ValueError: an unknown flat name (the message lists the known ones), or an invalid field.
        """
        unknown = sorted(set(flat) - set(FLAT_FIELDS))
        if unknown:
            raise ValueError(f"TrainConfig: unknown field(s) {unknown}; choose from {sorted(FLAT_FIELDS)}")
        parts: dict = {name: {} for name in SECTIONS}
        top = {}
        for key, value in flat.items():
            section, field = FLAT_FIELDS[key]
            (top if section is None else parts[section])[field] = value
        return cls(**{name: SECTIONS[name](**kw) for name, kw in parts.items()}, **top)

    @classmethod
    def for_model(cls, model: str, **overrides) -> "TrainConfig":
        """``model``'s `MODEL_DEFAULTS`, then flat ``overrides``, then the field defaults.

        Raises:
          ValueError: unknown ``model`` or an invalid field.
        """
        if model not in MODELS:
            raise ValueError(f"TrainConfig.model.name: unknown model {model!r}; choose from {sorted(MODELS)}")
        return cls.from_flat(model=model, **{**MODEL_DEFAULTS.get(model, {}), **overrides})

    def flat(self) -> dict:
        """The flat view ``{flat name: value}`` in `FLAT_FIELDS` order (what records store)."""
        return {key: getattr(self if section is None else getattr(self, section), field)
                for key, (section, field) in FLAT_FIELDS.items()}

    def replace(self, **flat) -> "TrainConfig":
        """A copy with flat fields replaced (validated again).

        Raises:
          ValueError: an unknown flat name or an invalid field.
        """
        return type(self).from_flat(**{**self.flat(), **flat})

    @property
    def costed(self) -> bool:
        """True when the loss has a cost term (a positive cost weight or a budget)."""
        return self.cost.active

    @property
    def uses_edge_mask(self) -> bool:
        return self.costed if self.masks.edge is None else self.masks.edge

    @property
    def uses_feature_mask(self) -> bool:
        return self.costed if self.masks.feature is None else self.masks.feature


FIELD_DOMAINS = {**{f.metadata["flat"] or f.name: f.metadata["domain"]
                    for cls in SECTIONS.values() for f in dataclasses.fields(cls)}, "seed": _SEED}
"""Every flat field's domain (the command line derives its flag types from it)."""
