"""Differentiable analytic hardware cost model: `HardwareSpec` + presets, `Workload`, `estimate`.

Inputs are checked at the boundary (`codesign.hwmodel.validate`): bit-widths in [1, 32], densities
in [0, 1], counts >= 0, all finite (concrete values; traced ones under jit/grad are not checked),
and every `HardwareSpec` number at construction."""

from codesign.hwmodel import presets
from codesign.hwmodel.power import peak_power_parts, peak_power_w
from codesign.hwmodel.locality import LocalityProfile
from codesign.hwmodel.locality import measure as measure_locality
from codesign.hwmodel.estimate import (MAPPING_OBJECTIVES, CostReport, StageCost, estimate, floored_row_bytes, nmp_stage_cost, smooth_max,
                                       stage_cost)
from codesign.hwmodel.validate import MAX_BITS, MIN_BITS, check_bits, check_count, check_density, resolve_densities
from codesign.hwmodel.spec import (PRECISION_TIERS, HardwareSpec, NearMemorySpec, mac_energy_pj, matrix_macs_per_s,
                                   nmp_mac_energy_pj, nmp_macs_per_s, tier_bits, vector_macs_per_s)
from codesign.hwmodel.workload import (ACTIVATION_MASK_BYTES, LayerWorkload, Stage, Workload, attention_stages, bsr_spmm_stage,
                                       csr_chunk_spmm_stages, csr_gemm_stage, elementwise_stage, gemm_stage, gemv_stage,
                                       input_gemm_stage, message_passing_layer, segment_spmm_stages, spmm_stage,
                                       upcast_gemm_stages, autograd_training, reads_graph_input)

__all__ = ["presets", "peak_power_parts", "peak_power_w", "LocalityProfile", "measure_locality", "CostReport", "StageCost",
           "estimate", "nmp_stage_cost", "smooth_max", "stage_cost", "HardwareSpec", "NearMemorySpec",
           "mac_energy_pj", "matrix_macs_per_s", "vector_macs_per_s", "PRECISION_TIERS", "nmp_mac_energy_pj",
           "nmp_macs_per_s", "tier_bits", "floored_row_bytes", "LayerWorkload", "Stage", "Workload",
           "attention_stages", "bsr_spmm_stage", "csr_chunk_spmm_stages", "csr_gemm_stage", "elementwise_stage",
           "input_gemm_stage",
           "gemm_stage", "gemv_stage",
           "message_passing_layer",
           "segment_spmm_stages", "spmm_stage", "upcast_gemm_stages", "autograd_training", "reads_graph_input", "MAX_BITS", "MIN_BITS",
           "check_bits", "check_count", "check_density", "resolve_densities", "ACTIVATION_MASK_BYTES",
           "MAPPING_OBJECTIVES"]
from codesign.hwmodel import comm
from codesign.hwmodel.comm import CommCost, CommStage, LinkSpec, communication_cost, communication_stage

__all__ += ["comm", "CommCost", "CommStage", "LinkSpec", "communication_cost", "communication_stage"]
from codesign.hwmodel import planner, topology
from codesign.hwmodel.planner import Plan, plan_exchange
from codesign.hwmodel.topology import Resource, Topology, get_topology, transfer_cost

__all__ += ["planner", "topology", "Plan", "plan_exchange", "Resource", "Topology", "get_topology", "transfer_cost"]
