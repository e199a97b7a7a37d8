"""The papers' headline comparisons (experiments/reproduce_published.py) and the preset structure
they rest on: hosts as presets, HyGCN's aggregate-first dataflow and interval-shard reuse, the
UPMEM server's native int8 multiply. Cost-model evaluations only."""

import json
from pathlib import Path

import pytest

from experiment_modules import load

from codesign.hwmodel import estimate, presets

ROOT = Path(__file__).resolve().parent.parent


def _module():
    return load("reproduce_published")


def test_published_file_matches_the_code_and_marks_the_band():
    """results/hwmodel_published.json is what the presets give now (no stale numbers); a row is
    marked within the band iff its model ratio is within 35 % of the paper's; rows in the band
    are asserted in it, the others only reported."""
    mod = _module()
    stored = json.loads(mod.OUT.read_text())["rows"]
    fresh = mod.rows()
    assert [(r["source"], r["comparison"]) for r in stored] == [(r["source"], r["comparison"]) for r in fresh]
    for s, f in zip(stored, fresh):
        for k in ("source", "comparison", "workload", "paper", "model", "ratio"):
            assert k in s
        assert s["paper"] == f["paper"] and s["workload"] == f["workload"]
        assert s["model"] == pytest.approx(f["model"], rel=1e-3), s["comparison"]
        assert s["per_workload"] == pytest.approx(f["per_workload"], rel=1e-3)
        assert s["within_35pct"] == (abs(f["model"] / f["paper"] - 1.0) <= mod.BAND)
        assert s["role"] == "prediction" and s["uses_informed_parameter"] == mod.INFORMED.get(s["baseline"], [])
        for name in s["uses_informed_parameter"]:
            assert name in presets.ASSUMPTIONS
        if s["within_35pct"]:
            assert abs(f["ratio"] - 1.0) <= mod.BAND


def test_host_of_names_each_near_memory_presets_host():
    assert presets.host_of("upmem").name == "upmem-host"
    assert presets.host_of("hbm-pim").name == "mi100"
    assert presets.host_of("gnnear").name == "gnnear-host"
    for name in presets.names():
        hw = presets.get(name)
        if hw.nmp is not None:
            host = presets.host_of(name)
            assert host.nmp is None and host.dram_bw_bytes_per_s == hw.dram_bw_bytes_per_s
    with pytest.raises(ValueError, match="no near-memory units"):
        presets.host_of("hygcn")
    with pytest.raises(ValueError, match="unknown hardware preset"):
        presets.host_of("tpu")


def test_hygcn_runs_aggregate_first_with_interval_reuse_and_its_pipeline():
    mod = _module()
    w = mod.build("gcn", "reddit", False)
    hy = presets.get("hygcn")
    r = estimate(w, hy)
    assert all(float(v) == 1.0 for v in r.aggregate_first.values())
    plain = hy.replace(interval_buffer_bytes=None)
    assert float(r.dram_bytes) < float(estimate(w, plain).dram_bytes)
    # the interval-shard bound never adds traffic: a tiny buffer falls back to the row-buffer model
    tiny = hy.replace(interval_buffer_bytes=1.0)
    assert float(estimate(w, tiny).dram_bytes) <= float(estimate(w, plain).dram_bytes) * (1 + 1e-6)


def test_upmem_server_native_int8_and_v100_software_factors():
    up = presets.get("upmem")
    assert up.nmp.units == 2556 and up.name == "upmem" and presets.host_of("upmem").cores == 16
    assert up.nmp.int_macs_per_s == pytest.approx(1 / (2 / 58.56e6))
    assert up.nmp.int_macs_per_s > 5 * up.nmp.fp32_macs_per_s
    v = presets.get("v100")
    fit = presets.load_gpu_fit()
    assert v.stage_overhead_s == fit["stage_overhead_s"] and v.dram_efficiency == fit["dram_efficiency"]
    assert v.row_gather_overhead_s > fit["row_gather_overhead_s"]  # slower SMs than the H100 it was fitted on
    pim = presets.get("hbm-pim")
    assert pim.nmp.units == 4 * 128 and pim.nmp.host_link_bw_bytes_per_s == presets.get("mi100").dram_bw_bytes_per_s


def test_docs_tables_are_the_stored_result():
    """docs/hwmodel.md holds the tables `markdown` renders from results/hwmodel_published.json."""
    mod = _module()
    stored = json.loads((ROOT / "results" / "hwmodel_published.json").read_text())
    assert mod.markdown(stored) in (ROOT / "docs" / "hwmodel.md").read_text(), \
        "docs/hwmodel.md: regenerate the published-comparison tables with reproduce_published.markdown"
    assert [h["speedup_over_host"] for h in stored["hosts"]] == [h["speedup_over_host"] for h in mod.host_rows()]


