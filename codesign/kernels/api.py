"""`aggregate`: the one entry point through which every model aggregates messages, and the one
``(format, impl)`` dispatch table behind it.

    format               impl            backend                                           x rows
    CooAdjacency         segment         XLA gather + segment_sum (`segment_spmm`, the reference)   N
    CooAdjacency         dense           dense N x N product (tests, tiny graphs)                   N
    CooAdjacency         csr_scipy       scipy CSR through a host callback (needs a `CsrPattern`)   N
    CooAdjacency         bsr_xla/pallas  the BSR backends over an attached `BlockPattern`           N
    CooAdjacency         pallas_csr      Triton CSR edge-chunk SpMM (`csr_chunk_spmm`; needs a `CsrChunks`) N
    BlockSparseAdjacency bsr_xla         einsum over tiles + segment_sum (`bsr_spmm_reference`)     n_pad
    BlockSparseAdjacency pallas          Triton BSR SpMM (`bsr_spmm`; interpreter off GPU)          n_pad
    CondensedRowWindows  condensed_xla   `condensed_spmm_reference`                                 n_pad
    CondensedRowWindows  pallas          Triton condensed SpMM (`condensed_spmm`)                   n_pad

``impl="auto"`` is resolved by `auto_impl`, the only place that chooses a backend (for these
SpMMs and for the GAT attention of `gat_aggregate` / `codesign.vertex.lower`): among the
`candidates` that the format, the attached pattern and the JAX backend allow, the one with the
lowest modeled cost (`modeled_cost_s`) on the preset of the device it runs on (`device_preset`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import math
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import jax
import jax.numpy as jnp
import numpy as np

from codesign import hwmodel

from codesign.kernels.bsr import BlockPattern, BlockSparseAdjacency
from codesign.kernels.condensed import CondensedRowWindows, condensed_spmm_reference
from codesign.kernels.coo import CooAdjacency
from codesign.kernels.csr_cpu import CsrPattern, csr_aggregate
from codesign.kernels.pallas_condensed import condensed_spmm
from codesign.kernels.pallas_csr import CsrChunks, csr_chunk_aggregate
from codesign.kernels.pallas_spmm import bsr_spmm, bsr_spmm_reference
from codesign.kernels.segment import dense_spmm, segment_spmm

__all__ = ["aggregate", "auto_impl", "candidates", "modeled_cost_s", "device_preset", "feature_dtype", "IMPLS",
           "ATTENTION_BACKENDS", "CALLBACK_FIT", "recorded_choices"]

Adjacency = Union[CooAdjacency, BlockSparseAdjacency, CondensedRowWindows]

def _coo_on_blocks(kernel: Callable) -> Callable:
    """A BSR backend run on a `CooAdjacency` with a `BlockPattern`: the edge weights are scattered
    into the pattern's tiles and x is permuted in and out."""
    def run(adj: CooAdjacency, x: jax.Array) -> jax.Array:
        w = jnp.ones(adj.senders.shape, x.dtype) if adj.edge_weight is None else adj.edge_weight
        bsr = adj.pattern.tiles(w)
        return bsr.unpermute(kernel(bsr, bsr.permute_features(x)))
    return run


IMPLS: dict[tuple[type, str], Callable] = {
    (CooAdjacency, "segment"): segment_spmm,
    (CooAdjacency, "dense"): dense_spmm,
    (CooAdjacency, "csr_scipy"): csr_aggregate,
    (CooAdjacency, "bsr_xla"): _coo_on_blocks(bsr_spmm_reference),
    (CooAdjacency, "pallas"): _coo_on_blocks(bsr_spmm),
    (CooAdjacency, "pallas_csr"): csr_chunk_aggregate,
    (BlockSparseAdjacency, "bsr_xla"): bsr_spmm_reference,
    (BlockSparseAdjacency, "pallas"): bsr_spmm,
    (CondensedRowWindows, "condensed_xla"): condensed_spmm_reference,
    (CondensedRowWindows, "pallas"): condensed_spmm,
}
"""The dispatch table: ``(format class, impl name) -> backend(adj, x)``."""


