"""Pallas CSR edge-chunk SpMM (`codesign.kernels.pallas_csr`) against segment_sum (interpret mode on
the CPU, compiled on a GPU), its gradients w.r.t. x and the edge values, int8 and bf16 features,
GCN scales folded, the host-side work items, and its Triton lowering for CUDA checked on the CPU.

Pattern of JAX's ``tests/pallas/gpu_ops_test.py``: one test class parameterized by ``INTERPRET``;
the compiled subclass only runs where ``jax.default_backend() == "gpu"``. Graphs keep one node and
edge count so the interpreter compiles each kernel a few times only (the whole file < 60 s on 2 cores).
"""

import dataclasses
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from codesign.kernels import CooAdjacency, aggregate, segment_spmm
from codesign.kernels.config import CsrBlockSizes
from codesign.kernels.pallas_csr import (CsrChunks, csr_chunk_spmm, csr_chunk_spmm_int8, csr_chunk_spmm_int8_reference,
                                         csr_chunk_spmm_reference, csr_chunks, gcn_scales, with_csr_chunks,
                                         work_item_stats)

from pallas_testing import ON_GPU, ExactF32Dots, lowered_text, rel_err, triton_calls  # noqa: E402

N_NODES, N_EDGES, F = 40, 192, 24
# small tiles so a 40-node graph has windows, split rows (a hub > max_item_edges) and empty items
SIZES = CsrBlockSizes(chunk=8, max_item_edges=16, max_item_rows=4, block_f=16, items_multiple=32)
PALLAS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_graph(seed: int, hub_fraction: float = 0.3, n_empty: int = 5, weighted: bool = True) -> CooAdjacency:
    """N_NODES nodes, N_EDGES edges: a ``hub_fraction`` of them into node 3 (a row longer than a
    chunk and than ``max_item_edges``), none into the last ``n_empty`` nodes (empty rows)."""
    rng = np.random.default_rng(seed)
    s = rng.integers(0, N_NODES, N_EDGES)
    r = rng.integers(0, N_NODES - n_empty, N_EDGES)
    r[: int(hub_fraction * N_EDGES)] = 3
    w = rng.normal(size=N_EDGES).astype(np.float32) if weighted else None
    return CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32),
                        None if w is None else jnp.asarray(w), N_NODES)


graphs = st.builds(make_graph, st.integers(0, 2 ** 16), st.sampled_from([0.0, 0.3, 0.6]), st.integers(0, 8))


