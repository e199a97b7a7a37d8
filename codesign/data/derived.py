"""A cache for arrays derived from a generator or a feature extractor, with their SHA-256 and
the parameters that made them.

Layout: ``<cache_root()>/derived/<name>/`` holds one ``<key>.npy`` per array and a sidecar
``meta.json``::

    {"version": 1, "name": ..., "params": {...},
     "arrays": {"<key>": {"sha256": hex, "shape": [...], "dtype": "int32"}, ...}}

``sha256`` is the hash of the ``.npy`` file's bytes (header included, so shape and dtype are
covered). One slot per ``name``: a slot made from other ``params`` is rebuilt and replaced, never
reused; a slot whose file is missing, unreadable or fails its hash is rebuilt with a one-line
`UserWarning`. Writes go to a temporary folder that replaces the slot at the end, so an
interrupted build leaves no half-written slot.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Callable

import numpy as np

from codesign.data.planetoid import cache_root

CACHE_VERSION = 1
_CHUNK = 1 << 24  # bytes hashed per read


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 hex of a file's bytes (read in 16 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def slot_dir(name: str) -> Path:
    """``<cache_root()>/derived/<name>``, the slot of ``name``."""
    return cache_root() / "derived" / name


def _json_params(params: dict) -> dict:
    """``params`` as it reads back from JSON (tuples become lists), so comparison is exact."""
    try:
        return json.loads(json.dumps(params, sort_keys=True))
    except TypeError as e:
        raise ValueError(f"cached_arrays: params must be JSON-serializable ({e})") from None


def _load(d: Path, name: str, params: dict) -> dict | None:
    """The slot's arrays, or None (with a reason warned if the slot exists but is bad)."""
    meta_path = d / "meta.json"
    if not meta_path.is_file():
        return None
    try:
        meta = json.loads(meta_path.read_text())
        entries = meta["arrays"]
        same = meta.get("version") == CACHE_VERSION and meta.get("params") == params
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(f"cached_arrays: {meta_path}: unreadable sidecar ({type(e).__name__}); rebuilding {name}",
                      stacklevel=3)
        return None
    if not same:  # other parameters (or cache version): rebuilt, not reused
        return None
    out = {}
    for key, entry in entries.items():
        path = d / f"{key}.npy"
        try:
            got = file_sha256(path)
        except OSError:
            warnings.warn(f"cached_arrays: {path}: missing; rebuilding {name}", stacklevel=3)
            return None
        if got != entry.get("sha256"):
            warnings.warn(f"cached_arrays: {path}: sha256 mismatch (expected {entry.get('sha256')}, got {got}); "
                          f"rebuilding {name}", stacklevel=3)
            return None
        out[key] = np.load(path, allow_pickle=False)
    return out


def _store(d: Path, name: str, params: dict, arrays: dict) -> None:
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=d.parent, prefix=f".{name}.", suffix=".part"))
    try:
        entries = {}
        for key, a in arrays.items():
            path = tmp / f"{key}.npy"
            np.save(path, np.ascontiguousarray(a), allow_pickle=False)
            entries[key] = {"sha256": file_sha256(path), "shape": list(a.shape), "dtype": str(a.dtype)}
        meta = {"version": CACHE_VERSION, "name": name, "params": params, "arrays": entries}
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
        if d.exists():
            shutil.rmtree(d)
        os.replace(tmp, d)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def cached_arrays(name: str, params: dict, build: Callable[[], dict], cache: bool = True) -> dict:
    """``build()``'s arrays (``{key: np.ndarray}``), from the slot of ``name`` when it was made
    from the same ``params`` and every file matches its SHA-256, else built and stored.

    Args:
      name: the slot (a file-name-safe string, e.g. ``"csbm-products"``).
      params: JSON-serializable description of everything the arrays depend on (generator
        parameters, seed, source-file hashes, library versions); compared for equality.
      build: makes the arrays (called only on a miss).
      cache: False builds without reading or writing the cache.

    Returns:
      dict of NumPy arrays, as ``build`` returned them or as loaded (same dtypes and shapes).

    Raises:
      ValueError: ``name`` not a plain file name, ``params`` not JSON-serializable, or ``build``
        returned something other than a dict of arrays with identifier keys.
      TypeError: ``cache`` is not a bool.
    Writes that fail (read-only cache) are skipped with a warning; the built arrays are returned.
    """
    if not isinstance(name, str) or not name or name != Path(name).name or name.startswith("."):
        raise ValueError(f"cached_arrays: name must be a plain file name, got {name!r}")
    if not isinstance(cache, bool):
        raise TypeError(f"cached_arrays: cache must be a bool, got {type(cache).__name__}")
    params = _json_params(params)
    d = slot_dir(name)
    if cache:
        hit = _load(d, name, params)
        if hit is not None:
            return hit
    arrays = build()
    if not isinstance(arrays, dict) or not all(isinstance(k, str) and k.isidentifier() and isinstance(v, np.ndarray)
                                               for k, v in arrays.items()):
        raise ValueError(f"cached_arrays: build for {name!r} must return a dict of identifier -> np.ndarray")
    if cache:
        try:
            _store(d, name, params, arrays)
        except OSError as e:
            warnings.warn(f"cached_arrays: could not write {d} ({e}); not cached", stacklevel=2)
    return arrays


def read_meta(name: str) -> dict | None:
    """The slot's sidecar (parsed ``meta.json``), or None if there is none."""
    p = slot_dir(name) / "meta.json"
    return json.loads(p.read_text()) if p.is_file() else None
