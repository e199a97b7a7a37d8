"""A resumable, atomic JSONL results store.

One finished run is one line of a ``results/<name>.jsonl`` file: a JSON object with at least a
``key`` field (see :func:`config_key`). Sweeps call :meth:`ResultsStore.done_keys` (or
:meth:`ResultsStore.has`) on start-up to skip runs that already finished, and
:meth:`ResultsStore.append` after each run.

Crash safety: :meth:`ResultsStore.append` never modifies the results file in place. It writes the
whole existing content plus the new line to a temporary file in the same directory, flushes and
fsyncs it, then renames it onto the results file with :func:`os.replace` (atomic on POSIX and
Windows). A crash at any point leaves either the old file or the new file, never a half-written
one. Lines torn by other writers (e.g. ``echo >>``, a crashed plain append, a hand-written note,
two records glued on one line, bytes that are not UTF-8) are tolerated when they are the final
line: :meth:`ResultsStore.records` skips them with a warning, and :meth:`ResultsStore.append`,
which rewrites the file without them, first appends them to ``<file>.torn`` (never overwritten),
so nothing that was in the file is lost.

Links: a results file that is a symbolic link is read, locked and replaced at its target
(`os.path.realpath`), so the target keeps receiving records and every writer, through the link
or not, takes the same lock.

Concurrent writers: :meth:`ResultsStore.append` holds a :class:`filelock.FileLock` on
``<file>.lock`` around its read-modify-write, so processes appending to one file (two sweeps, a
sweep and a ``codesign train``) keep every record. Under that lock no other writer can have a
temporary file in flight, so the temporary files of this results file that are older than the
lock acquisition were left by a killed writer; they are removed.

Run records: :data:`RUN_RECORD_FIELDS` is the contract every trainer's result dict meets
(`codesign.train.train`, `codesign.distributed.train_distributed`); :func:`check_run_record`
checks it in one place before a record is stored.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import subprocess
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Optional

import filelock

__all__ = ["config_key", "code_version", "to_jsonable", "ResultsStore", "ResultsPathError",
           "RUN_RECORD_FIELDS", "COST_FIELDS", "check_run_record"]

# What every trainer returns for one finished run (`codesign.train.train`,
# `codesign.distributed.train_distributed`); `codesign train` summarizes these fields over seeds.
RUN_RECORD_FIELDS = (
    "test_accuracy",     # float, hardened model on the test mask
    "val_accuracy",      # float
    "train_accuracy",    # float
    "modeled",           # {COST_FIELDS: float}  hardened model on the target hardware
    "dense_modeled",     # {COST_FIELDS: float}  dense FP32 model, same target
    "densities",         # {"edge", "feature", ...: float}  hard kept fractions
    "bits",              # int, configured bit-width (32 without quantization)
    "layer_bits",        # {tensor: float}  hardened bit-width per quantized tensor ({} without)
    "final_loss",        # float, last epoch's training loss
    "final_cost_ratio",  # float, last epoch's modeled cost / dense cost
    "train_time_s",      # float, seconds of the training loop (seeds trained together: the batch's / S)
    "selected_epoch",    # int, the epoch whose weights were evaluated
)
COST_FIELDS = ("latency_s", "energy_j", "dram_bytes")


def check_run_record(result: dict, trainer: str = "train") -> dict:
    """Checks that ``result`` meets the run-record contract (:data:`RUN_RECORD_FIELDS`, and
    :data:`COST_FIELDS` in ``modeled`` / ``dense_modeled``).

    Args:
      result: a trainer's result dict.
      trainer: the trainer's name, for the message.

    Returns:
      ``result`` (unchanged).

    Raises:
      ValueError: naming the trainer and every missing field.
    """
    if not isinstance(result, dict):
        raise ValueError(f"{trainer}: result must be a dict, got {type(result).__name__}")
    missing = [k for k in RUN_RECORD_FIELDS if k not in result]
    for k in ("modeled", "dense_modeled"):
        if isinstance(result.get(k), dict):
            missing += [f"{k}.{c}" for c in COST_FIELDS if c not in result[k]]
    if missing:
        raise ValueError(f"{trainer}: result lacks the run-record field(s) {missing} "
                         f"(codesign.results.RUN_RECORD_FIELDS)")
    return result


class ResultsPathError(OSError, ValueError):
    """A results file that cannot be written (an `OSError`, and a `ValueError` so that the CLI
    reports it as bad input: the message names the path)."""


# How long `ResultsStore` waits for another writer's lock before giving up (seconds).
LOCK_TIMEOUT_S = 600.0


def to_jsonable(obj: Any) -> Any:
    """``json.dumps`` ``default`` hook: convert numpy / JAX values into plain Python values.

    Args:
        obj: a value the standard JSON encoder does not handle.

    Returns:
        ``obj.tolist()`` for numpy/JAX arrays and numpy scalars (arrays become nested lists,
        scalars become ``int``/``float``/``bool``); ``obj.item()`` for other objects with an
        ``item`` method; a list for sets/frozensets (sorted when possible); ``str`` for
        :class:`pathlib.Path`.

    Raises:
        TypeError: naming the type, if ``obj`` cannot be converted.
    """
    if hasattr(obj, "tolist"):  # numpy ndarray / generic scalar, jax.Array
        return obj.tolist()
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, frozenset)):
        try:
            return sorted(obj)
        except TypeError:
            return list(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def _dumps(obj: Any, **kwargs: Any) -> str:
    return json.dumps(obj, default=to_jsonable, **kwargs)


def config_key(config: dict) -> str:
    """A stable identifier of a run, computed from its full configuration (seed included).

    The key is the first 16 hex characters of the SHA-256 of the canonical JSON encoding of
    ``config``: keys sorted at every level, no whitespace (``separators=(",", ":")``), numpy/JAX
    values converted as in :func:`to_jsonable`. It therefore does not depend on dict insertion
    order, and any change of any value (e.g. the seed) changes the key.

    Args:
        config: a JSON-serializable mapping (string keys).

    Returns:
        A 16-character lowercase hex string.

    Raises:
        TypeError: if ``config`` is not a dict or contains a value that cannot be serialized.
    """
    if not isinstance(config, dict):
        raise TypeError(f"config must be a dict, got {type(config).__name__}")
    canonical = _dumps(config, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def _git(args: list[str], cwd: Path) -> str:
    out = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
    )
    return out.stdout.strip()


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The git commit of the repository that contains the ``codesign`` package.

    Runs ``git rev-parse HEAD`` in the package directory and appends ``"-dirty"`` when
    ``git status --porcelain`` reports changes (tracked or untracked files; the repository's
    ``results/`` folder is excluded so that writing results does not mark the code dirty).
    The value is computed once per process (the code a process runs is the code it imported).

    Returns:
        ``"<40-hex commit>"`` or ``"<commit>-dirty"``; ``"unknown"`` if git is not installed,
        the package is not inside a git repository, the repository has no commit yet, or git fails.

    Raises:
        Nothing.
    """
    pkg_dir = Path(__file__).resolve().parent
    try:
        commit = _git(["rev-parse", "HEAD"], pkg_dir)
        if not commit:
            return "unknown"
        status = _git(["status", "--porcelain", "--", ".", ":(top,exclude)results"], pkg_dir)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}-dirty" if status else commit