class PallasCsrTest(ExactF32Dots):
    """Runs everywhere: the Pallas interpreter (on CPU) against segment_sum."""

    __test__ = True
    INTERPRET = True

    def setup_method(self):
        if not self.INTERPRET and not ON_GPU:
            pytest.skip("compiled Pallas Triton kernels need a GPU")
        super().setup_method()

    def spmm(self, chunks, x, values=None, **kw):
        return csr_chunk_spmm(chunks, x, values, interpret=self.INTERPRET, **kw)

    @PALLAS
    @given(adj=graphs, dtype=st.sampled_from(["float32", "bfloat16"]), seed=st.integers(0, 99))
    @example(adj=make_graph(0, hub_fraction=0.6), dtype="bfloat16", seed=0)
    def test_forward_matches_segment_sum(self, adj, dtype, seed):
        chunks = csr_chunks(adj, SIZES)
        x = jax.random.normal(jax.random.key(seed), (N_NODES, F), jnp.float32).astype(dtype)
        got = self.spmm(chunks, x, adj.edge_weight)
        assert got.shape == (N_NODES, F) and got.dtype == x.dtype
        want = segment_spmm(adj, x.astype(jnp.float32))
        assert rel_err(got, want) < (1e-5 if dtype == "float32" else 1e-2)
        deg = np.bincount(np.asarray(adj.receivers), minlength=N_NODES)
        np.testing.assert_array_equal(np.asarray(got)[deg == 0], 0)  # empty rows are written, as zeros

    @settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(adj=graphs, dtype=st.sampled_from(["float32", "bfloat16"]), seed=st.integers(0, 99))
    @example(adj=make_graph(0, hub_fraction=0.6), dtype="bfloat16", seed=0)  # always: bf16 with a split hub
    def test_gradients_match_segment_sum(self, adj, dtype, seed):
        chunks = csr_chunks(adj, SIZES)
        x = jax.random.normal(jax.random.key(seed), (N_NODES, F), jnp.float32)
        ct = jax.random.normal(jax.random.key(seed + 1), (N_NODES, F), jnp.float32)
        got = jax.grad(lambda x, w: jnp.vdot(self.spmm(chunks, x.astype(dtype), w).astype(jnp.float32), ct),
                       (0, 1))(x, adj.edge_weight)
        want = jax.grad(lambda x, w: jnp.vdot(segment_spmm(adj.with_weight(w), x), ct), (0, 1))(x, adj.edge_weight)
        for g, w in zip(got, want):  # bf16: x, dY and dX are rounded to 8 bits of mantissa
            assert g.shape == w.shape and rel_err(g, w) < (1e-5 if dtype == "float32" else 2e-2)

    @pytest.mark.parametrize("rows_per_step", [4])
    def test_rows_walked_together(self, rows_per_step):
        """Windows walked ``rows_per_step`` rows at a time (masked uneven rows), heavy rows as
        segments: values, GCN scales and both gradients."""
        sizes = dataclasses.replace(SIZES, rows_per_step=rows_per_step)
        adj = make_graph(11, hub_fraction=0.3, n_empty=6)
        chunks = csr_chunks(adj, sizes)
        x = jax.random.normal(jax.random.key(11), (N_NODES, F), jnp.float32)
        assert rel_err(self.spmm(chunks, x, adj.edge_weight), segment_spmm(adj, x)) < 1e-5
        rs, cs = gcn_scales(chunks)
        norm = adj.with_weight(rs[adj.receivers] * cs[adj.senders])
        assert rel_err(self.spmm(chunks, x, row_scale=rs, col_scale=cs), segment_spmm(norm, x)) < 1e-5
        ct = jnp.cos(x)
        got = jax.grad(lambda x, w: jnp.vdot(self.spmm(chunks, x, w), ct), (0, 1))(x, adj.edge_weight)
        want = jax.grad(lambda x, w: jnp.vdot(segment_spmm(adj.with_weight(w), x), ct), (0, 1))(x, adj.edge_weight)
        for g, w in zip(got, want):
            assert rel_err(g, w) < 1e-5

    def test_hub_is_split_and_items_are_bounded(self):
        adj = make_graph(1, hub_fraction=0.5)
        stats = work_item_stats(csr_chunks(adj, SIZES))
        assert stats["split_rows"] == 1 and stats["max_row_degree"] >= 96
        assert stats["max_item_edges"] < 2 * SIZES.max_item_edges and stats["empty_items"] >= 1

    def test_gcn_scales_folded(self):
        adj = make_graph(2, weighted=False)
        chunks = csr_chunks(adj, SIZES)
        rs, cs = gcn_scales(chunks)
        x = jax.random.normal(jax.random.key(2), (N_NODES, F), jnp.float32)
        norm = adj.with_weight(rs[adj.receivers] * cs[adj.senders])  # D^-1/2 A D^-1/2 per edge
        got = self.spmm(chunks, x, row_scale=rs, col_scale=cs)
        assert rel_err(got, segment_spmm(norm, x)) < 1e-5
        ct = jnp.cos(x)
        gx = jax.grad(lambda x: jnp.vdot(self.spmm(chunks, x, row_scale=rs, col_scale=cs), ct))(x)
        assert rel_err(gx, jax.grad(lambda x: jnp.vdot(segment_spmm(norm, x), ct))(x)) < 1e-5

    def test_int8_with_per_row_scales(self):
        adj = make_graph(3)
        chunks = csr_chunks(adj, SIZES)
        x = jax.random.normal(jax.random.key(3), (N_NODES, F), jnp.float32)
        scales = jnp.max(jnp.abs(x), axis=1) / 127.0
        x_q = jnp.clip(jnp.round(x / scales[:, None]), -127, 127).astype(jnp.int8)
        got = csr_chunk_spmm_int8(chunks, x_q, scales, adj.edge_weight, interpret=self.INTERPRET)
        assert got.dtype == jnp.float32
        want = csr_chunk_spmm_int8_reference(chunks, x_q, scales, adj.edge_weight)
        assert rel_err(got, want) < 1e-5
        assert rel_err(got, segment_spmm(adj, x)) < 2e-2  # int8 rounding only

    def test_aggregate_dispatch(self):
        adj = with_csr_chunks(make_graph(4), SIZES)
        x = jax.random.normal(jax.random.key(4), (N_NODES, F), jnp.float32)
        if not self.INTERPRET:
            assert aggregate(adj, x) is not None
        got = aggregate(adj, x, impl="pallas_csr")
        assert rel_err(got, segment_spmm(adj, x)) < 1e-5


@pytest.mark.skipif(not ON_GPU, reason="compiled Pallas Triton kernels need a GPU (jax.default_backend() == 'gpu')")
class PallasCsrGpuTest(PallasCsrTest):
    """The same cases compiled by Triton on a GPU."""

    INTERPRET = False


