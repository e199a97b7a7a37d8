"""Vertex-centric programs (Seastar, Wu et al., EuroSys 2021; MindSpore's MEP-GNN proposal):
write a GNN layer for one vertex as the math reads, get fused execution, gradients, its cost
workload and its sparsifier / quantizer hooks from one trace.

    from codesign import vertex as vx

    @vx.program
    def gcn(v):
        return vx.sum(u.h * u.norm for u in v.in_nbrs) * v.norm

    y = gcn(adj, nodes={"h": H, "norm": d})                      # [N, F]
    wl = gcn.workload(n_nodes=N, n_edges=E, widths={"h": F})      # an hwmodel.Workload

Modules: `trace` (proxies, ``vx`` operations, errors), `ir` (the graph IR), `fusion` (which
aggregations run as one kernel), `lower` (to JAX), `cost` (to an `hwmodel.Workload`), `program`
(`Program`, the public object). ``docs/vertex.md`` describes the IR, the fusion rules, the
fallbacks and the errors.
"""

from codesign.vertex.ir import ProgramGraph
from codesign.vertex.ir import Node
from codesign.vertex.lower import ATTENTION_IMPLS, edge_softmax
from codesign.vertex.program import Program, program
from codesign.vertex.trace import VertexProgramError, exp, leaky_relu, max, mean, relu, softmax, sum, where

__all__ = ["program", "Program", "VertexProgramError", "sum", "mean", "max", "softmax", "exp", "leaky_relu",
           "relu", "where", "ProgramGraph", "Node", "ATTENTION_IMPLS", "edge_softmax"]
from codesign.vertex import layers

__all__ += ["layers"]
