"""WordNet 3.0 as a node-classification graph, read from Princeton's ``data.*`` database files.

Format: Princeton WordNet ``wndb(5WN)`` (the data file format) and ``wninput(5WN)`` (the pointer
symbols), https://wordnet.princeton.edu/documentation/wndb5wn. Each synset is one line

    synset_offset lex_filenum ss_type w_cnt word lex_id [word lex_id...] p_cnt [ptr...] [frames...] | gloss

with ``synset_offset`` the line's byte offset in its file (8 digits), ``lex_filenum`` 2 digits,
``ss_type`` one of ``n v a s r``, ``w_cnt`` 2 hex digits, ``p_cnt`` 3 decimal digits, each ``ptr``
= ``pointer_symbol synset_offset pos source/target`` (``source/target`` 4 hex digits; ``0000`` for a
semantic pointer between synsets, else a lexical pointer between two of their words), verb frames
(data.verb only) ``f_cnt + f_num w_num [+ f_num w_num...]``. Lines that start with two spaces are
the license header.

Graph: a node per synset of data.noun, data.verb, data.adj (satellites ``s`` included) and
data.adv (117,659 in WordNet 3.0), labelled with its lexicographer file (``lex_filenum``, 45
classes, `LEXNAMES`); an edge per pointer, from the synset whose line holds it (sender) to its
target (receiver), typed by `POINTERS`; features: a binary bag of words of the gloss.

License: WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved (the full
notice is in the database's ``LICENSE`` file and in ``tests/data/wordnet_tiny/LICENSE``).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import io
import os
import re
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
import warnings
import zipfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from codesign.data.planetoid import SKIP_VERIFY_ENV, cache_root, skip_verify_from_env
from codesign.graph import Graph

# The 45 lexicographer files, index = lex_filenum: WordNet 3.0 ``dict/lexnames`` (lexnames(5WN)).
LEXNAMES = (
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event", "noun.feeling",
    "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object", "noun.person",
    "noun.phenomenon", "noun.plant", "noun.possession", "noun.process", "noun.quantity", "noun.relation",
    "noun.shape", "noun.state", "noun.substance", "noun.time", "verb.body", "verb.change", "verb.cognition",
    "verb.communication", "verb.competition", "verb.consumption", "verb.contact", "verb.creation",
    "verb.emotion", "verb.motion", "verb.perception", "verb.possession", "verb.social", "verb.stative",
    "verb.weather", "adj.ppl",
)

# Every pointer symbol of wninput(5WN), index = relation id (``edge_type``). ``\`` is "pertainym"
# on adjectives and "derived from adjective" on adverbs: one relation. All 26 occur in WordNet 3.0.
POINTERS = (
    ("!", "antonym"), ("@", "hypernym"), ("@i", "instance_hypernym"), ("~", "hyponym"),
    ("~i", "instance_hyponym"), ("#m", "member_holonym"), ("#s", "substance_holonym"),
    ("#p", "part_holonym"), ("%m", "member_meronym"), ("%s", "substance_meronym"), ("%p", "part_meronym"),
    ("=", "attribute"), ("+", "derivationally_related_form"), (";c", "domain_topic"),
    ("-c", "member_of_domain_topic"), (";r", "domain_region"), ("-r", "member_of_domain_region"),
    (";u", "domain_usage"), ("-u", "member_of_domain_usage"), ("*", "entailment"), (">", "cause"),
    ("^", "also_see"), ("$", "verb_group"), ("&", "similar_to"), ("<", "participle_of_verb"),
    ("\\", "pertainym_or_derived_from_adjective"),
)
_POINTER_ID = {sym: i for i, (sym, _) in enumerate(POINTERS)}

DATA_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")  # node order: files in this order
_SS_TYPES = {"data.noun": "n", "data.verb": "v", "data.adj": "as", "data.adv": "r"}
_LEX_PREFIX = {"data.noun": "noun.", "data.verb": "verb.", "data.adj": "adj.", "data.adv": "adv."}
_POS_FILE = {"n": 0, "v": 1, "a": 2, "s": 2, "r": 3}  # a pointer's pos -> index into DATA_FILES

# SHA-256 of WordNet 3.0's data files (computed from the copy in the project's shared data folder,
# which are WordNet 3.0's: 117,659 synsets; byte sizes 15,300,280 / 2,772,517 / 3,155,427 / 516,696).
CHECKSUMS = {
    "data.noun": "fea17d2f9656611334eac790e5d69e47645fa180c4aa481fb4cd9b3520754ca2",
    "data.verb": "adcf43e35b581e8036d8b5a52d63d9cd3d3b4870b2720d3c03c799df44777bc2",
    "data.adj": "c89120dfc1f046ddff4a631bf9b7e9fa1a36b5e86565a23bf82dbe14f30b88a7",
    "data.adv": "444a63bf3955080ab7524f5079cfc07ff9bc682cb98bdb1db73b0fb9829f1139",
}
TARBALL_URL = "https://wordnetcode.princeton.edu/3.0/WordNet-3.0.tar.gz"
SYSTEM_DIRS = (Path("/usr/share/wordnet"),)  # Debian/Ubuntu ``wordnet-base``
DEFAULT_VOCAB_SIZE = 2000
SPLIT_FIFTHS = (3, 1, 1)  # train / val / test = 60 / 20 / 20 % of each class
_TOKEN = re.compile(r"[a-z0-9]+")


@dataclasses.dataclass(frozen=True)
class WordNetInfo:
    """What `load_wordnet` built the graph from (``return_info=True``).

    Fields (N synsets):
      lexnames: the 45 class names, index = label (`LEXNAMES`).
      vocab: the F feature tokens, index = feature column.
      pointers: ``(symbol, name)`` per relation, index = ``edge_type`` (`POINTERS`).
      split_hash: SHA-256 hex of the train/val/test masks (`split_hash`).
      file_sha256: ``{"data.noun": hex, ...}`` of the files read (verified or not).
      source: the folder the files were read from.
      synset_offset: int64 [N], each node's ``synset_offset`` in its file.
      synset_pos: <U1 [N], each node's ``ss_type`` (``n v a s r``).
      n_pointers: pointers in the files; n_typed_edges: distinct (sender, receiver, type) triples
        that are not self-loops (the ``symmetrize=False`` edges).
    """

    lexnames: tuple
    vocab: tuple
    pointers: tuple
    split_hash: str
    file_sha256: dict
    source: str
    synset_offset: np.ndarray
    synset_pos: np.ndarray
    n_pointers: int
    n_typed_edges: int


# ----------------------------------------------------------------------------------- files


def _complete(d: Path) -> bool:
    """True if ``d`` holds every data file; FileNotFoundError if it holds some but not all."""
    have = [(d / f).is_file() for f in DATA_FILES]
    if all(have):
        return True
    if any(have):
        missing = ", ".join(str(d / f) for f, h in zip(DATA_FILES, have) if not h)
        raise FileNotFoundError(f"WordNet folder {d} is incomplete: {missing} not found")
    return False


def _locate(root) -> Path:
    """The folder holding the data files: ``root/wordnet`` or ``root``; without ``root``,
    ``$CODESIGN_DATA/wordnet``, `SYSTEM_DIRS`, the cache ``<cache>/wordnet``, else a download into it."""
    if root is not None:
        base = Path(root).expanduser()
        for d in (base / "wordnet", base):
            if _complete(d):
                return d
        raise FileNotFoundError(f"WordNet files not found: neither {base / 'wordnet'} nor {base} holds "
                                f"{', '.join(DATA_FILES)}")
    env = os.environ.get("CODESIGN_DATA")
    cache = cache_root() / "wordnet"
    for d in ([Path(env).expanduser() / "wordnet"] if env else []) + [*SYSTEM_DIRS, cache]:
        if _complete(d):
            return d
    _download(TARBALL_URL, cache)
    return cache


def _download(url: str, dest: Path) -> None:
    """Fetches Princeton's tarball and extracts only ``dict/data.*`` and ``LICENSE`` into ``dest``
    (read member by member: no path from the archive is used), each checked against `CHECKSUMS`
    before it is moved into place."""
    dest.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest, prefix="WordNet-3.0.", suffix=".tar.gz.part")
    os.close(fd)
    try:
        try:
            with urllib.request.urlopen(url, timeout=120) as resp, open(tmp, "wb") as f:
                shutil.copyfileobj(resp, f)
        except (urllib.error.URLError, OSError) as e:
            raise FileNotFoundError(
                f"WordNet files not found and downloading {url} failed ({e}). Point the loader at a local "
                f"copy: root=/path/holding/wordnet or CODESIGN_DATA (files {', '.join(DATA_FILES)}), or "
                "install Debian's wordnet-base (/usr/share/wordnet)") from e
        wanted = {f"dict/{f}": f for f in DATA_FILES} | {"LICENSE": "LICENSE"}
        found = {}
        try:
            with tarfile.open(tmp, "r:gz") as tar:
                for m in tar:
                    rel = m.name.split("/", 1)[1] if "/" in m.name else m.name  # drop "WordNet-3.0/"
                    if rel in wanted and m.isfile():
                        found[wanted[rel]] = tar.extractfile(m).read()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise ValueError(f"{url}: not a readable .tar.gz ({type(e).__name__}: {e})") from e
        missing = [f for f in (*DATA_FILES, "LICENSE") if f not in found]
        if missing:
            raise ValueError(f"{url}: the archive lacks WordNet-3.0/{{{', '.join(missing)}}}")
        for name in DATA_FILES:
            got = hashlib.sha256(found[name]).hexdigest()
            if got != CHECKSUMS[name]:
                raise ValueError(f"{url}: {name}: sha256 checksum mismatch: expected {CHECKSUMS[name]}, got {got}")
        for name, data in found.items():
            part = dest / f"{name}.part"
            part.write_bytes(data)
            os.replace(part, dest / name)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _read_files(d: Path, verify: bool) -> tuple[dict, dict]:
    """``({name: bytes}, {name: sha256 hex})``; checks each file's hash (of the bytes then parsed)."""
    if not isinstance(verify, bool):
        raise TypeError(f"load_wordnet: verify must be a bool, got {type(verify).__name__}")
    skip = not verify or skip_verify_from_env()
    if skip:
        how = "verify=False" if not verify else f"{SKIP_VERIFY_ENV}=1"
        warnings.warn(f"load_wordnet: {how}: NOT checking {', '.join(str(d / f) for f in DATA_FILES)} "
                      f"against their known checksums", stacklevel=3)
    data, sha = {}, {}
    for name in DATA_FILES:
        data[name] = (d / name).read_bytes()
        sha[name] = hashlib.sha256(data[name]).hexdigest()
        if not skip and sha[name] != CHECKSUMS[name]:
            raise ValueError(f"{d / name}: sha256 checksum mismatch: expected {CHECKSUMS[name]}, got {sha[name]} "
                             f"(a modified copy? load it with verify=False or {SKIP_VERIFY_ENV}=1)")
    return data, sha


