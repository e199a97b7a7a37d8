"""Tests of codesign.hwmodel: hand-computed stage costs, dataflow choice, gradients (workload,
hardware and a real model's gate logits), jit/vmap, monotonicity, validation, training counts and
stored reference reports (``tests/data/hwmodel_reference.json``).

Regenerate the stored reports deliberately (after an intended change of the cost model) with
``pytest tests/test_hwmodel.py -k reference --regen`` (`REGEN_COMMAND`; the option is defined in
``tests/conftest.py``) and review the diff: ``test_reference_reports`` then rewrites the file from
the current code and skips, and ``test_reference_configs_differ`` checks the rewritten file.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codesign.hwmodel import (HardwareSpec, LayerWorkload, Stage, Workload, autograd_training, bsr_spmm_stage, csr_gemm_stage, elementwise_stage, estimate, gemm_stage,
                              matrix_macs_per_s, message_passing_layer, presets, segment_spmm_stages, smooth_max,
                              spmm_stage, stage_cost, upcast_gemm_stages, vector_macs_per_s)
from codesign import hwmodel
from codesign.hwmodel.spec import HOST_NONNEGATIVE
from codesign.hwmodel.workload import MESSAGE_OPS_PER_ELEMENT

REFERENCE_PATH = Path(__file__).resolve().parent / "data" / "hwmodel_reference.json"
REFERENCE_RTOL = 1e-5
REGEN_COMMAND = "pytest tests/test_hwmodel.py -k reference --regen"

CORA_NODES, CORA_EDGES = 2708, 10556  # Planetoid Cora: nodes, directed edges without self-loops
CORA_DIMS = (1433, 16, 7)  # features, hidden (Kipf & Welling), classes
PRESETS = ("h100", "cpu")

# Horowitz ISSCC'14 (45 nm): int8 multiply 0.2 pJ, int8 add 0.03 pJ. The integer MAC energy model
# (spec.py docstring) splits ``mac_energy_int8_pj`` into this multiplier share (~ bits^2) and
# the adder share (~ bits).
HOROWITZ_MULT_SHARE = 0.2 / (0.2 + 0.03)

# Float32 slack for "non-decreasing": one rounding of a sum of a handful of terms.
MONOTONE_RTOL = 1e-6


@pytest.fixture(autouse=True)
def _strict_promotion():
    """As equinox's conftest: implicit dtype promotion and rank broadcasting are errors."""
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


def tiny_spec(**changes) -> HardwareSpec:
    """Round numbers, so every cost below can be worked out by hand."""
    fields = dict(name="tiny", matrix_fp32_macs_per_s=1e9, matrix_bf16_macs_per_s=2e9,
                  matrix_int8_macs_per_s=4e9, matrix_int4_macs_per_s=4e9, vector_fp32_macs_per_s=1e9,
                  dram_bw_bytes_per_s=1e9, dram_energy_pj_per_byte=10.0, onchip_buffer_bytes=1e6,
                  sram_energy_pj_per_byte=1.0, mac_energy_int8_pj=0.2, mac_energy_fp32_pj=4.0)
    return HardwareSpec(**{**fields, **changes})


def cora_gcn_workload(edge_density, feature_density, bits, training: bool = False,
                      learned_edge_weights: bool = False) -> Workload:
    """The 2-layer GCN workload on Cora (as `codesign.models.GCN.workload` builds it: fp32 logits);
    ``training``: its `autograd_training` (``learned_edge_weights``: an edge mask's gradient)."""
    n_in, hidden, n_classes = CORA_DIMS
    nnz = edge_density * CORA_EDGES + CORA_NODES  # kept edges + self-loops
    wl = Workload((
        message_passing_layer("layer0", CORA_NODES, nnz, feature_density * n_in, hidden, bits, bits, bits),
        message_passing_layer("layer1", CORA_NODES, nnz, hidden, n_classes, bits, bits, 32),
    ))
    return hwmodel.autograd_training(wl, learned_edge_weights) if training else wl


def _totals(report) -> jax.Array:
    return jnp.stack([report.latency_s, report.energy_j, report.dram_bytes])


def _cora_costs(hw: HardwareSpec, e, f, b) -> jax.Array:
    """``[latency_s, energy_j, dram_bytes, aggregate_first layer0, aggregate_first layer1]``."""
    r = estimate(cora_gcn_workload(e, f, b), hw)
    return jnp.stack([r.latency_s, r.energy_j, r.dram_bytes,
                      r.aggregate_first["layer0"], r.aggregate_first["layer1"]])


@functools.cache
def _cora_point(preset: str):
    """Jitted ``(edge_density, feature_density, bits) -> _cora_costs`` on a preset (compiled once
    per preset and shared by the tests)."""
    return jax.jit(functools.partial(_cora_costs, presets.get(preset)))


def _f32(*xs):
    return tuple(jnp.float32(x) for x in xs)


# ---------------------------------------------------------------------------------------------
# 1. Hand-computed stage costs on the tiny spec.
# ---------------------------------------------------------------------------------------------

def _hand_smooth_max(a: float, b: float) -> float:
    return (a**16 + b**16) ** (1 / 16)


def _hand_int_mac_pj(bits: float, int8_pj: float = 0.2) -> float:
    r = bits / 8
    return int8_pj * (HOROWITZ_MULT_SHARE * r * r + (1 - HOROWITZ_MULT_SHARE) * r)


def _assert_stage(cost, *, macs, compute_s, memory_s, dram_bytes, onchip_bytes, energy_j):
    got = {k: float(getattr(cost, k)) for k in ("macs", "compute_s", "memory_s", "dram_bytes", "onchip_bytes",
                                                 "energy_j", "latency_s")}
    want = dict(macs=macs, compute_s=compute_s, memory_s=memory_s, dram_bytes=dram_bytes,
                onchip_bytes=onchip_bytes, energy_j=energy_j, latency_s=_hand_smooth_max(compute_s, memory_s))
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=k)


def test_gemm_fp32_by_hand():
    # [100, 200] @ [200, 50], all fp32: 1e6 MACs at 1e9 MAC/s.
    # bytes: (100*200 + 200*50 + 100*50) * 4 = 35000 * 4 = 140000, all compulsory.
    # energy: 1e6 * 4 pJ + 140000 B * 10 pJ/B (DRAM) + 140000 B * 1 pJ/B (SRAM) = 5.54e6 pJ.
    cost = stage_cost(gemm_stage(100, 200, 50, 32, 32, 32), tiny_spec())
    _assert_stage(cost, macs=1e6, compute_s=1e-3, memory_s=1.4e-4, dram_bytes=140000.0,
                  onchip_bytes=140000.0, energy_j=5.54e-6)
    assert cost.bound == "compute"


def test_gemm_int8_by_hand():
    # 8-bit operands, fp32 output: int8 rate 4e9 -> 2.5e-4 s.
    # bytes: (20000 * 8 + 10000 * 8 + 5000 * 32) / 8 = 20000 + 10000 + 20000 = 50000.
    # energy: 1e6 * 0.2 pJ + 50000 * 10 + 50000 * 1 = 7.5e5 pJ.
    cost = stage_cost(gemm_stage(100, 200, 50, 8, 8, 32), tiny_spec())
    _assert_stage(cost, macs=1e6, compute_s=2.5e-4, memory_s=5e-5, dram_bytes=50000.0, onchip_bytes=50000.0,
                  energy_j=7.5e-7)


def test_gemm_mixed_bits_by_hand():
    # 16-bit activations, 4-bit weights, 16-bit output: the wider operand (16 bit) sets the rate
    # (bf16, 2e9) and the MAC energy (the 16-bit float tier: Horowitz fp16 MAC, 1.1 + 0.4 pJ).
    # bytes: (20000 * 16 + 10000 * 4 + 5000 * 16) / 8 = 40000 + 5000 + 10000 = 55000.
    mac_pj = 1.5
    cost = stage_cost(gemm_stage(100, 200, 50, 16, 4, 16), tiny_spec())
    _assert_stage(cost, macs=1e6, compute_s=5e-4, memory_s=5.5e-5, dram_bytes=55000.0, onchip_bytes=55000.0,
                  energy_j=(1e6 * mac_pj + 55000 * 10 + 55000 * 1) * 1e-12)


