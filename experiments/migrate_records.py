"""Re-price stored run records with today's cost model, or drop them.

A record keeps what training decided - its hardened kept fractions (``densities``) and bit-widths
(``bits``, ``layer_bits``) - so its modeled cost can be recomputed without training: `recost`
builds the record's model from its configuration, prices it on its target through the same entry
point as training (`codesign.train.store_costs` with the stored ``densities`` as the what-if
densities, the cheaper feature store by the run's objective, `codesign.train.cheapest_cost`), and
its best dense reference (`codesign.train.dense_reference`), both with every feature store the
model can read (`codesign.train.workload_inputs`). Learned widths enter as recorded: each quantizer
of the rebuilt model carries its stored ``layer_bits`` width (`codesign.quant.set_recorded_bits`;
a per-node width as its mean over the nodes, exact for the bytes priced). The record gets today's `run_key`
and `codesign.experiment.versions`, and ``recosted_from`` (the code version that trained it).

A record priced under the reference's former name ``"best_dense_store"`` with
``cost.sparse_features`` on was priced as today (both stores, the kept columns' own nonzeros) and
is re-keyed and re-stamped with its costs kept (`_priced_as_today`).
A record is dropped (and counted, by reason) where the stored numbers do not determine its cost:
  * ``config``: its configuration does not resolve to today's `TrainConfig` (an unknown field or
    value), or it has no ``config.dataset`` / ``config.hw``;
  * ``scale_out``: a partitioned run (``devices`` > 1: its halo traffic is not stored);
  * ``tiles``: a `BlockEdgeMask` run (which 16 x 16 tiles were kept is not stored);
  * ``layer_bits``: learned widths not stored, or stored under keys the model does not report
    (`codesign.quant.set_recorded_bits`);
  * ``fields``: no ``densities`` or ``test_accuracy`` / ``val_accuracy``;
  * ``superseded``: a tradeoff record from before ``versions`` trained with settings its method
    no longer uses on its dataset (stored ``config.settings`` differs from `settings_id` today),
    so its label would name another training.
Labels are brought to today's names: a record without ``versions`` written ``"codesign"`` without a
``revision`` was the joint method of issue 7, `RENAMED_BEFORE` (``codesign_v1``); a record with
``versions`` already has today's label; ``revision`` and ``settings`` leave the
config (a record's identity is its resolved configuration).
A CSR-stored input with a feature mask is priced at the kept columns' share of the nonzeros the
record stores (``feature_nnz_kept``, written by training since 2026-11-29); a record without it is
priced at the kept fraction of all nonzeros (uniform over columns) and says so in
``repriced_approx``: measured on four Cora GCN flagship records retrained, that approximation
was 0.1-13 % below the exact energy (the mask keeps the denser columns).
`tests/test_migrate_records.py` checks that a re-priced record's cost equals the one training wrote.

    python experiments/migrate_records.py [--results results] [--files a.jsonl,...] [--dry-run] [--every]
rewrites every ``<results>/*.jsonl`` whose records carry a ``config`` and ``modeled`` (atomically,
`codesign.results.write_text_atomic`) and prints per file: re-priced, dropped by reason, kept.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codesign.experiment import run_key, versions  # noqa: E402

IDENTITY_EXTRA = ("devices", "link", "int8_halo", "measured_on", "keep", "round", "trained_for_hw")
"""Stored config fields that are run identity beyond `TrainConfig` (scale-out, measuring machine,
a grid level that is no `TrainConfig` field: random kept fraction, UGS round, training target);
``None`` values are left out (`identity_extra`)."""


RENAMED_BEFORE = {("codesign", 0): "codesign_v1"}
"""``(method name written in a record, its revision) -> today's name``: the one name reused for other
settings (the flagship took ``codesign`` in issue 22)."""


def settings_id(method, dataset: str, model=None):
    """What ``experiments/tradeoff.py`` wrote as ``config.settings`` before records were keyed on
    their resolved configuration: `codesign.results.config_key` of the overrides re-chosen for
    ``model`` on ``dataset`` (their fields that differ from `TrainConfig`'s defaults), or None where
    they configure the same training as ``method.overrides``."""
    from codesign.results import config_key
    from codesign.train import TrainConfig
    scope = method.scope(dataset, model)
    if scope is None:
        return None
    default = TrainConfig().flat()
    own = lambda over: {k: v for k, v in over.items() if v != default.get(k, object())}
    chosen = own(method.by_dataset[scope])
    return None if chosen == own(method.overrides) else config_key(chosen)


def relabel(config: dict, legacy: bool = True):
    """``config`` with today's method label and without ``revision`` / ``settings``, or None where
    the record's settings are superseded (module docstring). ``legacy``: the record predates
    ``versions`` (labels of that era are renamed, `RENAMED_BEFORE`, and its ``settings`` are
    checked); a record with ``versions`` already carries today's label (its ``codesign`` is the
    flagship) and is identified by its resolved configuration."""
    from codesign.experiment import PAPER_METHODS
    out = {k: v for k, v in config.items() if k not in ("revision", "settings")}
    name = config.get("method")
    if not isinstance(name, str):
        return out
    if legacy:
        name = RENAMED_BEFORE.get((name, int(config.get("revision") or 0)), name)
    out["method"] = name
    method = PAPER_METHODS.get(name)
    if legacy and method is not None and config.get("dataset") and "train" in config:
        if config.get("settings") != settings_id(method, config["dataset"], config.get("model")):
            return None
    return out


def identity_extra(config: dict) -> dict:
    """The `IDENTITY_EXTRA` fields of a stored ``config`` that are set (not None)."""
    return {k: config[k] for k in IDENTITY_EXTRA if config.get(k) is not None}


def resolve_config(config: dict):
    """``(TrainConfig, extra identity)`` of a stored ``config``, or None where it does not resolve
    to today's `TrainConfig` (unknown field names are ignored only when they are labels:
    ``method``, ``revision``, ``settings``, ``dataset``, ``hw``)."""
    from codesign.train import FLAT_FIELDS, TrainConfig
    # experiments/tradeoff.py stores the TrainConfig under "train", the grid's labels beside it
    fields = {k: v for k, v in (config.get("train") or config).items() if k in FLAT_FIELDS}
    try:
        cfg = TrainConfig.from_flat(**fields)
    except (ValueError, TypeError):
        return None
    return cfg, identity_extra(config)


def _priced_as_today(record: dict, cfg) -> bool:
    """Whether ``record`` was priced exactly as today's `versions` price it, under an older name:
    the ``"best_dense_store"`` reference with ``cost.sparse_features`` on priced both feature
    stores for the model and its reference, which ``"cheaper_store_always"`` does for every run;
    its stored costs (the kept columns' own nonzeros included) are kept."""
    v, today = record.get("versions") or {}, versions()
    return (v.get("cost_model") == today["cost_model"] and v.get("reference") == "best_dense_store"
            and today["reference"] == "cheaper_store_always" and bool(cfg.cost.sparse_features)
            and {k: x for k, x in v.items() if k != "reference"} == {k: x for k, x in today.items() if k != "reference"})


def recost(record: dict, graph, hw, cache: dict | None = None):
    """``(new record, None)`` re-priced by today's cost model, or ``(None, reason)`` (module
    docstring) where the stored record does not determine its cost.

    Args:
      record: a stored run record (``config``, ``densities``, ``layer_bits``, ...).
      graph: its dataset (`codesign.graph.Graph`).
      hw: its target (`codesign.hwmodel.HardwareSpec`).
      cache: a dict kept across calls (the graph's workload inputs and dense references are computed
        once per dataset, target and architecture), or None.
    """
    from flax import nnx

    from codesign.quant import set_recorded_bits
    from codesign.train import build_model, cheapest_cost, dense_reference, workload_inputs
    config = record.get("config") or {}
    if not config.get("dataset") or not config.get("hw"):
        return None, "config"
    if any(k not in record for k in ("densities", "test_accuracy", "val_accuracy")):
        return None, "fields"
    if int(config.get("devices") or 1) > 1:
        return None, "scale_out"
    resolved = resolve_config(config)
    if resolved is None:
        return None, "config"
    labelled = relabel(config, legacy="versions" not in record)
    if labelled is None:
        return None, "superseded"
    cfg, extra = resolved
    if _priced_as_today(record, cfg):  # the same pricing under the reference's former name: re-keyed only
        new = {k: v for k, v in record.items() if k != "repriced_approx"}
        new["config"] = labelled
        new.update(key=run_key(config["dataset"], config["hw"], cfg, **extra), versions=versions(),
                   recosted_from=record.get("code_version"))
        return new, None
    if cfg.flat().get("edge_sparsifier") == "block":
        return None, "tiles"
    if "layer_bits" not in record and cfg.flat().get("quantizer") not in (None, "fixed"):
        return None, "layer_bits"  # learned widths, not stored
    try:
        cache = {} if cache is None else cache
        if ("inputs", id(graph), cfg.model) not in cache:
            cache["inputs", id(graph), cfg.model] = workload_inputs(cfg, graph)
        inputs = cache["inputs", id(graph), cfg.model]
        model = build_model(cfg, graph, nnx.Rngs(0))
        if record.get("layer_bits"):
            try:
                set_recorded_bits(model, record["layer_bits"])
            except ValueError:
                return None, "layer_bits"
        densities, approx, priced = dict(record["densities"]), None, inputs
        kept_nnz = record.get("feature_nnz_kept")
        if "feature_nnz" in inputs and densities.get("feature", 1.0) < 1.0:
            if kept_nnz is None:  # which columns were kept is not stored: a uniform share of the nonzeros
                approx = "CSR input priced at the kept fraction of all nonzeros (uniform over columns)"
            else:  # the kept columns' own nonzeros: scale the columns so that the what-if share is theirs
                priced = {**inputs, "feature_nnz": inputs["feature_nnz"] * (kept_nnz / max(densities["feature"], 1e-12))}
        store, rep = cheapest_cost(model, graph.n_nodes, graph.n_edges, hw, priced, densities=densities,
                                   objective=cfg.cost.objective)
        approx = approx if store == "csr" else None  # stored dense: the kept columns' nonzeros do not enter
        ref_key = ("dense", id(graph), hw.name, repr(cfg.model), cfg.cost.objective)
        if ref_key not in cache:
            cache[ref_key] = dense_reference(cfg, graph, hw, inputs)
        ref_store, ref = cache[ref_key]
    except ValueError:
        return None, "config"
    new = {k: v for k, v in record.items() if k not in ("breakdown", "dense_breakdown", "by_hw", "repriced_approx")}
    if approx is not None:
        new["repriced_approx"] = approx
    new["config"] = labelled
    new.setdefault("layer_bits", {})  # fixed widths: the configured bits, as training writes them
    new.update(key=run_key(config["dataset"], config["hw"], cfg, **extra), modeled=rep.summary(),
               dense_modeled=ref.summary(), feature_store=store, dense_feature_store=ref_store, versions=versions(),
               recosted_from=record.get("code_version"))
    return new, None


def migrate_file(path: Path, data_root=None, dry_run: bool = False, every: bool = False) -> collections.Counter:
    """Re-prices or drops every record of ``path`` (`recost`); returns the counts (``recosted``,
    ``dropped:<reason>``); rewrites the file atomically unless ``dry_run``, or leaves it untouched
    where no record in it could be re-priced (a file of other runs, not emptied). Records already of
    today's `versions` are kept as they are (``current``) unless ``every`` (re-price them too:
    after a change of `recost` itself)."""
    from codesign.data import load_dataset
    from codesign.hwmodel import presets
    from codesign.results import ResultsStore, write_text_atomic
    counts, out, graphs, cache = collections.Counter(), [], {}, {}
    for rec in ResultsStore(path).records():
        if rec.get("versions") == versions() and not every:
            counts["current"] += 1
            out.append(rec)
            continue
        cfg = rec.get("config") or {}
        try:
            if cfg.get("dataset") not in graphs:
                graphs[cfg.get("dataset")] = load_dataset(cfg["dataset"], root=data_root) if cfg.get("dataset") \
                    else None
            graph, hw = graphs[cfg.get("dataset")], presets.get(cfg["hw"]) if cfg.get("hw") else None
        except (ValueError, KeyError, FileNotFoundError):
            graph = hw = None
        new, why = recost(rec, graph, hw, cache) if graph is not None and hw is not None else (None, "config")
        counts["recosted" if new else f"dropped:{why}"] += 1
        if new:
            out.append(new)
    if not out:  # nothing here is a record this tool prices (e.g. select_flagship's runs): leave the file as it is
        return collections.Counter({"untouched (no record re-priced)": sum(counts.values())})
    if not dry_run:
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in out))
    return counts


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", type=Path, default=Path("results"))
    p.add_argument("--files", default=None, help="comma-separated file names under --results (default: every "
                   "*.jsonl whose first record has config and modeled)")
    p.add_argument("--data-root", default=None)
    p.add_argument("--dry-run", action="store_true", help="count, do not rewrite")
    p.add_argument("--every", action="store_true", help="re-price records of today's versions too")
    args = p.parse_args(argv)
    if args.files:
        paths = [args.results / f for f in args.files.split(",")]
    else:
        paths = []
        for path in sorted(args.results.glob("*.jsonl")):
            first = next((json.loads(line) for line in path.read_text().splitlines() if line.strip()), {})
            if "config" in first and "modeled" in first:
                paths.append(path)
    report = {}
    for path in paths:
        counts = migrate_file(path, args.data_root, args.dry_run, args.every)
        report[path.name] = dict(counts)
        print(f"{path.name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())), flush=True)
    return report


if __name__ == "__main__":
    main()
