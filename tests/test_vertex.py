"""Vertex programs (`codesign.vertex`): the conv layers of `codesign.models` run their vertex
program (GCN, SAGE, GIN, APPNP, R-GCN through the injected aggregation; GAT's layer equals the
paper's attention in numpy); the GCN layer and R-GCN's one-kernel schedule written as standalone
programs give the models' outputs and gradients (random graphs, hypothesis); fused lowering equals a per-edge numpy loop; derived workloads equal the
hand-written `workload()` stages (differences spelled out); trace-time errors name the line."""

from __future__ import annotations

import dataclasses
import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from codesign import hwmodel
from codesign import vertex as vx
from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency, with_csr_pattern
from codesign.models import APPNP, GAT, GCN, RGCN, GATConv
from codesign.models.rgcn import relation_mean_normalize
from codesign.quant import FakeQuant
from codesign.vertex.fusion import AttentionPlan, SpmmPlan, plan
from codesign.vertex.layers import appnp_step, degree_norm, gat, gcn, rgcn, weighted_sum

FAST = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TOL = dict(rtol=2e-4, atol=2e-5)


N_NODES, N_EDGES = 8, 16  # fixed sizes: each comparison compiles once, hypothesis varies the graph


@st.composite
def graphs(draw, n=N_NODES, e=N_EDGES):
    """(senders, receivers, n, seed): E random edges (duplicates and self-loops possible)."""
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32), n, seed


@st.composite
def loose_graphs(draw, max_nodes=9, max_edges=24):
    """(senders, receivers, n, seed) of any small size, without self-loops."""
    n = draw(st.integers(2, max_nodes))
    e = draw(st.integers(1, max_edges))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    s, r = rng.integers(0, n, e), rng.integers(0, n, e)
    keep = s != r
    return s[keep].astype(np.int32), r[keep].astype(np.int32), n, seed


def _adj(s, r, n):
    return CooAdjacency(jnp.asarray(s), jnp.asarray(r), None, n)


def _loops(adj):  # noqa: D103 - the self-loops the models append
    s, r = add_self_loops(adj.senders, adj.receivers, adj.n_nodes)
    return CooAdjacency(s, r, None, adj.n_nodes)


_COMPARE = {}


def _compare(key, model, vertex_fn, hand_fn, *args):
    """Outputs and parameter gradients of ``loss(vertex_fn(model, *args))`` and of
    ``loss(hand_fn(model, *args))``, in one jitted function per ``key`` (compiled once)."""
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    if key not in _COMPARE:
        def both(params, rest, *a):
            def run(fn):
                def loss(p):
                    out = fn(nnx.merge(graphdef, p, rest), *a)
                    return jnp.sum(jnp.sin(out)), out
                (_, out), g = jax.value_and_grad(loss, has_aux=True)(params)
                return out, jax.tree_util.tree_leaves(g)
            return run(vertex_fn), run(hand_fn)
        _COMPARE[key] = jax.jit(both)
    (out_v, g_v), (out_h, g_h) = _COMPARE[key](params, rest, *args)
    np.testing.assert_allclose(out_v, out_h, **TOL)
    assert len(g_v) == len(g_h) > 0
    for x, y in zip(g_v, g_h):
        np.testing.assert_allclose(x, y, **TOL)


@functools.lru_cache(maxsize=None)
def _model(kind: str, gated: bool = False, **kw):
    e = N_EDGES if gated else None
    m = dict(gcn=lambda: GCN(5, 6, 3, dropout=0.0, n_edges=e, rngs=nnx.Rngs(0)),
             gat=lambda: GAT(5, 4, 3, heads=2, out_heads=2, dropout=0.0, attn_dropout=0.0, n_edges=e, rngs=nnx.Rngs(0)),
             rgcn=lambda: RGCN(5, 6, 3, n_relations=2, n_bases=kw.get("bases"), rngs=nnx.Rngs(0)),
             appnp=lambda: APPNP(5, 6, 3, k_hops=3, alpha=0.1, dropout=0.0, rngs=nnx.Rngs(0)))[kind]()
    m.eval()
    return m


# ------------------------------------------------------------------------ layers as programs

def vertex_gcn(m: GCN, x, adj, gates=None):
    """GCN's forward with both aggregations run by the `gcn` vertex program."""
    loops = _loops(adj)
    gates = None if gates is None else gates.edge_gates()  # one draw for the degrees and the sums
    prog = gcn if gates is None else gcn.with_edge_gates(gates)
    norm = degree_norm(loops, gates)
    layer = lambda conv, h: prog(loops, nodes={"h": conv.quant_x(h) @ conv.quant_w(conv.kernel[...]), "norm": norm}) \
        + conv.bias[...]
    return layer(m.conv2, jax.nn.relu(layer(m.conv1, x)))


@FAST
@given(g=graphs(), gated=st.booleans())
def test_gcn_program_matches_the_model_in_outputs_and_gradients(g, gated):
    s, r, n, seed = g
    x = jax.random.normal(jax.random.key(seed), (n, 5))
    gates = (lambda mm: mm.edge_mask) if gated else (lambda mm: None)
    _compare(("gcn", gated), _model("gcn", gated), lambda m, x, s, r: vertex_gcn(m, x, _adj(s, r, n), gates(m)),
             lambda m, x, s, r: m(x, _adj(s, r, n)), x, s, r)


def numpy_gat_layer(conv, x, s, r, n, gate=None, channel_gate=None):
    """`GATConv`'s equation in plain numpy (Velickovic et al. 2018, eq. 1-4 and 6), one receiver
    at a time over the edges plus one self-loop per node: ``h = x W`` (times ``channel_gate``),
    ``e_ij = LeakyReLU_0.2(<a_dst, h_i> + <a_src, h_j>)``, ``alpha_ij = g_ij exp(e_ij) / sum_k
    g_ik exp(e_ik)`` (``gate`` [E] on the edges, self-loops 1), heads concatenated or averaged,
    plus the bias."""
    heads, f = conv.heads, conv.out_features
    x = np.asarray(x, np.float64)
    h = x @ np.asarray(conv.kernel[...], np.float64)
    if channel_gate is not None:
        h = h * np.asarray(channel_gate)[None, :]
    h = h.reshape(n, heads, f)
    el = (h * np.asarray(conv.att_src[...])).sum(-1)
    er = (h * np.asarray(conv.att_dst[...])).sum(-1)
    s2, r2 = np.concatenate([s, np.arange(n)]), np.concatenate([r, np.arange(n)])
    g2 = np.concatenate([np.ones(len(s)) if gate is None else np.asarray(gate, np.float64), np.ones(n)])
    out = np.zeros((n, heads, f))
    for i in range(n):
        es = np.flatnonzero(r2 == i)
        z = el[s2[es]] + er[i]  # [k, H]
        z = np.where(z > 0, z, 0.2 * z)
        p = g2[es, None] * np.exp(z - z.max(0))
        out[i] = np.einsum("kh,khf->hf", p / p.sum(0), h[s2[es]])
    out = out.reshape(n, -1) if conv.concat else out.mean(1)
    return out + np.asarray(conv.bias[...])


def _gat_loops(s, r, n, csr: bool):
    loops = _loops(_adj(s, r, n))
    if csr:  # the CSR pattern of edges + self-loops: scipy's kernels (attention "csr")
        p = with_csr_pattern(_adj(s, r, n), self_loops=True).pattern
        loops = dataclasses.replace(loops, pattern=p)
    return loops


def _gat_conv(concat: bool, impl: str, seed: int = 0, attn_dropout: float = 0.0):
    conv = GATConv(5, 4, 2 if concat else 3, concat=concat, impl=impl, attn_dropout=attn_dropout,
                   rngs=nnx.Rngs(seed))
    conv.bias[...] = jax.random.normal(jax.random.key(seed + 1), conv.bias[...].shape)  # nonzero bias
    conv.eval()
    return conv


_GAT_BACKENDS = ("reference", "csr")  # "pallas" runs in the interpreter off GPU: forward checked once below


