"""Synthetic graphs: R-MAT / Kronecker for scale.

R-MAT (Chakrabarti, Zhan & Faloutsos, "R-MAT: A Recursive Model for Graph Mining", SDM 2004):
each edge picks one of the four quadrants of the adjacency matrix at each of ``scale`` levels
with probabilities (a, b, c, d); Graph500 uses (0.57, 0.19, 0.19, 0.05) (Graph500 specification,
"Kronecker generator"). Vectorized over edges with NumPy: 10M edges take a few seconds.
"""

from __future__ import annotations

import numpy as np

GRAPH500_ABCD = (0.57, 0.19, 0.19, 0.05)


def rmat_edges(scale: int, n_edges: int, abcd=GRAPH500_ABCD, seed: int = 0, symmetric: bool = True,
               dedup: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT edge list over ``2**scale`` nodes.

    Args:
      scale: log2 of the node count (1..31).
      n_edges: edges to draw (before symmetrization and de-duplication).
      abcd: quadrant probabilities, summing to 1.
      seed: NumPy seed.
      symmetric: add the reverse of every edge.
      dedup: drop self-loops and duplicate edges.

    Returns:
      ``(senders, receivers)`` int32 arrays of equal length, sorted by (receiver, sender) when
      ``dedup``; node ids are randomly permuted (Graph500 does this to hide the recursive
      structure from the id order).

    Raises:
      ValueError: scale out of range, n_edges < 1, or probabilities that are negative or do not
        sum to 1.
    """
    if not 1 <= scale <= 31:
        raise ValueError(f"rmat_edges: scale must be in [1, 31], got {scale}")
    if n_edges < 1:
        raise ValueError(f"rmat_edges: n_edges must be >= 1, got {n_edges}")
    p = np.asarray(abcd, np.float64)
    if p.shape != (4,) or (p < 0).any() or abs(p.sum() - 1.0) > 1e-6:
        raise ValueError(f"rmat_edges: abcd must be 4 probabilities summing to 1, got {abcd}")
    rng = np.random.default_rng(seed)
    src = np.zeros(n_edges, np.int64)
    dst = np.zeros(n_edges, np.int64)
    cum = np.cumsum(p)
    for level in range(scale):
        q = np.searchsorted(cum, rng.random(n_edges), side="right")  # quadrant 0..3
        src |= (q >> 1).astype(np.int64) << level
        dst |= (q & 1).astype(np.int64) << level
    perm = rng.permutation(1 << scale)
    src, dst = perm[src], perm[dst]
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if dedup:
        keep = src != dst
        key = np.unique(dst[keep] * (1 << scale) + src[keep])
        dst, src = key >> scale, key & ((1 << scale) - 1)
    return src.astype(np.int32), dst.astype(np.int32)
