"""Aggregation kernel benchmark: XLA segment_sum, dense matmul, jax.experimental.sparse BCSR,
BSR in plain XLA, and the Pallas BSR kernel (GPU only: interpret mode is not a timing), forward
and forward + backward, on Cora and an R-MAT graph after RCM reordering.

    python experiments/kernel_bench.py                      # CPU-sized R-MAT (scale 16)
    python experiments/kernel_bench.py --scale 20 --edges 8000000   # the 1M-node / 16M-edge graph (GPU)
    python experiments/kernel_bench.py --quick              # CI smoke run

Also the Pallas CSR edge-chunk kernel (`codesign.kernels.pallas_csr`: f32, bf16 and int8
features; GPU only) and cuSPARSE through `jax.experimental.sparse` (``bcsr`` / ``bcoo`` with
``jax_bcoo_cusparse_lowering=True`` on a GPU; the lowered HLO is checked for the cuSPARSE call).

Timing is device-side: ``--inner`` repetitions of the product run inside one jitted
``lax.fori_loop`` (each iteration's input depends on the previous output, so nothing is hoisted),
and the median over ``--reps`` such calls is divided by ``--inner``; sub-millisecond kernels are
not host-timed one call at a time. Every output is checked against segment_sum at full scale
(``rel_err_vs_segment``). The top-level ``"summary"`` holds the issue-19 ratios (medians over F
on the R-MAT graph); ``--predict`` prints the `h100` cost model's CSR-kernel times instead (no
timing, any machine).

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
from jax import lax
from jax.experimental import sparse as jsparse

from codesign import hwmodel
from codesign.bench import median_time_s
from codesign.data.synthetic import rmat_edges
from codesign.kernels import BlockSparseAdjacency, CondensedRowWindows, CooAdjacency, aggregate
from codesign.kernels.pallas_csr import csr_chunk_spmm, csr_chunk_spmm_int8, csr_chunks, work_item_stats
from codesign.kernels.pallas_spmm import bsr_spmm_int8
from codesign.kernels.reorder import apply_permutation, rcm_permutation
from codesign.results import write_json_atomic


# nominal DRAM bandwidth (bytes/s) by device kind, for the compulsory-bytes roofline: NVIDIA H100 SXM5 /
# PCIe and H200 datasheets. Other devices: the measured copy bandwidth.
NOMINAL_DRAM_BW = (("H200", 4.8e12), ("H100 PCIe", 2.0e12), ("H100", 3.35e12))
CSR_IMPLS = ("pallas_csr", "pallas_csr_bf16", "pallas_csr_int8")
CUSPARSE_IMPLS = ("bcsr", "bcoo")
BSR_IMPLS = ("bsr_xla", "pallas", "pallas_int8")


def median_ms(fn, *args, reps: int) -> float:
    return 1e3 * median_time_s(fn, *args, reps=reps)


_SENTINEL = -1.2345e-33  # a value no output element takes in practice: the dependence below is never a change


def _bumped(x, y):
    """``x`` (or the first array of a tuple) with element [0, ..., 0] raised by 1 where the first
    element of the first leaf of ``y`` equals `_SENTINEL` (never, in practice): each call's input
    depends on the previous call's output, so no call can be hoisted out of the loop. A one-element
    ``dynamic_update_slice`` of a loop carry: in place on the CPU (a tiny op on a 16 MB ``x`` cost
    0.3 ms a call); on an H200 the timings point to a copy of ``x`` per call (inferred, not profiled:
    results/gpu/h200/README.md), which `experiments/fit_gpu_device.py` models as part of every call."""
    first = x[0] if isinstance(x, tuple) else x
    y0 = jax.tree.leaves(y)[0].reshape(-1)[0]
    bump = (y0 == jnp.asarray(_SENTINEL, y0.dtype)).astype(first.dtype)
    idx = (0,) * first.ndim
    first = lax.dynamic_update_slice(first, (first[tuple(slice(0, 1) for _ in idx)] + bump), idx)
    return (first, *x[1:]) if isinstance(x, tuple) else first


def device_loop(fn, operand, x, calls: int):
    """``run(operand, x)``: ``calls`` dependent calls of ``fn(operand, x)`` in one jitted loop
    (a static trip count: XLA:GPU evaluates a dynamic loop condition on the host every iteration);
    returns the last output, whole, so every call writes all of it (XLA fuses a slice into an
    elementwise or reduce producer: reading one element of the output would shrink the call to that
    element). ``gpu_session.sh`` turns XLA:GPU's loop unrolling off, under which the earlier calls'
    outputs would again be read at one element only."""
    y0 = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, operand, x))

    def run(a, x):
        def body(i, carry):
            x, _ = carry
            y = fn(a, x)
            return _bumped(x, y), y
        return lax.fori_loop(0, calls, body, (x, y0))[1]
    return jax.jit(run)


def device_loop_s(fn, operand, x, *, calls: int, reps: int) -> float:
    """Median host seconds of ``reps`` runs of one compiled `device_loop` of ``calls`` calls (after
    one warm-up run): the calls plus the loop's fixed cost, which the caller subtracts."""
    return median_time_s(device_loop(fn, operand, x, calls), operand, x, reps=reps)


