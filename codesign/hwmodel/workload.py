"""`Workload`: the counts that hardware cost depends on, per layer and per stage.

Counts are JAX arrays built from expected (differentiable) or hard densities and bit-widths,
so gradients flow from gate logits and bit-widths into the cost.

A message-passing layer ``H' = act(A_hat @ H @ W)`` (GCN; Kipf & Welling, ICLR 2017) has two
equivalent dataflow orders, both costed (the estimator keeps the cheaper one):
  aggregate-first:  SpMM over the K input columns, then a GEMM N x K x F;
  combine-first:    GEMM N x K x F, then SpMM over the F output columns.
This is the AC/CA choice of accelerator papers (e.g. AWB-GCN, MICRO 2020; HyGCN, HPCA 2020).
"""

from __future__ import annotations

import dataclasses

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from codesign.hwmodel.locality import LocalityProfile, stack_distance_rows
from codesign.hwmodel.validate import check_bits, check_count, check_density, register_checked_dataclass

INDEX_BYTES = 4  # int32 column index per stored nonzero (CSR)
VALUE_BYTES = 4  # float32 value per stored nonzero
AGGREGATION_KINDS = ("spmm", "bsr", "sddmm", "softmax")
STAGE_KINDS = ("gemm", "elementwise", *AGGREGATION_KINDS)
"""Every `Stage.kind` the estimator prices."""
SOFTMAX_OPS_PER_EDGE = 5.0  # max, subtract, exp, sum, divide per edge and head
CONVERTS_PER_UPCAST_MESSAGE = 2.0  # round trips through the narrow type: one in the gather, one per scatter-add
MESSAGE_OPS_PER_ELEMENT = 2.0  # XLA's message buffer: the gather writes each element, the scatter-add reads it back
ACTIVATION_MASK_BYTES = 1.0 / 8.0  # a fused epilogue's activation mask, 1 bit per element (`elementwise_stage`)
FAKE_QUANT_OPS = 7.0  # run-time fake quantization of an activation, per element: max(x, 0), the max-reduce for the
# per-tensor scale, divide, round, clip, multiply back, cast (`codesign.deploy._quantize_activation`)


