"""Partitioned full-batch training (`codesign.distributed`) and the communication cost model.

Multi-device checks need ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` before JAX starts,
so they run in one subprocess (`_CHECK`) that prints JSON; the assertions are here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import xla_flags

from codesign import distributed as dist
from codesign.data.synthetic import rmat_edges
from codesign.hwmodel import comm

ROOT = Path(__file__).resolve().parent.parent


def _random_graph(n=60, e=300, seed=0):
    rng = np.random.default_rng(seed)
    s, r = rng.integers(0, n, e), rng.integers(0, n, e)
    return s.astype(np.int32), r.astype(np.int32), n


@pytest.mark.parametrize("n_parts,method", [(1, "metis"), (2, "metis"), (3, "contiguous"), (4, "metis")])
def test_partition_bookkeeping(n_parts, method):
    s, r, n = _random_graph()
    part = dist.partition_graph(s, r, n, n_parts, method)
    P, B = part.n_parts, part.block_size
    assert B == part.n_local.max() and part.n_local.sum() == n
    # node layout round trip
    ids = np.arange(n)
    np.testing.assert_array_equal(part.from_blocks(part.to_blocks(ids, -1)), ids)
    np.testing.assert_array_equal(part.node_id[part.part, part.local_row], ids)
    # every edge sits in exactly one slot, on its receiver's part
    valid = part.edge_id >= 0
    np.testing.assert_array_equal(np.sort(part.edge_id[valid]), np.arange(len(s)))
    for p in range(P):
        for st in range(P):
            o, L = part.edge_offsets[st], part.edge_lengths[st]
            for k in range(o, o + L):
                e = part.edge_id[p, k]
                if e < 0:
                    continue
                assert part.part[r[e]] == p and part.node_id[p, part.receivers[p, k]] == r[e]
                q = part.step_source(p, st)
                assert part.part[s[e]] == q
                row = part.senders[p, k] if st == 0 else part.send_rows[st - 1][q, part.senders[p, k]]
                assert part.node_id[q, row] == s[e]
    # halo sets: the distinct remote senders of each receiving part, nothing more
    for q in range(P):
        for p in range(P):
            want = {int(u) for u, v in zip(s, r) if part.part[u] == q and part.part[v] == p and p != q}
            got = set()
            if p != q:
                st = (p - q) % P
                got = {int(part.node_id[q, row]) for row in part.send_rows[st - 1][q, :part.halo_counts[q, p]]}
            assert got == want
            assert part.halo_counts[q, p] == len(want)
    assert part.edge_cut == int(np.sum(part.part[s] != part.part[r]))
    # slot layout round trip of edge values
    w = np.arange(len(s), dtype=np.float32)
    np.testing.assert_array_equal(part.slots_to_edges(part.edges_to_slots(w)), w)


def test_metis_balances_edges_on_rmat():
    s, r = rmat_edges(11, 16 << 11, seed=0)
    part = dist.partition_graph(s, r, 1 << 11, 8)
    per_part = np.sum(part.edge_id >= 0, axis=1)
    assert per_part.max() <= 1.15 * per_part.mean()
    assert part.n_local.max() <= 1.1 * part.n_local.mean()


def test_bad_inputs():
    s, r, n = _random_graph()
    with pytest.raises(ValueError, match="n_parts must be >= 1"):
        dist.partition_graph(s, r, n, 0)
    with pytest.raises(ValueError, match="exceeds the number of nodes"):
        dist.partition_graph(s, r, n, n + 1)
    with pytest.raises(ValueError, match="unknown method"):
        dist.partition_graph(s, r, n, 2, "spectral")
    with pytest.raises(ValueError, match="out of range"):
        dist.partition_graph(s, r + n, n, 2)
    with pytest.raises(ValueError, match="exceeds the"):
        dist.make_mesh(len(jax.devices()) + 1)
    with pytest.raises(ValueError, match="n_devices must be an int >= 1"):
        dist.make_mesh(0)
    with pytest.raises(ValueError, match=r"sar_aggregate: kernel must be \[K, F\] with K = y's 3 columns, got shape \(4, 2\)"):
        dist.sar_aggregate(jnp.ones((5, 3)), (), jnp.zeros(1, jnp.int32), jnp.zeros(1, jnp.int32), jnp.ones(1), (0,), (1,),
                           kernel=jnp.ones((4, 2)))


def test_communication_stage_counts():
    rows = np.array([[0, 3, 1], [2, 0, 0], [5, 4, 0]])
    st = comm.communication_stage("l", rows, 16, 32)
    np.testing.assert_allclose(st.link_bytes, rows * 64.0)
    # step 1: 0->1, 1->2, 2->0 = 3, 0, 5 rows; step 2: 0->2, 1->0, 2->1 = 1, 2, 4 rows
    np.testing.assert_allclose(st.step_bytes, [5 * 64.0, 4 * 64.0])
    assert float(st.total_bytes) == rows.sum() * 64.0
    tr = comm.communication_stage("l", rows, 16, 8, training=True, refetch=True, int8=True)
    assert float(tr.total_bytes) == rows.sum() * (2 * (16 + 4) + 64)
    link = comm.get_link("nvlink4")
    assert link.bw_bytes_per_s == 450e9 and comm.get_link("pcie5_x16").bw_bytes_per_s == 64e9
    assert comm.get_link("infiniband_ndr").bw_bytes_per_s == 50e9
    c = comm.communication_cost([st], link)
    np.testing.assert_allclose(float(c.latency_s), (9 * 64.0) / 450e9 + 2 * link.latency_s, rtol=1e-6)
    grad = jax.grad(lambda w: comm.communication_cost([comm.communication_stage("l", rows, w, 32)], link).energy_j)(16.0)
    assert float(grad) > 0
    with pytest.raises(ValueError, match="unknown link preset"):
        comm.get_link("ethernet")
    with pytest.raises(ValueError, match="bw_bytes_per_s"):
        comm.LinkSpec("bad", -1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="must be \\[P, P\\]"):
        comm.communication_stage("l", np.ones(3), 4, 32)


_CHECK = r"""
import json, os
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from codesign import distributed as dist
from codesign.data.synthetic import rmat_edges
from codesign.graph import Graph
from codesign.models import GCN
from codesign.train import adjacency, masked_cross_entropy

