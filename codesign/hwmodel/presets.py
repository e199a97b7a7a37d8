"""Hardware presets. Each documents the source of every number.

`get(name)` returns a preset by name; `names()` lists them.
"""

from __future__ import annotations

from codesign.hwmodel.spec import HOROWITZ_DRAM_PJ_PER_BYTE, HardwareSpec

MIB = 1024**2


def h100() -> HardwareSpec:
    """NVIDIA H100 SXM5 80 GB.

    Sources:
      - NVIDIA H100 Tensor Core GPU datasheet (2023), dense (non-sparse) tensor-core rates:
        TF32 494.7 TFLOP/s (used for fp32 GEMM: XLA's default f32 matmul precision on Hopper runs
        on TF32 tensor cores), BF16 989.4 TFLOP/s, INT8 1978.9 TOPS; Hopper has no INT4 tensor
        cores, so int4 runs at the INT8 rate. FP32 (CUDA cores) 66.9 TFLOP/s for the vector units.
        1 MAC = 2 FLOP.
      - HBM3 bandwidth 3.35 TB/s (datasheet); L2 cache 50 MB (NVIDIA H100 whitepaper).
      - HBM energy 3.9 pJ/bit = 31.2 pJ/byte (O'Connor et al., "Fine-Grained DRAM", MICRO 2017,
        HBM2 access energy). Per-op and SRAM energies: Horowitz ISSCC'14 (45 nm) defaults.
    """
    return HardwareSpec(
        name="h100",
        matrix_fp32_macs_per_s=494.7e12 / 2,
        matrix_bf16_macs_per_s=989.4e12 / 2,
        matrix_int8_macs_per_s=1978.9e12 / 2,
        matrix_int4_macs_per_s=1978.9e12 / 2,
        vector_fp32_macs_per_s=66.9e12 / 2,
        dram_bw_bytes_per_s=3.35e12,
        dram_energy_pj_per_byte=3.9 * 8,
        onchip_buffer_bytes=50e6,
    )


def cpu() -> HardwareSpec:
    """The 2-core x86-64 (AMD EPYC, AVX2) virtual machine this project is developed and tested on.

    Sources (nominal; the efficiency factors are fitted by `experiments/hwmodel_validation.py`):
      - GEMM rate: 182 GFLOP/s measured here with a 2048^3 float32 numpy/OpenBLAS product
        (2026-11-22) = 91e9 MAC/s. XLA on CPU has no faster bf16/int8 GEMM path, so all
        precisions use that rate.
      - Vector rate: 2 cores x 8 fp32 lanes (AVX2) x 2.45 GHz = 39.2e9 MAC/s (one FMA port for
        gather-bound code).
      - DRAM: 18 GB/s read+write measured here with a 200 MB numpy copy (2026-11-22); DRAM energy
        1.3 nJ per 64-bit access (Horowitz ISSCC'14, low end of 1.3-2.6 nJ).
      - On-chip buffer: 32 MiB L3 (lscpu).
    """
    return HardwareSpec(
        name="cpu",
        matrix_fp32_macs_per_s=91e9,
        matrix_bf16_macs_per_s=91e9,
        matrix_int8_macs_per_s=91e9,
        matrix_int4_macs_per_s=91e9,
        vector_fp32_macs_per_s=39.2e9,
        dram_bw_bytes_per_s=18e9,
        dram_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE,
        onchip_buffer_bytes=32 * MIB,
    )


_PRESETS = {"h100": h100, "cpu": cpu}


def names() -> list[str]:
    """Names accepted by `get`."""
    return sorted(_PRESETS)


def get(name: str) -> HardwareSpec:
    """The preset called ``name`` (case-insensitive).

    Raises:
      ValueError: unknown name; the message lists the known presets.
    """
    key = name.lower()
    if key not in _PRESETS:
        raise ValueError(f"unknown hardware preset {name!r}; known presets: {', '.join(names())}")
    return _PRESETS[key]()
