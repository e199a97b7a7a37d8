"""How far the cost model's answers move when each assumed constant moves over its plausible range.

For every entry of `codesign.hwmodel.presets.ASSUMPTIONS` that has a value and a range, the preset(s)
it enters are rebuilt with the constant at the low and the high end of its range, and two design
points of the 2-layer GCN on Cora (N 2,708, E 10,556 + self-loops, 1433-16-7) are costed: dense fp32
and a compressed one (8-bit, half the edges, 30 % of the input features). Reported per assumption
and end: latency and energy of both points relative to the nominal preset, the compressed point's
savings (dense / compressed) and whether any mapping choice (dataflow order, near-memory or host
aggregation) flips. A conclusion that holds at both ends of every range does not depend on the
model's unknowns.

The same changed presets then cost the main job's front (`front_sensitivity`): every 2-layer GCN
record of ``results/cora_tradeoff.jsonl`` (written by ``experiments/tradeoff.py``) on a target that
some assumption enters (`variants`; h100 and gnnear of the job's h100 / gnnear / hygcn) is rebuilt
from its own fields (`record_design`: kept edge / feature / hidden-channel fractions and per-layer
bit-widths, on Cora's measured `LocalityProfile`, costed as tradeoff.py costs them: `estimate`'s
default costs, relaxed between precision tiers and memory granules), grouped into points by
`paper_figures.fronts.load_tradeoff` (one point per method and level, mean accuracy over seeds) and
costed with the nominal preset and with each assumption at both ends. Reported per target,
assumption and end: the chosen point (the largest energy reduction within 1 point of the dense
reference's validation accuracy, >= 5 seeds: `paper_figures.fronts.best_point_within`, as
``paper_figures/summary.py`` chooses) nominal and changed, how many points change membership of the accuracy-vs-energy Pareto front (`paper_figures.fronts.front`),
and the spread over points of energy changed / nominal. First, the nominal rebuild is checked
against each record's stored ``modeled`` and ``dense_modeled`` costs.

    python experiments/hwmodel_sensitivity.py            # all assumptions -> results/hwmodel_sensitivity.json
    python experiments/hwmodel_sensitivity.py --quick    # two assumptions (CI smoke run)
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

if __package__ in (None, ""):  # run as a script: make `paper_figures` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flax import nnx  # noqa: E402

from codesign.hwmodel import Workload, estimate, presets  # noqa: E402
from codesign.models import GCN  # noqa: E402
from codesign.quant import set_recorded_bits  # noqa: E402
from codesign.hwmodel.spec import HOROWITZ_DRAM_PJ_PER_BYTE  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402
from codesign.train import cheapest_cost  # noqa: E402
from paper_figures import fronts  # noqa: E402

N_NODES, N_EDGES, DIMS = 2708, 10556, (1433, 16, 7)
POINTS = {"dense_fp32": (1.0, 1.0, 32.0), "int8_edges0.5_features0.3": (0.5, 0.3, 8.0)}
LAYER_BITS = ("x0", "w0", "x1", "w1")
TRADEOFF = "results/cora_tradeoff.jsonl"  # the main job's records (experiments/tradeoff.py)
LOSS_PTS = 1.0  # accuracy loss allowed for the chosen point, percentage points (paper_figures/summary.py)
REBUILD_TOL = 0.01  # nominal rebuild vs a record's stored cost: relative difference counted as a mismatch


def workload(edge_density: float, feature_density: float, bits, *, channel_density: float = 1.0,
             locality=None, feature_nnz=None) -> Workload:
    """The 2-layer Cora GCN (fp32 logits) at the given kept fractions and bit-widths:
    `codesign.models.GCN.workload` of a GCN 1,433-16-7 (a channel mask exactly when
    ``channel_density`` < 1, no edge mask; features stored dense, or CSR with ``feature_nnz``) whose
    four quantizers carry ``bits``, with the kept fractions given as its ``densities`` override.

    Args:
      edge_density, feature_density, channel_density: kept fractions of the 10,556 edges (the 2,708
        self-loops always kept), of the 1,433 input features and of the 16 hidden channels.
      bits: one bit-width for every tensor, or ``{"x0", "w0", "x1", "w1"}`` per layer (the inputs and
        weights of layers 0 and 1, as `codesign.models.GCN.layer_bits`); layer 0 writes its output
        at ``x1``, layer 1 at fp32.
      locality: the graph's `hwmodel.LocalityProfile` (None = uniform re-reference).
      feature_nnz: float [1433] stored nonzeros per input column (`codesign.graph.feature_column_nnz`)
        to price the features stored CSR (the kept fraction of them, `codesign.models.layers.input_nnz`);
        None: stored dense.
    """
    densities = {"edge": edge_density, "feature": feature_density, "channel": channel_density}
    return design_model(bits, channel_density).workload(N_NODES, N_EDGES, densities=densities, locality=locality,
                                                        feature_nnz=feature_nnz)


def design_model(bits, channel_density: float = 1.0) -> GCN:
    """The GCN 1,433-16-7 of `workload` (a channel mask exactly when ``channel_density`` < 1)
    whose four quantizers carry ``bits`` (one width, or ``{"x0", "w0", "x1", "w1"}``)."""
    b = dict.fromkeys(LAYER_BITS, float(bits)) if not isinstance(bits, Mapping) else {k: float(bits[k])
                                                                                        for k in LAYER_BITS}
    return set_recorded_bits(GCN(*DIMS, channel_mask=channel_density < 1.0, rngs=nnx.Rngs(0)), b)


def _nmp(hw, **changes):
    return hw.replace(nmp=hw.nmp.replace(**changes))


def variants(name: str, value: float) -> dict:
    """``{preset name: spec}`` with the assumption ``name`` set to ``value`` (the presets it enters)."""
    pcu = 16 * 300e6
    if name == "INTERNAL_ACCESS_FRACTION":
        hw = presets.get("hbm-pim")
        return {"hbm-pim": _nmp(hw, internal_energy_pj_per_byte=presets.HBM2_PJ_PER_BYTE * value)}
    if name == "DDR4_RANK_INTERNAL_FRACTION":
        return {"gnnear": _nmp(presets.get("gnnear"), internal_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE * value)}
    if name == "UPMEM_MRAM_FRACTION":
        return {"upmem": _nmp(presets.get("upmem"), internal_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE * value)}
    if name == "HBM3_AS_HBM2_ENERGY":
        return {"h100": presets.get("h100").replace(dram_energy_pj_per_byte=value)}
    if name == "GPU_STATIC_FRACTION_OF_TDP":
        return {"h100": presets.get("h100").replace(static_power_w=value * 700.0),
                "a100": presets.get("a100").replace(static_power_w=value * 400.0)}
    if name == "STREAM_DRAM_EFFICIENCY":  # the value alone, not a refit of the other factors at it
        return {"h100": presets.get("h100").replace(dram_efficiency=value),
                "a100": presets.get("a100").replace(dram_efficiency=value)}
    if name == "HBM_PIM_FP32_TWO_PASSES":
        return {"hbm-pim": _nmp(presets.get("hbm-pim"), fp32_macs_per_s=pcu / value,
                                **presets.nmp_energies("dram-logic", fp32_passes=value, fp16_lanes_only=True))}
    if name == "N5_ENERGY_PER_NODE_STEP":
        return {"h100": presets.get("h100").replace(**presets.op_energies("h100", per_step_below_7nm=value))}
    if name == "NODE_VDD_FACTOR":
        return {k: presets.get(k).replace(**presets.op_energies(k, vdd_factor=value))
                for k in ("h100", "a100", "hygcn")}
    if name == "DRAM_PROCESS_LOGIC_NODE_NM":
        return {"hbm-pim": _nmp(presets.get("hbm-pim"), **presets.nmp_energies(
                    "dram-logic", node_nm=value, fp32_passes=2.0, fp16_lanes_only=True)),
                "upmem": _nmp(presets.get("upmem"), **presets.nmp_energies("dram-logic", node_nm=value))}
    if name == "GNNEAR_NME_NODE_NM":
        return {"gnnear": _nmp(presets.get("gnnear"), **presets.nmp_energies("gnnear-nme", node_nm=value))}
    if name == "CPU_WATTS_PER_CORE":
        return {}  # enters no cost: only the `cpu` / `upmem` power limits (presets.POWER_LIMITS_W)
    if name == "HBM_PIM_REGISTER_BYTES":
        return {"hbm-pim": _nmp(presets.get("hbm-pim"), buffer_bytes=value)}
    if name == "GNNEAR_NME_NARROW_PACKING":
        gn = presets.get("gnnear")
        fp32 = gn.nmp.fp32_macs_per_s
        return {"gnnear": _nmp(gn, int_macs_per_s=value * fp32, bf16_macs_per_s=max(1.0, value / 2) * fp32)}
    if name == "UPMEM_LINK_IS_SYSTEM_TOTAL":
        return {"upmem": _nmp(presets.get("upmem"), host_link_bw_bytes_per_s=value)}
    if name == "HYGCN_HBM_7PJ_PER_BIT":
        return {"hygcn": presets.get("hygcn").replace(dram_energy_pj_per_byte=value)}
    if name == "HYGCN_INTERVAL_BUFFER_BYTES":
        return {"hygcn": presets.get("hygcn").replace(interval_buffer_bytes=value)}
    if name == "UPMEM_INT8_MUL_AS_ADD":
        return {"upmem": _nmp(presets.get("upmem"), int_macs_per_s=1.0 / (1.0 / value + 1.0 / 58.56e6))}
    if name == "MI100_HBM_PIM_ALL_STACKS":
        return {"hbm-pim": _nmp(presets.get("hbm-pim"), units=128 * value)}
    raise ValueError(f"hwmodel_sensitivity: no variant for assumption {name!r}")


def costs(hw) -> dict:
    """Per design point: latency_s, energy_j and the mapping (aggregate_first / on_nmp per layer)."""
    out = {}
    for point, args in POINTS.items():
        r = estimate(workload(*args), hw)
        out[point] = {"latency_s": float(r.latency_s), "energy_j": float(r.energy_j),
                      "mapping": {k: [float(r.aggregate_first[k]), float(r.on_nmp.get(k, 0.0))]
                                  for k in r.aggregate_first}}
    return out


# --------------------------------------------------------------------------- the main job's front
def record_design(rec: dict) -> tuple[Optional[dict], Optional[str]]:
    """The design point a tradeoff record was costed at: ``({"edge", "feature", "channel", "bits"},
    None)``, or ``(None, why)`` when its fields do not fix the workload `workload` builds.

    Kept fractions come from ``densities``; a fraction the record does not carry is 1.0, as in
    ``experiments/tradeoff.py``, whose ``densities`` override is applied over the model's own (no
    mask: 1.0; `hwmodel.resolve_densities`). Bit-widths come from ``layer_bits`` (per layer), else
    from the record's single ``bits`` (the UGS and random-edge baselines, costed on a shell model
    with that width everywhere). Not rebuilt: a model other than the GCN, a dataset other than Cora,
    kept BSR tiles (``tiles``: the block-sparse kernel), or no bit-width at all.
    """
    cfg = rec.get("config") or {}
    if cfg.get("model") != "gcn":
        return None, f"model {cfg.get('model')!r}: workload() is the GCN's"
    if cfg.get("dataset") != "cora":
        return None, f"dataset {cfg.get('dataset')!r}: workload() is Cora's"
    if rec.get("tiles") is not None:
        return None, "kept BSR tiles (block-sparse kernel)"
    dens = rec.get("densities") or {}
    if "edge" not in dens:
        return None, "no edge density"
    if rec.get("layer_bits"):
        if not all(k in rec["layer_bits"] for k in LAYER_BITS):
            return None, f"layer_bits without {[k for k in LAYER_BITS if k not in rec['layer_bits']]}"
        bits = {k: float(rec["layer_bits"][k]) for k in LAYER_BITS}
    elif rec.get("bits") is not None:
        bits = dict.fromkeys(LAYER_BITS, float(rec["bits"]))
    else:
        return None, "no bit-widths (neither layer_bits nor bits)"
    return {"edge": float(dens["edge"]), "feature": float(dens.get("feature", 1.0)),
            "channel": float(dens.get("channel", 1.0)), "bits": bits}, None


DENSE_DESIGN = {"edge": 1.0, "feature": 1.0, "channel": 1.0, "bits": dict.fromkeys(LAYER_BITS, 32.0)}


def _design_key(d: dict) -> tuple:
    return (d["edge"], d["feature"], d["channel"]) + tuple(d["bits"][k] for k in LAYER_BITS)


class _Coster:
    """Energy / latency of designs on named specs, each (spec, design) estimated once, with the
    input features stored dense or CSR, whichever costs less energy on that spec, each layer at its
    least-energy mapping (as every energy-objective run is reported: `codesign.train.cheapest_cost`;
    CSR only with ``feature_nnz``)."""

    def __init__(self, locality, feature_nnz=None):
        self.locality, self.feature_nnz, self.cache = locality, feature_nnz, {}

    def _report(self, hw, design: dict):
        inputs = {"locality": self.locality, **({} if self.feature_nnz is None else {"feature_nnz": self.feature_nnz})}
        densities = {"edge": design["edge"], "feature": design["feature"], "channel": design["channel"]}
        return cheapest_cost(design_model(design["bits"], design["channel"]), N_NODES, N_EDGES, hw, inputs,
                             objective="energy_j", hard=False, densities=densities)[1]

    def __call__(self, spec_key: str, hw, design: dict) -> tuple[float, float]:
        key = (spec_key, _design_key(design))
        if key not in self.cache:
            r = self._report(hw, design)
            self.cache[key] = (float(r.energy_j), float(r.latency_s))
        return self.cache[key]

    def parts(self, hw, design: dict) -> dict:
        """``{"static_j", "host_j", "nmp_j"}``: the static energy and the stage energies of the host
        stages and of the stages mapped near memory (`CostReport.breakdown`), for the nominal check."""
        key = ("parts:" + hw.name, _design_key(design))
        if key not in self.cache:
            r = self._report(hw, design)
            b = r.breakdown(hw)
            self.cache[key] = {"static_j": float(r.static_energy_j),
                               "host_j": sum(v["energy_j"] for v in b.values() if not v["on_nmp"]),
                               "nmp_j": sum(v["energy_j"] for v in b.values() if v["on_nmp"])}
        return self.cache[key]


def _stored_parts(rec: dict) -> Optional[dict]:
    """``{"host_j", "nmp_j"}`` of a record's stored ``breakdown`` (None without one)."""
    b = rec.get("breakdown")
    if not b:
        return None
    return {"host_j": sum(v["energy_j"] for v in b.values() if not v.get("on_nmp")),
            "nmp_j": sum(v["energy_j"] for v in b.values() if v.get("on_nmp"))}


