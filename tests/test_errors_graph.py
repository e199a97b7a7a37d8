"""Bad input at the graph, adjacency and model boundaries: one case per class, each asserting the
error type and that the message names the field; hypothesis properties for the validators."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.data import from_edge_index
from codesign.graph import Graph, from_scipy
from codesign.kernels import CooAdjacency, aggregate
from codesign.models import APPNP, GAT, GCN, GIN, RGCN, GraphSAGE


def _graph_fields(n=4, senders=(0, 1, 2), receivers=(1, 2, 3)):
    return dict(senders=list(senders), receivers=list(receivers), x=[[1.0, 0.0]] * n, y=[0, 1] * (n // 2),
                train_mask=[True] * n, val_mask=[False] * n, test_mask=[False] * n, n_nodes=n)


# ---------------------------------------------------------------------------------------------
# Graph
# ---------------------------------------------------------------------------------------------

def test_graph_from_python_lists_is_validated_and_cast():
    g = Graph(**_graph_fields())
    assert g.senders.dtype == jnp.int32 and g.x.dtype == jnp.float32 and g.train_mask.dtype == jnp.bool_
    assert isinstance(g.senders, jax.Array)


@pytest.mark.parametrize("field, value, match", [
    ("senders", [0, 1, 9], r"Graph\.senders: index out of range \[0, 4\)"),
    ("receivers", [1, -1, 3], r"Graph\.receivers: index out of range"),
    ("senders", [0.0, 1.5, 2.0], r"Graph\.senders: must be integer"),   # a float id is not truncated
    ("receivers", [1, 2], r"Graph\.receivers: shape \(2,\) does not match"),
    ("x", [[1.0, float("nan")]] * 4, r"Graph\.x: has 4 non-finite"),
    ("x", [[1.0]] * 3, r"Graph\.x: must be \[n_nodes=4, F\]"),
    ("y", [0, -1, 0, 1], r"Graph\.y: labels must be >= 0"),
    ("y", [0.5, 1, 0, 1], r"Graph\.y: must be integer"),
    ("train_mask", [1, 0, 0, 1], r"Graph\.train_mask: must be bool"),
    ("n_nodes", True, r"Graph\.n_nodes: must be a positive int"),
    ("n_nodes", 4.0, r"Graph\.n_nodes: must be a positive int"),
])
def test_graph_refuses_bad_fields_given_as_lists(field, value, match):
    fields = _graph_fields()
    fields[field] = value
    with pytest.raises(ValueError, match=match):
        Graph(**fields)


def test_graph_refuses_self_loops_and_says_how_to_drop_them():
    with pytest.raises(ValueError, match=r"Graph\.senders: 4 self-loop\(s\).*without_self_loops"):
        Graph(**_graph_fields(senders=(0, 1, 2, 3), receivers=(0, 1, 2, 3)))   # self-loops only
    fields = _graph_fields(senders=(0, 1, 2), receivers=(1, 2, 3))
    g = Graph(**fields)
    assert g.without_self_loops().n_edges == 3


def test_converters_drop_self_loops_with_a_warning():
    ei = np.array([[0, 1, 2, 2], [1, 1, 3, 2]])
    x, y = np.ones((4, 2), np.float32), np.array([0, 1, 0, 1])
    with pytest.warns(UserWarning, match="dropped 2 self-loop"):
        g = from_edge_index(ei, x, y, edge_weight=np.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_array_equal(np.asarray(g.senders), [0, 2])
    np.testing.assert_array_equal(np.asarray(g.edge_weight), [1.0, 3.0])
    import scipy.sparse as sp
    with pytest.warns(UserWarning, match="dropped 4 self-loop"):
        g = from_scipy(sp.eye(4, format="csr"), x, y, *(np.zeros(4, bool),) * 3)
    assert g.n_edges == 0


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(-2, n + 2), st.integers(-2, n + 2)), max_size=30))))
def test_graph_validator_property(case):
    """Any index list is either a valid graph (in range, no self-loop) that keeps its edges, or
    is refused with a ValueError naming senders or receivers."""
    n, edges = case
    s = [a for a, _ in edges]
    r = [b for _, b in edges]
    fields = dict(senders=np.array(s, np.int64), receivers=np.array(r, np.int64), x=np.ones((n, 3), np.float32),
                  y=np.zeros(n, np.int32), train_mask=np.ones(n, bool), val_mask=np.zeros(n, bool),
                  test_mask=np.zeros(n, bool), n_nodes=n)
    valid = all(0 <= a < n and 0 <= b < n and a != b for a, b in edges)
    if valid:
        g = Graph(**fields)
        np.testing.assert_array_equal(np.asarray(g.senders), s)
        np.testing.assert_array_equal(np.asarray(g.receivers), r)
    else:
        with pytest.raises(ValueError, match=r"Graph\.(senders|receivers): "):
            Graph(**fields)


# ---------------------------------------------------------------------------------------------
# CooAdjacency / aggregate
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    (dict(senders=[0, 5], receivers=[1, 2]), r"CooAdjacency\.senders: index out of range \[0, 3\)"),
    (dict(senders=[0, -1], receivers=[1, 2]), r"CooAdjacency\.senders: index out of range"),
    (dict(senders=[0, 1], receivers=[1, 3]), r"CooAdjacency\.receivers: index out of range"),
    (dict(senders=[0, 1], receivers=[1]), r"CooAdjacency\.receivers: length 1 does not match senders length 2"),
    (dict(senders=[0, 1], receivers=[1, 2], edge_weight=[1.0, 1.0, 1.0]), r"CooAdjacency\.edge_weight: must be \[E=2\]"),
    (dict(senders=[0.0, 1.0], receivers=[1, 2]), r"CooAdjacency\.senders: must be a 1-D integer array"),
    (dict(senders=[0, 1], receivers=[1, 2], n_nodes=0), r"CooAdjacency\.n_nodes: must be a positive int"),
])
def test_coo_adjacency_refuses_bad_fields(kw, match):
    kw = {"n_nodes": 3, **kw}
    arrays = {k: jnp.asarray(v) for k, v in kw.items() if k != "n_nodes"}
    with pytest.raises(ValueError, match=match):
        CooAdjacency(**arrays, n_nodes=kw["n_nodes"])


def test_coo_adjacency_shapes_are_checked_under_jit_ranges_are_not():
    """Shapes are static: a length mismatch is refused inside jit too. Index values are tracers
    there, so ranges are only checked outside (documented on CooAdjacency)."""
    @jax.jit
    def build(s, r):
        return aggregate(CooAdjacency(s, r, None, n_nodes=3), jnp.ones((3, 2))).sum()

    with pytest.raises(ValueError, match=r"CooAdjacency\.receivers: length"):
        build(jnp.array([0, 1]), jnp.array([1]))
    assert np.isfinite(float(build(jnp.array([0, 1]), jnp.array([1, 2]))))


def test_aggregate_refuses_x_of_the_wrong_height():
    adj = CooAdjacency(jnp.array([0, 1]), jnp.array([1, 2]), None, n_nodes=3)
    with pytest.raises(ValueError, match=r"aggregate: x must be \[n_nodes=3, F\]"):
        aggregate(adj, jnp.ones((4, 2)))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 10).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=25),
    st.integers(1, 4))))
def test_aggregate_equals_dense_reference_on_every_cpu_backend(case):
    n, edges, f = case
    s = np.array([a for a, _ in edges], np.int32)
    r = np.array([b for _, b in edges], np.int32)
    w = np.linspace(0.5, 2.0, len(edges)).astype(np.float32)
    x = np.arange(n * f, dtype=np.float32).reshape(n, f) / 7.0
    dense = np.zeros((n, n), np.float32)
    np.add.at(dense, (r, s), w)
    adj = CooAdjacency(jnp.asarray(s), jnp.asarray(r), jnp.asarray(w), n_nodes=n)
    for impl in ("segment", "dense"):
        np.testing.assert_allclose(np.asarray(aggregate(adj, jnp.asarray(x), impl=impl)), dense @ x,
                                   rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------

MODELS = [("GCN", GCN, {}), ("GAT", GAT, {}), ("GraphSAGE", GraphSAGE, {}), ("GIN", GIN, {}),
          ("APPNP", APPNP, {}), ("RGCN", RGCN, {})]


@pytest.mark.parametrize("name, cls, kw", MODELS)
@pytest.mark.parametrize("widths, field", [((0, 8, 3), "in_features"), ((5, 0, 3), "hidden"),
                                           ((5, 8, 0), "n_classes"), ((5.0, 8, 3), "in_features")])
def test_models_refuse_zero_widths_naming_the_argument(name, cls, kw, widths, field):
    with pytest.raises(ValueError, match=rf"{name}: {field} must be an int >= 1"):
        cls(*widths, rngs=nnx.Rngs(0), **kw)


def test_gat_refuses_zero_heads():
    with pytest.raises(ValueError, match=r"GAT: heads must be an int >= 1, got 0"):
        GAT(5, 8, 3, heads=0, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("name, cls, kw", MODELS)
def test_models_name_both_widths_when_x_does_not_fit(name, cls, kw):
    adj = CooAdjacency(jnp.array([0, 1]), jnp.array([1, 2]), None, n_nodes=3)
    model = cls(5, 8, 3, rngs=nnx.Rngs(0), **kw)
    with pytest.raises(ValueError, match=rf"x: {name} expects 5 input features, got 4"):
        model(jnp.ones((3, 4)), adj)
    with pytest.raises(ValueError, match=rf"x: {name} got 4 rows of features for an adjacency of 3 nodes"):
        model(jnp.ones((4, 5)), adj)
    assert model(jnp.ones((3, 5)), adj).shape == (3, 3)


def test_gcn_runs_an_injected_aggregation():
    """GCNConv takes its aggregation as an argument (jraph-style): a dense aggregation gives the
    same logits as the default kernel, and it is the one called."""
    from codesign.kernels import aggregate as default_aggregate
    calls = []

    def dense(adj, x, impl="auto"):
        calls.append(x.shape)
        return default_aggregate(adj, x, impl="dense")

    adj = CooAdjacency(jnp.array([0, 1, 2]), jnp.array([1, 2, 0]), None, n_nodes=3)
    x = jnp.arange(15.0).reshape(3, 5) / 10
    ref = GCN(5, 4, 2, rngs=nnx.Rngs(0))
    injected = GCN(5, 4, 2, aggregate_fn=dense, rngs=nnx.Rngs(0))
    ref.eval(), injected.eval()
    np.testing.assert_allclose(np.asarray(injected(x, adj)), np.asarray(ref(x, adj)), rtol=1e-6, atol=1e-6)
    assert len(calls) == 2  # one aggregation per layer
