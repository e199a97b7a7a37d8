"""Tests for the derived-array cache (codesign.data.derived), the csbm-products generator and
the wordnet-lsa loader (skipped without the WordNet 3.0 files, as in test_wordnet.py)."""

import dataclasses
import json
import os

import numpy as np
import pytest

from codesign.data import derived
from codesign.data import csbm_products as cp
from codesign.data.csbm_products import CsbmProductsParams, csbm_products_arrays, load_csbm_products

SMALL = CsbmProductsParams().scaled(4000)  # mean degree 50.5, max_degree scaled


@pytest.fixture
def cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path


@pytest.fixture(scope="module")
def small():
    return csbm_products_arrays(SMALL)


# ------------------------------------------------------------------------------- generator


def test_generator_is_deterministic_per_seed(small):
    again = csbm_products_arrays(SMALL)
    assert small.keys() == again.keys()
    for k in small:
        np.testing.assert_array_equal(small[k], again[k])
    other = csbm_products_arrays(dataclasses.replace(SMALL, seed=1))
    assert not np.array_equal(other["senders"], small["senders"]) and not np.array_equal(other["y"], small["y"])


def test_generator_shapes_dtypes_and_edge_convention(small):
    n, m = SMALL.n_nodes, SMALL.n_edges
    s, r = small["senders"], small["receivers"]
    assert s.dtype == r.dtype == small["y"].dtype == np.int32 and small["x"].dtype == np.float32
    assert s.shape == r.shape == (2 * m,) and small["x"].shape == (n, 100) and small["y"].shape == (n,)
    assert (s != r).all()  # no self-loops (a Graph holds none)
    code = r.astype(np.int64) * n + s
    assert (np.diff(code) > 0).all()  # sorted by (receiver, sender), no duplicates
    assert np.array_equal(np.sort(s.astype(np.int64) * n + r), code)  # symmetric
    assert np.bincount(small["split"], minlength=3).tolist() == [int(SMALL.split[0] * n), int(SMALL.split[1] * n),
                                                                  n - int(SMALL.split[0] * n) - int(SMALL.split[1] * n)]


def test_generator_statistics(small):
    n, y = SMALL.n_nodes, small["y"]
    s, r = small["senders"], small["receivers"]
    assert np.sum(y[s] == y[r]) == 2 * round(SMALL.homophily * SMALL.n_edges)  # edge homophily: exact
    sizes = np.bincount(y, minlength=47)
    assert sizes.sum() == n and sizes.min() >= 1 and (np.diff(sizes) <= 1).all()  # Zipf: non-increasing
    assert 1.7 < sizes[0] / sizes[1] < 2.3 and 2.6 < sizes[0] / sizes[2] < 3.4  # ~ 1 / (c + 1)
    deg = np.bincount(r, minlength=n)
    assert abs(deg.mean() - 2 * SMALL.n_edges / n) < 1e-9
    assert np.median(deg) < 0.6 * deg.mean() and deg.max() > 5 * deg.mean()  # heavy right tail
    # CCDF slope on log-log axes over the tail (degree 30..300): -(gamma - 1) = -1.1 for gamma 2.1
    ks = np.array([30, 60, 120, 240])
    slope = np.polyfit(np.log(ks), np.log([(deg >= k).mean() for k in ks]), 1)[0]
    assert -1.6 < slope < -0.7, slope
    # train = the highest-theta nodes, so the train nodes have the larger degrees
    assert np.median(deg[small["split"] == 0]) > 3 * np.median(deg[small["split"] == 2])


def test_homophily_zero_and_one_are_reached():
    for h in (0.0, 1.0):
        a = csbm_products_arrays(dataclasses.replace(CsbmProductsParams().scaled(1000), homophily=h))
        assert np.mean(a["y"][a["senders"]] == a["y"][a["receivers"]]) == h


@pytest.mark.parametrize("field, value", [("n_nodes", 10), ("n_edges", 0), ("homophily", 1.5), ("mu", -1.0),
                                          ("degree_exponent", 2.0), ("max_degree", 0.5), ("class_exponent", -1),
                                          ("split", (0.5, 0.5, 0.5)), ("seed", -1), ("n_features", 3),
                                          ("n_classes", True), ("n_edges", 10**9)])
def test_bad_params_name_the_field(field, value):
    with pytest.raises(ValueError, match=rf"^CsbmProductsParams\.{field}: must be ") as e:
        dataclasses.replace(CsbmProductsParams().scaled(1000), **{field: value})
    assert "\n" not in str(e.value)


def test_load_refuses_a_non_params_object():
    with pytest.raises(ValueError, match="load_csbm_products: params must be a CsbmProductsParams"):
        load_csbm_products({"n_nodes": 10})


# ----------------------------------------------------------------------------------- cache


def _counting(arrays):
    calls = []

    def build():
        calls.append(1)
        return {k: v.copy() for k, v in arrays.items()}
    return build, calls


