"""Partitioned full-batch GCN: the forward pass and loss of `codesign.models.GCN` over a mesh.

The same `nnx` model (same parameters) as single-device training; only the graph is split. On
each device ``p`` (its block of B nodes, `codesign.distributed.Partition` layout), each layer is
the model's own `codesign.models.GCNConv` with an injected aggregation (`sar_gcn_aggregate`):

    Q(x) -> dropout -> combine (GEMM, local) -> [D^-1/2 -> SAR aggregation -> D^-1/2] -> + bias

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
from codesign.models import GCN, GCNConv
from codesign.quant import FakeQuant
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
    """A [P, ...] host array as a global array sharded along its leading axis (each process
    provides only the shards of its addressable devices)."""
    arr = np.ascontiguousarray(arr)
    return jax.make_array_from_callback(arr.shape, sharded(mesh), lambda idx: arr[idx])


def graph_blocks(graph: Graph, part: Partition) -> dict:
    """The host (numpy) arrays of `ShardedGraph` for ``graph`` in ``part``'s layout, leading axis P.

    Returns:
      dict with `ShardedGraph`'s array fields: ``x`` float32 [P, B, F]; ``y`` int32 [P, B];
      ``train_mask``, ``val_mask``, ``test_mask`` bool [P, B] (False on padding rows); ``node_id``
      int32 [P, B]; ``senders``, ``receivers`` int32 [P, S]; ``weight`` float32 [P, S] (the graph's
      edge weights, 1 where it has none; 0 on padding slots); ``send_rows`` tuple of P-1 int32 [P, H_s].

    Raises:
      ValueError: the partition was built for another graph (node or edge count).
    """
    if part.n_nodes != graph.n_nodes or part.n_edges != graph.n_edges:
        raise ValueError(f"graph_blocks: partition is for {part.n_nodes} nodes / {part.n_edges} edges, graph has "
                         f"{graph.n_nodes} / {graph.n_edges}")
    w = np.ones(graph.n_edges, np.float32) if graph.edge_weight is None else np.asarray(graph.edge_weight, np.float32)
    return dict(
        x=part.to_blocks(np.asarray(graph.x, np.float32)), y=part.to_blocks(np.asarray(graph.y, np.int32)),
        train_mask=part.to_blocks(np.asarray(graph.train_mask), False),
        val_mask=part.to_blocks(np.asarray(graph.val_mask), False),
        test_mask=part.to_blocks(np.asarray(graph.test_mask), False), node_id=part.node_id,
        senders=part.senders, receivers=part.receivers, weight=part.edges_to_slots(w, 0.0),
        send_rows=tuple(part.send_rows))


def edge_slot_mask(part: Partition, mesh: Mesh) -> jax.Array:
    """bool [P, S] on ``mesh`` (sharded along P): True on ``part``'s real edge slots (the
    ``edge_valid`` of `codesign.distributed.build_partitioned_model`)."""
    return _put(mesh, part.edge_id >= 0)


def _part_of(idx: tuple) -> int:
    """The partition of a shard index (a tuple of slices whose first selects one row of [P, ...])."""
    first = idx[0] if idx else slice(None)
    return int(first.start or 0) if isinstance(first, slice) else int(first)


def array_from_parts(mesh: Mesh, blocks: dict, what: str) -> jax.Array:
    """A global [P, ...] array, sharded along its leading axis, from ``blocks`` {part: array
    [...]} holding (at least) this process's parts, all of one shape and dtype (``what`` names
    the array in the error).

    Raises:
      ValueError: two parts differ in shape or dtype.
    """
    first = blocks[min(blocks)]
    for p, b in blocks.items():
        if b.shape != first.shape or b.dtype != first.dtype:
            raise ValueError(f"sharded_graph_from_parts: part {p}'s {what} is {b.dtype}{list(b.shape)}, part "
                             f"{min(blocks)}'s {first.dtype}{list(first.shape)}; parts must share padded shapes")
    shape = (mesh.devices.size,) + first.shape
    return jax.make_array_from_callback(shape, sharded(mesh), lambda idx: blocks[_part_of(idx)][None])


PART_FIELDS = ("x", "y", "train_mask", "val_mask", "test_mask", "node_id", "senders", "receivers", "weight",
               "send_rows")
"""Keys of the dict that a part loader returns (`sharded_graph_from_parts`): `ShardedGraph`'s
array fields, each without its leading P axis."""


def sharded_graph_from_parts(mesh: Mesh, load_part, *, offsets: tuple, lengths: tuple, n_nodes: int,
                             n_edges: int) -> ShardedGraph:
    """A `ShardedGraph` built from per-part arrays, each process loading only its own parts.

    ``load_part(p)`` is called once for every part ``p`` of `codesign.distributed.local_parts`
    (the mesh positions of this process's devices; all of them in a single process) and returns
    a dict with the `PART_FIELDS` of part ``p``: x float32 [B, F]; y int32 [B]; train_mask,
    val_mask, test_mask bool [B]; node_id int32 [B]; senders, receivers int32 [S]; weight
    float32 [S]; send_rows: tuple of P-1 int32 [H_s]. Every part has the same padded shapes (the
    `Partition` layout), so the global arrays are [P, ...] with the leading axis on the mesh
    (`jax.make_array_from_callback`). ``offsets``, ``lengths``, ``n_nodes``, ``n_edges``: the
    layout's static slot ranges per ring step and the graph's N, E.

    Raises:
      ValueError: a part's dict lacks a field, or two parts differ in a field's shape or dtype,
        or ``len(offsets)`` is not the mesh size.
    """
    from codesign.distributed.mesh import local_parts
    P = mesh.devices.size
    if len(offsets) != P or len(lengths) != P:
        raise ValueError(f"sharded_graph_from_parts: offsets/lengths have {len(offsets)}/{len(lengths)} steps, the "
                         f"mesh has {P} devices")
    parts = {p: load_part(p) for p in local_parts(mesh)}
    for p, d in parts.items():
        missing = [k for k in PART_FIELDS if k not in d]
        if missing or len(d["send_rows"]) != P - 1:
            raise ValueError(f"sharded_graph_from_parts: part {p} lacks {missing or ['send_rows of P-1 steps']}")
    field = lambda k: array_from_parts(mesh, {p: np.asarray(d[k]) for p, d in parts.items()}, k)
    rows = tuple(array_from_parts(mesh, {p: np.asarray(d["send_rows"][i]) for p, d in parts.items()}, f"send_rows[{i}]")
                 for i in range(P - 1))
    return ShardedGraph(**{k: field(k) for k in PART_FIELDS if k != "send_rows"}, send_rows=rows,
                        offsets=tuple(offsets), lengths=tuple(lengths), n_nodes=n_nodes, n_edges=n_edges)


def shard_graph(graph: Graph, part: Partition, mesh: Mesh) -> ShardedGraph:
    """Places ``graph`` on ``mesh`` in ``part``'s layout (`sharded_graph_from_parts` with the
    parts cut from the whole graph; each process transfers only its own parts to its devices).

    Raises:
      ValueError: the partition was built for another graph (node or edge count), or the mesh
        size differs from the number of parts.
    """
    b = graph_blocks(graph, part)
    if mesh.devices.size != part.n_parts:
        raise ValueError(f"shard_graph: mesh has {mesh.devices.size} devices, partition has {part.n_parts} parts")
    return sharded_graph_from_parts(mesh, lambda p: block_of(b, p), offsets=part.edge_offsets,
                                    lengths=part.edge_lengths, n_nodes=graph.n_nodes, n_edges=graph.n_edges)


def block_of(blocks: dict, i: int) -> dict:
    """Row ``i`` of stacked blocks (`graph_blocks`, `codesign.distributed.shards.shard_blocks`:
    arrays [k, ...] and ``send_rows`` a tuple of [k, H_s]): one part's dict of `PART_FIELDS`, as
    `sharded_graph_from_parts`'s ``load_part`` returns it."""
    return {**{k: v[i] for k, v in blocks.items() if k != "send_rows"},
            "send_rows": tuple(r[i] for r in blocks["send_rows"])}


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

    def __init__(self, valid: jax.Array, n_edges: int, *, init_log_alpha: float = 3.0, rngs: nnx.Rngs):
        """Args:
          valid: bool [P, S], True on real edge slots, sharded along P on the mesh (each process
            holds its own parts: `edge_slot_mask`).
          n_edges: E, the graph's edges (the density's denominator).
          init_log_alpha, rngs: as `codesign.sparsify.HardConcreteGate`.
        """
        self.gate = hc.HardConcreteGate(valid.shape, init_log_alpha=init_log_alpha, rngs=rngs)
        block = np.full((1,) + tuple(valid.shape[1:]), float(init_log_alpha), np.float32)
        self.gate.log_alpha.value = jax.make_array_from_callback(valid.shape, valid.sharding, lambda idx: block)
        self.valid = nnx.Variable(valid)
        self.n_edges = int(n_edges)

    @classmethod
    def from_edge_logits(cls, log_alpha_edges, part: Partition, mesh: Mesh, *, rngs: nnx.Rngs) -> "PartitionedEdgeMask":
        """A mask whose slots hold ``log_alpha_edges`` float [E] (input edge order; e.g. a trained
        single-device `EdgeMask`'s ``gate.log_alpha``)."""
        m = cls(edge_slot_mask(part, mesh), part.n_edges, rngs=rngs)
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