def test_gat_layer_is_the_papers_softmax_attention():
    """GATConv on every CPU backend, concatenated and averaged heads, with and without soft edge
    gates (hard zeros included), equals the paper's softmax attention written in numpy, per
    receiver (three random graphs with duplicate edges, self-loops and empty rows)."""
    cases = []
    for seed in range(3):
        rng = np.random.default_rng(seed)
        s, r = rng.integers(0, N_NODES, N_EDGES).astype(np.int32), rng.integers(0, N_NODES, N_EDGES).astype(np.int32)
        x = rng.normal(size=(N_NODES, 5)).astype(np.float32)
        gate = np.where(rng.uniform(size=N_EDGES) < 0.3, 0.0, rng.uniform(0.1, 1.0, N_EDGES)).astype(np.float32)
        cases += [(s, r, x, g, concat) for g in (None, gate) for concat in (True, False)]
    for impl in _GAT_BACKENDS:
        convs = {concat: _gat_conv(concat, impl) for concat in (True, False)}
        loops = [_gat_loops(s, r, N_NODES, csr=impl == "csr") for s, r, *_ in cases]
        full = [None if g is None else jnp.concatenate([jnp.asarray(g), jnp.ones((N_NODES,), jnp.float32)])
                for *_, g, _ in cases]
        outs = jax.jit(lambda: [convs[c[4]](c[2], lp, g) for c, lp, g in zip(cases, loops, full)])()  # one compile
        for (s, r, x, g, concat), got in zip(cases, outs):
            np.testing.assert_allclose(got, numpy_gat_layer(convs[concat], x, s, r, N_NODES, g), **TOL,
                                       err_msg=f"{impl} gated={g is not None} concat={concat}")


def test_gat_layer_pallas_forward_and_gradients_against_numpy_and_finite_differences():
    """The Pallas attention (interpreter here) gives the numpy layer's values; on the CPU
    backends the gradients with respect to x and the parameters agree with central finite
    differences, gated and ungated."""
    from jax.test_util import check_grads
    rng = np.random.default_rng(3)
    n = 8
    s, r = rng.integers(0, n, 20).astype(np.int32), rng.integers(0, n, 20).astype(np.int32)
    x = rng.normal(size=(n, 5)).astype(np.float32)
    conv = _gat_conv(True, "pallas")
    got = nnx.jit(lambda c, x, lp: c(x, lp))(conv, x, _gat_loops(s, r, n, csr=False))
    np.testing.assert_allclose(got, numpy_gat_layer(conv, x, s, r, n), **TOL)
    gate = jnp.concatenate([jnp.asarray(rng.uniform(0.2, 1.0, 20), jnp.float32), jnp.ones((n,), jnp.float32)])
    for impl in _GAT_BACKENDS:
        conv = _gat_conv(True, impl)
        loops = _gat_loops(s, r, n, csr=impl == "csr")
        graphdef, params, rest = nnx.split(conv, nnx.Param, ...)
        for gg in (None, gate):
            f = jax.jit(lambda p, x, gg=gg, gd=graphdef, rest=rest, lp=loops: jnp.sum(jnp.sin(
                nnx.merge(gd, p, rest)(x, lp, gg))))
            check_grads(f, (params, jnp.asarray(x)), order=1, modes=("rev",), atol=2e-2, rtol=2e-2)


def test_gat_layer_respects_its_masks_and_attention_dropout():
    """A zero edge gate is the edge removed; a zero channel gate leaves only the bias in that
    output column and takes no part in the scores (the other columns are the layer with that
    column of W zeroed); attention dropout is active in training only, with finite gradients."""
    rng = np.random.default_rng(5)
    n = 9
    s, r = rng.integers(0, n, 24).astype(np.int32), rng.integers(0, n, 24).astype(np.int32)
    keep = np.ones(24, bool)
    keep[[0, 5, 11]] = False
    x = rng.normal(size=(n, 5)).astype(np.float32)
    z = np.ones(8, np.float32)
    z[[2, 5]] = 0.0
    for impl in _GAT_BACKENDS:
        conv = _gat_conv(True, impl, attn_dropout=0.5)
        loops = _gat_loops(s, r, n, csr=impl == "csr")
        fewer = _gat_loops(s[keep], r[keep], n, csr=impl == "csr")
        gate = jnp.concatenate([jnp.asarray(keep, jnp.float32), jnp.ones((n,), jnp.float32)])
        run = nnx.jit(lambda c, x, lp, gg=None, z=None: c(x, lp, gg, channel_gate=z))
        np.testing.assert_allclose(run(conv, x, loops, gate), run(conv, x, fewer), **TOL, err_msg=impl)
        masked = np.asarray(run(conv, x, loops, None, jnp.asarray(z)))
        np.testing.assert_allclose(masked[:, [2, 5]], np.broadcast_to(np.asarray(conv.bias[...])[[2, 5]], (n, 2)),
                                   **TOL)
        np.testing.assert_allclose(masked, numpy_gat_layer(conv, x, s, r, n, channel_gate=z), **TOL, err_msg=impl)
        zeroed = _gat_conv(True, impl)
        zeroed.kernel[...] = conv.kernel[...] * z[None, :]
        np.testing.assert_allclose(masked, run(zeroed, x, loops), **TOL)
        conv.train()  # attention dropout on: the output changes, gradients stay finite
        grads = nnx.jit(nnx.grad(lambda c, x, lp: jnp.sum(c(x, lp) ** 2)))(conv, x, loops)
        assert all(bool(jnp.isfinite(v).all()) for v in jax.tree.leaves(grads))
        assert float(jnp.abs(run(conv, x, loops) - run(_gat_conv(True, impl), x, loops)).max()) > 1e-3


def vertex_rgcn(m: RGCN, x, adjs):
    """R-GCN's forward with each layer's relation sum run by the `rgcn` program over all edges."""
    normed = relation_mean_normalize(adjs)
    senders = jnp.concatenate([a.senders for a in adjs])
    receivers = jnp.concatenate([a.receivers for a in adjs])
    types = jnp.concatenate([jnp.full((a.n_edges,), i, jnp.int32) for i, a in enumerate(adjs)])
    w = jnp.concatenate([a.edge_weight for a in normed])
    adj = CooAdjacency(senders, receivers, None, adjs[0].n_nodes)

    def layer(conv, h):
        wr = conv.quant_w(jnp.concatenate([conv.kernel[...][None], conv.relation_weights()]))
        xw = jnp.einsum("nk,rkf->rnf", conv.quant_x(h), wr)
        out = rgcn(adj, nodes={"h": jnp.moveaxis(xw[1:], 0, 1), "self": xw[0]}, edges={"type": types, "w": w})
        return out + conv.bias[...]

    return layer(m.conv2, jax.nn.relu(layer(m.conv1, x)))


@FAST
@given(g=graphs(), bases=st.booleans())
def test_rgcn_program_matches_the_model_in_outputs_and_gradients(g, bases):
    s, r, n, seed = g  # relation 0: the first half of the edges, relation 1 the rest
    x = jax.random.normal(jax.random.key(seed), (n, 5))
    half = N_EDGES // 2
    adjs = lambda s, r: (_adj(s[:half], r[:half], n), _adj(s[half:], r[half:], n))
    _compare(("rgcn", bases), _model("rgcn", bases=2 if bases else None),
             lambda m, x, s, r: vertex_rgcn(m, x, adjs(s, r)), lambda m, x, s, r: m(x, adjs(s, r)), x, s, r)


def test_weighted_sum_is_one_fused_spmm():
    """`weighted_sum`, the program the conv layers run, plans as one fused SpMM (an empty
    relation included) and costs as one "spmm" stage with nothing outside it."""
    rng = np.random.default_rng(7)
    n = 10
    for k in (14, 0):
        adj = _adj(rng.integers(0, n, k).astype(np.int32), rng.integers(0, n, k).astype(np.int32), n)
        x = jax.random.normal(jax.random.key(1), (n, 5))
        (p,) = [q for q in plan(weighted_sum.ir(adj, nodes={"h": x}, edges={"w": jnp.ones(k)}), False).values()
                if q is not None]
        assert isinstance(p, SpmmPlan) and not p.indexed
    wl = weighted_sum.workload(n, 14, {"h": 5}).layers[0]
    assert [s.kind for s in wl.combine_first] == ["spmm"] and wl.elementwise == ()


