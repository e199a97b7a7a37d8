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