ATTENTION_BACKENDS = ("reference", "pallas", "csr")
"""The GAT attention backends `auto_impl` chooses among (``op="attention"``): "reference" (XLA
gather + segment ops, forms [E, H, F] messages), "pallas" (the fused online-softmax kernel, GPU),
"csr" (XLA edge softmax + scipy CSR SpMM through a host callback; needs a `CsrPattern` of the
adjacency's E edges, CPU)."""

CALLBACK_FIT = Path(__file__).resolve().parents[1] / "hwmodel" / "fits" / "cpu_callback.json"
"""The measured fixed cost of one jitted scipy CSR product (``host_callback_overhead_s``, seconds
per call, over XLA's dispatch), written by ``experiments/measure_callback_overhead.py``."""


@functools.lru_cache(maxsize=None)
def callback_overhead_s() -> float:
    """Seconds per host-callback scipy product (`codesign.kernels.csr_cpu`) beyond an XLA kernel's dispatch, from
    `CALLBACK_FIT` (MEASURED on this CPU; see that record's ``date``, ``host``, ``command``).

    Raises:
      FileNotFoundError: no record (re-measure with the command above).
      ValueError: ``host_callback_overhead_s`` missing or not a finite number >= 0.
    """
    v = json.loads(CALLBACK_FIT.read_text()).get("host_callback_overhead_s")
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{CALLBACK_FIT}: host_callback_overhead_s must be a finite number >= 0, got {v!r}")
    return float(v)


@functools.lru_cache(maxsize=None)
def _preset_for(backend: str, device_kind: str) -> hwmodel.HardwareSpec:
    from codesign.hwmodel import presets
    if backend == "gpu":
        return presets.a100_fitted() if "A100" in device_kind else presets.h100_fitted()
    return presets.cpu()


def device_preset() -> hwmodel.HardwareSpec:
    """The validated `codesign.hwmodel` preset of the device JAX runs on: ``a100`` on an
    A100, ``h100`` on any other GPU (the H100 fit, `presets.h100_fitted`), ``cpu`` (this
    host's fit, `presets.cpu`) otherwise."""
    d = jax.devices()[0]
    return _preset_for(jax.default_backend(), str(getattr(d, "device_kind", "")))


def candidates(adj: Adjacency, x: jax.Array, op: str = "spmm") -> tuple[str, ...]:
    """The backends ``impl="auto"`` may pick for ``adj`` and ``x`` on the current JAX backend.

    ``op="spmm"`` (`aggregate`): Pallas for the block formats on a GPU, their XLA reference
    elsewhere; for a `CooAdjacency` "segment", plus "pallas_csr" with an attached `CsrChunks` on a
    GPU for float32 / bfloat16 x, plus "csr_scipy" with a `CsrPattern` of the adjacency's entries
    on the CPU (a pattern built with self-loops is no candidate for the adjacency without them).
    ``op="attention"``
    (`ATTENTION_BACKENDS`): "pallas" on a GPU, else "reference", plus "csr" with a `CsrPattern` of
    the adjacency's E edges on the CPU.

    Raises:
      ValueError: unknown ``op``.
    """
    backend = jax.default_backend()
    if op == "attention":
        if backend == "gpu":
            return ("pallas",)
        pattern = getattr(adj, "pattern", None)  # a CsrByReceiver carries none
        has_csr = isinstance(pattern, CsrPattern) and pattern.n_entries == adj.n_edges
        return ("reference", "csr") if has_csr and backend == "cpu" else ("reference",)
    if op != "spmm":
        raise ValueError(f"auto_impl: op must be 'spmm' or 'attention', got {op!r}")
    if isinstance(adj, BlockSparseAdjacency):
        return ("pallas",) if backend == "gpu" else ("bsr_xla",)
    if isinstance(adj, CondensedRowWindows):
        return ("pallas",) if backend == "gpu" else ("condensed_xla",)
    out = ["segment"]
    if isinstance(adj.pattern, CsrChunks) and backend == "gpu" and x.dtype in (jnp.float32, jnp.bfloat16):
        out.append("pallas_csr")
    p = adj.pattern  # a CSR pattern runs only the adjacency it describes (e.g. built with its self-loops)
    if isinstance(p, CsrPattern) and backend == "cpu" and p.n_entries == adj.n_edges and p.n_nodes == adj.n_nodes:
        out.append("csr_scipy")
    return tuple(out)