s, r = rmat_edges(8, 1500, seed=0)
N, F, C = 256, 24, 5
rng = np.random.default_rng(0)
g = Graph(senders=jnp.asarray(s), receivers=jnp.asarray(r), x=jnp.asarray(rng.random((N, F)), jnp.float32),
          y=jnp.asarray(rng.integers(0, C, N), jnp.int32), train_mask=jnp.asarray(rng.random(N) < .5),
          val_mask=jnp.asarray(rng.random(N) < .2), test_mask=jnp.asarray(rng.random(N) < .2), n_nodes=N,
          edge_weight=jnp.asarray(rng.random(len(s)) + 0.5, jnp.float32))
adj = adjacency(g)
edge_logits = jnp.asarray(rng.normal(1.0, 2.0, len(s)), jnp.float32)

def model(edge_gates=False):
    m = GCN(F, 16, C, dropout=0.5, bits=8, feature_mask=True, channel_mask=True, n_edges=len(s) if edge_gates else None,
            rngs=nnx.Rngs(params=0, dropout=1, gates=2))
    if edge_gates:  # distinct logits per edge, deterministic gates (sampled ones use per-partition streams)
        m.edge_mask.gate.log_alpha.value = edge_logits
        m.eval()
    else:
        m.train()  # dropout and sampled feature/channel gates
    return m

def rel(a, b):
    return float(jnp.max(jnp.abs(a - b)) / (jnp.max(jnp.abs(b)) + 1e-30))

