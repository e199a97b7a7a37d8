"""Benchmarks behind ``codesign bench``: timings are medians of repeated runs, compile time
reported separately. Benchmarks, not tests: speed targets live here, never in unit tests."""

from __future__ import annotations

import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from codesign import hwmodel
from codesign.hwmodel.calibrate import median_time_s  # noqa: F401 - re-exported: one definition, on the lower floor


# glibc serves a large allocation with mmap and unmaps it on free, so XLA:CPU's fresh output,
# convert and message buffers (and numpy's results, e.g. a deployed program's [117659, 45] logits)
# are faulted in again, 4 KiB at a time, on every call. Allocations from XLA's worker threads go to
# per-thread arenas whose heaps are at most 64 MiB, so anything larger is always mmapped, whatever
# the mmap threshold (measured: a 32768 x 1433 x 16 bf16 dot, whose f32 copy of A is 188 MB, took
# 46,650 minor page faults per call and 3-4x its fault-free time with MALLOC_MMAP_THRESHOLD_ raised,
# and 0 faults with the settings below). The cost model prices kernels, not the allocator (XLA's GPU
# BFC allocator keeps its buffers, and so does a CPU process run with these settings); so the CPU
# measurements run with one arena (the brk heap), no mmap and no trimming (glibc mallopt(3)
# environment tunables, read at process start).
MALLOC_ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 34)}


def reexec_with_malloc_env(script: str, argv) -> None:
    """Re-runs the Python script ``script`` with arguments ``argv`` in a process whose environment
    adds `MALLOC_ENV` (glibc reads it only at process start), unless it is already set or
    ``CODESIGN_NO_REEXEC`` is. Returns only when no re-run is needed (else `os.execve` replaces
    this process)."""
    if all(os.environ.get(k) == v for k, v in MALLOC_ENV.items()) or os.environ.get("CODESIGN_NO_REEXEC"):
        return
    env = {**os.environ, **MALLOC_ENV}
    os.execve(sys.executable, [sys.executable, os.path.abspath(script), *argv], env)


def cora_gcn_workload(edge_density, feature_density, bits, locality=None) -> hwmodel.Workload:
    """The 2-layer GCN workload on Cora (N=2708, E=10556, 1433-16-7) at the given densities/bits."""
    n, e = 2708, 10556
    nnz = edge_density * e + n
    common = dict(locality=locality, edge_density=edge_density)
    return hwmodel.Workload((
        hwmodel.message_passing_layer("layer0", n, nnz, feature_density * 1433, 16, bits, bits, bits, **common),
        hwmodel.message_passing_layer("layer1", n, nnz, 16, 7, bits, bits, 32.0, **common),
    ))


def bench_cost(n_points: int = 10_000, hw_name: str = "gnnear", reps: int = 5, seed: int = 0) -> dict:
    """Cost and its gradient (w.r.t. edge density, feature density, bits and the DRAM bandwidth)
    for ``n_points`` random design points in one `jax.vmap`.

    Returns:
      ``{"points", "hw", "compile_s", "median_s", "points_per_s", "finite"}``.
    """
    hw = hwmodel.presets.get(hw_name)
    rng = np.random.default_rng(seed)
    x = jnp.asarray(np.stack([rng.uniform(0.05, 1, n_points), rng.uniform(0.05, 1, n_points),
                              rng.uniform(2, 32, n_points), rng.uniform(0.5, 2, n_points)], 1), jnp.float32)

    def energy(v):
        spec = hw.replace(dram_bw_bytes_per_s=hw.dram_bw_bytes_per_s * v[3])
        return hwmodel.estimate(cora_gcn_workload(v[0], v[1], v[2]), spec).energy_j

    fn = jax.jit(jax.vmap(jax.value_and_grad(energy)))
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(x))
    compile_s = time.perf_counter() - t0
    median = median_time_s(fn, x, reps=reps, warmup=False)
    finite = bool(jnp.isfinite(out[0]).all() & jnp.isfinite(out[1]).all())
    return {"points": n_points, "hw": hw_name, "compile_s": compile_s, "median_s": median,
            "points_per_s": n_points / median, "finite": finite}
