"""Planetoid citation graphs (Cora, CiteSeer, PubMed) from the raw ``ind.*`` files.

Files and splits: Yang, Cohen & Salakhutdinov, "Revisiting Semi-Supervised Learning with Graph
Embeddings", ICML 2016 (github.com/kimiyoung/planetoid). Preprocessing: Kipf & Welling, ICLR 2017
(row-normalized features, CiteSeer's isolated test nodes padded). The result matches PyTorch
Geometric's ``Planetoid(split="public")`` (``read_planetoid_data``) node for node.
"""

from __future__ import annotations

from typing import final

import hashlib
import importlib
import itertools
import os
import pickle
import tempfile
import urllib.error
import urllib.request
import warnings
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
# CiteSeer: test.index may skip nodes (isolated, padded with zero rows); its span may be at most this
# many times the number of tx rows (the real file: 1015 nodes for 1000 rows).
_MAX_SPAN_PER_TEST_ROW = 3

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
    return Path(env).expanduser() if env else cache_root()


def cache_root() -> Path:
    """The download cache: ``${XDG_CACHE_HOME:-~/.cache}/codesign``."""
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
                f"(with neither, missing files are downloaded into {cache_root()}).")
    return paths


SKIP_VERIFY_ENV = "CODESIGN_SKIP_VERIFY"
_verified: dict[tuple[str, int, int, str], None] = {}  # (path, size, mtime_ns, expected) checked in-process


def skip_verify_from_env() -> bool:
    """Whether ``$CODESIGN_SKIP_VERIFY`` asks to skip checksum verification (1/true/yes).

    Raises:
      ValueError: any other non-empty value.
    """
    val = os.environ.get(SKIP_VERIFY_ENV, "").strip().lower()
    if val in ("", "0", "false", "no"):
        return False
    if val in ("1", "true", "yes"):
        return True
    raise ValueError(f"${SKIP_VERIFY_ENV}: expected 1/true/yes (skip) or 0/false/no/unset (verify), got {val!r}")


def _verify_files(paths: Mapping[str, Path], verify: bool) -> None:
    """Checks every file against `CHECKSUMS` (wherever it came from) unless opted out, in which
    case it warns naming the files left unverified. A file with no known checksum is an error
    unless opted out. Results are cached per (path, size, mtime) for this process."""
    if not isinstance(verify, bool):
        raise TypeError(f"load_planetoid: verify must be a bool, got {type(verify).__name__}")
    if not verify or skip_verify_from_env():
        how = "verify=False" if not verify else f"{SKIP_VERIFY_ENV}=1"
        warnings.warn(f"load_planetoid: {how}: NOT checking {', '.join(str(p) for p in paths.values())} "
                      f"against their known checksums", stacklevel=3)
        return
    for p in paths.values():
        expected = CHECKSUMS.get(p.name)
        if expected is None:
            raise ValueError(f"{p}: no known checksum for {p.name}; to load it unverified pass verify=False "
                             f"or set {SKIP_VERIFY_ENV}=1")
        st = p.stat()
        key = (str(p.resolve()), st.st_size, st.st_mtime_ns, expected)
        if key not in _verified:
            try:
                verify_checksum(p, expected)
            except ValueError as e:
                raise ValueError(f"{e} (a modified copy? load it with verify=False or {SKIP_VERIFY_ENV}=1)") from None
            _verified[key] = None


# --------------------------------------------------------------------------- restricted unpickling
# The real Cora files (python 2 pickles) refer to exactly these globals, by pickletools:
# numpy.core.multiarray._reconstruct, numpy.ndarray, numpy.dtype, scipy.sparse.csr.csr_matrix,
# collections.defaultdict, __builtin__.list. (CiteSeer's and PubMed's were not at hand to inspect;
# they are written by the same code. Should one refer to another class, loading it fails with
# "refusing to load global ...".) The same objects pickled today add numpy._core paths,
# scipy.sparse._csr, csr_array, _codecs.encode and copyreg. No global may be called to allocate:
# a CSR class cannot be constructed with arguments (only created empty and filled from the file's
# own arrays, then fully checked), and _reconstruct only makes the empty placeholder that the
# array's stored bytes then fill. With labels required to be dense arrays, every row count is
# bounded by a file's size (a CSR matrix's width is not).

