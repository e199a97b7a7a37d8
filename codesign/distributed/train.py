"""Partitioned full-batch co-design training over a device mesh (``codesign train --devices P``).

The one fit loop (`codesign.train.fit`) with the forward and loss of `codesign.distributed.gcn`
and a partition-aware cost: compute of the busiest device plus
the halo exchange of every layer on a link preset (`codesign.hwmodel.comm`), or on a declared
`codesign.hwmodel.topology.Topology` with each layer's exchange as the planner plans it
(`codesign.hwmodel.planner`: peer-to-peer, ring or relay, with contention on shared links):

    latency_s = estimate(workload of the busiest device).latency_s + comm.latency_s
    energy_j  = estimate(workload of the whole graph).energy_j   + comm.energy_j
    dram_bytes = estimate(workload of the whole graph).dram_bytes

each with the input features stored dense or CSR, whichever the objective prices lower
(`partitioned_cost`'s ``feature_nnz``; the reports always, the penalty with
``cost.sparse_features``, as `codesign.train.loss_inputs`). The cost term trades accuracy for communication too (int8 halo rows cost a quarter of the
bytes; a channel mask shrinks the hidden width; fewer bits shrink compute).
"""

from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec

from codesign import hwmodel
from codesign.distributed.gcn import (PartitionedEdgeMask, edge_slot_mask, halo_widths, logits_and_loss, set_edge_mask,
                                      shard_graph)
from codesign.distributed.mesh import make_mesh
from codesign.distributed.partition import Partition, PartitionLayout, host_halo_counts, partition_graph
from codesign.distributed.shards import graph_sizes, load_local, read_feature_nnz, read_layout, read_locality
from codesign.graph import Graph, feature_column_nnz
from codesign.hwmodel import comm
from codesign.results import check_run_record
from codesign.sparsify import learns_edge_weights
from codesign.train import Problem, build_model, fit, masked_accuracy, objective
from codesign.train.build import loss_inputs, prices_csr_store


def _host_float(x) -> float:
    """A replicated scalar (possibly spanning other processes' devices) as a Python float, read
    from this process's first shard."""
    return float(np.asarray(x.addressable_shards[0].data) if isinstance(x, jax.Array) else x)


def comm_stages(model, part: Partition | PartitionLayout, *, training: bool = False, int8: bool = False,
                padded: bool = False, topology: Optional[hwmodel.Topology] = None) -> tuple:
    """The `comm.CommStage` of each GCN layer of ``model`` on ``part`` (a `Partition` or its
    `PartitionLayout`: only the sizes are read).

    ``padded=False``: the halo rows the edges read (``part.halo_counts``); ``padded=True``: the
    rows the static-shape ring ships (what the compiled program's ``collective-permute`` ops
    move; `codesign.distributed.collective_permute_bytes` counts them). Exchanged values are
    float32 (int8 + a float32 scale per row with ``int8``); the backward re-fetch is modeled when
    the edge weights get a gradient (`codesign.sparsify.learns_edge_weights`, the training-cost
    rule's ``dA``: it reads the halo rows).

    ``topology``: each stage's plan is chosen on it (`hwmodel.planner.with_plans`, static: on the
    concrete counts, also inside ``jit``); with a `Partition` (not a layout, which lacks the rows)
    and ``padded=False``, the stages also carry the distinct rows per host (`host_halo_counts`)
    that a relay sends across hosts once.

    Raises:
      ValueError: a ``topology`` whose device count is not ``part.n_parts``.
    """
    rows = comm.padded_rows(part.halo_sizes, part.n_parts) if padded else part.halo_counts
    refetch = learns_edge_weights(model.edge_mask)
    bits = 8.0 if int8 else 32.0
    host_rows = None
    if topology is not None:
        if topology.n_devices != part.n_parts:
            raise ValueError(f"comm_stages(topology): Topology({topology.name!r}) has {topology.n_devices} devices, "
                             f"the partition {part.n_parts} parts")
        if isinstance(part, Partition) and not padded and topology.n_hosts > 1:
            host_rows = host_halo_counts(part, topology.device_host)
    def build():
        return tuple(comm.communication_stage(f"layer{i}", rows, w, bits, training=training, refetch=refetch,
                                              int8=int8, host_rows=host_rows)
                     for i, w in enumerate(halo_widths(model)))

    if topology is None:
        return build()
    with jax.ensure_compile_time_eval():  # rows and widths are concrete: the plan choice is static
        return hwmodel.planner.with_plans(build(), topology)


