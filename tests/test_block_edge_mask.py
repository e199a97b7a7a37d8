"""Tests of `BlockEdgeMask`: tile gates, gathers, closed-form tile counts, Monte Carlo densities,
gradients, and agreement with the BSR structure the block kernel runs."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.kernels import CooAdjacency, bsr_spmm_reference, with_block_pattern
from codesign.sparsify import BETA, GAMMA, ZETA, BlockEdgeMask, EdgeSparsifier, GateLogit, deterministic

B = 16


def _sbm_edges(n=480, k=6, p_in=0.04, p_out=0.002, seed=0):
    """A Cora-like symmetric stochastic block model graph (no self-loops), edges in random order."""
    rng = np.random.default_rng(seed)
    comm = rng.integers(0, k, n)
    prob = np.where(comm[:, None] == comm[None, :], p_in, p_out)
    upper = np.triu(rng.random((n, n)) < prob, 1)
    s, r = np.nonzero(upper | upper.T)
    order = rng.permutation(s.size)
    return s[order].astype(np.int32), r[order].astype(np.int32), n


@pytest.fixture(scope="module")
def graph():
    s, r, n = _sbm_edges()
    adj = with_block_pattern(CooAdjacency(jnp.asarray(s), jnp.asarray(r), None, n), B, "rcm", self_loops=True)
    return s, r, n, adj


def _mask(adj, **kw):
    return BlockEdgeMask(adj.pattern, adj.n_edges, rngs=nnx.Rngs(0), **kw)


def _set_logits(mask, values):
    mask.gate.log_alpha[...] = jnp.asarray(values, jnp.float32)


def _p_keep(la):
    la = np.asarray(la, np.float64)
    return 1 / (1 + np.exp(-(la - BETA * np.log(-GAMMA / ZETA))))


def _numpy_tiles(adj, n_edges):
    """Per entry tile, gated tiles (sorted) and their edge counts, by plain loops."""
    b2 = adj.pattern.bsr.block_size ** 2
    slots = np.asarray(adj.pattern.slots)
    loop_tiles = {int(slots[j]) // b2 for j in range(n_edges, slots.size)}
    edge_tiles = [int(slots[j]) // b2 for j in range(n_edges)]
    gated = sorted({t for t in edge_tiles if t not in loop_tiles})
    counts = {t: 0 for t in gated}
    for t in edge_tiles:
        if t in counts:
            counts[t] += 1
    return edge_tiles, gated, counts, loop_tiles


# ---------------------------------------------------------------- structure and gathers


def test_gate_to_edge_gather_matches_numpy_loop(graph):
    *_, adj = graph
    mask = _mask(adj)
    edge_tiles, gated, counts, _ = _numpy_tiles(adj, adj.n_edges)
    assert mask.n_gated_tiles == len(gated) and mask.n_tiles == adj.pattern.bsr.nnz_blocks
    np.testing.assert_array_equal(np.asarray(mask.gated_tiles), gated)
    np.testing.assert_array_equal(np.asarray(mask.edges_per_gate), [counts[t] for t in gated])
    la = np.linspace(-4.0, 4.0, len(gated)).astype(np.float32)
    _set_logits(mask, la)
    z_tile = np.asarray(deterministic(jnp.asarray(la)))
    gate_index = {t: i for i, t in enumerate(gated)}
    expected = np.asarray([z_tile[gate_index[t]] if t in gate_index else 1.0 for t in edge_tiles], np.float32)
    got = mask.edge_gates(deterministic=True)
    assert got.dtype == jnp.float32 and got.shape == (adj.n_edges,)
    np.testing.assert_array_equal(np.asarray(got), expected)
    hard = np.asarray([la[gate_index[t]] > -math.log(11) if t in gate_index else True for t in edge_tiles])
    np.testing.assert_array_equal(np.asarray(mask.hard_edge_mask()), hard)


def test_training_gates_are_the_sampled_tile_gates_gathered(graph):
    *_, adj = graph
    mask = _mask(adj, init_log_alpha=0.0)
    twin = nnx.clone(mask)  # same rng state: the same draw
    z_tile = np.asarray(mask.gate())
    z_edge = np.asarray(twin.edge_gates())
    ext = np.concatenate([z_tile, [1.0]])
    np.testing.assert_array_equal(z_edge, ext[np.asarray(mask.edge_to_gate)])
    assert ((z_tile > 0) & (z_tile < 1)).any() and (z_tile == 0).any()


def test_hand_counted_tiles_and_closed_form_expectations():
    # N = 40, B = 8, no reordering: block rows 0..4; rows are receivers.
    s = np.asarray([0, 0, 1, 30, 39], np.int32)
    r = np.asarray([1, 20, 21, 5, 39], np.int32)
    # tiles (row block, col block): (0,0) 0->1 [+ self-loops], (2,0) 0->20 and 1->21, (0,3) 30->5,
    # (4,4) 39->39 [+ self-loops]; the self-loops add the diagonal tiles (1,1), (2,2), (3,3).
    mask = BlockEdgeMask.from_graph(s, r, 40, block_size=8, reorder=None, self_loops=True, rngs=nnx.Rngs(0))
    assert (mask.n_tiles, mask.n_gated_tiles, mask.n_always_kept_tiles, mask.n_ungated_edges) == (7, 2, 5, 2)
    # gates in tile order (row, col): (0,3) holds 1 edge, (2,0) holds 2
    np.testing.assert_array_equal(np.asarray(mask.edges_per_gate), [1.0, 2.0])
    np.testing.assert_array_equal(np.asarray(mask.edge_to_gate), [2, 1, 1, 0, 2])
    a, b = -0.7, 1.3
    _set_logits(mask, [a, b])
    pa, pb = _p_keep([a, b])
    assert float(mask.expected_kept_tiles()) == pytest.approx(5 + pa + pb, rel=1e-6)
    assert float(mask.expected_edge_density()) == pytest.approx((2 + pa + 2 * pb) / 5, rel=1e-6)
    assert float(mask.expected_density()) == pytest.approx((pa + pb) / 2, rel=1e-6)
    _set_logits(mask, [-10.0, 10.0])
    assert float(mask.hard_kept_tiles()) == 6.0
    np.testing.assert_array_equal(np.asarray(mask.hard_edge_mask()), [True, True, True, False, True])
    # without self-loops every tile holds only edges: all four are gated
    plain = BlockEdgeMask.from_graph(s, r, 40, block_size=8, reorder=None, self_loops=False, rngs=nnx.Rngs(0))
    assert (plain.n_tiles, plain.n_gated_tiles, plain.n_always_kept_tiles, plain.n_ungated_edges) == (4, 4, 0, 0)
    assert float(plain.expected_kept_tiles()) == pytest.approx(4 * _p_keep(3.0), rel=1e-6)


def test_from_graph_equals_constructor_on_attached_pattern(graph):
    s, r, n, adj = graph
    a = BlockEdgeMask.from_graph(s, r, n, block_size=B, reorder="rcm", self_loops=True, rngs=nnx.Rngs(0))
    b = _mask(adj)
    np.testing.assert_array_equal(np.asarray(a.gated_tiles), np.asarray(b.gated_tiles))
    np.testing.assert_array_equal(np.asarray(a.edge_to_gate), np.asarray(b.edge_to_gate))
    assert a.tile_stats() == b.tile_stats()
    assert a.tile_stats()["block_size"] == B and a.tile_stats()["n_tiles"] == adj.pattern.bsr.nnz_blocks


# ---------------------------------------------------------------- statistics


def test_expected_densities_match_monte_carlo(graph):
    *_, adj = graph
    mask = _mask(adj)
    rng = np.random.default_rng(1)
    _set_logits(mask, rng.normal(0.0, 2.0, mask.n_gated_tiles))
    draw = nnx.jit(lambda m: (m.gate() > 0, m.edge_gates() > 0))
    n = 200
    tiles, edges = zip(*(draw(mask) for _ in range(n)))
    tile_kept = np.asarray(tiles).sum(axis=1).astype(np.float64)  # kept gated tiles per draw
    edge_frac = np.asarray(edges).mean(axis=1)
    exp_tiles = float(mask.expected_kept_tiles()) - mask.n_always_kept_tiles
    # 5 standard errors of the sample mean; per-draw variances from the sample
    assert abs(tile_kept.mean() - exp_tiles) < 5 * tile_kept.std() / math.sqrt(n) + 1e-6
    assert abs(tile_kept.mean() / mask.n_gated_tiles - float(mask.expected_density())) < (
        5 * tile_kept.std() / mask.n_gated_tiles / math.sqrt(n) + 1e-6)
    assert abs(edge_frac.mean() - float(mask.expected_edge_density())) < 5 * edge_frac.std() / math.sqrt(n) + 1e-6


def test_saturated_logits_make_hard_and_expected_agree(graph):
    *_, adj = graph
    mask = _mask(adj)
    rng = np.random.default_rng(2)
    la = np.where(rng.random(mask.n_gated_tiles) < 0.4, 10.0, -10.0)
    _set_logits(mask, la)
    hard = np.asarray(mask.hard_mask())
    assert hard.dtype == np.bool_ and hard.shape == (mask.n_gated_tiles,)
    np.testing.assert_array_equal(hard, la > 0)
    t = mask.n_gated_tiles
    slack = _p_keep(-10.0)[()] + (1 - _p_keep(10.0)[()])  # per-gate gap between P(keep) and 0 / 1
    assert abs(float(mask.expected_kept_tiles()) - float(mask.hard_kept_tiles())) < t * slack + 1e-3
    assert float(mask.hard_kept_tiles()) == mask.n_always_kept_tiles + hard.sum()
    assert abs(float(mask.expected_density()) - float(mask.hard_density())) < slack + 1e-6
    assert abs(float(mask.expected_edge_density()) - float(mask.hard_edge_density())) < slack + 1e-6
    for f in (mask.expected_density, mask.expected_edge_density, mask.expected_kept_tiles,
              mask.hard_density, mask.hard_edge_density, mask.hard_kept_tiles):
        v = f()
        assert v.dtype == jnp.float32 and v.shape == ()


# ---------------------------------------------------------------- gradients


def test_gradients_reach_the_tile_logits_and_match_finite_differences(graph):
    *_, adj = graph
    mask = _mask(adj)
    rng = np.random.default_rng(3)
    la = rng.normal(0.0, 1.5, mask.n_gated_tiles).astype(np.float32)
    _set_logits(mask, la)
    diff = nnx.DiffState(0, GateLogit)
    p = _p_keep(la)
    counts = np.asarray(mask.edges_per_gate, np.float64)
    closed = {
        "expected_density": p * (1 - p) / mask.n_gated_tiles,
        "expected_edge_density": p * (1 - p) * counts / mask.n_edges,
        "expected_kept_tiles": p * (1 - p),
    }
    for name, want in closed.items():
        g = np.asarray(nnx.jit(nnx.grad(lambda m: getattr(m, name)(), argnums=diff))(mask)["gate"]["log_alpha"][...])
        assert np.all(np.isfinite(g)) and np.all(g > 0)
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-9)
    # central differences of the module itself on a few logits
    g = np.asarray(nnx.jit(nnx.grad(lambda m: m.expected_kept_tiles(), argnums=diff))(mask)["gate"]["log_alpha"][...])
    kept_tiles = nnx.jit(lambda m: m.expected_kept_tiles())
    # The float32 total (thousands of tiles) is rounded to ulp(total) at each evaluation, so the
    # central difference carries up to ulp / eps of rounding on top of its O(eps^2) truncation:
    # eps = 0.1 keeps both near 1 % of the gradient (eps = 0.01 failed by 4 % on an AVX-512 host).
    eps = 0.1
    for i in (0, mask.n_gated_tiles // 2, mask.n_gated_tiles - 1):
        vals = []
        for sign in (1, -1):
            bumped = la.copy()
            bumped[i] += sign * eps
            _set_logits(mask, bumped)
            vals.append(float(kept_tiles(mask)))
        rounding = 2 * float(np.spacing(np.float32(max(vals)))) / (2 * eps)
        assert abs((vals[0] - vals[1]) / (2 * eps) - g[i]) <= 2e-2 * abs(g[i]) + rounding
    # sampled training gates pass gradients too
    _set_logits(mask, np.zeros(mask.n_gated_tiles))
    g = nnx.jit(nnx.grad(lambda m: jnp.sum(m.edge_gates()), argnums=diff))(mask)["gate"]["log_alpha"][...]
    assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).sum()) > 0


# ---------------------------------------------------------------- the kernel's structure


@nnx.jit
def _hard_views(mask):
    return mask.hard_edge_mask(), mask.tile_keep_mask(), mask.hard_kept_tiles(), mask.edge_gates(deterministic=True)


@jax.jit
def _spmm(pattern, values, x):
    """``A @ x`` by the BSR reference kernel on the tiles of ``pattern`` holding ``values``."""
    adj = pattern.tiles(values)
    return adj.unpermute(bsr_spmm_reference(adj, adj.permute_features(x)))


def _check_kept_tiles_are_the_kernel_tiles(adj, mask, seed):
    rng = np.random.default_rng(seed)
    _set_logits(mask, np.where(rng.random(mask.n_gated_tiles) < 0.5, 10.0, -10.0))
    keep_edge, keep_tile, kept_tiles, gates = (np.asarray(v) for v in _hard_views(mask))
    b2 = mask.block_size ** 2
    slots = np.asarray(adj.pattern.slots)
    e, n = adj.n_edges, adj.n_nodes
    entry_kept = np.concatenate([keep_edge, np.ones(slots.size - e, bool)])
    tiles_with_kept_entries = set((slots[entry_kept] // b2).tolist())
    assert tiles_with_kept_entries == set(np.flatnonzero(keep_tile).tolist())
    assert keep_tile.sum() == kept_tiles

    pruned = mask.pruned_pattern(adj.pattern)
    assert pruned.bsr.nnz_blocks == int(kept_tiles) < adj.pattern.bsr.nnz_blocks
    # values as a model would pass them: gated edge weights, then self-loop weights
    w = rng.random(slots.size).astype(np.float32) + 0.5
    values = w * np.concatenate([gates, np.ones(slots.size - e, np.float32)])
    x = rng.normal(size=(n, 8)).astype(np.float32)
    y = _spmm(pruned, jnp.asarray(values), jnp.asarray(x))  # only the kept tiles
    dense = np.zeros((n, n), np.float64)
    s_all = np.concatenate([np.asarray(adj.senders), np.arange(n)])[: slots.size]
    r_all = np.concatenate([np.asarray(adj.receivers), np.arange(n)])[: slots.size]
    np.add.at(dense, (r_all, s_all), values.astype(np.float64))
    np.testing.assert_allclose(np.asarray(y), dense @ x.astype(np.float64), rtol=1e-5, atol=1e-5)


def test_kept_tiles_are_the_kernel_tiles_random_graph(graph):
    *_, adj = graph
    _check_kept_tiles_are_the_kernel_tiles(adj, _mask(adj), seed=4)


def test_kept_tiles_are_the_kernel_tiles_without_self_loops(graph):
    s, r, n, _ = graph
    adj = with_block_pattern(CooAdjacency(jnp.asarray(s), jnp.asarray(r), None, n), B, None, self_loops=False)
    mask = _mask(adj)
    assert mask.n_always_kept_tiles == 0 and mask.n_ungated_edges == 0
    _check_kept_tiles_are_the_kernel_tiles(adj, mask, seed=5)


def test_kept_tiles_are_the_kernel_tiles_cora(cora):
    adj = with_block_pattern(CooAdjacency(cora.senders, cora.receivers, None, cora.n_nodes), B, "rcm", self_loops=True)
    mask = _mask(adj)
    stats = mask.tile_stats()
    assert stats["n_tiles"] == adj.pattern.bsr.nnz_blocks and stats["n_always_kept_tiles"] >= adj.pattern.bsr.n_block_rows - 1
    _check_kept_tiles_are_the_kernel_tiles(adj, mask, seed=6)


# ---------------------------------------------------------------- modes, protocol, errors


class _UserModel(nnx.Module):
    def __init__(self, adj, *, rngs):
        self.tile_mask = BlockEdgeMask(adj.pattern, adj.n_edges, init_log_alpha=0.0, rngs=rngs)

    def __call__(self):
        return self.tile_mask.edge_gates()


def test_train_eval_modes_under_jit(graph):
    *_, adj = graph
    model = _UserModel(adj, rngs=nnx.Rngs(0))
    assert isinstance(model.tile_mask, EdgeSparsifier)
    fwd = nnx.jit(lambda m: m())
    assert not np.array_equal(np.asarray(fwd(model)), np.asarray(fwd(model)))
    model.eval()
    a, b = np.asarray(fwd(model)), np.asarray(fwd(model))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, np.asarray(model.tile_mask.edge_gates(deterministic=True)), rtol=1e-6)
    model.train()
    assert not model.tile_mask.gate.deterministic


def test_validation_errors(graph):
    s, r, n, adj = graph
    with pytest.raises(ValueError, match="BlockPattern"):
        BlockEdgeMask(adj, adj.n_edges, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="slots"):
        BlockEdgeMask(adj.pattern, adj.n_edges - 1, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="n_edges"):
        BlockEdgeMask(adj.pattern, 0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="no tile to gate"):  # one 8 x 8 tile, shared with the self-loops
        BlockEdgeMask.from_graph(np.asarray([0, 1]), np.asarray([1, 0]), 8, block_size=8, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="block_size"):
        BlockEdgeMask.from_graph(s, r, n, block_size=12, rngs=nnx.Rngs(0))
    mask = _mask(adj)
    with pytest.raises(ValueError, match="senders"):
        mask.edge_gates(None, jnp.zeros(3, jnp.int32), None)
    other = with_block_pattern(CooAdjacency(jnp.asarray(s), jnp.asarray(r), None, n), 32, "rcm", self_loops=True)
    with pytest.raises(ValueError, match="not the BlockPattern"):
        mask.pruned_pattern(other.pattern)
    natural = with_block_pattern(CooAdjacency(jnp.asarray(s), jnp.asarray(r), None, n), B, None, self_loops=True)
    with pytest.raises(ValueError, match="not the BlockPattern"):
        mask.pruned_pattern(natural.pattern)


def test_random_tile_edge_mask_keeps_whole_random_tiles(graph):
    """The random-tile reference keeps exactly the asked number of kernel tiles (always-kept
    ones included), whole tiles only, and a different subset per key."""
    s, r, n, adj = graph
    mask = _mask(adj)
    edge_tiles, gated, _, loop_tiles = _numpy_tiles(adj, adj.n_edges)
    edge_tiles = np.asarray(edge_tiles)
    for frac in (0.45, 0.8, 1.0):
        keep = np.asarray(mask.random_tile_edge_mask(jax.random.key(0), frac))
        assert keep.shape == (adj.n_edges,) and keep.dtype == bool
        kept_tiles = set(edge_tiles[keep].tolist()) | loop_tiles
        assert len(kept_tiles) == math.floor(frac * mask.n_tiles + 0.5)
        assert not (set(edge_tiles[~keep].tolist()) & kept_tiles)  # no tile is kept in part
    a, b = (np.asarray(mask.random_tile_edge_mask(jax.random.key(k), 0.6)) for k in (1, 2))
    assert a.sum() > 0 and not np.array_equal(a, b)
    floor = mask.n_always_kept_tiles / mask.n_tiles
    with pytest.raises(ValueError, match="always kept"):
        mask.random_tile_edge_mask(jax.random.key(0), floor / 2)
    with pytest.raises(ValueError, match="fraction"):
        mask.random_tile_edge_mask(jax.random.key(0), 1.5)