out = {"plain": {}, "gates": {}}
for gates in (False, True):
    ref = model(gates)
    l0, g0 = nnx.jit(nnx.value_and_grad(lambda m: masked_cross_entropy(m(g.x, adj), g.y, g.train_mask)))(ref)
    for P in ((1, 2, 4, 8) if not gates else (4,)):
        part = dist.partition_graph(s, r, N, P)
        mesh = dist.make_mesh(P)
        sg = dist.shard_graph(g, part, mesh)
        m = model(gates)
        if gates:
            dist.partition_edge_mask(m, part, mesh, rngs=nnx.Rngs(0))
            m.eval()
        gd, st = nnx.split(m)
        def step(st, sg):
            mm = nnx.merge(gd, st)
            return nnx.value_and_grad(lambda mm: dist.loss_fn(mm, sg, mesh))(mm)
        lowered = jax.jit(step).lower(st, sg)
        jax_permutes = lowered.as_text().count("collective_permute")  # the program JAX emits, before XLA
        c = lowered.compile()
        l, gr = c(st, sg)
        gr = nnx.to_pure_dict(gr) if hasattr(nnx, "to_pure_dict") else gr
        g0d = nnx.to_pure_dict(g0)
        errs = {}
        if gates:
            ge = part.slots_to_edges(np.asarray(gr["edge_mask"]["gate"]["log_alpha"]))
            errs["edge_logits"] = rel(jnp.asarray(ge), g0d["edge_mask"]["gate"]["log_alpha"])
            del gr["edge_mask"], g0d["edge_mask"]
        for path, v in jax.tree_util.tree_leaves_with_path(gr):
            ref_v = g0d
            for k in path:
                ref_v = ref_v[k.key]
            errs[jax.tree_util.keystr(path)] = rel(v, ref_v)
        hlo = dist.collective_permute_bytes(c.as_text())
        by_width = {}
        for dt, shape in hlo["shapes"]:
            key = f"{dt}:{shape[-1] if len(shape) == 2 else 'row'}"
            by_width[key] = by_width.get(key, 0) + int(np.prod(shape)) * (1 if dt == "s8" else 4)
        stages = dist.comm_stages(m, part, training=True, padded=True)  # with gates: the re-fetch too
        modeled = {f"{i}:{w}": float(st_.total_bytes) / P for i, (st_, w) in enumerate(zip(stages, dist.halo_widths(m)))}
        real = [float(x.total_bytes) for x in dist.comm_stages(m, part, training=True)]
        fwd_real = [float(jnp.sum(x.link_bytes)) for x in dist.comm_stages(m, part)]
        out["gates" if gates else "plain"][P] = dict(loss=float(l), ref=float(l0), errs=errs, hlo=by_width,
            modeled=modeled, jax_permutes=jax_permutes, compiled_permutes=hlo["ops"], halo_rows=int(part.halo_counts.sum()), fwd_real=fwd_real, real=real,
            widths=list(dist.halo_widths(m)))

# rematerialization (halo.py's custom VJP) at P = 4, remat on and off: per-device temporaries;
# chunks of 64 edge slots so that the backward's chunked path (lax.scan, padding) runs here
from codesign.distributed import halo
halo.REMAT_CHUNK_EDGES = 64
P = 4
part = dist.partition_graph(s, r, N, P)
mesh = dist.make_mesh(P)
sg = dist.shard_graph(g, part, mesh)
out["remat"] = {}
for gates in (False, True):
    for remat in (True, False):
        m = model(gates)
        if gates:
            dist.partition_edge_mask(m, part, mesh, rngs=nnx.Rngs(0))
            m.eval()
        gd, st = nnx.split(m)
        def step(st, sg):
            return nnx.value_and_grad(lambda mm: dist.loss_fn(mm, sg, mesh, remat=remat))(nnx.merge(gd, st))
        c = jax.jit(step).lower(st, sg).compile()
        l, gr = c(st, sg)
        out["remat"][f"{gates}:{remat}"] = dict(
            temp=int(c.memory_analysis().temp_size_in_bytes), loss=float(l),
            permutes=dist.collective_permute_bytes(c.as_text())["ops"],
            grads=[np.asarray(x).ravel().tolist() for x in jax.tree.leaves(gr)])

# sar_aggregate's ``kernel``: the GEMM inside the ring's VJP equals the GEMM before it (values and
# gradients of x, kernel, edge weights and row scales), narrower and wider outputs (F < K, F > K)
from jax.sharding import PartitionSpec as PS
def ring_loss(x, kern, w, sc, fused, remat):
    def body(xb, wb, scb, snd, rcv, *rows):
        y = xb[0] if fused else xb[0] @ kern
        out = dist.sar_aggregate(y, tuple(r[0] for r in rows), snd[0], rcv[0], wb[0], sg.offsets, sg.lengths,
                                 remat=remat, row_scale=scb[0], kernel=kern if fused else None)
        return jax.lax.psum(jnp.sum(jnp.sin(out)), dist.AXIS)
    spec = PS(dist.AXIS)
    return dist.shard_map(body, mesh, in_specs=(spec,) * (5 + len(sg.send_rows)), out_specs=PS())(
        x, w, sc, sg.senders, sg.receivers, *sg.send_rows)