def partitioned_cost(model, part: Partition | PartitionLayout, hw: hwmodel.HardwareSpec,
                     link: comm.LinkSpec | hwmodel.Topology, *,
                     hard: bool = False, training: bool = False, int8: bool = False,
                     locality: Optional[hwmodel.LocalityProfile] = None, feature_nnz=None,
                     objective: str = "energy_j") -> dict:
    """Modeled cost (float32 scalars) of ``model`` partitioned as ``part`` (module docstring):
    ``latency_s``, ``energy_j``, ``dram_bytes``, ``comm_bytes``, ``comm_latency_s``, ``comm_energy_j``.
    ``part``: a `Partition` or its `PartitionLayout`. ``link``: a `comm.LinkSpec` (the ring on
    one link, as before) or a `hwmodel.Topology` (each layer's planned exchange, `comm_stages`
    with ``topology``; P must equal the topology's devices).

    ``feature_nnz``: float [F] nonzeros per input column (`codesign.graph.feature_column_nnz`) to
    price the input features stored CSR beside dense (`codesign.train.store_costs`); the store
    with the lower ``objective`` total is taken for every field (traceable: `jnp.where`), each
    layer mapped by that ``objective`` too (`hwmodel.estimate`'s ``mapping``). The
    busiest device's rows are ASSUMED to hold the average share of the nonzeros
    (``block_size / n_nodes`` of them). None: stored dense."""
    per_device_edges = max(part.edges_per_part)
    if isinstance(link, comm.LinkSpec):
        c = comm.communication_cost(comm_stages(model, part, training=training, int8=int8), link)
    else:
        c = hwmodel.planner.planned_cost(comm_stages(model, part, training=training, int8=int8, topology=link), link)

    def priced(nnz, share):
        kw = {} if nnz is None else {"feature_nnz": nnz * share}
        busiest = hwmodel.estimate(model.workload(part.block_size, per_device_edges, hard=hard, training=training,
                                                  locality=locality, **kw), hw, mapping=objective)
        kw = {} if nnz is None else {"feature_nnz": nnz}
        whole = hwmodel.estimate(model.workload(part.n_nodes, part.n_edges, hard=hard, training=training,
                                                locality=locality, **kw), hw, mapping=objective)
        return {"latency_s": busiest.latency_s + c.latency_s, "energy_j": whole.energy_j + c.energy_j,
                "dram_bytes": whole.dram_bytes, "comm_bytes": c.bytes, "comm_latency_s": c.latency_s,
                "comm_energy_j": c.energy_j}

    dense = priced(None, 1.0)
    if feature_nnz is None:
        return dense
    csr = priced(jnp.asarray(feature_nnz, jnp.float32), part.block_size / part.n_nodes)
    take_csr = csr[objective] < dense[objective]
    return {k: jnp.where(take_csr, csr[k], dense[k]) for k in dense}


def build_partitioned_model(cfg, graph, edge_valid: Optional[jax.Array], rngs: nnx.Rngs):
    """``cfg``'s GCN (`codesign.train.build_model`) with its edge mask, if any, as a
    `PartitionedEdgeMask` over the slots ``edge_valid``.

    Args:
      cfg: `codesign.train.TrainConfig`.
      graph: the `Graph`, or its sizes only (`codesign.distributed.shards.GraphSizes`: n_nodes,
        n_edges, n_features, n_classes; all that a partitioned GCN reads of it).
      edge_valid: bool [P, S] on the mesh, True on real edge slots (`edge_slot_mask`); read only
        when ``cfg`` has an edge mask.
      rngs: `nnx.Rngs`.

    Raises:
      ValueError: a config the partitioned trainer does not support (model other than "gcn",
        quantizer other than "fixed", edge sparsifier other than "edge", budget mode,
        ``select="best_val"``).
    """
    bad = {"model.name": (cfg.model.name, "gcn"), "quant.quantizer": (cfg.quant.quantizer, "fixed"),
           "optim.select": (cfg.optim.select, "last")}
    if cfg.uses_edge_mask:
        bad["masks.edge_sparsifier"] = (cfg.masks.edge_sparsifier, "edge")
    for name, (got, want) in bad.items():
        if got != want:
            raise ValueError(f"distributed training: TrainConfig.{name}={got!r} is not supported (only {want!r})")
    if cfg.cost.budget is not None:
        raise ValueError("distributed training: TrainConfig.cost.budget is not supported; use cost_weight")
    if cfg.distill.weight > 0:
        raise ValueError("distributed training: TrainConfig.distill.weight is not supported (no teacher logits "
                         "in the partitioned layout)")
    model = build_model(cfg.replace(edge_mask=False), graph, rngs)
    if cfg.uses_edge_mask:
        if edge_valid is None:
            raise ValueError("build_partitioned_model: edge_valid is None, but TrainConfig.masks.edge asks for an "
                             "edge mask")
        set_edge_mask(model, PartitionedEdgeMask(edge_valid, graph.n_edges, rngs=rngs))
    return model