def test_upcast_gemm_stages_by_hand():
    # bf16 [100, 200] @ [200, 50] run as f32 (XLA:CPU): convert A (20000 elements), B (10000),
    # an f32 GEMM, convert the result (5000). A convert reads 2 B and writes 4 B per element.
    conv_a, conv_b, gemm, conv_out = upcast_gemm_stages(100, 200, 50, 16)
    for stg, n in ((conv_a, 20000), (conv_b, 10000), (conv_out, 5000)):
        assert stg.kind == "elementwise"
        assert float(stg.macs) == n and float(stg.compulsory_bytes) == 6 * n and float(stg.bits) == 32
    ref = gemm_stage(100, 200, 50, 32, 32, 32)
    assert gemm.kind == "gemm"
    for k in ("macs", "bits", "compulsory_bytes"):
        assert float(getattr(gemm, k)) == float(getattr(ref, k))
    # on the tiny spec: the GEMM at the fp32 rate (1e-3 s, slower than its bf16 rate, 5e-4 s)
    # plus three passes that cost more than nothing
    hw = tiny_spec()
    total = sum(float(stage_cost(st, hw).latency_s) for st in (conv_a, conv_b, gemm, conv_out))
    native = float(stage_cost(gemm_stage(100, 200, 50, 16, 16, 16), hw).latency_s)
    assert total > float(stage_cost(ref, hw).latency_s) > native


def test_gather_efficiency_slows_only_the_irregular_stages():
    # gather_efficiency 0.25 quarters the vector rate of an SpMM (1e9 -> 2.5e8 MAC/s: 80000 MACs
    # take 3.2e-4 s instead of 8e-5 s) and leaves GEMM and elementwise stages alone.
    hw, slow = tiny_spec(), tiny_spec(gather_efficiency=0.25)
    sp = spmm_stage(1000, 5000, 16, 32, 32)
    np.testing.assert_allclose(float(stage_cost(sp, slow).compute_s), 3.2e-4, rtol=1e-6)
    np.testing.assert_allclose(float(stage_cost(sp, hw).compute_s), 8e-5, rtol=1e-6)
    for stg in (gemm_stage(100, 200, 50, 32, 32, 32), elementwise_stage(1000, 16, 32)):
        assert float(stage_cost(stg, slow).latency_s) == float(stage_cost(stg, hw).latency_s)
    with pytest.raises(ValueError, match=r"\.gather_efficiency"):
        tiny_spec(gather_efficiency=1.5)


def test_row_gather_overhead_by_hand():
    # 5000 stored nonzeros, each a gathered row: 5000 * 2e-9 s = 1e-5 s on top of the 8e-5 s of
    # per-element work (80000 MACs at 1e9 MAC/s). Dense stages gather no rows; a BSR stage pays
    # once per tile; forward + backward (x3) triples the rows as it triples the MACs.
    hw = tiny_spec(row_gather_overhead_s=2e-9)
    sp = spmm_stage(1000, 5000, 16, 32, 32)
    assert float(sp.gathered_rows) == 5000.0
    np.testing.assert_allclose(float(stage_cost(sp, hw).compute_s), 9e-5, rtol=1e-6)
    np.testing.assert_allclose(float(stage_cost(sp, tiny_spec()).compute_s), 8e-5, rtol=1e-6)
    for stg in (gemm_stage(100, 200, 50, 32, 32, 32), elementwise_stage(1000, 16, 32)):
        assert float(stg.gathered_rows) == 0.0
        assert float(stage_cost(stg, hw).latency_s) == float(stage_cost(stg, tiny_spec()).latency_s)
    assert float(bsr_spmm_stage(1024, 300, 16, 8, 32, 32).gathered_rows) == 300.0
    assert float(sp.scaled(3.0).gathered_rows) == 15000.0
    with pytest.raises(ValueError, match=r"\.row_gather_overhead_s: must be finite and >= 0"):
        tiny_spec(row_gather_overhead_s=-1e-9)


def test_row_overhead_by_hand():
    # A CSR kernel loops over its output rows: 1000 rows * 3e-9 s = 3e-6 s on top of the 8e-5 s
    # of per-element work (80000 MACs at 1e9 MAC/s). scipy's X_csr @ W loops over X's 200 rows:
    # 200 * 3e-9 on top of 2000 nnz * 16 / 1e9. XLA's gather + segment_sum has no row loop, and
    # neither have GEMM and elementwise stages; forward + backward (x3) triples the rows.
    hw = tiny_spec(row_overhead_s=3e-9)
    sp = spmm_stage(1000, 5000, 16, 32, 32)
    assert float(sp.output_rows) == 1000.0
    np.testing.assert_allclose(float(stage_cost(sp, hw).compute_s), 8.3e-5, rtol=1e-6)
    np.testing.assert_allclose(float(stage_cost(sp, tiny_spec()).compute_s), 8e-5, rtol=1e-6)
    feat = csr_gemm_stage(200, 500, 16, 2000, 32, 32, 32)
    assert float(feat.output_rows) == 200.0
    np.testing.assert_allclose(float(stage_cost(feat, hw).compute_s), 2000 * 16 / 1e9 + 200 * 3e-9, rtol=1e-6)
    seg, _ = segment_spmm_stages(1000, 5000, 16, 32, 32)
    assert float(seg.output_rows) == 0.0 and float(seg.gathered_rows) == 5000.0
    assert float(stage_cost(seg, hw).compute_s) == float(stage_cost(seg, tiny_spec()).compute_s)
    for stg in (gemm_stage(100, 200, 50, 32, 32, 32), elementwise_stage(1000, 16, 32)):
        assert float(stg.output_rows) == 0.0
        assert float(stage_cost(stg, hw).latency_s) == float(stage_cost(stg, tiny_spec()).latency_s)
    assert float(sp.scaled(3.0).output_rows) == 3000.0
    # differentiable: d compute_s / d row_overhead_s = the stage's output rows
    g = jax.grad(lambda spec: stage_cost(sp, spec).compute_s)(hw)
    np.testing.assert_allclose(float(g.row_overhead_s), 1000.0, rtol=1e-6)
    assert tiny_spec().row_overhead_s == 0.0  # not modeled unless given (datasheet presets)
    for name in ("h100-datasheet", "a100-datasheet", "hygcn", "gnnear", "hbm-pim"):
        assert presets.get(name).row_overhead_s == 0.0
    for name in ("h100", "a100"):  # fitted on the public H100 table (presets.load_gpu_fit)
        assert presets.get(name).row_overhead_s > 0.0
    with pytest.raises(ValueError, match=r"HardwareSpec\('tiny'\)\.row_overhead_s: must be finite and >= 0"):
        tiny_spec(row_overhead_s=-1e-9)
    with pytest.raises(ValueError, match=r"\.row_overhead_s: must be finite and >= 0"):
        tiny_spec(row_overhead_s=float("inf"))
    with pytest.raises(TypeError, match=r"\.row_overhead_s"):
        tiny_spec(row_overhead_s="3ns")


def test_segment_spmm_upcast_messages_by_hand():
    # bf16 features buffered as f32 messages (XLA:CPU): [5000, 16] messages of 4 bytes, written
    # and read back (2 * 320000 B of re-used bytes); each of the 80000 message elements is
    # stored by the gather and loaded by the scatter-add (MESSAGE_OPS_PER_ELEMENT = 2: 160000
    # ops) and converted twice (160000 ops); without the upcast the buffer holds 2-byte
    # messages, and only the store and the load run.
    assert MESSAGE_OPS_PER_ELEMENT == 2.0
    spmm, msg = segment_spmm_stages(1000, 5000, 16, 16, 16, message_bits=32)
    assert float(msg.macs) == 320000.0 and float(msg.reuse_bytes) == 640000.0 and float(msg.bits) == 32.0
    assert float(spmm.gathered_rows) == 5000.0 and float(msg.gathered_rows) == 0.0
    _, plain = segment_spmm_stages(1000, 5000, 16, 16, 16)
    assert float(plain.macs) == 160000.0 and float(plain.reuse_bytes) == 320000.0
    # 320000 ops / 1e9 s at the tiny spec's vector rate; the buffer fits on chip
    np.testing.assert_allclose(float(stage_cost(msg, tiny_spec()).compute_s), 3.2e-4, rtol=1e-6)


def test_spmm_fitting_buffer_by_hand():
    # A: 1000 x 1000 with 5000 nonzeros; X: [1000, 16] fp32 = 64000 B < 1e6 B buffer -> all hits.
    # structure: 5000 * (4 + 4) + 1001 * 4 = 44004; X 64000; out 64000 -> compulsory 172004.
    # reuse: (5000 - 1000) * 16 * 4 = 256000, all on chip (miss = 0): DRAM = 172004.
    # MACs 5000 * 16 = 80000 at the fp32 vector rate 1e9.
    cost = stage_cost(spmm_stage(1000, 5000, 16, 32, 32), tiny_spec())
    _assert_stage(cost, macs=80000.0, compute_s=8e-5, memory_s=1.72004e-4, dram_bytes=172004.0,
                  onchip_bytes=428004.0, energy_j=(80000 * 4 + 172004 * 10 + 428004 * 1) * 1e-12)
    assert cost.bound == "memory"


