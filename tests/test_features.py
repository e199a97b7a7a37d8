"""`SparseFeatures`: a mostly-zero input trained over its nonzeros gives what the dense input gives
(products, gradients, dropout masks, a GCN's logits), and `train` uses it only where that holds."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.kernels import SparseFeatures, features_matmul, sparse_features
from codesign.models import GCN
from codesign.models.dropout import HashDropout
from codesign.train import TrainConfig, adjacency, build_model, graph_data


def _sparse_x(seed=0, n=37, f=23, density=0.1):
    rng = np.random.default_rng(seed)
    x = rng.random((n, f)).astype(np.float32) * (rng.random((n, f)) < density)
    x[3] = 0.0  # an empty row
    return x


def test_sparse_features_store_exactly_the_nonzeros():
    x = _sparse_x()
    s = sparse_features(x)
    assert s.shape == x.shape and s.nnz == np.count_nonzero(x) and s.dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(s.todense()), x)
    assert np.all(np.diff(np.asarray(s.rows)) >= 0)
    np.testing.assert_array_equal(np.asarray(s.flat_index()), np.flatnonzero(x))


@pytest.mark.parametrize("seed", [0, 1])
def test_product_and_its_gradients_match_the_dense_product(seed):
    x = _sparse_x(seed)
    s = sparse_features(x)
    w = jax.random.normal(jax.random.key(seed), (x.shape[1], 5))
    g = jax.random.normal(jax.random.key(seed + 10), (x.shape[0], 5))
    np.testing.assert_allclose(features_matmul(s, w), x @ w, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s @ w, x @ w, rtol=1e-5, atol=1e-6)
    loss = lambda v, w: jnp.sum(jnp.sin(s.with_values(v) @ w) * g)
    dv, dw = jax.grad(loss, argnums=(0, 1))(s.values, w)
    dx_dense, dw_dense = jax.grad(lambda x, w: jnp.sum(jnp.sin(x @ w) * g), argnums=(0, 1))(jnp.asarray(x), w)
    np.testing.assert_allclose(dw, dw_dense, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dv, np.asarray(dx_dense)[np.nonzero(x)], rtol=1e-5, atol=1e-6)
    # vmapped over a seed axis of values and weights: each slice as alone
    vs, ws = jnp.stack([s.values, 2 * s.values]), jnp.stack([w, -w])
    out = jax.vmap(lambda v, w: s.with_values(v) @ w)(vs, ws)
    np.testing.assert_allclose(out[1], (2 * x) @ (-w), rtol=1e-5, atol=1e-5)


def test_hash_dropout_drops_the_stored_entries_as_it_drops_the_dense_tensor():
    x = _sparse_x(density=0.3)
    s = sparse_features(x)
    dense = HashDropout(0.5, rngs=nnx.Rngs(dropout=7))(jnp.asarray(x))
    sparse = HashDropout(0.5, rngs=nnx.Rngs(dropout=7))(s)
    assert isinstance(sparse, SparseFeatures)
    np.testing.assert_array_equal(np.asarray(sparse.todense()), np.asarray(dense))
    assert 0 < np.count_nonzero(np.asarray(sparse.values)) < s.nnz


@pytest.mark.parametrize("bits", [None, 4])
def test_gcn_trains_on_the_nonzeros_as_on_the_dense_input(cora, bits):
    cfg = TrainConfig.from_flat(seed=0, bits=bits)
    models = [build_model(cfg, cora, nnx.Rngs(params=0, dropout=1, gates=2, quant=3)) for _ in range(2)]
    assert models[0].takes_sparse_input()
    adj, x = adjacency(cora), sparse_features(cora.x)

    def loss(m, x):
        return jnp.sum(jax.nn.log_softmax(m(x, adj))[:, 0])
    for m in models:
        m.train()
    dense_loss, dense_grads = nnx.value_and_grad(loss)(models[0], cora.x)
    sparse_loss, sparse_grads = nnx.value_and_grad(loss)(models[1], x)  # the same dropout draws
    np.testing.assert_allclose(sparse_loss, dense_loss, rtol=1e-5)
    if bits is None:  # (quantized, the hidden layer's largest value sits on the clipping edge of the STE:
        # whether it passes a gradient turns on the last bit of its sum, dense or sparse alike)
        for a, b in zip(jax.tree.leaves(sparse_grads), jax.tree.leaves(dense_grads)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    for m in models:
        m.eval()
    np.testing.assert_allclose(models[1](x, adj), models[0](cora.x, adj), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("method,dataset", [("codesign", "cora"), ("codesign", "wordnet"), ("degree_quant", "cora")])
def test_the_flagship_trains_on_the_nonzeros_as_on_the_dense_input(cora, method, dataset):
    """Feature mask, channel mask, edge mask and learned bits (per node on the input: A^2Q, the
    WordNet flagship; per tensor: Cora's), and Degree-Quant's protective masks, see the stored
    entries only: the same loss, gradients (every parameter: gates, steps, ranges, weights),
    data-initialised ranges and eval logits."""
    from codesign.experiment import PAPER_METHODS
    cfg = TrainConfig.for_model("gcn", seed=0, **PAPER_METHODS[method].overrides_for(dataset, "gcn"))
    assert cfg.flat()["bits"] is not None
    assert cfg.flat()["feature_mask"] or cfg.flat()["quantizer"] == "degree"
    models = [build_model(cfg, cora, nnx.Rngs(params=0, dropout=1, gates=2, quant=3)) for _ in range(2)]
    assert models[0].takes_sparse_input()
    adj, x_dense = adjacency(cora), cora.x.at[5].set(0.0)  # an empty row: its range is 0 (then 1) either way
    x = sparse_features(x_dense)

    def loss(m, x):
        return jnp.sum(jax.nn.log_softmax(m(x, adj))[:, 0])
    for m in models:
        m.train()
    dense_loss, dense_grads = nnx.value_and_grad(loss)(models[0], x_dense)
    sparse_loss, sparse_grads = nnx.value_and_grad(loss)(models[1], x)
    np.testing.assert_allclose(sparse_loss, dense_loss, rtol=1e-5)
    flat = lambda t: dict(jax.tree_util.tree_leaves_with_path(t))
    dg, sg = flat(dense_grads), flat(sparse_grads)
    assert dg.keys() == sg.keys() and len(dg) >= 4
    for k in dg:  # relative to the gradient's norm: a hidden value that rounds to the other side of a
        # code on the last bit of its sum (dense or sparse order) moves a few entries of a sum over nodes
        err = np.linalg.norm(np.asarray(sg[k]) - np.asarray(dg[k])) / max(np.linalg.norm(np.asarray(dg[k])), 1e-12)
        assert err < 1e-2, (jax.tree_util.keystr(k), err)
    for a, b in zip(jax.tree.leaves(nnx.state(models[1], nnx.Param)), jax.tree.leaves(nnx.state(models[0], nnx.Param))):
        np.testing.assert_allclose(a, b, rtol=1e-6)  # the data-initialised steps and ranges
    for m in models:
        m.eval()
    np.testing.assert_allclose(models[1](x, adj), models[0](x_dense, adj), rtol=1e-4, atol=1e-5)


def test_only_models_whose_first_layer_keeps_zeros_take_sparse_input(cora):
    takes = lambda **kw: build_model(TrainConfig.from_flat(**kw), cora, nnx.Rngs(0)).takes_sparse_input()
    assert takes() and takes(bits=8)
    assert takes(feature_mask=True) and takes(bits=8, quantizer="a2q") and takes(bits=8, quantizer="learned")
    assert not takes(bits=8, quantizer="lsq")  # a learned step size reads every element
    assert takes(bits=8, quantizer="degree")  # max-calibrated: the unprotected rows' nonzeros
    assert not takes(edge_mask=True, edge_sparsifier="scorer")  # scores edges from the features
    assert not build_model(TrainConfig.for_model("gat"), cora, nnx.Rngs(0)).takes_sparse_input()  # GNN's default


def test_train_gives_the_model_its_nonzeros_only_on_a_sparse_enough_input(cora):
    model = build_model(TrainConfig(), cora, nnx.Rngs(0))
    x = graph_data(cora, adjacency(cora), model)[2]
    assert isinstance(x, SparseFeatures) if jax.default_backend() == "cpu" else x is cora.x  # 1.27 % nonzero
    dense = cora.replace(x=jnp.ones_like(cora.x))
    assert graph_data(dense, adjacency(dense), model)[2] is dense.x


def test_bad_input_names_the_field():
    with pytest.raises(ValueError, match="x must be a non-empty float"):
        sparse_features(np.ones((3,), np.float32))
    with pytest.raises(ValueError, match="w must be"):
        features_matmul(sparse_features(_sparse_x()), jnp.ones((4, 2)))
    conv = GCN(4, 8, 2, rngs=nnx.Rngs(0)).conv1  # 4 -> 8: aggregate-first, no sparse input
    with pytest.raises(ValueError, match="x: GCNConv takes SparseFeatures only combine-first"):
        conv(sparse_features(np.eye(4, dtype=np.float32)), None)


def test_a_quantizer_that_reads_every_element_refuses_the_nonzeros():
    """A percentile-calibrated Degree-Quant counts the zeros, so it takes no `SparseFeatures`; the
    errors name ``x``. Max-calibrated, a wrong row count is refused as on the dense input."""
    from codesign.quant import DegreeQuant
    s = sparse_features(_sparse_x())
    q = DegreeQuant(8, jnp.ones(s.shape[0]), signed=False, percentile=99.0, rngs=nnx.Rngs(0))
    assert not q.takes_sparse()
    with pytest.raises(ValueError, match="x: DegreeQuant with percentile=99.0 reads every element"):
        q(s)
    q = DegreeQuant(8, jnp.ones(s.shape[0] + 1), signed=False, rngs=nnx.Rngs(0))
    assert q.takes_sparse()
    with pytest.raises(ValueError, match=f"x must have N={s.shape[0] + 1} rows"):
        q(s)