def test_conv_layers_run_their_program_through_the_injected_aggregation(monkeypatch):
    """GCN, GraphSAGE (mean), GIN, APPNP and R-GCN have no hand-written aggregation: every
    aggregation of their forward is a `Program` run whose fused SpMM calls the layer's
    ``aggregate_fn``, and the programs run are the ones their ``workload`` costs."""
    from codesign.kernels import aggregate
    from codesign.models import GIN, GraphSAGE
    from codesign.models.rgcn import RELATION_PROGRAM
    from codesign.vertex.program import Program

    ran, called = [], []
    original = Program.__call__

    def spy_program(self, *args, **kw):
        ran.append(self)
        return original(self, *args, **kw)

    def spy_aggregate(adj, x, impl="auto"):
        called.append(x.shape)
        return aggregate(adj, x, impl=impl)

    monkeypatch.setattr(Program, "__call__", spy_program)
    rng = np.random.default_rng(3)
    n, e = 12, 40
    s_, r_ = rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32)
    x = jax.random.normal(jax.random.key(0), (n, 5))
    kw = dict(aggregate_fn=spy_aggregate, rngs=nnx.Rngs(0))
    cases = [(GCN(5, 6, 3, dropout=0.0, **kw), _adj(s_, r_, n), 2, weighted_sum),
             (GraphSAGE(5, 6, 3, dropout=0.0, **kw), _adj(s_, r_, n), 2, weighted_sum),
             (GIN(5, 6, 3, dropout=0.0, **kw), _adj(s_, r_, n), 2, weighted_sum),
             (APPNP(5, 6, 3, dropout=0.0, k_hops=3, alpha=0.1, **kw), _adj(s_, r_, n), 1, appnp_step(0.1)),  # one scan body
             (RGCN(5, 6, 3, n_relations=2, **kw), (_adj(s_[:20], r_[:20], n), _adj(s_[20:], r_[20:], n)), 4,
              RELATION_PROGRAM)]
    for model, adj, runs, prog in cases:
        ran.clear(), called.clear()
        model.eval()
        jax.block_until_ready(model(x, adj))
        assert len(ran) == runs and all(p is prog for p in ran), (type(model).__name__, ran)
        assert len(called) == runs, type(model).__name__
    assert GCN(5, 6, 3, rngs=nnx.Rngs(0)).conv1.PROGRAM is weighted_sum
    assert APPNP(5, 6, 3, alpha=0.1, rngs=nnx.Rngs(0)).propagation.program is appnp_step(0.1)


# ------------------------------------------------------------- fused lowering vs a numpy loop

@vx.program
def mixed(v):
    m = vx.max(u.h * e.w for u, e in v.in_edges)
    return vx.mean(u.h / u.d for u in v.in_nbrs) + m, vx.sum(vx.exp(e.w) for u, e in v.in_edges)


@jax.jit
def _run_mixed(s, r, h, d, el, er, w, g):
    adj = _adj(s, r, N_NODES)
    return (gcn(adj, nodes={"h": h, "norm": d}), gat(adj, nodes={"h": h, "el": el, "er": er}),
            *mixed(adj, nodes={"h": h, "d": d}, edges={"w": w}),
            *mixed.with_edge_gates(g)(adj, nodes={"h": h, "d": d}, edges={"w": w}))


@FAST
@given(g=graphs())
def test_fused_and_fallback_lowerings_equal_a_per_edge_loop(g):
    s, r, n, seed = g
    rng = np.random.default_rng(seed)
    h, d = rng.normal(size=(n, 3)).astype(np.float32), rng.uniform(0.5, 2, n).astype(np.float32)
    el, er, w = (rng.normal(size=k).astype(np.float32) for k in (n, n, len(s)))
    g = rng.uniform(0, 1, len(s)).astype(np.float32)
    want_gcn, want_gat = np.zeros((n, 3)), np.zeros((n, 3))
    want_mean, want_max, want_exp = np.zeros((n, 3)), np.full((n, 3), -np.inf), np.zeros(n)
    gated_mean, gated_max, gated_exp = np.zeros((n, 3)), np.full((n, 3), -np.inf), np.zeros(n)
    for i in range(n):
        es = np.flatnonzero(r == i)
        for e in es:
            want_gcn[i] += h[s[e]] * d[s[e]] * d[i]
            want_mean[i] += h[s[e]] / d[s[e]] / len(es)
            want_max[i] = np.maximum(want_max[i], h[s[e]] * w[e])
            want_exp[i] += np.exp(w[e])
            gated_mean[i] += g[e] * h[s[e]] / d[s[e]] / max(g[es].sum(), 1.0)
            gated_max[i] = np.maximum(gated_max[i], g[e] * h[s[e]] * w[e])
            gated_exp[i] += g[e] * np.exp(w[e])
        if len(es):
            z = el[s[es]] + er[i]
            z = np.where(z > 0, z, 0.2 * z)
            a = np.exp(z - z.max()) / np.exp(z - z.max()).sum()
            want_gat[i] = (a[:, None] * h[s[es]]).sum(0)
        else:
            want_max[i] = gated_max[i] = 0.0
    got_gcn, got_gat, got_mix, got_exp, got_gmix, got_gexp = _run_mixed(s, r, h, d, el, er, w, g)
    np.testing.assert_allclose(got_gcn, want_gcn, **TOL)
    np.testing.assert_allclose(got_gat, want_gat, **TOL)
    np.testing.assert_allclose(got_mix, want_mean + want_max, **TOL)
    np.testing.assert_allclose(got_exp, want_exp, **TOL)
    # edge gates: sum and mean weight each term by g (mean over max(sum g, 1)), max takes g * term
    np.testing.assert_allclose(got_gmix, gated_mean + gated_max, **TOL)
    np.testing.assert_allclose(got_gexp, gated_exp, **TOL)


def test_fusion_plans_and_the_ir():
    adj = _adj(np.array([0, 1, 2], np.int32), np.array([1, 2, 0], np.int32), 3)
    ir = gcn.ir(adj, nodes={"h": jnp.ones((3, 4)), "norm": jnp.ones(3)})
    p = plan(ir, gated=False)
    assert [type(v) for v in p.values()] == [SpmmPlan]
    assert "aggregate[sum]" in str(ir) and "gather_src" in str(ir)
    ir = gat.ir(adj, nodes={"h": jnp.ones((3, 4)), "el": jnp.ones(3), "er": jnp.ones(3)})
    assert [type(v) for v in plan(ir, gated=False).values()] == [AttentionPlan]
    assert [type(v) for v in plan(ir, gated=True).values()] == [SpmmPlan]  # softmax falls back, the sum fuses
    ir = mixed.ir(adj, nodes={"h": jnp.ones((3, 4)), "d": jnp.ones(3)}, edges={"w": jnp.ones(3)})
    assert [type(v).__name__ for v in plan(ir, gated=False).values()] == ["NoneType", "SpmmPlan", "NoneType"]


@vx.program
def folds(v):  # rule 1b: receiver scalars and numbers after a fused sum / mean
    a = vx.sum(u.h * e.w for u, e in v.in_edges)
    b = vx.mean(u.h * u.d for u in v.in_nbrs)
    return v.s * a / v.d, (1.0 - 0.3) * b * v.s / 2.0


@vx.program
def folds_unfused(v):  # the same, the aggregates also returned: nothing can be folded
    a = vx.sum(u.h * e.w for u, e in v.in_edges)
    b = vx.mean(u.h * u.d for u in v.in_nbrs)
    return v.s * a / v.d, (1.0 - 0.3) * b * v.s / 2.0, a, b


@jax.jit
def _folds_and_grads(s, r, h, sc, d, w, g):
    adj = _adj(s, r, N_NODES)

    def run(prog):
        def loss(h, sc, d, w):
            outs = prog(adj, nodes={"h": h, "s": sc, "d": d}, edges={"w": w})[:2]
            return sum(jnp.sum(jnp.sin(o)) for o in outs), outs
        (_, outs), grads = jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True)(h, sc, d, w)
        return outs, grads

    return [run(p) for p in (folds, folds_unfused, folds.with_edge_gates(g), folds_unfused.with_edge_gates(g))]


