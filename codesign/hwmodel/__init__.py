"""Differentiable analytic hardware cost model: `HardwareSpec` + presets, `Workload`, `estimate`."""

from codesign.hwmodel import presets
from codesign.hwmodel.estimate import CostReport, StageCost, estimate, smooth_max, stage_cost
from codesign.hwmodel.spec import HardwareSpec, mac_energy_pj, matrix_macs_per_s, vector_macs_per_s
from codesign.hwmodel.workload import (LayerWorkload, Stage, Workload, elementwise_stage, gemm_stage,
                                       message_passing_layer, spmm_stage)

__all__ = ["presets", "CostReport", "StageCost", "estimate", "smooth_max", "stage_cost", "HardwareSpec",
           "mac_energy_pj", "matrix_macs_per_s", "vector_macs_per_s", "LayerWorkload", "Stage", "Workload",
           "elementwise_stage", "gemm_stage", "message_passing_layer", "spmm_stage"]
