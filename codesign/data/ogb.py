"""Open Graph Benchmark node-property datasets (Hu et al., "Open Graph Benchmark: Datasets for
Machine Learning on Graphs", NeurIPS 2020) through the ``ogb`` package.

``ogb`` imports PyTorch, so this module imports it only inside its functions: ``import codesign``
never loads torch. Install with ``pip install torch==2.13.0`` (a CPU build) and then
``pip install ogb`` (``pip install codesign[ogb]``).

Two things about ``ogb`` 1.3.6 this module works around:

* Its cache ``processed/data_processed`` is written with ``torch.save`` and read back with
  ``torch.load``, which since PyTorch 2.6 defaults to ``weights_only=True`` and cannot read it
  ("Unsupported operand 149"; snap-stanford/ogb issue 497, PR 507). The cache holds only NumPy
  arrays, so it is read here with a pickle loader that accepts NumPy arrays and plain containers
  and refuses anything else (no code can run from a tampered file).
* It asks on stdin whether to re-download when a dataset folder lacks its ``RELEASE_v*.txt``;
  here that is an error instead, and nothing is downloaded unless the default cache is used.
"""

from __future__ import annotations

import functools
import operator
import os
import pickle
import zipfile
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from codesign.graph import Graph

_SAFE_GLOBALS = {
    "numpy": {"ndarray", "dtype"},
    "numpy._core.multiarray": {"_reconstruct", "scalar"}, "numpy.core.multiarray": {"_reconstruct", "scalar"},
    "numpy._core.numeric": {"_frombuffer"}, "numpy.core.numeric": {"_frombuffer"},
    "builtins": {"dict", "list", "tuple", "set", "int", "float", "bool", "str", "slice"},
    "collections": {"OrderedDict", "defaultdict"},
    "_codecs": {"encode"},
}


class _NumpyUnpickler(pickle.Unpickler):
    """Unpickles NumPy arrays, dtypes and builtin containers; refuses every other global and any
    torch tensor storage (persistent id)."""

    def find_class(self, module, name):
        if name in _SAFE_GLOBALS.get(module, ()) or (module == "numpy.dtypes" and name.endswith("DType")):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load global {module}.{name}")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refusing to load torch storages: the OGB cache holds NumPy arrays only")


