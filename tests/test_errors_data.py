"""Bad input at the data-file boundary (issue 16): each class of bad Planetoid file gives a
one-line ``ValueError``/``TypeError`` naming the file or field. Tampered files are copies of the
real Cora files in ``tmp_path``; nothing under ``$CODESIGN_DATA`` is modified."""

from __future__ import annotations

import hashlib
import os
import pickle
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.data import load_planetoid
from codesign.data import planetoid as pl

EXTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


@pytest.fixture
def cora_copy(planetoid_root, tmp_path, monkeypatch):
    """A copy of the real Cora files under tmp_path/planetoid (returns that folder)."""
    monkeypatch.delenv(pl.SKIP_VERIFY_ENV, raising=False)
    d = tmp_path / "planetoid"
    d.mkdir()
    for ext in EXTS:
        shutil.copyfile(planetoid_root / "planetoid" / f"ind.cora.{ext}", d / f"ind.cora.{ext}")
        os.chmod(d / f"ind.cora.{ext}", 0o644)
    return d


def _read(path: Path):
    with warnings.catch_warnings():  # the python2 pickles name scipy.sparse.csr (deprecated path)
        warnings.simplefilter("ignore", DeprecationWarning)
        return pickle.loads(path.read_bytes(), encoding="latin1")


def _write(path: Path, obj):
    path.write_bytes(pickle.dumps(obj, protocol=2))
    st_ = path.stat()  # a new mtime even on coarse-clock filesystems (the verification cache key)
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))


def _unverified(root, name="cora"):
    with pytest.warns(UserWarning, match=rf"verify=False: NOT checking .*ind\.{name}\."):
        return load_planetoid(name, root=root, verify=False)


# ---------------------------------------------------------------------------- checksums


def test_rolled_labels_fail_checksum_naming_file_and_both_hashes(cora_copy):
    f = cora_copy / "ind.cora.ally"
    _write(f, np.roll(_read(f), 1, axis=1))
    expected = pl.CHECKSUMS["ind.cora.ally"].split(":")[1]
    actual = hashlib.sha256(f.read_bytes()).hexdigest()
    with pytest.raises(ValueError, match=rf"ind\.cora\.ally: sha256 checksum mismatch: expected {expected}, "
                                         rf"got {actual}"):
        load_planetoid("cora", root=cora_copy.parent)


def test_file_tampered_after_a_verified_load_is_caught(cora_copy):
    assert load_planetoid("cora", root=cora_copy.parent).n_nodes == 2708  # verified and cached
    f = cora_copy / "ind.cora.y"
    _write(f, np.roll(_read(f), 1, axis=1))
    with pytest.raises(ValueError, match=r"ind\.cora\.y: sha256 checksum mismatch"):
        load_planetoid("cora", root=cora_copy.parent)


def test_checksum_checked_under_codesign_data_too(cora_copy, monkeypatch):
    (cora_copy / "ind.cora.test.index").write_text("1708\n" * 3)
    monkeypatch.setenv("CODESIGN_DATA", str(cora_copy.parent))
    with pytest.raises(ValueError, match=r"ind\.cora\.test\.index: sha256 checksum mismatch: expected 297ce89a"):
        load_planetoid("cora")


def test_opt_out_by_argument_warns_and_loads(cora_copy):
    f = cora_copy / "ind.cora.ally"
    _write(f, np.roll(_read(f), 1, axis=1))
    with pytest.warns(UserWarning, match=r"verify=False: NOT checking .*ind\.cora\.ally"):
        g = load_planetoid("cora", root=cora_copy.parent, verify=False)
    assert g.n_nodes == 2708


def test_opt_out_by_env_var_warns_and_loads(cora_copy, monkeypatch):
    f = cora_copy / "ind.cora.ally"
    _write(f, np.roll(_read(f), 1, axis=1))
    monkeypatch.setenv("CODESIGN_SKIP_VERIFY", "1")
    with pytest.warns(UserWarning, match=r"CODESIGN_SKIP_VERIFY=1: NOT checking .*ind\.cora\.ally"):
        g = load_planetoid("cora", root=cora_copy.parent)
    assert g.n_nodes == 2708


def test_env_var_with_bad_value_names_it(cora_copy, monkeypatch):
    monkeypatch.setenv("CODESIGN_SKIP_VERIFY", "maybe")
    with pytest.raises(ValueError, match=r"CODESIGN_SKIP_VERIFY: expected 1/true/yes .* got 'maybe'"):
        load_planetoid("cora", root=cora_copy.parent)


def test_verify_must_be_bool(cora_copy):
    with pytest.raises(TypeError, match=r"verify must be a bool, got str"):
        load_planetoid("cora", root=cora_copy.parent, verify="no")


def test_file_without_known_checksum_needs_opt_out(cora_copy, monkeypatch):
    monkeypatch.setitem(pl.CHECKSUMS, "ind.cora.x", None)
    with pytest.raises(ValueError, match=r"ind\.cora\.x: no known checksum for ind\.cora\.x; .*verify=False"):
        load_planetoid("cora", root=cora_copy.parent)
    assert _unverified(cora_copy.parent).n_nodes == 2708