def set_edge_mask(model, mask: PartitionedEdgeMask):
    """Puts ``mask`` on ``model`` (in place) as its edge mask, marked as data (`nnx.data`, where
    Flax has it): a model built without an edge mask holds ``edge_mask`` as a static attribute."""
    model.edge_mask = None
    model.edge_mask = nnx.data(mask) if hasattr(nnx, "data") else mask
    return model


def partition_edge_mask(model, part: Partition, mesh: Mesh, *, rngs: nnx.Rngs):
    """``model`` (a single-device GCN with an `EdgeMask`) with that mask replaced, in place, by the
    `PartitionedEdgeMask` holding the same gate logits in ``part``'s edge slots
    (`PartitionedEdgeMask.from_edge_logits`); returns ``model``.

    Raises:
      ValueError: ``model`` has no edge mask with gate logits (one line).
    """
    gate = getattr(getattr(model, "edge_mask", None), "gate", None)
    if getattr(gate, "log_alpha", None) is None:
        raise ValueError("partition_edge_mask: model.edge_mask has no gate logits (build the model with n_edges)")
    return set_edge_mask(model, PartitionedEdgeMask.from_edge_logits(model.edge_mask.gate.log_alpha[...], part, mesh,
                                                                     rngs=rngs))


@dataclasses.dataclass(frozen=True)
class HaloAdjacency:
    """One device's view of the GCN adjacency ``D^-1/2 (A + I) D^-1/2`` in the `Partition`
    layout, inside `shard_map`: what `sar_gcn_aggregate` takes as `GCNConv`'s ``adj``.

    Fields (B block rows, S edge slots, H_s halo rows of step s):
      send_rows: tuple of P-1 int32 [H_s]; senders, receivers: int32 [S]; weight: float32 [S] edge
        values (gates applied; 0 on padding slots); inv_sqrt_deg: float32 [B, 1] ``D^-1/2`` of this
        device's rows (self-loop counted); offsets, lengths: the static slot ranges of each step;
        int8: send halo rows as int8 + row scales; remat: rematerialize each ring step;
        weight_sink: None, or a list to which `sar_gcn_aggregate` appends the edge values it
        aggregated with, threaded through the ring (`sar_aggregate`'s ``thread_weight``): the next
        layer aggregates with that array, so the layers' edge-weight gradients share one buffer;
        weight_grad: whether the edge values (so the degrees) have a gradient (edge gates);
        False: ``D^-1/2`` is a constant to the ring's backward pass (`sar_aggregate`'s ``scale_grad``).
    """

    send_rows: tuple
    senders: jax.Array
    receivers: jax.Array
    weight: jax.Array
    inv_sqrt_deg: jax.Array
    offsets: tuple
    lengths: tuple
    int8: bool = False
    remat: bool = True
    weight_sink: Optional[list] = None
    weight_grad: bool = True

    # what a vertex program reads of the adjacency it runs on (`codesign.vertex.Program.__call__`
    # with ``aggregate=sar_gcn_aggregate``: `GCNConv` runs its program on this view)
    @property
    def n_nodes(self) -> int:
        return self.inv_sqrt_deg.shape[0]

    @property
    def n_edges(self) -> int:
        return self.senders.shape[0]

    @property
    def edge_weight(self) -> jax.Array:
        return self.weight

    def with_weight(self, edge_weight: jax.Array) -> "HaloAdjacency":
        """The same halo layout with new edge values ``edge_weight`` [S]."""
        return dataclasses.replace(self, weight=edge_weight)


