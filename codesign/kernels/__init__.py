"""Aggregation kernels: formats (coo, csr_cpu's CsrPattern, bsr, condensed) x backends (segment,
scipy CSR, XLA references, Pallas), joined by one ``(format, impl)`` dispatch table (`api.IMPLS`)
behind one entry point, `aggregate`; `auto_impl` is the only place that picks a backend."""

from codesign.kernels.api import IMPLS, aggregate, auto_impl, recorded_choices
from codesign.kernels.bsr import BlockPattern, BlockSparseAdjacency, with_block_pattern
from codesign.kernels.condensed import CondensedRowWindows, condensed_spmm_reference
from codesign.kernels.tiling import REORDERINGS
from codesign.kernels.config import BlockSizes, CsrBlockSizes
from codesign.kernels.coo import CooAdjacency
from codesign.kernels.csr_cpu import CsrPattern, csr_aggregate, csr_pattern, csr_spmm, structural_degree, with_csr_pattern
from codesign.kernels.features import SparseFeatures, features_matmul, sparse_features
from codesign.kernels.gat import CsrByReceiver, csr_by_receiver, gat_aggregate, gat_aggregate_reference
from codesign.kernels.pallas_condensed import condensed_spmm
from codesign.kernels.pallas_csr import (CsrChunks, csr_chunk_aggregate, csr_chunk_spmm, csr_chunk_spmm_int8,
                                         csr_chunk_spmm_reference, csr_chunks, gcn_scales, with_csr_chunks)
from codesign.kernels.pallas_spmm import bsr_spmm, bsr_spmm_int8, bsr_spmm_int8_reference, bsr_spmm_reference
from codesign.kernels.reorder import apply_permutation, metis_permutation, rcm_permutation
from codesign.kernels.segment import dense_spmm, segment_spmm

__all__ = [
    "aggregate", "auto_impl", "recorded_choices", "IMPLS", "CooAdjacency", "BlockPattern", "with_block_pattern", "REORDERINGS", "segment_spmm", "dense_spmm",
    "BlockSparseAdjacency", "CondensedRowWindows", "condensed_spmm_reference",
    "BlockSizes", "bsr_spmm", "bsr_spmm_int8", "bsr_spmm_reference", "bsr_spmm_int8_reference",
    "rcm_permutation", "metis_permutation", "apply_permutation",
    "SparseFeatures", "sparse_features", "features_matmul",
    "CsrByReceiver", "csr_by_receiver", "gat_aggregate", "gat_aggregate_reference",
    "condensed_spmm",
    "CsrPattern", "csr_pattern", "with_csr_pattern", "csr_spmm", "csr_aggregate", "structural_degree",
    "CsrBlockSizes", "CsrChunks", "csr_chunks", "with_csr_chunks", "csr_chunk_spmm", "csr_chunk_spmm_int8",
    "csr_chunk_spmm_reference", "csr_chunk_aggregate", "gcn_scales",
]
