"""Measures the fixed cost of one scipy CSR product called from jitted JAX (a host callback,
`codesign.kernels.csr_cpu._callback`)
over XLA's own gather + segment_sum, on a graph so small that neither does measurable work:
``host_callback_overhead_s`` = median(csr_scipy) - median(segment) per forward call, A/B
alternated in one process. Writes ``codesign/hwmodel/fits/cpu_callback.json``, which
`codesign.kernels.auto_impl` adds to the modeled cost of every "csr_scipy" / "csr" candidate.

    OMP_NUM_THREADS=1 python experiments/measure_callback_overhead.py [--reps 15] [--calls 200]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from codesign.kernels import CooAdjacency, aggregate
from codesign.kernels.csr_cpu import with_csr_pattern

OUT = Path(__file__).resolve().parents[1] / "codesign" / "hwmodel" / "fits" / "cpu_callback.json"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--out", default=str(OUT))
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n, e = 64, 128
    adj = with_csr_pattern(CooAdjacency(jnp.asarray(rng.integers(0, n, e), jnp.int32),
                                        jnp.asarray(rng.integers(0, n, e), jnp.int32), None, n))
    x = jnp.ones((n, 1), jnp.float32)
    fns = {k: jax.jit(lambda x, k=k: aggregate(adj, x, impl=k)) for k in ("segment", "csr_scipy")}
    for f in fns.values():
        f(x).block_until_ready()
    per = {k: [] for k in fns}
    for _ in range(a.reps):
        for k, f in fns.items():
            t = time.perf_counter()
            for _ in range(a.calls):
                y = f(x)
            y.block_until_ready()
            per[k].append((time.perf_counter() - t) / a.calls)
    med = {k: statistics.median(v) for k, v in per.items()}
    rec = {"what": "fixed cost of one jitted scipy CSR product (host callback, csr_cpu._callback) over XLA's segment_sum on a "
                   "64-node, 128-edge graph, F = 1 (no measurable work): host_callback_overhead_s = "
                   "median(csr_scipy) - median(segment) seconds per forward call",
           "host_callback_overhead_s": max(med["csr_scipy"] - med["segment"], 0.0),
           "median_s": med, "spread_s": {k: [min(v), max(v)] for k, v in per.items()},
           "reps": a.reps, "calls_per_rep": a.calls, "load": os.getloadavg(),
           "host": {"platform": platform.platform(), "cpu_count": os.cpu_count(), "jax": jax.__version__},
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "command": "OMP_NUM_THREADS=1 python experiments/measure_callback_overhead.py"}
    Path(a.out).write_text(json.dumps(rec, indent=1) + "\n")
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
