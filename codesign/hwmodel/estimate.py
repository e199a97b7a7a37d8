"""`estimate(workload, hw) -> CostReport`: the analytic, differentiable cost model.

Per stage on the host (roofline; Williams, Waterman & Patterson, CACM 2009):
  compute_s  = macs / (rate(kind, bits) * efficiency / (cores if serial else 1))
               + gathered_rows * (row_gather_overhead_s + (1 - hit) * row_miss_overhead_s
                                  + (1 - hit_llc) * (row' / g) * line_miss_overhead_s)
               + output_rows * row_overhead_s
               + packed * (1 - min(1, buffer / packed)) * gemm_pack_byte_s   (GEMM: a BLAS's operand packing)
               (hit_llc: as hit, at the last-level cache ``llc_bytes`` behind the buffer: every
               line of a row that misses it waits on DRAM; no such term on a spec without one)
               (output_rows: rows a CSR kernel loops over one at a time, `Stage.output_rows`;
               serial: the kernel is one loop on one of the host's cores, `Stage.serial`)
  row'       = max(row, g)  (g = gather_granularity_bytes; ``hardened``: g * ceil(row / g))
  dram_bytes = compulsory_bytes + reuse_bytes * row'/row * (1 - hit)
               + output_accumulate_passes * out * (1 - min(1, buffer / out))
               (out: `Stage.output_bytes`, a zero-filled output accumulated in memory;
               compulsory * `Stage.passes` where the executor does not fuse elementwise ops)
               (row: bytes of one gathered row; hit: `locality.hit_rate` of the buffer's
               capacity in rows of row' bytes; uniform re-reference when no profile is given)
               With ``interval_buffer_bytes`` (B, HyGCN's interval-shard reuse) an aggregation
               stage's re-gathered bytes are at most those of loading, per interval of
               I = max(1, out / B) intervals, the N * (1 - exp(-nnz / (I N))) source rows with an
               edge into it once: (I N (1 - exp(-nnz / (I N))) - N)^+ * row' (uniform senders)
  memory_s   = dram_bytes / (dram_bw * dram_efficiency)
  onchip_s   = onchip_bytes / onchip_bw                          (if the spec gives onchip_bw)
  latency_s  = smooth_max(compute_s, memory_s, onchip_s; p=overlap_exponent)
               + launches * stage_overhead_s
               (an elementwise stage with ``parallel_stage_bytes`` P: launches * min(1, bytes per
               launch / P), the loops XLA:CPU runs on the calling thread)
  energy_j   = macs * mac_energy(bits) + dram_bytes * dram_energy + onchip_bytes * sram_energy
(rate: the matrix engine for GEMM / BSR stages, else the vector units, at
``gather_efficiency`` on the irregular ones: SpMM, SDDMM, edge softmax; rates and MAC energy by
precision tier, interpolated between tiers unless ``hardened``: `spec.PRECISION_TIERS`)
Per aggregation stage on near-memory units (`NearMemorySpec`, U units, the edges partitioned by
receiver row over the units; N rows, nnz gathers, d = nnz / N):
  f          = 1 - exp(-d / U)            (share of the N rows one unit's nnz / U gathers touch;
                                            uniform senders: an assumption)
  internal   = structure + out + U*N*f * row' + (nnz - U*N*f)^+ * row' * (1 - hit_u)
               (hit_u: the unit's buffer against its own working set, N*f rows)
  imbalance  = max(1 + sqrt(2 ln U) * cv * sqrt(U / N), max_in_degree / (nnz / U))
               (the most loaded unit: Gaussian max of U row-partition loads, cv = the in-degree's
               std / mean; Raab & Steger, RANDOM 1998; a row is never split)
  compute_s  = imbalance * macs / (U * nmp_rate(bits));  nmp_s = imbalance * internal / (U * internal_bw)
  link       = x + out; with ``replicate_features`` (units that cannot read each other's memory)
               the cheaper of U*N*f*row_x + out (each unit its own copy of the rows it gathers) and
               x + U*N*f*row_out (sender partition: partial sums, added on the host's vector units)
  link_s     = link / host_link_bw (+ the host's partial-sum adds)
  With ``interval_rows`` (R, GNNear's interval shards: Zhou et al. PACT 2022; its artifact
  PKUZHOU/GNNear-PACT-2022 @ 9420d929, simulation/GNNear_simulator.py) the edges are partitioned
  by *sender* (each unit reduces its own source rows) and the destinations cut into I = max(1, N / R)
  intervals; per interval a unit loads each of its source rows with an edge into it once and
  keeps the interval's partial sums on chip, then writes one partial row per destination it
  feeds (U*N*f of them), which the host reads and adds:
    internal = structure + I N (1 - exp(-nnz / (I N))) * row' + U*N*f * row_out
    link     = x * (1 + q (D - 1)) + U*N*f * row_out   (+ the host's adds, as the sender partition above)
  where U*N*f becomes `_partial_rows` with ``duplicate_fraction`` q of each group of D =
  ``group_units`` units' source rows copied on the whole group (GNNear's duplicated high-degree
  sources), so fewer units hold a partial of a destination (x is written D times for them)
  and the max-in-degree bound on the imbalance is dropped (a destination's edges are split over
  the units; GNNear deals high-degree sources' edges over a channel's DIMMs).
  A GEMV (`Stage.gemv`) on units that run them (``gemv_broadcast_units`` G, HBM-PIM's PCUs):
    internal = the matrix (each unit streams its share once per call), imbalance 1,
    link     = (vector + result) * U / G  (written / read once per broadcast group)
  latency_s  = smooth_max(compute_s, nmp_s, link_s) + launches * stage_overhead_s
  energy_j   = macs * nmp_mac_energy(bits) + internal * internal_energy + link * link_energy
Where the target fuses epilogues (``fuses_epilogue``) a layer's elementwise stages (bias,
activation, gate) run inside the kernel that produced their input: each moves only its
``Stage.epilogue_bytes`` and launches nothing (`_epilogue`).
Whole workload: ``energy_j = sum of stage energies + static_power_w * latency_s``.
Per layer, every mapping candidate (dataflow order x aggregation unit) is costed and the one of
lowest latency (``mapping``: or energy, or DRAM bytes) is kept (only aggregate-first on a spec with ``aggregate_first_only``, whose
aggregation feeds the GEMM without a DRAM round trip of the aggregated rows: `_pipelined`) (`jnp.where`: the gradient is that of the chosen mapping). Stages on one
unit run one after another; with ``overlap_units`` the host and near-memory parts of a layer
are pipelined over row blocks (as GNNear does), so the layer takes the smooth max of the two.
The function is pure: `jax.jit`, `jax.vmap` and `jax.grad` apply, also w.r.t. the spec.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from codesign.hwmodel.locality import hit_rate
from codesign.hwmodel.spec import (PJ, HardwareSpec, mac_energy_pj, matrix_macs_per_s, nmp_mac_energy_pj, nmp_macs_per_s,
                                   vector_macs_per_s)
from codesign.hwmodel.workload import Stage, Workload

SMOOTH_MAX_P = 16.0  # overestimates the max of n terms by at most n**(1/16) - 1 (all equal): 4.4 % for 2, 7.1 % for 3
MATRIX_KINDS = ("gemm", "bsr")  # stages that run on the matrix engine; the rest on vector units
IRREGULAR_KINDS = ("spmm", "sddmm", "softmax")  # vector stages over edges: also hw.gather_efficiency
BOUNDS = ("compute", "memory", "on-chip", "near-memory", "host-link")


def smooth_max(*xs: jax.Array, p: float = SMOOTH_MAX_P) -> jax.Array:
    """``(sum x_i^p)^(1/p)`` for x_i >= 0, computed without underflow; differentiable.

    Lies in ``[max x_i, n^(1/p) max x_i]`` for n terms: at p = 16 within 4.4 % of the max for
    two terms and 7.1 % for three (the host roofline's compute / DRAM / on-chip)."""
    m = xs[0]
    for x in xs[1:]:
        m = jnp.maximum(m, x)
    m = jnp.maximum(m, jnp.finfo(jnp.float32).tiny)
    return m * sum((x / m) ** p for x in xs) ** (1.0 / p)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StageCost:
    """Cost of one stage (float32 scalars).

    Fields: ``latency_s``; the roofline terms ``compute_s``, ``memory_s`` (DRAM), ``onchip_s``,
    ``nmp_s`` (near-memory internal), ``link_s`` (host link) in seconds; ``energy_j`` and its
    ``compute_energy_j`` share (J); ``dram_bytes``, ``onchip_bytes``, ``nmp_bytes``,
    ``link_bytes``; ``macs``; ``on_nmp`` (1.0 if mapped onto near-memory units).
    """

    latency_s: jax.Array
    compute_s: jax.Array
    memory_s: jax.Array
    energy_j: jax.Array
    dram_bytes: jax.Array
    onchip_bytes: jax.Array
    macs: jax.Array
    onchip_s: jax.Array = 0.0
    nmp_s: jax.Array = 0.0
    link_s: jax.Array = 0.0
    compute_energy_j: jax.Array = 0.0
    nmp_bytes: jax.Array = 0.0
    link_bytes: jax.Array = 0.0
    on_nmp: jax.Array = 0.0

    @property
    def bound(self) -> str:
        """Which roof bounds this stage: one of `BOUNDS` (concrete values only)."""
        terms = dict(zip(BOUNDS, (self.compute_s, self.memory_s, self.onchip_s, self.nmp_s, self.link_s)))
        return max(terms, key=lambda k: float(terms[k]))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CostReport:
    """Modeled cost of a workload on a hardware target.

    Fields:
      latency_s: end-to-end latency (s), float32 scalar.
      energy_j: energy (J), float32 scalar: the stages' dynamic energy plus ``static_energy_j``.
      dram_bytes: host off-chip traffic (bytes), float32 scalar.
      stages: ``{"<layer>/<kind>": StageCost}`` for the chosen mapping of each layer.
      aggregate_first: ``{"<layer>": 1.0 or 0.0}``, 1.0 where aggregate-then-combine was chosen.
      on_nmp: ``{"<layer>": 1.0 or 0.0}``, 1.0 where aggregation runs on near-memory units.
      bytes_by_level: ``{"dram", "onchip", "nmp", "link"}`` total bytes per memory level.
      static_energy_j: ``hw.static_power_w * latency_s`` (J), float32 scalar.
    """

    latency_s: jax.Array
    energy_j: jax.Array
    dram_bytes: jax.Array
    stages: dict
    aggregate_first: dict
    on_nmp: dict = dataclasses.field(default_factory=dict)
    bytes_by_level: dict = dataclasses.field(default_factory=dict)
    static_energy_j: jax.Array = 0.0

    def summary(self) -> dict:
        """Plain-Python totals: ``{"latency_s", "energy_j", "dram_bytes", "static_energy_j"}`` as
        floats (``energy_j`` = the stages' energies in `breakdown` + ``static_energy_j``)."""
        return {"latency_s": float(self.latency_s), "energy_j": float(self.energy_j),
                "dram_bytes": float(self.dram_bytes), "static_energy_j": float(self.static_energy_j)}

    def breakdown(self, hw: HardwareSpec) -> dict:
        """Plain-Python per-stage costs for tables and figures (concrete values only).

        Returns ``{"<layer>/<kind>": {...}}`` with, per stage: ``latency_s``, ``compute_s``,
        ``memory_s`` (DRAM roof), ``energy_j`` and its split ``compute_j`` (host or near-memory
        MACs), ``dram_j`` (host DRAM), ``onchip_j`` (host SRAM), ``nmp_j`` (near-memory internal
        accesses), ``link_j`` (host <-> near-memory link), which sum to ``energy_j``; ``macs``,
        ``dram_bytes``, ``onchip_bytes``, ``nmp_bytes``, ``link_bytes``; ``on_nmp`` (bool) and
        ``bound`` (one of `BOUNDS`). ``hw`` must be the spec the report was computed on (its
        per-byte energies split the memory energy; see the module docstring).
        """
        out = {}
        for name, c in self.stages.items():
            on_nmp = bool(float(c.on_nmp) > 0.5)
            pj = lambda nbytes, per_byte: float(nbytes) * per_byte * PJ
            split = dict(dram_j=0.0, onchip_j=0.0, nmp_j=0.0, link_j=0.0)
            if on_nmp:
                split.update(nmp_j=pj(c.nmp_bytes, hw.nmp.internal_energy_pj_per_byte),
                             link_j=pj(c.link_bytes, hw.nmp.host_link_energy_pj_per_byte))
            else:
                split.update(dram_j=pj(c.dram_bytes, hw.dram_energy_pj_per_byte),
                             onchip_j=pj(c.onchip_bytes, hw.sram_energy_pj_per_byte))
            out[name] = {"latency_s": float(c.latency_s), "compute_s": float(c.compute_s),
                         "memory_s": float(c.memory_s), "energy_j": float(c.energy_j),
                         "compute_j": float(c.compute_energy_j), **split, "macs": float(c.macs),
                         "dram_bytes": float(c.dram_bytes), "onchip_bytes": float(c.onchip_bytes),
                         "nmp_bytes": float(c.nmp_bytes), "link_bytes": float(c.link_bytes),
                         "on_nmp": on_nmp, "bound": c.bound}
        return out


def floored_row_bytes(row_bytes, granularity_bytes, hardened: bool = False) -> jax.Array:
    """Bytes a gathered row of ``row_bytes`` moves when memory is read in units of
    ``granularity_bytes`` (a GPU's 32-byte L2 sectors, a CPU's 64-byte cache lines, a DRAM
    burst): ``granularity * ceil(row / granularity)`` if ``hardened``, else ``max(row,
    granularity)``, which equals it at every multiple of the granularity and interpolates it
    linearly between (flat below one granule: narrower rows save nothing there)."""
    row_bytes = jnp.asarray(row_bytes, jnp.float32)
    if hardened:
        return granularity_bytes * jnp.ceil(row_bytes / granularity_bytes)
    return jnp.maximum(row_bytes, granularity_bytes)


def _row_bytes(stage: Stage):
    """Bytes of one gathered row (None: the stage is not row-structured)."""
    if stage.working_set_rows is None:
        return None
    return stage.working_set_bytes / jnp.maximum(stage.working_set_rows, 1.0)


def _floor_factor(stage: Stage, granularity, hardened: bool) -> jax.Array:
    row = _row_bytes(stage)
    if row is None:
        return jnp.ones((), jnp.float32)
    return jnp.where(row > 0, floored_row_bytes(row, granularity, hardened) / jnp.maximum(row, 1e-30), 1.0)


def _hit(stage: Stage, buffer_bytes, floor, working_set_share=1.0) -> jax.Array:
    """Fraction of re-gathered rows that hit in a buffer of ``buffer_bytes`` holding rows of
    ``floor`` times their bytes, against ``working_set_share`` of the working set (one
    near-memory unit's part; 1 on the host)."""
    if stage.working_set_rows is None or stage.reuse_distance_rows is None:
        ws = stage.working_set_bytes * floor * working_set_share
        return jnp.minimum(1.0, buffer_bytes / jnp.maximum(ws, 1.0))
    row_bytes = _row_bytes(stage) * floor
    return hit_rate(stage.reuse_distance_rows * working_set_share, buffer_bytes / jnp.maximum(row_bytes, 1e-9))


def _output_passes_bytes(stage: Stage, hw: HardwareSpec) -> jax.Array:
    """DRAM bytes of the extra passes over a zero-filled, accumulated output
    (``hw.output_accumulate_passes * output_bytes``) on the share of it beyond the on-chip buffer."""
    out = jnp.asarray(stage.output_bytes, jnp.float32)
    spill = 1.0 - jnp.minimum(1.0, hw.onchip_buffer_bytes / jnp.maximum(out, 1.0))
    return hw.output_accumulate_passes * out * spill


def _aggregation_counts(stage: Stage) -> tuple:
    """A row-structured aggregation stage's counts per pass (``Stage.launches`` passes):
    ``(passes, N rows, nnz gathers, X bytes, output bytes)``, the output being the part of
    ``link_bytes`` beyond X (needs ``working_set_rows`` and ``link_bytes``)."""
    passes = jnp.maximum(jnp.asarray(stage.launches, jnp.float32), 1e-30)
    x = stage.working_set_bytes
    return (passes, jnp.maximum(stage.working_set_rows, 1.0), stage.gathered_rows / passes, x,
            jnp.maximum(stage.link_bytes / passes - x, 0.0))


def _interval_loaded_rows(n, nnz, intervals) -> jax.Array:
    """Source rows loaded in one pass of an interval-shard aggregation: each of ``intervals``
    destination intervals loads once every source row with an edge into it, N (1 - exp(-nnz /
    (I N))) of the N rows for uniform senders, so I N (1 - exp(-nnz / (I N))) in all (<= nnz)."""
    return intervals * n * -jnp.expm1(-nnz / (intervals * n))


def _partial_rows(n, nnz, units, group_units, duplicate_fraction) -> jax.Array:
    """Partial-sum rows of a sender-partitioned aggregation (one per destination and unit that
    feeds it), GNNear's merge count (its artifact's ``assign_shards``, step 3): the U units form
    U / D groups of D (a channel's DIMMs); a share q of each group's source rows (its highest-degree
    ones, ``duplicate_fraction``) is copied on all D units and a destination interval's edges from
    them go to one unit of the group, the rest stay on their own unit. Per destination a group
    gets e = d / (U / D) edges (d = nnz / N; uniform senders, so the copied rows carry the share q
    of the edges: an assumption, a skewed graph gives them more):
      rows = N (U / D) [(1 - exp(-(q e + (1 - q) e / D))) + (D - 1)(1 - exp(-(1 - q) e / D))]
    (q = 0: U N (1 - exp(-d / U)), every unit's partial for every destination it feeds)."""
    groups = units / group_units
    e = nnz / (n * groups)
    rest = (1.0 - duplicate_fraction) * e / group_units
    return n * groups * (-jnp.expm1(-(duplicate_fraction * e + rest)) + (group_units - 1.0) * -jnp.expm1(-rest))


def _interval_regather_bytes(stage: Stage, buffer_bytes, floor) -> jax.Array:
    """Re-gathered bytes of an aggregation under interval-shard partitioning (HyGCN, Yan et al.
    HPCA 2020 Sec. 4.2): I = max(1, out / buffer) destination intervals, each loading once the
    source rows with an edge into it (`_interval_loaded_rows`), beyond the compulsory one read of X."""
    passes, n, nnz, x, out = _aggregation_counts(stage)
    intervals = jnp.maximum(1.0, out / jnp.maximum(buffer_bytes, 1.0))
    return passes * jnp.maximum(_interval_loaded_rows(n, nnz, intervals) - n, 0.0) * (x / n) * floor


def stage_cost(stage: Stage, hw: HardwareSpec, hardened: bool = False) -> StageCost:
    """Roofline cost of one stage on the host of ``hw`` (see the module docstring).

    ``hardened``: charge each operand its precision tier's rate and energy and each gathered row
    whole granules (what the hardware does); the default interpolates between tiers and granules
    (equal at tiers and granule multiples), so that gradients follow the charged cost."""
    if stage.kind in MATRIX_KINDS:
        rate = matrix_macs_per_s(hw, stage.bits, hardened) * hw.matrix_efficiency
    else:
        rate = vector_macs_per_s(hw, stage.bits, hardened) * hw.vector_efficiency
        if stage.kind in IRREGULAR_KINDS:
            rate = rate * hw.gather_efficiency
    if stage.serial:
        rate = rate / hw.cores
    floor = _floor_factor(stage, hw.gather_granularity_bytes, hardened)
    miss = 1.0 - _hit(stage, hw.onchip_buffer_bytes, floor)
    compute_s = (stage.macs / rate + stage.gathered_rows * (hw.row_gather_overhead_s + miss * hw.row_miss_overhead_s)
                 + stage.output_rows * hw.row_overhead_s)
    if hw.llc_bytes is not None and _row_bytes(stage) is not None:  # lines that come from DRAM
        lines = _row_bytes(stage) * floor / hw.gather_granularity_bytes
        llc_miss = 1.0 - _hit(stage, hw.llc_bytes, floor)
        compute_s = compute_s + stage.gathered_rows * llc_miss * lines * hw.line_miss_overhead_s
    compulsory = stage.compulsory_bytes if hw.fuses_elementwise else stage.compulsory_bytes * stage.passes
    regather = stage.reuse_bytes * floor * miss
    if hw.interval_buffer_bytes is not None and stage.is_aggregation and stage.working_set_rows is not None \
            and stage.link_bytes is not None:
        regather = jnp.minimum(regather, _interval_regather_bytes(stage, hw.interval_buffer_bytes, floor))
    dram = compulsory + regather + _output_passes_bytes(stage, hw)
    onchip = compulsory + stage.reuse_bytes
    memory_s = dram / (hw.dram_bw_bytes_per_s * hw.dram_efficiency)
    zero = jnp.zeros((), jnp.float32)
    onchip_s = zero if hw.onchip_bw_bytes_per_s is None else onchip / hw.onchip_bw_bytes_per_s
    compute_j = stage.macs * mac_energy_pj(hw, stage.bits, hardened, matrix=stage.kind in MATRIX_KINDS) * PJ
    energy_j = compute_j + (dram * hw.dram_energy_pj_per_byte + onchip * hw.sram_energy_pj_per_byte) * PJ
    if stage.kind in MATRIX_KINDS:  # a BLAS that packs its operands: the copy beyond the buffer, a phase of its own
        packed = jnp.asarray(stage.packed_bytes, jnp.float32)
        compute_s = compute_s + packed * (1.0 - jnp.minimum(1.0, hw.onchip_buffer_bytes / jnp.maximum(packed, 1.0))) \
            * hw.gemm_pack_byte_s
    launches = jnp.asarray(stage.launches, jnp.float32)
    if hw.parallel_stage_bytes is not None and stage.kind == "elementwise":  # small loops run on the calling thread
        per_launch = (stage.compulsory_bytes + stage.reuse_bytes) / jnp.maximum(launches, 1e-30)
        launches = launches * jnp.minimum(1.0, per_launch / hw.parallel_stage_bytes)
    latency = smooth_max(compute_s, memory_s, onchip_s, p=hw.overlap_exponent) + launches * hw.stage_overhead_s
    if hw.power_cap_w is not None:  # a power-capped board throttles: no stage draws more than the cap
        latency = jnp.maximum(latency, energy_j / (hw.power_cap_w - hw.static_power_w))
    return StageCost(latency, compute_s, memory_s, energy_j, dram, onchip, stage.macs, onchip_s, zero, zero,
                     compute_j, zero, zero, zero)


def runs_on_nmp(stage: Stage, hw: HardwareSpec) -> bool:
    """Whether ``stage`` may be mapped onto ``hw.nmp``: an aggregation, or a GEMV (`Stage.gemv`) on
    units that run GEMVs in place (``NearMemorySpec.gemv_broadcast_units``)."""
    if hw.nmp is None:
        return False
    return stage.is_aggregation or (stage.gemv and hw.nmp.gemv_broadcast_units is not None)


def nmp_stage_cost(stage: Stage, hw: HardwareSpec, hardened: bool = False) -> StageCost:
    """Cost of an aggregation stage, or a GEMV on units that run them, mapped onto ``hw.nmp`` (see
    the module docstring; stages without rows, SDDMM and softmax, keep the host's byte counts, no
    imbalance or replication). A GEMV (`workload.gemv_stage`, Lee et al. ISCA 2021's PIM GEMV):
    each unit streams its share of the matrix from its banks once per call (internal = the stage's
    ``compulsory_bytes - link_bytes``) at its MAC rate, the vector is written and the result read
    once per broadcast group of ``gemv_broadcast_units`` units (link = ``link_bytes * units /
    gemv_broadcast_units``; ASSUMPTION: the result too, as partial sums per group, an upper bound).

    Raises:
      ValueError: ``hw`` has no near-memory units, or the stage may not run on them (`runs_on_nmp`).
    """
    nmp = hw.nmp
    if not runs_on_nmp(stage, hw):
        raise ValueError(f"nmp_stage_cost: needs hw.nmp and an aggregation stage (or a GEMV on units that run "
                         f"them), got {hw.name!r} / {stage.kind!r}")
    zero = jnp.zeros((), jnp.float32)
    units = jnp.asarray(nmp.units, jnp.float32)
    rate = nmp_macs_per_s(nmp, stage.bits, hardened) * units
    floor = _floor_factor(stage, nmp.access_granularity_bytes, hardened)
    link = zero if stage.link_bytes is None else stage.link_bytes
    reduce_s = zero
    if stage.gemv:
        imbalance = jnp.ones((), jnp.float32)
        internal = jnp.maximum(stage.compulsory_bytes - link, 0.0)
        link = link * units / nmp.gemv_broadcast_units
    elif stage.working_set_rows is None or stage.link_bytes is None:
        imbalance = jnp.ones((), jnp.float32)
        internal = stage.compulsory_bytes + stage.reuse_bytes * floor * (1.0 - _hit(stage, nmp.buffer_bytes, floor))
    else:
        passes, n, nnz, x, out = _aggregation_counts(stage)
        structure = jnp.maximum(stage.compulsory_bytes / passes - x - out, 0.0)
        row_x, row_out = x / n, out / n
        share = -jnp.expm1(-nnz / (units * n))  # f: rows one unit touches / N
        first = units * n * share  # rows read once per unit (its working set, all units)
        hit = _hit(stage, nmp.buffer_bytes, floor, share)
        internal = passes * (structure + out + first * row_x * floor
                             + jnp.maximum(nnz - first, 0.0) * row_x * floor * (1.0 - hit))
        cv = 1.0 / jnp.sqrt(jnp.maximum(nnz / n, 1e-30)) if stage.in_degree_cv is None else stage.in_degree_cv
        imbalance = 1.0 + jnp.sqrt(2.0 * jnp.log(units)) * cv * jnp.sqrt(units / n)
        if stage.max_in_degree is not None and nmp.interval_rows is None:
            imbalance = jnp.maximum(imbalance, stage.max_in_degree / jnp.maximum(nnz / units, 1e-30))
        if nmp.interval_rows is not None:
            # GNNear's dataflow: sender partition, interval shards of destinations, partial sums
            intervals = jnp.maximum(1.0, n / nmp.interval_rows)
            partials = _partial_rows(n, nnz, units, nmp.group_units, nmp.duplicate_fraction)
            internal = passes * (structure + _interval_loaded_rows(n, nnz, intervals) * row_x * floor
                                 + partials * row_out)
            copies = 1.0 + nmp.duplicate_fraction * (nmp.group_units - 1.0)  # duplicated rows written D times
            link = passes * (x * copies + partials * row_out)
            host_adds = jnp.maximum(partials - n, 0.0) * row_out / 4.0  # one add per 4 output bytes (assumed)
            reduce_s = passes * host_adds / vector_macs_per_s(hw, 32.0, hardened)
        elif nmp.replicate_features:
            replicate = first * row_x + out  # each unit its own copy of the rows it gathers
            partial = x + first * row_out  # sender partition: partial sums reduced on the host
            replicate_wins = replicate <= partial
            link = passes * jnp.where(replicate_wins, replicate, partial)
            host_adds = jnp.maximum(first - n, 0.0) * row_out / 4.0  # one add per 4 output bytes (assumed)
            reduce_s = jnp.where(replicate_wins, 0.0, passes * host_adds / vector_macs_per_s(hw, 32.0, hardened))
    compute_s = imbalance * stage.macs / rate
    nmp_s = imbalance * internal / (nmp.internal_bw_bytes_per_s * units)
    link_s = link / nmp.host_link_bw_bytes_per_s + reduce_s
    compute_j = stage.macs * nmp_mac_energy_pj(nmp, stage.bits, hardened) * PJ
    energy_j = compute_j + (internal * nmp.internal_energy_pj_per_byte + link * nmp.host_link_energy_pj_per_byte) * PJ
    latency = smooth_max(compute_s, nmp_s, link_s) + stage.launches * hw.stage_overhead_s
    return StageCost(latency, compute_s, zero, energy_j, zero, zero, stage.macs, zero, nmp_s, link_s,
                     compute_j, internal, link, jnp.ones((), jnp.float32))


def _candidate(stages, hw: HardwareSpec, use_nmp: bool, overlap_units: bool, hardened: bool):
    near_memory = [use_nmp and runs_on_nmp(s, hw) for s in stages]
    costs = [nmp_stage_cost(s, hw, hardened) if on else stage_cost(s, hw, hardened) for s, on in zip(stages, near_memory)]
    host = sum(c.latency_s for c, on in zip(costs, near_memory) if not on)
    near = sum(c.latency_s for c, on in zip(costs, near_memory) if on)
    if use_nmp and overlap_units:
        latency = smooth_max(jnp.asarray(host, jnp.float32), jnp.asarray(near, jnp.float32))
    else:
        latency = host + near
    return costs, latency


def _stage_names(stages, taken=()) -> list[str]:
    """Stage names within a layer: the kind, with a counter from the second of a kind on
    ("gemm", "gemm1", ...), so no stage's cost is dropped from the totals. The two dataflow orders
    hold the same kinds, so their names match and one can be selected for the other."""
    names, seen = [], set(taken)
    for s in stages:
        name, i = s.kind, 1
        while name in seen:
            name, i = f"{s.kind}{i}", i + 1
        seen.add(name)
        names.append(name)
    return names


def _pipelined(stages) -> tuple:
    """An aggregate-first layer on an accelerator whose aggregation engine feeds its combination
    engine directly (HyGCN's inter-engine pipeline, Yan et al. HPCA 2020 Sec. 4.3): the
    aggregated rows never go to DRAM, so an aggregation stage followed by a GEMM drops the
    write of its output and the GEMM the read of it (``link_bytes - working_set_bytes`` of the
    aggregation: its result)."""
    stages = list(stages)
    for i in range(len(stages) - 1):
        a, g = stages[i], stages[i + 1]
        if a.is_aggregation and g.kind == "gemm" and a.link_bytes is not None:
            out = jnp.maximum(a.link_bytes - a.working_set_bytes, 0.0)
            stages[i] = dataclasses.replace(a, compulsory_bytes=jnp.maximum(a.compulsory_bytes - out, 0.0))
            stages[i + 1] = dataclasses.replace(g, compulsory_bytes=jnp.maximum(g.compulsory_bytes - out, 0.0))
    return tuple(stages)


def _epilogue(stage: Stage) -> Stage:
    """An elementwise stage run in the epilogue of the kernel that produced its input
    (``HardwareSpec.fuses_epilogue``): its DRAM traffic is ``Stage.epilogue_bytes`` (the operands
    and outputs beyond the producer's result), no launch of its own, no passes; its operations
    stay. A stage without ``epilogue_bytes`` does not fuse and is returned unchanged."""
    if stage.epilogue_bytes is None:
        return stage
    zero = jnp.zeros((), jnp.float32)
    return dataclasses.replace(stage, compulsory_bytes=stage.epilogue_bytes, reuse_bytes=zero, launches=zero,
                               passes=jnp.ones((), jnp.float32))


def _select(use_first: jax.Array, a, b):
    return jax.tree.map(lambda x, y: jnp.where(use_first, x, y), a, b)


MAPPING_OBJECTIVES = ("latency_s", "energy_j", "dram_bytes")
"""What `estimate` may choose a layer's mapping (dataflow order x unit) by: a `CostReport` total."""


def estimate(workload: Workload, hw: HardwareSpec, *, allow_nmp: bool = True,
             overlap_units: bool = True, hardened: bool = False, mapping: str = "latency_s") -> CostReport:
    """Cost of ``workload`` on ``hw``. Pure and differentiable; see the module docstring.

    Args:
      workload: a `Workload` (e.g. from ``model.workload(...)``).
      hw: a `HardwareSpec` (e.g. ``codesign.hwmodel.presets.get("h100")``).
      allow_nmp: consider mapping aggregation (and GEMVs, on units that run them: `runs_on_nmp`)
        onto ``hw.nmp`` (when the spec has one).
      overlap_units: pipeline host and near-memory stages of a layer (smooth max, not sum).
      hardened: the cost the hardware charges (each operand at its precision tier, whole memory
        granules); the default relaxes both between tiers / granules (equal at them), which is
        what a training loss should differentiate (`stage_cost`).
      mapping: what each layer's mapping (dataflow order x aggregation unit) is chosen by, one of
        `MAPPING_OBJECTIVES`: "latency_s" (a schedule for speed, the default), "energy_j" (the
        layer's stage energies + static power over its latency) or "dram_bytes". A run prices
        its model and its reference by its own objective (`codesign.train.store_costs`): on
        gnnear the fastest mapping of a small layer can put its aggregation on the near-memory
        units at several times the energy of the host alone.

    Returns:
      `CostReport`.

    Raises:
      ValueError: ``mapping`` not one of `MAPPING_OBJECTIVES`.
    """
    if mapping not in MAPPING_OBJECTIVES:
        raise ValueError(f"estimate(mapping): must be one of {', '.join(MAPPING_OBJECTIVES)}, got {mapping!r}")
    if _traced(workload) and _hashable(hw):
        return _estimate_jit(workload, hw, allow_nmp, overlap_units, hardened, mapping)
    return _estimate(workload, hw, allow_nmp, overlap_units, hardened, mapping)


def _traced(tree) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree.leaves(tree))


