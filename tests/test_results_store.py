"""`codesign.results.ResultsStore` under several writers, killed writers, unwritable paths, links,
torn or undecodable last lines; the run-record contract (`RUN_RECORD_FIELDS`, `check_run_record`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

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


# ---- issue 36: a results file must not lose records (links, torn last lines, undecodable bytes)


def test_symlinked_results_file_stays_a_link_and_its_target_gets_the_records(tmp_path):
    target_dir = tmp_path / "elsewhere"
    target_dir.mkdir()
    target = target_dir / "real.jsonl"
    target.write_text('{"key": "a"}\n', encoding="utf-8")
    link = tmp_path / "r.jsonl"
    link.symlink_to(target)
    store = ResultsStore(link)
    store.check_writable()
    store.append({"key": "b"})
    assert link.is_symlink() and os.readlink(link) == str(target)  # not replaced by a regular file
    assert [json.loads(ln)["key"] for ln in target.read_text(encoding="utf-8").splitlines()] == ["a", "b"]
    assert store.lock_path == target_dir / "real.jsonl.lock" and store.lock_path.exists()
    assert not (tmp_path / "r.jsonl.lock").exists()  # one lock for writers through the link and past it
    ResultsStore(target).append({"key": "c"})
    assert [r["key"] for r in store.records()] == ["a", "b", "c"]


def test_dangling_link_creates_its_target(tmp_path):
    link, target = tmp_path / "r.jsonl", tmp_path / "out" / "t.jsonl"
    link.symlink_to(target)
    ResultsStore(link).append({"key": "a"})
    assert link.is_symlink() and target.read_text(encoding="utf-8") == '{"key": "a"}\n'


@pytest.mark.parametrize("last", ["note: rerun seed 2 on the GPU box", '{"key": "x"}{"key": "y"}',
                                  '{"key": "z", "v": 1'])
def test_garbled_last_line_is_kept_in_torn_file_and_the_message_says_where(tmp_path, last):
    path = tmp_path / "r.jsonl"
    path.write_text('{"key": "a"}\n{"key": "b"}\n' + last + "\n", encoding="utf-8")
    store = ResultsStore(path)
    torn = tmp_path / "r.jsonl.torn"
    with pytest.warns(RuntimeWarning, match=rf"ignoring torn/garbled last line 3 .*moves it to {re.escape(str(torn))}"):
        assert [r["key"] for r in store.records()] == ["a", "b"]
    with pytest.warns(RuntimeWarning, match=rf"moved torn/garbled last line 3 .* to {re.escape(str(torn))}$"):
        store.append({"key": "c"})
    assert torn.read_text(encoding="utf-8") == last + "\n"
    assert [r["key"] for r in store.records()] == ["a", "b", "c"]
    # a second torn line is appended to the .torn file, never overwriting the first
    with path.open("a", encoding="utf-8") as f:
        f.write("second note")
    with pytest.warns(RuntimeWarning, match="moved torn/garbled last line 4"):
        store.append({"key": "d"})
    assert torn.read_text(encoding="utf-8") == last + "\nsecond note\n"
    assert [r["key"] for r in store.records()] == ["a", "b", "c", "d"]


def test_non_utf8_byte_names_the_file_and_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"key": "a"}\n{"key": "b\xff"}\n{"key": "c"}\n')
    store = ResultsStore(path)
    msg = rf"^{re.escape(str(path))}: line 2 is not UTF-8: byte 0xff at column 11; fix or remove that line$"
    with pytest.raises(ValueError, match=msg):
        store.records()
    before = path.read_bytes()
    with pytest.raises(ValueError, match=msg):
        store.append({"key": "d"})
    assert path.read_bytes() == before and not (tmp_path / "r.jsonl.torn").exists()


def test_non_utf8_last_line_is_torn_and_kept_byte_for_byte(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(b'{"key": "a"}\n{"key": "\xff\xfe')
    store = ResultsStore(path)
    with pytest.warns(RuntimeWarning, match=r"last line 2 \(not UTF-8: byte 0xff at column 10\)"):
        assert store.records() == [{"key": "a"}]
    with pytest.warns(RuntimeWarning, match=r"r\.jsonl\.torn"):
        store.append({"key": "b"})
    assert (tmp_path / "r.jsonl.torn").read_bytes() == b'{"key": "\xff\xfe\n'
    assert path.read_bytes() == b'{"key": "a"}\n{"key": "b"}\n'


_GOOD_KEYS = st.lists(st.text(alphabet="abcdefghij0123456789", min_size=1, max_size=6), max_size=4, unique=True)


def _is_record(raw: bytes) -> bool:
    try:
        return isinstance(json.loads(raw.decode("utf-8")), dict)
    except ValueError:
        return False


@settings(max_examples=60, deadline=None)
@given(keys=_GOOD_KEYS, garbage=st.binary(min_size=1, max_size=40), newline=st.booleans())
def test_any_garbage_last_line_is_kept_in_torn_and_good_records_survive(keys, garbage, newline):
    garbage = garbage.replace(b"\n", b"")
    assume(garbage.strip(b" \t\r") and not _is_record(garbage))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.jsonl"
        path.write_bytes(b"".join(json.dumps({"key": k}).encode() + b"\n" for k in keys) + garbage
                         + (b"\n" if newline else b""))
        store = ResultsStore(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            assert [r["key"] for r in store.records()] == keys
            store.append({"key": "new"})
        assert [r["key"] for r in store.records()] == keys + ["new"]
        assert store.torn_path.read_bytes() == garbage + b"\n"
