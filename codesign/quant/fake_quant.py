"""Uniform fake quantization (quantize-dequantize) with a straight-through estimator.

Per-tensor uniform quantization (as in B. Jacob et al., "Quantization and Training of Neural
Networks for Efficient Integer-Arithmetic-Only Inference", CVPR 2018, with the zero point fixed
at 0):

    signed (symmetric):  qmax = 2^(bits-1) - 1,  scale = max|x| / qmax,
                         x_hat = clip(round(x / scale), -qmax, qmax) * scale
    unsigned:            qmax = 2^bits - 1,      scale = max(max(x), 0) / qmax,
                         x_hat = clip(round(x / scale), 0, qmax) * scale

Signed uses the symmetric range ``[-qmax, qmax]`` (``2^bits - 1`` levels; the code ``-2^(bits-1)``
is unused). Unsigned suits non-negative tensors (ReLU outputs, bag-of-words features).

Gradient: the straight-through estimator (Y. Bengio, N. Léonard, A. Courville, "Estimating or
Propagating Gradients Through Stochastic Neurons", arXiv:1308.3432, 2013) treats ``round`` as the
identity; as in M. Courbariaux, I. Hubara et al., "Binarized Neural Networks" (NeurIPS 2016) the
gradient is cancelled where the value saturates, i.e. where ``x / scale`` lies more than half a
step outside ``[lo, hi]`` (only possible with an explicit ``scale``; with the default scale every
element is in range and ``d x_hat / d x = 1``). The scale gets no gradient: it is computed under
``stop_gradient`` and an explicit ``scale`` is treated as a constant. Learned step sizes (LSQ,
Esser et al., ICLR 2020) and learned bit-widths are planned in later modules, not here.

``bits=None`` or ``bits == 32`` means "not quantized" (float32): the input is returned unchanged.
Bit-widths above 32 are an error (`check_bits`), not full precision: a run configured at 33 bits
would otherwise train in fp32 and report 33.
"""

from __future__ import annotations

import numbers
import abc
from typing import final

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from codesign.kernels.features import SparseFeatures

NO_QUANT_BITS = 32
"""The largest bit-width, meaning full precision (float32): fake_quant is the identity."""


def check_bits(bits, signed: bool = True) -> int | None:
    """Validates a fixed quantizer bit-width: the one check of every quantizer constructor.

    Args:
      bits: an int in ``[2, 32]`` (signed) or ``[1, 32]`` (unsigned), or None; 32 and None mean
        "not quantized" (float32).
      signed: the grid the bit-width is for (a signed grid needs 2 bits for a nonzero code).

    Returns:
      None for "not quantized" (None or 32), else the int bit-width (< 32).

    Raises:
      TypeError: ``bits`` not an int or None (a bool, float, str), naming ``bits``.
      ValueError: ``bits`` outside the range above, naming ``bits``.
    """
    if bits is None:
        return None
    if isinstance(bits, (bool, np.bool_)) or not isinstance(bits, numbers.Integral):
        raise TypeError(f"bits: must be an int or None, got {bits!r} ({type(bits).__name__})")
    bits = int(bits)
    min_bits = 2 if signed else 1
    if not min_bits <= bits <= NO_QUANT_BITS:
        raise ValueError(f"bits: must be in [{min_bits}, {NO_QUANT_BITS}] for {'signed' if signed else 'unsigned'} "
                         f"quantization ({NO_QUANT_BITS} = float32, not quantized), got {bits}")
    return None if bits == NO_QUANT_BITS else bits




def qrange(bits: int, signed: bool = True) -> tuple[int, int]:
    """Integer code range ``(lo, hi)``: ``(-(2^(bits-1)-1), 2^(bits-1)-1)`` signed, ``(0, 2^bits-1)`` unsigned.

    Raises:
      ValueError: ``bits`` invalid (see `check_bits`) or 32 (not quantized).
      TypeError: ``bits`` not an int.
    """
    b = check_bits(bits, signed)
    if b is None:
        raise ValueError(f"bits has no integer range when not quantized, got {bits=}")
    if signed:
        qmax = 2 ** (b - 1) - 1
        return -qmax, qmax
    return 0, 2**b - 1