def _load_torch_numpy(path: str | os.PathLike):
    """Reads a ``torch.save`` zip archive whose payload is NumPy arrays in plain containers."""
    try:
        with zipfile.ZipFile(path) as z:
            pkl = next(n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
            with z.open(pkl) as f:
                return _NumpyUnpickler(f).load()
    except (zipfile.BadZipFile, StopIteration, pickle.UnpicklingError, EOFError) as e:
        raise ValueError(f"{path}: not a readable OGB cache ({type(e).__name__}: {e}); delete it to have "
                         f"ogb rebuild it from the raw files") from e


def _import_ogb():
    try:
        import ogb.nodeproppred  # noqa: F401  (imports torch)
    except ImportError as e:
        raise ImportError("codesign.data.ogb needs the ogb package: `pip install torch==2.13.0` (CPU build) "
                          "first, then `pip install ogb` (or `pip install codesign[ogb]`)") from e
    return ogb.nodeproppred


@functools.cache
def _dataset_class():
    """`ogb.nodeproppred.NodePropPredDataset` whose cache and split files are read with
    `_load_torch_numpy` instead of ``torch.load`` (see the module docstring)."""
    base = _import_ogb().NodePropPredDataset

    class NodePropPredDataset(base):
        def pre_process(self):
            cache = Path(self.root) / "processed" / "data_processed"
            if cache.exists():
                loaded = _load_torch_numpy(cache)
                self.graph, self.labels = loaded["graph"], loaded["labels"]
            else:
                cache.parent.mkdir(parents=True, exist_ok=True)  # ogb saves without creating it
                super().pre_process()

        def get_idx_split(self, split_type=None):
            path = Path(self.root) / "split" / (split_type or self.meta_info["split"]) / "split_dict.pt"
            if path.is_file():
                return _load_torch_numpy(path)
            return super().get_idx_split(split_type)

    return NodePropPredDataset


def _meta(name: str):
    import pandas as pd

    master = Path(_import_ogb().__file__).parent / "master.csv"
    table = pd.read_csv(master, index_col=0, keep_default_na=False)
    if name not in table:
        raise ValueError(f"unknown OGB node dataset {name!r}; choose one of {', '.join(table.keys())}")
    return table[name]


def _has_raw(folder: Path, meta) -> bool:
    raw = folder / "raw"
    if (folder / "processed" / "data_processed").exists():
        return True
    if meta["is hetero"] == "True":
        return (raw / ("edge_index_dict.npz" if meta["binary"] == "True" else "triplet-type-list.csv.gz")).exists()
    return (raw / ("data.npz" if meta["binary"] == "True" else "edge.csv.gz")).exists()


def _checked_arrays(name: str, g, labels, split):
    """Validates what ``ogb`` read (``g``: its graph dict, ``labels`` [N] or [N, 1], ``split``:
    dict of index arrays) and returns (x float32 [N, F], y int32 [N], (src, dst) int64 [E],
    masks: dict of bool [N] for train/valid/test). Raises ``ValueError`` naming ``name`` and the
    field (``num_nodes``, ``node_feat``, ``edge_index``, ``labels``, ``split['<key>']``)."""
    try:
        n = operator.index(g["num_nodes"])
    except TypeError:
        raise ValueError(f"{name}: num_nodes must be an int, got {g['num_nodes']!r}") from None
    if n < 1:
        raise ValueError(f"{name}: num_nodes must be >= 1, got {n}")
    if g.get("node_feat") is None:
        raise ValueError(f"{name} has no node features")
    x = np.asarray(g["node_feat"])
    if x.ndim != 2 or x.shape[0] != n or x.dtype.kind not in "biuf":
        raise ValueError(f"{name}: node_feat must be numeric [num_nodes={n}, F], got {x.dtype} {x.shape}")
    x = x.astype(np.float32)
    if not np.isfinite(x).all():
        raise ValueError(f"{name}: node_feat must be finite, got {int((~np.isfinite(x)).sum())} NaN/inf values")
    ei = np.asarray(g["edge_index"])
    if ei.ndim != 2 or ei.shape[0] != 2 or ei.dtype.kind not in "iu":
        raise ValueError(f"{name}: edge_index must be integer [2, E], got {ei.dtype} {ei.shape}")
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"{name}: edge_index must be in [0, {n}), got [{ei.min()}, {ei.max()}]")
    y = np.asarray(labels)
    if y.shape not in ((n,), (n, 1)) or y.dtype.kind not in "biuf":
        raise ValueError(f"{name}: labels must be numeric [num_nodes={n}] or [{n}, 1], got {y.dtype} {y.shape}")
    y = y.astype(np.float64).reshape(n)
    if np.isinf(y).any() or (y[~np.isnan(y)] < 0).any() or (y[~np.isnan(y)] % 1).any():
        raise ValueError(f"{name}: labels must be non-negative integers (NaN = unlabelled)")
    y = np.where(np.isnan(y), 0, y).astype(np.int32)
    masks = {}
    for key in ("train", "valid", "test"):
        if key not in split:
            raise ValueError(f"{name}: split has no {key!r} (got {sorted(split)})")
        idx = np.asarray(split[key])
        if idx.ndim != 1 or (idx.size and idx.dtype.kind not in "iu"):
            raise ValueError(f"{name}: split[{key!r}] must be integer [k], got {idx.dtype} {idx.shape}")
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"{name}: split[{key!r}] must be in [0, {n}), got [{idx.min()}, {idx.max()}]")
        masks[key] = np.zeros(n, bool)
        masks[key][idx] = True
    return x, y, (ei[0].astype(np.int64), ei[1].astype(np.int64)), masks


