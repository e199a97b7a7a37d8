"""The vertex-program IR: a list of `Node`s in topological (creation) order.

Every node holds one value per vertex (``domain == "vertex"``, arrays ``[N, *shape]``) or per
edge (``domain == "edge"``, arrays ``[E, *shape]``); ``shape`` and ``dtype`` are those of one
item (one vertex or one edge). The operations (``op``):

    node_input   vertex  ``nodes[name]`` given to the call (``v.name``)
    edge_input   edge    ``edges[name]`` (``e.name``)
    gather_src   edge    args (x,): vertex value x at each edge's sender (``u.name``)
    gather_dst   edge    args (x,): vertex value x at each edge's receiver (``v.name`` inside a loop)
    gather_src_indexed   edge  args (x, i): ``x[sender][i]`` for x [N, R, ...] and an int edge
                         value i (``u.h[e.type]``), gathered from x viewed as [N * R, ...]
    map          same    args: one elementwise function ``fn`` of one item per argument, applied
                         with `jax.vmap` over the leading axis (attrs ``name``, e.g. "mul", and
                         for "leaky_relu" ``slope``; a "mul" / "div" of one traced value and a
                         Python number records it as ``const`` (float) and ``const_first``
                         (whether the number is the left operand))
    aggregate    vertex  args (x,): reduction of edge value x over each vertex's in-edges (attrs
                         ``kind`` in "sum", "mean", "max")
    softmax      edge    args (x,): softmax of edge value x over each receiver's in-edges

``where`` is the user's source line that created the node (for error messages).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import numpy as np

OPS = ("node_input", "edge_input", "gather_src", "gather_dst", "gather_src_indexed", "map", "aggregate",
       "softmax")
AGGREGATIONS = ("sum", "mean", "max")


@dataclasses.dataclass(frozen=True)
class Node:
    """One IR operation (see the module docstring).

    Fields:
      id: position in `Program.nodes`.
      op: one of `OPS`.
      args: ids of the argument nodes.
      domain: "vertex" or "edge".
      shape: per-item shape (tuple of ints).
      dtype: per-item dtype (numpy dtype).
      fn: the per-item function of a "map" node (else None).
      attrs: op attributes (``name`` of an input or map, ``kind`` of an aggregation, ``slope``,
        ``const`` / ``const_first`` of a product or quotient with a number).
      where: ``"file:line: source"`` of the user's statement that created the node.
    """

    id: int
    op: str
    args: tuple
    domain: str
    shape: tuple
    dtype: Any
    fn: Optional[Callable] = None
    attrs: dict = dataclasses.field(default_factory=dict)
    where: str = ""

    @property
    def width(self) -> int:
        """Elements per item (1 for a scalar item)."""
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        name = self.attrs.get("name") or self.attrs.get("kind") or ""
        args = ", ".join(f"%{a}" for a in self.args)
        label = f"{self.op}[{name}]" if name else self.op
        return f"%{self.id} = {label}({args}) : {self.domain} {self.shape} {np.dtype(self.dtype).name}"


@dataclasses.dataclass(frozen=True)
class ProgramGraph:
    """A traced vertex program: ``nodes`` in topological order, the ids of the returned vertex
    values (``outputs``, flattened) and the pytree structure to rebuild them (``out_tree``)."""

    nodes: tuple
    outputs: tuple
    out_tree: Any

    def users(self) -> dict:
        """``{node id: [ids of the nodes that take it as an argument]}`` (outputs not included)."""
        out = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for a in n.args:
                out[a].append(n.id)
        return out

    def __str__(self) -> str:
        lines = [str(n) for n in self.nodes]
        return "\n".join(lines + [f"return {', '.join(f'%{o}' for o in self.outputs)}"])
