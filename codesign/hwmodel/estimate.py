"""`estimate(workload, hw) -> CostReport`: the analytic, differentiable cost model.

Per stage (roofline; Williams, Waterman & Patterson, CACM 2009):
  compute_s = macs / rate(kind, bits)
  dram_bytes = compulsory_bytes + reuse_bytes * miss,  miss = 1 - min(1, buffer / working_set)
      (independent-reference capacity model: a buffer holding a fraction of a uniformly
      re-referenced operand hits with that fraction)
  memory_s = dram_bytes / dram_bw
  latency_s = smooth_max(compute_s, memory_s)       (p-norm, p = `SMOOTH_MAX_P`)
  energy_j = macs * mac_energy(bits) + dram_bytes * dram_energy + onchip_bytes * sram_energy
Per layer the cheaper (lower latency) of the two dataflow orders is taken; stages run one after
another, so latencies add. The function is pure: `jax.jit`, `jax.vmap` and `jax.grad` apply.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from codesign.hwmodel.spec import PJ, HardwareSpec, mac_energy_pj, matrix_macs_per_s, vector_macs_per_s
from codesign.hwmodel.workload import Stage, Workload

SMOOTH_MAX_P = 16.0  # overestimates max(a, b) by at most 2**(1/16) - 1 = 4.4% (when a == b)


def smooth_max(a: jax.Array, b: jax.Array, p: float = SMOOTH_MAX_P) -> jax.Array:
    """``(a^p + b^p)^(1/p)`` for a, b >= 0, computed without underflow; differentiable."""
    m = jnp.maximum(jnp.maximum(a, b), jnp.finfo(jnp.float32).tiny)
    return m * ((a / m) ** p + (b / m) ** p) ** (1.0 / p)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class StageCost:
    """Cost of one stage (float32 scalars): ``latency_s``, ``compute_s``, ``memory_s`` (s),
    ``energy_j`` (J), ``dram_bytes``, ``onchip_bytes`` (bytes), ``macs``."""

    latency_s: jax.Array
    compute_s: jax.Array
    memory_s: jax.Array
    energy_j: jax.Array
    dram_bytes: jax.Array
    onchip_bytes: jax.Array
    macs: jax.Array

    @property
    def bound(self) -> str:
        """"compute" or "memory": which roof bounds this stage (concrete values only)."""
        return "compute" if float(self.compute_s) >= float(self.memory_s) else "memory"


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CostReport:
    """Modeled cost of a workload on a hardware target.

    Fields:
      latency_s: end-to-end latency (s), float32 scalar.
      energy_j: dynamic energy (J), float32 scalar.
      dram_bytes: off-chip traffic (bytes), float32 scalar.
      stages: ``{"<layer>/<kind>": StageCost}`` for the chosen dataflow order of each layer.
      aggregate_first: ``{"<layer>": 1.0 or 0.0}``, 1.0 where aggregate-then-combine was cheaper.
    """

    latency_s: jax.Array
    energy_j: jax.Array
    dram_bytes: jax.Array
    stages: dict
    aggregate_first: dict

    def summary(self) -> dict:
        """Plain-Python totals: ``{"latency_s", "energy_j", "dram_bytes"}`` as floats."""
        return {"latency_s": float(self.latency_s), "energy_j": float(self.energy_j),
                "dram_bytes": float(self.dram_bytes)}


def stage_cost(stage: Stage, hw: HardwareSpec) -> StageCost:
    """Roofline cost of one stage on ``hw`` (see module docstring for the formulas)."""
    rate = matrix_macs_per_s(hw, stage.bits) if stage.kind == "gemm" else vector_macs_per_s(hw, stage.bits)
    compute_s = stage.macs / rate
    hit = jnp.minimum(1.0, hw.onchip_buffer_bytes / jnp.maximum(stage.working_set_bytes, 1.0))
    dram = stage.compulsory_bytes + stage.reuse_bytes * (1.0 - hit)
    onchip = stage.compulsory_bytes + stage.reuse_bytes
    memory_s = dram / hw.dram_bw_bytes_per_s
    energy_j = (stage.macs * mac_energy_pj(hw, stage.bits) + dram * hw.dram_energy_pj_per_byte
                + onchip * hw.sram_energy_pj_per_byte) * PJ
    return StageCost(smooth_max(compute_s, memory_s), compute_s, memory_s, energy_j, dram, onchip, stage.macs)


def _select(use_first: jax.Array, a: StageCost, b: StageCost) -> StageCost:
    return jax.tree.map(lambda x, y: jnp.where(use_first, x, y), a, b)


def estimate(workload: Workload, hw: HardwareSpec) -> CostReport:
    """Cost of ``workload`` on ``hw``. Pure and differentiable; see the module docstring.

    Args:
      workload: a `Workload` (e.g. from ``model.workload(...)``).
      hw: a `HardwareSpec` (e.g. ``codesign.hwmodel.presets.get("h100")``).

    Returns:
      `CostReport`.
    """
    stages, agg_first = {}, {}
    for layer in workload.layers:
        ac = [stage_cost(s, hw) for s in layer.aggregate_first]
        ca = [stage_cost(s, hw) for s in layer.combine_first]
        choose_ac = sum(c.latency_s for c in ac) < sum(c.latency_s for c in ca)
        agg_first[layer.name] = choose_ac.astype(jnp.float32)
        by_kind_ac = {s.kind: c for s, c in zip(layer.aggregate_first, ac)}
        by_kind_ca = {s.kind: c for s, c in zip(layer.combine_first, ca)}
        for kind in by_kind_ac:
            stages[f"{layer.name}/{kind}"] = _select(choose_ac, by_kind_ac[kind], by_kind_ca[kind])
        for s in layer.elementwise:
            stages[f"{layer.name}/{s.kind}"] = stage_cost(s, hw)
    total = lambda field: sum(getattr(c, field) for c in stages.values())
    return CostReport(total("latency_s"), total("energy_j"), total("dram_bytes"), stages, agg_first)
