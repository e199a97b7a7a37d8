"""Communication planning for the halo exchange of one layer (DGCL-style) on a `Topology`.

DGCL (Cai et al., "DGCL: An Efficient Communication Library for Distributed GNN Training",
EuroSys 2021) plans each layer's irregular exchange over the real link topology: it uses fast
links to relay, fuses transfers into stages, avoids contention and balances the load over links,
pricing a plan by the busiest link of each stage. Its planner (SPST) builds a tree per vertex
embedding greedily; this one chooses among a few whole-exchange plans (not per vertex), each a
sequence of stages of simultaneous transfers priced by `topology.transfer_cost`:

  ``p2p``    peer-to-peer: every device sends every peer its rows at once, one stage.
  ``ring``   the fixed ring `codesign.hwmodel.comm` models (SAR's sequential aggregation):
             P - 1 stages, stage s = every device q sends to (q + s) % P.
  ``relay``  hierarchical relay spread over every NIC: (1) *gather*: each device splits the rows
             it owes another host evenly over the devices of its own host (fast intra-host links),
             fused with the intra-host peer-to-peer transfers; (2) *inter-host*: each device sends
             its share to its rail peer on the other host (`Topology.relay_peer`), so every NIC
             carries 1/k of the host pair's traffic; (3) *scatter*: the peers forward the rows to
             the devices that read them (fast links).
  ``relay_leader``  the same through one host leader (the first device of each host): for hosts
             whose devices share one NIC.

Relaying sends a row that several devices of one host read across the slow link **once**
(DGCL's tree shares the path to a host, then fans out on fast links): ``host_bytes[q, h]``, the
bytes of the *distinct* rows of device q read on host h (`codesign.distributed.host_halo_counts`),
crosses the inter-host stage; the scatter then delivers each device its own rows. Without
``host_bytes`` the relay ships every device's rows (no deduplication; it then only balances the
NICs). Shares split evenly are fractional rows (an idealization of an even split of the rows).

Training's gradient pass is the transpose of the exchange (rows' gradients return to their
owners, summed where several devices read a row): its plan is the *adjoint* of the forward plan,
the stages in reverse order with each transfer reversed; a relay sums partial gradients on the
fast links before the slow one, so the deduplicated bytes apply in reverse too.

The *choice* of plan is static (numpy, on concrete byte counts: `plan_exchange`, `choose_plan`);
the cost of a chosen plan (`plan_cost`) is jnp, differentiable in the byte counts.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from codesign.hwmodel.comm import CommCost, CommStage
from codesign.hwmodel.topology import Topology, transfer_cost
from codesign.hwmodel.validate import check_count

KINDS = ("p2p", "ring", "relay", "relay_leader")
"""Plans the planner chooses among (module docstring); relays only where there are >= 2 hosts."""


def _is_traced(x) -> bool:
    return isinstance(x, jax.core.Tracer)


def _weights(kind: str, topo: Topology) -> tuple[np.ndarray, np.ndarray]:
    """Relay weights W [P, P] (``W[q, r]``: share of q's inter-host rows relayed by r, same host)
    and the landing device ``peer`` [P, H] of relay r on host h."""
    P, H = topo.n_devices, topo.n_hosts
    host = np.asarray(topo.device_host)
    W = np.zeros((P, P), np.float32)
    if kind == "relay":
        for hd in topo.host_devices:
            W[np.ix_(hd, hd)] = 1.0 / len(hd)
        peer = np.asarray(topo.relay_peer, np.int64)
    else:
        leader = np.array([hd[0] for hd in topo.host_devices])
        W[np.arange(P), leader[host]] = 1.0
        peer = np.broadcast_to(leader[None, :], (P, H)).copy()
    return W, peer


def stage_bytes(kind: str, halo_bytes, topo: Topology, host_bytes=None) -> tuple:
    """The stages of plan ``kind`` for the exchange ``halo_bytes``: a tuple of ``(name,
    bytes [P, P])``, each a set of simultaneous transfers (jnp float32, linear in the inputs;
    traced inputs pass).

    Args:
      kind: one of `KINDS`.
      halo_bytes: float [P, P]: bytes device q's rows that device p reads (``[q, p]``).
      topo: the `Topology` (P devices, H hosts).
      host_bytes: optional float [P, H]: bytes of the distinct rows of q read on host h (the
        relay's inter-host payload); default: the sum of ``halo_bytes`` over h's devices.

    Raises:
      ValueError: unknown ``kind``, or a relay on a topology with one host.
    """
    if kind not in KINDS:
        raise ValueError(f"plan kind: unknown {kind!r}; choose from {KINDS}")
    P, H = topo.n_devices, topo.n_hosts
    b = jnp.asarray(halo_bytes, jnp.float32) * (1.0 - jnp.eye(P, dtype=jnp.float32))
    if kind == "p2p":
        return (("p2p", b),)
    if kind == "ring":
        q = np.arange(P)
        out = []
        for s in range(1, P):
            m = np.zeros((P, P), np.float32)
            m[q, (q + s) % P] = 1.0
            out.append((f"ring{s}", b * m))
        return tuple(out)
    if H < 2:
        raise ValueError(f"plan kind: {kind!r} needs a topology with >= 2 hosts; Topology({topo.name!r}) has {H}")
    host = np.asarray(topo.device_host)
    host_oh = (host[:, None] == np.arange(H)[None, :]).astype(np.float32)  # [P, H]
    other = 1.0 - host_oh  # [q, h]: h is not q's host
    inter = topo.inter_host().astype(np.float32)  # [q, p]: different hosts
    hb = b @ host_oh if host_bytes is None else jnp.asarray(host_bytes, jnp.float32)
    hb = hb * other
    W, peer = _weights(kind, topo)
    off = 1.0 - np.eye(P, dtype=np.float32)
    gather = b * (1.0 - inter) + jnp.sum(hb, axis=1)[:, None] * W * off
    peer_oh = (peer[:, :, None] == np.arange(P)[None, None, :]).astype(np.float32)  # [r, h, l]
    cross = jnp.einsum("qh,qr,rhl->rl", hb, W, peer_oh)
    land = peer_oh[:, host, :] * inter[:, :, None]  # [r, p, l]: l = peer(r, host(p)), r and p on other hosts
    scatter = jnp.einsum("qr,qp,rpl->lp", W, b * inter, land) * off
    return (("gather", gather), ("inter-host", cross), ("scatter", scatter))


def adjoint(stages: tuple) -> tuple:
    """The reverse exchange of ``stages`` (gradients to the rows' owners): reversed, transposed."""
    return tuple((f"{name}^T", m.T) for name, m in reversed(stages))


def plan_cost(kind: str, halo_bytes, topo: Topology, host_bytes=None, *, reverse: bool = False):
    """``(time_s, energy_j)`` (float32 scalars) of plan ``kind`` for ``halo_bytes``: its stages
    in sequence, each priced by `transfer_cost`. ``reverse``: the adjoint exchange (the gradient
    pass). Pure, differentiable in ``halo_bytes`` and ``host_bytes``."""
    st = stage_bytes(kind, halo_bytes, topo, host_bytes)
    if reverse:
        st = adjoint(st)
    t = e = jnp.zeros((), jnp.float32)
    for _, m in st:
        c = transfer_cost(m, topo)
        t, e = t + c.time_s, e + c.energy_j
    return t, e


def candidate_kinds(topo: Topology) -> tuple:
    """The `KINDS` that apply to ``topo`` (relays need >= 2 hosts), limited to ``topo.plans``
    where the topology names the plans its runtime executes (`Topology.plans`)."""
    kinds = KINDS if topo.n_hosts > 1 else ("p2p", "ring")
    return kinds if topo.plans is None else tuple(k for k in kinds if k in topo.plans)


def _check_bytes(halo_bytes, host_bytes, topo: Topology, where: str):
    if _is_traced(halo_bytes) or _is_traced(host_bytes):
        raise ValueError(f"{where}: choosing a plan needs concrete byte counts (the choice is static); "
                         "choose outside jit/grad and price the chosen kind with plan_cost")
    P, H = topo.n_devices, topo.n_hosts
    check_count(halo_bytes, f"{where}(halo_bytes)")
    hb = np.asarray(halo_bytes, np.float64)
    if hb.shape != (P, P):
        raise ValueError(f"{where}(halo_bytes): must be [P, P] with P = {P} devices of Topology({topo.name!r}), "
                         f"got shape {hb.shape}")
    if host_bytes is None:
        return hb, None
    check_count(host_bytes, f"{where}(host_bytes)")
    h = np.asarray(host_bytes, np.float64)
    if h.shape != (P, H):
        raise ValueError(f"{where}(host_bytes): must be [P, H] = [{P}, {H}] for Topology({topo.name!r}), "
                         f"got shape {h.shape}")
    host = np.asarray(topo.device_host)
    per_host = hb * (1 - np.eye(P)) @ (host[:, None] == np.arange(H)[None, :])
    per_dev = np.stack([hb[:, list(d)].max(axis=1) for d in topo.host_devices], axis=1)
    if np.any(h > per_host * (1 + 1e-6) + 1e-6) or np.any(h < per_dev * (1 - 1e-6) - 1e-6):
        raise ValueError(f"{where}(host_bytes): distinct bytes of q read on host h must lie between the largest "
                         "and the sum of halo_bytes[q, p] over h's devices p")
    return hb, h


def choose_plan(halo_bytes, topo: Topology, host_bytes=None, *, grad_bytes=None, grad_host_bytes=None,
                forward_passes: float = 1.0, kinds: Optional[tuple] = None) -> str:
    """The kind (of ``kinds``, default `candidate_kinds`) with the least modeled time for a
    layer's exchange: ``forward_passes`` x the forward plan + the adjoint plan on the gradient
    bytes (if given); ties go to the earlier kind in `KINDS`. Static: needs concrete inputs
    (evaluated eagerly even inside ``jit``, `jax.ensure_compile_time_eval`).

    Raises:
      ValueError: traced inputs, or the input errors of `plan_exchange`.
    """
    _check_bytes(halo_bytes, host_bytes, topo, "choose_plan")
    if grad_bytes is not None:
        _check_bytes(grad_bytes, grad_host_bytes, topo, "choose_plan[gradient]")
    kinds = candidate_kinds(topo) if kinds is None else kinds
    best, best_t = None, np.inf
    with jax.ensure_compile_time_eval():
        for k in kinds:
            t = forward_passes * float(plan_cost(k, halo_bytes, topo, host_bytes)[0])
            if grad_bytes is not None:
                t += float(plan_cost(k, grad_bytes, topo, grad_host_bytes, reverse=True)[0])
            if t < best_t * (1 - 1e-6):
                best, best_t = k, t
    return best


@dataclasses.dataclass(frozen=True)
class PlanStage:
    """One stage of a `Plan` (numpy; R resources).

    Fields: name; transfer_bytes float64 [P, P]; load_bytes [R] bytes through each resource;
    time_s (busiest resource + longest route latency); busiest: name of the resource with the
    largest ``load / bw`` ("" for an empty stage)."""

    name: str
    transfer_bytes: np.ndarray
    load_bytes: np.ndarray
    time_s: float
    busiest: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """The planner's choice for one exchange, and how it compares with the ring (numpy, floats).

    Fields:
      kind: one of `KINDS`.
      topology: the topology's name.
      stages: tuple of `PlanStage`, in order.
      time_s, energy_j: the plan's modeled time (sum over stages) and energy.
      load_bytes: float64 [R] bytes through each resource over all stages.
      candidates: ``{kind: time_s}`` of every plan considered.
      ring_load_bytes: float64 [R], the ring's per-resource load.
      ring_time_s: the fixed ring's modeled time (`comm`'s schedule) on the same topology.
      ring_busiest: the busiest resource of each ring step (why the ring is slow: on two DGX
        nodes every step waits for an InfiniBand NIC).
      avoided: names of resources the ring loads and this plan leaves idle.
      relieved: ``(name, ring_bytes, plan_bytes)`` for resources that carry fewer bytes than in
        the ring, largest saving of busy time (bytes / bw) first.
    """

    kind: str
    topology: str
    stages: tuple
    time_s: float
    energy_j: float
    load_bytes: np.ndarray
    candidates: dict
    ring_load_bytes: np.ndarray
    ring_time_s: float
    ring_busiest: tuple
    avoided: tuple
    relieved: tuple

    @property
    def speedup_over_ring(self) -> float:
        """ring time / plan time (>= 1 when the ring was a candidate, as it is by default)."""
        return self.ring_time_s / self.time_s if self.time_s > 0 else 1.0

    def summary(self) -> dict:
        """Plain-Python digest: kind, times, the ratio, the busiest resource per stage, avoided and relieved."""
        return {"kind": self.kind, "topology": self.topology, "time_s": self.time_s, "energy_j": self.energy_j,
                "ring_time_s": self.ring_time_s, "speedup_over_ring": self.speedup_over_ring,
                "ring_busiest": list(self.ring_busiest),
                "candidates": dict(self.candidates), "stages": [(s.name, s.time_s, s.busiest) for s in self.stages],
                "avoided": list(self.avoided), "relieved": [list(r) for r in self.relieved]}


def _stages_np(kind, halo_bytes, topo, host_bytes) -> tuple:
    names = topo.resource_names
    out = []
    for name, m in stage_bytes(kind, halo_bytes, topo, host_bytes):
        c = transfer_cost(m, topo)
        busy = np.asarray(c.busy_s, np.float64)
        out.append(PlanStage(name, np.asarray(m, np.float64), np.asarray(c.load_bytes, np.float64),
                             float(c.time_s), names[int(np.argmax(busy))] if busy.max() > 0 else ""))
    return tuple(out)


def plan_exchange(halo_bytes, topo: Topology, *, host_bytes=None, kinds: Optional[tuple] = None) -> Plan:
    """Chooses how to move one layer's halo over ``topo`` (module docstring) and reports it.

    Args:
      halo_bytes: float [P, P] (numpy or concrete JAX): bytes device q must deliver to device p
        (``halo_counts * row bytes``).
      topo: `Topology` with P devices.
      host_bytes: optional float [P, H]: distinct bytes of q read on host h (the relay sends
        those across hosts once); between the largest and the sum of ``halo_bytes[q, p]`` over
        h's devices.
      kinds: the kinds to choose among (default `candidate_kinds`); the ring is always priced
        for the comparison.

    Returns:
      `Plan`: the kind with the least modeled time (ties: the earlier kind in `KINDS`).

    Raises:
      ValueError: one line naming the argument: traced values; ``halo_bytes`` not [P, P], below
        0 or not finite; ``host_bytes`` not [P, H] or outside its bounds; an unknown kind.
    """
    hb, h = _check_bytes(halo_bytes, host_bytes, topo, "plan_exchange")
    kinds = candidate_kinds(topo) if kinds is None else tuple(kinds)
    for k in kinds:
        if k not in candidate_kinds(topo):
            raise ValueError(f"plan_exchange(kinds): {k!r} is not a plan for Topology({topo.name!r}); "
                             f"choose from {candidate_kinds(topo)}")
    with jax.ensure_compile_time_eval():
        priced = {k: _stages_np(k, hb, topo, h) for k in dict.fromkeys(kinds + ("ring",))}
    times = {k: float(sum(s.time_s for s in st)) for k, st in priced.items()}
    best = None
    for k in KINDS:  # tie-break in KINDS order
        if k in kinds and (best is None or times[k] < times[best] * (1 - 1e-6)):
            best = k
    st = priced[best]
    load = np.sum([s.load_bytes for s in st], axis=0) if st else np.zeros(len(topo.resources))
    ring = priced["ring"]
    ring_load = np.sum([s.load_bytes for s in ring], axis=0) if ring else np.zeros(len(topo.resources))
    energy = float(np.sum(load * topo.energy_pj_per_byte.astype(np.float64)) * 1e-12)
    names = topo.resource_names
    avoided = tuple(names[i] for i in np.flatnonzero((ring_load > 0) & (load == 0)))
    # per stage (a capacity applies to one stage's load), summed over the stages
    busy = lambda stages: np.sum([np.asarray(topo.busy_s(s.load_bytes), np.float64) for s in stages], axis=0) \
        if stages else np.zeros(len(topo.resources))
    saved = busy(ring) - busy(st)
    fewer = load < ring_load * (1 - 1e-6)  # float32 sums of the same bytes in another order differ in the last bits
    relieved = tuple((names[i], float(ring_load[i]), float(load[i]))
                     for i in np.argsort(-saved, kind="stable") if fewer[i])
    return Plan(best, topo.name, st, times[best], energy, load, {k: times[k] for k in kinds}, ring_load,
                times["ring"], tuple(s.busiest for s in ring), avoided, relieved)


def _stage_plan(st: CommStage, topo: Topology) -> str:
    g = st.grad_link_bytes
    training = not _is_traced(g) and bool(np.any(np.asarray(g) > 0))
    return choose_plan(st.link_bytes, topo, st.host_bytes, grad_bytes=g if training else None,
                       grad_host_bytes=st.grad_host_bytes if training else None, forward_passes=st.forward_passes)


def with_plans(stages, topo: Topology) -> tuple:
    """The `comm.CommStage` s with ``plan`` set (those without one) to `choose_plan`'s choice on
    ``topo`` for the layer's forward passes and gradient pass together. Static: build the stages
    from concrete counts (inside ``jit``, under `jax.ensure_compile_time_eval`).

    Raises:
      ValueError: a stage without a plan whose bytes are traced, or bytes not [P, P] for ``topo``.
    """
    return tuple(st if st.plan is not None else dataclasses.replace(st, plan=_stage_plan(st, topo)) for st in stages)


def planned_cost(stages, topo: Topology) -> CommCost:
    """`comm.communication_cost` on a `Topology`: each `comm.CommStage` (a layer's exchange) as
    its plan (``st.plan``, or `choose_plan`'s on concrete bytes) prices it,

        latency_s = sum_layers passes * time(plan, forward bytes) + time(adjoint plan, gradient bytes)
        energy_j  = the same sum of the plans' energies (bytes through each resource x its pJ/byte)

    ``bytes`` is the halo payload (all passes), as on a link; ``plans`` names each layer's kind.
    Pure and differentiable in the stages' bytes once the plans are chosen (`with_plans`).

    Raises:
      ValueError: as `with_plans`.
    """
    lat = en = tot = jnp.zeros((), jnp.float32)
    per, plans = {}, []
    for st in with_plans(stages, topo):
        t_f, e_f = plan_cost(st.plan, st.link_bytes, topo, st.host_bytes)
        t_g, e_g = plan_cost(st.plan, st.grad_link_bytes, topo, st.grad_host_bytes, reverse=True)
        t = st.forward_passes * t_f + t_g
        b = st.total_bytes
        per[st.name] = (t, b)
        plans.append((st.name, st.plan))
        lat, tot, en = lat + t, tot + b, en + st.forward_passes * e_f + e_g
    return CommCost(lat, en, tot, per, tuple(plans))


__all__ = ["KINDS", "Plan", "PlanStage", "adjoint", "candidate_kinds", "choose_plan", "plan_cost", "plan_exchange",
           "planned_cost", "stage_bytes", "with_plans"]
