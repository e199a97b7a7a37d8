"""The model zoo (GAT, GraphSAGE, GIN, APPNP next to GCN): shapes, gradients, eval determinism,
hand-checked workloads, model-specific identities, and the CLI / TrainConfig plumbing."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign import cli, hwmodel
from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency
from codesign.models import APPNP, GAT, GIN, MODEL_DEFAULTS, MODELS, GATConv, GraphSAGE
from codesign.models.sage import max_aggregate
from codesign.sparsify import GateLogit
from codesign.train import TrainConfig, train
from codesign.vertex.layers import gat_attention

N_NODES, IN, HIDDEN, CLASSES = 20, 12, 8, 3


def random_graph(key, n=N_NODES, n_edges=60):
    """Random directed edges without self-loops; node n-1 receives none (an empty row)."""
    k1, k2 = jax.random.split(key)
    snd = np.asarray(jax.random.randint(k1, (n_edges,), 0, n))
    rcv = np.asarray(jax.random.randint(k2, (n_edges,), 0, n - 1))
    keep = snd != rcv
    return CooAdjacency(jnp.asarray(snd[keep], jnp.int32), jnp.asarray(rcv[keep], jnp.int32), None, n)


@pytest.fixture
def graph(getkey):
    adj = random_graph(getkey())
    x = jax.random.uniform(getkey(), (N_NODES, IN))  # non-negative, like bag-of-words features
    return adj, x


def build(name, adj, **kw):
    return MODELS[name](IN, HIDDEN, CLASSES, n_edges=adj.n_edges, feature_mask=True, bits=8, rngs=nnx.Rngs(0), **kw)


@nnx.jit
def outputs_and_grads(model, eval_model, x, adj, hw):
    """In one compile (per model): training-mode output, gradients of a task loss w.r.t. all
    parameters, gradients of the modeled energy w.r.t. the gate logits, and two eval-mode outputs."""
    task = lambda m: ((m(x, adj) ** 2).sum(), m(x, adj))
    (_, out), grads = nnx.value_and_grad(task, argnums=nnx.DiffState(0, nnx.Param), has_aux=True)(model)
    cost = lambda m: hwmodel.estimate(m.workload(N_NODES, adj.n_edges), hw).energy_j
    cost_grads = nnx.grad(cost, argnums=nnx.DiffState(0, GateLogit))(model)
    return out, grads, cost_grads, (eval_model(x, adj), eval_model(x, adj))


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"gcn"}))  # GCN: tests/test_models.py
def test_forward_gradients_and_eval_determinism(name, graph):
    adj, x = graph
    model = build(name, adj)
    eval_model = nnx.clone(model)
    eval_model.eval()  # no dropout, deterministic gates
    out, grads, cost_grads, (a, b) = outputs_and_grads(model, eval_model, x, adj, hwmodel.presets.get("h100"))
    assert out.shape == (N_NODES, CLASSES) and bool(jnp.isfinite(out).all())
    # the task loss reaches the edge and feature gate logits and every layer's weights
    gates, weights = nnx.split_state(grads, GateLogit, ...)
    gate_leaves = jax.tree.leaves(gates)
    assert len(gate_leaves) == 2 and all(float(jnp.abs(g).sum()) > 0 for g in gate_leaves)
    flat = {jax.tree_util.keystr(p): g for p, g in jax.tree_util.tree_leaves_with_path(weights)}
    kernels = {k: g for k, g in flat.items() if "kernel" in k}
    assert len(kernels) >= 2 and all(float(jnp.abs(g).sum()) > 0 for g in kernels.values()), kernels.keys()
    # so does the cost model's (through the expected densities)
    assert all(float(jnp.abs(g).sum()) > 0 for g in jax.tree.leaves(cost_grads))
    np.testing.assert_array_equal(a, b)  # eval: no dropout, deterministic gates
    assert a.shape == (N_NODES, CLASSES) and bool(jnp.isfinite(a).all())
    assert float(jnp.abs(a - out).max()) > 0  # training mode was stochastic (dropout, gate noise)


def test_gat_attention_rows_sum_to_one(graph, getkey):
    """The attention of GATConv's program (`gat_attention`, heads by vmap) applied to h = 1 gives
    each row's sum of coefficients: 1 on rows with edges (0 on empty ones), also gated; a zero
    gate removes its edge exactly; gates of 1 are the plain softmax."""
    adj, _ = graph
    heads = 3
    s_src, s_dst = jax.random.normal(getkey(), (2, N_NODES, heads)) * 5.0
    h = jax.random.normal(getkey(), (N_NODES, heads, 2))
    gate = jax.random.uniform(getkey(), (adj.n_edges,)).at[0].set(0.0)
    rest = CooAdjacency(adj.senders[1:], adj.receivers[1:], None, N_NODES)
    prog = gat_attention(0.2)

    def attend(p, a, hh):
        return jax.vmap(lambda x, el, er: p(a, nodes={"h": x, "el": el, "er": er}), in_axes=1, out_axes=1)(
            hh, s_src, s_dst)

    @jax.jit
    def attention(gate):
        ones = jnp.ones((N_NODES, heads, 1))
        return (attend(prog, adj, ones)[..., 0], attend(prog.with_edge_gates(gate), adj, ones)[..., 0],
                attend(prog.with_edge_gates(gate), adj, h), attend(prog.with_edge_gates(gate[1:]), rest, h),
                attend(prog.with_edge_gates(jnp.ones_like(gate)), adj, h), attend(prog, adj, h))

    rows, gated_rows, gated, without_edge0, ones, plain = attention(gate)
    has_edges = np.bincount(np.asarray(adj.receivers), minlength=N_NODES) > 0
    np.testing.assert_allclose(np.asarray(rows)[has_edges], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(np.asarray(rows)[~has_edges], 0.0)
    rows_kept = np.bincount(np.asarray(adj.receivers), weights=np.asarray(gate) > 0, minlength=N_NODES) > 0
    np.testing.assert_allclose(np.asarray(gated_rows)[rows_kept], 1.0, rtol=1e-5)
    np.testing.assert_allclose(gated, without_edge0, rtol=1e-5, atol=1e-6)  # a zero gate = the edge removed
    np.testing.assert_allclose(ones, plain, rtol=1e-5, atol=1e-6)  # gates of 1 = the plain softmax


def test_gat_edge_path_matches_fused_path(graph):
    """Without gates or attention dropout a layer uses `gat_aggregate`; the edge path (what an
    edge mask or attention dropout switch on) must give the same output."""
    adj, x = graph
    conv = GATConv(IN, 4, 2, attn_dropout=0.5, rngs=nnx.Rngs(1))
    conv.eval()  # attention dropout off
    loops = CooAdjacency(*add_self_loops(adj.senders, adj.receivers, N_NODES), None, N_NODES)
    both = nnx.jit(lambda c, x: (c(x, loops), c(x, loops, jnp.ones((loops.n_edges,)))))
    fused, edge = both(conv, x)
    np.testing.assert_allclose(edge, fused, rtol=1e-5, atol=1e-6)


def test_sage_max_differs_from_mean_and_max_is_exact(graph):
    adj, x = graph
    mean = GraphSAGE(IN, HIDDEN, CLASSES, aggr="mean", rngs=nnx.Rngs(0))
    mx = GraphSAGE(IN, HIDDEN, CLASSES, aggr="max", rngs=nnx.Rngs(0))  # same weights
    mean.eval(), mx.eval()
    assert float(jnp.abs(mean(x, adj) - mx(x, adj)).max()) > 1e-3
    got = np.asarray(max_aggregate(adj, x))
    want = np.zeros_like(got)
    for i in range(N_NODES):
        nbrs = np.asarray(adj.senders)[np.asarray(adj.receivers) == i]
        if len(nbrs):
            want[i] = np.asarray(x)[nbrs].max(0)
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(ValueError, match="aggr"):
        GraphSAGE(IN, HIDDEN, CLASSES, aggr="sum", rngs=nnx.Rngs(0))


def test_appnp_alpha_one_is_the_mlp_and_propagation_matches_dense(graph):
    adj, x = graph
    model = APPNP(IN, HIDDEN, CLASSES, alpha=1.0, rngs=nnx.Rngs(0))
    model.eval()
    np.testing.assert_array_equal(model(x, adj), model.mlp(x))
    model = APPNP(IN, HIDDEN, CLASSES, alpha=0.1, k_hops=10, rngs=nnx.Rngs(0))
    model.eval()
    a = np.zeros((N_NODES, N_NODES))
    np.add.at(a, (np.asarray(adj.receivers), np.asarray(adj.senders)), 1.0)
    a += np.eye(N_NODES)
    d = a.sum(1)
    a_hat = a / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]
    h = z = np.asarray(model.mlp(x), np.float64)
    for _ in range(10):
        z = 0.9 * a_hat @ z + 0.1 * h
    np.testing.assert_allclose(model(x, adj), z, rtol=1e-4, atol=1e-5)


def test_gin_eps_weights_the_self_term(graph):
    adj, x = graph
    model = GIN(IN, HIDDEN, CLASSES, rngs=nnx.Rngs(0))
    model.eval()
    conv = model.conv1
    a = np.zeros((N_NODES, N_NODES))
    np.add.at(a, (np.asarray(adj.receivers), np.asarray(adj.senders)), 1.0)
    conv.eps[...] = jnp.float32(0.5)
    pre = (a + 1.5 * np.eye(N_NODES)) @ np.asarray(x)
    want = np.maximum(pre @ np.asarray(conv.lin1.kernel[...]) + np.asarray(conv.lin1.bias[...]), 0)
    want = want @ np.asarray(conv.lin2.kernel[...]) + np.asarray(conv.lin2.bias[...])
    np.testing.assert_allclose(conv(x, adj), want, rtol=1e-4, atol=1e-5)


# --- workloads: stage kinds and MAC counts by hand (n=6 nodes, e=8 edges, K=10, C=3) ---------
N, E, K, C = 6, 8, 10, 3


def stages(layer, order="combine_first"):
    return {s.kind: float(s.macs) for s in getattr(layer, order)}


def elem(layer):
    return {s.kind: float(s.macs) for s in layer.elementwise}


def test_gat_workload_by_hand():
    m = GAT(K, 4, C, heads=2, rngs=nnx.Rngs(0))
    wl = m.workload(N, E, hard=True)
    nnz = E + N  # self-loops
    l0, l1 = wl.layers
    assert [l.name for l in wl.layers] == ["layer0", "layer1"]
    assert stages(l0) == stages(l0, "aggregate_first") == {
        "gemm": N * K * 8, "sddmm": nnz * 2 * 2, "softmax": nnz * 2 * 5, "spmm": nnz * 8}
    assert elem(l0) == {"elementwise": 2 * N * 8 + N * 8}  # score terms + bias/ELU
    assert stages(l1) == {"gemm": N * 8 * C, "sddmm": nnz * 2, "softmax": nnz * 5, "spmm": nnz * C}
    assert float(l1.combine_first[0].bits) == 32.0
    what_if = m.workload(N, E, densities={"edge": 0.5, "feature": 0.5}, bits=4.0)
    assert stages(what_if.layers[0])["gemm"] == N * 5 * 8 and stages(what_if.layers[0])["spmm"] == (4 + N) * 8
    assert float(what_if.layers[0].combine_first[0].bits) == 4.0
    train_wl = m.workload(N, E, training=True)
    # `hwmodel.autograd_training`: layer 0's GEMM on the input features forms dW only (x2), layer 1's
    # dW and dX (x3); the attention's edge weights are learned: the SpMM adds dH and dA (x3)
    assert stages(train_wl.layers[0])["gemm"] == 2 * N * K * 8
    assert stages(train_wl.layers[1])["gemm"] == 3 * N * 8 * C
    assert stages(train_wl.layers[0])["spmm"] == 3 * nnz * 8 and stages(train_wl.layers[1])["spmm"] == 3 * nnz * C
    assert stages(train_wl.layers[0])["softmax"] == 2 * nnz * 2 * 5


@pytest.mark.parametrize("aggr", ["mean", "max"])
def test_sage_workload_by_hand(aggr):
    m = GraphSAGE(K, 4, C, aggr=aggr, rngs=nnx.Rngs(0))
    wl = m.workload(N, E, hard=True)
    assert [l.name for l in wl.layers] == ["layer0", "layer0.root", "layer1", "layer1.root"]
    l0, root0, l1, root1 = wl.layers
    assert stages(l0, "aggregate_first") == {"spmm": E * K, "gemm": N * K * 4}  # no self-loops
    if aggr == "mean":
        assert stages(l0) == {"gemm": N * K * 4, "spmm": E * 4}
    else:  # a max does not commute with the GEMM: aggregate-first only
        assert stages(l0) == stages(l0, "aggregate_first")
    assert stages(root0) == stages(root0, "aggregate_first") == {"gemm": N * K * 4}
    assert root0.elementwise == ()
    # hidden: bias, ReLU and the root term's sum; logits: bias and the sum
    assert elem(l0) == {"elementwise": N * 4 * 3}
    assert stages(root1) == {"gemm": N * 4 * C} and elem(l1) == {"elementwise": N * C * 2}


def test_gin_workload_by_hand():
    m = GIN(K, 4, C, rngs=nnx.Rngs(0))
    wl = m.workload(N, E, hard=True)
    assert [l.name for l in wl.layers] == ["layer0", "layer0.mlp", "layer1", "layer1.mlp"]
    l0, mlp0, l1, mlp1 = wl.layers
    nnz = E + N  # (1 + eps) self term
    assert stages(l0) == {"gemm": N * K * 4, "spmm": nnz * 4}
    assert stages(l0, "aggregate_first") == {"spmm": nnz * K, "gemm": N * K * 4}
    assert stages(mlp0) == {"gemm": N * 4 * 4} and elem(mlp0) == {"elementwise": N * 4}
    assert stages(l1) == {"gemm": N * 4 * 4, "spmm": nnz * 4}
    assert stages(mlp1) == {"gemm": N * 4 * C} and float(mlp1.combine_first[0].bits) == 32.0


def test_appnp_workload_by_hand():
    m = APPNP(K, 4, C, k_hops=3, rngs=nnx.Rngs(0))
    wl = m.workload(N, E, hard=True)
    assert [l.name for l in wl.layers] == ["mlp0", "mlp1", "prop0", "prop1", "prop2"]
    assert stages(wl.layers[0]) == {"gemm": N * K * 4} and stages(wl.layers[1]) == {"gemm": N * 4 * C}
    for prop in wl.layers[2:]:
        assert stages(prop) == {"spmm": (E + N) * C} and elem(prop) == {"elementwise": 2 * N * C}
    mlp_only = APPNP(K, 4, C, alpha=1.0, rngs=nnx.Rngs(0)).workload(N, E)
    assert [l.name for l in mlp_only.layers] == ["mlp0", "mlp1"]
    rep = hwmodel.estimate(wl, hwmodel.presets.get("h100"))
    assert set(rep.stages) >= {"prop2/spmm", "prop2/elementwise", "mlp0/gemm"}


# --- training plumbing ---------------------------------------------------------------------------

def test_train_config_model_defaults_and_options():
    cfg = TrainConfig.for_model("gat", epochs=5)
    assert (cfg.optim.lr, cfg.model.hidden, cfg.model.heads, cfg.model.dropout, cfg.optim.epochs) == (0.005, 8, 8, 0.6, 5)
    assert TrainConfig.for_model("gcn") == TrainConfig.from_flat()
    assert set(MODEL_DEFAULTS) == set(MODELS)
    with pytest.raises(ValueError, match="heads"):
        TrainConfig.from_flat(model="gcn", heads=4)  # GCN has no heads option
    with pytest.raises(ValueError, match="select"):
        TrainConfig.from_flat(select="best")
    args = cli.build_parser().parse_args(["train", "--model", "appnp", "--lr", "0.02"])
    cfg = cli._config(args, 0.0, None, 0)
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.model.k_hops, cfg.model.alpha) == (0.02, 5e-3, 10, 0.1)


def test_best_val_selection_keeps_the_best_epoch(cora):
    hw = hwmodel.presets.get("cpu")
    last = train(cora, TrainConfig.from_flat(seed=0, epochs=10), hw)
    best = train(cora, TrainConfig.from_flat(seed=0, epochs=10, select="best_val"), hw)
    assert last["selected_epoch"] == 9 and 0 <= best["selected_epoch"] <= 9
    assert best["val_accuracy"] >= last["val_accuracy"]  # same trajectory; the best epoch is kept


@pytest.mark.parametrize("name", sorted(set(MODELS) - {"gcn"}))
def test_cli_train_each_model(name, cora, capsys, tmp_path):
    assert cli.main(["train", "--dataset", "cora", "--model", name, "--epochs", "3", "--seeds", "1", "--json",
                     "--out", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["model"] == name and 0.0 <= out["test_accuracy"] <= 1.0
    assert out["modeled"] == out["dense_modeled"]
