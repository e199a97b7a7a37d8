"""Save a trained model with orbax and restore it later or elsewhere, tied to its config and graph.

A checkpoint folder holds ``state/`` (the model's `nnx` state, `orbax.checkpoint.StandardCheckpointer`)
and ``meta.json``: the `TrainConfig` fields, the dataset name, the graph's SHA-256
(`graph_sha256`: senders, receivers, features, labels and masks), the code version, the date, the
run's results key (``run_key``, when given) and three kinds of SHA-256 that `load_model` verifies
before anything is trusted:

- ``files``: of every file under ``state/`` (relative path -> hex), so a flipped, truncated or
  removed orbax file is named before orbax reads it;
- ``arrays``: of every array of the model's state (``conv1/kernel`` -> hex of dtype, shape and
  bytes; PRNG keys by their key data), checked on the restored arrays;
- ``meta_sha256``: of meta.json's own content (every other field, canonical JSON), so an edited
  config (``bits`` 4 -> 8, another model name) or dataset is refused instead of deployed.

`load_model` rebuilds the architecture from the config and refuses a graph whose hash differs, so a
model trained once can be deployed and measured on another machine without silently running on
the wrong data. Every refusal is one line (`CheckpointError`, a `ValueError`) naming the folder and
the file; orbax / tensorstore errors are wrapped into one. A checkpoint saved by a codesign older
than these hashes is refused (re-save it): its weights cannot be told apart from corrupted ones.

`save_model` writes into a temporary sibling folder and renames it into place, so an interrupted
save leaves no half-written checkpoint under the name asked for.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from codesign.graph import Graph
from codesign.results import code_version, write_json_atomic
from codesign.train import TrainConfig, build_model

__all__ = ["CheckpointError", "graph_sha256", "state_sha256", "meta_sha256", "save_model", "read_meta",
           "load_model"]

_META = "meta.json"
_STATE = "state"
_HASHES = ("files", "arrays", "meta_sha256")
_REQUIRED = ("config", "dataset", "graph_sha256")
_RESAVE = "re-save it (codesign train --save)"


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be trusted or read: corrupt, edited, truncated or missing
    files, an unparsable ``meta.json``, or one saved without hashes. The message is one line naming
    the folder and the file (a `ValueError`: the CLI reports it as bad input)."""


def graph_sha256(graph: Graph) -> str:
    """SHA-256 (hex) of the graph's senders, receivers, features, labels and split masks (their
    bytes in a fixed order and dtype: int32, float32, bool)."""
    h = hashlib.sha256()
    for name, dtype in (("senders", np.int32), ("receivers", np.int32), ("x", np.float32), ("y", np.int32),
                        ("train_mask", np.bool_), ("val_mask", np.bool_), ("test_mask", np.bool_)):
        a = np.ascontiguousarray(np.asarray(getattr(graph, name), dtype))
        h.update(name.encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def state_sha256(state) -> dict[str, str]:
    """SHA-256 (hex) of every array of an `nnx.State` (or a nested dict of arrays), keyed by its
    ``/``-joined path (``conv1/kernel``): of the dtype, the shape and the C-order bytes; a typed
    PRNG key array by its `jax.random.key_data`.

    Raises:
      TypeError: a leaf that is not an array.
    """
    tree = nnx.to_pure_dict(state) if isinstance(state, nnx.State) else state
    out = {}
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree):
        name = jax.tree_util.keystr(path, simple=True, separator="/")
        if not hasattr(leaf, "dtype"):
            raise TypeError(f"state_sha256: {name} is a {type(leaf).__name__}, not an array")
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        a = np.ascontiguousarray(np.asarray(leaf))
        out[name] = hashlib.sha256(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()
    return out


def meta_sha256(meta: dict) -> str:
    """SHA-256 (hex) of ``meta`` without its ``meta_sha256`` field, as canonical JSON (sorted keys,
    no whitespace, ASCII)."""
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
                          .encode()).hexdigest()


def _file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _files_sha256(state_dir: Path) -> dict[str, str]:
    """SHA-256 of every file under ``state_dir``, keyed by its path relative to the checkpoint
    folder (``state/...``, POSIX separators)."""
    return {p.relative_to(state_dir.parent).as_posix(): _file_sha256(p)
            for p in sorted(state_dir.rglob("*")) if p.is_file()}


