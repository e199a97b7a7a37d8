"""Dataset loaders that return a `codesign.graph.Graph`.

`load_ogb_node` imports ``ogb`` (and with it torch) only when called.
"""

from codesign.data.convert import from_edge_index, from_networkx, to_edge_index, to_networkx
from codesign.data.ogb import load_ogb_node
from codesign.data.planetoid import PLANETOID_NAMES, load_planetoid
from codesign.data.synthetic import csbm, edge_homophily, hetero_sbm, rmat_edges, rmat_graph
from codesign.data.wordnet import WordNetInfo, load_wordnet

__all__ = [
    "PLANETOID_NAMES", "load_planetoid", "load_ogb_node", "load_wordnet", "WordNetInfo",
    "rmat_edges", "rmat_graph", "csbm", "hetero_sbm", "edge_homophily",
    "to_edge_index", "from_edge_index", "to_networkx", "from_networkx",
]
