"""`codesign.results.ResultsStore` under several writers, killed writers and unwritable paths;
the run-record contract (`RUN_RECORD_FIELDS`, `check_run_record`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from codesign import results as results_mod
from codesign.results import RUN_RECORD_FIELDS, ResultsPathError, ResultsStore, check_run_record

ROOT = Path(__file__).resolve().parent.parent

# A writer process: waits for the start file (so that the writers overlap), then appends N records.
_WRITER = r"""
import os, sys, time
from codesign.results import ResultsStore
path, go, writer, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
store = ResultsStore(path)
while not os.path.exists(go):
    time.sleep(0.005)
for i in range(n):
    store.append({"key": f"{writer}-{i}", "writer": writer, "i": i, "pad": "x" * 50})
"""


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


def test_concurrent_writers_keep_every_record(tmp_path):
    path, go = tmp_path / "r.jsonl", tmp_path / "go"
    n, writers = 300, ("a", "b", "c")
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(path), str(go), w, str(n)], env=_env(),
                              stderr=subprocess.PIPE, text=True) for w in writers]
    time.sleep(1.0)  # let every writer import and wait
    go.touch()
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-2000:]
    lines = path.read_text(encoding="utf-8").splitlines()
    recs = [json.loads(ln) for ln in lines]  # every line valid JSON
    assert len(recs) == n * len(writers)
    assert {r["key"] for r in recs} == {f"{w}-{i}" for w in writers for i in range(n)}
    # each writer's records in its own order
    for w in writers:
        assert [r["i"] for r in recs if r["writer"] == w] == list(range(n))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["go", "r.jsonl", "r.jsonl.lock"]


def test_stale_tmp_file_removed_by_next_append(tmp_path):
    path = tmp_path / "r.jsonl"
    store = ResultsStore(path)
    store.append({"key": "a"})
    # what a writer killed between writing its temporary file and renaming it leaves behind
    stale = results_mod._tmp_path(path)
    stale.write_text('{"key": "a"}\n{"key": "half', encoding="utf-8")
    past = time.time() - 5
    os.utime(stale, (past, past))
    other = tmp_path / ".other.jsonl.123.0123abcd.tmp"  # another results file's: not ours to remove
    other.write_text("", encoding="utf-8")
    os.utime(other, (past, past))
    with pytest.warns(RuntimeWarning, match="removed 1 temporary file"):
        store.append({"key": "b"})
    assert not stale.exists() and other.exists()
    assert [r["key"] for r in store.records()] == ["a", "b"]


def test_stale_tmp_file_removed_on_open(tmp_path):
    path = tmp_path / "r.jsonl"
    stale = results_mod._tmp_path(path)
    stale.write_text("", encoding="utf-8")
    past = time.time() - 5
    os.utime(stale, (past, past))
    with pytest.warns(RuntimeWarning, match=stale.name.replace(".", r"\.")):
        ResultsStore(path).check_writable()
    assert not stale.exists()


def test_unwritable_path_fails_naming_it(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("", encoding="utf-8")
    store = ResultsStore(blocker / "sub" / "r.jsonl")
    with pytest.raises(ResultsPathError, match=r"results file .*not_a_dir/sub/r\.jsonl cannot be written"):
        store.check_writable()
    with pytest.raises(ResultsPathError, match=r"not_a_dir/sub/r\.jsonl"):
        store.append({"key": "a"})
    folder = tmp_path / "r.jsonl"
    folder.mkdir()
    with pytest.raises(ResultsPathError, match=r"results file .*r\.jsonl is a directory"):
        ResultsStore(folder).check_writable()
    # a ValueError too: the CLI reports it as bad input, not with a traceback
    assert issubclass(ResultsPathError, ValueError) and issubclass(ResultsPathError, OSError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_folder_fails_naming_it(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        with pytest.raises(ResultsPathError, match=r"ro/r\.jsonl"):
            ResultsStore(ro / "r.jsonl").check_writable()
    finally:
        ro.chmod(0o700)


def test_lock_timeout_names_lock_file(tmp_path, monkeypatch):
    path = tmp_path / "r.jsonl"
    monkeypatch.setattr(results_mod, "LOCK_TIMEOUT_S", 0.1)
    store = ResultsStore(path)
    # another process holds the lock
    child = subprocess.Popen([sys.executable, "-c", f"import filelock, time; l = filelock.FileLock({str(store.lock_path)!r}); "
                              f"l.acquire(); print('held', flush=True); time.sleep(30)"],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "held"
        with pytest.raises(ResultsPathError, match=r"r\.jsonl\.lock"):
            store.append({"key": "a"})
    finally:
        child.kill()
        child.wait()
    assert not path.exists()


def test_run_record_contract():
    good = {k: 0.0 for k in RUN_RECORD_FIELDS}
    good["modeled"] = good["dense_modeled"] = {"latency_s": 1.0, "energy_j": 1.0, "dram_bytes": 1.0}
    assert check_run_record(good) is good
    bad = {k: v for k, v in good.items() if k != "layer_bits"}
    with pytest.raises(ValueError, match=r"train_distributed: result lacks .*'layer_bits'"):
        check_run_record(bad, "train_distributed")
    bad = dict(good, modeled={"latency_s": 1.0})
    with pytest.raises(ValueError, match=r"'modeled\.energy_j', 'modeled\.dram_bytes'"):
        check_run_record(bad)
