"""The experiment layer: the methods of the paper as data, one record schema, one key scheme.

* `PAPER_METHODS`: the methods of the accuracy-vs-cost tradeoff (`experiments/tradeoff.py`), each a
  `Method`: its family ("reference" | "codesign" | "baseline"), its `TrainConfig` overrides (and
  the overrides re-chosen for a dataset, `Method.overrides_for`), what its levels are, the models it
  applies to.
* `METHODS` / `get_method(name)`: them by name; `codesign sweep --method NAME` runs any of them
  whose levels are cost weights or a single point. Ablation grids live with their script
  (``experiments/sparsify_quant.py``), plot styles with the figures (``paper_figures/styles.py``).
* Records (`make_record`): ``{"key", "config", <the trainer's result fields>, "versions",
  "code_version", "time"}``: ``key`` is `run_key` - a hash of the run's resolved configuration
  (every `TrainConfig` field, defaults included; dataset, hardware target, scale-out fields) and
  `versions` (cost-model version, reference definition) - never of a method name; ``config`` the
  full configuration (with the method's name as a label), the result fields those of
  `codesign.results.RUN_RECORD_FIELDS` (accuracies as fractions in [0, 1], ``modeled`` costs in
  s, J and bytes), ``code_version`` the git commit, ``time`` the UTC finish time (ISO 8601). Every
  record is appended through `codesign.results.ResultsStore` (atomic, locked, resumable);
  `load_grid` reads a file back as typed `RunRecord`s and refuses one that mixes versions.
* `run_grid`: the one resumable grid runner (``codesign sweep`` and ``experiments/tradeoff.py``):
  `GridPoint` s, each the seeds of one configuration trained together, their records appended as
  each finishes, the points whose records are all stored skipped.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
from typing import Callable, Iterable, Optional, Sequence

from codesign.models import MODELS
from codesign.results import code_version, config_key
from codesign.train import TrainConfig

__all__ = ["Method", "PAPER_METHODS", "DISTILL", "FLAGSHIP", "FLAGSHIP_SELECTION", "FLAGSHIP_BY_DATASET",
           "METHODS", "get_method", "run_key", "make_record", "versions",
           "COST_MODEL_VERSION", "REFERENCE", "RunRecord", "load_grid", "check_versions", "grid_versions",
           "scope_base", "parse_part", "take_part", "GridPoint", "run_grid"]


@dataclasses.dataclass(frozen=True)
class Method:
    """One method of the tradeoff: ``family`` ("codesign" | "baseline" | "reference"), the
    `TrainConfig` overrides (flat names), what its levels are ("cost" = cost weights or budgets,
    "keep", "round", or None for a single point), the models it applies to (None = all).
    ``by_dataset``: ``{scope: overrides}`` that replace ``overrides`` in that scope, a dataset (``"wordnet"``) or
    one model on a dataset (``"cora/gat"``,
    which wins over its dataset's entry): settings re-chosen on that scope's validation split,
    `FLAGSHIP_BY_DATASET`; `overrides_for` resolves them. A record's identity is the configuration
    these resolve to (`run_key`), never the method's name."""

    family: str
    overrides: dict
    levels: Optional[str] = None
    models: Optional[tuple] = None
    by_dataset: dict = dataclasses.field(default_factory=dict)

    def scope(self, dataset: Optional[str], model: Optional[str] = None) -> Optional[str]:
        """The ``by_dataset`` key that applies to ``model`` on ``dataset`` (``"dataset/model"``
        before ``"dataset"``), or None where ``overrides`` apply."""
        for key in ((f"{dataset}/{model}",) if model is not None else ()) + (dataset,):
            if key in self.by_dataset:
                return key
        return None

    def overrides_for(self, dataset: Optional[str], model: Optional[str] = None) -> dict:
        """The `TrainConfig` overrides for ``model`` on ``dataset``: its `scope`'s ``by_dataset``
        entry, else ``overrides``."""
        key = self.scope(dataset, model)
        return dict(self.overrides if key is None else self.by_dataset[key])

    @property
    def per_hw(self) -> bool:
        """Trained once per hardware target (the cost of that target is in its loss)."""
        return self.levels == "cost"


DISTILL = dict(distill_weight=1.0, distill_temperature=2.0)
"""The self-distillation settings of the ``*_distill`` methods (`TrainConfig` fields)."""


FLAGSHIP_SELECTION = dict(edge_l0_weight=2.4, distill_weight=3.0, bits_weight=0.1, gate_optimizer="tensor_adam")
"""The flagship's settings, chosen on validation accuracy only by ``experiments/select_flagship.py``
(Cora GCN, `h100` energy, cost weight 1, seeds 0 and 1; the rule: of the candidates whose mean
validation accuracy is within 1 point of the best candidate's, the one with the largest mean modeled
energy reduction): the edge L0 weight with the distillation weight, ``bits_weight``, the gate optimizer
and the bit-width granularity. Every candidate's measured validation accuracy and energy reduction:
``results/flagship_selection.json``, discussed in docs/results.md."""

FLAGSHIP = dict(edge_mask=True, feature_mask=True, channel_mask=True, quantizer="learned", bits=8, pin_ranges=True,
                select="best_val", distill_temperature=2.0, **FLAGSHIP_SELECTION)
"""The flagship co-design method's `TrainConfig` overrides (``codesign``): learned edge gates under
an L0 pressure with self-distillation from the dense FP32 model of the same architecture
(``edge_mask_distill_l0.8`` of ``experiments/sparsify_quant.py``), input-feature and hidden-channel
gates, learned per-tensor bit-widths from 8 bits with pinned ranges and a bit penalty
(``learned_bits_pinned_bw0.1``), the epoch selected by the validation objective; the target's
modeled cost in the loss at the grid's cost weights (`FLAGSHIP_SELECTION`: how the weights were chosen)."""

FLAGSHIP_BY_DATASET: dict = {"wordnet": dict(distill_weight=0.0, quant_lr=0.02, quantizer="a2q", edge_l0_weight=0.0),
                              "cora/gat": dict(edge_l0_weight=0.0)}
"""Per scope (a dataset, or ``"dataset/model"``), `TrainConfig` flat fields of the flagship re-chosen on
that scope's validation split by ``experiments/select_flagship.py --dataset NAME [--model MODEL]`` (its
plans and rule: that script's docstring); the flagship, its A²Q variant and its ablations use them
there (`Method.by_dataset`). Each scope's candidates, with their measured validation accuracy and
energy reduction: ``results/flagship_selection_<dataset>[_<model>].json`` (``_wordnet``,
``_cora_gat``), discussed in docs/results.md. WordNet's entry holds ``quantizer="a2q"``, so there the
flagship and its A²Q variant are one method."""


def scope_base(scope: str) -> dict:
    """The flagship settings a scope's `FLAGSHIP_BY_DATASET` entry refines: `FLAGSHIP` for a dataset
    scope (``"wordnet"``), `FLAGSHIP` under its dataset's entry for a model scope (``"cora/gat"``)."""
    dataset, _, model = scope.partition("/")
    return {**FLAGSHIP, **(FLAGSHIP_BY_DATASET.get(dataset, {}) if model else {})}


def _flagship(**change) -> dict:
    """`Method` keyword arguments of a method derived from the flagship: ``overrides`` = `FLAGSHIP`
    with ``change``, and ``by_dataset`` the same on top of each scope's `FLAGSHIP_BY_DATASET` entry
    (over its `scope_base`)."""
    return {"overrides": dict(FLAGSHIP, **change),
            "by_dataset": {key: {**scope_base(key), **sel, **change} for key, sel in FLAGSHIP_BY_DATASET.items()}}


LEARNED_QUANT_MODELS = tuple(name for name, m in MODELS.items() if m.accepts("quantizer"))
"""The models whose layers take a quantizer kind: the methods with learned bit-widths apply to these."""

CHANNEL_GATED_MODELS = tuple(name for name, m in MODELS.items()
                             if m.accepts("channel_mask") and m.accepts("edge_sparsifier"))
"""The models that take edge gates and a hidden-channel mask (``codesign_cpu`` prunes both)."""

_NO_EDGES = dict(edge_mask=False, edge_l0_weight=0.0)
_NO_FEATURES = dict(feature_mask=False, channel_mask=False)
_NO_BITS = dict(quantizer="fixed", bits=None, pin_ranges=False, bits_weight=0.0)
_NO_DISTILL = dict(distill_weight=0.0, distill_temperature=1.0)

PAPER_METHODS = {
    "dense": Method("reference", {}),
    "codesign": Method("codesign", levels="cost", models=LEARNED_QUANT_MODELS, **_flagship()),
    "codesign_a2q": Method("codesign", levels="cost", models=LEARNED_QUANT_MODELS, **_flagship(quantizer="a2q")),
    # the joint method of issue 7 (no distillation, learned ranges, no bit penalty)
    "codesign_v1": Method("codesign", dict(edge_mask=True, feature_mask=True, channel_mask=True, quantizer="learned",
                                           bits=8, gate_optimizer="tensor_adam"), "cost"),
    "codesign_int8": Method("codesign", dict(edge_mask=False, feature_mask=True, channel_mask=True, bits=8), "cost"),
    "codesign_cpu": Method("codesign", dict(edge_mask=True, feature_mask=True, channel_mask=True, bits=None,
                                            sparse_features=True, objective="latency_s", **DISTILL), "cost",
                           models=CHANNEL_GATED_MODELS),
    "edge_only": Method("codesign", dict(edge_mask=True, feature_mask=False, gate_optimizer="tensor_adam"), "cost"),
    "quant_only": Method("codesign", dict(edge_mask=False, feature_mask=False, quantizer="learned", bits=8), "cost"),
    # the flagship with one ingredient dropped (the "what each ingredient buys" ablation)
    "codesign_no_edges": Method("ablation", levels="cost", models=LEARNED_QUANT_MODELS, **_flagship(**_NO_EDGES)),
    "codesign_no_features": Method("ablation", levels="cost", models=LEARNED_QUANT_MODELS, **_flagship(**_NO_FEATURES)),
    "codesign_no_bits": Method("ablation", levels="cost", models=LEARNED_QUANT_MODELS, **_flagship(**_NO_BITS)),
    "codesign_no_distill": Method("ablation", levels="cost", models=LEARNED_QUANT_MODELS, **_flagship(**_NO_DISTILL)),
    "ugs_int8": Method("baseline", dict(bits=8), "round", models=("gcn",)),
    "degree_quant": Method("baseline", dict(bits=4, quantizer="degree")),
    # A^2Q (Zhu et al., ICLR 2023) as our quantizer supports it: per-node learned widths on node
    # features (initialised by in-degree), per-tensor on weights, pinned ranges, and a bit penalty
    # in place of the paper's memory penalty; no hardware cost in the loss
    "a2q": Method("baseline", dict(bits=8, quantizer="a2q", pin_ranges=True, bits_weight=0.1, select="best_val"),
                  models=LEARNED_QUANT_MODELS),
    "int8": Method("baseline", dict(bits=8)),
    "int4": Method("baseline", dict(bits=4)),
    "random_edges": Method("baseline", {}, "keep"),
    "random_edges_distill": Method("baseline", dict(DISTILL), "keep"),
    "dropedge": Method("baseline", dict(edge_mask=True, feature_mask=False, edge_sparsifier="dropedge",
                                        dropedge_rate=0.5)),
}


METHODS: dict[str, Method] = PAPER_METHODS
"""Every method of the library by name (`PAPER_METHODS`). The sparsifier / quantizer ablations and
their random-subgraph references are experiment grids: ``experiments/sparsify_quant.py``."""


def get_method(name: str) -> Method:
    """The `Method` called ``name``.

    Raises:
      ValueError: unknown ``name`` (the message lists the known ones).
    """
    if name not in METHODS:
        raise ValueError(f"method: unknown method {name!r}; choose from {', '.join(METHODS)}")
    return METHODS[name]


COST_MODEL_VERSION = 5
"""The version of the cost model (3: h100 / a100 are the fitted presets; 4: bias and activation
run in the producing kernel's epilogue on targets that fuse it, ``HardwareSpec.fuses_epilogue``;
5: a run's layers are mapped by its objective, ``hwmodel.estimate(mapping=)``) (`codesign.hwmodel`) that priced a record (``versions.cost_model``).
Bump it in the change that alters what a stored configuration costs; records of another version are
re-priced (``experiments/migrate_records.py``) or dropped, never mixed (`load_grid` refuses it)."""

REFERENCE = "cheaper_store_always"
"""The definition of the dense reference a record's ``dense_modeled`` prices (``versions.reference``):
``"cheaper_store_always"`` = the same architecture in FP32 with every mask off, its input features
stored dense or CSR, whichever the target runs cheaper (`codesign.train.build.dense_reference`),
for every configuration. A change of the definition gets a new name. The former
``"best_dense_store"`` meant the same but priced the CSR store only with
``TrainConfig.cost.sparse_features``, which no grid record set: their references were dense-stored."""


def versions() -> dict:
    """``{"cost_model": COST_MODEL_VERSION, "reference": REFERENCE}``: what a record's costs mean."""
    return {"cost_model": COST_MODEL_VERSION, "reference": REFERENCE}


def run_key(dataset: str, hw: str, cfg: TrainConfig, **extra) -> str:
    """A run's identity: `codesign.results.config_key` of its resolved configuration - every
    `TrainConfig` flat field (`TrainConfig.flat`, defaults included, so a default written out or
    left implicit is the same run), the dataset, the hardware target, ``extra`` identity (scale-out
    fields such as devices, link or topology, int8_halo; ``measured_on``) - and `versions` (a record priced by
    another cost model or against another reference is another record). A method's name is a
    label stored beside the key, never part of it.

    Raises:
      ValueError: ``extra`` names a `TrainConfig` field, ``dataset``, ``hw`` or ``versions``.
    """
    flat = cfg.flat()
    clash = sorted(set(extra) & (set(flat) | {"dataset", "hw", "versions"}))
    if clash:
        raise ValueError(f"run_key: extra identity field(s) {clash} clash with the configuration")
    return config_key({"dataset": dataset, "hw": hw, **flat, **extra, "versions": versions()})


def make_record(key: str, config: dict, result: dict) -> dict:
    """One results-file record (the schema in the module docstring), stamped with `versions`."""
    return {"key": key, "config": config, **result, "versions": versions(), "code_version": code_version(),
            "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One stored run, typed (`load_grid`).

    Fields: ``key`` (`run_key`), ``dataset``, ``hw`` (target preset name), ``method`` (a label, or
    None), ``config`` (the stored configuration: `TrainConfig` flat fields plus identity fields),
    ``seed``, ``test_accuracy`` / ``val_accuracy`` (fractions in [0, 1]), ``modeled`` /
    ``dense_modeled`` (``{"latency_s": s, "energy_j": J, "dram_bytes": bytes}``), ``densities``
    (kept fractions), ``bits`` (configured width, 32 for FP32), ``layer_bits`` (hardened width per
    tensor), ``versions`` (`versions`), ``extra`` (every other stored field, e.g. ``measured``)."""

    key: str
    dataset: str
    hw: Optional[str]
    method: Optional[str]
    config: dict
    seed: int
    test_accuracy: float
    val_accuracy: float
    modeled: dict
    dense_modeled: dict
    densities: dict
    bits: int
    layer_bits: dict
    versions: dict
    extra: dict

    def reduction(self, field: str = "energy_j") -> float:
        """``dense_modeled[field] / modeled[field]`` (x, > 1 = cheaper than the reference)."""
        return self.dense_modeled[field] / self.modeled[field]


_TYPED = ("key", "config", "test_accuracy", "val_accuracy", "modeled", "dense_modeled", "densities", "bits",
          "layer_bits", "versions")


def grid_versions(path, records) -> Optional[dict]:
    """The `versions` every record of ``records`` (dicts, of the file ``path``) was priced under
    (a record without ``versions`` counts as ``{"cost_model": None, "reference": None}``), or None
    for no records.

    Raises:
      ValueError: two records disagree: one line naming ``path``, the field and the two versions.
    """
    first = None
    for rec in records:
        ver = {k: (rec.get("versions") or {}).get(k) for k in ("cost_model", "reference")}
        if first is None:
            first = ver
        elif ver != first:
            field = "cost_model" if ver["cost_model"] != first["cost_model"] else "reference"
            raise ValueError(f"{path}: records disagree on {field} version: {first[field]!r} vs {ver[field]!r}")
    return first


def load_grid(path) -> list[RunRecord]:
    """The records of one results file as `RunRecord`s, in file order, a later record with the same
    key replacing an earlier one.

    Raises:
      FileNotFoundError: ``path`` missing.
      ValueError: a record lacks a field of `RunRecord` (one line: file, line's key, field), or two
        records disagree on ``versions.cost_model`` or ``versions.reference`` (one line naming the
        file and the two versions: re-price them, ``experiments/migrate_records.py``).
    """
    from codesign.results import ResultsStore
    if not os.path.exists(path):
        raise FileNotFoundError(f"load_grid: no results file {path}")
    latest: dict = {}
    for rec in ResultsStore(path).records():
        missing = [f for f in _TYPED if f not in rec]
        if missing:
            raise ValueError(f"{path}: record {rec.get('key')!r} lacks {missing[0]} (written before "
                             f"versioned records; run experiments/migrate_records.py)")
        latest[rec["key"]] = rec
    grid_versions(path, latest.values())
    out = []
    for rec in latest.values():
        cfg = rec["config"]
        out.append(RunRecord(
            key=rec["key"], dataset=cfg.get("dataset"), hw=cfg.get("hw"), method=cfg.get("method"), config=cfg,
            seed=int(cfg.get("seed", 0)), test_accuracy=float(rec["test_accuracy"]),
            val_accuracy=float(rec["val_accuracy"]), modeled=dict(rec["modeled"]),
            dense_modeled=dict(rec["dense_modeled"]), densities=dict(rec["densities"]), bits=int(rec["bits"]),
            layer_bits=dict(rec["layer_bits"]), versions=dict(rec["versions"]),
            extra={k: v for k, v in rec.items() if k not in _TYPED + ("code_version", "time")}))
    return out


def check_versions(path, records) -> None:
    """Refuses to add today's records to a results file holding records of other `versions`.

    Args:
      path: the file's path (for the message).
      records: its record dicts.

    Raises:
      ValueError: one line naming ``path`` and the stored and today's versions (a record without
        ``versions`` was written before records carried them: ``experiments/migrate_records.py``).
    """
    now = versions()
    for rec in records:
        ver = rec.get("versions")
        if ver is None:
            raise ValueError(f"{path}: holds records without versions (older cost model); today's are {now}: "
                             f"write to a fresh --out or run experiments/migrate_records.py")
        ver = {k: ver.get(k) for k in now}
        if ver != now:
            raise ValueError(f"{path}: holds records of versions {ver}, today's are {now}: write to a fresh "
                             f"--out or run experiments/migrate_records.py")


def parse_part(text: Optional[str]) -> Optional[tuple[int, int]]:
    """An experiment's ``--part K/N`` option as ``(K, N)`` (None for None): run only the K-th of N
    slices of its runs (`take_part`), so that N processes or machines share one resumable grid.

    Raises:
      ValueError: ``text`` not of the form K/N with integers ``1 <= K <= N`` (the message names ``--part``).
    """
    if text is None:
        return None
    try:
        k, n = (int(v) for v in text.split("/"))
    except ValueError:
        raise ValueError(f"--part: expected K/N (e.g. 1/3), got {text!r}") from None
    if not 1 <= k <= n:
        raise ValueError(f"--part: need 1 <= K <= N, got {text!r}")
    return k, n


def take_part(items: list, k: int, n: int) -> list:
    """The ``k``-th of ``n`` contiguous, nearly equal slices of ``items`` (1-based ``k``; the slices
    of ``k = 1..n`` concatenate to ``items``).

    Raises:
      ValueError: not ``1 <= k <= n``.
    """
    if not 1 <= k <= n:
        raise ValueError(f"--part: need 1 <= K <= N, got {k}/{n}")
    return items[(k - 1) * len(items) // n:k * len(items) // n]


@dataclasses.dataclass(frozen=True)
class GridPoint:
    """One point of a grid for `run_grid`: ``keys`` (every record key it writes: one per seed and
    target, `run_key`) and ``run`` (a callable that trains the point's seeds - together where
    `codesign.train.train_seeds` allows - and yields ``(key, config, result)`` per record as soon as
    it is finished; ``config`` the record's stored configuration, ``result`` its result fields)."""

    keys: tuple
    run: Callable[[], Iterable[tuple[str, dict, dict]]]


def run_grid(store, points: Sequence[GridPoint], desc: str = "grid") -> int:
    """Runs the points of a grid whose records are not all in ``store`` yet (resumable: a point
    interrupted mid-way runs again from scratch; its finished records are kept and not rewritten),
    appending each record (`make_record`) through ``store`` (a `codesign.results.ResultsStore`:
    atomic, locked) as soon as it is yielded.

    Args:
      store: the results file.
      points: `GridPoint` s, run in order.
      desc: the progress bar's label.

    Returns:
      The number of records appended.

    Raises:
      ValueError: ``store`` holds records of other `versions` (`check_versions`: one line).
    """
    import sys

    from tqdm import tqdm
    check_versions(store.path, store.records())
    done = store.done_keys()
    todo = [p for p in points if not all(k in done for k in p.keys)]
    print(f"{desc}: {len(todo)} of {len(points)} points to do; results in {store.path}", file=sys.stderr)
    written = 0
    for point in tqdm(todo, desc=desc, unit="point"):
        for key, config, result in point.run():
            if key in done:
                continue
            store.append(make_record(key, config, result))
            done.add(key)
            written += 1
    return written
