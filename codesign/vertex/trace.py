"""Tracing a vertex program: proxies for ``v``, its neighbours ``u`` and in-edges ``e``, the
``vx`` operations, and `trace`, which runs the user's function once on proxies and records the IR
(`codesign.vertex.ir`).

Per-item shapes are inferred with `jax.eval_shape` at every operation, so a shape disagreement is
reported at trace time, naming the user's line. Other trace-time errors (`VertexProgramError`):
Python control flow on a traced value (``if u.h > 0``, ``and``/``or``, ``bool()``, ``int()``),
nested or zipped loops over two neighbour sets, neighbour sets of a neighbour (``u.in_nbrs``),
unknown input names, an aggregation of anything but one edge value per neighbour, and an edge value
returned without aggregation. (A traced value handed to a ``jnp`` function fails inside JAX with a
TypeError: use the ``vx`` functions and operators.)

NumPy on traced values: a NumPy ufunc called plainly (``np.exp(u.h)``, ``np.maximum(x, 0)``,
``arr * u.h``) is recorded as its ``jnp`` namesake, per item, as the operators and ``vx.exp`` are;
any other NumPy call -- a function such as ``np.where`` / ``np.sum`` / ``np.dot``, a ufunc method
(``np.add.reduce``) or keyword (``out=``), a ufunc without a ``jnp`` namesake -- raises a one-line
``TypeError`` that starts with the user's ``file:line: source``, names the NumPy function and
points to the ``vx`` operations.
"""

from __future__ import annotations

import linecache
import os
import sys
from typing import Callable, Optional, final

import jax
import jax.numpy as jnp
import numpy as np

from codesign.vertex.ir import AGGREGATIONS, ProgramGraph, Node

__all__ = ["VertexProgramError", "Value", "trace", "sum", "mean", "max", "softmax", "exp", "leaky_relu",
           "relu", "where", "RESERVED"]

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep  # np.sum & co. dispatch from Python frames
_MACHINERY = frozenset(os.path.join(_PACKAGE_DIR, f) for f in ("__init__.py", "ir.py", "trace.py", "fusion.py",
                                                                 "lower.py", "cost.py", "program.py"))
RESERVED = frozenset({"in_nbrs", "in_edges"})
"""Attribute names of the proxies that are not inputs."""


class VertexProgramError(ValueError):
    """A vertex program that cannot be traced; the message starts with the user's
    ``file:line: source`` that caused it."""


def user_line() -> str:
    """``"file:line: source"`` of the innermost stack frame outside the tracing machinery (the
    user's program; the programs of `codesign.vertex.layers` count as user code)."""
    f = sys._getframe(1)
    while f is not None and ((path := os.path.abspath(f.f_code.co_filename)) in _MACHINERY
                             or path.startswith(_NUMPY_DIR)):
        f = f.f_back
    if f is None:
        return "<unknown>"
    src = linecache.getline(f.f_code.co_filename, f.f_lineno).strip()
    return f"{os.path.basename(f.f_code.co_filename)}:{f.f_lineno}: {src}"


def _fail(msg: str, where: Optional[str] = None):
    raise VertexProgramError(f"{where or user_line()}: {msg}")


class _Tracer:
    """The state of one trace: the nodes recorded so far and the open neighbour loops."""

    def __init__(self, node_specs: dict, edge_specs: dict):
        self.node_specs, self.edge_specs = node_specs, edge_specs
        self.nodes: list[Node] = []
        self.inputs: dict = {}
        self.open_loops: set = set()

    def add(self, op: str, args: tuple, domain: str, shape, dtype, fn=None, **attrs) -> "Value":
        node = Node(len(self.nodes), op, tuple(args), domain, tuple(shape), np.dtype(dtype), fn, attrs, user_line())
        self.nodes.append(node)
        return Value(self, node.id)

    def input(self, kind: str, name: str) -> "Value":
        specs = self.node_specs if kind == "node_input" else self.edge_specs
        if name not in specs:
            what = "nodes" if kind == "node_input" else "edges"
            _fail(f"no {what[:-1]} input {name!r}: pass it in {what}= (given: {sorted(specs) or 'none'})")
        key = (kind, name)
        if key not in self.inputs:
            spec = specs[name]
            self.inputs[key] = self.add(kind, (), "vertex" if kind == "node_input" else "edge", spec.shape,
                                        spec.dtype, name=name)
        return self.inputs[key]


