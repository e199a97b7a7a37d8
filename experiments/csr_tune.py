"""Tile-size sweep of the Pallas CSR edge-chunk kernel (`codesign.kernels.pallas_csr`) on one graph:
f32 forward time of each `CsrBlockSizes` candidate, device-timed (`kernel_bench.device_loop_ms`),
next to segment_sum in the same run, each output checked against segment_sum.

    python experiments/csr_tune.py                    # GPU: R-MAT scale 20, F = 128, the default grid
    python experiments/csr_tune.py --quick            # CPU smoke run (interpret mode; not a timing)

The grid varies one field at a time around the default (chunk, edges per work item, rows per
window, feature tile, rows walked together, warps, pipeline stages), so each row reads as "this field, this value".
Writes ``results/csr_tune_<backend>.json`` (or ``--out``) atomically: device, JAX version, date,
the work-item counts of every candidate and every timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import pathlib

import jax
import jax.numpy as jnp

from codesign.data.synthetic import rmat_edges
from codesign.kernels import CooAdjacency, segment_spmm
from codesign.kernels.config import CsrBlockSizes
from codesign.kernels.pallas_csr import csr_chunk_spmm, csr_chunks, work_item_stats
from codesign.results import write_json_atomic

GRID = {"chunk": (8, 32), "max_item_edges": (256, 1024, 4096), "max_item_rows": (8, 128), "block_f": (32, 128),
        "rows_per_step": (4, 8), "num_warps": (2, 8), "num_stages": (1, 3)}


def _kernel_bench():
    spec = importlib.util.spec_from_file_location("kernel_bench", pathlib.Path(__file__).with_name("kernel_bench.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def candidates(grid: dict) -> list[tuple[str, CsrBlockSizes]]:
    """``("default", CsrBlockSizes())`` and one candidate per (field, value) of ``grid`` (values
    that `CsrBlockSizes` rejects for the default's other fields are skipped)."""
    out = [("default", CsrBlockSizes())]
    for field, values in grid.items():
        for v in values:
            try:
                out.append((f"{field}={v}", dataclasses.replace(CsrBlockSizes(), **{field: v})))
            except ValueError:
                continue
    return out


def _result(args, backend, n, edges, seg_ms, rows, complete: bool) -> dict:
    device = jax.devices()[0]
    best = min(rows, key=lambda r_: r_["forward_ms"])
    return {"what": "Pallas CSR tile-size sweep (f32 forward)", "backend": backend,
            "device": getattr(device, "device_kind", str(device)), "jax": jax.__version__,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "graph": f"rmat{args.scale}", "nodes": n, "edges": int(edges), "features": args.features,
            "timed": backend == "gpu", "inner_reps": args.inner, "reps": args.reps, "segment_ms": seg_ms,
            "best": best["candidate"], "rows": rows, "complete": complete}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=int, default=20)
    ap.add_argument("--edges", type=int, default=8_000_000, help="R-MAT draws")
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--inner", type=int, default=20)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.scale, args.edges, args.features, args.reps, args.inner = 8, 2000, 16, 1, 1
    kb = _kernel_bench()
    backend = jax.default_backend()
    s, r = rmat_edges(args.scale, args.edges, seed=0)
    n = 1 << args.scale
    adj = CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n)
    x = jax.random.normal(jax.random.key(0), (n, args.features), jnp.float32)
    want = segment_spmm(adj, x)
    seg_ms = kb.device_loop_ms(segment_spmm, adj, x, inner=args.inner, reps=args.reps)
    print(f"rmat{args.scale} E={s.size} F={args.features} segment {seg_ms:.3f} ms")
    rows = []
    out = args.out or f"results/csr_tune_{backend}{'_quick' if args.quick else ''}.json"
    grid = {"max_item_rows": (8,)} if args.quick else GRID
    for name, sizes in candidates(grid):
        chunks = csr_chunks(adj, sizes)
        y = csr_chunk_spmm(chunks, x)
        err = float(jnp.linalg.norm(y - want) / jnp.linalg.norm(want))
        ms = kb.device_loop_ms(lambda c, x: csr_chunk_spmm(c, x), chunks, x, inner=args.inner, reps=args.reps)
        rows.append({"candidate": name, "sizes": dataclasses.asdict(sizes), "work_items": work_item_stats(chunks),
                     "forward_ms": ms, "speedup_vs_segment": seg_ms / ms, "rel_err_vs_segment": err})
        print(f"{name:22s} {ms:9.3f} ms  {seg_ms / ms:6.2f}x segment  err {err:.1e}")
        # after every candidate: a sweep cut by its time limit keeps the candidates it timed
        result = _result(args, backend, n, s.size, seg_ms, rows, complete=False)
        write_json_atomic(out, result)
    result = _result(args, backend, n, s.size, seg_ms, rows, complete=True)
    best = min(rows, key=lambda r_: r_["forward_ms"])
    write_json_atomic(out, result)
    print(f"best {best['candidate']} {best['forward_ms']:.3f} ms; wrote {out}")
    return result


if __name__ == "__main__":
    main()
