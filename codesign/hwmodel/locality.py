"""`LocalityProfile`: how a graph's aggregation re-references feature rows, measured once.

SpMM in CSR order gathers ``X[senders[j]]`` for the edges of receiver 0, then receiver 1, ...
A gathered row hits in an LRU buffer of C rows iff its *stack distance* (distinct rows touched
since its previous use) is below C (Mattson et al., "Evaluation techniques for storage
hierarchies", IBM Systems Journal 1970). We measure the *reuse time* t (accesses since the
previous use of the same row; O(E log E) with a sort) and convert it with the independent-
reference approximation ``stack_distance ~ R (1 - exp(-t / R))`` for R rows (the expected number
of distinct rows among t uniform draws). For a uniformly random access stream this gives stack
distances uniform on [0, R], i.e. hit rate ``C / R``: the plain capacity model is the special
case of a graph with no locality, and reordering (RCM, METIS) shows up as shorter reuse times.

Rows are not re-referenced uniformly on a power-law graph: a row is gathered once per out-edge,
so it is drawn with probability ``p_i = d_i / E`` (its degree over the edge count). With the
sender-degree distribution measured (`LocalityProfile.degree_quantiles`) the conversion is the
independent-reference model with those probabilities (Che, Tung & Wang, "Hierarchical Web caching
systems: modeling, design and experimental results", IEEE JSAC 2002; Fagin, "Asymptotic miss
ratios over independent references", JCSS 1977): ``stack_distance(t) = sum_i (1 - exp(-t p_i))``,
evaluated over the degree quantiles, which is <= the uniform ``R (1 - exp(-t / R))`` (Jensen), so
skewed graphs hit more. R counts only rows that are gathered at all (degree-0 senders excluded).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

N_QUANTILES = 32
PROBS = (np.arange(N_QUANTILES) + 0.5) / N_QUANTILES  # probability levels of the stored quantiles


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class LocalityProfile:
    """Reuse-time quantiles of a graph's gather stream.

    Fields:
      reuse_time_quantiles: float32 [N_QUANTILES]  reuse time (in accesses) at `PROBS` over the
        accesses that re-use a row (first touches excluded).
      n_rows: float32 scalar  distinct rows that are gathered (R: senders of degree >= 1).
      degree_quantiles: float32 [N_QUANTILES] sender out-degree at `PROBS` over those R rows;
        None = every row equally likely (uniform re-reference).
      in_degree_cv: float32 scalar  coefficient of variation (std / mean) of the in-degree over
        all N rows (zero rows included): the load imbalance of a row partition
        (`estimate.nmp_stage_cost`); None = Poisson degrees (``1 / sqrt(mean degree)``).
      max_in_degree: float32 scalar  the largest in-degree (one row is never split across
        units); None = not known.
    """

    reuse_time_quantiles: jax.Array
    n_rows: jax.Array
    degree_quantiles: Optional[jax.Array] = None
    in_degree_cv: Optional[jax.Array] = None
    max_in_degree: Optional[jax.Array] = None

    @classmethod
    def uniform(cls, n_rows) -> "LocalityProfile":
        """The profile of uniformly random accesses over ``n_rows`` rows (no locality)."""
        n = jnp.asarray(n_rows, jnp.float32)
        return cls(-n * jnp.log1p(-jnp.asarray(PROBS, jnp.float32)), n)


def measure(senders, receivers, n_nodes: int) -> LocalityProfile:
    """The profile of aggregating over edges ``senders -> receivers`` in receiver-major order.

    Args:
      senders, receivers: int [E] edge endpoints (any order; sorted here by receiver, sender).
      n_nodes: N, the number of rows of X.

    Raises:
      ValueError: empty edge list or mismatched lengths.
    """
    s, r = np.asarray(senders), np.asarray(receivers)
    if s.shape != r.shape or s.ndim != 1 or s.size == 0:
        raise ValueError(f"locality.measure: senders/receivers must be equal-length non-empty 1-D, "
                         f"got {s.shape} and {r.shape}")
    order = np.lexsort((s, r))
    cols = s[order]
    pos = np.arange(cols.size)
    by_col = np.argsort(cols, kind="stable")
    same = cols[by_col][1:] == cols[by_col][:-1]
    reuse = (pos[by_col][1:] - pos[by_col][:-1])[same]
    if reuse.size == 0:
        reuse = np.array([float(cols.size)])
    out_deg = np.bincount(s, minlength=n_nodes)
    active = out_deg[out_deg > 0]  # degree-0 rows are never gathered
    in_deg = np.bincount(r, minlength=n_nodes).astype(np.float64)
    return LocalityProfile(jnp.asarray(np.quantile(reuse, PROBS), jnp.float32),
                           jnp.asarray(float(active.size), jnp.float32),
                           jnp.asarray(np.quantile(active, PROBS), jnp.float32),
                           jnp.asarray(in_deg.std() / max(in_deg.mean(), 1e-12), jnp.float32),
                           jnp.asarray(float(in_deg.max()), jnp.float32))


def stack_distance_rows(profile: LocalityProfile, access_scale) -> jax.Array:
    """Stack-distance quantiles [N_QUANTILES] (rows) when each reuse time is scaled by
    ``access_scale`` (the kept fraction of edges: fewer accesses lie between two uses): uniform
    ``R (1 - exp(-t / R))`` without degree quantiles, else the independent-reference sum over
    the degree distribution (module docstring)."""
    n = profile.n_rows
    t = profile.reuse_time_quantiles * access_scale
    if profile.degree_quantiles is None:
        return n * -jnp.expm1(-t / n)
    d = profile.degree_quantiles
    p = d / jnp.maximum(n * jnp.mean(d), 1e-30)  # p_i = d_i / E over the R gathered rows
    return n * jnp.mean(-jnp.expm1(-t[:, None] * p[None, :]), axis=1)


def hit_rate(stack_distances: jax.Array, capacity_rows: jax.Array) -> jax.Array:
    """P(stack distance < capacity): piecewise-linear in ``capacity_rows`` (differentiable)."""
    xs = jnp.concatenate([jnp.zeros((1,), jnp.float32), stack_distances])
    ps = jnp.concatenate([jnp.zeros((1,), jnp.float32), jnp.asarray(PROBS, jnp.float32)])
    xs = jnp.concatenate([xs, xs[-1:] * 1.0001 + 1.0])
    ps = jnp.concatenate([ps, jnp.ones((1,), jnp.float32)])
    return jnp.interp(capacity_rows, xs, ps)