_ACTIVE: list = []


def _tracer() -> _Tracer:
    if not _ACTIVE:
        _fail("vx operations on traced values work only inside a @vx.program function while it is traced")
    return _ACTIVE[-1]


def _as_edge(v: "Value") -> "Value":
    """``v`` on the edge domain (a vertex value is read at each edge's receiver)."""
    n = v.node
    if n.domain == "edge":
        return v
    return v.tracer.add("gather_dst", (v.id,), "edge", n.shape, n.dtype)


def _map(name: str, fn: Callable, *operands, **attrs) -> "Value":
    """Records ``fn`` (of one item per traced operand; other operands are constants) as a map."""
    values = [o for o in operands if isinstance(o, Value)]
    tr = values[0].tracer
    if any(v.tracer is not tr for v in values) or tr is not _tracer():
        _fail("a traced value from another vertex program (or an earlier trace) is used here")
    domain = "edge" if any(v.node.domain == "edge" for v in values) else "vertex"
    if domain == "edge":
        values = [_as_edge(v) for v in values]
    it = iter(values)
    slots = [next(it) if isinstance(o, Value) else None for o in operands]
    consts = [None if isinstance(o, Value) else o for o in operands]

    def item_fn(*xs):
        xs = iter(xs)
        return fn(*[next(xs) if s is not None else c for s, c in zip(slots, consts)])

    specs = [jax.ShapeDtypeStruct(v.node.shape, v.node.dtype) for v in values]
    try:
        out = jax.eval_shape(item_fn, *specs)
    except Exception as err:  # noqa: BLE001 - any JAX shape/dtype error becomes one line
        shapes = " and ".join(str(s.shape) for s in specs)
        _fail(f"{name}: per-item shapes {shapes} do not agree ({type(err).__name__}: {str(err).splitlines()[0]})")
    if not isinstance(out, jax.ShapeDtypeStruct):
        _fail(f"{name}: must give one array per item, got {type(out).__name__}")
    if name in ("mul", "div") and len(operands) == 2 and len(values) == 1:
        c = consts[0] if consts[0] is not None else consts[1]
        if isinstance(c, (int, float, np.integer, np.floating)) and not isinstance(c, bool):
            # a Python-number factor, recorded so that fusion can fold it into an SpMM's weights
            attrs = dict(attrs, const=float(c), const_first=consts[0] is not None)
    return tr.add("map", tuple(v.id for v in values), domain, out.shape, out.dtype, fn=item_fn, name=name, **attrs)


def _control_flow(*_):
    _fail("data-dependent Python control flow on a traced value (if / while / and / or / bool() / int() / "
          "float()): a vertex program is traced once for all vertices; use vx.where(cond, a, b)")


