"""Pallas condensed row-window SpMM (TC-GNN format) against the XLA references (interpret mode on
CPU, compiled on GPU), its gradients, its Triton lowering for CUDA checked on the CPU, and the
BSR / condensed format chooser.

Same pattern as ``tests/test_pallas_spmm.py``: one test class parameterized by ``INTERPRET``; the
compiled variant is a subclass that only runs where ``jax.default_backend() == "gpu"``.
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from codesign.kernels import (BlockSizes, CondensedRowWindows, CooAdjacency, aggregate,
                              condensed_spmm, condensed_spmm_reference, segment_spmm)



from pallas_testing import ON_GPU, ExactF32Dots, exact_f32_dots, lowered_text, rel_err, triton_calls  # noqa: E402


def make_adj(pattern: str, window: int, seed: int = 0, n_windows: int = 4) -> CooAdjacency:
    """A weighted COO graph over ``n = n_windows * B - 3`` nodes (last window padded).

    "random": uniform random edges.
    "empty_windows": random edges, but no receiver in windows 1 and 2 (empty row windows).
    "wide_window": random edges plus every node of window 0 receiving from every node: window 0
    has n distinct columns, so it spans ``ceil(n / K)`` tiles (the last one partial).
    "mixed": both: window 0 wide, windows 1 and 2 empty, random edges elsewhere.
    """
    rng = np.random.default_rng(seed)
    n = n_windows * window - 3
    e = 3 * n
    s, r = rng.integers(0, n, e), rng.integers(0, n, e)
    if pattern not in ("random", "empty_windows", "wide_window", "mixed"):
        raise ValueError(pattern)
    if pattern in ("empty_windows", "mixed"):
        r = np.where((r // window == 1) | (r // window == 2), r % window, r)
    if pattern in ("wide_window", "mixed"):
        rows, cols = np.meshgrid(np.arange(window), np.arange(n), indexing="ij")
        s, r = np.concatenate([s, cols.ravel()]), np.concatenate([r, rows.ravel()])
    w = rng.normal(size=s.shape).astype(np.float32)
    return CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32), jnp.asarray(w), n)


def make_cw(pattern: str, window: int, k=None, seed: int = 0) -> tuple[CooAdjacency, CondensedRowWindows]:
    adj = make_adj(pattern, window, seed)
    return adj, CondensedRowWindows.from_coo(adj, window=window, k=k, reorder="rcm" if pattern == "random" else None)


class PallasCondensedTest(ExactF32Dots):
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
        return condensed_spmm(adj, x, interpret=self.INTERPRET, **kw)

    @pytest.mark.parametrize("pattern,window,n_features", [
        ("mixed", 16, 16), ("mixed", 16, 64), ("mixed", 32, 16), ("mixed", 32, 64),
        ("random", 16, 64), ("random", 32, 16)])
    def test_f32_matches_segment_and_reference(self, pattern, window, n_features):
        # "mixed": empty windows and a window spanning several tiles; "random": RCM-reordered.
        adj, cw = make_cw(pattern, window)
        per_window = np.diff(np.asarray(cw.win_ptr))
        if pattern == "mixed":
            assert (per_window[1:3] == 0).all()
            assert per_window[0] == -(-adj.n_nodes // window) >= 3
            assert not np.asarray(cw.col_mask)[cw.win_ptr[1] - 1].all()  # partial last tile
        x = jax.random.normal(jax.random.key(window + n_features), (adj.n_nodes, n_features), jnp.float32)
        xp = cw.permute_features(x)
        with jax.default_matmul_precision("highest"):
            out = self.spmm(cw, xp)
            want_seg = segment_spmm(adj, x)
            want_ref = condensed_spmm_reference(cw, xp)
        assert out.shape == (cw.n_pad, n_features) and out.dtype == jnp.float32
        np.testing.assert_array_equal(out[adj.n_nodes:], 0)  # padding rows stay zero
        np.testing.assert_allclose(cw.unpermute(out), want_seg, rtol=1e-5, atol=self.ATOL)
        np.testing.assert_allclose(out, want_ref, rtol=1e-5, atol=self.ATOL)

    @pytest.mark.parametrize("n_features,block_sizes", [(80, BlockSizes()), (5, BlockSizes(block_f=16))])
    def test_feature_padding_and_k_wider_than_window(self, n_features, block_sizes):
        # F = 80: padded to 128 inside (block_f 64), sliced back; F = 5 -> 16. Tiles are 16 x 32.
        adj, cw = make_cw("wide_window", 16, k=32, seed=1)
        assert cw.tile_data.shape[1:] == (16, 32)
        x = jax.random.normal(jax.random.key(1), (cw.n_pad, n_features), jnp.float32)
        with jax.default_matmul_precision("highest"):
            want = cw.to_dense() @ x
            out = self.spmm(cw, x, block_sizes=block_sizes)
        assert out.shape == x.shape
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=self.ATOL)

    @pytest.mark.parametrize("window", [16, 32])
    def test_bf16(self, window):
        _, cw = make_cw("wide_window", window, seed=2)
        x = jax.random.normal(jax.random.key(2), (cw.n_pad, 64), jnp.float32)
        out = self.spmm(cw, x.astype(jnp.bfloat16))
        assert out.dtype == jnp.bfloat16
        with jax.default_matmul_precision("highest"):
            want = cw.to_dense() @ x
        assert rel_err(out.astype(jnp.float32), want) < 2e-2
        if window != 16:
            return  # the bf16 backward once is enough
        d_x = jax.jit(jax.grad(lambda x: jnp.sum(self.spmm(cw, x).astype(jnp.float32) ** 2)))(x.astype(jnp.bfloat16))
        with jax.default_matmul_precision("highest"):
            want_dx = cw.to_dense().T @ (2 * want)
        assert d_x.dtype == jnp.bfloat16 and rel_err(d_x.astype(jnp.float32), want_dx) < 2e-2

    @pytest.mark.parametrize("window,k,pattern", [(16, 16, "wide_window"), (32, 32, "random"),
                                                  (16, 32, "empty_windows")])
    def test_grads_match_reference(self, window, k, pattern):
        _, cw = make_cw(pattern, window, k=k, seed=5)
        k1, k2, k3 = jax.random.split(jax.random.key(5), 3)
        x = jax.random.normal(k1, (cw.n_pad, 48), jnp.float32)
        probe = jax.random.normal(k2, (cw.n_pad, 48), jnp.float32)
        # Non-zero values on tile entries without an edge too (reachable through with_data): the
        # slot-window backward covers every stored entry, so dX = A^T dY must still hold.
        data = cw.tile_data + jax.random.normal(k3, cw.tile_data.shape, jnp.float32)
        assert int(np.count_nonzero(np.asarray(data))) > int(np.asarray(cw.tile_nnz).sum())

        def loss(spmm):
            return lambda d, x: jnp.sum(jnp.sin(spmm(cw.with_data(d), x)) * probe)

        grad = jax.jit(jax.grad(loss(self.spmm), argnums=(0, 1)))
        with jax.default_matmul_precision("highest"):
            d_data, d_x = grad(data, x)
            want_data, want_x = jax.grad(loss(condensed_spmm_reference), argnums=(0, 1))(data, x)
        np.testing.assert_allclose(d_x, want_x, rtol=1e-5, atol=self.ATOL)
        np.testing.assert_allclose(d_data, want_data, rtol=1e-5, atol=1e-4)
        np.testing.assert_array_equal(np.asarray(d_data)[~np.asarray(cw.col_mask)[:, None, :]
                                                         .repeat(window, 1)], 0)  # padding columns
        # Deterministic: no atomics, the same bits on every run.
        with jax.default_matmul_precision("highest"):
            d_data2, d_x2 = grad(data, x)
        np.testing.assert_array_equal(d_x, d_x2)
        np.testing.assert_array_equal(d_data, d_data2)

    def test_check_grads(self):
        _, cw = make_cw("empty_windows", 16, seed=4)
        x = jax.random.normal(jax.random.key(4), (cw.n_pad, 16), jnp.float32)
        with jax.default_matmul_precision("highest"):
            check_grads(lambda d, x: self.spmm(cw.with_data(d), x), (cw.tile_data, x), order=1, modes=("rev",),
                        atol=1e-2, rtol=1e-2)

    def test_no_tiles(self):
        adj = CooAdjacency(jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.int32), None, 20)
        cw = CondensedRowWindows.from_coo(adj, 16)
        x = jnp.ones((cw.n_pad, 16), jnp.float32)
        np.testing.assert_array_equal(self.spmm(cw, x), 0)
        d_data, d_x = jax.grad(lambda d, x: self.spmm(cw.with_data(d), x).sum(), argnums=(0, 1))(cw.tile_data, x)
        assert d_data.shape == (0, 16, 16)
        np.testing.assert_array_equal(d_x, 0)

    def test_errors(self):
        adj = make_adj("random", 16)
        cw8 = CondensedRowWindows.from_coo(adj, window=8)
        with pytest.raises(ValueError, match="window and k"):
            self.spmm(cw8, jnp.zeros((cw8.n_pad, 16)))
        cw = CondensedRowWindows.from_coo(adj, window=16)
        with pytest.raises(ValueError, match=r"x must be \[n_pad=64, F\]"):
            self.spmm(cw, jnp.zeros((cw.n_nodes, 16)))
        with pytest.raises(ValueError, match="x.dtype"):
            self.spmm(cw, jnp.zeros((cw.n_pad, 16), jnp.int32))
        with pytest.raises(ValueError, match="slot windows"):
            self.spmm(cw.__class__(*[getattr(cw, f) for f in ("win_ptr", "tile_window", "tile_cols", "col_mask",
                                                               "tile_data", "tile_nnz", "perm", "inv_perm")],
                                   n_nodes=cw.n_nodes, window=16, k=16), jnp.zeros((cw.n_pad, 16)))
        with pytest.raises(ValueError, match="with_data"):
            cw.with_data(cw.tile_data[:1])


@pytest.mark.skipif(not ON_GPU, reason="compiled Pallas Triton kernels need a GPU (jax.default_backend() == 'gpu')")
class PallasCondensedGpuTest(PallasCondensedTest):
    """The same cases compiled through Triton on the GPU. The f32 sums come out in another order
    than XLA's reference (and with fused multiply-adds): on sums of up to ~100 terms of magnitude
    ~10 that moves a few elements by up to 6e-5 (measured on an H100), hence ``ATOL = 1e-4``."""

    INTERPRET = False
    ATOL = 1e-4


def test_slot_windows_cover_every_stored_column():
    _, cw = make_cw("wide_window", 16, seed=8)
    slots, rows = np.asarray(cw.t_slots), np.asarray(cw.t_rows)
    real = slots >= 0
    assert ((rows >= 0) == real).all()
    np.testing.assert_array_equal(np.sort(slots[real]), np.flatnonzero(np.asarray(cw.col_mask).ravel()))
    node_window = np.repeat(np.arange(cw.n_windows), np.diff(np.asarray(cw.t_win_ptr)))
    nodes = np.asarray(cw.tile_cols).ravel()[slots[real]]
    np.testing.assert_array_equal(nodes, np.broadcast_to(node_window[:, None], slots.shape)[real] * 16 + rows[real])


@exact_f32_dots()
def test_aggregate_dispatch():
    adj, cw = make_cw("random", 16)
    x = jax.random.normal(jax.random.key(9), (adj.n_nodes, 64), jnp.float32)
    xp = cw.permute_features(x)
    with jax.default_matmul_precision("highest"):
        want = segment_spmm(adj, x)
        for impl in ("auto", "condensed_xla", "pallas"):
            got = cw.unpermute(aggregate(cw, xp, impl=impl))
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=impl)
    with pytest.raises(ValueError, match="unknown impl 'bsr_xla' for CondensedRowWindows"):
        aggregate(cw, xp, impl="bsr_xla")
    with pytest.raises(ValueError, match=r"x must be \[n_pad=64, F\]"):
        aggregate(cw, x, impl="condensed_xla")


class TritonLoweringTest:
    """Lowers the kernels for CUDA on any host: proves the Triton path builds (no scalar prefetch)."""

    __test__ = True

    @pytest.mark.parametrize("window,k", [(16, 16), (32, 32), (16, 32)])
    @pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
    def test_forward_and_grad_lower_to_triton(self, window, k, dtype):
        _, cw = make_cw("wide_window", window, k=k, seed=10)
        x = jnp.zeros((cw.n_pad, 80), dtype)

        def fwd(d, x):
            return condensed_spmm(cw.with_data(d), x, interpret=False)

        grad = jax.grad(lambda d, x: fwd(d, x).astype(jnp.float32).sum(), argnums=(0, 1))
        fwd_text = lowered_text(fwd, cw.tile_data, x)
        assert len(triton_calls(fwd_text)) == 1, fwd_text[:2000]
        grad_text = lowered_text(grad, cw.tile_data, x)
        assert len(triton_calls(grad_text)) == 4  # forward, tile^T dY, slot-window sum, SDDMM
        for text in (fwd_text, grad_text):
            assert "tpu_custom_call" not in text


@pytest.mark.skipif(not ON_GPU, reason="compiled Pallas Triton kernels need a GPU (jax.default_backend() == 'gpu')")
def test_f32_default_precision_is_tf32():
    """Outside `exact_f32_dots`, f32 dots run at JAX's default GPU precision (TF32 inputs, f32
    accumulation): relative error about 5e-4, never the 1e-2 of bf16."""
    adj, cw = make_cw("random", 16)
    x = jax.random.normal(jax.random.key(7), (adj.n_nodes, 64), jnp.float32)
    with jax.default_matmul_precision("tensorfloat32"):
        out = cw.unpermute(condensed_spmm(cw, cw.permute_features(x)))
    with exact_f32_dots():
        want = segment_spmm(adj, x)
    assert rel_err(out, want) < 3e-3
