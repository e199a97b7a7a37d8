"""Hardware presets. Each documents the source of every number.

`get(name)` returns a preset by name; `names()` lists them.

The per-row software overheads (``row_gather_overhead_s``, ``row_overhead_s``) and the
``stage_overhead_s`` are fitted for the measured `cpu` preset and for `h100` on public
device timings (`load_gpu_fit`; `a100` and the papers' baseline `v100` take them scaled by
the datasheet; `v100-pyg` is `v100` with PyTorch / PyG's host time per launch, set from a
published PyG time); the datasheet GPU presets `h100-datasheet` / `a100-datasheet` / `mi100`, the Xeon
presets and the accelerator presets (`hygcn`, `gnnear`) leave them at 0 (no timing to fit them
on). `host_of(name)` is a near-memory preset's host, a preset of its own. `evidence(name)` says what each preset was checked against.
"""

from __future__ import annotations

from pathlib import Path

from codesign.hwmodel.spec import (HOROWITZ_DRAM_PJ_PER_BYTE, N5_ENERGY_PER_NODE_STEP, HardwareSpec, NearMemorySpec,
                                   scaled_nmp_energies, scaled_op_energies)

MIB = 1024**2
HBM2_PJ_PER_BYTE = 3.9 * 8  # O'Connor et al., "Fine-Grained DRAM", MICRO 2017: HBM2 3.9 pJ/bit
HYGCN_HBM_PJ_PER_BYTE = 7.0 * 8  # HyGCN (Yan et al., HPCA 2020) evaluation: HBM access energy 7 pJ/bit
# ASSUMPTION: an HBM access that stays inside the stack (a bank-level PIM unit) spends 1/3 of a
# full access. O'Connor et al. (MICRO 2017) attribute roughly 2/3 of an HBM2 access's energy to
# data movement outside the bank array (on-die wires, TSVs, I/O); the 1/3 is read off that
# breakdown, not a measured PIM figure. Plausible range 0.2-0.5. Applied to HBM only.
INTERNAL_ACCESS_FRACTION = 1.0 / 3.0
# ASSUMPTION: a DDR4 access that a rank-level unit (in the DIMM's buffer chip) serves still drives
# the DRAM chips' I/O to the buffer chip and only saves the channel; taken as 1/2 of an off-chip
# access (no published breakdown found; plausible range 0.3-0.8).
DDR4_RANK_INTERNAL_FRACTION = 0.5
# ASSUMPTION: an UPMEM DPU's MRAM bank is on the DPU's die (no off-chip I/O at all); priced as the
# HBM in-stack fraction of a DDR4 access (plausible range 0.2-0.5).
UPMEM_MRAM_FRACTION = INTERNAL_ACCESS_FRACTION
GPU_SECTOR_BYTES = 32.0  # NVIDIA CUDA C++ Best Practices Guide, "Coalesced access": 32-byte segments (L2 sectors)
CPU_LINE_BYTES = 64.0  # x86-64 cache line (Intel / AMD optimization manuals)
HBM_BURST_BYTES = 32.0  # HBM2 pseudo-channel: 64 bits x burst length 4 (JESD235B)
DDR4_BURST_BYTES = 64.0  # DDR4 x64 channel x burst length 8 (JESD79-4)
# GNNear (PACT 2022) artifact: the gnnear preset's source
GNNEAR_ARTIFACT = "PKUZHOU/GNNear-PACT-2022 @ 9420d9297d98d8cab02c0c514d35bf1ecf5ff70b"
UPMEM_DMA_BYTES = 8.0  # UPMEM MRAM -> WRAM DMA moves multiples of 8 bytes (Gomez-Luna et al., IEEE Access 2022)

ASSUMPTIONS = {
    "INTERNAL_ACCESS_FRACTION": (INTERNAL_ACCESS_FRACTION, (0.2, 0.5), "HBM in-stack access / full access (hbm-pim)"),
    "DDR4_RANK_INTERNAL_FRACTION": (DDR4_RANK_INTERNAL_FRACTION, (0.3, 0.8), "rank-internal / off-chip DDR4 access (gnnear)"),
    "UPMEM_MRAM_FRACTION": (UPMEM_MRAM_FRACTION, (0.2, 0.5), "MRAM access / off-chip DDR4 access (upmem)"),
    "HBM3_AS_HBM2_ENERGY": (HBM2_PJ_PER_BYTE, (20.0, 40.0), "h100 HBM3 pJ/byte, HBM2's figure (no HBM3 figure found)"),
    "GPU_STATIC_FRACTION_OF_TDP": (0.1, (0.05, 0.3), "h100 / a100 static power as a fraction of TDP"),
    "HBM_PIM_FP32_TWO_PASSES": (2.0, (2.0, 4.0), "hbm-pim fp32 MAC = this many FP16 passes (no fp32 on the PCUs)"),
    "HBM_PIM_REGISTER_BYTES": (3 * 16 * 32, (512, 2048), "hbm-pim per-PCU register file bytes usable as a row buffer"),
    "GNNEAR_NME_NARROW_PACKING": (4.0, (1.0, 4.0), "gnnear NME int8 MACs per fp32 lane-MAC (bf16: half of it, >= 1); "
                                                   "the artifact's NMEs are fp32 only"),
    "GNNEAR_CAE_AS_HYGCN": (None, None, "gnnear CAE: HyGCN's TSMC 12 nm node and 128 KB row buffer (the artifact "
                                        "gives the array, vector units and clock, not these); its power limit "
                                        "HyGCN's 6.7 W chip per peak MAC/s x the CAE's peak"),
    "UPMEM_LINK_IS_SYSTEM_TOTAL": (4.74e9, (4.74e9, 40 * 4.74e9), "upmem host link B/s: system total, or per rank x 40"),
    "UPMEM_MAC_ENERGY": (None, None, "upmem DPU MAC energy = Horowitz fp32 / int8 MACs at DRAM_PROCESS_LOGIC_NODE_NM "
                                     "(DPU energy per op unpublished)"),
    "SRAM_SCALES_AS_LOGIC": (None, None, "on-chip SRAM access energy scaled by the logic energy scale of the node"),
    "HYGCN_FUSED_EPILOGUE": (None, None, "hygcn applies bias and activation to the Combination Engine's results before "
                                         "it writes them (fuses_epilogue; its abstract's inter-engine pipeline fuses the "
                                         "phases on chip; the paper's text on the activation was not found here)"),
    "MI100_UNFUSED_EPILOGUE": (None, None, "mi100 / hbm-pim run bias and activation as kernels of their own (no "
                                           "epilogue-fusing GEMM library is documented here for the MI100's gfx908)"),
    "TF32_MAC_ENERGY": (None, None, "h100 / a100 TF32 tensor-core MAC = Horowitz fp16 multiply (same 10-bit mantissa) "
                                    "+ fp32 add (fp32 accumulation), 2.0 pJ at 45 nm"),
    "STREAM_DRAM_EFFICIENCY": (0.9, (0.8, 0.95), "h100 / a100 DRAM efficiency of a streaming kernel (held fixed in "
                                                 "the fit on the public tables, experiments/fit_gpu_presets.py)"),
    "N5_ENERGY_PER_NODE_STEP": (N5_ENERGY_PER_NODE_STEP, (0.6, 0.9), "energy per op per full node step below 7 nm "
                                "(h100's TSMC 4N as N5: TSMC's N5-vs-N7 30 % iso-speed power cut)"),
    "NODE_VDD_FACTOR": (1.0, (0.9, 1.2), "every logic preset's core supply x this (PROCESS_NODES' nominal supplies; "
                                         "GPUs boost above nominal)"),
    "DRAM_PROCESS_LOGIC_NODE_NM": (45.0, (32.0, 65.0), "logic built in a DRAM process (hbm-pim PCUs, upmem DPUs) "
                                                       "priced as this logic node (nm)"),
    "GNNEAR_NME_NODE_NM": (32.0, (20.0, 65.0), "gnnear rank NMEs (DIMM buffer chip) logic node (nm)"),
    "CPU_WATTS_PER_CORE": (350.0 / 56, (3.0, 10.0), "cpu power limit per core: a 56-core 350 W Sapphire Rapids Xeon "
                                                   "(the VM's host model is not named; the EPYC 9004 parts of the "
                                                   "current fit's kind span 3.75 W (96 cores, 360 W) to 8.75 W (32 "
                                                   "cores, 280 W) per core, AMD product pages)"),
    "A100_SCALES_AS_SM_CLOCK": (None, None, "a100 per-row costs = h100's x (132 SMs x 1.98 GHz) / (108 SMs x 1.41 GHz), "
                                            "its L2 gather bandwidth = h100's x the DRAM bandwidth ratio, its per-call "
                                            "cost = h100's (no A100 table here)"),
    "V100_SOFTWARE_AS_H100_FIT": (None, None, "v100 (GNNear's DGL baseline; v100-pyg, HyGCN's PyG one, is it with "
                                              "V100_PYG_LAUNCH_S as the per-call cost): the h100 "
                                              "software factors (fitted on FlashSparse's public H100 cuSPARSE timings, "
                                              "independent of the papers' ratios) scaled to 80 SMs x 1.53 GHz as "
                                              "A100_SCALES_AS_SM_CLOCK; one value for every comparison against a V100"),
    "V100_PYG_LAUNCH_S": (1.0863e-04, None, (
        "v100-pyg: host time per modeled kernel launch of PyTorch eager + PyG 1.x on a V100 (replaces the device "
        "per-call cost): the one value that prices PyG's GCN / Cora training epoch (hidden 16) at its published "
        "2.39 ms (DGL v0.4.3 benchmark; experiments/reproduce_published.py pyg_launch_s), not set from any HyGCN "
        "ratio; the optimizer's and the loss's ops are spread over the modeled launches (an upper bound for "
        "inference)")),
    "PYG_BENCHMARK_ON_V100": (None, None, (
        "the DGL v0.4.3 benchmark table (PyG vs DGL, 200 epochs) does not name its GPU: taken as DGL's published "
        "testbed, an AWS p3.2xlarge V100 (dmlc/dgl examples/pytorch/README.md); its DGL GCN / Cora epoch (3.3 ms) "
        "is in the range of DGL's own V100 figures there (3.1-4.2 ms)")),
    "HYGCN_HBM_7PJ_PER_BIT": (HYGCN_HBM_PJ_PER_BYTE, (3.9 * 8, 7.0 * 8), "hygcn HBM pJ/byte: HyGCN's evaluation prices an HBM access "
                                                          "at 7 pJ/bit (as the issue 33 brief and a public DRAM-energy "
                                                          "survey README in the stored code corpus report; the paper's "
                                                          "own text was not found); low end O'Connor's HBM2 3.9"),
    "HYGCN_INTERVAL_BUFFER_BYTES": (16 * MIB, (4 * MIB, 16 * MIB), "hygcn interval-shard reuse: destination intervals "
                                                                  "sized to the 16 MB aggregation buffer"),
    "UPMEM_INT8_MUL_AS_ADD": (58.56e6, (10.27e6, 58.56e6), "upmem int8 multiplies/s per DPU: a native 8 x 8 multiply "
                                                          "is one instruction, so as fast as the measured int32 add "
                                                          "(the 10.27 MOPS int32 multiply is a shift-and-add loop)"),
    "UPMEM_HOST_MEMORY": (None, None, "upmem-host's DRAM bandwidth: both sockets' 12 DDR4-2400 channels (an upper "
                                      "bound: the PIM DIMMs occupy some of them)"),
    "MI100_HBM_PIM_ALL_STACKS": (4.0, (1.0, 4.0), "hbm-pim: PIM stacks in the MI100 host (Samsung's GPU system); all "
                                                  "4 of its HBM2 stacks taken as Aquabolt-XL"),
}
"""Every constant of the presets that is an assumption rather than a sourced number:
``{name: (value, plausible range or None, what it is)}`` (docs/hwmodel.md lists them)."""
GPU_STATIC_FRACTION_OF_TDP = ASSUMPTIONS["GPU_STATIC_FRACTION_OF_TDP"][0]
DRAM_PROCESS_LOGIC_NODE_NM = ASSUMPTIONS["DRAM_PROCESS_LOGIC_NODE_NM"][0]
GNNEAR_NME_NODE_NM = ASSUMPTIONS["GNNEAR_NME_NODE_NM"][0]
DRAM_VDD_V = 1.2  # DDR4 VDD 1.2 V (JESD79-4); HBM2 VDD 1.2 V (JESD235): near-memory logic on the DRAM's supply