def test_cache_hit_mismatch_and_corruption(cache_home):
    arrays = {"a": np.arange(10, dtype=np.int32), "b": np.ones((3, 2), np.float32)}
    build, calls = _counting(arrays)
    derived.cached_arrays("t", {"k": 1}, build)
    got = derived.cached_arrays("t", {"k": 1}, build)  # hit: same params, hashes match
    assert len(calls) == 1 and all(np.array_equal(got[k], arrays[k]) and got[k].dtype == arrays[k].dtype
                                   for k in arrays)
    meta = json.loads((derived.slot_dir("t") / "meta.json").read_text())
    assert meta["params"] == {"k": 1} and meta["arrays"]["a"]["sha256"] == derived.file_sha256(
        derived.slot_dir("t") / "a.npy") and meta["arrays"]["b"]["shape"] == [3, 2]
    derived.cached_arrays("t", {"k": 2}, build)  # other params: rebuilt, silently (no stale reuse)
    assert len(calls) == 2 and derived.read_meta("t")["params"] == {"k": 2}
    path = derived.slot_dir("t") / "a.npy"
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF  # corrupt one data byte
    path.write_bytes(bytes(raw))
    with pytest.warns(UserWarning, match=r"a\.npy: sha256 mismatch .*; rebuilding t$"):
        got = derived.cached_arrays("t", {"k": 2}, build)
    assert len(calls) == 3 and np.array_equal(got["a"], arrays["a"])
    assert derived.file_sha256(path) == derived.read_meta("t")["arrays"]["a"]["sha256"]  # rewritten
    derived.cached_arrays("t", {"k": 2}, build, cache=False)
    assert len(calls) == 4


def test_cache_bad_input(cache_home):
    with pytest.raises(ValueError, match="cached_arrays: name must be a plain file name"):
        derived.cached_arrays("../x", {}, dict)
    with pytest.raises(ValueError, match="cached_arrays: params must be JSON-serializable"):
        derived.cached_arrays("x", {"a": object()}, dict)
    with pytest.raises(ValueError, match="cached_arrays: build for 'x' must return a dict"):
        derived.cached_arrays("x", {}, lambda: {"a": [1]})


def test_load_csbm_products_caches_by_params(cache_home, monkeypatch):
    calls = []
    real = cp.csbm_products_arrays
    monkeypatch.setattr(cp, "csbm_products_arrays", lambda p: calls.append(p) or real(p))
    p = CsbmProductsParams().scaled(500)
    g1 = load_csbm_products(p)
    g2 = load_csbm_products(p)
    assert len(calls) == 1 and np.array_equal(np.asarray(g1.x), np.asarray(g2.x))
    assert g1.n_nodes == 500 and g1.n_edges == 2 * p.n_edges and int(np.asarray(g1.train_mask).sum()) == 40
    load_csbm_products(dataclasses.replace(p, mu=1.0))
    assert len(calls) == 2 and derived.read_meta(cp.slot_name(p))["params"]["mu"] == 1.0
    # another size has its own slot: loading it leaves this one in place (no rebuild on return)
    load_csbm_products(CsbmProductsParams().scaled(600))
    load_csbm_products(dataclasses.replace(p, mu=1.0))
    assert len(calls) == 3 and cp.slot_name(p) == "csbm-products-500"
    assert cp.slot_name(CsbmProductsParams()) == "csbm-products"


def test_load_dataset_lists_and_dispatches():
    from codesign.data import DATASETS, load_dataset
    assert {"wordnet-lsa", "csbm-products"} <= set(DATASETS)
    with pytest.raises(ValueError, match=r"^dataset: unknown dataset 'csbm'; choose from .*csbm-products, ncbi-taxonomy, rmat-15.*, rmat-21$"):
        load_dataset("csbm")


# ----------------------------------------------------------------------------- wordnet-lsa


def test_lsa_features_deterministic_and_bad_input():
    from codesign.data.wordnet_lsa import lsa_features
    docs = [f"word{i % 7} word{i % 11} shared text number{i % 5}" for i in range(200)]
    a, b = lsa_features(docs, 8, seed=3), lsa_features(docs, 8, seed=3)
    assert a.shape == (200, 8) and a.dtype == np.float32 and np.array_equal(a, b)
    with pytest.raises(ValueError, match=r"lsa_features: n_components must be an int in \[1, "):
        lsa_features(docs, 10_000)
    with pytest.raises(ValueError, match="lsa_features: seed must be an int >= 0"):
        lsa_features(docs, 8, seed=-1)


@pytest.mark.slow  # parses WordNet and runs TF-IDF + SVD on 117,659 glosses (~2 min on 2 loaded cores)
@pytest.mark.skipif(not os.environ.get("CODESIGN_SLOW"), reason="the whole-WordNet LSA build takes minutes: set "
                    "CODESIGN_SLOW=1 (the mechanism is tested at small scale above)")
def test_wordnet_lsa(real_root, cache_home, monkeypatch):
    from codesign.data import load_wordnet
    from codesign.data import wordnet_lsa
    calls = []
    real = wordnet_lsa.lsa_features
    monkeypatch.setattr(wordnet_lsa, "lsa_features", lambda *a: calls.append(1) or real(*a))
    g = wordnet_lsa.load_wordnet_lsa(real_root)
    x = np.asarray(g.x)
    assert x.shape == (117_659, 128) and x.dtype == np.float32 and np.isfinite(x).all()
    assert (x.std(0)[:-1] >= x.std(0)[1:] * 0.9).mean() > 0.9  # SVD: variance falls with the column
    ref = load_wordnet(real_root, vocab_size=1)
    for f in ("senders", "receivers", "y", "train_mask", "val_mask", "test_mask"):
        assert np.array_equal(np.asarray(getattr(g, f)), np.asarray(getattr(ref, f))), f
    again = wordnet_lsa.load_wordnet_lsa(real_root)  # from the cache
    assert len(calls) == 1 and np.array_equal(np.asarray(again.x), x)
    typed = wordnet_lsa.load_wordnet_lsa(real_root, symmetrize=False)  # typed relations kept
    assert typed.edge_type is not None and len(calls) == 1