@register_checked_dataclass
@dataclasses.dataclass(frozen=True)
class Stage:
    """One kernel's counts.

    Fields (all float32 scalars unless noted):
      kind: "gemm" (matrix engine), "spmm" (vector units, gather + multiply-add) or
        "elementwise" (static str).
      macs: multiply-accumulates (elementwise: operations).
      bits: operand bit-width that sets the compute rate and the energy per MAC.
      compulsory_bytes: DRAM bytes if every operand is read once and every result written once.
      reuse_bytes: extra bytes read when re-used operands (gathered feature rows) miss on chip.
      working_set_bytes: size of the re-used operand.
      working_set_rows: rows of the re-used operand (None: not row-structured).
      reuse_distance_rows: float32 [Q] stack-distance quantiles (rows) of the re-references, from
        a `LocalityProfile`; None = uniform re-reference (hit rate = buffer / working set).
      link_bytes: bytes that cross the host link when the stage runs on near-memory units (the
        features the host writes and the reduced result it reads); None for host-only stages.
      launches: kernel launches the stage stands for (each pays ``stage_overhead_s``).
      gathered_rows: rows (or B-row slabs) the stage gathers or scatter-adds one at a time, each
        paying ``HardwareSpec.row_gather_overhead_s`` (SpMM: one per stored nonzero; BSR: one
        per tile and feature tile; SDDMM: one per edge); 0 for dense stages.
      in_degree_cv, max_in_degree: the graph's in-degree spread (`LocalityProfile`), for the
        load imbalance of near-memory units; None = Poisson degrees / unknown maximum.
      output_rows: output rows the kernel loops over one at a time (a CSR kernel's outer loop),
        each paying ``HardwareSpec.row_overhead_s`` (`spmm_stage`, `csr_gemm_stage`: the rows
        of the result); 0 for kernels without a per-row loop (GEMM, elementwise, XLA's gather +
        scatter-add: `segment_spmm_stages`).
      output_bytes: bytes of a result the kernel zero-fills and then accumulates into in memory
        (`spmm_stage`, `csr_gemm_stage`: scipy's CSR products), charged
        ``HardwareSpec.output_accumulate_passes`` more DRAM passes where it exceeds the on-chip
        buffer; 0 for kernels that write their result once.
      passes: separate passes over ``compulsory_bytes`` on an executor that does not fuse
        elementwise operations (``HardwareSpec.fuses_elementwise`` False: numpy runs each op of a
        bias + activation + gate as its own loop); 1 where one loop does the stage.
      serial (static): the kernel is one serial loop on one core (XLA:CPU's gather and
        scatter-add, scipy's CSR loops), so it gets ``1 / HardwareSpec.cores`` of the compute
        rates; False for kernels that use every core (XLA's and BLAS's GEMM).
      weight_gemm (static): the stage multiplies by a weight matrix although its kind is not
        "gemm" (`csr_gemm_stage`: a GEMM over a CSR-stored input, priced as an SpMM), so
        `autograd_training` charges it as a GEMM (``dW``, ``dX``), not as an aggregation.
      epilogue_bytes: an "elementwise" stage's DRAM bytes when it runs in the epilogue of the
        kernel that produces its input (``HardwareSpec.fuses_epilogue``): its input is then that
        kernel's result, still in registers, and its output is what the kernel writes, so only
        the other operands and outputs it has move (`elementwise_stage`); no launch of its own.
        None (the default): the stage does not fuse and is priced as a kernel of its own.
      packed_bytes: bytes of a GEMM's operands that a Goto-style BLAS copies into blocked panels
        (`gemm_stage`: both inputs), priced per byte beyond the on-chip buffer by
        ``HardwareSpec.gemm_pack_byte_s`` (0 on executors that do not pack); 0 for other stages.
      gemv (static): a matrix-vector product whose matrix stays in memory (`gemv_stage`: its
        ``working_set_bytes``), which near-memory units that run GEMVs may execute in place
        (``NearMemorySpec.gemv_broadcast_units``; Samsung HBM-PIM's PCUs); False elsewhere.

    Checked at construction (the stage builders' stages and hand-built ones alike), for concrete
    values -- Python / NumPy numbers and concrete JAX arrays; tracers under ``jit`` / ``grad`` /
    ``vmap`` pass unchecked, and pytree rebuilding (gradient trees) is not checked
    (`register_checked_dataclass`): ``kind`` one of `STAGE_KINDS`; ``bits`` finite and in
    [1, 32] (`check_bits`: fractional values are allowed, as learned bit-widths give expected,
    fractional bits during training); every other numeric field finite and >= 0 (`check_count`),
    every element of an array field.

    Raises:
      ValueError: one line naming the field and the value, e.g.
        ``"Stage.macs: must be finite and >= 0, got -1.0"``, or an unknown ``kind``.
      TypeError: a field that is not a real number or numeric array (bool, str), or a non-bool
        ``serial``.
    """

    kind: str = dataclasses.field(metadata=dict(static=True))
    macs: jax.Array
    bits: jax.Array
    compulsory_bytes: jax.Array
    reuse_bytes: jax.Array
    working_set_bytes: jax.Array
    working_set_rows: Optional[jax.Array] = None
    reuse_distance_rows: Optional[jax.Array] = None
    link_bytes: Optional[jax.Array] = None
    launches: jax.Array = 1.0
    gathered_rows: jax.Array = 0.0
    in_degree_cv: Optional[jax.Array] = None
    max_in_degree: Optional[jax.Array] = None
    output_rows: jax.Array = 0.0
    output_bytes: jax.Array = 0.0
    passes: jax.Array = 1.0
    serial: bool = dataclasses.field(default=False, metadata=dict(static=True))
    weight_gemm: bool = dataclasses.field(default=False, metadata=dict(static=True))
    epilogue_bytes: Optional[jax.Array] = None
    packed_bytes: jax.Array = 0.0
    gemv: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def __post_init__(self):
        if self.kind not in STAGE_KINDS:
            raise ValueError(f"Stage.kind: unknown kind {self.kind!r}; known kinds: {', '.join(STAGE_KINDS)}")
        for name in ("serial", "weight_gemm", "gemv"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise TypeError(f"Stage.{name}: must be a bool, got {getattr(self, name)!r}")
        check_bits(self.bits, "Stage.bits")
        for f in dataclasses.fields(self):
            if f.name not in ("kind", "serial", "weight_gemm", "gemv", "bits") and (v := getattr(self, f.name)) is not None:
                check_count(v, f"Stage.{f.name}")

    def scaled(self, factor: float) -> "Stage":
        """The same kernel run ``factor`` times (counts and launches scale; bit-width and working
        set do not)."""
        return dataclasses.replace(
            self, macs=self.macs * factor, compulsory_bytes=self.compulsory_bytes * factor,
            reuse_bytes=self.reuse_bytes * factor, launches=self.launches * factor,
            gathered_rows=self.gathered_rows * factor, output_rows=self.output_rows * factor,
            output_bytes=self.output_bytes * factor, packed_bytes=self.packed_bytes * factor,
            link_bytes=None if self.link_bytes is None else self.link_bytes * factor,
            epilogue_bytes=None if self.epilogue_bytes is None else self.epilogue_bytes * factor)

    @property
    def is_aggregation(self) -> bool:
        """Sparse stages that may be mapped onto near-memory units."""
        return self.kind in AGGREGATION_KINDS


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LayerWorkload:
    """One layer: its stages in both dataflow orders plus order-independent stages.

    Fields:
      name: layer name, e.g. "layer0" (static).
      aggregate_first: (spmm, gemm) stages of the aggregate-then-combine order.
      combine_first: (gemm, spmm) stages of the combine-then-aggregate order.
      elementwise: stages present in both orders (bias, activation).
    """

    name: str = dataclasses.field(metadata=dict(static=True))
    aggregate_first: tuple[Stage, ...]
    combine_first: tuple[Stage, ...]
    elementwise: tuple[Stage, ...]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Workload:
    """A model's workload on one graph: a tuple of `LayerWorkload` (forward, or forward+backward
    when ``training``, static)."""

    layers: tuple[LayerWorkload, ...]
    training: bool = dataclasses.field(default=False, metadata=dict(static=True))


def _f32(v) -> jax.Array:
    return jnp.asarray(v, jnp.float32)


def _counts(builder: str, **counts) -> None:
    """`check_count` on each named count (finite, >= 0; traced values pass), errors naming
    ``"<builder>(<name>)"``."""
    for name, v in counts.items():
        check_count(v, f"{builder}({name})")


def _bits(builder: str, **bits) -> None:
    """`check_bits` on each named bit-width (finite, in [1, 32]; traced values pass)."""
    for name, v in bits.items():
        check_bits(v, f"{builder}({name})")


def gemm_stage(m, k, n, a_bits, w_bits, out_bits) -> Stage:
    """Dense GEMM ``[m, k] @ [k, n]``: reads both operands once, writes the result once.

    Raises:
      ValueError: a concrete count below 0 or a bit-width outside [1, 32], or either not finite
        (`codesign.hwmodel.validate`; traced values are not checked).
    """
    _counts("gemm_stage", m=m, k=k, n=n)
    _bits("gemm_stage", a_bits=a_bits, w_bits=w_bits, out_bits=out_bits)
    m, k, n = _f32(m), _f32(k), _f32(n)
    bits = jnp.maximum(_f32(a_bits), _f32(w_bits))
    compulsory = (m * k * a_bits + k * n * w_bits + m * n * out_bits) / 8.0
    zero = jnp.zeros((), jnp.float32)
    return Stage("gemm", m * k * n, bits, compulsory, zero, zero, packed_bytes=(m * k * a_bits + k * n * w_bits) / 8.0)


def gemv_stage(k, n, x_bits, w_bits, out_bits) -> Stage:
    """Matrix-vector product ``x[1, k] @ W[k, n]`` (batch 1: an RNN step, a GEMV benchmark): the
    `gemm_stage` of one row, with ``working_set_bytes`` the matrix (``k * n * w_bits / 8``, what
    stays in memory), ``link_bytes`` the vector in and the result out (what crosses to near-memory
    units that run it in place) and ``Stage.gemv`` set. Raises as `gemm_stage`."""
    _counts("gemv_stage", k=k, n=n)
    _bits("gemv_stage", x_bits=x_bits, w_bits=w_bits, out_bits=out_bits)
    k, n = _f32(k), _f32(n)
    return dataclasses.replace(gemm_stage(1.0, k, n, x_bits, w_bits, out_bits), working_set_bytes=k * n * w_bits / 8.0,
                               link_bytes=(k * x_bits + n * out_bits) / 8.0, gemv=True)


def input_gemm_stage(m, k, n, a_bits, w_bits, out_bits, a_nnz=None) -> Stage:
    """A layer's GEMM on its input ``A[m, k] @ W[k, n]``: `gemm_stage` when ``A`` is stored dense
    (``a_nnz`` None), `csr_gemm_stage` over its ``a_nnz`` stored nonzeros when it is stored CSR
    (bag-of-words input features). Raises as those two."""
    if a_nnz is None:
        return gemm_stage(m, k, n, a_bits, w_bits, out_bits)
    return csr_gemm_stage(m, k, n, a_nnz, a_bits, w_bits, out_bits)


def csr_gemm_stage(m, k, n, nnz, a_bits, w_bits, out_bits) -> Stage:
    """Sparse-input GEMM ``A[m, k] @ W[k, n]`` with ``A`` stored as CSR with ``nnz`` nonzeros (a
    bag-of-words feature matrix: scipy's CSR x dense product, cuSPARSE SpMM): every stored
    nonzero gathers one row of ``W`` and multiply-adds it into its output row.

    Reads the CSR structure (``(m + 1)`` row pointers, ``nnz`` column ids and ``nnz`` values of
    ``a_bits``) and ``W`` once, writes the output once (compulsory); every nonzero beyond the
    first per column of ``A`` re-gathers a ``W`` row (``reuse_bytes``; ``W`` is the working set,
    ``k`` rows, uniform re-reference). Kind "spmm": it runs on the vector units at the gather
    rate (`stage_cost`), as the adjacency SpMM does, not at the matrix engine's GEMM rate; it
    loops over the ``m`` output rows (``output_rows``: scipy's ``csr_matvecs``).
    Training (`autograd_training`): on the graph's input features it costs its forward and
    ``dW = A^T dY`` (no gradient of the features). Like the adjacency SpMM it may be mapped onto near-memory units
    (a gather-reduce of W rows next to the stored features).

    Args:
      m, k, n: rows of A, columns of A (= rows of W), columns of W.
      nnz: stored nonzeros of A (may be expected: sum over kept columns of their nonzeros).
      a_bits, w_bits, out_bits: bits per stored value of A, per element of W and of the output.

    Raises:
      ValueError: a concrete count below 0 or a bit-width outside [1, 32], or either not finite.
    """
    _counts("csr_gemm_stage", m=m, k=k, n=n, nnz=nnz)
    _bits("csr_gemm_stage", a_bits=a_bits, w_bits=w_bits, out_bits=out_bits)
    m, k, n, nnz = _f32(m), _f32(k), _f32(n), _f32(nnz)
    w_bytes = k * n * w_bits / 8.0
    out_bytes = m * n * out_bits / 8.0
    structure = nnz * (INDEX_BYTES + a_bits / 8.0) + (m + 1) * INDEX_BYTES
    reuse = jnp.maximum(nnz - k, 0.0) * n * w_bits / 8.0
    return Stage("spmm", nnz * n, jnp.maximum(_f32(a_bits), _f32(w_bits)), structure + w_bytes + out_bytes, reuse,
                 w_bytes, k, None, w_bytes + out_bytes, gathered_rows=nnz, output_rows=m, output_bytes=out_bytes,
                 serial=True, weight_gemm=True)


def upcast_gemm_stages(m, k, n, bits, compute_bits=32.0) -> tuple[Stage, Stage, Stage, Stage]:
    """A ``bits``-bit GEMM ``[m, k] @ [k, n]`` on an engine without a ``bits``-bit path: both
    operands are converted to ``compute_bits`` first, the product runs at ``compute_bits`` and
    the result is converted back. This is how XLA:CPU runs a bf16 dot (the optimized HLO of
    ``jnp.dot`` on bf16 operands, JAX 0.10.2: two ``convert`` loop fusions to f32, an f32 dot
    (YNNPACK fusion), a ``convert`` of the result back to bf16), measured 1.7-6x slower than the
    f32 dot here.

    Args:
      m, k, n: GEMM sizes (float or traced).
      bits: operand and result bit-width in memory.
      compute_bits: the engine's precision (32 = fp32).

    Returns:
      ``(convert A, convert B, GEMM, convert result)``: three "elementwise" stages (one op per
      element, reading ``bits`` and writing ``compute_bits`` bits per element, or the reverse for
      the result) around a `gemm_stage` at ``compute_bits``.

    Raises:
      ValueError: as `gemm_stage`.
    """
    _counts("upcast_gemm_stages", m=m, k=k, n=n)
    _bits("upcast_gemm_stages", bits=bits, compute_bits=compute_bits)
    m, k, n = _f32(m), _f32(k), _f32(n)
    bits, compute_bits = _f32(bits), _f32(compute_bits)
    zero = jnp.zeros((), jnp.float32)

    def convert(elements):
        return Stage("elementwise", elements, compute_bits, elements * (bits + compute_bits) / 8.0, zero, zero)

    return (convert(m * k), convert(k * n), gemm_stage(m, k, n, compute_bits, compute_bits, compute_bits),
            convert(m * n))


def _locality_fields(locality: Optional[LocalityProfile], access_scale, n_rows):
    if locality is None:
        return _f32(n_rows), None
    return _f32(n_rows), stack_distance_rows(locality, _f32(access_scale))


def spmm_stage(n_rows, nnz, width, x_bits, out_bits, locality: Optional[LocalityProfile] = None,
               access_scale=1.0) -> Stage:
    """CSR SpMM ``A[n_rows, n_rows] @ X[n_rows, width]`` with ``nnz`` stored nonzeros (a fused
    kernel: Pallas / cuSPARSE style).

    Reads the CSR structure (indptr, indices, values) and X once (compulsory); every nonzero
    beyond the first per row re-gathers an X row (``reuse_bytes``), which hits on chip according
    to ``locality`` (measured reuse profile; None = uniform) with reuse times scaled by
    ``access_scale`` (the kept edge fraction). The kernel loops over the ``n_rows`` output rows
    (``output_rows``, each paying ``HardwareSpec.row_overhead_s``), as scipy's ``csr_matvecs``
    (``csr_matrix @ ndarray``: per row, per stored nonzero an axpy of one X row into the row's
    output) does.

    Raises:
      ValueError: as `gemm_stage`; ``access_scale`` outside [0, 1].
    """
    _counts("spmm_stage", n_rows=n_rows, nnz=nnz, width=width)
    _bits("spmm_stage", x_bits=x_bits, out_bits=out_bits)
    check_density(access_scale, "spmm_stage(access_scale)")
    n_rows, nnz, width = _f32(n_rows), _f32(nnz), _f32(width)
    x_bytes = n_rows * width * x_bits / 8.0
    out_bytes = n_rows * width * out_bits / 8.0
    structure = nnz * (INDEX_BYTES + VALUE_BYTES) + (n_rows + 1) * INDEX_BYTES
    reuse = jnp.maximum(nnz - n_rows, 0.0) * width * x_bits / 8.0
    rows, dist = _locality_fields(locality, access_scale, n_rows)
    cv, dmax = (None, None) if locality is None else (locality.in_degree_cv, locality.max_in_degree)
    if dmax is not None:
        dmax = dmax * _f32(access_scale)
    return Stage("spmm", nnz * width, _f32(x_bits), structure + x_bytes + out_bytes, reuse, x_bytes,
                 rows, dist, x_bytes + out_bytes, gathered_rows=nnz, in_degree_cv=cv, max_in_degree=dmax,
                 output_rows=n_rows, output_bytes=out_bytes, serial=True)


def segment_spmm_stages(n_rows, nnz, width, x_bits, out_bits, locality: Optional[LocalityProfile] = None,
                        access_scale=1.0, message_bits=None) -> tuple[Stage, Stage]:
    """XLA's gather + ``segment_sum`` SpMM: the `spmm_stage` traffic plus a message buffer
    [nnz, width] that the gather writes and the scatter-add reads back. The buffer's
    ``2 * nnz * width * message_bits / 8`` bytes stay on chip in proportion to how much of it
    fits (uniform capacity model), so small graphs pay nothing for it and large ones pay it in
    DRAM.

    ``message_bits`` (default ``x_bits``): the width of a buffered message. XLA:CPU gathers
    16-bit features into an f32 buffer and scatter-adds in f32, rounding each sum to bf16 (the
    optimized HLO of ``segment_sum(x[s], r)`` on bf16 ``x``, JAX 0.10.2: the gather fusion
    converts each element to f32, rounds it through bf16 and back, and the scatter's add
    rounds every partial sum through bf16 and back): there it is 32, and each message element
    costs `CONVERTS_PER_UPCAST_MESSAGE` conversion ops on the vector units.

    The buffer costs vector work as well as bytes: the gather stores each message element and
    the scatter-add loads it back (`MESSAGE_OPS_PER_ELEMENT` ops per element, on top of the
    conversions). Unlike a CSR kernel, XLA loops over the ``nnz`` messages, not over output
    rows, so the ``spmm`` stage has no ``output_rows`` (no ``row_overhead_s``).

    Returns:
      ``(spmm, messages)``; ``messages`` is an "elementwise" stage of
      ``MESSAGE_OPS_PER_ELEMENT * nnz * width`` ops plus those conversions (none when
      ``message_bits`` equals ``x_bits``), each charged the energy of one MAC at
      ``message_bits`` (an upper bound: a store, load or convert is cheaper than a
      multiply-add).

    Raises:
      ValueError: as `spmm_stage`, also for ``message_bits``.
    """
    if message_bits is not None:
        _bits("segment_spmm_stages", message_bits=message_bits)
    spmm = spmm_stage(n_rows, nnz, width, x_bits, out_bits, locality, access_scale)
    spmm = dataclasses.replace(spmm, output_rows=jnp.zeros((), jnp.float32), output_bytes=jnp.zeros((), jnp.float32))
    bits = _f32(x_bits if message_bits is None else message_bits)
    elements = _f32(nnz) * _f32(width)
    msg = elements * bits / 8.0
    converts = jnp.where(bits != _f32(x_bits), CONVERTS_PER_UPCAST_MESSAGE * elements, 0.0)
    ops = MESSAGE_OPS_PER_ELEMENT * elements + converts
    zero = jnp.zeros((), jnp.float32)
    return spmm, Stage("elementwise", ops, bits, zero, 2.0 * msg, msg, serial=True)


BSR_FEATURE_TILE = 64  # `codesign.kernels.BlockSizes().block_f`: feature columns per Pallas program


def bsr_spmm_stage(n_rows, nnz_blocks, block_size: int, width, x_bits, out_bits,
                   locality: Optional[LocalityProfile] = None, access_scale=1.0,
                   feature_tile: int = BSR_FEATURE_TILE) -> Stage:
    """Block-sparse (BSR) SpMM as `codesign.kernels.bsr_spmm` runs it: ``nnz_blocks`` stored
    B x B tiles, each a dense tile product on the matrix engine (B*B*width MACs, zeros inside
    tiles included), one program per (block row, feature tile of ``feature_tile`` columns).

    Reads tile values (fp32) + one block-column index per tile once *per feature tile* (each
    program re-reads its block row's tiles: ``max(1, width / feature_tile)`` passes, the kernel's
    ``ceil(width / tile)`` at multiples of the tile and its linear interpolation between), X once,
    and re-gathers a B x width slab of X per tile beyond the first of its block row;
    ``locality`` is the profile of the *block* gather stream (rows = block rows), None = uniform.
    The product runs at the precision the kernel computes in (`Stage.bits`): 16-bit features
    in 16-bit float, 32-bit in fp32 (TF32 tensor cores on GPUs, XLA's default), and int8 (<= 8
    bit) features dequantized to f32 inside the kernel, so at the fp32/TF32 rate, not INT8
    (`codesign.kernels.bsr_spmm_int8`); the charged rate jumps at 8 bits (the int8 path is
    slower than bf16), which the gradient with respect to bits does not see.

    Raises:
      ValueError: as `gemm_stage`; ``block_size`` or ``feature_tile`` not an int >= 1;
        ``access_scale`` outside [0, 1].
    """
    if isinstance(feature_tile, bool) or not isinstance(feature_tile, (int, np.integer)) or feature_tile < 1:
        raise ValueError(f"bsr_spmm_stage(feature_tile): must be an int >= 1, got {feature_tile!r}")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"bsr_spmm_stage(block_size): must be an int >= 1, got {block_size!r}")
    _counts("bsr_spmm_stage", n_rows=n_rows, nnz_blocks=nnz_blocks, width=width)
    _bits("bsr_spmm_stage", x_bits=x_bits, out_bits=out_bits)
    check_density(access_scale, "bsr_spmm_stage(access_scale)")
    n_rows, nnzb, width = _f32(n_rows), _f32(nnz_blocks), _f32(width)
    b = float(block_size)
    block_rows = n_rows / b
    x_bytes = n_rows * width * x_bits / 8.0
    out_bytes = n_rows * width * out_bits / 8.0
    passes = jnp.maximum(1.0, width / float(feature_tile))  # feature tiles: each re-reads the tiles
    structure = passes * nnzb * (INDEX_BYTES + b * b * VALUE_BYTES) + (block_rows + 1) * INDEX_BYTES
    reuse = jnp.maximum(nnzb - block_rows, 0.0) * b * width * x_bits / 8.0
    rows, dist = _locality_fields(locality, access_scale, block_rows)
    xb = _f32(x_bits)
    compute_bits = jnp.where(xb <= 8.0, 32.0, xb)  # int8: dequantized, TF32 dot
    return Stage("bsr", nnzb * b * b * width, compute_bits, structure + x_bytes + out_bytes, reuse, x_bytes,
                 rows, dist, x_bytes + out_bytes, gathered_rows=nnzb * passes)


