"""Degree-aware quantization: Degree-Quant protective masking and A^2Q-style per-node bit initialisation.

Degree-Quant: S. A. Tailor, J. Fernandez-Marques, N. D. Lane, "Degree-Quant: Quantization-Aware
Training for Graph Neural Networks", ICLR 2021 (arXiv:2008.05000), Sec. 3 and Algorithm 1.
During training each node is protected (kept at full precision) with a probability that grows
with its in-degree, because high in-degree nodes aggregate many messages and their outputs have
the widest ranges. The exact mapping is the one of the authors' code
(``dq/transforms.py::ProbabilisticHighDegreeMask`` in github.com/camlsys/degree-quant):

    p_i = p_min + (p_max - p_min) * #{j : deg_j <= deg_i} / N

i.e. linear interpolation by the empirical CDF of the in-degree, so all nodes of equal degree
share one probability and the node(s) of highest in-degree get ``p_max``. Their quantizers
compute ranges only from the non-protected nodes and track them with a momentum (or min/max)
observer, optionally with percentile clipping; `DegreeQuant` computes the range per call from
the non-protected nodes of the current (full) batch, optionally at a percentile. At test time all
nodes are quantized.

A^2Q: Z. Zhu, F. Li, Z. Mo, Q. Hu, G. Li, Z. Liu, X. Liang, J. Cheng, "A^2Q: Aggregation-Aware
Quantization for Graph Neural Networks", ICLR 2023 (arXiv:2302.00193), learns one bit-width and
step per node and reports that higher in-degree nodes end up with more bits. Their released code
initialises every node's bit parameter to the same constant; the degree-ranked initialisation
`a2q_init_bits` is our own (a linear function of the same in-degree CDF as above, with a
prescribed mean), used to start `LearnedBitQuant(per_node=N)` closer to that outcome.
"""

from __future__ import annotations

import functools
import numbers
from typing import Optional, final

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from codesign.kernels.features import SparseFeatures
from codesign.quant.fake_quant import NO_QUANT_BITS, Quantizer, check_bits, fake_quant, qrange
from codesign.quant.lsq import calib_amax, check_float, check_percentile


def _check_in_degree(in_degree) -> jax.Array:
    traced = isinstance(in_degree, jax.core.Tracer)
    deg = in_degree if traced else np.asarray(in_degree)  # numpy checks: no device round trip
    if deg.ndim != 1 or deg.shape[0] < 1:
        raise ValueError(f"in_degree must be a non-empty 1-D array [N], got {deg.shape=}")
    if deg.dtype == bool or not (np.issubdtype(deg.dtype, np.integer) or np.issubdtype(deg.dtype, np.floating)):
        raise ValueError(f"in_degree must be numeric, got {deg.dtype=}")
    if not traced and np.any(deg < 0):
        raise ValueError("in_degree must be >= 0 everywhere")
    return jnp.asarray(deg)


def _check_probs(p_min, p_max) -> tuple[float, float]:
    for name, p in (("p_min", p_min), ("p_max", p_max)):
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p <= 1.0:
            raise ValueError(f"{name} must be a float in [0, 1], got {name}={p!r}")
    if p_min > p_max:
        raise ValueError(f"p_min must be <= p_max, got {p_min=}, {p_max=}")
    return float(p_min), float(p_max)


def degree_cdf(in_degree: jax.Array) -> jax.Array:
    """Empirical CDF of the in-degree at each node, ``#{j : deg_j <= deg_i} / N``: float32 [N] in (0, 1].

    Raises:
      ValueError: ``in_degree`` not a non-empty 1-D numeric array, or negative entries.
    """
    return _cdf(_check_in_degree(in_degree))


@jax.jit
def _cdf(deg: jax.Array) -> jax.Array:
    srt = jnp.sort(deg)
    return jnp.searchsorted(srt, deg, side="right").astype(jnp.float32) / deg.shape[0]


def protection_probs(in_degree: jax.Array, p_min: float, p_max: float) -> jax.Array:
    """Degree-Quant protection probabilities ``p_min + (p_max - p_min) * CDF(deg_i)`` (module
    docstring): float32 [N] in ``[p_min, p_max]``; the highest in-degree gets ``p_max``.

    Args:
      in_degree: int or float [N], >= 0 (number of incoming edges of each node).
      p_min, p_max: floats with ``0 <= p_min <= p_max <= 1``.

    Raises:
      ValueError: probabilities outside [0, 1] or ``p_min > p_max``; bad ``in_degree``.
    """
    p_min, p_max = _check_probs(p_min, p_max)
    return p_min + (p_max - p_min) * degree_cdf(in_degree)


