"""Tests for codesign.data.convert: edge_index, SciPy and NetworkX round trips."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from codesign import graph as cgraph
from codesign.data import convert, csbm, hetero_sbm
from codesign.data.convert import from_edge_index, from_networkx, from_scipy, to_edge_index, to_networkx, to_scipy

FIELDS = ("senders", "receivers", "x", "y", "train_mask", "val_mask", "test_mask", "edge_weight", "edge_type")


@pytest.fixture
def graph():
    g = hetero_sbm(60, 4, n_classes=3, avg_degree=2, seed=0)
    w = np.random.default_rng(0).uniform(0.5, 2.0, g.n_edges).astype(np.float32)
    return g.replace(edge_weight=w)


def assert_same(a, b, fields=FIELDS):
    assert a.n_nodes == b.n_nodes
    for f in fields:
        va, vb = getattr(a, f), getattr(b, f)
        assert (va is None) == (vb is None), f
        if va is not None:
            np.testing.assert_array_equal(np.asarray(va), np.asarray(vb), err_msg=f)


def test_scipy_is_reexported_not_duplicated():
    assert convert.to_scipy is cgraph.to_scipy and convert.from_scipy is cgraph.from_scipy


def test_edge_index_round_trip(graph):
    ei = to_edge_index(graph)
    assert ei.shape == (2, graph.n_edges) and ei.dtype == np.int64
    np.testing.assert_array_equal(ei[0], np.asarray(graph.senders))
    back = from_edge_index(ei, graph.x, graph.y, graph.train_mask, graph.val_mask, graph.test_mask,
                           edge_weight=graph.edge_weight, edge_type=graph.edge_type)
    assert_same(back, graph)


def test_edge_index_defaults_and_errors(graph):
    g = from_edge_index(to_edge_index(graph), graph.x, graph.y)
    assert g.edge_weight is None and not np.asarray(g.train_mask).any()
    g = from_edge_index(np.zeros((2, 0), np.int64), np.zeros((5, 2)), np.zeros(5, int))
    assert g.n_edges == 0 and g.n_nodes == 5
    g = from_edge_index([[0], [1]], np.zeros((2, 1)), [0, 0], n_nodes=2)
    assert g.n_edges == 1
    with pytest.raises(ValueError, match="edge_index"):
        from_edge_index(np.zeros((3, 4), int), graph.x, graph.y)
    with pytest.raises(ValueError, match="edge_index"):
        from_edge_index(np.zeros((2, 4)), graph.x, graph.y)
    with pytest.raises(ValueError, match="edge_index"):
        from_edge_index(np.array([[0], [graph.n_nodes]]), graph.x, graph.y)
    with pytest.raises(ValueError, match="Graph.y"):
        from_edge_index(to_edge_index(graph), graph.x, np.zeros(3, int))
    with pytest.raises(ValueError, match=rf"^from_edge_index: edge_type must be \[E={graph.n_edges}\], got shape \(2,\)$"):
        from_edge_index(to_edge_index(graph), graph.x, graph.y, edge_type=np.zeros(2, int))


def test_scipy_round_trip():
    g = csbm(80, 3, avg_degree=4, homophily=0.7, mu=1.0, seed=0)  # simple: no repeated pair
    w = np.random.default_rng(0).uniform(0.5, 2.0, g.n_edges).astype(np.float32)
    perm = np.random.default_rng(1).permutation(g.n_edges)  # shuffled: CSR re-sorts
    graph = g.replace(senders=g.senders[perm], receivers=g.receivers[perm], edge_weight=w)
    adj = to_scipy(graph)
    assert adj.shape == (graph.n_nodes,) * 2 and adj.nnz == graph.n_edges
    back = from_scipy(adj, graph.x, graph.y, graph.train_mask, graph.val_mask, graph.test_mask, weighted=True)
    # CSR orders by (row = receiver, column = sender).
    order = np.lexsort((np.asarray(graph.senders), np.asarray(graph.receivers)))
    for f in ("senders", "receivers", "edge_weight"):
        np.testing.assert_array_equal(np.asarray(getattr(back, f)), np.asarray(getattr(graph, f))[order])
    assert_same(back, graph, ("x", "y", "train_mask", "val_mask", "test_mask"))


def test_networkx_round_trip(graph):
    nx = pytest.importorskip("networkx")
    G = to_networkx(graph)
    assert isinstance(G, nx.MultiDiGraph)
    assert G.number_of_nodes() == graph.n_nodes and G.number_of_edges() == graph.n_edges
    j = 5
    s, r = int(graph.senders[j]), int(graph.receivers[j])
    assert G.has_edge(s, r) and int(graph.y[s]) == G.nodes[s]["y"]
    back = from_networkx(G)
    assert_same(back, graph, ("x", "y", "train_mask", "val_mask", "test_mask"))

    def edges(g):  # NetworkX iterates edges grouped by source node: compare as multisets
        cols = [np.asarray(getattr(g, f)).tolist() for f in ("receivers", "senders", "edge_type", "edge_weight")]
        return sorted(zip(*cols))

    assert edges(back) == edges(graph)


def test_networkx_undirected_and_errors():
    nx = pytest.importorskip("networkx")
    G = nx.path_graph(4)  # 0-1-2-3
    g = from_networkx(G, x=np.eye(4), y=[0, 1, 0, 1])
    assert g.n_edges == 6
    assert set(zip(np.asarray(g.senders).tolist(), np.asarray(g.receivers).tolist())) == \
        {(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)}
    assert g.edge_weight is None and g.edge_type is None
    G.add_edge(2, 2)  # a Graph holds no self-loops (the models add their own): dropped, with a warning
    with pytest.warns(UserWarning, match=r"from_edge_index: dropped 1 self-loop"):
        assert from_networkx(G, x=np.eye(4), y=[0, 1, 0, 1]).n_edges == 6
    with pytest.raises(ValueError, match="x"):
        from_networkx(nx.path_graph(3))
    with pytest.raises(ValueError, match="nodes"):
        from_networkx(nx.relabel_nodes(nx.path_graph(3), {0: "a"}), x=np.eye(3), y=[0, 0, 0])
    weighted = nx.DiGraph()
    weighted.add_weighted_edges_from([(0, 1, 2.5), (1, 0, 0.5)])
    g = from_networkx(weighted, x=np.ones((2, 1)), y=[0, 1])
    np.testing.assert_array_equal(np.asarray(g.edge_weight), [2.5, 0.5])


def test_networkx_imported_lazily():
    code = "import sys, codesign.data.convert; assert 'networkx' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------
# Numeric holes (issue 36): stored zeros, non-square matrices, duplicates, complex / fractional
# ---------------------------------------------------------------------------------------------

import warnings  # noqa: E402

import scipy.sparse as sp  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_Z3 = np.zeros(3, bool)


def _edges(g):
    w = None if g.edge_weight is None else np.asarray(g.edge_weight).tolist()
    return np.asarray(g.senders).tolist(), np.asarray(g.receivers).tolist(), w


def test_from_scipy_stored_zero_duplicates_and_shape():
    """The issue's inputs: a stored zero was an edge; COO duplicates became two edges where CSR's
    conversion summed them; a 3 x 4 matrix was accepted. Now: no zero edges, duplicates summed
    alike for COO / CSR / CSC, and one line naming adj and its shape."""
    rows, cols, vals = np.array([0, 0, 1, 2]), np.array([1, 1, 2, 0]), np.array([2.0, 3.0, 0.0, 1.0])
    coo = sp.coo_matrix((vals, (rows, cols)), shape=(3, 3))
    csr = sp.csr_matrix((vals, cols, [0, 2, 3, 4]), shape=(3, 3))  # duplicates and the zero stored as given
    assert csr.nnz == coo.nnz == 4
    for m in (coo, csr, csr.tocsc(), coo.toarray()):
        g = from_scipy(m, np.ones((3, 1)), [0, 1, 2], _Z3, _Z3, _Z3, weighted=True)
        assert _edges(g) == ([1, 0], [0, 2], [5.0, 1.0])  # (0 <- 1) summed to 5; (1 <- 2) = 0 dropped
    with pytest.raises(ValueError, match=r"^from_scipy: adj must be a square \[N, N\] matrix, got shape \(3, 4\)$"):
        from_scipy(sp.csr_matrix((3, 4)), np.ones((3, 1)), [0, 1, 2], _Z3, _Z3, _Z3)
    with pytest.raises(ValueError, match=r"^from_scipy: adj must have real values, got dtype complex128$"):
        from_scipy(sp.csr_matrix(np.eye(3, k=1) * 1j), np.ones((3, 1)), [0, 1, 2], _Z3, _Z3, _Z3)
    with pytest.raises(ValueError, match=r"^from_scipy: adj has 1 non-finite stored value\(s\)$"):
        from_scipy(sp.csr_matrix(([np.nan], ([0], [1])), shape=(3, 3)), np.ones((3, 1)), [0, 1, 2], _Z3, _Z3, _Z3)
    # small-int duplicates are summed in float64, not wrapped in the input dtype (200 + 100 in uint8)
    m = sp.coo_matrix((np.array([200, 100], np.uint8), ([0, 0], [1, 1])), shape=(3, 3))
    assert _edges(from_scipy(m, np.ones((3, 1)), [0, 1, 2], _Z3, _Z3, _Z3, weighted=True))[2] == [300.0]


@pytest.mark.parametrize("convert", [from_scipy, from_edge_index])
def test_converters_refuse_complex_features_and_fractional_labels(convert):
    name = convert.__name__
    adj = sp.csr_matrix(np.eye(3, k=1)) if convert is from_scipy else np.array([[0, 1], [1, 2]])
    args = (_Z3, _Z3, _Z3)
    with pytest.raises(ValueError, match=rf"^{name}: x must be real numbers, got dtype complex128$"):
        convert(adj, np.ones((3, 1)) * 1j, [0, 1, 2], *args)
    with pytest.raises(ValueError, match=rf"^{name}: y must be whole numbers, got 1.5$"):
        convert(adj, np.ones((3, 1)), [0, 1.5, 2], *args)
    g = convert(adj, np.ones((3, 1)), np.array([0.0, 1.0, 2.0]), *args)  # whole-number float labels are fine
    np.testing.assert_array_equal(np.asarray(g.y), [0, 1, 2])


def test_from_edge_index_checks_per_edge_fields_before_dropping_loops():
    """A mis-sized edge_weight next to a self-loop used to fail inside numpy's boolean indexing."""
    ei = np.array([[0, 1, 2], [1, 1, 0]])  # edge 1 is a self-loop
    with pytest.raises(ValueError, match=r"^from_edge_index: edge_weight must be \[E=3\], got shape \(2,\)$"):
        from_edge_index(ei, np.ones((3, 1)), [0, 1, 2], edge_weight=np.ones(2))
    with pytest.raises(ValueError, match=r"^from_edge_index: edge_weight must be real numbers, got dtype complex128$"):
        from_edge_index(ei, np.ones((3, 1)), [0, 1, 2], edge_weight=np.ones(3) * 1j)


