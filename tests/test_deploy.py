"""`codesign.deploy`: the compact program of a hardened GCN gives the hardened model's logits with
the pruned features, channels and edges physically removed and the weights stored as integers;
checkpoints (`codesign.checkpoint`) restore only what was saved, refusing corrupt, truncated or edited
files in one line."""

from __future__ import annotations

import os
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

import scipy.sparse as sp

from codesign import hwmodel
from codesign.deploy import QuantizedMatrix, deploy, dense_program, measure, pick_feature_store
from codesign.graph import Graph, feature_column_nnz
from codesign.models import GAT, GCN, GraphSAGE
from codesign.train import adjacency


def _graph(n=40, f=12, c=3, e=120, seed=0):
    rng = np.random.default_rng(seed)
    pairs = np.unique(rng.integers(0, n, (e, 2)), axis=0)  # distinct edges
    s, r = pairs[:, 0], pairs[:, 1]
    keep = s != r
    x = rng.random((n, f)).astype(np.float32) * (rng.random((n, f)) < 0.4)
    return Graph(senders=s[keep], receivers=r[keep], x=x, y=rng.integers(0, c, n), train_mask=np.ones(n, bool),
                 val_mask=np.zeros(n, bool), test_mask=np.zeros(n, bool), n_nodes=n)