PROCESS_NODES = {
    "h100": (5.0, 0.75, "TSMC 4N, an N5-class node (NVIDIA H100 whitepaper); below Stillmaker & Baas' 7 nm: "
                        "extrapolated (ASSUMPTION N5_ENERGY_PER_NODE_STEP)"),
    "a100": (7.0, 0.75, "TSMC N7 (NVIDIA A100 whitepaper)"),
    "hygcn": (12.0, 0.8, "TSMC 12 nm (HyGCN, HPCA 2020, evaluation methodology)"),
    "gnnear": (12.0, 0.8, "the CAE's node is not given (GNNear artifact @ 9420d929): HyGCN's TSMC 12 nm "
                          "(ASSUMPTION GNNEAR_CAE_AS_HYGCN)"),
    "gnnear-nme": (GNNEAR_NME_NODE_NM, DRAM_VDD_V, "ASSUMPTION GNNEAR_NME_NODE_NM: a DIMM buffer chip's logic "
                                                   "node is not published"),
    "cpu": (5.0, 0.75, "TSMC N5: the fit record's host (fits/cpu.json) is an AMD EPYC with AVX-512 BF16, i.e. Zen 4 "
                       "(Genoa) or later, whose core dies are N5 (AMD EPYC 9004 series product brief); below "
                       "Stillmaker & Baas' 7 nm: extrapolated as h100 (`cpu_process_node` checks it against the fit)"),
    "v100": (12.0, 0.8, "TSMC 12 nm FFN (NVIDIA Volta whitepaper); 0.8 V as the other 12 nm preset"),
    "mi100": (7.0, 0.75, "TSMC N7 (AMD Instinct MI100 datasheet)"),
    "xeon-e5-2698v4": (14.0, 0.9, "Intel 14 nm (Broadwell-EP, Intel ARK); 0.9 V nominal (ASSUMPTION, as NODE_VDD_FACTOR)"),
    "upmem-host": (14.0, 0.9, "Intel 14 nm (Xeon Silver 4215, Cascade Lake, Intel ARK); 0.9 V as xeon-e5-2698v4"),
    "dram-logic": (DRAM_PROCESS_LOGIC_NODE_NM, DRAM_VDD_V,
                   "logic in a DRAM process (hbm-pim PCUs: Samsung 20 nm DRAM, Kwon et al. ISSCC 2021; upmem DPUs: "
                   "a 2x nm DRAM process, Devaux, Hot Chips 2019): DRAM processes have few metal layers and "
                   "low-leakage transistors (the DPUs clock at 350 MHz), priced as the logic node "
                   "DRAM_PROCESS_LOGIC_NODE_NM (ASSUMPTION)"),
}
"""``{key: (node nm, core supply V, source)}``: the process every preset's per-operation energies are
scaled to (`spec.scaled_op_energies`: Horowitz ISSCC'14 45 nm x Stillmaker & Baas 2017). The
supplies are foundry-nominal core voltages (0.75 V N7 / N5 / Intel 7, 0.8 V 12 nm) or the DRAM's
VDD for near-memory logic; all x ``ASSUMPTIONS["NODE_VDD_FACTOR"]``."""
# GNNear's CAE power limit: HyGCN's reported 6.7 W chip power (HPCA 2020) per peak MAC/s of its
# engines ((4096 + 512) MACs at 1 GHz), at the CAE's peak ((128 x 128 + 16 x 32) MACs at 700 MHz, GNNear's
# artifact): 17.2 W. ASSUMPTION GNNEAR_CAE_AS_HYGCN (no GNNear power figure was found).
GNNEAR_CAE_POWER_W = 6.7 / ((4096 + 512) * 1e9) * ((128 * 128 + 16 * 32) * 700e6)
UPMEM_WATTS_PER_DPU = 383.0 / 2556  # Gomez-Luna et al., IEEE Access 2022: estimated TDP of the 2,556-DPU system 383 W
POWER_LIMITS_W = {
    "h100": (700.0, "system", "NVIDIA H100 SXM5 datasheet: max TDP 700 W (the board, HBM3 included)"),
    "h100-datasheet": (700.0, "system", "as h100 (the same chip)"),
    "h200": (700.0, "system", "NVIDIA H200 SXM datasheet: max TDP up to 700 W (configurable); the lent H200's "
                              "NVML enforced power limit read 700 W (results/gpu/h200/gpu_calibration.json)"),
    "h200-datasheet": (700.0, "system", "as h200 (the same board)"),
    "a100": (400.0, "system", "NVIDIA A100 SXM4 datasheet: max TDP 400 W (the board, HBM2e included)"),
    "a100-datasheet": (400.0, "system", "as a100 (the same chip)"),
    "hbm-pim": (300.0, "system", "the MI100 host board's 300 W (Samsung evaluates HBM-PIM as a drop-in HBM "
                                 "stack: its PCUs run inside the host's memory power budget)"),
    "hygcn": (6.7, "chip", "HyGCN (HPCA 2020): the chip's reported power 6.7 W (its HBM not included)"),
    "gnnear": (GNNEAR_CAE_POWER_W, "chip", "no GNNear power or area figure found (its artifact @ 9420d929 and the "
                                           "stored pages give none): HyGCN's 6.7 W chip per peak MAC/s, (4096 + 512) "
                                           "x 1e9, x the CAE's (128 x 128 + 16 x 32) x 700e6 = 17.2 W (ASSUMPTION "
                                           "GNNEAR_CAE_AS_HYGCN: a 12 nm engine of HyGCN's kind); the NMEs and "
                                           "DIMMs have no published power"),
    "cpu": (2 * ASSUMPTIONS["CPU_WATTS_PER_CORE"][0], "system",
            "the VM's 2 cores (fits/cpu.json) x CPU_WATTS_PER_CORE (ASSUMPTION: a 350 W, 56-core Sapphire Rapids "
            "Xeon, Intel ARK); a package TDP, compared with the package + DRAM: stricter than the chip"),
    "cpu_numpy": (2 * ASSUMPTIONS["CPU_WATTS_PER_CORE"][0], "system", "as cpu (the same machine)"),
    "upmem": (2 * 85.0 + 2556 * UPMEM_WATTS_PER_DPU, "system",
              "its host's two Xeon Silver 4215 (85 W TDP each, Intel ARK) + 2,556 DPUs at Gomez-Luna et al.'s "
              "383 W per 2,556 DPUs (IEEE Access 2022)"),
    "upmem-host": (2 * 85.0, "system", "two Xeon Silver 4215, 85 W TDP each (Intel ARK)"),
    "v100": (300.0, "system", "NVIDIA Tesla V100 SXM2 datasheet: 300 W"),
    "v100-pyg": (300.0, "system", "as v100 (the same chip)"),
    "mi100": (300.0, "system", "AMD Instinct MI100 datasheet: 300 W total board power"),
    "xeon-e5-2698v4": (135.0, "system", "Intel ARK: 135 W TDP (a package TDP compared with package + DRAM, as cpu)"),
    "gnnear-host": (GNNEAR_CAE_POWER_W, "chip", "as gnnear (its CAE; ASSUMPTION GNNEAR_CAE_AS_HYGCN)"),
}
"""``{preset: (watts, scope, source)}``: the published power each preset's `power.peak_power_w` must
stay within (tests/test_hwmodel_energy.py). ``scope`` "system": everything the preset models (the
TDP of a board with its DRAM); "chip": the compute chip alone (`power.CHIP_PARTS`: no DRAM, no
near-memory units), for a chip whose paper reports the chip's power."""
TF32_MATRIX = ("h100", "a100")  # Hopper / Ampere: fp32 GEMMs run on TF32 tensor cores (XLA's default precision)


def cpu_process_node(host: dict) -> tuple[float, float]:
    """``(node nm, core supply V)`` of a `cpu` fit record's ``host`` (`load_fit`): an x86 host with
    AMX is Intel 7, a 10 nm-class node (Sapphire Rapids or later, Intel ARK); an AMD EPYC with AVX-512
    is Zen 4 or later, TSMC N5 core dies (AMD EPYC 9004 series product brief); an AMD EPYC without it
    is Zen 2 / Zen 3, TSMC N7. `PROCESS_NODES` ``["cpu"]`` must equal it for the committed fit
    (tests/test_hwmodel_energy.py), so a re-fit on another host cannot keep the old host's node.

    Raises:
      ValueError: a host none of these rules places (add its node to `PROCESS_NODES` with a source).
    """
    simd, model = set(host.get("simd") or ()), str(host.get("cpu_model") or "")
    if "amx_tile" in simd:
        return 10.0, 0.75
    if "AMD EPYC" in model:
        return (5.0, 0.75) if "avx512f" in simd else (7.0, 0.75)
    raise ValueError(f"cpu_process_node: no process node known for host cpu_model={model!r}, simd={sorted(simd)}")