@FAST
@given(g=graphs())
def test_receiver_factors_fold_into_the_spmm_weights_with_the_same_values_and_gradients(g):
    s, r, n, seed = g
    rng = np.random.default_rng(seed)
    h = rng.normal(size=(n, 3)).astype(np.float32)
    sc, d = rng.normal(size=n).astype(np.float32), rng.uniform(0.5, 2, n).astype(np.float32)
    w, gates = rng.normal(size=len(s)).astype(np.float32), rng.uniform(0, 1, len(s)).astype(np.float32)
    (f_out, f_grad), (u_out, u_grad), (fg_out, fg_grad), (ug_out, ug_grad) = _folds_and_grads(s, r, h, sc, d, w, gates)
    want_a, want_b = np.zeros((n, 3)), np.zeros((n, 3))
    for i in range(n):
        es = np.flatnonzero(r == i)
        for e in es:
            want_a[i] += h[s[e]] * w[e] * sc[i] / d[i]
            want_b[i] += 0.7 * h[s[e]] * d[s[e]] * sc[i] / 2.0 / len(es)
    np.testing.assert_allclose(f_out[0], want_a, **TOL)  # a per-edge loop
    np.testing.assert_allclose(f_out[1], want_b, **TOL)
    for got, want in ((f_out, u_out), (f_grad, u_grad), (fg_out, ug_out), (fg_grad, ug_grad)):
        for x, y in zip(got, want):  # folded == unfused, gradients into h, s, d and w included
            np.testing.assert_allclose(x, y, **TOL)
    assert np.any(np.asarray(f_grad[1]) != 0)  # the receiver scalar gets a gradient


def test_rule_1b_plans_what_it_folds_and_what_it_does_not():
    adj = _adj(np.array([0, 1, 2], np.int32), np.array([1, 2, 0], np.int32), 3)
    specs = dict(nodes={"h": jnp.ones((3, 4)), "s": jnp.ones(3), "d": jnp.ones(3)}, edges={"w": jnp.ones(3)})
    ir = folds.ir(adj, **specs)
    a, b = plan(ir, gated=False).values()
    assert len(a.receiver_scale) == len(a.receiver_inverse) == 1 and a.constant == 1.0 and a.n_weight_factors == 3
    assert ir.nodes[a.receiver_scale[0]].attrs["name"] == "s" and ir.nodes[a.receiver_inverse[0]].attrs["name"] == "d"
    assert len(b.receiver_scale) == 1 and b.constant == pytest.approx(0.35) and b.out == ir.outputs[1]
    assert all(p.out == p.agg and not p.receiver_scale for p in plan(folds_unfused.ir(adj, **specs), False).values())
    ir = gcn.ir(adj, nodes={"h": jnp.ones((3, 4)), "norm": jnp.ones(3)})
    (p,) = plan(ir, gated=False).values()
    assert p.out == ir.outputs[0] and ir.nodes[p.receiver_scale[0]].attrs["name"] == "norm"

    @vx.program
    def not_folded(v):  # max; a vector factor; a number divided by the sum; an integer factor
        return (vx.max(u.h for u in v.in_nbrs) * v.s, vx.sum(u.h for u in v.in_nbrs) * v.h,
                2.0 / vx.sum(u.h for u in v.in_nbrs), vx.sum(u.h for u in v.in_nbrs) * v.s)

    ir = not_folded.ir(adj, nodes={"h": jnp.ones((3, 4)), "s": jnp.ones(3, jnp.int32)})
    plans = list(plan(ir, gated=False).values())
    assert plans[0] is None and all(p.out == p.agg and p.n_weight_factors == 0 for p in plans[1:])


def test_jit_and_vmap():
    adj = _loops(_adj(np.array([0, 1, 2, 3], np.int32), np.array([1, 2, 3, 0], np.int32), 4))
    h = jax.random.normal(jax.random.key(0), (3, 4, 2))  # 3 = a leading batch axis
    el = jax.random.normal(jax.random.key(1), (3, 4))
    norm = degree_norm(adj)
    run = jax.jit(lambda hh, a: (gcn(adj, nodes={"h": hh, "norm": norm}), gat(adj, nodes={"h": hh, "el": a, "er": a})))
    batched = jax.jit(jax.vmap(run))(h, el)
    nested = jax.jit(jax.vmap(jax.vmap(run)))(h[None], el[None])  # two mapped axes fold into the kernel's heads
    for i in range(3):
        for got, got2, want in zip(batched, nested, run(h[i], el[i])):
            np.testing.assert_allclose(got[i], want, **TOL)
            np.testing.assert_allclose(got2[0, i], want, **TOL)


@FAST
@given(g=graphs())
def test_unfused_attention_under_vmap_and_in_csr_order_equals_each_head_alone(g):
    """GAT's unfused lowering (edge softmax with edge gates and an attention-dropout edge input,
    then one SpMM): vmapped over heads and a seed axis around them, on the COO edge order and in
    CSR order (a `CsrPattern` attached, "csr" kernels), its outputs and the gradients in h, el,
    er and the gates equal each head alone by the paper's equations written in plain JAX."""
    s, r, n, seed = g
    rng = np.random.default_rng(seed)
    loops = _loops(_adj(s, r, n))
    csr = dataclasses.replace(loops, pattern=with_csr_pattern(_adj(s, r, n), self_loops=True).pattern)
    e = loops.n_edges
    h = jnp.asarray(rng.normal(size=(2, 3, n, 4)), jnp.float32)  # [seed, head, N, F]
    el, er = (jnp.asarray(rng.normal(size=(2, 3, n)), jnp.float32) for _ in range(2))
    keep = jnp.asarray(rng.uniform(0.5, 2.0, (2, 3, e)), jnp.float32)
    gates = jnp.asarray(rng.uniform(0.0, 1.0, len(s)), jnp.float32)  # E - N: self-loops ungated
    prog = vx.layers.gat_attention(0.2, edge_scale=True)

    def loss(adj, impl, h, el, er, keep, gates):
        out = prog.with_edge_gates(gates)(adj, nodes={"h": h, "el": el, "er": er}, edges={"keep": keep},
                                          impl=impl)
        return jnp.sum(out * jnp.cos(out)), out

    def paper(h, el, er, keep, gates):  # eq. 1-4 with gates in the softmax (each edge counts g_e times), plain JAX
        ss, rr = loops.senders, loops.receivers
        g = jnp.concatenate([gates, jnp.ones((n,), jnp.float32)])
        z = el[ss] + er[rr]
        z = jnp.where(z > 0, z, 0.2 * z)
        m = jax.lax.stop_gradient(jax.ops.segment_max(z, rr, num_segments=n))
        p = jnp.exp(z - m[rr])
        a = p / jax.ops.segment_sum(g * p, rr, num_segments=n)[rr]
        out = jax.ops.segment_sum((a * keep * g)[:, None] * h[ss], rr, num_segments=n)
        return jnp.sum(out * jnp.cos(out)), out

    vg = functools.partial(jax.value_and_grad, argnums=(0, 1, 2, 4), has_aux=True)
    each = jax.vmap(jax.vmap(vg(paper), in_axes=(0, 0, 0, 0, None)), in_axes=(0, 0, 0, 0, None))
    (_, want), want_grads = jax.jit(each)(h, el, er, keep, gates)  # every (seed, head) by itself
    for adj, impl in ((loops, "segment"), (csr, "csr_scipy")):
        batched = jax.vmap(jax.vmap(vg(functools.partial(loss, adj, impl)), in_axes=(0, 0, 0, 0, None)),
                           in_axes=(0, 0, 0, 0, None))
        (_, out), grads = jax.jit(batched)(h, el, er, keep, gates)
        np.testing.assert_allclose(out, want, **TOL, err_msg=impl)
        for got_g, want_g in zip(grads, want_grads):
            np.testing.assert_allclose(got_g, want_g, **TOL, err_msg=impl)


# ------------------------------------------------------------------------------- workloads

def _stage_eq(a: hwmodel.Stage, b: hwmodel.Stage):
    assert a.kind == b.kind
    for f in dataclasses.fields(hwmodel.Stage):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "kind" or (x is None and y is None):
            continue
        np.testing.assert_allclose(np.asarray(x, np.float32), np.asarray(y, np.float32), rtol=1e-6,
                                   err_msg=f"{a.kind}.{f.name}")


