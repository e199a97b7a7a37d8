"""GCN model: normalization, dropout, forward shapes, co-design hooks and workload."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.kernels import CooAdjacency
from codesign.models import GCN, gcn_normalize
from codesign.models.dropout import HashDropout, hash_uniform_u32
from codesign.sparsify import GateLogit


def ring(n):
    s = np.arange(n)
    senders = np.concatenate([s, (s + 1) % n]).astype(np.int32)
    receivers = np.concatenate([(s + 1) % n, s]).astype(np.int32)
    return CooAdjacency(jnp.asarray(senders), jnp.asarray(receivers), None, n)


def dense_gcn_matrix(adj, w):
    a = np.zeros((adj.n_nodes, adj.n_nodes))
    np.add.at(a, (np.asarray(adj.receivers), np.asarray(adj.senders)), np.asarray(w))
    a += np.eye(adj.n_nodes)
    d = a.sum(1)
    return a / np.sqrt(d)[:, None] / np.sqrt(d)[None, :]


def test_gcn_normalize_matches_dense_formula(getkey):
    adj = ring(7)
    w = jax.random.uniform(getkey(), (adj.n_edges,))
    norm = gcn_normalize(adj, w)
    got = np.zeros((7, 7))
    np.add.at(got, (np.asarray(norm.receivers), np.asarray(norm.senders)), np.asarray(norm.edge_weight))
    np.testing.assert_allclose(got, dense_gcn_matrix(adj, w), rtol=1e-5)


def test_removed_edge_leaves_the_degree():
    adj = ring(5)
    w = jnp.ones(adj.n_edges).at[0].set(0.0)  # drop edge 0 -> 1
    norm = gcn_normalize(adj, w)
    deg_node1 = 1 + 1  # self-loop + the remaining edge 2 -> 1
    self_loop_1 = norm.edge_weight[adj.n_edges + 1]
    np.testing.assert_allclose(self_loop_1, 1.0 / deg_node1, rtol=1e-6)


def test_hash_dropout_statistics_and_modes():
    drop = HashDropout(0.3, rngs=nnx.Rngs(0))
    x = jnp.ones((400, 500))
    a, b = drop(x), drop(x)
    kept = float((a > 0).mean())
    assert abs(kept - 0.7) < 0.005  # 200k Bernoulli(0.7) draws: std 0.001
    np.testing.assert_allclose(np.unique(np.asarray(a)), [0.0, 1 / 0.7], rtol=1e-6)
    assert float((a != b).mean()) > 0.3  # a fresh mask per call
    drop.eval()
    np.testing.assert_array_equal(drop(x), x)
    with pytest.raises(ValueError, match="rate"):
        HashDropout(1.0, rngs=nnx.Rngs(0))


def _model_with_op_as_written(cls, op: str, written_out):
    """``(runs, calls)``: a 12 -> 16 -> 3 ``cls`` (dropout 0.5, training) on a 30-node ring, its loss
    and parameter gradients with `HashDropout`'s method ``op`` as it is (``runs[True]``) and
    replaced by ``written_out(self, *args)`` (``runs[False]``); ``calls``: which of the two ran."""
    adj, x = ring(30), jax.random.uniform(jax.random.key(0), (30, 12))
    orig, runs, calls = getattr(HashDropout, op), {}, []
    for fuse in (True, False):
        def counted(self, *args, fuse=fuse):
            calls.append(fuse)
            return orig(self, *args) if fuse else written_out(self, *args)
        setattr(HashDropout, op, counted)
        try:
            m = cls(12, 16, 3, dropout=0.5, rngs=nnx.Rngs(0))
            m.train()
            runs[fuse] = nnx.value_and_grad(lambda m: jnp.sum(jnp.sin(m(x, adj))))(m)
        finally:
            setattr(HashDropout, op, orig)
    return runs, calls


def test_relu_dropout_fused_equals_relu_then_dropout():
    """`HashDropout.relu_apply` (one op, keeps only its output) = dropout(relu(z)): the same draw,
    values and gradient, zeros and exact ties at 0 included; and the GCN/GraphSAGE forward that
    uses it (fp32, no channel mask) gives the loss and gradients of the written-out composition."""
    z = jnp.asarray(np.random.default_rng(0).normal(size=(60, 40)), jnp.float32).at[:, 0].set(0.0)
    ct = jnp.asarray(np.random.default_rng(1).normal(size=z.shape), jnp.float32)
    fused, plain = HashDropout(0.4, rngs=nnx.Rngs(3)), HashDropout(0.4, rngs=nnx.Rngs(3))
    a, b = fused.relu_apply(z), plain(jax.nn.relu(z))
    np.testing.assert_array_equal(a, b)
    assert 0 < float((a > 0).mean()) < float((z > 0).mean())  # both masks acted
    ga = jax.grad(lambda z: jnp.sum(ct * HashDropout(0.4, rngs=nnx.Rngs(3)).relu_apply(z)))(z)
    gb = jax.grad(lambda z: jnp.sum(ct * HashDropout(0.4, rngs=nnx.Rngs(3))(jax.nn.relu(z))))(z)
    np.testing.assert_array_equal(ga, gb)
    fused.eval()
    np.testing.assert_array_equal(fused.relu_apply(z), jax.nn.relu(z))

    from codesign.models import GraphSAGE
    for cls in (GCN, GraphSAGE):  # fused: the op; not: the written-out ReLU, then the same dropout
        runs, calls = _model_with_op_as_written(cls, "relu_apply", lambda self, z: self(jax.nn.relu(z)))
        assert calls == [True, False], calls  # the models take the fused path
        assert float(runs[True][0]) == float(runs[False][0])
        for ga, gb in zip(jax.tree.leaves(runs[True][1]), jax.tree.leaves(runs[False][1])):
            np.testing.assert_allclose(ga, gb, rtol=1e-6, atol=1e-7)


def test_concat_matmul_redraws_the_mask():
    """`HashDropout.concat_matmul` = ``[a | dropout(x)] @ w`` with the same draw: equal values and
    gradients in all four inputs (its backward redraws the mask from the seed instead of keeping the
    dropped copy), the plain product when inactive; GraphSAGE's aggregate-first layer uses it and
    gives the loss and gradients of the written-out layer."""
    rng = np.random.default_rng(0)
    a, x = (jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((50, 7), (50, 9)))
    w, ct = jnp.asarray(rng.normal(size=(16, 5)), jnp.float32), jnp.asarray(rng.normal(size=(50, 5)), jnp.float32)
    drop = HashDropout(0.3, rngs=nnx.Rngs(2))
    seed = drop.draw_seed()
    fused = lambda a, x, w: jnp.sum(ct * drop.concat_matmul(a, x, seed, w))
    plain = lambda a, x, w: jnp.sum(ct * (jnp.concatenate([a, drop.apply(x, seed)], 1) @ w))
    np.testing.assert_allclose(fused(a, x, w), plain(a, x, w), rtol=1e-6)
    for ga, gb in zip(jax.grad(fused, (0, 1, 2))(a, x, w), jax.grad(plain, (0, 1, 2))(a, x, w)):
        np.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-6)
    assert float((jax.grad(fused, 1)(a, x, w) == 0).mean()) > 0.1  # the mask reached dx
    drop.eval()
    np.testing.assert_array_equal(drop.concat_matmul(a, x, seed, w), jnp.concatenate([a, x], 1) @ w)

    from codesign.models import GraphSAGE
    runs, calls = _model_with_op_as_written(
        GraphSAGE, "concat_matmul", lambda self, a, x, seed, w: jnp.concatenate([a, self.apply(x, seed)], 1) @ w)
    assert calls == [True, False], calls  # layer 1 (12 -> 16) aggregates first and takes it
    np.testing.assert_allclose(float(runs[True][0]), float(runs[False][0]), rtol=1e-6)
    for ga, gb in zip(jax.tree.leaves(runs[True][1]), jax.tree.leaves(runs[False][1])):
        np.testing.assert_allclose(ga, gb, rtol=1e-5, atol=1e-6)


def test_hash_bits_are_uniform():
    h = np.asarray(hash_uniform_u32(jnp.uint32(12345), (1 << 16,)))
    counts = np.bincount(h >> 28, minlength=16)  # top 4 bits: 16 bins of 4096 expected
    chi2 = float(((counts - 4096.0) ** 2 / 4096.0).sum())
    assert chi2 < 40.0  # chi-square, 15 dof: p ~ 5e-4


def test_gcn_forward_train_eval_and_grads(getkey):
    adj = ring(30)
    x = jax.random.uniform(getkey(), (30, 12))
    model = GCN(12, 8, 3, n_edges=adj.n_edges, feature_mask=True, bits=8, rngs=nnx.Rngs(0))
    out = model(x, adj)
    assert out.shape == (30, 3) and bool(jnp.isfinite(out).all())
    grads = nnx.grad(lambda m: m(x, adj).sum(), argnums=nnx.DiffState(0, GateLogit))(model)
    leaves = jax.tree.leaves(grads)
    assert len(leaves) == 2 and all(float(jnp.abs(g).sum()) > 0 for g in leaves)
    model.eval()
    np.testing.assert_array_equal(model(x, adj), model(x, adj))


def test_gcn_workload_tracks_densities_and_bits():
    model = GCN(100, 16, 4, n_edges=50, feature_mask=True, bits=4, rngs=nnx.Rngs(0))
    wl = model.workload(30, 50, hard=True)
    spmm0 = wl.layers[0].combine_first[1]
    gemm0 = wl.layers[0].combine_first[0]
    d = model.densities(hard=True)
    np.testing.assert_allclose(spmm0.macs, (d["edge"] * 50 + 30) * 16, rtol=1e-6)
    np.testing.assert_allclose(gemm0.macs, 30 * d["feature"] * 100 * 16, rtol=1e-6)
    assert float(gemm0.bits) == 4.0
    what_if = model.workload(30, 50, densities={"edge": 0.5, "feature": 0.25})
    np.testing.assert_allclose(what_if.layers[0].combine_first[0].macs, 30 * 25 * 16, rtol=1e-6)


# --- signed input features: the first layer's input quantizer follows the data --------------------

_FIRST_INPUT_QUANT = {"gcn": lambda m: m.conv1.quant_x, "sage": lambda m: m.conv1.quant_x,
                      "gat": lambda m: m.conv1.quant_x, "gin": lambda m: m.conv1.lin1.quant_x,
                      "appnp": lambda m: m.lin1.quant_x, "rgcn": lambda m: m.conv1.quant_x}


def _toy_graph(x):
    from codesign.graph import Graph
    n = x.shape[0]
    s = np.arange(n, dtype=np.int32)
    return Graph(senders=s, receivers=(s + 1) % n, x=x, y=np.arange(n) % 3, train_mask=np.ones(n, bool),
                 val_mask=np.zeros(n, bool), test_mask=np.zeros(n, bool), n_nodes=n)


@pytest.mark.parametrize("model", sorted(_FIRST_INPUT_QUANT))
def test_int8_models_keep_negative_input_features(model):
    """Features with negative values (LSA, embeddings) are quantized on a signed grid by every
    model `build_model` makes: an unsigned grid would clip them to 0 (wordnet-lsa's INT8 baseline
    did, before). Non-negative features keep the unsigned grid, whose step is half as large."""
    from codesign.models import MODELS
    from codesign.train import TrainConfig, build_model
    assert set(_FIRST_INPUT_QUANT) == set(MODELS)
    x = np.random.default_rng(0).normal(size=(12, 6)).astype(np.float32)
    for features, signed in ((x, True), (np.abs(x), False)):
        g = _toy_graph(features)
        assert g.signed_features is signed
        m = build_model(TrainConfig.for_model(model, bits=8), g, nnx.Rngs(0))
        q = _FIRST_INPUT_QUANT[model](m)
        assert q.signed is signed
        out = np.asarray(q(jnp.asarray(features)))
        # within half a step of the input everywhere: nothing clipped
        step = np.abs(features).max() / (127 if signed else 255)
        assert np.abs(out - features).max() <= step / 2 + 1e-6