def op_energies(key: str, vdd_factor: float = 1.0, per_step_below_7nm: float = N5_ENERGY_PER_NODE_STEP,
                node_nm=None) -> dict:
    """The `HardwareSpec` per-op energy fields of `PROCESS_NODES` entry ``key`` (the one mechanism:
    `spec.scaled_op_energies`); ``node_nm`` overrides the node (sensitivity variants)."""
    node, vdd, _ = PROCESS_NODES[key]
    return scaled_op_energies(node if node_nm is None else node_nm, vdd * vdd_factor, tf32_matrix=key in TF32_MATRIX,
                              per_step_below_7nm=per_step_below_7nm)


def nmp_energies(key: str, vdd_factor: float = 1.0, node_nm=None, **kw) -> dict:
    """The `NearMemorySpec` MAC energies of `PROCESS_NODES` entry ``key`` (`spec.scaled_nmp_energies`)."""
    node, vdd, _ = PROCESS_NODES[key]
    return scaled_nmp_energies(node if node_nm is None else node_nm, vdd * vdd_factor, **kw)
STREAM_DRAM_EFFICIENCY = ASSUMPTIONS["STREAM_DRAM_EFFICIENCY"][0]
GPU_FIT_FACTORS = ("stage_overhead_s", "dram_efficiency", "gather_efficiency", "onchip_bw_bytes_per_s", "row_overhead_s",
                   "row_gather_overhead_s", "overlap_exponent")
"""The `HardwareSpec` fields the GPU presets take from ``fits/h100.json`` (`load_gpu_fit`)."""
H100_SM_CLOCK = 132 * 1.98e9  # SMs x boost clock, NVIDIA H100 whitepaper (SXM5)
A100_SM_CLOCK = 108 * 1.41e9  # NVIDIA A100 whitepaper
V100_SM_CLOCK = 80 * 1.53e9  # NVIDIA Tesla V100 whitepaper (SXM2: 80 SMs, 1530 MHz boost)
V100_PYG_LAUNCH_S = ASSUMPTIONS["V100_PYG_LAUNCH_S"][0]


def gpu_fit_record(path=None) -> dict:
    """The whole fit record of the GPU presets, ``fits/h100.json`` (per table and kernel column:
    fitted factors and grouped cross-validation metrics).

    Raises:
      FileNotFoundError: no record."""
    import json
    with open(Path(path) if path is not None else FITS_DIR / "h100.json") as fh:
        return json.load(fh)


def load_gpu_fit(path=None) -> dict:
    """The factors the `h100` preset takes (`GPU_FIT_FACTORS`) from its fit record
    ``fits/h100.json`` (written by ``python experiments/fit_gpu_presets.py``): those of the kernel
    the record names in ``preset_kernel`` (cuSPARSE SpMM), fitted on the public H100 timing table.

    Raises:
      FileNotFoundError: no record.
      ValueError: a key missing or a factor not a finite number >= 0 (naming the file and key).
    """
    p = Path(path) if path is not None else FITS_DIR / "h100.json"
    rec = gpu_fit_record(p)
    try:
        kind, kernel = rec["preset_kernel"]
        factors = rec["tables"][kind]["kernels"][kernel]["factors"]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"hardware fit {p}: missing key {e} (preset_kernel / tables.<kind>.kernels.<kernel>.factors)") \
            from None
    return _checked_fields(factors, GPU_FIT_FACTORS, f"hardware fit {p}: factors.")


def _checked_fields(values: dict, keys, prefix: str) -> dict:
    """``{key: float}`` of ``values`` for each of ``keys``, each a finite number >= 0.

    Raises:
      ValueError: ``"{prefix}{key} must be a finite number >= 0, got ..."`` for the first that is not."""
    import math
    out = {}
    for k in keys:
        v = values.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{prefix}{k} must be a finite number >= 0, got {v!r}")
        out[k] = float(v)
    return out


def h100_fitted() -> HardwareSpec:
    """Preset ``h100`` (the default GPU). NVIDIA H100 SXM5 80 GB: `h100_datasheet` with the software factors (`GPU_FIT_FACTORS`: a
    fixed per-kernel cost, the gathers' compute and L2 bandwidth, per-row costs, the compute /
    memory overlap) FITTED on public device timings: the cuSPARSE SpMM column of the FlashSparse
    H100 table (half of it, ``shared/data/gpu_timings``; `load_gpu_fit`, record
    ``fits/h100.json``; ``dram_efficiency`` held at the ASSUMPTION `STREAM_DRAM_EFFICIENCY`).
    Sources: roofs and energies as `h100_datasheet`; the factors fitted on FlashSparse's H100
    timings (Li et al., PPoPP 2025, ``zli96/flashSparse`` ``result/ref/baseline_h100_spmm_*.csv``).
    Evidence: `evidence("h100")` (grouped cross-validation on that table; docs/hwmodel.md).
    Not yet checked: GEMMs, elementwise stages and energy on a device (the GPU issue).

    Raises:
      FileNotFoundError, ValueError: as `load_gpu_fit`.
    """
    return h100_datasheet().replace(name="h100", **load_gpu_fit())


def h100_datasheet() -> HardwareSpec:
    """Preset ``h100-datasheet``. NVIDIA H100 SXM5 80 GB, datasheet numbers only (no per-kernel cost,
    ideal efficiencies): the base the ``h100`` preset (`h100_fitted`) is fitted on; kept to show
    what the fit adds (a Cora GCN is launch-bound on the fitted one, docs/hwmodel.md).

    Sources:
      - NVIDIA H100 Tensor Core GPU datasheet (2023), dense (non-sparse) tensor-core rates:
        TF32 494.7 TFLOP/s (used for fp32 GEMM: XLA's default f32 matmul precision on Hopper runs
        on TF32 tensor cores), BF16 989.4 TFLOP/s, INT8 1978.9 TOPS; Hopper has no INT4 tensor
        cores, so int4 runs at the INT8 rate. FP32 (CUDA cores) 66.9 TFLOP/s for the vector units.
        1 MAC = 2 FLOP.
      - HBM3 bandwidth 3.35 TB/s (datasheet); L2 cache 50 MB (NVIDIA H100 whitepaper).
      - HBM energy 3.9 pJ/bit = 31.2 pJ/byte (O'Connor et al., "Fine-Grained DRAM", MICRO 2017,
        HBM2 access energy). ASSUMPTION: H100 has HBM3, for which no per-bit access energy is
        published; HBM2's figure is used (`ASSUMPTIONS["HBM3_AS_HBM2_ENERGY"]`). Per-op and SRAM
        energies: Horowitz ISSCC'14 (45 nm; fp16 MAC for bf16, ASSUMPTION TF32 MAC = fp16 multiply +
        fp32 add) scaled to TSMC 4N (`PROCESS_NODES["h100"]`, `op_energies`: Stillmaker & Baas 2017,
        ASSUMPTION N5 extrapolation).
      - Gathered rows move whole 32-byte L2 sectors (CUDA C++ Best Practices Guide).
      - Static power: ASSUMPTION 10 % of the 700 W TDP (datasheet TDP;
        `ASSUMPTIONS["GPU_STATIC_FRACTION_OF_TDP"]`, range 5-30 %).
      - Bias, activation and requantization run in the producing kernel's epilogue
        (``fuses_epilogue``: cuBLASLt's ``CUBLASLT_EPILOGUE_RELU_BIAS`` / ``DRELU_BGRAD``, NVIDIA
        cuBLAS documentation ``cublasLtEpilogue_t``; a custom SpMM kernel's epilogue likewise).
    """
    return HardwareSpec(
        name="h100-datasheet",
        matrix_fp32_macs_per_s=494.7e12 / 2,
        matrix_bf16_macs_per_s=989.4e12 / 2,
        matrix_int8_macs_per_s=1978.9e12 / 2,
        matrix_int4_macs_per_s=1978.9e12 / 2,
        vector_fp32_macs_per_s=66.9e12 / 2,
        dram_bw_bytes_per_s=3.35e12,
        dram_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
        onchip_buffer_bytes=50e6,
        clock_hz=1.98e9,  # max boost, NVIDIA H100 whitepaper
        gather_granularity_bytes=GPU_SECTOR_BYTES,
        static_power_w=GPU_STATIC_FRACTION_OF_TDP * 700.0,  # H100 SXM5 TDP 700 W (datasheet)
        fuses_epilogue=True,
        **op_energies("h100"),
    )


H200_L2_BYTES = 60e6
"""L2 of the lent H200 as PyTorch read it (``cudaDevAttrL2CacheSize``: 60 MB; this workplace's device
notes, 2026-10-28). NVIDIA's H200 datasheet gives no L2 size."""
H200_DEVICE_FIELDS = ("matrix_efficiency", "dram_efficiency", "gather_efficiency", "stage_overhead_s",
                      "matrix_bf16_macs_per_s", "overlap_exponent", "row_gather_overhead_s", "onchip_bw_bytes_per_s")
"""The `HardwareSpec` latency fields the `h200` preset takes from its device fit (``fits/h200.json``)."""
H200_ENERGY_FIELDS = ("static_power_w", "dram_energy_pj_per_byte", "matrix_mac_energy_fp32_pj", "mac_energy_bf16_pj",
                      "mac_energy_int8_pj", "mac_energy_fp32_pj", "power_cap_w")
"""The energy fields (and the board's power cap) the `h200` preset takes from NVML (``fits/h200.json``)."""


def h200_datasheet() -> HardwareSpec:
    """Preset ``h200-datasheet``. NVIDIA H200 SXM 141 GB, datasheet numbers only: the H100 SXM5's
    chip (`h100_datasheet`: NVIDIA's H200 datasheet, 2024, lists the same TF32 494.7 / BF16 989.4 /
    INT8 1978.9 dense tensor TFLOP/s and 66.9 TFLOP/s FP32, and the same 700 W maximum TDP) with its
    memory: HBM3e at 4.8 TB/s (H200 datasheet) and `H200_L2_BYTES` of L2 (read on the device).
    Energies, static power and the 32-byte gather sector as `h100_datasheet` (ASSUMPTION: HBM3e
    access energy as HBM2's, `ASSUMPTIONS["HBM3_AS_HBM2_ENERGY"]`). The base the device fit of
    ``h200`` starts from.

    Sources: NVIDIA H200 Tensor Core GPU datasheet (2024); `h100_datasheet`'s sources for the chip."""
    return h100_datasheet().replace(name="h200-datasheet", dram_bw_bytes_per_s=4.8e12, onchip_buffer_bytes=H200_L2_BYTES)


