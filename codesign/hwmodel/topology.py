"""A declared communication topology: devices on hosts, links and shared resources, routes.

`codesign.hwmodel.comm` prices a halo exchange on one homogeneous `LinkSpec` (every device sends
on its own link, a fixed ring of P - 1 steps). A `Topology` states what a transfer actually
crosses: a GPU's NVLink port into the NVSwitch fabric, its PCIe path to a NIC, the NIC's
InfiniBand port, the receiver's NIC and PCIe path; and which of those are *shared* (a host's one
NIC, one loopback interface). The planner (`codesign.hwmodel.planner`) chooses per layer how to
move the halo over it (peer-to-peer, ring, relay), after DGCL (Cai et al., "DGCL: An Efficient
Communication Library for Distributed GNN Training", EuroSys 2021), whose cost model this
follows: transfers that run at the same time share the resources on their routes, and a stage
lasts as long as its busiest resource needs.

Cost of one stage: a set of simultaneous transfers, ``bytes[q, p]`` from device q to device p:

    load[r]   = sum_{q, p} bytes[q, p] * crosses[q, p, r]                 (bytes through resource r)
    time_s    = max_r load[r] / bw[r]  +  max_{q, p: bytes > 0} route_latency[q, p]
    (a resource with a capacity: load / spill_bw where load > capacity, `Resource`)
    energy_j  = sum_r load[r] * energy_pj_per_byte[r] * 1e-12

``route_latency[q, p]`` is the sum of the latencies of the resources the route crosses. The
messages of a stage start together, so their start-up latencies overlap (ASSUMPTION: NCCL
groups a stage's sends and receives; a software stack that serializes them pays more). The
busiest-resource term is contention: two transfers through one NIC take twice as long as one.
Everything is jnp and linear in ``bytes`` up to the max (and, for a resource with a capacity,
the step at it), so the cost is differentiable in the byte counts almost everywhere (the max
passes its gradient to the busiest resource).

Resources are one-directional (a full-duplex link is two resources, ``tx`` and ``rx``). Switch
fabrics (NVSwitch, the InfiniBand fat tree) are taken as non-blocking and are not resources
(ASSUMPTION: full bisection bandwidth; a rail-optimized or oversubscribed fabric would add one).
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from codesign.hwmodel.comm import GB, LinkSpec, infiniband_ndr, nvlink4, pcie5_x16
from codesign.hwmodel.spec import PJ, validate_numbers


@dataclasses.dataclass(frozen=True)
class Resource:
    """One direction of a link, or a shared resource (a NIC port, a PCIe path, a loopback).

    Fields:
      name: unique within its topology (e.g. ``"h0.nic3.tx"``).
      bw_bytes_per_s: bytes per second through it, all transfers together, > 0.
      latency_s: start-up cost a message pays for crossing it, >= 0.
      energy_pj_per_byte: energy per byte through it, >= 0.
      capacity_bytes, spill_bw_bytes_per_s: optional (both or neither), > 0: a stage whose load
        exceeds ``capacity_bytes`` moves all of it at ``spill_bw_bytes_per_s`` (host-memory
        copies whose working set outgrows the last-level cache, `loopback_gloo`: a stream larger
        than an LRU cache misses on every line, so the whole load runs at memory bandwidth).

    Raises:
      ValueError / TypeError: naming ``Resource('<name>').<field>`` (`spec.validate_numbers`).
    """

    name: str = dataclasses.field(metadata=dict(static=True))
    bw_bytes_per_s: float
    latency_s: float
    energy_pj_per_byte: float
    capacity_bytes: Optional[float] = None
    spill_bw_bytes_per_s: Optional[float] = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Resource.name: must be a non-empty str, got {self.name!r}")
        if (self.capacity_bytes is None) != (self.spill_bw_bytes_per_s is None):
            raise ValueError(f"Resource({self.name!r}).capacity_bytes: give it together with spill_bw_bytes_per_s")
        validate_numbers(self, f"Resource({self.name!r})", nonnegative=("latency_s", "energy_pj_per_byte"))


@dataclasses.dataclass(frozen=True, eq=False)
class Topology:
    """Devices on hosts, resources, and the route between every pair of devices (numpy, static).

    Fields (P devices, R resources, H hosts):
      name: preset name.
      device_host: int tuple [P]: host of each device, hosts numbered 0..H-1, each used.
      resources: tuple [R] of `Resource`.
      routes: P x P nested tuple: ``routes[q][p]`` the resource indices a transfer q -> p crosses
        (non-empty for q != p, empty on the diagonal).
      relay_peer: P x H nested tuple: ``relay_peer[d][h]`` the device of host h that device d
        hands inter-host traffic to when relaying (its "rail" peer: the same local index on h,
        whose NIC is d's NIC's counterpart); ``relay_peer[d][host(d)] = d``. Default: local
        index modulo the host's device count.
      plans: optional tuple of plan kinds (`codesign.hwmodel.planner.KINDS`) the runtime on this
        topology executes; the planner chooses only among them. Default None: every kind that
        applies (the plan is then a cost-model choice, not an executed schedule).

    Derived (numpy): ``crosses`` float32 [P, P, R], ``bw`` [R], ``energy_pj_per_byte`` [R],
    ``route_latency_s`` [P, P], ``n_devices``, ``n_hosts``, ``host_devices`` (tuple of device
    tuples per host).

    Raises:
      ValueError: one line naming ``Topology('<name>').<field>``: an empty or non-integer
        ``device_host``, a host without devices, duplicate resource names, ``routes`` not P x P,
        a resource index out of range, an empty route between two devices, a route on the
        diagonal, or a ``relay_peer`` that is not a device of the named host.
    """

    name: str
    device_host: tuple
    resources: tuple
    routes: tuple
    relay_peer: tuple = None
    plans: Optional[tuple] = None

    def __post_init__(self):
        own = f"Topology({self.name!r})"
        dh = tuple(self.device_host)
        if not dh or any(isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 0 for h in dh):
            raise ValueError(f"{own}.device_host: must be a non-empty tuple of ints >= 0, got {self.device_host!r}")
        dh = tuple(int(h) for h in dh)
        n_hosts = max(dh) + 1
        if set(dh) != set(range(n_hosts)):
            raise ValueError(f"{own}.device_host: hosts must be numbered 0..H-1 with a device each, got {dh}")
        object.__setattr__(self, "device_host", dh)
        if self.plans is not None and (not isinstance(self.plans, tuple) or not self.plans
                                       or not all(isinstance(k, str) for k in self.plans)):
            raise ValueError(f"{own}.plans: must be None or a non-empty tuple of plan kinds, got {self.plans!r}")
        res = tuple(self.resources)
        if not res or not all(isinstance(r, Resource) for r in res):
            raise ValueError(f"{own}.resources: must be a non-empty tuple of Resource")
        names = [r.name for r in res]
        if len(set(names)) != len(names):
            dup = next(n for n in names if names.count(n) > 1)
            raise ValueError(f"{own}.resources: duplicate name {dup!r}")
        object.__setattr__(self, "resources", res)
        P, R = len(dh), len(res)
        if len(self.routes) != P or any(len(row) != P for row in self.routes):
            raise ValueError(f"{own}.routes: must be {P} x {P} (one route per device pair)")
        routes = tuple(tuple(tuple(int(i) for i in self.routes[q][p]) for p in range(P)) for q in range(P))
        for q in range(P):
            for p in range(P):
                rt = routes[q][p]
                if (q == p) != (len(rt) == 0):
                    what = "must be empty on the diagonal" if q == p else "must cross at least one resource"
                    raise ValueError(f"{own}.routes[{q}][{p}]: {what}, got {rt}")
                if any(i < 0 or i >= R for i in rt):
                    raise ValueError(f"{own}.routes[{q}][{p}]: resource index out of range [0, {R}), got {rt}")
        object.__setattr__(self, "routes", routes)
        hd = tuple(tuple(d for d in range(P) if dh[d] == h) for h in range(n_hosts))
        if self.relay_peer is None:
            peer = tuple(tuple(hd[h][hd[dh[d]].index(d) % len(hd[h])] for h in range(n_hosts)) for d in range(P))
        else:
            peer = tuple(tuple(int(x) for x in row) for row in self.relay_peer)
            if len(peer) != P or any(len(row) != n_hosts for row in peer):
                raise ValueError(f"{own}.relay_peer: must be {P} x {n_hosts} (a device per device and host)")
            for d in range(P):
                for h in range(n_hosts):
                    if not (0 <= peer[d][h] < P) or dh[peer[d][h]] != h or (h == dh[d] and peer[d][h] != d):
                        raise ValueError(f"{own}.relay_peer[{d}][{h}]: must be a device of host {h} "
                                         f"(device {d} itself on its own host), got {peer[d][h]}")
        object.__setattr__(self, "relay_peer", peer)
        crosses = np.zeros((P, P, R), np.float32)
        for q in range(P):
            for p in range(P):
                crosses[q, p, list(routes[q][p])] = 1.0  # a route crossing a resource twice counts once
        lat = np.array([r.latency_s for r in res], np.float64)
        object.__setattr__(self, "_crosses", crosses)
        object.__setattr__(self, "_route_latency", np.einsum("qpr,r->qp", crosses, lat).astype(np.float32))
        object.__setattr__(self, "_host_devices", hd)

    @property
    def n_devices(self) -> int:
        return len(self.device_host)

    @property
    def n_hosts(self) -> int:
        return len(self._host_devices)

    @property
    def host_devices(self) -> tuple:
        """Devices of each host (tuple of int tuples, ascending)."""
        return self._host_devices

    @property
    def crosses(self) -> np.ndarray:
        """float32 [P, P, R]: 1 where the route q -> p crosses resource r."""
        return self._crosses

    @property
    def route_latency_s(self) -> np.ndarray:
        """float32 [P, P]: latency of each route (sum over its resources), 0 on the diagonal."""
        return self._route_latency

    @property
    def bw(self) -> np.ndarray:
        """float32 [R] bytes/s of each resource."""
        return np.array([r.bw_bytes_per_s for r in self.resources], np.float32)

    @property
    def capacity(self) -> np.ndarray:
        """float32 [R] `Resource.capacity_bytes` of each resource (inf where it has none)."""
        return np.array([np.inf if r.capacity_bytes is None else r.capacity_bytes for r in self.resources], np.float32)

    @property
    def spill_bw(self) -> np.ndarray:
        """float32 [R] bytes/s beyond the capacity (``bw`` where a resource has none)."""
        return np.array([r.bw_bytes_per_s if r.spill_bw_bytes_per_s is None else r.spill_bw_bytes_per_s
                         for r in self.resources], np.float32)

    def busy_s(self, load):
        """[R] seconds each resource needs for its ``load`` [R] bytes: ``load / bw``, or ``load /
        spill_bw`` where the load exceeds the resource's capacity (`Resource`). jnp, traced ok
        (piecewise linear in ``load``)."""
        cap = self.capacity
        if np.all(np.isinf(cap)):
            return load / self.bw
        return load / jnp.where(load > cap, self.spill_bw, self.bw)

    @property
    def energy_pj_per_byte(self) -> np.ndarray:
        """float32 [R] pJ/byte of each resource."""
        return np.array([r.energy_pj_per_byte for r in self.resources], np.float32)

    @property
    def resource_names(self) -> tuple:
        return tuple(r.name for r in self.resources)

    def inter_host(self) -> np.ndarray:
        """bool [P, P]: True where q and p are on different hosts."""
        h = np.asarray(self.device_host)
        return h[:, None] != h[None, :]

    @staticmethod
    def from_link(link: LinkSpec, n_devices: int) -> "Topology":
        """`comm`'s one-link model as a topology: every device sends on its own link (``tx``),
        nothing is shared, one host. The ring priced on it equals
        `comm.communication_cost` on ``link`` (tested)."""
        res = tuple(Resource(f"d{d}.{link.name}.tx", link.bw_bytes_per_s, link.latency_s, link.energy_pj_per_byte)
                    for d in range(n_devices))
        return Topology(f"{link.name}x{n_devices}", (0,) * n_devices, res,
                        _routes(n_devices, lambda q, p: (q,)))


def _routes(n: int, fn: Callable[[int, int], Sequence[int]]) -> tuple:
    return tuple(tuple(() if q == p else tuple(fn(q, p)) for p in range(n)) for q in range(n))


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class TransferCost:
    """Cost of one stage of simultaneous transfers (float32; R resources).

    Fields: ``load_bytes`` [R] bytes through each resource; ``time_s`` scalar (busiest resource
    + the longest route latency); ``busy_s`` [R] seconds of each resource (`Topology.busy_s`:
    ``load / bw``, or ``load / spill_bw`` beyond a capacity); ``energy_j``."""

    load_bytes: jax.Array
    busy_s: jax.Array
    time_s: jax.Array
    energy_j: jax.Array


def transfer_cost(transfer_bytes, topo: Topology) -> TransferCost:
    """The `TransferCost` of simultaneous transfers ``transfer_bytes`` float [P, P] (``[q, p]``:
    bytes q -> p; the diagonal is ignored) on ``topo`` (module docstring). Pure, differentiable
    in ``transfer_bytes`` (may be traced).

    Raises:
      ValueError: ``transfer_bytes`` not [P, P] for the topology's P.
    """
    b = jnp.asarray(transfer_bytes, jnp.float32)
    P = topo.n_devices
    if b.shape != (P, P):
        raise ValueError(f"transfer_cost(transfer_bytes): must be [{P}, {P}] for Topology({topo.name!r}), "
                         f"got shape {b.shape}")
    b = b * (1.0 - jnp.eye(P, dtype=jnp.float32))
    load = jnp.einsum("qp,qpr->r", b, topo.crosses)
    busy = topo.busy_s(load)
    lat = jnp.max(jnp.where(b > 0, topo.route_latency_s, 0.0))
    time = jnp.max(busy) + lat
    energy = jnp.sum(load * topo.energy_pj_per_byte) * PJ
    return TransferCost(load, busy, time, energy)


# --- presets -----------------------------------------------------------------------------------

DGX_H100_GPUS = 8
"""GPUs of a DGX H100 (NVIDIA DGX H100 User Guide, "Hardware overview": 8 H100 SXM5, 4 NVSwitch)."""
DGX_H100_NICS = 8
"""Compute-fabric NICs of a DGX H100: eight single-port ConnectX-7 400 Gb/s (DGX H100 User Guide,
"Network Modules", Table 6: each ConnectX-7 port is assigned to one GPU)."""


def _dgx_resources(host: int, n_gpus: int, n_nics: int) -> list:
    """Per-direction resources of one DGX H100 host.

    Per GPU: ``nvlink.tx/rx`` 450 GB/s (`comm.nvlink4`: 900 GB/s bidirectional, H100 datasheet),
    the message start-up (2 us, estimate of `comm.nvlink4`) charged on ``tx``, its energy
    (10.4 pJ/byte, estimate of `comm.nvlink4`) on ``tx`` only (a byte crosses the NVLink once);
    ``pcie.up/down`` its PCIe Gen5 x16 path to the NIC (64 GB/s per direction, `comm.pcie5_x16`;
    40 pJ/byte per crossing, estimate; latency inside the NIC's). ASSUMPTION: a GPU's PCIe path
    to its NIC is not shared with another GPU (GPUDirect RDMA through a PCIe switch that serves
    one GPU-NIC pair).
    Per NIC: ``nic.tx/rx`` one ConnectX-7 NDR port, 400 Gb/s = 50 GB/s per direction
    (`comm.infiniband_ndr`, ConnectX-7 datasheet); message start-up 5 us (estimate of
    `comm.infiniband_ndr`) and 500 pJ/byte (upper-bound estimate of `comm.infiniband_ndr`)
    on ``tx``.
    """
    nv, pc, ib = nvlink4(), pcie5_x16(), infiniband_ndr()
    out = []
    for g in range(n_gpus):
        out += [Resource(f"h{host}.gpu{g}.nvlink.tx", nv.bw_bytes_per_s, nv.latency_s, nv.energy_pj_per_byte),
                Resource(f"h{host}.gpu{g}.nvlink.rx", nv.bw_bytes_per_s, 0.0, 0.0),
                Resource(f"h{host}.gpu{g}.pcie.up", pc.bw_bytes_per_s, 0.0, pc.energy_pj_per_byte),
                Resource(f"h{host}.gpu{g}.pcie.down", pc.bw_bytes_per_s, 0.0, pc.energy_pj_per_byte)]
    for n in range(n_nics):
        out += [Resource(f"h{host}.nic{n}.tx", ib.bw_bytes_per_s, ib.latency_s, ib.energy_pj_per_byte),
                Resource(f"h{host}.nic{n}.rx", ib.bw_bytes_per_s, 0.0, 0.0)]
    return out


def dgx_cluster(n_hosts: int, *, nics_per_host: int = DGX_H100_NICS, name: str = "") -> Topology:
    """``n_hosts`` DGX H100 nodes over NDR InfiniBand (device ``d`` = GPU ``d % 8`` of host ``d // 8``).

    Routes: inside a host GPU -> NVSwitch -> GPU (``nvlink.tx`` of the sender, ``nvlink.rx`` of
    the receiver); across hosts GPU -> PCIe -> NIC -> IB -> NIC -> PCIe -> GPU (the sender's
    ``pcie.up`` and its NIC's ``tx``, the receiver's NIC's ``rx`` and ``pcie.down``). GPU ``g``
    uses NIC ``g * nics_per_host // 8``: with the DGX's 8 NICs one per GPU; with fewer, GPUs
    share a NIC (a what-if: a host with one NIC is ``nics_per_host=1``). The IB fabric between
    the NICs is non-blocking (ASSUMPTION, a fat tree of NDR switches). Resources in
    `_dgx_resources`.

    Raises:
      ValueError: ``n_hosts`` < 1 or ``nics_per_host`` not in [1, 8].
    """
    if isinstance(n_hosts, bool) or not isinstance(n_hosts, numbers.Integral) or n_hosts < 1:
        raise ValueError(f"dgx_cluster(n_hosts): must be an int >= 1, got {n_hosts!r}")
    if isinstance(nics_per_host, bool) or not isinstance(nics_per_host, numbers.Integral) \
            or not 1 <= nics_per_host <= DGX_H100_GPUS:
        raise ValueError(f"dgx_cluster(nics_per_host): must be an int in [1, {DGX_H100_GPUS}], got {nics_per_host!r}")
    G, N = DGX_H100_GPUS, nics_per_host
    res = []
    for h in range(n_hosts):
        res += _dgx_resources(h, G, N)
    idx = {r.name: i for i, r in enumerate(res)}

    def route(q, p):
        hq, gq, hp, gp = q // G, q % G, p // G, p % G
        if hq == hp:
            return idx[f"h{hq}.gpu{gq}.nvlink.tx"], idx[f"h{hp}.gpu{gp}.nvlink.rx"]
        return (idx[f"h{hq}.gpu{gq}.pcie.up"], idx[f"h{hq}.nic{gq * N // G}.tx"],
                idx[f"h{hp}.nic{gp * N // G}.rx"], idx[f"h{hp}.gpu{gp}.pcie.down"])

    P = n_hosts * G
    return Topology(name or f"dgx_h100x{n_hosts}" + ("" if N == G else f"_nic{N}"),
                    tuple(d // G for d in range(P)), tuple(res), _routes(P, route))


def dgx_h100() -> Topology:
    """One DGX H100: 8 H100 SXM5 on NVLink 4 through the NVSwitch fabric (450 GB/s per direction
    per GPU), 8 ConnectX-7 NICs (unused inside one host). `dgx_cluster` (1 host)."""
    return dgx_cluster(1, name="dgx_h100")


def two_dgx_h100_ib() -> Topology:
    """Two DGX H100 nodes (16 GPUs) over NDR InfiniBand, one 400 Gb/s ConnectX-7 per GPU.
    `dgx_cluster` (2 hosts)."""
    return dgx_cluster(2, name="two_dgx_h100_ib")


LOOPBACK_GLOO_TOPOLOGY_FIT = {"latency_s": 328.22e-6, "switch_s": 417.57e-6, "bw_bytes_per_s": 3.3699 * GB,
                              "spill_bw_bytes_per_s": 1.6940 * GB, "cache_bytes": float(32 << 20), "cores": 2}
"""`loopback_gloo`'s parameters, fitted by ``experiments/comm_measure.py`` (`fit_loopback_gloo`
on runs 0 and 3 of ``results/comm_loopback_cpu.json``, its ``topology_fit``; a test keeps the
two equal). See `LOOPBACK_FIT_KEYS`."""

LOOPBACK_FIT_KEYS = ("latency_s", "switch_s", "bw_bytes_per_s", "spill_bw_bytes_per_s", "cache_bytes", "cores")
"""``latency_s``: a stage's start-up with every process on its own core; ``switch_s``: added per
process beyond the cores, per stage; ``bw_bytes_per_s``: the shared loopback while a stage's
bytes fit in the last-level cache; ``spill_bw_bytes_per_s``: for all of a stage's bytes once
they outgrow it;
``cache_bytes``: the last-level cache (read off the machine, not fitted); ``cores``: the
machine's CPU count (read off the machine)."""


def _check_fit(fit, where: str) -> dict:
    if not isinstance(fit, dict) or set(fit) != set(LOOPBACK_FIT_KEYS):
        raise ValueError(f"{where}(fit): must be a dict with keys {LOOPBACK_FIT_KEYS}, got {fit!r}")
    for k in LOOPBACK_FIT_KEYS:
        v, positive = fit[k], k != "switch_s"
        if k == "cores" and (isinstance(v, bool) or not isinstance(v, numbers.Integral)):
            raise ValueError(f"{where}(fit).cores: must be an int > 0, got {v!r}")
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v) or v < 0 or (positive and v == 0):
            raise ValueError(f"{where}(fit).{k}: must be a finite number {'> 0' if positive else '>= 0'}, got {v!r}")
    return fit


def _loopback_ring_s(n, b, lat, sw, bw, spill, cache, cores):
    """Seconds of a layer's ring (N - 1 stages of N transfers of ``b`` bytes) on `loopback_gloo`
    (numpy; `fit_loopback_gloo`'s model, equal to `planner.plan_cost` on the topology, tested)."""
    load = n * b
    busy = load / np.where(load > cache, spill, bw)
    return (n - 1) * (lat + sw * np.maximum(0.0, n - cores) + busy)


def loopback_gloo(n_processes: int = 2, *, fit: dict | None = None) -> Topology:
    """``n_processes`` `jax.distributed` processes on one machine, gloo over 127.0.0.1: every
    transfer crosses one shared resource, ``loopback`` (the host's memory copies and TCP stack,
    run by the processes' own threads on the machine's cores).

    A stage (`transfer_cost`) of simultaneous transfers with ``load`` bytes in all takes

        latency(N) + load / (bw if load <= cache_bytes else spill_bw)
        latency(N) = latency_s + switch_s * max(0, N - cores)

    The transfers share the loopback's bandwidth (the copies run on the same cores and memory);
    a stage whose bytes outgrow the last-level cache moves them all at the lower ``spill_bw``
    (ASSUMPTION: streaming copies larger than an LRU cache miss on every line; measured here, a
    tiered model, only the excess at ``spill_bw``, fitted worse); when the processes outnumber
    the cores every stage waits for the extra processes to be scheduled (ASSUMPTION: a fixed delay per extra process; fitted, not derived). A layer's ring
    on N processes is N - 1 stages.

    Fitted on measurement (``fit``, default `LOOPBACK_GLOO_TOPOLOGY_FIT`: `fit_loopback_gloo` on
    ``experiments/comm_measure.py``'s per-layer exchanges at N = 2, 4, 8 on this 2-core
    machine; docs/log/dgcl_planner.md gives the errors in and out of sample). Valid for the
    machine it was measured on, one device per process. Its only plan is the ring
    (`Topology.plans`): what `codesign.distributed.halo` runs and what was measured. Energy 0:
    not measured.

    Raises:
      ValueError: ``n_processes`` not an int >= 1, or a malformed ``fit``.
    """
    if isinstance(n_processes, bool) or not isinstance(n_processes, numbers.Integral) or n_processes < 1:
        raise ValueError(f"loopback_gloo(n_processes): must be an int >= 1, got {n_processes!r}")
    f = _check_fit(LOOPBACK_GLOO_TOPOLOGY_FIT if fit is None else fit, "loopback_gloo")
    lat = f["latency_s"] + f["switch_s"] * max(0.0, n_processes - f["cores"])
    res = (Resource("loopback", float(f["bw_bytes_per_s"]), float(lat), 0.0, float(f["cache_bytes"]),
                    float(f["spill_bw_bytes_per_s"])),)
    # plans ("ring",): what `codesign.distributed.halo` executes, and what the fit measured
    return Topology(f"loopback_gloo{n_processes}", (0,) * n_processes, res, _routes(n_processes, lambda q, p: (0,)),
                    plans=("ring",))


def fit_loopback_gloo(rows, cores: int, cache_bytes: float) -> dict:
    """`loopback_gloo`'s parameters from measured per-layer ring exchanges.

    Args:
      rows: iterable of ``(n_processes, bytes, seconds)``: one layer's exchange (N - 1 ring
        steps, each device sending ``bytes`` per step) measured on N processes.
      cores: the machine's CPU count.
      cache_bytes: its last-level cache, bytes.

    Returns:
      `LOOPBACK_FIT_KEYS` -> value: ``latency_s``, ``switch_s``, ``bw_bytes_per_s`` and
      ``spill_bw_bytes_per_s`` minimize the squared log error of `loopback_gloo`'s ring to the
      measured seconds (`scipy.optimize.least_squares`, parameters in log space); ``cores`` and
      ``cache_bytes`` as given.

    Raises:
      ValueError: fewer than 4 rows, a row with N < 2 or a non-integer N or a non-positive
        value, ``cores`` < 1, ``cache_bytes`` <= 0, fewer than two values of ``max(0, N - cores)``
        or none above 0, no row whose stage fits in the cache or none that outgrows it (a
        parameter would not be identifiable), or the least-squares solver not converging.
    """
    from scipy.optimize import least_squares
    x = np.asarray(list(rows), np.float64)
    if x.ndim != 2 or x.shape[1] != 3 or x.shape[0] < 4:
        raise ValueError(f"fit_loopback_gloo(rows): need >= 4 rows of (n_processes, bytes, seconds), got shape {x.shape}")
    if not np.all(np.isfinite(x)) or np.any(x[:, 0] < 2) or np.any(x[:, 0] != np.round(x[:, 0])) or np.any(x[:, 1:] <= 0):
        raise ValueError("fit_loopback_gloo(rows): every row needs an integer N >= 2 and finite positive bytes and seconds")
    if isinstance(cores, bool) or not isinstance(cores, numbers.Integral) or cores < 1:
        raise ValueError(f"fit_loopback_gloo(cores): must be an int >= 1, got {cores!r}")
    if isinstance(cache_bytes, bool) or not isinstance(cache_bytes, numbers.Real) or not cache_bytes > 0:
        raise ValueError(f"fit_loopback_gloo(cache_bytes): must be a number > 0, got {cache_bytes!r}")
    n, b, t = x.T
    extra = np.maximum(0.0, n - cores)
    if not np.any(extra > 0):
        raise ValueError(f"fit_loopback_gloo(rows): no row with more processes than the {cores} cores; "
                         "switch_s cannot be fitted")
    if len(np.unique(extra)) < 2:
        raise ValueError(f"fit_loopback_gloo(rows): every row has the same max(0, N - {cores}); "
                         "latency_s and switch_s cannot be told apart")
    if not np.any(n * b > cache_bytes):
        raise ValueError("fit_loopback_gloo(rows): no row whose stage (N x bytes) outgrows cache_bytes; "
                         "spill_bw_bytes_per_s cannot be fitted")
    if not np.any(n * b <= cache_bytes):
        raise ValueError("fit_loopback_gloo(rows): no row whose stage (N x bytes) fits in cache_bytes; "
                         "bw_bytes_per_s cannot be fitted")

    def resid(p):
        lat, sw, bw, spill = np.exp(p)
        return np.log(_loopback_ring_s(n, b, lat, sw, bw, spill, cache_bytes, cores) / t)

    r = least_squares(resid, np.log([2e-4, 4e-4, 3e9, 1.5e9]))
    if not r.success:
        raise ValueError(f"fit_loopback_gloo: the least-squares fit did not converge ({r.message})")
    lat, sw, bw, spill = (float(v) for v in np.exp(r.x))
    return {"latency_s": lat, "switch_s": sw, "bw_bytes_per_s": bw, "spill_bw_bytes_per_s": spill,
            "cache_bytes": float(cache_bytes), "cores": int(cores)}


TOPOLOGIES = {"dgx_h100": dgx_h100, "two_dgx_h100_ib": two_dgx_h100_ib, "loopback_gloo": loopback_gloo}


def get_topology(name: str, n_devices: int | None = None) -> Topology:
    """A topology preset by name (`TOPOLOGIES`), for ``n_devices`` devices if given:
    ``loopback_gloo`` is built for that many processes (default 2); a fixed-size preset
    (``dgx_h100``: 8, ``two_dgx_h100_ib``: 16) must have exactly that many.

    Raises:
      ValueError: unknown name, or a fixed-size preset with another device count.
    """
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology preset {name!r}; choose from {sorted(TOPOLOGIES)}")
    if n_devices is not None and (isinstance(n_devices, bool) or not isinstance(n_devices, numbers.Integral)
                                  or n_devices < 1):
        raise ValueError(f"get_topology(n_devices): must be an int >= 1, got {n_devices!r}")
    if name == "loopback_gloo":
        return loopback_gloo(2 if n_devices is None else n_devices)
    topo = TOPOLOGIES[name]()
    if n_devices is not None and n_devices != topo.n_devices:
        raise ValueError(f"get_topology(n_devices): topology {name!r} has {topo.n_devices} devices, not {n_devices}")
    return topo


__all__ = ["Resource", "Topology", "TransferCost", "transfer_cost", "dgx_cluster", "dgx_h100", "two_dgx_h100_ib",
           "loopback_gloo", "fit_loopback_gloo", "LOOPBACK_GLOO_TOPOLOGY_FIT", "LOOPBACK_FIT_KEYS", "TOPOLOGIES", "get_topology", "GB", "DGX_H100_GPUS", "DGX_H100_NICS"]
