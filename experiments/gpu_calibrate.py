"""Device-timed calibration grid and NVML energy for the GPU presets (issue 39).

    python experiments/gpu_calibrate.py --out results/gpu/h200/gpu_calibration.json   # on a GPU, ~4 min
    python experiments/gpu_calibrate.py --quick --out /tmp/cal.json                   # CPU dry run (tiny sizes)

Times, device-side, the kernels the `h100` / `h200` presets price: ``--inner`` dependent calls in
one jitted XLA loop (`kernel_bench.device_loop`; 10x as many for points under 64 MB), median of
``--reps`` loops. The ``launch`` point takes two loop lengths and differences them
(`kernel_bench.device_loop_ms`), which also gives the loop's fixed cost; every other point compiles
one loop length and subtracts that fixed cost (`kernel_bench.device_loop_s`), one compile a point.

* ``launch``: the same loop around an 8-element kernel (the fixed cost each timed call carries);
* ``copy``: ``y = x * c`` over 1 MiB .. 1 GiB of f32 (bytes read + written);
* ``gemm``: ``jnp.dot`` at (M, K, N) over GNN-layer shapes and 8192^3, as ``float32`` with XLA's
  default precision (TF32 on Hopper, recorded as ``tf32``), ``float32`` at ``Precision.HIGHEST``
  (``fp32``), ``bfloat16`` and ``int8`` (int32 accumulation); the library call XLA chose is recorded;
* ``spmm``: XLA gather + ``segment_sum`` (what `aggregate(impl="segment")` runs) on R-MAT graphs
  from 2^10 to 2^20 nodes (mean degree 8, `rmat_edges(scale, 4 * 2^scale, seed=scale)`) at widths
  16 / 64 / 256, f32: tiny problems price the fixed per-kernel cost, large ones the gathers;
* ``sddmm``: ``out[e] = <x[senders[e]], y[receivers[e]]>`` on the same graphs and widths;
* ``pallas_csr``: the Pallas CSR edge-chunk kernel (`codesign.kernels.pallas_csr`) on the
  2^14 and 2^17 graphs, f32 and bf16 (its 2^20 timings are `kernel_bench.py`'s, kept out of any fit).

Energy (``--energy-seconds`` per loop, GPU only): NVML's ``nvmlDeviceGetTotalEnergyConsumption``
(mJ since the driver loaded; `nvidia-ml-py`) read around one device loop of each of: a 1 GiB copy,
8192^3 GEMMs at each precision, SpMM and SDDMM on the 2^20 graph at F = 64, and an idle wait;
recorded per call (J), with the loop's mean power, SM clock and temperature before and after. The
fit (pJ per MAC per precision, pJ per DRAM byte, static power) is done on the CPU afterwards from
this file. Without NVML (a CPU, a sandbox without the counter) the energy section records why.

The sizes of every point are recorded, not the modeled stages: the stages are rebuilt on the CPU
(`rmat_edges` is deterministic), so the model can change without re-timing. The file is rewritten
atomically after every kind, so a run cut by its time limit keeps what finished.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_bench import device_loop, device_loop_ms, device_loop_s  # noqa: E402

from codesign.data.synthetic import rmat_edges  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402

GEMM_DTYPES = ("tf32", "fp32", "bfloat16", "int8")
RMAT_DEGREE = 8


def rmat_graph(scale: int):
    """The calibration grid's R-MAT graph at ``scale`` (mean degree `RMAT_DEGREE`, seed = scale):
    ``(senders, receivers, n)`` as numpy int32 arrays."""
    s, r = rmat_edges(scale, RMAT_DEGREE * (1 << scale) // 2, seed=scale)
    return np.asarray(s, np.int32), np.asarray(r, np.int32), 1 << scale


def grid(quick: bool, on_gpu: bool) -> list[dict]:
    """The calibration points (dicts of kind and sizes), cheapest kinds first."""
    if quick:
        copies, gemms, scales, widths, csr_scales = (1 << 16,), [(256, 64, 64)], (8, 10), (16,), (8,)
    else:
        copies = (1 << 18, 1 << 22, 1 << 26, 1 << 28)
        gemms = [(m, k, n) for m in (16384, 1048576) for k in (64, 512) for n in (64, 256)] + [(8192, 8192, 8192)]
        scales, widths, csr_scales = (10, 14, 17, 20), (16, 64, 256), (14, 17)
    # "launch": a loop iteration with an 8-element kernel: the fixed cost every timed call carries
    # (the call's own launch and the one-element input bump of `kernel_bench.device_loop`)
    pts = [{"kind": "launch", "elements": 8, "dtype": "float32"}]
    pts += [{"kind": "copy", "elements": e, "dtype": "float32"} for e in copies]
    pts += [{"kind": "gemm", "m": m, "k": k, "n": n, "dtype": dt} for (m, k, n) in gemms for dt in GEMM_DTYPES]
    for kind in ("spmm", "sddmm"):
        pts += [{"kind": kind, "scale": s, "degree": RMAT_DEGREE, "width": f, "dtype": "float32"}
                for s in scales for f in widths]
    if on_gpu or quick:  # off a GPU the Pallas kernel runs in interpret mode: a dry run, not a timing
        pts += [{"kind": "pallas_csr", "scale": s, "degree": RMAT_DEGREE, "width": f, "dtype": dt}
                for s in csr_scales for f in ((16,) if quick else (64, 256))
                for dt in (("float32",) if quick or f == 256 else ("float32", "bfloat16"))]
    return pts


def _gemm_fn(dtype: str):
    if dtype == "fp32":
        return lambda b, a: jnp.dot(a, b, precision=lax.Precision.HIGHEST)
    if dtype == "int8":
        return lambda b, a: jnp.dot(a, b, preferred_element_type=jnp.int32)
    return lambda b, a: jnp.dot(a, b)


def _gemm_operands(p):
    dt = {"tf32": jnp.float32, "fp32": jnp.float32, "bfloat16": jnp.bfloat16}.get(p["dtype"])
    ka, kb = jax.random.split(jax.random.key(0))
    if dt is None:  # int8: random values in [-127, 127]
        a = jax.random.randint(ka, (p["m"], p["k"]), -127, 128, jnp.int8)
        b = jax.random.randint(kb, (p["k"], p["n"]), -127, 128, jnp.int8)
    else:
        a = jax.random.normal(ka, (p["m"], p["k"]), dt)
        b = jax.random.normal(kb, (p["k"], p["n"]), dt)
    return b, a


def _library_call(fn, operand, x) -> str:
    """The custom-call targets (cuBLAS, cuSPARSE, Triton) in the compiled HLO of ``fn``, or ''."""
    try:
        text = jax.jit(fn).lower(operand, x).compile().as_text()
    except Exception as e:  # noqa: BLE001 - a record, not a failure
        return f"unknown ({type(e).__name__})"
    import re
    return ",".join(sorted(set(re.findall(r'custom_call_target="([^"]+)"', text))))


def point_fn(p: dict, graphs: dict):
    """``(fn(operand, x), operand, x)`` of one point, its operands already on the device."""
    if p["kind"] in ("copy", "launch"):
        x = jax.random.normal(jax.random.key(0), (p["elements"],), jnp.float32)
        return (lambda c, x: x * c), jnp.float32(1.0000001), x
    if p["kind"] == "gemm":
        b, a = _gemm_operands(p)
        return _gemm_fn(p["dtype"]), b, a
    s, r, n = graphs[p["scale"]]
    dt = jnp.bfloat16 if p["dtype"] == "bfloat16" else jnp.float32
    x = jax.random.normal(jax.random.key(0), (n, p["width"]), dt)
    sr = (jnp.asarray(s), jnp.asarray(r))
    if p["kind"] == "spmm":
        return (lambda sr, x: jax.ops.segment_sum(x[sr[0]], sr[1], num_segments=n)), sr, x
    if p["kind"] == "sddmm":
        y = jax.random.normal(jax.random.key(1), (n, p["width"]), dt)
        return (lambda sr, xy: jnp.sum(xy[0][sr[0]] * xy[1][sr[1]], axis=-1)), sr, (x, y)
    from codesign.kernels import CooAdjacency
    from codesign.kernels.pallas_csr import csr_chunk_spmm, csr_chunks
    key = ("csr", p["scale"])
    if key not in graphs:
        graphs[key] = csr_chunks(CooAdjacency(sr[0], sr[1], None, n))
    return (lambda c, x: csr_chunk_spmm(c, x)), graphs[key], x


def touched_bytes(p: dict, graphs: dict) -> float:
    """A rough count of the bytes one call of point ``p`` touches (f32): to size its device loop."""
    if p["kind"] in ("copy", "launch"):
        return 8.0 * p["elements"]
    if p["kind"] == "gemm":
        return 4.0 * (p["m"] * p["k"] + p["k"] * p["n"] + p["m"] * p["n"])
    return 8.0 * graphs[p["scale"]][0].size * p["width"]


def inner_for(p: dict, graphs: dict, inner: int) -> int:
    """Calls per device loop: ``inner``, or 10x that for points under 64 MB touched (microsecond
    calls, whose loop-length difference must stand above the host timer's noise)."""
    return inner * 10 if touched_bytes(p, graphs) < 64e6 else inner


class Energy:
    """NVML's energy counter of device 0 (`nvidia-ml-py`); ``error`` says why it is unavailable."""

    def __init__(self):
        self.nvml, self.handle, self.error = None, None, None
        try:
            import pynvml
            pynvml.nvmlInit()
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.nvml = pynvml
        except Exception as e:  # noqa: BLE001 - no GPU, no library, or no counter: recorded
            self.error = f"{type(e).__name__}: {e}"[:300]

    def joules(self) -> float:
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle) / 1e3

    def state(self) -> dict:
        n, h = self.nvml, self.handle
        out = {}
        for key, fn in (("sm_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
                        ("mem_clock_mhz", lambda: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                        ("temperature_c", lambda: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                        ("power_w", lambda: n.nvmlDeviceGetPowerUsage(h) / 1e3),
                        ("power_limit_w", lambda: n.nvmlDeviceGetEnforcedPowerLimit(h) / 1e3)):
            try:
                out[key] = fn()
            except Exception:  # noqa: BLE001
                out[key] = None
        return out


def energy_loop(p: dict, fn, operand, x, seconds: float, per_call_s: float, meter: Energy) -> dict:
    """Energy of one device loop of ``fn`` lasting about ``seconds``: J per call, mean power."""
    inner = max(1, int(seconds / max(per_call_s, 1e-7)))
    run = device_loop(fn, operand, x, inner)
    jax.block_until_ready(run(operand, x))  # compile, and the clocks up
    before = meter.state()
    e0, t0 = meter.joules(), time.perf_counter()
    jax.block_until_ready(run(operand, x))
    e1, t1 = meter.joules(), time.perf_counter()
    return {"point": p, "calls": inner, "loop_s": t1 - t0, "joules": e1 - e0, "joules_per_call": (e1 - e0) / inner,
            "seconds_per_call": (t1 - t0) / inner, "mean_power_w": (e1 - e0) / (t1 - t0),
            "state_before": before, "state_after": meter.state()}


def energy_points(quick: bool) -> list[dict]:
    if quick:
        return [{"kind": "copy", "elements": 1 << 16, "dtype": "float32"}]
    return ([{"kind": "copy", "elements": 1 << 28, "dtype": "float32"}]
            + [{"kind": "gemm", "m": 8192, "k": 8192, "n": 8192, "dtype": dt} for dt in GEMM_DTYPES]
            + [{"kind": k, "scale": 20, "degree": RMAT_DEGREE, "width": 64, "dtype": "float32"}
               for k in ("spmm", "sddmm")])


def measure_energy(args, graphs: dict, timed_by: dict, failed: list) -> dict:
    """The ``"energy"`` section: an idle wait and one `energy_loop` per `energy_points` entry."""
    meter = Energy()
    if meter.error is not None:
        return {"available": False, "error": meter.error}
    loops = []
    e0, t0 = meter.joules(), time.perf_counter()
    time.sleep(max(args.energy_seconds, 0.05))
    idle = {"seconds": time.perf_counter() - t0, "joules": meter.joules() - e0, "state": meter.state()}
    idle["mean_power_w"] = idle["joules"] / idle["seconds"]
    print(f"idle {idle['mean_power_w']:.1f} W", flush=True)
    for p in energy_points(args.quick):
        try:
            fn, operand, x = point_fn(p, graphs)
            per_call = timed_by.get(repr(sorted(p.items())))
            per_call = per_call or 1e-3 * device_loop_ms(fn, operand, x, inner=args.inner, reps=2)
            loops.append(energy_loop(p, fn, operand, x, args.energy_seconds, per_call, meter))
            e = loops[-1]
            print(f"energy {p['kind']:6s} {p.get('dtype')} {e['mean_power_w']:7.1f} W "
                  f"{1e3 * e['joules_per_call']:9.4f} mJ/call {1e3 * e['seconds_per_call']:8.4f} ms/call", flush=True)
            del fn, operand, x
        except Exception as e:  # noqa: BLE001 - recorded, the other loops go on
            failed.append({**p, "energy": True, "error": f"{type(e).__name__}: {str(e)[:300]}"})
            print(f"energy {p} failed: {failed[-1]['error']}", flush=True)
    return {"available": True, "counter": "nvmlDeviceGetTotalEnergyConsumption (mJ)", "idle": idle, "loops": loops}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, 1 rep: a dry run of the code paths")
    ap.add_argument("--out", default="results/gpu/gpu_calibration.json")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--energy-seconds", type=float, default=1.2)
    ap.add_argument("--no-energy", action="store_true")
    ap.add_argument("--resume", default=None,
                    help="a earlier output of this script: its timed points are kept and not timed again")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.inner, args.energy_seconds = 1, 2, 0.05
    on_gpu = jax.default_backend() == "gpu"
    dev = jax.devices()[0]
    result = {"what": "device-timed calibration grid and NVML energy (experiments/gpu_calibrate.py)",
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "device": getattr(dev, "device_kind", str(dev)), "backend": jax.default_backend(),
              "jax": jax.__version__, "platform": platform.platform(), "reps": args.reps, "inner": args.inner,
              "timing": "device loop (kernel_bench.device_loop): launch point two loop lengths differenced; "
                        "others one loop length less the launch point's fixed cost, over the calls",
              "rmat": {"degree": RMAT_DEGREE, "draws": "degree * 2^scale / 2", "seed": "scale"},
              "points": [], "failed": [], "energy": {}, "complete": False}
    pts = grid(args.quick, on_gpu)
    done = {}
    if args.resume and os.path.exists(args.resume):
        import json
        with open(args.resume) as fh:
            old = json.load(fh)
        drop = ("time_s", "inner", "edges", "library_call", "loop_s", "fixed_s")
        for q in old.get("points", []):
            done[repr(sorted((k, v) for k, v in q.items() if k not in drop))] = q
        result["resumed_from"] = {"date": old.get("date"), "device": old.get("device"), "points": len(done)}
    graphs = {s: rmat_graph(s) for s in sorted({p["scale"] for p in pts if "scale" in p})}
    last_kind, timed_by, fixed_s = None, {}, None
    # the Pallas points last, after the energy loops (which need the timings of the points before)
    ordered = [p for p in pts if p["kind"] != "pallas_csr"] + [None] + [p for p in pts if p["kind"] == "pallas_csr"]
    for p in ordered:
        if p is None:
            write_json_atomic(args.out, result)
            if not args.no_energy:
                result["energy"] = measure_energy(args, graphs, timed_by, result["failed"])
            continue
        if last_kind is not None and p["kind"] != last_kind:
            write_json_atomic(args.out, result)
        last_kind = p["kind"]
        key = repr(sorted(p.items()))
        if key in done and not (p["kind"] == "launch" and "fixed_s" not in done[key]):
            result["points"].append(done[key])
            timed_by[key] = done[key]["time_s"]
            if p["kind"] == "launch":
                fixed_s = done[key].get("fixed_s")
            continue
        try:
            fn, operand, x = point_fn(p, graphs)
            inner = inner_for(p, graphs, args.inner)
            if p["kind"] == "launch" or fixed_s is None:  # two loop lengths differenced: the per-call time
                ms = device_loop_ms(fn, operand, x, inner=inner, reps=args.reps)
                rec = {**p, "time_s": ms * 1e-3, "inner": inner}
                if p["kind"] == "launch":  # the loop's fixed cost, subtracted from the points below
                    fixed_s = device_loop_s(fn, operand, x, calls=inner, reps=args.reps) - inner * ms * 1e-3
                    rec["fixed_s"] = fixed_s
            else:  # one loop length (one compile) less the launch point's fixed cost
                loop_s = device_loop_s(fn, operand, x, calls=inner, reps=args.reps)
                rec = {**p, "time_s": max(loop_s - fixed_s, 0.0) / inner, "inner": inner, "loop_s": loop_s,
                       "fixed_s": fixed_s}
            timed_by[key] = rec["time_s"]
            ms = 1e3 * rec["time_s"]
            if p["kind"] == "gemm" and p["m"] == p["k"]:
                rec["library_call"] = _library_call(fn, operand, x)
            if "scale" in p:
                rec["edges"] = int(graphs[p["scale"]][0].size)
            result["points"].append(rec)
            print(f"{p['kind']:10s} {str({k: v for k, v in p.items() if k != 'kind'}):70s} {ms:10.4f} ms", flush=True)
            del fn, operand, x
        except Exception as e:  # noqa: BLE001 - e.g. out of memory: recorded, the grid goes on
            result["failed"].append({**p, "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"})
            print(f"{p['kind']:10s} {p} failed: {result['failed'][-1]['error']}", flush=True)
    result["complete"] = True
    write_json_atomic(args.out, result)
    print(f"{len(result['points'])} points, {len(result['failed'])} failed; wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