def train_distributed(graph: Optional[Graph], cfg, hw: hwmodel.HardwareSpec, n_devices: int, *,
                      link: Optional[str] = None, topology: Optional[str] = None, int8_halo: bool = False,
                      method: str = "metis",
                      shards=None, on_epoch: Optional[Callable[[int, dict], None]] = None) -> dict:
    """Trains ``cfg``'s GCN on ``graph`` partitioned over ``n_devices`` devices (full batch).

    Args:
      graph: `Graph` with train/val/test masks; every process partitions all of it (METIS,
        seeded, so they agree). None with ``shards``.
      cfg: `codesign.train.TrainConfig` (see `build_partitioned_model` for what is supported).
      hw: `HardwareSpec` of each device.
      n_devices: P, devices of the mesh (``jax.devices()[:P]``; across processes, after
        `codesign.distributed.initialize`, all ``jax.device_count()`` devices of the cluster).
      link: `codesign.hwmodel.comm.LINKS` preset between devices (the ring on one link each;
        default ``"nvlink4"`` unless ``topology`` is given).
      topology: instead of ``link``, a `codesign.hwmodel.topology.TOPOLOGIES` preset
        (`topology.get_topology` for ``n_devices``): each layer's exchange priced as the planner
        plans it there (`partitioned_cost` with a `Topology`), with contention on shared links.
      int8_halo: exchange halo rows as int8 + per-row scales.
      method: partitioner (`codesign.distributed.METHODS`); not with ``shards``.
      shards: a shard folder (``codesign partition GRAPH --parts P``, `shards.write_shards`)
        instead of ``graph``: each process reads the manifest and its own parts only
        (`shards.load_shard`), never the whole graph; the run equals the one on the graph that
        folder was cut from with the same partition.
      on_epoch: optional callback ``(epoch, {"loss", "cost_ratio"})``.

    Returns:
      dict with every `codesign.results.RUN_RECORD_FIELDS` field, as `codesign.train.train`
      returns them (``modeled`` / ``dense_modeled`` are the partitioned costs, `partitioned_cost`,
      so they also hold ``comm_bytes``, ``comm_latency_s``, ``comm_energy_j``), plus ``devices``,
      ``processes`` (``jax.process_count()``), ``link`` (None with ``topology``), ``topology``
      (None without), ``int8_halo``, ``partition``
      (`PartitionLayout.summary`) and ``comm_bytes_per_epoch``; ``modeled`` and ``dense_modeled``
      each take the cheaper input store, as on one device (a ``shards`` folder carries the
      column nonzeros, `codesign.distributed.shards.read_feature_nnz`). Across processes every process
      returns the same dict (accuracies and costs are reduced on device, replicated); writing it
      is the caller's choice (`codesign.distributed.is_primary`).

    Raises:
      ValueError: both ``link`` and ``topology``, an unknown link or topology preset, a
        fixed-size topology with other than P devices, unsupported config, P < 1, P > available devices, P > nodes, (across
        processes) P other than the cluster's device count, neither or both of ``graph`` and
        ``shards``, or a shard folder for another P (`shards.ShardError`, one line).
      AssertionError: (across processes) the processes computed different partitions.
    """
    if (graph is None) == (shards is None):
        raise ValueError("train_distributed: give either graph or shards")
    # the link or topology first: a bad name fails before any partitioning
    if link is not None and topology is not None:
        raise ValueError("train_distributed: give link or topology, not both")
    link = "nvlink4" if link is None and topology is None else link
    lk = comm.get_link(link) if topology is None else hwmodel.topology.get_topology(topology, n_devices)
    mesh = make_mesh(n_devices)
    if shards is not None:
        sg, edge_valid = load_local(shards, mesh)  # (refuses a folder of another P than the mesh's)
        layout, sizes, locality = read_layout(shards), graph_sizes(shards), read_locality(shards)
    else:
        part = partition_graph(np.asarray(graph.senders), np.asarray(graph.receivers), graph.n_nodes, n_devices,
                               method)
        if jax.process_count() > 1:  # every process partitions the whole graph: they must agree (METIS is seeded)
            from jax.experimental import multihost_utils
            multihost_utils.assert_equal(part.part, "train_distributed: the processes computed different partitions")
        layout, sizes = part.layout, graph
        sg, edge_valid = shard_graph(graph, part, mesh), edge_slot_mask(part, mesh)
        locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
    model = build_partitioned_model(cfg, sizes, edge_valid,
                                    nnx.Rngs(params=cfg.seed, dropout=cfg.seed + 1, gates=cfg.seed + 2, quant=cfg.seed + 3))
    dense_model = build_partitioned_model(cfg.replace(bits=None, cost_weight=0.0, edge_mask=False, feature_mask=False,
                                                      channel_mask=False), sizes, None, nnx.Rngs(0))
    # reports price the input stored dense or CSR, whichever is cheaper (`codesign.train.workload_inputs`); the
    # penalty the CSR store only with cost.sparse_features. A shards folder carries the column nonzeros.
    nnz = None
    if prices_csr_store(cfg):
        nnz = read_feature_nnz(shards) if shards is not None else feature_column_nnz(graph.x)
    loss_nnz = loss_inputs(cfg, {"feature_nnz": nnz}).get("feature_nnz")
    cost = functools.partial(partitioned_cost, part=layout, hw=hw, link=lk, locality=locality,
                             objective=cfg.cost.objective)
    dense = {k: float(v) for k, v in cost(dense_model, hard=True, feature_nnz=nnz).items()}
    dense_c = (dense[cfg.cost.objective] if loss_nnz is nnz
               else float(cost(dense_model, hard=True, feature_nnz=loss_nnz)[cfg.cost.objective]))

    def forward(m, sg):
        return logits_and_loss(m, sg, mesh, int8_halo=int8_halo)

    def cost_ratio(m, hard: bool):
        return cost(m, hard=hard, int8=int8_halo, feature_nnz=loss_nnz)[cfg.cost.objective] / dense_c

    model.train()
    # the model's arrays are the training state (no copy: with edge gates, one per-edge array less)
    fitted = fit(model, Problem(sg, forward, cost_ratio), cfg, objective(cfg), on_epoch=on_epoch, donate_model=True)

    model.eval()
    replicated = NamedSharding(mesh, PartitionSpec())

    order = []  # the dicts' key order (a jitted function's dicts come back sorted by key)

    def evaluate(m, sg):  # one SPMD program: every value it returns is replicated on every device
        logits = logits_and_loss(m, sg, mesh, int8_halo=int8_halo)[0]
        out = ({k: masked_accuracy(logits, sg.y, getattr(sg, f"{k}_mask")) for k in ("test", "val", "train")},
               cost(m, hard=True, int8=int8_halo, feature_nnz=nnz),
               m.densities(hard=True), m.layer_bits(hard=True))
        order[:] = [list(d) for d in out]
        return jax.tree.map(lambda v: jax.lax.with_sharding_constraint(v, replicated), out)

    acc, hard, densities, layer_bits = [{k: _host_float(d[k]) for k in keys}
                                        for d, keys in zip(nnx.jit(evaluate)(model, sg), order)]
    epoch_bytes = float(sum(s.total_bytes for s in comm_stages(model, layout, training=True, int8=int8_halo)))
    return check_run_record({
        "test_accuracy": acc["test"], "val_accuracy": acc["val"], "train_accuracy": acc["train"],
        "modeled": hard, "dense_modeled": dense, "densities": densities,
        "bits": cfg.quant.bits or 32, "layer_bits": layer_bits,
        "final_loss": fitted.final_loss, "final_cost_ratio": fitted.final_cost_ratio,
        "train_time_s": fitted.train_time_s, "selected_epoch": fitted.selected_epoch,
        "devices": n_devices, "processes": jax.process_count(),
        "link": link, "topology": topology, "int8_halo": int8_halo,
        "partition": layout.summary(), "comm_bytes_per_epoch": epoch_bytes,
    }, "train_distributed")