def _hardened_gcn(g, bits, seed=0, hidden=8, signed_input=False):
    m = GCN(g.n_features, hidden, int(np.asarray(g.y).max()) + 1, n_edges=g.n_edges, feature_mask=True,
            channel_mask=True, bits=bits, signed_input=signed_input, rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    for gate, n in ((m.feature_mask.gate, g.n_features), (m.channel_mask.gate, hidden), (m.edge_mask.gate, g.n_edges)):
        # a third of the gates closed (exact zeros), the rest open at values in (0, 1]
        closed = (rng.random(n) < 1 / 3) | (np.arange(n) == 0)  # at least one closed gate per mask
        gate.log_alpha[...] = jnp.asarray(np.where(closed, -10.0, rng.uniform(-1.5, 3.0, n)), jnp.float32)
    m.eval()
    return m


@pytest.mark.parametrize("bits", [None, 8, 4])
def test_compact_logits_equal_the_hardened_model(bits):
    g = _graph()
    m = _hardened_gcn(g, bits)
    ref = np.asarray(m(g.x, adjacency(g)))
    c = deploy(m, g)
    # physically smaller: exactly the open gates remain
    assert c.x.shape == (g.n_nodes, int(np.asarray(m.feature_mask.hard_mask()).sum()))
    assert c.w0.codes.shape == (c.x.shape[1], int(np.asarray(m.channel_mask.hard_mask()).sum()))
    assert c.adj.nnz == int(np.asarray(m.edge_mask.hard_mask()).sum()) + g.n_nodes
    assert c.kept["edges"] < g.n_edges and c.kept["features"] < g.n_features and c.kept["channels"] < 8
    # equal up to float32 summation order (the removed terms are exact zeros)
    np.testing.assert_allclose(c(), ref, rtol=1e-5, atol=1e-6 * float(np.abs(ref).max()))


@pytest.mark.parametrize("bits", [None, 8])
def test_csr_feature_store_gives_the_same_logits(bits):
    g = _graph()
    m = _hardened_gcn(g, bits)
    dense_store, csr_store = deploy(m, g, "dense"), deploy(m, g, "csr")
    assert dense_store.feature_store == "dense" and csr_store.feature_store == "csr"
    assert sp.issparse(csr_store.x) and csr_store.x.shape == dense_store.x.shape
    np.testing.assert_array_equal(csr_store.x.toarray(), dense_store.x)
    np.testing.assert_allclose(csr_store(), dense_store(), rtol=1e-5, atol=1e-6 * float(np.abs(dense_store()).max()))
    # the CSR store holds only the nonzeros: indptr + indices + values
    x = csr_store.x
    assert csr_store.graph_bytes - dense_store.graph_bytes == x.indptr.nbytes + x.indices.nbytes + x.data.nbytes \
        - dense_store.x.nbytes
    ref = dense_program(m, g, "csr")
    assert ref.feature_store == "csr"
    np.testing.assert_allclose(ref(), dense_program(m, g, "dense")(), rtol=1e-5, atol=1e-6)


def test_pick_feature_store_keeps_fully_dense_features_dense_without_timing(monkeypatch):
    """CSR of a matrix with no zeros is twice its bytes and does the same multiply-adds, so "auto"
    keeps it dense even when the timer would say CSR is faster (a noisy few-microsecond product);
    a 2 %-dense matrix is still timed and may go either way."""
    import codesign.deploy as deploy_mod
    def clock():  # the CSR products (timed first) take 1 s each, the dense ones 2 s
        t = 0.0
        for i in range(10**6):
            yield t
            t += 1.0 if i < 12 else (2.0 if i % 2 == 0 else 0.0)
    ticks = clock()
    monkeypatch.setattr(deploy_mod.time, "perf_counter", lambda: next(ticks))
    x = np.random.default_rng(0).standard_normal((40, 16)).astype(np.float32)
    w = np.ones((16, 8), np.float32)
    assert not sp.issparse(pick_feature_store(x, w, "auto"))
    sparse_x = np.where(np.random.default_rng(1).random((40, 16)) < 0.02, 1.0, 0.0).astype(np.float32)
    out = pick_feature_store(sparse_x, w, "auto")
    np.testing.assert_array_equal(out.toarray() if sp.issparse(out) else out, sparse_x)


def test_pick_feature_store_returns_one_of_the_two_stores_and_refuses_unknown():
    x = np.eye(50, dtype=np.float32)
    w = np.ones((50, 4), np.float32)
    for store in ("auto", "dense", "csr"):
        out = pick_feature_store(x, w, store)
        np.testing.assert_array_equal(out.toarray() if sp.issparse(out) else out, x)
    assert sp.issparse(pick_feature_store(x, w, "csr")) and not sp.issparse(pick_feature_store(x, w, "dense"))
    with pytest.raises(ValueError, match="feature_store: must be one of"):
        pick_feature_store(x, w, "bsr")
    g = _graph()
    with pytest.raises(ValueError, match="feature_store: must be one of"):
        deploy(_hardened_gcn(g, None), g, "coo")


def test_sparse_input_workload_counts_the_kept_columns_nonzeros():
    g = _graph()
    m = _hardened_gcn(g, None)
    col = feature_column_nnz(g.x)
    assert col.shape == (g.n_features,) and col.sum() == np.count_nonzero(np.asarray(g.x))
    np.testing.assert_array_equal(feature_column_nnz(sp.csr_matrix(np.asarray(g.x))), col)
    keep = np.asarray(m.feature_mask.hard_mask())
    wl = m.workload(g.n_nodes, g.n_edges, hard=True, feature_nnz=col)
    first = wl.layers[0].combine_first[0]
    hidden_kept = int(np.asarray(m.channel_mask.hard_mask()).sum())
    assert first.kind == "spmm"
    assert float(first.macs) == pytest.approx(float(col[keep].sum()) * hidden_kept)
    assert float(first.gathered_rows) == pytest.approx(float(col[keep].sum()))
    # one schedule: combine first (no sparse x sparse product), in both orders
    assert wl.layers[0].aggregate_first == wl.layers[0].combine_first
    # expected (training) counts weight each column by its gate's P(z > 0)
    p = np.asarray(m.feature_mask.keep_probability())
    wl_exp = m.workload(g.n_nodes, g.n_edges, feature_nnz=col)
    assert float(wl_exp.layers[0].combine_first[0].gathered_rows) == pytest.approx(float((p * col).sum()), rel=1e-5)
    # a what-if feature density keeps that fraction of all nonzeros
    wl_what = m.workload(g.n_nodes, g.n_edges, hard=True, feature_nnz=col, densities={"feature": 0.5})
    assert float(wl_what.layers[0].combine_first[0].gathered_rows) == pytest.approx(0.5 * float(col.sum()))
    with pytest.raises(ValueError, match=r"GCN.workload\(feature_nnz\): expected shape \(12,\)"):
        m.workload(g.n_nodes, g.n_edges, feature_nnz=np.ones(3))


def test_csr_gemm_stage_hand_computed():
    # A[10, 6] with 7 nonzeros @ W[6, 4], fp32: 7 gathered W rows of 16 bytes
    s = hwmodel.csr_gemm_stage(10, 6, 4, 7, 32, 32, 32)
    assert s.kind == "spmm" and float(s.macs) == 28.0 and float(s.gathered_rows) == 7.0
    structure = 7 * (4 + 4) + 11 * 4
    assert float(s.compulsory_bytes) == structure + 6 * 4 * 4 + 10 * 4 * 4
    assert float(s.reuse_bytes) == (7 - 6) * 4 * 4 and float(s.working_set_bytes) == 6 * 4 * 4
    with pytest.raises(ValueError, match=r"csr_gemm_stage\(nnz\)"):
        hwmodel.csr_gemm_stage(10, 6, 4, -1, 32, 32, 32)
    with pytest.raises(ValueError, match=r"csr_gemm_stage\(a_bits\)"):
        hwmodel.csr_gemm_stage(10, 6, 4, 7, 0, 32, 32)


@pytest.mark.parametrize("bits", [8, 4])
def test_weights_are_stored_as_integer_codes_on_the_full_tensors_grid(bits):
    g = _graph()
    m = _hardened_gcn(g, bits)
    c = deploy(m, g)
    assert c.w0.codes.dtype == np.int8 and c.w0.bits == bits
    hi = 2 ** (bits - 1) - 1
    assert np.abs(c.w0.codes).max() <= hi
    # the scale is the full weight's max / qmax (the hardened model's grid), not the kept part's
    full = np.asarray(m.conv1.kernel[...])
    assert c.w0.scale == pytest.approx(float(np.abs(full).max()) / hi, rel=1e-6)
    # packed bytes: bits per value, plus the float32 scale
    assert c.w0.stored_bytes == -(-c.w0.codes.size * bits // 8) + 4
    dense = dense_program(m, g)
    assert c.model_bytes < dense.model_bytes


def test_dense_program_is_the_fp32_model_without_masks():
    g = _graph()
    m = GCN(g.n_features, 8, 3, rngs=nnx.Rngs(1))
    m.eval()
    np.testing.assert_allclose(dense_program(m, g)(), np.asarray(m(g.x, adjacency(g))), rtol=1e-5, atol=1e-6)


def test_measure_reports_both_programs():
    g = _graph()
    m = _hardened_gcn(g, 8)
    r = measure(deploy(m, g), dense_program(m, g), reps=3, warmup=1)
    for side in ("measured", "dense_measured"):
        assert set(r[side]) == {"latency_s", "latency_spread_s", "peak_bytes", "model_bytes", "graph_bytes"}
        lo, hi = r[side]["latency_spread_s"]
        assert 0 < lo <= r[side]["latency_s"] <= hi and r[side]["peak_bytes"] > 0
    assert r["speedup"] > 0 and r["speedup_spread"][0] <= r["speedup_spread"][1]
    from codesign.bench import MALLOC_ENV
    assert r["malloc_env"] == {k: os.environ.get(k) for k in MALLOC_ENV}  # the allocator setting it ran under
    with pytest.raises(ValueError, match="measure: reps must be >= 1"):
        measure(deploy(m, g), dense_program(m, g), reps=0)


def test_unsupported_models_and_widths_are_refused():
    g = _graph()
    from codesign.models import GIN
    with pytest.raises(NotImplementedError, match="only codesign.models.GCN, GraphSAGE and GAT"):
        deploy(GIN(g.n_features, 4, 3, rngs=nnx.Rngs(0)), g)
    with pytest.raises(NotImplementedError, match=r"GAT compiles with the fixed quantizer \(FakeQuant\)"):
        deploy(GAT(g.n_features, 4, 3, heads=2, bits=8, quantizer="lsq", rngs=nnx.Rngs(0)), g)
    with pytest.raises(NotImplementedError, match="GraphSAGE compiles with the mean aggregator only, got aggr='max'"):
        deploy(GraphSAGE(g.n_features, 8, 3, aggr="max", rngs=nnx.Rngs(0)), g)
    with pytest.raises(NotImplementedError, match=r"GraphSAGE compiles with the fixed quantizer \(FakeQuant\)"):
        deploy(GraphSAGE(g.n_features, 8, 3, bits=8, quantizer="lsq", rngs=nnx.Rngs(0)), g)
    with pytest.raises(NotImplementedError, match=r"only the fixed \(FakeQuant\) and learned bit-width"):
        deploy(GCN(g.n_features, 8, 3, bits=8, quantizer="lsq", rngs=nnx.Rngs(0)), g)
    with pytest.raises(ValueError, match=r"graph\.x: the model expects 5 input features, got 12"):
        deploy(GCN(5, 8, 3, rngs=nnx.Rngs(0)), g)


def _learned_gcn(g, quantizer, seed=0, hidden=8):
    """`_hardened_gcn`'s gates with learned bit-widths as the flagship trains them: ranges pinned
    except the input's (`codesign.quant.pin_ranges`), weights and hidden features moved to 3-5 bits."""
    from codesign.quant import LearnedBitQuant, pin_ranges
    from codesign.quant.learned_bits import levels

    deg = np.bincount(np.asarray(g.receivers), minlength=g.n_nodes) + 1
    m = GCN(g.n_features, hidden, int(np.asarray(g.y).max()) + 1, n_edges=g.n_edges, feature_mask=True,
            channel_mask=True, bits=8, quantizer=quantizer, in_degree=deg, rngs=nnx.Rngs(seed))
    pin_ranges(m, skip=[m.conv1.quant_x])
    ref = _hardened_gcn(g, None, seed, hidden)  # the same gates
    for mask in ("feature_mask", "channel_mask", "edge_mask"):
        getattr(m, mask).gate.log_alpha[...] = getattr(ref, mask).gate.log_alpha[...]
    m.eval()
    m(g.x, adjacency(g))  # initialises every quantizer from its data
    for q, b in ((m.conv1.quant_w, 5), (m.conv2.quant_w, 4), (m.conv1.quant_x, 2), (m.conv2.quant_x, 3)):
        assert isinstance(q, LearnedBitQuant)
        q.step[...] = q.qmax[...] / levels(np.float32(b), q.signed)
    return m


@pytest.mark.parametrize("quantizer", ["learned", "a2q"])
def test_learned_bit_widths_deploy_on_the_hardened_grid(quantizer):
    g = _graph()
    m = _learned_gcn(g, quantizer)
    ref = np.asarray(m(g.x, adjacency(g)))
    c = deploy(m, g)
    np.testing.assert_allclose(c(), ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))
    # the weights as integer codes of their learned widths (5 and 4 bits: |code| <= 2^(b-1) - 1)
    assert (c.w0.bits, c.w1.bits) == (5, 4)
    assert np.abs(c.w0.codes).max() <= 15 and np.abs(c.w1.codes).max() <= 7
    # the hidden activation on the frozen grid: per tensor, or one step per node row (A2Q)
    step, rng = c.hidden_grid
    assert step.shape == (() if quantizer == "learned" else (g.n_nodes, 1)) and rng.shape == step.shape
    h = np.maximum(np.asarray(c.adj @ (c.x @ c._w0)) + c._b0, 0) * c._gate
    from codesign.deploy import _quantize_on_grid
    codes = _quantize_on_grid(h, c.hidden_grid) / step
    np.testing.assert_allclose(codes, np.round(codes), atol=1e-3)
    # a quantized program is no wider than the fixed one: same kept counts as the FP32 gates
    assert c.kept == deploy(_hardened_gcn(g, None), g).kept


def test_quantized_matrix_round_trip():
    q = QuantizedMatrix(np.array([[1, -2], [3, 0]], np.int8), 0.5, 8)
    np.testing.assert_array_equal(q.dequantized(), np.array([[0.5, -1.0], [1.5, 0.0]], np.float32))
    assert q.stored_bytes == 4 + 4


def test_checkpoint_round_trip_and_graph_hash(tmp_path):
    from codesign.checkpoint import graph_sha256, load_model, save_model
    from codesign.train import TrainConfig, build_model
    g = _graph()
    cfg = TrainConfig.from_flat(hidden=8, bits=8, feature_mask=True, channel_mask=True, edge_mask=True, epochs=1)
    m = build_model(cfg, g, nnx.Rngs(3))
    m.feature_mask.gate.log_alpha[...] = jnp.linspace(-5.0, 5.0, g.n_features)
    m.eval()
    save_model(tmp_path / "ck", m, cfg, g, "toy")
    restored, cfg2, meta = load_model(tmp_path / "ck", g)
    assert cfg2 == cfg and meta["dataset"] == "toy" and meta["graph_sha256"] == graph_sha256(g)
    np.testing.assert_array_equal(np.asarray(restored(g.x, adjacency(g))), np.asarray(m(g.x, adjacency(g))))
    other = g.replace(x=np.asarray(g.x) + 1.0)
    with pytest.raises(ValueError, match="load_model: graph_sha256 mismatch"):
        load_model(tmp_path / "ck", other)
    with pytest.raises(FileExistsError, match="exists"):
        save_model(tmp_path / "ck", m, cfg, g, "toy")
    with pytest.raises(FileNotFoundError, match="no codesign checkpoint"):
        load_model(tmp_path, g)


def test_cli_train_save_then_deploy(cora, tmp_path, capsys):
    from codesign import cli
    ck = tmp_path / "ck"
    assert cli.main(["train", "--bits", "8", "--feature-mask", "on", "--cost-weight", "3", "--seeds", "1",
                     "--epochs", "3", "--out", str(tmp_path), "--save", str(ck)]) == 0
    capsys.readouterr()
    assert cli.main(["deploy", str(ck / "seed0"), "--reps", "2", "--json"]) == 0
    import json
    out = json.loads(capsys.readouterr().out)
    assert out["measured"]["model_bytes"] < out["dense_measured"]["model_bytes"]
    assert out["modeled_local"]["latency_s"] > 0 and out["speedup"] > 0
    assert cli.main(["train", "--seeds", "1", "--epochs", "2", "--out", str(tmp_path), "--save", str(ck)]) == 2
    assert "argument --save" in capsys.readouterr().err


def test_cli_sweep_measure_adds_measured_fields_and_resumes(cora, tmp_path, capsys):
    import json
    from codesign import cli
    argv = ["sweep", "--measure", "--cost-weights", "3", "--feature-mask", "on", "--seeds", "1", "--epochs", "3",
            "--reps", "2", "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    path = tmp_path / "cora_gcn_h100_measured.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(recs) == 2 and {r["config"]["cost_weight"] for r in recs} == {0.0, 3.0}
    for r in recs:
        assert r["config"]["measured_on"] == "cpu"
        for side in ("measured", "dense_measured"):
            assert r[side]["latency_s"] > 0 and r[side]["peak_bytes"] > 0 and r[side]["model_bytes"] > 0
        assert r["modeled_local"]["latency_s"] > 0 and r["dense_modeled_local"]["energy_j"] > 0
        assert r["max_logit_gap"] < 1e-2  # the compact program computes the hardened model's logits
        assert set(r["preset_host"]) == {"fit", "here", "matches"}
    dense = next(r for r in recs if r["config"]["cost_weight"] == 0.0)
    assert dense["modeled_local"] == dense["dense_modeled_local"]  # the reference is its own dense model
    capsys.readouterr()
    assert cli.main(argv) == 0 and "0 runs to do" in capsys.readouterr().err  # resumed, nothing retrained
    assert cli.main(["sweep", "--measure", "--model", "gin", "--seeds", "1", "--out", str(tmp_path)]) == 2
    assert "--measure: codesign.deploy compiles GCN, GraphSAGE and GAT models only" in capsys.readouterr().err


def test_sparse_features_price_the_loss_and_the_reference_by_column_nonzeros():
    from codesign.train import TrainConfig, build_model, dense_cost, loss_inputs, train, workload_inputs
    g = _graph()
    g = Graph(senders=g.senders, receivers=g.receivers, x=g.x, y=g.y, train_mask=g.train_mask,
              val_mask=np.ones(g.n_nodes, bool), test_mask=np.ones(g.n_nodes, bool), n_nodes=g.n_nodes)
    hw = hwmodel.presets.get("cpu")
    cfg = TrainConfig.for_model("gcn", sparse_features=True, feature_mask=True, edge_mask=False, cost_weight=1.0,
                                objective="latency_s", epochs=3)
    inputs = workload_inputs(cfg, g)
    np.testing.assert_array_equal(inputs["feature_nnz"], feature_column_nnz(g.x))
    off = cfg.replace(sparse_features=False)  # reports price both stores still; the loss the dense one
    assert "feature_nnz" in workload_inputs(off, g) and "feature_nnz" not in loss_inputs(off, inputs)
    assert loss_inputs(cfg, inputs) is inputs
    r = train(g, cfg, hw)
    # the dense reference is the dense model with its features stored as the target runs them
    # cheaper by the objective: CSR (all nonzeros, one schedule) or dense, whichever is less
    ref = build_model(cfg, g, nnx.Rngs(0), dense=True)
    csr = hwmodel.estimate(ref.workload(g.n_nodes, g.n_edges, hard=True, locality=inputs["locality"],
                                        feature_nnz=inputs["feature_nnz"]), hw)
    dense_store = dense_cost(cfg, g, hw, {"locality": inputs["locality"]})
    best, store = (csr, "csr") if csr.latency_s < dense_store.latency_s else (dense_store, "dense")
    assert r["dense_modeled"] == best.summary() == dense_cost(cfg, g, hw, inputs).summary()
    assert r["by_hw"][hw.name]["dense_feature_store"] == store
    assert r["dense_modeled"]["latency_s"] <= min(csr.latency_s, dense_store.latency_s)
    with pytest.raises(ValueError, match=r"TrainConfig.cost.sparse_features: GraphSAGE's max aggregation"):
        TrainConfig.for_model("sage", sparse_features=True, aggr="max")


@pytest.mark.parametrize("name", ["gcn", "gat", "sage", "gin", "appnp", "rgcn"])
def test_every_model_prices_csr_features_by_their_nonzeros(name):
    """Every model's workload takes ``feature_nnz``: its first GEMM becomes a CSR product over the
    kept columns' nonzeros (so fewer nonzeros cost less), a closed feature mask keeps none, and
    the cheaper store (`store_costs` / `cheapest_store`, together `cheapest_cost`) is what the run
    reports."""
    from codesign.models import MODELS
    from codesign.train import cheapest_cost, cheapest_store, store_costs
    hw = hwmodel.presets.get("h100-datasheet")  # launch-free: on the fitted h100 a 500-node graph is launch-bound
    model = MODELS[name](64, 8, 3, feature_mask=True, rngs=nnx.Rngs(0))
    n, e = 500, 2000
    sparse, denser = np.full(64, 5.0, np.float32), np.full(64, 50.0, np.float32)
    cost = {k: float(hwmodel.estimate(model.workload(n, e, hard=True, feature_nnz=v), hw).energy_j)
            for k, v in (("sparse", sparse), ("denser", denser))}
    assert cost["sparse"] < cost["denser"]
    closed = float(hwmodel.estimate(model.workload(n, e, hard=True, feature_nnz=denser, densities={"feature": 0.0}),
                                    hw).energy_j)
    assert closed < cost["sparse"]
    costs = store_costs(model, n, e, hw, {"feature_nnz": sparse}, objective="energy_j")
    store, rep = cheapest_store(costs, "energy_j")
    assert set(costs) == {"dense", "csr"} and store == "csr" and float(rep.energy_j) == pytest.approx(cost["sparse"])
    for objective in ("energy_j", "latency_s"):  # one objective picks both the mapping and the store
        want = cheapest_store(store_costs(model, n, e, hw, {"feature_nnz": sparse}, objective=objective), objective)
        got = cheapest_cost(model, n, e, hw, {"feature_nnz": sparse}, objective=objective)
        assert got[0] == want[0] and float(getattr(got[1], objective)) == float(getattr(want[1], objective))
    with pytest.raises(ValueError, match=r"workload\(feature_nnz\): expected shape \(64,\)"):
        model.workload(n, e, feature_nnz=np.ones(3, np.float32))


def test_hidden_width_is_padded_to_the_lanes_with_exact_logits():
    from codesign.deploy import CHANNEL_LANES
    g = _graph()
    m = _hardened_gcn(g, None, hidden=8)
    c = deploy(m, g)
    kept = int(np.asarray(m.channel_mask.hard_mask()).sum())
    assert c.w0.codes.shape[1] == kept and kept % CHANNEL_LANES != 0  # stored: the kept channels only
    assert c.run_channels == -(-kept // CHANNEL_LANES) * CHANNEL_LANES and c._w0.shape[1] == c.run_channels
    assert not np.any(c._w0[:, kept:]) and not np.any(c._w1[kept:]) and not np.any(c._gate[kept:])
    np.testing.assert_allclose(c(), np.asarray(m(g.x, adjacency(g))), rtol=1e-5, atol=1e-6)
    assert dense_program(m, g).run_channels == 8


# ---- issue 36: a corrupted, truncated, edited or pre-hash checkpoint is refused in one line naming the file


@pytest.fixture(scope="module")
def saved_ck(tmp_path_factory):
    """A real orbax checkpoint (4-bit GCN with its masks, on `_graph`), saved once; tests copy it."""
    from codesign.checkpoint import save_model
    from codesign.train import TrainConfig, build_model
    g = _graph()
    cfg = TrainConfig.from_flat(hidden=8, bits=4, feature_mask=True, channel_mask=True, edge_mask=True, epochs=1)
    m = build_model(cfg, g, nnx.Rngs(3))
    m.eval()
    return save_model(tmp_path_factory.mktemp("ck") / "ck", m, cfg, g, "toy"), g


def _copy_ck(saved_ck, tmp_path):
    import shutil
    src, g = saved_ck
    return Path(shutil.copytree(src, tmp_path / "ck")), g


def _largest_data_file(ck):
    return max((p for p in (ck / "state").rglob("*") if p.is_file() and p.parent.name == "d"),
               key=lambda p: p.stat().st_size)


def _rel(ck, p):
    return re.escape(p.relative_to(ck).as_posix())


def _rewrite_meta(ck, edit):
    """Edits meta.json with ``edit(meta)`` and (unless it is the edit under test) re-signs it, as
    someone who knows the format would: the check behind it must still refuse."""
    import json
    from codesign.checkpoint import meta_sha256
    meta = json.loads((ck / "meta.json").read_text())
    edit(meta)
    meta["meta_sha256"] = meta_sha256(meta)
    (ck / "meta.json").write_text(json.dumps(meta, indent=1))


@pytest.mark.parametrize("damage", ["64 bytes", "one bit", "truncated"])
def test_corrupted_orbax_data_file_is_refused_naming_it(saved_ck, tmp_path, damage):
    from codesign.checkpoint import CheckpointError, load_model
    ck, g = _copy_ck(saved_ck, tmp_path)
    data = _largest_data_file(ck)
    raw = bytearray(data.read_bytes())
    if damage == "64 bytes":
        mid = len(raw) // 2
        raw[mid:mid + 64] = bytes(b ^ 0xFF for b in raw[mid:mid + 64])
    elif damage == "one bit":
        raw[len(raw) // 3] ^= 0x01
    else:
        raw = raw[:len(raw) // 2]
    data.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(ck))}: {_rel(ck, data)} is corrupt "
                                              rf"\(SHA-256 .*size {len(raw)} bytes\); re-save it") as info:
        load_model(ck, g)
    assert "\n" not in str(info.value)


def test_removed_manifest_is_refused_naming_it(saved_ck, tmp_path):
    from codesign.checkpoint import CheckpointError, load_model
    ck, g = _copy_ck(saved_ck, tmp_path)
    (ck / "state" / "manifest.ocdbt").unlink()
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(ck))}: state/manifest\.ocdbt is missing; "):
        load_model(ck, g)