def sar_gcn_aggregate(adj: HaloAdjacency, x: jax.Array, impl: str = "auto") -> jax.Array:
    """``D^-1/2 (A + I) D^-1/2 x`` for this device's rows, with the signature of
    `codesign.kernels.aggregate` so that `GCNConv` runs it as its injected aggregation.

    ``D^-1/2 (A + I) D^-1/2 Y = D^-1/2 (A (D^-1/2 Y) + D^-1/2 Y)`` (Kipf & Welling, ICLR 2017,
    eq. 2): the sender scales its rows before they are sent (`sar_aggregate`), so no degree is
    exchanged. ``impl`` is accepted and ignored (the ring is the one implementation).

    Shapes: ``x`` float32 [B, F] -> [B, F].
    """
    del impl
    return _sar_gcn(adj, x, None)


def sar_gcn_combine_aggregate(adj: HaloAdjacency, x: jax.Array, kernel: jax.Array) -> jax.Array:
    """``D^-1/2 (A + I) D^-1/2 (x @ kernel)`` for this device's rows: `sar_gcn_aggregate` with the
    combine-first GEMM inside the ring's custom VJP (`sar_aggregate`'s ``kernel``), whose backward
    pass neither keeps ``x @ kernel`` nor holds it through the ring; `GCNConv`'s
    ``combine_aggregate_fn``.

    Shapes: ``x`` float32 [B, K], ``kernel`` float32 [K, F] -> [B, F].
    """
    return _sar_gcn(adj, x, kernel)


