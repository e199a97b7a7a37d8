"""Aggregation kernels: one dispatch entry (`aggregate`) over interchangeable backends."""

from codesign.kernels.api import aggregate
from codesign.kernels.coo import CooAdjacency
from codesign.kernels.segment import dense_spmm, segment_spmm

__all__ = ["aggregate", "CooAdjacency", "segment_spmm", "dense_spmm"]
