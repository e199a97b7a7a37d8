"""The layer protocol: every model aggregates through the function its constructor is given
(jraph's ``GraphConvolution(aggregate_nodes_fn=...)``), so an injected aggregation is the one run
and an equivalent one gives the same logits; a model's workload is its layers' workloads; `GNN`,
`Layer` and `Quantizer` are abstract bases."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codesign import hwmodel
from codesign.kernels import CooAdjacency, aggregate
from codesign.models import MODELS
from codesign.models.base import GNN
from codesign.models.layers import hidden_elementwise_ops
from codesign.models.layers import QUANTIZERS, Layer, graph_counts, make_quantizer
from codesign.quant import FakeQuant, Quantizer

N, IN, HIDDEN, CLASSES = 16, 10, 6, 3

# calls per forward trace: one per layer (R-GCN: one per relation and layer; APPNP: the K steps
# are one `fori_loop` body, traced once; GAT: its edge path, taken with an edge mask)
CALLS = {"gcn": 2, "gin": 2, "sage": 2, "gat": 2, "rgcn": 2, "appnp": 1}


def _graph():
    rng = np.random.default_rng(0)
    s, r = rng.integers(0, N, 50), rng.integers(0, N - 1, 50)
    keep = s != r
    adj = CooAdjacency(jnp.asarray(s[keep], jnp.int32), jnp.asarray(r[keep], jnp.int32), None, N)
    return adj, jnp.asarray(rng.random((N, IN)), jnp.float32)


def _build(name, adj, aggregate_fn):
    kw = {"k_hops": 3} if name == "appnp" else {}
    model = MODELS[name](IN, HIDDEN, CLASSES, n_edges=adj.n_edges, feature_mask=True, bits=8,
                         aggregate_fn=aggregate_fn, rngs=nnx.Rngs(0), **kw)
    model.eval()
    return model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_injected_aggregation_is_run_and_gives_the_same_logits(name):
    adj, x = _graph()
    calls = []

    def dense(a, y, impl="auto"):  # another implementation of the same A @ y
        calls.append(y.shape)
        return aggregate(a, y, impl="dense")

    ref = _build(name, adj, aggregate)(x, adj)
    out = _build(name, adj, dense)(x, adj)
    assert len(calls) == CALLS[name], calls
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref), rtol=1e-5, atol=1e-5)

    # and the logits depend on it: a doubled aggregation changes them
    doubled = _build(name, adj, lambda a, y, impl="auto": 2.0 * aggregate(a, y, impl=impl))(x, adj)
    assert float(jnp.max(jnp.abs(doubled - ref))) > 1e-3


def test_gnn_is_abstract():
    class NoWorkload(GNN):
        def __init__(self):
            pass

        def __call__(self, x, adj):
            return x

        def densities(self, hard=False):
            return {}

    with pytest.raises(TypeError, match="abstract.*workload"):
        NoWorkload()
    with pytest.raises(TypeError, match="abstract"):
        GNN()


def test_quantizer_is_abstract_and_every_kind_derives_from_it():
    class NoHardBits(Quantizer):
        def __call__(self, x):
            return x

        def expected_bits(self):
            return jnp.float32(32)

    with pytest.raises(TypeError, match="abstract.*hard_bits"):
        NoHardBits()
    deg = jnp.arange(1, N + 1)
    for kind in QUANTIZERS:
        for node_wise in (True, False):
            q = make_quantizer(kind, 4, signed=not node_wise, node_wise=node_wise, in_degree=deg, rngs=nnx.Rngs(0))
            assert isinstance(q, Quantizer), (kind, node_wise, type(q))
    assert isinstance(FakeQuant(None), Quantizer)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_declares_its_masks_and_first_layer(name):
    adj, _ = _graph()
    with_masks = _build(name, adj, aggregate)
    bare = MODELS[name](IN, HIDDEN, CLASSES, rngs=nnx.Rngs(0))
    assert isinstance(with_masks, GNN)
    assert with_masks.edge_mask is not None and with_masks.feature_mask is not None
    assert bare.edge_mask is None and bare.feature_mask is None
    assert bare.first_layer is getattr(bare, type(bare).FIRST_LAYER) and isinstance(bare.first_layer, nnx.Module)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_workload_is_the_concatenation_of_its_layers(name):
    """Every parameterized child of a model is a `Layer`, and the model's workload holds exactly
    its layers' stages (fp32 without masks: every layer at its own widths and bits)."""
    model = MODELS[name](IN, HIDDEN, CLASSES, rngs=nnx.Rngs(0))
    children = [(path[0], node) for path, node in nnx.iter_graph(model) if len(path) == 1]
    layers = [node for _, node in children if isinstance(node, Layer)]
    for attr, node in children:
        if isinstance(node, nnx.Module) and attr.startswith(("conv", "lin")):
            assert isinstance(node, Layer), (attr, type(node))
    e = 50
    for training in (False, True):
        graph = graph_counts(N, e, model.densities(), relation_edges=[e] if name == "rgcn" else None)
        # the GCN and GraphSAGE price their ReLU (and gate, run-time quantization) in their first layer's elementwise stage
        extra = lambda i: ({"elementwise_ops": hidden_elementwise_ops(model.channel_mask is not None,
                                                                      model.conv2.input_bits(False))}
                           if name in ("gcn", "sage") and i == 0 else {})
        want = [st for i, layer in enumerate(layers) for lw in layer.workload("l", graph, **extra(i))
                for st in lw.aggregate_first + lw.combine_first + lw.elementwise]
        wl = model.workload(N, e)
        if training:  # the training step: the one rule applied to the forward (no edge mask here: no dA but GAT's)
            wl = hwmodel.autograd_training(wl, learned_edge_weights=name == "gat")
            want_train = model.workload(N, e, training=True)
            assert jax.tree.structure(want_train) == jax.tree.structure(wl)
            for x, y in zip(jax.tree.leaves(want_train), jax.tree.leaves(wl)):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
            continue
        got = [st for lw in wl.layers for st in lw.aggregate_first + lw.combine_first + lw.elementwise]
        assert len(got) == len(want) > 0
        for a, b in zip(got, want):
            assert a.kind == b.kind
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_layer_is_abstract():
    class NoWorkload(Layer):
        def __call__(self, x):
            return x

        def input_bits(self, hard=False):
            return jnp.float32(32)

    with pytest.raises(TypeError, match="abstract.*workload"):
        NoWorkload()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.sampled_from([1, 2, 4]), bits=st.integers(2, 8), signed=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_fake_quant_axis_name_gives_the_whole_tensors_scale(blocks, bits, signed, seed):
    """A tensor split over a mapped axis (here `jax.vmap`, as `shard_map` in
    `codesign.distributed`) quantizes with the scale of the whole tensor: the same values as
    unsplit (random magnitudes per block, so the blocks' own maxima differ)."""
    from codesign.quant import fake_quant
    rng = np.random.default_rng(seed)
    x = np.asarray(rng.normal(size=(blocks, 4, 3)) * rng.uniform(0.1, 10.0, (blocks, 1, 1)), np.float32)
    whole = fake_quant(jnp.asarray(x.reshape(-1, 3)), bits, signed=signed).reshape(x.shape)
    split = jax.vmap(FakeQuant(bits, signed=signed, axis_name="dev"), axis_name="dev")(jnp.asarray(x))
    np.testing.assert_array_equal(np.asarray(split), np.asarray(whole))


def test_fake_quant_axis_name_gradient_and_own_scale_without_it():
    """The STE gradient of the split tensor is the whole tensor's; without ``axis_name`` each
    block uses its own scale (different values)."""
    from codesign.quant import fake_quant
    x = jnp.asarray(np.random.default_rng(1).normal(size=(4, 5, 3)) * np.arange(1, 5)[:, None, None], jnp.float32)
    whole = lambda v: fake_quant(v.reshape(20, 3), 4).reshape(v.shape)
    q = FakeQuant(4, axis_name="dev")
    g_split = jax.grad(lambda v: jnp.sum(jax.vmap(q, axis_name="dev")(v) ** 2))(x)
    g_whole = jax.grad(lambda v: jnp.sum(whole(v) ** 2))(x)
    np.testing.assert_allclose(np.asarray(g_split), np.asarray(g_whole), rtol=1e-6)
    own = jax.vmap(lambda b: fake_quant(b, 4))(x)
    assert float(jnp.max(jnp.abs(own - whole(x)))) > 0
