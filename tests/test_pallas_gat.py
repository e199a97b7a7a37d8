"""Fused GAT aggregation: Pallas kernel (interpret mode on CPU, Triton on GPU) vs references.

Layout follows JAX's ``tests/pallas/gpu_ops_test.py``: the cases live in a class run with
``INTERPRET = True`` everywhere, and a subclass reruns them compiled for the GPU when one is there.
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from codesign.kernels import CooAdjacency
from codesign.kernels.gat import (CsrByReceiver, csr_by_receiver, gat_aggregate,
                                  gat_aggregate_reference)
from codesign.kernels.pallas_gat import GatKernelConfig
from pallas_testing import lowered_text, triton_calls

SLOPE = 0.2


def random_graph(seed, n, e, empty_rows=(), hub=None, hub_degree=0):
    """Random COO graph (duplicates and self loops allowed); ``empty_rows`` receive nothing and
    row ``hub`` receives ``hub_degree`` extra edges (several chunks' worth)."""
    rng = np.random.default_rng(seed)
    snd = rng.integers(0, n, e)
    rcv = rng.integers(0, n, e)
    if hub is not None:
        snd = np.concatenate([snd, rng.integers(0, n, hub_degree)])
        rcv = np.concatenate([rcv, np.full(hub_degree, hub)])
    keep = ~np.isin(rcv, empty_rows)
    return CooAdjacency(jnp.asarray(snd[keep], jnp.int32), jnp.asarray(rcv[keep], jnp.int32), None, n)


def random_inputs(seed, n, heads, feat, score_scale=1.0):
    rng = np.random.default_rng(seed + 1000)
    h = rng.normal(size=(n, heads, feat)).astype(np.float32)
    s_src = (score_scale * rng.normal(size=(n, heads))).astype(np.float32)
    s_dst = (score_scale * rng.normal(size=(n, heads))).astype(np.float32)
    return jnp.asarray(h), jnp.asarray(s_src), jnp.asarray(s_dst)


def dense_gat_f64(adj, h, s_src, s_dst, slope=SLOPE):
    """Dense masked softmax in numpy float64 (duplicate edges weigh by multiplicity)."""
    n = adj.n_nodes
    count = np.zeros((n, n))
    np.add.at(count, (np.asarray(adj.receivers), np.asarray(adj.senders)), 1.0)
    h, s_src, s_dst = (np.asarray(a, np.float64) for a in (h, s_src, s_dst))
    z = s_dst[:, None, :] + s_src[None, :, :]  # [i, j, H]
    e = np.where(z > 0, z, slope * z)
    e = np.where(count[..., None] > 0, e, -np.inf)
    m = e.max(axis=1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    p = count[..., None] * np.exp(e - m)
    denom = p.sum(axis=1, keepdims=True)
    alpha = p / np.where(denom > 0, denom, 1.0)
    return np.einsum("ijh,jhf->ihf", alpha, h)


def test_csr_by_receiver_groups_and_sorts():
    adj = random_graph(0, 9, 30, empty_rows=(2,))
    csr = jax.jit(csr_by_receiver)(adj)
    snd, rcv = np.asarray(adj.senders), np.asarray(adj.receivers)
    indptr, col = np.asarray(csr.indptr), np.asarray(csr.col)
    assert indptr.dtype == np.int32 and indptr[0] == 0 and indptr[-1] == adj.n_edges
    assert indptr[3] == indptr[2]  # the empty row
    for i in range(adj.n_nodes):
        np.testing.assert_array_equal(col[indptr[i]:indptr[i + 1]], np.sort(snd[rcv == i]))
        np.testing.assert_array_equal(np.asarray(csr.row)[indptr[i]:indptr[i + 1]], i)
        t = np.asarray(csr.t_row)[csr.t_indptr[i]:csr.t_indptr[i + 1]]
        np.testing.assert_array_equal(t, np.sort(rcv[snd == i]))
    np.testing.assert_array_equal(snd[np.asarray(csr.perm)], col)


class TestGatInterpret:
    """Every case runs the Pallas kernels in interpret mode (CPU)."""

    INTERPRET = True

    def gat(self, csr, h, s_src, s_dst, **config):
        cfg = GatKernelConfig(**config)
        return gat_aggregate(csr, h, s_src, s_dst, impl="pallas", interpret=self.INTERPRET, config=cfg)

    @pytest.mark.parametrize("heads,feat", [(1, 16), (4, 32), (4, 16), (1, 32)])
    def test_forward_matches_references(self, heads, feat):
        n = 24
        adj = random_graph(heads * feat, n, 70, empty_rows=(0, 7), hub=3, hub_degree=45)
        csr = csr_by_receiver(adj)
        assert int(np.diff(np.asarray(csr.indptr)).max()) > 5 * 8  # several chunks of 8
        h, s_src, s_dst = random_inputs(feat, n, heads, feat)
        out = jax.jit(lambda *a: self.gat(csr, *a, chunk=8))(h, s_src, s_dst)
        assert out.shape == (n, heads, feat) and out.dtype == jnp.float32
        np.testing.assert_allclose(out, gat_aggregate_reference(adj, h, s_src, s_dst), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(out, dense_gat_f64(adj, h, s_src, s_dst), rtol=1e-5, atol=1e-6)
        assert np.all(np.asarray(out[0]) == 0) and np.all(np.asarray(out[7]) == 0)

    @pytest.mark.parametrize("backward", ["pallas", "xla"])
    @pytest.mark.parametrize("heads,feat", [(1, 16), (4, 32)])
    def test_gradients_match_reference(self, heads, feat, backward):
        n = 20
        adj = random_graph(7, n, 60, empty_rows=(5,), hub=11, hub_degree=40)
        csr = csr_by_receiver(adj)
        h, s_src, s_dst = random_inputs(3, n, heads, feat)
        w = jax.random.normal(jax.random.key(heads + feat), (n, heads, feat))  # random linear functional

        def loss(fn):
            return lambda *a: jnp.sum(w * fn(*a))

        got = jax.jit(jax.grad(loss(lambda *a: self.gat(csr, *a, chunk=16, backward=backward)),
                               argnums=(0, 1, 2)))(h, s_src, s_dst)
        want = jax.grad(loss(lambda *a: gat_aggregate_reference(adj, *a)), argnums=(0, 1, 2))(h, s_src, s_dst)
        for name, g, r in zip(("dh", "ds_src", "ds_dst"), got, want):
            assert g.shape == r.shape and bool(jnp.all(jnp.isfinite(g))), name
            np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * float(jnp.abs(r).max()), err_msg=name)
        np.testing.assert_array_equal(got[2][5], 0.0)  # an empty row: no gradient, and no NaN

    def test_check_grads_tiny(self):
        adj = random_graph(1, 5, 9, empty_rows=(4,))
        csr = csr_by_receiver(adj)
        h, s_src, s_dst = random_inputs(2, 5, 2, 4)
        f = jax.jit(lambda *a: self.gat(csr, *a, chunk=4))
        check_grads(f, (h, s_src, s_dst), order=1, modes=("rev",), atol=2e-2, rtol=2e-2, eps=1e-2)

    def test_large_scores_do_not_overflow(self):
        n, heads, feat = 16, 4, 16
        adj = random_graph(2, n, 60, empty_rows=(1,), hub=0, hub_degree=40)
        h, s_src, s_dst = random_inputs(4, n, heads, feat, score_scale=1e3)  # exp(1e3) overflows f32
        csr = csr_by_receiver(adj)
        out = jax.jit(lambda *a: self.gat(csr, *a, chunk=8))(h, s_src, s_dst)
        assert bool(jnp.all(jnp.isfinite(out)))
        np.testing.assert_allclose(out, dense_gat_f64(adj, h, s_src, s_dst), rtol=1e-4, atol=1e-4)
        grads = jax.jit(jax.grad(lambda *a: jnp.sum(self.gat(csr, *a, chunk=8)), argnums=(0, 1, 2)))(
            h, s_src, s_dst)
        assert all(bool(jnp.all(jnp.isfinite(g))) for g in grads)

    def test_feature_width_not_a_power_of_two_and_graph_without_edges(self):
        adj = random_graph(5, 10, 25, empty_rows=(9,))
        h, s_src, s_dst = random_inputs(6, 10, 2, 6)  # F=6 is padded to 8 inside the kernel
        out = self.gat(csr_by_receiver(adj), h, s_src, s_dst, chunk=4)
        np.testing.assert_allclose(out, dense_gat_f64(adj, h, s_src, s_dst), rtol=1e-5, atol=1e-6)
        empty = CooAdjacency(jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.int32), None, 10)
        np.testing.assert_array_equal(self.gat(empty, h, s_src, s_dst), 0.0)

    def test_bfloat16_inputs_accumulate_in_float32(self):
        adj = random_graph(8, 12, 40, empty_rows=(3,))
        csr = csr_by_receiver(adj)
        h, s_src, s_dst = (a.astype(jnp.bfloat16) for a in random_inputs(8, 12, 2, 16))
        out = self.gat(csr, h, s_src, s_dst)
        assert out.dtype == jnp.float32
        np.testing.assert_allclose(out, gat_aggregate_reference(adj, h, s_src, s_dst), rtol=1e-5, atol=1e-6)
        grads = jax.jit(jax.grad(lambda *a: jnp.sum(self.gat(csr, *a)), argnums=(0, 1, 2)))(h, s_src, s_dst)
        assert [g.dtype for g in grads] == [jnp.bfloat16] * 3


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="needs a GPU (Triton)")
class TestGatGPU(TestGatInterpret):
    """The same cases compiled by Triton."""

    INTERPRET = False