def device_loop_ms(fn, operand, x, *, inner: int, reps: int) -> float:
    """Device time (ms) of one ``fn(operand, x)``: the median host time of loops of ``2 * inner``
    calls minus that of loops of ``inner`` calls (`device_loop`; median over ``reps``, alternated),
    over ``inner``: the loop's fixed costs (launch, the copy of ``x`` into the carry, the host
    wait) cancel, and no call is host-timed alone."""
    runs = {c: device_loop(fn, operand, x, c) for c in (inner, 2 * inner)}
    for run in runs.values():  # compile and warm up
        jax.block_until_ready(run(operand, x))
    ts = {c: [] for c in runs}
    for _ in range(reps):
        for c, run in runs.items():
            t0 = time.perf_counter()
            jax.block_until_ready(run(operand, x))
            ts[c].append(time.perf_counter() - t0)
    per_call = (np.median(ts[2 * inner]) - np.median(ts[inner])) / inner
    if per_call <= 0:  # the difference is lost in host noise (a call far below the timer's spread)
        per_call = np.median(ts[2 * inner]) / (2 * inner)
    return 1e3 * float(per_call)


def nominal_dram_bw(device_kind: str, copy_gb_s: float) -> tuple[float, str]:
    """``(bytes/s, source)`` of the roofline's DRAM bandwidth for ``device_kind``."""
    for name, bw in NOMINAL_DRAM_BW:
        if name in device_kind:
            return bw, f"nominal {name}"
    return copy_gb_s * 1e9, "measured copy"