def test_spmm_spilling_buffer_by_hand():
    # A: 10000 x 10000, 1e5 nonzeros; X: [10000, 256] int8 = 2.56e6 B > 1e6 B buffer:
    # miss = 1 - 1e6 / 2.56e6 = 0.609375.
    # structure: 1e5 * 8 + 10001 * 4 = 840004; X 2.56e6; out 2.56e6 -> compulsory 5960004.
    # reuse: (1e5 - 1e4) * 256 * 1 = 2.304e7 B; DRAM = 5960004 + 2.304e7 * 0.609375 = 20000004.
    # MACs 1e5 * 256 = 2.56e7 at 4 x 1e9 (8-bit lane packing) = 6.4e-3 s.
    cost = stage_cost(spmm_stage(10000, 100000, 256, 8, 8), tiny_spec())
    dram = 5960004 + 2.304e7 * 0.609375
    onchip = 5960004 + 2.304e7
    _assert_stage(cost, macs=2.56e7, compute_s=6.4e-3, memory_s=dram / 1e9, dram_bytes=dram, onchip_bytes=onchip,
                  energy_j=(2.56e7 * 0.2 + dram * 10 + onchip * 1) * 1e-12)
    # A buffer large enough for X removes exactly the re-gathers from DRAM.
    big = stage_cost(spmm_stage(10000, 100000, 256, 8, 8), tiny_spec(onchip_buffer_bytes=2.56e6))
    np.testing.assert_allclose(float(big.dram_bytes), 5960004.0, rtol=1e-6)


def test_spmm_fewer_nonzeros_than_rows_has_no_reuse():
    cost = stage_cost(spmm_stage(1000, 500, 16, 32, 32), tiny_spec(onchip_buffer_bytes=1.0))
    # 500 * 8 + 1001 * 4 + 2 * 64000 = 136004; no reuse even with a 1-byte buffer.
    np.testing.assert_allclose(float(cost.dram_bytes), 136004.0, rtol=1e-6)
    np.testing.assert_allclose(float(cost.onchip_bytes), 136004.0, rtol=1e-6)


def test_elementwise_by_hand():
    # [1000, 16] at 16 bit: 16000 ops at 2 x 1e9 (16-bit packing) = 8e-6 s;
    # read + write 2 * 16000 * 2 B = 64000 B.
    cost = stage_cost(elementwise_stage(1000, 16, 16), tiny_spec())
    _assert_stage(cost, macs=16000.0, compute_s=8e-6, memory_s=6.4e-5, dram_bytes=64000.0, onchip_bytes=64000.0,
                  energy_j=(16000 * 1.5 + 64000 * 10 + 64000 * 1) * 1e-12)


_E4 = _hand_int_mac_pj(4)  # the int4 tier: 0.2 pJ * (share * 1/4 + (1 - share) * 1/2)
# tiny_spec with int4 8e9: time per matrix MAC 1/8e9 (4 bit), 1/4e9 (8), 1/2e9 (16), 1/1e9 (32);
# vector 1/4e9 (<= 8, lane packing x4), 1/2e9 (16), 1/1e9 (32); MAC energy 0.0652 / 0.2 / 1.5 / 4.0 pJ.
# Hardened: the tier's value; relaxed: time per MAC and energy linear in bits between tiers.
HARDENED_TIERS = [  # bits, matrix rate, vector rate, MAC pJ (the operand's tier)
    (2, 8e9, 4e9, _E4), (4, 8e9, 4e9, _E4), (4.5, 4e9, 4e9, 0.2), (8, 4e9, 4e9, 0.2), (9, 2e9, 2e9, 1.5),
    (16, 2e9, 2e9, 1.5), (17, 1e9, 1e9, 4.0), (31.9, 1e9, 1e9, 4.0), (32, 1e9, 1e9, 4.0)]
RELAXED_TIERS = [
    (2, 8e9, 4e9, _E4), (4, 8e9, 4e9, _E4),
    (4.5, 1 / (1 / 8e9 + 0.125 * (1 / 4e9 - 1 / 8e9)), 4e9, _E4 + 0.125 * (0.2 - _E4)),
    (8, 4e9, 4e9, 0.2), (9, 1 / (1 / 4e9 + 0.125 / 4e9), 1 / (1 / 4e9 + 0.125 / 4e9), 0.2 + 0.125 * 1.3),
    (16, 2e9, 2e9, 1.5), (17, 1 / (1 / 2e9 + (1 / 16) / 2e9), 1 / (1 / 2e9 + (1 / 16) / 2e9), 1.5 + 2.5 / 16),
    (31.9, 1 / (1e-9 - 0.1 / 16 * 0.5e-9), 1 / (1e-9 - 0.1 / 16 * 0.5e-9), 4.0 - 0.1 * 2.5 / 16), (32, 1e9, 1e9, 4.0)]


@pytest.mark.parametrize("hardened", [False, True])
@pytest.mark.parametrize("row", range(len(HARDENED_TIERS)))
def test_rates_and_mac_energy_by_bits(row, hardened):
    """Tiers: int4 (<= 4 bit), int8 (<= 8), 16-bit float (<= 16), fp32; the relaxed cost interpolates
    the time per MAC and the MAC energy linearly between tiers: no jump between 31.9 and 32 bits, and
    a 16-bit MAC is the Horowitz fp16 one (1.5 pJ), not the integer model (0.75 pJ). 1e6 MACs."""
    bits, matrix_rate, vector_rate, mac_pj = (HARDENED_TIERS if hardened else RELAXED_TIERS)[row]
    hw = tiny_spec(matrix_int4_macs_per_s=8e9)  # int4 distinguishable from int8
    gemm = stage_cost(gemm_stage(1, 1e6, 1, bits, bits, bits), hw, hardened=hardened)
    np.testing.assert_allclose(float(gemm.compute_s), 1e6 / matrix_rate, rtol=1e-6)
    np.testing.assert_allclose(float(gemm.dram_bytes), (2e6 + 1) * bits / 8, rtol=1e-6)
    # all bytes are compulsory, so each costs 10 pJ (DRAM) + 1 pJ (SRAM)
    np.testing.assert_allclose(float(gemm.energy_j), (1e6 * mac_pj + (2e6 + 1) * bits / 8 * 11) * 1e-12, rtol=1e-6)
    spmm = stage_cost(spmm_stage(1, 1, 1e6, bits, bits), hw, hardened=hardened)
    np.testing.assert_allclose(float(spmm.compute_s), 1e6 / vector_rate, rtol=1e-6)


def test_mac_energy_continuous_at_32_bits():
    """The audit's jump: 31.9 bits was priced by the integer model (3.3 pJ), 32 by fp32 (4.6 pJ)."""
    from codesign.hwmodel import mac_energy_pj
    from codesign.hwmodel.spec import process_energy_scale, scaled_op_energies
    hw = presets.get("h100").replace(**scaled_op_energies(45.0, 0.9))  # Horowitz's own 45 nm / 0.9 V
    e = [float(mac_energy_pj(hw, b)) for b in (31.9, 31.99, 32.0)]
    assert e[2] == pytest.approx(4.6) and abs(e[1] - e[2]) < 0.01 and abs(e[0] - e[2]) < 0.02
    assert float(mac_energy_pj(hw, 16.0)) == pytest.approx(1.5)  # Horowitz fp16 MAC, 1.1 + 0.4 pJ
    assert float(mac_energy_pj(hw, 8.0)) == pytest.approx(0.23)
    # the h100 preset: the same table scaled to its node (TSMC 4N as N5, 0.75 V)
    s = process_energy_scale(5.0, 0.75)
    h = presets.get("h100")
    e = [float(mac_energy_pj(h, b)) for b in (31.9, 31.99, 32.0)]
    assert e[2] == pytest.approx(4.6 * s, rel=1e-6) and abs(e[1] - e[2]) < 0.01 * s and abs(e[0] - e[2]) < 0.02 * s
    assert float(mac_energy_pj(h, 16.0)) == pytest.approx(1.5 * s, rel=1e-6)


def test_smooth_max_three_terms_bound():
    """n equal terms: n**(1/16) times the max: 4.4 % for two, 7.1 % for three (the docstring's bound)."""
    three = float(smooth_max(jnp.float32(1.0), jnp.float32(1.0), jnp.float32(1.0)))
    assert three == pytest.approx(3 ** (1 / 16), rel=1e-6) and 0.070 < three - 1 < 0.072
    assert float(smooth_max(jnp.float32(1.0), jnp.float32(1.0))) - 1 == pytest.approx(0.0443, abs=1e-4)