class Value:
    """A traced value: one item per vertex or per edge (see `codesign.vertex.ir.Node`).

    Supports ``+ - * / ** @``, unary ``-``, comparisons (giving boolean values for `where`),
    indexing (``u.h[e.type]`` with an integer edge value, or constant indices), ``.shape``,
    ``.dtype`` (per item) and ``.T``/``.astype``; Python ``bool()`` raises `VertexProgramError`.
    """


    def __init__(self, tracer: _Tracer, node_id: int):
        self.tracer, self.id = tracer, node_id

    @property
    def node(self) -> Node:
        return self.tracer.nodes[self.id]

    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self):
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    def __repr__(self) -> str:
        return f"<vertex-program value %{self.id}: {self.node.domain} item {self.shape} {self.dtype}>"

    # arithmetic
    def __add__(self, o): return _map("add", jnp.add, self, o)
    def __radd__(self, o): return _map("add", jnp.add, o, self)
    def __sub__(self, o): return _map("sub", jnp.subtract, self, o)
    def __rsub__(self, o): return _map("sub", jnp.subtract, o, self)
    def __mul__(self, o): return _map("mul", jnp.multiply, self, o)
    def __rmul__(self, o): return _map("mul", jnp.multiply, o, self)
    def __truediv__(self, o): return _map("div", jnp.divide, self, o)
    def __rtruediv__(self, o): return _map("div", jnp.divide, o, self)
    def __pow__(self, o): return _map("pow", jnp.power, self, o)
    def __rpow__(self, o): return _map("pow", jnp.power, o, self)
    def __matmul__(self, o): return _map("matmul", jnp.matmul, self, o)
    def __rmatmul__(self, o): return _map("matmul", jnp.matmul, o, self)
    def __neg__(self): return _map("neg", jnp.negative, self)
    def __lt__(self, o): return _map("lt", jnp.less, self, o)
    def __le__(self, o): return _map("le", jnp.less_equal, self, o)
    def __gt__(self, o): return _map("gt", jnp.greater, self, o)
    def __ge__(self, o): return _map("ge", jnp.greater_equal, self, o)

    def astype(self, dtype): return _map("astype", lambda x: x.astype(dtype), self)

    @property
    def T(self): return _map("transpose", lambda x: x.T, self)

    def __getitem__(self, idx):
        if isinstance(idx, Value):
            n, i = self.node, idx.node
            if not jnp.issubdtype(i.dtype, jnp.integer) or i.shape != ():
                _fail(f"an index must be an integer scalar per item, got {i.dtype} {i.shape}")
            if n.op == "gather_src" and i.domain == "edge" and n.shape:
                table = self.tracer.nodes[n.args[0]]
                return self.tracer.add("gather_src_indexed", (table.id, i.id), "edge", table.shape[1:], table.dtype)
            return _map("index", lambda x, j: x[j], self, idx)
        return _map("index", lambda x: x[idx], self)

    __bool__ = __index__ = __int__ = __float__ = __complex__ = _control_flow

    def __iter__(self):
        _fail("iterating a traced value: loop over v.in_nbrs or v.in_edges")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """NumPy ufuncs (``np.exp(x)``, ``arr * x``): their ``jnp`` namesake, recorded like the
        operators; other forms raise `_numpy_refused`."""
        fn = getattr(jnp, ufunc.__name__, None)
        if method != "__call__" or kwargs or not callable(fn):
            what = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
            _numpy_refused(what + (f" with {', '.join(f'{k}=' for k in kwargs)}" if kwargs else ""))
        return _map(_UFUNC_OPS.get(ufunc.__name__, ufunc.__name__), fn, *inputs)

    def __array_function__(self, func, types, args, kwargs):
        _numpy_refused(f"numpy.{func.__name__}")

    def __array__(self, *_, **__):
        _numpy_refused("numpy.asarray")


_UFUNC_OPS = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "true_divide": "div",
              "power": "pow", "matmul": "matmul", "negative": "neg", "less": "lt", "less_equal": "le",
              "greater": "gt", "greater_equal": "ge"}
"""NumPy ufuncs that are Value operators: recorded under the operator's name (fusion reads it)."""


def _numpy_refused(what: str):
    raise TypeError(f"{user_line()}: {what} is not supported on a traced vertex-program value: use the vx "
                    f"operations (vx.sum / vx.mean / vx.max over v.in_nbrs, vx.where, vx.exp, vx.relu), operators "
                    f"(+ - * / ** @ < > [] .astype .T) or plain numpy ufuncs (np.exp(x), np.maximum(x, 0))")