def save_model(directory: str | os.PathLike, model, cfg: TrainConfig, graph: Graph, dataset: str,
               run_key: str | None = None) -> Path:
    """Writes ``model``'s state and its metadata (hashes included, module docstring) into
    ``directory`` (created; must not exist yet). Everything is written into a temporary sibling
    folder first and renamed into place: an interrupted save leaves nothing under ``directory``.

    Args:
      directory: the checkpoint folder to create.
      model: the trained `nnx.Module`.
      cfg: its `TrainConfig`.
      graph: the `Graph` it was trained on (its hash is stored).
      dataset: the dataset name (`codesign.data.load_dataset`), for `codesign deploy`.
      run_key: the results key of the run (`codesign.experiment.run_key`), stored as ``run_key``.

    Returns:
      The checkpoint folder (absolute).

    Raises:
      FileExistsError: ``directory`` exists (a checkpoint is never overwritten).
      OSError: the folder cannot be written (nothing is left behind).
    """
    d = Path(directory).expanduser().resolve()
    if d.exists():
        raise FileExistsError(f"save_model: {d} exists; choose a new folder (checkpoints are never overwritten)")
    d.parent.mkdir(parents=True, exist_ok=True)
    tmp = d.with_name(f".{d.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.partial")
    try:
        tmp.mkdir()
        state = nnx.state(model)
        with ocp.StandardCheckpointer() as ckpt:
            ckpt.save(tmp / _STATE, state)
        meta = {"config": cfg.flat(), "dataset": dataset, "graph_sha256": graph_sha256(graph),
                "code_version": code_version(),
                "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                **({"run_key": run_key} if run_key is not None else {}),
                "files": _files_sha256(tmp / _STATE), "arrays": state_sha256(state)}
        meta["meta_sha256"] = meta_sha256(meta)
        write_json_atomic(tmp / _META, meta)
        if d.exists():  # made while we saved: do not rename onto it
            raise FileExistsError(f"save_model: {d} exists; choose a new folder (checkpoints are never overwritten)")
        os.rename(tmp, d)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return d


def _one_line(err: BaseException, limit: int = 200) -> str:
    """The first line of ``err``'s message, at most ``limit`` characters (tensorstore errors run
    to kilobytes of spec)."""
    text = str(err).strip().splitlines()
    first = text[0] if text else type(err).__name__
    return first if len(first) <= limit else first[:limit] + " ..."


def read_meta(directory: str | os.PathLike) -> dict:
    """``meta.json`` of the checkpoint in ``directory``, checked: it parses, holds every field, was
    saved with hashes, and its own ``meta_sha256`` matches (nothing in it was edited). The state
    files are not read (`load_model` verifies them).

    Returns:
      The meta dict.

    Raises:
      FileNotFoundError: no checkpoint there (no ``meta.json`` or no ``state/``).
      CheckpointError: naming the folder and meta.json: not JSON (with line and column), not an
        object, a missing field, saved by an older codesign without hashes, or edited.
    """
    d = Path(directory).expanduser().resolve()
    if not (d / _META).is_file() or not (d / _STATE).is_dir():
        raise FileNotFoundError(f"load_model: {d} holds no codesign checkpoint ({_META} and {_STATE}/); make one "
                                f"with codesign train --save DIR")
    where = f"checkpoint {d}: {_META}"
    try:
        meta = json.loads((d / _META).read_bytes().decode("utf-8"))
    except UnicodeDecodeError as err:
        raise CheckpointError(f"{where} is not UTF-8 (byte 0x{err.object[err.start]:02x} at offset {err.start})") \
            from None
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{where} is not valid JSON ({err})") from None
    except OSError as err:
        raise CheckpointError(f"{where} cannot be read ({err})") from None
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where} must hold a JSON object, got {type(meta).__name__}")
    missing = [k for k in _REQUIRED if k not in meta]
    if missing:
        raise CheckpointError(f"{where} lacks the key(s) {', '.join(map(repr, missing))}")
    if not any(k in meta for k in _HASHES):
        raise CheckpointError(f"{where} was saved by an older codesign without hashes, so its weights and config "
                              f"cannot be verified; {_RESAVE}")
    missing = [k for k in _HASHES if k not in meta]
    if missing:
        raise CheckpointError(f"{where} lacks the key(s) {', '.join(map(repr, missing))}")
    for k, kind in (("config", dict), ("files", dict), ("arrays", dict), ("dataset", str), ("graph_sha256", str),
                    ("meta_sha256", str)):
        if not isinstance(meta[k], kind):
            raise CheckpointError(f"{where}: {k!r} must be a JSON {'object' if kind is dict else 'string'}, got "
                                  f"{type(meta[k]).__name__}")
    if meta_sha256(meta) != meta["meta_sha256"]:
        raise CheckpointError(f"{where} was edited or corrupted (its SHA-256 differs from the meta_sha256 saved "
                              f"in it); {_RESAVE}")
    return meta