@pytest.mark.parametrize("old,new", [('"bits": 4', '"bits": 8'), ('"model": "gcn"', '"model": "gat"'),
                                     ('"dataset": "toy"', '"dataset": "cora"')])
def test_edited_meta_json_is_refused(saved_ck, tmp_path, old, new):
    from codesign.checkpoint import CheckpointError, load_model, read_meta
    ck, g = _copy_ck(saved_ck, tmp_path)
    text = (ck / "meta.json").read_text()
    assert old in text
    (ck / "meta.json").write_text(text.replace(old, new))
    msg = rf"^checkpoint {re.escape(str(ck))}: meta\.json was edited or corrupted .*; re-save it"
    with pytest.raises(CheckpointError, match=msg):
        read_meta(ck)
    with pytest.raises(CheckpointError, match=msg):
        load_model(ck, g)


@pytest.mark.parametrize("text,message", [
    ('{"config": {', r"is not valid JSON \(Expecting property name enclosed in double quotes: line 1 column 13"),
    ("[1, 2]", r"must hold a JSON object, got list"),
    (b'{"config": "\xff"}', r"is not UTF-8 \(byte 0xff at offset 12\)"),
])
def test_unparsable_meta_json_names_the_file(saved_ck, tmp_path, text, message):
    from codesign.checkpoint import CheckpointError, read_meta
    ck, _ = _copy_ck(saved_ck, tmp_path)
    (ck / "meta.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(ck))}: meta\.json {message}"):
        read_meta(ck)