def attention_stages(n_rows, nnz, heads, head_dim, x_bits, out_bits,
                     locality: Optional[LocalityProfile] = None, access_scale=1.0) -> tuple[Stage, ...]:
    """GAT attention (Velickovic et al., ICLR 2018) over ``nnz`` edges and ``heads`` heads:
    SDDMM of per-node score terms (one add + LeakyReLU per edge and head), edge softmax
    (`SOFTMAX_OPS_PER_EDGE`), and the attention-weighted SpMM over ``heads * head_dim`` columns.

    Raises:
      ValueError: as `spmm_stage`.
    """
    _counts("attention_stages", heads=heads, head_dim=head_dim)
    nnz, heads = _f32(nnz), _f32(heads)
    n_rows = _f32(n_rows)
    score_bytes = nnz * heads * 4.0  # fp32 scores written by the SDDMM, read by the softmax
    zero = jnp.zeros((), jnp.float32)
    sddmm = Stage("sddmm", nnz * heads * 2.0, _f32(32.0),
                  nnz * INDEX_BYTES + 2.0 * n_rows * heads * 4.0 + score_bytes, zero, zero, gathered_rows=nnz)
    softmax = Stage("softmax", nnz * heads * SOFTMAX_OPS_PER_EDGE, _f32(32.0), 2.0 * score_bytes, zero, zero)
    spmm = spmm_stage(n_rows, nnz, heads * _f32(head_dim), x_bits, out_bits, locality, access_scale)
    return sddmm, softmax, spmm


