"""Tests for codesign.data.wordnet: the wndb(5WN) parser on a hand-written fixture
(tests/data/wordnet_tiny, 11 synsets whose nodes, edges, labels and features are listed here by
hand), its error messages, checksums, the sources (root, cache, tarball download) and, once, the
real WordNet 3.0 graph."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import pytest

from codesign.data import WordNetInfo, load_wordnet
from codesign.data import wordnet as wn

TINY = Path(__file__).parent / "data" / "wordnet_tiny"
TINY_SHA = {f: hashlib.sha256((TINY / f).read_bytes()).hexdigest() for f in wn.DATA_FILES}

# Nodes in order: noun entity animal dog cat leg, verb run walk, adj big large(s) small, adv quickly.
TINY_Y = [3, 5, 5, 5, 8, 38, 38, 0, 0, 0, 2]
TINY_OFFSETS = [1740, 1810, 1935, 2064, 2184, 1740, 1831, 1740, 1829, 1894, 1740]
TINY_POS = list("nnnnnvvasar")
R = {sym: i for i, (sym, _) in enumerate(wn.POINTERS)}
# (sender, receiver, relation) of every pointer but cat's second "+" to walk (a duplicate) and leg's
# "+" to itself (a self-loop).
TINY_TYPED = {(0, 1, R["~"]), (1, 0, R["@"]), (1, 2, R["~"]), (1, 3, R["~"]), (2, 1, R["@"]), (2, 5, R["+"]),
              (2, 4, R["%p"]), (3, 1, R["@"]), (3, 6, R["+"]), (4, 2, R["#p"]), (5, 2, R["+"]), (6, 3, R["+"]),
              (6, 5, R["$"]), (7, 9, R["!"]), (7, 8, R["&"]), (8, 7, R["&"]), (9, 7, R["!"]), (10, 7, R["\\"])}
TINY_PAIRS = {(0, 1), (1, 2), (1, 3), (2, 5), (2, 4), (3, 6), (5, 6), (7, 9), (7, 8), (7, 10)}
# vocab_size 5: "a" is in 4 glosses, "animal" and "size" in 3, then "average" and "dog" first of those in 2.
TINY_VOCAB = ("a", "animal", "size", "average", "dog")
TINY_X = [[0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 0, 0, 1], [1, 1, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 0, 0, 1],
          [0, 0, 0, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 0, 0]]


@pytest.fixture
def tiny_env(monkeypatch, tmp_path):
    """The fixture's hashes as the known checksums, a private cache, no system copy."""
    monkeypatch.setattr(wn, "CHECKSUMS", dict(TINY_SHA))
    monkeypatch.setattr(wn, "SYSTEM_DIRS", ())
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("CODESIGN_SKIP_VERIFY", raising=False)
    return tmp_path


def _copy_tiny(dst: Path) -> Path:
    dst.mkdir(parents=True, exist_ok=True)
    for f in (*wn.DATA_FILES, "LICENSE"):
        shutil.copy(TINY / f, dst / f)
    return dst


def _edges(g):
    return list(zip(np.asarray(g.senders).tolist(), np.asarray(g.receivers).tolist()))


# ----------------------------------------------------------------------------- the tiny fixture


def test_tiny_typed_graph_by_hand(tiny_env):
    g, info = load_wordnet(TINY, vocab_size=5, symmetrize=False, return_info=True)
    assert g.n_nodes == 11
    np.testing.assert_array_equal(np.asarray(g.y), TINY_Y)
    typed = [(s, r, t) for (s, r), t in zip(_edges(g), np.asarray(g.edge_type).tolist())]
    assert set(typed) == TINY_TYPED and len(typed) == len(TINY_TYPED)
    assert typed == sorted(typed, key=lambda e: (e[2], e[1], e[0]))  # sorted by (type, receiver, sender)
    assert (info.n_pointers, info.n_typed_edges) == (20, 18)
    np.testing.assert_array_equal(info.synset_offset, TINY_OFFSETS)
    assert info.synset_pos.tolist() == TINY_POS
    assert info.lexnames == wn.LEXNAMES and info.pointers == wn.POINTERS and info.file_sha256 == TINY_SHA
    assert info.source == str(TINY)