def test_meta_json_missing_key_is_named(saved_ck, tmp_path):
    from codesign.checkpoint import CheckpointError, read_meta
    for key in ("graph_sha256", "files"):  # a field, and one of the hashes of a hashed checkpoint
        ck, _ = _copy_ck(saved_ck, tmp_path / key)
        _rewrite_meta(ck, lambda m: m.pop(key))
        with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(ck))}: meta\.json lacks the key\(s\) "
                                                  rf"'{key}'$"):
            read_meta(ck)


def test_checkpoint_without_hashes_is_refused_as_older(saved_ck, tmp_path):
    import json
    from codesign.checkpoint import CheckpointError, load_model
    ck, g = _copy_ck(saved_ck, tmp_path)
    meta = json.loads((ck / "meta.json").read_text())
    for k in ("files", "arrays", "meta_sha256"):  # what codesign wrote before the hashes
        meta.pop(k)
    (ck / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(ck))}: meta\.json was saved by an older "
                                              r"codesign without hashes, .*; re-save it \(codesign train --save\)$"):
        load_model(ck, g)


def test_restored_arrays_are_checked_against_their_hashes(saved_ck, tmp_path):
    from codesign.checkpoint import CheckpointError, load_model
    ck, g = _copy_ck(saved_ck, tmp_path)
    # a meta.json whose files match but whose array hash of conv1/kernel does not
    _rewrite_meta(ck, lambda m: m["arrays"].update({"conv1/kernel": "0" * 64}))
    with pytest.raises(CheckpointError, match=r"restored array\(s\) conv1/kernel of state/ differ from their SHA-256 "
                                              r"in meta\.json"):
        load_model(ck, g)


