"""The `Graph` container: a COO graph with node features, labels and split masks.

Edge convention (as in jraph's `GraphsTuple`): edge ``j`` carries a message from node
``senders[j]`` to node ``receivers[j]``; aggregation sums over incoming edges of each receiver.
An undirected graph stores both directions.

`Graph` is a JAX pytree (``n_nodes`` is static metadata), so it can be passed through
``jax.jit``. It is validated on construction whenever its arrays are concrete (not tracers):
bad input raises a ``ValueError`` that names the field.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp

Array = jax.Array


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Graph:
    """A graph for full-batch node classification.

    Fields (``N`` nodes, ``E`` directed edges, ``F`` features):
      senders:     int32 [E]  source node of each edge, in ``[0, N)``.
      receivers:   int32 [E]  target node of each edge, in ``[0, N)``.
      x:           float32 [N, F]  node features; must be finite.
      y:           int32 [N]  class label of each node, in ``[0, n_classes)``.
      train_mask:  bool [N]  nodes whose labels are used for training.
      val_mask:    bool [N]  nodes used for model selection.
      test_mask:   bool [N]  nodes used for the reported accuracy.
      edge_weight: float32 [E] or None  weight of each edge (None means all ones).
      edge_type:   int32 [E] or None  relation id of each edge (R-GCN).
      n_nodes:     int (static)  N.

    No self-loops (``senders[j] == receivers[j]``): the models add their own (GCN/APPNP
    normalization, GAT's attention over the node itself, GIN's ``(1 + eps) x`` term), so a stored
    loop would be counted twice. `without_self_loops` drops them; the converters in
    `codesign.data.convert` drop them with a warning.

    Fields may be NumPy or JAX arrays or array-likes (lists, tuples): array-likes are converted
    with ``np.asarray``, checked, then cast to the dtypes above. Validation runs whenever every
    field is concrete (not a tracer inside ``jit``/``vmap``, where only the pytree is rebuilt).

    Raises:
      ValueError: naming the field, if shapes disagree, indices are out of range or not integer,
        a self-loop is present, dtypes are wrong, labels are negative, or features/weights are
        not finite.
    """

    senders: Array
    receivers: Array
    x: Array
    y: Array
    train_mask: Array
    val_mask: Array
    test_mask: Array
    edge_weight: Optional[Array] = None
    edge_type: Optional[Array] = None
    n_nodes: int = dataclasses.field(default=0, metadata=dict(static=True))

    def __post_init__(self):
        converted = {name: np.asarray(v) for name in _FIELD_DTYPES
                     if isinstance(v := getattr(self, name), (list, tuple))}
        for name, v in converted.items():
            object.__setattr__(self, name, v)
        values = [v for name in _FIELD_DTYPES
                  if (v := getattr(self, name)) is not None or name not in ("edge_weight", "edge_type")]
        # Inside jit/vmap or a pytree round trip the leaves are tracers or placeholders:
        # validation happens at the boundary, where arrays are concrete.
        if all(isinstance(v, (np.ndarray, jax.Array)) and not isinstance(v, jax.core.Tracer) for v in values):
            validate(self)
        for name, v in converted.items():  # checked: now the canonical dtype (no truncation can happen)
            object.__setattr__(self, name, jnp.asarray(v, _FIELD_DTYPES[name]))

    @property
    def n_edges(self) -> int:
        """E, the number of directed edges."""
        return int(self.senders.shape[0])

    @property
    def n_features(self) -> int:
        """F, the number of input features per node."""
        return int(self.x.shape[1])

    @property
    def n_classes(self) -> int:
        """1 + the largest label."""
        return int(np.asarray(self.y).max()) + 1

    @property
    def signed_features(self) -> bool:
        """Whether any feature is negative (LSA, embeddings, Gaussian features; not bag-of-words):
        the models then quantize their input on a signed grid (``signed_input``), since an unsigned
        one would clip every negative value to 0."""
        return bool(np.asarray(self.x).min(initial=0.0) < 0)

    def replace(self, **changes) -> "Graph":
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)

    def without_self_loops(self) -> "Graph":
        """The graph with every edge ``i -> i`` removed (per-edge fields sliced alike)."""
        return self.keep_edges(np.asarray(self.senders) != np.asarray(self.receivers))

    def keep_edges(self, keep) -> "Graph":
        """The graph with only the edges where ``keep`` (bool [E]) is True; every per-edge field
        (senders, receivers, edge_weight, edge_type) is sliced alike, nodes are unchanged.

        Raises:
          ValueError: ``keep`` is not a bool array of shape [E].
        """
        keep = np.asarray(keep)
        if keep.dtype != bool or keep.shape != (self.n_edges,):
            raise ValueError(f"Graph.keep_edges: keep must be bool [{self.n_edges}], got {keep.dtype} {keep.shape}")
        fields = ("senders", "receivers", "edge_weight", "edge_type")
        return self.replace(**{f: np.asarray(getattr(self, f))[keep] for f in fields if getattr(self, f) is not None})


_FIELD_DTYPES = {"senders": jnp.int32, "receivers": jnp.int32, "x": jnp.float32, "y": jnp.int32,
                 "train_mask": jnp.bool_, "val_mask": jnp.bool_, "test_mask": jnp.bool_,
                 "edge_weight": jnp.float32, "edge_type": jnp.int32}
"""The canonical dtype of each array field (array-likes are cast to it after validation)."""


def _check(cond: bool, field: str, msg: str):
    if not cond:
        raise ValueError(f"Graph.{field}: {msg}")


def validate(g: Graph) -> None:
    """Checks every field of ``g``; raises ``ValueError`` naming the first bad field."""
    n = g.n_nodes
    _check(isinstance(n, (int, np.integer)) and not isinstance(n, bool) and n > 0, "n_nodes",
           f"must be a positive int, got {n!r}")
    for name in ("senders", "receivers"):
        v = getattr(g, name)
        _check(v.ndim == 1, name, f"must be 1-D [E], got shape {v.shape}")
        _check(jnp.issubdtype(v.dtype, jnp.integer) and v.dtype != jnp.bool_, name,
               f"must be integer, got {v.dtype}")
    e = g.senders.shape[0]
    _check(g.receivers.shape == (e,), "receivers",
           f"shape {g.receivers.shape} does not match senders shape {g.senders.shape}")
    if e:
        for name in ("senders", "receivers"):
            v = np.asarray(getattr(g, name))
            lo, hi = int(v.min()), int(v.max())
            _check(lo >= 0 and hi < n, name, f"index out of range [0, {n}): min {lo}, max {hi}")
        loops = np.flatnonzero(np.asarray(g.senders) == np.asarray(g.receivers))
        _check(loops.size == 0, "senders", f"{loops.size} self-loop(s) (senders == receivers), first at edge "
               f"{int(loops[0]) if loops.size else -1}; the models add their own: use graph.without_self_loops()")
    _check(g.x.ndim == 2 and g.x.shape[0] == n, "x", f"must be [n_nodes={n}, F], got shape {g.x.shape}")
    _check(jnp.issubdtype(g.x.dtype, jnp.floating), "x", f"must be floating, got {g.x.dtype}")
    bad = ~np.isfinite(np.asarray(g.x))
    _check(not bad.any(), "x", f"has {int(bad.sum())} non-finite values (NaN/inf), first at row "
           f"{int(np.argwhere(bad)[0][0]) if bad.any() else -1}")
    _check(g.y.shape == (n,), "y", f"must be [n_nodes={n}], got shape {g.y.shape}")
    _check(jnp.issubdtype(g.y.dtype, jnp.integer) and g.y.dtype != jnp.bool_, "y", f"must be integer, got {g.y.dtype}")
    _check(int(np.asarray(g.y).min()) >= 0, "y", "labels must be >= 0")
    for name in ("train_mask", "val_mask", "test_mask"):
        v = getattr(g, name)
        _check(v.shape == (n,), name, f"must be [n_nodes={n}], got shape {v.shape}")
        _check(v.dtype == jnp.bool_, name, f"must be bool, got {v.dtype}")
    if g.edge_weight is not None:
        w = g.edge_weight
        _check(w.shape == (e,), "edge_weight", f"must be [E={e}], got shape {w.shape}")
        _check(bool(np.isfinite(np.asarray(w)).all()), "edge_weight", "has non-finite values")
    if g.edge_type is not None:
        t = g.edge_type
        _check(t.shape == (e,), "edge_type", f"must be [E={e}], got shape {t.shape}")
        _check(jnp.issubdtype(t.dtype, jnp.integer), "edge_type", f"must be integer, got {t.dtype}")
        if e:
            _check(int(np.asarray(t).min()) >= 0, "edge_type", "relation ids must be >= 0")


def to_scipy(g: Graph, weighted: bool = True) -> sp.csr_matrix:
    """The adjacency as a ``scipy.sparse.csr_matrix`` A[N, N] with ``A[receiver, sender] = w``.

    Rows are receivers, so ``A @ X`` is sum-aggregation. Duplicate edges are summed.
    """
    w = np.ones(g.n_edges, np.float32) if (g.edge_weight is None or not weighted) else np.asarray(g.edge_weight)
    return sp.csr_matrix((w, (np.asarray(g.receivers), np.asarray(g.senders))), shape=(g.n_nodes, g.n_nodes))


def real_array(v, field: str, dtype, where: str) -> np.ndarray:
    """``v`` as a numpy array of ``dtype`` after checking it is real: complex or non-numeric values
    raise (they would otherwise be silently made real / cast). With an integer ``dtype`` the
    values must also be whole numbers (a float label 1.5 is not truncated to 1).

    Raises:
      ValueError: one line, ``"{where}: {field} ..."`` naming the dtype (or the first non-whole value).
    """
    a = np.asarray(v)
    if not (np.issubdtype(a.dtype, np.number) or a.dtype == np.bool_) or np.issubdtype(a.dtype, np.complexfloating):
        raise ValueError(f"{where}: {field} must be real numbers, got dtype {a.dtype}")
    if np.issubdtype(np.dtype(dtype), np.integer) and np.issubdtype(a.dtype, np.floating):
        bad = ~(np.isfinite(a) & (a == np.round(a)))
        if bad.any():
            raise ValueError(f"{where}: {field} must be whole numbers, got {a[bad].flat[0].item()!r}")
    return a.astype(dtype)


def from_scipy(adj: sp.spmatrix, x, y, train_mask, val_mask, test_mask, weighted: bool = False) -> Graph:
    """A `Graph` from an adjacency ``adj[N, N]`` (rows = receivers, columns = senders).

    Every input format (COO, CSR, CSC, ..., or a dense 2-D array) gives the same edges: the
    matrix's entries as scipy defines them on conversion, i.e. duplicate entries of one
    (row, column) are summed into one edge, and entries that are (or sum to) zero are not edges
    (explicitly stored zeros are eliminated). Edges come sorted by (receiver, sender). Diagonal
    entries (self-loops) are dropped with a warning: the models add their own (see `Graph`).

    Args:
      adj: scipy sparse matrix or array, or dense array, [N, N], real (float, int or bool) values.
      x: real [N, F] node features (cast to float32); y: [N] integer labels (whole-number floats
        are accepted); train_mask, val_mask, test_mask: bool [N].
      weighted: keep the (summed) values as ``edge_weight`` float32 [E]; else ``edge_weight=None``.

    Raises:
      ValueError: one line naming the field: ``adj`` not 2-D and square (with its shape),
        complex / non-numeric or non-finite ``adj`` values, complex ``x``, non-whole ``y``; any
        field the `Graph` validation rejects.
    """
    shape = tuple(getattr(adj, "shape", np.shape(adj)))
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"from_scipy: adj must be a square [N, N] matrix, got shape {shape}")
    dt = np.dtype(adj.dtype if sp.issparse(adj) else np.asarray(adj).dtype)
    if not (np.issubdtype(dt, np.number) or dt == np.bool_) or np.issubdtype(dt, np.complexfloating):
        raise ValueError(f"from_scipy: adj must have real values, got dtype {dt}")
    # float64 before any summing (int8 / bool duplicates would wrap or saturate), then CSR with
    # duplicates summed whatever the input format (COO keeps them, CSR / CSC may hold them too)
    csr = sp.csr_matrix(sp.coo_matrix(adj).astype(np.float64))
    csr.sum_duplicates()
    if not np.isfinite(csr.data).all():
        raise ValueError(f"from_scipy: adj has {int((~np.isfinite(csr.data)).sum())} non-finite stored value(s)")
    csr.eliminate_zeros()
    coo = csr.tocoo()
    loops = coo.row == coo.col
    if loops.any():
        warnings.warn(f"from_scipy: dropped {int(loops.sum())} self-loop(s) (diagonal entries); "
                      "the models add their own", stacklevel=2)
    keep = ~loops
    return Graph(
        senders=jnp.asarray(coo.col[keep], jnp.int32), receivers=jnp.asarray(coo.row[keep], jnp.int32),
        x=jnp.asarray(real_array(x, "x", np.float32, "from_scipy")),
        y=jnp.asarray(real_array(y, "y", np.int32, "from_scipy")),
        train_mask=jnp.asarray(train_mask, bool), val_mask=jnp.asarray(val_mask, bool),
        test_mask=jnp.asarray(test_mask, bool),
        edge_weight=jnp.asarray(coo.data[keep], jnp.float32) if weighted else None,
        n_nodes=int(shape[0]))


def add_self_loops(senders: Array, receivers: Array, n_nodes: int) -> tuple[Array, Array]:
    """Appends one edge ``i -> i`` per node: returns ``(senders[E + N], receivers[E + N])``."""
    loops = jnp.arange(n_nodes, dtype=senders.dtype)
    return jnp.concatenate([senders, loops]), jnp.concatenate([receivers, loops])


def feature_column_nnz(x) -> np.ndarray:
    """float32 [F]: the stored nonzeros of each column of the node features ``x`` [N, F] (a
    numpy / JAX array or a scipy sparse matrix): what each column costs when the features are
    stored sparse (CSR; `codesign.hwmodel.csr_gemm_stage`, `codesign.models.GCN.workload`)."""
    if sp.issparse(x):
        return np.asarray(sp.csc_matrix(x).getnnz(axis=0), np.float32)
    return np.count_nonzero(np.asarray(x), axis=0).astype(np.float32)