class _NoInit:
    """Mixin: an instance may be created empty (NEWOBJ, copyreg._reconstructor) but calling
    the class with arguments (REDUCE) is refused."""

    def __init__(self, *args, **kwargs):
        raise pickle.UnpicklingError(f"refusing to call {type(self).__mro__[2].__name__}(...) from a pickle")


@final
class _CsrMatrix(_NoInit, sp.csr_matrix):
    pass


@final
class _CsrArray(_NoInit, sp.csr_array):
    pass


_ND_ARRAY = object()  # stands for numpy.ndarray: usable only as _reconstruct's first argument


def _reconstruct(subtype, shape, dtype):
    if subtype is not _ND_ARRAY or tuple(shape) != (0,):
        raise pickle.UnpicklingError(f"refusing numpy _reconstruct({subtype!r}, {shape!r}, ...): only the "
                                     f"empty ndarray placeholder (0,) is allowed")
    return np.ndarray.__new__(np.ndarray, (0,), dtype)


def _np_core(qualname: str):
    module, name = qualname.split(".")
    try:  # numpy >= 2 moved numpy.core to numpy._core
        mod = importlib.import_module("numpy._core." + module)
    except ImportError:
        mod = importlib.import_module("numpy.core." + module)
    return getattr(mod, name)


_SPARSE = {"csr_matrix": _CsrMatrix, "csr_array": _CsrArray}
_SPARSE_MODULES = ("scipy.sparse", "scipy.sparse.csr", "scipy.sparse._csr")
_BUILTINS = {"list", "dict", "set", "tuple", "int", "float", "object"}
_SAFE = {
    "__builtin__": _BUILTINS, "builtins": _BUILTINS,
    "collections": {"defaultdict", "OrderedDict"},
    "copy_reg": {"_reconstructor"}, "copyreg": {"_reconstructor"},
    "_codecs": {"encode"},  # how python 3 writes bytes at protocol 2
}


class _Unpickler(pickle.Unpickler):
    """Loads python2 pickles of numpy arrays / scipy CSR matrices and plain containers under
    current module paths; refuses every other global (so a tampered file cannot run code or
    call a factory such as ``scipy.sparse.eye_array``)."""

    def find_class(self, module, name):
        if module.startswith(("numpy.core.", "numpy._core.")):
            sub = module.split(".", 2)[2]
            if (sub, name) == ("multiarray", "_reconstruct"):
                return _reconstruct
            if (sub, name) in (("multiarray", "scalar"), ("numeric", "_frombuffer")):
                return _np_core(f"{sub}.{name}")  # both build from the file's own bytes
        elif module == "numpy" and name in ("ndarray", "dtype"):
            return _ND_ARRAY if name == "ndarray" else np.dtype
        elif module in _SPARSE_MODULES and name in _SPARSE:
            return _SPARSE[name]
        elif name in _SAFE.get(module, ()):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")


def _load_pickle(path: Path):
    try:
        with open(path, "rb") as f:
            return _Unpickler(f, encoding="latin1").load()
    except OSError:
        raise
    except pickle.UnpicklingError as e:
        if str(e).startswith("refusing"):  # ours: a global or call outside the format
            raise ValueError(f"{path}: {e}") from e
        raise ValueError(f"{path}: not a readable Planetoid pickle, the file may be truncated or "
                         f"corrupted ({type(e).__name__}: {e})") from e
    except Exception as e:  # pickle raises many types on truncated/corrupted input
        raise ValueError(f"{path}: not a readable Planetoid pickle, the file may be truncated or "
                         f"corrupted ({type(e).__name__}: {e})") from e


def _features(path: Path) -> sp.csr_matrix:
    """A feature file (x/tx/allx): a CSR matrix or a numeric 2-D array, finite -> float64 CSR."""
    obj = _load_pickle(path)
    if isinstance(obj, (_CsrMatrix, _CsrArray)):
        try:  # rebuild from the file's arrays, checking indptr/indices fully before any use
            m = sp.csr_matrix((obj.data, obj.indices, obj.indptr), shape=obj.shape)
            m.check_format(full_check=True)
        except Exception as e:
            raise ValueError(f"{path}: inconsistent CSR matrix ({type(e).__name__}: {e})") from e
        data = m.data
    elif isinstance(obj, np.ndarray) and obj.ndim == 2:
        data = m = obj
    else:
        raise ValueError(f"{path}: expected a 2-D CSR matrix or array, got {type(obj).__name__} "
                         f"with shape {getattr(obj, 'shape', None)}")
    if data.dtype.kind not in "biuf":
        raise ValueError(f"{path}: expected numeric features, got dtype {data.dtype}")
    if not np.isfinite(data).all():
        raise ValueError(f"{path}: features must be finite, got {int((~np.isfinite(data)).sum())} NaN/inf values")
    return sp.csr_matrix(m, dtype=np.float64)


