"""Near-memory mapping, measured locality, BSR/attention stages, presets, peak power."""

import dataclasses
import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import hwmodel
from codesign.hwmodel import (HardwareSpec, NearMemorySpec, Workload, estimate,
                              gemm_stage, locality, nmp_stage_cost, peak_power_w, presets, smooth_max,
                              spmm_stage, stage_cost)
from codesign.hwmodel.estimate import PJ

HOST = dict(name="host", matrix_fp32_macs_per_s=1e9, matrix_bf16_macs_per_s=1e9, matrix_int8_macs_per_s=1e9,
            matrix_int4_macs_per_s=1e9, vector_fp32_macs_per_s=1e9, dram_bw_bytes_per_s=1e9,
            dram_energy_pj_per_byte=10.0, onchip_buffer_bytes=1e3, sram_energy_pj_per_byte=1.0,
            mac_energy_int8_pj=0.2, mac_energy_fp32_pj=4.0, clock_hz=1e9)
NMP = dict(units=4.0, internal_bw_bytes_per_s=1e9, int_macs_per_s=2e9, fp32_macs_per_s=1e9, mac_energy_pj=2.0,
           internal_energy_pj_per_byte=3.0, buffer_bytes=1.0, host_link_bw_bytes_per_s=1e9,
           host_link_energy_pj_per_byte=10.0)


def spec(**nmp_changes):
    return HardwareSpec(**HOST, nmp=NearMemorySpec(**{**NMP, **nmp_changes}))


def test_nmp_stage_hand_computed():
    """4 units, the edges partitioned by receiver: each unit's 250 gathers touch a share
    f = 1 - exp(-1000 / (4 * 100)) of the 100 rows, read once per unit (4 * 100 * f rows), the
    rest re-gathered against the unit's 1-byte buffer; 32-byte rows move as 64-byte bursts; the
    most loaded unit (Poisson degrees, cv = 1/sqrt(10)) sets the time."""
    n, nnz, f = 100, 1000, 8
    st = spmm_stage(n, nnz, f, 32.0, 32.0)
    c = nmp_stage_cost(st, spec())
    x_bytes, out_bytes = n * f * 4, n * f * 4
    structure = nnz * 8 + (n + 1) * 4
    share = 1 - np.exp(-nnz / (4 * n))
    first = 4 * n * share
    hit = 1.0 / (x_bytes * 2 * share)  # 1-byte buffer per unit, rows floored to 64 B (x2)
    internal = structure + out_bytes + first * 64 + (nnz - first) * 64 * (1 - hit)
    imbalance = 1 + np.sqrt(2 * np.log(4)) * (1 / np.sqrt(10)) * np.sqrt(4 / 100)
    np.testing.assert_allclose(c.compute_s, imbalance * nnz * f / (4 * 1e9), rtol=1e-6)
    np.testing.assert_allclose(c.nmp_s, imbalance * internal / (4 * 1e9), rtol=1e-5)
    np.testing.assert_allclose(c.link_s, (x_bytes + out_bytes) / 1e9, rtol=1e-6)
    np.testing.assert_allclose(c.energy_j, (nnz * f * 2.0 + internal * 3.0 + (x_bytes + out_bytes) * 10.0) * PJ,
                               rtol=1e-5)
    assert float(c.on_nmp) == 1.0 and float(c.dram_bytes) == 0.0
    assert c.bound == "near-memory"


def test_nmp_stage_needs_nmp_and_aggregation():
    with pytest.raises(ValueError, match="needs hw.nmp"):
        nmp_stage_cost(spmm_stage(10, 20, 4, 32.0, 32.0), HardwareSpec(**HOST))
    with pytest.raises(ValueError, match="aggregation"):
        nmp_stage_cost(gemm_stage(10, 20, 4, 32.0, 32.0, 32.0), spec())


def layer():
    return Workload((hwmodel.message_passing_layer("l0", 1000, 50_000, 64, 64, 32.0, 32.0, 32.0),))


def test_mapping_follows_the_cheaper_unit():
    fast_nmp = spec(internal_bw_bytes_per_s=1e12, host_link_bw_bytes_per_s=1e12, fp32_macs_per_s=1e12)
    slow_link = spec(host_link_bw_bytes_per_s=1e3)
    assert float(estimate(layer(), fast_nmp).on_nmp["l0"]) == 1.0
    assert float(estimate(layer(), slow_link).on_nmp["l0"]) == 0.0
    assert float(estimate(layer(), fast_nmp, allow_nmp=False).on_nmp["l0"]) == 0.0
    # the chosen mapping is never slower than the host-only one
    assert float(estimate(layer(), fast_nmp).latency_s) < float(estimate(layer(), fast_nmp, allow_nmp=False).latency_s)


