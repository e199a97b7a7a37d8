"""Deriving the `hwmodel.Workload` of a traced vertex program from its IR and the fusion plan
(`codesign.vertex.fusion`), so the costed stages are the kernels the lowering runs.

Stages of one program (one `hwmodel.LayerWorkload`; both dataflow orders hold the same stages,
as the program fixes its order):

  fused weighted sum (rule 1)   `hwmodel.spmm_stage` (N, nnz, H * F); for a feature picked from a
                                per-relation table ``x [N, R, F]`` (``u.h[e.type]``) the table's
                                R * N rows replace the N rows of X in the compulsory traffic, the
                                working set and the link bytes (an assumption: each table row is
                                read once, as the X rows of the SpMM are)
  fused attention (rule 2)      `hwmodel.attention_stages` (N, nnz, H heads, F): SDDMM of the score
                                terms, edge softmax, attention-weighted SpMM
  fallback aggregation          `hwmodel.segment_spmm_stages` over the [E, H * W] messages
  fallback softmax              the softmax stage of `hwmodel.attention_stages` (H * W columns)
  edge elementwise              every edge-wise op not folded into a kernel, plus the k - 1 products
                                forming a rule-1 edge weight from k scalar factors (edge
                                gates, rule 1b's receiver scalars and a constant other than 1
                                included), reading k fp32 values and writing one; with
                                ``weight_products=False`` the weights are taken as given (the
                                convention of the models' hand-written ``workload()``: their
                                `gcn_normalize` is not costed)
  vertex elementwise            every vertex-wise op

Elementwise stages count one operation per op and output element, and (an assumption: XLA fuses
the chain into one loop) read each outside input of the chain once and write each value leaving
it once. Bits: an input's bits (or its quantizer's); values computed by the program are costed at
``out_bits``; scalars gathered per edge as a weight factor at 32 (fp32 edge values, as
`hwmodel.workload.VALUE_BYTES`). nnz = the kept (expected) edges; ``edge_density`` shortens reuse
times as in `hwmodel.message_passing_layer`.

Widths: a node's per-item width (times ``heads``), or, given ``kept_widths`` for a 1-D input, that
(possibly expected, traced) column count, carried to every value of the same per-item shape
computed from it (gathers, aggregations, elementwise ops): the kept columns of a feature or
channel mask. Block-sparse: with ``blocks = (nnz_blocks, B)`` a rule-1 SpMM over a plain feature
(not ``indexed``) is `hwmodel.bsr_spmm_stage` over the kept B x B tiles (uniform block
re-reference, as `hwmodel.message_passing_layer`), which is what `codesign.kernels.aggregate`
runs on an adjacency carrying a `codesign.kernels.BlockPattern`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax.numpy as jnp

from codesign import hwmodel
from codesign.vertex.fusion import AttentionPlan, SpmmPlan, plan
from codesign.vertex.ir import ProgramGraph

__all__ = ["derive", "EDGE_VALUE_BITS"]

EDGE_VALUE_BITS = 32.0  # a per-edge weight factor is an fp32 value (hwmodel.workload.VALUE_BYTES)


def _f32(v):
    return jnp.asarray(v, jnp.float32)


def derive(graph: ProgramGraph, *, n_nodes: int, n_edges, edge_density, in_bits: dict, out_bits,
           heads: int = 1, locality=None, gated: bool = False, weight_products: bool = True,
           kept_widths: Optional[dict] = None, blocks: Optional[tuple] = None,
           name: str = "vertex") -> hwmodel.Workload:
    """The workload of one run of ``graph`` (see the module docstring).

    Args:
      graph: the traced IR.
      n_nodes: N. n_edges: kept (expected) edges, float or traced.
      edge_density: kept fraction of the gated edges (float32 scalar; 1 without gates).
      in_bits: ``{input name: bits}``. out_bits: bits of computed values.
      heads: size of a vmapped leading axis (multiplies every width).
      locality, name: as `hwmodel.message_passing_layer`.
      gated: whether edge gates are attached (changes the fusion plan as the lowering does).
      weight_products: cost the k - 1 products forming a fused SpMM's edge weight from k scalar
        factors (rule 1b's receiver scalars and constant included); False takes the weights as
        given, as the `codesign.models` ``workload()`` methods take A_hat's values.
      kept_widths: ``{1-D input name: kept columns}`` (float or traced; see the module docstring).
      blocks: ``(nnz_blocks, block_size)``: rule-1 SpMMs as the BSR kernel over the kept tiles.

    Returns:
      `hwmodel.Workload` with one layer, one forward (`codesign.vertex.Program.workload` adds the
      backward).
    """
    nodes = graph.nodes
    plans = plan(graph, gated)
    consumed = set()
    for p in plans.values():
        if p is not None:
            consumed.update(p.internal)
    nnz, n = _f32(n_edges), _f32(n_nodes)
    kept = _kept_widths(graph, kept_widths or {})

    def width_of(i):
        return kept.get(i, nodes[i].width)

    def bits_of(i):
        node = nodes[i]
        if node.op in ("gather_src", "gather_dst"):
            return bits_of(node.args[0])
        if node.op in ("node_input", "edge_input"):
            return in_bits[node.attrs["name"]]
        return _f32(out_bits)

    loc = dict(locality=locality, access_scale=edge_density)
    agg, edge_extra_ops, edge_extra_bytes, vertex_extra_ops = [], None, None, None
    for node in nodes:
        if node.op == "softmax" and node.id not in consumed:
            agg.append(hwmodel.attention_stages(n, nnz, heads * node.width, 1, out_bits, out_bits,
                                                locality, edge_density)[1])
        if node.op != "aggregate":
            continue
        p = plans[node.id]
        if isinstance(p, AttentionPlan):
            h = nodes[p.h]
            agg.extend(hwmodel.attention_stages(n, nnz, heads, width_of(h.id), bits_of(p.h), out_bits, locality,
                                                edge_density))
        elif isinstance(p, SpmmPlan):
            f = nodes[p.feature]
            table = nodes[f.args[0]]
            width = heads * width_of(f.id)
            x_bits = bits_of(table.id)
            if blocks is not None and not p.indexed:
                stage = hwmodel.bsr_spmm_stage(n, blocks[0], blocks[1], width, x_bits, out_bits)
            else:
                stage = hwmodel.spmm_stage(n, nnz, width, x_bits, out_bits, **loc)
            if p.indexed:
                extra = (table.shape[0] - 1) * n * width * x_bits / 8.0
                stage = dataclasses.replace(
                    stage, compulsory_bytes=stage.compulsory_bytes + extra,
                    working_set_bytes=stage.working_set_bytes + extra, working_set_rows=n * table.shape[0],
                    link_bytes=stage.link_bytes + extra)
            agg.append(stage)
            k = p.n_weight_factors + int(gated)
            if weight_products and k >= 2:  # w = product of k per-edge scalars
                edge_extra_ops = (k - 1) * nnz * heads + (0.0 if edge_extra_ops is None else edge_extra_ops)
                edge_extra_bytes = (k + 1) * nnz * heads * EDGE_VALUE_BITS / 8.0 + \
                    (0.0 if edge_extra_bytes is None else edge_extra_bytes)
            if node.attrs["kind"] == "mean":
                vertex_extra_ops = n * width + (0.0 if vertex_extra_ops is None else vertex_extra_ops)
        else:
            x = nodes[node.args[0]]
            agg.extend(hwmodel.segment_spmm_stages(n, nnz, heads * width_of(x.id), bits_of(x.id), out_bits, **loc))
    elem = []
    for domain, items, extra_ops, extra_bytes in (("edge", nnz, edge_extra_ops, edge_extra_bytes),
                                                  ("vertex", n, vertex_extra_ops, None)):
        stage = _elementwise(graph, consumed, domain, items, heads, bits_of, width_of, out_bits, extra_ops,
                             extra_bytes)
        if stage is not None:
            elem.append(stage)
    stages, elem = tuple(agg), tuple(elem)
    return hwmodel.Workload((hwmodel.LayerWorkload(name, stages, stages, elem),))


def _kept_widths(graph: ProgramGraph, kept: dict) -> dict:
    """``{node id: kept width}``: ``kept[name]`` for a 1-D input of that name, carried to each node
    that has an argument of its own (non-scalar) per-item shape carrying one (nodes are in
    topological order). Raises ValueError for a name that is no 1-D input."""
    out, inputs = {}, {}
    for nd in graph.nodes:
        w = None
        if nd.op in ("node_input", "edge_input"):
            inputs[nd.attrs["name"]] = nd
            w = kept.get(nd.attrs["name"])
        elif nd.shape != ():
            w = next((out[a] for a in nd.args if a in out and graph.nodes[a].shape == nd.shape), None)
        if w is not None:
            out[nd.id] = w
    for name in kept:
        if name not in inputs or len(inputs[name].shape) != 1:
            raise ValueError(f"kept_widths: {name!r} must name an input of one axis per item (read: "
                             f"{ {k: v.shape for k, v in inputs.items()} })")
    return out


def _elementwise(graph: ProgramGraph, consumed: set, domain: str, items, heads: int, bits_of, width_of,
                 out_bits, extra_ops, extra_bytes):
    """One "elementwise" stage for the ``domain``'s map nodes not folded into a kernel, plus
    ``extra_ops`` / ``extra_bytes`` (None: no extra work); None when there is nothing to cost."""
    nodes = graph.nodes
    chain = sorted(nd.id for nd in nodes if nd.op == "map" and nd.domain == domain and nd.id not in consumed)
    if not chain and extra_ops is None:
        return None
    users, outputs = graph.users(), set(graph.outputs)
    ops = _f32(0.0) if extra_ops is None else extra_ops
    nbytes = _f32(0.0) if extra_bytes is None else extra_bytes
    read = set()
    for i in chain:
        nd = nodes[i]
        ops = ops + items * heads * width_of(i)
        read.update(a for a in nd.args if a not in chain)
        if i in outputs or any(u not in chain for u in users[i]):
            nbytes = nbytes + items * heads * width_of(i) * _f32(out_bits) / 8.0
    for a in sorted(read):
        nbytes = nbytes + items * heads * width_of(a) * bits_of(a) / 8.0
    zero = _f32(0.0)
    return hwmodel.Stage("elementwise", _f32(ops), _f32(out_bits), _f32(nbytes), zero, zero)