def test_tiny_typed_graph_splits_into_relations(tiny_env):
    from codesign.models.rgcn import relation_adjacencies

    g = load_wordnet(TINY, vocab_size=5, symmetrize=False)
    adjs = relation_adjacencies(g, len(wn.POINTERS))
    sizes = [int(a.senders.shape[0]) for a in adjs]
    assert sizes == [sum(t == r for *_, t in TINY_TYPED) for r in range(len(wn.POINTERS))]


def test_tiny_symmetrized_graph_by_hand(tiny_env):
    g = load_wordnet(TINY, vocab_size=5)
    assert g.edge_type is None
    want = sorted({(a, b) for p in TINY_PAIRS for a, b in (p, p[::-1])}, key=lambda e: (e[1], e[0]))
    assert _edges(g) == want  # union with the reverses, sorted by (receiver, sender), no loop, no duplicate
    assert g.senders.dtype == np.int32 and g.x.dtype == np.float32 and g.y.dtype == np.int32


def test_tiny_features_by_hand(tiny_env):
    g, info = load_wordnet(TINY, vocab_size=5, return_info=True)
    assert info.vocab == TINY_VOCAB
    np.testing.assert_array_equal(np.asarray(g.x), np.asarray(TINY_X, np.float32))
    assert wn.tokenize('a domestic animal; "the dog\'s tail wagged"') == \
        ["a", "domestic", "animal", "the", "dog", "s", "tail", "wagged"]
    g_all, info_all = load_wordnet(TINY, vocab_size=1000, return_info=True)
    assert g_all.n_features == len(info_all.vocab) == 37  # every distinct gloss token (counted by hand)