_nonneg = st.floats(0, 1e3).map(lambda v: 0.0 if v < 1e-20 else v)  # no float32 subnormals after scaling


@settings(max_examples=30, deadline=None)
@given(a=_nonneg, b=_nonneg, scale=st.sampled_from([1e-9, 1e-3, 1.0]))
@example(a=3.0, b=3.0, scale=1e-3).via("the largest overestimate")
@example(a=0.0, b=2.0, scale=1.0).via("one roof is zero")
@example(a=0.0, b=0.0, scale=1.0).via("both zero")
def test_smooth_max_bounds(a, b, scale):
    a, b = a * scale, b * scale
    got = float(smooth_max(jnp.float32(a), jnp.float32(b)))
    hi = max(float(np.float32(a)), float(np.float32(b)))
    assert hi * (1 - 1e-6) <= got <= 2 ** (1 / 16) * hi * (1 + 1e-6)
    if min(a, b) == 0:
        assert got == hi
    if a == b:  # the largest overestimate
        np.testing.assert_allclose(got, 2 ** (1 / 16) * hi, rtol=1e-6)


def test_smooth_max_gradient_finite_at_zero():
    g = jax.grad(lambda a: smooth_max(a, jnp.float32(2.0)))(jnp.float32(0.0))
    assert float(g) == 0.0
    ga, gb = jax.grad(smooth_max, argnums=(0, 1))(jnp.float32(3.0), jnp.float32(1.0))
    np.testing.assert_allclose([float(ga), float(gb)], [1.0, 0.0], atol=1e-6)  # ~ d max / d a


# ---------------------------------------------------------------------------------------------
# 2. Dataflow order.
# ---------------------------------------------------------------------------------------------

def _fused(stage):
    """An elementwise stage as a fused epilogue runs it, stated independently of `estimate`: its
    ``epilogue_bytes`` from DRAM, no launch, one pass."""
    return dataclasses.replace(stage, compulsory_bytes=stage.epilogue_bytes, reuse_bytes=jnp.float32(0.0),
                               launches=jnp.float32(0.0), passes=jnp.float32(1.0))


def _check_report_consistent(report, layer, hw):
    ac = [stage_cost(s, hw) for s in layer.aggregate_first]
    ca = [stage_cost(s, hw) for s in layer.combine_first]
    el = [stage_cost(_fused(s) if hw.fuses_epilogue else s, hw) for s in layer.elementwise]
    lat = lambda cs: sum(float(c.latency_s) for c in cs)
    chosen = ac if float(report.aggregate_first[layer.name]) == 1.0 else ca
    assert lat(chosen) == pytest.approx(min(lat(ac), lat(ca)), rel=1e-6)
    for field in ("latency_s", "energy_j", "dram_bytes"):
        static = float(report.static_energy_j) if field == "energy_j" else 0.0  # static power x latency
        stage_sum = sum(float(getattr(c, field)) for c in report.stages.values()) + static
        np.testing.assert_allclose(float(getattr(report, field)), stage_sum, rtol=1e-6, err_msg=field)
        want = sum(float(getattr(c, field)) for c in chosen + el) + static
        np.testing.assert_allclose(float(getattr(report, field)), want, rtol=1e-6, err_msg=field)


@pytest.mark.parametrize("preset", PRESETS)
def test_combine_first_for_wide_input(preset):
    hw = presets.get(preset)
    layer = message_passing_layer("layer0", CORA_NODES, CORA_EDGES + CORA_NODES, 1433, 16, 32, 32, 32)
    report = estimate(Workload((layer,)), hw)
    assert float(report.aggregate_first["layer0"]) == 0.0
    assert sorted(report.stages) == ["layer0/elementwise", "layer0/gemm", "layer0/spmm"]
    # the aggregation ran over the 16 output columns
    np.testing.assert_allclose(float(report.stages["layer0/spmm"].macs), (CORA_EDGES + CORA_NODES) * 16, rtol=1e-6)
    _check_report_consistent(report, layer, hw)


@pytest.mark.parametrize("preset", PRESETS)
def test_aggregate_first_for_narrow_input(preset):
    hw = presets.get(preset)
    nnz = 50 * CORA_NODES  # many edges
    layer = message_passing_layer("layer0", CORA_NODES, nnz, 8, 512, 32, 32, 32)
    report = estimate(Workload((layer,)), hw)
    assert float(report.aggregate_first["layer0"]) == 1.0
    np.testing.assert_allclose(float(report.stages["layer0/spmm"].macs), nnz * 8, rtol=1e-6)
    _check_report_consistent(report, layer, hw)


def test_fused_epilogue_moves_only_its_own_operands():
    """On a target that fuses epilogues, a layer's bias + ReLU stage moves its 1-bit activation mask
    (n * width / 8 bytes) and launches nothing; its ops stay. Unfused it reads and writes
    [n, width] and pays a launch. GraphSAGE's root term is read in either case."""
    n, width = CORA_NODES, 16
    h100 = presets.get("h100")
    assert h100.fuses_epilogue and not presets.get("cpu").fuses_epilogue
    layer = message_passing_layer("layer0", n, CORA_EDGES + n, 1433, width, 32, 32, 32)
    fused = estimate(Workload((layer,)), h100).stages["layer0/elementwise"]
    unfused = estimate(Workload((layer,)), h100.replace(fuses_epilogue=False)).stages["layer0/elementwise"]
    assert float(fused.dram_bytes) == pytest.approx(n * width / 8)
    assert float(unfused.dram_bytes) == pytest.approx(2 * n * width * 4)
    assert float(fused.macs) == float(unfused.macs) == n * width
    assert float(unfused.latency_s) >= h100.stage_overhead_s > 10 * float(fused.latency_s)
    # a root term read from DRAM (SAGE): one more [n, width] operand at the stage's bits
    root = elementwise_stage(n, width, 8.0, ops=3.0, epilogue_reads=1.0)
    assert float(root.epilogue_bytes) == pytest.approx(n * width * (1.0 + 1 / 8))
    # training: autograd doubles the stage, so the mask is written forward and read backward
    train = autograd_training(Workload((layer,)), learned_edge_weights=False)
    assert float(estimate(train, h100).stages["layer0/elementwise"].dram_bytes) == pytest.approx(2 * n * width / 8)
    # a hand-built stage that does not say how it fuses is priced as a kernel of its own
    plain = Stage("elementwise", jnp.float32(n * width), jnp.float32(32), jnp.float32(2 * n * width * 4),
                  jnp.float32(0), jnp.float32(0))
    own = estimate(Workload((LayerWorkload("l", (), (), (plain,)),)), h100).stages["l/elementwise"]
    assert float(own.dram_bytes) == pytest.approx(2 * n * width * 4)


def test_mapping_by_objective_trades_latency_for_energy():
    """``estimate(mapping=)`` keeps, per layer, the mapping of the least latency (default), energy or
    DRAM bytes: on gnnear a narrow Cora layer is fastest with its aggregation on the near-memory
    units, which costs more energy than the host alone (the INT4 GAT of issue 34's note); each
    choice is best on its own measure, and an unknown one is refused naming the argument."""
    hw = presets.get("gnnear")
    layer = message_passing_layer("layer0", CORA_NODES, CORA_EDGES + CORA_NODES, 1433, 64, 4, 4, 4)
    wl = Workload((layer, message_passing_layer("layer1", CORA_NODES, CORA_EDGES + CORA_NODES, 64, 7, 4, 4, 32)))
    by = {m: estimate(wl, hw, mapping=m) for m in ("latency_s", "energy_j", "dram_bytes")}
    for m, rep in by.items():
        for other in by.values():
            assert float(getattr(rep, m)) <= float(getattr(other, m)) * (1 + 1e-6), m
    fast, frugal = by["latency_s"], by["energy_j"]
    assert float(fast.on_nmp["layer0"]) == 1.0 and float(frugal.on_nmp["layer0"]) == 0.0
    assert float(frugal.energy_j) < 0.8 * float(fast.energy_j) and float(frugal.latency_s) > float(fast.latency_s)
    with pytest.raises(ValueError, match=r"estimate\(mapping\): must be one of latency_s, energy_j, dram_bytes"):
        estimate(wl, hw, mapping="energy")


@pytest.mark.parametrize("name,fuses", [("h100", True), ("a100", True), ("hygcn", True), ("gnnear", True),
                                        ("cpu", False), ("cpu_numpy", False), ("v100", False), ("v100-pyg", False),
                                        ("mi100", False), ("hbm-pim", False), ("upmem", False)])
