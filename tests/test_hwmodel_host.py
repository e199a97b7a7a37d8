"""The host-program terms of the cost model, worked out by hand: serial kernels on a multi-core
host (`Stage.serial`, `HardwareSpec.cores`, `HardwareSpec.single_core`), the extra passes over a
zero-filled, accumulated CSR output (`HardwareSpec.output_accumulate_passes`), the latency of
gathered rows that miss the buffer (`HardwareSpec.row_miss_overhead_s`) and the `cpu_numpy`
preset built from the `cpu` fit."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from codesign.hwmodel import HardwareSpec, csr_gemm_stage, gemm_stage, presets, segment_spmm_stages, spmm_stage, stage_cost
from codesign.hwmodel.workload import Stage


def spec(**changes) -> HardwareSpec:
    fields = dict(name="host", matrix_fp32_macs_per_s=2e9, matrix_bf16_macs_per_s=2e9, matrix_int8_macs_per_s=2e9,
                  matrix_int4_macs_per_s=2e9, vector_fp32_macs_per_s=1e9, vector_bf16_macs_per_s=1e9,
                  vector_int8_macs_per_s=1e9, dram_bw_bytes_per_s=1e9, dram_energy_pj_per_byte=10.0,
                  onchip_buffer_bytes=1e6, overlap_exponent=1.0)
    return HardwareSpec(**{**fields, **changes})


def flat_stage(kind="spmm", macs=1e6, serial=False, **kw) -> Stage:
    z = jnp.zeros((), jnp.float32)
    fields = {**dict(compulsory_bytes=z, reuse_bytes=z, working_set_bytes=z), **kw}
    return Stage(kind, jnp.float32(macs), jnp.float32(32.0), serial=serial, **fields)


def test_a_serial_stage_runs_on_one_of_the_cores():
    hw = spec(cores=2.0)
    # 1e6 MACs at the 1e9 vector rate: 1 ms on every core, 2 ms on one of two
    assert float(stage_cost(flat_stage(), hw).compute_s) == pytest.approx(1e-3)
    assert float(stage_cost(flat_stage(serial=True), hw).compute_s) == pytest.approx(2e-3)
    # GEMM at the 2e9 matrix rate: 0.5 ms; a one-core program (single_core) 1 ms, serial or not
    one = hw.single_core("one")
    assert (one.name, one.cores, one.matrix_fp32_macs_per_s, one.vector_int8_macs_per_s) == ("one", 1.0, 1e9, 5e8)
    assert float(stage_cost(flat_stage("gemm"), hw).compute_s) == pytest.approx(0.5e-3)
    assert float(stage_cost(flat_stage("gemm"), one).compute_s) == pytest.approx(1e-3)
    assert float(stage_cost(flat_stage(serial=True), one).compute_s) == pytest.approx(2e-3)
    # DRAM bandwidth and buffer are kept (the marked assumption)
    assert (one.dram_bw_bytes_per_s, one.onchip_buffer_bytes) == (hw.dram_bw_bytes_per_s, hw.onchip_buffer_bytes)
    # a single-core datasheet spec is unchanged by serial
    assert float(stage_cost(flat_stage(serial=True), spec()).compute_s) == pytest.approx(1e-3)


def test_cores_below_one_is_refused():
    with pytest.raises(ValueError, match=r"cores"):
        spec(cores=0.5)


def test_which_builders_are_serial_and_accumulate_their_output():
    assert spmm_stage(100, 500, 16, 32, 32).serial and csr_gemm_stage(100, 50, 16, 300, 32, 32, 32).serial
    assert float(spmm_stage(100, 500, 16, 32, 32).output_bytes) == 100 * 16 * 4
    assert float(csr_gemm_stage(100, 50, 16, 300, 32, 32, 32).output_bytes) == 100 * 16 * 4
    spmm, msgs = segment_spmm_stages(100, 500, 16, 32, 32)
    assert spmm.serial and msgs.serial and float(spmm.output_bytes) == 0.0  # XLA's scatter writes once
    assert not gemm_stage(100, 16, 16, 32, 32, 32).serial
    assert float(spmm_stage(100, 500, 16, 32, 32).scaled(3.0).output_bytes) == 3 * 100 * 16 * 4


def test_output_accumulate_passes_charge_the_output_beyond_the_buffer():
    hw = spec(output_accumulate_passes=3.0, onchip_buffer_bytes=1e6)
    # 4e6-byte output: 3 passes over the 3/4 of it beyond the 1e6-byte buffer = 9e6 bytes more
    big = flat_stage(macs=0.0, output_bytes=jnp.float32(4e6))
    assert float(stage_cost(big, hw).dram_bytes) == pytest.approx(9e6)
    assert float(stage_cost(big, spec()).dram_bytes) == pytest.approx(0.0)  # 0 passes: written once
    small = flat_stage(macs=0.0, output_bytes=jnp.float32(5e5))  # fits the buffer: nothing more
    assert float(stage_cost(small, hw).dram_bytes) == pytest.approx(0.0)
    # on a real CSR stage the term adds exactly that to its traffic
    s = spmm_stage(100_000, 500_000, 16, 32, 32)
    out = 100_000 * 16 * 4.0
    extra = float(stage_cost(s, hw).dram_bytes) - float(stage_cost(s, spec(onchip_buffer_bytes=1e6)).dram_bytes)
    assert extra == pytest.approx(3.0 * out * (1 - 1e6 / out), rel=1e-5)


def test_row_miss_overhead_is_paid_per_missed_gathered_row():
    # uniform re-reference: hit = buffer / working set = 1e6 / 4e6 = 1/4, so 3/4 of 1000 rows miss
    s = flat_stage(macs=0.0, reuse_bytes=jnp.float32(1e5), working_set_bytes=jnp.float32(4e6),
                   gathered_rows=jnp.float32(1000.0))
    base = float(stage_cost(s, spec()).compute_s)
    with_miss = float(stage_cost(s, spec(row_miss_overhead_s=1e-7)).compute_s)
    assert with_miss - base == pytest.approx(750 * 1e-7, rel=1e-5)


def test_cpu_numpy_is_the_cpu_fit_on_one_core_with_its_call_cost():
    cpu, host = presets.get("cpu"), presets.get("cpu_numpy")
    fit = presets.load_fit("cpu")
    assert cpu.cores == float(fit["host"]["cpu_count"]) and host.cores == 1.0
    np.testing.assert_allclose(host.matrix_fp32_macs_per_s * cpu.cores, cpu.matrix_fp32_macs_per_s, rtol=1e-12)
    np.testing.assert_allclose(host.vector_fp32_macs_per_s * cpu.cores, cpu.vector_fp32_macs_per_s, rtol=1e-12)
    assert host.stage_overhead_s == fit["fitted"]["host_stage_overhead_s"]
    assert cpu.output_accumulate_passes == host.output_accumulate_passes == presets.CPU_OUTPUT_ACCUMULATE_PASSES
    assert not host.fuses_elementwise and cpu.fuses_elementwise  # numpy runs one loop per op
    assert host.gemm_pack_byte_s == fit["fitted"]["gemm_pack_byte_s"] and cpu.gemm_pack_byte_s == 0.0
    assert host.parallel_stage_bytes is None and cpu.parallel_stage_bytes == fit["fitted"]["parallel_stage_bytes"]
    assert dataclasses.replace(host, name="cpu", cores=cpu.cores, stage_overhead_s=cpu.stage_overhead_s,
                               fuses_elementwise=True, gemm_pack_byte_s=0.0,
                               parallel_stage_bytes=cpu.parallel_stage_bytes,
                               matrix_fp32_macs_per_s=cpu.matrix_fp32_macs_per_s,
                               matrix_bf16_macs_per_s=cpu.matrix_bf16_macs_per_s,
                               matrix_int8_macs_per_s=cpu.matrix_int8_macs_per_s,
                               matrix_int4_macs_per_s=cpu.matrix_int4_macs_per_s,
                               vector_fp32_macs_per_s=cpu.vector_fp32_macs_per_s,
                               vector_bf16_macs_per_s=cpu.vector_bf16_macs_per_s,
                               vector_int8_macs_per_s=cpu.vector_int8_macs_per_s) == cpu
    # datasheet presets do not have the host terms
    for name in ("h100", "gnnear", "hygcn"):
        p = presets.get(name)
        assert (p.cores, p.output_accumulate_passes, p.row_miss_overhead_s) == (1.0, 0.0, 0.0)


def test_an_unfused_executor_makes_one_pass_per_elementwise_op():
    from codesign.hwmodel import elementwise_stage
    s = elementwise_stage(1000, 16, 32, ops=3)
    assert float(s.macs) == 3 * 1000 * 16 and float(s.passes) == 3
    one_pass = 2 * 1000 * 16 * 4  # read + write of a [1000, 16] f32 array
    assert float(stage_cost(s, spec()).dram_bytes) == pytest.approx(one_pass)  # fused (XLA): one loop
    assert float(stage_cost(s, spec(fuses_elementwise=False)).dram_bytes) == pytest.approx(3 * one_pass)
    with pytest.raises(ValueError, match=r"elementwise_stage\(ops\)"):
        elementwise_stage(10, 4, 32, ops=0)


def test_gemm_pack_byte_s_prices_the_packed_operands_beyond_the_buffer():
    # [m, k] @ [k, n] f32: gemm_stage records both inputs as packed bytes
    m, k, n = 4096.0, 512.0, 16.0
    g = gemm_stage(m, k, n, 32.0, 32.0, 32.0)
    packed = (m * k + k * n) * 4.0
    np.testing.assert_allclose(float(g.packed_bytes), packed)
    base = spec(overlap_exponent=64.0)
    plain = stage_cost(g, base)
    packing = stage_cost(g, base.replace(gemm_pack_byte_s=1e-10))
    spill = 1.0 - base.onchip_buffer_bytes / packed
    np.testing.assert_allclose(float(packing.compute_s - plain.compute_s), packed * spill * 1e-10, rtol=1e-5)
    # operands within the buffer: no cost
    small = gemm_stage(64.0, 64.0, 16.0, 32.0, 32.0, 32.0)
    np.testing.assert_allclose(float(stage_cost(small, base.replace(gemm_pack_byte_s=1e-10)).compute_s),
                               float(stage_cost(small, base).compute_s))


def test_parallel_stage_bytes_scales_a_small_elementwise_stages_dispatch():
    hw = spec(stage_overhead_s=1e-5)
    small = flat_stage("elementwise", macs=0.0, compulsory_bytes=jnp.float32(1e3))
    big = flat_stage("elementwise", macs=0.0, compulsory_bytes=jnp.float32(1e7))
    gemm = flat_stage("gemm", macs=0.0, compulsory_bytes=jnp.float32(1e3))
    with_threshold = hw.replace(parallel_stage_bytes=1e4)
    dispatch = lambda s, h: float(stage_cost(s, h).latency_s) - float(stage_cost(s, h.replace(stage_overhead_s=0.0)).latency_s)
    np.testing.assert_allclose(dispatch(small, hw), 1e-5, rtol=1e-4)
    np.testing.assert_allclose(dispatch(small, with_threshold), 1e-6, rtol=1e-3)  # 1e3 / 1e4 of a dispatch
    np.testing.assert_allclose(dispatch(big, with_threshold), 1e-5, rtol=1e-4)
    np.testing.assert_allclose(dispatch(gemm, with_threshold), 1e-5, rtol=1e-4)  # only elementwise stages


def test_cpu_numpy_packs_and_has_no_thread_pool_threshold():
    assert presets.cpu_numpy().parallel_stage_bytes is None
    assert presets.cpu().gemm_pack_byte_s == 0.0
