"""Tests for codesign.results: config keys and the atomic JSONL results store."""

import json
import os
import re

import numpy as np
import pytest

from codesign import results as results_mod
from codesign.results import ResultsStore, code_version, config_key


def test_append_records_roundtrip(tmp_path):
    path = tmp_path / "sub" / "dir" / "runs.jsonl"  # parents are created
    store = ResultsStore(path)
    assert store.records() == []
    assert store.done_keys() == set()
    recs = [
        {"key": "a", "config": {"seed": 0}, "test_accuracy": 0.5},
        {"key": "b", "config": {"seed": 1}, "test_accuracy": 0.75, "note": "é ünïcode"},
    ]
    for r in recs:
        store.append(r)
    assert store.records() == recs
    assert ResultsStore(path).records() == recs  # fresh instance reads the file
    assert store.done_keys() == {"a", "b"}
    assert store.has("a") and not store.has("c")
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and all(json.loads(ln)["key"] for ln in lines)
    # no temporary files left behind (the writers' lock file stays)
    assert sorted(p.name for p in path.parent.iterdir()) == ["runs.jsonl", "runs.jsonl.lock"]


def test_append_requires_key(tmp_path):
    store = ResultsStore(tmp_path / "r.jsonl")
    with pytest.raises(ValueError, match="key"):
        store.append({"config": {}})
    with pytest.raises(ValueError, match="key"):
        store.append({"key": ""})
    with pytest.raises(TypeError, match="record must be a dict, got list"):
        store.append(["not", "a", "dict"])
    with pytest.raises(TypeError, match="object"):
        store.append({"key": "x", "bad": object()})
    assert not (tmp_path / "r.jsonl").exists()
    assert list(tmp_path.iterdir()) == []


def test_append_is_atomic_when_replace_fails(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    store = ResultsStore(path)
    store.append({"key": "a", "v": 1})
    store.append({"key": "b", "v": 2})
    before = path.read_bytes()

    def boom(src, dst):
        raise OSError("simulated crash during replace")

    monkeypatch.setattr(results_mod.os, "replace", boom)
    with pytest.raises(OSError, match="simulated crash"):
        store.append({"key": "c", "v": 3})
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "r.jsonl.lock"]  # temp file cleaned up
    monkeypatch.undo()
    assert store.done_keys() == {"a", "b"}
    store.append({"key": "c", "v": 3})
    assert store.done_keys() == {"a", "b", "c"}


def test_torn_last_line_is_ignored_with_warning(tmp_path):
    path = tmp_path / "r.jsonl"
    good = [{"key": "a", "v": 1}, {"key": "b", "v": 2}]
    path.write_text("".join(json.dumps(r) + "\n" for r in good) + '{"key": "c", "v": 3', "utf-8")
    store = ResultsStore(path)
    with pytest.warns(RuntimeWarning, match=rf"{re.escape(str(path))}.*line 3"):
        assert store.records() == good
    # appending drops the torn line (with the warning) and keeps the file readable
    with pytest.warns(RuntimeWarning, match="line 3"):
        store.append({"key": "c", "v": 3})
    assert store.records() == good + [{"key": "c", "v": 3}]


def test_garbled_middle_line_raises_naming_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"key": "a"}\n{"key": oops}\n{"key": "c"}\n', "utf-8")
    store = ResultsStore(path)
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))}.*line 2"):
        store.records()
    before = path.read_bytes()
    with pytest.raises(ValueError, match="line 2"):
        store.append({"key": "d"})
    assert path.read_bytes() == before


def test_non_object_line_is_garbled(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('[1, 2]\n{"key": "a"}\n', "utf-8")
    with pytest.raises(ValueError, match="line 1"):
        ResultsStore(path).records()


def test_blank_lines_are_skipped(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"key": "a"}\n\n{"key": "b"}\n\n', "utf-8")
    assert ResultsStore(path).done_keys() == {"a", "b"}


def test_numpy_values_serialize(tmp_path):
    store = ResultsStore(tmp_path / "r.jsonl")
    rec = {
        "key": "np",
        "f32": np.float32(0.25),
        "f64": np.float64(1.5),
        "i64": np.int64(7),
        "b": np.bool_(True),
        "arr": np.arange(4, dtype=np.int32).reshape(2, 2),
        "nested": {"x": [np.float32(2.0)]},
    }
    store.append(rec)
    (back,) = store.records()
    assert back == {"key": "np", "f32": 0.25, "f64": 1.5, "i64": 7, "b": True,
                    "arr": [[0, 1], [2, 3]], "nested": {"x": [2.0]}}
    assert type(back["i64"]) is int and type(back["f32"]) is float


def test_jax_values_serialize(tmp_path):
    jnp = pytest.importorskip("jax.numpy")
    store = ResultsStore(tmp_path / "r.jsonl")
    store.append({"key": "jax", "s": jnp.float32(0.5), "a": jnp.arange(3)})
    assert store.records() == [{"key": "jax", "s": 0.5, "a": [0, 1, 2]}]


def test_config_key_stable_and_seed_sensitive():
    a = {"dataset": "cora", "model": "gcn", "cost_weight": 0.1, "seed": 0,
         "opt": {"lr": 0.01, "wd": 5e-4}}
    b = {"opt": {"wd": 5e-4, "lr": 0.01}, "seed": 0, "cost_weight": 0.1, "model": "gcn",
         "dataset": "cora"}
    k = config_key(a)
    assert re.fullmatch(r"[0-9a-f]{16}", k)
    assert config_key(b) == k
    assert config_key({**a, "seed": 1}) != k
    assert config_key({**a, "cost_weight": 0.2}) != k
    # numpy scalars hash like the equal Python values
    assert config_key({**a, "seed": np.int64(0)}) == k
    with pytest.raises(TypeError, match="config must be a dict, got list"):
        config_key(["not", "a", "dict"])


def test_config_key_matches_canonical_sha256():
    import hashlib

    cfg = {"b": 1, "a": [1, 2, {"z": None, "y": True}]}
    canonical = '{"a":[1,2,{"y":true,"z":null}],"b":1}'
    assert config_key(cfg) == hashlib.sha256(canonical.encode()).hexdigest()[:16]


def test_code_version_format():
    v = code_version()
    assert v == "unknown" or re.fullmatch(r"[0-9a-f]{40}(-dirty)?", v)


def test_code_version_unknown_without_git(monkeypatch):
    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    code_version.cache_clear()
    monkeypatch.setattr(results_mod.subprocess, "run", no_git)
    try:
        assert code_version() == "unknown"
    finally:
        code_version.cache_clear()


def test_file_mode_preserved(tmp_path):
    if os.name != "posix":
        pytest.skip("POSIX permissions")
    path = tmp_path / "r.jsonl"
    store = ResultsStore(path)
    store.append({"key": "a"})
    os.chmod(path, 0o640)
    store.append({"key": "b"})
    assert (os.stat(path).st_mode & 0o777) == 0o640