def test_reference_matches_segment_sum_with_scales():
    adj = make_graph(5)
    chunks = csr_chunks(adj, SIZES)
    x = jax.random.normal(jax.random.key(5), (N_NODES, F), jnp.float32)
    rs = jax.random.uniform(jax.random.key(6), (N_NODES,))
    cs = jax.random.uniform(jax.random.key(7), (N_NODES,))
    w = rs[adj.receivers] * adj.edge_weight * cs[adj.senders]
    got = csr_chunk_spmm_reference(chunks, x, adj.edge_weight, row_scale=rs, col_scale=cs)
    assert rel_err(got, segment_spmm(adj.with_weight(w), x)) < 1e-6


@settings(max_examples=40, deadline=None)
@given(degrees=st.lists(st.integers(0, 70), min_size=1, max_size=60), budget_chunks=st.integers(1, 4),
       rows=st.integers(1, 8))
def test_work_items_cover_every_edge_once(degrees, budget_chunks, rows):
    """Host-side partition: each edge in exactly one item, segments <= budget, windows < 2 budget,
    heavy rows' segments in contiguous slots."""
    n = len(degrees)
    r = np.repeat(np.arange(n), degrees)
    adj = CooAdjacency(jnp.asarray(r[::-1] % n, jnp.int32), jnp.asarray(r, jnp.int32), None, n)
    sizes = CsrBlockSizes(chunk=8, max_item_edges=8 * budget_chunks, max_item_rows=rows, items_multiple=4)
    plan = csr_chunks(adj, sizes).fwd
    items, indptr = np.asarray(plan.items), np.asarray(plan.indptr)
    covered = np.zeros(r.size, int)
    for row_lo, row_hi, e_lo, e_hi, slot in items:
        assert row_hi - row_lo <= rows
        if slot >= 0:
            assert row_hi == row_lo + 1 and 0 < e_hi - e_lo <= sizes.max_item_edges
        else:
            assert e_lo == indptr[row_lo] and e_hi == indptr[row_hi]
            assert e_hi - e_lo < 2 * sizes.max_item_edges
        covered[e_lo:e_hi] += 1
    np.testing.assert_array_equal(covered, 1)
    heavy = np.flatnonzero(np.asarray(degrees) > sizes.max_item_edges)
    np.testing.assert_array_equal(np.asarray(plan.split_rows)[:heavy.size], heavy)
    assert np.all(np.asarray(plan.split_rows)[heavy.size:] == n)
    slots = items[items[:, 4] >= 0]
    np.testing.assert_array_equal(slots[:, 4], np.arange(slots.shape[0]))


def test_auto_considers_the_csr_kernel_only_on_a_gpu():
    from codesign.kernels import auto_impl
    from codesign.kernels.api import candidates, device_preset, modeled_cost_s
    adj = with_csr_chunks(make_graph(10), SIZES)
    x = jnp.ones((N_NODES, F), jnp.float32)
    assert candidates(adj, x) == (("segment", "pallas_csr") if ON_GPU else ("segment",))
    costs = {c: modeled_cost_s(c, adj, x, device_preset()) for c in candidates(adj, x)}
    assert auto_impl(adj, x) == min(costs, key=costs.get)
    assert auto_impl(make_graph(10), x) == "segment"  # no CsrChunks attached


def test_empty_graph():
    adj = CooAdjacency(jnp.zeros((0,), jnp.int32), jnp.zeros((0,), jnp.int32), jnp.zeros((0,)), N_NODES)
    chunks = csr_chunks(adj, SIZES)
    x = jnp.ones((N_NODES, F), jnp.float32)
    np.testing.assert_array_equal(csr_chunk_spmm(chunks, x, adj.edge_weight, interpret=True), 0)