class _Loop:
    """One ``iter(v.in_nbrs)`` / ``iter(v.in_edges)``: yields one symbolic neighbour, then stops.
    Open from its first item until exhausted or dropped."""

    def __init__(self, tracer: _Tracer, edges: bool):
        self.tracer, self.edges, self.done = tracer, edges, False

    def __iter__(self):
        return self

    def __next__(self):
        tr = self.tracer
        if self.done:
            tr.open_loops.discard(id(self))
            raise StopIteration
        if tr.open_loops:
            _fail("mixing neighbour sets: a loop over v.in_nbrs / v.in_edges inside (or zipped with) another "
                  "one; a program aggregates over one in-edge at a time: compute an inner aggregation before "
                  "the loop, and take (u, e) pairs from v.in_edges")
        self.done = True
        tr.open_loops.add(id(self))
        u = _Neighbour(tr)
        return (u, _Edge(tr)) if self.edges else u

    def __del__(self):
        self.tracer.open_loops.discard(id(self))


class _Proxy:
    __slots__ = ("_tracer",)

    def __init__(self, tracer: _Tracer):
        object.__setattr__(self, "_tracer", tracer)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        _numpy_refused(f"numpy.{ufunc.__name__} of a vertex / neighbour / edge proxy (read an input first: u.h)")

    def __array_function__(self, func, types, args, kwargs):
        _numpy_refused(f"numpy.{func.__name__} of a vertex / neighbour / edge proxy (read an input first: u.h)")

    def __array__(self, *_, **__):
        _numpy_refused("numpy.asarray of a vertex / neighbour / edge proxy (read an input first: u.h)")

    def __setattr__(self, name, value):
        _fail(f"cannot assign {name!r} on a proxy: inputs come from nodes= / edges=")

    __bool__ = _control_flow


@final
class _Vertex(_Proxy):
    """``v``: attributes are node inputs (``v.h`` -> ``nodes["h"]``)."""

    @property
    def in_nbrs(self):
        return _NeighbourSet(self._tracer, False)

    @property
    def in_edges(self):
        return _NeighbourSet(self._tracer, True)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._tracer.input("node_input", name)