def csr_modeled(s, r, n: int, features, hw_name: str = "h100", chunks=None) -> dict:
    """The cost model's CSR-kernel forward time (ms) and compulsory bytes per F for the graph
    ``s -> r``: `hwmodel.csr_chunk_spmm_stages` (unweighted: no edge values) with the graph's
    measured gather locality and its split rows, on preset ``hw_name``; also with uniform reuse
    (no locality) and segment_sum's modeled time, all on the same preset."""
    hw = hwmodel.presets.get(hw_name)
    loc = hwmodel.measure_locality(s, r, n)
    if chunks is None:
        chunks = csr_chunks(CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n))
    st = work_item_stats(chunks)
    out = {"hw": hw_name, "work_items": st, "by_features": {}}
    for f in features:
        row = {}
        for bits, tag in ((32.0, "f32"), (16.0, "bf16"), (8.0, "int8")):
            out_bits = 32.0 if bits == 8.0 else bits
            kw = dict(edge_values=False, node_scales=1 if bits == 8.0 else 0, split_rows=st["split_rows"],
                      slots=st["slots"])
            stages = hwmodel.csr_chunk_spmm_stages(n, s.size, f, bits, out_bits, locality=loc, **kw)
            row[f"csr_{tag}_ms"] = 1e3 * sum(float(hwmodel.stage_cost(x, hw).latency_s) for x in stages)
            row[f"csr_{tag}_compulsory_bytes"] = sum(float(x.compulsory_bytes) for x in stages[:1])
            if tag == "f32":
                uni = hwmodel.csr_chunk_spmm_stages(n, s.size, f, bits, out_bits, **kw)
                row["csr_f32_uniform_reuse_ms"] = 1e3 * sum(float(hwmodel.stage_cost(x, hw).latency_s) for x in uni)
                seg = hwmodel.segment_spmm_stages(n, s.size, f, bits, bits, locality=loc)
                row["segment_f32_ms"] = 1e3 * sum(float(hwmodel.stage_cost(x, hw).latency_s) for x in seg)
                row["compulsory_roofline_ms"] = 1e3 * row["csr_f32_compulsory_bytes"] / hw.dram_bw_bytes_per_s
                row["fraction_of_compulsory_roofline"] = row["compulsory_roofline_ms"] / row["csr_f32_ms"]
        out["by_features"][str(f)] = row
    return out


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
    wanted = {g.strip() for g in args.graphs.split(",") if g.strip()}
    if wanted - {"cora", "rmat"}:
        raise ValueError(f"--graphs: unknown graph(s) {sorted(wanted - {'cora', 'rmat'})}; known: cora, rmat")
    try:
        if "cora" not in wanted:
            raise FileNotFoundError("not in --graphs")
        from codesign.data import load_planetoid
        g = load_planetoid("cora", root=args.data_root)
        graphs["cora"] = (np.asarray(g.senders), np.asarray(g.receivers), g.n_nodes)
    except (FileNotFoundError, RuntimeError) as e:
        print(f"skipping cora: {e}")
    if "rmat" in wanted:
        s, r = rmat_edges(args.scale, args.edges, seed=0)
        graphs[f"rmat{args.scale}"] = (s, r, 1 << args.scale)
    return graphs


def int8_rows(x):
    """Symmetric per-row int8 quantization: ``(x_q int8 [N, F], scales f32 [N])``."""
    scales = jnp.maximum(jnp.max(jnp.abs(x), axis=1), 1e-12) / 127.0
    return jnp.clip(jnp.round(x / scales[:, None]), -127, 127).astype(jnp.int8), scales


def impls(adj, bsr, n, f, on_gpu: bool, dense_ok: bool, csr=None):
    """name -> (fn(operand, x) -> y, operand, x) for every implementation that applies. Operands
    are jit arguments, never closure constants (XLA would constant-fold the products). On a GPU
    ``bcsr`` and ``bcoo`` run cuSPARSE (``jax_bcoo_cusparse_lowering``, set in `main`)."""
    x = jax.random.normal(jax.random.key(0), (n, f), jnp.float32)
    out = {"segment": (lambda a, x: aggregate(a, x, impl="segment"), adj, x)}
    if bsr is not None:
        xp = bsr.permute_features(x)
        out["bsr_xla"] = (lambda a, x: aggregate(a, x, impl="bsr_xla"), bsr, xp)
    coo = jsparse.BCOO((jnp.ones(adj.n_edges), jnp.stack([adj.receivers, adj.senders], 1)),
                       shape=(n, n)).sum_duplicates()
    m = jsparse.BCSR.from_bcoo(coo)
    out["bcsr"] = (lambda a, x: a @ x, m, x)
    if on_gpu:
        out["bcoo"] = (lambda a, x: a @ x, coo, x)
    if on_gpu and csr is not None:
        out["pallas_csr"] = (lambda c, x: csr_chunk_spmm(c, x), csr, x)
        out["pallas_csr_bf16"] = (lambda c, x: csr_chunk_spmm(c, x), csr, x.astype(jnp.bfloat16))
        out["pallas_csr_int8"] = (lambda c, xs: csr_chunk_spmm_int8(c, xs[0], xs[1]), csr, int8_rows(x))
    if dense_ok:
        out["dense"] = (lambda a, x: a @ x, jnp.zeros((n, n), jnp.float32).at[adj.receivers, adj.senders].add(1.0), x)
    if on_gpu and bsr is not None:
        out["pallas"] = (lambda a, x: aggregate(a, x, impl="pallas"), bsr, xp)
        # int8 features with per-node scales, dequantized inside the kernel (forward only)
        out["pallas_int8"] = (lambda a, xs: bsr_spmm_int8(a, xs[0], xs[1]), bsr, int8_rows(xp))
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


