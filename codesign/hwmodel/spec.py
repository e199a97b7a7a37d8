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

from codesign.hwmodel.validate import register_checked_dataclass

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
# A TF32 tensor-core MAC (a matrix engine's fp32 tier on NVIDIA Ampere / Hopper: XLA's default f32
# matmul precision there): TF32 has fp16's 10-bit mantissa, so its multiplier is priced as Horowitz's
# fp16 multiplier (an array multiplier's energy grows ~ with the mantissa bits squared; the 8-bit
# exponent adds an adder of a few bits), and the tensor cores accumulate in fp32 (NVIDIA A100
# whitepaper, "TF32 ... accumulates in FP32"), priced as Horowitz's fp32 add: 1.1 + 0.9 = 2.0 pJ.
HOROWITZ_TF32_MAC_PJ = 1.1 + 0.9
HOROWITZ_NODE_NM = 45.0
HOROWITZ_VDD_V = 0.9  # Horowitz ISSCC'14, Fig. 1.1.9: "45nm, 0.9V"
# Stillmaker & Baas, "Scaling equations for the accurate prediction of CMOS device performance
# from 180 nm to 7 nm", Integration, the VLSI Journal 58 (2017) 74-81, Tables 4 / 5: energy per
# operation of a node relative to the others as a quadratic in the supply, E(node, Vdd) ~
# a Vdd^2 + b Vdd + c, fitted to HSPICE simulations on PTM (180-45 nm bulk; high-performance
# (HP) models from 45 nm) and ITRS-based models (14-7 nm). The coefficients (a, b, c) of the
# high-performance rows, as transcribed in the MIT-licensed ``nodeScale`` tool (UCLA NanoCAD,
# ``wromaszkan/nodeScale``); the paper's corrigendum example (HP32 at 0.9 V: 0.8367, -0.4341,
# 0.1701 -> 0.4571; 65 nm at 1.3 V -> 2.604) matches these rows.
STILLMAKER_ENERGY_COEFFS = {
    180.0: (0.0, 24.64, -17.98), 130.0: (7.171, -6.709, 2.904), 90.0: (4.762, -4.781, 2.092),
    65.0: (3.755, -4.398, 1.975), 45.0: (1.018, -0.3107, 0.1539), 32.0: (0.8367, -0.4341, 0.1701),
    20.0: (0.373, -0.1582, 0.04104), 16.0: (0.2958, -0.1241, 0.03024), 14.0: (0.2363, -0.09675, 0.02239),
    10.0: (0.2068, -0.09311, 0.02375), 7.0: (0.1776, -0.09097, 0.02447),
}
# Beyond 7 nm (the table's end) one more full node is extrapolated with TSMC's figure for N5
# against N7: "up to 30% power reduction at the same speed" (TSMC, N5 technology page / 2019
# announcement), i.e. x 0.7 energy per op per full node step (7 -> 5 nm), log-linear in the node
# in between. ASSUMPTION `presets.ASSUMPTIONS["N5_ENERGY_PER_NODE_STEP"]` (range 0.6-0.9).
N5_ENERGY_PER_NODE_STEP = 0.7


def _stillmaker_energy(node_nm: float, vdd_v: float) -> float:
    a, b, c = STILLMAKER_ENERGY_COEFFS[node_nm]
    return a * vdd_v**2 + b * vdd_v + c


def process_energy_scale(node_nm: float, vdd_v: float, per_step_below_7nm: float = N5_ENERGY_PER_NODE_STEP) -> float:
    """Energy per operation at ``node_nm`` / ``vdd_v`` over Horowitz's 45 nm / 0.9 V (ISSCC'14),
    from Stillmaker & Baas (2017)'s energy fits (`STILLMAKER_ENERGY_COEFFS`): the ratio of the
    fits at the two (node, Vdd) points. Between tabulated nodes the fit is interpolated
    log-linearly in the node (log energy linear in log node); below 7 nm, extrapolated from 7 nm by
    ``per_step_below_7nm`` per full node step 7 -> 5 nm (`N5_ENERGY_PER_NODE_STEP`, an ASSUMPTION).

    Raises:
      ValueError: ``node_nm`` outside [3, 180] or ``vdd_v`` outside [0.5, 1.8], or a fit that is
        not positive there.
    """
    node_nm, vdd_v = float(node_nm), float(vdd_v)
    if not (3.0 <= node_nm <= 180.0) or not (0.5 <= vdd_v <= 1.8):
        raise ValueError(f"process_energy_scale: node {node_nm} nm / Vdd {vdd_v} V outside the scaled range "
                         "(3-180 nm, 0.5-1.8 V)")
    ref = _stillmaker_energy(HOROWITZ_NODE_NM, HOROWITZ_VDD_V)
    if node_nm < 7.0:
        steps = math.log(7.0 / node_nm) / math.log(7.0 / 5.0)
        e = _stillmaker_energy(7.0, vdd_v) * per_step_below_7nm**steps
    elif node_nm in STILLMAKER_ENERGY_COEFFS:
        e = _stillmaker_energy(node_nm, vdd_v)
    else:
        nodes = sorted(STILLMAKER_ENERGY_COEFFS)
        hi = next(n for n in nodes if n > node_nm)
        lo = max(n for n in nodes if n < node_nm)
        elo, ehi = _stillmaker_energy(lo, vdd_v), _stillmaker_energy(hi, vdd_v)
        if elo <= 0 or ehi <= 0:
            raise ValueError(f"process_energy_scale: the fit is not positive at {lo}/{hi} nm, {vdd_v} V")
        t = math.log(node_nm / lo) / math.log(hi / lo)
        e = math.exp((1 - t) * math.log(elo) + t * math.log(ehi))
    if e <= 0:
        raise ValueError(f"process_energy_scale: the fit is not positive at {node_nm} nm, {vdd_v} V")
    return e / ref