def test_v100_baseline_check_is_recomputed_and_published_times_are_the_baseline():
    """The v100 preset's error against GNNear's published V100 DGL times is what the code gives
    now, and the 'published DGL times' row divides those times (not the v100 preset) by gnnear."""
    mod = _module()
    stored = json.loads(mod.OUT.read_text())
    fresh = mod.baseline_check()
    assert stored["baseline_check"]["n"] == fresh["n"] == len(mod.V100_DGL_S_PER_EPOCH) == 15
    assert stored["baseline_check"]["mape"] == pytest.approx(fresh["mape"], rel=1e-3)
    row = next(r for r in stored["rows"] if r["baseline"] == "v100-published")
    m, d = "gcn", "reddit"
    gn = float(estimate(mod.build(m, d, True), presets.get("gnnear")).latency_s)
    assert row["per_workload"][f"{m}/{d}"] == pytest.approx(mod.V100_DGL_S_PER_EPOCH[(m, d)] / gn, rel=1e-3)
    assert row["n_workloads"] == 15 and "gin/ogbn-products" not in row["per_workload"]


def test_v100_pyg_is_v100_with_the_launch_cost_set_from_the_published_pyg_time():
    """`v100-pyg` differs from `v100` only in its per-launch cost, and that cost is the one value that
    prices PyG's GCN / Cora training epoch at its published 0.478 s / 200 (recomputed here, so the
    constant cannot drift from its source); the same table's Citeseer / Pubmed epochs are stored as
    predictions, the Cora one as the informed parameter."""
    mod = _module()
    v, p = presets.get("v100"), presets.get("v100-pyg")
    assert p.replace(name="v100", stage_overhead_s=v.stage_overhead_s) == v
    assert p.stage_overhead_s == presets.V100_PYG_LAUNCH_S == presets.ASSUMPTIONS["V100_PYG_LAUNCH_S"][0]
    assert presets.V100_PYG_LAUNCH_S == pytest.approx(mod.pyg_launch_s(), rel=1e-3)
    stored = json.loads(mod.OUT.read_text())["pyg_check"]
    fresh = mod.pyg_check()
    assert stored == fresh
    roles = {k: v["role"] for k, v in fresh["per_task"].items()}
    assert roles == {"gcn/cora": "informed-parameter", "gcn/citeseer": "prediction", "gcn/pubmed": "prediction"}
    assert fresh["per_task"]["gcn/cora"]["modeled_over_published"] == pytest.approx(1.0, abs=2e-3)


def test_pyg_workload_fixes_pygs_order_and_adds_its_message_buffer():
    """GCN runs combine-first, GIN / SAGE aggregate-first whatever is cheaper; each aggregation gets a
    message stage of E x F elements: GCN (edge-weighted) 4 passes over the fp32 buffer and 2 launches,
    GIN 2 passes and 1 launch; training doubles it (autograd moves the buffer back)."""
    from codesign.hwmodel import workload as wlm
    mod = _module()
    n, nnz, f = 100, 1000, 8
    spmm, gemm = wlm.spmm_stage(n, nnz, f, 32.0, 32.0), wlm.gemm_stage(n, 16, f, 32.0, 32.0, 32.0)
    layer = wlm.LayerWorkload("l", (wlm.spmm_stage(n, nnz, 16, 32.0, 32.0), gemm), (gemm, spmm), ())
    gcn = mod.pyg_workload(wlm.Workload((layer,)), "gcn").layers[0]
    assert gcn.aggregate_first == gcn.combine_first and gcn.combine_first[:2] == (gemm, spmm)
    msg = gcn.combine_first[2]
    assert msg.kind == "elementwise" and float(msg.reuse_bytes) == 4 * nnz * f * 4 and float(msg.launches) == 2
    assert float(msg.working_set_bytes) == nnz * f * 4 and float(msg.macs) == 3 * nnz * f
    gin = mod.pyg_workload(wlm.Workload((layer,)), "gin").layers[0]
    assert gin.combine_first[0].kind == "spmm" and float(gin.combine_first[0].macs) == nnz * 16
    assert float(gin.combine_first[1].reuse_bytes) == 2 * nnz * 16 * 4 and float(gin.combine_first[1].launches) == 1
    hidden = wlm.Workload((wlm.LayerWorkload("layer1", (gemm, spmm), (gemm, spmm), ()),))
    tmsg = mod.pyg_workload(wlm.autograd_training(hidden, False), "gcn").layers[0].combine_first[2]
    assert float(tmsg.reuse_bytes) == 2 * 4 * nnz * f * 4 and float(tmsg.launches) == 4
    assert isinstance(tmsg, wlm.Stage)
    # the Reddit rows' buffers exceed a V100's memory (stored so the reader sees it)
    row = next(r for r in json.loads(mod.OUT.read_text())["rows"] if r["baseline"] == "v100-pyg")
    assert row["baseline_message_buffer_gb"]["gcn/reddit"] > 32 > row["baseline_message_buffer_gb"]["gcn/pubmed"]


