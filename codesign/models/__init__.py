"""Flax NNX GNN models. Every conv layer aggregates through the function its model's constructor
is given, ``aggregate_fn(adj, x, impl=...)`` with the signature of `codesign.kernels.aggregate`
(the default), as jraph's ``GraphConvolution(aggregate_nodes_fn=...)``: the same layer runs a
fused, a dense or a distributed aggregation. (GAT's fused and CSR paths run
`codesign.kernels.gat_aggregate` / ``csr_spmm``, whose softmax is inside the kernel; GraphSAGE's
max aggregator runs ``jax.ops.segment_max``, since an aggregation function computes sums.)

Every model shares GCN's protocol: ``Model(in_features, hidden, n_classes, *, n_edges, feature_mask,
bits, dropout, aggregate_fn, rngs, **model_options)``, ``__call__(x, adj) -> logits``, ``densities(hard)`` and
``workload(n_nodes, n_edges, *, hard, training, bits, densities, locality)``. GCN, GAT and GraphSAGE
also take the co-design hooks ``edge_sparsifier``, ``channel_mask``, ``quantizer`` and ``in_degree``
and report ``layer_bits(hard)``.

``MODEL_DEFAULTS[name]``: the training hyper-parameters (`codesign.train.TrainConfig` fields) of
each model's paper / reference setting on Cora; fields not listed take `TrainConfig`'s defaults
(Kipf & Welling's GCN). `TrainConfig.for_model` and the CLI apply them.
"""

from codesign.models.appnp import APPNP, Propagation
from codesign.models.base import GNN
from codesign.models.gat import GAT, GATConv
from codesign.models.gcn import GCN, GCNConv
from codesign.models.gin import GIN, GINConv
from codesign.models.layers import GraphCounts, Layer, QuantLinear
from codesign.models.norm import gcn_normalize
from codesign.models.rgcn import RGCN, RGCNConv
from codesign.models.sage import GraphSAGE, SAGEConv

MODELS = {"gcn": GCN, "gat": GAT, "sage": GraphSAGE, "gin": GIN, "appnp": APPNP, "rgcn": RGCN}

MODEL_DEFAULTS = {
    # Kipf & Welling (ICLR 2017): TrainConfig's own defaults.
    "gcn": {},
    # Velickovic et al. (ICLR 2018), Cora: 8 heads x 8 hidden, 1 output head, dropout 0.6 on inputs
    # and attention, lr 0.005, L2 5e-4 on all weights; the paper early-stops (patience 100) on
    # validation accuracy/loss: here the best-validation epoch of a fixed budget is kept.
    "gat": {"hidden": 8, "heads": 8, "dropout": 0.6, "lr": 0.005, "weight_decay": 5e-4,
            "weight_decay_scope": "all", "epochs": 300, "select": "best_val"},
    # Hamilton et al. (NeurIPS 2017) mean aggregator; full-batch Cora setting of PyG's examples:
    # hidden 64, dropout 0.5, lr 0.01, weight decay 5e-4 on all weights.
    "sage": {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4, "weight_decay_scope": "all",
             "aggr": "mean", "epochs": 200, "select": "best_val"},
    # Xu et al. (ICLR 2019) GIN-eps with 2-layer MLPs; Cora: hidden 64, dropout 0.5, lr 0.01, wd 5e-4.
    "gin": {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4, "weight_decay_scope": "all",
            "epochs": 200, "select": "best_val"},
    # Klicpera et al. (ICLR 2019): hidden 64, dropout 0.5, lr 0.01, L2 5e-3 on the first layer,
    # K = 10, alpha = 0.1; the paper early-stops (patience 100): best-validation epoch here.
    "appnp": {"hidden": 64, "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-3, "weight_decay_scope": "first",
              "k_hops": 10, "alpha": 0.1, "epochs": 300, "select": "best_val"},
    # Schlichtkrull et al. (ESWC 2018): hidden 16, no dropout, lr 0.01, L2 5e-4. (`codesign.train`
    # passes one untyped adjacency: R-GCN there sees a single relation; typed graphs use
    # `codesign.models.rgcn.relation_adjacencies`.)
    "rgcn": {"hidden": 16, "dropout": 0.0, "lr": 0.01, "weight_decay": 5e-4},
}

__all__ = ["GNN", "Layer", "GraphCounts", "GCN", "GCNConv", "GAT", "GATConv", "GraphSAGE", "SAGEConv", "GIN",
           "GINConv", "APPNP", "Propagation", "QuantLinear", "RGCN", "RGCNConv", "gcn_normalize", "MODELS",
           "MODEL_DEFAULTS"]