def _labels(path: Path) -> np.ndarray:
    """A label file (y/ty/ally): a numeric 2-D array [rows, classes >= 1], finite (its size is
    then bounded by the file's, and so are the row counts of the files checked against it)."""
    obj = _load_pickle(path)
    if not isinstance(obj, np.ndarray) or obj.ndim != 2 or obj.shape[1] < 1 or obj.dtype.kind not in "biuf":
        raise ValueError(f"{path}: expected a numeric 2-D array of one-hot labels [rows, classes >= 1], got "
                         f"{type(obj).__name__} with shape {getattr(obj, 'shape', None)}, "
                         f"dtype {getattr(obj, 'dtype', None)}")
    if not np.isfinite(obj).all():
        raise ValueError(f"{path}: labels must be finite, got {int((~np.isfinite(obj)).sum())} NaN/inf values")
    return obj


def _test_index(path: Path, name: str, n_allx: int, n_test: int) -> np.ndarray:
    """Reads test.index (one int per line) and checks it against allx/tx: distinct, one per tx
    row, starting at ``n_allx``; contiguous for Cora/PubMed; for CiteSeer gaps (isolated test
    nodes, padded with zero rows) may bring the span to at most ``_MAX_SPAN_PER_TEST_ROW * n_test``."""
    try:
        idx = np.array(path.read_text().split(), dtype=np.int64)
    except (ValueError, OverflowError) as e:
        raise ValueError(f"{path}: expected one integer per line ({e})") from e
    if idx.size != n_test or np.unique(idx).size != idx.size:
        raise ValueError(f"{path.name} lists {np.unique(idx).size} distinct nodes ({idx.size} lines) but "
                         f"ind.{name}.tx has {n_test} rows")
    if not idx.size:
        return idx
    lo, hi = int(idx.min()), int(idx.max())
    if lo != n_allx:
        raise ValueError(f"{path.name}: test nodes must start right after the {n_allx} rows of "
                         f"ind.{name}.allx, got first index {lo}")
    span, limit = hi - lo + 1, (_MAX_SPAN_PER_TEST_ROW * n_test if name == "citeseer" else n_test)
    if span > limit:
        raise ValueError(f"{path.name}: test indices span [{lo}, {hi}] ({span} nodes) for {n_test} rows of "
                         f"ind.{name}.tx; at most {limit} allowed"
                         + (" (only citeseer pads missing test nodes)" if name != "citeseer" else ""))
    return idx


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _edges(path: Path, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The adjacency lists of the graph file as (src, dst) int64 arrays, ids checked in [0, n)."""
    graph = _load_pickle(path)
    if not isinstance(graph, Mapping):
        raise ValueError(f"{path}: expected a dict of adjacency lists, got {type(graph).__name__}")
    for k, v in graph.items():
        if not _is_int(k):
            raise ValueError(f"{path}: node ids must be ints, got key {k!r} ({type(k).__name__})")
        if not isinstance(v, (list, tuple)):
            raise ValueError(f"{path}: adjacency list of node {k} must be a list, got {type(v).__name__}")
        bad = next((u for u in v if not _is_int(u)), None)
        if bad is not None:
            raise ValueError(f"{path}: node ids must be ints, got {bad!r} ({type(bad).__name__}) "
                             f"in the list of node {k}")
    src = np.repeat(np.array(list(graph), np.int64), [len(v) for v in graph.values()])
    dst = np.fromiter(itertools.chain.from_iterable(graph.values()), np.int64, count=src.size)
    if src.size and (min(src.min(), dst.min()) < 0 or max(src.max(), dst.max()) >= n):
        raise ValueError(f"{path}: node ids must be in [0, {n}), got "
                         f"[{min(src.min(), dst.min())}, {max(src.max(), dst.max())}]")
    return src, dst


def load_planetoid(name: str, root: str | os.PathLike | None = None,
                   normalize_features: bool = True, *, verify: bool = True) -> Graph:
    """Loads Cora, CiteSeer or PubMed with the public Planetoid split.

    Reads ``<root>/planetoid/ind.{name}.{x,tx,allx,y,ty,ally,graph,test.index}``. ``root`` is the
    argument, else ``$CODESIGN_DATA``, else ``${XDG_CACHE_HOME:-~/.cache}/codesign``; only in that
    last case are missing files downloaded (once, from github.com/kimiyoung/planetoid).

    Every file, wherever it came from (``root``, ``$CODESIGN_DATA``, the cache, a download), is
    checked against its hash in `CHECKSUMS` before it is read (once per file, size and mtime in a
    process). To load your own modified copy, opt out with ``verify=False`` or the environment
    variable ``CODESIGN_SKIP_VERIFY=1``; a `UserWarning` then names the files not verified. The
    contents are validated either way (see Raises), and the pickles may refer only to the numpy
    and scipy CSR classes and builtin containers of the format, never call a constructor.

    Construction follows PyG's ``read_planetoid_data``:
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

    Raises (each message names the file and, where it applies, both values):
      ValueError: unknown ``name``; a file whose hash differs from `CHECKSUMS` (expected and
        actual hash) or that has no known hash, unless opted out; a corrupted or truncated pickle,
        or one referring to any other global ("refusing to load global <module>.<name>");
        features that are not a numeric 2-D CSR matrix/array or hold NaN/inf; labels that are
        not a numeric 2-D array [rows, classes >= 1] or hold NaN/inf; row, feature or class counts
        that disagree between x/y, tx/ty, allx/ally; ``test.index`` entries that are not integers,
        repeat, do not match tx's rows, do not start at len(allx), or span more than len(tx)
        nodes (CiteSeer: ``_MAX_SPAN_PER_TEST_ROW`` * len(tx), gaps padded); graph node ids
        that are not ints (a float is not truncated) or not in [0, N); split sizes that do not
        add up; ``$CODESIGN_SKIP_VERIFY`` set to something other than 0/1/true/false/yes/no.
      TypeError: ``verify`` is not a bool.
      FileNotFoundError: a file is missing (and could not be downloaded); the message says how to
        point at a local copy (``CODESIGN_DATA`` or ``root=``).
    """
    key = str(name).lower()
    if key not in PLANETOID_NAMES:
        raise ValueError(f"unknown Planetoid dataset {name!r}; choose one of {', '.join(PLANETOID_NAMES)}")
    paths = _find_files(key, root)
    _verify_files(paths, verify)
    x, tx, allx = (_features(paths[e]) for e in ("x", "tx", "allx"))
    y, ty, ally = (_labels(paths[e]) for e in ("y", "ty", "ally"))

    m = dict(x=x, tx=tx, allx=allx, y=y, ty=ty, ally=ally)
    for fa, fb, axis, what in (("x", "y", 0, "rows"), ("tx", "ty", 0, "rows"), ("allx", "ally", 0, "rows"),
                               ("x", "allx", 1, "features"), ("tx", "allx", 1, "features"),
                               ("y", "ally", 1, "classes"), ("ty", "ally", 1, "classes")):
        if m[fa].shape[axis] != m[fb].shape[axis]:
            raise ValueError(f"{paths[fa].name} has {m[fa].shape[axis]} {what} but "
                             f"{paths[fb].name} has {m[fb].shape[axis]}")
    n_train, n_allx = x.shape[0], allx.shape[0]
    test_index = _test_index(paths["test.index"], key, n_allx, tx.shape[0])
    if n_train + _N_VAL > n_allx:
        raise ValueError(f"split sizes do not add up: {n_train} train ({paths['y'].name}) + {_N_VAL} "
                         f"val nodes > {n_allx} rows of {paths['allx'].name}")
    # Pad tx/ty with zero rows for test indices missing from test.index (CiteSeer's isolated
    # nodes, as PyG and Kipf's gcn/utils.py do; a no-op for Cora and PubMed).
    order = np.sort(test_index)
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

    src, dst = _edges(paths["graph"], n)
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
