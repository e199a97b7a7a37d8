"""Aggregation kernel benchmark: XLA segment_sum, dense matmul, jax.experimental.sparse BCSR,
BSR in plain XLA, and the Pallas BSR kernel (GPU only: interpret mode is not a timing), forward
and forward + backward, on Cora and an R-MAT graph after RCM reordering.

    python experiments/kernel_bench.py                      # CPU-sized R-MAT (scale 16)
    python experiments/kernel_bench.py --scale 20 --edges 8000000   # the 1M-node / 16M-edge graph (GPU)
    python experiments/kernel_bench.py --quick              # CI smoke run

Reports per (graph, F, tile keep fraction, impl): median time (ms) of forward and of forward +
backward, achieved GB/s on the bytes the kernel must move (the `codesign.hwmodel` compulsory
bytes: structure + X + output), and that as a fraction of the measured device copy bandwidth.
Also the fill ratio of BSR (B = 16, 32) and of TC-GNN's condensed row windows. "Tile keep"
drops random BSR tiles to the given fraction; ``--tile-keep learned`` takes the fractions that the
learned `BlockEdgeMask` kept on Cora GCN (the ``tiles.kept_fraction`` of the ``block_mask_*``
runs in ``results/cora_gcn_sparsify_quant.jsonl``, mean over seeds per cost weight). Writes ``results/kernel_bench_<backend>.json`` atomically (device,
JAX version, date, every number).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import sparse as jsparse

from codesign import hwmodel
from codesign.bench import median_time_s
from codesign.data.synthetic import rmat_edges
from codesign.kernels import BlockSparseAdjacency, CondensedRowWindows, CooAdjacency, aggregate
from codesign.kernels.pallas_spmm import bsr_spmm_int8
from codesign.kernels.reorder import apply_permutation, rcm_permutation
from codesign.results import write_json_atomic


def median_ms(fn, *args, reps: int) -> float:
    return 1e3 * median_time_s(fn, *args, reps=reps)


def copy_bandwidth_gb_s(reps: int) -> float:
    """Device copy bandwidth (bytes read + written) of a 256 MiB f32 array: a jitted copy on a GPU;
    NumPy's `copyto` on the CPU, because XLA:CPU's elementwise loop does not reach the memory
    system's bandwidth (measured 4 GB/s vs 18 GB/s here)."""
    if jax.default_backend() == "cpu":
        a = np.random.default_rng(0).random(64 << 20, dtype=np.float32)
        b = np.empty_like(a)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            np.copyto(b, a)
            ts.append(time.perf_counter() - t0)
        return 2 * a.nbytes / float(np.median(ts)) / 1e9
    x = jax.random.normal(jax.random.key(0), (64 << 20,), jnp.float32)
    ms = median_ms(jax.jit(lambda a: a * 1.0000001), x, reps=reps)
    return 2 * x.nbytes / (ms * 1e-3) / 1e9


def load_graphs(args):
    graphs = {}
    try:
        from codesign.data import load_planetoid
        g = load_planetoid("cora", root=args.data_root)
        graphs["cora"] = (np.asarray(g.senders), np.asarray(g.receivers), g.n_nodes)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"skipping cora: {e}")
    s, r = rmat_edges(args.scale, args.edges, seed=0)
    graphs[f"rmat{args.scale}"] = (s, r, 1 << args.scale)
    return graphs


def impls(adj, bsr, n, f, on_gpu: bool, dense_ok: bool):
    """name -> (fn(operand, x) -> y, operand, x) for every implementation that applies. Operands
    are jit arguments, never closure constants (XLA would constant-fold the products)."""
    x = jax.random.normal(jax.random.key(0), (n, f), jnp.float32)
    xp = bsr.permute_features(x)
    out = {"segment": (lambda a, x: aggregate(a, x, impl="segment"), adj, x),
           "bsr_xla": (lambda a, x: aggregate(a, x, impl="bsr_xla"), bsr, xp)}
    m = jsparse.BCSR.from_bcoo(jsparse.BCOO((jnp.ones(adj.n_edges), jnp.stack([adj.receivers, adj.senders], 1)),
                                            shape=(n, n)).sum_duplicates())
    out["bcsr"] = (lambda a, x: a @ x, m, x)
    if dense_ok:
        out["dense"] = (lambda a, x: a @ x, jnp.zeros((n, n), jnp.float32).at[adj.receivers, adj.senders].add(1.0), x)
    if on_gpu:
        out["pallas"] = (lambda a, x: aggregate(a, x, impl="pallas"), bsr, xp)
        # int8 features with per-node scales, dequantized inside the kernel (forward only)
        scales = jnp.maximum(jnp.max(jnp.abs(xp), axis=1), 1e-12) / 127.0
        xq = jnp.clip(jnp.round(xp / scales[:, None]), -127, 127).astype(jnp.int8)
        out["pallas_int8"] = (lambda a, xs: bsr_spmm_int8(a, xs[0], xs[1]), bsr, (xq, scales))
    return out


