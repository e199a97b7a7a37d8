"""Time of the partition layout (`codesign.distributed.partition._layout`) on R-MAT, sorted vs
the former P x P implementation.

    python experiments/partition_layout_bench.py     # R-MAT scale 17, P = 8, 64 -> results/partition_layout.json
    python experiments/partition_layout_bench.py --memory   # peak memory instead -> results/partition_layout_memory.json

"after" is this checkout's `_layout`; "before" is `_layout` of the commit ``BEFORE`` (read with
``git show``, so this checkout's code is not touched). METIS parts are computed once per P
(`metis_parts`, seed 0) and both layouts run on the same parts, alternating before/after, each
``--reps`` times; the script checks that both produce the same `Partition` (every field) and
records wall-clock medians, minima and maxima (``time.perf_counter``, one thread) with the
1-minute load average before and after. ``--memory``: instead, one run of each under `tracemalloc`
(numpy reports its array allocations there): the peak bytes allocated inside ``_layout``, beyond
its inputs (the int64 edge lists, 16 bytes per edge, held by the caller).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import subprocess
import sys
import time
import tracemalloc
import types
from pathlib import Path

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from codesign.data.synthetic import rmat_edges  # noqa: E402
from codesign.distributed import partition as after  # noqa: E402
from codesign.results import code_version, write_json_atomic  # noqa: E402

BEFORE = "19874f6"  # the last commit with the P x P layout


def _module_at(commit: str) -> types.ModuleType:
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:codesign/distributed/partition.py"],
                         check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType("partition_before")
    sys.modules[mod.__name__] = mod  # dataclasses look their module up there
    exec(compile(src, f"{commit}:partition.py", "exec"), mod.__dict__)
    return mod


def _same(a, b) -> bool:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "send_rows":
            if len(x) != len(y) or not all(np.array_equal(u, v) and u.dtype == v.dtype for u, v in zip(x, y)):
                return False
        elif isinstance(x, np.ndarray):
            if x.dtype != y.dtype or not np.array_equal(x, y):
                return False
        elif x != y:
            return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=17)
    ap.add_argument("--parts", default="8,64")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--memory", action="store_true", help="measure peak memory (tracemalloc) instead of time")
    ap.add_argument("--out", default=None, help="default results/partition_layout[_memory].json")
    args = ap.parse_args()
    args.out = args.out or str(ROOT / "results" / f"partition_layout{'_memory' if args.memory else ''}.json")
    before = _module_at(BEFORE)
    n = 1 << args.scale
    s, r = rmat_edges(args.scale, 16 << args.scale, seed=0)
    s64, r64 = s.astype(np.int64), r.astype(np.int64)
    rows = []
    for P in (int(x) for x in args.parts.split(",")):
        part = after.metis_parts(s64, r64, n, P, 0)
        if args.memory:
            row = {"n_parts": P}
            for name, mod in (("before", before), ("after", after)):
                tracemalloc.start()
                mod._layout(s64, r64, n, P, part, "metis")
                peak = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
                row[name] = {"peak_bytes": peak, "peak_bytes_per_edge": peak / s.size}
            print(row, flush=True)
            rows.append(row)
            continue
        times = {"before": [], "after": []}
        load0 = os.getloadavg()[0]
        for _ in range(args.reps):
            for name, mod in (("before", before), ("after", after)):
                t = time.perf_counter()
                out = mod._layout(s64, r64, n, P, part, "metis")
                times[name].append(time.perf_counter() - t)
                if name == "before":
                    ref = out
                else:
                    assert _same(out, ref), f"P={P}: the layouts differ"
            print(P, {k: round(v[-1], 3) for k, v in times.items()}, flush=True)
        row = {"n_parts": P, "equal": True, "load_1min_before": load0, "load_1min_after": os.getloadavg()[0]}
        for k, v in times.items():
            row[k] = {"median_s": float(np.median(v)), "min_s": min(v), "max_s": max(v), "runs_s": v}
        row["speedup_median"] = row["before"]["median_s"] / row["after"]["median_s"]
        rows.append(row)
    write_json_atomic(args.out, {
        "what": f"partition._layout {'peak memory (tracemalloc)' if args.memory else 'wall time'}, sorted (after) "
                f"vs P x P masks (before, commit {BEFORE})",
        "graph": {"kind": "rmat", "scale": args.scale, "draws": 16 << args.scale, "n_nodes": n, "n_edges": int(s.size)},
        "code_version": code_version(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": os.cpu_count(), "threads": 1, "reps": 1 if args.memory else args.reps, "rows": rows})
    print(args.out)


if __name__ == "__main__":
    main()