def _layer_eq(got: hwmodel.LayerWorkload, combine_first, aggregate_first, elementwise):
    for mine, want in ((got.combine_first, combine_first), (got.aggregate_first, aggregate_first),
                       (got.elementwise, elementwise)):
        assert len(mine) == len(want), ([x.kind for x in mine], [x.kind for x in want])
        for a, b in zip(mine, want):
            _stage_eq(a, b)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("bits", [None, 8])
def test_gcn_workload_equals_the_models_layer_stages(training, bits):
    n, e = N_NODES, N_EDGES  # the gates of the model's edge mask cover its E edges
    m = _model("gcn", True) if bits is None else GCN(5, 6, 3, n_edges=N_EDGES, bits=bits, rngs=nnx.Rngs(0))
    b = 32 if bits is None else bits
    hand = m.workload(n, e, training=training)
    factor = 2.0 if training else 1.0
    nnz = m.densities()["edge"] * e + n
    for layer, width, out_bits in ((0, 6, b), (1, 3, 32)):
        prog = gcn.with_edge_gates(m.edge_mask)
        kw = dict(bits={"h": out_bits, "norm": 32}, out_bits=out_bits, training=training)
        gemm, spmm = hand.layers[layer].combine_first
        # rule 1b folds `* v.norm` into the SpMM's weights: the program's stages are the model's
        # layer less its GEMM and bias (outside the program), every field, both orders
        wl = prog.workload(n, e + n, {"h": width}, weight_products=False, **kw).layers[0]
        assert hand.layers[layer].elementwise[0].kind == "elementwise"  # the bias, outside
        _layer_eq(wl, (spmm,), (spmm,), ())
        # by default the program also costs forming w = g_e norm_u norm_v (2 products per kept
        # edge; reads 3 fp32 values, writes 1), which the model's gcn_normalize runs uncosted
        full = prog.workload(n, e + n, {"h": width}, **kw).layers[0]
        _layer_eq(dataclasses.replace(full, elementwise=()), (spmm,), (spmm,), ())
        (weight,) = full.elementwise
        np.testing.assert_allclose(weight.macs, factor * 2 * nnz, rtol=1e-6)
        np.testing.assert_allclose(weight.compulsory_bytes, factor * 4 * nnz * 4, rtol=1e-6)
    # without gates: w = norm_u norm_v, 1 product per edge
    (weight,) = gcn.workload(n, e + n, {"h": 6}).layers[0].elementwise
    np.testing.assert_allclose(weight.macs, e + n)
    assert not gcn.workload(n, e + n, {"h": 6}, weight_products=False).layers[0].elementwise


@pytest.mark.parametrize("training", [False, True])
def test_gat_workload_equals_the_models_attention_stages(training):
    n, e, heads, f = N_NODES, N_EDGES, 2, 4
    m = _model("gat", True)
    hand = m.workload(n, e, training=training).layers[0].combine_first  # gemm, sddmm, softmax, spmm
    gated = gat.with_edge_gates(m.edge_mask).workload(n, e + n, {"h": f}, heads=heads, training=training).layers[0]
    # with gates the kernel (which takes no gates) is not used: the softmax falls back and the
    # weighted sum is a fused SpMM; their stages equal the model's, which costs the kept edges
    assert [s.kind for s in gated.combine_first] == ["softmax", "spmm"]
    _stage_eq(gated.combine_first[0], hand[2])
    _stage_eq(gated.combine_first[1], hand[3])
    # ... and the score el_u + er_v, LeakyReLU, and the gate times the coefficient become edge
    # elementwise work: 3 ops per kept edge and head
    (elem,) = gated.elementwise
    d = m.densities()["edge"]
    np.testing.assert_allclose(elem.macs, (2.0 if training else 1.0) * 3 * heads * (d * e + n), rtol=1e-6)
    # without gates: SDDMM, softmax, SpMM of the fused kernel, as the model's ungated layer
    plain = gat.workload(n, e + n, {"h": f}, heads=heads, training=training).layers[0]
    want = _model("gat").workload(n, e, training=training).layers[0].combine_first
    assert [s.kind for s in plain.combine_first] == ["sddmm", "softmax", "spmm"] and not plain.elementwise
    for got, w in zip(plain.combine_first, want[1:]):
        _stage_eq(got, w)
    # the GEMM and score_and_activation_stage (<a, h>, bias, ELU) stay outside the program


@pytest.mark.parametrize("training", [False, True])
def test_appnp_step_workload_equals_the_models_propagation_layer(training):
    n, e, c = 30, 120, 3
    m = _model("appnp")
    hand = m.workload(n, e, training=training).layers[2]  # prop0
    assert hand.name == "prop0"
    # (1 - alpha) folds into the SpMM's weights (rule 1b): the SpMM, and alpha * H + S (2 ops per
    # element: read S and H, write Z) equal the model's spmm and teleport update, every field
    wl = appnp_step(0.1).workload(n, e + n, {"z": c, "h": c}, training=training, weight_products=False).layers[0]
    _layer_eq(wl, hand.combine_first, hand.aggregate_first, hand.elementwise)
    # by default the program also costs w = (1 - alpha) w_e: 1 product per edge
    full = appnp_step(0.1).workload(n, e + n, {"z": c, "h": c}, training=training).layers[0]
    weight, elem = full.elementwise
    _stage_eq(elem, hand.elementwise[0])
    np.testing.assert_allclose(weight.macs, (2.0 if training else 1.0) * (e + n))


def test_rgcn_workload_against_the_models():
    n, e = 30, 120
    r_count, f = 2, 6
    m = _model("rgcn")
    hand = m.workload(n, e).layers[:r_count]  # layer0/rel0, rel1
    wl = rgcn.workload(n, e, {"h": (r_count, f), "type": jax.ShapeDtypeStruct((), jnp.int32)}).layers[0]
    (spmm,) = wl.combine_first
    rel = [lw.combine_first[1] for lw in hand]
    np.testing.assert_allclose(spmm.macs, sum(s.macs for s in rel))
    np.testing.assert_allclose(spmm.gathered_rows, sum(s.gathered_rows for s in rel))
    np.testing.assert_allclose(spmm.working_set_bytes, sum(s.working_set_bytes for s in rel))
    # one kernel over all edges instead of R: R - 1 fewer row-pointer arrays and output writes
    saved = (r_count - 1) * ((n + 1) * 4 + n * f * 4)
    np.testing.assert_allclose(spmm.compulsory_bytes, sum(s.compulsory_bytes for s in rel) - saved)


def test_quantizer_and_gates_show_up_in_the_workload_and_the_forward():
    n, e = 20, 60
    adj = _loops(_adj(np.arange(e, dtype=np.int32) % n, (np.arange(e, dtype=np.int32) * 7 + 1) % n, n))
    q = FakeQuant(4, signed=True)
    prog = gcn.with_quantizer("h", q)
    (spmm,) = prog.workload(n, e + n, {"h": 16}).layers[0].combine_first
    np.testing.assert_allclose(spmm.bits, 4.0)
    h = jax.random.normal(jax.random.key(0), (n, 16))
    norm = degree_norm(adj)
    np.testing.assert_allclose(prog(adj, nodes={"h": h, "norm": norm}), gcn(adj, nodes={"h": q(h), "norm": norm}))
    gates = jnp.where(jnp.arange(e) % 2 == 0, 1.0, 0.0)
    gated = gcn.with_edge_gates(gates)
    (spmm,) = gated.workload(n, e + n, {"h": 16}, hard=True).layers[0].combine_first
    np.testing.assert_allclose(spmm.gathered_rows, e / 2 + n)
    report = hwmodel.estimate(gated.workload(n, e + n, {"h": 16}), hwmodel.presets.get("cpu"))
    assert np.isfinite(float(report.latency_s)) and float(report.latency_s) > 0


# ---------------------------------------------------------------------------------- errors

def _small():
    return _loops(_adj(np.array([0, 1], np.int32), np.array([1, 0], np.int32), 2))


