"""Pallas block-sparse SpMM against the XLA references (interpret mode on CPU, compiled on GPU),
its gradients, and its Triton lowering for CUDA checked on the CPU.

Pattern of JAX's ``tests/pallas/gpu_ops_test.py``: one test class parameterized by ``INTERPRET``;
the compiled variant is a subclass that only runs where ``jax.default_backend() == "gpu"``.
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from codesign.kernels import (BlockSizes, BlockSparseAdjacency, CooAdjacency, aggregate, bsr_spmm, bsr_spmm_int8,
                              bsr_spmm_int8_reference, bsr_spmm_reference, dense_spmm, segment_spmm)



from pallas_testing import ON_GPU, ExactF32Dots, exact_f32_dots, lowered_text, rel_err, triton_calls  # noqa: E402


def make_adj(pattern: str, block_size: int, seed: int = 0, n_block_rows: int = 4) -> CooAdjacency:
    """A weighted COO graph over ``n = n_block_rows * B - 3`` nodes (last block row padded).

    "random": uniform random edges (RCM applied by the caller).
    "empty_rows": random edges, but no receiver in block row 1 (an empty block row).
    "full_row": random edges plus every node of block row 0 receiving from every node
    (block row 0 stores all its tiles, all dense).
    """
    rng = np.random.default_rng(seed)
    n = n_block_rows * block_size - 3
    e = 3 * n
    s, r = rng.integers(0, n, e), rng.integers(0, n, e)
    if pattern == "empty_rows":
        r = np.where(r // block_size == 1, (r + block_size) % n, r)
        r = np.where(r // block_size == 1, 0, r)
    elif pattern == "full_row":
        rows, cols = np.meshgrid(np.arange(block_size), np.arange(n), indexing="ij")
        s, r = np.concatenate([s, cols.ravel()]), np.concatenate([r, rows.ravel()])
    elif pattern != "random":
        raise ValueError(pattern)
    w = rng.normal(size=s.shape).astype(np.float32)
    return CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), jnp.asarray(w), n)


class PallasSpmmTest(ExactF32Dots):
    """Runs everywhere: the Pallas interpreter (on CPU) against the plain-JAX references, with
    IEEE f32 dots (`ExactF32Dots`)."""

    __test__ = True  # collected by pytest despite the JAX-style "...Test" class name
    INTERPRET = True
    ATOL = 1e-5  # absolute tolerance of the f32 comparisons

    def setup_method(self):
        if not self.INTERPRET and not ON_GPU:
            pytest.skip("compiled Pallas Triton kernels need a GPU")
        super().setup_method()

    def spmm(self, adj, x, **kw):
        return bsr_spmm(adj, x, interpret=self.INTERPRET, **kw)

    @pytest.mark.parametrize("block_size", [16, 32, 64])
    @pytest.mark.parametrize("pattern", ["random", "empty_rows", "full_row"])
    def test_f32_matches_segment_and_dense(self, pattern, block_size):
        adj = make_adj(pattern, block_size)
        bsr = BlockSparseAdjacency.from_coo(adj, block_size, reorder="rcm" if pattern == "random" else None)
        if pattern == "empty_rows":
            assert bsr.tile_stats()["empty_block_rows"] >= 1
        if pattern == "full_row":
            assert bsr.tile_stats()["max_tiles_per_row"] == bsr.n_block_rows
        x = jax.random.normal(jax.random.key(block_size), (adj.n_nodes, 64), jnp.float32)
        out = self.spmm(bsr, bsr.permute_features(x))
        assert out.shape == (bsr.n_pad, 64) and out.dtype == jnp.float32
        np.testing.assert_array_equal(out[adj.n_nodes:], 0)  # padding rows stay zero
        with jax.default_matmul_precision("highest"):
            want_seg = segment_spmm(adj, x)
            want_dense = dense_spmm(adj, x)
            want_bsr = bsr_spmm_reference(bsr, bsr.permute_features(x))
        got = bsr.unpermute(out)
        np.testing.assert_allclose(got, want_seg, rtol=1e-5, atol=self.ATOL)
        np.testing.assert_allclose(got, want_dense, rtol=1e-5, atol=self.ATOL)
        np.testing.assert_allclose(out, want_bsr, rtol=1e-5, atol=self.ATOL)

    @pytest.mark.parametrize("n_features", [16, 80, 5])
    def test_feature_widths_and_padding(self, n_features):
        # F = 80 is not a multiple of block_f = 64: padded to 128 inside, sliced back; F = 5 -> 16.
        adj = make_adj("random", 16, seed=1)
        bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder="rcm")
        x = jax.random.normal(jax.random.key(1), (bsr.n_pad, n_features), jnp.float32)
        out = self.spmm(bsr, x)
        assert out.shape == x.shape
        with jax.default_matmul_precision("highest"):
            want = bsr.to_dense() @ x
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=self.ATOL)
        narrow = self.spmm(bsr, x, block_sizes=BlockSizes(block_f=16, block_f_sddmm=32))
        np.testing.assert_allclose(narrow, want, rtol=1e-5, atol=self.ATOL)

    @pytest.mark.parametrize("block_size", [16, 32])
    def test_bf16(self, block_size):
        adj = make_adj("random", block_size, seed=2)
        bsr = BlockSparseAdjacency.from_coo(adj, block_size, reorder="rcm")
        x = jax.random.normal(jax.random.key(2), (bsr.n_pad, 64), jnp.float32)
        out = self.spmm(bsr, x.astype(jnp.bfloat16))
        assert out.dtype == jnp.bfloat16
        with jax.default_matmul_precision("highest"):
            want = bsr.to_dense() @ x
        assert rel_err(out.astype(jnp.float32), want) < 2e-2

    @pytest.mark.parametrize("block_size", [16, 32])
    def test_int8_matches_dequantized_reference(self, block_size):
        adj = make_adj("empty_rows", block_size, seed=3)
        bsr = BlockSparseAdjacency.from_coo(adj, block_size, reorder=None)
        k1, k2 = jax.random.split(jax.random.key(3))
        x_q = jax.random.randint(k1, (bsr.n_pad, 48), -127, 128, jnp.int32).astype(jnp.int8)
        scales = jax.random.uniform(k2, (bsr.n_pad,), jnp.float32, 1e-3, 1e-2)
        out = bsr_spmm_int8(bsr, x_q, scales, interpret=self.INTERPRET)
        assert out.shape == (bsr.n_pad, 48) and out.dtype == jnp.float32
        with jax.default_matmul_precision("highest"):
            want = bsr_spmm_int8_reference(bsr, x_q, scales)
            dense = bsr.to_dense() @ (x_q.astype(jnp.float32) * scales[:, None])
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=self.ATOL)
        np.testing.assert_allclose(out, dense, rtol=1e-5, atol=self.ATOL)

    def test_check_grads(self):
        adj = make_adj("empty_rows", 16, seed=4, n_block_rows=3)
        bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder=None)
        x = jax.random.normal(jax.random.key(4), (bsr.n_pad, 16), jnp.float32)
        check_grads(lambda d, x: self.spmm(bsr.with_data(d), x), (bsr.data, x), order=1, modes=("rev",),
                    atol=1e-2, rtol=1e-2)

    @pytest.mark.parametrize("block_size,n_features", [(16, 80), (32, 64)])
    def test_grads_match_reference(self, block_size, n_features):
        adj = make_adj("full_row", block_size, seed=5)
        bsr = BlockSparseAdjacency.from_coo(adj, block_size, reorder="rcm")
        k1, k2 = jax.random.split(jax.random.key(5))
        x = jax.random.normal(k1, (bsr.n_pad, n_features), jnp.float32)
        probe = jax.random.normal(k2, (bsr.n_pad, n_features), jnp.float32)

        def loss(spmm):
            return lambda d, x: jnp.sum(jnp.sin(spmm(bsr.with_data(d), x)) * probe)

        grad = jax.jit(jax.grad(loss(self.spmm), argnums=(0, 1)))
        d_data, d_x = grad(bsr.data, x)
        with jax.default_matmul_precision("highest"):
            want_data, want_x = jax.grad(loss(bsr_spmm_reference), argnums=(0, 1))(bsr.data, x)
        np.testing.assert_allclose(d_x, want_x, rtol=1e-5, atol=self.ATOL)
        np.testing.assert_allclose(d_data, want_data, rtol=1e-5, atol=1e-4)
        # Deterministic: no atomics, the same bits on every run.
        d_data2, d_x2 = grad(bsr.data, x)
        np.testing.assert_array_equal(d_x, d_x2)
        np.testing.assert_array_equal(d_data, d_data2)

    def test_no_tiles(self):
        adj = CooAdjacency(jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.int32), None, 20)
        bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder=None)
        x = jnp.ones((bsr.n_pad, 16), jnp.float32)
        np.testing.assert_array_equal(self.spmm(bsr, x), 0)
        d_data, d_x = jax.grad(lambda d, x: self.spmm(bsr.with_data(d), x).sum(), argnums=(0, 1))(bsr.data, x)
        assert d_data.shape == (0, 16, 16)
        np.testing.assert_array_equal(d_x, 0)

    def test_errors(self):
        bsr8 = BlockSparseAdjacency.from_coo(make_adj("random", 8), 8, reorder=None)
        with pytest.raises(ValueError, match="block_size"):
            self.spmm(bsr8, jnp.zeros((bsr8.n_pad, 16)))
        bsr = BlockSparseAdjacency.from_coo(make_adj("random", 16), 16, reorder=None)
        with pytest.raises(ValueError, match=r"x must be \[n_pad=64, F\]"):
            self.spmm(bsr, jnp.zeros((bsr.n_nodes, 16)))
        with pytest.raises(ValueError, match="x.dtype"):
            self.spmm(bsr, jnp.zeros((bsr.n_pad, 16), jnp.int32))
        with pytest.raises(ValueError, match="scales"):
            bsr_spmm_int8(bsr, jnp.zeros((bsr.n_pad, 16), jnp.int8), jnp.ones((3,)), interpret=self.INTERPRET)
        with pytest.raises(ValueError, match="BlockSizes.block_f"):
            BlockSizes(block_f=24)


@pytest.mark.skipif(not ON_GPU, reason="compiled Pallas Triton kernels need a GPU (jax.default_backend() == 'gpu')")
class PallasSpmmGpuTest(PallasSpmmTest):
    """The same cases compiled through Triton on the GPU. The f32 sums come out in another order
    than XLA's reference (and with fused multiply-adds): on sums of up to ~100 terms of magnitude
    ~10 that moves a few elements by up to 6e-5 (measured on an H100), hence ``ATOL = 1e-4``."""

    INTERPRET = False
    ATOL = 1e-4


@exact_f32_dots()
def test_aggregate_dispatch():
    adj = make_adj("random", 16, seed=6)
    bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder="rcm")
    x = jax.random.normal(jax.random.key(6), (adj.n_nodes, 24), jnp.float32)
    xp = bsr.permute_features(x)
    want = segment_spmm(adj, x)
    for impl in ("auto", "bsr_xla", "pallas"):
        got = bsr.unpermute(aggregate(bsr, xp, impl=impl))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=impl)
    with pytest.raises(ValueError, match=r"needs block structure: attach it with with_block_pattern\(adj, block_size\)"):
        aggregate(adj, x, impl="pallas")
    with pytest.raises(ValueError, match="needs a CooAdjacency.*'bsr_xla' or 'pallas'"):
        aggregate(bsr, xp, impl="segment")
    with pytest.raises(ValueError, match="unknown impl 'bsr_typo'"):
        aggregate(bsr, xp, impl="bsr_typo")
    with pytest.raises(ValueError, match=r"x must be \[n_pad=64, F\]"):
        aggregate(bsr, x, impl="bsr_xla")


class TritonLoweringTest:
    """Lowers the kernels for CUDA on any host: proves the Triton path builds (no scalar prefetch)."""

    __test__ = True

    @pytest.mark.parametrize("block_size", [16, 32, 64])
    @pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
    def test_forward_and_grad_lower_to_triton(self, block_size, dtype):
        bsr = BlockSparseAdjacency.from_coo(make_adj("random", block_size, seed=7), block_size, reorder="rcm")
        x = jnp.zeros((bsr.n_pad, 80), dtype)

        def fwd(d, x):
            return bsr_spmm(bsr.with_data(d), x, interpret=False)

        grad = jax.grad(lambda d, x: fwd(d, x).astype(jnp.float32).sum(), argnums=(0, 1))
        fwd_text = lowered_text(fwd, bsr.data, x)
        assert len(triton_calls(fwd_text)) == 1, fwd_text[:2000]
        grad_text = lowered_text(grad, bsr.data, x)
        assert len(triton_calls(grad_text)) == 3  # forward, A^T dY, block SDDMM
        for text in (fwd_text, grad_text):
            assert "tpu_custom_call" not in text

    def test_int8_lowers_to_triton(self):
        bsr = BlockSparseAdjacency.from_coo(make_adj("random", 32, seed=8), 32, reorder="rcm")
        x_q, scales = jnp.zeros((bsr.n_pad, 64), jnp.int8), jnp.ones((bsr.n_pad,), jnp.float32)
        text = lowered_text(lambda x_q, s: bsr_spmm_int8(bsr, x_q, s, interpret=False), x_q, scales)
        assert len(triton_calls(text)) == 1


@pytest.mark.skipif(not ON_GPU, reason="compiled Pallas Triton kernels need a GPU (jax.default_backend() == 'gpu')")
def test_f32_default_precision_is_tf32():
    """Outside `exact_f32_dots`, f32 tile dots run at JAX's default GPU precision (TF32 inputs, f32
    accumulation): relative error about 5e-4, never the 1e-2 of bf16."""
    adj = make_adj("random", 16, seed=7)
    bsr = BlockSparseAdjacency.from_coo(adj, 16, reorder="rcm")
    x = jax.random.normal(jax.random.key(7), (bsr.n_pad, 64), jnp.float32)
    with jax.default_matmul_precision("tensorfloat32"):
        out = bsr_spmm(bsr, x)
    with exact_f32_dots():
        want = bsr_spmm_reference(bsr, x)
    assert rel_err(out, want) < 3e-3