def _stages(name: str, n: int, nnz: int, width: int, bits: float, heads: int) -> tuple:
    """The `hwmodel` stages of backend ``name`` over N rows, nnz entries, ``width`` columns."""
    if name in ("segment", "bsr_xla", "condensed_xla", "dense"):
        return hwmodel.segment_spmm_stages(n, nnz, width, bits, bits)
    if name == "csr_scipy":
        return (hwmodel.spmm_stage(n, nnz, width, bits, bits),)
    if name in ("pallas_csr", "pallas") and heads == 0:
        return hwmodel.csr_chunk_spmm_stages(n, nnz, width, bits, bits)
    # attention: score SDDMM + softmax + attention-weighted SpMM; the reference's SpMM is XLA's
    # gather + segment_sum (message buffer [E, H*F]), "csr" scipy's loop, "pallas" the fused kernel's
    sddmm, softmax, spmm = hwmodel.attention_stages(n, nnz, heads, width // max(heads, 1), bits, bits)
    if name == "reference":
        return (sddmm, softmax) + hwmodel.segment_spmm_stages(n, nnz, width, bits, bits)
    return sddmm, softmax, spmm


@functools.lru_cache(maxsize=4096)
def _stages_cost_s(name: str, n: int, nnz: int, width: int, bits: float, heads: int, training: bool,
                   learned_edge_weights: bool, hw: hwmodel.HardwareSpec) -> float:
    """`modeled_cost_s`'s stage sum, memoized on its static arguments (``hw`` is a frozen, hashable
    dataclass). Why: `auto_impl` runs at every trace of every aggregation, and the stage costs are
    computed eagerly, op by op (what that cost, measured: docs/log/suite_time.md)."""
    with jax.ensure_compile_time_eval():
        stages = _stages(name, n, nnz, width, bits, heads)
        if training:  # a hidden layer's call (its input needs a gradient)
            layer = hwmodel.LayerWorkload("layer1", stages, stages, ())
            wl = hwmodel.autograd_training(hwmodel.Workload((layer,)), learned_edge_weights=learned_edge_weights)
            stages = wl.layers[0].combine_first
        return sum(float(hwmodel.stage_cost(s, hw).latency_s) for s in stages)


def modeled_cost_s(name: str, adj: Adjacency, x: jax.Array, hw: hwmodel.HardwareSpec, op: str = "spmm",
                   heads: int = 1, training: bool = False) -> float:
    """Modeled seconds of one forward call of backend ``name`` on ``hw`` (`hwmodel.stage_cost`
    over the backend's stages, from static shapes and dtypes only, so it runs under jit); with
    ``training``, of the forward and its backward: the stages under `hwmodel.autograd_training`
    (the one training-cost rule; the attention's weights are learned, an SpMM's are not) and, for
    the scipy backends, two host callbacks (the forward's and the backward's):

      segment / XLA references: `hwmodel.segment_spmm_stages` (gather + message buffer + scatter);
      csr_scipy: `hwmodel.spmm_stage` (scipy's per-output-row loop) + `callback_overhead_s`;
      pallas_csr / pallas (BSR, condensed): `hwmodel.csr_chunk_spmm_stages`;
      attention (``op="attention"``, ``x`` = h with ``heads * F`` columns per node): SDDMM +
        softmax (`hwmodel.attention_stages`) + the SpMM above of the backend ("reference": the
        segment one, "csr": scipy's + `callback_overhead_s`, "pallas": the fused kernel's).

    Counts: N = ``x.shape[0]``, nnz = the adjacency's stored entries (``n_edges``; block formats:
    their stored tiles' entries), width = the product of ``x.shape[1:]``; bits = ``x``'s float
    width (32 for integer / bool x, which `aggregate` converts to float32)."""
    n = int(x.shape[0])
    width = int(np.prod(x.shape[1:])) if x.ndim > 1 else 1
    dt = jnp.dtype(x.dtype)
    bits = float(dt.itemsize * 8) if jnp.issubdtype(dt, jnp.floating) else 32.0
    nnz = _stored_entries(adj)
    total = _stages_cost_s(name, n, nnz, width, bits, heads if op == "attention" else 0, training, op == "attention", hw)
    if name in ("csr_scipy", "csr"):
        total += callback_overhead_s() * (2 if training else 1)
    return total


def _stored_entries(adj) -> int:
    """Static count of stored entries: edges of a COO / CSR-by-receiver graph, tiles x B^2 else."""
    if isinstance(adj, (BlockSparseAdjacency, CondensedRowWindows)):
        data = adj.data if isinstance(adj, BlockSparseAdjacency) else adj.tile_data
        return int(np.prod(data.shape))
    return int(adj.n_edges)


def auto_impl(adj: Adjacency, x: jax.Array, *, op: str = "spmm", heads: int = 1,
              hw: Optional[hwmodel.HardwareSpec] = None, allowed: Optional[Sequence[str]] = None,
              training: bool = False) -> str:
    """The backend ``impl="auto"`` runs: of the `candidates` (restricted to ``allowed`` if given),
    the one with the lowest `modeled_cost_s` on ``hw`` (default `device_preset`, the validated
    preset of the device JAX runs on); ties go to the first candidate. Decides from shapes,
    dtypes and the attached pattern's type only, so it gives the same answer under jit.

    Args:
      adj: `CooAdjacency`, `BlockSparseAdjacency` or `CondensedRowWindows`.
      x: the features [N, ...] (``op="attention"``: h [N, H, F] or [N, H*F]).
      op: "spmm" (`aggregate`) or "attention" (the GAT attention, `ATTENTION_BACKENDS`).
      heads: attention heads (``op="attention"``).
      hw: the preset to cost on.
      allowed: the backends the caller can run (e.g. `gat_aggregate`: no "csr").
      training: cost the forward and its backward (`modeled_cost_s`): the call is part of a
        training step (a layer in train mode), not an inference.

    Returns: a backend name of the `IMPLS` table (``op="spmm"``) or of `ATTENTION_BACKENDS`.

    Raises:
      ValueError: unknown ``op``; no candidate left in ``allowed``.
    """
    names = candidates(adj, x, op)
    if allowed is not None:
        names = tuple(c for c in names if c in allowed)
        if not names:
            raise ValueError(f"auto_impl: no {op} backend of {list(allowed)} runs here; candidates are "
                             f"{list(candidates(adj, x, op))}")
    if len(names) > 1:
        hw = device_preset() if hw is None else hw
        costs = [modeled_cost_s(c, adj, x, hw, op, heads, training) for c in names]
        names = (names[int(np.argmin(costs))],)
    _note("aggregate" if op == "spmm" else op, names[0])
    return names[0]


_RECORDERS: contextvars.ContextVar[tuple] = contextvars.ContextVar("codesign_backend_recorders", default=())


def _note(key: str, name: str) -> None:
    for rec in _RECORDERS.get():
        seen = rec.setdefault(key, [])
        if name not in seen:
            seen.append(name)


@contextlib.contextmanager
def recorded_choices():
    """Collects what `auto_impl` picks inside the ``with`` block (Python-side: at trace time under
    jit, so a cached jitted function records nothing): yields a dict ``{"aggregate": [names],
    "attention": [names]}`` (keys only for ops resolved; names distinct, in first-use order),
    filled when the block runs. Nested blocks each collect."""
    rec: dict = {}
    token = _RECORDERS.set(_RECORDERS.get() + (rec,))
    try:
        yield rec
    finally:
        _RECORDERS.reset(token)


def _impls_of(fmt: type) -> list[str]:
    return ["auto", *(impl for f, impl in IMPLS if f is fmt)]


def feature_dtype(x, name: str = "aggregate: x") -> jnp.dtype:
    """The dtype in which the aggregation kernels compute on ``x``: ``x``'s own dtype if it is a
    float, float32 for integer and bool ``x`` (see `aggregate`; `gat_aggregate` uses it too).

    Raises:
      ValueError: ``x`` is complex or not numeric (one line: ``name`` and the dtype).
    """
    dt = jnp.dtype(x.dtype if hasattr(x, "dtype") else np.asarray(x).dtype)
    if jnp.issubdtype(dt, jnp.floating):
        return dt
    if jnp.issubdtype(dt, jnp.integer) or dt == jnp.bool_:
        return jnp.dtype(jnp.float32)
    raise ValueError(f"{name} must have a real (float, integer or bool) dtype, got {dt}")


def aggregate(adj: Adjacency, x: jax.Array, impl: str = "auto") -> jax.Array:
    """Sum-aggregation ``A @ x`` over the adjacency ``adj`` (rows = receivers).

    Feature dtypes: float features run as given (each backend accepts its own set: all take
    float32; bf16 / f16 / f64 as the dispatch table's backends document). Integer and bool
    features (int8, uint8, int16, int32, ...) are converted to float32 here, before dispatch, so
    every backend behaves the same: edge weights stay float, sums accumulate in float32 (never in
    the integer dtype, which would wrap: int8 100 + 100 is not -56) and the result is float32.
    This is exact while the weighted values and partial sums are integers below 2^24 in magnitude
    (e.g. int8 features with weights 1 on rows of fewer than 2^16 edges); otherwise it is rounded
    as float32 arithmetic is (int32 values above 2^24 lose low bits). Quantized int8 features with per-row scales have their own forward
    kernels, which load one byte per feature: `bsr_spmm_int8`, `csr_chunk_spmm_int8`.

    Args:
      adj: `CooAdjacency` over N nodes, `BlockSparseAdjacency` or `CondensedRowWindows`.
      x: float, integer or bool [N, F] for a `CooAdjacency`; [n_pad, F] in the block format's
        reordered, padded node order (``adj.permute_features(x)``) for the block formats.
      impl: "auto" (`auto_impl`) or a name of the dispatch table (module docstring) for ``adj``'s
        format; "bsr_xla" / "pallas" on a `CooAdjacency` need an attached `BlockPattern`
        (`codesign.kernels.with_block_pattern`), "csr_scipy" a `CsrPattern` (`with_csr_pattern`).

    Returns:
      [N, F] (COO) or [n_pad, F] (block formats, same order as ``x``): ``x``'s dtype for float
      ``x``, float32 for integer / bool ``x``.

    Raises:
      ValueError: an unknown ``impl`` or one that does not fit the adjacency (the message lists
        the valid ones, or says what to attach), ``x`` whose first dimension does not match, or a
        float dtype the chosen backend does not support (the backend's message), or complex /
        non-numeric ``x`` (one line naming the dtype).
    """
    acc = feature_dtype(x)
    if x.dtype != acc:
        x = x.astype(acc)
    fmt = type(adj)
    if fmt not in (CooAdjacency, BlockSparseAdjacency, CondensedRowWindows):
        raise ValueError(f"aggregate: adj must be a CooAdjacency, BlockSparseAdjacency or CondensedRowWindows, "
                         f"got {fmt.__name__}")
    name = auto_impl(adj, x) if impl == "auto" else impl
    if (fmt, name) not in IMPLS:
        if fmt is BlockSparseAdjacency and (CooAdjacency, name) in IMPLS:
            raise ValueError(f"aggregate: impl {impl!r} needs a CooAdjacency; for a BlockSparseAdjacency pass "
                             f"impl='auto', 'bsr_xla' or 'pallas'")
        raise ValueError(f"aggregate: unknown impl {impl!r} for {fmt.__name__}; choose from {_impls_of(fmt)}")
    if fmt is CooAdjacency:
        if name in ("bsr_xla", "pallas") and not isinstance(adj.pattern, BlockPattern):
            raise ValueError(f"aggregate: impl {impl!r} needs block structure: attach it with "
                             f"with_block_pattern(adj, block_size) (or pass a BlockSparseAdjacency, or use "
                             f"impl='segment' / 'dense')")
        if name not in ("bsr_xla", "pallas") and (x.ndim != 2 or x.shape[0] != adj.n_nodes):
            raise ValueError(f"aggregate: x must be [n_nodes={adj.n_nodes}, F], got shape {x.shape}")
    elif x.ndim != 2 or x.shape[0] != adj.n_pad:
        raise ValueError(f"aggregate: x must be [n_pad={adj.n_pad}, F] in the adjacency's reordered, padded "
                         f"order (adj.permute_features(x)), got shape {x.shape}")
    return IMPLS[(fmt, name)](adj, x)