def scaled_op_energies(node_nm: float, vdd_v: float, tf32_matrix: bool = False,
                       per_step_below_7nm: float = N5_ENERGY_PER_NODE_STEP) -> dict:
    """The per-operation energies of a `HardwareSpec` (MACs at every tier, SRAM access) at
    ``node_nm`` / ``vdd_v``: Horowitz ISSCC'14's 45 nm figures x `process_energy_scale`. The one
    mechanism every preset's logic energies come from. SRAM access energy is scaled by the same
    factor as logic (ASSUMPTION: a 1 MB SRAM access is wires and bit lines as much as
    transistors; it scales no better than logic). ``tf32_matrix``: the matrix engine's fp32 tier
    is a TF32 tensor-core MAC (`HOROWITZ_TF32_MAC_PJ`), else the matrix engine spends the fp32 MAC
    energy as the vector units do. DRAM energies are the memory's own, not scaled here."""
    s = process_energy_scale(node_nm, vdd_v, per_step_below_7nm)
    out = dict(mac_energy_int8_pj=(HOROWITZ_INT8_MULT_PJ + HOROWITZ_INT8_ADD_PJ) * s,
               mac_energy_bf16_pj=HOROWITZ_FP16_MAC_PJ * s, mac_energy_fp32_pj=HOROWITZ_FP32_MAC_PJ * s,
               sram_energy_pj_per_byte=HOROWITZ_SRAM_1MB_PJ_PER_BYTE * s)
    out["matrix_mac_energy_fp32_pj"] = HOROWITZ_TF32_MAC_PJ * s if tf32_matrix else None
    return out


def scaled_nmp_energies(node_nm: float, vdd_v: float, fp32_passes: float = 1.0, fp16_lanes_only: bool = False,
                        per_step_below_7nm: float = N5_ENERGY_PER_NODE_STEP) -> dict:
    """The MAC energies of a `NearMemorySpec` at ``node_nm`` / ``vdd_v`` (as `scaled_op_energies`):
    ``mac_energy_pj`` (fp32: ``fp32_passes`` x the fp32 MAC, or x the fp16 MAC with
    ``fp16_lanes_only``), ``int_mac_energy_pj`` (the int8 MAC, or the fp16 one on FP16-only lanes)
    and ``bf16_mac_energy_pj`` (the fp16 MAC)."""
    s = process_energy_scale(node_nm, vdd_v, per_step_below_7nm)
    fp16 = HOROWITZ_FP16_MAC_PJ * s
    if fp16_lanes_only:
        return dict(mac_energy_pj=fp32_passes * fp16, int_mac_energy_pj=fp16, bf16_mac_energy_pj=fp16)
    return dict(mac_energy_pj=fp32_passes * HOROWITZ_FP32_MAC_PJ * s,
                int_mac_energy_pj=(HOROWITZ_INT8_MULT_PJ + HOROWITZ_INT8_ADD_PJ) * s, bf16_mac_energy_pj=fp16)


# Precision tiers of a datapath: int4, int8, 16-bit float (bf16/fp16), fp32. A ``b``-bit operand is
# *charged* the tier it rounds up to (`tier_bits`); the cost the training loss sees (``hardened=False``)
# interpolates the charged time / energy per MAC linearly in ``b`` between tiers, so it equals the
# charged cost at every tier and its slope d cost / d bits is the finite difference of the charged
# cost between the two neighbouring tiers (no 1e-19 gradients on piecewise-constant rates).
PRECISION_TIERS = (4.0, 8.0, 16.0, 32.0)


