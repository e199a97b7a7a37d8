"""Declared topologies, the DGCL-style exchange planner and hierarchical partitioning
(`codesign.hwmodel.topology`, `codesign.hwmodel.planner`, `codesign.distributed.hierarchical_partition`).

Hand-computed cases use a tiny topology (2 hosts x 2 devices, round bandwidths); the rest use the
presets. No multi-device JAX: everything here is the model.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import distributed as dist
from codesign.data.synthetic import rmat_edges
from codesign.hwmodel import comm, planner
from codesign.hwmodel import topology as T

ROOT = Path(__file__).resolve().parent.parent


def _tiny(shared_nic: bool = False) -> T.Topology:
    """2 hosts x 2 devices (0, 1 on host 0; 2, 3 on host 1). Per device a fast link (100 B/s
    per direction, 1 s start-up on tx); per NIC 10 B/s per direction, 5 s start-up on tx; one
    NIC per device, or one per host (``shared_nic``). Energy: 1 pJ/B fast, 10 pJ/B NIC tx."""
    res, idx = [], {}

    def add(name, bw, lat, e):
        idx[name] = len(res)
        res.append(T.Resource(name, bw, lat, e))

    for d in range(4):
        add(f"d{d}.fast.tx", 100.0, 1.0, 1.0)
        add(f"d{d}.fast.rx", 100.0, 0.0, 0.0)
    for n in range(2 if shared_nic else 4):
        add(f"nic{n}.tx", 10.0, 5.0, 10.0)
        add(f"nic{n}.rx", 10.0, 0.0, 0.0)
    nic = (lambda d: d // 2) if shared_nic else (lambda d: d)

    def route(q, p):
        if q // 2 == p // 2:
            return idx[f"d{q}.fast.tx"], idx[f"d{p}.fast.rx"]
        return idx[f"nic{nic(q)}.tx"], idx[f"nic{nic(p)}.rx"]

    return T.Topology("tiny", (0, 0, 1, 1), tuple(res), T._routes(4, route))


# device 0 owes rows to both devices of host 1 (the same 100 bytes of rows: 100 distinct bytes per host),
# device 1 owes device 0 50 bytes
HALO = np.array([[0, 0, 100, 100], [50, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], np.float64)
HOST = np.array([[0, 100], [50, 0], [0, 0], [0, 0]], np.float64)


def test_transfer_cost_by_hand_and_contention():
    topo = _tiny()
    b = np.zeros((4, 4))
    b[0, 2] = 100.0
    one = T.transfer_cost(b, topo)
    assert float(one.time_s) == pytest.approx(100 / 10 + 5)  # NIC 0 busy 10 s + route start-up 5 s
    assert float(one.energy_j) == pytest.approx(100 * 10 * 1e-12)
    # two transfers from different devices: own NICs, no contention
    b[1, 3] = 100.0
    assert float(T.transfer_cost(b, topo).time_s) == pytest.approx(15.0)
    # the same two transfers through one shared NIC: the bandwidth term doubles
    shared = T.transfer_cost(b, _tiny(shared_nic=True))
    assert float(shared.time_s) - 5 == pytest.approx(2 * (15.0 - 5))
    loads = dict(zip(_tiny(shared_nic=True).resource_names, np.asarray(shared.load_bytes)))
    assert loads["nic0.tx"] == loads["nic1.rx"] == 200.0
    # on the DGX preset with one NIC per host: two GPUs' transfers to the other node share it
    for nics, factor in ((8, 1.0), (1, 2.0)):
        topo = T.dgx_cluster(2, nics_per_host=nics)
        b = np.zeros((16, 16))
        b[0, 8] = 1e9
        t1 = float(T.transfer_cost(b, topo).time_s)
        b[1, 9] = 1e9
        t2 = float(T.transfer_cost(b, topo).time_s)
        lat = float(topo.route_latency_s[0, 8])
        assert lat == pytest.approx(5e-6)
        assert t1 - lat == pytest.approx(1e9 / 50e9, rel=1e-5)  # NDR: 50 GB/s per direction
        assert (t2 - lat) == pytest.approx(factor * (t1 - lat), rel=1e-5)


def test_plans_by_hand():
    topo = _tiny()
    cost = {k: float(planner.plan_cost(k, HALO, topo, HOST)[0]) for k in planner.KINDS}
    # ring: step 1 empty; step 2 = 0->2 (NIC 0: 10 s + 5); step 3 = 0->3 and 1->0 (NIC 0: 10 s + 5)
    assert cost["ring"] == pytest.approx(30.0)
    # p2p: NIC 0 carries 200 B (20 s) + 5
    assert cost["p2p"] == pytest.approx(25.0)
    # relay: gather 0->1 50 B, 1->0 50 B (0.5 s + 1); inter-host 0->2, 1->3 50 B each (5 s + 5);
    # scatter 2->3, 3->2 50 B each (0.5 s + 1)
    assert cost["relay"] == pytest.approx(1.5 + 10 + 1.5)
    # leader (device 0, device 2): gather 1->0 (0.5 + 1); 0->2 100 B (10 + 5); scatter 2->3 100 B (1 + 1)
    assert cost["relay_leader"] == pytest.approx(1.5 + 15 + 2)
    plan = planner.plan_exchange(HALO, topo, host_bytes=HOST)
    assert plan.kind == "relay" and plan.time_s == pytest.approx(13.0)
    assert plan.ring_time_s == pytest.approx(30.0) and plan.speedup_over_ring == pytest.approx(30 / 13)
    assert [s.name for s in plan.stages] == ["gather", "inter-host", "scatter"]
    assert plan.stages[1].busiest in ("nic0.tx", "nic1.tx", "nic2.rx", "nic3.rx")
    relieved = {name: (ring, now) for name, ring, now in plan.relieved}
    assert relieved["nic0.tx"] == (200.0, 50.0)
    assert "nic1.tx" not in relieved  # it now carries device 0's share
    # without the distinct-rows count the relay ships 200 B: it only balances the NICs
    assert float(planner.plan_cost("relay", HALO, topo)[0]) == pytest.approx(2 + 15 + 1.5)
    # the adjoint (gradient) pass of p2p is the transposed exchange
    t_rev = planner.plan_cost("p2p", HALO, topo, reverse=True)[0]
    assert float(t_rev) == pytest.approx(float(T.transfer_cost(HALO.T, topo).time_s))


@pytest.mark.parametrize("topo", [T.two_dgx_h100_ib(), T.dgx_h100(), T.loopback_gloo(4),
                                  T.dgx_cluster(2, nics_per_host=1)], ids=lambda t: t.name)
def test_never_worse_than_ring_or_p2p(topo):
    rng = np.random.default_rng(0)
    P = topo.n_devices
    for trial in range(3):
        halo = rng.uniform(0, 1e6, (P, P)) * (rng.random((P, P)) < 0.7)
        plan = planner.plan_exchange(halo, topo)
        # against the ring and peer-to-peer priced independently (plan_cost, not the planner's table),
        # where the topology's runtime executes them (loopback_gloo: the ring only)
        for kind in [k for k in ("ring", "p2p") if k in planner.candidate_kinds(topo)]:
            assert plan.time_s <= float(planner.plan_cost(kind, halo, topo)[0]) * (1 + 1e-6)
        assert plan.time_s == pytest.approx(float(planner.plan_cost(plan.kind, halo, topo)[0]), rel=1e-6)
        # every plan delivers the same bytes to the same devices: p2p's load is the payload on its routes
        assert np.sum(plan.ring_load_bytes) == pytest.approx(
            float(np.einsum("qp,qpr->", halo * (1 - np.eye(P)), topo.crosses)), rel=1e-5)


def test_ring_on_a_link_is_comm_model():
    """One mechanism: `comm`'s ring on a `LinkSpec` is the planner's ring on that link as a topology."""
    rows = np.array([[0, 3, 1], [2, 0, 0], [5, 4, 0]])
    for link in (comm.nvlink4(), comm.infiniband_ndr()):
        topo = T.Topology.from_link(link, 3)
        for kw in ({}, {"training": True}, {"training": True, "refetch": True, "int8": True}):
            st = comm.communication_stage("l", rows, 16, 8 if kw.get("int8") else 32, **kw)
            ref = comm.communication_cost([st], link)
            got = planner.planned_cost([dataclasses.replace(st, plan="ring")], topo)
            assert float(got.latency_s) == pytest.approx(float(ref.latency_s), rel=1e-6)
            assert float(got.energy_j) == pytest.approx(float(ref.energy_j), rel=1e-6)
            assert float(got.bytes) == float(ref.bytes) and got.plans == (("l", "ring"),)
        # left to choose, the planner is no slower than the ring (here p2p: one stage, each device its own link)
        chosen = planner.planned_cost([st], topo)
        assert chosen.plans == (("l", "p2p"),) and float(chosen.latency_s) < float(ref.latency_s)


def _measured(run: int) -> dict:
    data = json.loads((ROOT / "results" / "comm_loopback_cpu.json").read_text())
    return {int(n): [(r["bytes"], r["median_s"]) for r in rows] for n, rows in data["runs"][run]["processes"].items()}


def _ring_s(n: int, b: float, fit=None) -> float:
    return float(planner.plan_cost("ring", b * (1.0 - np.eye(n)), T.loopback_gloo(n, fit=fit))[0])


def test_loopback_gloo_is_the_stored_fit_and_predicts_the_second_run():
    """`LOOPBACK_GLOO_TOPOLOGY_FIT` is the fit stored by experiments/comm_measure.py (on runs 0
    and 3), and the ring planned on `loopback_gloo(N)` predicts the *other* runs' measured
    per-layer exchange (runs 1 and 2, measured in between) within 25 % mean |error| at N = 2, 4,
    8, recomputed here from the stored per-run medians."""
    data = json.loads((ROOT / "results" / "comm_loopback_cpu.json").read_text())
    assert T.LOOPBACK_GLOO_TOPOLOGY_FIT == pytest.approx(data["topology_fit"], rel=1e-3)
    runs = [_measured(i) for i in range(4)]

    def pooled(idx):  # per N and size, the median over the runs' medians
        return {n: [(b, float(np.median([runs[i][n][j][1] for i in idx]))) for j, (b, _) in enumerate(rows)]
                for n, rows in runs[idx[0]].items()}

    check = pooled([1, 2])
    assert sorted(check) == [2, 4, 8]
    for n, rows in check.items():
        err = [abs(_ring_s(n, b) / t - 1.0) for b, t in rows]
        assert np.mean(err) <= 0.25, (n, np.round(err, 2))
    # the fit recomputed from the fit runs' stored medians is the stored one
    fit_rows = [(n, b, t) for n, rows in pooled([0, 3]).items() for b, t in rows]
    refit = T.fit_loopback_gloo(fit_rows, data["topology_fit"]["cores"], data["topology_fit"]["cache_bytes"])
    assert refit == pytest.approx(data["topology_fit"], rel=1e-3)


def test_loopback_gloo_ring_is_its_closed_form_and_the_fit_recovers_it():
    """The planner's ring on `loopback_gloo` is `fit_loopback_gloo`'s model (below and beyond the
    cache, with and without oversubscription), and the fit recovers known parameters from rows
    that model generates."""
    truth = {"latency_s": 3e-4, "switch_s": 5e-4, "bw_bytes_per_s": 3e9, "spill_bw_bytes_per_s": 1e9,
             "cache_bytes": float(32 << 20), "cores": 2}
    rows = []
    for n in (2, 4, 8):
        for b in (4 << 10, 1 << 20, 8 << 20, 32 << 20):
            lat = truth["latency_s"] + truth["switch_s"] * max(0, n - 2)
            load = n * b
            by_hand = (n - 1) * (lat + load / (1e9 if load > 32 << 20 else 3e9))  # beyond the cache: all at spill_bw
            assert _ring_s(n, b, truth) == pytest.approx(by_hand, rel=1e-5)
            rows.append((n, b, by_hand))
    assert T.fit_loopback_gloo(rows, 2, 32 << 20) == pytest.approx(truth, rel=1e-3)
    with pytest.raises(ValueError, match="switch_s cannot be fitted"):
        T.fit_loopback_gloo([r for r in rows if r[0] == 2], 2, 32 << 20)
    with pytest.raises(ValueError, match="spill_bw_bytes_per_s cannot be fitted"):
        T.fit_loopback_gloo([r for r in rows if r[0] * r[1] <= 32 << 20], 2, 32 << 20)
    with pytest.raises(ValueError, match="bw_bytes_per_s cannot be fitted"):
        T.fit_loopback_gloo([r for r in rows if r[0] * r[1] > 32 << 20], 2, 32 << 20)
    with pytest.raises(ValueError, match="latency_s and switch_s cannot be told apart"):
        T.fit_loopback_gloo([r for r in rows if r[0] == 4], 2, 32 << 20)
    with pytest.raises(ValueError, match=r"loopback_gloo\(fit\).cores"):
        T.loopback_gloo(4, fit={**truth, "cores": 2.5})
    # the loopback's runtime runs the ring, so the planner prices nothing else there
    assert planner.candidate_kinds(T.loopback_gloo(4)) == ("ring",)
    assert planner.plan_exchange(1e3 * (1 - np.eye(4)), T.loopback_gloo(4)).kind == "ring"
    # the topology's planner ring at N = 4 also crosses the cliff where the stage's bytes outgrow the cache
    assert _ring_s(4, (8 << 20) + 4, truth) / _ring_s(4, 8 << 20, truth) == pytest.approx(
        (5e-4 * 2 + 3e-4 + (32 << 20) / 1e9) / (5e-4 * 2 + 3e-4 + (32 << 20) / 3e9), rel=1e-4)
    with pytest.raises(ValueError, match=r"loopback_gloo\(fit\).switch_s"):
        T.loopback_gloo(4, fit={**truth, "switch_s": -1.0})
    with pytest.raises(ValueError, match="capacity_bytes: give it together"):
        T.Resource("x", 1.0, 0.0, 0.0, capacity_bytes=10.0)


def test_loopback_gloo_fits_the_measurement_better_than_one_link():
    """Out of sample on N (the one link is fitted on N = 2 only): at N = 4 and 8 the shared,
    oversubscribed loopback predicts the measured exchange far better than `comm`'s one link."""
    link = comm.loopback_gloo()
    for n, rows in _measured(1).items():  # a check run
        if n == 2:
            continue
        topo_err = np.median([abs(math.log(_ring_s(n, b) / t)) for b, t in rows])
        link_err = np.median([abs(math.log((n - 1) * (link.latency_s + b / link.bw_bytes_per_s) / t)) for b, t in rows])
        assert topo_err < 0.3 and topo_err < 0.25 * link_err, (n, topo_err, link_err)