def test_which_presets_fuse_epilogues(name, fuses):
    """The presets' software: GPUs with cuBLASLt epilogues and the accelerators fuse; the measured
    CPU (XLA:CPU runs bias + ReLU as a loop of its own), numpy, the papers' PyG / DGL baselines
    and the MI100 host do not (docs/hwmodel.md)."""
    assert presets.get(name).fuses_epilogue is fuses


# ---------------------------------------------------------------------------------------------
# 3. Gradients against central finite differences (float32, relative step 1e-3).
# ---------------------------------------------------------------------------------------------

GRAD_POINT = (0.7, 0.4, 6.3)  # edge density, feature density, bits: away from the 4/8/16 thresholds


@functools.cache
def _cora_jacobian(preset: str):
    """Jitted ``x = [edge_density, feature_density, bits] -> d[latency_s, energy_j] / dx`` ([2, 3])."""
    point = _cora_point(preset)
    return jax.jit(jax.jacrev(lambda x: point(x[0], x[1], x[2])[:2]))


@pytest.mark.parametrize("preset", PRESETS)
def test_workload_gradients_match_finite_differences(preset):
    point, jacobian = _cora_point(preset), _cora_jacobian(preset)
    x0 = np.array(GRAD_POINT, np.float32)
    jac = np.asarray(jacobian(jnp.asarray(x0)))  # [latency, energy] x [edge, feature, bits]
    assert np.all(np.isfinite(jac))
    # more edges, more features and more bits all cost time and energy
    assert np.all(jac > 0), jac
    for i in range(3):
        # 1e-2: the fitted GPU presets' fixed per-kernel cost dominates a Cora GCN's latency, and a
        # 1e-3 step's float32 difference of it is ~2 % noise
        h = 1e-2 * x0[i]
        xp, xm = x0.copy(), x0.copy()
        xp[i] += h
        xm[i] -= h
        vp, vm = np.asarray(point(*xp)), np.asarray(point(*xm))
        np.testing.assert_array_equal(vp[3:], vm[3:], err_msg="FD step crossed a dataflow switch")
        step = float(xp[i]) - float(xm[i])  # the step actually taken in float32
        for j in range(2):
            fd = (float(vp[j]) - float(vm[j])) / step
            np.testing.assert_allclose(jac[j, i], fd, rtol=1e-2, err_msg=f"output {j}, input {i}")


def _spec_leaf_fd(f, hw, field, rel=1e-3):
    v = getattr(hw, field)
    plus, minus = hw.replace(**{field: v * (1 + rel)}), hw.replace(**{field: v * (1 - rel)})
    return (float(f(plus)) - float(f(minus))) / (2 * rel * v)


def _float_leaves(hw: HardwareSpec) -> HardwareSpec:
    """The spec with every numeric leaf a Python float (`jax.grad` rejects integer leaves)."""
    return jax.tree.map(float, hw)


@pytest.mark.parametrize("preset", PRESETS)
def test_hardware_gradients(preset):
    hw = _float_leaves(presets.get(preset))
    workload = cora_gcn_workload(*_f32(*GRAD_POINT))

    def costs(spec):
        r = estimate(workload, spec)
        onchip = sum(c.onchip_bytes for c in r.stages.values())
        return jnp.stack([r.latency_s, r.energy_j, r.dram_bytes, onchip])

    totals = jax.jit(costs)
    jac = jax.jit(jax.jacrev(costs))(hw)
    assert isinstance(jac, HardwareSpec) and jac.name == hw.name
    # (as a dict: a HardwareSpec of Python floats would be re-validated and reject the zeros)
    g_lat = {f: float(getattr(jac, f)[0]) for f in _NUMERIC_FIELDS}
    g_en = {f: float(getattr(jac, f)[1]) for f in _NUMERIC_FIELDS}
    # more bandwidth -> less time
    assert g_lat["dram_bw_bytes_per_s"] < 0
    fd = _spec_leaf_fd(lambda spec: totals(spec)[0], hw, "dram_bw_bytes_per_s")
    np.testing.assert_allclose(g_lat["dram_bw_bytes_per_s"], fd, rtol=1e-2)
    # energy is linear in the per-byte energies: the gradient is the byte count
    _, _, dram, onchip = np.asarray(totals(hw), np.float64)
    np.testing.assert_allclose(g_en["dram_energy_pj_per_byte"], dram * 1e-12, rtol=1e-5)
    np.testing.assert_allclose(g_en["sram_energy_pj_per_byte"], onchip * 1e-12, rtol=1e-5)
    # ... and the per-byte energies do not change the time
    assert g_lat["dram_energy_pj_per_byte"] == 0.0 and g_lat["sram_energy_pj_per_byte"] == 0.0
    # 6.3-bit GEMMs run on the int8 engine: its rate may shorten the time, the fp32 rate cannot
    assert g_lat["matrix_int8_macs_per_s"] <= 0.0 and g_lat["matrix_fp32_macs_per_s"] == 0.0


def test_cpu_preset_differentiable_as_is():
    workload = cora_gcn_workload(*_f32(*GRAD_POINT))
    g = jax.grad(lambda spec: estimate(workload, spec).latency_s)(presets.get("cpu"))
    assert float(g.dram_bw_bytes_per_s) < 0.0  # more bandwidth, less time


def test_buffer_gradient_when_spilling():
    """With X larger than the buffer, more buffer saves DRAM traffic: d energy / d buffer < 0."""
    stage = spmm_stage(10000, 100000, 256, 8, 8)
    energy = lambda spec: stage_cost(stage, spec).energy_j
    g = jax.grad(energy)(tiny_spec())
    # by hand: d dram / d buffer = -reuse / working_set = -2.304e7 / 2.56e6 = -9; x 10 pJ/B
    np.testing.assert_allclose(float(g.onchip_buffer_bytes), -9 * 10 * 1e-12, rtol=1e-5)
    np.testing.assert_allclose(float(g.onchip_buffer_bytes),
                               _spec_leaf_fd(energy, tiny_spec(), "onchip_buffer_bytes"),
                               rtol=1e-2)
    # with the buffer large enough, the gradient is exactly zero
    assert float(jax.grad(energy)(tiny_spec(onchip_buffer_bytes=1e7)).onchip_buffer_bytes) == 0.0


# ---------------------------------------------------------------------------------------------
# 4. Gradient from a real model's gate logits.
# ---------------------------------------------------------------------------------------------

def test_gcn_gate_logit_gradient():
    from codesign.models import GCN
    from codesign.sparsify import BETA, GAMMA, ZETA, GateLogit

    hw = presets.get("h100")
    model = GCN(*CORA_DIMS, n_edges=CORA_EDGES, feature_mask=True, bits=8, rngs=nnx.Rngs(0))
    # spread the logits, so each gate has its own gradient
    rng = np.random.default_rng(0)
    model.edge_mask.gate.log_alpha[...] = jnp.asarray(rng.normal(1.0, 2.0, CORA_EDGES), jnp.float32)
    model.feature_mask.gate.log_alpha[...] = jnp.asarray(rng.normal(1.0, 2.0, CORA_DIMS[0]), jnp.float32)

    def energy(m):
        return estimate(m.workload(CORA_NODES, CORA_EDGES), hw).energy_j

    grads = nnx.jit(nnx.grad(energy, argnums=nnx.DiffState(0, GateLogit)))(model)
    edge_g = np.asarray(grads["edge_mask"]["gate"]["log_alpha"][...])
    feat_g = np.asarray(grads["feature_mask"]["gate"]["log_alpha"][...])
    assert edge_g.shape == (CORA_EDGES,) and feat_g.shape == (CORA_DIMS[0],)
    assert np.all(edge_g > 0) and np.all(feat_g > 0)  # raising a logit keeps more, costs more

    graphdef, gates, rest = nnx.split(model, GateLogit, ...)
    energy_of = jax.jit(lambda g: energy(nnx.merge(graphdef, g, rest)))
    # a random direction in the positive orthant (a sign-random direction over 10556 gates moves the
    # mean density by ~1/sqrt(E) of that, below what a float32 difference resolves)
    leaves, treedef = jax.tree.flatten(gates)
    dirs = [jnp.asarray(rng.uniform(0.0, 1.0, leaf.shape), jnp.float32) for leaf in leaves]
    eps = 0.05
    plus = jax.tree.unflatten(treedef, [x + eps * d for x, d in zip(leaves, dirs)])
    minus = jax.tree.unflatten(treedef, [x - eps * d for x, d in zip(leaves, dirs)])
    fd = (float(energy_of(plus)) - float(energy_of(minus))) / (2 * eps)
    analytic = sum(float(jnp.vdot(g, d)) for g, d in zip(jax.tree.leaves(grads), dirs))
    np.testing.assert_allclose(analytic, fd, rtol=1e-2)
    # chain rule, gate by gate: dE/dlogit_i = dE/d(density) * P'(logit_i) / n_gates, with
    # P = prob_nonzero = sigmoid(logit - BETA log(-GAMMA / ZETA)) (Louizos et al. 2018, eq. 12)
    dens = model.densities()
    de_dx = _cora_jacobian("h100")(jnp.stack([dens["edge"], dens["feature"], jnp.float32(8.0)]))[1]
    shift = BETA * math.log(-GAMMA / ZETA)
    for g, logits, k, n in ((edge_g, model.edge_mask.gate.log_alpha[...], 0, CORA_EDGES),
                            (feat_g, model.feature_mask.gate.log_alpha[...], 1, CORA_DIMS[0])):
        p = 1.0 / (1.0 + np.exp(-(np.asarray(logits, np.float64) - shift)))
        # rtol: float32 sigmoid slopes of saturated gates (p ~ 1 - 1e-4) carry ~1e-3 relative error
        np.testing.assert_allclose(g, float(de_dx[k]) * p * (1 - p) / n, rtol=5e-3, atol=0)