def _verify_files(d: Path, meta: dict) -> None:
    """Every file listed in ``meta['files']`` exists under ``d`` with its saved SHA-256."""
    for rel, want in sorted(meta["files"].items()):
        p = d / rel
        if not p.is_file():
            raise CheckpointError(f"checkpoint {d}: {rel} is missing; {_RESAVE}")
        got = _file_sha256(p)
        if got != want:
            raise CheckpointError(f"checkpoint {d}: {rel} is corrupt (SHA-256 {got[:16]}..., saved "
                                  f"{str(want)[:16]}..., size {p.stat().st_size} bytes); {_RESAVE}")


def load_model(directory: str | os.PathLike, graph: Graph):
    """``(model, cfg, meta)`` restored from ``directory`` for ``graph``, every hash verified
    (module docstring): meta.json (`read_meta`), then every state file, then the graph, then the
    restored arrays.

    Raises:
      FileNotFoundError: no checkpoint there.
      CheckpointError: (a ValueError) one line naming the folder and the file: meta.json as in
        `read_meta`, or its config refused by `TrainConfig`; a state file missing or corrupt; orbax
        cannot restore the state; a restored array whose SHA-256 differs from the saved one.
      ValueError: ``graph`` is not the graph the model was trained on (hash mismatch; the message
        gives both hashes).
    """
    d = Path(directory).expanduser().resolve()
    meta = read_meta(d)
    _verify_files(d, meta)
    got = graph_sha256(graph)
    if got != meta["graph_sha256"]:
        raise ValueError(f"load_model: graph_sha256 mismatch: the checkpoint was trained on {meta['graph_sha256']}, "
                         f"this graph is {got}")
    try:
        cfg = TrainConfig.from_flat(**meta["config"])
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"checkpoint {d}: {_META} 'config': {_one_line(err)}") from None
    model = build_model(cfg, graph, nnx.Rngs(params=cfg.seed, dropout=cfg.seed + 1, gates=cfg.seed + 2,
                                             quant=cfg.seed + 3))
    abstract = nnx.state(model)
    try:
        with ocp.StandardCheckpointer() as ckpt:
            restored = ckpt.restore(d / _STATE, abstract)
    except Exception as err:  # orbax / tensorstore: kilobytes of spec otherwise
        raise CheckpointError(f"checkpoint {d}: orbax cannot restore {_STATE}/ ({type(err).__name__}: "
                              f"{_one_line(err)}); {_RESAVE}") from None
    hashes = state_sha256(restored)
    if set(hashes) != set(meta["arrays"]):
        extra, lost = sorted(set(hashes) - set(meta["arrays"])), sorted(set(meta["arrays"]) - set(hashes))
        raise CheckpointError(f"checkpoint {d}: the arrays of {_STATE}/ differ from those {_META} lists "
                              f"(not saved: {extra}, not restored: {lost}); {_RESAVE}")
    bad = [k for k, h in hashes.items() if meta["arrays"][k] != h]
    if bad:
        raise CheckpointError(f"checkpoint {d}: the restored array(s) {', '.join(bad)} of {_STATE}/ differ from "
                              f"their SHA-256 in {_META}; {_RESAVE}")
    nnx.update(model, restored)
    model.eval()
    return model, cfg, meta
