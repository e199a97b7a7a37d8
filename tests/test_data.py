"""Tests for codesign.data.planetoid."""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import shutil
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from codesign.data import PLANETOID_NAMES, load_planetoid
from codesign.data import planetoid as pl

EXTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def _np(a):
    return np.asarray(a)


def _load_unverified(*args, **kwargs):
    """load_planetoid(..., verify=False) on tampered or synthetic files, asserting its warning."""
    with pytest.warns(UserWarning, match=r"verify=False: NOT checking .*ind\."):
        return load_planetoid(*args, verify=False, **kwargs)


# ---------------------------------------------------------------------------- real Cora


def test_cora_counts_and_dtypes(cora):
    assert (cora.n_nodes, cora.n_edges, cora.n_features, cora.n_classes) == (2708, 10556, 1433, 7)
    assert cora.senders.dtype == np.int32 and cora.receivers.dtype == np.int32
    assert cora.x.dtype == np.float32 and cora.y.dtype == np.int32
    assert all(m.dtype == bool for m in (cora.train_mask, cora.val_mask, cora.test_mask))
    tr, va, te = _np(cora.train_mask), _np(cora.val_mask), _np(cora.test_mask)
    assert (tr.sum(), va.sum(), te.sum()) == (140, 500, 1000)
    np.testing.assert_array_equal(np.flatnonzero(tr), np.arange(140))
    np.testing.assert_array_equal(np.flatnonzero(va), np.arange(140, 640))
    np.testing.assert_array_equal(np.flatnonzero(te), np.arange(1708, 2708))
    assert not (tr & va).any() and not (tr & te).any() and not (va & te).any()


def test_cora_labels_match_public_split(cora):
    y = _np(cora.y)
    assert y.min() >= 0 and y.max() < 7
    # Class sizes of PyG's Cora and the 20-per-class training set of the Planetoid split.
    np.testing.assert_array_equal(np.bincount(y), [351, 217, 418, 818, 426, 298, 180])
    np.testing.assert_array_equal(np.bincount(y[_np(cora.train_mask)]), [20] * 7)


def test_cora_features_row_normalized(cora, planetoid_root):
    x = _np(cora.x)
    assert (x >= 0).all()
    np.testing.assert_allclose(x.sum(1), 1.0, rtol=1e-5)  # Cora has no empty feature row
    raw = _np(load_planetoid("cora", root=planetoid_root, normalize_features=False).x)
    assert set(np.unique(raw)) == {0.0, 1.0} and int(raw.sum()) == 49216  # binary bag of words
    np.testing.assert_allclose(x, raw / raw.sum(1, keepdims=True), rtol=1e-6)


def test_cora_edges_clean_symmetric_sorted(cora):
    s, r, n = _np(cora.senders).astype(np.int64), _np(cora.receivers).astype(np.int64), cora.n_nodes
    assert not (s == r).any(), "self-loops"
    code = r * n + s
    assert np.unique(code).size == code.size, "duplicate edges"
    assert (np.diff(code) > 0).all(), "not sorted by (receiver, sender)"
    np.testing.assert_array_equal(np.sort(s * n + r), code)  # reverse of every edge is present


def test_explicit_root_and_case_insensitive(planetoid_root, monkeypatch, cora):
    monkeypatch.delenv("CODESIGN_DATA")
    g = load_planetoid("CoRa", root=str(planetoid_root))
    assert g.n_nodes == 2708 and g.n_edges == 10556
    np.testing.assert_array_equal(_np(g.x), _np(cora.x))


def test_unknown_name_lists_choices():
    with pytest.raises(ValueError, match="cora, citeseer, pubmed"):
        load_planetoid("reddit")
    assert PLANETOID_NAMES == ("cora", "citeseer", "pubmed")


def _copy_cora(src_root: Path, dst_root: Path) -> Path:
    d = dst_root / "planetoid"
    d.mkdir(parents=True)
    for ext in EXTS:
        shutil.copyfile(src_root / "planetoid" / f"ind.cora.{ext}", d / f"ind.cora.{ext}")
    return d


def test_truncated_pickle_names_file(planetoid_root, tmp_path):
    d = _copy_cora(planetoid_root, tmp_path)
    data = (d / "ind.cora.x").read_bytes()
    (d / "ind.cora.x").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match=r"ind\.cora\.x.*truncated or corrupted"):
        _load_unverified("cora", root=tmp_path)


