"""Tests for codesign.graph: validation, pytree behaviour, scipy conversion, self-loops."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.graph import Graph, add_self_loops, from_scipy, to_scipy, validate


def _fields(n=4, f=3):
    """Fields of a valid 4-node directed cycle 0 -> 1 -> 2 -> 3 -> 0."""
    return dict(
        senders=jnp.array([3, 0, 1, 2], jnp.int32), receivers=jnp.array([0, 1, 2, 3], jnp.int32),
        x=jnp.arange(n * f, dtype=jnp.float32).reshape(n, f), y=jnp.array([0, 1, 2, 1], jnp.int32),
        train_mask=jnp.array([True, True, False, False]), val_mask=jnp.array([False, False, True, False]),
        test_mask=jnp.array([False, False, False, True]), n_nodes=n)


def _graph(**changes):
    return Graph(**{**_fields(), **changes})


def test_valid_graph_properties():
    g = _graph(edge_weight=jnp.ones(4, jnp.float32))
    assert (g.n_nodes, g.n_edges, g.n_features, g.n_classes) == (4, 4, 3, 3)
    validate(g)
    assert g.replace(y=jnp.zeros(4, jnp.int32)).n_classes == 1


@pytest.mark.parametrize("field, changes", [
    ("senders", dict(senders=jnp.array([3, 0, 1, 4], jnp.int32))),        # out of range
    ("receivers", dict(receivers=jnp.array([0, 1, -1, 3], jnp.int32))),    # negative
    ("receivers", dict(receivers=jnp.array([0, 1, 2], jnp.int32))),        # length mismatch
    ("senders", dict(senders=jnp.array([3.0, 0.0, 1.0, 2.0]))),            # not integer
    ("x", dict(x=jnp.array([[0.0, 1, 2], [3, jnp.nan, 5], [6, 7, 8], [9, 10, 11]]))),
    ("x", dict(x=jnp.ones((3, 3)))),                                       # wrong row count
    ("x", dict(x=jnp.ones((4, 3), jnp.int32))),                            # not floating
    ("y", dict(y=jnp.zeros((4, 1), jnp.int32))),                           # wrong shape
    ("y", dict(y=jnp.array([0, -1, 0, 0], jnp.int32))),                    # negative label
    ("train_mask", dict(train_mask=jnp.array([1, 1, 0, 0], jnp.int32))),   # not bool
    ("test_mask", dict(test_mask=jnp.array([True, False]))),               # wrong length
    ("edge_weight", dict(edge_weight=jnp.ones(3, jnp.float32))),           # wrong length
    ("edge_weight", dict(edge_weight=jnp.array([1.0, jnp.inf, 1.0, 1.0]))),
    ("edge_type", dict(edge_type=jnp.array([0, 1, 0], jnp.int32))),
    ("n_nodes", dict(n_nodes=0)),
])
def test_validation_names_field(field, changes):
    with pytest.raises(ValueError, match=rf"Graph\.{field}\b"):
        _graph(**changes)


def test_replace_revalidates():
    with pytest.raises(ValueError, match=r"Graph\.senders"):
        _graph().replace(senders=jnp.array([0, 0, 0, 9], jnp.int32))


def test_numpy_fields_are_validated_too():
    fields = {k: (np.asarray(v) if k != "n_nodes" else v) for k, v in _fields().items()}
    Graph(**fields)
    fields["x"] = fields["x"].copy()
    fields["x"][0, 0] = np.inf
    with pytest.raises(ValueError, match=r"Graph\.x: has 1 non-finite"):
        Graph(**fields)


def test_empty_edge_set_is_valid():
    g = _graph(senders=jnp.zeros(0, jnp.int32), receivers=jnp.zeros(0, jnp.int32))
    assert g.n_edges == 0 and to_scipy(g).nnz == 0


def test_graph_through_jit():
    g = _graph(edge_weight=jnp.full(4, 0.5, jnp.float32))

    @jax.jit
    def f(g: Graph):
        agg = jax.ops.segment_sum(g.x[g.senders] * g.edge_weight[:, None], g.receivers,
                                  num_segments=g.n_nodes)  # n_nodes is static
        return agg, g.replace(x=agg)

    agg, g2 = f(g)
    expected = to_scipy(g) @ np.asarray(g.x)
    np.testing.assert_allclose(agg, expected, rtol=1e-6)
    assert isinstance(g2, Graph) and g2.n_nodes == 4
    np.testing.assert_allclose(g2.x, expected, rtol=1e-6)
    leaves, treedef = jax.tree.flatten(g)
    assert len(leaves) == 8  # None fields (edge_type) are empty subtrees; n_nodes is static
    assert jax.tree.unflatten(treedef, leaves).n_nodes == 4


def test_to_scipy_from_scipy_round_trip():
    g = _graph(edge_weight=jnp.array([1.0, 2.0, 3.0, 4.0], jnp.float32))
    a = to_scipy(g)
    assert a.shape == (4, 4) and a[0, 3] == 1.0 and a[3, 2] == 4.0  # A[receiver, sender]
    np.testing.assert_array_equal(to_scipy(g, weighted=False).toarray(), (a.toarray() != 0))
    h = from_scipy(a, g.x, g.y, g.train_mask, g.val_mask, g.test_mask, weighted=True)
    for name in ("senders", "receivers", "edge_weight", "x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(getattr(h, name), getattr(g, name), err_msg=name)
    assert h.senders.dtype == jnp.int32 and h.n_nodes == 4
    assert from_scipy(a, g.x, g.y, g.train_mask, g.val_mask, g.test_mask).edge_weight is None


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 12), st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=40))
def test_scipy_round_trip_random(n, pairs):
    dense = np.zeros((n, n), np.float32)
    for r, s in pairs:
        dense[r % n, s % n] = 1.0
    a = sp.csr_matrix(dense)
    z = np.zeros(n, bool)
    loops = int(np.trace(dense))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = from_scipy(a, np.ones((n, 2)), np.zeros(n), z, z, z)
    # a Graph holds no self-loops: diagonal entries are dropped, with a warning saying how many
    assert [str(w.message) for w in caught] == ([f"from_scipy: dropped {loops} self-loop(s) (diagonal entries); "
                                                 "the models add their own"] if loops else [])
    np.fill_diagonal(dense, 0.0)
    np.testing.assert_array_equal(to_scipy(g).toarray(), dense)
    order = np.lexsort((np.asarray(g.senders), np.asarray(g.receivers)))
    np.testing.assert_array_equal(order, np.arange(g.n_edges))  # sorted by (receiver, sender)


def test_add_self_loops():
    g = _graph()
    s, r = add_self_loops(g.senders, g.receivers, g.n_nodes)
    assert s.shape == r.shape == (8,) and s.dtype == r.dtype == jnp.int32
    np.testing.assert_array_equal(s[:4], g.senders)
    np.testing.assert_array_equal(r[:4], g.receivers)
    np.testing.assert_array_equal(s[4:], np.arange(4))
    np.testing.assert_array_equal(r[4:], np.arange(4))
    a = sp.csr_matrix((np.ones(8), (np.asarray(r), np.asarray(s))), shape=(4, 4))
    np.testing.assert_array_equal(a.diagonal(), np.ones(4))
    with pytest.raises(ValueError, match=r"Graph\.senders: 4 self-loop"):  # a Graph holds none
        g.replace(senders=s, receivers=r)
    s_jit, _ = jax.jit(add_self_loops, static_argnums=2)(g.senders, g.receivers, 4)
    np.testing.assert_array_equal(s_jit, s)


def test_keep_edges_slices_every_per_edge_field():
    import numpy as np
    import pytest
    from codesign.graph import Graph
    n = 4
    g = Graph(np.array([0, 1, 2, 3], np.int32), np.array([1, 2, 3, 0], np.int32), np.ones((n, 2), np.float32),
              np.array([0, 1, 0, 1], np.int32), np.ones(n, bool), np.zeros(n, bool), np.zeros(n, bool),
              edge_weight=np.array([1.0, 2.0, 3.0, 4.0], np.float32), edge_type=np.array([0, 1, 0, 1], np.int32),
              n_nodes=n)
    sub = g.keep_edges(np.array([True, False, True, False]))
    assert sub.n_edges == 2 and sub.n_nodes == n
    np.testing.assert_array_equal(sub.senders, [0, 2])
    np.testing.assert_array_equal(sub.receivers, [1, 3])
    np.testing.assert_array_equal(sub.edge_weight, [1.0, 3.0])
    np.testing.assert_array_equal(sub.edge_type, [0, 0])
    with pytest.raises(ValueError, match="keep_edges"):
        g.keep_edges(np.array([1, 0, 1, 0]))
    with pytest.raises(ValueError, match="keep_edges"):
        g.keep_edges(np.ones(3, bool))