@final
class _Neighbour(_Proxy):
    """``u``: attributes are node inputs read at the sender of the in-edge."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in RESERVED:
            _fail(f"u.{name}: neighbours of a neighbour (2 hops) are another neighbour set; write two programs")
        x = self._tracer.input("node_input", name)
        return self._tracer.add("gather_src", (x.id,), "edge", x.shape, x.dtype)


@final
class _Edge(_Proxy):
    """``e``: attributes are edge inputs (``e.w`` -> ``edges["w"]``)."""

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return self._tracer.input("edge_input", name)


class _NeighbourSet:
    def __init__(self, tracer: _Tracer, edges: bool):
        self.tracer, self.edges = tracer, edges

    def __iter__(self):
        return _Loop(self.tracer, self.edges)


# ------------------------------------------------------------------------------- vx operations

def _one_edge_value(items, fn: str) -> Value:
    if isinstance(items, Value):
        _fail(f"vx.{fn} takes a generator or list over v.in_nbrs / v.in_edges, got one value")
    items = list(items)
    if len(items) != 1 or not isinstance(items[0], Value):
        _fail(f"vx.{fn} expects one traced term per in-edge (a generator over v.in_nbrs / v.in_edges), got "
              f"{len(items)} items")
    v = items[0]
    if v.node.domain != "edge":
        _fail(f"vx.{fn} of a vertex value: the term must depend on the neighbour (u.*) or the edge (e.*)")
    return v


def _aggregate(items, kind: str) -> Value:
    assert kind in AGGREGATIONS
    v = _one_edge_value(items, kind)
    n = v.node
    if kind == "max" and not jnp.issubdtype(n.dtype, jnp.floating):
        _fail(f"vx.max needs floating values, got {n.dtype}")
    dtype = n.dtype if jnp.issubdtype(n.dtype, jnp.floating) else jnp.float32
    return v.tracer.add("aggregate", (v.id,), "vertex", n.shape, dtype, kind=kind)


def sum(items) -> Value:  # noqa: A001 - the vx namespace mirrors the math
    """``sum_{e in in-edges(v)} term_e``: the sum over one traced term per in-edge (a generator
    over ``v.in_nbrs`` / ``v.in_edges``); 0 for vertices without in-edges."""
    return _aggregate(items, "sum")


def mean(items) -> Value:
    """Mean over the in-edges: ``sum_e g_e term_e / max(sum_e g_e, 1)`` with edge gates g (1 without
    gates; the floor of 1 as `codesign.models.rgcn.relation_mean_normalize`); 0 without in-edges."""
    return _aggregate(items, "mean")


def max(items) -> Value:  # noqa: A001
    """Elementwise maximum over the in-edges (0 for vertices without in-edges)."""
    return _aggregate(items, "max")


def softmax(items) -> list:
    """Softmax of one traced scalar-or-array term per in-edge, over each vertex's in-edges
    (elementwise per component). Returns a one-element list, to zip with ``v.in_nbrs``."""
    v = _one_edge_value(items, "softmax")
    if not jnp.issubdtype(v.node.dtype, jnp.floating):
        _fail(f"vx.softmax needs floating values, got {v.node.dtype}")
    return [v.tracer.add("softmax", (v.id,), "edge", v.node.shape, v.node.dtype)]


def exp(x):
    """``exp(x)`` of a traced value (or of an array, as `jnp.exp`)."""
    return _map("exp", jnp.exp, x) if isinstance(x, Value) else jnp.exp(x)


def relu(x):
    """``max(x, 0)``."""
    return _map("relu", jax.nn.relu, x) if isinstance(x, Value) else jax.nn.relu(x)


def leaky_relu(x, negative_slope: float = 0.01):
    """``x if x > 0 else negative_slope * x`` (``negative_slope`` a Python float)."""
    slope = float(negative_slope)
    fn = lambda a: jnp.where(a > 0, a, slope * a)
    return _map("leaky_relu", fn, x, slope=slope) if isinstance(x, Value) else fn(x)


def where(cond, a, b):
    """``a`` where ``cond`` else ``b`` (elementwise; the traced replacement of ``if``)."""
    if any(isinstance(o, Value) for o in (cond, a, b)):
        return _map("where", jnp.where, cond, a, b)
    return jnp.where(cond, a, b)


# ------------------------------------------------------------------------------------- tracing

def trace(fn: Callable, node_specs: dict, edge_specs: dict) -> ProgramGraph:
    """Runs ``fn(v)`` once on proxies and returns its IR.

    Args:
      fn: the user's vertex function.
      node_specs, edge_specs: ``{name: jax.ShapeDtypeStruct}`` of one item of each input.

    Raises:
      VertexProgramError: see the module docstring.
    """
    tr = _Tracer(node_specs, edge_specs)
    _ACTIVE.append(tr)
    try:
        out = fn(_Vertex(tr))
    finally:
        _ACTIVE.pop()
    leaves, tree = jax.tree_util.tree_flatten(out)
    where = f"{fn.__code__.co_filename.rsplit(os.sep, 1)[-1]}:{fn.__code__.co_firstlineno}: def {fn.__name__}"
    if not leaves:
        _fail("the program returns nothing: return a vertex value", where)
    for leaf in leaves:
        if not isinstance(leaf, Value):
            _fail(f"the program must return traced vertex values, got {type(leaf).__name__}", where)
        if leaf.node.domain != "vertex":
            _fail(f"the program returns an edge value ({leaf.node.where}): aggregate it with vx.sum / vx.mean / "
                  f"vx.max", where)
    return ProgramGraph(tuple(tr.nodes), tuple(v.id for v in leaves), tree)