def validate_numbers(obj, owner: str, nonnegative=(), fractions=(), check_arrays: bool = False) -> dict:
    """Checks the numeric fields of a frozen spec dataclass; returns the concrete scalar ones as floats.

    Python and NumPy numbers are user input and are checked (ints become floats, so that jax.grad
    can differentiate every field). JAX arrays: with ``check_arrays`` (`HardwareSpec`,
    `NearMemorySpec`, whose pytree rebuilding skips this check: `register_checked_dataclass`), a
    concrete one is checked like a number, every element, and kept as given (any shape, e.g. a
    batch of specs for ``vmap``); a tracer (under ``jit``/``grad``/``vmap``) has no value and is
    skipped. Without ``check_arrays`` JAX arrays are left alone (specs whose pytree rebuilding runs
    this check, where a leaf may be a gradient). None marks an absent optional part.

    Fields in ``nonnegative`` must be finite and >= 0, those in ``fractions`` finite and in
    (0, 1], every other one finite and > 0.

    Raises:
      TypeError: a bool, str or non-scalar NumPy array, or a bool / non-numeric JAX array
        (naming ``<owner>.<field>``).
      ValueError: a number (or an element) outside its range or not finite (naming
        ``<owner>.<field>`` and the value).
    """
    concrete = {}
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if f.metadata.get("static") or v is None or dataclasses.is_dataclass(v):
            continue
        if isinstance(v, jax.Array):
            if check_arrays and not isinstance(v, jax.core.Tracer):
                a = _check_array(v, owner, f.name, nonnegative, fractions)
                if a.ndim == 0:
                    concrete[f.name] = float(a)
            continue
        if not isinstance(v, (bool, str, int, float, np.number, np.ndarray)):
            continue  # placeholders JAX puts in pytree round trips (sentinels)
        if isinstance(v, (bool, str)) or np.ndim(v) != 0:
            raise TypeError(f"{owner}.{f.name}: must be a real number, got {v!r}")
        v = float(v)
        _check_array(np.float64(v), owner, f.name, nonnegative, fractions)
        object.__setattr__(obj, f.name, v)
        concrete[f.name] = v
    return concrete


def _check_array(v, owner: str, name: str, nonnegative, fractions) -> np.ndarray:
    """``v`` as a float64 array after the range check of `validate_numbers`."""
    a = np.asarray(v)
    if a.dtype == np.bool_ or not (np.issubdtype(a.dtype, np.integer) or np.issubdtype(a.dtype, np.floating)):
        raise TypeError(f"{owner}.{name}: must be a real number, got dtype {a.dtype}")
    a = a.astype(np.float64)
    ok = np.isfinite(a) & ((a >= 0) if name in nonnegative else (a > 0))
    if name in fractions:
        ok &= a <= 1.0
    if not ok.all():
        need = ">= 0" if name in nonnegative else "in (0, 1]" if name in fractions else "> 0"
        bad = a[~ok].flat[0].item()
        raise ValueError(f"{owner}.{name}: must be finite and {need}, got {bad!r}")
    return a


HOST_NONNEGATIVE = ("stage_overhead_s", "row_gather_overhead_s", "row_overhead_s", "output_accumulate_passes",
                    "row_miss_overhead_s", "line_miss_overhead_s", "llc_bytes", "gemm_pack_byte_s",
                    "parallel_stage_bytes",
                    "dram_energy_pj_per_byte",
                    "onchip_buffer_bytes", "sram_energy_pj_per_byte", "mac_energy_int8_pj", "mac_energy_bf16_pj",
                    "mac_energy_fp32_pj", "matrix_mac_energy_fp32_pj", "static_power_w", "power_cap_w")
"""`HardwareSpec` fields that may be 0 (no overhead, a free access, no on-chip buffer); every other
number must be > 0 (rates, bandwidths, clock) or in (0, 1] (efficiencies)."""
NMP_NONNEGATIVE = ("mac_energy_pj", "int_mac_energy_pj", "bf16_mac_energy_pj", "internal_energy_pj_per_byte",
                   "buffer_bytes", "host_link_energy_pj_per_byte", "duplicate_fraction")
"""`NearMemorySpec` fields that may be 0; the others (units, bandwidths, rates) must be > 0."""