# ----------------------------------------------------------------------------------- parsing


@dataclasses.dataclass
class _Parsed:
    """One data file: per synset (n) its offset, lex_filenum, ss_type, gloss, line number; per
    pointer (p) its source synset (index into this file), relation, target offset and file."""

    offset: list
    lex: list
    pos: list
    gloss: list
    line: list
    p_src: list
    p_rel: list
    p_off: list
    p_file: list


_FORMATS = {(8, 10): re.compile(r"[0-9]{8}").fullmatch, (2, 10): re.compile(r"[0-9]{2}").fullmatch,
            (3, 10): re.compile(r"[0-9]{3}").fullmatch, (2, 16): re.compile(r"[0-9a-fA-F]{2}").fullmatch,
            (1, 16): re.compile(r"[0-9a-fA-F]").fullmatch, (4, 16): re.compile(r"[0-9a-fA-F]{4}").fullmatch}
_SYM = "|".join(re.escape(sym) for sym, _ in sorted(POINTERS, key=lambda p: -len(p[0])))
_PTR_BLOCK = re.compile(rf"(?:(?:{_SYM}) [0-9]{{8}} [nvasr] [0-9a-fA-F]{{4}}(?: |$))*").fullmatch


def _digits(tok: str, n: int, base: int, where: str, field: str) -> int:
    if not _FORMATS[n, base](tok):
        raise ValueError(f"{where}: {field}: expected {n} {'hex' if base == 16 else 'decimal'} digits, got {tok!r}")
    return int(tok, base)