class ResultsStore:
    """Append-only, crash-safe store of run records in a JSONL file.

    Args:
        path: the ``.jsonl`` file (need not exist yet; parent directories are created by
            :meth:`check_writable` or the first :meth:`append`).

    Each line of the file is one JSON object (a record) with a string ``key`` field. Writers
    serialize on ``<path>.lock`` (:attr:`lock_path`, a `filelock.FileLock`; the lock file stays
    beside the results file, or beside its target when :attr:`path` is a symbolic link).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.path)!r})"

    @property
    def real_path(self) -> Path:
        """:attr:`path` with every symbolic link resolved (`os.path.realpath`): the file that is
        read, locked and replaced (a link is never replaced by a regular file)."""
        return Path(os.path.realpath(self.path))

    @property
    def lock_path(self) -> Path:
        """The writers' lock, ``<real_path>.lock`` (beside the link's target, not the link)."""
        real = self.real_path
        return real.with_name(real.name + ".lock")

    @property
    def torn_path(self) -> Path:
        """``<real_path>.torn``: where :meth:`append` keeps a torn last line it drops (appended)."""
        real = self.real_path
        return real.with_name(real.name + ".torn")

    # ------------------------------------------------------------------ reading
    def _parse(self, data: bytes) -> tuple[list[dict], list[str], Optional[tuple[int, bytes, str]]]:
        """Parse file bytes into (records, good lines, torn) where ``torn`` is ``(line number,
        raw bytes, reason)`` of a garbled or undecodable final line (else None); a garbled earlier
        line raises ValueError naming the file and the line."""
        lines = data.split(b"\n")
        numbered = [(i + 1, ln) for i, ln in enumerate(lines) if ln.strip(b" \t\r")]  # JSON whitespace
        records: list[dict] = []
        good: list[str] = []
        for idx, (lineno, raw) in enumerate(numbered):
            is_last = idx == len(numbered) - 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                why = f"not UTF-8: byte 0x{raw[err.start]:02x} at column {err.start + 1}"
                if is_last:
                    return records, good, (lineno, raw, why)
                raise ValueError(f"{self.path}: line {lineno} is {why}; fix or remove that line") from None
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict):
                    raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
            except ValueError as err:  # json.JSONDecodeError is a ValueError
                if is_last:
                    return records, good, (lineno, raw, str(err))
                raise ValueError(
                    f"{self.path}: line {lineno} is not a valid JSON object ({err})"
                ) from None
            records.append(rec)
            good.append(line)
        return records, good, None

    def _read_bytes(self) -> bytes:
        try:
            return self.real_path.read_bytes()
        except FileNotFoundError:
            return b""

    def records(self) -> list[dict]:
        """All records in file order.

        Returns:
            A list of dicts, one per non-blank line; ``[]`` if the file does not exist.

        Raises:
            ValueError: naming the file and the (1-based) line number, if a line other than the
                last non-blank one is not UTF-8 or not a JSON object.
            OSError: the file exists but cannot be read (the message names it).

        Warns:
            RuntimeWarning: naming the file and line number, if the last non-blank line is torn,
                garbled or not UTF-8; that line is ignored here (it stays in the file; the next
                :meth:`append` moves it to :attr:`torn_path`).
        """
        records, _, torn = self._parse(self._read_bytes())
        if torn is not None:
            warnings.warn(f"{self.path}: ignoring torn/garbled last line {torn[0]} ({torn[2]}); the next append "
                          f"moves it to {self.torn_path}", RuntimeWarning, stacklevel=2)
        return records

    def done_keys(self) -> set[str]:
        """The set of ``key`` fields of all records (records without a key are skipped).

        Raises/warns as :meth:`records`.
        """
        return {r["key"] for r in self.records() if "key" in r}

    def has(self, key: str) -> bool:
        """Whether a record with this ``key`` is stored. Raises/warns as :meth:`records`."""
        return key in self.done_keys()

    # ------------------------------------------------------------------ writing
    def append(self, record: dict) -> None:
        """Atomically add one record as a new line, holding the writers' lock (``<path>.lock``).

        Under the lock, temporary files of this results file left by killed writers are removed
        (module docstring); a torn final line is appended to :attr:`torn_path` (with a warning
        naming it); then the existing content without it plus the new line is written to a temporary file next to :attr:`path`, flushed and fsynced, then
        moved onto :attr:`path` with :func:`os.replace`; the directory is fsynced afterwards where
        the OS supports it. If anything fails, the original file is left untouched and the
        temporary file is removed. numpy/JAX scalars and arrays in ``record`` are converted to
        plain JSON numbers/lists (see :func:`to_jsonable`).

        A results file that is a symbolic link is written at its target (:attr:`real_path`).

        Args:
            record: a dict with a non-empty string ``key`` field.

        Raises:
            ValueError: if ``record`` has no ``key`` (or it is not a non-empty string), or if the
                existing file has a garbled or non-UTF-8 line before its last line (nothing is
                written; the message names the file and the line).
            TypeError: if ``record`` is not a dict or holds a value that cannot be serialized.
            ResultsPathError: naming the path, if its folder cannot be created or the lock cannot
                be taken (nothing is written).
            OSError: if the file cannot be written (the original file is unchanged).
        """
        if not isinstance(record, dict):
            raise TypeError(f"record must be a dict, got {type(record).__name__}")
        if "key" not in record:
            raise ValueError(f"record for {self.path} has no 'key' field: keys {sorted(record)}")
        if not isinstance(record["key"], str) or not record["key"]:
            raise ValueError(f"record 'key' must be a non-empty string, got {record['key']!r}")
        # Serialize first: a TypeError must not leave anything behind. allow_nan keeps NaN
        # accuracies of diverged runs (Python's json reads them back).
        new_line = _dumps(record, ensure_ascii=False)
        if "\n" in new_line:  # cannot happen with json.dumps without indent; be explicit
            raise ValueError("serialized record contains a newline")

        with self._locked():
            _, good, torn = self._parse(self._read_bytes())  # validates before anything is written
            if torn is not None:
                self._keep_torn(*torn)
            content = "".join(line + "\n" for line in good) + new_line + "\n"
            write_text_atomic(self.real_path, content)

    def _keep_torn(self, lineno: int, raw: bytes, why: str) -> None:
        """Appends the dropped last line ``raw`` (its bytes as they were, plus a newline) to
        :attr:`torn_path`, fsynced, and warns where it went. Call with the lock held."""
        torn = self.torn_path
        try:
            with open(torn, "ab") as f:
                f.write(raw + b"\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as err:
            raise ResultsPathError(f"results file {self.path}: cannot keep its torn last line {lineno} in {torn} "
                                   f"({err}); nothing was written") from err
        warnings.warn(f"{self.path}: moved torn/garbled last line {lineno} ({why}) to {torn}", RuntimeWarning,
                      stacklevel=4)

    def check_writable(self) -> None:
        """Fails early, before any work whose result is to be stored, if :attr:`path` cannot be
        written: creates the parent folders, takes and releases the lock (which creates
        ``<path>.lock``) and removes stale temporary files (as :meth:`append` does).

        Raises:
            ResultsPathError: naming the path and the reason (a parent is a file, no permission,
                :attr:`path` is a folder, read-only file system, ...).
        """
        if self.real_path.is_dir():
            raise ResultsPathError(f"results file {self.path} is a directory")
        with self._locked():
            if not os.access(self.real_path.parent, os.W_OK):
                raise ResultsPathError(f"results file {self.path}: its folder is not writable")

    @contextlib.contextmanager
    def _locked(self):
        """Holds the writers' lock (parent folders created first) and removes the temporary
        files a killed writer left behind; OS errors become `ResultsPathError` naming the path."""
        lock = filelock.FileLock(str(self.lock_path), timeout=LOCK_TIMEOUT_S)
        try:
            self.real_path.parent.mkdir(parents=True, exist_ok=True)
            lock.acquire()
        except filelock.Timeout as err:
            raise ResultsPathError(f"results file {self.path}: another writer has held {self.lock_path} "
                                   f"for over {LOCK_TIMEOUT_S:g} s") from err
        except OSError as err:
            raise ResultsPathError(f"results file {self.path} cannot be written: {err}") from err
        try:
            self._remove_stale_tmp(time.time())
            yield
        finally:
            lock.release()

    def _remove_stale_tmp(self, acquired: float) -> list[Path]:
        """Removes this file's temporary files (`_tmp_path` names) last modified before
        ``acquired`` (the lock acquisition time, seconds since the epoch). Call with the lock held:
        every writer writes its temporary file under the lock, so such a file's writer is gone.

        Returns:
            The removed paths.
        """
        real = self.real_path
        pattern = _tmp_pattern(real)
        removed = []
        try:
            entries = list(os.scandir(real.parent))
        except OSError:
            return removed
        for entry in entries:
            if not pattern.fullmatch(entry.name):
                continue
            try:
                if entry.stat(follow_symlinks=False).st_mtime <= acquired:
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
            except FileNotFoundError:
                pass
        if removed:
            warnings.warn(f"{self.path}: removed {len(removed)} temporary file(s) a killed writer left "
                          f"({', '.join(p.name for p in removed)})", RuntimeWarning, stacklevel=4)
        return removed


def _tmp_path(path: Path) -> Path:
    """The temporary file `write_text_atomic` writes before renaming it onto ``path``:
    ``.<name>.<pid>.<8 hex>.tmp`` in the same folder."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def _tmp_pattern(path: Path) -> "re.Pattern[str]":
    """Matches the names `_tmp_path` gives the temporary files of ``path``."""
    return re.compile(rf"\.{re.escape(path.name)}\.\d+\.[0-9a-f]{{8}}\.tmp")


def write_text_atomic(path, content: str) -> None:
    """Writes ``content`` to ``path`` atomically: a temporary file beside it, flushed and fsynced,
    then `os.replace` (the directory is fsynced where supported). The file's permissions are kept.
    If anything fails the original file is untouched and the temporary file removed.

    Raises:
      OSError: the file cannot be written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            try:
                os.chmod(tmp, path.stat().st_mode & 0o7777)
            except OSError:
                pass
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def write_json_atomic(path, obj: Any) -> None:
    """`write_text_atomic` of ``obj`` as indented JSON (numpy/JAX values converted)."""
    write_text_atomic(path, _dumps(obj, indent=1) + "\n")


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX); silently a no-op where unsupported."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)

