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
    with pytest.raises(ValueError, match="Graph.edge_type"):
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