def test_orbax_errors_are_wrapped_in_one_line(saved_ck, tmp_path):
    from codesign.checkpoint import CheckpointError, load_model
    ck, g = _copy_ck(saved_ck, tmp_path)
    _rewrite_meta(ck, lambda m: m["config"].update(hidden=16))  # the state no longer fits the model built
    with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(ck))}: orbax cannot restore state/ "
                                              r"\(\w+: .*\); re-save it") as info:
        load_model(ck, g)
    assert "\n" not in str(info.value) and len(str(info.value)) < 600


def test_interrupted_save_leaves_nothing(tmp_path, monkeypatch):
    import orbax.checkpoint as ocp
    from codesign.checkpoint import save_model
    from codesign.train import TrainConfig, build_model
    g = _graph()
    cfg = TrainConfig.from_flat(hidden=8, epochs=1)

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(ocp.StandardCheckpointer, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save_model(tmp_path / "ck", build_model(cfg, g, nnx.Rngs(0)), cfg, g, "toy")
    assert list(tmp_path.iterdir()) == []


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_single_byte_corruption_of_a_state_file_is_detected(saved_ck, data):
    """Any file under state/, any byte, any nonzero XOR: refused, naming that file; any byte of
    meta.json: refused, or meta.json still says the same (e.g. a space turned into a tab)."""
    import tempfile
    from codesign.checkpoint import CheckpointError, load_model, read_meta
    with tempfile.TemporaryDirectory() as tmp:
        ck, g = _copy_ck(saved_ck, Path(tmp))
        files = sorted(p for p in ck.rglob("*") if p.is_file())
        target = data.draw(st.sampled_from(files))
        raw = bytearray(target.read_bytes())
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw[pos] ^= data.draw(st.integers(1, 255))
        before = read_meta(ck)
        target.write_bytes(bytes(raw))
        if target.name == "meta.json":
            try:
                assert read_meta(ck) == before
            except CheckpointError as err:
                assert str(err).startswith(f"checkpoint {ck}: meta.json ") and "\n" not in str(err)
            return
        with pytest.raises(CheckpointError, match=rf"^checkpoint {re.escape(str(ck))}: {_rel(ck, target)} is corrupt"):
            load_model(ck, g)


def _hardened_sage(g, bits, seed=0, hidden=8, signed_input=False):
    """`_hardened_gcn`'s gates on a GraphSAGE (mean aggregator, fixed quantizer)."""
    m = GraphSAGE(g.n_features, hidden, int(np.asarray(g.y).max()) + 1, n_edges=g.n_edges, feature_mask=True,
                  channel_mask=True, bits=bits, signed_input=signed_input, rngs=nnx.Rngs(seed))
    ref = _hardened_gcn(g, None, seed, hidden)
    for mask in ("feature_mask", "channel_mask", "edge_mask"):
        getattr(m, mask).gate.log_alpha[...] = getattr(ref, mask).gate.log_alpha[...]
    m.eval()
    return m


@pytest.mark.parametrize("bits", [None, 8, 4])
@pytest.mark.parametrize("store", ["dense", "csr"])
def test_compact_sage_logits_equal_the_hardened_model(bits, store):
    """GraphSAGE (mean): removed features, channels and edges are gone from the program (the mean
    over the kept edges only: a pruned edge also leaves the degree) and the logits are the
    hardened model's; each of the four weights is stored on its own quantizer's grid."""
    g = _graph()
    m = _hardened_sage(g, bits)
    ref = np.asarray(m(g.x, adjacency(g)))
    c = deploy(m, g, store)
    n_f, n_c = (int(np.asarray(mask.hard_mask()).sum()) for mask in (m.feature_mask, m.channel_mask))
    assert c.feature_store == store and c.x.shape == (g.n_nodes, n_f)
    for w in (c.w0_neigh, c.w0_root):
        assert w.codes.shape == (n_f, n_c)
    for w in (c.w1_neigh, c.w1_root):
        assert w.codes.shape == (n_c, 3)
    kept_e = int(np.asarray(m.edge_mask.hard_mask()).sum())
    assert c.adj.nnz == kept_e < g.n_edges  # no self-loops
    rows = np.asarray(c.adj.sum(axis=1)).ravel()
    np.testing.assert_allclose(rows[rows > 0], 1.0, rtol=1e-6)  # a mean: each non-empty row sums to 1
    np.testing.assert_allclose(c(), ref, rtol=1e-5, atol=1e-5 * float(np.abs(ref).max()))
    if bits:
        hi = 2 ** (bits - 1) - 1
        full = np.asarray(m.conv1.kernel_root[...])
        assert c.w0_root.bits == bits and c.w0_root.scale == pytest.approx(float(np.abs(full).max()) / hi, rel=1e-6)
        assert c.model_bytes < dense_program(m, g).model_bytes


def test_dense_sage_program_is_the_fp32_model_without_masks():
    g = _graph()
    m = GraphSAGE(g.n_features, 8, 3, rngs=nnx.Rngs(1))
    m.eval()
    ref = np.asarray(m(g.x, adjacency(g)))
    for store in ("dense", "csr"):
        np.testing.assert_allclose(dense_program(m, g, store)(), ref, rtol=1e-5, atol=1e-6)


def test_measure_model_of_a_sage_prices_both_programs_as_they_run():
    from codesign.deploy import measure_model
    g = _graph()
    r = measure_model(_hardened_sage(g, None), g, hwmodel.presets.get("cpu_numpy"), reps=3, warmup=1)
    assert r["max_logit_gap"] < 1e-4
    assert r["kept"]["edges"] < g.n_edges and r["kept"]["channels"] < 8
    # fewer features, channels and edges: the compact program is modeled cheaper than the dense one
    assert 0 < r["modeled_local"]["latency_s"] < r["dense_modeled_local"]["latency_s"]
    # at 8 bits the program also fake-quantizes its hidden activations at run time (`FAKE_QUANT_OPS`
    # passes over [N, hidden] in numpy): priced, so the 8-bit program costs more than the FP32 one
    r8 = measure_model(_hardened_sage(g, 8), g, hwmodel.presets.get("cpu_numpy"), reps=3, warmup=1)
    assert r8["max_logit_gap"] < 1e-4
    assert r8["modeled_local"]["latency_s"] > r["modeled_local"]["latency_s"]
    assert r["measured"]["model_bytes"] < r["dense_measured"]["model_bytes"]


def test_program_cost_is_how_measure_model_prices_the_compact_program():
    """`deploy.program_cost` with the compact program's feature store and run width gives
    `measure_model`'s ``modeled_local``; a feature store it does not know is refused naming it."""
    from codesign.deploy import deploy, measure_model, program_cost
    g = _graph()
    hw, model = hwmodel.presets.get("cpu_numpy"), _hardened_sage(g, None)
    r = measure_model(model, g, hw, reps=3, warmup=1)
    prog = deploy(model, g)
    cost = program_cost(model, g, hw, locality=hwmodel.measure_locality(g.senders, g.receivers, g.n_nodes),
                        feature_store=prog.feature_store, run_channels=prog.run_channels)
    assert float(cost.latency_s) == pytest.approx(r["modeled_local"]["latency_s"], rel=1e-6)
    with pytest.raises(ValueError, match="program_cost: feature_store must be 'csr' or 'dense', got 'bsr'"):
        program_cost(model, g, hw, locality=None, feature_store="bsr")


def _hardened_gat(g, bits, seed=0, hidden=4, heads=2, out_heads=1, signed_input=False):
    """`_hardened_gcn`'s gates on a GAT: a third of the features, of the heads x hidden channels
    and of the edges closed (at least one of each), the rest open in (0, 1]."""
    m = GAT(g.n_features, hidden, int(np.asarray(g.y).max()) + 1, n_edges=g.n_edges, feature_mask=True,
            channel_mask=True, bits=bits, heads=heads, out_heads=out_heads, signed_input=signed_input,
            rngs=nnx.Rngs(seed))
    rng = np.random.default_rng(seed)
    for gate, n in ((m.feature_mask.gate, g.n_features), (m.channel_mask.gate, heads * hidden),
                    (m.edge_mask.gate, g.n_edges)):
        closed = (rng.random(n) < 1 / 3) | (np.arange(n) == 0)
        gate.log_alpha[...] = jnp.asarray(np.where(closed, -10.0, rng.uniform(-1.5, 3.0, n)), jnp.float32)
    m.eval()
    return m


@pytest.mark.parametrize("bits", [None, 8])
@pytest.mark.parametrize("store", ["dense", "csr"])
def test_compact_gat_logits_equal_the_hardened_model(bits, store):
    """GAT: the kept edges (+ self-loops) with their gates counted in the softmax, the kept
    features, the kept channels of each head (a whole head may go), signed quantization of the
    hidden ELU output on the per-tensor grid; the logits are the hardened model's."""
    g = _graph()
    m = _hardened_gat(g, bits, out_heads=2)
    ref = np.asarray(m(g.x, adjacency(g)))
    c = deploy(m, g, store)
    n_f, n_c, n_e = (int(np.asarray(mask.hard_mask()).sum()) for mask in (m.feature_mask, m.channel_mask, m.edge_mask))
    assert c.feature_store == store and c.x.shape == (g.n_nodes, n_f)
    assert sum(len(h[0]) for h in c.heads0) == n_c == c.run_channels < 8 and c.w1.codes.shape[0] == n_c
    assert len(c.senders) == n_e + g.n_nodes and n_e < g.n_edges
    np.testing.assert_allclose(c(), ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))
    if bits:
        assert c.model_bytes < dense_program(m, g).model_bytes