def _level(p: dict) -> Optional[float]:
    """A point's level: its budget, keep fraction or UGS round, else the co-design cost weight."""
    for f in ("budget", "keep", "round"):
        if p.get(f) is not None:
            return p[f]
    return p["cost_weight"] if p["family"] == "codesign" else None


def _label(p: dict) -> str:
    lv = _level(p)
    return p["method"] if lv is None else f"{p['method']} {lv:g}"


def _costed_points(points: list[dict], designs: dict, coster: _Coster, spec_key: str, hw) -> list[dict]:
    """Copies of ``points`` with their modeled energy / latency replaced by the mean over each point's
    records (``designs[point group_key]``) of ``hw``'s cost, and the ratios to the dense fp32 cost."""
    dense_e, dense_l = coster(spec_key, hw, DENSE_DESIGN)
    out = []
    for p in points:
        c = np.array([coster(spec_key, hw, d) for d in designs[p["group_key"]]])
        q = dict(p, energy_j=float(c[:, 0].mean()), latency_s=float(c[:, 1].mean()),
                 dense_energy_j=dense_e, dense_latency_s=dense_l)
        q["energy_ratio"], q["latency_ratio"] = q["energy_j"] / dense_e, q["latency_s"] / dense_l
        out.append(q)
    return out


def _chosen(points: list[dict], reference_val_pct: float, loss_pts: float) -> Optional[dict]:
    """The non-dense point of largest energy reduction within ``loss_pts`` of the reference's
    validation accuracy (`paper_figures.fronts.best_point_within`, as ``paper_figures/summary.py``
    chooses: on validation, >= `fronts.MIN_SEEDS` seeds, or the most any point has where none has
    that many). ``None`` without a reference validation accuracy."""
    others = [p for p in points if p["method"] != fronts.DENSE_METHOD]
    if not others or math.isnan(reference_val_pct):
        return None
    return fronts.best_point_within(others, reference_val_pct, "energy", loss_pts, fronts.seeds_needed(others))