def load_ogb_node(name: str, root: str | os.PathLike | None = None, *, to_undirected: bool = True) -> Graph:
    """Loads a homogeneous, single-task OGB node-classification dataset (``ogbn-arxiv``,
    ``ogbn-products``, ``ogbn-papers100M``) with its official split.

    Reads ``<root>/ogb/<name with "-" -> "_">/`` (OGB's own layout: ``raw/``, ``split/<type>/``,
    ``RELEASE_v<version>.txt``, ``processed/``) through ``ogb.nodeproppred.NodePropPredDataset``.
    ``root`` is the argument, else ``$CODESIGN_DATA``, else ``${XDG_CACHE_HOME:-~/.cache}/codesign``;
    only in that last case may ``ogb`` download a missing dataset.

    Construction: x = ``node_feat`` as float32; y = the single label column (a NaN label, as for
    the unlabelled nodes of papers100M, becomes 0; those nodes are in no split); train/val/test
    masks = ``get_idx_split()``'s ``train``/``valid``/``test``; edges = ``edge_index`` (row 0 =
    senders), with ``to_undirected`` also reversed (as OGB's GCN baselines do for arxiv), self-loops
    and duplicates removed, sorted by (receiver, sender).

    Returns:
      `Graph` (N nodes, E directed edges, F features). ogbn-arxiv: N=169343, F=128, 40 classes,
      split 90941/29799/48603, about 2.3M edges undirected.

    Raises:
      ImportError: ``ogb`` (or torch) is not installed; the message says how to install it.
      ValueError: unknown ``name``; a heterogeneous (ogbn-mag) or multi-task (ogbn-proteins)
        dataset, which a `Graph` cannot hold; a dataset without node features; a dataset folder
        without its ``RELEASE_v*.txt`` (ogb would prompt to re-download); an unreadable cache;
        arrays that fail validation, each naming the field: ``node_feat`` not numeric
        [N, F] or not finite, ``edge_index`` not integer [2, E] or outside [0, N), ``labels``
        not [N]/[N, 1] non-negative integers (NaN allowed), ``split['train'|'valid'|'test']``
        missing, not integer or outside [0, N).
      FileNotFoundError: the raw files are missing under an explicit ``root``/``$CODESIGN_DATA``.
    """
    from codesign.data.planetoid import default_root

    meta = _meta(name)
    if meta["is hetero"] == "True":
        raise ValueError(f"{name} is heterogeneous; load_ogb_node supports homogeneous datasets only")
    if int(meta["num tasks"]) != 1:
        raise ValueError(f"{name} has {meta['num tasks']} tasks (multi-label); a Graph holds one label per node")
    base = (Path(root).expanduser() if root is not None else default_root()) / "ogb"
    folder = base / name.replace("-", "_")
    release = folder / f"RELEASE_v{meta['version']}.txt"
    if folder.is_dir() and not release.exists():
        raise ValueError(f"{folder} exists but has no {release.name}: it is not a complete copy of {name} "
                         f"version {meta['version']}; delete or complete it")
    if not _has_raw(folder, meta) and (root is not None or os.environ.get("CODESIGN_DATA")):
        raise FileNotFoundError(
            f"{name} not found under {folder} (expected raw/ and split/ in OGB's layout, as unpacked from "
            f"{meta['url']}). Point root= or CODESIGN_DATA at the directory holding ogb/{folder.name}, or set "
            f"neither to download into the default cache.")
    dataset = _dataset_class()(name, root=str(base))
    g, labels = dataset[0]
    x, y, (src, dst), masks = _checked_arrays(name, g, labels, dataset.get_idx_split())
    n = x.shape[0]
    if to_undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = src != dst
    key = np.sort(dst[keep] * n + src[keep])
    key = key[np.concatenate([[True], key[1:] != key[:-1]])] if key.size else key
    return Graph(senders=jnp.asarray(key % n, jnp.int32), receivers=jnp.asarray(key // n, jnp.int32),
                 x=jnp.asarray(x), y=jnp.asarray(y), train_mask=jnp.asarray(masks["train"]),
                 val_mask=jnp.asarray(masks["valid"]), test_mask=jnp.asarray(masks["test"]), n_nodes=n)


def evaluate(name: str, y_true, y_pred) -> float:
    """The official metric of ``name`` (``ogb.nodeproppred.Evaluator``): accuracy for arxiv,
    products and papers100M, ROC-AUC averaged over tasks for proteins.

    Args:
      name: an OGB node dataset name.
      y_true: int labels [n] or [n, tasks].
      y_pred: for accuracy, predicted labels [n] / [n, 1], or scores [n, C] (C > 1; argmax taken);
        for ROC-AUC, scores [n, tasks].

    Returns:
      The metric as a float.

    Raises:
      ImportError: ``ogb`` is not installed. ValueError: unknown ``name``; shapes that disagree.
    """
    _meta(name)
    evaluator = _import_ogb().Evaluator(name)
    yt = np.asarray(y_true)
    yp = np.asarray(y_pred)
    yt = yt.reshape(-1, 1) if yt.ndim == 1 else yt
    if evaluator.eval_metric == "acc":
        if yp.ndim == 2 and yp.shape[1] > 1:
            yp = yp.argmax(axis=1)
        yp = yp.reshape(-1, 1)
    if yp.shape != yt.shape:
        raise ValueError(f"evaluate({name!r}): y_pred shape {np.shape(y_pred)} does not match y_true shape "
                         f"{np.shape(y_true)}")
    return float(evaluator.eval({"y_true": yt, "y_pred": yp})[evaluator.eval_metric])
