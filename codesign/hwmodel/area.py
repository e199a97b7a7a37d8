"""Area and peak-power model of a `HardwareSpec`, for searching hardware under a budget.

Area (mm^2, 45 nm, Horowitz ISSCC'14 Fig. 1.1.9 operator areas; SRAM from a 0.346 um^2 6T cell,
Mistry et al., IEDM 2007 (Intel 45 nm), with 1.5x array overhead for periphery):
  matrix engine: (int8 MACs per cycle) x (int8 mult 282 um^2 + int8 add 36 um^2), where
                 MACs per cycle = matrix_int8_macs_per_s / clock_hz; a ``fp32_only`` engine
                 (HyGCN) is fp32 MACs: (fp32 MACs per cycle) x the fp32 MAC area below
  vector units:  (fp32 MACs per cycle) x (fp32 mult 7700 um^2 + fp32 add 4184 um^2)
  buffer:        onchip_buffer_bytes x 8 bits x 0.346 um^2 x 1.5
  NMP units:     units x (int MACs per cycle at the unit's own clock (``NearMemorySpec.clock_hz``,
                 else the host's) x int8 MAC area + buffer area)
Peak power (W, `peak_power_parts`): every engine at the precision tier where rate x MAC energy is
largest, plus on-chip, DRAM and near-memory traffic at their bandwidths x energy per byte, plus
``static_power_w``; the per-op energies are the preset's own, scaled to its process node
(`spec.scaled_op_energies`). The areas are relative, technology-fixed (45 nm) estimates: compare
designs with them, do not quote them as a chip's area.

Both functions are differentiable in the spec's continuous fields.
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign.hwmodel.spec import (NMP_TIERS, PJ, PRECISION_TIERS, HardwareSpec, mac_energy_pj, matrix_macs_per_s,
                                   nmp_mac_energy_pj, nmp_macs_per_s, vector_macs_per_s)

UM2_PER_MM2 = 1e6
INT8_MAC_AREA_UM2 = 282.0 + 36.0  # Horowitz ISSCC'14: 8-bit mult + 8-bit add
FP32_MAC_AREA_UM2 = 7700.0 + 4184.0  # Horowitz ISSCC'14: fp32 mult + fp32 add
SRAM_CELL_UM2 = 0.346  # Mistry et al., IEDM 2007
SRAM_ARRAY_OVERHEAD = 1.5  # sense amps, decoders, wiring (assumed)


def area_mm2(hw: HardwareSpec) -> dict:
    """Area breakdown ``{"matrix", "vector", "buffer", "nmp", "total"}`` in mm^2 (45 nm).

    Raises:
      ValueError: ``hw.clock_hz`` is None (MACs per cycle are undefined).
    """
    if hw.clock_hz is None:
        raise ValueError(f"area_mm2: HardwareSpec({hw.name!r}).clock_hz is None; set it to model area")
    sram_um2_per_byte = 8 * SRAM_CELL_UM2 * SRAM_ARRAY_OVERHEAD
    if hw.fp32_only:
        matrix = hw.matrix_fp32_macs_per_s / hw.clock_hz * FP32_MAC_AREA_UM2
    else:
        matrix = hw.matrix_int8_macs_per_s / hw.clock_hz * INT8_MAC_AREA_UM2
    parts = {
        "matrix": matrix,
        "vector": hw.vector_fp32_macs_per_s / hw.clock_hz * FP32_MAC_AREA_UM2,
        "buffer": hw.onchip_buffer_bytes * sram_um2_per_byte,
        "nmp": jnp.zeros(()),
    }
    if hw.nmp is not None:
        n = hw.nmp
        clock = hw.clock_hz if n.clock_hz is None else n.clock_hz
        parts["nmp"] = n.units * (n.int_macs_per_s / clock * INT8_MAC_AREA_UM2 + n.buffer_bytes * sram_um2_per_byte)
    parts = {k: jnp.asarray(v) / UM2_PER_MM2 for k, v in parts.items()}
    parts["total"] = sum(parts.values())
    return parts


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
    return parts


def peak_power_w(hw: HardwareSpec, parts=PEAK_POWER_PARTS) -> jnp.ndarray:
    """Peak power (W): the sum of `peak_power_parts` over ``parts`` (default all of them;
    `CHIP_PARTS` for the compute chip alone, to compare with a chip's published power)."""
    p = peak_power_parts(hw)
    return sum(p[k] for k in parts)