def elementwise_stage(n, width, bits, ops=1.0, epilogue_reads=0.0) -> Stage:
    """``ops`` elementwise operations per element of ``[n, width]`` (bias, activation, channel
    gate): ``ops * n * width`` ops; read once and written once where a compiler fuses them into one
    loop (XLA), one read and one write per op where the executor does not
    (``HardwareSpec.fuses_elementwise`` False: numpy; ``Stage.passes`` = ``ops``).

    Where the target fuses epilogues (``HardwareSpec.fuses_epilogue``) the stage runs inside the
    kernel that produced ``[n, width]`` and moves only ``Stage.epilogue_bytes``:
    ``epilogue_reads`` more ``[n, width]`` operands at ``bits`` that live in DRAM (GraphSAGE's
    root term, added as cuBLASLt adds ``C`` with ``beta = 1``), plus a 1-bit activation mask per
    element (cuBLASLt's ``CUBLASLT_EPILOGUE_RELU_AUX`` writes it for the backward's
    ``CUBLASLT_EPILOGUE_DRELU_BGRAD``; NVIDIA cuBLAS documentation, ``cublasLtEpilogue_t``).
    ASSUMPTION: the mask is charged on every such stage, in inference too and on an output
    layer that has no activation (n * width / 8 bytes: 1/64 of the unfused fp32 stage's bytes),
    which keeps one rule for the forward and autograd's backward (`autograd_training` doubles
    it: written forward, read backward).

    Raises:
      ValueError: as `gemm_stage`; ``ops`` below 1; ``epilogue_reads`` below 0.
    """
    _counts("elementwise_stage", n=n, width=width, epilogue_reads=epilogue_reads)
    _bits("elementwise_stage", bits=bits)
    if isinstance(ops, (int, float)) and ops < 1:
        raise ValueError(f"elementwise_stage(ops): must be >= 1, got {ops!r}")
    n, width = _f32(n), _f32(width)
    zero = jnp.zeros((), jnp.float32)
    fused = n * width * (_f32(epilogue_reads) * _f32(bits) / 8.0 + ACTIVATION_MASK_BYTES)
    return Stage("elementwise", _f32(ops) * n * width, _f32(bits), 2.0 * n * width * bits / 8.0, zero, zero,
                 passes=_f32(ops), epilogue_bytes=fused)


