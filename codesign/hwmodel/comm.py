"""Communication stage of partitioned (multi-device) GNN training: links and halo-exchange cost.

A layer of partitioned full-batch training (`codesign.distributed`, SAR-style ring over P
devices; Mostafa, MLSys 2022) exchanges halo rows: at ring step ``s`` every device ``q`` sends the
rows of its block that device ``(q + s) % P`` reads. Per layer:

    bytes[q, p]   = rows[q, p] * (width * bits / 8 + row_scale_bytes)       (link q -> p)
    step_bytes[s] = max_q bytes[q, (q + s) % P]                              (slowest sender)
    latency_s     = passes * sum_s (step_bytes[s] / link_bw + link_latency)  (steps in sequence)
    energy_j      = passes * sum_{q,p} bytes[q, p] * link_energy_per_byte

``rows`` are the halo rows (`codesign.distributed.Partition.halo_counts`), or the padded rows the
static-shape implementation ships (``padded=True``: every device sends ``H_s`` rows at step s).
``row_scale_bytes`` is 4 for the int8 exchange (one float32 scale per row), else 0.

``passes``: 1 for inference. Training adds the halo gradient sent back to each row's owner
(the transpose of the exchange, float32: 2 passes), plus a re-fetch of the halo in the backward
pass when the aggregation is rematerialized *and* the edge weights need gradients (edge gates:
``d loss / d w_e`` reads the halo row), 3 passes. Without edge gates the re-fetched values are
not needed and XLA removes the exchange (measured in the compiled HLO; tested). The gradient
pass is always float32 (32 bits), whatever the forward ``bits``.

All counts may be JAX arrays (``width`` = channel density x hidden, ``bits`` a learned bit-width,
``rows`` expected halo rows under edge gates), so the cost is differentiable like `estimate`.

On a declared `codesign.hwmodel.topology.Topology` instead of one link, the same stages are
priced by `codesign.hwmodel.planner.planned_cost`: each layer with the plan the planner chooses
for it (peer-to-peer, this ring, or a relay through fast links), with contention on shared
resources; the ring on a `LinkSpec` is the planner's ring on ``Topology.from_link`` (tested).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from codesign.hwmodel.spec import BITS_PER_BYTE, PJ, validate_numbers
from codesign.hwmodel.validate import check_bits, check_count

GB = 1e9
INT8_ROW_SCALE_BYTES = 4.0  # one float32 scale per row (codesign.quant.export.quantize_rows_int8)
GRAD_BITS = 32.0  # halo gradients return in float32


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LinkSpec:
    """A device-to-device link, per device and per direction.

    Fields:
      name: preset name (static).
      bw_bytes_per_s: bandwidth one device can send with (one direction).
      latency_s: fixed cost per message (software + wire), >= 0.
      energy_pj_per_byte: energy per byte moved across the link, >= 0.

    Raises:
      ValueError: naming the field, for a bandwidth not finite and > 0, or a latency or energy
        not finite and >= 0.
      TypeError: naming the field, for a bool, str or non-scalar array.
    """

    name: str = dataclasses.field(metadata=dict(static=True))
    bw_bytes_per_s: float
    latency_s: float
    energy_pj_per_byte: float

    def __post_init__(self):
        validate_numbers(self, f"LinkSpec({self.name!r})", nonnegative=("latency_s", "energy_pj_per_byte"))


def nvlink4() -> LinkSpec:
    """NVLink 4 on an H100 SXM5: 900 GB/s total bidirectional per GPU (18 links x 50 GB/s;
    NVIDIA H100 datasheet, 2023), so 450 GB/s per direction.

    Latency 2 us per message: an estimate (NCCL point-to-point start-up on NVLink is of the
    order of microseconds; not a datasheet number). Energy 1.3 pJ/bit = 10.4 pJ/byte: NVIDIA's
    figure for NVLink-C2C (Grace Hopper superchip whitepaper, 2022), used as an estimate for
    NVLink 4 off-package links, for which NVIDIA publishes no number.
    """
    return LinkSpec("nvlink4", 450 * GB, 2e-6, 1.3 * BITS_PER_BYTE)


def pcie5_x16() -> LinkSpec:
    """PCIe Gen5 x16: 32 GT/s x 16 lanes = 64 GB/s per direction (PCI-SIG PCIe 5.0 spec, raw
    rate before 128b/130b encoding).

    Latency 5 us per message and 5 pJ/bit = 40 pJ/byte are estimates (a DMA transfer's set-up
    through the host; long-reach SerDes of the PCIe 5 generation are reported at ~5 pJ/bit).
    """
    return LinkSpec("pcie5_x16", 64 * GB, 5e-6, 5.0 * BITS_PER_BYTE)


def infiniband_ndr() -> LinkSpec:
    """InfiniBand NDR, one 400 Gb/s port = 50 GB/s per direction (NVIDIA ConnectX-7 datasheet).

    Latency 5 us per message: an estimate for a GPU-to-GPU message across hosts (the adapter's
    own latency is sub-microsecond, the software path dominates). Energy 62.5 pJ/bit = 500 pJ/byte:
    an upper-bound estimate, the ConnectX-7 adapter's typical power (~25 W) over 400 Gb/s,
    switch energy not included.
    """
    return LinkSpec("infiniband_ndr", 50 * GB, 5e-6, 62.5 * BITS_PER_BYTE)


LOOPBACK_GLOO_FIT = (292.85e-6, 1.4180 * GB)
"""(latency_s, bw_bytes_per_s) of `loopback_gloo`, fitted by ``experiments/comm_measure.py`` on
N = 2 processes (``results/comm_loopback_cpu.json`` ``fit``; a test keeps the two equal)."""


def loopback_gloo() -> LinkSpec:
    """Two `jax.distributed` processes on this machine exchanging over 127.0.0.1 with gloo
    (CPU collectives): one ``ppermute`` ring step of float32 rows, latency + bytes / bandwidth
    fitted on measurement (`LOOPBACK_GLOO_FIT`, 4 KB-32 MB messages, N = 2). Evidence: measured
    here, valid for N = 2 only: with N = 4 and 8 processes on the 2 cores the processes share
    the CPU and the loopback, a contention this one-link model has no term for; the declared
    topology `codesign.hwmodel.topology.loopback_gloo` (N processes, fitted on the same
    measurement, results/comm_loopback_cpu.json) has it. Energy 0: not measured (a host-memory
    copy, priced by nothing here)."""
    lat, bw = LOOPBACK_GLOO_FIT
    return LinkSpec("loopback_gloo", bw, lat, 0.0)


LINKS = {"nvlink4": nvlink4, "pcie5_x16": pcie5_x16, "infiniband_ndr": infiniband_ndr,
         "loopback_gloo": loopback_gloo}


def get_link(name: str) -> LinkSpec:
    """A link preset by name (`LINKS`).

    Raises:
      ValueError: unknown name.
    """
    if name not in LINKS:
        raise ValueError(f"unknown link preset {name!r}; choose from {sorted(LINKS)}")
    return LINKS[name]()


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CommStage:
    """One layer's halo exchange.

    Fields (float32 unless noted; P devices):
      name: layer name (static).
      link_bytes: [P, P] bytes of one forward pass on each link ``q -> p``.
      step_bytes: [P - 1] forward bytes of the busiest sender at each ring step (all steps are
        costed in sequence, as SAR aggregates one remote partition at a time).
      grad_link_bytes: [P, P] bytes of the float32 gradient pass (0 for inference).
      grad_step_bytes: [P - 1].
      forward_passes: 1, or 2 when the backward pass re-fetches the halo (static float).
      host_bytes: None, or [P, H] forward bytes of the distinct rows of device q read on host h
        (a relay sends those across hosts once; `codesign.distributed.host_halo_counts`).
      grad_host_bytes: None, or [P, H] the same for the float32 gradient pass.
      plan: None, or the `codesign.hwmodel.planner.KINDS` entry chosen for a topology (static).
    """

    name: str = dataclasses.field(metadata=dict(static=True))
    link_bytes: jax.Array
    step_bytes: jax.Array
    grad_link_bytes: jax.Array
    grad_step_bytes: jax.Array
    forward_passes: float = dataclasses.field(default=1.0, metadata=dict(static=True))
    host_bytes: Optional[jax.Array] = None
    grad_host_bytes: Optional[jax.Array] = None
    plan: Optional[str] = dataclasses.field(default=None, metadata=dict(static=True))

    @property
    def total_bytes(self) -> jax.Array:
        """All bytes of the stage, every link and pass (float32 scalar)."""
        return self.forward_passes * jnp.sum(self.link_bytes) + jnp.sum(self.grad_link_bytes)

    @property
    def n_steps(self) -> int:
        return int(self.step_bytes.shape[0])


def _step_max(link: jax.Array) -> jax.Array:
    n = link.shape[0]
    q = np.arange(n)
    return jnp.stack([jnp.max(link[q, (q + s) % n]) for s in range(1, n)]) if n > 1 else jnp.zeros((0,), jnp.float32)


def communication_stage(name: str, rows, width, bits, *, training: bool = False, refetch: bool = False,
                        int8: bool = False, host_rows=None) -> CommStage:
    """The `CommStage` of one layer.

    Args:
      name: layer name.
      rows: float or int [P, P] halo rows ``q -> p`` (``Partition.halo_counts``, or
        `padded_rows`, or expected rows under edge gates).
      width: exchanged columns (may be an expected count).
      bits: bits per exchanged value in the forward pass (8 with ``int8``).
      training: add the gradient pass (float32, `GRAD_BITS`).
      refetch: the backward pass re-fetches the halo (rematerialization with trainable edge weights).
      int8: per-row float32 scales travel with the rows (`INT8_ROW_SCALE_BYTES`).
      host_rows: optional [P, H] distinct halo rows of device q read on host h
        (`codesign.distributed.host_halo_counts`): what a relay sends across hosts
        (`codesign.hwmodel.planner`).

    Raises:
      ValueError: ``rows`` not square; a concrete ``rows`` or ``width`` below 0 or ``bits``
        outside [1, 32], or either not finite (`codesign.hwmodel.validate`; traced values pass).
    """
    check_count(rows, "communication_stage(rows)")
    check_count(width, "communication_stage(width)")
    check_bits(bits, "communication_stage(bits)")
    if np.ndim(rows) != 2 or np.shape(rows)[0] != np.shape(rows)[1]:
        raise ValueError(f"communication_stage: rows must be [P, P], got shape {np.shape(rows)}")
    if host_rows is not None:
        check_count(host_rows, "communication_stage(host_rows)")
    fwd, grad, host_fwd, host_grad = _pass_bytes(rows, width, bits, training, int8, host_rows)
    passes = 2.0 if (training and refetch) else 1.0
    return CommStage(name, fwd, _step_max(fwd), grad, _step_max(grad), passes, host_fwd, host_grad)


def _pass_bytes(rows, width, bits, training: bool, int8: bool, host_rows):
    """(forward [P, P], gradient [P, P], forward [P, H] or None, gradient [P, H] or None) bytes."""
    rows = jnp.asarray(rows, jnp.float32)
    width = jnp.asarray(width, jnp.float32)
    row_bytes = width * jnp.asarray(bits, jnp.float32) / BITS_PER_BYTE + (INT8_ROW_SCALE_BYTES if int8 else 0.0)
    grad_row_bytes = width * GRAD_BITS / BITS_PER_BYTE
    fwd = rows * row_bytes
    grad = rows * grad_row_bytes if training else jnp.zeros_like(rows)
    if host_rows is None:
        return fwd, grad, None, None
    host_rows = jnp.asarray(host_rows, jnp.float32)
    return fwd, grad, host_rows * row_bytes, host_rows * grad_row_bytes if training else jnp.zeros_like(host_rows)


def padded_rows(halo_sizes, n_parts: int) -> np.ndarray:
    """[P, P] rows the static-shape ring ships: ``H_s`` on every link ``q -> (q + s) % P``.

    Args:
      halo_sizes: ints [P - 1] (``Partition.halo_sizes``).
    """
    out = np.zeros((n_parts, n_parts), np.float32)
    for s, h in enumerate(halo_sizes, start=1):
        for q in range(n_parts):
            out[q, (q + s) % n_parts] = h
    return out


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class CommCost:
    """Modeled cost of communication stages (float32 scalars): ``latency_s``, ``energy_j``,
    ``bytes`` (the halo payload: all links, all passes), ``per_layer``: ``{name: (latency_s,
    bytes)}``; ``plans``: on a topology, ``((layer name, plan kind), ...)`` (static; empty on a link)."""

    latency_s: jax.Array
    energy_j: jax.Array
    bytes: jax.Array
    per_layer: dict
    plans: tuple = dataclasses.field(default=(), metadata=dict(static=True))


def communication_cost(stages, link: LinkSpec) -> CommCost:
    """Cost of a sequence of `CommStage` on ``link`` (module docstring). Pure, differentiable.

    Each non-empty ring step is one message per pass (a step with no bytes still costs its
    latency only when it carries rows: empty steps are skipped, as the implementation does).

    Raises:
      TypeError: ``link`` not a `LinkSpec` (a `Topology` is priced by `planner.planned_cost`).
    """
    if not isinstance(link, LinkSpec):
        raise TypeError(f"communication_cost(link): must be a LinkSpec, got {type(link).__name__} "
                        "(price a Topology with codesign.hwmodel.planner.planned_cost)")
    lat = en = tot = jnp.zeros((), jnp.float32)
    per = {}
    for st in stages:
        msgs = jnp.sum(st.step_bytes > 0).astype(jnp.float32)
        t_fwd = jnp.sum(st.step_bytes) / link.bw_bytes_per_s + msgs * link.latency_s
        grad_msgs = jnp.sum(st.grad_step_bytes > 0).astype(jnp.float32)
        t_grad = jnp.sum(st.grad_step_bytes) / link.bw_bytes_per_s + grad_msgs * link.latency_s
        t = st.forward_passes * t_fwd + t_grad
        b = st.total_bytes
        per[st.name] = (t, b)
        lat, tot = lat + t, tot + b
        en = en + b * link.energy_pj_per_byte * PJ
    return CommCost(lat, en, tot, per)

