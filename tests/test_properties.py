"""Hypothesis property tests over random small graphs: tile formats (BSR, TC-GNN condensed row
windows, scipy CSR) against a dense NumPy ``A @ x`` and against segment_sum (outputs and
gradients), node reorderings, the METIS / contiguous partition with its ring halo plan, and the
`Graph` / `TrainConfig` validators.

Every graph here is tiny (N <= 40, E <= 80, F <= 8) so that each example runs in milliseconds;
the Pallas interpreter gets a handful of examples only.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, HealthCheck, given, settings
from hypothesis import strategies as st

from codesign.distributed.partition import partition_graph
from codesign.graph import Graph
from codesign.kernels import (BlockSparseAdjacency, CondensedRowWindows, CooAdjacency, aggregate, apply_permutation,
                              metis_permutation, rcm_permutation, with_block_pattern, with_csr_pattern)
from codesign.train import FIELD_DOMAINS, TrainConfig

FAST = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------
# Strategies and references
# ---------------------------------------------------------------------------------------------

@st.composite
def coo_graphs(draw, max_nodes: int = 40, max_edges: int = 80, min_edges: int = 0, positive: bool = True):
    """``(senders int32 [E], receivers int32 [E], weight float32 [E], N)``; duplicate edges and
    self-loops allowed. ``positive``: weights in [0.25, 2] (a summed duplicate stays nonzero),
    else in [-2, 2]."""
    n = draw(st.integers(1, max_nodes))
    e = draw(st.integers(min_edges, max_edges))
    node = st.integers(0, n - 1)
    s = np.asarray(draw(st.lists(node, min_size=e, max_size=e)), np.int32)
    r = np.asarray(draw(st.lists(node, min_size=e, max_size=e)), np.int32)
    lo = 0.25 if positive else -2.0
    w = np.asarray(draw(st.lists(st.floats(lo, 2.0, width=32), min_size=e, max_size=e)), np.float32)
    return s, r, w, n


def features(n: int, f: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, f)).astype(np.float32)


def dense_adjacency(s, r, w, n) -> np.ndarray:
    """float64 [N, N], rows = receivers, duplicates summed."""
    a = np.zeros((n, n), np.float64)
    np.add.at(a, (r, s), w.astype(np.float64))
    return a


def coo(s, r, w, n) -> CooAdjacency:
    return CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), jnp.asarray(w, jnp.float32), n)


def unique_pairs(s, r) -> int:
    return len(set(zip(r.tolist(), s.tolist())))


@functools.partial(jax.jit, static_argnames="impl")
def _dense_and_aggregate(fmt, x, *, impl):
    """``(fmt.to_dense(), aggregate(fmt, fmt.permute_features(x), impl))`` (one compile per shape)."""
    return fmt.to_dense(), aggregate(fmt, fmt.permute_features(x), impl=impl)


def assert_close(got, want, tol=1e-4):
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)


# ---------------------------------------------------------------------------------------------
# Tile formats
# ---------------------------------------------------------------------------------------------

@FAST
@given(g=coo_graphs(), block_size=st.sampled_from([8, 16]), reorder=st.sampled_from([None, "rcm"]),
       f=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_bsr_from_coo_aggregates_like_dense_and_stores_exactly_the_nonzeros(g, block_size, reorder, f, seed):
    s, r, w, n = g
    bsr = BlockSparseAdjacency.from_coo(coo(*g), block_size, reorder=reorder)
    a = dense_adjacency(*g)
    perm = np.asarray(bsr.perm)
    assert sorted(perm.tolist()) == list(range(n))
    assert bsr.n_pad == max(1, math.ceil(n / block_size)) * block_size
    # stored tiles: exactly the nonzeros of the reordered matrix, no more (padding stays empty)
    x = features(n, f, seed)
    dense, out = _dense_and_aggregate(bsr, jnp.asarray(x), impl="bsr_xla")
    dense = np.asarray(dense, np.float64)
    assert_close(dense[:n, :n], a[np.ix_(perm, perm)], 1e-6)
    assert not dense[n:].any() and not dense[:, n:].any()
    data = np.asarray(bsr.data)
    assert math.isclose(float(data.sum(dtype=np.float64)), float(w.sum(dtype=np.float64)), rel_tol=1e-5, abs_tol=1e-5)
    assert int(np.count_nonzero(data)) == unique_pairs(s, r) == int(np.asarray(bsr.tile_nnz).sum())
    assert np.all(np.asarray(bsr.tile_nnz) >= 1)  # no stored tile is empty
    # A @ x in the original order
    assert out.shape == (bsr.n_pad, f)
    assert not np.asarray(out)[n:].any()  # padding rows stay zero
    assert_close(bsr.unpermute(out), a @ x)


@FAST
@given(g=coo_graphs(), block_size=st.sampled_from([8, 16]), reorder=st.sampled_from([None, "rcm"]))
def test_bsr_from_graph_equals_from_coo(g, block_size, reorder):
    g = without_self_loops(*g)  # a Graph holds none (the models add their own)
    s, r, w, n = g
    graph = Graph(senders=jnp.asarray(s), receivers=jnp.asarray(r), x=jnp.zeros((n, 1), jnp.float32),
                  y=jnp.zeros(n, jnp.int32), train_mask=jnp.ones(n, bool), val_mask=jnp.zeros(n, bool),
                  test_mask=jnp.zeros(n, bool), edge_weight=jnp.asarray(w), n_nodes=n)
    a, b = (BlockSparseAdjacency.from_graph(graph, block_size, reorder=reorder),
            BlockSparseAdjacency.from_coo(coo(*g), block_size, reorder=reorder))
    for field in ("indptr", "indices", "data", "tile_nnz", "perm", "inv_perm"):
        np.testing.assert_array_equal(np.asarray(getattr(a, field)), np.asarray(getattr(b, field)), err_msg=field)


@FAST
@given(g=coo_graphs(), window=st.sampled_from([8, 16]), k=st.sampled_from([None, 8]),
       reorder=st.sampled_from([None, "rcm"]), f=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_condensed_row_windows_aggregate_like_dense_and_store_exactly_the_nonzeros(g, window, k, reorder, f, seed):
    s, r, w, n = g
    crw = CondensedRowWindows.from_coo(coo(*g), window=window, k=k, reorder=reorder)
    a = dense_adjacency(*g)
    perm = np.asarray(crw.perm)
    assert sorted(perm.tolist()) == list(range(n))
    x = features(n, f, seed)
    dense, out = _dense_and_aggregate(crw, jnp.asarray(x), impl="condensed_xla")
    dense = np.asarray(dense, np.float64)
    assert_close(dense[:n, :n], a[np.ix_(perm, perm)], 1e-6)
    assert not dense[n:].any() and not dense[:, n:].any()
    data, mask = np.asarray(crw.tile_data), np.asarray(crw.col_mask)
    assert not data[np.broadcast_to(~mask[:, None, :], data.shape)].any()  # nothing outside real columns
    assert math.isclose(float(data.sum(dtype=np.float64)), float(w.sum(dtype=np.float64)), rel_tol=1e-5, abs_tol=1e-5)
    assert int(np.count_nonzero(data)) == unique_pairs(s, r) == int(np.asarray(crw.tile_nnz).sum())
    # each window's real columns are distinct, sorted, and exactly the columns its rows read
    cols, win_ptr = np.asarray(crw.tile_cols), np.asarray(crw.win_ptr)
    inv = np.argsort(perm)
    for wdx in range(crw.n_windows):
        got = cols[win_ptr[wdx]:win_ptr[wdx + 1]][mask[win_ptr[wdx]:win_ptr[wdx + 1]]]
        rows = inv[r] // window == wdx
        assert got.tolist() == sorted(set(inv[s][rows].tolist())), wdx
    assert out.shape == (crw.n_pad, f)
    assert_close(crw.unpermute(out), a @ x)


@functools.partial(jax.jit, static_argnames="impl")
def _value_and_vjp(adj, x, w, probe, *, impl):
    """``(A @ x, d<probe, A @ x>/dx, d<probe, A @ x>/dw)`` with ``impl`` (one compile per shape)."""
    out, vjp = jax.vjp(lambda x, w: aggregate(adj.with_weight(w), x, impl=impl), x, w)
    return (out, *vjp(probe))


@FAST
@given(g=coo_graphs(positive=False), f=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_csr_scipy_matches_segment_in_value_and_gradients(g, f, seed):
    s, r, w, n = g
    x, w_, probe = jnp.asarray(features(n, f, seed)), jnp.asarray(w), jnp.asarray(features(n, f, seed + 1))
    want = _value_and_vjp(coo(*g), x, w_, probe, impl="segment")
    assert_close(want[0], dense_adjacency(*g) @ np.asarray(x))
    got = _value_and_vjp(with_csr_pattern(coo(*g)), x, w_, probe, impl="csr_scipy")
    for name, a, b in zip(("value", "d/dx", "d/dw"), got, want):
        assert a.shape == b.shape, name
        assert_close(a, b)


@FAST
@given(g=coo_graphs(positive=False), block_size=st.sampled_from([8, 16]), reorder=st.sampled_from([None, "rcm"]),
       f=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_bsr_xla_matches_segment_in_value_and_gradients(g, block_size, reorder, f, seed):
    s, r, w, n = g
    x, w_, probe = jnp.asarray(features(n, f, seed)), jnp.asarray(w), jnp.asarray(features(n, f, seed + 1))
    want = _value_and_vjp(coo(*g), x, w_, probe, impl="segment")
    got = _value_and_vjp(with_block_pattern(coo(*g), block_size, reorder=reorder), x, w_, probe, impl="bsr_xla")
    for name, a, b in zip(("value", "d/dx", "d/dw"), got, want):
        assert a.shape == b.shape, name
        assert_close(a, b)
    # the gradient w.r.t. x of the tile kernel itself (x in the reordered, padded order)
    bsr = BlockSparseAdjacency.from_coo(coo(*g), block_size, reorder=reorder)
    gpad = jax.jit(jax.grad(lambda xp, pp: jnp.sum(pp * aggregate(bsr, xp, impl="bsr_xla"))))(
        bsr.permute_features(x), bsr.permute_features(probe))
    assert_close(bsr.unpermute(gpad), want[1])


PALLAS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PALLAS
@given(g=coo_graphs(max_nodes=40, max_edges=60, positive=False), reorder=st.sampled_from([None, "rcm"]),
       f=st.integers(1, 8), seed=st.integers(0, 2**16))
def test_pallas_interpret_matches_bsr_xla_in_value_and_gradients(g, reorder, f, seed):
    s, r, w, n = g
    bsr = BlockSparseAdjacency.from_coo(coo(*g), 16, reorder=reorder)  # the Pallas kernel needs B >= 16
    xp = bsr.permute_features(jnp.asarray(features(n, f, seed)))
    probe = bsr.permute_features(jnp.asarray(features(n, f, seed + 1)))

    @functools.partial(jax.jit, static_argnames="impl")
    def value_and_vjp(data, x, *, impl):
        out, vjp = jax.vjp(lambda d, x: aggregate(bsr.with_data(d), x, impl=impl), data, x)
        return (out, *vjp(probe))

    with jax.default_matmul_precision("highest"):
        got, want = (value_and_vjp(bsr.data, xp, impl=impl) for impl in ("pallas", "bsr_xla"))
    for name, a, b in zip(("value", "d/ddata", "d/dx"), got, want):
        assert a.shape == b.shape, name
        assert_close(a, b, 1e-5)


# ---------------------------------------------------------------------------------------------
# Reorderings
# ---------------------------------------------------------------------------------------------

@FAST
@given(g=coo_graphs(), data=st.data())
def test_reorderings_are_permutations_and_relabel_round_trip(g, data):
    s, r, _, n = g
    n_parts = data.draw(st.integers(1, min(4, n)), label="n_parts")
    for perm in (rcm_permutation(s, r, n), metis_permutation(s, r, n, n_parts)):
        perm = np.asarray(perm)
        assert perm.shape == (n,) and np.issubdtype(perm.dtype, np.integer)
        assert np.array_equal(np.sort(perm), np.arange(n))  # every node exactly once
        s2, r2 = apply_permutation(s, r, perm)
        np.testing.assert_array_equal(perm[s2], s)  # new node i is old node perm[i]
        np.testing.assert_array_equal(perm[r2], r)
        # the relabelled graph is the same graph: A'[i, j] = A[perm[i], perm[j]]
        ones = np.ones(s.shape, np.float32)
        np.testing.assert_array_equal(dense_adjacency(s2, r2, ones, n), dense_adjacency(s, r, ones, n)[np.ix_(perm, perm)])


# ---------------------------------------------------------------------------------------------
# Partition and halo plan
# ---------------------------------------------------------------------------------------------

@FAST
@given(g=coo_graphs(min_edges=1), n_parts=st.sampled_from([2, 3, 4]), method=st.sampled_from(["metis", "contiguous"]),
       f=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_partition_owns_every_node_once_and_halo_plans_are_exact(g, n_parts, method, f, seed):
    s, r, w, n = g
    if n_parts > n:
        with pytest.raises(ValueError, match=f"n_parts={n_parts} exceeds"):
            partition_graph(s, r, n, n_parts, method=method)
        return
    p = partition_graph(s, r, n, n_parts, method=method)
    P, B = p.n_parts, p.block_size
    part, local_row, node_id = p.part, p.local_row, p.node_id
    # every node is owned by exactly one part, at one real row of that part's block
    assert part.shape == (n,) and part.min() >= 0 and part.max() < P
    np.testing.assert_array_equal(p.n_local, np.bincount(part, minlength=P))
    assert B == max(1, int(p.n_local.max()))
    owned = node_id[node_id >= 0]
    assert np.array_equal(np.sort(owned), np.arange(n))
    np.testing.assert_array_equal(node_id[part, local_row], np.arange(n))
    for q in range(P):
        assert np.all(node_id[q, :p.n_local[q]] >= 0) and np.all(node_id[q, p.n_local[q]:] == -1)
        assert np.all(np.diff(node_id[q, :p.n_local[q]]) > 0)  # ascending original id
    assert p.edge_cut == int(np.sum(part[s] != part[r]))
    # every edge is in exactly one slot, on its receiver's part, in its ring step's slot range
    eid = p.edge_id
    assert np.array_equal(np.sort(eid[eid >= 0]), np.arange(len(s)))
    for q in range(P):
        for st_ in range(P):
            o, length = p.edge_offsets[st_], p.edge_lengths[st_]
            for slot in range(o, o + length):
                e = eid[q, slot]
                if e < 0:
                    continue
                assert part[r[e]] == q and (part[r[e]] - part[s[e]]) % P == st_
                assert p.receivers[q, slot] == local_row[r[e]]
                # the sender row resolves, through the send plan of the step's source, to the sender
                src = p.step_source(q, st_)
                row = p.senders[q, slot] if st_ == 0 else p.send_rows[st_ - 1][src, p.senders[q, slot]]
                assert node_id[src, row] == s[e], (q, st_, slot)
    # halo: the rows q sends to p are exactly q's nodes that send to p's nodes (ascending, no repeats)
    assert np.all(np.diag(p.halo_counts) == 0)
    for st_ in range(1, P):
        rows = p.send_rows[st_ - 1]
        assert rows.shape[0] == P
        for q in range(P):
            dst = (q + st_) % P
            want = sorted({int(local_row[u]) for u, v in zip(s, r) if part[u] == q and part[v] == dst})
            cnt = int(p.halo_counts[q, dst])
            assert rows[q, :cnt].tolist() == want
            assert cnt == len(want) <= rows.shape[1]
    # the plan aggregates: summing every device's slots gives A @ x
    x = features(n, f, seed)
    xb = p.to_blocks(x)
    wb = p.edges_to_slots(w)
    out = np.zeros((P, B, f))
    for q in range(P):
        for st_ in range(P):
            src = p.step_source(q, st_)
            buf = xb[src] if st_ == 0 else xb[src][p.send_rows[st_ - 1][src]]
            sl = slice(p.edge_offsets[st_], p.edge_offsets[st_] + p.edge_lengths[st_])
            np.add.at(out[q], p.receivers[q, sl], wb[q, sl, None] * buf[p.senders[q, sl]])
    assert_close(p.from_blocks(out), dense_adjacency(*g) @ x)
    # layout round trips
    np.testing.assert_array_equal(p.from_blocks(p.to_blocks(x)), x)
    np.testing.assert_array_equal(p.slots_to_edges(p.edges_to_slots(w)), w)


# ---------------------------------------------------------------------------------------------
# Validators
# ---------------------------------------------------------------------------------------------

def without_self_loops(s, r, w, n):
    """The drawn COO graph without its self-loops (a `Graph` holds none)."""
    keep = s != r
    return s[keep], r[keep], w[keep], n


def _graph(s, r, n, **over):
    fields = dict(senders=jnp.asarray(s, jnp.int32), receivers=jnp.asarray(r, jnp.int32),
                  x=jnp.ones((n, 2), jnp.float32), y=jnp.zeros(n, jnp.int32), train_mask=jnp.ones(n, bool),
                  val_mask=jnp.zeros(n, bool), test_mask=jnp.zeros(n, bool), n_nodes=n)
    return Graph(**{**fields, **over})


@FAST
@given(g=coo_graphs())
def test_graph_with_in_range_indices_constructs(g):
    s, r, w, n = without_self_loops(*g)
    graph = _graph(s, r, n, edge_weight=jnp.asarray(w))
    assert graph.n_nodes == n and graph.n_edges == len(s)
    np.testing.assert_array_equal(np.asarray(graph.senders), s)
    np.testing.assert_array_equal(np.asarray(graph.receivers), r)


@FAST
@given(g=coo_graphs(min_edges=1), field=st.sampled_from(["senders", "receivers"]), data=st.data())
def test_graph_out_of_range_index_names_the_field(g, field, data):
    s, r, _, n = without_self_loops(*g)
    assume(len(s) > 0)
    bad = data.draw(st.one_of(st.integers(n, n + 1000), st.integers(-1000, -1)), label="bad index")
    at = data.draw(st.integers(0, len(s) - 1), label="position")
    arrays = {"senders": s.copy(), "receivers": r.copy()}
    arrays[field][at] = bad
    with pytest.raises(ValueError, match=rf"\b{field}\b"):
        _graph(arrays["senders"], arrays["receivers"], n)


_VALID_FIELDS = dict(
    hidden=st.integers(1, 512),
    dropout=st.floats(0.0, 1.0, exclude_max=True),
    lr=st.floats(1e-8, 10.0),
    weight_decay=st.floats(0.0, 1.0),
    epochs=st.integers(1, 1000),
    bits=st.one_of(st.none(), st.integers(1, 32)),
    cost_weight=st.floats(0.0, 10.0),
    gate_lr=st.floats(1e-8, 10.0),
    seed=st.integers(0, 2**31 - 1),
    objective=st.sampled_from(FIELD_DOMAINS["objective"].values),
    dropedge_rate=st.floats(0.0, 1.0, exclude_max=True),
)


@FAST
@given(fields=st.fixed_dictionaries({}, optional=_VALID_FIELDS))
def test_train_config_with_valid_fields_constructs(fields):
    cfg = TrainConfig.from_flat(**fields)
    flat = cfg.flat()
    for name, value in fields.items():
        assert flat[name] == value, name
    assert TrainConfig.from_flat(**flat) == cfg  # the flat view round-trips


@FAST
@given(lr=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just(float("inf"))))
def test_train_config_non_positive_lr_names_lr(lr):
    with pytest.raises(ValueError, match=r"TrainConfig\.optim\.lr: must be a finite number > 0"):
        TrainConfig.from_flat(lr=lr)
