"""`codesign.kernels.auto_impl`, the one backend chooser: it picks the candidate with the lowest
modeled cost on the device's preset (so changing the preset's parameters flips the choice), an
explicit ``impl`` overrides it, it decides from shapes under jit, and the choice is recorded."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.kernels import CooAdjacency, aggregate, auto_impl, recorded_choices, with_csr_pattern
from codesign.kernels import api, csr_cpu
from codesign.models import GAT

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="the scipy candidates run on the host CPU")


def random_adj(key, n, e):
    ks, kr = jax.random.split(key)
    s = jax.random.randint(ks, (e,), 0, n).astype(jnp.int32)
    r = jax.random.randint(kr, (e,), 0, n).astype(jnp.int32)
    return CooAdjacency(s, r, None, n)


def use_preset(monkeypatch, hw, callback_s=None):
    monkeypatch.setattr(api, "device_preset", lambda: hw)
    if callback_s is not None:
        monkeypatch.setattr(api, "callback_overhead_s", lambda: callback_s)


@pytest.mark.parametrize("op,x_shape,heads", [("spmm", (200, 16), 1), ("attention", (200, 4, 8), 4)])
def test_the_cheaper_candidate_wins_and_the_preset_decides(getkey, monkeypatch, op, x_shape, heads):
    adj = with_csr_pattern(random_adj(getkey(), 200, 2000))
    x = jnp.ones(x_shape, jnp.float32)
    scipy_name = "csr_scipy" if op == "spmm" else "csr"
    assert set(api.candidates(adj, x, op)) == {"segment" if op == "spmm" else "reference", scipy_name}
    hw = api.device_preset()
    for row_s, callback_s in ((0.0, 0.0), (1e-3, 0.0), (0.0, 1.0)):
        cheap = hw.replace(row_overhead_s=row_s)
        use_preset(monkeypatch, cheap, callback_s)
        costs = {c: api.modeled_cost_s(c, adj, x, cheap, op, heads) for c in api.candidates(adj, x, op)}
        assert auto_impl(adj, x, op=op, heads=heads) == min(costs, key=costs.get)
    use_preset(monkeypatch, hw.replace(row_overhead_s=0.0), 0.0)  # no per-row, no callback cost: CSR is cheaper
    assert auto_impl(adj, x, op=op, heads=heads) == scipy_name
    use_preset(monkeypatch, hw.replace(row_overhead_s=1e-3), 0.0)  # a millisecond per CSR output row
    assert auto_impl(adj, x, op=op, heads=heads) != scipy_name
    use_preset(monkeypatch, hw.replace(row_overhead_s=0.0), 1.0)  # a second per host callback
    assert auto_impl(adj, x, op=op, heads=heads) != scipy_name


def test_a_training_call_is_priced_with_its_backward_and_train_mode_asks_for_it(getkey, monkeypatch):
    """``training=True`` prices the forward and its backward (`hwmodel.autograd_training`: the
    attention's SDDMM and softmax x2, its SpMM x3 with the learned weights' dA) plus a second
    host callback for the scipy backend; a GAT layer in train mode asks for it, in eval mode not."""
    from codesign import hwmodel
    adj = with_csr_pattern(random_adj(getkey(), 200, 2000))
    x = jnp.ones((200, 4, 8), jnp.float32)
    hw = api.device_preset()
    use_preset(monkeypatch, hw, 0.25)
    n, e = 200, 2000
    sddmm, softmax, spmm = hwmodel.attention_stages(n, e, 4, 8, 32.0, 32.0)
    cost = lambda *st: sum(float(hwmodel.stage_cost(s, hw).latency_s) for s in st)
    assert api.modeled_cost_s("csr", adj, x, hw, "attention", 4) == pytest.approx(cost(sddmm, softmax, spmm) + 0.25)
    assert api.modeled_cost_s("csr", adj, x, hw, "attention", 4, training=True) == pytest.approx(
        cost(sddmm, sddmm, softmax, softmax, spmm, spmm, spmm) + 0.5, rel=1e-5)
    asked = []
    real = api.auto_impl
    monkeypatch.setattr("codesign.models.gat.auto_impl", lambda *a, **k: asked.append(k["training"]) or real(*a, **k))
    m = GAT(8, 4, 3, heads=2, rngs=nnx.Rngs(0))
    h = jnp.ones((200, 2, 4))
    m.train()
    m.conv1.attention_backend(adj, h)
    m.eval()
    m.conv1.attention_backend(adj, h)
    assert asked == [True, False]


def test_the_measured_callback_cost_keeps_tiny_products_on_segment_sum(getkey):
    adj = with_csr_pattern(random_adj(getkey(), 10, 30))
    x = jnp.ones((10, 4), jnp.float32)
    assert api.callback_overhead_s() > 0
    assert auto_impl(adj, x) == "segment"


def test_an_explicit_impl_overrides_the_chooser(getkey, monkeypatch):
    calls = []
    spmm_host = csr_cpu._spmm_host
    monkeypatch.setattr(csr_cpu, "_spmm_host", lambda *a: calls.append(1) or spmm_host(*a))
    use_preset(monkeypatch, api.device_preset().replace(row_overhead_s=0.0), 0.0)
    adj = with_csr_pattern(random_adj(getkey(), 50, 400))
    x = jax.random.normal(getkey(), (50, 8))
    assert auto_impl(adj, x) == "csr_scipy"
    aggregate(adj, x, impl="segment")
    assert not calls
    aggregate(adj, x)
    assert calls == [1]
    loops = with_csr_pattern(random_adj(getkey(), 50, 400), self_loops=False)
    m = GAT(8, 4, 3, heads=2, impl="reference", rngs=nnx.Rngs(0))
    h = jnp.ones((50, 2, 4))
    assert m.conv1.attention_backend(loops, h) == "reference"
    assert GAT(8, 4, 3, heads=2, rngs=nnx.Rngs(0)).conv1.attention_backend(loops, h) == "csr"


def test_choice_is_static_under_jit_and_recorded(getkey, monkeypatch):
    use_preset(monkeypatch, api.device_preset().replace(row_overhead_s=0.0), 0.0)
    adj = with_csr_pattern(random_adj(getkey(), 50, 400))
    x = jax.random.normal(getkey(), (50, 8))
    with recorded_choices() as eager:
        want = aggregate(adj, x)
    with recorded_choices() as traced:
        got = jax.jit(lambda x: aggregate(adj, x))(x)
    assert eager == traced == {"aggregate": ["csr_scipy"]}
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    use_preset(monkeypatch, api.device_preset(), None)
    with recorded_choices() as outer:
        with recorded_choices() as inner:
            m = GAT(8, 4, 3, heads=2, rngs=nnx.Rngs(0))
            m.eval()
            m(x, random_adj(getkey(), 50, 400))  # no CsrPattern: the reference attention only
    assert inner == outer == {"attention": ["reference"]}


def test_unknown_op_and_nothing_allowed_are_refused(getkey):
    adj = random_adj(getkey(), 10, 30)
    x = jnp.ones((10, 4), jnp.float32)
    with pytest.raises(ValueError, match="op must be"):
        auto_impl(adj, x, op="softmax")
    with pytest.raises(ValueError, match="no attention backend"):
        auto_impl(adj, x, op="attention", allowed=("pallas",))


def test_a_csr_pattern_is_a_candidate_only_for_the_adjacency_it_describes(getkey):
    """A pattern built with the N self-loops (GCN, GAT) describes E + N entries: GraphSAGE's E-edge
    adjacency must not run it (scipy would read the wrong structure), the looped one may."""
    s = jnp.array([0, 1, 2, 3]); r = jnp.array([1, 2, 3, 0])
    x = jax.random.normal(getkey(), (4, 3))
    looped_pattern = with_csr_pattern(CooAdjacency(s, r, None, 4), self_loops=True).pattern
    bare = CooAdjacency(s, r, None, 4, looped_pattern)
    assert "csr_scipy" not in api.candidates(bare, x)
    looped = CooAdjacency(jnp.concatenate([s, jnp.arange(4)]), jnp.concatenate([r, jnp.arange(4)]), None, 4,
                          looped_pattern)
    assert api.candidates(looped, x) == ("segment", "csr_scipy")


@pytest.mark.parametrize("model", ["gcn", "sage"])
def test_training_attaches_the_pattern_of_the_edges_the_model_aggregates(model):
    """`codesign.train.adjacency` with the model's SELF_LOOPS: a `CsrPattern` of E + N entries for
    GCN (it appends self-loops), E for GraphSAGE; none without SELF_LOOPS (or off the CPU)."""
    from codesign.data import rmat_graph
    from codesign.models import MODELS
    from codesign.train import adjacency
    g = rmat_graph(6, 300, n_features=4, n_classes=3, seed=0)
    adj = adjacency(g, MODELS[model].SELF_LOOPS)
    assert isinstance(adj.pattern, csr_cpu.CsrPattern)
    assert adj.pattern.n_entries == g.n_edges + (g.n_nodes if model == "gcn" else 0)
    assert adjacency(g).pattern is None