def _field(t: list, i: int, where: str, field: str) -> str:
    if i >= len(t):
        raise ValueError(f"{where}: {field}: line ends early (before the ' | ' gloss)")
    return t[i]


def _check_pointers(t: list, i: int, p_cnt: int, where: str) -> None:
    """The detailed check of a pointer block that failed `_PTR_BLOCK` (raises naming the field)."""
    for j, k in enumerate(range(i, i + 4 * p_cnt, 4), 1):
        field = f"pointer {j}"
        sym = _field(t, k, where, f"{field} pointer_symbol")
        if sym not in _POINTER_ID:
            raise ValueError(f"{where}: {field} pointer_symbol: unknown {sym!r} (wninput(5WN))")
        _digits(_field(t, k + 1, where, f"{field} synset_offset"), 8, 10, where, f"{field} synset_offset")
        ppos = _field(t, k + 2, where, f"{field} pos")
        if ppos not in _POS_FILE:
            raise ValueError(f"{where}: {field} pos: expected n, v, a, s or r, got {ppos!r}")
        _digits(_field(t, k + 3, where, f"{field} source/target"), 4, 16, where, f"{field} source/target")


def parse_data_file(name: str, data: bytes, path: str = "") -> _Parsed:
    """Parses one ``wndb(5WN)`` data file (``name`` one of `DATA_FILES`; ``path`` for messages).

    Raises:
      ValueError: ``"<path>: line <k>: <field>: ..."`` for a line that breaks the format: a field
        with the wrong digits, ``synset_offset`` that is not the line's byte offset, a ``ss_type``
        not of this file, a ``lex_filenum`` outside [0, 45) or of another part of speech, fewer
        fields than ``w_cnt`` / ``p_cnt`` / ``f_cnt`` announce or more than they do, an unknown
        pointer symbol or pos, bad verb frames, no ``" | "`` before the gloss, text not UTF-8;
        ``"<path>: no synset lines"`` for a file without synsets.
    """
    path = path or name
    out = _Parsed(*([] for _ in range(9)))
    ss_ok, lex_prefix = _SS_TYPES[name], _LEX_PREFIX[name]
    pos = 0
    for lineno, raw in enumerate(io.BytesIO(data), 1):
        start, pos = pos, pos + len(raw)
        if raw.startswith(b"  "):  # license header
            continue
        where = f"{path}: line {lineno}"
        try:
            line = raw.decode("utf-8").rstrip("\n")
        except UnicodeDecodeError as e:
            raise ValueError(f"{where}: not UTF-8 text ({e})") from None
        head, bar, gloss = line.partition(" | ")
        if not bar:
            raise ValueError(f"{where}: gloss: no ' | ' separating the fields from the gloss")
        t = head.split(" ")
        off = _digits(t[0], 8, 10, where, "synset_offset")
        if off != start:
            raise ValueError(f"{where}: synset_offset: {t[0]} is not the line's byte offset {start:08d}")
        lex = _digits(_field(t, 1, where, "lex_filenum"), 2, 10, where, "lex_filenum")
        if lex >= len(LEXNAMES) or not LEXNAMES[lex].startswith(lex_prefix):
            raise ValueError(f"{where}: lex_filenum: {lex:02d} is not a {lex_prefix}* lexicographer file "
                             f"(lexnames 00-{len(LEXNAMES) - 1:02d})")
        ss = _field(t, 2, where, "ss_type")
        if len(ss) != 1 or ss not in ss_ok:
            raise ValueError(f"{where}: ss_type: expected {' or '.join(ss_ok)} in {name}, got {ss!r}")
        w_cnt = _digits(_field(t, 3, where, "w_cnt"), 2, 16, where, "w_cnt")
        if w_cnt == 0:
            raise ValueError(f"{where}: w_cnt: a synset needs at least one word, got 00")
        i = 4 + 2 * w_cnt
        for k in range(5, i, 2):
            _digits(_field(t, k, where, f"word {(k - 3) // 2} lex_id"), 1, 16, where, f"word {(k - 3) // 2} lex_id")
        p_cnt = _digits(_field(t, i, where, "p_cnt"), 3, 10, where, "p_cnt")
        ptrs = t[i + 1:i + 1 + 4 * p_cnt]
        if len(ptrs) != 4 * p_cnt or not _PTR_BLOCK(" ".join(ptrs)):
            _check_pointers(t, i + 1, p_cnt, where)
        i += 1 + 4 * p_cnt
        last = f"p_cnt: {len(t) - i} field(s) beyond those p_cnt={p_cnt} announces"
        if name == "data.verb" and i < len(t):
            f_cnt = _digits(t[i], 2, 10, where, "f_cnt")
            for j, k in enumerate(range(i + 1, i + 1 + 3 * f_cnt, 3), 1):
                if t[k:k + 1] != ["+"]:
                    raise ValueError(f"{where}: frame {j}: expected '+ f_num w_num', got {' '.join(t[k:k + 3])!r}")
                _digits(_field(t, k + 1, where, f"frame {j} f_num"), 2, 10, where, f"frame {j} f_num")
                _digits(_field(t, k + 2, where, f"frame {j} w_num"), 2, 16, where, f"frame {j} w_num")
            i += 1 + 3 * f_cnt
            last = f"f_cnt: {len(t) - i} field(s) beyond the f_cnt={f_cnt} frames"
        if i != len(t):
            raise ValueError(f"{where}: {last} before the gloss: {' '.join(t[i:])!r}")
        src = len(out.offset)
        out.p_src.extend([src] * p_cnt)
        out.p_rel.extend(_POINTER_ID[sym] for sym in ptrs[0::4])
        out.p_off.extend(map(int, ptrs[1::4]))
        out.p_file.extend(_POS_FILE[c] for c in ptrs[2::4])
        out.offset.append(off)
        out.lex.append(lex)
        out.pos.append(ss)
        out.gloss.append(gloss.strip())
        out.line.append(lineno)
    if not out.offset:
        raise ValueError(f"{path}: no synset lines")
    return out


