"""`HardwareSpec`: a hardware target as frozen data, and the per-op energy table.

Every number carries its unit in its name. A spec is a JAX pytree whose numeric fields are
leaves, so the cost (`codesign.hwmodel.estimate`) is differentiable with respect to continuous
hardware parameters (bandwidths, buffer size, energies) as well as to the workload.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

PJ = 1e-12  # joules per picojoule
BITS_PER_BYTE = 8.0

# Horowitz, "Computing's energy problem (and what we can do about it)", ISSCC 2014, Fig. 1.1.9
# (45 nm, 0.9 V): energy per operation in pJ.
HOROWITZ_INT8_MULT_PJ = 0.2
HOROWITZ_INT8_ADD_PJ = 0.03
HOROWITZ_FP16_MAC_PJ = 1.1 + 0.4  # fp16 mult + fp16 add
HOROWITZ_FP32_MAC_PJ = 3.7 + 0.9  # fp32 mult + fp32 add
# Same table: 64-bit access of a 1 MB SRAM = 100 pJ; DRAM = 1.3-2.6 nJ per 64-bit access.
HOROWITZ_SRAM_1MB_PJ_PER_BYTE = 100.0 / 8
HOROWITZ_DRAM_PJ_PER_BYTE = 1300.0 / 8


def validate_numbers(obj, owner: str, nonnegative=(), fractions=()) -> dict:
    """Checks the numeric fields of a frozen spec dataclass; returns the concrete ones as floats.

    Python and NumPy numbers are user input and are checked (ints become floats, so that jax.grad
    can differentiate every field). JAX arrays are left alone: they are tracers or spec-shaped
    trees of gradients, whose values need not be valid hardware numbers. None marks an absent
    optional part.

    Fields in ``nonnegative`` must be finite and >= 0, those in ``fractions`` finite and in
    (0, 1], every other one finite and > 0.

    Raises:
      TypeError: a bool, str or non-scalar array (naming ``<owner>.<field>``).
      ValueError: a number outside its range or not finite (naming ``<owner>.<field>``).
    """
    concrete = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.metadata.get("static") or v is None or isinstance(v, jax.Array) or dataclasses.is_dataclass(v):
            continue
        if not isinstance(v, (bool, str, int, float, np.number, np.ndarray)):
            continue  # placeholders JAX puts in pytree round trips (sentinels)
        if isinstance(v, (bool, str)) or np.ndim(v) != 0:
            raise TypeError(f"{owner}.{f.name}: must be a real number, got {v!r}")
        v = float(v)
        ok = math.isfinite(v) and (v >= 0 if f.name in nonnegative else v > 0)
        if ok and f.name in fractions:
            ok = v <= 1.0
        if not ok:
            need = ">= 0" if f.name in nonnegative else "in (0, 1]" if f.name in fractions else "> 0"
            raise ValueError(f"{owner}.{f.name}: must be finite and {need}, got {v!r}")
        object.__setattr__(obj, f.name, v)
        concrete[f.name] = v
    return concrete


HOST_NONNEGATIVE = ("stage_overhead_s", "row_gather_overhead_s", "dram_energy_pj_per_byte", "onchip_buffer_bytes",
                    "sram_energy_pj_per_byte", "mac_energy_int8_pj", "mac_energy_fp32_pj")
"""`HardwareSpec` fields that may be 0 (no overhead, a free access, no on-chip buffer); every other
number must be > 0 (rates, bandwidths, clock) or in (0, 1] (efficiencies)."""
NMP_NONNEGATIVE = ("mac_energy_pj", "internal_energy_pj_per_byte", "buffer_bytes", "host_link_energy_pj_per_byte")
"""`NearMemorySpec` fields that may be 0; the others (units, bandwidths, rates) must be > 0."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class NearMemorySpec:
    """Near-memory processing (NMP) units beside the DRAM arrays (per-rank, per-bank or per-DPU).

    Aggregation mapped here reads its operands over each unit's internal bandwidth; only the
    reduced result (and the features the host writes) cross the host link.

    Fields (per unit unless noted):
      units: number of NMP units working in parallel.
      internal_bw_bytes_per_s: DRAM bandwidth one unit sees (rank/bank/MRAM bandwidth).
      int_macs_per_s: MAC rate for integer operands (< 32 bits).
      fp32_macs_per_s: MAC rate for fp32 operands (software-emulated on some PIM cores).
      mac_energy_pj: energy of one MAC on the unit.
      internal_energy_pj_per_byte: energy of an internal DRAM access (no off-chip I/O).
      buffer_bytes: the unit's local buffer (scratchpad/WRAM) that can keep re-used rows.
      host_link_bw_bytes_per_s: total bandwidth between the host and all units (memory channels).
      host_link_energy_pj_per_byte: energy per byte across that link.

    Raises:
      ValueError: naming the field, for a value that is not finite and positive (energies and
        ``buffer_bytes``: finite and >= 0).
      TypeError: naming the field, for a bool, str or non-scalar array.
    """

    units: float
    internal_bw_bytes_per_s: float
    int_macs_per_s: float
    fp32_macs_per_s: float
    mac_energy_pj: float
    internal_energy_pj_per_byte: float
    buffer_bytes: float
    host_link_bw_bytes_per_s: float
    host_link_energy_pj_per_byte: float

    def __post_init__(self):
        validate_numbers(self, "NearMemorySpec", nonnegative=NMP_NONNEGATIVE)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class HardwareSpec:
    """A compute device with one DRAM level, one on-chip buffer and optional near-memory units.

    Throughputs are multiply-accumulates (MAC) per second; one MAC = 2 FLOP.

    Fields:
      name: preset name (static).
      matrix_fp32_macs_per_s, matrix_bf16_macs_per_s, matrix_int8_macs_per_s,
      matrix_int4_macs_per_s: peak dense-GEMM rate of the matrix engine (tensor cores / SIMD FMA)
        for operands of > 16, 9-16, 5-8 and <= 4 bits.
      vector_fp32_macs_per_s: rate of the vector units, which run the sparse aggregation
        (gather + multiply-add) for fp32 operands.
      vector_bf16_macs_per_s, vector_int8_macs_per_s: their rates for 9-16 and <= 8-bit operands;
        None = SIMD lane packing (2x and 4x the fp32 rate).
      dram_bw_bytes_per_s: off-chip memory bandwidth.
      dram_energy_pj_per_byte: off-chip access energy.
      onchip_buffer_bytes: capacity of the last-level on-chip buffer (cache/scratchpad) that
        holds re-used feature rows during aggregation.
      sram_energy_pj_per_byte: on-chip buffer access energy.
      mac_energy_int8_pj, mac_energy_fp32_pj: energy of one MAC; integer MACs of b bits cost
        ``mac_energy_int8_pj * ((b/8)**2 * m + (b/8) * (1 - m))`` with ``m`` the multiplier's
        share at 8 bit (array multiplier ~ b^2, adder ~ b; Horowitz ISSCC'14).
      onchip_bw_bytes_per_s: on-chip buffer bandwidth, a third roof on every stage's on-chip
        traffic; None = not a limit.
      matrix_efficiency, vector_efficiency, dram_efficiency: achieved fraction (0, 1] of the
        peak rates; 1 for datasheet presets, fitted for measured ones
        (`experiments/hwmodel_validation.py`).
      overlap_exponent: the exponent ``p`` of the smooth max that joins a host stage's compute,
        DRAM and on-chip times, ``(sum t_i^p)^(1/p)``, >= 1: large ``p`` is the roofline's full
        overlap (max; default 16, within 4.4 % of it), ``p = 1`` no overlap (the sum, as the ECM
        model assumes for in-core work and data transfers on x86 cores: Treibig & Hager,
        "Introducing a performance model for bandwidth-limited loop kernels", PPAM 2009);
        fitted for measured presets.
      gather_efficiency: a further fraction (0, 1] of the vector rate on the irregular stages
        (SpMM gather / scatter-add, SDDMM, edge softmax: `estimate.IRREGULAR_KINDS`), which
        run below the streaming elementwise rate where the scatter is serial (XLA:CPU's
        scatter-add is a scalar loop); 1 for datasheet presets, fitted for measured ones.
      stage_overhead_s: fixed time per stage (kernel launch / op dispatch), >= 0.
      row_gather_overhead_s: fixed time per gathered row on the host (index load, address
        computation and loop control of a gather or scatter-add, paid once per row whatever its
        width), added to a stage's compute time for its ``Stage.gathered_rows``, >= 0; 0 for
        datasheet presets, fitted for measured ones. This is what makes narrow SpMMs slower per
        element than wide ones.
      clock_hz: core clock, used by the area/power model (None if not modeled).
      nmp: `NearMemorySpec` or None.
      fp32_only: the datapath computes in fp32 at every operand width (static): narrow operands
        then save memory traffic and storage, not MAC energy (`mac_energy_pj`); give the rates
        of every precision equal to the fp32 ones as well.

    Raises:
      ValueError: naming the field, if a number is not finite and positive (efficiencies in
        (0, 1]; overheads, energies and onchip_buffer_bytes >= 0: `HOST_NONNEGATIVE`), if
        overlap_exponent < 1, or if int8 MACs are costlier than fp32 ones.
      TypeError: naming the field, for a bool, str or non-scalar array.
    """

    name: str = dataclasses.field(metadata=dict(static=True))
    matrix_fp32_macs_per_s: float
    matrix_bf16_macs_per_s: float
    matrix_int8_macs_per_s: float
    matrix_int4_macs_per_s: float
    vector_fp32_macs_per_s: float
    dram_bw_bytes_per_s: float
    dram_energy_pj_per_byte: float
    onchip_buffer_bytes: float
    sram_energy_pj_per_byte: float = HOROWITZ_SRAM_1MB_PJ_PER_BYTE
    mac_energy_int8_pj: float = HOROWITZ_INT8_MULT_PJ + HOROWITZ_INT8_ADD_PJ
    mac_energy_fp32_pj: float = HOROWITZ_FP32_MAC_PJ
    onchip_bw_bytes_per_s: Optional[float] = None
    vector_bf16_macs_per_s: Optional[float] = None
    vector_int8_macs_per_s: Optional[float] = None
    matrix_efficiency: float = 1.0
    vector_efficiency: float = 1.0
    dram_efficiency: float = 1.0
    gather_efficiency: float = 1.0
    overlap_exponent: float = 16.0
    stage_overhead_s: float = 0.0
    row_gather_overhead_s: float = 0.0
    clock_hz: Optional[float] = None
    nmp: Optional[NearMemorySpec] = None
    fp32_only: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def __post_init__(self):
        concrete = validate_numbers(
            self, f"HardwareSpec({self.name!r})", nonnegative=HOST_NONNEGATIVE,
            fractions=("matrix_efficiency", "vector_efficiency", "dram_efficiency", "gather_efficiency"))
        if "overlap_exponent" in concrete and concrete["overlap_exponent"] < 1.0:
            raise ValueError(f"HardwareSpec({self.name!r}).overlap_exponent: must be >= 1 (1 = no overlap), "
                             f"got {concrete['overlap_exponent']!r}")
        # No ordering is imposed on the per-precision rates: software stacks make narrow types
        # slower (XLA:CPU bf16 GEMM measured up to 7x slower than f32 here, 2026-11-22).
        if ("mac_energy_int8_pj" in concrete and "mac_energy_fp32_pj" in concrete
                and concrete["mac_energy_int8_pj"] > concrete["mac_energy_fp32_pj"]):
            raise ValueError(f"HardwareSpec({self.name!r}).mac_energy_int8_pj: exceeds mac_energy_fp32_pj")

    def replace(self, **changes) -> "HardwareSpec":
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)


