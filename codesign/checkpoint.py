"""Save a trained model with orbax and restore it later or elsewhere, tied to its config and graph.

A checkpoint folder holds ``state/`` (the model's `nnx` state, `orbax.checkpoint.StandardCheckpointer`)
and ``meta.json``: the `TrainConfig` fields, the dataset name, the graph's SHA-256
(`graph_sha256`: senders, receivers, features, labels and masks), the code version and the date.
`load_model` rebuilds the architecture from the config and refuses a graph whose hash differs, so a
model trained once can be deployed and measured on another machine without silently running on
the wrong data.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from pathlib import Path

import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from codesign.graph import Graph
from codesign.results import code_version, write_json_atomic
from codesign.train import TrainConfig, build_model

__all__ = ["graph_sha256", "save_model", "load_model"]

_META = "meta.json"


def graph_sha256(graph: Graph) -> str:
    """SHA-256 (hex) of the graph's senders, receivers, features, labels and split masks (their
    bytes in a fixed order and dtype: int32, float32, bool)."""
    h = hashlib.sha256()
    for name, dtype in (("senders", np.int32), ("receivers", np.int32), ("x", np.float32), ("y", np.int32),
                        ("train_mask", np.bool_), ("val_mask", np.bool_), ("test_mask", np.bool_)):
        a = np.ascontiguousarray(np.asarray(getattr(graph, name), dtype))
        h.update(name.encode() + str(a.shape).encode() + a.tobytes())
    return h.hexdigest()


def save_model(directory: str | os.PathLike, model, cfg: TrainConfig, graph: Graph, dataset: str) -> Path:
    """Writes ``model``'s state and its metadata into ``directory`` (created; must not exist yet).

    Raises:
      FileExistsError: ``directory`` exists (a checkpoint is never overwritten).
    """
    d = Path(directory).expanduser().resolve()
    if d.exists():
        raise FileExistsError(f"save_model: {d} exists; choose a new folder (checkpoints are never overwritten)")
    d.mkdir(parents=True)
    with ocp.StandardCheckpointer() as ckpt:
        ckpt.save(d / "state", nnx.state(model))
    write_json_atomic(d / _META, {"config": cfg.flat(), "dataset": dataset,
                                  "graph_sha256": graph_sha256(graph), "code_version": code_version(),
                                  "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
    return d


def load_model(directory: str | os.PathLike, graph: Graph):
    """``(model, cfg, meta)`` restored from ``directory`` for ``graph``.

    Raises:
      FileNotFoundError: no checkpoint there.
      ValueError: ``graph`` is not the graph the model was trained on (hash mismatch; the message
        gives both hashes).
    """
    d = Path(directory).expanduser().resolve()
    if not (d / _META).is_file() or not (d / "state").exists():
        raise FileNotFoundError(f"load_model: {d} holds no codesign checkpoint ({_META} and state/)")
    meta = json.loads((d / _META).read_text())
    got = graph_sha256(graph)
    if got != meta["graph_sha256"]:
        raise ValueError(f"load_model: graph_sha256 mismatch: the checkpoint was trained on {meta['graph_sha256']}, "
                         f"this graph is {got}")
    cfg = TrainConfig.from_flat(**meta["config"])
    model = build_model(cfg, graph, nnx.Rngs(params=cfg.seed, dropout=cfg.seed + 1, gates=cfg.seed + 2,
                                             quant=cfg.seed + 3))
    abstract = nnx.state(model)
    with ocp.StandardCheckpointer() as ckpt:
        restored = ckpt.restore(d / "state", abstract)
    nnx.update(model, restored)
    model.eval()
    return model, cfg, meta