def _summary(p: Optional[dict]) -> Optional[dict]:
    if p is None:
        return None
    return {"label": _label(p), "method": p["method"], "level": _level(p), "acc_pct": p["acc_pct"],
            "n_seeds": p["n_seeds"], "reduction": 1.0 / p["energy_ratio"]}


def _spread(values) -> dict:
    v = np.asarray(list(values), float)
    return {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max())}


def _ratio_check(pairs: list[tuple[float, float]]) -> dict:
    """min / max of rebuilt / stored and how many differ by more than `REBUILD_TOL`."""
    r = np.array([a / b for a, b in pairs])
    return {"min": float(r.min()), "max": float(r.max()), "n": len(r),
            "n_off": int((np.abs(r - 1.0) > REBUILD_TOL).sum())}


def front_sensitivity(records_path, names, locality, loss_pts: float = LOSS_PTS, feature_nnz=None) -> dict:
    """How the main job's GCN front and its chosen point move with each assumption in ``names``.

    Args:
      records_path: a tradeoff JSONL (``experiments/tradeoff.py``; format of `paper_figures.fronts`).
      names: `presets.ASSUMPTIONS` entries with a value and a range.
      locality: the graph's `hwmodel.LocalityProfile` the records were costed with (tradeoff.py:
        Cora's measured one; None = uniform re-reference).
      loss_pts: accuracy loss (percentage points of mean validation accuracy) the chosen point may have.
      feature_nnz: Cora's float [1433] nonzeros per input column: each design is priced with the
        cheaper feature store, as the records are (None: stored dense, as records priced before
        ``versions.reference`` "cheaper_store_always").

    Returns:
      ``{"records", "loss_pts", "skipped", "targets_not_entered", "panels", "rows"}``: records that
      could not be rebuilt (``{why: count}``) and the targets no assumption enters; per target
      (``panels``) the nominal rebuild checked against the stored costs (``check``: rebuilt / stored
      energy and latency of the design and of the dense reference, the energy without the static
      energy, and the stage energies of the host stages and of the near-memory stages against the
      record's ``breakdown``: min / max / count beyond `REBUILD_TOL`), the nominal chosen point and
      front; one row per (target, assumption, end) with
      ``chosen_nominal`` / ``chosen`` (label, method, level, accuracy, reduction = dense energy /
      energy), ``nominal_choice_reduction`` (the nominal choice's reduction under the change),
      ``choice_changed``, ``front_nominal`` / ``front`` sizes, ``front_changes`` (points entering
      or leaving the front; named in ``front_entered`` / ``front_left``), ``energy_ratio`` (changed /
      nominal energy of every point: min, median, max) and ``reduction_ratio`` (the same for the
      reduction of every non-dense point). A point is kept only when all its records rebuild.

    Raises:
      ValueError: a nominal variant that is not the shipped preset (`variants` out of date).
    """
    records = dict(fronts.read_records(records_path))
    points = fronts.load_tradeoff(records_path)
    entered: dict = {}
    for name in names:
        value = presets.ASSUMPTIONS[name][0]
        for hw_name, hw in variants(name, value).items():
            if hw != presets.get(hw_name):
                raise ValueError(f"front_sensitivity: {name} at its nominal value {value} does not give "
                                 f"the {hw_name} preset")
            entered.setdefault(hw_name, []).append(name)
    skipped, designs, by_hw = Counter(), {}, {}
    for p in points:
        built = [record_design(records[ln]) for ln in p["lines"]]
        why = [w for _, w in built if w is not None]
        if why:
            skipped.update(why)
            continue
        designs[p["group_key"]] = [d for d, _ in built]
        by_hw.setdefault(p["hw"], []).append(p)
    coster = _Coster(locality, feature_nnz)
    panels, rows = {}, []
    for hw_name in sorted(by_hw, key=fronts.hw_sort_key):
        if hw_name not in entered:
            continue
        pts, hw0 = by_hw[hw_name], presets.get(hw_name)
        dense = fronts.dense_point(pts)
        if dense is None:
            skipped[f"{hw_name}: no dense point"] += len(pts)
            continue
        nominal = _costed_points(pts, designs, coster, "nominal:" + hw_name, hw0)
        check = {k: [] for k in ("energy_j", "latency_s", "dense_energy_j", "dense_latency_s",
                                 "energy_without_static_j", "host_stages_j", "nmp_stages_j")}
        for p in pts:
            for ln, d in zip(p["lines"], designs[p["group_key"]]):
                rec, (e, lat), (de, dl) = (records[ln], coster("nominal:" + hw_name, hw0, d),
                                           coster("nominal:" + hw_name, hw0, DENSE_DESIGN))
                check["energy_j"].append((e, rec["modeled"]["energy_j"]))
                check["latency_s"].append((lat, rec["modeled"]["latency_s"]))
                check["dense_energy_j"].append((de, rec["dense_modeled"]["energy_j"]))
                check["dense_latency_s"].append((dl, rec["dense_modeled"]["latency_s"]))
                part, stored = coster.parts(hw0, d), _stored_parts(rec)
                check["energy_without_static_j"].append((e - part["static_j"], rec["modeled"]["energy_j"]))
                if stored is not None:
                    check["host_stages_j"].append((part["host_j"], stored["host_j"]))
                    if stored["nmp_j"] > 0:
                        check["nmp_stages_j"].append((part["nmp_j"], stored["nmp_j"]))
        chosen0 = _chosen(nominal, dense["val_acc_pct"], loss_pts)
        front0 = {p["group_key"] for p in fronts.front(nominal, "energy")}
        label = {p["group_key"]: _label(p) for p in pts}
        panels[hw_name] = {"n_points": len(pts), "n_records": sum(p["n_seeds"] for p in pts),
                           "dense_acc_pct": dense["acc_pct"], "dense_val_acc_pct": dense["val_acc_pct"],
                           "check": {k: _ratio_check(v) for k, v in check.items() if v},
                           "chosen_nominal": _summary(chosen0), "front_nominal": sorted(label[k] for k in front0)}
        for name in entered[hw_name]:
            value, (lo, hi), what = presets.ASSUMPTIONS[name]
            for end, v in (("low", lo), ("high", hi)):
                changed = _costed_points(pts, designs, coster, f"{name}={v!r}:{hw_name}", variants(name, v)[hw_name])
                chosen = _chosen(changed, dense["val_acc_pct"], loss_pts)
                front1 = {p["group_key"] for p in fronts.front(changed, "energy")}
                same = None if chosen0 is None else next(q for q in changed if q["group_key"] == chosen0["group_key"])
                rows.append({
                    "target": hw_name, "assumption": name, "what": what, "end": end, "value": v, "nominal": value,
                    "chosen_nominal": _summary(chosen0), "chosen": _summary(chosen),
                    "nominal_choice_reduction": None if same is None else 1.0 / same["energy_ratio"],
                    "choice_changed": (None if chosen0 is None else chosen0["group_key"])
                    != (None if chosen is None else chosen["group_key"]),
                    "front_nominal": len(front0), "front": len(front1), "front_changes": len(front0 ^ front1),
                    "front_entered": sorted(label[k] for k in front1 - front0),
                    "front_left": sorted(label[k] for k in front0 - front1),
                    "energy_ratio": _spread(c["energy_j"] / n["energy_j"] for c, n in zip(changed, nominal)),
                    "reduction_ratio": _spread(n["energy_ratio"] / c["energy_ratio"] for c, n in zip(changed, nominal)
                                               if n["method"] != fronts.DENSE_METHOD),
                })
    hws = sorted({p["hw"] for p in points if p["model"] == "gcn"}, key=fronts.hw_sort_key)
    return {"records": str(records_path), "loss_pts": loss_pts, "skipped": dict(skipped),
            "targets_not_entered": [h for h in hws if h not in entered], "panels": panels, "rows": rows}