@pytest.mark.parametrize("training", [False, True])
def test_gcn_workload_matches_reference_builder(training):
    """`GCN.workload` builds the workload the tests here cost (so the stored reports cover it)."""
    from codesign.models import GCN

    model = GCN(*CORA_DIMS, n_edges=CORA_EDGES, feature_mask=True, bits=8, rngs=nnx.Rngs(0))
    densities = {"edge": jnp.float32(0.5), "feature": jnp.float32(0.3)}
    got = model.workload(CORA_NODES, CORA_EDGES, densities=densities, training=training)
    want = cora_gcn_workload(*_f32(0.5, 0.3, 8.0))
    # the model's hidden layer adds ReLU and the 8-bit run-time fake quantization to the bias (9 ops)
    from codesign.hwmodel.workload import FAKE_QUANT_OPS
    elem = (hwmodel.elementwise_stage(CORA_NODES, CORA_DIMS[1], 8.0, 2.0 + FAKE_QUANT_OPS),)
    want = dataclasses.replace(want, layers=(dataclasses.replace(
        want.layers[0], elementwise=elem),) + want.layers[1:])
    if training:  # the edge mask's gates get a gradient: dA on every aggregation
        want = hwmodel.autograd_training(want, learned_edge_weights=True)
    assert got.training is training
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6)


# ---------------------------------------------------------------------------------------------
# 5. jit and vmap.
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", PRESETS)
def test_vmap_matches_loop(preset):
    rng = np.random.default_rng(1)
    e = rng.uniform(0, 1, 64).astype(np.float32)
    f = rng.uniform(0, 1, 64).astype(np.float32)
    b = rng.uniform(2, 32, 64).astype(np.float32)
    b[:4] = [4, 8, 16, 32]  # thresholds included
    hw = presets.get(preset)
    batched = jax.jit(jax.vmap(lambda e, f, b: _totals(estimate(cora_gcn_workload(e, f, b), hw))))
    got = np.asarray(batched(e, f, b))
    assert got.shape == (64, 3)
    point = _cora_point(preset)
    want = np.stack([np.asarray(point(*_f32(e[i], f[i], b[i])))[:3] for i in range(64)])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert len(np.unique(got[:, 1])) == 64  # the points really differ


@pytest.mark.parametrize("preset", PRESETS)
def test_jit_matches_eager(preset):
    hw = presets.get(preset)
    workload = cora_gcn_workload(*_f32(0.5, 0.3, 8.0))
    eager = estimate(workload, hw)
    jitted = jax.jit(estimate)(workload, hw)
    assert jax.tree.structure(eager) == jax.tree.structure(jitted)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-6)
    assert all(np.asarray(x).dtype == np.float32 for x in jax.tree.leaves(jitted))


# ---------------------------------------------------------------------------------------------
# 6. Monotonicity.
# ---------------------------------------------------------------------------------------------

_density = st.floats(0.0, 1.0, width=32)
_bits = st.floats(2.0, 32.0, width=32, exclude_max=True)


def _assert_not_cheaper(hi, lo, what):
    hi, lo = np.asarray(hi), np.asarray(lo)
    for k, name in enumerate(("latency_s", "energy_j", "dram_bytes")):
        assert hi[k] >= lo[k] * (1 - MONOTONE_RTOL), f"{what}: {name} {hi[k]!r} < {lo[k]!r}"


@pytest.mark.parametrize("preset", PRESETS)
@settings(max_examples=30, deadline=None)
@given(d1=_density, d2=_density, other=_density, bits=_bits)
def test_more_edges_never_cheaper(preset, d1, d2, other, bits):
    lo, hi = sorted((d1, d2))
    point = _cora_point(preset)
    _assert_not_cheaper(point(*_f32(hi, other, bits)), point(*_f32(lo, other, bits)), "edge density")


@pytest.mark.parametrize("preset", PRESETS)
@settings(max_examples=30, deadline=None)
@given(d1=_density, d2=_density, other=_density, bits=_bits)
def test_more_features_never_cheaper(preset, d1, d2, other, bits):
    lo, hi = sorted((d1, d2))
    point = _cora_point(preset)
    _assert_not_cheaper(point(*_f32(other, hi, bits)), point(*_f32(other, lo, bits)), "feature density")


@pytest.mark.parametrize("preset", PRESETS)
@settings(max_examples=30, deadline=None)
@given(b1=_bits, b2=_bits, edge=_density, feature=_density)
def test_fewer_bits_never_more_dram_bytes(preset, b1, b2, edge, feature):
    lo, hi = sorted((b1, b2))
    point = _cora_point(preset)
    dram_hi = float(point(*_f32(edge, feature, hi))[2])
    dram_lo = float(point(*_f32(edge, feature, lo))[2])
    assert dram_lo <= dram_hi * (1 + MONOTONE_RTOL)


# ---------------------------------------------------------------------------------------------
# 7. Validation.
# ---------------------------------------------------------------------------------------------

_NUMERIC_FIELDS = ["matrix_fp32_macs_per_s", "matrix_bf16_macs_per_s", "matrix_int8_macs_per_s",
                   "matrix_int4_macs_per_s", "vector_fp32_macs_per_s", "dram_bw_bytes_per_s",
                   "dram_energy_pj_per_byte", "onchip_buffer_bytes", "sram_energy_pj_per_byte",
                   "mac_energy_int8_pj", "mac_energy_fp32_pj"]


@pytest.mark.parametrize("field", _NUMERIC_FIELDS)
@pytest.mark.parametrize("value", [0.0, -1.0, math.nan, math.inf, -math.inf])
def test_invalid_values_raise_naming_field(field, value):
    """Rates and bandwidths must be > 0; energies and the buffer size may be 0 (a free access, no
    buffer) but not negative."""
    nonneg = field in HOST_NONNEGATIVE
    if nonneg and value == 0.0:
        free_int8 = {"mac_energy_int8_pj": 0.0} if field == "mac_energy_fp32_pj" else {}  # int8 <= fp32
        assert getattr(tiny_spec(**{field: value, **free_int8}), field) == 0.0
        return
    with pytest.raises(ValueError, match=rf"\.{field}: must be finite and {'>= 0' if nonneg else '> 0'}, got"):
        tiny_spec(**{field: value})


@pytest.mark.parametrize("field", ["gemm_pack_byte_s", "parallel_stage_bytes"])
@pytest.mark.parametrize("value", [-1.0, math.nan, math.inf])
def test_packing_and_inline_loop_fields_refuse_bad_values_naming_the_field(field, value):
    with pytest.raises(ValueError, match=rf"\.{field}: must be finite and >= 0, got"):
        tiny_spec(**{field: value})
    assert getattr(tiny_spec(**{field: 0.0}), field) == 0.0


def test_valid_spec_constructs():
    hw = tiny_spec()
    assert hw.dram_bw_bytes_per_s == 1e9 and hw.name == "tiny"


def test_precision_rates_are_not_ordered_but_mac_energy_is():
    """A narrower type may be slower (XLA:CPU bf16 GEMM is, measured), so no ordering is imposed on
    rates; the model then uses the slower rate for that precision. int8 MACs costing more energy
    than fp32 ones is still an error."""
    slow_bf16 = tiny_spec(matrix_bf16_macs_per_s=0.5e9)
    assert float(matrix_macs_per_s(slow_bf16, 16.0)) == 0.5e9
    assert float(matrix_macs_per_s(slow_bf16, 32.0)) == 1e9
    with pytest.raises(ValueError, match=r"\.mac_energy_int8_pj: "):
        tiny_spec(mac_energy_int8_pj=5.0)