def message_passing_layer(name: str, n_nodes: int, nnz, in_dim, out_dim, x_bits, w_bits, out_bits,
                          locality: Optional[LocalityProfile] = None,
                          edge_density=1.0, nnz_blocks=None, block_size: Optional[int] = None,
                          in_nnz=None) -> LayerWorkload:
    """Workload of one forward of ``act(A_hat @ X @ W + b)`` for one layer (the training step:
    `autograd_training` of the model's `Workload`).

    Args:
      name: layer name used in reports.
      n_nodes: N.
      nnz: stored nonzeros of A_hat (kept edges + self-loops); float, may be an expected count.
      in_dim: K, kept input columns (may be expected: density x width).
      out_dim: F, output columns.
      x_bits, w_bits, out_bits: bit-widths of input features, weights and outputs (32 = fp32).
      locality: the graph's measured `LocalityProfile` (None = uniform re-reference).
      edge_density: kept fraction of the graph's edges (shortens reuse times).
      nnz_blocks, block_size: if given, the aggregation runs as the block-sparse (BSR) kernel
        over ``nnz_blocks`` kept B x B tiles (`bsr_spmm_stage`, uniform block re-reference) --
        the workload of a `codesign.sparsify.BlockEdgeMask` model -- instead of the COO SpMM.
      in_nnz: stored nonzeros of X when it is stored CSR (`input_gemm_stage`); the layer then
        runs combine-first in both orders (no sparse x sparse product). None = X stored dense.

    Returns:
      `LayerWorkload` with both dataflow orders.

    Raises:
      ValueError: ``nnz_blocks`` without ``block_size`` or the reverse; ``edge_density`` outside
        [0, 1]; a count or bit-width out of range (see `gemm_stage`).
    """
    if (nnz_blocks is None) != (block_size is None):
        raise ValueError(f"message_passing_layer: give both nnz_blocks and block_size or neither, "
                         f"got {nnz_blocks=}, {block_size=}")
    check_density(edge_density, "message_passing_layer(edge_density)")
    if nnz_blocks is None:
        def agg(width, bits_in, bits_out):
            return spmm_stage(n_nodes, nnz, width, bits_in, bits_out, locality, edge_density)
    else:
        def agg(width, bits_in, bits_out):
            return bsr_spmm_stage(n_nodes, nnz_blocks, block_size, width, bits_in, bits_out)
    gemm = input_gemm_stage(n_nodes, in_dim, out_dim, x_bits, w_bits, out_bits, in_nnz)
    comb_then = (gemm, agg(out_dim, out_bits, out_bits))
    agg_then = comb_then if in_nnz is not None else (agg(in_dim, x_bits, x_bits), gemm)
    elem = (elementwise_stage(n_nodes, out_dim, out_bits),)
    return LayerWorkload(name, tuple(agg_then), tuple(comb_then), tuple(elem))