def _example(n=12, heads=4, feat=16, e=37):
    adj = random_graph(9, n, e, empty_rows=(1,), hub=2, hub_degree=20)
    return adj, csr_by_receiver(adj), random_inputs(9, n, heads, feat)


@pytest.mark.parametrize("backward", ["pallas", "xla"])
def test_lowers_to_triton_for_cuda(backward):
    _, csr, args = _example()
    cfg = GatKernelConfig(backward=backward)
    specs = jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), (csr, *args))

    def f(csr, *a):
        return gat_aggregate(csr, *a, impl="pallas", interpret=False, config=cfg)

    def grad(csr, *a):
        return jax.grad(lambda *b: jnp.sum(f(csr, *b)), argnums=(0, 1, 2))(*a)

    fwd, bwd = lowered_text(f, *specs), lowered_text(grad, *specs)
    assert len(triton_calls(fwd)) == 1
    assert len(triton_calls(bwd)) == (3 if backward == "pallas" else 1)  # fwd (+ row, column kernels)


@pytest.mark.parametrize("backward", ["pallas", "xla"])
def test_saved_residuals_are_linear_in_nodes(backward):
    """The custom_vjp keeps O(N*H*F + E) for the backward, never an E x H attention array."""
    adj, csr, (h, s_src, s_dst) = _example()
    n, heads, feat = h.shape
    e = csr.n_edges
    sizes_to_avoid = {e * heads, e * heads * feat}
    assert not sizes_to_avoid & {n * heads, n * heads * feat, n + 1, e}  # the check is meaningful

    def residual_sizes(fn):
        _, vjp_fn = jax.vjp(fn, h, s_src, s_dst)
        return [leaf.size for leaf in jax.tree_util.tree_leaves(vjp_fn)]

    cfg = GatKernelConfig(backward=backward)
    kernel = residual_sizes(lambda *a: gat_aggregate(csr, *a, impl="pallas", interpret=True, config=cfg))
    assert not sizes_to_avoid & set(kernel), kernel
    assert max(kernel) <= n * heads * feat and sum(kernel) <= 3 * n * heads * feat + 4 * (n + 1) + 3 * e
    reference = residual_sizes(lambda *a: gat_aggregate_reference(adj, *a))
    assert sizes_to_avoid & set(reference)  # the baseline does keep E x H (x F) arrays


def test_dispatch_and_errors():
    adj, csr, (h, s_src, s_dst) = _example()
    want = gat_aggregate_reference(csr, h, s_src, s_dst)
    np.testing.assert_allclose(want, gat_aggregate_reference(adj, h, s_src, s_dst), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gat_aggregate(adj, h, s_src, s_dst, impl="pallas"), want, rtol=1e-5, atol=1e-6)
    if jax.default_backend() != "gpu":
        np.testing.assert_array_equal(gat_aggregate(csr, h, s_src, s_dst), want)  # auto -> reference
    assert isinstance(csr, CsrByReceiver)
    with pytest.raises(ValueError, match="unknown impl 'triton'"):
        gat_aggregate(csr, h, s_src, s_dst, impl="triton")
    with pytest.raises(ValueError, match=r"h must be \[n_nodes=12, H, F\]"):
        gat_aggregate(csr, h[:5], s_src, s_dst)
    with pytest.raises(ValueError, match="s_dst must be"):
        gat_aggregate(csr, h, s_src, s_dst[:, :1])
    with pytest.raises(ValueError, match="chunk must be a power of 2"):
        GatKernelConfig(chunk=12)
