"""Hardware presets. Each documents the source of every number.

`get(name)` returns a preset by name; `names()` lists them.
"""

from __future__ import annotations

from codesign.hwmodel.spec import HOROWITZ_DRAM_PJ_PER_BYTE, HardwareSpec, NearMemorySpec

MIB = 1024**2
HBM2_PJ_PER_BYTE = 3.9 * 8  # O'Connor et al., "Fine-Grained DRAM", MICRO 2017: HBM2 3.9 pJ/bit
# DRAM access without the off-chip I/O: O'Connor et al. (MICRO 2017) attribute roughly 2/3 of an
# HBM2 access's energy to data movement outside the array; we take 1/3 of the access energy for an
# access that stays inside the DRAM die/rank (assumption derived from that breakdown).
INTERNAL_ACCESS_FRACTION = 1.0 / 3.0


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
        dram_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
        onchip_buffer_bytes=50e6,
        clock_hz=1.98e9,  # max boost, NVIDIA H100 whitepaper
    )


def a100() -> HardwareSpec:
    """NVIDIA A100 SXM4 80 GB.

    Sources: NVIDIA A100 Tensor Core GPU datasheet (2021), dense rates: TF32 156 TFLOP/s (fp32
    GEMM, XLA default precision), BF16 312 TFLOP/s, INT8 624 TOPS, INT4 1248 TOPS, FP32 (CUDA
    cores) 19.5 TFLOP/s; HBM2e 2039 GB/s; L2 40 MB and 1410 MHz boost clock (NVIDIA A100
    whitepaper). HBM energy: O'Connor et al. MICRO 2017 (3.9 pJ/bit).
    """
    return HardwareSpec(
        name="a100",
        matrix_fp32_macs_per_s=156e12 / 2,
        matrix_bf16_macs_per_s=312e12 / 2,
        matrix_int8_macs_per_s=624e12 / 2,
        matrix_int4_macs_per_s=1248e12 / 2,
        vector_fp32_macs_per_s=19.5e12 / 2,
        dram_bw_bytes_per_s=2.039e12,
        dram_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
        onchip_buffer_bytes=40e6,
        clock_hz=1.41e9,
    )


def hygcn() -> HardwareSpec:
    """HyGCN (Yan et al., "HyGCN: A GCN Accelerator with Hybrid Architecture", HPCA 2020), its
    evaluated configuration at 1 GHz.

    Sources (HyGCN Sec. 6 / Table 4): Combination Engine of 8 systolic modules of 4 x 128 PEs
    (4096 fp32 MACs per cycle); Aggregation Engine of 32 SIMD16 cores (512 fp32 MACs per cycle);
    HBM 1.0 at 256 GB/s; the aggregation's input buffer that holds gathered source features is
    128 KB (edge 2 MB, weight 2 MB, output 4 MB and aggregation 16 MB buffers are not row caches).
    HyGCN computes in fp32 only, so every precision runs at the fp32 rate and MAC energy
    (``fp32_only``): quantization saves HBM traffic there, not compute. HBM energy per byte:
    O'Connor et al. MICRO 2017 (HBM2; HyGCN's HBM 1.0 figure is not published).
    """
    return HardwareSpec(
        name="hygcn",
        matrix_fp32_macs_per_s=4096 * 1e9,
        matrix_bf16_macs_per_s=4096 * 1e9,
        matrix_int8_macs_per_s=4096 * 1e9,
        matrix_int4_macs_per_s=4096 * 1e9,
        vector_fp32_macs_per_s=512 * 1e9,
        vector_bf16_macs_per_s=512 * 1e9,
        vector_int8_macs_per_s=512 * 1e9,
        dram_bw_bytes_per_s=256e9,
        dram_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
        onchip_buffer_bytes=128 * 1024,
        clock_hz=1e9,
        fp32_only=True,
    )


