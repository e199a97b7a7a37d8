"""Partitioned full-batch GCN: the forward pass and loss of `codesign.models.GCN` over a mesh.

The same `nnx` model (same parameters) as single-device training; only the graph is split. On
each device ``p`` (its block of B nodes, `codesign.distributed.Partition` layout), a layer is

    Q(x) -> dropout -> combine (GEMM, local) -> D^-1/2 -> SAR aggregation -> D^-1/2 -> + bias

``D^-1/2 (A + I) D^-1/2 Y = D^-1/2 (A (D^-1/2 Y) + D^-1/2 Y)`` (Kipf & Welling, ICLR 2017, eq. 2)
with the degrees of a device's own receivers computed from its own edge slots (every edge lives
with its receiver), so no degree is exchanged: the sender scales its rows before sending.
Equal to the single-device model up to float32 summation order, including:

* `FakeQuant` feature quantizers: the per-tensor scale is the global maximum (``pmax`` over
  devices, 4 bytes per device), so codes equal single-device ones. Weights are replicated.
* `HashDropout`: the mask hashes each element's *global* index (original node id x width +
  column), so it is the single-device mask.
* `FeatureMask` / `ChannelMask`: gates drawn once (replicated), as on one device.
* Edge gates (`PartitionedEdgeMask`): each edge's logit lives with its receiver's partition;
  deterministic gates equal single-device ones; sampled gates use a per-partition stream
  (``fold_in(key, partition)``), the same distribution but not the same draws as one device.

Only the "fixed" quantizer kind and the per-edge mask ("edge") are supported; the others raise.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax.sharding import Mesh, PartitionSpec

from codesign.distributed.halo import sar_aggregate
from codesign.distributed.mesh import AXIS, shard_map, sharded
from codesign.distributed.partition import Partition
from codesign.graph import Graph
from codesign.models.dropout import GOLDEN, M1, M2
from codesign.quant import FakeQuant
from codesign.quant.fake_quant import fake_quant, qrange
from codesign.sparsify import hard_concrete as hc


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class ShardedGraph:
    """A `Graph` in the `Partition` block layout, as arrays sharded over the mesh (leading axis P).

    Fields (P parts, B block rows, F features, S edge slots, H_s halo rows of step s):
      x: float32 [P, B, F]; y: int32 [P, B]; train_mask, val_mask, test_mask: bool [P, B]
        (False on padding rows); node_id: int32 [P, B] original node id (-1 padding).
      senders, receivers: int32 [P, S]; weight: float32 [P, S] edge weights (0 on padding).
      send_rows: tuple of P-1 int32 [P, H_s].
      offsets, lengths: static slot ranges per step; n_nodes, n_edges: static N, E.
    """

    x: jax.Array
    y: jax.Array
    train_mask: jax.Array
    val_mask: jax.Array
    test_mask: jax.Array
    node_id: jax.Array
    senders: jax.Array
    receivers: jax.Array
    weight: jax.Array
    send_rows: tuple
    offsets: tuple = dataclasses.field(metadata=dict(static=True))
    lengths: tuple = dataclasses.field(metadata=dict(static=True))
    n_nodes: int = dataclasses.field(metadata=dict(static=True))
    n_edges: int = dataclasses.field(metadata=dict(static=True))

    @property
    def n_parts(self) -> int:
        return len(self.offsets)


def _put(mesh: Mesh, arr: np.ndarray) -> jax.Array:
    """A [P, ...] host array as a global array sharded along its leading axis (multi-host safe:
    each process provides only the shards of its addressable devices)."""
    arr = np.ascontiguousarray(arr)
    return jax.make_array_from_callback(arr.shape, sharded(mesh), lambda idx: arr[idx])


def shard_graph(graph: Graph, part: Partition, mesh: Mesh) -> ShardedGraph:
    """Places ``graph`` on ``mesh`` in ``part``'s layout.

    Raises:
      ValueError: the partition was built for another graph (node or edge count), or the mesh
        size differs from the number of parts.
    """
    if part.n_nodes != graph.n_nodes or part.n_edges != graph.n_edges:
        raise ValueError(f"shard_graph: partition is for {part.n_nodes} nodes / {part.n_edges} edges, graph has "
                         f"{graph.n_nodes} / {graph.n_edges}")
    if mesh.devices.size != part.n_parts:
        raise ValueError(f"shard_graph: mesh has {mesh.devices.size} devices, partition has {part.n_parts} parts")
    w = np.ones(graph.n_edges, np.float32) if graph.edge_weight is None else np.asarray(graph.edge_weight, np.float32)
    blocks = lambda v, fill=0: _put(mesh, part.to_blocks(np.asarray(v), fill))
    return ShardedGraph(
        x=blocks(np.asarray(graph.x, np.float32)), y=blocks(np.asarray(graph.y, np.int32)),
        train_mask=blocks(np.asarray(graph.train_mask), False), val_mask=blocks(np.asarray(graph.val_mask), False),
        test_mask=blocks(np.asarray(graph.test_mask), False), node_id=_put(mesh, part.node_id),
        senders=_put(mesh, part.senders), receivers=_put(mesh, part.receivers),
        weight=_put(mesh, part.edges_to_slots(w, 0.0)), send_rows=tuple(_put(mesh, r) for r in part.send_rows),
        offsets=part.edge_offsets, lengths=part.edge_lengths, n_nodes=graph.n_nodes, n_edges=graph.n_edges)


class PartitionedEdgeMask(nnx.Module):
    """`codesign.sparsify.EdgeMask` with its logits in the `Partition` slot layout [P, S], sharded
    so that each edge's gate lives with its receiver's partition (hard-concrete gates, Louizos et
    al., ICLR 2018). Implements the density methods of `codesign.sparsify.EdgeSparsifier`, so
    ``GCN.densities`` / ``GCN.workload`` work unchanged with it as ``model.edge_mask``.

    Attributes:
      gate: `HardConcreteGate` of shape [P, S] (padding slots are ignored).
      valid: `nnx.Variable` bool [P, S], True on real edge slots.
      n_edges: E (static).
    """

    def __init__(self, part: Partition, mesh: Mesh, *, init_log_alpha: float = 3.0, rngs: nnx.Rngs):
        self.gate = hc.HardConcreteGate(part.edge_id.shape, init_log_alpha=init_log_alpha, rngs=rngs)
        self.gate.log_alpha.value = jax.device_put(self.gate.log_alpha[...], sharded(mesh))
        self.valid = nnx.Variable(jax.device_put(jnp.asarray(part.edge_id >= 0), sharded(mesh)))
        self.n_edges = part.n_edges

    @classmethod
    def from_edge_logits(cls, log_alpha_edges, part: Partition, mesh: Mesh, *, rngs: nnx.Rngs) -> "PartitionedEdgeMask":
        """A mask whose slots hold ``log_alpha_edges`` float [E] (input edge order; e.g. a trained
        single-device `EdgeMask`'s ``gate.log_alpha``)."""
        m = cls(part, mesh, rngs=rngs)
        m.gate.log_alpha.value = _put(mesh, part.edges_to_slots(np.asarray(log_alpha_edges, np.float32), 0.0))
        return m

    def expected_edge_density(self) -> jax.Array:
        """float32 scalar: mean over the E real edges of P(z_e > 0) (Louizos et al. eq. 12)."""
        p = hc.prob_nonzero(self.gate.log_alpha[...], self.gate.beta)
        return jnp.sum(jnp.where(self.valid[...], p, 0.0)) / self.n_edges

    expected_density = expected_edge_density

    def hard_slot_mask(self) -> jax.Array:
        """bool [P, S]: slots kept at test time (padding slots False)."""
        return (hc.deterministic(self.gate.log_alpha[...]) > 0) & self.valid[...]

    def hard_edge_density(self) -> jax.Array:
        """float32 scalar: fraction of the E edges kept at test time."""
        return jnp.sum(self.hard_slot_mask().astype(jnp.float32)) / self.n_edges

    hard_density = hard_edge_density


def _hash_keep(seed: jax.Array, node_id: jax.Array, width: int, rate: float) -> jax.Array:
    """`codesign.models.dropout.HashDropout`'s keep mask [B, width] of the rows ``node_id`` [B]
    of an [N, width] tensor: lowbias32 of the global flat index ``node * width + column``."""
    idx = jnp.maximum(node_id, 0).astype(jnp.uint32)[:, None] * jnp.uint32(width) + \
        jnp.arange(width, dtype=jnp.uint32)[None, :]
    h = idx * jnp.uint32(GOLDEN) + seed.astype(jnp.uint32)
    h = h ^ (h >> 16)
    h = h * jnp.uint32(M1)
    h = h ^ (h >> 15)
    h = h * jnp.uint32(M2)
    h = h ^ (h >> 16)
    return h >= jnp.uint32(int(rate * 2**32))


def _global_fake_quant(x: jax.Array, q: FakeQuant) -> jax.Array:
    """`FakeQuant` with the per-tensor scale of the whole (unpartitioned) tensor (``pmax``)."""
    if q.bits is None:
        return x
    _, hi = qrange(q.bits, q.signed)
    amax = jnp.max(jnp.abs(x)) if q.signed else jnp.max(jnp.maximum(x, 0))
    amax = jax.lax.pmax(jax.lax.stop_gradient(amax), AXIS)  # the scale gets no gradient (as in fake_quant)
    scale = jnp.where(amax > 0, amax / hi, jnp.ones_like(amax))
    return fake_quant(x, q.bits, signed=q.signed, scale=scale)


def check_model(model) -> None:
    """Raises ValueError unless ``model`` is a `codesign.models.GCN` whose hooks the partitioned
    forward supports ("fixed" `FakeQuant` quantizers; edge mask None or `PartitionedEdgeMask`)."""
    from codesign.models import GCN
    if not isinstance(model, GCN):
        raise ValueError(f"distributed: model must be a codesign.models.GCN, got {type(model).__name__}")
    for name in ("conv1", "conv2"):
        for qn in ("quant_x", "quant_w"):
            q = getattr(getattr(model, name), qn)
            if not isinstance(q, FakeQuant):
                raise ValueError(f"distributed: {name}.{qn} is a {type(q).__name__}; only the 'fixed' quantizer "
                                 f"(FakeQuant) is supported")
    if model.edge_mask is not None and not isinstance(model.edge_mask, PartitionedEdgeMask):
        raise ValueError(f"distributed: model.edge_mask must be None or a PartitionedEdgeMask (edge gates live with "
                         f"their receiver's partition), got {type(model.edge_mask).__name__}")


def _conv_order(conv) -> bool:
    """True when the layer combines first (GEMM, then aggregate the narrower output), as `GCNConv`."""
    return conv.out_features <= conv.in_features


def halo_widths(model) -> tuple:
    """Columns of the rows each layer exchanges: (layer0, layer1), following `GCNConv`'s order."""
    return tuple(c.out_features if _conv_order(c) else c.in_features for c in (model.conv1, model.conv2))


def _draw(model) -> dict:
    """What the forward pass draws once, replicated (as the single-device model does): dropout
    seeds, feature/channel gate values, the edge-gate key, quantized weights."""
    d = {"w1": model.conv1.quant_w(model.conv1.kernel[...]), "b1": model.conv1.bias[...],
         "w2": model.conv2.quant_w(model.conv2.kernel[...]), "b2": model.conv2.bias[...]}
    drop = model.dropout
    if not (drop.deterministic or drop.rate == 0.0):
        d["seeds"] = jnp.stack([jax.random.bits(drop.rngs(), (), jnp.uint32) for _ in range(2)])
    if model.feature_mask is not None:
        d["fz"] = model.feature_mask.gate()
    if model.channel_mask is not None:
        d["cz"] = model.channel_mask.gate()
    em = model.edge_mask
    if em is not None:
        d["log_alpha"] = em.gate.log_alpha[...]
        if not em.gate.deterministic:
            d["gate_key"] = em.gate.rngs()
    return d


def logits_and_loss(model, sg: ShardedGraph, mesh: Mesh, *, int8_halo: bool = False, remat: bool = True,
                    mask: str = "train_mask"):
    """Partitioned forward pass of ``model`` (a `codesign.models.GCN`) on ``sg``.

    Args:
      model: GCN (see `check_model`); train/eval mode as set on it.
      sg: `ShardedGraph` on ``mesh``.
      mesh: 1-D mesh over P devices (`codesign.distributed.make_mesh`).
      int8_halo: send halo rows as int8 + per-row scales (lossy; see `codesign.distributed.halo`).
      remat: rematerialize each aggregation step in the backward pass (SAR).
      mask: which node mask the loss averages over ("train_mask", "val_mask", "test_mask").

    Returns:
      ``(logits float32 [P, B, C] sharded, loss float32 scalar)``: the masked mean softmax cross
      entropy over all devices' ``mask`` nodes, as ``codesign.train`` computes it on one device.
    """
    check_model(model)
    if mesh.devices.size != sg.n_parts:
        raise ValueError(f"logits_and_loss: mesh has {mesh.devices.size} devices, graph has {sg.n_parts} parts")
    d = _draw(model)
    drop_rate = model.dropout.rate
    q1, q2 = model.conv1.quant_x, model.conv2.quant_x
    orders = (_conv_order(model.conv1), _conv_order(model.conv2))
    beta = None if model.edge_mask is None else model.edge_mask.gate.beta
    offsets, lengths = sg.offsets, sg.lengths
    node_mask = getattr(sg, mask)

    def body(d, x, y, m, node_id, snd, rcv, w, send_rows):
        x, y, m, node_id, snd, rcv, w = (a[0] for a in (x, y, m, node_id, snd, rcv, w))
        send_rows = tuple(r[0] for r in send_rows)
        if "log_alpha" in d:
            la = d["log_alpha"][0]
            if "gate_key" in d:
                g = hc.sample(jax.random.fold_in(d["gate_key"], jax.lax.axis_index(AXIS)), la, beta)
            else:
                g = hc.deterministic(la)
            w = w * g
        valid = (node_id >= 0)[:, None]
        deg = jax.ops.segment_sum(w, rcv, num_segments=x.shape[0]) + 1.0  # + self-loop (weight 1)
        inv = jax.lax.rsqrt(jnp.maximum(deg, 1e-12))[:, None]

        def aggregate(z):
            zs = inv * z
            return inv * (zs + sar_aggregate(zs, send_rows, snd, rcv, w, offsets, lengths, int8=int8_halo, remat=remat))

        def conv(h, q, wq, b, i, combine_first):
            h = _global_fake_quant(h, q)
            if "seeds" in d:
                keep = _hash_keep(d["seeds"][i], node_id, h.shape[1], drop_rate)
                h = jnp.where(keep, h / (1.0 - drop_rate), jnp.zeros((), h.dtype))
            out = aggregate(h @ wq) if combine_first else aggregate(h) @ wq
            return out + b

        if "fz" in d:
            x = x * d["fz"][None, :]
        h = jax.nn.relu(conv(x, q1, d["w1"], d["b1"], 0, orders[0]))
        if "cz" in d:
            h = h * d["cz"][None, :]
        h = jnp.where(valid, h, 0.0)  # padding rows stay zero (they would enter the quantizer's max)
        logits = conv(h, q2, d["w2"], d["b2"], 1, orders[1])
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        total = jax.lax.psum(jnp.sum(jnp.where(m, ce, 0.0)), AXIS)
        count = jax.lax.psum(jnp.sum(m.astype(jnp.float32)), AXIS)
        return logits[None], total / jnp.maximum(count, 1.0)

    spec = PartitionSpec(AXIS)
    d_specs = {k: (spec if k == "log_alpha" else PartitionSpec()) for k in d}
    f = shard_map(body, mesh, in_specs=(d_specs, spec, spec, spec, spec, spec, spec, spec,
                                        tuple(spec for _ in sg.send_rows)),
                  out_specs=(spec, PartitionSpec()))
    return f(d, sg.x, sg.y, node_mask, sg.node_id, sg.senders, sg.receivers, sg.weight, sg.send_rows)


def loss_fn(model, sg: ShardedGraph, mesh: Mesh, **kw) -> jax.Array:
    """The training loss (float32 scalar) of `logits_and_loss`."""
    return logits_and_loss(model, sg, mesh, **kw)[1]