def test_vector_rates_default_to_lane_packing_and_can_be_given():
    hw = tiny_spec()
    assert [float(vector_macs_per_s(hw, b)) for b in (32.0, 16.0, 8.0)] == [1e9, 2e9, 4e9]
    given = tiny_spec(vector_bf16_macs_per_s=1e9, vector_int8_macs_per_s=1.5e9)
    assert [float(vector_macs_per_s(given, b)) for b in (32.0, 16.0, 8.0)] == [1e9, 1e9, 1.5e9]


def test_presets_registry():
    assert {"h100", "cpu"} <= set(presets.names())
    assert presets.get("H100").name == "h100"
    for name in presets.names():
        assert presets.get(name).name == name
    with pytest.raises(ValueError, match=r"'nope'.*known presets: .*cpu.*h100"):
        presets.get("nope")


def test_replace_validates():
    hw = presets.get("h100")
    with pytest.raises(ValueError, match=r"\.dram_bw_bytes_per_s"):
        hw.replace(dram_bw_bytes_per_s=-1)
    assert hw.replace(dram_bw_bytes_per_s=1e12).dram_bw_bytes_per_s == 1e12
    assert hw.dram_bw_bytes_per_s == 3.35e12  # frozen: the original is unchanged


@pytest.mark.parametrize("value", [np.float32(-1.0), np.int64(0), np.array(-1.0)])
def test_numpy_scalars_validated(value):
    with pytest.raises(ValueError, match=r"\.dram_bw_bytes_per_s: must be finite and > 0"):
        tiny_spec(dram_bw_bytes_per_s=value)


@pytest.mark.parametrize("value", [True, "1e9", np.ones(2)])
def test_non_numbers_are_type_errors(value):
    with pytest.raises(TypeError, match=r"\.dram_bw_bytes_per_s: must be a real number"):
        tiny_spec(dram_bw_bytes_per_s=value)


# ---------------------------------------------------------------------------------------------
# 8. Stored reference reports.
# ---------------------------------------------------------------------------------------------

REFERENCE_CONFIGS = {
    "dense_fp32_h100": dict(preset="h100", edge_density=1.0, feature_density=1.0, bits=32.0),
    "int8_edge0.5_feature0.3_h100": dict(preset="h100", edge_density=0.5, feature_density=0.3, bits=8.0),
    "int8_edge0.5_feature0.3_cpu": dict(preset="cpu", edge_density=0.5, feature_density=0.3, bits=8.0),
}
_REPORT_FIELDS = ("latency_s", "energy_j", "dram_bytes")


def _report_for(config: dict):
    workload = cora_gcn_workload(*_f32(config["edge_density"], config["feature_density"], config["bits"]))
    return estimate(workload, presets.get(config["preset"]))


def generate_reference() -> dict:
    """The stored reports: per configuration, totals, dataflow choices and every stage's cost."""
    configs = {}
    for name, config in REFERENCE_CONFIGS.items():
        report = _report_for(config)
        configs[name] = {
            "config": config,
            "totals": {k: float(getattr(report, k)) for k in _REPORT_FIELDS},
            "aggregate_first": {k: float(v) for k, v in report.aggregate_first.items()},
            "static_energy_j": float(report.static_energy_j),  # static power x latency, in energy_j's total
            "stages": {key: {k: float(getattr(c, k)) for k in _REPORT_FIELDS}
                       for key, c in sorted(report.stages.items())},
        }
    return {
        "what": ("Reference outputs of codesign.hwmodel.estimate for the 2-layer Cora GCN workload "
                 f"(N={CORA_NODES}, E={CORA_EDGES}, dims {'-'.join(map(str, CORA_DIMS))}, fp32 logits) on "
                 "hardware presets; checked by tests/test_hwmodel.py at rtol "
                 f"{REFERENCE_RTOL:g}. Units: seconds, joules, bytes."),
        "generated": datetime.date.today().isoformat(),
        "regenerate": REGEN_COMMAND,
        "jax_version": jax.__version__,
        "configs": configs,
    }


def test_reference_reports(request):
    if request.config.getoption("regen"):
        REFERENCE_PATH.parent.mkdir(parents=True, exist_ok=True)
        REFERENCE_PATH.write_text(json.dumps(generate_reference(), indent=2) + "\n")
        pytest.skip(f"--regen: regenerated {REFERENCE_PATH} from the current code (not compared); review its diff")
    stored = json.loads(REFERENCE_PATH.read_text())
    assert set(stored["configs"]) == set(REFERENCE_CONFIGS)
    for name, config in REFERENCE_CONFIGS.items():
        ref = stored["configs"][name]
        assert ref["config"] == config
        report = _report_for(config)
        for k in _REPORT_FIELDS:
            np.testing.assert_allclose(float(getattr(report, k)), ref["totals"][k], rtol=REFERENCE_RTOL,
                                       err_msg=f"{name} total {k}")
        assert {k: float(v) for k, v in report.aggregate_first.items()} == ref["aggregate_first"], name
        np.testing.assert_allclose(float(report.static_energy_j), ref["static_energy_j"], rtol=REFERENCE_RTOL,
                                   err_msg=f"{name} static_energy_j")
        assert sorted(report.stages) == sorted(ref["stages"]), name
        for key, cost in report.stages.items():
            for k in _REPORT_FIELDS:
                np.testing.assert_allclose(float(getattr(cost, k)), ref["stages"][key][k], rtol=REFERENCE_RTOL,
                                           err_msg=f"{name} {key} {k}")


def test_reference_configs_differ():
    """A guard against a bad regen, reading only the stored file (no cost model code): the stored
    reports are complete, self-consistent (totals = sums of their stages) and not copies of one
    another, and they order as the cost model must (cheaper when quantized and sparsified, and
    the same workload differs across hardware)."""
    stored = json.loads(REFERENCE_PATH.read_text())
    assert stored["regenerate"] == REGEN_COMMAND
    configs = stored["configs"]
    assert len(configs) >= 3
    for name, rep in configs.items():
        assert set(rep) == {"config", "totals", "aggregate_first", "stages", "static_energy_j"}, name
        assert set(rep["totals"]) == set(_REPORT_FIELDS), name
        assert rep["stages"] and set(rep["aggregate_first"]) == {key.split("/")[0] for key in rep["stages"]}, name
        for key, cost in rep["stages"].items():
            assert set(cost) == set(_REPORT_FIELDS), (name, key)
            assert all(math.isfinite(v) and v > 0 for v in cost.values()), (name, key, cost)
        for k in ("energy_j", "dram_bytes"):  # `estimate` sums these over the stages (+ static energy)
            static = rep["static_energy_j"] if k == "energy_j" else 0.0
            np.testing.assert_allclose(rep["totals"][k], sum(c[k] for c in rep["stages"].values()) + static,
                                       rtol=1e-5, err_msg=f"{name} {k}")
    names = sorted(configs)
    for i, a in enumerate(names):  # pairwise distinct: configs, every total, the stage reports
        for b in names[i + 1:]:
            assert configs[a]["config"] != configs[b]["config"], (a, b)
            for k in _REPORT_FIELDS:
                assert configs[a]["totals"][k] != configs[b]["totals"][k], (a, b, k)
            assert configs[a]["stages"] != configs[b]["stages"], (a, b)
    compared = 0
    for dense in configs.values():
        c = dense["config"]
        if (c["bits"], c["edge_density"], c["feature_density"]) != (32.0, 1.0, 1.0):
            continue
        for small in configs.values():  # quantizing and sparsifying is cheaper on the same hardware
            s = small["config"]
            if s["preset"] == c["preset"] and small is not dense:
                assert s["bits"] <= 32 and s["edge_density"] <= 1 and s["feature_density"] <= 1
                for k in _REPORT_FIELDS:
                    assert small["totals"][k] < dense["totals"][k], (s, k)
                compared += 1
    assert compared >= 1
    compared = 0
    for rep in configs.values():  # the same workload on other hardware: other latency and energy
        for other in configs.values():
            if other is not rep and {**other["config"], "preset": None} == {**rep["config"], "preset": None}:
                for k in ("latency_s", "energy_j"):
                    assert other["totals"][k] != rep["totals"][k], (rep["config"], other["config"], k)
                compared += 1
    assert compared >= 2


# ---------------------------------------------------------------------------------------------
# 9. Training workload.
# ---------------------------------------------------------------------------------------------

