"""Node reorderings that cluster nonzeros into few dense B x B tiles (host-side, numpy/scipy).

A permutation ``perm int32[N]`` lists the old node ids in their new order: new node ``i`` is old
node ``perm[i]``; its inverse ``inv_perm[old] = new`` relabels edges. Reordering a graph does not
change what it computes, only where its nonzeros fall, and so how many B x B tiles a block-sparse
format (`BlockSparseAdjacency`) must store.

Sources:
  * Cuthill, E. & McKee, J. (1969), "Reducing the bandwidth of sparse symmetric matrices",
    Proc. 24th ACM National Conference, 157-172. The reversed ordering (George, 1971) is what
    ``scipy.sparse.csgraph.reverse_cuthill_mckee`` computes.
  * Karypis, G. & Kumar, V. (1998), "A fast and high quality multilevel scheme for partitioning
    irregular graphs", SIAM J. Sci. Comput. 20(1), 359-392 (METIS), used through ``pymetis``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

__all__ = ["rcm_permutation", "metis_permutation", "apply_permutation", "inverse_permutation"]


def _symmetric_pattern(senders, receivers, n_nodes: int, self_loops: bool = True) -> sp.csr_matrix:
    """The 0/1 pattern of ``A + A^T`` as an ``[N, N]`` csr matrix (duplicates collapsed)."""
    s = np.asarray(senders, np.int64)
    r = np.asarray(receivers, np.int64)
    if s.shape != r.shape or s.ndim != 1:
        raise ValueError(f"senders/receivers must be 1-D of equal length, got {s.shape=} {r.shape=}")
    if s.size and (min(s.min(), r.min()) < 0 or max(s.max(), r.max()) >= n_nodes):
        raise ValueError(f"senders/receivers must lie in [0, n_nodes={n_nodes})")
    rows, cols = np.concatenate([r, s]), np.concatenate([s, r])
    if not self_loops:
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
    pat = sp.csr_matrix((np.ones(rows.size, np.int8), (rows, cols)), shape=(n_nodes, n_nodes))
    pat.data[:] = 1  # duplicates were summed; only the pattern matters
    return pat


def inverse_permutation(perm) -> np.ndarray:
    """``inv_perm int32[N]`` with ``inv_perm[perm[i]] = i``."""
    perm = np.asarray(perm)
    inv = np.empty_like(perm, dtype=np.int32)
    inv[perm] = np.arange(perm.size, dtype=np.int32)
    return inv


def rcm_permutation(senders, receivers, n_nodes: int) -> np.ndarray:
    """Reverse Cuthill-McKee ordering of the symmetrized pattern ``A + A^T``.

    Args:
      senders, receivers: int [E] edge endpoints in ``[0, n_nodes)``.
      n_nodes: N.

    Returns:
      ``perm int32[N]``: new node ``i`` is old node ``perm[i]``. Nonzeros of the reordered matrix
      cluster near the diagonal (small bandwidth), which lowers the number of B x B tiles.
    """
    pat = _symmetric_pattern(senders, receivers, n_nodes)
    return np.asarray(reverse_cuthill_mckee(pat, symmetric_mode=True), np.int32)


def metis_permutation(senders, receivers, n_nodes: int, n_parts: int) -> np.ndarray:
    """Nodes grouped by METIS partition (k-way, minimum edge cut); RCM order inside each part.

    Args:
      senders, receivers: int [E] edge endpoints in ``[0, n_nodes)``.
      n_nodes: N.
      n_parts: number of partitions (>= 1). Parts of a few block rows each work well.

    Returns:
      ``perm int32[N]`` (new node ``i`` is old node ``perm[i]``).

    Raises:
      ImportError: ``pymetis`` is not installed (``pip install pymetis``; it is optional).
      ValueError: ``n_parts < 1``.
    """
    if int(n_parts) < 1:
        raise ValueError(f"metis_permutation: n_parts must be >= 1, got {n_parts}")
    try:
        import pymetis
    except ImportError as e:  # optional dependency
        raise ImportError("metis_permutation needs the optional package pymetis: pip install pymetis") from e
    rcm = rcm_permutation(senders, receivers, n_nodes)
    if int(n_parts) == 1 or n_nodes <= 1:
        return rcm
    pat = _symmetric_pattern(senders, receivers, n_nodes, self_loops=False)  # METIS forbids loops
    _, membership = pymetis.part_graph(int(n_parts), xadj=pat.indptr.astype(np.int64),
                                       adjncy=pat.indices.astype(np.int64))
    membership = np.asarray(membership)
    # Stable sort of the RCM order by part id: parts are contiguous, RCM order within each.
    return np.asarray(rcm[np.argsort(membership[rcm], kind="stable")], np.int32)


def apply_permutation(senders, receivers, perm) -> tuple[np.ndarray, np.ndarray]:
    """Relabels edges into the reordered numbering: returns ``(inv_perm[senders], inv_perm[receivers])``.

    Args:
      senders, receivers: int [E] old node ids.
      perm: int [N] as returned by `rcm_permutation` / `metis_permutation`.

    Returns:
      ``(senders int32[E], receivers int32[E])`` in new node ids.
    """
    inv = inverse_permutation(perm)
    return inv[np.asarray(senders)], inv[np.asarray(receivers)]
