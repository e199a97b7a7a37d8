"""Synthetic graphs: R-MAT for scale, cSBM for homophily, a relational SBM for R-GCN.

* R-MAT (Chakrabarti, Zhan & Faloutsos, "R-MAT: A Recursive Model for Graph Mining", SDM 2004):
  each edge picks one of the four quadrants of the adjacency matrix at each of ``scale`` levels
  with probabilities (a, b, c, d); Graph500 uses (0.57, 0.19, 0.19, 0.05) (Graph500 specification,
  "Kronecker generator"). `rmat_edges` gives the edge list, `rmat_graph` a `Graph` with random
  features, labels and split (for scale benchmarks, not for accuracy).
* cSBM, the contextual stochastic block model (Deshpande, Sen, Montanari & Mossel, "Contextual
  Stochastic Block Models", NeurIPS 2018): an SBM whose nodes also carry Gaussian features around
  their class mean. `csbm` takes the edge homophily directly as its knob.
* `hetero_sbm`: a relational SBM whose labels can be read only when relation types are told
  apart (the R-GCN sanity check).

Every generator is vectorized NumPy and deterministic in ``seed``; bad arguments raise a
``ValueError`` that names the argument.
"""

from __future__ import annotations

import math
import numbers

import jax.numpy as jnp
import numpy as np

from codesign.graph import Graph

GRAPH500_ABCD = (0.57, 0.19, 0.19, 0.05)
DEFAULT_SPLIT = (0.6, 0.2, 0.2)  # train/val/test fractions of a random node split
_RMAT_BITS = 16  # bits of one uniform draw per R-MAT level (quadrant probabilities in units of 2^-16)
_RMAT_CHUNK = 1 << 16  # edges drawn per block (the block's draws stay in cache)


def _int_arg(fn: str, name: str, v, lo: int, hi: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo or (hi is not None and v > hi):
        rng = f"[{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{fn}: {name} must be an int {rng}, got {v!r}")
    return int(v)


def _float_arg(fn: str, name: str, v, lo: float, hi: float = math.inf) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not (lo <= float(v) <= hi):
        raise ValueError(f"{fn}: {name} must be a number in [{lo}, {hi}], got {v!r}")
    return float(v)


def _split_arg(fn: str, split) -> tuple[float, float, float]:
    s = tuple(float(f) for f in split)
    if len(s) != 3 or min(s) < 0 or not math.isclose(sum(s), 1.0, abs_tol=1e-6):
        raise ValueError(f"{fn}: split must be 3 fractions (train, val, test) >= 0 summing to 1, got {split!r}")
    return s


def random_split(n_nodes: int, split=DEFAULT_SPLIT, rng: np.random.Generator | None = None):
    """Boolean (train, val, test) masks [n_nodes] of a uniformly random node split with the given
    fractions (rounded down; the test set takes the remainder)."""
    s = _split_arg("random_split", split)
    rng = np.random.default_rng(0) if rng is None else rng
    perm = rng.permutation(n_nodes)
    n_train, n_val = int(s[0] * n_nodes), int(s[1] * n_nodes)
    masks = [np.zeros(n_nodes, bool) for _ in range(3)]
    masks[0][perm[:n_train]] = True
    masks[1][perm[n_train:n_train + n_val]] = True
    masks[2][perm[n_train + n_val:]] = True
    return tuple(masks)


def unique_sorted(key: np.ndarray) -> np.ndarray:
    """``np.unique`` for a 1-D integer array by sort + neighbour compare (NumPy 2.4's
    ``np.unique`` takes ~20 s on 16M int64 keys here, this takes ~0.4 s)."""
    key = np.sort(key)
    if key.size < 2:
        return key
    keep = np.empty(key.size, bool)
    keep[0] = True
    np.not_equal(key[1:], key[:-1], out=keep[1:])
    return key[keep]