INPUT_LAYER_NAMES = ("layer0", "mlp0")
"""Names of a model's first layer, the one that reads the graph's input features (`autograd_training`):
``layer0`` (its parts ``layer0.<part>`` / ``layer0/<part>`` too, except `HIDDEN_INPUT_PARTS`), or
``mlp0`` where a model starts with an MLP (APPNP)."""
HIDDEN_INPUT_PARTS = ("mlp", "basis")
"""Parts of the first layer that do not read the input features: GIN's ``layer0.mlp`` (a hidden
activation) and R-GCN's ``layer0/basis`` (composes ``W_r`` from parameters)."""


def reads_graph_input(name: str) -> bool:
    """Whether a `LayerWorkload` named ``name`` reads the graph's input features
    (`INPUT_LAYER_NAMES`, `HIDDEN_INPUT_PARTS`)."""
    head, sep, part = name.replace("/", ".").partition(".")
    return head in INPUT_LAYER_NAMES and (not sep or part.split(".")[0] not in HIDDEN_INPUT_PARTS)


def autograd_training(workload: "Workload", learned_edge_weights: bool) -> "Workload":
    """The training step (forward + backward) of an inference ``workload`` as reverse-mode autodiff
    runs it on a fixed graph whose input features need no gradient (DGL / PyTorch / JAX:
    ``X.requires_grad`` is False, ``jax.grad`` w.r.t. the parameters only), per layer and dataflow
    order. This is the one training-cost rule: every model's ``workload(training=True)`` and
    `codesign.vertex.Program.workload` with ``training`` return it.

    * a GEMM ``Y = X W`` (a "gemm" stage, or one marked `Stage.weight_gemm`) costs its forward,
      ``dW = X^T dY`` and ``dX = dY W^T``, except that ``dX`` is skipped where X is the graph's
      input: a GEMM of a layer that reads it (`reads_graph_input`: ``layer0``, ``layer0.<part>``,
      ``layer0/<part>``, ``mlp0``) that no GEMM precedes in its order (x2 there, x3 elsewhere);
    * an aggregation ("spmm" / "bsr") ``Z = A H`` costs its forward and ``dH = A^T dZ`` (one more
      aggregation) unless H is the graph's input (same condition: ``A X`` is kept for ``dW`` and
      no ``dX`` is formed); ``learned_edge_weights`` adds ``dA`` on the stored edges
      (``dA_ij = dZ_i . H_j``: nnz x F MACs, counted as one more aggregation of the same size);
    * SDDMM, softmax and elementwise stages x2 (their backward is one more pass of the same size).
    A two-layer aggregate-first GCN thus runs 3 aggregations per epoch (2 forward, 1 backward),
    the count GNNear's simulator charges (PKUZHOU/GNNear-PACT-2022 @ 9420d929,
    simulation/GNNear_simulator.py ``calculate_backward_cycles``: the last layer's backward "do not
    need to reduce", the first layer's reduces once).

    Args:
      workload: an inference `Workload` (``training`` False).
      learned_edge_weights: whether the edge weights get a gradient, i.e. whether ``dA`` is
        formed: True for attention (GAT) and for a model whose edge sparsifier has trainable
        parameters (its gates multiply the messages: `codesign.models.layers.learns_edge_weights`);
        False for GCN / SAGE / GIN / APPNP / R-GCN's fixed normalization or sum.

    Returns:
      a `Workload` with ``training`` True.

    Raises:
      ValueError: ``workload`` is already a training workload.
    """
    if workload.training:
        raise ValueError("autograd_training(workload): needs an inference workload, got training=True")

    def order(stages, from_input: bool):
        out, seen_gemm = [], False
        for s in stages:
            on_input = from_input and not seen_gemm
            if s.kind == "gemm" or s.weight_gemm:
                out.append(s.scaled(2.0 if on_input else 3.0))
                seen_gemm = True
            elif s.kind in ("spmm", "bsr"):
                out.append(s.scaled((1.0 if on_input else 2.0) + (1.0 if learned_edge_weights else 0.0)))
            else:  # sddmm, softmax, elementwise
                out.append(s.scaled(2.0))
        return tuple(out)

    layers = tuple(LayerWorkload(L.name, order(L.aggregate_first, reads_graph_input(L.name)),
                                 order(L.combine_first, reads_graph_input(L.name)), order(L.elementwise, False))
                   for L in workload.layers)
    return Workload(layers, True)


