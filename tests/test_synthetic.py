"""Tests for codesign.data.synthetic: R-MAT, cSBM and the relational SBM."""

from __future__ import annotations

import numpy as np
import pytest

from codesign.data import csbm, edge_homophily, hetero_sbm, rmat_edges, rmat_graph
from codesign.data.synthetic import class_means, random_split


def _keys(s, r, n):
    return np.asarray(r, np.int64) * n + np.asarray(s, np.int64)


def assert_simple_symmetric(s, r, n):
    """No self-loops, no duplicates, sorted by (receiver, sender), every edge has its reverse."""
    s, r = np.asarray(s), np.asarray(r)
    assert s.dtype == np.int32 and r.dtype == np.int32 and s.shape == r.shape
    assert s.min() >= 0 and r.min() >= 0 and max(s.max(), r.max()) < n
    assert not np.any(s == r)
    k = _keys(s, r, n)
    assert np.all(np.diff(k) > 0)  # strictly increasing: sorted and de-duplicated
    np.testing.assert_array_equal(np.sort(_keys(r, s, n)), k)


# ----------------------------------------------------------------------------------------- R-MAT


def test_rmat_small_invariants():
    s, r = rmat_edges(10, 5000, seed=3)
    assert_simple_symmetric(s, r, 1 << 10)
    assert 0 < s.size <= 2 * 5000
    s2, r2 = rmat_edges(10, 5000, seed=3)
    np.testing.assert_array_equal(s, s2)  # deterministic in the seed
    np.testing.assert_array_equal(r, r2)
    assert not np.array_equal(rmat_edges(10, 5000, seed=4)[0][:100], s[:100])


def test_rmat_raw_counts_without_dedup():
    s, r = rmat_edges(8, 3000, symmetric=False, dedup=False)
    assert s.size == r.size == 3000
    s, r = rmat_edges(8, 3000, symmetric=True, dedup=False)
    assert s.size == 6000
    np.testing.assert_array_equal(s[:3000], r[3000:])  # second half is the reverse of the first


def test_rmat_degenerate_quadrants():
    # All mass in quadrant a: every draw is (perm[0], perm[0]), a self-loop.
    s, r = rmat_edges(6, 100, abcd=(1, 0, 0, 0), symmetric=False, dedup=False)
    assert np.all(s == s[0]) and np.all(s == r)
    assert rmat_edges(6, 100, abcd=(1, 0, 0, 0))[0].size == 0  # dedup drops the self-loops
    # All mass in quadrant b: row id 0, column id 2^scale - 1: one distinct edge.
    s, r = rmat_edges(6, 100, abcd=(0, 1, 0, 0), symmetric=False, dedup=False)
    assert len(set(zip(s.tolist(), r.tolist()))) == 1 and s[0] != r[0]
    assert rmat_edges(6, 100, abcd=(0, 1, 0, 0))[0].size == 2  # both directions, once each


def test_rmat_quadrant_frequencies():
    """At scale 1 a draw is a self-loop iff it falls in quadrant a or d, whatever the permutation."""
    n = 200_000
    s, r = rmat_edges(1, n, abcd=(0.5, 0.2, 0.1, 0.2), symmetric=False, dedup=False)
    assert abs(np.mean(s == r) - 0.7) < 0.005
    s, r = rmat_edges(2, n, symmetric=False, dedup=False)  # two levels: (a + d)^2 loops
    assert abs(np.mean(s == r) - (0.57 + 0.05) ** 2) < 0.005


def test_rmat_is_skewed():
    s, r = rmat_edges(12, 40_000, seed=1)
    deg = np.bincount(r, minlength=1 << 12)
    assert deg.max() > 20 * deg.mean()  # power-law-like hubs (Erdos-Renyi would give ~2-3x)


def test_rmat_ten_million_edges():
    """The scale benchmark size: >= 10M edges from 8M draws at scale 20 (about 2 s here)."""
    s, r = rmat_edges(20, 8_000_000, seed=0)
    assert s.size >= 10_000_000
    assert_simple_symmetric(s, r, 1 << 20)


@pytest.mark.parametrize("kwargs, field", [
    (dict(scale=0, n_edges=10), "scale"), (dict(scale=32, n_edges=10), "scale"),
    (dict(scale=4, n_edges=0), "n_edges"), (dict(scale=4, n_edges=10, abcd=(0.5, 0.5, 0.5, -0.5)), "abcd"),
    (dict(scale=4, n_edges=10, abcd=(0.5, 0.5)), "abcd"),
])
def test_rmat_errors(kwargs, field):
    with pytest.raises(ValueError, match=field):
        rmat_edges(**kwargs)


