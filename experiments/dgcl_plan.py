"""DGCL-style communication planning on declared topologies, by the model (no device timing):
ring vs peer-to-peer vs the planner's plan for one GCN layer's halo exchange, and hierarchical vs
flat METIS on the inter-host cut.

For one graph (R-MAT, Graph500 parameters, default scale 16, 16 edges per node before
symmetrizing), a GCN layer exchanging rows of ``--hidden`` float32 values:

  * ``two_dgx_h100_ib`` (16 GPUs, 2 nodes over NDR InfiniBand): the hierarchical partition
    (`codesign.distributed.hierarchical_partition`, hosts first) and, for comparison, flat 16-way
    METIS with parts 0-7 on node 0; the plan with the distinct rows per host
    (`host_halo_counts`, a row read by several GPUs of a node crosses InfiniBand once) and
    without (the relay only balances the NICs);
  * ``dgx_h100`` (8 GPUs, one node): flat 8-way METIS;
  * ``loopback_gloo``: the ring planned on `topology.loopback_gloo(N)` against the check runs of
    ``results/comm_loopback_cpu.json`` (the topology is fitted on the other runs), beside the ring on
    `comm.loopback_gloo`'s one link (fitted on N = 2).

    python experiments/dgcl_plan.py                      # -> results/dgcl_plan.json
    python experiments/dgcl_plan.py --scale 12 --json /tmp/x.json   # seconds
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from codesign import distributed as dist  # noqa: E402
from codesign.data.synthetic import rmat_edges  # noqa: E402
from codesign.hwmodel import comm, planner  # noqa: E402
from codesign.hwmodel.topology import get_topology, loopback_gloo  # noqa: E402

FLOAT32_BYTES = 4


def _plan_record(halo_bytes, topo, host_bytes=None) -> dict:
    """The plan's digest plus the bytes on the inter-host NICs (ring vs plan)."""
    plan = planner.plan_exchange(halo_bytes, topo, host_bytes=host_bytes)
    names = np.array(topo.resource_names)
    nic_tx = np.array([".nic" in n and n.endswith(".tx") for n in names])
    out = plan.summary()
    out["relieved"] = out["relieved"][:6]  # the six largest savings of busy time
    out["nic_tx_bytes_ring"] = float(plan.ring_load_bytes[nic_tx].sum())
    out["nic_tx_bytes_plan"] = float(plan.load_bytes[nic_tx].sum())
    if nic_tx.any():
        out["busiest_nic_tx_bytes_ring"] = float(plan.ring_load_bytes[nic_tx].max())
        out["busiest_nic_tx_bytes_plan"] = float(plan.load_bytes[nic_tx].max())
    return out


def loopback_check() -> dict:
    """Per N, the measured per-layer exchange of the check set of ``results/comm_loopback_cpu.json``
    (runs 1 and 2; out of sample: the topology is fitted on runs 0 and 3) beside the ring planned on `loopback_gloo(N)` and
    the one link's ring (fitted on N = 2): mean |error| and median |log error| of each."""
    data = json.loads((ROOT / "results" / "comm_loopback_cpu.json").read_text())
    link = comm.loopback_gloo()
    out = {}
    for n, rows in data["check_set"].items():
        n = int(n)
        topo, off = loopback_gloo(n), 1.0 - np.eye(n)
        shared = [float(planner.plan_cost("ring", r["bytes"] * off, topo)[0]) for r in rows]
        one = [(n - 1) * (link.latency_s + r["bytes"] / link.bw_bytes_per_s) for r in rows]
        meas = [r["median_s"] for r in rows]
        mape = lambda model: float(np.mean([abs(m / t - 1.0) for m, t in zip(model, meas)]))
        err = lambda model: float(np.median([abs(math.log(m / t)) for m, t in zip(model, meas)]))
        out[n] = {"bytes": [r["bytes"] for r in rows], "measured_s": meas, "shared_s": shared, "one_link_s": one,
                  "mape_shared": mape(shared), "mape_one_link": mape(one),
                  "median_abs_log_err_shared": err(shared), "median_abs_log_err_one_link": err(one)}
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scale", type=int, default=16)
    p.add_argument("--edge-factor", type=int, default=16)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=str(ROOT / "results" / "dgcl_plan.json"))
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    n = 1 << args.scale
    s, r = rmat_edges(args.scale, args.edge_factor * n, seed=args.seed)
    row_bytes = args.hidden * FLOAT32_BYTES
    two, one = get_topology("two_dgx_h100_ib"), get_topology("dgx_h100")

    hier, cuts = dist.hierarchical_partition(s, r, n, two.n_hosts, 8, seed=args.seed)
    flat16 = dist.partition_graph(s, r, n, two.n_devices, seed=args.seed)
    flat_cuts = dist.cut_by_level(s, r, flat16.part, two.device_host)
    host_rows = dist.host_halo_counts(hier, two.device_host)
    inter = two.inter_host()
    two_rec = {
        "partition": {"hierarchical": cuts, "flat_metis": flat_cuts,
                      "inter_host_halo_rows": int((hier.halo_counts * inter).sum()),
                      "inter_host_distinct_rows": int(host_rows[np.asarray(two.device_host)[:, None]
                                                                    != np.arange(two.n_hosts)].sum()),
                      "max_edges_per_part_over_mean": max(hier.edges_per_part) / np.mean(hier.edges_per_part)},
        "plan": _plan_record(hier.halo_counts * row_bytes, two, host_rows * row_bytes),
        "plan_without_distinct_rows": _plan_record(hier.halo_counts * row_bytes, two),
        "plan_on_flat_metis": _plan_record(
            flat16.halo_counts * row_bytes, two, dist.host_halo_counts(flat16, two.device_host) * row_bytes),
    }
    flat8 = dist.partition_graph(s, r, n, one.n_devices, seed=args.seed)
    one_rec = {"partition": {"edge_cut": int(flat8.edge_cut)}, "plan": _plan_record(flat8.halo_counts * row_bytes, one)}
    out = {"what": "modeled time of one GCN layer's forward halo exchange (float32 rows of --hidden values): the "
                   "fixed ring (comm.py's P-1 steps) vs peer-to-peer vs the planner's choice, on declared topologies "
                   "(codesign.hwmodel.topology); no device was timed",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "graph": {"generator": "rmat_edges", "scale": args.scale, "edge_factor": args.edge_factor,
                     "n_nodes": n, "n_edges": int(len(s)), "seed": args.seed},
           "hidden": args.hidden, "row_bytes": row_bytes,
           "two_dgx_h100_ib": two_rec, "dgx_h100": one_rec, "loopback_gloo": loopback_check(),
           "wall_s": time.perf_counter() - t0}
    Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    for name, rec in (("two_dgx_h100_ib", two_rec), ("dgx_h100", one_rec)):
        pl = rec["plan"]
        print(f"{name}: ring {pl['ring_time_s'] * 1e6:.1f} us, p2p {pl['candidates']['p2p'] * 1e6:.1f} us, "
              f"plan {pl['kind']} {pl['time_s'] * 1e6:.1f} us ({pl['speedup_over_ring']:.2f}x over the ring)")
    print(f"inter-host cut: hierarchical {cuts['inter_host']}, flat METIS {flat_cuts['inter_host']}; "
          f"-> {args.json} ({out['wall_s']:.0f} s)")
    return out


if __name__ == "__main__":
    main()
