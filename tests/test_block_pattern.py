"""COO edge lists run on the block-sparse kernels through a `BlockPattern` (models with
impl="bsr_xla" / "pallas"): same values and gradients as the segment_sum reference."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.kernels import CooAdjacency, aggregate, with_block_pattern
from codesign.models import GCN
from codesign.sparsify import GateLogit


def random_adj(key, n, e):
    ks, kr, kw = jax.random.split(key, 3)
    s = jax.random.randint(ks, (e,), 0, n).astype(jnp.int32)
    r = jax.random.randint(kr, (e,), 0, n).astype(jnp.int32)
    return CooAdjacency(s, r, jax.random.uniform(kw, (e,)), n)


@pytest.mark.parametrize("impl", ["bsr_xla", "pallas"])
@pytest.mark.parametrize("reorder", [None, "rcm"])
def test_pattern_aggregate_matches_segment(getkey, impl, reorder):
    adj = random_adj(getkey(), 50, 300)  # duplicates included: they must add up
    x = jax.random.normal(getkey(), (50, 16))
    blocked = with_block_pattern(adj, 16, reorder)
    with jax.default_matmul_precision("highest"):
        out = aggregate(blocked, x, impl=impl)
    np.testing.assert_allclose(out, aggregate(adj, x, impl="segment"), rtol=1e-5, atol=1e-5)

    def loss(w, x, impl_, a):
        with jax.default_matmul_precision("highest"):
            return jnp.sum(aggregate(a.with_weight(w), x, impl=impl_) ** 2)
    gw, gx = jax.grad(loss, argnums=(0, 1))(adj.edge_weight, x, impl, blocked)
    rw, rx = jax.grad(loss, argnums=(0, 1))(adj.edge_weight, x, "segment", adj)
    np.testing.assert_allclose(gw, rw, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gx, rx, rtol=1e-4, atol=1e-4)


def test_pattern_errors(getkey):
    adj = random_adj(getkey(), 20, 40)
    x = jnp.ones((20, 4))
    with pytest.raises(ValueError, match="with_block_pattern"):
        aggregate(adj, x, impl="pallas")
    blocked = with_block_pattern(adj, 16, None, self_loops=True)  # built for E + N entries
    with pytest.raises(ValueError, match="self-loop setting"):
        aggregate(blocked, x, impl="bsr_xla")


def test_gcn_runs_on_pallas_with_gate_gradients(getkey):
    n = 40
    s = np.arange(n)
    adj = CooAdjacency(jnp.asarray(np.r_[s, (s + 1) % n], jnp.int32), jnp.asarray(np.r_[(s + 1) % n, s], jnp.int32),
                       None, n)
    x = jax.random.uniform(getkey(), (n, 24))
    blocked = with_block_pattern(adj, 16, "rcm", self_loops=True)
    ref = GCN(24, 16, 3, n_edges=adj.n_edges, rngs=nnx.Rngs(0))
    pal = GCN(24, 16, 3, n_edges=adj.n_edges, impl="pallas", rngs=nnx.Rngs(0))
    ref.eval(), pal.eval()
    with jax.default_matmul_precision("highest"):
        np.testing.assert_allclose(pal(x, blocked), ref(x, adj), rtol=1e-4, atol=1e-5)
        g_pal = nnx.grad(lambda m: m(x, blocked).sum(), argnums=nnx.DiffState(0, GateLogit))(pal)
        g_ref = nnx.grad(lambda m: m(x, adj).sum(), argnums=nnx.DiffState(0, GateLogit))(ref)
    for a, b in zip(jax.tree.leaves(g_pal), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
