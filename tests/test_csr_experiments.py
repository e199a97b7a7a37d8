"""The issue-19 parts of the experiments: the kernel benchmark's summary, device-loop timing and
``--predict``, and the CSR tile-size sweep (``--quick``, interpret mode on the CPU)."""

import importlib.util
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest


def _load(name: str):
    path = Path(__file__).resolve().parent.parent / "experiments" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_summary_medians_over_features():
    kb = _load("kernel_bench")
    rows = []
    for f, seg, csr, bcsr, bcoo, i8 in ((64, 6.0, 1.5, 2.0, 3.0, 1.0), (128, 12.0, 3.0, 3.0, 6.0, 2.0),
                                        (256, 24.0, 12.0, 6.0, 6.0, 4.0)):
        base = dict(graph="rmat20", tile_keep=1.0, features=f)
        rows += [dict(base, impl="segment", forward_ms=seg, forward_backward_ms=2 * seg),
                 dict(base, impl="pallas_csr", forward_ms=csr, forward_backward_ms=2 * csr,
                      compulsory_roofline_fraction=0.1 * f / 64),
                 dict(base, impl="bcsr", forward_ms=bcsr, cusparse_call=True),
                 dict(base, impl="bcoo", forward_ms=bcoo, cusparse_call=True),
                 dict(base, impl="pallas_csr_int8", forward_ms=i8),
                 dict(base, graph="cora", impl="segment", forward_ms=1.0)]
    s = kb.summary(rows, "rmat20", "2026-11-25")
    assert s["features"] == [64, 128, 256] and s["date"] == "2026-11-25"
    assert s["csr_vs_segment_fwd_f32"] == 4.0 and s["csr_vs_segment_fwdbwd_f32"] == 4.0
    assert s["csr_vs_cusparse_fwd_f32"] == pytest.approx(1.0)  # best of bcsr / bcoo: 4/3, 1, 1/2
    assert s["csr_int8_vs_segment_fwd"] == 6.0 and s["fraction_of_compulsory_roofline"] == pytest.approx(0.2)
    assert s["targets_met"] == {"csr_vs_segment_fwd_f32": True, "csr_vs_segment_fwdbwd_f32": True,
                                "csr_vs_cusparse_fwd_f32": True, "fraction_of_compulsory_roofline": False,
                                "csr_int8_vs_csr_f32_fwd": True}
    empty = kb.summary([r for r in rows if r["impl"] == "segment"], "rmat20", "d")
    assert empty["csr_vs_segment_fwd_f32"] is None and empty["targets_met"]["csr_vs_segment_fwd_f32"] is None


def test_bench_device_loop_times_and_nominal_bandwidth():
    kb = _load("kernel_bench")
    x = jnp.ones((64, 8), jnp.float32)
    ms = kb.device_loop_ms(lambda a, x: a @ x, jnp.eye(64), x, inner=3, reps=1)
    assert 0 < ms < 1e3
    assert kb.nominal_dram_bw("NVIDIA H100 80GB HBM3", 100.0) == (3.35e12, "nominal H100")
    assert kb.nominal_dram_bw("NVIDIA H200", 100.0) == (4.8e12, "nominal H200")
    assert kb.nominal_dram_bw("cpu", 12.5) == (12.5e9, "measured copy")
    x_q, scales = kb.int8_rows(jnp.asarray(np.arange(-8.0, 8.0).reshape(2, 8)))
    assert x_q.dtype == jnp.int8 and int(jnp.abs(x_q).max()) == 127 and scales.shape == (2,)


def test_bench_predict_quick(tmp_path):
    kb = _load("kernel_bench")
    out = kb.main(["--predict", "--quick", "--out", str(tmp_path / "pred.json")])
    row = out["by_features"]["64"]
    assert out["graph"] == "rmat11" and out["work_items"]["items"] > 0
    # locality can only help; int8 moves fewer bytes than f32; the roofline fraction is a fraction
    assert row["csr_f32_ms"] <= row["csr_f32_uniform_reuse_ms"]
    assert row["csr_int8_compulsory_bytes"] < row["csr_f32_compulsory_bytes"]
    assert 0 < row["fraction_of_compulsory_roofline"] <= 1
    assert (tmp_path / "pred.json").exists()


def test_csr_tune_quick(tmp_path):
    out = _load("csr_tune").main(["--quick", "--out", str(tmp_path / "tune.json")])
    assert out["timed"] is False and out["best"] in {"default", "max_item_rows=8"}
    assert [r["candidate"] for r in out["rows"]] == ["default", "max_item_rows=8"]
    for r in out["rows"]:
        assert r["rel_err_vs_segment"] < 1e-5 and r["forward_ms"] > 0 and r["work_items"]["items"] > 0
    assert (tmp_path / "tune.json").exists()