def test_unsafe_pickle_is_refused(planetoid_root, tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.getcwd, ())

    d = _copy_cora(planetoid_root, tmp_path)
    (d / "ind.cora.graph").write_bytes(pickle.dumps(Evil(), protocol=2))
    with pytest.raises(ValueError, match=r"ind\.cora\.graph.*refusing to load global"):
        _load_unverified("cora", root=tmp_path)


def test_row_count_mismatch_names_files(planetoid_root, tmp_path):
    d = _copy_cora(planetoid_root, tmp_path)
    y = pickle.loads((d / "ind.cora.y").read_bytes(), encoding="latin1")
    (d / "ind.cora.y").write_bytes(pickle.dumps(y[:-1], protocol=2))
    with pytest.raises(ValueError, match=r"ind\.cora\.x has 140 rows but ind\.cora\.y has 139"):
        _load_unverified("cora", root=tmp_path)


# ---------------------------------------------------------------------------- download path


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    """No CODESIGN_DATA, and an empty XDG cache: the loader takes the download path."""
    monkeypatch.delenv("CODESIGN_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    return tmp_path / "codesign" / "planetoid"


def test_offline_error_names_file_and_env_var(empty_cache, monkeypatch):
    def offline(url, timeout=None):
        raise urllib.error.URLError("network is unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", offline)
    with pytest.raises(FileNotFoundError, match=r"ind\.cora\.x is missing .*CODESIGN_DATA=.* root="):
        load_planetoid("cora")
    assert not empty_cache.exists() or not any(empty_cache.iterdir())


def test_missing_file_under_explicit_root(tmp_path, monkeypatch):
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: pytest.fail("must not download"))
    with pytest.raises(FileNotFoundError, match=r"ind\.citeseer\.x.*CODESIGN_DATA"):
        load_planetoid("citeseer", root=tmp_path)


def test_download_checksum_mismatch_deletes_file(empty_cache, monkeypatch):
    bad = b"<html>rate limited</html>"
    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout=None: io.BytesIO(bad))
    want = pl.CHECKSUMS["ind.cora.x"].split(":")[1]
    with pytest.raises(ValueError, match=rf"ind\.cora\.x .*corrupt.*expected {want}, got {hashlib.sha256(bad).hexdigest()}"):
        load_planetoid("cora")
    assert not any(empty_cache.iterdir())  # neither the file nor a temp file is left behind


def test_download_then_cached(empty_cache, monkeypatch, planetoid_root):
    urls = []

    def serve(url, timeout=None):  # a fake GitHub serving the shared copy
        urls.append(url)
        assert url.startswith("https://github.com/kimiyoung/planetoid/raw/master/data/ind.cora.")
        return io.BytesIO((planetoid_root / "planetoid" / url.rsplit("/", 1)[1]).read_bytes())

    monkeypatch.setattr(urllib.request, "urlopen", serve)
    g = load_planetoid("cora")
    assert g.n_edges == 10556 and len(urls) == 8
    assert sorted(p.name for p in empty_cache.iterdir()) == sorted(f"ind.cora.{e}" for e in EXTS)
    load_planetoid("cora")
    assert len(urls) == 8  # second load reads the cache


def test_verify_checksum(planetoid_root, tmp_path):
    f = planetoid_root / "planetoid" / "ind.cora.x"
    pl.verify_checksum(f, pl.CHECKSUMS["ind.cora.x"])
    pl.verify_checksum(f, "git-sha1:c4a91d008245403e7f26aa616b437191509793c0")  # its git blob id
    pl.verify_checksum(f, None)
    with pytest.raises(ValueError, match=r"ind\.cora\.x.*expected 00+, got 23cfa55d"):
        pl.verify_checksum(f, "sha256:" + "0" * 64)
    assert set(pl.CHECKSUMS) == {f"ind.{n}.{e}" for n in PLANETOID_NAMES for e in EXTS}


# ---------------------------------------------------------------------------- synthetic datasets