def test_errors_name_the_users_line():
    adj = _small()
    h = jnp.ones((2, 3))

    @vx.program
    def branchy(v):
        if v.h > 0:  # noqa: this line is the one reported
            return v.h
        return v.h

    with pytest.raises(vx.VertexProgramError, match=r"test_vertex\.py:\d+: if v\.h > 0.*data-dependent Python control"):
        branchy(adj, nodes={"h": h})

    @vx.program
    def nested(v):
        return vx.sum(u.h * vx.sum(w.h for w in v.in_nbrs) for u in v.in_nbrs)

    with pytest.raises(vx.VertexProgramError, match=r"test_vertex\.py:\d+: return vx\.sum.*mixing neighbour sets"):
        nested(adj, nodes={"h": h})

    @vx.program
    def zipped(v):
        return vx.sum(u.h * w.h for u, w in zip(v.in_nbrs, v.in_nbrs))

    with pytest.raises(vx.VertexProgramError, match="mixing neighbour sets"):
        zipped(adj, nodes={"h": h})

    @vx.program
    def two_hop(v):
        return vx.sum(u.h for u in v.in_nbrs for w in u.in_nbrs)

    with pytest.raises(vx.VertexProgramError, match=r"u\.in_nbrs: neighbours of a neighbour"):
        two_hop(adj, nodes={"h": h})

    @vx.program
    def bad_shapes(v):
        return vx.sum(u.h * e.w for u, e in v.in_edges)

    with pytest.raises(vx.VertexProgramError, match=r"test_vertex\.py:\d+: return vx\.sum\(u\.h \* e\.w.*mul: "
                                                    r"per-item shapes \(3,\) and \(2,\) do not agree"):
        bad_shapes(adj, nodes={"h": h}, edges={"w": jnp.ones((4, 2))})

    @vx.program
    def edge_out(v):
        return [u.h for u in v.in_nbrs][0]

    with pytest.raises(vx.VertexProgramError, match="returns an edge value"):
        edge_out(adj, nodes={"h": h})

    with pytest.raises(vx.VertexProgramError, match=r"layers\.py:\d+: return vx\.sum\(u\.h \* u\.norm.*no node input 'norm'.*given: \['h'\]"):
        gcn(adj, nodes={"h": h})

    @vx.program
    def vertex_sum(v):
        return vx.sum([v.h])

    with pytest.raises(vx.VertexProgramError, match="vx.sum of a vertex value"):
        vertex_sum(adj, nodes={"h": h})


def test_input_errors_name_the_field():
    adj = _small()
    with pytest.raises(ValueError, match=r"nodes\['h'\]: must be \[N=2, \.\.\.\], got shape \(3, 3\)"):
        gcn(adj, nodes={"h": jnp.ones((3, 3)), "norm": jnp.ones(2)})
    with pytest.raises(ValueError, match=r"edges\['w'\]: must be \[E=4"):
        rgcn(adj, nodes={"h": jnp.ones((2, 1, 3)), "self": jnp.ones((2, 3))},
             edges={"w": jnp.ones(3), "type": jnp.zeros(4, jnp.int32)})
    with pytest.raises(TypeError, match="nodes: must be a dict"):
        gcn(adj, nodes=[jnp.ones((2, 3))])
    with pytest.raises(TypeError, match="adj: must be a codesign.kernels.CooAdjacency"):
        gcn("graph", nodes={"h": jnp.ones((2, 3))})
    with pytest.raises(ValueError, match="edge gates: need E=4 gates"):
        gcn.with_edge_gates(jnp.ones(3))(adj, nodes={"h": jnp.ones((2, 3)), "norm": jnp.ones(2)})
    with pytest.raises(ValueError, match="attention_impl: unknown 'fast'"):
        gat(adj, nodes={"h": jnp.ones((2, 3)), "el": jnp.ones(2), "er": jnp.ones(2)}, attention_impl="fast")
    with pytest.raises(ValueError, match="attention_impl: 'csr' needs a CsrPattern"):
        gat(adj, nodes={"h": jnp.ones((2, 3)), "el": jnp.ones(2), "er": jnp.ones(2)}, attention_impl="csr")
    with pytest.raises(TypeError, match="with_quantizer: str does not implement"):
        gcn.with_quantizer("h", "int8")
    with pytest.raises(ValueError, match=r"widths\['h'\]: must be an int"):
        gcn.workload(4, 8, {"h": "wide"})
    with pytest.raises(ValueError, match=r"workload: widths names \['hh'\], which the program does not read"):
        gcn.workload(4, 8, {"hh": 3})
    with pytest.raises(ValueError, match="workload: n_edges must be an int >= 1"):
        gcn.workload(4, 0, {"h": 3})
    with pytest.raises(ValueError, match=r"appnp_step: alpha must be in \[0, 1\]"):
        appnp_step(1.5)
    with pytest.raises(ValueError, match="workload: edge_density is for a sparsifier outside the program"):
        gcn.with_edge_gates(jnp.ones(4)).workload(4, 8, {"h": 3}, edge_density=0.5)
    with pytest.raises(ValueError, match=r"workload\(edge_density\)"):
        gcn.workload(4, 6.5, {"h": 3}, edge_density=1.5)
    with pytest.raises(ValueError, match=r"kept_widths: 'h' must name an input of one axis per item"):
        rgcn.workload(4, 8, {"h": (2, 3), "type": jax.ShapeDtypeStruct((), jnp.int32)}, kept_widths={"h": 2.0})
    with pytest.raises(ValueError, match=r"workload: kept_widths names \['x'\]"):
        gcn.workload(4, 8, {"h": 3}, kept_widths={"x": 2.0})


# ------------------------------------------------------------- numeric inputs (issue 36)

@pytest.mark.parametrize("dtype", [jnp.complex64, np.complex128])
def test_vertex_programs_refuse_complex_inputs(dtype):
    """Complex features were silently made real (the imaginary part dropped): refused, naming the input."""
    adj = _small()
    name = np.dtype(dtype).name
    with pytest.raises(ValueError, match=rf"^nodes\['h'\]: must have a real dtype \(float, integer or bool\), "
                                         rf"got {name}$"):
        gcn(adj, nodes={"h": np.ones((2, 3), dtype) * (1 + 2j), "norm": jnp.ones(2)})
    with pytest.raises(ValueError, match=rf"^edges\['w'\]: must have a real dtype .*, got {name}$"):
        weighted_sum(adj, nodes={"h": jnp.ones((2, 3))}, edges={"w": np.ones(4, dtype)})
    with pytest.raises(ValueError, match=rf"^widths\['h'\]: must have a real dtype .*, got {name}$"):
        gcn.workload(4, 8, {"h": jax.ShapeDtypeStruct((3,), dtype)})


def test_numpy_on_traced_values_is_recorded_or_refused_naming_the_users_line():
    """``np.exp(u.h)`` used to fail with "operand 'Value' does not support ufuncs" and no line. A
    plain ufunc is now the jnp one; other numpy calls give one line: the user's line and the function."""
    adj = _small()
    h = jnp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3) / 6)
    np_exp = vx.program(lambda v: vx.sum(np.exp(u.h) for u in v.in_nbrs))
    vx_exp = vx.program(lambda v: vx.sum(vx.exp(u.h) for u in v.in_nbrs))
    np.testing.assert_allclose(np_exp(adj, nodes={"h": h}), vx_exp(adj, nodes={"h": h}), rtol=1e-6)
    np.testing.assert_allclose(np_exp(adj, nodes={"h": h}), np.exp(np.asarray(h)).sum(0, keepdims=True).repeat(2, 0),
                               rtol=1e-6)  # both nodes receive from both (the edge and the self-loop)
    # an ndarray or numpy scalar on the left is the same op as the reflected operator (fusion reads its name)
    scaled = vx.program(lambda v: vx.sum(np.float32(2.0) * u.h for u in v.in_nbrs))
    assert [n.attrs.get("name") for n in scaled.ir(adj, nodes={"h": h}).nodes if n.op == "map"] == ["mul"]
    np.testing.assert_allclose(scaled(adj, nodes={"h": h}), 2 * gcn_sum(adj, h), rtol=1e-6)

    cases = {
        "numpy.where": lambda v: vx.sum(np.where(u.h > 0, u.h, 0.0) for u in v.in_nbrs),
        "numpy.sum": lambda v: vx.sum(np.sum(u.h) for u in v.in_nbrs),
        "numpy.add.reduce": lambda v: vx.sum(np.add.reduce(u.h) for u in v.in_nbrs),
        "numpy.exp with out=": lambda v: vx.sum(np.exp(u.h, out=np.zeros(3)) for u in v.in_nbrs),
        "numpy.exp of a vertex / neighbour / edge proxy": lambda v: vx.sum(np.exp(u) for u in v.in_nbrs),
        "numpy.asarray": lambda v: vx.sum(np.asarray(u.h) for u in v.in_nbrs),
    }
    for what, fn in cases.items():
        with pytest.raises(TypeError) as err:
            vx.program(fn)(adj, nodes={"h": h})
        msg = str(err.value)
        assert "\n" not in msg
        assert re.match(rf"test_vertex\.py:\d+: .* for u in v\.in_nbrs\),: {re.escape(what)}(?![\w.])", msg), msg
        assert "use the vx operations" in msg