def test_device_loop_is_not_hoisted_or_shrunk():
    """The loop's time grows with its call count (the call is not hoisted out of the loop), and a
    call whose output is read at one element still computes all of it (the barrier)."""
    import jax
    kb = _load("kernel_bench")
    x = jax.random.normal(jax.random.key(0), (1 << 20,), jnp.float32)
    one = kb.device_loop_ms(lambda c, x: jnp.sin(x) * c, jnp.float32(1.0), x, inner=1, reps=3)
    many = kb.device_loop_ms(lambda c, x: jnp.sin(x) * c, jnp.float32(1.0), x, inner=40, reps=3)
    assert many > 0.2 * one  # per call: hoisting or shrinking would make it ~1/40 of one call or less
    run = kb.device_loop(lambda c, x: jnp.sin(x) * c, jnp.float32(1.0), x, 3)
    assert "while" in run.lower(jnp.float32(1.0), x).compile().as_text()  # a loop, not hoisted out of one
    y = run(jnp.float32(1.0), x)  # the whole last output comes back
    assert y.shape == x.shape and float(jnp.max(jnp.abs(y - jnp.sin(x)))) < 1e-6


def test_bench_impls_and_graphs_filter(tmp_path):
    kb = _load("kernel_bench")
    out = kb.main(["--quick", "--graphs", "rmat", "--impls", "segment,bcsr", "--out", str(tmp_path / "kb.json")])
    assert {r["impl"] for r in out["rows"]} == {"segment", "bcsr"} and {r["graph"] for r in out["rows"]} == {"rmat11"}
    assert all(r["rel_err_vs_segment"] < 1e-5 and r["tiles"] is None for r in out["rows"])
    assert set(out["formats"]["rmat11"]) == {"nodes", "edges"}  # no BSR tiles built
    with pytest.raises(ValueError, match="--impls"):
        kb.main(["--quick", "--graphs", "rmat", "--impls", "bcsr", "--out", str(tmp_path / "x.json")])
    with pytest.raises(ValueError, match="--graphs"):
        kb.main(["--quick", "--graphs", "pubmed", "--out", str(tmp_path / "x.json")])


def test_gpu_calibrate_quick_dry_run(tmp_path):
    """The GPU calibration script's every kind on the CPU at tiny sizes (Pallas in interpret mode):
    points recorded with their sizes and times; without NVML the energy section says why."""
    cal = _load("gpu_calibrate")
    out = cal.main(["--quick", "--out", str(tmp_path / "cal.json")])
    assert out["complete"] and not out["failed"]
    kinds = {p["kind"] for p in out["points"]}
    assert kinds == {"launch", "copy", "gemm", "spmm", "sddmm", "pallas_csr"}
    assert {p["dtype"] for p in out["points"] if p["kind"] == "gemm"} == set(cal.GEMM_DTYPES)
    assert all(p["time_s"] > 0 for p in out["points"])
    assert all(p["edges"] == cal.rmat_graph(p["scale"])[0].size for p in out["points"] if "scale" in p)
    assert out["energy"]["available"] is (cal.Energy().error is None)


def test_gpu_energy_loop_with_a_counter():
    """`energy_loop` on the CPU with a stand-in counter (1 J per host second): J per call and mean
    power follow from the counter and the loop's wall time."""
    import time
    cal = _load("gpu_calibrate")

    class Meter:
        def joules(self):
            return time.perf_counter()

        def state(self):
            return {}

    x = jnp.ones((256,), jnp.float32)
    e = cal.energy_loop({"kind": "copy"}, lambda c, x: x * c, jnp.float32(1.0), x, 0.05, 1e-4, Meter())
    assert e["calls"] == 500 and e["mean_power_w"] == pytest.approx(1.0, rel=0.05)
    assert e["joules_per_call"] == pytest.approx(e["seconds_per_call"], rel=0.05)


def test_gpu_session_all_dry_run(tmp_path):
    """``QUICK=1 gpu_session.sh all`` on the CPU: every stage runs at tiny sizes and writes its file,
    so a lent GPU is not spent on a typo."""
    import os
    import subprocess
    import sys
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "QUICK": "1", "OUT": str(tmp_path), "PY": sys.executable, "GPU_TAG": "cpu"}
    proc = subprocess.run(["bash", "experiments/gpu_session.sh", "all"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("env.txt", "kernel_bench_csr_cpu.json", "csr_tune_cpu.json", "pytest_gpu_csr.log"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "unknown stage" not in proc.stdout and "Traceback" not in proc.stdout
    assert "PallasCsrGpuTest" in (tmp_path / "pytest_gpu_csr.log").read_text()
    proc = subprocess.run(["bash", "experiments/gpu_session.sh", "calibrate"], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0 and (tmp_path / "gpu_calibration_cpu.json").stat().st_size > 0, proc.stderr[-2000:]