def tokenize(gloss: str) -> list[str]:
    """The gloss's tokens: lowercased maximal runs of ASCII letters and digits (``[a-z0-9]+``;
    punctuation, quotes, hyphens and apostrophes split tokens; the examples after ``;`` count)."""
    return _TOKEN.findall(gloss.lower())


def bag_of_words(glosses: list[str], vocab_size: int) -> tuple[tuple, np.ndarray, np.ndarray]:
    """``(vocab, rows, cols)``: the ``vocab_size`` tokens found in the most glosses (document
    frequency; ties by token, ascending) and the nonzeros of the binary bag of words x[len(glosses),
    len(vocab)]: x[rows[k], cols[k]] = 1 (int32 [nnz] each, sorted by row)."""
    docs = [set(tokenize(g)) for g in glosses]
    df = collections.Counter(tok for d in docs for tok in d)
    vocab = tuple(sorted(df, key=lambda w: (-df[w], w))[:vocab_size])
    col = {w: j for j, w in enumerate(vocab)}
    hits = [sorted(col[w] for w in d if w in col) for d in docs]
    rows = np.repeat(np.arange(len(docs), dtype=np.int32), [len(h) for h in hits])
    cols = np.fromiter((j for h in hits for j in h), np.int32, count=rows.size)
    return vocab, rows, cols