def a2q_init_bits(in_degree: jax.Array, mean_bits: float, min_bits: float, max_bits: float) -> jax.Array:
    """Per-node initial bit-widths increasing with in-degree, with mean exactly ``mean_bits``.

    ``b_i = mean_bits + a (u_i - mean(u))`` with ``u_i`` the in-degree CDF (`degree_cdf`) and ``a
    >= 0`` the largest slope that keeps every ``b_i`` in ``[min_bits, max_bits]``; so the mean is
    ``mean_bits``, equal degrees get equal bits, the order follows the degree, and the spread
    reaches ``min_bits`` or ``max_bits``. If all degrees are equal, every node gets ``mean_bits``.
    Motivation: A^2Q (Zhu et al. 2023, arXiv:2302.00193) learns more bits for higher in-degree
    nodes; the schedule itself is ours (module docstring).

    Args:
      in_degree: int or float [N], >= 0.
      mean_bits: target mean, in ``[min_bits, max_bits]``.
      min_bits, max_bits: bounds, ``1 <= min_bits <= max_bits``.

    Returns:
      float32 [N] continuous bit-widths (pass to ``LearnedBitQuant(init_bits=..., per_node=N)``).

    Raises:
      ValueError: bounds not ordered or ``min_bits < 1``; bad ``in_degree``.
    """
    for name, v in (("mean_bits", mean_bits), ("min_bits", min_bits), ("max_bits", max_bits)):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not np.isfinite(v):
            raise ValueError(f"{name} must be a finite number, got {name}={v!r}")
    if not 1 <= min_bits <= mean_bits <= max_bits:
        raise ValueError(f"need 1 <= min_bits <= mean_bits <= max_bits, got {min_bits=}, {mean_bits=}, {max_bits=}")
    return _a2q_bits(degree_cdf(in_degree), *(jnp.float32(v) for v in (mean_bits, min_bits, max_bits)))


@jax.jit
def _a2q_bits(u: jax.Array, mean_bits: jax.Array, min_bits: jax.Array, max_bits: jax.Array) -> jax.Array:
    c = u - jnp.mean(u)
    up, down = jnp.max(c), -jnp.min(c)
    a_up = jnp.where(up > 0, (max_bits - mean_bits) / jnp.where(up > 0, up, 1.0), jnp.inf)
    a_down = jnp.where(down > 0, (mean_bits - min_bits) / jnp.where(down > 0, down, 1.0), jnp.inf)
    a = jnp.minimum(a_up, a_down)
    a = jnp.where(jnp.isfinite(a), a, 0.0)
    return jnp.clip(mean_bits + a * c, min_bits, max_bits).astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("hi", "signed", "percentile"))
def _range_scale(x: jax.Array, protected: Optional[jax.Array], *, hi: int, signed: bool,
                 percentile: Optional[float]) -> jax.Array:
    where = None
    if protected is not None:
        where = jnp.broadcast_to(~protected.reshape((-1,) + (1,) * (x.ndim - 1)), x.shape)
    amax = calib_amax(x, signed=signed, percentile=percentile, where=where)
    return jnp.where(amax > 0, amax * (1.0 / hi), 1.0)  # reciprocal: same value eager and jitted