def gnnear() -> HardwareSpec:
    """A GNNear-style system (Zhou et al., "GNNear: Accelerating Full-Batch Training of Graph
    Neural Networks with Near-Memory Processing", PACT 2022): aggregation (Reduce) on rank-level
    Near-Memory Engines (NMEs) in the DIMMs' buffer chips, combination (Update) on a centralized
    acceleration engine (CAE).

    Sources and assumptions:
      - Memory: DDR4-3200, 4 channels x 2 DIMMs x 2 ranks = 16 ranks (assumed system size; GNNear
        evaluates DIMM-based systems of this kind). One rank streams at the channel rate,
        25.6 GB/s (JEDEC DDR4-3200: 3200 MT/s x 8 B); the host link is 4 channels x 25.6 GB/s.
      - NME compute: 16 fp32 MAC lanes at 1 GHz per rank (assumed: GNNear does not publish a
        rate that is meant to bind; Reduce is bandwidth-bound), int operands 4x packed.
      - CAE: 4096 MACs at 1 GHz, as HyGCN's combination engine (assumed), 128 KB row buffer.
      - Energy: off-chip DDR4 access 1.3 nJ per 64 bits (Horowitz ISSCC'14); rank-internal
        access at `INTERNAL_ACCESS_FRACTION` of it; MACs from the Horowitz table.
    """
    return HardwareSpec(
        name="gnnear",
        matrix_fp32_macs_per_s=4096e9, matrix_bf16_macs_per_s=4096e9,
        matrix_int8_macs_per_s=4096e9, matrix_int4_macs_per_s=4096e9,
        vector_fp32_macs_per_s=512e9,
        dram_bw_bytes_per_s=4 * 25.6e9,
        dram_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE,
        onchip_buffer_bytes=128 * 1024,
        clock_hz=1e9,
        nmp=NearMemorySpec(
            units=16, internal_bw_bytes_per_s=25.6e9, int_macs_per_s=64e9, fp32_macs_per_s=16e9,
            mac_energy_pj=4.6, internal_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE * INTERNAL_ACCESS_FRACTION,
            buffer_bytes=64 * 1024, host_link_bw_bytes_per_s=4 * 25.6e9,
            host_link_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE),
    )


def upmem() -> HardwareSpec:
    """A 2,560-DPU UPMEM PIM server (the system of PyGim, Giannoula et al., SIGMETRICS 2025), host
    side as this project's `cpu` preset.

    Sources: Gomez-Luna et al., "Benchmarking a New Paradigm: An Experimental Analysis of a Real
    Processing-in-Memory Architecture", IEEE Access 2022: 2,560 DPUs at 350 MHz; 64 MB MRAM and
    64 KB WRAM per DPU; MRAM->WRAM bandwidth ~628 MB/s per DPU; arithmetic throughput per DPU
    (11+ tasklets) int32 add 58.56 MOPS, int32 mul 10.27 MOPS, fp32 add 4.91 MOPS, fp32 mul
    1.91 MOPS (a MAC = mul + add: 1/(1/mul + 1/add)); parallel DPU->CPU transfers 4.74 GB/s (the
    slower direction, CPU->DPU is 6.68 GB/s). Energy: MRAM access at `INTERNAL_ACCESS_FRACTION`
    of a DDR4 access (assumption), MACs at the Horowitz fp32/int8 MAC energies (assumption; DPU
    energy per op is not published).
    """
    host = cpu()
    mac = lambda mul, add: 1.0 / (1.0 / mul + 1.0 / add)
    return host.replace(
        name="upmem",
        nmp=NearMemorySpec(
            units=2560, internal_bw_bytes_per_s=628e6, int_macs_per_s=mac(10.27e6, 58.56e6),
            fp32_macs_per_s=mac(1.91e6, 4.91e6), mac_energy_pj=4.6,
            internal_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE * INTERNAL_ACCESS_FRACTION,
            buffer_bytes=64 * 1024, host_link_bw_bytes_per_s=4.74e9,
            host_link_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE),
    )


def hbm_pim() -> HardwareSpec:
    """Samsung HBM-PIM (Aquabolt-XL; Kwon et al., ISSCC 2021; Lee et al., ISCA 2021) beside an
    A100-class host (as in Samsung's evaluation with GPU hosts).

    Sources: 300 MHz programmable computing units (PCUs), 16-lane FP16 SIMD, 1.2 TFLOPS per cube
    -> 1.2e12 / (2 FLOP x 16 lanes x 300 MHz) = 125, i.e. 128 PCUs (one per two banks); bank-level
    parallelism gives 4x the off-chip bandwidth of a cube (Samsung), i.e. 4 x 307 GB/s (HBM2
    Aquabolt: 2.4 Gb/s x 1024 bits) over the 128 PCUs. One cube (assumption: the host's other
    stacks stay plain HBM). PCUs have no fp32: fp32 operands are assumed to take two FP16 passes.
    Energy: internal access at `INTERNAL_ACCESS_FRACTION` of an HBM2 access; FP16 MAC from
    Horowitz ISSCC'14 (1.5 pJ).
    """
    pcu_macs = 16 * 300e6
    return a100().replace(
        name="hbm-pim",
        nmp=NearMemorySpec(
            units=128, internal_bw_bytes_per_s=4 * 307e9 / 128, int_macs_per_s=pcu_macs,
            fp32_macs_per_s=pcu_macs / 2, mac_energy_pj=1.5,
            internal_energy_pj_per_byte=HBM2_PJ_PER_BYTE * INTERNAL_ACCESS_FRACTION,
            buffer_bytes=3 * 16 * 32,  # 3 register files of 16 x 256-bit entries per PCU (assumed size)
            host_link_bw_bytes_per_s=307e9, host_link_energy_pj_per_byte=HBM2_PJ_PER_BYTE),
    )