out["kernel"] = {}
for K, Fo in ((6, 3), (3, 6)):
    xs = jnp.asarray(rng.normal(0.0, 1.0, sg.x.shape[:2] + (K,)), jnp.float32)
    kern = jnp.asarray(rng.normal(0.0, 1.0, (K, Fo)), jnp.float32)
    scs = jnp.asarray(rng.uniform(0.2, 1.0, sg.x.shape[:2] + (1,)), jnp.float32)
    vals = {}
    for fused, remat in ((False, False), (True, True), (True, False)):
        f = jax.jit(jax.value_and_grad(lambda *a: ring_loss(*a, fused, remat), argnums=(0, 1, 2, 3)))
        vals[(fused, remat)] = f(xs, kern, sg.weight, scs)
    ref_l, ref_g = vals[(False, False)]
    out["kernel"][f"{K}->{Fo}"] = {f"{fu}:{re}": [abs(float(l) - float(ref_l)) / abs(float(ref_l))] +
                                   [rel(a, b) for a, b in zip(gr, ref_g)]
                                   for (fu, re), (l, gr) in vals.items() if fu}

# int8 halo: close to float32, sends s8 codes + f32 row scales
P = 4
part = dist.partition_graph(s, r, N, P)
mesh = dist.make_mesh(P)
sg = dist.shard_graph(g, part, mesh)
m = model(); m.eval()
gd, st = nnx.split(m)
res = {}
for int8 in (False, True):
    f = jax.jit(lambda st, sg: dist.logits_and_loss(nnx.merge(gd, st), sg, mesh, int8_halo=int8))
    c = f.lower(st, sg).compile()
    logits, loss = c(st, sg)
    res[int8] = (np.asarray(logits), float(loss), dist.collective_permute_bytes(c.as_text()))
st8 = dist.comm_stages(m, part, padded=True, int8=True)
out["int8"] = dict(loss32=res[False][1], loss8=res[True][1],
                   max_logit_diff=float(np.max(np.abs(res[True][0] - res[False][0]))),
                   max_logit=float(np.max(np.abs(res[False][0]))),
                   s8_bytes=res[True][2].get("s8", 0), f32_bytes8=res[True][2].get("f32", 0),
                   f32_bytes32=res[False][2].get("f32", 0),
                   modeled8=sum(float(jnp.sum(x.link_bytes)) for x in st8) / P)
try:
    dist.logits_and_loss(m, sg, dist.make_mesh(2))
except ValueError as e:
    out["mesh_mismatch"] = str(e)

# the int8 halo's backward: L = sum(c * h) + sum(h^2) / 2 of the received rows h, so
# dL/dy[p] = c[p+1] + h (f32: h = y[p]; int8: h = dequantized y[p], straight-through)
from jax.sharding import PartitionSpec as PS
from codesign.quant.export import quantize_rows_int8
mesh = dist.make_mesh(P)
ys = jnp.asarray(rng.normal(0.0, 1.0, (P, 9, 7)) * rng.uniform(0.1, 10.0, (P, 9, 1)), jnp.float32)
cs = jnp.asarray(rng.normal(0.0, 1.0, (P, 9, 7)), jnp.float32)
def halo_loss(y, c, int8):
    def body(yb, cb):
        h = dist.exchange(yb[0], dist.ring_perm(P, 1), int8)
        return jax.lax.psum(jnp.sum(cb[0] * h) + 0.5 * jnp.sum(h * h), dist.AXIS)
    return dist.shard_map(body, mesh, in_specs=(PS(dist.AXIS), PS(dist.AXIS)), out_specs=PS())(y, c)
g32, g8 = (np.asarray(jax.jit(jax.grad(halo_loss), static_argnums=2)(ys, cs, i8)) for i8 in (False, True))
deq = np.stack([np.asarray(q, np.float32) * np.asarray(sc)[:, None]
                for q, sc in (quantize_rows_int8(ys[p]) for p in range(P))])
c_from = np.roll(np.asarray(cs), -1, axis=0)  # device p's rows land on p + 1, whose c they meet
out["int8_grad"] = dict(
    finite=bool(np.all(np.isfinite(g8))),
    err32=float(np.max(np.abs(g32 - (c_from + np.asarray(ys))))),
    err8_vs_deq=float(np.max(np.abs(g8 - (c_from + deq)))),
    # |g8 - g32| = |deq - y| <= scale / 2 = max_j |y[i, j]| / 254 per row (quantize_rows_int8)
    ratio_to_bound=float(np.max(np.abs(g8 - g32) / (np.max(np.abs(np.asarray(ys)), axis=2, keepdims=True) / 254.0))),
    max_diff=float(np.max(np.abs(g8 - g32))))
# through the whole partitioned model: the int8 halo's parameter gradients are finite, near f32's
gs = {}
for int8 in (False, True):
    gr = nnx.jit(nnx.grad(lambda mm: dist.loss_fn(mm, sg, mesh, int8_halo=int8)))(m)
    gs[int8] = {jax.tree_util.keystr(k): np.asarray(v) for k, v in jax.tree_util.tree_leaves_with_path(gr)}