def gcn_sum(adj, h):
    """``sum over in-edges of h[sender]`` in numpy (the reference of a plain sum program)."""
    out = np.zeros(np.shape(h))
    np.add.at(out, np.asarray(adj.receivers), np.asarray(h)[np.asarray(adj.senders)])
    return out


_UFUNCS = {"exp": np.exp, "tanh": np.tanh, "abs": np.abs, "square": np.square, "sin": np.sin,
           "maximum0": lambda x: np.maximum(x, 0.25), "negative": np.negative, "log1p_abs": lambda x: np.log1p(np.abs(x))}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ufunc=st.sampled_from(sorted(_UFUNCS)), g=graphs(), dtype=st.sampled_from([np.float32, np.int8, np.int32]))
def test_numpy_ufuncs_in_programs_equal_the_per_edge_reference(ufunc, g, dtype):
    """For any of these ufuncs and real inputs (float or integer), ``vx.sum(ufunc(u.h * e.w))``
    equals the float64 per-edge loop (to float32 rounding)."""
    s, r, n, seed = g
    rng = np.random.default_rng(seed)
    h = (rng.normal(size=(n, 3)) * 3).astype(dtype)
    w = rng.uniform(-1, 1, len(s)).astype(np.float32)
    f = _UFUNCS[ufunc]
    prog = _ufunc_program(ufunc)
    got = prog(_adj(s, r, n), nodes={"h": jnp.asarray(h)}, edges={"w": jnp.asarray(w)})
    want = np.zeros((n, 3))
    for e in range(len(s)):
        want[r[e]] += f(h[s[e]].astype(np.float64) * w[e])
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=1e-4, atol=1e-4)


@functools.lru_cache(maxsize=None)
def _ufunc_program(ufunc):
    f = _UFUNCS[ufunc]
    return vx.program(lambda v: vx.sum(f(u.h * e.w) for u, e in v.in_edges))


# ------------------------------------------------------------------------------- benchmark

def test_vertex_bench_quick_runs_and_the_ehf_check_bites(tmp_path):
    import importlib.util
    import json
    import pathlib
    import sys

    path = pathlib.Path(__file__).resolve().parent.parent / "experiments" / "vertex_bench.py"
    spec = importlib.util.spec_from_file_location("vertex_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["vertex_bench"] = mod
    spec.loader.exec_module(mod)
    out = tmp_path / "vb.json"
    result = mod.main(["--quick", "--models", "gat", "--reps", "1", "--no-rss", "--out", str(out)])
    saved = json.loads(out.read_text())
    g = saved["graphs"]["quick"]
    assert g == json.loads(json.dumps(result["graphs"]["quick"]))
    assert g["gat"]["vertex"]["epoch_s_median"] > 0 and g["gat"]["ratio_vertex_over_hand"] > 0
    # same parameters, dropout and data: one step gives the same loss on both sides
    np.testing.assert_allclose(g["gat"]["vertex"]["final_loss"], g["gat"]["hand"]["final_loss"], rtol=1e-4)
    check = g["gat_ehf_check"]
    assert check["vertex"]["no_ehf_tensor"] and check["vertex"]["ehf_shapes_in_hlo"] == []
    assert not check["vertex_reference"]["no_ehf_tensor"] and check["vertex_reference"]["ehf_shapes_in_hlo"] != []


# ------------------------------------------------- model workloads: derived = the old hand-written

def _old_gcn_conv(self, name, graph, *, in_dim=None, out_dim=None, out_bits=32, hard=False, bits=None, in_nnz=None,
                  elementwise_ops=1):
    """`GCNConv.workload` before its SpMMs were derived from the vertex program (the reference;
    dense input features only). The elementwise op count (``elementwise_ops``, added after the
    derivation: ReLU, gate and run-time quantization of the hidden layer) is passed through to
    the elementwise stage; the aggregation and GEMM stages are the old formulas'."""
    from codesign.models.layers import quant_bits
    assert in_nnz is None
    x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.quant_w, hard))
    f = self.out_features if out_dim is None else out_dim
    layer = hwmodel.message_passing_layer(
        name, graph.n_nodes, graph.kept_edges + graph.n_nodes, self.in_features if in_dim is None else in_dim,
        f, x_bits, w_bits, out_bits, **graph.aggregation())
    elem = (hwmodel.elementwise_stage(graph.n_nodes, f, out_bits, elementwise_ops),)
    return (dataclasses.replace(layer, elementwise=elem),)


def _old_propagation(self, name, graph, **_):
    """`Propagation.workload` before it was derived (fp32 SpMM + teleport update per hop)."""
    if self.alpha == 1.0:
        return ()
    n, c = graph.n_nodes, self.width
    spmm = (hwmodel.spmm_stage(n, graph.kept_edges + n, c, 32, 32, graph.locality, graph.edge_density),)
    zero = jnp.zeros((), jnp.float32)
    elem = (hwmodel.Stage("elementwise", 2.0 * jnp.float32(n) * c, jnp.float32(32.0),
                          3.0 * jnp.float32(n) * c * 32.0 / 8.0, zero, zero),)
    return tuple(hwmodel.LayerWorkload(f"{name}{k}", spmm, spmm, elem) for k in range(self.k_hops))


def _old_gat_conv(self, name, graph, *, in_dim=None, out_dim=None, out_bits=32, hard=False, bits=None, in_nnz=None):
    """`GATConv.workload` before its attention stages were derived."""
    from codesign.models.gat import score_and_activation_stage
    from codesign.models.layers import quant_bits
    x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.quant_w, hard))
    n = graph.n_nodes
    k = self.in_features if in_dim is None else in_dim
    hf = self.heads * self.out_features if out_dim is None else out_dim
    width = hf if self.concat else self.out_features
    stages = (hwmodel.gemm_stage(n, k, hf, x_bits, w_bits, out_bits),
              *hwmodel.attention_stages(n, graph.kept_edges + n, self.heads, hf / self.heads, out_bits, out_bits,
                                        graph.locality, graph.edge_density))
    elem = (score_and_activation_stage(n, self.heads, hf, width, out_bits,
                                       head_mean=not self.concat and self.heads > 1),)
    return (hwmodel.LayerWorkload(name, stages, stages, elem),)


def _old_rgcn_layer_workloads(name, n_nodes, relation_nnz, in_dim, out_dim, x_bits, w_bits, out_bits, *,
                              n_bases=None, training=False, locality=None, edge_density=1.0):
    """`rgcn_layer_workloads` before its per-relation SpMMs were derived (forward stages; the
    training step is `hwmodel.autograd_training` of the model's workload on both sides)."""
    graph = dict(locality=locality, access_scale=edge_density)
    backward = tuple
    layers = []
    for r, nnz in enumerate(relation_nnz):
        agg_then = (hwmodel.spmm_stage(n_nodes, nnz, in_dim, x_bits, x_bits, **graph),
                    hwmodel.gemm_stage(n_nodes, in_dim, out_dim, x_bits, w_bits, out_bits))
        comb_then = (hwmodel.gemm_stage(n_nodes, in_dim, out_dim, x_bits, w_bits, out_bits),
                     hwmodel.spmm_stage(n_nodes, nnz, out_dim, out_bits, out_bits, **graph))
        layers.append(hwmodel.LayerWorkload(f"{name}/rel{r}", backward(agg_then), backward(comb_then), ()))
    gemm = backward((hwmodel.gemm_stage(n_nodes, in_dim, out_dim, x_bits, w_bits, out_bits),))
    terms = len(relation_nnz) + 1  # a fused epilogue reads every term but the one it produces (cost model 4)
    elem = backward((hwmodel.elementwise_stage(n_nodes, out_dim * terms, out_bits, epilogue_reads=(terms - 1) / terms),))
    layers.append(hwmodel.LayerWorkload(f"{name}/self", gemm, gemm, elem))
    if n_bases is not None and training:
        compose = backward((hwmodel.gemm_stage(len(relation_nnz), n_bases, in_dim * out_dim, 32, 32, 32),))
        layers.append(hwmodel.LayerWorkload(f"{name}/basis", compose, compose, ()))
    return tuple(layers)


