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
Peak power (W): every engine at its peak rate x its energy per op (the int8 MAC, or the fp32 MAC
on a ``fp32_only`` design), plus DRAM and near-memory traffic at full bandwidth x energy per byte,
plus ``static_power_w``. The numbers are relative, technology-fixed (45 nm) estimates: compare
designs with them, do not quote them as a chip's area.

Both functions are differentiable in the spec's continuous fields.
"""

from __future__ import annotations

import jax.numpy as jnp

from codesign.hwmodel.spec import PJ, HardwareSpec, nmp_mac_energy_pj

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


def peak_power_w(hw: HardwareSpec) -> jnp.ndarray:
    """Power (W) with the matrix engine (int8; fp32 on a ``fp32_only`` design), the vector units
    (fp32), DRAM and the near-memory units (int MACs at ``int_mac_energy_pj``) all at their peak
    rates, plus ``static_power_w``."""
    if hw.fp32_only:
        matrix = hw.matrix_fp32_macs_per_s * hw.mac_energy_fp32_pj
    else:
        matrix = hw.matrix_int8_macs_per_s * hw.mac_energy_int8_pj
    p = (matrix + hw.vector_fp32_macs_per_s * hw.mac_energy_fp32_pj
         + hw.dram_bw_bytes_per_s * hw.dram_energy_pj_per_byte) * PJ + hw.static_power_w
    if hw.nmp is not None:
        n = hw.nmp
        p = p + n.units * (n.int_macs_per_s * nmp_mac_energy_pj(n, 8.0, hardened=True)
                           + n.internal_bw_bytes_per_s * n.internal_energy_pj_per_byte) * PJ
    return jnp.asarray(p)