def matrix_macs_per_s(hw: HardwareSpec, bits) -> jax.Array:
    """Peak GEMM rate (MAC/s) for operands of ``bits`` bits (piecewise constant in bits)."""
    bits = jnp.asarray(bits, jnp.float32)
    return jnp.where(bits <= 4, hw.matrix_int4_macs_per_s,
                     jnp.where(bits <= 8, hw.matrix_int8_macs_per_s,
                               jnp.where(bits <= 16, hw.matrix_bf16_macs_per_s, hw.matrix_fp32_macs_per_s)))


def vector_macs_per_s(hw: HardwareSpec, bits) -> jax.Array:
    """Vector-unit rate (MAC/s) for ``bits``-bit operands (piecewise constant in bits)."""
    bits = jnp.asarray(bits, jnp.float32)
    bf16 = 2.0 * hw.vector_fp32_macs_per_s if hw.vector_bf16_macs_per_s is None else hw.vector_bf16_macs_per_s
    int8 = 4.0 * hw.vector_fp32_macs_per_s if hw.vector_int8_macs_per_s is None else hw.vector_int8_macs_per_s
    return jnp.where(bits <= 8, int8, jnp.where(bits <= 16, bf16, hw.vector_fp32_macs_per_s))


_INT8_MULT_SHARE = HOROWITZ_INT8_MULT_PJ / (HOROWITZ_INT8_MULT_PJ + HOROWITZ_INT8_ADD_PJ)


def mac_energy_pj(hw: HardwareSpec, bits) -> jax.Array:
    """Energy of one MAC in pJ at ``bits`` bits: floating point at >= 32 bits, else integer.

    The integer model is smooth in ``bits`` (multiplier ~ bits^2, adder ~ bits), so its
    gradient with respect to a learned bit-width is nonzero. Source: Horowitz ISSCC'14.
    A ``fp32_only`` datapath spends the fp32 energy at every operand width.
    """
    bits = jnp.asarray(bits, jnp.float32)
    if hw.fp32_only:
        return jnp.full(bits.shape, hw.mac_energy_fp32_pj, jnp.float32)
    r = bits / 8.0
    int_pj = hw.mac_energy_int8_pj * (_INT8_MULT_SHARE * r**2 + (1.0 - _INT8_MULT_SHARE) * r)
    return jnp.where(bits >= 32, hw.mac_energy_fp32_pj, int_pj)