def test_errors_name_the_field():
    adj = make_graph(6)
    chunks = csr_chunks(adj, SIZES)
    x = jnp.ones((N_NODES, F), jnp.float32)
    with pytest.raises(ValueError, match="CsrBlockSizes.chunk must be a power of two"):
        CsrBlockSizes(chunk=12)
    with pytest.raises(ValueError, match="CsrBlockSizes.max_item_edges must be a positive multiple of chunk=16"):
        CsrBlockSizes(max_item_edges=40)
    with pytest.raises(ValueError, match="CsrBlockSizes.rows_per_step must be a power of two >= 1"):
        CsrBlockSizes(rows_per_step=3)
    with pytest.raises(ValueError, match="CsrBlockSizes.max_item_rows must be an int >= 1"):
        CsrBlockSizes(max_item_rows=0)
    with pytest.raises(TypeError, match="csr_chunks: adj must be a CooAdjacency"):
        csr_chunks("graph")
    with pytest.raises(TypeError, match="csr_chunks: sizes must be a CsrBlockSizes"):
        csr_chunks(adj, sizes=16)
    with pytest.raises(TypeError, match="chunks must be a CsrChunks"):
        csr_chunk_spmm(adj, x)
    with pytest.raises(ValueError, match=r"x must be \[n_nodes=40, F\]"):
        csr_chunk_spmm(chunks, x[1:])
    with pytest.raises(TypeError, match="x.dtype must be one of"):
        csr_chunk_spmm(chunks, x.astype(jnp.int8))
    with pytest.raises(ValueError, match=r"values must be float \[E=192\]"):
        csr_chunk_spmm(chunks, x, adj.edge_weight[1:])
    with pytest.raises(ValueError, match=r"row_scale must be \[n_nodes=40\]"):
        csr_chunk_spmm(chunks, x, row_scale=jnp.ones(3))
    with pytest.raises(ValueError, match=r"col_scale must be \[n_nodes=40\]"):
        csr_chunk_spmm_int8(chunks, x.astype(jnp.int8), jnp.ones(3))
    with pytest.raises(ValueError, match="impl 'pallas_csr' needs a CsrChunks"):
        aggregate(adj, x, impl="pallas_csr")
    assert isinstance(with_csr_chunks(adj, SIZES).pattern, CsrChunks)
    other = with_csr_chunks(make_graph(7), dataclasses.replace(SIZES))
    with pytest.raises(ValueError, match="attached CsrChunks has 40 nodes / 192 edges, adj has 40 / 191"):
        aggregate(CooAdjacency(adj.senders[1:], adj.receivers[1:], None, N_NODES, other.pattern), x[:, :4],
                  impl="pallas_csr")


class TritonLoweringTest:
    """Lowers the kernels for CUDA on any host: the Triton path builds, with the expected calls."""

    __test__ = True

    @pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
    def test_forward_and_grad_lower_to_triton(self, dtype):
        adj = make_graph(8, hub_fraction=0.4)
        chunks = csr_chunks(adj, SIZES)
        assert chunks.n_slots > 0 and chunks.t_n_slots == 0  # the hub is a receiver, not a sender
        x = jnp.zeros((N_NODES, F), dtype)

        def fwd(x, w):
            return csr_chunk_spmm(chunks, x, w, interpret=False)

        fwd_text = lowered_text(fwd, x, adj.edge_weight)
        assert len(triton_calls(fwd_text)) == 2, fwd_text[:2000]  # kernel + split-row combine
        grad = jax.grad(lambda x, w: (fwd(x, w).astype(jnp.float32) ** 2).sum(), argnums=(0, 1))
        grad_text = lowered_text(grad, x, adj.edge_weight)
        # forward (2), A^T dY (1: no split rows in A^T), SDDMM (1)
        assert len(triton_calls(grad_text)) == 4
        assert {"csr_spmm", "csr_spmm_combine", "csr_spmm_t", "csr_sddmm"} <= set(re.findall(r"csr_\w+", grad_text))
        assert "tpu_custom_call" not in grad_text

    def test_rows_walked_together_lower_to_triton(self):
        chunks = csr_chunks(make_graph(12, hub_fraction=0.0), dataclasses.replace(SIZES, rows_per_step=4))
        x = jnp.zeros((N_NODES, F), jnp.bfloat16)
        grad = jax.grad(lambda x: csr_chunk_spmm(chunks, x, interpret=False).astype(jnp.float32).sum())
        assert len(triton_calls(lowered_text(grad, x))) == 1  # A^T dY only (unweighted: no SDDMM)

    def test_int8_and_gcn_lower_to_triton(self):
        chunks = csr_chunks(make_graph(9, hub_fraction=0.0), SIZES)
        rs, cs = gcn_scales(chunks)
        text = lowered_text(lambda x_q, s: csr_chunk_spmm_int8(chunks, x_q, s * cs, row_scale=rs, interpret=False),
                            jnp.zeros((N_NODES, 64), jnp.int8), jnp.ones((N_NODES,), jnp.float32))
        assert len(triton_calls(text)) == 1
        text = lowered_text(lambda x: csr_chunk_spmm(chunks, x, row_scale=rs, col_scale=cs, interpret=False),
                            jnp.zeros((N_NODES, 64), jnp.float32))
        assert len(triton_calls(text)) == 1
