"""Aggregation kernels against the dense reference, gradients, and dispatch errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from codesign.kernels import CooAdjacency, aggregate, dense_spmm, segment_spmm


def random_adj(key, n, e, weighted=True, empty_rows=()):
    ks, kr, kw = jax.random.split(key, 3)
    senders = jax.random.randint(ks, (e,), 0, n)
    receivers = jax.random.randint(kr, (e,), 0, n)
    for r in empty_rows:  # move edges away from rows that must stay empty
        receivers = jnp.where(receivers == r, (r + 1) % n, receivers)
    w = jax.random.normal(kw, (e,)) if weighted else None
    return CooAdjacency(senders.astype(jnp.int32), receivers.astype(jnp.int32), w, n)


@pytest.mark.parametrize("weighted", [True, False])
@pytest.mark.parametrize("n,e,f", [(1, 1, 1), (17, 60, 5), (64, 1000, 33)])
def test_segment_matches_dense(getkey, weighted, n, e, f):
    adj = random_adj(getkey(), n, e, weighted, empty_rows=(0,) if n > 1 else ())
    x = jax.random.normal(getkey(), (n, f))
    out = segment_spmm(adj, x)
    np.testing.assert_allclose(out, dense_spmm(adj, x), rtol=1e-5, atol=1e-5)
    if n > 1:
        assert np.all(np.asarray(out[0]) == 0)  # an empty row aggregates to exactly zero


def test_duplicate_edges_are_summed():
    adj = CooAdjacency(jnp.array([1, 1], jnp.int32), jnp.array([0, 0], jnp.int32), None, 2)
    x = jnp.array([[1.0], [3.0]])
    np.testing.assert_allclose(aggregate(adj, x, impl="segment"), [[6.0], [0.0]])


def test_segment_gradients(getkey):
    adj = random_adj(getkey(), 12, 40)
    x = jax.random.normal(getkey(), (12, 4))
    check_grads(lambda x, w: segment_spmm(adj.with_weight(w), x), (x, adj.edge_weight), order=1,
                modes=("rev",), atol=1e-2, rtol=1e-2)


def test_aggregate_dispatch_and_errors(getkey):
    adj = random_adj(getkey(), 8, 20)
    x = jax.random.normal(getkey(), (8, 3))
    np.testing.assert_allclose(aggregate(adj, x), aggregate(adj, x, impl="dense"), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="unknown impl 'pallas_typo'"):
        aggregate(adj, x, impl="pallas_typo")
    with pytest.raises(ValueError, match=r"x must be \[n_nodes=8, F\]"):
        aggregate(adj, x[:5])


def test_segment_bf16_accumulates_in_f32():
    """1000 messages of 1.0 into one node: a bf16 running sum would stop at 256 (256 + 1 rounds
    back to 256); the f32 accumulator gives 1000, which bf16 represents exactly."""
    e = 1000
    adj = CooAdjacency(jnp.arange(1, e + 1, dtype=jnp.int32), jnp.zeros(e, jnp.int32), None, e + 1)
    x = jnp.ones((e + 1, 3), jnp.bfloat16)
    out = segment_spmm(adj, x)
    assert out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out[0], np.float32), 1000.0)
    np.testing.assert_array_equal(np.asarray(out[1:], np.float32), 0.0)


# ---------------------------------------------------------------------------------------------
# Integer and complex features (issue 36): one rule at `aggregate`, the same for every backend
# ---------------------------------------------------------------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from codesign.kernels import (BlockSparseAdjacency, CondensedRowWindows, CsrBlockSizes, gat_aggregate,  # noqa: E402
                              gat_aggregate_reference, with_block_pattern, with_csr_chunks, with_csr_pattern)
from codesign.kernels.api import IMPLS  # noqa: E402

# every (format, impl) pair of the dispatch table; the Pallas ones run in the interpreter off a GPU
ALL_IMPLS = [f"{fmt.__name__}/{impl}" for fmt, impl in IMPLS]
_SMALL_CHUNKS = CsrBlockSizes(chunk=8, max_item_edges=16, max_item_rows=4, block_f=16, items_multiple=32)


def run_impl(case: str, adj: CooAdjacency, x):
    """``aggregate`` of ``x`` (original node order) through the backend ``case`` ("Format/impl"),
    with the structure that backend needs built from ``adj``; the result in original node order."""
    fmt, impl = case.split("/")
    if fmt == "CooAdjacency":
        attach = {"csr_scipy": with_csr_pattern, "bsr_xla": lambda a: with_block_pattern(a, 16),
                  "pallas": lambda a: with_block_pattern(a, 16),
                  "pallas_csr": lambda a: with_csr_chunks(a, _SMALL_CHUNKS)}.get(impl, lambda a: a)
        return aggregate(attach(adj), x, impl=impl)
    blocks = BlockSparseAdjacency.from_coo(adj, 16) if fmt == "BlockSparseAdjacency" \
        else CondensedRowWindows.from_coo(adj, 16)
    return blocks.unpermute(aggregate(blocks, blocks.permute_features(x), impl=impl))


def _two_into_one(weight=None):
    """Nodes 1 and 2 both send to node 0 (node 1 also to node 2): row 0 sums two messages."""
    w = None if weight is None else jnp.full((3,), weight, jnp.float32)
    return CooAdjacency(jnp.array([1, 2, 1], jnp.int32), jnp.array([0, 0, 2], jnp.int32), w, 3)


@pytest.mark.parametrize("case", ALL_IMPLS)
def test_aggregate_integer_features_accumulate_in_float32(case):
    """The issue's inputs: int8 100 + 100 was -56 (summed in int8), int32 features with weights
    0.5 were 0 (weights cast to int). Every backend now gives float32 200 / 100."""
    with jax.default_matmul_precision("highest"):
        out8 = run_impl(case, _two_into_one(), jnp.full((3, 2), 100, jnp.int8))
        out32 = run_impl(case, _two_into_one(0.5), jnp.full((3, 2), 100, jnp.int32))
    assert out8.dtype == out32.dtype == jnp.float32
    np.testing.assert_array_equal(out8, [[200, 200], [0, 0], [100, 100]])
    np.testing.assert_array_equal(out32, [[100, 100], [0, 0], [50, 50]])


@pytest.mark.parametrize("case", ALL_IMPLS)
def test_aggregate_refuses_complex_features(case):
    x = jnp.ones((3, 2), jnp.complex64)
    with pytest.raises(ValueError, match=r"^aggregate: x must have a real \(float, integer or bool\) dtype, "
                                         r"got complex64$"):
        run_impl(case, _two_into_one(), x)


_GRAPH = CooAdjacency(jnp.array([1, 2, 1, 3, 0, 4, 4, 2], jnp.int32), jnp.array([0, 0, 0, 2, 2, 2, 4, 3], jnp.int32),
                      None, 5)  # a duplicate edge (1 -> 0), a self-loop (4 -> 4), empty row 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(ALL_IMPLS),
       x=st.sampled_from([np.int8, np.int32, np.uint8, np.bool_]).flatmap(lambda dt: hnp.arrays(dt, (5, 3))),
       w=hnp.arrays(np.float32, 8, elements=st.floats(-2, 2, width=32, allow_subnormal=False)))
def test_aggregate_integer_features_match_float64_reference(case, x, w):
    """For any int8 / int32 / uint8 / bool features and float weights, every backend equals the
    float64 product to float32 rounding (relative to sum |w x|, the scale of the rounding). Subnormal
    weights are left out: XLA:CPU flushes them to zero (a property of the backend, not of integer features)."""
    adj = _GRAPH.with_weight(jnp.asarray(w))
    a = np.zeros((5, 5))
    np.add.at(a, (np.asarray(_GRAPH.receivers), np.asarray(_GRAPH.senders)), w.astype(np.float64))
    x64 = x.astype(np.float64)
    with jax.default_matmul_precision("highest"):
        got = run_impl(case, adj, jnp.asarray(x))
    assert got.dtype == jnp.float32
    scale = np.abs(a) @ np.abs(x64)
    assert np.all(np.abs(np.asarray(got, np.float64) - a @ x64) <= 1e-6 * scale), (got, a @ x64)


@pytest.mark.parametrize("impl", ["reference", "pallas"])
def test_gat_aggregate_integer_features_in_float32(impl):
    """Equal scores: each of row 0's two messages has attention 1/2, so int8 h = 100 and 50 give 75
    (not an int8 sum); complex h is refused naming h."""
    adj = _two_into_one()
    h = jnp.array([[[0]], [[100]], [[50]]], jnp.int8)
    s = jnp.zeros((3, 1), jnp.int32)
    out = gat_aggregate(adj, h, s, s, impl=impl, interpret=True)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out[:, 0, 0], [75.0, 0.0, 100.0], rtol=1e-6)
    np.testing.assert_allclose(out, gat_aggregate_reference(adj, h.astype(jnp.float32), s.astype(jnp.float32),
                                                            s.astype(jnp.float32)), rtol=1e-6)
    with pytest.raises(ValueError, match=r"^gat_aggregate: h must have a real .* dtype, got complex64$"):
        gat_aggregate(adj, h.astype(jnp.complex64), s, s, impl=impl, interpret=True)