def _old_rgcn_conv(self, name, graph, *, in_dim=None, out_dim=None, out_bits=32, hard=False, bits=None, in_nnz=None,
                   training=False):
    """`RGCNConv.workload` before its per-relation SpMMs were derived."""
    from codesign.models.layers import quant_bits
    x_bits, w_bits = (bits, bits) if bits is not None else (self.input_bits(hard), quant_bits(self.quant_w, hard))
    rel = (graph.kept_edges,) if graph.relation_edges is None else graph.relation_edges
    return _old_rgcn_layer_workloads(name, graph.n_nodes, rel, self.in_features if in_dim is None else in_dim,
                                     self.out_features if out_dim is None else out_dim, x_bits, w_bits, out_bits,
                                     n_bases=self.n_bases, training=training, locality=graph.locality,
                                     edge_density=graph.edge_density)


def _workload_eq(got: hwmodel.Workload, want: hwmodel.Workload):
    """Every layer, stage and field equal (bit for bit: the results/ files were costed with these)."""
    assert got.training == want.training and [l.name for l in got.layers] == [l.name for l in want.layers]
    for a, b in zip(got.layers, want.layers):
        for mine, ref in ((a.aggregate_first, b.aggregate_first), (a.combine_first, b.combine_first),
                          (a.elementwise, b.elementwise)):
            assert [s.kind for s in mine] == [s.kind for s in ref], a.name
            for x, y in zip(mine, ref):
                for f in dataclasses.fields(hwmodel.Stage):
                    u, v = getattr(x, f.name), getattr(y, f.name)
                    assert (u is None) == (v is None), f"{a.name}.{x.kind}.{f.name}"
                    if f.name != "kind" and u is not None:
                        np.testing.assert_array_equal(np.asarray(u, np.float32), np.asarray(v, np.float32),
                                                      err_msg=f"{a.name}.{x.kind}.{f.name}")


@functools.lru_cache(maxsize=None)
def _block_gcn():
    from codesign.kernels import with_block_pattern
    from codesign.sparsify import BlockEdgeMask
    rng = np.random.default_rng(3)
    n, e = 64, 300
    s, r = rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32)
    adj = with_block_pattern(CooAdjacency(jnp.asarray(s), jnp.asarray(r), None, n), 16, "rcm", self_loops=True)
    mask = BlockEdgeMask(adj.pattern, e, init_log_alpha=0.5, rngs=nnx.Rngs(0))
    return GCN(7, 12, 3, edge_sparsifier=mask, channel_mask=True, feature_mask=True, bits=8, rngs=nnx.Rngs(1)), n, e


@functools.lru_cache(maxsize=None)
def _locality():
    from codesign.hwmodel.locality import measure
    rng = np.random.default_rng(5)
    n, e = 64, 300
    return measure(rng.integers(0, n, e).astype(np.int32), rng.integers(0, n, e).astype(np.int32), n)


_MODEL_CASES = {
    "gcn": lambda: (GCN(9, 6, 3, n_edges=300, channel_mask=True, feature_mask=True, rngs=nnx.Rngs(0)), 64, 300),
    "gcn-widen-8bit": lambda: (GCN(4, 10, 3, n_edges=300, bits=8, quantizer="learned", rngs=nnx.Rngs(0)), 64, 300),
    "gcn-block": _block_gcn,
    "appnp": lambda: (APPNP(9, 6, 3, n_edges=300, feature_mask=True, bits=4, k_hops=3, alpha=0.1, rngs=nnx.Rngs(0)),
                      64, 300),
    "appnp-a0": lambda: (APPNP(9, 6, 3, k_hops=2, alpha=0.0, rngs=nnx.Rngs(0)), 64, 300),
    "appnp-a1": lambda: (APPNP(9, 6, 3, k_hops=2, alpha=1.0, rngs=nnx.Rngs(0)), 64, 300),
    "gat": lambda: (GAT(9, 4, 3, heads=3, out_heads=2, n_edges=300, channel_mask=True, feature_mask=True,
                        rngs=nnx.Rngs(0)), 64, 300),
    "gat-8bit": lambda: (GAT(9, 4, 3, heads=2, bits=8, rngs=nnx.Rngs(0)), 64, 300),
    # R-GCN: narrowing layers (combine-first), bases, edge and feature masks, uneven relations
    "rgcn": lambda: (RGCN(9, 6, 3, n_relations=3, n_bases=2, n_edges=300, feature_mask=True, rngs=nnx.Rngs(0)),
                     64, 300),
    # widening first layer, 8-bit learned-free quantizers, relations split evenly by default
    "rgcn-widen-8bit": lambda: (RGCN(4, 10, 3, n_relations=2, bits=8, rngs=nnx.Rngs(0)), 64, 300),
    # one relation (as `codesign.train` runs it), free W_r
    "rgcn-1rel": lambda: (RGCN(9, 6, 3, n_edges=300, rngs=nnx.Rngs(0)), 64, 300),
}
_MODEL_KW = {  # edges per relation (sum = the graph's 300), an empty relation included
    "rgcn": dict(relation_edges=(170, 0, 130)),
    "rgcn-1rel": dict(relation_edges=(300,)),
}


@pytest.mark.parametrize("case", sorted(_MODEL_CASES))
def test_model_workloads_with_derived_aggregations_equal_the_old_hand_written_ones(case, monkeypatch):
    """GCNConv's SpMMs, APPNP's propagation steps, GATConv's attention stages and RGCNConv's
    per-relation SpMMs come from the vertex programs now; the model workloads are the same numbers
    as before, for hard / expected counts, training, a bits override, what-if densities, a
    `BlockEdgeMask` (BSR), a locality profile and relations of different edge counts."""
    from codesign.models import GATConv, GCNConv, Propagation, RGCNConv
    model, n, e = _MODEL_CASES[case]()
    extra = _MODEL_KW.get(case, {})
    settings_ = [dict(), dict(training=True), dict(hard=True), dict(bits=6.0, training=True),
                 dict(locality=_locality()), dict(densities={"edge": 0.4, "feature": 0.5}, locality=_locality(),
                                                  training=True)]
    for kw in settings_:
        new = model.workload(n, e, **kw, **extra)
        with monkeypatch.context() as mp:
            mp.setattr(GCNConv, "workload", _old_gcn_conv)
            mp.setattr(Propagation, "workload", _old_propagation)
            mp.setattr(GATConv, "workload", _old_gat_conv)
            mp.setattr(RGCNConv, "workload", _old_rgcn_conv)
            old = model.workload(n, e, **kw, **extra)
        _workload_eq(new, old)
    if case == "gcn-block":  # still the BSR kernel over the kept tiles
        assert [s.kind for s in model.workload(n, e).layers[0].combine_first] == ["gemm", "bsr"]
    # ... and under jit with gradients into the gate logits (expected counts are traced)
    if case in ("gcn", "gat", "appnp", "rgcn"):
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)

        def latency(params):
            m = nnx.merge(graphdef, params, rest)
            return hwmodel.estimate(m.workload(n, e, training=True, **extra),
                                    hwmodel.presets.get("cpu")).latency_s

        g = jax.tree_util.tree_leaves(jax.jit(jax.grad(latency))(params))
        assert all(np.all(np.isfinite(np.asarray(x))) for x in g) and any(np.any(np.asarray(x) != 0) for x in g)
