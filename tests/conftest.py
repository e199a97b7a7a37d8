"""Shared pytest fixtures.

* ``CODESIGN_DATA`` defaults to ``<repo>/../shared/data`` (which holds ``planetoid/ind.cora.*``),
  so tests never download; set it yourself to use another copy.
* ``getkey``: deterministic JAX PRNG keys, a fresh stream per test (seed 0).
* ``planetoid_root`` / ``cora``: the data root and the loaded Cora `Graph` (session-scoped);
  tests that use them are skipped, with the reason, when the raw files are absent.
* ``--regen``: rewrite stored reference outputs from the current code instead of comparing with
  them (``pytest tests/test_hwmodel.py -k reference --regen``; the regenerating test skips, saying
  so); review the diff before committing it.
* ``JAX_COMPILATION_CACHE_DIR``: a fresh persistent compilation cache per pytest process (below).

Strict dtype/rank promotion is deliberately not switched on globally; tests that want it use
``jax.numpy_rank_promotion("raise")`` / ``jax.numpy_dtype_promotion("strict")`` as context managers.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# A persistent XLA compilation cache for each pytest process (each xdist worker) and the CLI /
# experiment subprocesses its tests start (they inherit the variable): many tests compile the same
# programs (a Cora GCN's training step, the cost model's estimate) in fresh `jax.jit`s or fresh
# processes; a program compiled once is loaded from here afterwards. The directory is new for each
# process and removed when it exits, so nothing outlives the run and no two workers write one file.
# A JAX_COMPILATION_CACHE_DIR of your own is used as it is. Set before JAX is imported.
_OWN_CACHE = "CODESIGN_TESTS_XLA_CACHE"  # the directory a parent pytest process (xdist's controller) made
if os.environ.get("JAX_COMPILATION_CACHE_DIR") in (None, os.environ.get(_OWN_CACHE)):
    _cache = tempfile.mkdtemp(prefix="codesign-tests-xla-cache-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.environ[_OWN_CACHE] = _cache
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)

# XLA's LLVM backend at optimization level 1 for the test session (its workers and subprocesses
# inherit it): the suite is dominated by compiling many small programs once each. Measured
# 2026-11-27, one process: level 0 compiled the compile-bound files ~20 % faster in CPU time
# (tests/test_codesign_gcn.py 69 -> 55 s user) but ran execution-bound tests slower (the 300-epoch
# GAT budget test 33 -> 44-72 s); level 1 ran that GCN file plus the GAT budget test in 72 s
# against level 0's 88 s (GAT budget 23 s). The HLO passes (fusion, layout) are unchanged, so the
# tests check the same programs; nothing in the suite asserts a speed (speed targets live in
# experiments/ and `codesign bench`). CODESIGN_TESTS_XLA_OPT=default keeps XLA's default level.
# Tests that add XLA_FLAGS for a subprocess append to these (`xla_flags`).
_OPT = "--xla_backend_optimization_level=1"
if os.environ.get("CODESIGN_TESTS_XLA_OPT") != "default" and _OPT not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_OPT}".strip()


def xla_flags(*flags: str) -> str:
    """This session's ``XLA_FLAGS`` with ``flags`` appended (for a subprocess's environment)."""
    return " ".join([os.environ.get("XLA_FLAGS", ""), *flags]).strip()


import jax  # (after the variables above; the update covers a JAX imported before this file)

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])

os.environ.setdefault("CODESIGN_DATA", str((Path(__file__).resolve().parent / ".." / ".." / "shared" / "data").resolve()))
# Absolute, so that tests running the CLI in a subprocess with another working directory see the same
# data as README's relative ``CODESIGN_DATA=../shared/data`` gives this process.
os.environ["CODESIGN_DATA"] = str(Path(os.environ["CODESIGN_DATA"]).resolve())

_PLANETOID_EXTS = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")


def pytest_addoption(parser):
    _add_durations_option(parser)
    parser.addoption("--regen", action="store_true", default=False,
                     help="rewrite stored reference outputs (tests/data/hwmodel_reference.json) from the "
                          "current code instead of comparing with them; review the diff")


class GetKey:
    """``getkey()`` returns a new key on each call: ``fold_in(key(seed), call_number)``."""

    def __init__(self, seed: int = 0):
        self.seed = seed
        self.calls = 0
        self._base = jax.random.key(seed)

    def __call__(self) -> jax.Array:
        self.calls += 1
        return jax.random.fold_in(self._base, self.calls)


@pytest.fixture
def getkey() -> GetKey:
    """Deterministic keys: the same sequence in every test and on every run."""
    return GetKey(0)


def _has_planetoid(root: Path, name: str) -> bool:
    return all((root / "planetoid" / f"ind.{name}.{ext}").is_file() for ext in _PLANETOID_EXTS)


@pytest.fixture(scope="session")
def planetoid_root() -> Path:
    """The data root (``$CODESIGN_DATA``) holding ``planetoid/ind.cora.*``; skips if absent."""
    root = Path(os.environ["CODESIGN_DATA"])
    if not _has_planetoid(root, "cora"):
        pytest.skip(f"Cora raw files not found under {root}/planetoid "
                    "(set CODESIGN_DATA to a directory containing planetoid/ind.cora.*)")
    return root


@pytest.fixture(scope="session")
def real_root() -> Path:
    """``$CODESIGN_DATA/wordnet``, holding WordNet 3.0's data files (`codesign.data.wordnet.DATA_FILES`);
    skips if absent."""
    from codesign.data import wordnet as wn
    root = Path(os.environ.get("CODESIGN_DATA", "")) / "wordnet"
    if not all((root / f).is_file() for f in wn.DATA_FILES):
        pytest.skip(f"WordNet 3.0 data files not found in {root}")
    return root


@pytest.fixture(scope="session")
def cora(planetoid_root):
    """Cora with the public split and row-normalized features (a `codesign.graph.Graph`)."""
    from codesign.data import load_planetoid

    return load_planetoid("cora", root=planetoid_root)


# --- file order for the two xdist workers ----------------------------------------------------------
# `--dist loadfile` hands whole files to the workers in collection order, each worker taking the next
# file when it runs out. Longest files first (the LPT rule: Graham, "Bounds on multiprocessing timing
# anomalies", SIAM J. Appl. Math. 1969) keeps one worker from starting a long file while the other
# is nearly done; pyproject's `--no-loadscope-reorder` stops xdist from reordering by test count.
# The worker-seconds per file come from `pytest --store-durations` (below), a measurement of this
# suite on the CI-sized machine; a file not in the table goes after the listed ones, in name order.
DURATIONS = Path(__file__).resolve().parent / "durations.json"


def _stored_durations() -> dict:
    """File name -> worker-seconds from `DURATIONS`; {} (name order) if absent or unreadable."""
    import json
    import warnings
    try:
        return dict(json.loads(DURATIONS.read_text())["seconds_per_file"]) if DURATIONS.is_file() else {}
    except (ValueError, KeyError, TypeError) as e:
        warnings.warn(f"{DURATIONS}: unreadable ({e}); test files run in name order")
        return {}


def pytest_collection_modifyitems(session, config, items):
    seconds = _stored_durations()
    items.sort(key=lambda it: (-seconds.get(it.path.name, -1.0), it.path.name))  # stable: a file's own order kept


def _add_durations_option(parser):  # (registered from pytest_addoption above)
    parser.addoption("--store-durations", action="store_true", default=False,
                     help="update tests/durations.json with each test file's worker-seconds (setup + call + "
                          "teardown) in this run: the order in which the xdist workers take the files (longest "
                          "first); files not run keep their stored time")


_FILE_SECONDS: dict = {}


def pytest_runtest_logreport(report):
    name = report.nodeid.split("::")[0].rsplit("/", 1)[-1]
    _FILE_SECONDS[name] = _FILE_SECONDS.get(name, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    if not session.config.getoption("--store-durations") or hasattr(session.config, "workerinput"):
        return  # on the controller only (it receives every worker's reports)
    if exitstatus not in (0, 1) or not _FILE_SECONDS:  # interrupted, or nothing ran: keep the table
        return
    import datetime

    from codesign.results import write_json_atomic
    merged = {**_stored_durations(), **_FILE_SECONDS}
    write_json_atomic(DURATIONS, {
        "what": "worker-seconds per test file (setup + call + teardown of its tests), pytest --store-durations",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu_count": os.cpu_count(), "load_avg_after": os.getloadavg(),
        "seconds_per_file": {k: round(v, 1) for k, v in sorted(merged.items(), key=lambda kv: -kv[1])}})