def _sar_gcn(adj: HaloAdjacency, x: jax.Array, kernel) -> jax.Array:
    thread = adj.weight_sink is not None
    out = sar_aggregate(x, adj.send_rows, adj.senders, adj.receivers, adj.weight, adj.offsets, adj.lengths,
                        int8=adj.int8, remat=adj.remat, thread_weight=thread, row_scale=adj.inv_sqrt_deg,
                        scale_grad=adj.weight_grad, kernel=kernel)
    if thread:
        out, w = out
        adj.weight_sink.append(w)
    return out


def check_model(model) -> None:
    """Raises ValueError unless ``model`` is a `codesign.models.GCN` whose hooks the partitioned
    forward supports ("fixed" `FakeQuant` quantizers; edge mask None or `PartitionedEdgeMask`)."""
    if not isinstance(model, GCN):
        raise ValueError(f"distributed: model must be a codesign.models.GCN, got {type(model).__name__}")
    for name, conv in (("conv1", model.conv1), ("conv2", model.conv2)):
        for qn, q in (("quant_x", conv.quant_x), ("quant_w", conv.quant_w)):
            if not isinstance(q, FakeQuant):
                raise ValueError(f"distributed: {name}.{qn} is a {type(q).__name__}; only the 'fixed' quantizer "
                                 f"(FakeQuant) is supported")
    if model.edge_mask is not None and not isinstance(model.edge_mask, PartitionedEdgeMask):
        raise ValueError(f"distributed: model.edge_mask must be None or a PartitionedEdgeMask (edge gates live with "
                         f"their receiver's partition), got {type(model.edge_mask).__name__}")


def halo_widths(model) -> tuple:
    """Columns of the rows each layer exchanges: (layer0, layer1), following `GCNConv`'s order."""
    return tuple(c.out_features if c.combine_first else c.in_features for c in (model.conv1, model.conv2))


def _draw(model) -> dict:
    """What the forward pass draws once, replicated, in the single-device model's order: the
    dropout seed of each layer that drops, the feature/channel gate values, the edge-gate key."""
    d = {}
    drop = model.dropout
    if drop.active:
        if model.input_dropout:
            d["seed0"] = drop.draw_seed()
        d["seed1"] = drop.draw_seed()
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


def _local_conv(graphdef, state, aggregate_fn) -> GCNConv:
    """This device's copy of a `GCNConv` (the model's parameters and quantizers) with the SAR
    aggregation injected and its feature quantizer's per-tensor scale taken over the whole
    tensor (`FakeQuant` with ``axis_name``: a ``pmax`` over the mesh, 4 bytes per device)."""
    conv = nnx.merge(graphdef, state)
    conv.aggregate_fn = aggregate_fn
    conv.combine_aggregate_fn = sar_gcn_combine_aggregate
    conv.quant_x = FakeQuant(conv.quant_x.bits, signed=conv.quant_x.signed, axis_name=AXIS)
    return conv