def cora_inputs() -> tuple:
    """``(locality, feature_nnz)``: Cora's measured `hwmodel.LocalityProfile` and its float [1433]
    nonzeros per input column, as ``experiments/tradeoff.py`` costs with them
    (`codesign.train.workload_inputs`); checks the graph's sizes against `N_NODES` / `N_EDGES`."""
    from codesign.data import load_planetoid
    from codesign.graph import feature_column_nnz
    from codesign.hwmodel import measure_locality
    g = load_planetoid("cora")
    if (g.n_nodes, g.n_edges) != (N_NODES, N_EDGES):
        raise ValueError(f"cora_inputs: Cora has {g.n_nodes} nodes / {g.n_edges} edges, "
                         f"workload() assumes {N_NODES} / {N_EDGES}")
    return measure_locality(g.senders, g.receivers, g.n_nodes), feature_column_nnz(g.x)


def print_front(front: dict) -> None:
    for hw, pan in front["panels"].items():
        print(f"{hw}: {pan['n_points']} points, {pan['n_records']} records; chosen "
              f"{(pan['chosen_nominal'] or {}).get('label')}; rebuilt / stored (min-max, beyond "
              f"{REBUILD_TOL:.0%}):")
        for k, c in pan["check"].items():
            print(f"    {k:24s} {c['min']:.4f}-{c['max']:.4f}  {c['n_off']}/{c['n']}")
    if front["skipped"]:
        print("not rebuilt: " + "; ".join(f"{k} ({v} records)" for k, v in front["skipped"].items()))
    print("target  assumption                   end   chosen nominal -> changed          reduction (nominal"
          " choice)  front +/-    energy ratio min/med/max")
    for r in front["rows"]:
        a, b = r["chosen_nominal"] or {}, r["chosen"] or {}
        print(f"{r['target']:7s} {r['assumption']:28s} {r['end']:5s} {a.get('label', '-'):>16s} -> "
              f"{b.get('label', '-'):16s} {a.get('reduction', math.nan):6.2f} -> {b.get('reduction', math.nan):6.2f} "
              f"({r['nominal_choice_reduction'] or math.nan:6.2f})   {r['front_changes']:2d}/{r['front_nominal']:2d}"
              f"   {r['energy_ratio']['min']:.3f} {r['energy_ratio']['median']:.3f} {r['energy_ratio']['max']:.3f}")