out["int8_model_grad"] = {k: dict(finite=bool(np.all(np.isfinite(gs[True][k]))), rel=rel(gs[True][k], gs[False][k]),
                              amax=float(np.max(np.abs(gs[False][k])))) for k in gs[False]}

# train_distributed: 2 epochs of Cora on 2 devices
from codesign.data import load_planetoid
from codesign.hwmodel import presets
from codesign.results import check_run_record
from codesign.train import TrainConfig
try:
    cora = load_planetoid("cora")
except FileNotFoundError as e:
    out["train_distributed"] = {"skip": str(e)}
else:
    cfg = TrainConfig.from_flat(epochs=2, bits=8, cost_weight=0.1, edge_mask=True, seed=0)
    import logging
    class _Compiles(logging.Handler):  # lowerings of the training step for compilation (jax_log_compiles)
        n = 0
        def emit(self, record):
            _Compiles.n += record.getMessage().startswith("Compiling jit(step) ")
    logging.getLogger("jax").addHandler(_Compiles())
    jax.config.update("jax_log_compiles", True)
    res = dist.train_distributed(cora, cfg, presets.get("h100"), 2, topology="loopback_gloo", int8_halo=True)
    jax.config.update("jax_log_compiles", False)
    res["step_compiles"] = _Compiles.n
    check_run_record(res)
    out["train_distributed"] = {k: res[k] for k in ("test_accuracy", "val_accuracy", "train_accuracy", "final_loss",
                                                    "modeled", "dense_modeled", "densities", "layer_bits", "bits",
                                                    "selected_epoch", "devices", "partition", "comm_bytes_per_epoch",
                                                    "link", "topology", "step_compiles")}