@st.composite
def stored_entries(draw):
    """``(n, rows, cols, vals)``: entries of an N x N matrix with repeated (row, col) pairs and
    explicit zeros (some pairs cancel: +v and -v)."""
    n = draw(st.integers(1, 6))
    k = draw(st.integers(0, 20))
    idx = st.integers(0, n - 1)
    rows = draw(st.lists(idx, min_size=k, max_size=k))
    cols = draw(st.lists(idx, min_size=k, max_size=k))
    vals = draw(st.lists(st.sampled_from([0.0, 0.0, 1.0, -1.0, 0.5, 2.0, -3.25]), min_size=k, max_size=k))
    return n, np.asarray(rows, int), np.asarray(cols, int), np.asarray(vals, np.float64)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stored_entries(), st.booleans())
def test_from_scipy_gives_the_same_edges_for_every_format(entries, weighted):
    """For any stored entries (explicit zeros, duplicates, cancelling pairs, diagonal) the COO, CSR
    and CSC matrices built from them, stored as given, give the edges of the dense sum: its
    off-diagonal nonzeros in (receiver, sender) order, weighted by the summed value."""
    n, rows, cols, vals = entries
    dense = np.zeros((n, n))
    np.add.at(dense, (rows, cols), vals)
    np.fill_diagonal(dense, 0.0)
    r, s = np.nonzero(dense)  # row-major: sorted by (receiver, sender)
    want = (s.tolist(), r.tolist(), dense[r, s].astype(np.float32).tolist() if weighted else None)
    order = np.lexsort((cols, rows))
    indptr = np.searchsorted(rows[order], np.arange(n + 1))
    t_order = np.lexsort((rows, cols))
    t_indptr = np.searchsorted(cols[t_order], np.arange(n + 1))
    formats = {"coo": sp.coo_matrix((vals, (rows, cols)), shape=(n, n)),
               "csr": sp.csr_matrix((vals[order], cols[order], indptr), shape=(n, n)),
               "csc": sp.csc_matrix((vals[t_order], rows[t_order], t_indptr), shape=(n, n))}
    z = np.zeros(n, bool)
    for name, m in formats.items():
        assert m.nnz == len(vals), name  # stored as given: duplicates and zeros included
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the self-loop warning
            g = from_scipy(m, np.ones((n, 1)), np.zeros(n, int), z, z, z, weighted=weighted)
        assert _edges(g) == want, name