def tile_fill(s, r, n: int, block_size: int, reorder) -> float:
    """Fill ratio of the B x B tiling (graph nonzeros / stored tile entries, as
    `BlockSparseAdjacency.fill_ratio`), counted from the tile coordinates without building the
    tiles: unreordered, the 2^20-node R-MAT graph has ~8M nonempty tiles (32 GB of values at B = 32)."""
    if reorder == "rcm":
        s, r = apply_permutation(s, r, rcm_permutation(s, r, n))
    s, r = np.asarray(s, np.int64), np.asarray(r, np.int64)
    nnz = np.unique(r * n + s).size
    tiles = np.unique((r // block_size) * (-(-n // block_size)) + s // block_size).size
    return nnz / (tiles * block_size ** 2) if tiles else 0.0


def tile_keeps(spec: str, learned_from: str) -> list[float]:
    """The kept tile fractions of ``--tile-keep``: numbers in (0, 1], and ``learned`` expanded to
    the mean ``tiles.kept_fraction`` per ``block_mask_*`` method of ``learned_from``.

    Raises:
      ValueError: a fraction outside (0, 1]; ``learned`` without block-mask records in the file.
    """
    out = []
    for item in (v.strip() for v in spec.split(",") if v.strip()):
        if item != "learned":
            keep = float(item)
            if not 0 < keep <= 1:
                raise ValueError(f"--tile-keep: {keep} is not a fraction in (0, 1]")
            out.append(keep)
            continue
        from codesign.results import ResultsStore
        by_method: dict = {}
        for rec in ResultsStore(learned_from).records():
            if str(rec.get("method", "")).startswith("block_mask") and rec.get("tiles"):
                by_method.setdefault(rec["method"], []).append(rec["tiles"]["kept_fraction"])
        if not by_method:
            raise ValueError(f"--tile-keep learned: no block_mask runs with tile counts in {learned_from} "
                             f"(run experiments/sparsify_quant.py --methods block_mask_cw0.3,block_mask_cw1)")
        out += [round(float(np.mean(v)), 4) for _, v in sorted(by_method.items())]
    return out


def _result(args, backend, copy_gb_s, formats, rows, failed, complete: bool) -> dict:
    seg = {(r_["graph"], r_["tile_keep"], r_["features"]): r_ for r_ in rows if r_["impl"] == "segment"}
    for r_ in rows:
        base = seg[(r_["graph"], r_["tile_keep"], r_["features"])]
        r_["speedup_vs_segment_fwd"] = base["forward_ms"] / r_["forward_ms"]
        r_["speedup_vs_segment_fwd_bwd"] = (None if r_["forward_backward_ms"] is None
                                            else base["forward_backward_ms"] / r_["forward_backward_ms"])
    device = jax.devices()[0]
    return {"what": "aggregation kernel benchmark", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
        timespec="seconds"), "device": getattr(device, "device_kind", str(device)), "backend": backend,
        "jax": jax.__version__, "platform": platform.platform(), "copy_bw_gb_s": copy_gb_s,
        "block_size": args.block_size, "reps": args.reps, "formats": formats, "rows": rows, "failed": failed,
        "pallas_timed": backend == "gpu", "complete": complete}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--edges", type=int, default=None, help="R-MAT draws (default 8 x nodes)")
    ap.add_argument("--features", default="64,128,256")
    ap.add_argument("--tile-keep", default="1.0,learned",
                    help="comma-separated kept tile fractions; 'learned' = the BlockEdgeMask fractions of --learned-from")
    ap.add_argument("--learned-from", default="results/cora_gcn_sparsify_quant.jsonl")
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.quick:
        args.scale, args.features, args.reps = 11, "64", 2
        args.tile_keep = "1.0"
    args.edges = args.edges or 8 * (1 << args.scale)
    backend = jax.default_backend()
    on_gpu = backend == "gpu"
    out_path = args.out or f"results/kernel_bench_{backend}{'_quick' if args.quick else ''}.json"
    copy_gb_s = copy_bandwidth_gb_s(args.reps)
    rows, formats, failed = [], {}, []
    for gname, (s, r, n) in load_graphs(args).items():
        adj0 = CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n)
        full = BlockSparseAdjacency.from_coo(adj0, args.block_size, reorder="rcm")
        formats[gname] = {
            "nodes": n, "edges": int(s.size),
            **{f"bsr{b}_{ro or 'none'}_fill": tile_fill(s, r, n, b, ro) for b in (16, 32) for ro in (None, "rcm")},
            "condensed16_rcm_fill": CondensedRowWindows.from_coo(adj0, window=16, reorder="rcm").fill_ratio,
        }
        for keep in tile_keeps(args.tile_keep, args.learned_from):
            bsr = full
            if keep < 1.0:
                mask = np.random.default_rng(1).random(full.nnz_blocks) < keep
                bsr = full.with_tile_mask(mask)
            # the COO graph with exactly the kept tiles' edges, so every impl computes the same product
            dense_tiles = np.asarray(bsr.data) != 0
            k_idx, a_idx, b_idx = np.nonzero(dense_tiles)
            bb = bsr.block_size
            rr = np.asarray(bsr.row_of_tile)[k_idx] * bb + a_idx
            cc = np.asarray(bsr.indices)[k_idx] * bb + b_idx
            perm = np.asarray(bsr.perm)
            valid = (rr < n) & (cc < n)
            adj = CooAdjacency(jnp.asarray(perm[cc[valid]], jnp.int32), jnp.asarray(perm[rr[valid]], jnp.int32), None, n)
            for f in [int(v) for v in args.features.split(",")]:
                nbytes = float(hwmodel.spmm_stage(n, adj.n_edges, f, 32.0, 32.0).compulsory_bytes)
                for name, (fn, operand, x) in impls(adj, bsr, n, f, on_gpu, n <= 8192).items():
                    try:
                        fwd = median_ms(jax.jit(fn), operand, x, reps=args.reps)
                        fwd_bwd_ms = None
                        if not name.endswith("int8"):  # int8 inputs have no gradient
                            ct = jax.random.normal(jax.random.key(1), x.shape, jnp.float32)
                            fwd_bwd = jax.jit(lambda a, x, ct, fn=fn: jax.value_and_grad(
                                lambda x: jnp.vdot(fn(a, x), ct))(x))
                            fwd_bwd_ms = median_ms(fwd_bwd, operand, x, ct, reps=args.reps)
                    except jax.errors.JaxRuntimeError as e:  # e.g. bsr_xla's [tiles, B, F] gather out of memory
                        failed.append({"graph": gname, "tile_keep": keep, "features": f, "impl": name,
                                       "error": str(e).splitlines()[0][:300]})
                        print(f"{gname:8s} keep {keep:.2f} F={f:4d} {name:11s} failed: {failed[-1]['error']}")
                        continue
                    row = {"graph": gname, "edges": adj.n_edges, "tile_keep": keep, "tiles": bsr.nnz_blocks,
                           "features": f, "impl": name, "forward_ms": fwd, "forward_backward_ms": fwd_bwd_ms,
                           "gb_s": nbytes / (fwd * 1e-3) / 1e9}
                    row["copy_bw_fraction"] = row["gb_s"] / copy_gb_s
                    rows.append(row)
                    fb = "      n/a" if fwd_bwd_ms is None else f"{fwd_bwd_ms:9.3f}"
                    print(f"{gname:8s} keep {keep:.2f} F={f:4d} {name:11s} fwd {fwd:9.3f} ms  fwd+bwd "
                          f"{fb} ms  {row['gb_s']:7.2f} GB/s "
                          f"({100 * row['copy_bw_fraction']:.0f}% of copy)")
            # partial results after every kept fraction (a long GPU run cut by its time limit keeps them)
            write_json_atomic(out_path, _result(args, backend, copy_gb_s, formats, rows, failed, complete=False))
    result = _result(args, backend, copy_gb_s, formats, rows, failed, complete=True)
    write_json_atomic(out_path, result)
    print(f"copy bandwidth {copy_gb_s:.1f} GB/s; formats {formats}")
    print(f"wrote {out_path}")
    return result


if __name__ == "__main__":
    main()
