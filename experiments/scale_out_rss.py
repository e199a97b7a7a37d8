"""Per-process peak memory of multi-process training from shards, against one process (issue 38).

    python experiments/scale_out_rss.py --hidden 64 --edge-gates # rmat-19, 4 processes -> results/scale_out_rss_cpu.json
    python experiments/scale_out_rss.py --dataset rmat-21 --parts 8 --epochs 2 --no-one-process \
        --out results/scale_out_rss_rmat21_cpu.json
    python experiments/scale_out_rss.py --dataset rmat-15 --parts 2 --epochs 1 --out F   # a quick check

Three commands, each under ``/usr/bin/time -v`` (its "Maximum resident set size": for a command
that starts processes, the largest of them, since Linux reports the maximum over the reaped
children; ``codesign train --processes N`` waits for all N):

1. one process: ``codesign train --dataset D --epochs E --seeds 1`` (loads the whole graph);
2. ``codesign partition D --parts P --out DIR`` (once, offline: loads the graph and runs METIS);
3. P processes: ``codesign train --devices P --processes P --shards DIR --epochs E --seeds 1``
   (each process reads the manifest and its own part only).

Reported: peak RSS in GB (10^9 bytes) and wall seconds of each, and ``rss_ratio`` = the largest
training process of (3) / the single process of (1). The training configuration is the GCN's
defaults (`codesign.models.MODEL_DEFAULTS`: hidden 16) or ``--hidden``; records go to a temporary folder.
Each result is written as it finishes (atomically, `codesign.results.write_json_atomic`).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codesign.results import write_json_atomic  # noqa: E402

GB = 1e9


def timed(argv: list, env: dict) -> dict:
    """Run ``argv`` under ``/usr/bin/time -v``: ``{"argv", "rc", "wall_s", "peak_rss_gb", "tail"}``.

    Raises:
      RuntimeError: the command failed (its last output lines in the message).
    """
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    own = p.stderr.split("\tCommand being timed:")[0]  # the command's stderr, without time's report
    tail = (p.stdout + own).strip().splitlines()[-3:]
    if p.returncode != 0 or m is None:
        raise RuntimeError(f"{' '.join(argv)}: exit {p.returncode}: {' | '.join(tail)}")
    return {"argv": argv, "rc": p.returncode, "wall_s": round(wall, 2), "peak_rss_gb": int(m.group(1)) * 1024 / GB}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="rmat-19")
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=None, help="hidden width (default: the GCN's, 16)")
    ap.add_argument("--out", default=str(ROOT / "results" / "scale_out_rss_cpu.json"))
    ap.add_argument("--edge-gates", action="store_true",
                    help="also train the P processes with learnable edge gates (--edge-mask on: the backward "
                         "pass re-fetches each halo, distributed/halo.py): gates_over_plain")
    ap.add_argument("--no-one-process", action="store_true",
                    help="skip command 1 (a graph too large for one process here): no rss_ratio")
    args = ap.parse_args(argv)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    codesign = [sys.executable, "-m", "codesign.cli"]
    train = ["train", "--dataset", args.dataset, "--epochs", str(args.epochs), "--seeds", "1", "--json",
             *(["--hidden", str(args.hidden)] if args.hidden else [])]
    result = {"experiment": "scale_out_rss", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores", "dataset": args.dataset, "parts": args.parts,
              "epochs": args.epochs, "hidden": args.hidden, "load_avg_before": os.getloadavg()[0], "runs": {}}
    with tempfile.TemporaryDirectory(prefix="scale-out-rss-") as tmp:
        steps = (("one_process", codesign + train + ["--out", f"{tmp}/single"]),
                 ("partition", codesign + ["partition", args.dataset, "--parts", str(args.parts), "--out", f"{tmp}/shards"]),
                 ("processes_from_shards", codesign + train + ["--devices", str(args.parts), "--processes", str(args.parts),
                                                              "--shards", f"{tmp}/shards", "--out", f"{tmp}/multi"]))
        if args.edge_gates:
            steps += (("processes_from_shards_edge_gates", steps[2][1][:-1] + [f"{tmp}/gates", "--edge-mask", "on"]),)
        for name, cmd in steps[1:] if args.no_one_process else steps:
            r = timed(cmd, env)
            r["argv"] = ["codesign", *(a.replace(tmp, "TMP") for a in cmd[3:])]  # TMP: a temporary folder
            result["runs"][name] = r
            print(f"{name}: peak RSS {r['peak_rss_gb']:.2f} GB, {r['wall_s']:.1f} s", flush=True)
            runs = result["runs"]
            if "one_process" in runs and "processes_from_shards" in runs:
                result["rss_ratio"] = round(runs["processes_from_shards"]["peak_rss_gb"] / runs["one_process"]["peak_rss_gb"], 3)
            if "processes_from_shards_edge_gates" in runs:
                result["gates_over_plain"] = round(runs["processes_from_shards_edge_gates"]["peak_rss_gb"]
                                                   / runs["processes_from_shards"]["peak_rss_gb"], 3)
            write_json_atomic(args.out, result)
    if "rss_ratio" in result:
        print(f"largest of {args.parts} processes / one process: {result['rss_ratio']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
