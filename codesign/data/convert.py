"""Conversions between `Graph` and other graph formats.

* SciPy sparse: `to_scipy` / `from_scipy` (defined in `codesign.graph`, re-exported here);
* PyG-style ``edge_index`` int [2, E] (row 0 = senders/sources, row 1 = receivers/targets):
  `to_edge_index` / `from_edge_index`;
* NetworkX (imported lazily, an optional dependency: ``pip install codesign[dev]``):
  `to_networkx` / `from_networkx`.

Edge order is kept by the ``edge_index`` conversions; SciPy's CSR sorts by (receiver, sender) and
sums duplicates; NetworkX iterates edges grouped by source node (the edge multiset is kept).
"""

from __future__ import annotations

import warnings
from typing import Optional

import jax.numpy as jnp
import numpy as np

from codesign.graph import Graph, from_scipy, real_array, to_scipy

__all__ = ["to_scipy", "from_scipy", "to_edge_index", "from_edge_index", "to_networkx", "from_networkx"]


def to_edge_index(graph: Graph) -> np.ndarray:
    """``edge_index`` int64 [2, E]: row 0 the senders (message sources), row 1 the receivers,
    in the graph's edge order (PyTorch Geometric's ``flow="source_to_target"`` convention)."""
    return np.stack([np.asarray(graph.senders, np.int64), np.asarray(graph.receivers, np.int64)])


def _masks(n: int, train_mask, val_mask, test_mask):
    return [np.zeros(n, bool) if m is None else np.asarray(m) for m in (train_mask, val_mask, test_mask)]


def from_edge_index(edge_index, x, y, train_mask=None, val_mask=None, test_mask=None, *,
                    edge_weight=None, edge_type=None, n_nodes: Optional[int] = None) -> Graph:
    """A `Graph` from ``edge_index`` int [2, E] (row 0 senders, row 1 receivers).

    Args:
      edge_index: int array [2, E] (NumPy, JAX or anything ``np.asarray`` takes).
      x: float [N, F] node features; y: int [N] labels.
      train_mask, val_mask, test_mask: bool [N] or None (None = no node).
      edge_weight: float [E] or None; edge_type: int [E] or None.
      n_nodes: N (default ``x.shape[0]``).

    Self-loops are dropped with a warning (`Graph` holds none: the models add their own). Every
    column is an edge, as given: repeated pairs stay separate edges (a multigraph, unlike
    `from_scipy`, which sums them) and an ``edge_weight`` of 0 is kept as an edge of weight 0.

    Raises:
      ValueError: ``edge_index`` not [2, E] or not integer (naming ``edge_index``); ``edge_weight``
        / ``edge_type`` not [E], complex ``x`` / ``edge_weight``, non-whole ``y`` / ``edge_type``
        (naming the field); any field the `Graph` validation rejects (naming it).
    """
    ei = np.asarray(edge_index)
    if ei.ndim != 2 or ei.shape[0] != 2:
        raise ValueError(f"from_edge_index: edge_index must be [2, E], got shape {ei.shape}")
    if ei.size and not np.issubdtype(ei.dtype, np.integer):
        raise ValueError(f"from_edge_index: edge_index must be integer, got {ei.dtype}")
    x = real_array(x, "x", np.float32, "from_edge_index")
    y = real_array(y, "y", np.int32, "from_edge_index")
    fields = {}
    for name, v, dt in (("edge_weight", edge_weight, np.float32), ("edge_type", edge_type, np.int32)):
        if v is not None:
            v = real_array(v, name, dt, "from_edge_index")
            if v.shape != (ei.shape[1],):
                raise ValueError(f"from_edge_index: {name} must be [E={ei.shape[1]}], got shape {v.shape}")
        fields[name] = v
    edge_weight, edge_type = fields["edge_weight"], fields["edge_type"]
    n = int(x.shape[0]) if n_nodes is None else int(n_nodes)
    if ei.size and (ei.min() < 0 or ei.max() >= n):
        raise ValueError(f"from_edge_index: edge_index out of range [0, {n}): min {ei.min()}, max {ei.max()}")
    loops = ei[0] == ei[1]
    if loops.any():  # `Graph` holds no self-loops: the models add their own
        warnings.warn(f"from_edge_index: dropped {int(loops.sum())} self-loop(s); the models add their own",
                      stacklevel=2)
        keep = ~loops
        ei = ei[:, keep]
        edge_weight = None if edge_weight is None else np.asarray(edge_weight)[keep]
        edge_type = None if edge_type is None else np.asarray(edge_type)[keep]
    tr, va, te = _masks(n, train_mask, val_mask, test_mask)
    return Graph(senders=jnp.asarray(ei[0], jnp.int32), receivers=jnp.asarray(ei[1], jnp.int32),
                 x=jnp.asarray(x, jnp.float32), y=jnp.asarray(y, jnp.int32),
                 train_mask=jnp.asarray(tr, bool), val_mask=jnp.asarray(va, bool), test_mask=jnp.asarray(te, bool),
                 edge_weight=None if edge_weight is None else jnp.asarray(edge_weight, jnp.float32),
                 edge_type=None if edge_type is None else jnp.asarray(edge_type, jnp.int32), n_nodes=n)


