"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the raw ``ind.*`` files.

Files and splits: Yang, Cohen & Salakhutdinov, "Revisiting Semi-Supervised Learning with Graph
Embeddings", ICML 2016 (github.com/kimiyoung/planetoid). Preprocessing: Kipf & Welling, ICLR 2017
(row-normalized features, CiteSeer's isolated test nodes padded). The result matches PyTorch
Geometric's ``Planetoid(split="public")`` (``read_planetoid_data``) node for node.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import os
import pickle
import tempfile
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

from codesign.graph import Graph

PLANETOID_NAMES = ("cora", "citeseer", "pubmed")
_EXTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
_URL = "https://github.com/kimiyoung/planetoid/raw/master/data/ind.{name}.{ext}"
_N_VAL = 500  # the public split's validation set: the 500 nodes after the training nodes

# Checksums of the files at github.com/kimiyoung/planetoid (commit af6abf4), "sha256:<hex>".
# ind.pubmed.allx (~38 MB) is pinned by its git object id instead ("git-sha1:<hex>", the SHA-1
# of b"blob <size>\0" + content, taken from the repository's tree), as its SHA-256 is not known here.
CHECKSUMS: dict[str, str | None] = {
    "ind.cora.x": "sha256:23cfa55d91c6f624233f5eb7b6e3f141f1bd2b2ae39608a63cf5d084bb27baab",
    "ind.cora.tx": "sha256:b9afbaa4a400df991f6f02ef677e1e44da55ffc04801fd02f9e673987829226a",
    "ind.cora.allx": "sha256:9419ba2f26f5c35243db64aba110e0f35a04851609e0dc5433450676ca6b8543",
    "ind.cora.y": "sha256:94465c14eb53e04ca262198dcbb2521ee8af60fb3f3d546cd6ca24a511b0e7d1",
    "ind.cora.ty": "sha256:41f5ac76596a1699cc33f53084a2419e92961c42bb75f36fc38e616d348532ad",
    "ind.cora.ally": "sha256:2b998f5cc7fedc86e7f97ca2498f47a1ffc1462c29e2d578b23bf3f62b6e7d71",
    "ind.cora.graph": "sha256:58f13302f39dde8852dad6fe6d15b89b077b6d7f837626bce671ef80344b383d",
    "ind.cora.test.index": "sha256:297ce89af2b51a6a194181c7dbe1796c6a1cf9cd9349a88383b1b1e227867875",
    "ind.citeseer.x": "sha256:d20de19150741e555de0ed037195630fc194114ebc7fd72ced62810148aa22f6",
    "ind.citeseer.tx": "sha256:539a8906a2da97628d212f2fdd668c109a8b3f0d36574b59e5d3fd5b5303da21",
    "ind.citeseer.allx": "sha256:2ac30345d95c9ec933a817ee0bdd6a5f077f8c184a20e696910192d534414668",
    "ind.citeseer.y": "sha256:8ba87e515d8e3ee3cf52f6d2c5b86aa73f11ecad825a808455209ec26cd54924",
    "ind.citeseer.ty": "sha256:55e5bd1ba1e733a04598753ad1a8d57957f4b8f89e74519f41f4f4938767e4ce",
    "ind.citeseer.ally": "sha256:f704b2d986dde6c2669934de1f3ae5696a6cf9455c0f6b2646a2d135ea0a1c95",
    "ind.citeseer.graph": "sha256:d79a4ef9d3e7169aee8946145f6b7306e35bc79bffad26346cfb94e10e9912a7",
    "ind.citeseer.test.index": "sha256:2af990671580b6b2df5d158d1038f8292e30c9cd821b5453f399659b25b723d4",
    "ind.pubmed.x": "sha256:fbe9cb5c47200d1b7769a26e579be3b7130b556831f9d850e77c4c74f2599b33",
    "ind.pubmed.tx": "sha256:4eb5f5d0f30f26497eb0ac6ac9719d09c67e284f1ed0385c93f3ef27a671da3d",
    "ind.pubmed.allx": "git-sha1:3b86bccf08111c37c632a9dd8ab63db25ea76361",
    "ind.pubmed.y": "sha256:e6c807633307a07ed659249006536a147c7999c797f11a2560752990181b41b3",
    "ind.pubmed.ty": "sha256:ee2e0d4819d9fbcc403689c3bf2e49face401b605932f093bc58ab6461130fdd",
    "ind.pubmed.ally": "sha256:0c37bbe3b5014ec365e9d393cf4791925e5ed94fb194305d74f064a8d7b50f0e",
    "ind.pubmed.graph": "sha256:5b89f0036ca22909471f1e6558eb42fa06e0c730a577bde5b058b40638f81dc9",
    "ind.pubmed.test.index": "sha256:b101d421688bbaecbd82e8a18f1e282378d6830f3a37666f28ebc47f844341b5",
}


def default_root() -> Path:
    """``$CODESIGN_DATA`` if set, else the download cache ``${XDG_CACHE_HOME:-~/.cache}/codesign``."""
    env = os.environ.get("CODESIGN_DATA")
    return Path(env).expanduser() if env else _cache_root()


def _cache_root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "codesign"


def _digest(data: bytes, algo: str) -> str:
    if algo == "git-sha1":  # git's object id of a blob
        return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return hashlib.new(algo, data).hexdigest()


def verify_checksum(path: str | os.PathLike, expected: str | None) -> None:
    """Raises ``ValueError`` naming ``path`` and both hashes unless ``path`` matches ``expected``
    (``"<algo>:<hex>"``, algo ``sha256`` or ``git-sha1``); ``None`` checks nothing."""
    if expected is None:
        return
    algo, want = expected.split(":", 1)
    got = _digest(Path(path).read_bytes(), algo)
    if got != want:
        raise ValueError(f"{path}: {algo} checksum mismatch: expected {want}, got {got}")


def _download(url: str, dest: Path, expected: str | None) -> None:
    """Fetches ``url`` into ``dest`` atomically (temp file + os.replace) after checking it."""
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            data = resp.read()
    except (urllib.error.URLError, OSError) as e:
        raise FileNotFoundError(
            f"Planetoid file {dest} is missing and downloading it from {url} failed ({e}). "
            f"If you have a local copy, set CODESIGN_DATA=/path/containing/planetoid or pass "
            f"root=/path/containing/planetoid (the directory holding planetoid/{dest.name}).") from e
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=dest.name + ".", suffix=".part")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        try:
            verify_checksum(tmp, expected)
        except ValueError as e:
            raise ValueError(f"downloaded {dest.name} from {url} is corrupt, deleted it: "
                             f"{str(e).split(': ', 1)[1]}") from None
        os.replace(tmp, dest)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _find_files(name: str, root) -> dict[str, Path]:
    """Paths of the 8 raw files; downloads missing ones only into the default cache."""
    base = Path(root).expanduser() if root is not None else default_root()
    may_download = root is None and not os.environ.get("CODESIGN_DATA")
    paths = {ext: base / "planetoid" / f"ind.{name}.{ext}" for ext in _EXTS}
    for p in paths.values():
        if p.is_file():
            continue
        if may_download:
            _download(_URL.format(name=name, ext=p.name[len(f"ind.{name}."):]), p, CHECKSUMS.get(p.name))
        else:
            raise FileNotFoundError(
                f"Planetoid file {p} not found. Point the loader at a local copy: set "
                f"CODESIGN_DATA=/path/containing/planetoid or pass root=/path/containing/planetoid "
                f"(with neither, missing files are downloaded into {_cache_root()}).")
    return paths