def test_tiny_split_is_stratified_and_seeded(tiny_env):
    g, info = load_wordnet(TINY, vocab_size=5, split_seed=3, return_info=True)
    masks = [np.asarray(m) for m in (g.train_mask, g.val_mask, g.test_mask)]
    assert (masks[0].astype(int) + masks[1] + masks[2] == 1).all()
    y = np.asarray(g.y)
    for c, n_c in zip(*np.unique(y, return_counts=True)):  # n_c*3//5 train, n_c//5 val, the rest test
        assert [int(m[y == c].sum()) for m in masks] == [n_c * 3 // 5, n_c // 5, n_c - n_c * 3 // 5 - n_c // 5]
    assert info.split_hash == wn.split_hash(*masks)
    again = wn.stratified_split(y, 3)
    assert all((a == b).all() for a, b in zip(again, masks))


def test_verb_frames_and_satellite_targets_parse(tiny_env):
    p = wn.parse_data_file("data.verb", (TINY / "data.verb").read_bytes())
    assert p.offset == [1740, 1831] and p.lex == [38, 38] and p.line == [30, 31]
    assert p.gloss == ['move fast on foot; "run, dog!"', "move on foot"]
    a = wn.parse_data_file("data.adj", (TINY / "data.adj").read_bytes())
    assert a.pos == ["a", "s", "a"] and a.p_file == [2, 2, 2, 2]  # "s" and "a" targets both name data.adj


# ----------------------------------------------------------------------------- malformed lines

LINE_C = 32  # dog's line in data.noun (29 license lines, then entity, animal, dog)


@pytest.mark.parametrize("old,new,match", [
    (" 003 @", " 00x @", "p_cnt: expected 3 decimal digits, got '00x'"),
    (" 01 dog", " 0g dog", "w_cnt: expected 2 hex digits, got '0g'"),
    (" 01 dog", " 00 dog", "w_cnt: a synset needs at least one word"),
    ("dog 0 003", "dog x 003", "word 1 lex_id: expected 1 hex digits"),
    ("00001935 05", "00001936 05", "synset_offset: 00001936 is not the line's byte offset 00001935"),
    ("00001935 05", "00001935 29", "lex_filenum: 29 is not a noun"),
    ("00001935 05", "00001935 45", "lex_filenum: 45 is not a noun"),
    ("05 n 01 dog", "05 v 01 dog", "ss_type: expected n in data.noun, got 'v'"),
    ("%p", "%q", "pointer 3 pointer_symbol: unknown '%q'"),
    ("+ 00001740 v", "+ 00001740 x", "pointer 2 pos: expected n, v, a, s or r, got 'x'"),
    ("v 0101", "v 01g1", "pointer 2 source/target: expected 4 hex digits"),
    (" 003 @", " 004 @", "pointer 4 pointer_symbol: line ends early"),
    (" 003 @", " 002 @", "p_cnt: 4 field\\(s\\) beyond those p_cnt=2 announces"),
    ("0000 | a domestic", "0000 a domestic", "gloss: no ' \\| '"),
])
def test_malformed_noun_line_names_file_line_and_field(old, new, match):
    lines = (TINY / "data.noun").read_text().split("\n")
    assert old in lines[LINE_C - 1]
    lines[LINE_C - 1] = lines[LINE_C - 1].replace(old, new, 1)
    with pytest.raises(ValueError, match=f"^dir/data.noun: line {LINE_C}: {match}"):
        wn.parse_data_file("data.noun", "\n".join(lines).encode(), "dir/data.noun")


@pytest.mark.parametrize("old,new,match", [
    ("01 + 02 00", "01 - 02 00", "frame 1: expected '\\+ f_num w_num', got '- 02 00'"),
    ("01 + 02 00", "01 + 2x 00", "frame 1 f_num: expected 2 decimal digits"),
    ("01 + 02 00", "02 + 02 00", "frame 2: expected '\\+ f_num w_num', got ''"),
    ("01 + 02 00", "01 + 02 00 + 03", "f_cnt: 2 field\\(s\\) beyond the f_cnt=1 frames before the gloss: '\\+ 03'"),
])
def test_malformed_verb_frames(old, new, match):
    text = (TINY / "data.verb").read_text().replace(old, new, 1)
    with pytest.raises(ValueError, match=f"^data.verb: line 30: {match}"):
        wn.parse_data_file("data.verb", text.encode())


def test_not_utf8_and_empty_file():
    data = (TINY / "data.adv").read_bytes().replace(b"speed", b"sp\xffed")
    with pytest.raises(ValueError, match="^data.adv: line 30: not UTF-8"):
        wn.parse_data_file("data.adv", data)
    header = b"".join(ln for ln in io.BytesIO((TINY / "data.adv").read_bytes()) if ln.startswith(b"  "))
    with pytest.raises(ValueError, match="^x/data.adv: no synset lines"):
        wn.parse_data_file("data.adv", header, "x/data.adv")


def test_dangling_pointer_names_file_line_and_target(tiny_env):
    d = _copy_tiny(tiny_env / "wn")
    text = (d / "data.noun").read_text().replace("@ 00001740 n", "@ 00001741 n", 1)  # animal's hypernym
    (d / "data.noun").write_text(text)
    with pytest.warns(UserWarning, match="verify=False: NOT checking"), \
            pytest.raises(ValueError, match=f"^{d}/data.noun: line 31: pointer target 00001741 is no synset "
                                            f"of data.noun"):
        load_wordnet(d, verify=False)


# ----------------------------------------------------------------------------- checksums and options


def test_checksum_mismatch_names_file_and_both_hashes(tiny_env, monkeypatch):
    d = _copy_tiny(tiny_env / "wn")
    (d / "data.verb").write_bytes((d / "data.verb").read_bytes().replace(b"move on foot", b"move on feet"))
    got = hashlib.sha256((d / "data.verb").read_bytes()).hexdigest()
    with pytest.raises(ValueError, match=f"^{d}/data.verb: sha256 checksum mismatch: expected "
                                         f"{TINY_SHA['data.verb']}, got {got}"):
        load_wordnet(d)
    with pytest.warns(UserWarning, match=f"verify=False: NOT checking {d}/data.noun"):
        g = load_wordnet(d, verify=False, vocab_size=5)
    assert g.n_nodes == 11
    monkeypatch.setenv("CODESIGN_SKIP_VERIFY", "1")
    with pytest.warns(UserWarning, match="CODESIGN_SKIP_VERIFY=1: NOT checking"):
        load_wordnet(d, vocab_size=5)


def test_real_checksums_reject_the_fixture(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(ValueError, match=f"data.noun: sha256 checksum mismatch: expected {wn.CHECKSUMS['data.noun']}, "
                                         f"got {TINY_SHA['data.noun']}"):
        load_wordnet(TINY)


def test_bad_options(tiny_env):
    with pytest.raises(ValueError, match="vocab_size must be a positive int, got 0"):
        load_wordnet(TINY, vocab_size=0)
    with pytest.raises(ValueError, match="vocab_size must be a positive int, got True"):
        load_wordnet(TINY, vocab_size=True)
    with pytest.raises(TypeError, match="verify must be a bool, got str"):
        load_wordnet(TINY, verify="yes")
    with pytest.raises(TypeError, match="cache must be a bool, got int"):
        load_wordnet(TINY, cache=1)


def test_missing_files(tiny_env):
    with pytest.raises(FileNotFoundError, match=f"neither {tiny_env}/wordnet nor {tiny_env} holds data.noun"):
        load_wordnet(tiny_env)
    d = tiny_env / "part" / "wordnet"
    d.mkdir(parents=True)
    shutil.copy(TINY / "data.noun", d / "data.noun")
    with pytest.raises(FileNotFoundError, match=f"WordNet folder {d} is incomplete: {d}/data.verb, {d}/data.adj"):
        load_wordnet(tiny_env / "part")


def test_root_wordnet_subfolder_and_codesign_data(tiny_env, monkeypatch):
    _copy_tiny(tiny_env / "data" / "wordnet")
    g, info = load_wordnet(tiny_env / "data", vocab_size=5, return_info=True)
    assert info.source == str(tiny_env / "data" / "wordnet") and g.n_nodes == 11
    monkeypatch.setenv("CODESIGN_DATA", str(tiny_env / "data"))
    assert load_wordnet(vocab_size=5, return_info=True)[1].source == str(tiny_env / "data" / "wordnet")


def test_parse_cache_hit_and_corrupt_file(tiny_env):
    g1 = load_wordnet(TINY, vocab_size=5)
    files = list((tiny_env / "cache" / "codesign" / "wordnet" / "parsed").glob("wordnet-*.npz"))
    assert len(files) == 1
    files[0].write_bytes(b"not a zip")  # unreadable: parsed again and replaced
    g2 = load_wordnet(TINY, vocab_size=5)
    with np.load(files[0]) as z:
        assert z["y"].tolist() == TINY_Y
    g3 = load_wordnet(TINY, vocab_size=5)  # from the cache
    for g in (g2, g3):
        assert _edges(g) == _edges(g1) and (np.asarray(g.x) == np.asarray(g1.x)).all()
    load_wordnet(TINY, vocab_size=4, cache=False)
    assert len(list(files[0].parent.glob("*.npz"))) == 1


# ----------------------------------------------------------------------------- download


def _tarball(path: Path, skip=(), tamper=()) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for f in (*wn.DATA_FILES, "LICENSE", "README"):
            if f in skip:
                continue
            data = (TINY / f).read_bytes() if f != "README" else b"not extracted"
            if f in tamper:
                data = data.replace(b"size", b"SIZE")
            info = tarfile.TarInfo(f"WordNet-3.0/{'dict/' if f.startswith('data.') else ''}{f}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        evil = tarfile.TarInfo("../evil")  # never extracted: only named members are read
        evil.size = 1
        tar.addfile(evil, io.BytesIO(b"x"))
    return path.as_uri()


@pytest.fixture
def download_env(tiny_env, monkeypatch):
    monkeypatch.delenv("CODESIGN_DATA", raising=False)
    return tiny_env


def test_download_extracts_data_files_and_license(download_env, monkeypatch):
    monkeypatch.setattr(wn, "TARBALL_URL", _tarball(download_env / "wn.tar.gz"))
    g, info = load_wordnet(vocab_size=5, return_info=True)
    cache = download_env / "cache" / "codesign" / "wordnet"
    assert info.source == str(cache) and g.n_nodes == 11
    assert sorted(p.name for p in cache.iterdir() if p.is_file()) == sorted((*wn.DATA_FILES, "LICENSE"))
    assert not (download_env / "cache" / "codesign" / "evil").exists() and not (download_env / "evil").exists()
    monkeypatch.setattr(wn, "TARBALL_URL", (download_env / "absent.tar.gz").as_uri())
    assert load_wordnet(vocab_size=5, return_info=True)[1].source == str(cache)  # no second download


def test_download_failures(download_env, monkeypatch):
    monkeypatch.setattr(wn, "TARBALL_URL", (download_env / "absent.tar.gz").as_uri())
    with pytest.raises(FileNotFoundError, match="WordNet files not found and downloading file:.*absent.tar.gz failed"):
        load_wordnet()
    monkeypatch.setattr(wn, "TARBALL_URL", _tarball(download_env / "a.tar.gz", skip=("data.adv",)))
    with pytest.raises(ValueError, match="a.tar.gz: the archive lacks WordNet-3.0/{data.adv}"):
        load_wordnet()
    monkeypatch.setattr(wn, "TARBALL_URL", _tarball(download_env / "b.tar.gz", tamper=("data.adj",)))
    with pytest.raises(ValueError, match=f"b.tar.gz: data.adj: sha256 checksum mismatch: "
                                         f"expected {TINY_SHA['data.adj']}, got [0-9a-f]{{64}}$"):
        load_wordnet()
    (download_env / "c.tar.gz").write_bytes(b"not gzip")
    monkeypatch.setattr(wn, "TARBALL_URL", (download_env / "c.tar.gz").as_uri())
    with pytest.raises(ValueError, match="c.tar.gz: not a readable .tar.gz"):
        load_wordnet()
    assert not any((download_env / "cache" / "codesign" / "wordnet").glob("data.*"))  # nothing half-installed


# ----------------------------------------------------------------------------- experiments/wordnet_baselines.py


def test_baselines_script_quick_on_the_fixture(tiny_env):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "wordnet_baselines", Path(__file__).parent.parent / "experiments" / "wordnet_baselines.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    g = load_wordnet(TINY, vocab_size=5)
    mlp = mod.without_edges(g)  # every real node isolated; two placeholders joined by one edge, in no mask
    assert mlp.n_nodes == 13 and _edges(mlp) == [(11, 12)]
    assert not any(np.asarray(m)[11:].any() for m in (mlp.train_mask, mlp.val_mask, mlp.test_mask))
    np.testing.assert_array_equal(np.asarray(mlp.x)[:11], np.asarray(g.x))
    rows = mod.main(["--quick", "--root", str(TINY), "--out", str(tiny_env / "res")])
    assert [(r["model"], r["epochs"], r["seeds"]) for r in rows] == [("gcn", 2, 1), ("mlp", 2, 1)]
    records = [json.loads(ln) for ln in (tiny_env / "res" / "wordnet_baselines_quick.jsonl").read_text().splitlines()]
    assert {r["model"] for r in records} == {"gcn", "mlp"} and all(0 <= r["test_accuracy"] <= 1 for r in records)
    assert all(r["peak_rss_gb"] > 0 and r["s_per_epoch"] > 0 for r in records)
    assert mod.main(["--quick", "--root", str(TINY), "--out", str(tiny_env / "res")]) == rows
    assert len((tiny_env / "res" / "wordnet_baselines_quick.jsonl").read_text().splitlines()) == 2  # resumed: none rerun


# ----------------------------------------------------------------------------- real WordNet 3.0

REAL_SPLIT_HASH = "a7e1f37bb46ca3b69acdbe20b5594b9305fc1ac349eff7e487028a8df96dd2f0"  # split_seed 0


def test_real_wordnet(real_root, monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("CODESIGN_SKIP_VERIFY", raising=False)
    g, info = load_wordnet(real_root, vocab_size=300, return_info=True)  # narrow x: the structure is the test
    assert isinstance(info, WordNetInfo) and info.file_sha256 == wn.CHECKSUMS
    assert (g.n_nodes, g.n_classes, g.n_features, g.n_edges) == (117_659, 45, 300, 367_578)
    assert (info.n_pointers, info.n_typed_edges) == (377_592, 364_543)
    y = np.asarray(g.y)
    assert np.bincount(y, minlength=45).min() == 42  # noun.motive; every lexicographer file has synsets
    assert collections_counts(info.synset_pos) == {"n": 82_115, "v": 13_767, "a": 7_463, "s": 10_693, "r": 3_621}
    s, r = np.asarray(g.senders).astype(np.int64), np.asarray(g.receivers).astype(np.int64)
    code = r * g.n_nodes + s
    assert (np.diff(code) > 0).all() and (s != r).all()  # sorted, no duplicate, no self-loop
    assert np.isin(s * g.n_nodes + r, code).all()  # symmetric
    masks = [np.asarray(m) for m in (g.train_mask, g.val_mask, g.test_mask)]
    assert [int(m.sum()) for m in masks] == [70_576, 23_514, 23_569]
    assert info.split_hash == REAL_SPLIT_HASH == wn.split_hash(*wn.stratified_split(y, 0))
    assert wn.split_hash(*wn.stratified_split(y, 1)) != REAL_SPLIT_HASH
    x = np.asarray(g.x)
    assert set(np.unique(x).tolist()) == {0.0, 1.0} and info.vocab[:3] == ("a", "of", "the")


def collections_counts(a: np.ndarray) -> dict:
    values, counts = np.unique(a, return_counts=True)
    return dict(zip(values.tolist(), counts.tolist()))