def stratified_split(y: np.ndarray, seed: int, fifths=SPLIT_FIFTHS) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Train/val/test masks bool [N]: per class c in ascending order, its node ids (ascending) are
    permuted by ``np.random.default_rng(seed)`` (one generator, classes in turn) and the first
    ``n_c * 3 // 5`` go to train, the next ``n_c // 5`` to val, the rest to test (integer arithmetic)."""
    rng = np.random.default_rng(seed)
    masks = [np.zeros(y.shape[0], bool) for _ in range(3)]
    for c in np.unique(y):
        ids = rng.permutation(np.flatnonzero(y == c))
        n_tr, n_va = len(ids) * fifths[0] // sum(fifths), len(ids) * fifths[1] // sum(fifths)
        masks[0][ids[:n_tr]] = True
        masks[1][ids[n_tr:n_tr + n_va]] = True
        masks[2][ids[n_tr + n_va:]] = True
    return tuple(masks)


def split_hash(train: np.ndarray, val: np.ndarray, test: np.ndarray) -> str:
    """SHA-256 hex of ``np.stack([train, val, test]).astype(uint8).tobytes()`` (C order)."""
    return hashlib.sha256(np.stack([train, val, test]).astype(np.uint8).tobytes()).hexdigest()


def _resolve(parsed: list[_Parsed], paths: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointers as global (sender, receiver, relation) int64 arrays; a target that is no synset
    of its file raises ValueError naming the source file, line and target."""
    starts = np.cumsum([0] + [len(p.offset) for p in parsed])
    offsets = [np.asarray(p.offset, np.int64) for p in parsed]
    snd, rcv, rel = [], [], []
    for f, p in enumerate(parsed):
        src = np.asarray(p.p_src, np.int64)
        off, tf = np.asarray(p.p_off, np.int64), np.asarray(p.p_file, np.int64)
        dst = np.full(src.shape, -1, np.int64)
        for g in range(len(parsed)):
            sel = tf == g
            k = np.searchsorted(offsets[g], off[sel]).clip(max=len(offsets[g]) - 1)
            dst[sel] = np.where(offsets[g][k] == off[sel], k + starts[g], -1)
        if (dst < 0).any():
            j = int(np.flatnonzero(dst < 0)[0])
            raise ValueError(f"{paths[f]}: line {p.line[src[j]]}: pointer target {off[j]:08d} is no synset of "
                             f"{DATA_FILES[tf[j]]}")
        snd.append(src + starts[f])
        rcv.append(dst)
        rel.append(np.asarray(p.p_rel, np.int64))
    return np.concatenate(snd), np.concatenate(rcv), np.concatenate(rel)


# ----------------------------------------------------------------------------------- loader


def load_wordnet(root: str | os.PathLike | None = None, *, vocab_size: int = DEFAULT_VOCAB_SIZE,
                 split_seed: int = 0, symmetrize: bool = True, verify: bool = True,
                 return_info: bool = False, cache: bool = True) -> Graph | tuple[Graph, WordNetInfo]:
    """WordNet 3.0 synsets, classified into their 45 lexicographer files.

    Files (``data.noun``, ``data.verb``, ``data.adj``, ``data.adv``): from ``root/wordnet/`` or
    ``root/`` when ``root`` is given; else the first complete folder of ``$CODESIGN_DATA/wordnet/``,
    ``/usr/share/wordnet`` (Debian ``wordnet-base``), ``${XDG_CACHE_HOME:-~/.cache}/codesign/wordnet/``;
    else Princeton's tarball `TARBALL_URL` is downloaded and only its ``dict/data.*`` and ``LICENSE``
    are extracted into that cache. Every data file, wherever it came from, is checked against
    `CHECKSUMS` (WordNet 3.0's SHA-256) before it is parsed; opt out with ``verify=False`` or
    ``CODESIGN_SKIP_VERIFY=1`` (a `UserWarning` names the files not checked).

    Graph (N = 117,659 synsets in WordNet 3.0, format: module docstring):
      nodes: data.noun's synsets in file order, then data.verb's, data.adj's (head ``a`` and
        satellite ``s`` adjectives), data.adv's (`WordNetInfo.synset_offset` / ``synset_pos``).
      y int32 [N]: ``lex_filenum`` in [0, 45), names in `LEXNAMES`.
      edges: one per pointer, sender = the synset whose line holds it, receiver = its target
        (``synset_offset`` + ``pos``; ``a`` and ``s`` both name data.adj); lexical pointers
        (between two words) connect the two synsets too. Self-loops (a lexical pointer between two
        words of one synset) are dropped, as a `Graph` holds none.
        ``symmetrize=False``: directed, typed; ``edge_type`` int32 [E] indexes `POINTERS` (26
        relations); duplicate (sender, receiver, type) triples removed; sorted by (type, receiver,
        sender). ``symmetrize=True`` (default, for homogeneous models): the union of those edges
        and their reverses, duplicates removed, sorted by (receiver, sender); ``edge_type`` is
        None (a pair may carry several relations).
      x float32 [N, F]: `bag_of_words` of the glosses (text after ``|``, definition and examples),
        `tokenize`-d, over the F = min(``vocab_size``, distinct tokens) tokens in the most glosses.
      masks bool [N]: `stratified_split` (60/20/20 per class) by ``split_seed``; its `split_hash`
        is `WordNetInfo.split_hash`.
    WordNet 3.0, ``vocab_size`` 2000: N = 117,659, 45 classes, 377,592 pointers, of which 19 are
    self-loops (``+`` between words of one synset) and 13,030 repeat a (sender, receiver, type)
    triple; 364,543 typed edges (26 relations), 367,578 symmetrized; 1,229 synsets have no
    vocabulary token (a zero row of x); split 70,576 / 23,514 / 23,569.

    The parsed arrays are cached (``cache=True``) in ``${XDG_CACHE_HOME:-~/.cache}/codesign/
    wordnet/parsed/`` keyed by the files' SHA-256 and ``vocab_size`` (`_cached_arrays`); the files
    are read and hashed (and verified) on every call either way. Peak RSS of a load with
    ``vocab_size`` 2000 (x: 117,659 x 2,000 float32 = 0.94 GB): about 3.2 GB (measured).

    Returns:
      The `Graph`, or ``(Graph, WordNetInfo)`` with ``return_info=True``.

    Raises:
      FileNotFoundError: no folder holds the data files and the download failed (the message says
        how to point at a copy), or a folder holds some of them but not all (naming the missing).
      ValueError: a file whose SHA-256 differs from `CHECKSUMS` (file, expected and actual hash);
        a malformed line (file, line number and field, `parse_data_file`); a pointer to no synset;
        ``vocab_size`` not a positive int; ``$CODESIGN_SKIP_VERIFY`` not 0/1/true/false/yes/no; a
        downloaded archive that is unreadable, lacks a file or holds a file with the wrong hash.
      TypeError: ``verify`` or ``cache`` is not a bool.
    """
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 1:
        raise ValueError(f"load_wordnet: vocab_size must be a positive int, got {vocab_size!r}")
    d = _locate(root)
    data, sha = _read_files(d, verify)
    a = _cached_arrays(d, data, sha, int(vocab_size), cache)
    n = a["y"].shape[0]
    x = np.zeros((n, a["vocab"].shape[0]), np.float32)
    x[a["bow_rows"], a["bow_cols"]] = 1.0
    masks = stratified_split(a["y"], split_seed)
    snd, rcv, rel = (a[k].astype(np.int64) for k in ("senders", "receivers", "relation"))
    keep = snd != rcv
    typed = np.unique((rel[keep] * n + rcv[keep]) * n + snd[keep])  # sorted by (type, receiver, sender)
    if symmetrize:
        s, r = typed % n, typed // n % n
        code = np.unique(np.concatenate([r * n + s, s * n + r]))  # (receiver, sender)
        senders, receivers, edge_type = code % n, code // n, None
    else:
        senders, receivers, edge_type = typed % n, typed // n % n, jnp.asarray(typed // (n * n), jnp.int32)
    graph = Graph(senders=jnp.asarray(senders, jnp.int32), receivers=jnp.asarray(receivers, jnp.int32),
                  x=jnp.asarray(x), y=jnp.asarray(a["y"]), train_mask=jnp.asarray(masks[0]),
                  val_mask=jnp.asarray(masks[1]), test_mask=jnp.asarray(masks[2]), edge_type=edge_type, n_nodes=n)
    if not return_info:
        return graph
    info = WordNetInfo(lexnames=LEXNAMES, vocab=tuple(a["vocab"].tolist()), pointers=POINTERS,
                       split_hash=split_hash(*masks), file_sha256=sha, source=str(d),
                       synset_offset=a["offset"].astype(np.int64), synset_pos=a["pos"],
                       n_pointers=int(snd.size), n_typed_edges=int(typed.size))
    return graph, info


_CACHE_VERSION = 1  # bump when the parsed arrays change meaning


def _parse_arrays(d: Path, data: dict, vocab_size: int) -> dict:
    """The parsed database as plain arrays (what `_cached_arrays` stores)."""
    paths = [str(d / f) for f in DATA_FILES]
    parsed = [parse_data_file(f, data[f], p) for f, p in zip(DATA_FILES, paths)]
    snd, rcv, rel = _resolve(parsed, paths)
    vocab, rows, cols = bag_of_words([g for p in parsed for g in p.gloss], vocab_size)
    return dict(y=np.concatenate([np.asarray(p.lex, np.int32) for p in parsed]),
                offset=np.concatenate([np.asarray(p.offset, np.int32) for p in parsed]),
                pos=np.concatenate([np.asarray(p.pos, "<U1") for p in parsed]),
                senders=snd.astype(np.int32), receivers=rcv.astype(np.int32), relation=rel.astype(np.int32),
                vocab=np.asarray(vocab, dtype=str), bow_rows=rows, bow_cols=cols)


def _cached_arrays(d: Path, data: dict, sha: dict, vocab_size: int, cache: bool) -> dict:
    """`_parse_arrays`, stored in ``<cache>/wordnet/parsed/`` as an ``.npz`` keyed by the files'
    SHA-256, ``vocab_size`` and `_CACHE_VERSION` (the bytes hashed are the bytes parsed, so a
    hit stands for the same content). An unreadable cache file is parsed again and replaced; a
    cache that cannot be written is skipped."""
    if not isinstance(cache, bool):
        raise TypeError(f"load_wordnet: cache must be a bool, got {type(cache).__name__}")
    key = hashlib.sha256(repr((_CACHE_VERSION, vocab_size, sorted(sha.items()))).encode()).hexdigest()[:32]
    path = cache_root() / "wordnet" / "parsed" / f"wordnet-{key}.npz"
    if cache and path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in z.files}
        except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile):
            pass  # unreadable: parse again and overwrite below
    arrays = _parse_arrays(d, data, vocab_size)
    if cache:
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".part")
            with os.fdopen(fd, "wb") as f:
                np.savez(f, **arrays)
            os.replace(tmp, path)
        except OSError:
            pass
        finally:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
    return arrays