_SAFE = {  # the globals the Planetoid pickles (and the same objects pickled today) refer to
    "__builtin__": {"list", "dict", "set", "tuple", "int", "float", "object"},
    "builtins": {"list", "dict", "set", "tuple", "int", "float", "object"},
    "collections": {"defaultdict", "OrderedDict"},
    "copy_reg": {"_reconstructor"}, "copyreg": {"_reconstructor"},
    "numpy": {"ndarray", "dtype"},
    "_codecs": {"encode"},  # how python 3 writes bytes at protocol 2
}


class _Unpickler(pickle.Unpickler):
    """Loads python2 pickles of numpy/scipy objects under current module paths; refuses
    anything else (so a tampered file cannot run code)."""

    def find_class(self, module, name):
        if module.startswith("numpy.core.") or module.startswith("numpy._core."):
            if name in ("_reconstruct", "scalar", "_frombuffer"):
                module = module.replace("numpy.core.", "numpy._core.", 1)
                try:  # numpy >= 2 moved numpy.core to numpy._core
                    importlib.import_module(module)
                except ImportError:
                    module = module.replace("numpy._core.", "numpy.core.", 1)
                return super().find_class(module, name)
        elif module.startswith("scipy.sparse") and name.endswith(("_matrix", "_array")):
            return getattr(sp, name)  # old private paths (scipy.sparse.csr) are gone or deprecated
        elif name in _SAFE.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def _load_pickle(path: Path):
    try:
        with open(path, "rb") as f:
            return _Unpickler(f, encoding="latin1").load()
    except OSError:
        raise
    except Exception as e:  # pickle raises many types on truncated/corrupted input
        raise ValueError(f"{path}: not a readable Planetoid pickle, the file may be truncated or "
                         f"corrupted ({type(e).__name__}: {e})") from e