def test_dense_gat_program_is_the_fp32_model_without_masks():
    g = _graph()
    m = GAT(g.n_features, 4, 3, heads=2, rngs=nnx.Rngs(1))
    m.eval()
    ref = np.asarray(m(g.x, adjacency(g)))
    np.testing.assert_allclose(dense_program(m, g)(), ref, rtol=1e-4, atol=1e-6)


def test_measure_model_of_a_gat_prices_both_programs_as_they_run():
    from codesign.deploy import measure_model
    g = _graph()
    m = _hardened_gat(g, 8)
    r = measure_model(m, g, hwmodel.presets.get("cpu_numpy"), reps=3, warmup=1)
    assert r["max_logit_gap"] < 1e-3
    assert r["kept"]["channels"] < 8 and r["kept"]["edges"] < g.n_edges
    assert 0 < r["modeled_local"]["latency_s"] < r["dense_modeled_local"]["latency_s"]


def test_fit_host_compares_the_fitted_cpu_with_this_one(monkeypatch, capsys):
    """A measured preset names the host it was fitted on; a different CPU (model or SIMD levels)
    is reported, and the CLI says so in one line before it measures."""
    from codesign import cli
    from codesign.hwmodel import calibrate, presets
    fit = presets.load_fit("cpu")["host"]
    same = {"cpu_model": fit["cpu_model"], "simd": fit["simd"]}
    monkeypatch.setattr(calibrate, "machine", lambda: dict(same, platform="x"))
    assert calibrate.fit_host("cpu_numpy") == {"fit": same, "here": same, "matches": True}
    cli._warn_fit_host("cpu_numpy")
    assert capsys.readouterr().err == ""
    other = dict(same, simd=[f for f in same["simd"] if f != "avx2"] + ["other"])
    monkeypatch.setattr(calibrate, "machine", lambda: dict(other))
    assert calibrate.fit_host("cpu")["matches"] is False
    cli._warn_fit_host("cpu_numpy")
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fitted on" in err and "--peaks-only --save-preset" in err
    assert calibrate.fit_host("h100") is None  # a published preset has no host to match