def test_no_warning_when_verified(cora_copy):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert load_planetoid("cora", root=cora_copy.parent).n_nodes == 2708


# ---------------------------------------------------------------------------- the pickle allowlist


def test_real_files_refer_only_to_the_allowed_globals(planetoid_root):
    import pickletools

    seen = set()
    for ext in ("x", "tx", "allx", "y", "ty", "ally", "graph"):
        data = (planetoid_root / "planetoid" / f"ind.cora.{ext}").read_bytes()
        seen |= {arg for op, arg, _ in pickletools.genops(data) if op.name == "GLOBAL"}
    assert seen == {"numpy.core.multiarray _reconstruct", "numpy ndarray", "numpy dtype",
                    "scipy.sparse.csr csr_matrix", "collections defaultdict", "__builtin__ list"}


def test_scipy_factory_function_is_refused(cora_copy):
    # 34 bytes: scipy.sparse.eye_array(10**7), a 10^7 x 10^7 matrix before the fix.
    (cora_copy / "ind.cora.tx").write_bytes(b"\x80\x02cscipy.sparse\neye_array\nJ\x80\x96\x98\x00\x85R.")
    with pytest.raises(ValueError, match=r"ind\.cora\.tx: refusing to load global scipy\.sparse\.eye_array"):
        _unverified(cora_copy.parent)


def test_calling_an_allowed_class_is_refused(cora_copy):
    # csr_matrix((10**7, 10**7)) via REDUCE: the class may only be filled from the file's arrays.
    (cora_copy / "ind.cora.tx").write_bytes(
        b"\x80\x02cscipy.sparse._csr\ncsr_matrix\nJ\x80\x96\x98\x00J\x80\x96\x98\x00\x86\x85R.")
    with pytest.raises(ValueError, match=r"ind\.cora\.tx: refusing to call csr_matrix\(\.\.\.\)"):
        _unverified(cora_copy.parent)


def test_numpy_reconstruct_with_a_large_shape_is_refused(cora_copy):
    # numpy.core.multiarray._reconstruct(numpy.ndarray, (10**6, 10**6), 'b'): a 1 TB allocation.
    payload = (b"\x80\x02cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\n"
               b"J@B\x0f\x00J@B\x0f\x00\x86U\x01b\x87R.")
    (cora_copy / "ind.cora.y").write_bytes(payload)
    with pytest.raises(ValueError, match=r"ind\.cora\.y: refusing numpy _reconstruct"):
        _unverified(cora_copy.parent)


def test_inconsistent_csr_arrays_name_file(cora_copy):
    f = cora_copy / "ind.cora.allx"
    m = _read(f)
    m.indices[0] = 10**6  # a column outside the 1433 features
    _write(f, m)
    with pytest.raises(ValueError, match=r"ind\.cora\.allx: inconsistent CSR matrix"):
        _unverified(cora_copy.parent)


# ---------------------------------------------------------------------------- contents


def test_nan_features_name_file(cora_copy):
    f = cora_copy / "ind.cora.x"
    m = _read(f)
    m.data[3] = np.nan
    _write(f, m)
    with pytest.raises(ValueError, match=r"ind\.cora\.x: features must be finite, got 1 NaN/inf"):
        _unverified(cora_copy.parent)


def test_inf_labels_name_file(cora_copy):
    f = cora_copy / "ind.cora.ty"
    y = _read(f).astype(np.float64)
    y[0, 0] = np.inf
    _write(f, y)
    with pytest.raises(ValueError, match=r"ind\.cora\.ty: labels must be finite"):
        _unverified(cora_copy.parent)


def test_sparse_labels_name_file(cora_copy):
    f = cora_copy / "ind.cora.ally"
    _write(f, sp.csr_matrix(_read(f)))
    with pytest.raises(ValueError, match=r"ind\.cora\.ally: expected a numeric 2-D array of one-hot labels"):
        _unverified(cora_copy.parent)


def test_feature_width_mismatch_names_files(cora_copy):
    f = cora_copy / "ind.cora.tx"
    _write(f, _read(f)[:, :-1])
    with pytest.raises(ValueError, match=r"ind\.cora\.tx has 1432 features but ind\.cora\.allx has 1433"):
        _unverified(cora_copy.parent)


def test_oversized_test_index_names_test_index(cora_copy):
    f = cora_copy / "ind.cora.test.index"
    lines = f.read_text().split()
    lines[lines.index("2707")] = "99999"  # would have made a 100,000-node graph
    f.write_text("\n".join(lines))
    with pytest.raises(ValueError, match=r"ind\.cora\.test\.index: test indices span \[1708, 99999\] "
                                         r"\(98292 nodes\) for 1000 rows of ind\.cora\.tx; at most 1000"):
        _unverified(cora_copy.parent)