def logits_and_loss(model, sg: ShardedGraph, mesh: Mesh, *, int8_halo: bool = False, remat: bool = True,
                    mask: str = "train_mask"):
    """Partitioned forward pass of ``model`` (a `codesign.models.GCN`) on ``sg``.

    Each layer is the model's own `GCNConv` (`GCN.__call__`'s order: feature mask -> conv1 ->
    ReLU -> channel mask -> conv2) with `sar_gcn_aggregate` as its aggregation and
    its `FakeQuant` feature quantizer reduced over the mesh (``axis_name``); dropout is the model's `HashDropout` applied by
    global element index.

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

    Raises:
      ValueError: an unsupported model (`check_model`), a mesh whose size is not the number of
        parts, an unknown ``mask``.
    """
    check_model(model)
    if mesh.devices.size != sg.n_parts:
        raise ValueError(f"logits_and_loss: mesh has {mesh.devices.size} devices, graph has {sg.n_parts} parts")
    masks = {"train_mask": sg.train_mask, "val_mask": sg.val_mask, "test_mask": sg.test_mask}
    if mask not in masks:
        raise ValueError(f"logits_and_loss: mask must be one of {sorted(masks)}, got {mask!r}")
    d = _draw(model)
    (gd1, st1), (gd2, st2) = nnx.split(model.conv1), nnx.split(model.conv2)
    drop = model.dropout
    beta = None if model.edge_mask is None else model.edge_mask.gate.beta
    offsets, lengths = sg.offsets, sg.lengths

    def body(d, st1, st2, x, y, m, node_id, snd, rcv, w, send_rows):
        x, y, m, node_id, snd, rcv, w = (a[0] for a in (x, y, m, node_id, snd, rcv, w))
        send_rows = tuple(r[0] for r in send_rows)
        if "log_alpha" in d:
            la = d["log_alpha"][0]
            if "gate_key" in d:
                g = hc.sample(jax.random.fold_in(d["gate_key"], jax.lax.axis_index(AXIS)), la, beta)
            else:
                g = hc.deterministic(la)
            w = w * g
        deg = jax.ops.segment_sum(w, rcv, num_segments=x.shape[0]) + 1.0  # + self-loop (weight 1)
        # with edge gates the first layer's ring passes its weights on to the second's (one
        # buffer for both layers' edge-weight gradients, `HaloAdjacency.weight_sink`)
        sink = [] if "log_alpha" in d else None
        adj = HaloAdjacency(send_rows, snd, rcv, w, jax.lax.rsqrt(jnp.maximum(deg, 1e-12))[:, None],
                            offsets, lengths, int8_halo, remat, sink, "log_alpha" in d)
        conv1, conv2 = _local_conv(gd1, st1, sar_gcn_aggregate), _local_conv(gd2, st2, sar_gcn_aggregate)
        rows = jnp.maximum(node_id, 0).astype(jnp.uint32)[:, None]

        def dropout(key):  # the model's HashDropout mask of these rows: global flat index node * width + column
            if key not in d:
                return None
            return lambda h: drop.apply(h, d[key], rows * jnp.uint32(h.shape[1]) +
                                        jnp.arange(h.shape[1], dtype=jnp.uint32)[None, :])

        if "fz" in d:
            x = x * d["fz"][None, :]
        h = jax.nn.relu(conv1(x, adj, dropout("seed0")))
        if "cz" in d:
            h = h * d["cz"][None, :]
        h = jnp.where((node_id >= 0)[:, None], h, 0.0)  # padding rows stay zero (they would enter the quantizer's max)
        if sink is not None:  # the GCN program aggregates with exactly adj.weight, so the threaded array is it
            assert len(sink) == 1, "logits_and_loss: the first layer must aggregate once"
            adj = dataclasses.replace(adj, weight=sink[0], weight_sink=None)
        logits = conv2(h, adj, dropout("seed1"))
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        total = jax.lax.psum(jnp.sum(jnp.where(m, ce, 0.0)), AXIS)
        count = jax.lax.psum(jnp.sum(m.astype(jnp.float32)), AXIS)
        return logits[None], total / jnp.maximum(count, 1.0)

    spec, rep = PartitionSpec(AXIS), PartitionSpec()
    d_specs = {k: (spec if k == "log_alpha" else rep) for k in d}
    f = shard_map(body, mesh, in_specs=(d_specs, rep, rep, spec, spec, spec, spec, spec, spec, spec,
                                        tuple(spec for _ in sg.send_rows)),
                  out_specs=(spec, rep))
    return f(d, st1, st2, sg.x, sg.y, masks[mask], sg.node_id, sg.senders, sg.receivers, sg.weight, sg.send_rows)


def loss_fn(model, sg: ShardedGraph, mesh: Mesh, **kw) -> jax.Array:
    """The training loss (float32 scalar) of `logits_and_loss`."""
    return logits_and_loss(model, sg, mesh, **kw)[1]