@pytest.mark.parametrize("arch", ["gcn", "sage", "gat"])
def test_compact_program_of_signed_features_equals_the_int8_model(arch):
    """Features with negative values (LSA-like): the deployed program quantizes them on the model's
    signed grid once, so the logits are the INT8 model's (an unsigned grid in the program and a
    signed one in the model would differ wherever a feature is negative)."""
    g0 = _graph()
    g = g0.replace(x=np.asarray(g0.x) - 0.3)  # a third to all of each row negative
    assert g.signed_features
    make = {"gcn": _hardened_gcn, "sage": _hardened_sage, "gat": _hardened_gat}[arch]
    # the helpers build the model directly: the signed grid is the model's argument
    m, signed = make(g, 8), make(g, 8, signed_input=True)  # the same weights and gates
    assert not m.conv1.quant_x.signed and signed.conv1.quant_x.signed
    ref = np.asarray(signed(g.x, adjacency(g)))
    assert np.abs(ref - np.asarray(m(g.x, adjacency(g)))).max() > 1e-3  # the grid matters on these features
    c = deploy(signed, g)
    assert (np.asarray(c.x.todense() if sp.issparse(c.x) else c.x) < 0).any()
    np.testing.assert_allclose(c(), ref, rtol=1e-4, atol=1e-5 * float(np.abs(ref).max()))