def fake_quant(x: jax.Array, bits: int | None, *, signed: bool = True, scale=None,
               axis_name: str | None = None) -> jax.Array:
    """Per-tensor uniform quantize-dequantize with a straight-through gradient.

    Args:
      x: floating array [...] (any float dtype; computation in that dtype).
      bits: bit-width, a Python int in ``[2, 32]`` when ``signed``, ``[1, 32]`` when unsigned;
        ``None`` or 32 returns ``x`` unchanged (`check_bits`).
      signed: symmetric signed range (True) or unsigned ``[0, 2^bits - 1]`` (False; negative
        values are clipped to 0).
      scale: step size (float scalar, > 0, same units as ``x``), or None to use
        ``max|x| / qmax`` (``max(x, 0) / qmax`` unsigned). An all-zero ``x`` uses scale 1, so
        the result is zeros, not NaN. No gradient flows into ``scale``.
      axis_name: with the default scale, the name of a mapped axis (``shard_map`` / ``pmap``)
        over which the maximum is ``pmax``-reduced, so that a tensor split over devices gets the
        scale of the whole tensor (as ``flax.nnx.BatchNorm(axis_name=...)`` does for its
        statistics); None = this array's own maximum.

    Returns:
      ``x_hat``, same shape and dtype as ``x``: values on the grid ``scale * k`` for integer
      ``k`` in the code range; ``|x - x_hat| <= scale / 2`` for ``x / scale`` inside the range.

    Raises:
      ValueError: ``bits`` outside ``[2, 32]`` (signed) / ``[1, 32]`` (unsigned); ``x`` not a
        floating array; a concrete ``scale`` that is not > 0.
      TypeError: ``bits`` not an int or None.
    """
    b = check_bits(bits, signed)
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"x must be a floating array, got x.dtype={x.dtype}")
    if b is None:
        return x
    lo, hi = qrange(b, signed)
    if scale is None:
        amax = jnp.max(jnp.abs(x)) if signed else jnp.max(jnp.maximum(x, 0))
        if axis_name is not None:
            amax = jax.lax.pmax(jax.lax.stop_gradient(amax), axis_name)
        scale = jnp.where(amax > 0, amax / hi, jnp.ones_like(amax))
    else:
        if isinstance(scale, numbers.Real) and not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale=!r}")
        scale = jnp.asarray(scale, x.dtype)
    scale = jax.lax.stop_gradient(scale)
    v = x / scale
    x_q = jnp.clip(jnp.round(v), lo, hi) * scale
    # STE: identity gradient where round(v) is not clipped; zero where the value saturates.
    passes = jax.lax.stop_gradient((v >= lo - 0.5) & (v <= hi + 0.5))
    x_ste = x + jax.lax.stop_gradient(x_q - x)
    return jnp.where(passes, x_ste, jax.lax.stop_gradient(x_q))


class Quantizer(nnx.Module):
    """The abstract base of every quantizer of `codesign.quant` (`FakeQuant`, `LSQQuant`,
    `LearnedBitQuant`, `DegreeQuant`): an `nnx.Module` with

      ``q(x) -> x_hat``     the quantize-dequantized tensor, same shape and dtype;
      ``expected_bits()``   float32 scalar, the mean width the cost model prices (differentiable
                            where learned);
      ``hard_bits()``       the deployed integer width (int), or int32 [N] per node.

    Abstract or final (equinox's pattern): this class only declares the contract; the quantizers
    are ``@final`` subclasses, and a new behaviour wraps one instead of overriding it. A subclass
    that misses a method cannot be instantiated (``TypeError``), so the cost model never probes
    for one.
    """

    @abc.abstractmethod
    def __call__(self, x: jax.Array) -> jax.Array:
        """The quantize-dequantized ``x`` (same shape and dtype)."""

    @abc.abstractmethod
    def expected_bits(self) -> jax.Array:
        """float32 scalar: the mean bit-width of the values emitted (expected, for the cost model)."""

    @abc.abstractmethod
    def hard_bits(self):
        """The deployed integer bit-width (int), or int32 [N] per node."""

    @abc.abstractmethod
    def takes_sparse(self) -> bool:
        """Whether ``q(x)`` takes `codesign.kernels.SparseFeatures` (the nonzeros of a mostly-zero
        [N, F] input) and returns the dense result's nonzeros with the dense call's gradients: a
        0 must quantize to 0 and every statistic the quantizer reads must be set by the nonzeros.
        A model feeds its input as `SparseFeatures` only to a quantizer that says so
        (`codesign.models.GCN.takes_sparse_input`)."""


@final
class FakeQuant(Quantizer):
    """Fake-quantization layer with a fixed bit-width (`fake_quant` with the default per-tensor scale).

    Attributes:
      bits: int or None (static), read by the cost model; None or 32 means full precision.
      signed: bool (static).
      axis_name: str or None (static): `fake_quant`'s ``axis_name`` (the scale of a tensor split
        over the devices of a mapped axis).

    Example (inside your own ``nnx.Module``)::

      self.q_x = FakeQuant(8, signed=False)        # in __init__: 8-bit non-negative features
      h = self.linear(self.q_x(x))                 # in __call__
    """

    def __init__(self, bits: int | None, *, signed: bool = True, axis_name: str | None = None):
        """Raises:
          ValueError: ``bits`` outside [2, 32] (signed) / [1, 32] (unsigned) (`check_bits`).
          TypeError: ``bits`` not an int or None.
        """
        check_bits(bits, signed)
        self.bits = None if bits is None else int(bits)
        self.signed = bool(signed)
        self.axis_name = axis_name

    def __call__(self, x):
        """``fake_quant(x, self.bits, signed=self.signed, axis_name=self.axis_name)``: same shape and
        dtype as ``x``. ``x`` may be `codesign.kernels.SparseFeatures`: its stored entries are
        quantized (the per-tensor scale, the max of ``|x|`` / ``max(x, 0)``, is the stored entries'
        max where any is positive, and a 0 quantizes to 0), giving the dense result's nonzeros."""
        if isinstance(x, SparseFeatures):
            return x.with_values(fake_quant(x.values, self.bits, signed=self.signed, axis_name=self.axis_name))
        return fake_quant(x, self.bits, signed=self.signed, axis_name=self.axis_name)

    def expected_bits(self) -> jax.Array:
        """float32 scalar: the fixed width (32 when not quantized); no gradient to learn."""
        return jnp.asarray(float(self.hard_bits()), jnp.float32)

    def hard_bits(self) -> int:
        """The deployed width: ``bits``, or 32 (`NO_QUANT_BITS`) when not quantized."""
        return NO_QUANT_BITS if self.bits is None else min(self.bits, NO_QUANT_BITS)

    def takes_sparse(self) -> bool:
        """`Quantizer.takes_sparse`: True (the per-tensor scale is the nonzeros' max)."""
        return True
