"""codesign: sparsity-aware GNN algorithm/hardware co-design in JAX."""

from codesign.graph import Graph

__version__ = "0.1.0"
__all__ = ["Graph", "__version__"]