def cpu() -> HardwareSpec:
    """The 2-core x86-64 virtual machine this project is developed, tested and CI-run on: on
    2026-11-23 an AMD EPYC (Zen 5, AVX-512 with bf16) at 2.6 GHz, 32 MiB L3 shared with other
    tenants.

    Sources: the roofs are measured with XLA by `experiments/hwmodel_validation.py`
    (``measure_peaks``, median of 3 passes, 2026-11-23; results/hwmodel_validation_cpu.json):
      - matrix roof: a 2048^3 f32 ``jnp.dot`` at 219.6e9 MAC/s (439 GFLOP/s). XLA on CPU has no
        faster bf16/int8 GEMM path, so every precision gets that rate; XLA:CPU runs a bf16 dot as
        converts around an f32 dot, which `hwmodel.upcast_gemm_stages` costs (a plain bf16
        `gemm_stage` here omits the converts).
      - vector roof: 64 chained f32 multiply-adds per element over 1 MiB, 42.7e9 MAC/s; every
        precision the same (XLA:CPU computes bf16 elementwise and scatter work in f32).
      - DRAM: ``x * 2`` over 256 MiB, 40.8e9 B/s read + write (this VM's streaming bandwidth moved
        between 41 and 69 GB/s from one pass to the next); energy 1.3 nJ per 64-bit access
        (Horowitz ISSCC'14, low end of 1.3-2.6 nJ).
      - On-chip buffer: 32 MiB L3 (lscpu).
      - Calibration, fitted on 70 of 140 measured XLA GEMM / segment_sum kernels (f32 and bf16):
        held-out MAPE 17.0 %, Spearman 0.987 on the other 70 (over 10 random halves: median
        20.3 %, max 23.6 %; one pass of the timings is 8.2 % from their 3-pass median). XLA:CPU
        pays 3.8 ns per gathered or scatter-added row (``row_gather_overhead_s``) on top of its
        per-element gather / scatter-add work at 30 % of the vector roof (``gather_efficiency``);
        its converts run at 40 % (``vector_efficiency``); compute and memory time hardly overlap
        (``overlap_exponent`` 2.4; 1 = their sum).
    The 2026-11-22 host (AVX2, 182 GFLOP/s numpy GEMM, 24 GB/s) was a different machine under the
    same name: this preset is 44.6 % off (MAPE) on its timings, and the preset fitted there was
    81.8 % off on these; calibrate on your own machine with ``python experiments/hwmodel_validation.py``.
    """
    return HardwareSpec(
        name="cpu",
        matrix_fp32_macs_per_s=219.6e9,
        matrix_bf16_macs_per_s=219.6e9,  # XLA:CPU: converts + the f32 dot (upcast_gemm_stages)
        matrix_int8_macs_per_s=219.6e9,
        matrix_int4_macs_per_s=219.6e9,
        vector_fp32_macs_per_s=42.7e9,
        vector_bf16_macs_per_s=42.7e9,  # XLA:CPU computes bf16 elementwise/scatter in f32
        vector_int8_macs_per_s=42.7e9,
        dram_bw_bytes_per_s=40.8e9,
        # fitted (results/hwmodel_validation_cpu.json)
        matrix_efficiency=0.891,
        vector_efficiency=0.403,
        dram_efficiency=1.0,
        gather_efficiency=0.297,
        overlap_exponent=2.4,
        stage_overhead_s=1.84e-05,
        row_gather_overhead_s=3.8e-09,
        dram_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE,
        onchip_buffer_bytes=32 * MIB,
        clock_hz=2.6e9,  # /proc/cpuinfo: 2596 MHz
    )


_PRESETS = {"h100": h100, "a100": a100, "cpu": cpu, "hygcn": hygcn, "gnnear": gnnear, "upmem": upmem,
            "hbm-pim": hbm_pim}


def names() -> list[str]:
    """Names accepted by `get`."""
    return sorted(_PRESETS)


def get(name: str) -> HardwareSpec:
    """The preset called ``name`` (case-insensitive).

    Raises:
      ValueError: unknown name; the message lists the known presets.
      TypeError: ``name`` not a str.
    """
    if not isinstance(name, str):
        raise TypeError(f"hardware preset: name must be a str, got {name!r}; known presets: {', '.join(names())}")
    key = name.lower()
    if key not in _PRESETS:
        raise ValueError(f"unknown hardware preset {name!r}; known presets: {', '.join(names())}")
    return _PRESETS[key]()