def _write_planetoid(root: Path, name: str, test_index, n_train=4, n_unlabeled=6, f=5, c=3, seed=0):
    """A tiny dataset in the raw Planetoid format (protocol-2 pickles) under root/planetoid."""
    rng = np.random.default_rng(seed)
    n_allx = n_train + 500 + n_unlabeled
    onehot = lambda k: np.eye(c, dtype=np.int32)[rng.integers(0, c, k)]  # noqa: E731
    allx = sp.csr_matrix(rng.integers(0, 2, (n_allx, f)).astype(np.float32))
    ally = onehot(n_allx)
    tx = sp.csr_matrix(np.arange(1, len(test_index) * f + 1, dtype=np.float32).reshape(-1, f))
    ty = onehot(len(test_index))
    n = int(max(test_index)) + 1
    graph = {i: [i + 1] for i in range(n - 1)}  # one direction only: the loader symmetrizes
    graph[0] = [0, 1, 1]  # a self-loop and a duplicate, both removed
    objs = dict(x=allx[:n_train], y=ally[:n_train], allx=allx, ally=ally, tx=tx, ty=ty, graph=graph)
    d = root / "planetoid"
    d.mkdir(parents=True, exist_ok=True)
    for ext, obj in objs.items():
        (d / f"ind.{name}.{ext}").write_bytes(pickle.dumps(obj, protocol=2))
    (d / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))
    return objs, n


def test_citeseer_isolated_test_nodes_padded(tmp_path):
    test_index = [515, 510, 513, 521, 511]  # 512, 514, 516..520 are missing (isolated nodes)
    objs, n = _write_planetoid(tmp_path, "citeseer", test_index)
    g = _load_unverified("CiteSeer", root=tmp_path, normalize_features=False)
    assert g.n_nodes == n == 522 and g.n_features == 5
    x, y = _np(g.x), _np(g.y)
    tx, ty = objs["tx"].toarray(), objs["ty"]
    np.testing.assert_array_equal(x[test_index], tx)  # tx row i is node test_index[i]
    np.testing.assert_array_equal(y[test_index], ty.argmax(1))
    padded = sorted(set(range(510, 522)) - set(test_index))
    assert not x[padded].any() and not y[padded].any()  # zero features, label 0 (argmax of zeros)
    np.testing.assert_array_equal(x[:510], objs["allx"].toarray())
    np.testing.assert_array_equal(np.flatnonzero(_np(g.test_mask)), sorted(test_index))
    assert _np(g.train_mask).sum() == 4 and np.flatnonzero(_np(g.val_mask)).tolist() == list(range(4, 504))
    assert g.n_edges == 2 * (n - 1)  # path graph, both directions, no self-loop or duplicate
    normed = _np(_load_unverified("citeseer", root=tmp_path).x)
    assert not normed[padded].any()  # empty rows stay zero
    np.testing.assert_allclose(normed[test_index].sum(1), 1.0, rtol=1e-6)


def test_pubmed_named_dataset_loads(tmp_path):
    test_index = [511, 509, 513, 510, 512]  # contiguous, in shuffled order
    objs, n = _write_planetoid(tmp_path, "pubmed", test_index, n_train=3, f=4, c=3, seed=1)
    g = _load_unverified("pubmed", root=tmp_path, normalize_features=False)
    assert (g.n_nodes, g.n_features, g.n_edges) == (514, 4, 2 * 513)
    np.testing.assert_array_equal(_np(g.x)[test_index], objs["tx"].toarray())
    np.testing.assert_array_equal(_np(g.y)[test_index], objs["ty"].argmax(1))
    assert (_np(g.train_mask).sum(), _np(g.val_mask).sum(), _np(g.test_mask).sum()) == (3, 500, 5)


def test_split_sizes_that_do_not_add_up(tmp_path):
    # 10 training nodes + 500 validation nodes do not fit in the 509 rows of allx.
    _write_planetoid(tmp_path, "pubmed", [509, 510], n_train=10, n_unlabeled=-1)
    with pytest.raises(ValueError, match="split sizes do not add up"):
        _load_unverified("pubmed", root=tmp_path)


def test_test_index_tx_mismatch(tmp_path):
    _write_planetoid(tmp_path, "cora", [510, 511, 512])
    (tmp_path / "planetoid" / "ind.cora.test.index").write_text("510\n511\n")
    with pytest.raises(ValueError, match=r"ind\.cora\.test\.index.*ind\.cora\.tx has 3 rows"):
        _load_unverified("cora", root=tmp_path)