def predict(args) -> dict:
    """``--predict``: `csr_modeled` for the R-MAT graph of ``--scale`` / ``--edges`` at each F,
    printed and written to ``--out`` (default ``results/kernel_bench_predictions_<hw>.json``)."""
    s, r = rmat_edges(args.scale, args.edges, seed=0)
    n = 1 << args.scale
    features = [int(v) for v in args.features.split(",")]
    out = {"what": "modeled CSR-kernel forward times (no timing)", "graph": f"rmat{args.scale}", "nodes": n,
           "edges": int(s.size), "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           **csr_modeled(s, r, n, features, args.hw)}
    for f, row in out["by_features"].items():
        print(f"F={f:>4s} " + "  ".join(f"{k} {v:.4g}" for k, v in row.items()))
    path = args.out or f"results/kernel_bench_predictions_{args.hw}.json"
    write_json_atomic(path, out)
    print(f"wrote {path}")
    return out


def summary(rows: list, graph: str, date: str) -> dict:
    """The issue-19 ratios on ``graph`` at tile keep 1.0: medians over F of segment_sum time /
    CSR time (f32 forward, f32 forward + backward), best cuSPARSE (bcsr or bcoo) / CSR (f32
    forward), segment_sum f32 / CSR int8 (forward), and the CSR f32 forward's fraction of its
    compulsory-bytes roofline; None where a needed impl was not timed (e.g. on a CPU)."""
    by = {}
    for r_ in rows:
        if r_["graph"] == graph and r_["tile_keep"] == 1.0:
            by.setdefault(r_["features"], {})[r_["impl"]] = r_

    def med(fn):
        vals = []
        for impls_ in by.values():
            try:
                vals.append(fn(impls_))
            except (KeyError, TypeError):
                continue
        return float(np.median(vals)) if vals else None

    def best_cusparse(i):
        ms = [i[k]["forward_ms"] for k in CUSPARSE_IMPLS if k in i and i[k].get("cusparse_call")]
        return min(ms) if ms else None

    out = {
        "graph": graph, "features": sorted(by),
        "csr_vs_segment_fwd_f32": med(lambda i: i["segment"]["forward_ms"] / i["pallas_csr"]["forward_ms"]),
        "csr_vs_segment_fwdbwd_f32": med(lambda i: i["segment"]["forward_backward_ms"]
                                         / i["pallas_csr"]["forward_backward_ms"]),
        "csr_vs_cusparse_fwd_f32": med(lambda i: best_cusparse(i) / i["pallas_csr"]["forward_ms"]),
        "csr_int8_vs_segment_fwd": med(lambda i: i["segment"]["forward_ms"] / i["pallas_csr_int8"]["forward_ms"]),
        "csr_int8_vs_csr_f32_fwd": med(lambda i: i["pallas_csr"]["forward_ms"] / i["pallas_csr_int8"]["forward_ms"]),
        "fraction_of_compulsory_roofline": med(lambda i: i["pallas_csr"]["compulsory_roofline_fraction"]),
        "date": date,
    }
    targets = {"csr_vs_segment_fwd_f32": 3.0, "csr_vs_segment_fwdbwd_f32": 3.0, "csr_vs_cusparse_fwd_f32": 1.0,
               "fraction_of_compulsory_roofline": 0.30, "csr_int8_vs_csr_f32_fwd": 1.0}
    out["targets_met"] = {k: (None if out[k] is None else bool(out[k] >= t if k != "csr_int8_vs_csr_f32_fwd"
                                                                else out[k] > t)) for k, t in targets.items()}
    return out


def _result(args, backend, copy_gb_s, formats, rows, failed, complete: bool) -> dict:
    seg = {(r_["graph"], r_["tile_keep"], r_["features"]): r_ for r_ in rows if r_["impl"] == "segment"}
    for r_ in rows:
        base = seg[(r_["graph"], r_["tile_keep"], r_["features"])]
        r_["speedup_vs_segment_fwd"] = base["forward_ms"] / r_["forward_ms"]
        r_["speedup_vs_segment_fwd_bwd"] = (None if r_["forward_backward_ms"] is None
                                            else base["forward_backward_ms"] / r_["forward_backward_ms"])
    device = jax.devices()[0]
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    kind = getattr(device, "device_kind", str(device))
    return {"what": "aggregation kernel benchmark", "date": date, "device": kind, "backend": backend,
            "jax": jax.__version__, "platform": platform.platform(), "copy_bw_gb_s": copy_gb_s,
            "roofline_dram_bw": dict(zip(("bytes_per_s", "source"), nominal_dram_bw(kind, copy_gb_s))),
            "block_size": args.block_size, "reps": args.reps, "inner_reps": args.inner,
            "timing": "device loop: --inner calls in one jitted fori_loop, median of --reps loops / --inner",
            "cusparse_lowering": bool(jax.config.jax_bcoo_cusparse_lowering),
            "summary": summary(rows, f"rmat{args.scale}", date), "formats": formats, "rows": rows,
            "failed": failed, "pallas_timed": backend == "gpu", "complete": complete}


def _time_feature(args, gname, adj, bsr, csr, n, f, keep, on_gpu, copy_gb_s, wanted, rows, failed):
    """Times every wanted impl on one graph at width ``f`` (``bsr`` None: no BSR impls) and appends
    a row per impl to ``rows`` (a failure to ``failed``)."""
    nbytes = float(hwmodel.spmm_stage(n, adj.n_edges, f, 32.0, 32.0).compulsory_bytes)
    bw, _ = nominal_dram_bw(getattr(jax.devices()[0], "device_kind", ""), copy_gb_s)
    want = None
    for name, (fn, operand, x) in impls(adj, bsr, n, f, on_gpu, n <= 8192, csr).items():
        if wanted is not None and name not in wanted:
            continue
        try:
            y = jax.jit(fn)(operand, x)
            if name in ("bsr_xla", "pallas", "pallas_int8"):
                y = bsr.unpermute(y)
            if want is None:  # "segment" comes first: the full-scale reference
                want = y.astype(jnp.float32)
            err = float(jnp.linalg.norm(y.astype(jnp.float32) - want) / jnp.linalg.norm(want))
            del y
            fwd = device_loop_ms(fn, operand, x, inner=args.inner, reps=args.reps)
            fwd_bwd_ms = None
            if not name.endswith("int8"):  # int8 inputs have no gradient
                ct = jax.random.normal(jax.random.key(1), jax.tree.leaves(x)[0].shape, jnp.float32)
                fwd_bwd = (lambda a_ct, x, fn=fn: jax.value_and_grad(
                    lambda x: jnp.vdot(fn(a_ct[0], x).astype(jnp.float32), a_ct[1]))(x))
                fwd_bwd_ms = device_loop_ms(fwd_bwd, (operand, ct), x, inner=args.inner, reps=args.reps)
            lowered = jax.jit(fn).lower(operand, x).as_text() if name in CUSPARSE_IMPLS else ""
        except jax.errors.JaxRuntimeError as e:  # e.g. bsr_xla's [tiles, B, F] gather out of memory
            failed.append({"graph": gname, "tile_keep": keep, "features": f, "impl": name,
                           "error": str(e).splitlines()[0][:300]})
            print(f"{gname:8s} keep {keep:.2f} F={f:4d} {name:11s} failed: {failed[-1]['error']}")
            continue
        row = {"graph": gname, "edges": adj.n_edges, "tile_keep": keep, "tiles": None if bsr is None else bsr.nnz_blocks,
               "features": f, "impl": name, "forward_ms": fwd, "forward_backward_ms": fwd_bwd_ms,
               "gb_s": nbytes / (fwd * 1e-3) / 1e9}
        row["copy_bw_fraction"] = row["gb_s"] / copy_gb_s
        row["rel_err_vs_segment"] = err
        if name in CUSPARSE_IMPLS:
            row["cusparse_call"] = "cusparse" in lowered or "hipsparse" in lowered
        if name in CSR_IMPLS:  # the kernel's own compulsory bytes (no edge values; int8: + scales)
            bits = {"pallas_csr": 32.0, "pallas_csr_bf16": 16.0, "pallas_csr_int8": 8.0}[name]
            st = work_item_stats(csr)
            stages = hwmodel.csr_chunk_spmm_stages(n, adj.n_edges, f, bits, 32.0 if bits == 8 else bits,
                                                   edge_values=False, node_scales=int(bits == 8.0),
                                                   split_rows=st["split_rows"], slots=st["slots"])
            row["compulsory_bytes"] = float(stages[0].compulsory_bytes)
            row["compulsory_roofline_fraction"] = row["compulsory_bytes"] / bw / (fwd * 1e-3)
            row["work_items"] = st
        rows.append(row)
        fb = "      n/a" if fwd_bwd_ms is None else f"{fwd_bwd_ms:9.3f}"
        print(f"{gname:8s} keep {keep:.2f} F={f:4d} {name:11s} fwd {fwd:9.3f} ms  fwd+bwd "
              f"{fb} ms  {row['gb_s']:7.2f} GB/s "
              f"({100 * row['copy_bw_fraction']:.0f}% of copy)")


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
    ap.add_argument("--graphs", default="cora,rmat", help="comma-separated: cora, rmat")
    ap.add_argument("--impls", default=None,
                    help="comma-separated impls to time (default: all that apply); without a BSR impl "
                         "(bsr_xla, pallas, pallas_int8) the BSR tiles are not built and --tile-keep is 1.0")
    ap.add_argument("--reps", type=int, default=5, help="host-timed device loops per measurement (median)")
    ap.add_argument("--inner", type=int, default=20, help="products per device loop")
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--predict", action="store_true",
                    help="print and write the cost model's CSR-kernel predictions for the R-MAT graph (no timing)")
    ap.add_argument("--hw", default="h100", help="preset of --predict")
    args = ap.parse_args(argv)
    if args.quick:
        args.scale, args.features, args.reps, args.inner = 11, "64", 2, 2
        args.tile_keep = "1.0"
    args.edges = args.edges or 8 * (1 << args.scale)
    if args.predict:
        return predict(args)
    backend = jax.default_backend()
    on_gpu = backend == "gpu"
    if on_gpu:  # the cuSPARSE baseline: BCSR / BCOO products lower to cuSPARSE SpMM
        jax.config.update("jax_bcoo_cusparse_lowering", True)
    out_path = args.out or f"results/kernel_bench_{backend}{'_quick' if args.quick else ''}.json"
    copy_gb_s = copy_bandwidth_gb_s(args.reps)
    rows, formats, failed = [], {}, []
    wanted = None if args.impls is None else {v.strip() for v in args.impls.split(",") if v.strip()}
    if wanted is not None and "segment" not in wanted:
        raise ValueError("--impls: must include segment (the reference every output is checked against)")
    with_bsr = wanted is None or bool(wanted & set(BSR_IMPLS))
    for gname, (s, r, n) in load_graphs(args).items():
        adj0 = CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n)
        if not with_bsr:  # no tiles: the graph as given (its edges are unique), tile keep 1.0
            formats[gname] = {"nodes": n, "edges": int(s.size)}
            csr = csr_chunks(adj0) if on_gpu else None
            for f in [int(v) for v in args.features.split(",")]:
                _time_feature(args, gname, adj0, None, csr, n, f, 1.0, on_gpu, copy_gb_s, wanted, rows, failed)
                write_json_atomic(out_path, _result(args, backend, copy_gb_s, formats, rows, failed, complete=False))
            continue
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
            csr = csr_chunks(adj) if on_gpu else None  # the same edges for the CSR kernel (host-side plan)
            for f in [int(v) for v in args.features.split(",")]:
                _time_feature(args, gname, adj, bsr, csr, n, f, keep, on_gpu, copy_gb_s, wanted, rows, failed)
            # partial results after every kept fraction (a long GPU run cut by its time limit keeps them)
            write_json_atomic(out_path, _result(args, backend, copy_gb_s, formats, rows, failed, complete=False))
    result = _result(args, backend, copy_gb_s, formats, rows, failed, complete=True)
    write_json_atomic(out_path, result)
    print(f"copy bandwidth {copy_gb_s:.1f} GB/s; formats {formats}")
    print(f"wrote {out_path}")
    return result


if __name__ == "__main__":
    main()