def _networkx():
    try:
        import networkx
    except ImportError as e:
        raise ImportError("codesign.data.convert: networkx is not installed; `pip install networkx` "
                          "(or `pip install codesign[dev]`)") from e
    return networkx


def to_networkx(graph: Graph):
    """A ``networkx.MultiDiGraph`` with nodes ``0..N-1`` and one edge ``sender -> receiver`` per
    graph edge (a multigraph, so repeated edges survive).

    Node attributes: ``x`` (float32 [F] array), ``y`` (int), ``train_mask``/``val_mask``/
    ``test_mask`` (bool). Edge attributes: ``weight`` and ``edge_type`` where the graph has them.
    """
    nx = _networkx()
    g = nx.MultiDiGraph()
    x, y = np.asarray(graph.x), np.asarray(graph.y)
    masks = {k: np.asarray(getattr(graph, k)) for k in ("train_mask", "val_mask", "test_mask")}
    g.add_nodes_from((i, {"x": x[i], "y": int(y[i]), **{k: bool(m[i]) for k, m in masks.items()}})
                     for i in range(graph.n_nodes))
    s, r = np.asarray(graph.senders).tolist(), np.asarray(graph.receivers).tolist()
    attrs = {}
    if graph.edge_weight is not None:
        attrs["weight"] = np.asarray(graph.edge_weight).tolist()
    if graph.edge_type is not None:
        attrs["edge_type"] = np.asarray(graph.edge_type).tolist()
    g.add_edges_from((s[j], r[j], {k: v[j] for k, v in attrs.items()}) for j in range(len(s)))
    return g


def from_networkx(g, x=None, y=None, train_mask=None, val_mask=None, test_mask=None) -> Graph:
    """A `Graph` from a NetworkX graph whose nodes are ``0..N-1``.

    Directed graphs give one edge per NetworkX edge (``u -> v``: sender ``u``, receiver ``v``);
    undirected graphs give both directions of every edge (self-loops are dropped, see `from_edge_index`). Edges come in
    NetworkX's iteration order (grouped by source node). ``weight`` / ``edge_type`` edge
    attributes become ``edge_weight`` / ``edge_type`` when every edge has them. ``x``, ``y`` and
    the masks default to the node attributes of those names (as `to_networkx` writes them);
    masks default to all-False.

    Raises:
      ValueError: nodes that are not ``0..N-1`` (naming ``nodes``); ``x``/``y`` neither given nor
        node attributes of every node (naming them); any field the `Graph` validation rejects.
    """
    n = g.number_of_nodes()
    if set(g.nodes) != set(range(n)):
        raise ValueError("from_networkx: nodes must be the integers 0..N-1; relabel them first "
                         "(networkx.convert_node_labels_to_integers)")

    def node_attr(name, given, default=None):
        if given is not None:
            return np.asarray(given)
        vals = [g.nodes[i].get(name) for i in range(n)]
        if any(v is None for v in vals):
            if default is not None:
                return default
            raise ValueError(f"from_networkx: {name} not given and not a node attribute of every node")
        return np.asarray(vals)

    x, y = node_attr("x", x), node_attr("y", y)
    if x.ndim == 1:
        x = x[:, None]
    masks = [node_attr(k, m, np.zeros(n, bool)).astype(bool)
             for k, m in (("train_mask", train_mask), ("val_mask", val_mask), ("test_mask", test_mask))]
    edges = list(g.edges(data=True))
    if not g.is_directed():
        edges = edges + [(v, u, d) for u, v, d in edges if u != v]
    ei = np.array([(u, v) for u, v, _ in edges], np.int64).reshape(-1, 2).T
    attr = {}
    for key in ("weight", "edge_type"):
        if edges and all(key in d for _, _, d in edges):
            attr[key] = np.array([d[key] for _, _, d in edges])
    return from_edge_index(ei, x, y, *masks, edge_weight=attr.get("weight"), edge_type=attr.get("edge_type"),
                           n_nodes=n)