print("RESULT" + json.dumps(out))
"""


def _run(code: str, timeout: int = 300) -> str:
    env = dict(os.environ, XLA_FLAGS=xla_flags("--xla_force_host_platform_device_count=8"), JAX_PLATFORMS="cpu")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                       timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


@pytest.fixture(scope="module")
def multi_device():
    out = _run(_CHECK)
    return json.loads(out.split("RESULT", 1)[1])


@pytest.mark.parametrize("P", ["1", "2", "4", "8"])
def test_loss_and_grads_match_single_device(multi_device, P):
    run = multi_device["plain"][P]
    assert abs(run["loss"] - run["ref"]) <= 1e-5 * abs(run["ref"])
    assert len(run["errs"]) >= 6  # kernels, biases, feature and channel gate logits
    for name, err in run["errs"].items():
        assert err <= 1e-5, (name, err)


def test_edge_gates_live_with_receivers(multi_device):
    run = multi_device["gates"]["4"]
    assert abs(run["loss"] - run["ref"]) <= 1e-5 * abs(run["ref"])
    assert "edge_logits" in run["errs"]
    for name, err in run["errs"].items():
        assert err <= 1e-5, (name, err)


@pytest.mark.parametrize("kind", ["plain", "gates"])
def test_modeled_bytes_equal_exchanged(multi_device, kind):
    for P, run in multi_device[kind].items():
        # per layer (told apart by their widths): modeled padded ring bytes == collective-permute bytes
        hlo = {int(k.split(":")[1]): v for k, v in run["hlo"].items()}
        if P == "1":
            assert hlo == {} and run["halo_rows"] == 0
            continue
        assert len(set(run["widths"])) == 2
        for key, modeled in run["modeled"].items():
            width = int(key.split(":")[1])
            assert hlo[width] == modeled, (P, kind, width, hlo, run["modeled"])
        # the compiled program: forward + gradient (+ the backward's re-fetch of the halo with edge
        # gates, SAR's rematerialization, which XLA neither merges with the forward exchange nor
        # keeps: halo.py's custom VJP) per ring step and layer; without edge gates the re-fetch
        # JAX emits feeds nothing and XLA removes it
        passes = 3 if kind == "gates" else 2
        assert run["compiled_permutes"] == passes * (int(P) - 1) * 2
        assert run["jax_permutes"] >= run["compiled_permutes"]
        # real halo rows: forward bytes = rows x width x 4 bytes; training = 2 passes (3 with edge gates)
        for fwd, total, w in zip(run["fwd_real"], run["real"], run["widths"]):
            assert fwd == run["halo_rows"] * w * 4
            assert total == fwd * (3 if kind == "gates" else 2)


def test_rematerialization_survives_the_compiler(multi_device):
    """halo.py's custom VJP: with edge gates the backward pass fetches the halo again (a third
    collective-permute per ring step and layer, not merged with the forward's) and the compiled
    step holds less than without rematerialization; loss and gradients are the same either way.
    Without gates the re-fetch feeds nothing and is removed. (At scale, R-MAT 2^17 P = 4 hidden 64:
    experiments/remat_memory.py.)"""
    r = multi_device["remat"]
    assert r["True:True"]["permutes"] == 3 * 3 * 2 and r["True:False"]["permutes"] == 2 * 3 * 2
    assert r["False:True"]["permutes"] == r["False:False"]["permutes"] == 2 * 3 * 2
    assert r["True:True"]["temp"] < 0.8 * r["True:False"]["temp"], r
    for gates in (False, True):
        on, off = r[f"{gates}:True"], r[f"{gates}:False"]
        assert abs(on["loss"] - off["loss"]) <= 1e-6 * abs(off["loss"])
        for a, b in zip(on["grads"], off["grads"], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_sar_kernel_inside_the_ring(multi_device):
    """``sar_aggregate(kernel=W)`` (the combine GEMM inside the ring's VJP, whose backward pass
    never forms X W) equals aggregating X W: loss and the gradients of X, W, the edge weights and
    the row scales, for outputs narrower and wider than the input (the two ways `_row_dot_y` goes)."""
    r = multi_device["kernel"]
    assert set(r) == {"6->3", "3->6"}
    for case, runs in r.items():
        assert set(runs) == {"True:True", "True:False"}
        for name, errs in runs.items():
            assert len(errs) == 5 and max(errs) <= 1e-5, (case, name, errs)


def test_int8_halo(multi_device):
    r = multi_device["int8"]
    assert r["s8_bytes"] > 0 and r["f32_bytes32"] > 0
    # int8 sends codes (1 byte) + one f32 scale per row instead of 4-byte values
    assert r["s8_bytes"] + r["f32_bytes8"] == r["modeled8"]
    assert r["s8_bytes"] + r["f32_bytes8"] < 0.5 * r["f32_bytes32"]
    assert r["max_logit_diff"] <= 0.05 * r["max_logit"] and r["max_logit_diff"] > 0
    assert abs(r["loss8"] - r["loss32"]) <= 0.01 * r["loss32"]


def test_mesh_size_must_match_partition(multi_device):
    assert "mesh has 2 devices" in multi_device["mesh_mismatch"]


def test_scaling_quick(tmp_path):
    out = tmp_path / "scaling.json"
    _run(f"import runpy, sys; sys.argv = ['scaling.py', '--quick', '--out', {str(out)!r}]; "
         f"runpy.run_path('experiments/scaling.py', run_name='__main__')")
    d = json.loads(out.read_text())
    runs = d["runs"]
    assert [x["devices"] for x in runs] == [1, 2, 4, 8]
    peaks = [x["memory"]["peak_bytes"] for x in runs]
    assert all(a > b for a, b in zip(peaks, peaks[1:]))  # falls with P
    for x in runs:
        assert abs(x["loss"] - runs[0]["loss"]) <= 1e-5 * abs(runs[0]["loss"])
        assert x["exchanged_bytes_all_devices_hlo"] == x["modeled_bytes_padded"]
    assert d["memory_scaling_efficiency"]["1"] == 1.0


# ----------------------------------------------------------------- trainer pieces on one device

def _small_graph(n=80, e=400, f=12, c=3, seed=0):
    from codesign.graph import Graph
    import jax.numpy as jnp
    s, r, n = _random_graph(n, e, seed)
    s, r = s[s != r], r[s != r]  # a Graph holds no self-loops
    rng = np.random.default_rng(seed)
    return Graph(senders=jnp.asarray(s), receivers=jnp.asarray(r), x=jnp.asarray(rng.random((n, f)), jnp.float32),
                 y=jnp.asarray(rng.integers(0, c, n), jnp.int32), train_mask=jnp.asarray(rng.random(n) < .5),
                 val_mask=jnp.asarray(rng.random(n) < .2), test_mask=jnp.asarray(rng.random(n) < .2), n_nodes=n)


@pytest.mark.parametrize("field,value,match", [
    ("model", "gat", r"TrainConfig\.model\.name='gat' is not supported"),
    ("quantizer", "lsq", r"TrainConfig\.quant\.quantizer='lsq' is not supported"),
    ("select", "best_val", r"TrainConfig\.optim\.select='best_val' is not supported"),
    ("edge_sparsifier", "block", r"TrainConfig\.masks\.edge_sparsifier='block' is not supported"),
    ("budget", 0.5, r"TrainConfig\.cost\.budget is not supported"),
])
def test_build_partitioned_model_rejects(field, value, match):
    from flax import nnx
    from codesign.train import TrainConfig
    g = _small_graph()
    kw = {"bits": 8} if field == "quantizer" else {}
    if field == "edge_sparsifier":
        kw["edge_mask"] = True
    cfg = TrainConfig.from_flat(**{field: value}, **kw)
    with pytest.raises(ValueError, match=match):
        dist.build_partitioned_model(cfg, g, None, nnx.Rngs(0))


@pytest.mark.parametrize("case,match", [
    ("gat", r"model must be a codesign\.models\.GCN, got GAT"),
    ("lsq", r"conv1\.quant_x is a \w+; only the 'fixed' quantizer"),
    ("edge_mask", r"model\.edge_mask must be None or a PartitionedEdgeMask.*got EdgeMask"),
])
def test_check_model_rejects(case, match):
    from flax import nnx
    from codesign.train import TrainConfig, build_model
    g = _small_graph()
    cfg = {"gat": TrainConfig.from_flat(model="gat"), "lsq": TrainConfig.from_flat(bits=8, quantizer="lsq"),
           "edge_mask": TrainConfig.from_flat(edge_mask=True)}[case]
    model = build_model(cfg, g, nnx.Rngs(0))
    with pytest.raises(ValueError, match=match):
        dist.check_model(model)
    sg = None  # logits_and_loss checks the model before it touches the graph
    with pytest.raises(ValueError, match=match):
        dist.logits_and_loss(model, sg, dist.make_mesh(1))


def test_partitioned_cost_halo_terms():
    from flax import nnx
    from codesign import hwmodel
    from codesign.train import TrainConfig
    g = _small_graph()
    s, r = np.asarray(g.senders), np.asarray(g.receivers)
    hw, link = hwmodel.presets.get("h100"), comm.get_link("nvlink4")
    cfg = TrainConfig.from_flat(bits=8, cost_weight=0.1, edge_mask=False, feature_mask=True, hidden=8)
    reports = {}
    for P in (1, 2):
        part = dist.partition_graph(s, r, g.n_nodes, P)
        model = dist.build_partitioned_model(cfg, g, None, nnx.Rngs(0))
        rep = dist.partitioned_cost(model, part, hw, link, hard=True)
        assert set(rep) == {"latency_s", "energy_j", "dram_bytes", "comm_bytes", "comm_latency_s", "comm_energy_j"}
        assert all(np.isfinite(float(v)) for v in rep.values()), rep
        stages = dist.comm_stages(model, part)
        assert len(stages) == 2  # one halo stage per GCN layer
        assert float(rep["comm_bytes"]) == pytest.approx(sum(float(st.total_bytes) for st in stages))
        reports[P] = (rep, stages, model, part)
    rep1, stages1, model1, _ = reports[1]
    # one part: no halo, and the cost is the single-device model's
    assert all(float(st.total_bytes) == 0 for st in stages1)
    assert float(rep1["comm_bytes"]) == float(rep1["comm_latency_s"]) == float(rep1["comm_energy_j"]) == 0
    single = hwmodel.estimate(model1.workload(g.n_nodes, g.n_edges, hard=True), hw)
    for k in ("latency_s", "energy_j", "dram_bytes"):
        assert float(rep1[k]) == pytest.approx(float(getattr(single, k)), rel=1e-6)
    rep2, stages2, model2, part2 = reports[2]
    assert part2.halo_counts.sum() > 0
    assert all(float(st.total_bytes) > 0 for st in stages2)
    assert float(rep2["comm_bytes"]) > 0 and float(rep2["comm_latency_s"]) > 0 and float(rep2["comm_energy_j"]) > 0
    # halo bytes of layer i: real halo rows x exchanged width x 4 bytes (float32)
    for st, w in zip(stages2, dist.halo_widths(model2)):
        assert float(st.total_bytes) == part2.halo_counts.sum() * w * 4
    # int8 rows: 1 byte per value + a float32 scale per row
    rep8 = dist.partitioned_cost(model2, part2, hw, link, hard=True, int8=True)
    want8 = sum(part2.halo_counts.sum() * (w + 4) for w in dist.halo_widths(model2))
    assert float(rep8["comm_bytes"]) == want8 < float(rep2["comm_bytes"])
    # with the column nonzeros: the cheaper store by the objective (every field from that store); this
    # graph's features are all nonzero, so dense; a 2 %-dense input is cheaper stored CSR
    from codesign.graph import feature_column_nnz
    both = dist.partitioned_cost(model2, part2, hw, link, hard=True, feature_nnz=feature_column_nnz(g.x))
    assert {k: float(v) for k, v in both.items()} == pytest.approx({k: float(v) for k, v in rep2.items()}, rel=1e-6)
    acc = hwmodel.presets.get("h100-datasheet")  # no per-kernel cost: the feature bytes show
    sparse_nnz = np.full(g.n_features, 0.02 * g.n_nodes, np.float32)
    stored_dense = dist.partitioned_cost(model2, part2, acc, link, hard=True)
    cheap = dist.partitioned_cost(model2, part2, acc, link, hard=True, feature_nnz=sparse_nnz)
    assert float(cheap["energy_j"]) < float(stored_dense["energy_j"])
    assert float(cheap["comm_bytes"]) == float(stored_dense["comm_bytes"])
    # differentiable in the feature gates (the cost term of the trainer's loss)
    grads = nnx.grad(lambda m: dist.partitioned_cost(m, part2, hw, link, int8=True)["energy_j"],
                     argnums=nnx.DiffState(0, nnx.Param))(model2)
    fg = np.asarray(grads["feature_mask"]["gate"]["log_alpha"][...])
    assert np.all(np.isfinite(fg)) and np.any(fg != 0)


def test_int8_halo_backward(multi_device):
    r = multi_device["int8_grad"]
    assert r["finite"]
    assert r["err32"] <= 1e-5  # f32 halo: the cotangent returns to the sender, dL/dy = c[p+1] + y
    assert r["err8_vs_deq"] <= 1e-5  # int8: straight-through, along the same inverse permutation
    # within the int8 rounding: |g8 - g32| <= max_j |y[i, j]| / 254 per row (+ float32 rounding)
    assert 0 < r["ratio_to_bound"] <= 1.0 + 1e-4, r
    # through the whole model (eval mode: deterministic gates): finite, and near the f32 halo's
    # gradient (measured: <= 0.1 % relative on the kernels and biases)
    grads = multi_device["int8_model_grad"]
    assert sum(g["amax"] > 0 for name, g in grads.items() if "kernel" in name) == 2
    for name, g in grads.items():
        assert g["finite"], name
        assert g["rel"] <= 0.01, (name, g["rel"])


def test_train_distributed_on_cora(multi_device):
    from codesign.results import RUN_RECORD_FIELDS
    r = multi_device["train_distributed"]
    if "skip" in r:
        pytest.skip(r["skip"])
    for k in ("test_accuracy", "val_accuracy", "train_accuracy"):
        assert 0.0 <= r[k] <= 1.0
    assert np.isfinite(r["final_loss"]) and r["final_loss"] > 0
    for k in ("modeled", "dense_modeled"):
        assert all(np.isfinite(v) and v >= 0 for v in r[k].values())
    assert r["modeled"]["comm_bytes"] > 0 and r["comm_bytes_per_epoch"] > 0
    assert set(r["layer_bits"]) == {"x0", "w0", "x1", "w1"} and r["bits"] == 8
    assert r["selected_epoch"] == 1 and r["devices"] == 2 and r["partition"]["n_parts"] == 2
    # the step is compiled once: its state starts laid out on the mesh as the step returns it
    # (train.loop._on_the_mesh; without, the second epoch compiled it again)
    assert r["step_compiles"] == 1
    assert 0.0 <= r["densities"]["edge"] <= 1.0
    assert set(RUN_RECORD_FIELDS) >= {"layer_bits", "selected_epoch"}
    # priced on the declared topology (this machine's loopback, hundreds of us per stage), not on a link
    from codesign.hwmodel.topology import LOOPBACK_GLOO_TOPOLOGY_FIT
    assert r["topology"] == "loopback_gloo" and r["link"] is None
    assert r["dense_modeled"]["comm_latency_s"] >= 2 * LOOPBACK_GLOO_TOPOLOGY_FIT["latency_s"]


def test_partition_edge_mask_refuses_a_model_without_one():
    from flax import nnx

    from codesign import distributed as dist
    from codesign.models import GCN
    with pytest.raises(ValueError, match=r"^partition_edge_mask: model.edge_mask has no gate logits"):
        dist.partition_edge_mask(GCN(4, 8, 2, rngs=nnx.Rngs(0)), None, None, rngs=nnx.Rngs(0))