@pytest.fixture(scope="module")
def rmat_parts():
    s, r = rmat_edges(12, 16 << 12, seed=0)
    n = 1 << 12
    hier, cuts = dist.hierarchical_partition(s, r, n, 2, 8)
    flat = dist.partition_graph(s, r, n, 16)
    return s, r, n, hier, cuts, flat


def test_hierarchical_partition_cuts(rmat_parts):
    s, r, n, hier, cuts, flat = rmat_parts
    dh = [d // 8 for d in range(16)]
    assert hier.method == "hierarchical" and hier.n_parts == 16
    assert cuts == dist.cut_by_level(s, r, hier.part, dh) and cuts["total"] == hier.edge_cut
    flat_cuts = dist.cut_by_level(s, r, flat.part, dh)
    assert cuts["inter_host"] < flat_cuts["inter_host"]  # the slow level is cut less
    # host-level halo rows: distinct rows, between the largest and the sum of the per-device counts
    hh = dist.host_halo_counts(hier, dh)
    inter = np.asarray(dh)[:, None] != np.asarray(dh)[None, :]
    per_host = np.stack([hier.halo_counts[:, 8 * h:8 * h + 8].sum(1) for h in (0, 1)], 1)
    per_dev = np.stack([hier.halo_counts[:, 8 * h:8 * h + 8].max(1) for h in (0, 1)], 1)
    assert np.all(hh <= per_host) and np.all(hh >= per_dev)
    assert hh.sum() < (hier.halo_counts * inter).sum()  # R-MAT hubs are read by several devices of a host


def test_plan_on_two_dgx_beats_ring_and_relieves_ib(rmat_parts):
    _, _, _, hier, _, _ = rmat_parts
    topo = T.two_dgx_h100_ib()
    row_bytes = 256 * 4  # GCN hidden 256, float32
    halo = hier.halo_counts * row_bytes
    host = dist.host_halo_counts(hier, topo.device_host) * row_bytes
    plan = planner.plan_exchange(halo, topo, host_bytes=host)
    assert plan.kind == "relay"
    assert plan.time_s < plan.ring_time_s and plan.speedup_over_ring > 2.0
    names = np.array(topo.resource_names)
    nic = np.array([".nic" in n for n in names])
    # the InfiniBand NICs carry fewer bytes than in the ring (each row crosses once per host), all of them
    assert np.sum(plan.load_bytes[nic]) < np.sum(plan.ring_load_bytes[nic])
    relieved = {n for n, _, _ in plan.relieved}
    assert all(n in relieved for n in names[nic] if plan.ring_load_bytes[list(names).index(n)] > 0)
    # the inter-host stage is bounded by a NIC
    assert ".nic" in plan.stages[1].busiest
    # one DGX: no slow links to avoid; p2p (one fused stage) beats the ring's 7 steps
    one = planner.plan_exchange(dist.partition_graph(*_edges(rmat_parts), 8).halo_counts * row_bytes, T.dgx_h100())
    assert one.kind == "p2p" and one.time_s < one.ring_time_s


def _edges(rmat_parts):
    s, r, n = rmat_parts[:3]
    return s, r, n


def test_plan_cost_differentiable():
    topo = T.two_dgx_h100_ib()
    rng = np.random.default_rng(1)
    halo = jnp.asarray(rng.uniform(0, 1e6, (16, 16)), jnp.float32)
    for kind in planner.KINDS:
        f = lambda w: planner.plan_cost(kind, halo * w, topo)[0]
        g = float(jax.grad(f)(1.0))
        # above the latency floor the time is linear in the bytes: d time / d scale = time minus latencies
        fd = float(f(2.0) - f(1.0))
        assert np.isfinite(g) and g > 0 and g == pytest.approx(fd, rel=1e-3), kind
        assert float(jax.grad(lambda w: planner.plan_cost(kind, halo * w, topo)[1])(1.0)) > 0


def test_partitioned_cost_on_a_topology(rmat_parts):
    from flax import nnx
    from codesign import hwmodel
    from codesign.data.synthetic import rmat_graph
    from codesign.train import TrainConfig
    g = rmat_graph(12, 16 << 12, n_features=256, seed=0)  # the fixture's edges
    hier = rmat_parts[3]
    hw, topo = hwmodel.presets.get("h100"), T.two_dgx_h100_ib()
    cfg = TrainConfig.from_flat(cost_weight=0.1, edge_mask=False, feature_mask=True, hidden=256)
    model = dist.build_partitioned_model(cfg, g, None, nnx.Rngs(0))
    on_link = dist.partitioned_cost(model, hier, hw, comm.infiniband_ndr(), hard=True, training=True)
    on_topo = dist.partitioned_cost(model, hier, hw, topo, hard=True, training=True)
    assert set(on_topo) == set(on_link)
    assert float(on_topo["comm_bytes"]) == pytest.approx(float(on_link["comm_bytes"]))  # same payload
    stages = dist.comm_stages(model, hier, training=True, topology=topo)
    assert dist.halo_widths(model) == (256, 2)
    # per layer: 256 floats a row are bandwidth-bound (relay), 2 (the logits) latency-bound (p2p, one stage)
    assert [st.plan for st in stages] == ["relay", "p2p"] and stages[0].host_bytes.shape == (16, 2)
    ring = sum(float(planner.plan_cost("ring", st.link_bytes, topo)[0] +
                     planner.plan_cost("ring", st.grad_link_bytes, topo, reverse=True)[0]) for st in stages)
    assert 0 < float(on_topo["comm_latency_s"]) < ring
    # the plan is chosen statically, so the cost jits and differentiates in the feature gates
    f = lambda m: dist.partitioned_cost(m, hier, hw, topo, int8=True)["latency_s"]
    assert float(nnx.jit(f)(model)) == pytest.approx(float(f(model)), rel=1e-5)
    grads = nnx.grad(f, argnums=nnx.DiffState(0, nnx.Param))(model)
    fg = np.asarray(grads["feature_mask"]["gate"]["log_alpha"][...])
    assert np.all(np.isfinite(fg)) and np.any(fg != 0)
    with pytest.raises(ValueError, match=r"^comm_stages\(topology\): Topology\('dgx_h100'\) has 8 devices"):
        dist.partitioned_cost(model, hier, hw, T.dgx_h100())


def test_bad_inputs_name_the_field():
    with pytest.raises(ValueError, match=r"^Resource\('x'\)\.bw_bytes_per_s: must be finite and > 0"):
        T.Resource("x", -1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match=r"^Resource\('x'\)\.latency_s: must be finite and >= 0"):
        T.Resource("x", 1.0, float("nan"), 0.0)
    with pytest.raises(TypeError, match=r"^Resource\('x'\)\.energy_pj_per_byte: must be a real number"):
        T.Resource("x", 1.0, 0.0, True)
    r = (T.Resource("a", 1.0, 0.0, 0.0),)
    with pytest.raises(ValueError, match=r"^Topology\('t'\)\.device_host: must be a non-empty tuple"):
        T.Topology("t", (), r, ())
    with pytest.raises(ValueError, match=r"^Topology\('t'\)\.device_host: hosts must be numbered"):
        T.Topology("t", (0, 2), r, (((), (0,)), ((0,), ())))
    with pytest.raises(ValueError, match=r"^Topology\('t'\)\.resources: duplicate name 'a'"):
        T.Topology("t", (0, 0), r + r, (((), (0,)), ((0,), ())))
    with pytest.raises(ValueError, match=r"^Topology\('t'\)\.routes: must be 2 x 2"):
        T.Topology("t", (0, 0), r, (((), (0,)),))
    with pytest.raises(ValueError, match=r"^Topology\('t'\)\.routes\[0\]\[1\]: must cross at least one resource"):
        T.Topology("t", (0, 0), r, (((), ()), ((0,), ())))
    with pytest.raises(ValueError, match=r"^Topology\('t'\)\.routes\[1\]\[0\]: resource index out of range"):
        T.Topology("t", (0, 0), r, (((), (0,)), ((3,), ())))
    with pytest.raises(ValueError, match=r"^Topology\('t'\)\.relay_peer\[0\]\[1\]: must be a device of host 1"):
        T.Topology("t", (0, 1), r, (((), (0,)), ((0,), ())), relay_peer=((0, 0), (1, 1)))
    topo = _tiny()
    with pytest.raises(ValueError, match=r"^plan_exchange\(halo_bytes\): must be \[P, P\] with P = 4"):
        planner.plan_exchange(np.ones((3, 3)), topo)
    with pytest.raises(ValueError, match=r"^plan_exchange\(halo_bytes\)\[0, 2\]: must be finite and >= 0"):
        planner.plan_exchange(-HALO, topo)
    with pytest.raises(ValueError, match=r"^plan_exchange\(host_bytes\): must be \[P, H\] = \[4, 2\]"):
        planner.plan_exchange(HALO, topo, host_bytes=np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"^plan_exchange\(host_bytes\): distinct bytes"):
        planner.plan_exchange(HALO, topo, host_bytes=HOST * 3)
    with pytest.raises(ValueError, match=r"^plan_exchange\(kinds\): 'relay' is not a plan for Topology\('dgx_h100'\)"):
        planner.plan_exchange(np.ones((8, 8)), T.dgx_h100(), kinds=("relay",))
    with pytest.raises(ValueError, match=r"^plan kind: unknown 'tree'"):
        planner.plan_cost("tree", HALO, topo)
    with pytest.raises(ValueError, match=r"^choose_plan\[gradient\]\(halo_bytes\)\[0, 2\]: must be finite and >= 0"):
        planner.choose_plan(HALO, topo, grad_bytes=-HALO)
    with pytest.raises(ValueError, match=r"^choose_plan: choosing a plan needs concrete byte counts"):
        jax.jit(lambda b: planner.choose_plan(b, topo) and 0.0)(jnp.asarray(HALO))
    with pytest.raises(ValueError, match=r"^transfer_cost\(transfer_bytes\): must be \[4, 4\]"):
        T.transfer_cost(np.ones(4), topo)
    with pytest.raises(ValueError, match=r"^unknown topology preset 'dgx_a100'"):
        T.get_topology("dgx_a100")
    with pytest.raises(ValueError, match=r"^dgx_cluster\(nics_per_host\): must be an int in \[1, 8\]"):
        T.dgx_cluster(2, nics_per_host=16)
    with pytest.raises(ValueError, match=r"^hierarchical_partition: 2 x 3 devices exceed the number of nodes 4"):
        dist.hierarchical_partition(np.array([0, 1]), np.array([1, 0]), 4, 2, 3)
    with pytest.raises(ValueError, match=r"^hierarchical_partition: devices_per_host must be an int"):
        dist.hierarchical_partition(np.array([0, 1]), np.array([1, 0]), 4, 2, 1.5)
    with pytest.raises(TypeError, match=r"^communication_cost\(link\): must be a LinkSpec, got Topology"):
        comm.communication_cost([comm.communication_stage("l", np.ones((4, 4)), 4, 32)], topo)


def test_topology_plans_and_device_count_refused_in_one_line():
    topo = T.loopback_gloo(2)
    with pytest.raises(ValueError, match=r"^Topology\('x'\)\.plans: must be None or a non-empty tuple"):
        T.Topology("x", topo.device_host, topo.resources, topo.routes, plans=())
    with pytest.raises(ValueError, match=r"^get_topology\(n_devices\): topology 'dgx_h100' has 8 devices, not 4$"):
        T.get_topology("dgx_h100", 4)
    with pytest.raises(ValueError, match=r"^get_topology\(n_devices\): must be an int >= 1"):
        T.get_topology("loopback_gloo", 0)
    assert T.get_topology("loopback_gloo", 8).n_devices == 8
