"""Tile sizes and launch parameters of the Pallas block-sparse kernels (one frozen dataclass)."""

from __future__ import annotations

import dataclasses

__all__ = ["BlockSizes", "CsrBlockSizes"]

_MIN_TRITON_DOT_DIM = 16  # Triton's tl.dot needs every matrix dimension >= 16


def _next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (int(n) - 1).bit_length()


@dataclasses.dataclass(frozen=True, slots=True)
class BlockSizes:
    """Tiling of ``bsr_spmm`` (feature axis) and its Triton launch parameters.

    The node-axis tile is the BSR ``block_size`` of the adjacency, not a field here.

    Attributes:
      block_f: feature columns per program (a power of two >= 16). The kernel uses
        ``min(block_f, next_power_of_2(F))`` (at least 16) and zero-pads F up to a multiple of it.
      block_f_sddmm: feature columns per loop step of the tile-gradient (SDDMM) kernel, same rules.
      num_warps: warps per program; None means 4 for B <= 32 and 8 for larger tiles.
      num_stages: software-pipelining stages of the tile loop (Triton ``num_stages``).
    """

    block_f: int = 64
    block_f_sddmm: int = 64
    num_warps: int | None = None
    num_stages: int = 2

    def __post_init__(self):
        for name in ("block_f", "block_f_sddmm"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < _MIN_TRITON_DOT_DIM or v & (v - 1):
                raise ValueError(f"BlockSizes.{name} must be a power of two >= {_MIN_TRITON_DOT_DIM}, got {v!r}")
        if self.num_warps is not None and (self.num_warps < 1 or self.num_warps & (self.num_warps - 1)):
            raise ValueError(f"BlockSizes.num_warps must be a power of two >= 1 or None, got {self.num_warps!r}")
        if self.num_stages < 1:
            raise ValueError(f"BlockSizes.num_stages must be >= 1, got {self.num_stages!r}")

    @staticmethod
    def feature_tile(block_f: int, n_features: int) -> int:
        """The feature tile used for ``n_features`` columns: ``max(16, min(block_f, next_pow2(F)))``."""
        return max(_MIN_TRITON_DOT_DIM, min(block_f, _next_power_of_2(n_features)))

    def warps(self, block_size: int) -> int:
        """``num_warps`` resolved for tiles of ``block_size`` rows."""
        if self.num_warps is not None:
            return self.num_warps
        return 4 if block_size <= 32 else 8


@dataclasses.dataclass(frozen=True, slots=True)
class CsrBlockSizes:
    """Tiling of the Pallas CSR edge-chunk SpMM (`codesign.kernels.pallas_csr`) and its launch
    parameters. Host-side work items and in-kernel vector sizes are both set here.

    Attributes:
      chunk: edges per vector load of column ids (the gathered X tile is ``[chunk, block_f]``);
        a power of two >= 8.
      max_item_edges: edge budget of one work item (a multiple of ``chunk``). A row with more
        edges is split into items of at most this many edges whose partial sums a second,
        deterministic pass adds (no atomics); a window of light rows holds fewer than
        ``2 * max_item_edges`` edges.
      max_item_rows: rows per window work item (>= 1).
      block_f: feature columns per gathered tile (a power of two >= 8); all ``ceil(F / block_f)``
        tiles are looped inside one program, so column ids are loaded once per row chunk.
      rows_per_step: rows of a window walked together (a power of two >= 1): 1 walks them one by
        one (GE-SpMM's row split); more load a ``[rows, chunk]`` tile of column ids and gather a
        ``[rows, chunk, block_f]`` tile per step, masking rows shorter than the longest (more
        loads in flight per program, idle lanes on uneven rows).
      num_warps: warps per program (power of two).
      num_stages: software-pipelining stages of the chunk loop (Triton ``num_stages``).
      items_multiple: the work-item, split-row and slot counts are padded up to a multiple of this
        (empty items), so graphs of similar size share one compiled kernel.
    """

    chunk: int = 16
    max_item_edges: int = 512
    max_item_rows: int = 32
    block_f: int = 64
    rows_per_step: int = 1
    num_warps: int = 4
    num_stages: int = 2
    items_multiple: int = 64

    def __post_init__(self):
        for name, lo in (("chunk", 8), ("block_f", 8), ("rows_per_step", 1), ("num_warps", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo or v & (v - 1):
                raise ValueError(f"CsrBlockSizes.{name} must be a power of two >= {lo}, got {v!r}")
        if not isinstance(self.max_item_edges, int) or self.max_item_edges < self.chunk \
                or self.max_item_edges % self.chunk:
            raise ValueError(f"CsrBlockSizes.max_item_edges must be a positive multiple of chunk={self.chunk}, "
                             f"got {self.max_item_edges!r}")
        for name in ("max_item_rows", "num_stages", "items_multiple"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"CsrBlockSizes.{name} must be an int >= 1, got {v!r}")

    def feature_tile(self, n_features: int) -> int:
        """The feature tile for ``n_features`` columns: ``max(8, min(block_f, next_pow2(F)))``."""
        return max(8, min(self.block_f, _next_power_of_2(n_features)))