def test_training_counts():
    """`autograd_training` of a two-layer GCN, stage by stage: the first layer forms no gradient of
    the input features (aggregate-first: SpMM x1, GEMM x2; combine-first: GEMM x2, then the SpMM x2
    as X W depends on W), the second layer dH and dX (SpMM x2, GEMM x3), elementwise x2; with
    learned edge weights every SpMM one more (dA). Bytes and launches scale with the MACs; the
    working set and bits do not."""
    nnz = jnp.float32(0.5 * CORA_EDGES + CORA_NODES)
    fwd = Workload((message_passing_layer("layer0", CORA_NODES, nnz, jnp.float32(1433.0), 16, 8.0, 8.0, 8.0),
                    message_passing_layer("layer1", CORA_NODES, nnz, 16, 7, 8.0, 8.0, 32.0)))
    want = {False: {"layer0": {"aggregate_first": (1, 2), "combine_first": (2, 2), "elementwise": (2,)},
                    "layer1": {"aggregate_first": (2, 3), "combine_first": (3, 2), "elementwise": (2,)}},
            True: {"layer0": {"aggregate_first": (2, 2), "combine_first": (2, 3), "elementwise": (2,)},
                   "layer1": {"aggregate_first": (3, 3), "combine_first": (3, 3), "elementwise": (2,)}}}
    for learned in (False, True):
        trn = hwmodel.autograd_training(fwd, learned_edge_weights=learned)
        assert trn.training and not fwd.training
        for lf, lt in zip(fwd.layers, trn.layers):
            for order, factors in want[learned][lf.name].items():
                got = [float(t.macs) / float(f.macs) for f, t in zip(getattr(lf, order), getattr(lt, order))]
                assert got == pytest.approx(factors, rel=1e-6), (learned, lf.name, order)
                for s_f, s_t, k in zip(getattr(lf, order), getattr(lt, order), factors):
                    assert s_t.kind == s_f.kind
                    for fld in ("compulsory_bytes", "reuse_bytes", "launches"):
                        np.testing.assert_allclose(np.asarray(getattr(s_t, fld)), k * np.asarray(getattr(s_f, fld)),
                                                   rtol=1e-6)
                    assert np.asarray(s_t.working_set_bytes) == np.asarray(s_f.working_set_bytes)
                    assert np.asarray(s_t.bits) == np.asarray(s_f.bits)
    # the forward counts themselves, by hand
    gemm_f, spmm_f = fwd.layers[0].combine_first
    np.testing.assert_allclose(float(gemm_f.macs), CORA_NODES * 1433 * 16, rtol=1e-6)
    np.testing.assert_allclose(float(spmm_f.macs), (0.5 * CORA_EDGES + CORA_NODES) * 16, rtol=1e-6)
    with pytest.raises(ValueError, match="autograd_training"):
        hwmodel.autograd_training(hwmodel.autograd_training(fwd, False), False)


def test_aggregate_first_gcn_training_runs_three_aggregation_passes():
    """A two-layer GCN whose layers both aggregate first (in = hidden = out = 16 columns) runs 3
    SpMM passes per training step (2 forward + dH of layer 1), 5 with an edge mask (+ dA of each
    layer), 3 + 2 = 5 with the model's own builder and an `EdgeMask`, and 3 with a `DropEdge`
    (a random constant mask: no gradient)."""
    from codesign.models import GCN
    from codesign.sparsify import DropEdge

    n, e, f = 100, 400, 16
    one_pass = (e + n) * f  # SpMM MACs of one aggregation over the 16 columns (nnz = E + N self-loops)

    def spmm_macs(wl):
        return sum(float(s.macs) for L in wl.layers for s in L.aggregate_first if s.kind == "spmm")
    plain = GCN(f, f, f, rngs=nnx.Rngs(0))
    assert spmm_macs(plain.workload(n, e)) == pytest.approx(2 * one_pass)
    assert spmm_macs(plain.workload(n, e, training=True)) == pytest.approx(3 * one_pass)
    gated = GCN(f, f, f, n_edges=e, rngs=nnx.Rngs(0))
    dens = {"edge": 1.0, "feature": 1.0}
    assert spmm_macs(gated.workload(n, e, densities=dens, training=True)) == pytest.approx(5 * one_pass)
    dropped = GCN(f, f, f, edge_sparsifier=DropEdge(e, 0.3, rngs=nnx.Rngs(1)), rngs=nnx.Rngs(0))
    assert spmm_macs(dropped.workload(n, e, densities=dens, training=True)) == pytest.approx(3 * one_pass)


def test_training_rule_recognizes_first_layers_learned_edges_and_csr_gemms():
    """Which layers read the graph's input (`reads_graph_input`: every model's first layer, its
    parts but GIN's MLP and R-GCN's basis composition), which sparsifiers learn edge weights, and a
    CSR-input GEMM (kind "spmm") charged as a GEMM on the input (x2, no dA) with the aggregation
    after it needing d(X W) (x2)."""
    from codesign.models import GCN
    from codesign.sparsify import DropEdge, EdgeScorer, EdgeWeightMask, learns_edge_weights

    firsts = ["layer0", "layer0.root", "layer0/rel3", "layer0/self", "mlp0"]
    others = ["layer1", "layer0.mlp", "layer0/basis", "mlp1", "prop0", "vertex", "layer10"]
    assert [hwmodel.reads_graph_input(x) for x in firsts + others] == [True] * 5 + [False] * 7
    assert learns_edge_weights(EdgeScorer(8, rngs=nnx.Rngs(0))) and learns_edge_weights(EdgeWeightMask(5))
    assert not learns_edge_weights(DropEdge(5, 0.5, rngs=nnx.Rngs(0))) and not learns_edge_weights(None)
    assert learns_edge_weights(None, attention=True)
    n, e, k = 50, 200, 40
    nnz = np.full(k, 3.0, np.float32)
    for m, agg_factor in ((GCN(k, 8, 3, rngs=nnx.Rngs(0)), 2), (GCN(k, 8, 3, n_edges=e, rngs=nnx.Rngs(0)), 3)):
        inf, tr = m.workload(n, e, feature_nnz=nnz), m.workload(n, e, feature_nnz=nnz, training=True)
        (g0, a0), (g1, a1) = inf.layers[0].combine_first, tr.layers[0].combine_first
        assert g0.kind == "spmm" and g0.weight_gemm and not a0.weight_gemm
        assert float(g1.macs) == pytest.approx(2 * float(g0.macs))
        assert float(a1.macs) == pytest.approx(agg_factor * float(a0.macs))


@pytest.mark.parametrize("preset", PRESETS)
def test_training_costs_more(preset):
    hw = presets.get(preset)
    args = _f32(0.5, 0.3, 8.0)
    inference = estimate(cora_gcn_workload(*args), hw)
    training = estimate(cora_gcn_workload(*args, training=True), hw)
    for k in _REPORT_FIELDS:
        ratio = float(getattr(training, k)) / float(getattr(inference, k))
        # every stage is scaled by 1 (the first layer's aggregation), 2 or 3, so the latency (the
        # cheaper order's, both roofs scale alike) by a factor in (1, 3]; the bytes and energy of
        # the order chosen may exceed 3x (the first layer's orders scale differently, so the
        # training step may pick the other order)
        assert ratio > 1.0, (k, ratio)
        if k == "latency_s":
            assert ratio <= 3.0 * (1 + 1e-6), ratio



def test_lines_that_miss_the_last_level_cache_pay_line_miss_overhead_each():
    """`llc_bytes` / `line_miss_overhead_s`: each gathered line of a row that misses the last-level
    cache adds the fitted time to the stage's compute time (uniform re-reference without a
    locality profile: hit = llc / working set); a spec without `llc_bytes` has no such term, and
    either field below 0 is refused naming it."""
    n, nnz, width = 100_000, 1_000_000, 64  # X = 25.6 MB of 256-byte rows: 4 lines each
    stage = spmm_stage(n, nnz, width, 32.0, 32.0)
    base = tiny_spec(onchip_buffer_bytes=1e5, overlap_exponent=64.0, gather_granularity_bytes=64.0)  # 64-byte lines
    llc = 6.4e6  # a quarter of X: three quarters of the gathered rows miss it
    without = stage_cost(stage, base.replace(llc_bytes=llc)).compute_s
    assert float(stage_cost(stage, base.replace(line_miss_overhead_s=1e-8)).compute_s) == pytest.approx(
        float(without))
    with_term = stage_cost(stage, base.replace(llc_bytes=llc, line_miss_overhead_s=1e-8)).compute_s
    assert float(with_term - without) == pytest.approx(nnz * 0.75 * 4 * 1e-8, rel=1e-4)
    for field in ("llc_bytes", "line_miss_overhead_s"):
        with pytest.raises(ValueError, match=rf"\.{field}: must be finite and >= 0, got -1"):
            tiny_spec(**{field: -1.0})