def _dedup_edges(src: np.ndarray, dst: np.ndarray, n_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """Drops self-loops and duplicates; int32 (senders, receivers) sorted by (receiver, sender)."""
    keep = src != dst
    key = unique_sorted(dst[keep].astype(np.int64) * n_nodes + src[keep])
    return (key % n_nodes).astype(np.int32), (key // n_nodes).astype(np.int32)


# ----------------------------------------------------------------------------------------- R-MAT


def _rmat_bits(rng: np.random.Generator, scale: int, n_edges: int, p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row (source) and column (target) ids, uint32 [n_edges], before the id permutation.

    Per level, one 16-bit uniform ``u`` is compared with the cumulative thresholds
    ``t1 = a, t2 = a + b, t3 = a + b + c`` (in units of 2^-16): quadrant b or d sets the column
    bit, c or d the row bit. Draws are made block-wise ([scale, chunk] uint16) so they stay in
    cache, and the level bits are summed into place in one reduction per block.
    """
    t1, t2, t3 = (np.uint16(min(round(float(v) * 2**_RMAT_BITS), 2**_RMAT_BITS - 1))
                  for v in np.cumsum(p)[:3])
    weight = (np.uint32(1) << np.arange(scale, dtype=np.uint32))[:, None]
    src = np.empty(n_edges, np.uint32)
    dst = np.empty(n_edges, np.uint32)
    for s in range(0, n_edges, _RMAT_CHUNK):
        m = min(_RMAT_CHUNK, n_edges - s)
        u = rng.integers(0, 2**_RMAT_BITS, (scale, m), dtype=np.uint16)
        row = u >= t2  # quadrants c, d
        col = ((u >= t1) ^ row) | (u >= t3)  # quadrants b, d
        src[s:s + m] = (row * weight).sum(0, dtype=np.uint32)
        dst[s:s + m] = (col * weight).sum(0, dtype=np.uint32)
    return src, dst


def rmat_edges(scale: int, n_edges: int, abcd=GRAPH500_ABCD, seed: int = 0, symmetric: bool = True,
               dedup: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """R-MAT edge list over ``2**scale`` nodes.

    Quadrant probabilities are used at 16-bit resolution (rounded to multiples of 2^-16, an error
    below 1e-5). Speed on this project's 2-core CPU: scale 20 with 8M draws (15.4M edges after
    symmetrization and de-duplication) in 1.2-1.7 s (measured 2026; the former per-level
    ``searchsorted`` on float64 draws + ``np.unique`` took 23-34 s).

    Args:
      scale: log2 of the node count (1..31).
      n_edges: edges to draw (before symmetrization and de-duplication).
      abcd: quadrant probabilities, summing to 1.
      seed: NumPy seed.
      symmetric: add the reverse of every edge.
      dedup: drop self-loops and duplicate edges.

    Returns:
      ``(senders, receivers)`` int32 arrays of equal length, sorted by (receiver, sender) when
      ``dedup``; node ids are randomly permuted (Graph500 does this to hide the recursive
      structure from the id order).

    Raises:
      ValueError: scale out of range, n_edges < 1, or probabilities that are negative or do not
        sum to 1.
    """
    if isinstance(scale, bool) or not isinstance(scale, numbers.Integral) or not 1 <= scale <= 31:
        raise ValueError(f"rmat_edges: scale must be in [1, 31], got {scale}")
    if isinstance(n_edges, bool) or not isinstance(n_edges, numbers.Integral) or n_edges < 1:
        raise ValueError(f"rmat_edges: n_edges must be >= 1, got {n_edges}")
    p = np.asarray(abcd, np.float64)
    if p.shape != (4,) or (p < 0).any() or abs(p.sum() - 1.0) > 1e-6:
        raise ValueError(f"rmat_edges: abcd must be 4 probabilities summing to 1, got {abcd}")
    scale, n_edges = int(scale), int(n_edges)
    rng = np.random.default_rng(seed)
    src, dst = _rmat_bits(rng, scale, n_edges, p)
    perm = rng.permutation(1 << scale).astype(np.uint32)
    src, dst = perm[src], perm[dst]
    if symmetric:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    if dedup:
        return _dedup_edges(src, dst, 1 << scale)
    return src.astype(np.int32), dst.astype(np.int32)


def rmat_graph(scale: int, n_edges: int, n_features: int = 16, n_classes: int = 2, seed: int = 0, *,
               abcd=GRAPH500_ABCD, split=DEFAULT_SPLIT) -> Graph:
    """An R-MAT `Graph` for scale benchmarks: `rmat_edges` (symmetric, de-duplicated) plus random
    features, labels and split. Labels carry no signal; accuracy on it is meaningless.

    Args:
      scale, n_edges, abcd: as in `rmat_edges` (``N = 2**scale``).
      n_features: F >= 1; ``x`` is i.i.d. standard normal float32 [N, F] (4*N*F bytes).
      n_classes: C >= 1; ``y`` is uniform in [0, C).
      seed: seeds the edges and (independently) features, labels and split.
      split: (train, val, test) fractions of a uniformly random node split.

    Returns:
      `Graph` with ``n_nodes = 2**scale`` (R-MAT leaves some nodes isolated).

    Raises:
      ValueError: naming the bad argument.
    """
    _int_arg("rmat_graph", "n_features", n_features, 1)
    _int_arg("rmat_graph", "n_classes", n_classes, 1)
    s = _split_arg("rmat_graph", split)
    senders, receivers = rmat_edges(scale, n_edges, abcd, seed=seed)
    n = 1 << int(scale)
    rng = np.random.default_rng([int(seed), 1])
    x = rng.standard_normal((n, n_features), dtype=np.float32)
    y = rng.integers(0, n_classes, n).astype(np.int32)
    return _graph(senders, receivers, x, y, random_split(n, s, rng), n)


def _graph(senders, receivers, x, y, masks, n, edge_type=None) -> Graph:
    return Graph(senders=jnp.asarray(senders, jnp.int32), receivers=jnp.asarray(receivers, jnp.int32),
                 x=jnp.asarray(x, jnp.float32), y=jnp.asarray(y, jnp.int32),
                 train_mask=jnp.asarray(masks[0]), val_mask=jnp.asarray(masks[1]),
                 test_mask=jnp.asarray(masks[2]),
                 edge_type=None if edge_type is None else jnp.asarray(edge_type, jnp.int32), n_nodes=int(n))


# ------------------------------------------------------------------------------------------ cSBM


def _balanced_labels(rng: np.random.Generator, n: int, c: int) -> np.ndarray:
    """Labels with class sizes differing by at most one, in random node order."""
    return rng.permutation(np.arange(n) % c).astype(np.int32)


class _ClassSampler:
    """Uniform draws of a node from a given class (vectorized over many draws)."""

    def __init__(self, y: np.ndarray, n_classes: int):
        self.members = np.argsort(y, kind="stable")
        self.size = np.bincount(y, minlength=n_classes)
        self.start = np.concatenate([[0], np.cumsum(self.size)[:-1]])

    def __call__(self, rng: np.random.Generator, classes: np.ndarray) -> np.ndarray:
        offset = (rng.random(classes.size) * self.size[classes]).astype(np.int64)
        return self.members[self.start[classes] + offset]


def class_means(rng: np.random.Generator, n_features: int, n_classes: int) -> np.ndarray:
    """float64 [C, F] unit-norm class means at the vertices of a centered regular simplex
    (pairwise distance ``sqrt(2C / (C - 1))``); for C = 2 they are ``+u`` and ``-u`` with ``u``
    uniform on the sphere, Deshpande et al.'s two-class model."""
    q, _ = np.linalg.qr(rng.standard_normal((n_features, n_classes)))  # orthonormal columns
    m = q.T - q.T.mean(0, keepdims=True)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def csbm(n_nodes: int, n_features: int, avg_degree: float, homophily: float, mu: float,
         n_classes: int = 2, seed: int = 0, *, split=DEFAULT_SPLIT) -> Graph:
    """Contextual stochastic block model (Deshpande et al., NeurIPS 2018) with C classes.

    Construction:
      * labels: balanced (sizes differ by at most one), in random node order;
      * edges: ``round(n_nodes * avg_degree / 2)`` undirected draws; each draw picks a uniform node
        ``i`` and, with probability ``homophily``, a uniform node of ``i``'s class, else a uniform
        node of a uniformly chosen other class. Self-loops and repeats are dropped and both
        directions stored. With balanced classes this is the SBM with
        ``p_in / p_out = homophily * (C - 1) / (1 - homophily)`` conditioned on the edge count, and
        the expected edge homophily (fraction of edges joining same-class nodes) is ``homophily``.
        ``homophily = 1 / C`` is an Erdos-Renyi graph that ignores the labels. For C = 2,
        Deshpande et al.'s ``lambda`` (``p_in,out = (d +- lambda sqrt(d)) / n``) is
        ``lambda = sqrt(d) * (2 * homophily - 1)``.
      * features: ``x_i = mu * m_{y_i} + z_i`` with ``z_i ~ N(0, I_F)`` and unit-norm class means
        `class_means` (a centered simplex; ``+-u`` for C = 2). So ``mu`` is the signal-to-noise
        ratio of one node's features: for C = 2 the Bayes-optimal accuracy from features alone is
        ``Phi(mu)`` (standard normal CDF), and the graph alone (``mu = 0``) is all there is.
      * split: uniformly random, ``split`` = (train, val, test) fractions; default 60/20/20, the
        dense split GPR-GNN (Chien et al., ICLR 2021) uses for its cSBM experiments.

    Args:
      n_nodes: N >= 2 * n_classes.
      n_features: F >= n_classes.
      avg_degree: expected number of neighbours per node, in [0, N - 1].
      homophily: expected edge homophily in [0, 1].
      mu: feature signal-to-noise ratio >= 0.
      n_classes: C >= 2.
      seed: NumPy seed.

    Returns:
      `Graph` with symmetric edges sorted by (receiver, sender), x float32 [N, F], y int32 [N].

    Raises:
      ValueError: naming the bad argument (e.g. negative ``n_nodes``, ``homophily`` outside [0, 1]).
    """
    fn = "csbm"
    n_classes = _int_arg(fn, "n_classes", n_classes, 2)
    n = _int_arg(fn, "n_nodes", n_nodes, 2 * n_classes)
    f = _int_arg(fn, "n_features", n_features, n_classes)
    d = _float_arg(fn, "avg_degree", avg_degree, 0.0, n - 1)
    h = _float_arg(fn, "homophily", homophily, 0.0, 1.0)
    mu = _float_arg(fn, "mu", mu, 0.0)
    s = _split_arg(fn, split)
    rng = np.random.default_rng(seed)
    y = _balanced_labels(rng, n, n_classes)
    sampler = _ClassSampler(y, n_classes)
    m = int(round(n * d / 2))
    src = rng.integers(0, n, m)
    same = rng.random(m) < h
    shift = np.where(same, 0, rng.integers(1, n_classes, m))
    dst = sampler(rng, (y[src] + shift) % n_classes)
    senders, receivers = _dedup_edges(np.concatenate([src, dst]), np.concatenate([dst, src]), n)
    x = mu * class_means(rng, f, n_classes)[y] + rng.standard_normal((n, f))
    return _graph(senders, receivers, x, y, random_split(n, s, rng), n)


def edge_homophily(graph: Graph) -> float:
    """Fraction of edges whose endpoints share a label (Zhu et al., NeurIPS 2020, "edge homophily")."""
    y = np.asarray(graph.y)
    return float(np.mean(y[np.asarray(graph.senders)] == y[np.asarray(graph.receivers)])) if graph.n_edges else 0.0


# ------------------------------------------------------------------------------- relational SBM


def hetero_sbm(n_nodes: int, n_features: int, n_classes: int = 4, n_relations: int | None = None,
               avg_degree: float = 8.0, mu: float = 1.0, seed: int = 0, *, add_inverse: bool = True,
               split=DEFAULT_SPLIT) -> Graph:
    """A relational SBM where a node's label is readable only if relation types are told apart.

    Construction (C classes, R relations, balanced labels in random order):
      * relation ``r`` has shift ``s_r = r mod C``; it carries ``round(N * avg_degree)`` directed
        edges ``j -> i``, each with a uniform receiver ``i`` and a uniform sender ``j`` of class
        ``(y_i + s_r) mod C`` (self-loops and repeats dropped). So a node's relation-``r``
        neighbours all sit in class ``y_i + s_r``: knowing ``r`` and the neighbours' classes gives
        ``y_i``.
      * with ``add_inverse`` (R-GCN's practice, Schlichtkrull et al. 2018, sec. 2), every edge is
        also stored reversed with relation id ``R + r``; the graph is then symmetric with ``2R``
        relation ids.
      * features: ``x_i = mu * m_{y_i} + z_i``, ``z_i ~ N(0, I_F)``, `class_means` as in `csbm`:
        weak for one node at small ``mu``, strong when averaged over a relation's neighbours.
      * split: uniformly random, ``split`` = (train, val, test) fractions (default 60/20/20).

    Why relation types are needed: for ``R`` a multiple of ``C`` (the default ``R = C``) the shifts
    cover every class equally often, so with relation types merged a node's neighbours are
    uniformly spread over the classes whatever its own class (at any number of hops), and their
    mean feature is ~0: an untyped GNN sees only the node's own noisy features. Per relation, the
    neighbour mean is ``mu * m_{y_i + s_r}`` plus noise shrinking as ``1 / sqrt(avg_degree)``.

    Args:
      n_nodes: N >= 2 * n_classes.
      n_features: F >= n_classes.
      n_classes: C >= 2.
      n_relations: R >= 1 (default C).
      avg_degree: expected in-edges per node and relation, in (0, N / C - 1].
      mu: feature signal-to-noise ratio >= 0.
      seed: NumPy seed.

    Returns:
      `Graph` with ``edge_type`` int32 [E] in ``[0, R)`` (``[0, 2R)`` with ``add_inverse``), edges
      sorted by (relation, receiver, sender).

    Raises:
      ValueError: naming the bad argument.
    """
    fn = "hetero_sbm"
    c = _int_arg(fn, "n_classes", n_classes, 2)
    n = _int_arg(fn, "n_nodes", n_nodes, 2 * c)
    f = _int_arg(fn, "n_features", n_features, c)
    r_count = c if n_relations is None else _int_arg(fn, "n_relations", n_relations, 1)
    d = _float_arg(fn, "avg_degree", avg_degree, 0.0, n // c - 1)
    if d == 0:
        raise ValueError(f"{fn}: avg_degree must be > 0, got {avg_degree!r}")
    mu = _float_arg(fn, "mu", mu, 0.0)
    s = _split_arg(fn, split)
    rng = np.random.default_rng(seed)
    y = _balanced_labels(rng, n, c)
    sampler = _ClassSampler(y, c)
    m = int(round(n * d))
    senders, receivers, types = [], [], []
    for r in range(r_count):
        dst = rng.integers(0, n, m)
        src = sampler(rng, (y[dst] + r % c) % c)
        s_r, d_r = _dedup_edges(src, dst, n)
        senders.append(s_r)
        receivers.append(d_r)
        types.append(np.full(s_r.size, r, np.int32))
    if add_inverse:
        for r in range(r_count):  # reversed and re-sorted by (receiver, sender)
            s_r, d_r = _dedup_edges(receivers[r], senders[r], n)
            senders.append(s_r)
            receivers.append(d_r)
            types.append(np.full(s_r.size, r_count + r, np.int32))
    x = mu * class_means(rng, f, c)[y] + rng.standard_normal((n, f))
    return _graph(np.concatenate(senders), np.concatenate(receivers), x, y, random_split(n, s, rng), n,
                  edge_type=np.concatenate(types))
