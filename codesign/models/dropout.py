"""`HashDropout`: dropout whose mask comes from a counter-based integer hash.

Why not `nnx.Dropout`: on this project's 2-core CPU, drawing the 2708 x 1433 uniforms for
dropout on Cora's input features with `jax.random` (threefry or rbg) takes 70-100 ms, 100x the
layer's GEMM (0.9 ms); the hash below takes 2.8 ms (measured 2026-11-22). Training speed is a
goal of this toolkit (issue 3), so the mask is drawn here instead.

Mask: element ``i`` (flat index) is kept iff ``h(i * 0x9E3779B9 + seed) >= rate * 2^32``, with
``h`` the "lowbias32" integer finalizer (C. Wellons, "Prospecting for hash functions", 2018;
the avalanche structure of MurmurHash3's fmix32) and ``seed`` a fresh 32-bit draw from the
module's `nnx.Rngs` stream per call. Kept values are scaled by ``1 / (1 - rate)``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from flax import nnx

from codesign.kernels.features import SparseFeatures

GOLDEN = 0x9E3779B9
M1, M2 = 0x7FEB352D, 0x846CA68B


def hash_u32(index: jax.Array, seed: jax.Array) -> jax.Array:
    """uint32 [...] pseudo-random words: lowbias32 of ``index * GOLDEN + seed`` (module docstring).

    Args:
      index: uint32 [...] element indices (the flat index of each element of the full tensor).
      seed: uint32 scalar.
    """
    h = index.astype(jnp.uint32) * jnp.uint32(GOLDEN) + seed.astype(jnp.uint32)
    h = h ^ (h >> 16)
    h = h * jnp.uint32(M1)
    h = h ^ (h >> 15)
    h = h * jnp.uint32(M2)
    return h ^ (h >> 16)


def hash_uniform_u32(seed: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """uint32 [*shape] pseudo-random words from a uint32 ``seed`` (lowbias32 of the flat index)."""
    n = 1
    for d in shape:
        n *= d
    return hash_u32(jax.lax.iota(jnp.uint32, n).reshape(shape), seed)


def _dropped(x: jax.Array, seed: jax.Array, rate: float, index: jax.Array | None = None) -> jax.Array:
    """``x`` with the mask of ``seed`` (`HashDropout.apply`)."""
    h = hash_uniform_u32(seed, x.shape) if index is None else hash_u32(index, seed)
    keep = h >= jnp.uint32(int(rate * 2**32))
    return jnp.where(keep, x / (1.0 - rate), jnp.zeros((), x.dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _relu_dropout(z: jax.Array, seed: jax.Array, rate: float) -> jax.Array:
    return _dropped(jax.nn.relu(z), seed, rate)


def _relu_dropout_fwd(z, seed, rate):
    out = _relu_dropout(z, seed, rate)
    return out, out


def _relu_dropout_bwd(rate, out, g):
    # ReLU's derivative times the mask: both are in the sign of the output (an element is > 0
    # iff it was kept and its input was > 0; ReLU's derivative at 0 is 0, as jax.nn.relu's)
    return jnp.where(out > 0, g / (1.0 - rate), jnp.zeros((), g.dtype)), None


_relu_dropout.defvjp(_relu_dropout_fwd, _relu_dropout_bwd)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _concat_dropped_matmul(a: jax.Array, x: jax.Array, seed: jax.Array, w: jax.Array, rate: float) -> jax.Array:
    return jnp.concatenate([a, _dropped(x, seed, rate)], 1) @ w


def _concat_dropped_matmul_fwd(a, x, seed, w, rate):
    return _concat_dropped_matmul(a, x, seed, w, rate), (a, x, seed, w)


def _concat_dropped_matmul_bwd(rate, res, g):
    a, x, seed, w = res
    k = a.shape[1]
    # XLA:CPU drops optimization barriers, so without help the redrawn copy is either merged with
    # the forward's (CSE) or computed at the start of the step (it depends on inputs only): either
    # way an [N, K] array would live from the forward to here again. Two guards: the seed is made
    # to depend on the cotangent (``min(s, s | bits) == s`` for unsigned integers, which XLA does
    # not fold), so the redraw is scheduled after ``g`` exists; and the mask is applied select,
    # then divide (the forward: divide, then select), the same values bit for bit in a different
    # expression, which CSE does not merge.
    seed = jnp.minimum(seed, seed | jax.lax.bitcast_convert_type(g.reshape(-1)[:1].astype(jnp.float32), jnp.uint32)[0])
    keep = hash_uniform_u32(seed, x.shape) >= jnp.uint32(int(rate * 2**32))
    xd = jnp.where(keep, x, jnp.zeros((), x.dtype)) / (1.0 - rate)
    dw = jnp.concatenate([a.T @ g, xd.T @ g], 0)
    dx = jnp.where(keep, (g @ w[k:].T) / (1.0 - rate), jnp.zeros((), g.dtype))
    return g @ w[:k].T, dx, None, dw


_concat_dropped_matmul.defvjp(_concat_dropped_matmul_fwd, _concat_dropped_matmul_bwd)


class HashDropout(nnx.Module):
    """Inverted dropout (Srivastava et al., JMLR 2014) with a hashed mask.

    Args:
      rate: drop probability in [0, 1).
      rngs: `nnx.Rngs` with a "dropout" stream (or the default stream).

    Attributes:
      deterministic: if True (set by ``model.eval()``), the input is returned unchanged.

    Shapes: ``x [...] -> [...]``, same dtype.

    Raises:
      ValueError: ``rate`` outside [0, 1).

    ``__call__`` is ``apply(x, draw_seed())``; the two halves are public so that a caller holding
    only some rows of the tensor (`codesign.distributed`) draws the seed once and applies the same
    mask to its rows through their global flat indices.
    """

    def __init__(self, rate: float, *, rngs: nnx.Rngs):
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"HashDropout: rate must be in [0, 1), got {rate}")
        self.rate = rate
        self.deterministic = False
        self.rngs = rngs["dropout"].fork()

    @property
    def active(self) -> bool:
        """Whether a call drops anything (not deterministic and ``rate > 0``)."""
        return not self.deterministic and self.rate > 0.0

    def draw_seed(self) -> jax.Array:
        """uint32 scalar: the next seed of the module's stream (one per call of ``__call__``)."""
        return jax.random.bits(self.rngs(), (), jnp.uint32)

    def apply(self, x: jax.Array, seed: jax.Array, index: jax.Array | None = None) -> jax.Array:
        """``x`` with the mask of ``seed``: element ``e`` kept iff ``hash_u32(index[e], seed) >=
        rate * 2^32``, scaled by ``1 / (1 - rate)``. ``index``: uint32 of ``x``'s shape, the
        elements' flat indices in the whole tensor (None = ``x``'s own flat index)."""
        return _dropped(x, seed, self.rate, index)

    def relu_apply(self, z: jax.Array) -> jax.Array:
        """``self(jax.nn.relu(z))`` (the same values, the same draw of the stream, the same
        gradient) as one operation whose backward pass keeps only its output: the output's sign
        holds both ReLU's derivative and the mask, so autodiff's two arrays of ``z``'s shape
        (ReLU's input for its derivative, the dropped output for the next GEMM) become one.
        Inactive (eval, rate 0): ReLU. Shapes: ``z`` float [...] -> the same."""
        if not self.active:
            return jax.nn.relu(z)
        return _relu_dropout(z, self.draw_seed(), float(self.rate))

    def concat_matmul(self, a: jax.Array, x: jax.Array, seed: jax.Array, w: jax.Array) -> jax.Array:
        """``concatenate([a, self.apply(x, seed)], 1) @ w`` (GraphSAGE's ``[agg | h] @ [W_neigh;
        W_root]``) as one operation whose backward pass keeps ``a`` and ``x`` and redraws the mask
        from ``seed``, instead of keeping the dropped copy of ``x`` (autodiff keeps the
        concatenation, an [N, K_a + K] array, for the weight gradient; ``x``, the caller's input,
        is live anyway). The same values and gradients.

        Shapes: ``a`` float [N, K_a], ``x`` float [N, K], ``seed`` uint32 scalar (`draw_seed`),
        ``w`` float [K_a + K, F] -> [N, F]. Inactive (eval, rate 0): the plain product."""
        if not self.active:
            return jnp.concatenate([a, x], 1) @ w
        return _concat_dropped_matmul(a, x, seed, w, float(self.rate))

    def __call__(self, x, *, deterministic: bool | None = None):
        """``x`` (an array, or `codesign.kernels.SparseFeatures`: its stored entries are dropped
        by their flat indices in the dense matrix, so they get the dense tensor's mask) with this
        call's mask."""
        det = self.deterministic if deterministic is None else deterministic
        if det or self.rate == 0.0:
            return x
        if isinstance(x, SparseFeatures):
            return x.with_values(self.apply(x.values, self.draw_seed(), x.flat_index()))
        return self.apply(x, self.draw_seed())