@final
class DegreeQuant(Quantizer):
    """Degree-Quant fake quantization of node-wise tensors with stochastic protective masking.

    Training (``deterministic=False``): draw the protective mask (independent Bernoulli draws
    with `protection_probs`, Tailor et al. 2021, Alg. 1); protected rows pass through
    unchanged (full precision, identity gradient), the others are fake-quantized (`fake_quant`,
    symmetric signed or unsigned, straight-through) with the scale ``amax / qmax`` where ``amax``
    is the max (or ``percentile``) of ``|x|`` over the non-protected rows only. Evaluation
    (``deterministic=True``): every row is quantized with ``amax`` over all rows. ``model.train()``
    / ``model.eval()`` set the mode.

    Quantizer protocol: ``expected_bits()`` is ``bits`` in both modes: deployment quantizes every
    node, and the cost model prices deployment (protection is a training device only).
    ``hard_bits()`` is ``bits``.

    Attributes:
      protect_prob: ``nnx.Variable`` float32 [N], `protection_probs` of the in-degrees.
      bits, signed, percentile, n_nodes: static.
      deterministic: bool, False at construction.
      rngs: `nnx.RngStream` forked from ``rngs[rng_collection]`` (``rngs.default`` when absent).
    """

    def __init__(self, bits: int, in_degree: jax.Array, *, p_min: float = 0.0, p_max: float = 0.1,
                 signed: bool = True, percentile: Optional[float] = None, rng_collection: str = "quant",
                 rngs: nnx.Rngs):
        """Args:
          bits: int in [2, 31] signed / [1, 31] unsigned (32 would be no quantization).
          in_degree: int or float [N] >= 0, the in-degree of every node (rows of ``x``).
          p_min, p_max: protection probabilities, ``0 <= p_min <= p_max <= 1``.
          signed: signed symmetric or unsigned range (see `fake_quant`).
          percentile: None for max calibration, else the percentile in (0, 100] of ``|x|``.
          rng_collection: name of the stream in ``rngs``.
          rngs: `nnx.Rngs`.

        Raises:
          ValueError: ``bits`` outside [2, 31] (signed) / [1, 31] (unsigned) or None, ``in_degree``,
            probabilities or ``percentile`` invalid.
          TypeError: ``bits`` not an int; ``rngs`` not an `nnx.Rngs`.
        """
        if check_bits(bits, signed) is None:  # None or 32: not quantized, no grid to protect
            raise ValueError(f"bits: must be < {NO_QUANT_BITS} for DegreeQuant ({NO_QUANT_BITS} = float32, "
                             f"not quantized), got {bits!r}")
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs, got {type(rngs).__name__}")
        self.bits, self.signed = int(bits), bool(signed)
        self.percentile = check_percentile(percentile)
        probs = protection_probs(in_degree, p_min, p_max)
        self.n_nodes = int(probs.shape[0])
        self.protect_prob = nnx.Variable(probs)
        self.deterministic = False
        self.rngs = rngs[rng_collection].fork()

    def scale(self, x: jax.Array, protected: Optional[jax.Array] = None) -> jax.Array:
        """Quantization step ``amax / qmax`` over the rows of ``x`` not in ``protected`` (all rows if
        None); 1 where ``amax`` is 0 (or every row is protected). Float32 scalar, units of ``x``."""
        _, hi = qrange(self.bits, self.signed)
        return _range_scale(x, protected, hi=hi, signed=self.signed, percentile=self.percentile)

    def __call__(self, x: jax.Array, deterministic: Optional[bool] = None, *,
                 key: Optional[jax.Array] = None) -> jax.Array:
        """Fake-quantized ``x``, same shape and dtype.

        Args:
          x: float [N, ...], one row per node; or `codesign.kernels.SparseFeatures` [N, F] where
            `takes_sparse` (then `SparseFeatures` with the dense result's nonzeros).
          deterministic: overrides ``self.deterministic`` when not None.
          key: optional PRNG key for the mask instead of the module's stream (training only).

        Raises:
          ValueError: ``x`` not floating or ``x.shape[0] != N``.
        """
        if isinstance(x, SparseFeatures):
            return self._sparse(x, deterministic, key)
        x = check_float(x)
        if x.ndim == 0 or x.shape[0] != self.n_nodes:
            raise ValueError(f"x must have N={self.n_nodes} rows (one per node), got {x.shape=}")
        det = self.deterministic if deterministic is None else deterministic
        if det:
            return fake_quant(x, self.bits, signed=self.signed, scale=self.scale(x).astype(x.dtype))
        protected = jax.random.bernoulli(self.rngs() if key is None else key, self.protect_prob[...])
        x_q = fake_quant(x, self.bits, signed=self.signed, scale=self.scale(x, protected).astype(x.dtype))
        return jnp.where(protected.reshape((-1,) + (1,) * (x.ndim - 1)), x, x_q)

    def takes_sparse(self) -> bool:
        """`Quantizer.takes_sparse`: max calibration only (the max over the stored entries of the
        unprotected rows is the dense rows' max, as a 0 adds nothing to ``|x|``'s max; a
        percentile counts the zeros)."""
        return self.percentile is None

    def _sparse(self, x: SparseFeatures, deterministic: Optional[bool], key: Optional[jax.Array]) -> SparseFeatures:
        """`__call__` on the stored entries of ``x`` [N, F]: the dense result's nonzeros (a 0
        quantizes to 0; its gradient reaches nothing learned). Same mask draws as the dense call."""
        if not self.takes_sparse():
            raise ValueError(f"x: DegreeQuant with percentile={self.percentile} reads every element; "
                             "give it the dense features")
        if x.shape[0] != self.n_nodes:
            raise ValueError(f"x must have N={self.n_nodes} rows (one per node), got {x.shape=}")
        v = check_float(x.values)
        det = self.deterministic if deterministic is None else deterministic
        if det:
            return x.with_values(fake_quant(v, self.bits, signed=self.signed, scale=self.scale(v).astype(v.dtype)))
        protected = jax.random.bernoulli(self.rngs() if key is None else key, self.protect_prob[...])[x.rows]
        scale = self.scale(v, protected).astype(v.dtype)
        return x.with_values(jnp.where(protected, v, fake_quant(v, self.bits, signed=self.signed, scale=scale)))

    def expected_bits(self) -> jax.Array:
        """float32 scalar ``bits`` (deployment bit-width; see the class docstring)."""
        return jnp.asarray(self.bits, jnp.float32)

    def hard_bits(self) -> int:
        """Deployed bit-width (int)."""
        return self.bits

    def set_view(self, deterministic: Optional[bool] = None):
        """Hook of ``nnx.view`` (flax >= 0.12): ``nnx.view(model, deterministic=True)``."""
        if deterministic is not None:
            self.deterministic = deterministic
