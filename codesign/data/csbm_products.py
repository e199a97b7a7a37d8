"""``csbm-products``: a degree-corrected contextual SBM with ogbn-products' shape.

Sources:
  * cSBM: Deshpande, Sen, Montanari & Mossel, "Contextual Stochastic Block Models", NeurIPS 2018
    (Gaussian node features around a class mean, SBM edges); here with C classes as in `csbm`.
  * Degree correction: Karrer & Newman, "Stochastic blockmodels and community structure in
    networks", Phys. Rev. E 83, 2011 (an edge end is drawn in proportion to a node weight theta).
  * ogbn-products' shape: Hu et al., "Open Graph Benchmark", NeurIPS 2020, Table 2 and sec. 4.1:
    2,449,029 nodes, 61,859,140 edges (undirected; 123,718,280 directed), 100-dimensional
    features, 47 classes, sales-rank split 196,615 / 39,323 / 2,213,091 (top 8 % of products by
    sales in train, next 2 % in val, the rest in test); MLP 61.06 +- 0.08 % and GCN 75.64 +- 0.21 %
    test accuracy (OGB leaderboard, full-batch GCN). Edge homophily 0.81: Lim et al., "Large Scale
    Learning on Non-Homophilous Graphs", NeurIPS 2021, Table 1.

What is matched and what is assumed (ASSUMPTION marks a choice not taken from a source):
  * matched exactly: node, edge, feature and class counts; split sizes (scaled for other N);
  * degrees: expected degree ``proportional to theta_i``, theta Pareto with tail exponent
    ``degree_exponent`` (pdf ``~ d^-gamma``), capped at ``max_degree`` (ogbn-products' largest
    degree, 17,481); ASSUMPTION: gamma = 2.1 (a power-law tail; not fitted to ogbn-products);
  * class sizes: Zipf, ``n_c ~ (c + 1)^-class_exponent``; ASSUMPTION: exponent 1.0 (ogbn-products'
    label distribution is long-tailed; its class sizes are not copied);
  * split: by expected degree (theta) as a stand-in for sales rank (popular products are bought
    together more often): ASSUMPTION that sales rank follows degree;
  * ``mu`` = 2.25: the Bayes accuracy from one node's features (nearest class mean with the class
    priors, Monte Carlo) is 63 %, so an MLP trained on ogbn-products' 196k training nodes lands
    near products' 61 % (at reduced N an MLP has fewer training nodes and stays below);
  * ``homophily`` = 0.25, NOT products' 0.81: in a cSBM a node's neighbours carry independent
    evidence of its class, so 0.81 at mean degree 50 lets a GCN classify nearly every node
    (products' GCN errors come from structure a cSBM lacks: confusions between related categories
    that neighbours share). 0.25 (12x the 1/47 of a label-blind graph) was chosen so that a GCN
    lands near products' 75.6 % (reduced-N check: experiments/csbm_products_gap.py; numbers in
    results/graphs_generation.json). ASSUMPTION: the gap, not the homophily, is what to match.
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import jax.numpy as jnp
import numpy as np

from codesign.data.derived import cached_arrays
from codesign.data.synthetic import unique_sorted, class_means
from codesign.graph import Graph

NAME = "csbm-products"
GENERATOR_VERSION = 1  # bump when the construction changes (part of the cache's parameters)
PRODUCTS_SPLIT = (196_615, 39_323, 2_213_091)  # Hu et al. 2020: train / val / test nodes
_FEATURE_CHUNK = 1 << 18  # rows of x written per block (keeps temporaries small)


@dataclasses.dataclass(frozen=True)
class CsbmProductsParams:
    """Parameters of `csbm_products_arrays` (defaults: ogbn-products' shape, module docstring).

    Fields:
      n_nodes: N >= 2 * n_classes.
      n_edges: undirected edges M (exactly; 2M directed edges stored), 1 <= M <= N (N - 1) / 4.
      n_features: F >= n_classes.
      n_classes: C >= 2.
      homophily: edge homophily (fraction of edges joining same-class nodes) in [0, 1]; exact up to
        rounding (`_edges`).
      mu: feature signal-to-noise ratio >= 0: ``x_i = mu * m_{y_i} + z_i``, ``z_i ~ N(0, I_F)``,
        unit-norm simplex class means (`class_means`).
      degree_exponent: gamma > 2 of the degree tail ``P(d) ~ d^-gamma``.
      max_degree: cap on a node's expected degree, >= 1.
      class_exponent: s >= 0 of the class sizes ``n_c ~ (c + 1)^-s`` (0: balanced).
      split: (train, val, test) fractions, by expected degree rank (train = highest).
      seed: NumPy seed (int >= 0).
    """

    n_nodes: int = 2_449_029
    n_edges: int = 61_859_140
    n_features: int = 100
    n_classes: int = 47
    homophily: float = 0.25
    mu: float = 2.25
    degree_exponent: float = 2.1
    max_degree: float = 17_481.0
    class_exponent: float = 1.0
    split: tuple = tuple(s / sum(PRODUCTS_SPLIT) for s in PRODUCTS_SPLIT)
    seed: int = 0

    def __post_init__(self):
        def bad(field, want, v):
            raise ValueError(f"CsbmProductsParams.{field}: must be {want}, got {v!r}")

        def integral(field, lo):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < lo:
                bad(field, f"an int >= {lo}", v)

        def real(field, lo, hi=math.inf, lo_open=False):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(float(v)) \
                    or not (lo < v if lo_open else lo <= v) or v > hi:
                bad(field, f"a number in {'(' if lo_open else '['}{lo}, {hi}]", v)

        integral("n_classes", 2)
        integral("n_nodes", 2 * self.n_classes)
        integral("n_features", self.n_classes)
        integral("n_edges", 1)
        integral("seed", 0)
        if self.n_edges > self.n_nodes * (self.n_nodes - 1) // 4:
            bad("n_edges", f"<= N (N - 1) / 4 = {self.n_nodes * (self.n_nodes - 1) // 4}", self.n_edges)
        real("homophily", 0.0, 1.0)
        real("mu", 0.0)
        real("degree_exponent", 2.0, lo_open=True)
        real("max_degree", 1.0)
        real("class_exponent", 0.0)
        s = tuple(self.split) if isinstance(self.split, (tuple, list)) else ()
        if len(s) != 3 or any(isinstance(f, bool) or not isinstance(f, numbers.Real) or f < 0 for f in s) \
                or not math.isclose(sum(s), 1.0, abs_tol=1e-6):
            bad("split", "3 fractions (train, val, test) >= 0 summing to 1", self.split)
        object.__setattr__(self, "split", tuple(float(f) for f in s))

    def scaled(self, n_nodes: int) -> "CsbmProductsParams":
        """The same generator at ``n_nodes`` nodes: edges scaled to keep the mean degree,
        ``max_degree`` scaled by ``sqrt(n_nodes / N)``, which keeps its ratio to the structural
        cutoff ``sqrt(mean degree * N)`` of a scale-free graph (about 1.6 at ogbn-products' size;
        a hub beyond it must repeat edges). Used for reduced-size checks."""
        r = n_nodes / self.n_nodes
        return dataclasses.replace(self, n_nodes=n_nodes, n_edges=max(1, round(self.n_edges * r)),
                                   max_degree=max(1.0, self.max_degree * math.sqrt(r)))

    def as_dict(self) -> dict:
        return {"generator_version": GENERATOR_VERSION, **dataclasses.asdict(self)}


def _zipf_sizes(n: int, c: int, s: float) -> np.ndarray:
    """Class sizes int64 [C] summing to n, ``~ (k + 1)^-s``, each >= 1 (largest remainder)."""
    w = np.arange(1, c + 1, dtype=np.float64) ** -s
    raw = (n - c) * w / w.sum()
    sizes = np.floor(raw).astype(np.int64)
    rest = n - c - sizes.sum()
    sizes[np.argsort(-(raw - sizes), kind="stable")[:rest]] += 1
    return sizes + 1


def _weights(rng: np.random.Generator, p: CsbmProductsParams) -> np.ndarray:
    """theta float64 [N]: Pareto(gamma - 1) draws, capped so that no expected degree exceeds
    ``max_degree`` (the cap is re-applied as the scale settles; 8 rounds)."""
    theta = (1.0 - rng.random(p.n_nodes)) ** (-1.0 / (p.degree_exponent - 1.0))
    for _ in range(8):
        scale = 2.0 * p.n_edges / theta.sum()  # expected degree per unit of theta
        np.minimum(theta, p.max_degree / scale, out=theta)
    return theta


class _WeightedSampler:
    """Draws nodes in proportion to theta, from a given class or from any class but a given one."""

    def __init__(self, theta: np.ndarray, y: np.ndarray, c: int):
        self.members = np.argsort(y, kind="stable").astype(np.int32)
        self.cum = np.cumsum(theta[self.members])  # float64 [N]
        ends = self.cum[np.cumsum(np.bincount(y, minlength=c)) - 1]
        self.start = np.concatenate([[0.0], ends[:-1]])
        self.weight = ends - self.start  # W_c
        self.total = float(self.cum[-1])

    def _at(self, u: np.ndarray) -> np.ndarray:
        k = np.searchsorted(self.cum, u, side="right")
        return self.members[np.minimum(k, self.members.size - 1)]

    def any(self, rng, m: int) -> np.ndarray:
        return self._at(rng.random(m) * self.total)

    def within(self, rng, classes: np.ndarray) -> np.ndarray:
        return self._at(self.start[classes] + rng.random(classes.size) * self.weight[classes])

    def outside(self, rng, classes: np.ndarray) -> np.ndarray:
        """Class c' != c chosen with probability W_c' / (W - W_c), then a node of it ~ theta."""
        u = rng.random(classes.size) * (self.total - self.weight[classes])
        u += np.where(u >= self.start[classes], self.weight[classes], 0.0)
        return self._at(u)


def _draw_pairs(rng, sampler: _WeightedSampler, y: np.ndarray, same: bool, m: int, n: int) -> np.ndarray:
    """Undirected edge keys int64 (``min * N + max``) of m draws, self-loops removed (not unique):
    i ~ theta, j ~ theta within i's class (``same``) or outside it."""
    i = sampler.any(rng, m)
    j = sampler.within(rng, y[i]) if same else sampler.outside(rng, y[i])
    keep = i != j
    i, j = i[keep].astype(np.int64), j[keep].astype(np.int64)
    return np.minimum(i, j) * n + np.maximum(i, j)


def _distinct(rng, sampler, y, same: bool, m: int, n: int) -> np.ndarray:
    """Exactly m distinct keys from `_draw_pairs`: draws are topped up until m distinct pairs
    exist (a few rounds, each vectorized), then a uniformly random surplus is dropped; sorted."""
    if m == 0:
        return np.empty(0, np.int64)
    keys = unique_sorted(_draw_pairs(rng, sampler, y, same, m + m // 50 + 16, n))
    for _ in range(64):
        if keys.size >= m:
            break
        more = _draw_pairs(rng, sampler, y, same, int((m - keys.size) * 1.2) + 1024, n)
        keys = unique_sorted(np.concatenate([keys, more]))
    else:
        field = "homophily" if same else "n_edges"
        raise ValueError(f"CsbmProductsParams.{field}: {m} distinct {'intra' if same else 'inter'}-class edges "
                         f"not reached in 64 rounds (too dense for these class sizes and max_degree)")
    if keys.size > m:
        keep = np.ones(keys.size, bool)
        keep[rng.choice(keys.size, keys.size - m, replace=False)] = False
        keys = keys[keep]
    return keys


def _edges(rng, sampler, y, p: CsbmProductsParams) -> np.ndarray:
    """The M undirected keys, sorted: ``round(homophily * M)`` distinct intra-class pairs and the
    rest distinct inter-class pairs (disjoint sets), so the edge homophily is exactly
    ``round(homophily * M) / M`` (duplicates, frequent among a small class's hubs, cannot bias it)."""
    m_in = int(round(p.homophily * p.n_edges))
    inside = _distinct(rng, sampler, y, True, m_in, p.n_nodes)
    outside = _distinct(rng, sampler, y, False, p.n_edges - m_in, p.n_nodes)
    keys = np.concatenate([inside, outside])
    del inside, outside
    keys.sort()
    return keys


def csbm_products_arrays(params: CsbmProductsParams = CsbmProductsParams()) -> dict:
    """The generator (module docstring), as plain NumPy arrays.

    Construction (N nodes, M undirected edges, C classes, F features):
      1. labels: Zipf class sizes (`_zipf_sizes`), assigned to nodes in random order;
      2. weights theta [N] (`_weights`);
      3. edges: ``round(homophily * M)`` distinct intra-class pairs, each drawn as a node i ~ theta
         and a node j ~ theta of i's class, and the rest distinct inter-class pairs, i ~ theta,
         a class c' != y_i with probability ``W_c' / (W - W_{y_i})`` (W_c: the class's total
         theta) and j ~ theta of c'. Self-loops and repeats are dropped; each set is topped up
         until it has its count, then a random surplus is removed (`_distinct`). So the edge
         homophily is exact, and the degrees follow theta up to the repeats dropped at hubs;
      4. features: ``x = mu * m_y + z`` (`class_means` simplex, z standard normal float32);
      5. split: nodes ranked by theta (descending, ties by node id) cut by ``split``.
    Streams: ``np.random.default_rng([seed, k])`` with k = 0 labels, 1 weights, 2 edges,
    3 class means, 4 features: each part is reproducible on its own.

    Returns:
      dict with ``senders``, ``receivers`` int32 [2M] (both directions of every edge, sorted by
      (receiver, sender), no self-loops); ``x`` float32 [N, F]; ``y`` int32 [N];
      ``split`` int8 [N] (0 train, 1 val, 2 test); ``theta`` float32 [N] (expected-degree weight).
      Memory at ogbn-products' size: x 0.98 GB, senders + receivers 0.99 GB; peak RSS of the
      generation about 4 GB (int64 edge keys while sorting; results/graphs_generation.json).
      A few low-theta nodes may get no edge (isolated; allowed by `Graph`).
    """
    p = params
    n, c = p.n_nodes, p.n_classes
    y = np.random.default_rng([p.seed, 0]).permutation(np.repeat(np.arange(c, dtype=np.int32),
                                                                 _zipf_sizes(n, c, p.class_exponent)))
    theta = _weights(np.random.default_rng([p.seed, 1]), p)
    keys = _edges(np.random.default_rng([p.seed, 2]), _WeightedSampler(theta, y, c), y, p)
    lo, hi = (keys // n).astype(np.int32), (keys % n).astype(np.int32)
    del keys
    # both directions, sorted by (receiver, sender): the (hi -> lo) half sorted by (lo, hi) is
    # keys' order already; the (lo -> hi) half needs one sort by (hi, lo).
    order = np.argsort(hi.astype(np.int64) * n + lo)  # keys are distinct: no ties
    s1, r1 = hi, lo  # sender hi, receiver lo: sorted by (lo, hi)
    s2, r2 = lo[order], hi[order]
    del order
    pos = np.searchsorted(r1.astype(np.int64) * n + s1, r2.astype(np.int64) * n + s2)
    senders = np.insert(s1, pos, s2)
    receivers = np.insert(r1, pos, r2)
    del s1, r1, s2, r2, pos, lo, hi
    means = (p.mu * class_means(np.random.default_rng([p.seed, 3]), p.n_features, c)).astype(np.float32)
    frng = np.random.default_rng([p.seed, 4])
    x = np.empty((n, p.n_features), np.float32)
    for s in range(0, n, _FEATURE_CHUNK):
        e = min(n, s + _FEATURE_CHUNK)
        x[s:e] = frng.standard_normal((e - s, p.n_features), dtype=np.float32)
        x[s:e] += means[y[s:e]]
    rank = np.argsort(-theta, kind="stable")
    n_tr, n_va = int(p.split[0] * n), int(p.split[1] * n)
    split = np.full(n, 2, np.int8)
    split[rank[:n_tr]] = 0
    split[rank[n_tr:n_tr + n_va]] = 1
    return dict(senders=senders, receivers=receivers, x=x, y=y, split=split, theta=theta.astype(np.float32))


def slot_name(params: CsbmProductsParams) -> str:
    """The cache slot of ``params``: ``csbm-products`` at ogbn-products' node count, else
    ``csbm-products-<n_nodes>``, so a reduced-size graph (`CsbmProductsParams.scaled`) and the full
    one are cached side by side instead of rebuilding each other; other parameters at the same
    size replace the slot (`cached_arrays` compares them)."""
    return NAME if params.n_nodes == CsbmProductsParams.n_nodes else f"{NAME}-{params.n_nodes}"


def load_csbm_products(params: CsbmProductsParams | None = None, *, cache: bool = True,
                       return_arrays: bool = False) -> Graph | tuple[Graph, dict]:
    """``csbm-products`` as a `Graph` (module docstring; construction in `csbm_products_arrays`).

    The arrays are cached by `codesign.data.derived.cached_arrays` (slot `slot_name`,
    ``${XDG_CACHE_HOME:-~/.cache}/codesign/derived/``) with their SHA-256 and ``params``; other
    parameters rebuild the slot. At the default parameters: N = 2,449,029, E = 123,718,280
    directed edges, x float32 [N, 100] (0.98 GB), senders/receivers int32 (0.49 GB each).

    Args:
      params: `CsbmProductsParams` (default: ogbn-products' shape).
      cache: read/write the cache (bool).
      return_arrays: also return the NumPy arrays (``theta`` included).

    Returns:
      `Graph` (masks from ``split``), or ``(Graph, arrays)``.

    Raises:
      ValueError: ``params`` not a `CsbmProductsParams` (its own fields raise naming the field).
    """
    if params is None:
        params = CsbmProductsParams()
    if not isinstance(params, CsbmProductsParams):
        raise ValueError(f"load_csbm_products: params must be a CsbmProductsParams, got {type(params).__name__}")
    a = cached_arrays(slot_name(params), params.as_dict(), lambda: csbm_products_arrays(params), cache=cache)
    split = a["split"]
    graph = Graph(senders=jnp.asarray(a["senders"]), receivers=jnp.asarray(a["receivers"]),
                  x=jnp.asarray(a["x"]), y=jnp.asarray(a["y"]), train_mask=jnp.asarray(split == 0),
                  val_mask=jnp.asarray(split == 1), test_mask=jnp.asarray(split == 2), n_nodes=params.n_nodes)
    return (graph, a) if return_arrays else graph
