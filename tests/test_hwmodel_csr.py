"""The cost model of the Pallas CSR edge-chunk kernel (`hwmodel.csr_chunk_spmm_stages`): hand-computed
byte counts, sector rounding, the split-row passes."""

import jax
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
