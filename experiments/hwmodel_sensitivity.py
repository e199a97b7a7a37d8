"""How far the cost model's answers move when each assumed constant moves over its plausible range.

For every entry of `codesign.hwmodel.presets.ASSUMPTIONS` that has a value and a range, the preset(s)
it enters are rebuilt with the constant at the low and the high end of its range, and two design
points of the 2-layer GCN on Cora (N 2,708, E 10,556 + self-loops, 1433-16-7) are costed: dense fp32
and a compressed one (8-bit, half the edges, 30 % of the input features). Reported per assumption
and end: latency and energy of both points relative to the nominal preset, the compressed point's
savings (dense / compressed) and whether any mapping choice (dataflow order, near-memory or host
aggregation) flips. A conclusion that holds at both ends of every range does not depend on the
model's unknowns. Not the main job's Pareto front (issue 20 asks for that); a first, smaller table.

    python experiments/hwmodel_sensitivity.py            # all assumptions -> results/hwmodel_sensitivity.json
    python experiments/hwmodel_sensitivity.py --quick    # two assumptions (CI smoke run)
"""

from __future__ import annotations

import argparse
import datetime
import os

from codesign.hwmodel import Workload, estimate, message_passing_layer, presets
from codesign.hwmodel.spec import HOROWITZ_DRAM_PJ_PER_BYTE, HOROWITZ_FP16_MAC_PJ
from codesign.results import write_json_atomic

N_NODES, N_EDGES, DIMS = 2708, 10556, (1433, 16, 7)
POINTS = {"dense_fp32": (1.0, 1.0, 32.0), "int8_edges0.5_features0.3": (0.5, 0.3, 8.0)}


def workload(edge_density: float, feature_density: float, bits: float) -> Workload:
    """The 2-layer Cora GCN (fp32 logits) at the given densities and bit-width."""
    nnz = edge_density * N_EDGES + N_NODES
    return Workload((message_passing_layer("layer0", N_NODES, nnz, feature_density * DIMS[0], DIMS[1], bits, bits, bits),
                     message_passing_layer("layer1", N_NODES, nnz, DIMS[1], DIMS[2], bits, bits, 32.0)))


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
    if name == "HBM_PIM_FP32_TWO_PASSES":
        return {"hbm-pim": _nmp(presets.get("hbm-pim"), fp32_macs_per_s=pcu / value,
                                mac_energy_pj=value * HOROWITZ_FP16_MAC_PJ)}
    if name == "HBM_PIM_REGISTER_BYTES":
        return {"hbm-pim": _nmp(presets.get("hbm-pim"), buffer_bytes=value)}
    if name == "GNNEAR_NME_RATE":
        return {"gnnear": _nmp(presets.get("gnnear"), fp32_macs_per_s=value, bf16_macs_per_s=2 * value,
                               int_macs_per_s=4 * value)}
    if name == "UPMEM_LINK_IS_SYSTEM_TOTAL":
        return {"upmem": _nmp(presets.get("upmem"), host_link_bw_bytes_per_s=value)}
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


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="two assumptions only")
    ap.add_argument("--out", default=None, help="results JSON (default results/hwmodel_sensitivity[_quick].json)")
    args = ap.parse_args(argv)
    names = [k for k, (v, rng, _) in presets.ASSUMPTIONS.items() if v is not None and rng is not None]
    if args.quick:
        names = names[:2]
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
    out = args.out or f"results/hwmodel_sensitivity{'_quick' if args.quick else ''}.json"
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    write_json_atomic(out, result)
    print("assumption                      preset   end    dense lat/E    compressed lat/E   savings lat/E (nominal)    flips")
    for r in rows:
        print(f"{r['assumption']:31s} {r['preset']:8s} {r['end']:5s} "
              f"{r['dense_fp32_latency_s_ratio']:6.2f} {r['dense_fp32_energy_j_ratio']:6.2f}    "
              f"{r['int8_edges0.5_features0.3_latency_s_ratio']:6.2f} {r['int8_edges0.5_features0.3_energy_j_ratio']:6.2f}"
              f"    {r['savings_latency']:5.2f} {r['savings_energy']:5.2f} ({r['nominal_savings_latency']:.2f} "
              f"{r['nominal_savings_energy']:.2f})   {','.join(r['mapping_flips']) or '-'}")
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
