"""`BlockEdgeMask`: hardware-aligned edge sparsity, one hard-concrete gate per B x B adjacency tile.

A block-sparse SpMM (`codesign.kernels.bsr_spmm`) computes whole ``B x B`` tiles of the reordered
adjacency; removing single edges saves nothing unless a tile becomes empty. Gating tiles instead of
edges makes the learned sparsity exactly the sparsity the kernel can exploit: every pruned gate is
one tile fewer in ``BlockSparseAdjacency.nnz_blocks``. The gates are the hard-concrete (L0) gates of
Louizos et al., "Learning Sparse Neural Networks through L0 Regularization", ICLR 2018, applied to
groups of edges (their group sparsity, here a group is a tile); the tiles come from the
`codesign.kernels.bsr.BlockPattern` the kernel itself uses.
"""

from __future__ import annotations

from typing import Optional, final

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from codesign.kernels.bsr import BlockPattern, with_block_pattern
from codesign.kernels.coo import CooAdjacency
from codesign.sparsify.hard_concrete import BETA, HardConcreteGate, prob_nonzero
from codesign.sparsify.masks import EdgeSparsifier, check_count, check_edge_index


@final
class BlockEdgeMask(EdgeSparsifier):
    """One learnable hard-concrete gate per B x B tile of the (reordered) adjacency.

    Tiles are those of ``pattern.bsr``; entry ``j`` of the pattern (the E edges, then, if the
    pattern was built with ``self_loops=True``, one self-loop per node, the order of
    `BlockPattern.from_coo` and `codesign.models.gcn_normalize`) lies in tile
    ``pattern.slots[j] // (B * B)``. A tile gets a gate iff it holds at least one of the E edges
    and no self-loop entry. Tiles holding a self-loop are always computed (the self-loops are
    added after masking), so they carry no gate and count as always kept; their edges get gate 1.
    Every edge of a gated tile is multiplied by that tile's gate, so when the gate is 0 the whole
    tile drops out of the kernel's work.

    Shapes: ``E = n_edges``; ``T = n_gated_tiles``; ``nnzb = n_tiles`` (all stored tiles of the
    pattern, ``= T + n_always_kept_tiles``).

    Fields (host constants, set at construction):
      gate:                `HardConcreteGate` [T]; its ``deterministic`` is the train/eval mode.
      gated_tiles:         int32 [T]  index of each gated tile in ``pattern.bsr`` (sorted).
      edge_to_gate:        int32 [E]  gate of each edge; ``T`` (one past the last) for edges in
                           always-kept tiles.
      edges_per_gate:      float32 [T]  number of edges (COO entries, duplicates counted) per gate.
      n_edges, n_nodes, block_size, n_tiles, n_gated_tiles, n_always_kept_tiles,
      n_ungated_edges, n_entries (E or E + N, the length of ``pattern.slots``):  ints.

    Contract: `EdgeSparsifier` (``edge_gates`` ignores ``x``; ``senders`` / ``receivers`` are only
    shape-checked). ``expected_density()`` is the expected kept fraction of the T gated *tiles*;
    ``expected_edge_density()`` that of the E *edges*; ``expected_kept_tiles()`` is the cost
    model's expected ``nnz_blocks``.

    Example (inside your own ``nnx.Module``; ``adj = with_block_pattern(coo, 16, "rcm", True)``)::

      self.tile_mask = BlockEdgeMask(adj.pattern, adj.n_edges, rngs=rngs)      # in __init__
      w = self.tile_mask.edge_gates() * edge_weight                            # in __call__, [E]
      loss = task_loss + lam * model.tile_mask.expected_density()              # in the loss

    After training: ``model.eval()``, then ``mask.pruned_pattern(adj.pattern)`` is the
    `BlockPattern` holding exactly the kept tiles (what the kernel computes), and
    ``mask.hard_kept_tiles()`` their number.
    """

    def __init__(self, pattern: BlockPattern, n_edges: int, *, init_log_alpha: float = 3.0,
                 beta: float = BETA, rngs: nnx.Rngs):
        """Args:
          pattern: the `BlockPattern` the block kernel runs (``CooAdjacency.pattern`` after
            ``with_block_pattern``); built from the E edges (``slots`` int32 [E]) or the E edges
            followed by N self-loops (``slots`` int32 [E + N]).
          n_edges: E, number of edges (without the self-loops); a positive int.
          init_log_alpha: initial logit of every gate (finite); 3.0 gives P(keep) ~ 0.99.
          beta: hard-concrete temperature (> 0).
          rngs: `nnx.Rngs`; the ``"gates"`` stream (else ``default``) feeds the sampling.

        Raises:
          ValueError: ``pattern`` not a `BlockPattern`; ``n_edges`` not a positive int;
            ``pattern.slots`` not of shape ``(E,)`` or ``(E + N,)``; no tile can be gated (all
            edges share tiles with self-loops); ``init_log_alpha`` / ``beta`` invalid.
        """
        if not isinstance(pattern, BlockPattern):
            raise ValueError(f"pattern must be a BlockPattern, got {type(pattern).__name__}")
        self.n_edges = check_count(n_edges, "n_edges")
        bsr = pattern.bsr
        self.n_nodes, self.block_size, self.n_tiles = int(bsr.n_nodes), int(bsr.block_size), int(bsr.nnz_blocks)
        slots = np.asarray(pattern.slots, np.int64)
        e = self.n_edges
        if slots.shape not in ((e,), (e + self.n_nodes,)):
            raise ValueError(f"pattern.slots: invalid {slots.shape=} for n_edges={e} and n_nodes={self.n_nodes} "
                             f"(need ({e},) or ({e + self.n_nodes},) with self-loops)")
        self.n_entries = int(slots.shape[0])
        tile = slots // (self.block_size ** 2)
        has_edge = np.bincount(tile[:e], minlength=self.n_tiles) > 0
        has_loop = np.bincount(tile[e:], minlength=self.n_tiles) > 0
        gated = np.flatnonzero(has_edge & ~has_loop)
        if gated.size == 0:
            raise ValueError(f"BlockEdgeMask: no tile to gate: all {e} edges share their {self.block_size}x"
                             f"{self.block_size} tiles with self-loops (use a smaller block_size or EdgeMask)")
        gate_of_tile = np.full(self.n_tiles, gated.size, np.int64)
        gate_of_tile[gated] = np.arange(gated.size)
        edge_to_gate = gate_of_tile[tile[:e]]
        self.n_gated_tiles = int(gated.size)
        self.n_always_kept_tiles = self.n_tiles - self.n_gated_tiles
        self.n_ungated_edges = int((edge_to_gate == gated.size).sum())
        self.gated_tiles = jnp.asarray(gated, jnp.int32)
        self.edge_to_gate = jnp.asarray(edge_to_gate, jnp.int32)
        self.edges_per_gate = jnp.asarray(np.bincount(edge_to_gate, minlength=gated.size + 1)[:-1], jnp.float32)
        self.gate = HardConcreteGate((self.n_gated_tiles,), init_log_alpha=init_log_alpha, beta=beta, rngs=rngs)

    @classmethod
    def from_graph(cls, senders, receivers, n_nodes: int, block_size: int = 16, reorder: Optional[str] = "rcm",
                   self_loops: bool = True, *, init_log_alpha: float = 3.0, beta: float = BETA,
                   rngs: nnx.Rngs) -> "BlockEdgeMask":
        """Builds the pattern with ``with_block_pattern(CooAdjacency(senders, receivers, None, n_nodes), 
        block_size, reorder, self_loops)`` (host-side, deterministic), so a model that attaches its
        pattern with the same three arguments runs the same tiles.

        Args:
          senders, receivers: int [E] edge endpoints (concrete).
          n_nodes: N.
          block_size: B in {8, 16, 32, 64, 128} (the Pallas kernel needs B >= 16).
          reorder: None, "rcm" or "metis" (see `codesign.kernels.bsr.node_permutation`).
          self_loops: True for models that append self-loops after masking (GCN, APPNP, GAT).
          init_log_alpha, beta, rngs: as the constructor.

        Raises:
          ValueError: as the constructor and `BlockPattern.from_coo`.
        """
        adj = CooAdjacency(jnp.asarray(senders, jnp.int32), jnp.asarray(receivers, jnp.int32), None, int(n_nodes))
        pattern = with_block_pattern(adj, block_size, reorder, self_loops).pattern
        return cls(pattern, adj.n_edges, init_log_alpha=init_log_alpha, beta=beta, rngs=rngs)

    # ---- training ------------------------------------------------------------------------------

    def edge_gates(self, x=None, senders=None, receivers=None, deterministic: Optional[bool] = None) -> jax.Array:
        """Tile gate of each edge, float32 [E] in [0, 1] (1 for edges in always-kept tiles).

        ``x`` is ignored; ``deterministic`` overrides ``gate.deterministic``.

        Raises:
          ValueError: ``senders`` / ``receivers`` given with a shape other than ``(E,)``.
        """
        check_edge_index(senders, receivers, self.n_edges, "BlockEdgeMask")
        z = self.gate(deterministic)
        return jnp.concatenate([z, jnp.ones((1,), z.dtype)])[self.edge_to_gate[...]]

    def _keep_probs(self) -> jax.Array:
        return prob_nonzero(self.gate.log_alpha[...], self.gate.beta)

    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept fraction of the T gated tiles, ``mean_t P(z_t > 0)``
        (Louizos et al. eq. 12); differentiable in the tile logits."""
        return self.gate.expected_density()

    def expected_edge_density(self) -> jax.Array:
        """float32 scalar: expected kept fraction of the E edges,
        ``(n_ungated_edges + sum_t P(z_t > 0) * edges_per_gate[t]) / E``."""
        kept = self.n_ungated_edges + jnp.sum(self._keep_probs() * self.edges_per_gate[...])
        return kept / self.n_edges

    def expected_kept_tiles(self) -> jax.Array:
        """float32 scalar: expected number of tiles the kernel computes (the cost model's
        ``nnz_blocks``), ``n_always_kept_tiles + sum_t P(z_t > 0)``."""
        return self.n_always_kept_tiles + jnp.sum(self._keep_probs())

    # ---- test time -----------------------------------------------------------------------------

    def hard_mask(self) -> jax.Array:
        """bool [T]: gated tiles kept at test time (``deterministic(log_alpha) > 0``)."""
        return self.gate.hard_mask()

    def hard_density(self) -> jax.Array:
        """float32 scalar: kept fraction of the T gated tiles at test time."""
        return self.gate.hard_density()

    def hard_kept_tiles(self) -> jax.Array:
        """float32 scalar: tiles the kernel computes at test time, ``n_always_kept_tiles + sum(hard_mask())``."""
        return self.n_always_kept_tiles + jnp.sum(self.hard_mask().astype(jnp.float32))

    def hard_edge_mask(self) -> jax.Array:
        """bool [E]: edges kept at test time (those in kept or always-kept tiles)."""
        return jnp.concatenate([self.hard_mask(), jnp.ones((1,), bool)])[self.edge_to_gate[...]]

    def hard_edge_density(self) -> jax.Array:
        """float32 scalar: fraction of the E edges kept at test time."""
        return jnp.mean(self.hard_edge_mask().astype(jnp.float32))

    def tile_keep_mask(self) -> jax.Array:
        """bool [nnzb]: per tile of ``pattern.bsr``, whether it is computed at test time
        (always-kept tiles are True); the argument of ``BlockSparseAdjacency.with_tile_mask``."""
        return jnp.ones((self.n_tiles,), bool).at[self.gated_tiles[...]].set(self.hard_mask())

    def pruned_pattern(self, pattern: BlockPattern) -> BlockPattern:
        """The `BlockPattern` holding only the tiles kept at test time (host-side, outside ``jit``).

        Its ``bsr`` is ``pattern.bsr.with_tile_mask(tile_keep_mask())``; kept entries get their
        slot in the compacted tiles, entries of pruned tiles get slot ``new_nnzb * B * B`` (one past
        the end), which ``BlockPattern.tiles`` drops (JAX scatters drop out-of-bounds updates). At
        test time those entries' gates are exactly 0, so ``pruned.tiles(w)`` equals
        ``pattern.tiles(w)`` restricted to the kept tiles.

        Args:
          pattern: the pattern this mask was built from.

        Raises:
          ValueError: ``pattern`` is not the one this mask was built from (tile count or the
            tiles of the edges differ).
        """
        b2 = self.block_size ** 2
        slots = np.asarray(pattern.slots, np.int64) if isinstance(pattern, BlockPattern) else None
        if (slots is None or pattern.bsr.nnz_blocks != self.n_tiles or pattern.bsr.block_size != self.block_size
                or slots.shape != (self.n_entries,) or not self._same_edge_tiles(slots[:self.n_edges] // b2)):
            raise ValueError("pruned_pattern: pattern is not the BlockPattern this BlockEdgeMask was built from")
        keep = np.asarray(self.tile_keep_mask())
        tile = slots // b2
        new_index = np.cumsum(keep) - 1
        n_kept = int(keep.sum())
        new_slots = np.where(keep[tile], new_index[tile] * b2 + slots % b2, n_kept * b2)
        return BlockPattern(pattern.bsr.with_tile_mask(keep), jnp.asarray(new_slots, jnp.int32))

    def _same_edge_tiles(self, edge_tile: np.ndarray) -> bool:
        gate = np.asarray(self.edge_to_gate)
        gated = gate < self.n_gated_tiles
        return bool(np.array_equal(np.asarray(self.gated_tiles)[gate[gated]], edge_tile[gated]))

    def random_tile_edge_mask(self, key: jax.Array, kept_tile_fraction: float) -> jax.Array:
        """The edges of a uniformly random set of tiles: the reference a learned tile mask must beat.

        Keeps every always-kept tile and ``prune_count(n_tiles, kept_tile_fraction) -
        n_always_kept_tiles`` of the T gated tiles, chosen uniformly (a random permutation's
        prefix, as `random_edge_removal` does for edges), so the kernel computes the same number
        of tiles as a learned mask that keeps ``kept_tile_fraction`` of them. The random-pruning
        ("RP") baseline of UGS (Chen et al., ICML 2021), applied to tiles instead of edges.
        Host-side; independent of the gate logits.

        Args:
          key: a JAX PRNG key.
          kept_tile_fraction: fraction of all ``n_tiles`` tiles to keep, in
            ``[n_always_kept_tiles / n_tiles, 1]``.

        Returns:
          bool [E]: True for the edges in kept tiles (for ``Graph.keep_edges``).

        Raises:
          ValueError: ``kept_tile_fraction`` outside [0, 1], or below the always-kept share
            ``n_always_kept_tiles / n_tiles``.
        """
        from codesign.sparsify.baselines import prune_count, random_edge_removal
        n_keep = prune_count(self.n_tiles, kept_tile_fraction)
        if n_keep < self.n_always_kept_tiles:
            raise ValueError(f"kept_tile_fraction={kept_tile_fraction!r} keeps {n_keep} of {self.n_tiles} tiles, fewer "
                             f"than the {self.n_always_kept_tiles} tiles that hold self-loops and are always kept")
        keep = random_edge_removal(key, self.n_gated_tiles, (n_keep - self.n_always_kept_tiles) / self.n_gated_tiles)
        return jnp.concatenate([keep, jnp.ones((1,), bool)])[self.edge_to_gate[...]]

    def tile_stats(self) -> dict:
        """Host-side statistics: block_size, n_tiles, n_gated_tiles, n_always_kept_tiles, n_edges,
        n_ungated_edges, mean_edges_per_gated_tile, hard_kept_tiles (at the current logits)."""
        return dict(block_size=self.block_size, n_tiles=self.n_tiles, n_gated_tiles=self.n_gated_tiles,
                    n_always_kept_tiles=self.n_always_kept_tiles, n_edges=self.n_edges,
                    n_ungated_edges=self.n_ungated_edges,
                    mean_edges_per_gated_tile=float(np.mean(np.asarray(self.edges_per_gate))),
                    hard_kept_tiles=int(float(self.hard_kept_tiles())))