@register_checked_dataclass
@dataclasses.dataclass(frozen=True)
class NearMemorySpec:
    """Near-memory processing (NMP) units beside the DRAM arrays (per-rank, per-bank or per-DPU).

    Aggregation mapped here reads its operands over each unit's internal bandwidth; only the
    reduced result (and the features the host writes) cross the host link.

    Fields (per unit unless noted):
      units: number of NMP units working in parallel.
      internal_bw_bytes_per_s: DRAM bandwidth one unit sees (rank/bank/MRAM bandwidth).
      int_macs_per_s: MAC rate for integer operands (<= 8 bits).
      fp32_macs_per_s: MAC rate for fp32 operands (software-emulated on some PIM cores).
      mac_energy_pj: energy of one fp32 MAC on the unit.
      internal_energy_pj_per_byte: energy of an internal DRAM access (no off-chip I/O).
      buffer_bytes: the unit's local buffer (scratchpad/WRAM) that can keep re-used rows.
      host_link_bw_bytes_per_s: total bandwidth between the host and all units (memory channels).
      host_link_energy_pj_per_byte: energy per byte across that link.
      bf16_macs_per_s: MAC rate for 16-bit float operands; None = the fp32 rate (no native
        16-bit float path: bf16 is a float on these units, never priced as an integer).
      int_mac_energy_pj: energy of one integer (<= 8-bit) MAC; None = Horowitz ISSCC'14 int8
        mult + add (0.23 pJ).
      bf16_mac_energy_pj: energy of one 16-bit float MAC; None = Horowitz ISSCC'14 fp16 mult +
        add (1.5 pJ; bf16 priced as fp16, an assumption: the table has no bf16 entry).
      access_granularity_bytes: the smallest internal DRAM access (a burst); a gathered row of
        fewer bytes still moves this many (default 64 B: a DDR4 x64 burst of 8, JESD79-4).
      clock_hz: the unit's clock, descriptive (no cost uses it; None: the host's ``clock_hz``).
      interval_rows: destination rows per interval shard (GNNear's ``interval``, Zhou et al. PACT
        2022); set, an aggregation runs GNNear's dataflow (`estimate.nmp_stage_cost`): edges
        partitioned by sender, each unit loading each of its source rows once per destination
        interval it feeds (HyGCN's interval reuse, `estimate._interval_loaded_rows`) and writing
        partial sums the host adds. None: edges partitioned by receiver, rows re-gathered past
        ``buffer_bytes``.
      duplicate_fraction: with ``interval_rows``, the share (0-1) of each group's source rows, the
        highest-degree ones, copied on every unit of the group (GNNear's ``dup_ratio``: a channel's
        DIMMs), whose edges into an interval go to one unit of the group: fewer partial sums
        (`estimate._partial_rows`), the copies written by the host; 0 = none.
      group_units: units per group sharing the copies (GNNear: DIMMs per channel); 1 = none.
      replicate_features (static): the units cannot read each other's memory (UPMEM DPUs:
        Gomez-Luna et al., IEEE Access 2022, Sec. 2: no direct DPU-DPU communication), so each
        unit needs a private copy of the feature rows its edges gather, or the partial sums
        of a sender-partitioned SpMM are reduced on the host (`estimate.nmp_stage_cost`
        prices the cheaper of the two).
      gemv_broadcast_units: the units run GEMVs in place (`workload.gemv_stage`: the matrix stays
        in their banks, the host writes the input vector and reads the result), and one host
        write of the vector reaches this many of them (HBM-PIM's all-bank mode: the PCUs of one
        pseudo-channel); None (the default): the units run aggregations only.

    Numbers are checked as Python / NumPy numbers and as concrete JAX arrays (every element);
    tracers and JAX's rebuilt trees (gradients) are not (`validate_numbers`).

    Raises:
      ValueError: naming the field and value, for a value that is not finite and positive
        (energies and ``buffer_bytes``: finite and >= 0).
      TypeError: naming the field, for a bool, str or non-scalar NumPy array.
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
    bf16_macs_per_s: Optional[float] = None
    int_mac_energy_pj: Optional[float] = None
    bf16_mac_energy_pj: Optional[float] = None
    access_granularity_bytes: float = 64.0
    clock_hz: Optional[float] = None
    replicate_features: bool = dataclasses.field(default=False, metadata=dict(static=True))
    interval_rows: Optional[float] = None
    duplicate_fraction: float = 0.0
    group_units: float = 1.0
    gemv_broadcast_units: Optional[float] = None

    def __post_init__(self):
        validate_numbers(self, "NearMemorySpec", nonnegative=NMP_NONNEGATIVE, fractions=("duplicate_fraction",),
                         check_arrays=True)
        for name in ("group_units", "gemv_broadcast_units"):
            v = getattr(self, name)
            if isinstance(v, (int, float)) and isinstance(self.units, (int, float)) and v > self.units:
                raise ValueError(f"NearMemorySpec.{name}: must be <= units ({self.units!r}), got {v!r}")

    def replace(self, **changes) -> "NearMemorySpec":
        """A copy with some fields replaced (validated again)."""
        return dataclasses.replace(self, **changes)


@register_checked_dataclass
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
      mac_energy_int8_pj, mac_energy_bf16_pj, mac_energy_fp32_pj: energy of one MAC at the int8,
        16-bit float and fp32 tiers (Horowitz ISSCC'14: int8 mult + add 0.23 pJ, fp16 1.5 pJ,
        fp32 4.6 pJ); the int4 tier costs ``mac_energy_int8_pj * ((1/2)**2 * m + (1/2) * (1 - m))``
        with ``m`` the multiplier's share at 8 bit (array multiplier ~ b^2, adder ~ b). Between
        tiers `mac_energy_pj` interpolates (see `PRECISION_TIERS`).
      matrix_mac_energy_fp32_pj: energy of one MAC of the matrix engine at the fp32 tier where
        it differs from the vector units' fp32 MAC (a TF32 tensor core: `HOROWITZ_TF32_MAC_PJ`
        scaled to the node); None = ``mac_energy_fp32_pj``. The presets take every per-op energy
        from `scaled_op_energies` (Horowitz's 45 nm table scaled to the chip's process node).
      gather_granularity_bytes: the smallest DRAM transfer of a gathered row (GPU: a 32-byte L2
        sector; CPU: a 64-byte cache line); a row of fewer bytes still moves this many.
      static_power_w: power drawn whatever the work (leakage, idle clocks), charged over the
        latency: ``energy += static_power_w * latency_s``; 0 = not modeled.
      power_cap_w: the board's enforced power limit (W), or None (no cap). A stage whose dynamic
        energy over its latency would draw more than ``power_cap_w - static_power_w`` takes
        ``energy / (power_cap_w - static_power_w)`` instead: the clocks throttle, as an H200's
        did under dense GEMMs (results/gpu/h200/). ASSUMPTION: the energy per operation is the one
        measured at the cap (what the `h200` preset's energies are), whatever the clock.
      onchip_bw_bytes_per_s: on-chip buffer bandwidth, a third roof on every stage's on-chip
        traffic; None = not a limit.
      matrix_efficiency, vector_efficiency, dram_efficiency: achieved fraction (0, 1] of the
        peak rates; 1 for datasheet presets, fitted for measured ones
        (`experiments/hwmodel_validation.py`).
      overlap_exponent: the exponent ``p`` of the smooth max that joins a host stage's compute,
        DRAM and on-chip times, ``(sum t_i^p)^(1/p)``, >= 1: large ``p`` is the roofline's full
        overlap (max; default 16: within 4.4 % of it for two terms, 7.1 % for three), ``p = 1``
        no overlap (the sum, as the ECM model assumes for in-core work and data transfers on x86
        cores: Treibig & Hager,
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
      row_overhead_s: fixed time per output row that a kernel loops over one at a time (a CSR
        kernel's outer loop: load the row's pointer pair, start the row's inner loop, finish its
        accumulator), added to a stage's compute time for its ``Stage.output_rows``, >= 0; 0
        where not modeled (the datasheet presets: GPU and accelerator kernels spread rows over
        threads / PEs), fitted for measured ones. XLA's gather + scatter-add SpMM has no
        per-row loop (`segment_spmm_stages`), scipy's CSR product has (`spmm_stage`).
      output_accumulate_passes: DRAM passes over its output, beyond the compulsory write, of a
        kernel that zero-fills its output and then accumulates into it row by row
        (``Stage.output_bytes``: scipy's ``csr_matrix @ ndarray`` allocates a zeroed result and
        adds every product into its row in memory), charged on the share of the output that does
        not fit in ``onchip_buffer_bytes``; >= 0. The CPU preset: 3, from a write-allocate cache
        (Intel SDM vol. 3, 12.3: a store that misses reads the line first): the fill reads and
        writes each line (2), the accumulation reads and writes it again (2), of which the
        compulsory write counts 1 (glibc's memset switches to non-temporal stores only above
        3/4 of the last-level cache, which this VM reports as 480 MiB). 0 = the output is
        written once (a GPU or accelerator CSR kernel accumulating a row in registers).
      row_miss_overhead_s: fixed time per gathered row that misses the on-chip buffer (the
        share ``1 - hit`` of ``Stage.gathered_rows``), added to the stage's compute time, >= 0: a
        random gather that misses waits on DRAM latency that the bandwidth roof does not see (a
        few misses in flight per core); 0 for datasheet presets, fitted for measured ones.
      llc_bytes: the last-level cache behind ``onchip_buffer_bytes`` (a CPU's L3, as lscpu
        reports it; the measured `cpu` preset fits ``onchip_buffer_bytes`` near its L2), or None
        (no second level: ``line_miss_overhead_s`` unused; every datasheet preset).
      line_miss_overhead_s: time per gathered line (``gather_granularity_bytes``) of a row that
        misses ``llc_bytes`` too (the share ``1 - hit`` at that capacity of
        ``Stage.gathered_rows``, times the row's lines), added to the stage's compute time, >= 0:
        a core's random gathers from DRAM are bound by the misses it keeps in flight, not by the
        streaming roof (scipy's CSR product on R-MAT 2^20 at width 64: 17.7 ns a gathered line, on
        csbm-products at width 100 about 28 ns, against 2 ns at the streaming rate; docs/hwmodel.md).
        Fitted for the measured `cpu` preset.
      gemm_pack_byte_s: time per byte of a GEMM's operands (``Stage.packed_bytes``) that a
        Goto-style BLAS copies into blocked panels before multiplying (Goto & van de Geijn, TOMS
        2008), on the share of them beyond ``onchip_buffer_bytes``, added to the stage's compute
        time (the copy is a phase of its own, not overlapped with the multiply), >= 0. The
        `cpu_numpy` preset's (OpenBLAS on one core: [M, K] @ [K, n] costs about 0.5 ns per
        element of a large A on top of its MACs at every n); 0 elsewhere (XLA's GEMM shows no
        such cost on the grid). Fitted.
      parallel_stage_bytes: an "elementwise" stage moving fewer bytes per launch than this pays
        that share of ``stage_overhead_s`` (XLA:CPU splits a loop fusion over its thread pool only
        above a cost threshold; a small loop runs on the calling thread); None: every launch pays
        it in full (every preset but the measured `cpu`). Fitted.
      cores: the host cores whose sum the compute roofs are (the measured `cpu` preset: the VM's
        2 cores, as XLA's thread pool reaches them); a stage that runs as one serial loop
        (``Stage.serial``) gets ``1 / cores`` of the compute rates. 1 for datasheet presets
        (their peaks are the device's, and no stage of theirs is serial on one core).
      clock_hz: core clock, descriptive (no cost uses it; None if not recorded).
      nmp: `NearMemorySpec` or None.
      fuses_elementwise: the executor runs a stage's elementwise ops (bias, activation, gate) as
        one loop (static; XLA, GPU and accelerator kernels: True); False: one pass over the data
        per op (numpy: the `cpu_numpy` preset), ``Stage.passes`` times the stage's bytes.
      fuses_epilogue: the software the target runs applies a layer's elementwise stage (bias,
        activation, channel gate, requantization) in the epilogue of the kernel that produces
        its input (static): the stage then moves only its ``Stage.epilogue_bytes`` and launches
        nothing (`estimate`). True where a best configuration does it: GPUs through cuBLASLt /
        hipBLASLt epilogues (``CUBLASLT_EPILOGUE_RELU_BIAS``, ``DRELU_BGRAD``; NVIDIA cuBLAS and
        AMD hipBLASLt documentation) or a custom SpMM kernel's epilogue, and the accelerators whose
        papers apply the activation on the way out of their engines (`presets`). False where the
        modeled software runs it as a kernel of its own: XLA:CPU's loop fusion after the dot (the
        measured `cpu` preset), numpy, PyG / DGL (PyTorch eager: the `v100` baselines).
      fp32_only: the datapath computes in fp32 at every operand width (static): narrow operands
        then save memory traffic and storage, not MAC energy (`mac_energy_pj`); give the rates
        of every precision equal to the fp32 ones as well.
      aggregate_first_only: the datapath runs every layer aggregate-then-combine (static; HyGCN's
        Aggregation Engine feeds its Combination Engine through a pipeline, Yan et al. HPCA 2020
        Sec. 4): `estimate` costs only that order; False: both orders, the cheaper kept.
      interval_buffer_bytes: an output-stationary aggregation buffer (HyGCN's interval-shard
        partitioning with sparsity elimination, Yan et al. HPCA 2020 Sec. 4.2): the destination
        rows are cut into intervals whose partial outputs fill this buffer, and for each interval
        only the source rows with an edge into it are loaded, once; an aggregation stage's
        gathered-row DRAM traffic is the smaller of the buffer model's and that (``estimate``'s
        module docstring). None = no such buffer.

    Raises:
      ValueError: naming the field, if a number is not finite and positive (efficiencies in
        (0, 1]; overheads, energies and onchip_buffer_bytes >= 0: `HOST_NONNEGATIVE`), if
        overlap_exponent < 1, or if int8 MACs are costlier than fp32 ones. Python / NumPy
        numbers and concrete JAX arrays (every element) are checked alike; tracers under ``jit``
        / ``grad`` / ``vmap`` and JAX's rebuilt trees (``jax.grad`` with respect to a spec) are
        not (`validate_numbers`).
      TypeError: naming the field, for a bool, str or non-scalar NumPy array.
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
    mac_energy_bf16_pj: float = HOROWITZ_FP16_MAC_PJ
    matrix_mac_energy_fp32_pj: Optional[float] = None
    gather_granularity_bytes: float = 32.0
    static_power_w: float = 0.0
    power_cap_w: Optional[float] = None
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
    row_overhead_s: float = 0.0
    output_accumulate_passes: float = 0.0
    row_miss_overhead_s: float = 0.0
    llc_bytes: Optional[float] = None
    line_miss_overhead_s: float = 0.0
    gemm_pack_byte_s: float = 0.0
    parallel_stage_bytes: Optional[float] = None
    cores: float = 1.0
    clock_hz: Optional[float] = None
    nmp: Optional[NearMemorySpec] = None
    fp32_only: bool = dataclasses.field(default=False, metadata=dict(static=True))
    aggregate_first_only: bool = dataclasses.field(default=False, metadata=dict(static=True))
    interval_buffer_bytes: Optional[float] = None
    fuses_elementwise: bool = dataclasses.field(default=True, metadata=dict(static=True))
    fuses_epilogue: bool = dataclasses.field(default=False, metadata=dict(static=True))

    def __post_init__(self):
        concrete = validate_numbers(
            self, f"HardwareSpec({self.name!r})", nonnegative=HOST_NONNEGATIVE,
            fractions=("matrix_efficiency", "vector_efficiency", "dram_efficiency", "gather_efficiency"),
            check_arrays=True)
        if "cores" in concrete and concrete["cores"] < 1.0:
            raise ValueError(f"HardwareSpec({self.name!r}).cores: must be >= 1, got {concrete['cores']!r}")
        if concrete.get("power_cap_w") is not None and concrete["power_cap_w"] <= concrete.get("static_power_w", 0.0):
            raise ValueError(f"HardwareSpec({self.name!r}).power_cap_w: must exceed static_power_w "
                             f"({concrete.get('static_power_w')!r} W), got {concrete['power_cap_w']!r}")
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

    def single_core(self, name: Optional[str] = None) -> "HardwareSpec":
        """The same machine for a program that runs on one of its ``cores`` (a numpy / scipy
        program with one BLAS thread: `codesign.deploy`): every compute rate divided by
        ``cores``, ``cores`` = 1. DRAM bandwidth and the on-chip buffer are kept (ASSUMPTION: one
        core reaches the measured streaming bandwidth, which `measure_peaks` times with XLA on
        all cores; docs/hwmodel.md)."""
        c = self.cores
        scale = lambda v: None if v is None else v / c
        return dataclasses.replace(
            self, name=name or self.name, cores=1.0,
            matrix_fp32_macs_per_s=scale(self.matrix_fp32_macs_per_s),
            matrix_bf16_macs_per_s=scale(self.matrix_bf16_macs_per_s),
            matrix_int8_macs_per_s=scale(self.matrix_int8_macs_per_s),
            matrix_int4_macs_per_s=scale(self.matrix_int4_macs_per_s),
            vector_fp32_macs_per_s=scale(self.vector_fp32_macs_per_s),
            vector_bf16_macs_per_s=scale(self.vector_bf16_macs_per_s),
            vector_int8_macs_per_s=scale(self.vector_int8_macs_per_s))


def tier_bits(bits) -> jax.Array:
    """The precision tier (`PRECISION_TIERS`) a ``bits``-bit operand runs at: the smallest tier
    >= bits (int4 for <= 4, int8 for <= 8, 16-bit float for <= 16, else fp32)."""
    bits = jnp.asarray(bits, jnp.float32)
    return jnp.where(bits <= 4, 4.0, jnp.where(bits <= 8, 8.0, jnp.where(bits <= 16, 16.0, 32.0)))


def _per_tier(bits, values, hardened: bool) -> jax.Array:
    """``values`` (one per `PRECISION_TIERS`) at ``bits``: the tier's value if ``hardened``, else
    linear interpolation between tiers (constant below 4 and above 32 bits)."""
    bits = jnp.asarray(bits, jnp.float32)
    vals = jnp.stack([jnp.asarray(v, jnp.float32) for v in values])
    tiers = jnp.asarray(PRECISION_TIERS, jnp.float32)
    if hardened:
        return vals[jnp.searchsorted(tiers, tier_bits(bits))]
    return jnp.interp(bits, tiers, vals)


def matrix_macs_per_s(hw: HardwareSpec, bits, hardened: bool = False) -> jax.Array:
    """GEMM rate (MAC/s) of the matrix engine for ``bits``-bit operands.

    ``hardened``: the rate of the operand's tier (`tier_bits`: int4 / int8 / bf16 / fp32 peak),
    i.e. what the hardware charges. Else (the default, what the cost and its gradient use) the
    *time per MAC* is interpolated linearly in ``bits`` between tiers (`PRECISION_TIERS`), equal
    to the charged one at each tier, with d time / d bits = the charged difference between tiers.
    """
    return 1.0 / _per_tier(bits, [1.0 / r for r in (hw.matrix_int4_macs_per_s, hw.matrix_int8_macs_per_s,
                                                     hw.matrix_bf16_macs_per_s, hw.matrix_fp32_macs_per_s)], hardened)


def vector_macs_per_s(hw: HardwareSpec, bits, hardened: bool = False) -> jax.Array:
    """Vector-unit rate (MAC/s) for ``bits``-bit operands: the int8 rate at <= 8 bits, bf16 at
    9-16, fp32 above (``hardened``), or their time per MAC interpolated as `matrix_macs_per_s`."""
    bf16 = 2.0 * hw.vector_fp32_macs_per_s if hw.vector_bf16_macs_per_s is None else hw.vector_bf16_macs_per_s
    int8 = 4.0 * hw.vector_fp32_macs_per_s if hw.vector_int8_macs_per_s is None else hw.vector_int8_macs_per_s
    return 1.0 / _per_tier(bits, [1.0 / int8, 1.0 / int8, 1.0 / bf16, 1.0 / hw.vector_fp32_macs_per_s], hardened)


_INT8_MULT_SHARE = HOROWITZ_INT8_MULT_PJ / (HOROWITZ_INT8_MULT_PJ + HOROWITZ_INT8_ADD_PJ)


def int_mac_energy_pj(int8_pj, bits) -> jax.Array:
    """Energy (pJ) of a ``bits``-bit integer MAC scaled from the int8 one: multiplier ~ bits^2,
    adder ~ bits, with the multiplier's share at 8 bit from Horowitz ISSCC'14 (0.2 of 0.23 pJ)."""
    r = jnp.asarray(bits, jnp.float32) / 8.0
    return int8_pj * (_INT8_MULT_SHARE * r**2 + (1.0 - _INT8_MULT_SHARE) * r)


def mac_energy_pj(hw: HardwareSpec, bits, hardened: bool = False, matrix: bool = False) -> jax.Array:
    """Energy of one MAC in pJ at ``bits`` bits (float32 array of ``bits``' shape).

    Tiers (`PRECISION_TIERS`): int4 (`int_mac_energy_pj` at 4 bits), int8
    (``mac_energy_int8_pj``), 16-bit float (``mac_energy_bf16_pj``: Horowitz's fp16 MAC) and fp32
    (``mac_energy_fp32_pj``); ``hardened`` gives the operand's tier, else linear interpolation
    between tiers (continuous: no jump between 31.9 and 32 bits; constant below 4 bits, where
    an int4 unit is charged whatever the narrower operand). A ``fp32_only`` datapath spends the
    fp32 energy at every operand width. ``matrix``: a matrix-engine stage, whose fp32 tier is
    ``matrix_mac_energy_fp32_pj`` where set (TF32 tensor cores). Source: Horowitz ISSCC'14,
    Fig. 1.1.9 (45 nm), scaled to the preset's node (`scaled_op_energies`).
    """
    bits = jnp.asarray(bits, jnp.float32)
    fp32 = hw.mac_energy_fp32_pj
    if matrix and hw.matrix_mac_energy_fp32_pj is not None:
        fp32 = hw.matrix_mac_energy_fp32_pj
    if hw.fp32_only:
        return jnp.full(bits.shape, fp32, jnp.float32)
    values = (int_mac_energy_pj(hw.mac_energy_int8_pj, 4.0), hw.mac_energy_int8_pj, hw.mac_energy_bf16_pj, fp32)
    return _per_tier(bits, values, hardened)


NMP_TIERS = (8.0, 16.0, 32.0)


def _per_nmp_tier(bits, values, hardened: bool) -> jax.Array:
    bits = jnp.asarray(bits, jnp.float32)
    vals = jnp.stack([jnp.asarray(v, jnp.float32) for v in values])
    if hardened:
        return jnp.where(bits <= 8, vals[0], jnp.where(bits <= 16, vals[1], vals[2]))
    return jnp.interp(bits, jnp.asarray(NMP_TIERS, jnp.float32), vals)


def nmp_macs_per_s(nmp: NearMemorySpec, bits, hardened: bool = False) -> jax.Array:
    """One near-memory unit's MAC rate for ``bits``-bit operands: ``int_macs_per_s`` at <= 8 bits,
    ``bf16_macs_per_s`` (a float, default the fp32 rate) at 9-16, ``fp32_macs_per_s`` above;
    unless ``hardened``, the time per MAC is interpolated linearly between 8, 16 and 32 bits."""
    bf16 = nmp.fp32_macs_per_s if nmp.bf16_macs_per_s is None else nmp.bf16_macs_per_s
    return 1.0 / _per_nmp_tier(bits, (1.0 / nmp.int_macs_per_s, 1.0 / bf16, 1.0 / nmp.fp32_macs_per_s), hardened)


def nmp_mac_energy_pj(nmp: NearMemorySpec, bits, hardened: bool = False) -> jax.Array:
    """Energy (pJ) of one MAC on a near-memory unit: ``int_mac_energy_pj`` (default Horowitz int8,
    0.23 pJ) at <= 8 bits, ``bf16_mac_energy_pj`` (default Horowitz fp16, 1.5 pJ) at 9-16,
    ``mac_energy_pj`` (fp32) above; interpolated between tiers unless ``hardened``."""
    i = HOROWITZ_INT8_MULT_PJ + HOROWITZ_INT8_ADD_PJ if nmp.int_mac_energy_pj is None else nmp.int_mac_energy_pj
    b = HOROWITZ_FP16_MAC_PJ if nmp.bf16_mac_energy_pj is None else nmp.bf16_mac_energy_pj
    return _per_nmp_tier(bits, (i, b, nmp.mac_energy_pj), hardened)