def h200_fit_record(path=None) -> dict:
    """The device fit record of the ``h200`` preset, ``fits/h200.json`` (written by
    ``python experiments/fit_gpu_device.py`` from ``results/gpu/h200/``).

    Raises:
      FileNotFoundError: no record."""
    import json
    with open(Path(path) if path is not None else FITS_DIR / "h200.json") as fh:
        return json.load(fh)


def h200_device() -> HardwareSpec:
    """Preset ``h200``. NVIDIA H200 SXM: `h200_datasheet` with its latency factors
    (`H200_DEVICE_FIELDS`: matrix / DRAM / gather efficiency, per-kernel cost, the bf16 GEMM rate,
    overlap, per-gathered-row cost) FITTED on kernels device-timed on a lent H200 (XLA GEMM at
    TF32 / bf16 / int8, copy, XLA segment_sum SpMM, SDDMM, the Pallas CSR kernel; R-MAT graphs of
    2^10-2^20 nodes), and its energies (`H200_ENERGY_FIELDS`) fitted on NVML's energy counter
    around >= 1.2 s device loops: static power (the idle reading at full clocks), pJ per DRAM byte
    (a 1 GiB copy; all-in: HBM3e, L2 and the SMs' share), pJ per MAC per precision (an 8192^3 GEMM
    each, run at the board's 700 W cap), with ``power_cap_w`` the board's enforced limit as NVML
    read it: at these energies the peak rates would draw about 2.2 kW, and the board throttles
    instead (`HardwareSpec.power_cap_w`). Evidence: `evidence("h200")` (held-out and out-of-grid
    latency errors; energy of the SpMM and SDDMM loops the fit did not see). The per-kernel cost
    was fitted on kernels inside a device loop, whose per-iteration cost it includes (an upper
    bound for a training step's kernels).

    Sources: `h200_datasheet`; the factors measured on the device (``results/gpu/h200/``,
    ``python experiments/fit_gpu_device.py``).

    Raises:
      FileNotFoundError: no ``fits/h200.json``.
      ValueError: a field missing or not a finite number >= 0 (naming the file and field).
    """
    rec = h200_fit_record()
    vals = {**rec["latency"]["preset_fields"], **rec["energy"]["fields"]}
    out = _checked_fields(vals, H200_DEVICE_FIELDS + H200_ENERGY_FIELDS, f"hardware fit {FITS_DIR / 'h200.json'}: ")
    return h200_datasheet().replace(name="h200", **out)


def scaled_gpu_fit(sm_clock: float, dram_bw_bytes_per_s: float) -> dict:
    """The h100 fit's factors (`load_gpu_fit`) for another NVIDIA GPU, as ASSUMPTION
    `A100_SCALES_AS_SM_CLOCK` scales them: per-row costs x (`H100_SM_CLOCK` / ``sm_clock``, SMs x
    boost clock in Hz), the L2 gather bandwidth x (``dram_bw_bytes_per_s`` / the H100's), the per-call
    cost and efficiencies unchanged.

    Raises:
      FileNotFoundError, ValueError: as `load_gpu_fit`."""
    f = load_gpu_fit()
    slower = H100_SM_CLOCK / sm_clock
    wider = dram_bw_bytes_per_s / h100_datasheet().dram_bw_bytes_per_s
    f.update(row_overhead_s=f["row_overhead_s"] * slower, row_gather_overhead_s=f["row_gather_overhead_s"] * slower,
             onchip_bw_bytes_per_s=f["onchip_bw_bytes_per_s"] * wider)
    return f


def a100_fitted() -> HardwareSpec:
    """Preset ``a100`` (fitted factors). NVIDIA A100 SXM4 80 GB: `a100_datasheet` with the `h100_fitted` software factors, scaled by
    the datasheets (ASSUMPTION `ASSUMPTIONS["A100_SCALES_AS_SM_CLOCK"]`: per-row costs by the
    SM x clock ratio, the L2 gather bandwidth by the DRAM bandwidth ratio, the per-call cost
    and efficiencies unchanged). Sources: `a100_datasheet`; NVIDIA A100 / H100 whitepapers (SM
    counts 108 / 132, boost clocks 1.41 / 1.98 GHz). Evidence: datasheet + the H100 fit; no A100
    timing checked.

    Raises:
      FileNotFoundError, ValueError: as `load_gpu_fit`.
    """
    base = a100_datasheet()
    return base.replace(name="a100", **scaled_gpu_fit(A100_SM_CLOCK, base.dram_bw_bytes_per_s))


def a100_datasheet() -> HardwareSpec:
    """Preset ``a100-datasheet``. NVIDIA A100 SXM4 80 GB, datasheet numbers only (the base of ``a100``).

    Sources: NVIDIA A100 Tensor Core GPU datasheet (2021), dense rates: TF32 156 TFLOP/s (fp32
    GEMM, XLA default precision), BF16 312 TFLOP/s, INT8 624 TOPS, INT4 1248 TOPS, FP32 (CUDA
    cores) 19.5 TFLOP/s; HBM2e 2039 GB/s; L2 40 MB and 1410 MHz boost clock (NVIDIA A100
    whitepaper). HBM energy: O'Connor et al. MICRO 2017 (3.9 pJ/bit, HBM2; taken for HBM2e). Per-op
    energies: Horowitz ISSCC'14 scaled to TSMC N7 (`PROCESS_NODES["a100"]`). Gathered rows move whole
    32-byte L2 sectors (CUDA C++ Best Practices Guide). Static power: ASSUMPTION 10 % of the 400 W
    TDP (datasheet TDP; `ASSUMPTIONS["GPU_STATIC_FRACTION_OF_TDP"]`). Epilogues fused as on
    `h100_datasheet` (cuBLASLt).
    """
    return HardwareSpec(
        name="a100-datasheet",
        matrix_fp32_macs_per_s=156e12 / 2,
        matrix_bf16_macs_per_s=312e12 / 2,
        matrix_int8_macs_per_s=624e12 / 2,
        matrix_int4_macs_per_s=1248e12 / 2,
        vector_fp32_macs_per_s=19.5e12 / 2,
        dram_bw_bytes_per_s=2.039e12,
        dram_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
        onchip_buffer_bytes=40e6,
        clock_hz=1.41e9,
        gather_granularity_bytes=GPU_SECTOR_BYTES,
        static_power_w=GPU_STATIC_FRACTION_OF_TDP * 400.0,  # A100 SXM4 TDP 400 W (datasheet)
        fuses_epilogue=True,
        **op_energies("a100"),
    )


def v100() -> HardwareSpec:
    """Preset ``v100``. NVIDIA Tesla V100 SXM2 (32 GB), the GPU baseline of HyGCN (HPCA 2020) and
    GNNear (PACT 2022), running PyG / DGL.

    Sources: NVIDIA Tesla V100 datasheet / Volta whitepaper: FP32 15.7 TFLOP/s (CUDA cores; Volta
    has no TF32, so fp32 GEMMs run there too), FP16 tensor cores 125 TFLOP/s (the 16-bit tier; no
    bf16 on Volta), INT8 62.8 TOPS (DP4A, no int8 tensor cores; int4 the same), HBM2 900 GB/s,
    L2 6 MB, 80 SMs at 1530 MHz boost, TDP 300 W. HBM2 energy: O'Connor et al. MICRO 2017
    (3.9 pJ/bit). Gathers move 32-byte L2 sectors. Static power: ASSUMPTION
    `GPU_STATIC_FRACTION_OF_TDP` of 300 W.
    Software efficiency (the frameworks run far below the roofs): ASSUMPTION
    ``ASSUMPTIONS["V100_SOFTWARE_AS_H100_FIT"]``: the software factors of `h100_fitted` (fitted on
    the public FlashSparse H100 cuSPARSE table, not on any ratio reported against a V100),
    scaled as `a100_fitted` scales them (per-row costs by SM x clock, L2 gather bandwidth by
    DRAM bandwidth, per-call cost unchanged). One value for every comparison against DGL on a V100
    (GNNear's baseline); PyG on a V100 (HyGCN's) is `v100_pyg`. Bias and activation run as
    kernels of their own (``fuses_epilogue`` False), as DGL and PyG issue them (PyTorch eager).
    Evidence: `evidence("v100")`: GNNear's 15 published V100 DGL training times (its artifact;
    results/hwmodel_published.json ``baseline_check``).

    Raises:
      FileNotFoundError, ValueError: as `load_gpu_fit`.
    """
    f = scaled_gpu_fit(V100_SM_CLOCK, 900e9)
    return HardwareSpec(
        name="v100",
        matrix_fp32_macs_per_s=15.7e12 / 2,
        matrix_bf16_macs_per_s=125e12 / 2,
        matrix_int8_macs_per_s=62.8e12 / 2,
        matrix_int4_macs_per_s=62.8e12 / 2,
        vector_fp32_macs_per_s=15.7e12 / 2,
        vector_bf16_macs_per_s=31.4e12 / 2,  # half2 FP16 on the CUDA cores (datasheet FP16 non-tensor rate)
        vector_int8_macs_per_s=62.8e12 / 2,
        dram_bw_bytes_per_s=900e9,
        dram_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
        onchip_buffer_bytes=6 * MIB,
        clock_hz=1.53e9,
        gather_granularity_bytes=GPU_SECTOR_BYTES,
        static_power_w=GPU_STATIC_FRACTION_OF_TDP * 300.0,
        **op_energies("v100"),
        **f,
    )