def test_hbm_pim_gemv_ceiling_is_the_bandwidth_ratio_and_stored():
    """512 PCUs x 4 x 307 GB/s / 128 over the MI100's 1.2288 TB/s = 4.0x, as the JSON's note says."""
    mod = _module()
    assert mod.hbm_pim_gemv_ceiling() == pytest.approx(512 * 4 * 307e9 / 128 / 1.2288e12)
    note = json.loads(mod.OUT.read_text())["not_reproduced"]["HBM-PIM (Kim et al., IEEE Micro 2022)"]
    assert f"{mod.hbm_pim_gemv_ceiling():.2f}x" in note


def test_autograd_training_counts_what_reverse_mode_runs_on_a_fixed_graph():
    """`hwmodel.autograd_training`: the first layer forms no input gradient (aggregate-first: one
    aggregation, GEMM x2), later layers add dH = A^T dZ (x2) and dX (GEMM x3), GAT's learned edge
    weights one more aggregation; SDDMM / softmax / elementwise x2; a training workload is refused."""
    from flax import nnx

    from codesign.hwmodel import autograd_training
    from codesign.models.gat import GAT
    from codesign.models.gcn import GCN
    inf = GCN(64, 32, 5, rngs=nnx.Rngs(0)).workload(1000, 8000)
    tr = autograd_training(inf, learned_edge_weights=False)
    assert tr.training
    macs = lambda stages: [float(s.macs) for s in stages]
    (l0, l1), (i0, i1) = tr.layers, inf.layers
    assert macs(l0.aggregate_first) == pytest.approx([1.0 * macs(i0.aggregate_first)[0],
                                                      2.0 * macs(i0.aggregate_first)[1]])
    assert macs(l0.combine_first) == pytest.approx([2.0 * macs(i0.combine_first)[0], 2.0 * macs(i0.combine_first)[1]])
    assert macs(l1.aggregate_first) == pytest.approx([2.0 * macs(i1.aggregate_first)[0], 3.0 * macs(i1.aggregate_first)[1]])
    assert macs(l1.elementwise) == pytest.approx([2.0 * m for m in macs(i1.elementwise)])
    gat = GAT(64, 32, 5, heads=1, rngs=nnx.Rngs(0)).workload(1000, 8000)
    g1 = autograd_training(gat, learned_edge_weights=True).layers[1].combine_first
    for s, si in zip(g1, gat.layers[1].combine_first):
        want = {"gemm": 3.0, "spmm": 3.0, "sddmm": 2.0, "softmax": 2.0}[s.kind]
        assert float(s.macs) == pytest.approx(want * float(si.macs)), s.kind
    with pytest.raises(ValueError, match="autograd_training"):
        autograd_training(GCN(64, 32, 5, rngs=nnx.Rngs(0)).workload(1000, 8000, training=True), False)


def test_gnnear_diagnosis_file_matches_the_code():
    """results/gnnear_diagnosis.json is what experiments/gnnear_diagnosis.py gives now: the artifact's
    closed form on uniform graphs, our per-workload gnnear times and the summary geomeans."""
    mod = load("gnnear_diagnosis")
    stored = json.loads(mod.OUT.read_text())
    rp = _module()
    assert set(stored["per_workload"]) == {f"{m}/{d}" for m, d in rp.GNNEAR_WORKLOADS}
    for key in ("gcn/reddit", "gat/ogbn-products"):
        m, d = key.split("/")
        au = mod.artifact_uniform(d, m)
        for k in ("total_s", "nme_s", "cae_memory_s"):
            assert stored["per_workload"][key]["artifact_uniform"][k] == pytest.approx(au[k], rel=1e-4), k
        fresh = float(estimate(rp.build(m, d, True), presets.get("gnnear")).latency_s)
        assert stored["per_workload"][key]["ours"]["latency_s"] == pytest.approx(fresh, rel=1e-3)
    # the artifact's own reference times reproduce the paper's 2.5x over the published V100 times
    assert stored["summary"]["speedup_vs_published_v100_geomean"]["artifact_reference"] == pytest.approx(2.5, rel=0.1)
