"""Dataset loaders that return a `codesign.graph.Graph`."""

from codesign.data.planetoid import PLANETOID_NAMES, load_planetoid

__all__ = ["PLANETOID_NAMES", "load_planetoid"]