def test_overlap_is_smooth_max_of_units():
    hw = spec(internal_bw_bytes_per_s=1e12, host_link_bw_bytes_per_s=1e12, fp32_macs_per_s=1e12)
    seq = estimate(layer(), hw, overlap_units=False)
    ovl = estimate(layer(), hw, overlap_units=True)
    st = seq.stages
    host = float(st["l0/gemm"].latency_s)
    near = float(st["l0/spmm"].latency_s)
    elem = float(st["l0/elementwise"].latency_s)
    np.testing.assert_allclose(float(seq.latency_s), host + near + elem, rtol=1e-5)
    np.testing.assert_allclose(float(ovl.latency_s), float(smooth_max(jnp.float32(host), jnp.float32(near))) + elem,
                               rtol=1e-5)
    assert float(ovl.latency_s) < float(seq.latency_s)


def test_bytes_by_level_add_up():
    rep = estimate(layer(), spec(internal_bw_bytes_per_s=1e12, host_link_bw_bytes_per_s=1e12))
    assert set(rep.bytes_by_level) == {"dram", "onchip", "nmp", "link"}
    np.testing.assert_allclose(rep.bytes_by_level["dram"], rep.dram_bytes, rtol=1e-6)
    assert float(rep.bytes_by_level["nmp"]) > 0 and float(rep.bytes_by_level["link"]) > 0


def test_uniform_profile_reproduces_capacity_model():
    prof = locality.LocalityProfile.uniform(1000.0)
    sd = locality.stack_distance_rows(prof, 1.0)
    for c in (50.0, 250.0, 600.0):
        assert abs(float(locality.hit_rate(sd, jnp.float32(c))) - c / 1000.0) < 0.02


def banded(n, width):
    s, r = [], []
    for i in range(n):
        for d in range(1, width + 1):
            if i + d < n:
                s += [i, i + d]
                r += [i + d, i]
    return np.array(s), np.array(r)


def test_measured_locality_rewards_reordering():
    n = 2000
    s, r = banded(n, 3)
    perm = np.random.default_rng(0).permutation(n)
    good = locality.measure(s, r, n)
    shuffled = locality.measure(perm[s], perm[r], n)
    hit = lambda p, c: float(locality.hit_rate(locality.stack_distance_rows(p, 1.0), jnp.float32(c)))
    assert hit(good, 64) > 0.9  # a band of width 3 re-uses rows within a few rows
    assert hit(shuffled, 64) < 0.2  # the same graph with ids shuffled does not
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    a = csr_matrix((np.ones(s.size), (perm[r], perm[s])), shape=(n, n))
    rcm = reverse_cuthill_mckee(a, symmetric_mode=True)
    inv = np.empty(n, int)
    inv[rcm] = np.arange(n)
    assert hit(locality.measure(inv[perm[s]], inv[perm[r]], n), 64) > 0.9  # RCM recovers the band
    # fewer kept edges -> shorter reuse times -> more hits; more capacity -> more hits
    sd_full, sd_half = (locality.stack_distance_rows(shuffled, a_) for a_ in (1.0, 0.5))
    assert float(locality.hit_rate(sd_half, jnp.float32(200))) > float(locality.hit_rate(sd_full, jnp.float32(200)))
    caps = jnp.linspace(1, 3000, 50)
    hits = jax.vmap(lambda c: locality.hit_rate(sd_full, c))(caps)
    assert bool(jnp.all(jnp.diff(hits) >= 0))


def test_locality_flows_into_the_cost_and_its_gradient():
    n = 4096
    s, r = banded(n, 8)
    prof = locality.measure(s, r, n)
    hw = HardwareSpec(**{**HOST, "onchip_buffer_bytes": 8 * 1024})
    f = lambda buf: stage_cost(spmm_stage(n, s.size + n, 64, 32.0, 32.0, prof), hw.replace(onchip_buffer_bytes=buf)).dram_bytes
    uni = stage_cost(spmm_stage(n, s.size + n, 64, 32.0, 32.0), hw).dram_bytes
    assert float(f(8.0 * 1024)) < float(uni)  # a banded graph re-uses what a uniform one cannot
    assert float(jax.grad(f)(8.0 * 1024)) <= 0.0  # a larger buffer never adds traffic


def test_bsr_stage_counts_and_runs_on_the_matrix_engine():
    st = hwmodel.bsr_spmm_stage(256, 40, 16, 64, 16.0, 16.0)
    assert float(st.macs) == 40 * 16 * 16 * 64 and st.kind == "bsr"
    fast_matrix = HardwareSpec(**{**HOST, "matrix_bf16_macs_per_s": 1e12, "dram_bw_bytes_per_s": 1e15})
    c = stage_cost(st, fast_matrix)
    np.testing.assert_allclose(c.compute_s, 40 * 16 * 16 * 64 / 1e12, rtol=1e-6)
    assert st.is_aggregation


