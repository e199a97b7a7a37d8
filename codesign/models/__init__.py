"""Flax NNX GNN models; all aggregate through `codesign.kernels.aggregate`."""

from codesign.models.gcn import GCN, GCNConv
from codesign.models.norm import gcn_normalize

MODELS = {"gcn": GCN}

__all__ = ["GCN", "GCNConv", "gcn_normalize", "MODELS"]
