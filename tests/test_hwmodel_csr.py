"""The cost model of the Pallas CSR edge-chunk kernel (`hwmodel.csr_chunk_spmm_stages`): hand-computed
byte counts, sector rounding, the split-row passes; and the kernel benchmark's issue-19 summary."""

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import hwmodel

N, NNZ = 1 << 20, 15_400_000  # the R-MAT scale-20 graph of issue 19


def test_compulsory_bytes_by_hand():
    # issue 19: row pointers, column ids, values, X once, Y once = 0.664 GB at F = 64 (f32)
    (st,) = hwmodel.csr_chunk_spmm_stages(N, NNZ, 64, 32.0, 32.0, edge_values=True)
    want = (N + 1) * 4 + NNZ * 8 + 2 * N * 64 * 4
    assert float(st.compulsory_bytes) == pytest.approx(want, rel=1e-6)
    assert float(st.compulsory_bytes) == pytest.approx(0.664e9, rel=2e-3)
    # GCN folded (no values, row and column scale vectors): 4 bytes less per edge, 8 more per node
    (gcn,) = hwmodel.csr_chunk_spmm_stages(N, NNZ, 64, 32.0, 32.0, edge_values=False, node_scales=2)
    assert float(st.compulsory_bytes - gcn.compulsory_bytes) == pytest.approx(NNZ * 4 - N * 8, rel=1e-6)
    # the re-gathered rows: one full row per edge beyond the first of each row
    assert float(st.reuse_bytes) == pytest.approx((NNZ - N) * 256, rel=1e-6)
    assert float(hwmodel.stage_cost(st, hwmodel.presets.get("h100")).memory_s) > float(st.compulsory_bytes) / 3.35e12


def test_rows_move_whole_sectors():
    (f4,) = hwmodel.csr_chunk_spmm_stages(1000, 5000, 4, 32.0, 32.0, edge_values=False)  # 16-byte rows
    (f8,) = hwmodel.csr_chunk_spmm_stages(1000, 5000, 8, 32.0, 32.0, edge_values=False)  # 32-byte rows
    assert float(f4.working_set_bytes) == float(f8.working_set_bytes) == 1000 * 32
    assert float(f4.reuse_bytes) == float(f8.reuse_bytes) == 4000 * 32
    (i8,) = hwmodel.csr_chunk_spmm_stages(1000, 5000, 64, 8.0, 32.0, edge_values=False, node_scales=1)
    assert float(i8.working_set_bytes) == 1000 * 64  # int8: 64-byte rows, two sectors
    # straight-through rounding: the gradient w.r.t. the width is that of the unrounded bytes
    g = jax.grad(lambda w: hwmodel.csr_chunk_spmm_stages(1000, 5000, w, 32.0, 32.0)[0].working_set_bytes)(4.0)
    assert float(g) == pytest.approx(1000 * 4)


def test_split_rows_add_a_combine_and_a_scatter():
    stages = hwmodel.csr_chunk_spmm_stages(N, NNZ, 64, 32.0, 32.0, split_rows=100, slots=3000)
    assert [s.kind for s in stages] == ["spmm", "spmm", "elementwise"]
    (alone,) = hwmodel.csr_chunk_spmm_stages(N, NNZ, 64, 32.0, 32.0)
    assert float(stages[0].compulsory_bytes - alone.compulsory_bytes) == pytest.approx(3000 * 64 * 4)
    assert float(stages[1].macs) == 3000 * 64


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match=r"csr_chunk_spmm_stages\(node_scales\)"):
        hwmodel.csr_chunk_spmm_stages(10, 10, 4, 32.0, 32.0, node_scales=3)
    with pytest.raises(ValueError, match=r"csr_chunk_spmm_stages\(sector_bytes\)"):
        hwmodel.csr_chunk_spmm_stages(10, 10, 4, 32.0, 32.0, sector_bytes=0)
    with pytest.raises(ValueError, match=r"csr_chunk_spmm_stages\(nnz\)"):
        hwmodel.csr_chunk_spmm_stages(10, -1, 4, 32.0, 32.0)
    with pytest.raises(ValueError, match=r"csr_chunk_spmm_stages\(x_bits\)"):
        hwmodel.csr_chunk_spmm_stages(10, 10, 4, 0.0, 32.0)


def _kernel_bench():
    path = Path(__file__).resolve().parent.parent / "experiments" / "kernel_bench.py"
    spec = importlib.util.spec_from_file_location("kernel_bench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_summary_medians_over_features():
    kb = _kernel_bench()
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
    kb = _kernel_bench()
    x = jnp.ones((64, 8), jnp.float32)
    ms = kb.device_loop_ms(lambda a, x: a @ x, jnp.eye(64), x, inner=3, reps=1)
    assert 0 < ms < 1e3
    assert kb.nominal_dram_bw("NVIDIA H100 80GB HBM3", 100.0) == (3.35e12, "nominal H100")
    assert kb.nominal_dram_bw("NVIDIA H200", 100.0) == (4.8e12, "nominal H200")
    assert kb.nominal_dram_bw("cpu", 12.5) == (12.5e9, "measured copy")
    x_q, scales = kb.int8_rows(jnp.asarray(np.arange(-8.0, 8.0).reshape(2, 8)))
    assert x_q.dtype == jnp.int8 and int(jnp.abs(x_q).max()) == 127 and scales.shape == (2,)


def test_bench_predict_quick(tmp_path):
    kb = _kernel_bench()
    out = kb.main(["--predict", "--quick", "--out", str(tmp_path / "pred.json")])
    row = out["by_features"]["64"]
    assert out["graph"] == "rmat11" and out["work_items"]["items"] > 0
    # locality can only help; int8 moves fewer bytes than f32; the roofline fraction is a fraction
    assert row["csr_f32_ms"] <= row["csr_f32_uniform_reuse_ms"]
    assert row["csr_int8_compulsory_bytes"] < row["csr_f32_compulsory_bytes"]
    assert 0 < row["fraction_of_compulsory_roofline"] <= 1
    assert (tmp_path / "pred.json").exists()