# DRAM / L2 access granularity of NVIDIA GPUs (CUDA C++ Programming Guide, "Device Memory Accesses")
GPU_SECTOR_BYTES = 32


def csr_chunk_spmm_stages(n_rows, nnz, width, x_bits, out_bits, *, edge_values: bool = True, node_scales: int = 0,
                          split_rows=0.0, slots=0.0, locality: Optional[LocalityProfile] = None, access_scale=1.0,
                          sector_bytes: int = GPU_SECTOR_BYTES) -> tuple[Stage, ...]:
    """The Pallas CSR edge-chunk SpMM (`codesign.kernels.pallas_csr`) as it is implemented: one
    "spmm" stage for the main kernel, plus, where heavy rows are split, the combine pass and the
    scatter of the combined rows into Y.

    Compulsory bytes of the main kernel: row pointers ``(n_rows + 1) * 4``, column ids
    ``nnz * 4``, edge values ``nnz * 4`` (only with ``edge_values``; GCN folding loads none),
    ``node_scales`` f32 node vectors (0, 1 or 2: col / row scale, int8 dequantization scale),
    X once with each row rounded up to whole ``sector_bytes`` sectors (a gathered row moves
    whole sectors), Y once, and the heavy rows' f32 partial sums (``slots`` rows written).
    Every nonzero beyond the first per row re-gathers a sector-rounded X row (``reuse_bytes``;
    hits in L2 by ``locality``, None = uniform). The combine pass reads the ``slots`` partial
    rows and writes ``split_rows`` rows, which the scatter reads and writes into Y.

    Args:
      n_rows, nnz, width: rows of A (= rows of X), stored nonzeros, feature columns F.
      x_bits, out_bits: bits per X / Y element (int8 features: 8; Y is f32 then: 32).
      edge_values: per-edge values loaded (False: unweighted or GCN-folded).
      node_scales: number of f32 node vectors gathered or read (col scale, row scale).
      split_rows, slots: heavy rows and their partial-sum slots (`work_item_stats`); 0: no split.
      locality, access_scale: as in `spmm_stage`.
      sector_bytes: access granularity (bytes); 32 on NVIDIA GPUs.

    Returns:
      ``(spmm,)`` or, with split rows, ``(spmm, combine, scatter)`` ("spmm", "spmm", "elementwise").
      The sector rounding is a straight-through estimate: the value is rounded, the gradient
      w.r.t. ``width`` is that of the unrounded row bytes.

    Raises:
      ValueError: as `spmm_stage`; ``node_scales`` not 0, 1 or 2; ``sector_bytes`` < 1.
    """
    _counts("csr_chunk_spmm_stages", n_rows=n_rows, nnz=nnz, width=width, split_rows=split_rows, slots=slots)
    _bits("csr_chunk_spmm_stages", x_bits=x_bits, out_bits=out_bits)
    check_density(access_scale, "csr_chunk_spmm_stages(access_scale)")
    if node_scales not in (0, 1, 2):
        raise ValueError(f"csr_chunk_spmm_stages(node_scales): must be 0, 1 or 2, got {node_scales!r}")
    if isinstance(sector_bytes, bool) or not isinstance(sector_bytes, (int, np.integer)) or sector_bytes < 1:
        raise ValueError(f"csr_chunk_spmm_stages(sector_bytes): must be an int >= 1, got {sector_bytes!r}")
    no_split = not isinstance(split_rows, jax.core.Tracer) and float(split_rows) == 0.0
    n_rows, nnz, width = _f32(n_rows), _f32(nnz), _f32(width)
    split_rows, slots = _f32(split_rows), _f32(slots)
    row_bytes = width * x_bits / 8.0
    row_sectors = row_bytes + jax.lax.stop_gradient(jnp.ceil(row_bytes / sector_bytes) * sector_bytes - row_bytes)
    x_bytes = n_rows * row_sectors
    out_bytes = n_rows * width * out_bits / 8.0
    partial_bytes = slots * width * 4.0
    structure = (n_rows + 1) * INDEX_BYTES + nnz * (INDEX_BYTES + (VALUE_BYTES if edge_values else 0.0)) \
        + node_scales * n_rows * 4.0
    reuse = jnp.maximum(nnz - n_rows, 0.0) * row_sectors
    rows, dist = _locality_fields(locality, access_scale, n_rows)
    spmm = Stage("spmm", nnz * width, _f32(x_bits), structure + x_bytes + out_bytes + partial_bytes, reuse, x_bytes,
                 rows, dist, x_bytes + out_bytes, gathered_rows=nnz)
    if no_split:
        return (spmm,)
    zero = jnp.zeros((), jnp.float32)
    split_out = split_rows * width * out_bits / 8.0
    combine = Stage("spmm", slots * width, _f32(32.0),
                    (split_rows + 1) * INDEX_BYTES + slots * INDEX_BYTES + partial_bytes + split_out, zero, zero,
                    gathered_rows=slots)
    scatter = Stage("elementwise", zero, _f32(out_bits), 2.0 * split_out + split_rows * INDEX_BYTES, zero, zero)
    return spmm, combine, scatter
