"""Dataset loaders that return a `codesign.graph.Graph`."""

from codesign.data.convert import from_edge_index, from_networkx, to_edge_index, to_networkx
from codesign.data.planetoid import PLANETOID_NAMES, load_planetoid
from codesign.data.synthetic import csbm, edge_homophily, hetero_sbm, rmat_edges, rmat_graph
from codesign.data.wordnet import WordNetInfo, load_wordnet

DATASETS = (*PLANETOID_NAMES, "wordnet")
"""The datasets `load_dataset` reads by name (the command line's ``--dataset`` choices)."""


def load_dataset(name: str, root=None):
    """The `Graph` of dataset ``name`` (`DATASETS`): `load_planetoid` (Cora, CiteSeer, PubMed with
    their public split, row-normalized features) or `load_wordnet` (default vocabulary and split).

    Raises:
      ValueError: unknown ``name`` (the message lists `DATASETS`); the loaders' own errors
        (missing or tampered files).
    """
    if name in PLANETOID_NAMES:
        return load_planetoid(name, root=root)
    if name == "wordnet":
        return load_wordnet(root)
    raise ValueError(f"dataset: unknown dataset {name!r}; choose from {', '.join(DATASETS)}")

__all__ = [
    "DATASETS", "load_dataset", "PLANETOID_NAMES", "load_planetoid", "load_wordnet", "WordNetInfo",
    "rmat_edges", "rmat_graph", "csbm", "hetero_sbm", "edge_homophily",
    "to_edge_index", "from_edge_index", "to_networkx", "from_networkx",
]
