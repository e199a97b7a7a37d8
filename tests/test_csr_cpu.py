"""scipy CSR backend (`codesign.kernels.csr_cpu`) against the segment_sum reference: structure,
values, gradients (including the SDDMM for edge values), multi-head form, dispatch, errors, and
the GCN / GAT models run through it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from flax import nnx
from jax.test_util import check_grads

from codesign.kernels import CooAdjacency, CsrPattern, aggregate, csr_pattern, csr_spmm, segment_spmm, with_csr_pattern
from codesign.kernels import csr_cpu
from codesign.kernels.api import callback_overhead_s, device_preset, modeled_cost_s
from codesign.kernels.csr_cpu import csr_aggregate
from codesign.models import GAT, GCN

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="host CPU backend")


def random_adj(key, n, e, weighted=True, empty_rows=()):
    ks, kr, kw = jax.random.split(key, 3)
    senders = jax.random.randint(ks, (e,), 0, n)
    receivers = jax.random.randint(kr, (e,), 0, n)
    for r in empty_rows:
        receivers = jnp.where(receivers == r, (r + 1) % n, receivers)
    w = jax.random.normal(kw, (e,)) if weighted else None
    return CooAdjacency(senders.astype(jnp.int32), receivers.astype(jnp.int32), w, n)


def simple_adj(key, n, e):
    """No self-loops (the models append them)."""
    adj = random_adj(key, n, e, weighted=False)
    keep = np.asarray(adj.senders != adj.receivers)
    return CooAdjacency(adj.senders[keep], adj.receivers[keep], None, n)


@pytest.mark.parametrize("self_loops", [False, True])
def test_pattern_is_the_csr_of_the_edge_list(getkey, self_loops):
    adj = random_adj(getkey(), 23, 90, weighted=False, empty_rows=(3,))
    p = csr_pattern(adj.senders, adj.receivers, adj.n_nodes, self_loops=self_loops)
    s, r = np.asarray(adj.senders), np.asarray(adj.receivers)
    if self_loops:
        s, r = np.concatenate([s, np.arange(23)]), np.concatenate([r, np.arange(23)])
    w = np.arange(1, s.size + 1, dtype=np.float64)  # distinct values identify entries
    h = p.host
    a = sp.csr_matrix((w[np.asarray(p.perm)], np.asarray(p.indices), h.indptr), shape=(23, 23))
    np.testing.assert_array_equal(a.toarray(), sp.coo_matrix((w, (r, s)), shape=(23, 23)).toarray())
    np.testing.assert_array_equal(np.asarray(p.rows), r[np.asarray(p.perm)])
    assert np.all(np.diff(np.asarray(p.rows)) >= 0)
    at = sp.csr_matrix((w[np.asarray(p.perm)][h.t_perm], h.t_indices, h.t_indptr), shape=(23, 23))
    np.testing.assert_array_equal(at.toarray(), a.T.toarray())
    np.testing.assert_array_equal(h.indices, np.asarray(p.indices))
    np.testing.assert_array_equal(h.rows, np.asarray(p.rows))
    assert h.indptr[3] == h.indptr[4] or self_loops  # row 3 is empty without self-loops


@pytest.mark.parametrize("self_loops", [False, True])
def test_symmetric_structure_stores_the_transpose_once(getkey, self_loops):
    """An undirected edge list (both directions of every edge): Aᵀ's CSR structure is A's, held as
    the same array; the backward pass through it (values not symmetric) equals segment_sum's.
    A directed list keeps its own transposed structure."""
    directed = simple_adj(getkey(), 40, 150)
    s, r = np.asarray(directed.senders), np.asarray(directed.receivers)
    sym = CooAdjacency(jnp.asarray(np.concatenate([s, r])), jnp.asarray(np.concatenate([r, s])), None, 40)
    h = csr_pattern(sym.senders, sym.receivers, 40, self_loops=self_loops).host
    assert h.t_indices is h.indices and np.array_equal(h.t_indptr, h.indptr)
    h_dir = csr_pattern(directed.senders, directed.receivers, 40, self_loops=self_loops).host
    assert h_dir.t_indices is not h_dir.indices
    w = jax.random.normal(getkey(), (sym.senders.shape[0],))  # asymmetric values: data[t_perm] matters
    x = jax.random.normal(getkey(), (40, 7))
    cadj = with_csr_pattern(sym)
    loss = lambda fn: lambda x, w: jnp.sum(jnp.sin(fn(x, w)))
    got = jax.grad(loss(lambda x, w: csr_aggregate(cadj, x, w)), (0, 1))(x, w)
    want = jax.grad(loss(lambda x, w: segment_spmm(sym.with_weight(w), x)), (0, 1))(x, w)
    for g, ref in zip(got, want):
        np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n,e,f,weighted", [(1, 1, 1, True), (17, 60, 5, False), (64, 1000, 33, True)])
def test_values_match_segment(getkey, weighted, n, e, f):
    adj = random_adj(getkey(), n, e, weighted, empty_rows=(0,) if n > 1 else ())
    x = jax.random.normal(getkey(), (n, f))
    out = aggregate(with_csr_pattern(adj), x, impl="csr_scipy")
    np.testing.assert_allclose(out, segment_spmm(adj, x), rtol=1e-5, atol=1e-5)
    if n > 1:
        assert np.all(np.asarray(out[0]) == 0)


def test_gradients_match_segment_and_finite_differences(getkey):
    adj = random_adj(getkey(), 30, 150)
    cadj = with_csr_pattern(adj)
    x, w = jax.random.normal(getkey(), (30, 6)), adj.edge_weight
    check_grads(jax.jit(lambda x, w: csr_aggregate(cadj, x, w)), (x, w), order=1, modes=("rev",), atol=1e-2,
                rtol=1e-2)
    loss = lambda fn: lambda x, w: jnp.sum(jnp.sin(fn(x, w)))
    got = jax.jit(jax.grad(loss(lambda x, w: csr_aggregate(cadj, x, w)), (0, 1)))(x, w)
    want = jax.grad(loss(lambda x, w: segment_spmm(adj.with_weight(w), x)), (0, 1))(x, w)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    # one input differentiated at a time (the other's cotangent is skipped on the host)
    gx = jax.grad(loss(lambda x, w: csr_aggregate(cadj, x, w)))(x, w)
    gw = jax.grad(loss(lambda w, x: csr_aggregate(cadj, x, w)))(w, x)
    np.testing.assert_allclose(gx, want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(gw, want[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("self_loops", [False, True])
def test_structural_degree_is_the_summed_degree(getkey, self_loops):
    """`structural_degree`: the pattern's entries per row = the scatter-added degree of an unweighted
    graph (duplicate edges and existing self-loops counted, as segment_sum counts them); None for
    a weighted graph or a pattern of other entries; the GCN / mean normalizations built on it give
    the weights of the summed degrees."""
    from codesign.kernels import structural_degree
    from codesign.models.norm import gcn_normalize
    from codesign.models.sage import mean_adjacency
    adj = random_adj(getkey(), 31, 200, weighted=False, empty_rows=(4,))
    adj = CooAdjacency(jnp.concatenate([adj.senders, jnp.array([7, 7], jnp.int32)]),
                       jnp.concatenate([adj.receivers, jnp.array([7, 7], jnp.int32)]), None, 31)  # a self-loop, twice
    cadj = with_csr_pattern(adj, self_loops=self_loops)
    deg = np.bincount(np.asarray(adj.receivers), minlength=31) + (1 if self_loops else 0)
    np.testing.assert_array_equal(structural_degree(cadj, self_loops), deg)
    assert structural_degree(cadj, not self_loops) is None  # the pattern is of other entries
    assert structural_degree(cadj.with_weight(jnp.ones((adj.n_edges,))), self_loops) is None
    assert structural_degree(adj, self_loops) is None  # no pattern
    norm = gcn_normalize if self_loops else mean_adjacency
    np.testing.assert_allclose(norm(cadj).edge_weight, norm(adj).edge_weight, rtol=1e-6)


@pytest.mark.parametrize("direct", [True, False])
def test_sub_blocked_products_match_segment(getkey, monkeypatch, direct):
    """Row blocks cut into sub-blocks of a few entries (`_SPMM_CHUNK`; a row longer than a chunk
    is one sub-block of its own), scipy's kernel writing into the output (``direct``) or through
    ``csr_matrix @ x``: values and both gradients (the backward's permuted values) as segment_sum's."""
    monkeypatch.setattr(csr_cpu, "_SPMM_CHUNK", 7)
    if not direct:
        monkeypatch.setattr(csr_cpu, "_csr_matvecs", None)
    adj = random_adj(getkey(), 40, 400, empty_rows=(5, 6))
    cadj = with_csr_pattern(adj)
    x, w = jax.random.normal(getkey(), (40, 6)), adj.edge_weight
    np.testing.assert_allclose(csr_aggregate(cadj, x, w), segment_spmm(adj, x), rtol=1e-5, atol=1e-5)
    loss = lambda fn: lambda x, w: jnp.sum(jnp.sin(fn(x, w)))
    got = jax.jit(jax.grad(loss(lambda x, w: csr_aggregate(cadj, x, w)), (0, 1)))(x, w)
    want = jax.grad(loss(lambda x, w: segment_spmm(adj.with_weight(w), x)), (0, 1))(x, w)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_multi_head_matches_per_head_segment(getkey):
    adj = random_adj(getkey(), 25, 120, weighted=False, empty_rows=(2,))
    p = csr_pattern(adj.senders, adj.receivers, 25)
    heads, f = 3, 4
    alpha = jax.random.uniform(getkey(), (adj.n_edges, heads))  # COO order
    x = jax.random.normal(getkey(), (25, heads, f))

    def ours(alpha, x):
        return csr_spmm(p, alpha[p.perm], x)

    def ref(alpha, x):
        return jnp.stack([segment_spmm(adj.with_weight(alpha[:, h]), x[:, h]) for h in range(heads)], 1)

    loss = lambda fn: jax.jit(jax.value_and_grad(lambda a, x: jnp.sum(jnp.cos(fn(a, x))), (0, 1)))
    (v, got), (v_ref, want) = loss(ours)(alpha, x), loss(ref)(alpha, x)
    np.testing.assert_allclose(v, v_ref, rtol=1e-5)
    for g, r in zip(got, want):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("batched", ["data", "x", "both", "nested"])
@pytest.mark.parametrize("heads", [None, 2])
@pytest.mark.parametrize("host_call", ["direct", "pure_callback"])
def test_vmap_is_one_host_call_equal_to_a_loop(getkey, monkeypatch, batched, heads, host_call):
    """``jax.vmap`` over the values, the features or both gives what a Python loop of unbatched
    calls gives, in values and in both gradients, with one host call per product (forward) and
    one per backward, not one per batch element. "nested": two vmaps, values batched on the outer
    axis and features on the inner one. Both host calls: the copy-free primitive (this JAX has
    its internal) and `jax.pure_callback`, the fallback."""
    assert csr_cpu._HOST_CALL is not None  # this JAX: the copy-free path is the one that runs
    if host_call == "pure_callback":
        monkeypatch.setattr(csr_cpu, "_HOST_CALL", None)
    calls = {"spmm": 0, "bwd": 0}
    spmm_host, bwd_host = csr_cpu._spmm_host, csr_cpu._bwd_host
    monkeypatch.setattr(csr_cpu, "_spmm_host", lambda *a: calls.__setitem__("spmm", calls["spmm"] + 1) or spmm_host(*a))
    monkeypatch.setattr(csr_cpu, "_bwd_host", lambda *a: calls.__setitem__("bwd", calls["bwd"] + 1) or bwd_host(*a))
    n, e, f, b, b2 = 21, 80, 3, 3, 2
    adj = random_adj(getkey(), n, e, empty_rows=(4,))
    p = csr_pattern(adj.senders, adj.receivers, n)
    hs = () if heads is None else (heads,)
    data = jax.random.normal(getkey(), (b, e, *hs))
    x = jax.random.normal(getkey(), (b2 if batched == "nested" else b, n, *hs, f))
    cot = jax.random.normal(getkey(), (b, b2, n, *hs, f) if batched == "nested" else (b, n, *hs, f))
    data_axis, x_axis = {"data": (0, None), "x": (None, 0), "both": (0, 0), "nested": (0, 0)}[batched]
    d_in = data if data_axis == 0 else data[0]
    x_in = x if x_axis == 0 else x[0]

    def one(d, xx):
        return csr_spmm(p, d, xx)

    if batched == "nested":
        batched_fn = lambda d, xx: jax.vmap(lambda di: jax.vmap(lambda xj: one(di, xj))(xx))(d)
        loop = lambda d, xx: jnp.stack([jnp.stack([one(d[i], xx[j]) for j in range(b2)]) for i in range(b)])
    else:
        batched_fn = jax.vmap(one, in_axes=(data_axis, x_axis))
        loop = lambda d, xx: jnp.stack([one(d[i] if data_axis == 0 else d, xx[i] if x_axis == 0 else xx)
                                        for i in range(b)])
    loss = lambda fn: jax.jit(jax.value_and_grad(lambda d, xx: jnp.sum(cot * jnp.sin(fn(d, xx))), (0, 1)))
    want_prim = "codesign_host_call" if host_call == "direct" else "pure_callback"
    assert want_prim in str(jax.make_jaxpr(batched_fn)(d_in, x_in))
    got_v, got_g = loss(batched_fn)(d_in, x_in)
    assert calls == {"spmm": 2, "bwd": 1}  # the forward's product and the backward's Aᵀ·dY inside its one call
    want_v, want_g = loss(loop)(d_in, x_in)
    np.testing.assert_allclose(got_v, want_v, rtol=1e-5)
    for u, v in zip(got_g, want_g):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(jax.jit(batched_fn)(d_in, x_in), loop(d_in, x_in), rtol=1e-5, atol=1e-6)


def test_one_thread_and_many_agree(getkey, monkeypatch):
    adj = with_csr_pattern(random_adj(getkey(), 200, 3000))
    x = jax.random.normal(getkey(), (200, 3, 5))
    w = jax.random.normal(getkey(), (adj.n_edges, 3))
    fn = jax.jit(jax.grad(lambda w, x: jnp.sum(csr_aggregate(adj, x, w) ** 2), (0, 1)))  # threads read at run time
    many = fn(w, x)
    monkeypatch.setenv("CODESIGN_CSR_THREADS", "1")
    one = fn(w, x)
    for a, b in zip(many, one):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_auto_runs_csr_where_the_model_prices_it_lower(getkey, monkeypatch):
    calls = []
    spmm_host = csr_cpu._spmm_host
    monkeypatch.setattr(csr_cpu, "_spmm_host", lambda *a: calls.append(1) or spmm_host(*a))
    hw = device_preset()
    big = with_csr_pattern(random_adj(getkey(), 1000, 20000))
    x = jax.random.normal(getkey(), (1000, 64))
    small = with_csr_pattern(random_adj(getkey(), 10, 30))
    assert callback_overhead_s() > 0  # the measured record: a callback costs more than a 10-node product
    assert modeled_cost_s("csr_scipy", small, x[:10], hw) > modeled_cost_s("segment", small, x[:10], hw)
    aggregate(small, x[:10])
    assert not calls
    # a preset without scipy's per-row cost prices CSR below segment_sum (no message buffer) ...
    monkeypatch.setattr("codesign.kernels.api.device_preset", lambda: hw.replace(row_overhead_s=0.0))
    monkeypatch.setattr("codesign.kernels.api.callback_overhead_s", lambda: 0.0)
    np.testing.assert_allclose(aggregate(big, x), aggregate(big, x, impl="segment"), rtol=1e-4, atol=1e-4)
    assert len(calls) == 1  # the "auto" call ran scipy; the other segment_sum
    # ... one with a millisecond per row does not
    monkeypatch.setattr("codesign.kernels.api.device_preset", lambda: hw.replace(row_overhead_s=1e-3))
    aggregate(big, x)
    assert len(calls) == 1
    jax.vmap(lambda x: aggregate(small, x, impl="csr_scipy"))(jnp.stack([x[:10], 2 * x[:10]]))  # batching works
    assert len(calls) == 2  # one host call for the batch


def test_errors_name_the_field(getkey):
    adj = random_adj(getkey(), 10, 30)
    cadj = with_csr_pattern(adj)
    x = jax.random.normal(getkey(), (10, 2))
    with pytest.raises(ValueError, match="with_csr_pattern"):
        aggregate(adj, x, impl="csr_scipy")
    with pytest.raises(ValueError, match="needs block structure"):
        aggregate(cadj, x, impl="bsr_xla")
    with pytest.raises(ValueError, match="self_loops"):
        aggregate(with_csr_pattern(adj, self_loops=True), x, impl="csr_scipy")
    with pytest.raises(ValueError, match="csr_spmm: data must be"):
        csr_spmm(cadj.pattern, jnp.ones((29,)), x)
    with pytest.raises(ValueError, match="csr_spmm: x must be float32"):
        csr_spmm(cadj.pattern, jnp.ones((30,)), x.astype(jnp.bfloat16))
    with pytest.raises(ValueError, match=r"csr_spmm: x must be \[n_nodes=10"):
        csr_spmm(cadj.pattern, jnp.ones((30,)), x[:4])
    with pytest.raises(ValueError, match="csr_pattern: senders/receivers must lie in"):
        csr_pattern(np.array([0, 12]), np.array([1, 2]), 10)
    with pytest.raises(ValueError, match="csr_pattern: n_nodes"):
        csr_pattern(np.array([0]), np.array([1]), 0)
    with pytest.raises(ValueError, match="csr_pattern: senders must be integers"):
        csr_pattern(np.array([0.5]), np.array([1]), 3)
    assert isinstance(cadj.pattern, CsrPattern)


def _prefer_csr(monkeypatch):
    """A preset on which scipy's CSR kernel is the cheaper backend even on a tiny graph (no
    per-row or per-callback cost), so that ``impl="auto"`` takes the CSR paths."""
    hw = device_preset().replace(row_overhead_s=0.0)
    monkeypatch.setattr("codesign.kernels.api.device_preset", lambda: hw)
    monkeypatch.setattr("codesign.kernels.api.callback_overhead_s", lambda: 0.0)


def _grads_close(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(u, v, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("model_cls,kw,edge_mask", [(GCN, {"impl": "csr_scipy"}, True), (GAT, {"heads": 2}, False),
                                                    (GAT, {"heads": 2}, True)])
def test_models_match_the_reference_path(getkey, monkeypatch, model_cls, kw, edge_mask):
    """Eval mode (no dropout, deterministic gates): the CSR path gives the values and parameter
    (and gate-logit) gradients of the segment / reference path (GAT without an edge mask: of the
    fused `gat_aggregate` reference; with one: of the head-expanded edge path)."""
    _prefer_csr(monkeypatch)
    adj = simple_adj(getkey(), 40, 200)
    cadj = with_csr_pattern(adj, self_loops=True)
    x = jax.random.uniform(getkey(), (40, 12))
    make = lambda **more: model_cls(12, 8, 3, n_edges=adj.n_edges if edge_mask else None, rngs=nnx.Rngs(0), **more)
    m_csr, m_ref = make(**kw), make(**{k: v for k, v in kw.items() if k != "impl"})  # same init
    m_csr.eval(), m_ref.eval()
    value_and_grad = nnx.jit(nnx.value_and_grad(lambda m, a: jnp.sum(jnp.tanh(m(x, a)))))
    (v_csr, g_csr), (v_ref, g_ref) = value_and_grad(m_csr, cadj), value_and_grad(m_ref, adj)
    np.testing.assert_allclose(v_csr, v_ref, rtol=1e-5)
    for u, v in zip(jax.tree.leaves(g_csr), jax.tree.leaves(g_ref)):
        np.testing.assert_allclose(u, v, rtol=2e-4, atol=2e-5)


def test_gat_training_path_runs_through_scipy(getkey, monkeypatch):
    calls = []
    bwd_host = csr_cpu._bwd_host
    monkeypatch.setattr(csr_cpu, "_bwd_host", lambda *a: calls.append(a[1]) or bwd_host(*a))
    _prefer_csr(monkeypatch)
    adj = simple_adj(getkey(), 30, 120)
    cadj = with_csr_pattern(adj, self_loops=True)
    m = GAT(6, 4, 3, heads=2, dropout=0.5, rngs=nnx.Rngs(0))  # training: attention dropout active
    x = jax.random.uniform(getkey(), (30, 6))
    grads = nnx.jit(nnx.grad(lambda m, a: jnp.sum(m(x, a) ** 2)))(m, cadj)
    assert all(bool(jnp.isfinite(g).all()) for g in jax.tree.leaves(grads))
    assert calls == [True, True]  # attention gradients of both layers came from the host SDDMM
    with pytest.raises(ValueError, match="self_loops=True"):
        m(x, with_csr_pattern(adj))