def _matrix(path: Path, labels: bool = False):
    obj = _load_pickle(path)
    if not (sp.issparse(obj) or isinstance(obj, np.ndarray)) or obj.ndim != 2:
        raise ValueError(f"{path}: expected a 2-D matrix, got {type(obj).__name__} "
                         f"with shape {getattr(obj, 'shape', None)}")
    if labels:
        return np.asarray(obj.toarray() if sp.issparse(obj) else obj)
    return sp.csr_matrix(obj, dtype=np.float64)


def load_planetoid(name: str, root: str | os.PathLike | None = None,
                   normalize_features: bool = True) -> Graph:
    """Loads Cora, CiteSeer or PubMed with the public Planetoid split.

    Reads ``<root>/planetoid/ind.{name}.{x,tx,allx,y,ty,ally,graph,test.index}``. ``root`` is the
    argument, else ``$CODESIGN_DATA``, else ``${XDG_CACHE_HOME:-~/.cache}/codesign``; only in that
    last case are missing files downloaded (once, from github.com/kimiyoung/planetoid, checked
    against `CHECKSUMS`). Construction follows PyG's ``read_planetoid_data``:
    x = [allx; tx] with the test rows moved to their ``test.index`` nodes; y = argmax of the one-hot
    labels (a node with an all-zero label row, e.g. CiteSeer's 15 isolated test nodes padded in as
    in Kipf's ``gcn/utils.py``, gets label 0); train = the first len(y) nodes, val = the next 500,
    test = the ``test.index`` nodes; edges = the adjacency lists in both directions, self-loops
    and duplicates removed. ``normalize_features`` divides each feature row by its sum (zero rows
    stay zero), as in Kipf & Welling (2017).

    Returns a `Graph` (N nodes, E directed edges, F features, C classes): senders/receivers
    int32 [E] sorted by (receiver, sender), x float32 [N, F], y int32 [N] in [0, C), masks bool [N].
    Cora: N=2708, E=10556, F=1433, C=7, split 140/500/1000. CiteSeer: 3327, 9104, 3703, 6, 120/500/1000.
    PubMed: 19717, 88648, 500, 3, 60/500/1000.

    Raises:
      ValueError: unknown ``name``; a corrupted or truncated file (names it); row counts that
        disagree between files; split sizes that do not add up; a download whose checksum differs.
      FileNotFoundError: a file is missing (and could not be downloaded); the message says how to
        point at a local copy (``CODESIGN_DATA`` or ``root=``).
    """
    key = str(name).lower()
    if key not in PLANETOID_NAMES:
        raise ValueError(f"unknown Planetoid dataset {name!r}; choose one of {', '.join(PLANETOID_NAMES)}")
    paths = _find_files(key, root)
    x, tx, allx = (_matrix(paths[e]) for e in ("x", "tx", "allx"))
    y, ty, ally = (_matrix(paths[e], labels=True) for e in ("y", "ty", "ally"))
    graph = _load_pickle(paths["graph"])
    try:
        test_index = np.array(paths["test.index"].read_text().split(), dtype=np.int64)
    except ValueError as e:
        raise ValueError(f"{paths['test.index']}: expected one integer per line ({e})") from e

    m = dict(x=x, tx=tx, allx=allx, y=y, ty=ty, ally=ally)
    for fa, fb, axis, what in (("x", "y", 0, "rows"), ("tx", "ty", 0, "rows"), ("allx", "ally", 0, "rows"),
                               ("x", "allx", 1, "features"), ("tx", "allx", 1, "features"),
                               ("y", "ally", 1, "classes"), ("ty", "ally", 1, "classes")):
        if m[fa].shape[axis] != m[fb].shape[axis]:
            raise ValueError(f"{paths[fa].name} has {m[fa].shape[axis]} {what} but "
                             f"{paths[fb].name} has {m[fb].shape[axis]}")
    n_train, n_allx = x.shape[0], allx.shape[0]
    if test_index.size != tx.shape[0] or np.unique(test_index).size != test_index.size:
        raise ValueError(f"{paths['test.index'].name} lists {np.unique(test_index).size} distinct "
                         f"nodes ({test_index.size} lines) but {paths['tx'].name} has {tx.shape[0]} rows")
    order = np.sort(test_index)
    if test_index.size and order[0] != n_allx:
        raise ValueError(f"{paths['test.index'].name}: test nodes must start right after the "
                         f"{n_allx} rows of {paths['allx'].name}, got first index {order[0]}")
    if n_train + _N_VAL > n_allx:
        raise ValueError(f"split sizes do not add up: {n_train} train ({paths['y'].name}) + {_N_VAL} "
                         f"val nodes > {n_allx} rows of {paths['allx'].name}")
    # Pad tx/ty with zero rows for test indices missing from test.index (CiteSeer's isolated
    # nodes, as PyG and Kipf's gcn/utils.py do; a no-op for Cora and PubMed).
    span = int(order[-1] - n_allx + 1) if test_index.size else 0
    tx_ext = sp.lil_matrix((span, tx.shape[1]))
    tx_ext[order - n_allx] = tx
    ty_ext = np.zeros((span, ty.shape[1]), ty.dtype)
    ty_ext[order - n_allx] = ty
    n = n_allx + span
    perm = np.arange(n)
    perm[test_index] = order  # tx row i belongs to node test_index[i]
    feats = sp.vstack([allx, tx_ext.tocsr()]).tocsr()[perm]
    labels = np.concatenate([ally, ty_ext])[perm].argmax(axis=1).astype(np.int32)
    if normalize_features:
        s = np.asarray(feats.sum(axis=1)).ravel()
        feats = sp.diags(np.divide(1.0, s, out=np.zeros_like(s), where=s != 0)) @ feats
    feats = feats.toarray().astype(np.float32)

    if not isinstance(graph, Mapping):
        raise ValueError(f"{paths['graph']}: expected a dict of adjacency lists, got {type(graph).__name__}")
    try:
        src = np.repeat(np.array([int(k) for k in graph], np.int64), [len(v) for v in graph.values()])
        dst = np.fromiter(itertools.chain.from_iterable(graph.values()), np.int64, count=src.size)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{paths['graph']}: adjacency lists must hold node ids ({e})") from e
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise ValueError(f"{paths['graph']}: node ids must be in [0, {n}), got "
                         f"[{min(src.min(), dst.min())}, {max(src.max(), dst.max())}]")
    s, r = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = s != r
    code = np.unique(r[keep] * n + s[keep])  # sorted by (receiver, sender), duplicates removed

    masks = [np.zeros(n, bool) for _ in range(3)]
    masks[0][:n_train] = True
    masks[1][n_train:n_train + _N_VAL] = True
    masks[2][test_index] = True
    return Graph(senders=jnp.asarray(code % n, jnp.int32), receivers=jnp.asarray(code // n, jnp.int32),
                 x=jnp.asarray(feats), y=jnp.asarray(labels),
                 train_mask=jnp.asarray(masks[0]), val_mask=jnp.asarray(masks[1]),
                 test_mask=jnp.asarray(masks[2]), n_nodes=n)
