"""Tests for codesign.data.ogb on a tiny dataset written in OGB's raw on-disk layout (nothing is
downloaded: every download path of ogb is patched to fail)."""

from __future__ import annotations

import gzip
import importlib.util
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from codesign.data import load_ogb_node
from codesign.data import ogb as cogb

needs_ogb = pytest.mark.skipif(importlib.util.find_spec("ogb") is None,
                               reason="ogb is not installed (pip install torch==2.13.0, then pip install ogb)")

N, F, C = 12, 5, 4
EDGES = np.array([[0, 1], [1, 2], [2, 3], [3, 0], [4, 5], [5, 6], [6, 7], [8, 9], [9, 10], [10, 11],
                  [1, 0], [0, 1], [11, 11]])  # a reverse edge, a duplicate and a self-loop
LABELS = np.arange(N) % C
SPLIT = {"train": [0, 1, 2, 3, 4, 5], "valid": [6, 7, 8], "test": [9, 10, 11]}


def _csv_gz(path: Path, a, fmt="%d"):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        np.savetxt(f, np.atleast_2d(np.asarray(a).T).T if np.ndim(a) == 1 else a, fmt=fmt, delimiter=",")


def write_tiny_arxiv(root: Path) -> np.ndarray:
    """Writes a 12-node graph as ``root/ogb/ogbn_arxiv`` in the layout of OGB's arxiv.zip:
    raw/{edge,num-node-list,num-edge-list,node-feat,node-label,node_year}.csv.gz,
    split/time/{train,valid,test}.csv.gz, RELEASE_v1.txt. Returns the features."""
    d = root / "ogb" / "ogbn_arxiv"
    x = np.random.default_rng(0).standard_normal((N, F)).astype(np.float32)
    _csv_gz(d / "raw" / "edge.csv.gz", EDGES)
    _csv_gz(d / "raw" / "num-node-list.csv.gz", [N])
    _csv_gz(d / "raw" / "num-edge-list.csv.gz", [len(EDGES)])
    _csv_gz(d / "raw" / "node-feat.csv.gz", x, fmt="%.8e")
    _csv_gz(d / "raw" / "node-label.csv.gz", LABELS)
    _csv_gz(d / "raw" / "node_year.csv.gz", 2000 + np.arange(N))
    for k, v in SPLIT.items():
        _csv_gz(d / "split" / "time" / f"{k}.csv.gz", v)
    (d / "RELEASE_v1.txt").write_text("")
    return x


@pytest.fixture
def no_download(monkeypatch):
    """Makes every download path of ogb (and urllib) raise."""
    import urllib.request

    def refuse(*a, **k):
        raise AssertionError(f"attempted download: {a}")

    import ogb.nodeproppred.dataset as ds
    import ogb.utils.url as url

    for mod in (ds, url):
        monkeypatch.setattr(mod, "download_url", refuse)
        monkeypatch.setattr(mod, "decide_download", refuse)
    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def test_import_does_not_load_torch():
    code = "import sys, codesign, codesign.data, codesign.data.ogb; assert 'torch' not in sys.modules, 'torch'; " \
           "assert 'ogb' not in sys.modules, 'ogb'"
    subprocess.run([sys.executable, "-c", code], check=True)


@needs_ogb
def test_load_tiny_arxiv(tmp_path, no_download):
    x = write_tiny_arxiv(tmp_path)
    g = load_ogb_node("ogbn-arxiv", root=tmp_path)
    assert (g.n_nodes, g.n_features) == (N, F)
    np.testing.assert_allclose(np.asarray(g.x), x, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(g.y), LABELS)
    for mask, key in ((g.train_mask, "train"), (g.val_mask, "valid"), (g.test_mask, "test")):
        np.testing.assert_array_equal(np.flatnonzero(np.asarray(mask)), SPLIT[key])
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    pairs = set(zip(s.tolist(), r.tolist()))
    want = {(int(a), int(b)) for a, b in EDGES if a != b} | {(int(b), int(a)) for a, b in EDGES if a != b}
    assert pairs == want and len(pairs) == g.n_edges  # symmetric, no duplicates, no self-loops
    assert np.all(np.diff(r.astype(np.int64) * N + s) > 0)  # sorted by (receiver, sender)
    assert (tmp_path / "ogb" / "ogbn_arxiv" / "processed" / "data_processed").is_file()

    # Second load reads ogb's torch.save cache (which torch.load's weights_only default cannot).
    g2 = load_ogb_node("ogbn-arxiv", root=tmp_path)
    for field in ("senders", "receivers", "x", "y", "train_mask", "val_mask", "test_mask"):
        np.testing.assert_array_equal(np.asarray(getattr(g2, field)), np.asarray(getattr(g, field)))

    directed = load_ogb_node("ogbn-arxiv", root=tmp_path, to_undirected=False)
    assert set(zip(np.asarray(directed.senders).tolist(), np.asarray(directed.receivers).tolist())) == \
        {(int(a), int(b)) for a, b in EDGES if a != b}


@needs_ogb
def test_missing_files_raise_without_download(tmp_path, no_download):
    with pytest.raises(FileNotFoundError, match="ogbn_products"):
        load_ogb_node("ogbn-products", root=tmp_path)


@needs_ogb
def test_folder_without_release_file_raises(tmp_path, no_download):
    write_tiny_arxiv(tmp_path)
    (tmp_path / "ogb" / "ogbn_arxiv" / "RELEASE_v1.txt").unlink()
    with pytest.raises(ValueError, match="RELEASE_v1.txt"):
        load_ogb_node("ogbn-arxiv", root=tmp_path)


@needs_ogb
@pytest.mark.parametrize("name, match", [("ogbn-nope", "unknown OGB"), ("ogbn-mag", "heterogeneous"),
                                         ("ogbn-proteins", "112 tasks")])
def test_unsupported_names(tmp_path, no_download, name, match):
    with pytest.raises(ValueError, match=match):
        load_ogb_node(name, root=tmp_path)


def test_cache_loader_refuses_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    path = tmp_path / "data_processed"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("data_processed/data.pkl", pickle.dumps({"graph": Evil()}, protocol=4))
    with pytest.raises(ValueError, match="refusing to load global"):
        cogb._load_torch_numpy(path)
    ok = tmp_path / "ok"
    with zipfile.ZipFile(ok, "w") as z:
        z.writestr("ok/data.pkl", pickle.dumps({"a": np.arange(3), "n": 3}, protocol=4))
    got = cogb._load_torch_numpy(ok)
    np.testing.assert_array_equal(got["a"], np.arange(3))


@needs_ogb
def test_evaluate_accuracy():
    y_true = np.array([0, 1, 2, 3, 1, 0, 2, 2])
    y_pred = np.array([0, 1, 2, 0, 1, 1, 2, 3])  # 5 of 8 right
    assert cogb.evaluate("ogbn-arxiv", y_true, y_pred) == pytest.approx(5 / 8)
    assert cogb.evaluate("ogbn-arxiv", y_true[:, None], y_pred[:, None]) == pytest.approx(5 / 8)
    scores = np.eye(40)[y_pred] * 3.0 - 1.0  # [n, C] scores: argmax is y_pred
    assert cogb.evaluate("ogbn-products", y_true, scores) == pytest.approx(5 / 8)
    assert cogb.evaluate("ogbn-arxiv", y_true, y_true) == 1.0
    with pytest.raises(ValueError, match="does not match"):
        cogb.evaluate("ogbn-arxiv", y_true, y_pred[:5])
    with pytest.raises(ValueError, match="unknown OGB"):
        cogb.evaluate("ogbn-nope", y_true, y_pred)