def markdown(result: dict) -> str:
    """The docs/hwmodel.md tables of a result of `main` (generated; tests/test_hwmodel_sensitivity.py
    checks the docs hold them): the two design points per (assumption, preset, end), then the
    main job's chosen points per (target, assumption, end) where the result has a front."""
    f2 = lambda v: f"{v:.2f}"
    lines = ["| assumption (preset) | end | dense latency / energy | compressed latency / energy | "
             "savings latency / energy (nominal) | mapping flips |", "|---|---|---:|---:|---:|---|"]
    for r in result["rows"]:
        d, c = "dense_fp32", "int8_edges0.5_features0.3"
        lines.append(f"| `{r['assumption']}` ({r['preset']}) | {r['end']} | {f2(r[d + '_latency_s_ratio'])} / "
                     f"{f2(r[d + '_energy_j_ratio'])} | {f2(r[c + '_latency_s_ratio'])} / {f2(r[c + '_energy_j_ratio'])} | "
                     f"{f2(r['savings_latency'])} / {f2(r['savings_energy'])} ({f2(r['nominal_savings_latency'])} / "
                     f"{f2(r['nominal_savings_energy'])}) | {', '.join(r['mapping_flips']) or 'none'} |")
    if result.get("front"):
        lines += ["", "| target | assumption | end | chosen nominal -> changed | reduction nominal -> changed | "
                  "front points changed | energy changed / nominal (min / median / max) |",
                  "|---|---|---|---|---:|---:|---:|"]
        for r in result["front"]["rows"]:
            a, b, e = r["chosen_nominal"] or {}, r["chosen"] or {}, r["energy_ratio"]
            lines.append(f"| {r['target']} | `{r['assumption']}` | {r['end']} | {a.get('label', '-')} -> "
                         f"{b.get('label', '-')} | {a.get('reduction', math.nan):.2f}x -> "
                         f"{b.get('reduction', math.nan):.2f}x | {r['front_changes']} of {r['front_nominal']} | "
                         f"{f2(e['min'])} / {f2(e['median'])} / {f2(e['max'])} |")
    return "\n".join(lines)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two assumptions only")
    ap.add_argument("--out", default=None, help="results JSON (default results/hwmodel_sensitivity[_quick].json)")
    ap.add_argument("--records", default=TRADEOFF, help=f"tradeoff records of the front (default {TRADEOFF})")
    ap.add_argument("--no-front", action="store_true", help="only the two fixed design points")
    args = ap.parse_args(argv)
    ranged = [k for k, (v, rng, _) in presets.ASSUMPTIONS.items() if v is not None and rng is not None]
    names = ranged[:2] if args.quick else ranged
    rows = []
    for name in names:
        value, (lo, hi), what = presets.ASSUMPTIONS[name]
        nominal = {p: costs(hw) for p, hw in variants(name, value).items()}
        for end, v in (("low", lo), ("high", hi)):
            for p, hw in variants(name, v).items():
                c, c0 = costs(hw), nominal[p]
                rows.append({
                    "assumption": name, "what": what, "preset": p, "end": end, "value": v, "nominal": value,
                    **{f"{pt}_{k}_ratio": c[pt][k] / c0[pt][k] for pt in POINTS for k in ("latency_s", "energy_j")},
                    "savings_latency": c["dense_fp32"]["latency_s"] / c["int8_edges0.5_features0.3"]["latency_s"],
                    "savings_energy": c["dense_fp32"]["energy_j"] / c["int8_edges0.5_features0.3"]["energy_j"],
                    "nominal_savings_latency": (c0["dense_fp32"]["latency_s"]
                                                / c0["int8_edges0.5_features0.3"]["latency_s"]),
                    "nominal_savings_energy": (c0["dense_fp32"]["energy_j"]
                                               / c0["int8_edges0.5_features0.3"]["energy_j"]),
                    "mapping_flips": [pt for pt in POINTS if c[pt]["mapping"] != c0[pt]["mapping"]],
                })
    result = {"what": "sensitivity of the modeled Cora GCN cost to each assumed constant over its range",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "points": {k: {"edge_density": a, "feature_density": b, "bits": c} for k, (a, b, c) in POINTS.items()},
              "rows": rows}
    if not args.no_front:  # --quick: the first two assumptions that enter the records' targets
        front_names = ranged
        if args.quick:
            hws = {r["config"]["hw"] for _, r in fronts.read_records(args.records)}
            front_names = [k for k in ranged if hws & set(variants(k, presets.ASSUMPTIONS[k][0]))][:2]
        locality, nnz = cora_inputs()
        result["front"] = front_sensitivity(args.records, front_names, locality, feature_nnz=nnz)
    out = args.out or f"results/hwmodel_sensitivity{'_quick' if args.quick else ''}.json"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    write_json_atomic(out, result)
    print("assumption                      preset   end    dense lat/E    compressed lat/E   savings lat/E (nominal)"
          "    flips")
    for r in rows:
        print(f"{r['assumption']:31s} {r['preset']:8s} {r['end']:5s} "
              f"{r['dense_fp32_latency_s_ratio']:6.2f} {r['dense_fp32_energy_j_ratio']:6.2f}    "
              f"{r['int8_edges0.5_features0.3_latency_s_ratio']:6.2f} "
              f"{r['int8_edges0.5_features0.3_energy_j_ratio']:6.2f}"
              f"    {r['savings_latency']:5.2f} {r['savings_energy']:5.2f} ({r['nominal_savings_latency']:.2f} "
              f"{r['nominal_savings_energy']:.2f})   {','.join(r['mapping_flips']) or '-'}")
    if "front" in result:
        print_front(result["front"])
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
