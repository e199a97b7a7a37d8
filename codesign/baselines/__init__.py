"""Baseline trainers that sit above `codesign.train`: UGS (Chen et al., ICML 2021), the unified
graph-sparsification lottery ticket with iterative magnitude pruning, rewinding and a random-pruning
control (`codesign.baselines.ugs`). Pruning masks and sparsifier baselines (DropEdge, random edge
removal, magnitude pruning) are modules in `codesign.sparsify`; quantization baselines in
`codesign.quant`."""

from codesign.baselines import ugs

__all__ = ["ugs"]