def test_rmat_graph():
    g = rmat_graph(9, 3000, n_features=7, n_classes=3, seed=2)
    assert g.n_nodes == 512 and g.x.shape == (512, 7) and g.n_classes == 3
    assert_simple_symmetric(g.senders, g.receivers, 512)
    tr, va, te = (np.asarray(m) for m in (g.train_mask, g.val_mask, g.test_mask))
    assert (tr.sum(), va.sum(), te.sum()) == (307, 102, 103)
    assert not np.any(tr & va) and not np.any(tr & te) and np.all(tr | va | te)
    with pytest.raises(ValueError, match="n_features"):
        rmat_graph(5, 10, n_features=0)
    with pytest.raises(ValueError, match="split"):
        rmat_graph(5, 10, split=(0.5, 0.5, 0.5))


# ------------------------------------------------------------------------------------------ cSBM


@pytest.mark.parametrize("c", [2, 3, 5])
@pytest.mark.parametrize("h", [0.0, 0.1, 0.5, 0.8, 1.0])
def test_csbm_homophily_controls_edge_homophily(h, c):
    g = csbm(3000, 8, avg_degree=10, homophily=h, mu=1.0, n_classes=c, seed=1)
    assert_simple_symmetric(g.senders, g.receivers, g.n_nodes)
    assert abs(edge_homophily(g) - h) < 0.02
    assert abs(g.n_edges / g.n_nodes - 10) < 0.3  # avg_degree (a few duplicates dropped)
    np.testing.assert_array_equal(np.bincount(np.asarray(g.y)), [3000 // c + (k < 3000 % c) for k in range(c)])


def test_csbm_features_separate_classes():
    g = csbm(4000, 10, avg_degree=5, homophily=0.5, mu=2.0, n_classes=2, seed=0)
    x, y = np.asarray(g.x, np.float64), np.asarray(g.y)
    means = np.stack([x[y == k].mean(0) for k in range(2)])
    np.testing.assert_allclose(np.linalg.norm(means, axis=1), 2.0, atol=0.1)  # |mu * m_c| = mu
    np.testing.assert_allclose(means[0], -means[1], atol=0.1)  # +-u for two classes
    np.testing.assert_allclose(x[y == 0].std(0), 1.0, atol=0.06)  # unit noise
    # Projecting on the mean difference classifies at the Bayes rate Phi(mu) = 0.977.
    pred = (x @ (means[1] - means[0]) > 0).astype(int)
    assert abs(np.mean(pred == y) - 0.977) < 0.015
    flat = csbm(4000, 10, avg_degree=5, homophily=0.5, mu=0.0, seed=0)
    assert np.abs(np.asarray(flat.x)[np.asarray(flat.y) == 0].mean(0)).max() < 0.1


def test_class_means_simplex():
    m = class_means(np.random.default_rng(0), 8, 4)
    np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1.0)
    np.testing.assert_allclose(m.sum(0), 0.0, atol=1e-12)
    d = np.linalg.norm(m[:, None] - m[None], axis=-1)[np.triu_indices(4, 1)]
    np.testing.assert_allclose(d, np.sqrt(2 * 4 / 3))


def test_csbm_split_and_determinism():
    g = csbm(1000, 4, 4, 0.7, 1.0, seed=5)
    tr, va, te = (np.asarray(m) for m in (g.train_mask, g.val_mask, g.test_mask))
    assert (tr.sum(), va.sum(), te.sum()) == (600, 200, 200)
    assert np.all(tr.astype(int) + va + te == 1)
    g2 = csbm(1000, 4, 4, 0.7, 1.0, seed=5)
    np.testing.assert_array_equal(np.asarray(g.senders), np.asarray(g2.senders))
    np.testing.assert_array_equal(np.asarray(g.x), np.asarray(g2.x))
    g3 = csbm(1000, 4, 4, 0.7, 1.0, seed=5, split=(0.1, 0.1, 0.8))
    assert np.asarray(g3.train_mask).sum() == 100


@pytest.mark.parametrize("kwargs, field", [
    (dict(n_nodes=-5), "n_nodes"), (dict(n_nodes=3), "n_nodes"), (dict(n_nodes=10.5), "n_nodes"),
    (dict(homophily=1.2), "homophily"), (dict(homophily=-0.1), "homophily"),
    (dict(homophily=float("nan")), "homophily"),
    (dict(avg_degree=-1), "avg_degree"), (dict(avg_degree=500), "avg_degree"),
    (dict(mu=-1.0), "mu"), (dict(n_features=1), "n_features"), (dict(n_classes=1), "n_classes"),
    (dict(split=(0.6, 0.6, 0.2)), "split"),
])
def test_csbm_errors_name_the_field(kwargs, field):
    args = dict(n_nodes=100, n_features=4, avg_degree=3, homophily=0.5, mu=1.0) | kwargs
    with pytest.raises(ValueError, match=field):
        csbm(**args)


def test_random_split_errors():
    with pytest.raises(ValueError, match="split"):
        random_split(10, (0.5, 0.5))


# ------------------------------------------------------------------------------- relational SBM


def test_hetero_sbm_edge_types():
    c, n = 4, 800
    g = hetero_sbm(n, 8, n_classes=c, avg_degree=4, mu=1.0, seed=0)
    t, s, r, y = (np.asarray(a) for a in (g.edge_type, g.senders, g.receivers, g.y))
    assert t.dtype == np.int32 and t.shape == (g.n_edges,)
    assert set(np.unique(t).tolist()) == set(range(2 * c))  # R = C relations + their inverses
    assert np.all(np.diff(t) >= 0)  # sorted by relation
    for rel in range(c):
        fwd, inv = t == rel, t == rel + c
        np.testing.assert_array_equal((y[s[fwd]] - y[r[fwd]]) % c, rel % c)  # sender class = y_i + s_r
        np.testing.assert_array_equal((y[r[inv]] - y[s[inv]]) % c, rel % c)
        assert set(zip(s[fwd].tolist(), r[fwd].tolist())) == set(zip(r[inv].tolist(), s[inv].tolist()))
        assert abs(fwd.sum() / n - 4) < 0.3 or rel == 0  # relation 0 loses its would-be self-loops
        assert not np.any(s[fwd] == r[fwd])
    # Symmetric as an untyped graph, and every class's neighbours are spread over all classes.
    k = _keys(s, r, n)
    np.testing.assert_array_equal(np.sort(k), np.sort(_keys(r, s, n)))
    mix = np.zeros((c, c))
    np.add.at(mix, (y[r], y[s]), 1)
    mix /= mix.sum(1, keepdims=True)
    np.testing.assert_allclose(mix, 1 / c, atol=0.03)


def test_hetero_sbm_options_and_errors():
    g = hetero_sbm(300, 6, n_classes=3, n_relations=2, avg_degree=3, add_inverse=False, seed=1)
    assert set(np.unique(np.asarray(g.edge_type)).tolist()) == {0, 1}
    for kwargs, field in ((dict(n_nodes=-1), "n_nodes"), (dict(n_relations=0), "n_relations"),
                          (dict(avg_degree=0), "avg_degree"), (dict(mu=-2), "mu"), (dict(n_features=2), "n_features")):
        with pytest.raises(ValueError, match=field):
            hetero_sbm(**(dict(n_nodes=100, n_features=4) | kwargs))


def test_named_rmat_dataset_is_the_graph500_shaped_rmat_graph():
    """``load_dataset("rmat-15")`` is `rmat_graph` at scale 15 with 16 draws per node (Graph500's
    edge factor), 64 features and 8 classes, seed 0: the graph `codesign partition rmat-15` shards."""
    from codesign.data import DATASETS, RMAT_SCALES, load_dataset
    assert [f"rmat-{s}" for s in RMAT_SCALES] == [d for d in DATASETS if d.startswith("rmat-")]
    g = load_dataset("rmat-15")
    ref = rmat_graph(15, 16 << 15, n_features=64, n_classes=8, seed=0)
    assert g.n_nodes == 1 << 15 and g.x.shape == (1 << 15, 64) and int(g.y.max()) == 7
    np.testing.assert_array_equal(np.asarray(g.senders), np.asarray(ref.senders))
    np.testing.assert_array_equal(np.asarray(g.receivers), np.asarray(ref.receivers))
    np.testing.assert_array_equal(np.asarray(g.x), np.asarray(ref.x))
    assert 700_000 < g.n_edges < 16 << 16  # symmetrized and de-duplicated draws