def test_attention_stage_counts():
    sddmm, softmax, spmm = hwmodel.attention_stages(100, 1000, 8, 8, 32.0, 32.0)
    assert float(sddmm.macs) == 1000 * 8 * 2 and float(softmax.macs) == 1000 * 8 * 5
    assert float(spmm.macs) == 1000 * 64
    assert [s.kind for s in (sddmm, softmax, spmm)] == ["sddmm", "softmax", "spmm"]


def test_segment_spmm_message_buffer_spills_only_when_it_does_not_fit():
    spmm, msg = hwmodel.segment_spmm_stages(100, 1000, 8, 32.0, 32.0)
    assert float(msg.macs) == 2 * 1000 * 8 and float(msg.reuse_bytes) == 2 * 1000 * 8 * 4  # a store + a load each
    fits = HardwareSpec(**{**HOST, "onchip_buffer_bytes": 1e6})
    spills = HardwareSpec(**{**HOST, "onchip_buffer_bytes": 8e3})
    assert float(stage_cost(msg, fits).dram_bytes) == 0.0
    np.testing.assert_allclose(stage_cost(msg, spills).dram_bytes, 2 * 32e3 * (1 - 8e3 / 32e3), rtol=1e-6)
    np.testing.assert_allclose(spmm.macs, spmm_stage(100, 1000, 8, 32.0, 32.0).macs)


@pytest.mark.parametrize("name", presets.names())
def test_every_preset_builds_costs_and_cites_sources(name):
    hw = presets.get(name)
    doc = inspect.getdoc(getattr(presets, name.replace("-", "_")))
    assert "Source" in doc or "measured" in doc
    rep = estimate(layer(), hw)
    assert np.isfinite(float(rep.latency_s)) and float(rep.energy_j) > 0


def test_near_memory_presets():
    assert {"gnnear", "upmem", "hbm-pim"} <= set(presets.names())
    for name in ("gnnear", "upmem", "hbm-pim"):
        assert presets.get(name).nmp is not None
    for name in ("h100", "a100", "cpu", "hygcn"):
        assert presets.get(name).nmp is None


@pytest.mark.parametrize("field,value,match", [
    ("units", 0.0, "units"), ("host_link_bw_bytes_per_s", -1.0, "host_link_bw"), ("buffer_bytes", float("nan"), "buffer"),
])
def test_invalid_nmp_spec(field, value, match):
    with pytest.raises(ValueError, match=f"NearMemorySpec.{match}"):
        NearMemorySpec(**{**NMP, field: value})


def test_efficiency_and_overhead_ranges():
    with pytest.raises(ValueError, match=r"matrix_efficiency: must be finite and in \(0, 1\]"):
        HardwareSpec(**HOST, matrix_efficiency=1.5)
    with pytest.raises(ValueError, match="stage_overhead_s: must be finite and >= 0"):
        HardwareSpec(**HOST, stage_overhead_s=-1e-6)
    hw = HardwareSpec(**HOST, stage_overhead_s=1e-3)
    base = HardwareSpec(**HOST)
    st = gemm_stage(10, 10, 10, 32.0, 32.0, 32.0)
    np.testing.assert_allclose(stage_cost(st, hw).latency_s - stage_cost(st, base).latency_s, 1e-3, rtol=1e-4)


def test_onchip_bandwidth_is_a_roof():
    st = gemm_stage(1000, 1000, 1000, 32.0, 32.0, 32.0)
    slow = HardwareSpec(**{**HOST, "matrix_fp32_macs_per_s": 1e15, "dram_bw_bytes_per_s": 1e15},
                        onchip_bw_bytes_per_s=1e6)
    c = stage_cost(st, slow)
    assert c.bound == "on-chip"
    np.testing.assert_allclose(c.onchip_s, float(c.onchip_bytes) / 1e6, rtol=1e-6)


def test_near_memory_units_add_peak_power():
    assert float(peak_power_w(presets.get("gnnear"))) > float(peak_power_w(presets.get("hygcn")))


def test_bench_cost_small():
    from codesign.bench import bench_cost
    r = bench_cost(n_points=64, hw_name="upmem", reps=1)
    assert r["finite"] and r["points"] == 64 and r["median_s"] > 0


