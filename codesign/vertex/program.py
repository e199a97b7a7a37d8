"""`Program`: a traced vertex program and its three products: the executable (``prog(adj, ...)``),
the cost workload (``prog.workload(...)``) and the attachment points of edge gates and quantizers.

    @vx.program
    def gcn(v):
        return vx.sum(u.h * u.norm for u in v.in_nbrs) * v.norm

    y = gcn(adj, nodes={"h": H, "norm": d})      # adj: CooAdjacency or Graph; H [N, F], d [N] -> [N, F]
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

from codesign import hwmodel
from codesign.graph import Graph as DataGraph
from codesign.kernels import CooAdjacency
from codesign.kernels import aggregate as kernel_aggregate
from codesign.quant import Quantizer
from codesign.sparsify import EdgeSparsifier, learns_edge_weights
from codesign.vertex import cost
from codesign.vertex.ir import ProgramGraph
from codesign.vertex.lower import EdgeContext, run
from codesign.vertex.trace import RESERVED, trace

__all__ = ["Program", "program"]


def _specs(arrays: Mapping, rows: int, field: str, what: str) -> dict:
    """Per-item `jax.ShapeDtypeStruct` of each input, checking ``[rows, ...]``."""
    if not isinstance(arrays, Mapping):
        raise TypeError(f"{field}: must be a dict of arrays, got {type(arrays).__name__}")
    out = {}
    for name, x in arrays.items():
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("_") or name in RESERVED:
            raise ValueError(f"{field}: input name {name!r} must be an identifier not starting with '_' and not "
                             f"one of {sorted(RESERVED)}")
        shape = getattr(x, "shape", None)
        if shape is None or getattr(x, "dtype", None) is None:
            raise TypeError(f"{field}[{name!r}]: must be an array, got {type(x).__name__}")
        if len(shape) < 1 or shape[0] != rows:
            raise ValueError(f"{field}[{name!r}]: must be [{what}={rows}, ...], got shape {tuple(shape)}")
        _check_real(x.dtype, f"{field}[{name!r}]")
        out[name] = jax.ShapeDtypeStruct(tuple(shape[1:]), x.dtype)
    return out


def _check_real(dtype, field: str) -> None:
    """Inputs are real: complex ones would be made real (their imaginary part dropped) by the
    kernels' float casts, silently.

    Raises:
      ValueError: one line naming ``field`` and the dtype.
    """
    dt = jnp.dtype(dtype)
    if not (jnp.issubdtype(dt, jnp.floating) or jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_):
        raise ValueError(f"{field}: must have a real dtype (float, integer or bool), got {dt}")


def _width_specs(widths: Optional[Mapping], names: tuple) -> dict:
    out = {}
    widths = dict(widths or {})
    for name in names:
        w = widths.pop(name, ())
        if isinstance(w, jax.ShapeDtypeStruct):
            _check_real(w.dtype, f"widths[{name!r}]")
            out[name] = w
        elif isinstance(w, (int, np.integer)) and not isinstance(w, bool):
            out[name] = jax.ShapeDtypeStruct((int(w),), jnp.float32)
        elif isinstance(w, tuple) and all(isinstance(d, (int, np.integer)) for d in w):
            out[name] = jax.ShapeDtypeStruct(w, jnp.float32)
        else:
            raise ValueError(f"widths[{name!r}]: must be an int, a shape tuple or a jax.ShapeDtypeStruct of one "
                             f"item, got {w!r}")
    return out


class _AnyInputs(dict):
    """Input specs for tracing without arrays: every name read is an input (default: a float32
    scalar, or ``widths[name]``); records the names read."""

    def __init__(self, widths):
        super().__init__()
        self.widths = widths

    def __contains__(self, name):
        if not dict.__contains__(self, name):
            self[name] = _width_specs(self.widths, (name,))[name]
        return True


class Program:
    """A vertex program (final; build it with `program`). See the package docstring.

    Attributes:
      fn: the user's function of one vertex ``v``.
      edge_gates: an `codesign.sparsify.EdgeSparsifier`, a float [E'] array, or None.
      quantizers: ``{input name: codesign.quant.Quantizer}`` applied to ``nodes[name]`` or
        ``edges[name]`` before the program reads it.
    """

    def __init__(self, fn: Callable, *, edge_gates=None, quantizers: Optional[Mapping] = None,
                 _cache: Optional[dict] = None):
        if not callable(fn):
            raise TypeError(f"vx.program: expects a function of one vertex, got {type(fn).__name__}")
        self.fn, self.edge_gates = fn, edge_gates
        self.quantizers = dict(quantizers or {})
        self._cache = {} if _cache is None else _cache
        self.__name__ = getattr(fn, "__name__", "program")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __repr__(self) -> str:
        hooks = [f"gates={type(self.edge_gates).__name__}"] if self.edge_gates is not None else []
        hooks += [f"quantize {k!r}" for k in self.quantizers]
        return f"vx.program({self.__name__}{'; ' + ', '.join(hooks) if hooks else ''})"

    # ------------------------------------------------------------------------------- tracing
    def trace(self, node_specs: Mapping, edge_specs: Mapping) -> ProgramGraph:
        """The IR for inputs of these per-item specs (``{name: jax.ShapeDtypeStruct}``); traced
        once per distinct signature and cached.

        Raises:
          VertexProgramError: see `codesign.vertex.trace`.
        """
        key = tuple(sorted((k, v.shape, np.dtype(v.dtype).str) for k, v in node_specs.items())), \
            tuple(sorted((k, v.shape, np.dtype(v.dtype).str) for k, v in edge_specs.items()))
        if key not in self._cache:
            self._cache[key] = trace(self.fn, dict(node_specs), dict(edge_specs))
        return self._cache[key]

    def ir(self, adj, nodes: Optional[Mapping] = None, edges: Optional[Mapping] = None) -> ProgramGraph:
        """The IR this program runs on these inputs (``print(prog.ir(adj, nodes=...))`` lists it)."""
        adj = _adjacency(adj)
        return self.trace(_specs(nodes or {}, adj.n_nodes, "nodes", "N"),
                          _specs(edges or {}, adj.n_edges, "edges", "E"))

    # ------------------------------------------------------------------------------ executing
    def __call__(self, adj, nodes: Optional[Mapping] = None, edges: Optional[Mapping] = None, *,
                 impl: str = "auto", attention_impl: str = "auto", aggregate: Callable = kernel_aggregate) -> Any:
        """Runs the program on every vertex of ``adj``.

        Args:
          adj: `codesign.kernels.CooAdjacency` or `codesign.graph.Graph` (its senders/receivers;
            ``edge_weight`` is not applied: pass it as an edge input). Its pattern (a
            `CsrPattern` / `BlockPattern`) is handed to the kernels.
          nodes: ``{name: array [N, ...]}`` read as ``v.name`` / ``u.name``.
          edges: ``{name: array [E, ...]}`` read as ``e.name``.
          impl: `codesign.kernels.aggregate` backend of the fused weighted sums.
          attention_impl: backend of the fused attention (`codesign.vertex.lower.ATTENTION_IMPLS`).
          aggregate: the weighted sum the fused SpMMs call, ``aggregate(adj.with_weight(w), x,
            impl=impl)`` (default `codesign.kernels.aggregate`). With another one, ``adj`` may be
            of the type it takes: anything with ``senders``, ``receivers`` int [E], ``n_nodes``,
            ``n_edges`` and ``with_weight`` (`codesign.distributed.HaloAdjacency`).

        Returns:
          What the function returns, each traced vertex value an array [N, ...].

        Raises:
          TypeError: ``nodes`` / ``edges`` not dicts of arrays, ``adj`` of another type.
          ValueError: an input whose first axis is not N (nodes) / E (edges), or whose dtype is
            not real (complex), naming it; gates of the wrong length; an unknown ``attention_impl``.
          VertexProgramError: the program cannot be traced (naming the user's line).
        """
        adj = _adjacency(adj, custom=aggregate is not kernel_aggregate)
        node_specs = _specs({} if nodes is None else nodes, adj.n_nodes, "nodes", "N")
        edge_specs = _specs({} if edges is None else edges, adj.n_edges, "edges", "E")
        nodes, edges = dict(nodes or {}), dict(edges or {})
        for name, q in self.quantizers.items():
            where = nodes if name in nodes else edges if name in edges else None
            if where is None:
                raise ValueError(f"quantizer: no input named {name!r} (nodes: {sorted(nodes)}, edges: {sorted(edges)})")
            where[name] = q(where[name])
        graph = self.trace(node_specs, edge_specs)
        gates = self._gates(adj)
        return run(graph, EdgeContext(adj, gates, impl, attention_impl, aggregate), nodes, edges)

    def _gates(self, adj: CooAdjacency) -> Optional[jax.Array]:
        g = self.edge_gates
        if g is None:
            return None
        if isinstance(g, EdgeSparsifier):
            k = _gated_edges(g, adj.n_edges, adj.n_nodes)
            g = g.edge_gates(None, adj.senders[:k], adj.receivers[:k])
        g = jnp.asarray(g, jnp.float32)
        k = _gated_edges(g, adj.n_edges, adj.n_nodes)
        if k < adj.n_edges:  # the last N edges are the self-loops `add_self_loops` appended: never gated
            g = jnp.concatenate([g, jnp.ones((adj.n_edges - k,), jnp.float32)])
        return g

    # ------------------------------------------------------------------------------ hooks
    def with_edge_gates(self, gates) -> "Program":
        """The same program with every aggregation gated per edge (`codesign.vertex.lower`):
        sums and means weight edge e's term by g_e, softmaxes count edge e g_e times in their denominator,
        max takes g_e * term.

        Args:
          gates: an `codesign.sparsify.EdgeSparsifier` whose gates do not depend on the node
            features (`EdgeMask`, `BlockEdgeMask`, `DropEdge`, ...), or a float array. Either has
            E entries (every edge), or E - N for an adjacency whose last N edges are self-loops
            (as `codesign.graph.add_self_loops` appends them): those are never gated, as in the
            hand-written models.

        Raises:
          TypeError: ``gates`` neither an `EdgeSparsifier` nor an array.
        """
        if not isinstance(gates, EdgeSparsifier) and not hasattr(gates, "shape"):
            raise TypeError(f"with_edge_gates: gates must be an EdgeSparsifier or a float array [E], got "
                            f"{type(gates).__name__}")
        return Program(self.fn, edge_gates=gates, quantizers=self.quantizers, _cache=self._cache)

    def with_quantizer(self, name: str, quantizer) -> "Program":
        """The same program with ``quantizer`` (a `codesign.quant.Quantizer`) applied to the input
        ``name`` before it is read; its bits (expected or hard) are that input's bits in
        `workload`.

        Raises:
          TypeError: ``quantizer`` does not implement `codesign.quant.Quantizer`.
          ValueError: ``name`` not an identifier.
        """
        if not isinstance(quantizer, Quantizer):
            raise TypeError(f"with_quantizer: {type(quantizer).__name__} does not implement codesign.quant.Quantizer")
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"with_quantizer: name must be an input name, got {name!r}")
        return Program(self.fn, edge_gates=self.edge_gates, quantizers={**self.quantizers, name: quantizer},
                       _cache=self._cache)

    # ------------------------------------------------------------------------------ workload
    def workload(self, n_nodes: int, n_edges: int, widths: Optional[Mapping] = None, *, bits=32.0,
                 out_bits=None, heads: int = 1, training: bool = False, hard: bool = False,
                 locality: Optional[hwmodel.LocalityProfile] = None, weight_products: bool = True,
                 edge_density=None, kept_widths: Optional[Mapping] = None, blocks: Optional[tuple] = None,
                 name: str = "vertex") -> hwmodel.Workload:
        """The `hwmodel.Workload` of one call on a graph of ``n_nodes`` and ``n_edges`` edges,
        derived from the IR (`codesign.vertex.cost.derive`).

        Args:
          n_nodes, n_edges: N and E (E counts every edge the program iterates, self-loops included).
            With ``edge_density`` given, ``n_edges`` is the kept (expected) count instead (float or
            traced, self-loops included).
          widths: ``{input name: int F | shape tuple | jax.ShapeDtypeStruct}`` of one item; inputs
            not listed are float32 scalars per item.
          bits: bit-width of every input (float or traced), or ``{name: bits}`` (default 32).
            An attached quantizer sets its input's bits (expected, or deployed with ``hard``).
          out_bits: bit-width of the results (default: the largest input bit-width given).
          heads: H, the size of a leading vmapped axis of the inputs (multi-head attention).
          training: the training step, `hwmodel.autograd_training` of the forward (the one
            training-cost rule; the layer is named ``name``, so its input gets a gradient unless
            ``name`` is a first layer's, `hwmodel.reads_graph_input`): ``dA`` is formed when the
            program computes its edge weights (an edge softmax: attention) or has gates attached
            that have trainable parameters (`codesign.sparsify.learns_edge_weights`).
          hard: density and bits of the hardened gates and quantizers.
          locality: the graph's `hwmodel.LocalityProfile` (None = uniform re-reference).
          weight_products: cost the per-edge products that form a fused SpMM's weights (k - 1
            ops per kept edge for k scalar factors, gates included; `codesign.vertex.cost`); False
            takes the weights as given, as the models' ``workload()`` take A_hat's values (the
            per-edge normalization `gcn_normalize` runs there too but is not costed).
          edge_density: kept fraction of the gated edges (float32 scalar, may be traced) of a
            sparsifier the program does not hold (a model's edge mask, a what-if density): the
            counts are then taken as given and the fusion plan is the ungated one (the models'
            costing convention); None = from the attached gates (1 without).
          kept_widths: ``{1-D input name: kept columns}`` (float or traced, e.g. density x width of
            a feature or channel mask), carried through the values computed from it
            (`codesign.vertex.cost`); ``widths`` still gives the traced (full) shape.
          blocks: ``(nnz_blocks, block_size)``: kept B x B tiles of a `BlockEdgeMask`; fused
            weighted sums are costed as the BSR kernel (`hwmodel.bsr_spmm_stage`), which
            `codesign.kernels.aggregate` runs on an adjacency carrying a `BlockPattern`.
          name: the layer name.

        Raises:
          ValueError: a bad width, count or bit-width (naming it); ``widths`` / ``bits`` naming an
            input the program does not read; gates of the wrong length; ``edge_density`` with
            attached gates; ``kept_widths`` naming no 1-D input.
          VertexProgramError: the program cannot be traced.
        """
        ints = (("n_nodes", n_nodes), ("heads", heads)) + ((("n_edges", n_edges),) if edge_density is None else ())
        for field, v in ints:
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"workload: {field} must be an int >= 1, got {v!r}")
        if edge_density is not None:
            if self.edge_gates is not None:
                raise ValueError("workload: edge_density is for a sparsifier outside the program; this program has "
                                 "edge gates attached (their density is used)")
            hwmodel.check_count(n_edges, "workload(n_edges)")
            hwmodel.check_density(edge_density, "workload(edge_density)")
        node_specs, edge_specs = _AnyInputs(widths), _AnyInputs(widths)
        graph = trace(self.fn, node_specs, edge_specs)
        read = {*node_specs, *edge_specs}
        for field, given in (("widths", widths), ("bits", bits if isinstance(bits, Mapping) else None),
                             ("kept_widths", kept_widths)):
            unknown = sorted(set(given or ()) - read)
            if unknown:
                raise ValueError(f"workload: {field} names {unknown}, which the program does not read (it reads "
                                 f"{sorted(read)})")
        in_bits = {}
        for nm in (*node_specs, *edge_specs):
            b = bits.get(nm, 32.0) if isinstance(bits, Mapping) else bits
            if nm in self.quantizers:
                q = self.quantizers[nm]
                b = jnp.mean(jnp.asarray(q.hard_bits(), jnp.float32)) if hard else q.expected_bits()
            in_bits[nm] = jnp.asarray(hwmodel.check_bits(b), jnp.float32)
        if out_bits is None:
            out_bits = jnp.max(jnp.stack(list(in_bits.values()))) if in_bits else 32.0
        gated, density = 0, jnp.ones((), jnp.float32)
        if edge_density is not None:
            density = jnp.asarray(edge_density, jnp.float32)
        elif self.edge_gates is not None:
            g = self.edge_gates
            gated = _gated_edges(g, n_edges, n_nodes)
            if isinstance(g, EdgeSparsifier):
                density = g.hard_edge_density() if hard else g.expected_edge_density()
            else:
                g = jnp.asarray(g, jnp.float32)
                density = jnp.mean(g > 0).astype(jnp.float32) if hard else jnp.mean(g)
        nnz = n_edges if edge_density is not None else density * gated + (n_edges - gated)
        wl = cost.derive(graph, n_nodes=n_nodes, n_edges=nnz, edge_density=density, in_bits=in_bits,
                         out_bits=out_bits, heads=heads, locality=locality,
                         gated=self.edge_gates is not None, weight_products=bool(weight_products),
                         kept_widths=dict(kept_widths or {}), blocks=blocks, name=name)
        if not training:
            return wl
        attention = any(node.op == "softmax" for node in graph.nodes)
        gates = self.edge_gates if isinstance(self.edge_gates, EdgeSparsifier) else None
        return hwmodel.autograd_training(wl, learns_edge_weights(gates, attention=attention))


def _gated_edges(g, n_edges: int, n_nodes: int) -> int:
    """Number of edges the gates cover: E, or E - N (self-loops appended last, ungated)."""
    if isinstance(g, EdgeSparsifier):
        k = int(g.hard_edge_mask().shape[0])
    else:
        k = int(np.shape(g)[0]) if np.ndim(g) == 1 else None
    if k is None or k not in (n_edges, n_edges - n_nodes):
        raise ValueError(f"edge gates: need E={n_edges} gates (or E - N = {n_edges - n_nodes} with the N self-loops "
                         f"last), got {k if k is not None else type(g).__name__}")
    return k


def _adjacency(adj, custom: bool = False) -> CooAdjacency:
    """``adj`` as a `CooAdjacency`; ``custom``: an injected aggregation's own adjacency type is
    passed through when it has what the lowering reads (`Program.__call__`)."""
    if isinstance(adj, CooAdjacency):
        return adj
    if custom and all(hasattr(adj, a) for a in ("senders", "receivers", "n_nodes", "n_edges", "with_weight")):
        return adj
    if isinstance(adj, DataGraph):
        return CooAdjacency(adj.senders, adj.receivers, None, adj.n_nodes)
    raise TypeError(f"adj: must be a codesign.kernels.CooAdjacency or codesign.graph.Graph, got {type(adj).__name__}")


def program(fn: Callable) -> Program:
    """Decorator: ``@vx.program`` turns a function of one vertex into a `Program`.

    Raises:
      TypeError: ``fn`` is not callable.
    """
    return Program(fn)