def v100_pyg() -> HardwareSpec:
    """Preset ``v100-pyg``: `v100` running PyTorch Geometric 1.x, HyGCN's (HPCA 2020) GPU baseline
    system. The same chip; what differs is PyG's software: PyTorch eager issues every kernel from
    Python, so a small graph's layer costs the host's dispatch, not the GPU's work.

    Sources: `v100` (datasheet, and its device factors from the h100 fit) with ``stage_overhead_s``
    = `V100_PYG_LAUNCH_S`: INFORMED PARAMETER (``ASSUMPTIONS["V100_PYG_LAUNCH_S"]``, set from a
    published absolute time, not from any ratio of HyGCN's): the one host time per modeled launch
    that prices PyG's two-layer GCN training epoch on Cora at its published 0.478 s / 200 epochs
    (DGL v0.4.3 benchmark, dmlc/dgl ``docs/source/performance.rst``; its GPU: ASSUMPTION
    ``PYG_BENCHMARK_ON_V100``); the same table's Citeseer and Pubmed epochs are predictions of it
    (results/hwmodel_published.json ``pyg_check``). One value for every comparison against
    PyG on a V100. PyG's unfused message passing (an [E, F] message buffer per aggregation) is part
    of the workload, not of this preset (experiments/reproduce_published.py ``pyg_workload``).
    Evidence: `evidence("v100-pyg")`: one published time informs its one parameter, two more of the
    same table are predicted.

    Raises:
      FileNotFoundError, ValueError: as `load_gpu_fit`.
    """
    return v100().replace(name="v100-pyg", stage_overhead_s=V100_PYG_LAUNCH_S)


def xeon_e5_2698v4() -> HardwareSpec:
    """Preset ``xeon-e5-2698v4``: one Intel Xeon E5-2698 v4, the CPU baseline of GNNear (PACT 2022
    abstract: "Xeon E5-2698-v4 CPU"), datasheet numbers only (ideal efficiencies: no GNN software
    factor is assumed for it; no comparison against it is reproduced).

    Sources: Intel ARK: 20 cores, 2.2 GHz base, 50 MB cache, 4 channels DDR4-2400 (4 x 19.2 GB/s),
    TDP 135 W; Broadwell AVX2 with two 256-bit FMA units per core: 32 fp32 FLOP per cycle per
    core (Intel optimization manual), 20 x 2.2 GHz x 16 MAC = 704 GMAC/s. DRAM energy: Horowitz
    ISSCC'14 (1.3 nJ per 64-bit access). Static power not modeled (0).
    """
    mac = 20 * 2.2e9 * 16
    return HardwareSpec(
        name="xeon-e5-2698v4", cores=20.0,
        matrix_fp32_macs_per_s=mac, matrix_bf16_macs_per_s=mac, matrix_int8_macs_per_s=mac,
        matrix_int4_macs_per_s=mac, vector_fp32_macs_per_s=mac, vector_bf16_macs_per_s=mac,
        vector_int8_macs_per_s=mac,
        dram_bw_bytes_per_s=4 * 19.2e9, dram_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE,
        onchip_buffer_bytes=50 * MIB, clock_hz=2.2e9, gather_granularity_bytes=CPU_LINE_BYTES,
        **op_energies("xeon-e5-2698v4"),
    )


def upmem_host() -> HardwareSpec:
    """Preset ``upmem-host``: the host of the 2,556-DPU UPMEM server of Gomez-Luna et al. (IEEE
    Access 2022, Sec. 2 / Table 1: two Intel Xeon Silver 4215; the table itself was not found in
    the stored copy, the DPU count was), datasheet numbers only.

    Sources: Intel ARK Xeon Silver 4215: 8 cores at 2.5 GHz, 11 MB L3, 6 channels DDR4-2400 per
    socket, TDP 85 W; one AVX-512 FMA unit per core on Silver parts: 16 fp32 MAC per cycle per
    core; 2 sockets: 2 x 8 x 2.5 GHz x 16 = 640 GMAC/s; DRAM 2 x 6 x 19.2 GB/s (ASSUMPTION
    ``ASSUMPTIONS["UPMEM_HOST_MEMORY"]``: an upper bound, the PIM DIMMs sit on those channels).
    DRAM energy: Horowitz ISSCC'14. Static power not modeled (0).
    """
    mac = 2 * 8 * 2.5e9 * 16
    return HardwareSpec(
        name="upmem-host", cores=16.0,
        matrix_fp32_macs_per_s=mac, matrix_bf16_macs_per_s=mac, matrix_int8_macs_per_s=mac,
        matrix_int4_macs_per_s=mac, vector_fp32_macs_per_s=mac, vector_bf16_macs_per_s=mac,
        vector_int8_macs_per_s=mac,
        dram_bw_bytes_per_s=2 * 6 * 19.2e9, dram_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE,
        onchip_buffer_bytes=2 * 11 * MIB, clock_hz=2.5e9, gather_granularity_bytes=CPU_LINE_BYTES,
        **op_energies("upmem-host"),
    )


def mi100() -> HardwareSpec:
    """Preset ``mi100``: AMD Instinct MI100, the GPU that Samsung's HBM-PIM system puts the
    Aquabolt-XL stacks in (Kim et al., "Aquabolt-XL HBM2-PIM, LPDDR5-PIM ... and AXDIMM", IEEE
    Micro 2022: "a GPU system equipped with Aquabolt-XL HBM2-PIM devices"; the MI100 per Samsung's
    Hot Chips 33 talk), datasheet numbers only.

    Sources: AMD Instinct MI100 datasheet: FP32 vector 23.1 TFLOP/s, FP32 matrix 46.1 TFLOP/s,
    FP16 / BF16 matrix 184.6 / 92.3 TFLOP/s, INT8 184.6 TOPS (int4 the same), 4 HBM2 stacks at
    1.2288 TB/s (2.4 Gb/s x 4096 bits), 8 MB L2, 1502 MHz peak engine clock, TBP 300 W. HBM2
    energy O'Connor et al. MICRO 2017; 32-byte HBM bursts; static power ASSUMPTION
    `GPU_STATIC_FRACTION_OF_TDP` of 300 W. Ideal efficiencies (no MI100 timing here). Bias and
    activation as kernels of their own (``fuses_epilogue`` False: ASSUMPTION
    ``ASSUMPTIONS["MI100_UNFUSED_EPILOGUE"]``).
    """
    return HardwareSpec(
        name="mi100",
        matrix_fp32_macs_per_s=46.1e12 / 2, matrix_bf16_macs_per_s=92.3e12 / 2,
        matrix_int8_macs_per_s=184.6e12 / 2, matrix_int4_macs_per_s=184.6e12 / 2,
        vector_fp32_macs_per_s=23.1e12 / 2,
        dram_bw_bytes_per_s=1.2288e12, dram_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
        onchip_buffer_bytes=8 * MIB, clock_hz=1.502e9, gather_granularity_bytes=HBM_BURST_BYTES,
        static_power_w=GPU_STATIC_FRACTION_OF_TDP * 300.0,
        **op_energies("mi100"),
    )