def test_repeated_stage_kinds_in_a_layer_all_count():
    g = gemm_stage(100, 100, 100, 32.0, 32.0, 32.0)
    e = hwmodel.elementwise_stage(100, 100, 32.0)
    from codesign.hwmodel import LayerWorkload
    two = Workload((LayerWorkload("l", (g, g), (g, g), (e, e)),))
    one = Workload((LayerWorkload("l", (g,), (g,), (e,)),))
    r2, r1 = estimate(two, HardwareSpec(**HOST)), estimate(one, HardwareSpec(**HOST))
    assert set(r2.stages) == {"l/gemm", "l/gemm1", "l/elementwise", "l/elementwise1"}
    np.testing.assert_allclose(r2.energy_j, 2 * r1.energy_j, rtol=1e-6)
    np.testing.assert_allclose(r2.latency_s, 2 * r1.latency_s, rtol=1e-6)


def test_fp32_only_datapath_spends_fp32_energy_at_every_width():
    from codesign.hwmodel import mac_energy_pj, vector_macs_per_s
    hy, h100 = presets.get("hygcn"), presets.get("h100")
    assert hy.fp32_only and not h100.fp32_only
    for b in (2.0, 4.0, 8.0, 16.0, 32.0):
        assert float(mac_energy_pj(hy, b)) == pytest.approx(hy.mac_energy_fp32_pj)
        assert float(vector_macs_per_s(hy, b)) == hy.vector_fp32_macs_per_s
    assert float(mac_energy_pj(h100, 8.0)) < float(mac_energy_pj(h100, 32.0))
    st = gemm_stage(1000, 1000, 100, 8.0, 8.0, 8.0)
    st32 = gemm_stage(1000, 1000, 100, 32.0, 32.0, 32.0)
    # 8-bit operands: less traffic, same compute energy on HyGCN
    assert float(stage_cost(st, hy).compute_energy_j) == pytest.approx(float(stage_cost(st32, hy).compute_energy_j))
    assert float(stage_cost(st, hy).dram_bytes) < float(stage_cost(st32, hy).dram_bytes)
    assert jax.tree_util.tree_structure(hy) != jax.tree_util.tree_structure(h100)  # a static field


def test_gemv_runs_in_place_only_on_units_that_run_gemvs():
    """A GEMV (`gemv_stage`) on HBM-PIM's PCUs streams its matrix from the banks (internal bytes = the
    matrix) and sends the vector and result once per broadcast group; on units that run no GEMVs
    (gnnear's NMEs, hbm-pim without ``gemv_broadcast_units``) it stays on the host; no GNN stage is a
    GEMV, so a GCN's cost on hbm-pim does not depend on the field."""
    from codesign.hwmodel import gemv_stage, LayerWorkload, Workload, nmp_stage_cost
    from codesign.hwmodel.estimate import runs_on_nmp
    from codesign.models.gcn import GCN
    from flax import nnx
    pim = presets.get("hbm-pim")
    plain = pim.replace(nmp=pim.nmp.replace(gemv_broadcast_units=None))
    st = gemv_stage(1024, 4096, 16, 16, 16)
    assert st.gemv and float(st.working_set_bytes) == 1024 * 4096 * 2 and float(st.link_bytes) == (1024 + 4096) * 2
    assert runs_on_nmp(st, pim) and not runs_on_nmp(st, plain) and not runs_on_nmp(st, presets.get("gnnear"))
    c = nmp_stage_cost(st, pim)
    assert float(c.nmp_bytes) == pytest.approx(1024 * 4096 * 2)
    assert float(c.link_bytes) == pytest.approx((1024 + 4096) * 2 * pim.nmp.units / 8.0)
    assert float(c.nmp_s) == pytest.approx(1024 * 4096 * 2 / (pim.nmp.units * pim.nmp.internal_bw_bytes_per_s), rel=1e-5)
    with pytest.raises(ValueError, match="nmp_stage_cost"):
        nmp_stage_cost(st, plain)
    wl = Workload((LayerWorkload("gemv", (st,), (st,), ()),))
    on, off = estimate(wl, pim, overlap_units=False), estimate(wl, plain, overlap_units=False)
    assert float(on.on_nmp["gemv"]) == 1.0 and float(off.on_nmp["gemv"]) == 0.0
    # bounded by the bandwidth ratio: all PCUs' internal bandwidth over the host's
    ceiling = pim.nmp.units * pim.nmp.internal_bw_bytes_per_s / pim.dram_bw_bytes_per_s
    assert 3.0 < float(off.latency_s / on.latency_s) <= ceiling
    gcn = GCN(1433, 16, 7, rngs=nnx.Rngs(0)).workload(2708, 10556)
    a, b = estimate(gcn, pim), estimate(gcn, plain)
    assert float(a.latency_s) == float(b.latency_s) and float(a.energy_j) == float(b.energy_j)
    with pytest.raises(TypeError, match="Stage.gemv"):
        dataclasses.replace(st, gemv="yes")
    with pytest.raises(ValueError, match="gemv_broadcast_units"):
        pim.nmp.replace(gemv_broadcast_units=2 * pim.nmp.units)
