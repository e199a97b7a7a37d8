"""Fusion rules: which aggregations of a traced program run as one fused kernel.

Both the lowering (`codesign.vertex.lower`) and the workload derivation (`codesign.vertex.cost`)
read these plans, so the executed kernels and the costed stages are the same by construction.

Rule 1, weighted sum (SpMM): ``vx.sum`` / ``vx.mean`` of a product whose factors are one feature
read at the sender (``u.h``, any per-item shape) and any number of per-edge *scalars* (``u.norm``,
``v.norm``, ``e.w``, attention coefficients, ``1 / x`` of a scalar x). The scalars multiply into
one weight per edge ([E]), which becomes the adjacency's edge weight of one
`codesign.kernels.aggregate` call: no ``[E, F]`` intermediate. (``u.h[e.type]``, a feature picked
from a per-relation table by an edge value, is planned the same way with ``indexed=True``; its
lowering gathers from the ``[N * R, F]`` table and segment-sums, so it does form ``[E, F]``
messages.)

Rule 2, attention (online softmax): ``vx.sum(a * u.h)`` where ``a`` is ``vx.softmax`` of
``leaky_relu(u.el + v.er, slope)`` (or of ``u.el + v.er``) with scalar ``el``, ``er`` per vertex,
and no edge gates: one `codesign.kernels.gat_aggregate` call (GAT, Velickovic et al., ICLR 2018,
eq. 1-4), which never forms the ``[E, F]`` messages on the Pallas path.

Everything else falls back to gather + segment operations (``jax.ops.segment_*``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from codesign.vertex.ir import Graph, Node

__all__ = ["SpmmPlan", "AttentionPlan", "plan", "factors"]


@dataclasses.dataclass(frozen=True)
class SpmmPlan:
    """Rule 1 for aggregation node ``agg``: ``feature`` (a gather_src / gather_src_indexed node),
    per-edge scalar factors ``scale`` (multiplied) and ``inverse`` (divided by), and the product /
    quotient nodes folded into the kernel (``internal``)."""

    agg: int
    feature: int
    scale: tuple
    inverse: tuple
    internal: tuple
    indexed: bool


@dataclasses.dataclass(frozen=True)
class AttentionPlan:
    """Rule 2 for aggregation node ``agg``: vertex nodes ``h`` (features), ``el`` (sender term),
    ``er`` (receiver term), the LeakyReLU ``slope`` (1.0 = none), and the score / softmax /
    product nodes folded into the kernel (``internal``)."""

    agg: int
    h: int
    el: int
    er: int
    slope: float
    internal: tuple


Plan = Optional[Union[SpmmPlan, AttentionPlan]]


def _is(n: Node, name: str) -> bool:
    return n.op == "map" and n.attrs.get("name") == name and len(n.args) == 2


def factors(graph: Graph, nid: int) -> tuple[list, list]:
    """``([(node id, inverse?)], [internal mul/div ids])`` of the product tree rooted at ``nid``
    (the divisor of a ``div`` is a factor only when it is a per-item scalar)."""
    nodes = graph.nodes
    n = nodes[nid]
    if _is(n, "mul"):
        (fa, ia), (fb, ib) = factors(graph, n.args[0]), factors(graph, n.args[1])
        return fa + fb, ia + ib + [nid]
    if _is(n, "div") and nodes[n.args[1]].shape == ():
        fa, ia = factors(graph, n.args[0])
        return fa + [(n.args[1], True)], ia + [nid]
    return [(nid, False)], []


def _spmm(graph: Graph, agg: Node) -> Optional[SpmmPlan]:
    if agg.attrs["kind"] not in ("sum", "mean"):
        return None
    leaves, internal = factors(graph, agg.args[0])
    nodes = graph.nodes
    wide = [i for i, inv in leaves if nodes[i].shape != ()]
    if len(wide) != 1 or any(inv for i, inv in leaves if i == wide[0]):
        return None
    f = nodes[wide[0]]
    if f.op not in ("gather_src", "gather_src_indexed") or f.shape != agg.shape or f.dtype.kind != "f":
        return None
    scale = tuple(i for i, inv in leaves if not inv and i != f.id)
    inverse = tuple(i for i, inv in leaves if inv)
    return SpmmPlan(agg.id, f.id, scale, inverse, tuple(internal), f.op == "gather_src_indexed")


def _attention(graph: Graph, agg: Node) -> Optional[AttentionPlan]:
    nodes = graph.nodes
    x = nodes[agg.args[0]]
    if agg.attrs["kind"] != "sum" or not _is(x, "mul"):
        return None
    a, f = (nodes[i] for i in x.args)
    if a.op != "softmax":
        a, f = f, a
    if a.op != "softmax" or a.shape != () or f.op != "gather_src" or f.shape != agg.shape or f.dtype.kind != "f":
        return None
    score = nodes[a.args[0]]
    internal = [x.id, a.id]
    slope = 1.0
    if score.op == "map" and score.attrs.get("name") == "leaky_relu" and len(score.args) == 1:
        slope = score.attrs["slope"]
        internal.append(score.id)
        score = nodes[score.args[0]]
    if not _is(score, "add") or score.shape != ():
        return None
    internal.append(score.id)
    p, q = (nodes[i] for i in score.args)
    if p.op == "gather_dst":
        p, q = q, p
    if p.op != "gather_src" or q.op != "gather_dst" or p.dtype.kind != "f" or q.dtype.kind != "f":
        return None
    return AttentionPlan(agg.id, f.args[0], p.args[0], q.args[0], slope, tuple(internal))


def plan(graph: Graph, gated: bool) -> dict:
    """``{aggregation node id: SpmmPlan | AttentionPlan | None}`` (None: gather + segment ops).
    Rule 2 is tried first and only without edge gates (the kernel has no per-edge gate input)."""
    out = {}
    for n in graph.nodes:
        if n.op == "aggregate":
            out[n.id] = (None if gated else _attention(graph, n)) or _spmm(graph, n)
    return out