def hygcn() -> HardwareSpec:
    """HyGCN (Yan et al., "HyGCN: A GCN Accelerator with Hybrid Architecture", HPCA 2020), its
    evaluated configuration at 1 GHz.

    Sources (HyGCN Sec. 6 / Table 4): Combination Engine of 8 systolic modules of 4 x 128 PEs
    (4096 fp32 MACs per cycle); Aggregation Engine of 32 SIMD16 cores (512 fp32 MACs per cycle);
    HBM 1.0 at 256 GB/s; the aggregation's input buffer that holds gathered source features is
    128 KB (edge 2 MB, weight 2 MB, output 4 MB and aggregation 16 MB buffers are not row caches).
    HyGCN computes in fp32 only, so every precision runs at the fp32 rate and MAC energy
    (``fp32_only``): quantization saves HBM traffic there, not compute.
    Dataflow (Yan et al. Sec. 4): aggregate-then-combine only (``aggregate_first_only``: the
    Aggregation Engine feeds the Combination Engine), with interval-shard partitioning and
    sparsity elimination (``interval_buffer_bytes``: intervals sized to the 16 MB aggregation
    buffer, ASSUMPTION ``ASSUMPTIONS["HYGCN_INTERVAL_BUFFER_BYTES"]``).
    HBM energy: 7 pJ/bit (ASSUMPTION ``ASSUMPTIONS["HYGCN_HBM_7PJ_PER_BIT"]``: the figure HyGCN's
    evaluation uses (Ramulator HBM at 7 pJ/b) as the issue 33 brief and a public DRAM-energy
    survey README in the stored code corpus report it; the paper's own text was not found);
    per-op energies scaled to its TSMC 12 nm (`PROCESS_NODES["hygcn"]`, ASSUMPTION on Vdd).
    Gathered rows move whole 32-byte HBM bursts (JESD235: 64-bit pseudo-channel x BL4).
    Static power: not modeled (0); HyGCN's reported 6.7 W chip power is its power limit
    (`POWER_LIMITS_W`), the modeled dynamic chip power stays below it.
    Bias and activation are applied to the Combination Engine's results on their way out
    (``fuses_epilogue``: ASSUMPTION ``ASSUMPTIONS["HYGCN_FUSED_EPILOGUE"]``).
    Host: none (a standalone accelerator; `host_of` raises).
    Evidence: `evidence("hygcn")`: its paper's speedup and energy reduction over PyG on a V100
    (`v100-pyg`), recomputed by experiments/reproduce_published.py (results/hwmodel_published.json);
    "reproduces published ratios" only when every one is within 35 %.
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
        dram_energy_pj_per_byte=HYGCN_HBM_PJ_PER_BYTE,
        onchip_buffer_bytes=128 * 1024,
        clock_hz=1e9,
        gather_granularity_bytes=HBM_BURST_BYTES,
        fp32_only=True,
        **op_energies("hygcn"),
        aggregate_first_only=True,
        interval_buffer_bytes=ASSUMPTIONS["HYGCN_INTERVAL_BUFFER_BYTES"][0],
        fuses_epilogue=True,
    )


def gnnear() -> HardwareSpec:
    """GNNear (Zhou et al., "GNNear: Accelerating Full-Batch Training of Graph Neural Networks
    with Near-Memory Processing", PACT 2022) as its artifact configures it: aggregation (Reduce)
    on one Near-Memory Engine (NME) per DIMM, combination (Update) on a centralized acceleration
    engine (CAE).

    Sources: the artifact, PKUZHOU/GNNear-PACT-2022 @ 9420d929 (``GNNEAR_ARTIFACT``),
    ``simulation/GNNear_simulator.py`` (classes ``NME``, ``CAE``, ``HGPGCNear`` and its defaults,
    which ``simulation/GNNear_experiments.py::throughput_comparison`` runs), and
    ``run_dramsim3_simulation.sh`` / ``dramsim3_simulation`` (DRAMsim3 ``DDR4_8Gb_x8_2400``):
      - Memory: 4 channels x 4 DIMMs x 2 ranks of DDR4-2400 (``HGPGCNear(channel=4,
        DIMMs_per_channel=4, rank_num=2)``).
      - NMEs (``units`` = 16, one per DIMM): 16 PEs x 8 fp32 lanes at 500 MHz, reduce rounds doubled
        for a weighted aggregation (multiply and add issued separately: ``NME.calc_reduce_cycles``),
        so 16 x 8 x 0.5e9 / 2 = 32e9 fp32 MAC/s per DIMM; the DIMM's 2 ranks load in parallel, 16 B
        per 1 GHz cycle each (``simulate_full_reduce``: 8 B x 2, DDR), 32e9 B/s per DIMM.
      - Dataflow: destination interval shards of 128 rows (``interval=128``; ``interval_rows``),
        edges placed by source DIMM, partial sums merged by the CAE; sliding window 4
        (``window_size``: scheduling slack between DIMMs, no reuse; not modeled beyond the
        imbalance term) and duplication ratio 0.35 of each channel's highest-degree sources
        (``dup_ratio``; ``duplicate_fraction``, ``group_units`` = 4: their edges into a shard go to
        one DIMM of the channel, so fewer DIMMs hold a partial sum of a destination; a duplicated
        source is still loaded once per shard it feeds, as in the artifact's own accounting, and
        the max-degree imbalance bound is dropped).
      - CAE: a 128 x 128 array at 700 MHz (11.47e12 MAC/s) and 16 vector units x 32 lanes at
        700 MHz (358.4e9 MAC/s); it reads 16 B per 1 GHz cycle per channel (``calculate_CAE_read_
        cycles``): 4 x 16e9 B/s, its DRAM and host-link bandwidth. fp32 throughout (``bytes = 4``).
      - Bias and activation in the CAE's epilogue (``fuses_epilogue``): ``HGPGCNear.calculate_
        forward_cycles`` charges a layer's CAE the read of the partial sums and the write-back of
        its results, no pass for the activation.
      - Energy: off-chip DDR4 access 1.3 nJ per 64 bits (Horowitz ISSCC'14); rank-internal access
        at `DDR4_RANK_INTERNAL_FRACTION` of it (ASSUMPTION, range 0.3-0.8); rows move in whole
        64-byte DDR4 bursts (JESD79-4).
    Assumptions (``ASSUMPTIONS``): ``GNNEAR_CAE_AS_HYGCN`` (the CAE's 12 nm node and 128 KB row
    buffer, HyGCN's; the artifact gives neither), ``GNNEAR_NME_NODE_NM`` (the NMEs' logic node),
    ``GNNEAR_NME_NARROW_PACKING`` (bf16 / int8 operands 2x / 4x packed on the fp32 lanes; the artifact
    is fp32 only). The NME buffer holds one interval's partial sums at the hidden width 256
    (128 x 256 x 4 B = 128 KiB, derived). Features without per-rank copies (``replicate_features``
    off); static power not modeled.
    Evidence: `evidence("gnnear")`: its paper's speedup and energy efficiency over DGL on a V100, also
    with the V100's published DGL times as the baseline (results/hwmodel_published.json).
    """
    nme_fp32 = 16 * 8 * 500e6 / 2
    packing = ASSUMPTIONS["GNNEAR_NME_NARROW_PACKING"][0]
    cae_clock = 700e6
    return HardwareSpec(
        name="gnnear",
        matrix_fp32_macs_per_s=128 * 128 * cae_clock, matrix_bf16_macs_per_s=128 * 128 * cae_clock,
        matrix_int8_macs_per_s=128 * 128 * cae_clock, matrix_int4_macs_per_s=128 * 128 * cae_clock,
        vector_fp32_macs_per_s=16 * 32 * cae_clock,
        dram_bw_bytes_per_s=4 * 16e9,
        dram_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE,
        onchip_buffer_bytes=128 * 1024,
        clock_hz=cae_clock,
        fuses_epilogue=True,
        gather_granularity_bytes=DDR4_BURST_BYTES,
        **op_energies("gnnear"),
        nmp=NearMemorySpec(
            units=4 * 4, internal_bw_bytes_per_s=2 * 16e9, fp32_macs_per_s=nme_fp32,
            bf16_macs_per_s=max(1.0, packing / 2) * nme_fp32, int_macs_per_s=packing * nme_fp32,
            **nmp_energies("gnnear-nme"),
            internal_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE * DDR4_RANK_INTERNAL_FRACTION,
            buffer_bytes=128 * 256 * 4, host_link_bw_bytes_per_s=4 * 16e9,
            host_link_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE, access_granularity_bytes=DDR4_BURST_BYTES,
            clock_hz=500e6, interval_rows=128.0, duplicate_fraction=0.35, group_units=4.0),
    )


def upmem() -> HardwareSpec:
    """The 2,556-DPU UPMEM PIM server of Gomez-Luna et al. (IEEE Access 2022; 20 PIM DIMMs of
    128 DPUs, 4 DPUs faulty), host side its own two Xeons (`upmem_host`, ``host_of("upmem")``).

    Sources: Gomez-Luna et al., "Benchmarking a New Paradigm: An Experimental Analysis of a Real
    Processing-in-Memory Architecture", IEEE Access 2022: 2,556 working DPUs at 350 MHz; 64 MB MRAM and
    64 KB WRAM per DPU; MRAM->WRAM bandwidth ~628 MB/s per DPU; arithmetic throughput per DPU
    (11+ tasklets) int32 add 58.56 MOPS, int32 mul 10.27 MOPS, fp32 add 4.91 MOPS, fp32 mul
    1.91 MOPS (a MAC = mul + add: 1/(1/mul + 1/add)). The DPU has native 8 x 8-bit multiply
    instructions (the 32-bit multiply is a shift-and-add sequence, hence its 10.27 MOPS):
    ASSUMPTION ``ASSUMPTIONS["UPMEM_INT8_MUL_AS_ADD"]``: an int8 multiply runs at the measured
    int32 add rate, so an int8 MAC at 1/(1/58.56 + 1/58.56) MOPS. bf16 has no DPU instruction and
    runs as emulated float at the fp32 rate (an ASSUMPTION on the emulation's cost); parallel
    DPU->CPU transfers 4.74 GB/s (the slower direction, CPU->DPU is 6.68 GB/s; ASSUMPTION: taken
    as the system total, `ASSUMPTIONS["UPMEM_LINK_IS_SYSTEM_TOTAL"]`: if it is per rank the link
    is up to 40x faster). DPUs cannot read each other's MRAM (no direct DPU-DPU path: Sec. 2 of
    that paper), so features are replicated per DPU or partial sums reduced on the host
    (``replicate_features``); MRAM -> WRAM DMA moves multiples of 8 bytes. Energy: MRAM access at
    `UPMEM_MRAM_FRACTION` of a DDR4 access (ASSUMPTION), MACs at the Horowitz fp32 / fp16 / int8
    MAC energies at `DRAM_PROCESS_LOGIC_NODE_NM` (ASSUMPTION: DPU energy per op is not published).
    """
    mac = lambda mul, add: 1.0 / (1.0 / mul + 1.0 / add)
    int8_mul = ASSUMPTIONS["UPMEM_INT8_MUL_AS_ADD"][0]
    return upmem_host().replace(
        name="upmem",
        nmp=NearMemorySpec(
            units=2556, internal_bw_bytes_per_s=628e6, int_macs_per_s=mac(int8_mul, 58.56e6),
            fp32_macs_per_s=mac(1.91e6, 4.91e6), **nmp_energies("dram-logic"),
            internal_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE * UPMEM_MRAM_FRACTION,
            buffer_bytes=64 * 1024, host_link_bw_bytes_per_s=4.74e9,
            host_link_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE, access_granularity_bytes=UPMEM_DMA_BYTES,
            clock_hz=350e6, replicate_features=True),
    )


def hbm_pim() -> HardwareSpec:
    """Samsung HBM-PIM (Aquabolt-XL; Kwon et al., ISSCC 2021; Lee et al., ISCA 2021) in the GPU
    system Samsung evaluated it in: the `mi100` host (``host_of("hbm-pim")``) with its HBM2
    stacks replaced by Aquabolt-XL ones (Kim et al., IEEE Micro 2022).

    Sources: 300 MHz programmable computing units (PCUs), 16-lane FP16 SIMD, 1.2 TFLOPS per cube
    -> 1.2e12 / (2 FLOP x 16 lanes x 300 MHz) = 125, i.e. 128 PCUs (one per two banks); bank-level
    parallelism gives 4x the off-chip bandwidth of a cube (Samsung), i.e. 4 x 307 GB/s (HBM2
    Aquabolt: 2.4 Gb/s x 1024 bits) over the 128 PCUs of a cube. Stacks sized to the host: all 4
    of the MI100's stacks are PIM (ASSUMPTION ``ASSUMPTIONS["MI100_HBM_PIM_ALL_STACKS"]``), 512
    PCUs, host link the MI100's 1.2288 TB/s. PCUs compute FP16 only: integer operands run on the FP16 lanes
    (rate and energy of a Horowitz fp16 MAC, scaled as logic in Samsung's 20 nm DRAM process:
    `PROCESS_NODES["dram-logic"]`, ASSUMPTION); ASSUMPTION: fp32 operands take two FP16
    passes (`ASSUMPTIONS["HBM_PIM_FP32_TWO_PASSES"]`, no fp32 support is published).
    Energy: in-stack access at `INTERNAL_ACCESS_FRACTION` of an HBM2 access (ASSUMPTION).
    Row buffer: ASSUMPTION 3 register files of 16 x 256-bit entries per PCU (Lee et al. ISCA'21
    describe 256-bit register files, not a size usable as a row cache;
    `ASSUMPTIONS["HBM_PIM_REGISTER_BYTES"]`). Rows move in 32-byte HBM bursts; static power
    not modeled beyond the host's. The PCUs run GEMVs in place (the operation they were built
    for: Lee et al. ISCA 2021; Samsung's PIMLibrary offloads MIOpen's fp16 GEMV and LSTM to
    them): one all-bank-mode write of the input vector reaches the 8 PCUs of a pseudo-channel
    (16 banks, one PCU per two banks: Samsung's PIMSimulator configuration, SAITPublic/
    PIMSimulator), ``NearMemorySpec.gemv_broadcast_units`` = 8.
    """
    pcu_macs = 16 * 300e6
    stacks = ASSUMPTIONS["MI100_HBM_PIM_ALL_STACKS"][0]
    return mi100().replace(
        name="hbm-pim",
        nmp=NearMemorySpec(
            units=128 * stacks, internal_bw_bytes_per_s=4 * 307e9 / 128, int_macs_per_s=pcu_macs,
            fp32_macs_per_s=pcu_macs / 2, bf16_macs_per_s=pcu_macs,
            **nmp_energies("dram-logic", fp32_passes=2.0, fp16_lanes_only=True),
            internal_energy_pj_per_byte=HBM2_PJ_PER_BYTE * INTERNAL_ACCESS_FRACTION,
            buffer_bytes=3 * 16 * 32,  # 3 register files of 16 x 256-bit entries per PCU (assumed size)
            host_link_bw_bytes_per_s=1.2288e12, host_link_energy_pj_per_byte=HBM2_PJ_PER_BYTE,
            access_granularity_bytes=HBM_BURST_BYTES, clock_hz=300e6, gemv_broadcast_units=8.0),
    )


FITS_DIR = Path(__file__).resolve().parent / "fits"
FIT_KEYS = ("host", "date", "fitted_date", "roofs", "fitted", "onchip_buffer_bytes", "clock_hz", "command")
FIT_FACTORS = ("matrix_efficiency", "vector_efficiency", "dram_efficiency", "gather_efficiency", "overlap_exponent",
               "stage_overhead_s", "row_gather_overhead_s", "row_overhead_s", "row_miss_overhead_s",
               "line_miss_overhead_s")
HOST_FIT_FACTORS = ("host_stage_overhead_s", "gemm_pack_byte_s", "parallel_stage_bytes")
"""Optional fitted factors (older fit records lack them): the `cpu_numpy` preset's cost of one numpy / scipy
call and per packed GEMM operand byte (OpenBLAS), and the `cpu` preset's thread-pool threshold of an
elementwise stage (else none)."""
ROOF_KEYS = ("matrix_macs_per_s", "vector_macs_per_s", "dram_bw_bytes_per_s")
CPU_OUTPUT_ACCUMULATE_PASSES = 3.0
"""`HardwareSpec.output_accumulate_passes` of the CPU presets: a write-allocate cache (Intel SDM
vol. 3A, 12.3) makes the zero fill of a CSR product's result a read and a write of every line, and
the row-by-row accumulation another read and write, against the one write `Stage.compulsory_bytes`
counts. A count, not fitted (docs/hwmodel.md: measured 4.4 passes over WordNet's 120 MB result)."""


def load_fit(name: str = "cpu", path=None) -> dict:
    """The fit record of a measured preset: ``codesign/hwmodel/fits/<name>.json`` (or ``path``),
    written by ``python experiments/hwmodel_validation.py --save-preset``.

    Keys (`FIT_KEYS`): ``host`` (CPU model, SIMD flags, MHz, core count, JAX version), ``date``
    (of the timings), ``fitted_date``, ``roofs`` (`ROOF_KEYS`: measured XLA GEMM MAC/s, FMA-chain
    MAC/s, streaming bytes/s), ``fitted`` (`FIT_FACTORS`), ``onchip_buffer_bytes`` (last-level
    cache, lscpu), ``clock_hz``, ``command`` (how to re-fit); optionally ``validation``.

    Raises:
      FileNotFoundError: no such record.
      ValueError: a key or number missing or not a finite positive number (naming it).
    """
    import json
    import math
    p = Path(path) if path is not None else FITS_DIR / f"{name}.json"
    with open(p) as fh:
        rec = json.load(fh)
    for k in FIT_KEYS:
        if k not in rec:
            raise ValueError(f"hardware fit {p}: missing key {k!r}")
    for group, keys in (("roofs", ROOF_KEYS), ("fitted", FIT_FACTORS + HOST_FIT_FACTORS)):
        for k in keys:
            if k in HOST_FIT_FACTORS and k not in rec[group]:
                continue
            v = rec[group].get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"hardware fit {p}: {group}.{k} must be a finite number >= 0, got {v!r}")
    return rec


def cpu() -> HardwareSpec:
    """The x86-64 virtual machine this project is developed, tested and CI-run on, as data: its
    measured roofs and fitted factors are read from ``codesign/hwmodel/fits/cpu.json``
    (`load_fit`; the record names the host, its SIMD flags, the date, the roofs and the factors,
    and the validation of that fit).

    Sources: the roofs are measured with XLA by `experiments/hwmodel_validation.py`
    (``measure_peaks``, median over passes): the matrix roof a 2048^3 f32 ``jnp.dot``; the vector
    roof 64 chained f32 multiply-adds per element over 1 MiB; DRAM ``x * 2`` over 256 MiB (bytes
    read + written). XLA:CPU has no faster bf16 / int8 GEMM or elementwise path than f32 (a bf16
    dot is converts around an f32 dot: `hwmodel.upcast_gemm_stages`), so every precision gets
    the f32 rates. DRAM energy 1.3 nJ per 64-bit access (Horowitz ISSCC'14, low end of
    1.3-2.6 nJ); gathered rows move whole 64-byte cache lines. The calibration factors
    (efficiencies, per-stage, per-gathered-row and per-output-row overheads, the compute /
    memory overlap exponent; FITTED values, no datasheet source) are fitted on measured XLA
    GEMM / segment_sum kernels and the deployed programs' numpy GEMMs and scipy CSR products
    (robust least squares on log latency); docs/hwmodel.md gives the validation. One set of
    factors prices every kernel: what differs between kernels is in their stages (XLA's
    message buffer, scipy's per-output-row loop: `hwmodel.segment_spmm_stages`,
    `hwmodel.spmm_stage`).
    ``cores`` is the fit record's host core count (XLA's GEMMs use them all; `Stage.serial` kernels
    one); ``output_accumulate_passes`` is `CPU_OUTPUT_ACCUMULATE_PASSES`; the deployed programs are
    priced on `cpu_numpy`, this fit on one core. ``llc_bytes`` is the fitted host's L3 as the
    kernel reports it (``host.l3_bytes``, /sys/devices/system/cpu/cpu0/cache/index3; MEASURED, not
    fitted; ASSUMPTION: the kernels have it to themselves, although a VM shares it with other
    tenants), behind the fitted effective buffer ``onchip_buffer_bytes``; the gathered lines
    that miss it pay the fitted ``line_miss_overhead_s`` each (the grid's R-MAT 2^20 gathers from
    64-256 MiB, beyond it).
    ASSUMPTION: static power not modeled (0; a share of a cloud VM, RAPL not exposed).
    The "cpu" of this VM is not one machine (an AVX2 host on 2026-11-22, AVX-512 EPYC on
    2026-11-23, a Xeon with AMX on 2026-11-25, the AVX-512 EPYC again from 2026-11-28, the host of
    the committed fit): re-fit on your host with
    ``python experiments/hwmodel_validation.py --save-preset`` (minutes), or
    ``--peaks-only --save-preset`` to replace only the roofs (seconds).

    Raises:
      FileNotFoundError, ValueError: as `load_fit`.
    """
    rec = load_fit("cpu")
    r, f = rec["roofs"], rec["fitted"]
    mm, vec = r["matrix_macs_per_s"], r["vector_macs_per_s"]
    return HardwareSpec(
        name="cpu",
        cores=float(rec["host"].get("cpu_count") or 1),
        output_accumulate_passes=CPU_OUTPUT_ACCUMULATE_PASSES,
        matrix_fp32_macs_per_s=mm, matrix_bf16_macs_per_s=mm, matrix_int8_macs_per_s=mm, matrix_int4_macs_per_s=mm,
        vector_fp32_macs_per_s=vec, vector_bf16_macs_per_s=vec, vector_int8_macs_per_s=vec,
        dram_bw_bytes_per_s=r["dram_bw_bytes_per_s"],
        dram_energy_pj_per_byte=HOROWITZ_DRAM_PJ_PER_BYTE,
        onchip_buffer_bytes=rec["onchip_buffer_bytes"],
        llc_bytes=rec["host"].get("l3_bytes"),
        parallel_stage_bytes=f.get("parallel_stage_bytes"),
        clock_hz=rec["clock_hz"],
        gather_granularity_bytes=CPU_LINE_BYTES,
        **op_energies("cpu"),
        **{k: f[k] for k in FIT_FACTORS},
    )


def cpu_numpy() -> HardwareSpec:
    """The `cpu` machine as a deployed inference program uses it (`codesign.deploy`: numpy GEMMs
    with one BLAS thread and scipy's CSR products, one call per kernel): `cpu` on one core
    (`HardwareSpec.single_core`), one pass per elementwise op (numpy does not fuse:
    ``fuses_elementwise`` False), each kernel paying the fitted cost of one numpy / scipy call
    (``fitted.host_stage_overhead_s`` of ``fits/cpu.json``; FITTED, no datasheet source) instead of
    XLA's dispatch. Measured programs are priced on it (``modeled_local``). Sources: as `cpu`
    (roofs measured by `experiments/hwmodel_validation.py`), the one-core split and the call cost
    fitted on the deployed programs' numpy / scipy kernels there (docs/hwmodel.md).

    Raises:
      FileNotFoundError, ValueError: as `load_fit`.
    """
    host = cpu().single_core("cpu_numpy")
    fitted = load_fit("cpu")["fitted"]
    return host.replace(stage_overhead_s=float(fitted.get("host_stage_overhead_s", host.stage_overhead_s)),
                        fuses_elementwise=False, gemm_pack_byte_s=float(fitted.get("gemm_pack_byte_s", 0.0)),
                        parallel_stage_bytes=None)


h100 = h100_fitted
a100 = a100_fitted
h200 = h200_device
_PRESETS = {"h100": h100, "a100": a100, "h100-datasheet": h100_datasheet, "a100-datasheet": a100_datasheet,
            "h200": h200, "h200-datasheet": h200_datasheet, "cpu": cpu,
            "cpu_numpy": cpu_numpy, "hygcn": hygcn, "gnnear": gnnear,
            "upmem": upmem, "hbm-pim": hbm_pim, "v100": v100, "v100-pyg": v100_pyg, "xeon-e5-2698v4": xeon_e5_2698v4,
            "upmem-host": upmem_host, "mi100": mi100, "gnnear-host": None}
_HOSTS = {"upmem": "upmem-host", "hbm-pim": "mi100", "gnnear": "gnnear-host"}
"""Each near-memory preset's host, a preset of its own (`host_of`)."""


def gnnear_host() -> HardwareSpec:
    """Preset ``gnnear-host``: `gnnear` without its Near-Memory Engines: the centralized
    acceleration engine on the same 4 channels of DDR4-2400, every stage on it (`host_of("gnnear")`).
    Sources: as `gnnear` (its CAE and memory system)."""
    return gnnear().replace(name="gnnear-host", nmp=None)


_PRESETS["gnnear-host"] = gnnear_host


def host_of(name: str) -> HardwareSpec:
    """The host of near-memory preset ``name`` as a preset of its own (``upmem`` -> ``upmem-host``,
    ``hbm-pim`` -> ``mi100``, ``gnnear`` -> ``gnnear-host``), so that a cost on ``name`` can be
    compared with the host alone.

    Raises:
      ValueError: unknown preset, or one without near-memory units (naming the presets that have one).
      TypeError: ``name`` not a str (as `get`).
    """
    key = get(name).name
    if key not in _HOSTS:
        raise ValueError(f"host_of: preset {name!r} has no near-memory units; presets with a host: "
                         f"{', '.join(sorted(_HOSTS))}")
    return get(_HOSTS[key])


MEASURED_PRESETS = ("cpu", "cpu_numpy")
"""The presets whose roofs and factors were measured on a host (``fits/cpu.json``), not published:
`EVIDENCE_LEVELS`' first level (`evidence`), checked against this host by `calibrate.fit_host`."""

EVIDENCE_LEVELS = ("measured on the device", "fitted on public device timings", "reproduces published ratios",
                   "datasheet only")
"""How far a preset's numbers are checked, strongest first (`evidence`)."""
_DATASHEET_ONLY = {
    "hygcn": "HyGCN (HPCA 2020) configuration, aggregate-first with interval-shard reuse; checked against its "
             "paper's ratios over PyG on a V100 (`v100-pyg`)",
    "gnnear": "GNNear (PACT 2022) as its artifact configures it (PKUZHOU/GNNear-PACT-2022 @ 9420d929: system size, "
              "NME / CAE rates, interval shards, duplication); checked against its paper's ratios over DGL on a V100, "
              "also with the V100's published DGL times as the baseline, and per stage against the artifact's "
              "simulator on uniform graphs (1.13x its time, geomean; the real graphs' locality, 1.5-2.6x, is not "
              "modeled: results/gnnear_diagnosis.json)",
    "upmem": "UPMEM 2,556-DPU server (Gomez-Luna et al. 2022 rates) on its two-Xeon host (`upmem-host`); not "
             "checked against a system",
    "hbm-pim": "Samsung HBM-PIM (ISSCC / ISCA 2021) in the datasheet `mi100` host; checked against its paper's ratios "
               "over the same GPU without PIM (IEEE Micro 2022): DeepSpeech2's LSTM speedup and energy in the band, the "
               "GEMV's 8.9x above the preset's 4.0x bandwidth ceiling; the LSTM match rests on the datasheet host's "
               "zero fixed cost per kernel (results/hwmodel_published.json hbm_pim_sensitivity)",
    "v100-pyg": "v100 with PyTorch / PyG's host time per launch set from PyG's published GCN / Cora training epoch "
                "(ASSUMPTIONS['V100_PYG_LAUNCH_S']); the Citeseer and Pubmed epochs of the same table predicted "
                "(results/hwmodel_published.json pyg_check); the baseline of HyGCN's rows",
    "v100": "datasheet + the h100 fit's software factors (ASSUMPTIONS['V100_SOFTWARE_AS_H100_FIT']); the baseline "
            "of results/hwmodel_published.json; against GNNear's 15 published V100 DGL training times (its artifact): "
            "MAPE 41 %, median modeled / published 0.62, training as autodiff runs it (results/hwmodel_published.json "
            "baseline_check)",
    "xeon-e5-2698v4": "datasheet only (GNNear's CPU baseline)",
    "upmem-host": "datasheet only (the UPMEM server's two Xeon Silver 4215)",
    "mi100": "datasheet only (the host of Samsung's HBM-PIM GPU system)",
    "gnnear-host": "gnnear without its NMEs",
}


def evidence(name: str) -> dict:
    """What preset ``name``'s numbers were checked against, read from its fit record where it has
    one: ``{"preset", "level"`` (one of `EVIDENCE_LEVELS`), ``"checked_against"``, ``"error"``
    (a dict of the headline metrics, or None), ``"date"`` (of the check, or None)``}``.

    Raises:
      ValueError: unknown preset (as `get`).
    """
    key = get(name).name if name.lower() not in _PRESETS else name.lower()
    if key in MEASURED_PRESETS:
        rec = load_fit("cpu")
        val = rec.get("validation", {})
        return {"preset": key, "level": EVIDENCE_LEVELS[0],
                "checked_against": f"XLA / numpy / scipy kernels timed on {rec['host'].get('cpu_model')} "
                                   f"({rec['command']}); grouped cross-validation",
                "error": {"held_out": val.get("held_out"), "grouped_mape": val.get("grouped_mape")},
                "date": rec.get("fitted_date")}
    if key == "h200":
        rec = h200_fit_record()
        lat = rec["latency"]
        return {"preset": key, "level": EVIDENCE_LEVELS[0],
                "checked_against": f"kernels device-timed and NVML energy on a lent {rec['device']} "
                                   f"({rec['source']}): random halves, leave one graph / kind out, and the R-MAT "
                                   "2^20 kernel table never fitted",
                "error": {"held_out_random_halves_median_mape": lat["random_halves"]["median_mape"],
                          "out_of_grid": {k: lat["out_of_grid"][k] for k in ("n", "mape", "spearman")},
                          "energy_predicted_max_abs_error": rec["energy"]["predicted_max_abs_error"]},
                "date": rec.get("fitted_date")}
    if key in ("h100-datasheet", "a100-datasheet", "h200-datasheet"):
        return {"preset": key, "level": EVIDENCE_LEVELS[3],
                "checked_against": f"datasheet only; `{key.split('-')[0]}` is this chip with its software factors "
                                   + ("fitted on kernels timed on the device" if key.startswith("h200")
                                      else "fitted on public device timings"), "error": None, "date": None}
    if key in ("h100", "a100"):
        rec = gpu_fit_record()
        err = {f"{kind}/{k}": v["cv"]["all"] for kind, t in rec["tables"].items()
               for k, v in t["kernels"].items() if k in ("cusparse", "best")}
        what = ("the public H100 SpMM / SDDMM tables (FlashSparse, PPoPP 2025; the half in shared/data/gpu_timings), "
                "5-fold cross-validation grouped by matrix")
        if key == "a100":
            what = "none of its own: the h100 fit scaled by the A100 datasheet (ASSUMPTIONS['A100_SCALES_AS_SM_CLOCK'])"
        fitted = key == "h100"
        return {"preset": key, "level": EVIDENCE_LEVELS[1] if fitted else EVIDENCE_LEVELS[3],
                "checked_against": what, "error": err if fitted else None, "date": rec.get("fitted_date")}
    if key == "v100-pyg" and PUBLISHED.exists():
        import json
        check = json.loads(PUBLISHED.read_text())["pyg_check"]["per_task"]
        return {"preset": key, "level": EVIDENCE_LEVELS[1], "checked_against": _DATASHEET_ONLY[key],
                "error": {f"{k} ({v['role']}) modeled / published": v["modeled_over_published"] for k, v in check.items()},
                "date": None}
    published = _published_rows(key)
    if published:
        err = {f"{r['comparison']} ({r['baseline']})": r["ratio"] for r in published}
        worst = max(abs(r["ratio"] - 1.0) for r in published)
        level = EVIDENCE_LEVELS[2] if worst <= PUBLISHED_BAND else EVIDENCE_LEVELS[3]
        what = (f"{_DATASHEET_ONLY[key]}; model / paper per comparison in `error` "
                f"({'all' if worst <= PUBLISHED_BAND else 'not all'} within {PUBLISHED_BAND:.0%}; "
                "results/hwmodel_published.json)")
        return {"preset": key, "level": level, "checked_against": what, "error": err, "date": None}
    return {"preset": key, "level": EVIDENCE_LEVELS[3], "checked_against": _DATASHEET_ONLY[key], "error": None,
            "date": None}


PUBLISHED = Path(__file__).resolve().parents[2] / "results" / "hwmodel_published.json"
PUBLISHED_BAND = 0.35
"""A preset "reproduces published ratios" when every row of ``results/hwmodel_published.json``
(experiments/reproduce_published.py) with it as the accelerator has model / paper within this band."""


def _published_rows(key: str) -> list:
    """The rows of `PUBLISHED` whose accelerator is preset ``key`` ([] when the file is absent,
    e.g. an installed package without the repository's results/)."""
    import json
    if not PUBLISHED.exists():
        return []
    return [r for r in json.loads(PUBLISHED.read_text())["rows"] if r.get("accelerator") == key]


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


def power_limit_table() -> str:
    """docs/hwmodel.md's table of every preset's modeled peak power (`power.peak_power_parts`, over
    the scope of its `POWER_LIMITS_W` entry) against its published limit, as markdown; generated,
    and checked against the docs by tests/test_hwmodel_energy.py."""
    from codesign.hwmodel.power import CHIP_PARTS, PEAK_POWER_PARTS, peak_power_parts, peak_power_w
    rows = ["| preset | node, Vdd | matrix | vector | on-chip | DRAM | near-memory | static | modeled (scope) | limit |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in names():
        hw = get(name)
        watts, scope, _ = POWER_LIMITS_W[name]
        p = {k: float(v) for k, v in peak_power_parts(hw).items()}
        modeled = float(peak_power_w(hw, CHIP_PARTS if scope == "chip" else PEAK_POWER_PARTS))
        key = {"h100-datasheet": "h100", "a100-datasheet": "a100", "h200": "h100", "h200-datasheet": "h100", "cpu_numpy": "cpu", "hbm-pim": "mi100",
               "upmem": "upmem-host", "gnnear-host": "gnnear", "v100-pyg": "v100"}.get(name, name)
        node, vdd, _ = PROCESS_NODES[key]
        nodes = f"{node:g} nm, {vdd:g} V"
        if hw.nmp is not None:
            nkey = "gnnear-nme" if name == "gnnear" else "dram-logic"
            nodes += f"; NMP {PROCESS_NODES[nkey][0]:g} nm, {PROCESS_NODES[nkey][1]:g} V"
        rows.append(f"| {name} | {nodes} | " + " | ".join(f"{p[k]:.1f}" for k in
                                                          ("matrix", "vector", "onchip", "dram", "nmp", "static"))
                    + f" | {modeled:.1f} ({scope}) | {watts:.1f} |")
    return "\n".join(rows)