def test_non_integer_test_index_names_test_index(cora_copy):
    f = cora_copy / "ind.cora.test.index"
    f.write_text(f.read_text().replace("2707", "2707.0", 1))
    with pytest.raises(ValueError, match=r"ind\.cora\.test\.index: expected one integer per line"):
        _unverified(cora_copy.parent)


def test_float_node_id_is_not_truncated(cora_copy):
    f = cora_copy / "ind.cora.graph"
    g = _read(f)
    g[0] = [633.0] + g[0][1:]
    _write(f, g)
    with pytest.raises(ValueError, match=r"ind\.cora\.graph: node ids must be ints, got 633\.0 \(float\) "
                                         r"in the list of node 0"):
        _unverified(cora_copy.parent)


def test_float_node_key_is_not_truncated(cora_copy):
    f = cora_copy / "ind.cora.graph"
    g = _read(f)
    g[5.0] = g.pop(5)
    _write(f, g)
    with pytest.raises(ValueError, match=r"ind\.cora\.graph: node ids must be ints, got key 5\.0 \(float\)"):
        _unverified(cora_copy.parent)


def test_node_id_out_of_range_names_graph(cora_copy):
    f = cora_copy / "ind.cora.graph"
    g = _read(f)
    g[0] = g[0] + [2708]
    _write(f, g)
    with pytest.raises(ValueError, match=r"ind\.cora\.graph: node ids must be in \[0, 2708\), got \[0, 2708\]"):
        _unverified(cora_copy.parent)


# ---------------------------------------------------------------------------- test.index property


N_TRAIN, N_ALLX, F, C = 2, 503, 3, 2  # 2 train + 500 val + 1 unlabelled


def _write_tiny(d: Path, name: str, test_index: list[int]) -> np.ndarray:
    """Tiny Planetoid files for ``name`` whose tx has one row per test.index line; returns tx."""
    rng = np.random.default_rng(0)
    allx = sp.csr_matrix(rng.integers(0, 2, (N_ALLX, F)).astype(np.float32))
    ally = np.eye(C, dtype=np.int32)[rng.integers(0, C, N_ALLX)]
    tx = np.arange(1, len(test_index) * F + 1, dtype=np.float32).reshape(-1, F)
    objs = dict(x=allx[:N_TRAIN], y=ally[:N_TRAIN], allx=allx, ally=ally, tx=sp.csr_matrix(tx),
                ty=np.eye(C, dtype=np.int32)[np.arange(len(test_index)) % C],
                graph={i: [i + 1] for i in range(N_ALLX - 1)})
    for ext, obj in objs.items():
        (d / f"ind.{name}.{ext}").write_bytes(pickle.dumps(obj, protocol=2))
    (d / f"ind.{name}.test.index").write_text("".join(f"{i}\n" for i in test_index))
    return tx


@st.composite
def _test_indices(draw):
    """Mostly near-valid test.index lists (start at len(allx), with gaps and repeats), one entry
    sometimes moved (below len(allx), negative, far out)."""
    offsets = draw(st.lists(st.integers(0, 12), min_size=1, max_size=5))
    idx = [N_ALLX + o - min(offsets) for o in offsets]
    idx[-1] += draw(st.sampled_from([0, 0, 0, 0, -1, 1, -N_ALLX - 1, 10**6]))
    return idx


@settings(max_examples=50, deadline=None)
@given(name=st.sampled_from(["cora", "citeseer"]), test_index=_test_indices())
def test_test_index_accepted_consistently_or_rejected_naming_it(name, test_index):
    order = sorted(test_index)
    span = order[-1] - N_ALLX + 1
    valid = (len(set(test_index)) == len(test_index) and order[0] == N_ALLX
             and span <= (3 * len(test_index) if name == "citeseer" else len(test_index)))
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "planetoid"
        d.mkdir()
        tx = _write_tiny(d, name, test_index)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            if not valid:
                with pytest.raises(ValueError, match=rf"ind\.{name}\.test\.index"):
                    load_planetoid(name, root=tmp, verify=False)
                return
            g = load_planetoid(name, root=tmp, verify=False, normalize_features=False)
    assert g.n_nodes == N_ALLX + span
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(g.test_mask)), order)
    np.testing.assert_array_equal(np.asarray(g.x)[test_index], tx)
    assert not np.asarray(g.x)[sorted(set(range(N_ALLX, g.n_nodes)) - set(test_index))].any()


def test_load_dataset_refuses_an_unknown_name_listing_the_known_ones():
    from codesign.data import DATASETS, load_dataset
    with pytest.raises(ValueError, match=r"dataset: unknown dataset 'coraa'; choose from cora, citeseer, pubmed, wordnet"):
        load_dataset("coraa")
    assert DATASETS[3:] == ("wordnet", "wordnet-lsa", "csbm-products", "ncbi-taxonomy", "rmat-15", "rmat-17", "rmat-19",
                            "rmat-21")
