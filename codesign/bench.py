"""Benchmarks behind ``codesign bench``: timings are medians of repeated runs, compile time
reported separately. Benchmarks, not tests: speed targets live here, never in unit tests."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from codesign import hwmodel


def median_time_s(fn, *args, reps: int, warmup: bool = True) -> float:
    """Median wall time (s) of ``fn(*args)`` over ``reps`` runs, each waited for with
    `jax.block_until_ready`, after one untimed warm-up (compile) run."""
    if warmup:
        jax.block_until_ready(fn(*args))
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        ts.append(time.perf_counter() - t0)
    return float(np.median(ts))


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
