"""Block-sparse formats: BSR and condensed row windows against the dense COO matrix; reordering."""

import sys

import numpy as np
import jax.numpy as jnp
import pytest

from codesign.kernels import (BlockSparseAdjacency, CondensedRowWindows, CooAdjacency, aggregate,
                              condensed_spmm_reference, metis_permutation, rcm_permutation,
                              segment_spmm)
from codesign.kernels.reorder import apply_permutation

try:
    import pymetis  # noqa: F401
    HAS_PYMETIS = True
except ImportError:
    HAS_PYMETIS = False


def random_coo(seed, n, e, weighted=True) -> CooAdjacency:
    rng = np.random.default_rng(seed)
    s, r = rng.integers(0, n, e), rng.integers(0, n, e)
    w = rng.normal(size=e).astype(np.float32) if weighted else None
    return CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32),
                        None if w is None else jnp.asarray(w), n)


def power_law_coo(seed, n, avg_degree=6) -> CooAdjacency:
    """Undirected graph whose endpoints are drawn with Zipf-like popularity (a few hubs)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, n + 1) ** 1.1
    p = p[rng.permutation(n)]
    p /= p.sum()
    e = n * avg_degree // 2
    a, b = rng.choice(n, e, p=p), rng.integers(0, n, e)
    s, r = np.concatenate([a, b]), np.concatenate([b, a])
    return CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n)


def coo_dense(adj: CooAdjacency) -> np.ndarray:
    """The ``[N, N]`` matrix (rows = receivers), duplicates summed, in float64."""
    d = np.zeros((adj.n_nodes, adj.n_nodes))
    w = np.ones(adj.n_edges) if adj.edge_weight is None else np.asarray(adj.edge_weight, np.float64)
    np.add.at(d, (np.asarray(adj.receivers), np.asarray(adj.senders)), w)
    return d


def reordered_padded(dense: np.ndarray, perm: np.ndarray, n_pad: int) -> np.ndarray:
    n = dense.shape[0]
    out = np.zeros((n_pad, n_pad))
    out[:n, :n] = dense[np.ix_(perm, perm)]
    return out


def bandwidth(senders, receivers) -> int:
    return int(np.abs(np.asarray(senders, np.int64) - np.asarray(receivers, np.int64)).max())


@pytest.mark.parametrize("reorder", [None, "rcm"])
@pytest.mark.parametrize("block_size", [8, 16, 32])
@pytest.mark.parametrize("n,e,weighted", [(1, 1, True), (37, 150, True), (100, 700, False)])
def test_bsr_to_dense_matches_coo(reorder, block_size, n, e, weighted):
    adj = random_coo(n + e, n, e, weighted)
    bsr = BlockSparseAdjacency.from_coo(adj, block_size, reorder=reorder)
    assert bsr.n_pad == -(-n // block_size) * block_size and bsr.n_pad >= n
    assert sorted(np.asarray(bsr.perm).tolist()) == list(range(n))
    if reorder is None:
        np.testing.assert_array_equal(bsr.perm, np.arange(n))
    want = reordered_padded(coo_dense(adj), np.asarray(bsr.perm), bsr.n_pad)
    np.testing.assert_allclose(bsr.to_dense(), want, rtol=1e-6, atol=1e-6)
    # Structure invariants: sorted tiles, row_of_tile expands indptr, counts are consistent.
    per_row = np.diff(np.asarray(bsr.indptr))
    np.testing.assert_array_equal(bsr.row_of_tile, np.repeat(np.arange(bsr.n_block_rows), per_row))
    assert bsr.data.shape == (bsr.nnz_blocks, block_size, block_size) and bsr.data.dtype == jnp.float32
    distinct = len(set(zip(np.asarray(adj.receivers).tolist(), np.asarray(adj.senders).tolist())))
    assert int(np.asarray(bsr.tile_nnz).sum()) == distinct
    assert bsr.fill_ratio == pytest.approx(distinct / (bsr.nnz_blocks * block_size ** 2))


def test_bsr_aggregation_in_original_order_matches_segment():
    adj = random_coo(3, 45, 200)
    bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder="rcm")
    x = np.random.default_rng(0).normal(size=(45, 7)).astype(np.float32)
    out = bsr.unpermute(aggregate(bsr, bsr.permute_features(jnp.asarray(x)), impl="bsr_xla"))
    np.testing.assert_allclose(out, segment_spmm(adj, jnp.asarray(x)), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(bsr.unpermute(bsr.permute_features(jnp.asarray(x))), x)
    with pytest.raises(ValueError, match="permute_features"):
        bsr.permute_features(jnp.asarray(x[:10]))
    with pytest.raises(ValueError, match="unpermute"):
        bsr.unpermute(jnp.asarray(x))


def test_fill_ratio_hand_checked():
    # N = 16, B = 8: edges (receiver, sender) = (0, 1), (1, 0), (2, 9), (2, 9) [duplicate].
    # Tile (0, 0) holds 2 nonzeros, tile (0, 1) holds 1 (duplicates count once): 3 / (2 * 64).
    adj = CooAdjacency(jnp.array([1, 0, 9, 9], jnp.int32), jnp.array([0, 1, 2, 2], jnp.int32), None, 16)
    bsr = BlockSparseAdjacency.from_coo(adj, 8, reorder=None)
    assert bsr.nnz_blocks == 2
    np.testing.assert_array_equal(bsr.indptr, [0, 2, 2])
    np.testing.assert_array_equal(bsr.indices, [0, 1])
    np.testing.assert_array_equal(bsr.tile_nnz, [2, 1])
    assert bsr.fill_ratio == pytest.approx(3 / 128)
    assert float(bsr.to_dense()[2, 9]) == 2.0  # duplicate edge summed
    stats = bsr.tile_stats()
    assert stats == dict(block_size=8, n_block_rows=2, nnz_blocks=2, nnz=3, fill_ratio=pytest.approx(3 / 128),
                         max_tiles_per_row=2, mean_tiles_per_row=1.0, empty_block_rows=1)
    # Condensed windows, K = 8: window 0 has distinct columns {0, 1, 9} -> one 8 x 8 tile, 3 / 64.
    crw = CondensedRowWindows.from_coo(adj, window=8)
    assert crw.n_tiles == 1 and crw.fill_ratio == pytest.approx(3 / 64)
    np.testing.assert_array_equal(crw.tile_cols[0, :3], [0, 1, 9])
    np.testing.assert_array_equal(crw.col_mask[0], [True] * 3 + [False] * 5)
    np.testing.assert_array_equal(crw.win_ptr, [0, 1, 1])


def test_rcm_reduces_bandwidth_and_tiles():
    n, half_band = 256, 3
    s, r = [], []
    for i in range(n):
        for d in range(1, half_band + 1):
            if i + d < n:
                s += [i, i + d]
                r += [i + d, i]
    shuffle = np.random.default_rng(0).permutation(n)  # old id -> shuffled id
    s, r = shuffle[np.array(s)], shuffle[np.array(r)]
    perm = rcm_permutation(s, r, n)
    assert sorted(perm.tolist()) == list(range(n)) and perm.dtype == np.int32
    s2, r2 = apply_permutation(s, r, perm)
    assert bandwidth(s, r) > 100
    assert bandwidth(s2, r2) <= 2 * half_band
    adj = CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), None, n)
    plain = BlockSparseAdjacency.from_coo(adj, 16, reorder=None)
    rcm = BlockSparseAdjacency.from_coo(adj, 16, reorder="rcm")
    assert rcm.nnz_blocks <= 3 * rcm.n_block_rows < plain.nnz_blocks
    assert rcm.fill_ratio > 4 * plain.fill_ratio


@pytest.mark.parametrize("reorder", [None, "rcm"])
def test_transposed_structure(reorder):
    adj = random_coo(7, 70, 300)
    bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder=reorder)
    dense = np.asarray(bsr.to_dense())
    t = bsr.transpose()
    np.testing.assert_array_equal(t.to_dense(), dense.T)
    np.testing.assert_array_equal(t.indptr, bsr.t_indptr)
    np.testing.assert_array_equal(t.indices, bsr.t_indices)
    # Transposed tile k is the transpose of forward tile t_perm[k], at (block col, block row).
    for k, fk in enumerate(np.asarray(bsr.t_perm)):
        assert int(bsr.indices[fk]) == int(t.row_of_tile[k])
        assert int(bsr.row_of_tile[fk]) == int(bsr.t_indices[k])
    tt = t.transpose()
    for name in ("indptr", "indices", "row_of_tile", "t_indptr", "t_indices", "t_perm", "tile_nnz"):
        np.testing.assert_array_equal(getattr(tt, name), getattr(bsr, name), err_msg=name)
    np.testing.assert_array_equal(tt.data, bsr.data)


def test_with_tile_mask():
    adj = random_coo(11, 80, 400)
    bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder="rcm")
    keep = np.random.default_rng(1).random(bsr.nnz_blocks) < 0.5
    keep[np.asarray(bsr.row_of_tile) == 0] = False  # block row 0 becomes empty
    masked = bsr.with_tile_mask(keep)
    assert masked.nnz_blocks == int(keep.sum())
    tiles = np.asarray(bsr.data) * keep[:, None, None]
    want = np.asarray(bsr.with_data(jnp.asarray(tiles)).to_dense())
    np.testing.assert_array_equal(masked.to_dense(), want)
    np.testing.assert_array_equal(masked.transpose().to_dense(), want.T)
    assert masked.tile_stats()["empty_block_rows"] >= 1
    np.testing.assert_array_equal(masked.perm, bsr.perm)
    with pytest.raises(ValueError, match="keep must be bool"):
        bsr.with_tile_mask(np.ones(bsr.nnz_blocks, np.int32))
    with pytest.raises(ValueError, match="with_data"):
        bsr.with_data(bsr.data[:1])


@pytest.mark.parametrize("window,k,reorder", [(16, 16, None), (16, 16, "rcm"), (16, 32, None), (32, 16, "rcm")])
def test_condensed_reconstructs_dense_and_is_denser(reorder, window, k):
    adj = power_law_coo(5, 300)
    crw = CondensedRowWindows.from_coo(adj, window=window, k=k, reorder=reorder)
    want = reordered_padded(coo_dense(adj), np.asarray(crw.perm), crw.n_pad)
    np.testing.assert_allclose(crw.to_dense(), want)
    assert crw.tile_data.shape == (crw.n_tiles, window, k) and crw.tile_cols.shape == (crw.n_tiles, k)
    x = np.random.default_rng(2).normal(size=(crw.n_pad, 5)).astype(np.float32)
    np.testing.assert_allclose(condensed_spmm_reference(crw, jnp.asarray(x)), want @ x, rtol=1e-5, atol=1e-4)
    if window == k:
        bsr = BlockSparseAdjacency.from_coo(adj, window, reorder=reorder)
        assert crw.fill_ratio >= bsr.fill_ratio
        assert crw.n_tiles <= bsr.nnz_blocks


@pytest.mark.parametrize("bad", [0, 4, 12, 24, 256, -16, 16.0, True, "16", None])
def test_bad_block_size_names_field(bad):
    adj = random_coo(0, 10, 20)
    with pytest.raises(ValueError, match="block_size"):
        BlockSparseAdjacency.from_coo(adj, bad)
    with pytest.raises(ValueError, match="window"):
        CondensedRowWindows.from_coo(adj, window=bad)


def test_bad_inputs_raise():
    adj = random_coo(0, 10, 20)
    with pytest.raises(ValueError, match="reorder"):
        BlockSparseAdjacency.from_coo(adj, 16, reorder="amd")
    with pytest.raises(ValueError, match="out of range"):
        BlockSparseAdjacency.from_coo(CooAdjacency(jnp.array([0, 12]), jnp.array([1, 1]), None, 10), 16)
    with pytest.raises(ValueError, match="k must be"):
        CondensedRowWindows.from_coo(adj, window=16, k=20)


def test_empty_graph():
    adj = CooAdjacency(jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.int32), None, 20)
    bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder="rcm")
    assert bsr.nnz_blocks == 0 and bsr.fill_ratio == 0.0 and bsr.n_pad == 32
    np.testing.assert_array_equal(bsr.to_dense(), np.zeros((32, 32)))
    assert CondensedRowWindows.from_coo(adj, 16).n_tiles == 0


def test_from_graph(cora):
    bsr = BlockSparseAdjacency.from_graph(cora, 32, reorder="rcm")
    assert bsr.n_nodes == cora.n_nodes and bsr.tile_stats()["nnz"] == cora.n_edges  # Cora has no duplicates
    plain = BlockSparseAdjacency.from_graph(cora, 32, reorder=None)
    assert bsr.nnz_blocks < plain.nnz_blocks  # RCM packs Cora's edges into fewer tiles


def test_metis_without_pymetis_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # import pymetis -> ImportError
    with pytest.raises(ImportError, match="pip install pymetis"):
        metis_permutation([0, 1], [1, 0], 2, 2)


@pytest.mark.skipif(not HAS_PYMETIS, reason="pymetis not installed (pip install pymetis)")
def test_metis_reorder():
    adj = power_law_coo(3, 200)
    perm = metis_permutation(adj.senders, adj.receivers, 200, 4)
    assert sorted(perm.tolist()) == list(range(200))
    bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder="metis", n_parts=4)
    want = reordered_padded(coo_dense(adj), np.asarray(bsr.perm), bsr.n_pad)
    np.testing.assert_allclose(bsr.to_dense(), want)


def test_csr_to_tiles_matches_scipy_bsr():
    """The int64 NumPy tiling equals SciPy's csr -> bsr conversion (values, structure, per-tile
    counts with explicit zeros) on a graph where SciPy still works."""
    import scipy.sparse as sp

    from codesign.kernels.tiling import csr_to_tiles
    rng = np.random.default_rng(0)
    n, b = 96, 16
    r, c = rng.integers(0, n, 400), rng.integers(0, n, 400)
    w = rng.normal(size=400).astype(np.float32)
    w[:20] = 0.0  # explicit zeros are stored, and counted
    csr = sp.csr_matrix((w, (r, c)), shape=(n, n))
    csr.sort_indices()
    indptr, indices, data, tile_nnz = csr_to_tiles(csr, b)
    ref = sp.bsr_matrix(csr, blocksize=(b, b))
    ref.sort_indices()
    ones = csr.copy()
    ones.data = np.ones_like(ones.data)
    counts = sp.bsr_matrix(ones, blocksize=(b, b))
    counts.sort_indices()
    np.testing.assert_array_equal(indptr, ref.indptr)
    np.testing.assert_array_equal(indices, ref.indices)
    np.testing.assert_array_equal(data, ref.data.astype(np.float32))
    np.testing.assert_array_equal(tile_nnz, counts.data.sum(axis=(1, 2)).round())