def _hashable(hw: HardwareSpec) -> bool:
    try:
        hash(hw)
    except TypeError:  # a spec holding arrays (e.g. one differentiated through)
        return False
    return True


def _mapping_key(costs, latency, hw: HardwareSpec, mapping: str) -> jax.Array:
    """A mapping candidate's cost by ``mapping`` (`estimate`): its latency, its energy (stages +
    static power over its latency) or its DRAM bytes."""
    if mapping == "latency_s":
        return latency
    if mapping == "energy_j":
        return sum(c.energy_j for c in costs) + hw.static_power_w * latency
    return sum(c.dram_bytes for c in costs)


def _estimate(workload: Workload, hw: HardwareSpec, allow_nmp: bool, overlap_units: bool,
              hardened: bool, mapping: str = "latency_s") -> CostReport:
    stages, agg_first, on_nmp = {}, {}, {}
    total_latency = jnp.zeros((), jnp.float32)
    for layer in workload.layers:
        best = None
        orders = (("aggregate_first", layer.aggregate_first), ("combine_first", layer.combine_first))
        if hw.aggregate_first_only:
            orders = (("aggregate_first", _pipelined(layer.aggregate_first)),)
        for order, order_stages in orders:
            for use_nmp in ((False, True) if (allow_nmp and hw.nmp is not None) else (False,)):
                costs, latency = _candidate(order_stages, hw, use_nmp, overlap_units, hardened)
                flags = (jnp.float32(order == "aggregate_first"), jnp.float32(use_nmp))
                cand = (dict(zip(_stage_names(order_stages), costs)), latency, flags,
                        _mapping_key(costs, latency, hw, mapping))
                if best is None:
                    best = cand
                else:
                    best = _select(cand[3] < best[3], cand, best)
        by_kind, latency, (af, nm), _ = best
        agg_first[layer.name], on_nmp[layer.name] = af, nm
        for kind, c in by_kind.items():
            stages[f"{layer.name}/{kind}"] = c
        elem = [stage_cost(_epilogue(s) if hw.fuses_epilogue else s, hw, hardened) for s in layer.elementwise]
        for name, c in zip(_stage_names(layer.elementwise, taken=by_kind), elem):
            stages[f"{layer.name}/{name}"] = c
        total_latency = total_latency + latency + sum(c.latency_s for c in elem)
    total = lambda field: sum((getattr(c, field) for c in stages.values()), jnp.zeros((), jnp.float32))
    levels = {"dram": total("dram_bytes"), "onchip": total("onchip_bytes"), "nmp": total("nmp_bytes"),
              "link": total("link_bytes")}
    static_j = hw.static_power_w * total_latency
    return CostReport(total_latency, total("energy_j") + static_j, total("dram_bytes"), stages, agg_first, on_nmp,
                      levels, static_j)


_estimate_jit = jax.jit(_estimate, static_argnums=(1, 2, 3, 4, 5))
"""`_estimate` as one jitted function, which `estimate` calls when the workload is traced (a cost
term inside a training step) and the spec is concrete: JAX then traces the cost model once per
workload structure and spec in a process and reuses it in every later trace of a step (a new
`train` call, another seed), instead of re-tracing its several hundred operations each time.
Concrete workloads keep the eager path (no compilation of one-off reports). Assumption: the
cost model reads only the workload, the spec and the flags (no module-level state that could change
between calls); a spec that cannot be hashed (one holding arrays) takes the eager path."""
