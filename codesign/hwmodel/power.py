"""Peak-power model of a `HardwareSpec`: the bound each preset's published power is checked
against (`presets.POWER_LIMITS_W`, `presets.power_limit_table`, docs/hwmodel.md).

Peak power (W, `peak_power_parts`): every engine at the precision tier where rate x MAC energy is
largest, plus on-chip, DRAM and near-memory traffic at their bandwidths x energy per byte, plus
``static_power_w``; the per-op energies are the preset's own, scaled to its process node
(`spec.scaled_op_energies`). Differentiable in the spec's continuous fields.
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign.hwmodel.spec import (NMP_TIERS, PJ, PRECISION_TIERS, HardwareSpec, mac_energy_pj, matrix_macs_per_s,
                                   nmp_mac_energy_pj, nmp_macs_per_s, vector_macs_per_s)

PEAK_POWER_PARTS = ("matrix", "vector", "onchip", "dram", "nmp", "static")
CHIP_PARTS = ("matrix", "vector", "onchip", "static")
"""The parts of `peak_power_parts` on the compute chip itself (no DRAM, no near-memory units)."""


def _max_over_tiers(rate, energy) -> jnp.ndarray:
    """max over `PRECISION_TIERS` of rate(bits) x energy(bits) (MAC/s x pJ)."""
    return jnp.max(jnp.stack([rate(b) * energy(b) for b in PRECISION_TIERS]))


def peak_power_parts(hw: HardwareSpec) -> dict:
    """Peak power (W) by part, ``{"matrix", "vector", "onchip", "dram", "nmp", "static", "total"}``.

    Definition (an upper bound on the power the cost model can charge): every engine at the
    precision tier where its peak rate x its MAC energy is largest (`PRECISION_TIERS`, the charged
    tiers: ``hardened``; a ``fp32_only`` engine spends the fp32 MAC energy at every tier; a TF32
    matrix engine its ``matrix_mac_energy_fp32_pj``); the matrix engine and the vector units at
    the same time (a GPU's tensor cores and CUDA cores share the SMs' issue slots and register
    files and do not both reach peak at once, so for GPUs this overstates; for accelerators whose
    two engines pipeline, HyGCN, it is the operating point); on-chip traffic at
    ``onchip_bw_bytes_per_s`` x ``sram_energy_pj_per_byte`` where that roof is set (else the model
    does not bound it: 0 here); DRAM at its peak bandwidth x ``dram_energy_pj_per_byte``; the
    near-memory units at their peak MAC rate (the largest tier) and internal bandwidth, and the
    host link at its bandwidth; plus ``static_power_w``. Efficiencies (< 1 on fitted presets) are
    ignored: the chip can run at its peak rates.
    """
    parts = {
        "matrix": _max_over_tiers(lambda b: matrix_macs_per_s(hw, b, hardened=True),
                                  lambda b: mac_energy_pj(hw, b, hardened=True, matrix=True)) * PJ,
        "vector": _max_over_tiers(lambda b: vector_macs_per_s(hw, b, hardened=True),
                                  lambda b: mac_energy_pj(hw, b, hardened=True)) * PJ,
        "onchip": jnp.zeros(()) if hw.onchip_bw_bytes_per_s is None
        else jnp.asarray(hw.onchip_bw_bytes_per_s * hw.sram_energy_pj_per_byte * PJ),
        "dram": jnp.asarray(hw.dram_bw_bytes_per_s * hw.dram_energy_pj_per_byte * PJ),
        "nmp": jnp.zeros(()),
        "static": jnp.asarray(hw.static_power_w, jnp.float32),
    }
    if hw.nmp is not None:
        n = hw.nmp
        compute = jnp.max(jnp.stack([nmp_macs_per_s(n, b, hardened=True) * nmp_mac_energy_pj(n, b, hardened=True)
                                     for b in NMP_TIERS]))
        parts["nmp"] = (n.units * (compute + n.internal_bw_bytes_per_s * n.internal_energy_pj_per_byte)
                        + n.host_link_bw_bytes_per_s * n.host_link_energy_pj_per_byte) * PJ
    parts = {k: jnp.asarray(v, jnp.float32) for k, v in parts.items()}
    parts["total"] = sum(parts[k] for k in PEAK_POWER_PARTS)
    if hw.power_cap_w is not None:  # `stage_cost` slows a stage down rather than charge more
        parts["total"] = jnp.minimum(parts["total"], jnp.asarray(hw.power_cap_w, jnp.float32))
    return parts


def peak_power_w(hw: HardwareSpec, parts=PEAK_POWER_PARTS) -> jnp.ndarray:
    """Peak power (W): the sum of `peak_power_parts` over ``parts`` (default all of them;
    `CHIP_PARTS` for the compute chip alone, to compare with a chip's published power), at most
    ``hw.power_cap_w`` where the board has one: `stage_cost` then slows a stage down instead."""
    p = peak_power_parts(hw)
    total = sum(p[k] for k in parts)
    if hw.power_cap_w is not None:  # a power-capped board (`HardwareSpec.power_cap_w`) draws at most its cap
        total = jnp.minimum(total, jnp.asarray(hw.power_cap_w, jnp.float32))
    return total
