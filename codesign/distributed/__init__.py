"""Scale-out full-batch training: METIS partitions with halo bookkeeping, per-process shard files
(`shards`), SAR-style sequential aggregation over a device mesh (`jax.shard_map`), partitioned GCN
loss and trainer."""

from codesign.distributed.halo import collective_permute_bytes, exchange, int8_exchange, ring_perm, sar_aggregate
from codesign.distributed.mesh import AXIS, initialize, is_primary, local_parts, make_mesh, shard_map, sharded
from codesign.distributed.partition import (METHODS, Partition, PartitionLayout, cut_by_level, hierarchical_partition,
                                           host_halo_counts, metis_parts, partition_graph)
from codesign.distributed.gcn import (PART_FIELDS, HaloAdjacency, PartitionedEdgeMask, ShardedGraph, check_model,
                                      edge_slot_mask, graph_blocks, halo_widths, logits_and_loss, loss_fn, partition_edge_mask,
                                      sar_gcn_aggregate, sar_gcn_combine_aggregate, shard_graph, sharded_graph_from_parts)
from codesign.distributed.shards import (GraphSizes, Shard, ShardError, load_local, load_shard, read_layout, shard_blocks,
                                         write_shards)

__all__ = ["collective_permute_bytes", "exchange", "int8_exchange", "ring_perm", "sar_aggregate", "AXIS",
           "initialize", "is_primary", "local_parts", "make_mesh", "shard_map", "sharded", "METHODS", "Partition", "PartitionLayout", "cut_by_level",
           "hierarchical_partition", "host_halo_counts", "metis_parts",
           "partition_graph", "HaloAdjacency", "PartitionedEdgeMask", "ShardedGraph",
           "check_model", "edge_slot_mask", "graph_blocks", "halo_widths", "logits_and_loss", "loss_fn", "partition_edge_mask", "sar_gcn_aggregate", "sar_gcn_combine_aggregate",
           "shard_graph", "PART_FIELDS", "sharded_graph_from_parts", "GraphSizes", "Shard", "ShardError",
           "load_local", "load_shard", "read_layout", "shard_blocks", "write_shards"]
from codesign.distributed.train import build_partitioned_model, comm_stages, partitioned_cost, train_distributed

__all__ += ["build_partitioned_model", "comm_stages", "partitioned_cost", "train_distributed"]
