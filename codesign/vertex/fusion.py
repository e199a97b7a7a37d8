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

Rule 1b, receiver factors (folded into rule 1's weights): a rule-1 aggregation whose only use is
a product with a per-receiver scalar (``vx.sum(...) * v.s``, ``v.s * vx.sum(...)``), a division by
one (``vx.sum(...) / v.s``) or a product / division with a Python number
(``(1 - alpha) * vx.sum(...)``), repeatedly, folds those factors into the per-edge weights:
``w_e *= s[receivers[e]]`` (``/=`` for a divisor, ``*= c`` for a constant), so no ``[N, F]`` pass
runs. Exact for sum and mean (``sum_e w_e s_v x_e = s_v sum_e w_e x_e``; the mean's count does
not depend on w); ``max`` is never fused. The result must keep the aggregate's per-item shape and
dtype (no type promotion), and the unscaled aggregate must not be used elsewhere or returned.

Everything else falls back to gather + segment operations (``jax.ops.segment_*``).
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Union

from codesign.vertex.ir import Node, ProgramGraph

__all__ = ["SpmmPlan", "AttentionPlan", "plan", "factors", "softmax_scores"]


@dataclasses.dataclass(frozen=True)
class SpmmPlan:
    """Rule 1 for aggregation node ``agg``: ``feature`` (a gather_src / gather_src_indexed node),
    per-edge scalar factors ``scale`` (multiplied) and ``inverse`` (divided by), and the product /
    quotient nodes folded into the kernel (``internal``, rule 1b's included). Rule 1b: vertex
    scalars ``receiver_scale`` / ``receiver_inverse`` read at each edge's receiver and the number
    ``constant`` multiply the weights; ``out`` is the node whose value the kernel gives (``agg``
    when nothing is folded, else the last folded product)."""

    agg: int
    feature: int
    scale: tuple
    inverse: tuple
    internal: tuple
    indexed: bool
    out: int = -1
    receiver_scale: tuple = ()
    receiver_inverse: tuple = ()
    constant: float = 1.0

    @property
    def n_weight_factors(self) -> int:
        """k: the per-edge scalars (and a constant other than 1) whose product is the weight
        (edge gates not included)."""
        return (len(self.scale) + len(self.inverse) + len(self.receiver_scale) + len(self.receiver_inverse)
                + int(self.constant != 1.0))


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


def factors(graph: ProgramGraph, nid: int) -> tuple[list, list]:
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


def _spmm(graph: ProgramGraph, agg: Node) -> Optional[SpmmPlan]:
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
    out, r_scale, r_inverse, constant, folded = _receiver_factors(graph, agg)
    return SpmmPlan(agg.id, f.id, scale, inverse, tuple(internal) + folded, f.op == "gather_src_indexed", out,
                    r_scale, r_inverse, constant)


def _vertex_scalar(n: Node, like: Node) -> bool:
    return n.domain == "vertex" and n.shape == () and n.dtype.kind == "f" and n.id != like.id


def _receiver_factors(graph: ProgramGraph, agg: Node) -> tuple:
    """Rule 1b: ``(out, receiver_scale, receiver_inverse, constant, folded map ids)`` of the chain
    of products / quotients by vertex scalars or numbers that follows ``agg``."""
    nodes, users, outputs = graph.nodes, graph.users(), set(graph.outputs)
    cur, scale, inverse, constant, folded = agg, [], [], 1.0, []
    while cur.id not in outputs and len(users[cur.id]) == 1:
        u = nodes[users[cur.id][0]]
        if u.op != "map" or u.domain != "vertex" or u.shape != agg.shape or u.dtype != agg.dtype:
            break
        name, args = u.attrs.get("name"), u.args
        other = args[-1] if args[0] == cur.id else args[0]  # the factor beside the running product
        if name == "mul" and len(args) == 2 and _vertex_scalar(nodes[other], cur):
            scale.append(other)
        elif name == "div" and len(args) == 2 and args[0] == cur.id and _vertex_scalar(nodes[args[1]], cur):
            inverse.append(args[1])
        elif name == "mul" and len(args) == 1 and "const" in u.attrs:
            constant *= u.attrs["const"]
        elif name == "div" and len(args) == 1 and "const" in u.attrs and not u.attrs["const_first"] \
                and u.attrs["const"] != 0.0:
            constant /= u.attrs["const"]
        else:
            break
        folded.append(u.id)
        cur = u
    return cur.id, tuple(scale), tuple(inverse), constant, tuple(folded)


def _attention(graph: ProgramGraph, agg: Node) -> Optional[AttentionPlan]:
    nodes = graph.nodes
    x = nodes[agg.args[0]]
    if agg.attrs["kind"] != "sum" or not _is(x, "mul"):
        return None
    a, f = (nodes[i] for i in x.args)
    if a.op != "softmax":
        a, f = f, a
    if a.op != "softmax" or a.shape != () or f.op != "gather_src" or f.shape != agg.shape or f.dtype.kind != "f":
        return None
    scores = softmax_scores(graph, a)
    if scores is None:
        return None
    el, er, slope, internal = scores
    return AttentionPlan(agg.id, f.args[0], el, er, slope, (x.id, a.id) + internal)


def softmax_scores(graph: ProgramGraph, softmax: Node) -> Optional[tuple]:
    """``(el, er, slope, internal)`` when the ``softmax`` node's argument is GAT's score
    ``leaky_relu(u.el + v.er, slope)`` (or ``u.el + v.er``, slope 1.0) of float vertex scalars el
    and er (rule 2's scores; ``internal``: the score nodes), else None. The lowering computes
    such an edge softmax from ``el``, ``er`` [N] in one op (`codesign.vertex.lower`)."""
    nodes = graph.nodes
    score = nodes[softmax.args[0]]
    internal = []
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
    if p.op != "gather_src" or q.op != "gather_dst" or p.dtype.kind != "f" or q.dtype.kind != "f" \
            or nodes[p.args[0]].shape != () or nodes[q.args[0]].shape != ():
        return None
    return p.args[0], q.args[0], slope, tuple(internal)


def plan(graph: ProgramGraph, gated: bool) -> dict:
    """``{aggregation node id: SpmmPlan | AttentionPlan | None}`` (None: gather + segment ops).
    Rule 2 is tried first and only without edge gates (the kernel has no per-edge gate input)."""
    out = {}
    for n in graph.nodes:
        if n.op == "aggregate":
            out[n.id] = (None if gated else _attention(graph, n)) or _spmm(graph, n)
    return out
