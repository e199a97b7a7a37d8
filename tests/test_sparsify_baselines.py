"""Tests of the pruning baselines (random removal, DropEdge, UGS magnitude pruning) and of the edge
sparsifier protocol across every edge sparsifier."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.kernels import CooAdjacency, with_block_pattern
from codesign.sparsify import (
    BlockEdgeMask,
    DropEdge,
    EdgeMask,
    EdgeScorer,
    EdgeSparsifier,
    EdgeWeightMask,
    MaskWeight,
    PruneMask,
    UGSSchedule,
    global_magnitude_prune,
    magnitude_prune,
    prune_count,
    random_edge_removal,
)

# ---------------------------------------------------------------- prune_count


def test_prune_count_rounds_half_up():
    assert [prune_count(10, f) for f in (0.0, 0.04, 0.05, 0.15, 0.25, 1.0)] == [0, 0, 1, 2, 3, 10]
    assert prune_count(100, 0.29) == 29  # int(0.29 * 100) would be 28
    assert prune_count(3, 0.5) == 2 and prune_count(0, 0.7) == 0
    with pytest.raises(ValueError, match="fraction"):
        prune_count(10, 1.5)
    with pytest.raises(ValueError, match="n"):
        prune_count(-1, 0.5)


# ---------------------------------------------------------------- random removal, DropEdge


def test_random_edge_removal_exact_count_and_uniform_frequencies(getkey):
    e, keep, n = 40, 0.3, 2000
    masks = np.asarray(jax.vmap(lambda k: random_edge_removal(k, e, keep))(jax.random.split(getkey(), n)))
    assert masks.dtype == np.bool_ and masks.shape == (n, e)
    assert np.all(masks.sum(axis=1) == 12)
    p = 12 / e
    freq = masks.mean(axis=0)
    np.testing.assert_array_less(np.abs(freq - p), 5 * math.sqrt(p * (1 - p) / n))
    k = getkey()
    np.testing.assert_array_equal(np.asarray(random_edge_removal(k, e, keep)), np.asarray(random_edge_removal(k, e, keep)))
    assert not np.array_equal(masks[0], masks[1])
    assert not np.asarray(random_edge_removal(k, e, 0.0)).any() and np.asarray(random_edge_removal(k, e, 1.0)).all()


@pytest.mark.parametrize("bad", [-0.1, 1.1, float("nan"), True, "0.5"])
def test_random_edge_removal_rejects_bad_fraction(bad):
    with pytest.raises(ValueError, match="keep_fraction"):
        random_edge_removal(jax.random.key(0), 10, bad)


def test_drop_edge_fresh_subsets_in_training_all_edges_at_eval():
    e, rate, n = 30, 0.2, 300
    de = DropEdge(e, rate, rngs=nnx.Rngs(dropout=0))
    step = nnx.jit(lambda m: m.edge_gates())
    draws = np.stack([np.asarray(step(de)) for _ in range(n)])
    assert draws.dtype == np.float32 and set(np.unique(draws)) <= {0.0, 1.0}
    assert np.all(draws.sum(axis=1) == 24)  # round(0.2 * 30) = 6 dropped each call
    assert len({d.tobytes() for d in draws[:20]}) == 20  # a fresh subset every call
    p = 24 / e
    np.testing.assert_array_less(np.abs(draws.mean(axis=0) - p), 5 * math.sqrt(p * (1 - p) / n))
    assert float(de.expected_density()) == pytest.approx(0.8) and float(de.expected_edge_density()) == pytest.approx(0.8)
    de.eval()
    np.testing.assert_array_equal(np.asarray(step(de)), np.ones(e, np.float32))
    assert float(de.expected_density()) == 1.0
    assert np.asarray(de.hard_edge_mask()).all() and float(de.hard_density()) == 1.0
    de.train()
    assert float(DropEdge(7, 0.5, rngs=nnx.Rngs(0)).expected_density()) == pytest.approx(3 / 7)  # 3.5 -> 4 dropped


@pytest.mark.parametrize("bad", [-0.5, 2.0, float("inf")])
def test_drop_edge_rejects_bad_rate(bad):
    with pytest.raises(ValueError, match="rate"):
        DropEdge(10, bad, rngs=nnx.Rngs(0))


# ---------------------------------------------------------------- magnitude pruning


def test_magnitude_prune_hand_cases():
    t, f = True, False
    all_on = jnp.ones(5, bool)
    out = magnitude_prune(jnp.asarray([0.5, -0.1, 0.3, 0.0, 2.0]), all_on, 0.4)
    np.testing.assert_array_equal(np.asarray(out), [t, f, t, f, t])  # |0.0| and |-0.1| go
    out = magnitude_prune(jnp.asarray([1.0, 1.0, 1.0, 1.0]), jnp.ones(4, bool), 0.5)
    np.testing.assert_array_equal(np.asarray(out), [f, f, t, t])  # ties: lower index first
    out = magnitude_prune(jnp.asarray([0.1, 5.0, 0.0, 3.0]), jnp.asarray([t, t, f, t]), 1 / 3)
    np.testing.assert_array_equal(np.asarray(out), [f, t, f, t])  # counts only the remaining 3
    out = magnitude_prune(jnp.asarray([np.nan, 0.2, 0.1]), jnp.ones(3, bool), 0.5)
    np.testing.assert_array_equal(np.asarray(out), [t, f, f])  # round(1.5) = 2; NaN counts as +inf
    out = magnitude_prune(jnp.asarray([[3.0, -4.0], [0.5, 2.0]]), jnp.ones((2, 2), bool), 0.25)
    np.testing.assert_array_equal(np.asarray(out), [[t, t], [f, t]])
    assert np.asarray(magnitude_prune(jnp.ones(4), jnp.ones(4, bool), 1.0)).sum() == 0
    np.testing.assert_array_equal(np.asarray(magnitude_prune(jnp.ones(4), jnp.asarray([t, f, t, f]), 0.0)), [t, f, t, f])


_N = 16  # one array shape for every example (no recompilation); unused slots are pruned already


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.sampled_from([0.0, 0.25, -0.25, 1.0, -3.0, 7.5])
                    | st.floats(-10, 10, width=32, allow_subnormal=False),  # XLA flushes subnormals to 0
                    min_size=_N, max_size=_N),
    present=st.lists(st.booleans(), min_size=_N, max_size=_N),
    fraction=st.floats(0.0, 1.0),
)
def test_magnitude_prune_invariants(values, present, fraction):
    scores, current = np.asarray(values, np.float32), np.asarray(present)
    new = np.asarray(magnitude_prune(jnp.asarray(scores), jnp.asarray(current), fraction))
    assert not np.any(new & ~current)  # pruning never revives an entry
    n_rem = int(current.sum())
    assert new.sum() == n_rem - math.floor(fraction * n_rem + 0.5)
    pruned = current & ~new
    if pruned.any() and new.any():  # every pruned |score| <= every kept |score|
        assert np.abs(scores[pruned]).max() <= np.abs(scores[new]).min()
    # ties at the threshold: pruned entries precede kept ones with the same |score|
    thr = np.abs(scores[pruned]).max() if pruned.any() else None
    if thr is not None:
        tied_kept = np.flatnonzero(new & (np.abs(scores) == thr))
        tied_pruned = np.flatnonzero(pruned & (np.abs(scores) == thr))
        assert tied_kept.size == 0 or tied_pruned.max() < tied_kept.min()


def test_magnitude_prune_errors():
    with pytest.raises(ValueError, match="fraction"):
        magnitude_prune(jnp.ones(3), jnp.ones(3, bool), 1.5)
    with pytest.raises(ValueError, match="fraction"):
        magnitude_prune(jnp.ones(3), jnp.ones(3, bool), -0.1)
    with pytest.raises(ValueError, match="shape"):
        magnitude_prune(jnp.ones(3), jnp.ones(4, bool), 0.5)
    with pytest.raises(ValueError, match="bool"):
        magnitude_prune(jnp.ones(3), jnp.ones(3), 0.5)


def test_global_magnitude_prune_uses_one_threshold():
    a, b = jnp.asarray([[0.1, 0.2], [0.3, 0.4]]), jnp.asarray([5.0, 6.0, 7.0, 8.0])
    ma, mb = global_magnitude_prune([a, b], [jnp.ones((2, 2), bool), jnp.ones(4, bool)], 0.5)
    assert ma.shape == (2, 2) and mb.shape == (4,)
    assert not np.asarray(ma).any() and np.asarray(mb).all()  # per array it would halve each
    with pytest.raises(ValueError, match=r"scores\[1\]"):
        global_magnitude_prune([a, b], [jnp.ones((2, 2), bool), jnp.ones(3, bool)], 0.5)
    with pytest.raises(ValueError, match="equally many"):
        global_magnitude_prune([a], [], 0.5)


def test_ugs_schedule_levels_and_iterated_counts():
    sched = UGSSchedule()
    assert sched.sparsity(0) == (0.0, 0.0)
    assert sched.sparsity(1) == pytest.approx((0.05, 0.2))
    assert sched.sparsity(2) == pytest.approx((0.0975, 0.36))
    assert sched.levels(3)[-1] == pytest.approx((1 - 0.95 ** 3, 1 - 0.8 ** 3))
    # iterated magnitude pruning stays within one entry per round of the nominal level
    rng = np.random.default_rng(0)
    mask = jnp.ones(1000, bool)
    for k in range(1, 6):
        mask = magnitude_prune(jnp.asarray(rng.normal(size=1000).astype(np.float32)), mask, sched.graph_rate)
        assert abs((1000 - int(mask.sum())) / 1000 - sched.sparsity(k)[0]) <= k / 1000
    with pytest.raises(ValueError, match="graph_rate"):
        UGSSchedule(graph_rate=1.5)
    with pytest.raises(ValueError, match="weight_rate"):
        UGSSchedule(weight_rate=-0.2)
    with pytest.raises(ValueError, match="k must"):
        sched.sparsity(-1)
    with pytest.raises(ValueError, match="n_rounds"):
        sched.levels(0)


# ---------------------------------------------------------------- EdgeWeightMask (UGS graph mask)


def test_edge_weight_mask_round():
    m = EdgeWeightMask(6)
    np.testing.assert_array_equal(np.asarray(m.edge_gates()), np.ones(6, np.float32))
    m.weight[...] = jnp.asarray([0.9, -0.05, 0.4, 1.2, 0.01, -0.7], jnp.float32)
    assert float(m.l1_norm()) == pytest.approx(0.9 + 0.05 + 0.4 + 1.2 + 0.01 + 0.7, rel=1e-6)
    keep = m.prune(1 / 3)  # two smallest |m|: entries 4 and 1
    np.testing.assert_array_equal(np.asarray(keep), [True, False, True, True, False, True])
    np.testing.assert_array_equal(np.asarray(m.weight[...]), np.asarray(keep, np.float32))  # rewound to 0/1
    assert float(m.expected_density()) == pytest.approx(4 / 6) and float(m.hard_density()) == pytest.approx(4 / 6)
    np.testing.assert_array_equal(np.asarray(m.hard_edge_mask()), np.asarray(keep))
    m.weight[...] = jnp.asarray([0.3, 5.0, 0.2, 0.8, 5.0, 0.9], jnp.float32)  # pruned entries may drift
    keep2 = m.prune(0.25)  # one of the remaining four: entry 2
    np.testing.assert_array_equal(np.asarray(keep2), [True, False, False, True, False, True])
    g = nnx.grad(lambda mm: jnp.sum(mm.edge_gates() * jnp.arange(6.0)) + mm.l1_norm(),
                 argnums=nnx.DiffState(0, MaskWeight))(m)["weight"][...]
    np.testing.assert_allclose(np.asarray(g), [1.0, 0.0, 0.0, 4.0, 0.0, 6.0])  # zero for pruned edges
    assert isinstance(m.keep, PruneMask) and not isinstance(m.keep, nnx.Param)
    with pytest.raises(ValueError, match="fraction"):
        m.prune(2.0)
    with pytest.raises(ValueError, match="n_edges"):
        EdgeWeightMask(0)


# ---------------------------------------------------------------- the protocol, for every edge sparsifier


def _edge_sparsifier(name, s, r, n, f):
    rngs = nnx.Rngs(0)
    if name == "BlockEdgeMask":
        adj = with_block_pattern(CooAdjacency(jnp.asarray(s), jnp.asarray(r), None, n), 8, None, self_loops=True)
        return BlockEdgeMask(adj.pattern, s.size, rngs=rngs)
    return {
        "EdgeMask": lambda: EdgeMask(s.size, rngs=rngs),
        "EdgeScorer": lambda: EdgeScorer(f, rngs=rngs),
        "DropEdge": lambda: DropEdge(s.size, 0.5, rngs=rngs),
        "EdgeWeightMask": lambda: EdgeWeightMask(s.size),
    }[name]()


@pytest.mark.parametrize("name", ["EdgeMask", "BlockEdgeMask", "EdgeScorer", "DropEdge", "EdgeWeightMask"])
def test_every_edge_sparsifier_follows_the_protocol(name):
    rng = np.random.default_rng(0)
    n, f = 40, 5
    s, r = rng.integers(0, n, 120).astype(np.int32), rng.integers(0, n, 120).astype(np.int32)
    x = jnp.asarray(rng.normal(size=(n, f)).astype(np.float32))
    sp = _edge_sparsifier(name, s, r, n, f)
    assert isinstance(sp, EdgeSparsifier)

    @nnx.jit
    def fwd(m, x, s, r):
        return (m.edge_gates(x, s, r), m.expected_edge_density(), m.expected_density(), m.hard_edge_mask(),
                m.hard_edge_density(), m.hard_density(), m.hard_mask())

    si, ri = jnp.asarray(s), jnp.asarray(r)
    for mode in ("train", "eval"):
        getattr(sp, mode)()
        z, ed, d, hm, hed, hd, hmask = fwd(sp, x, si, ri)
        assert z.dtype == jnp.float32 and z.shape == (s.size,)
        assert bool(jnp.all((z >= 0) & (z <= 1)))
        for v in (ed, d, hed, hd):
            assert v.dtype == jnp.float32 and v.shape == () and 0.0 <= float(v) <= 1.0
        assert hm.dtype == jnp.bool_ and hm.shape == (s.size,) and hmask.dtype == jnp.bool_
        assert float(hed) == pytest.approx(float(np.mean(np.asarray(hm))))
    np.testing.assert_array_equal(np.asarray(z), np.asarray(fwd(sp, x, si, ri)[0]))  # eval: deterministic
