"""Export of fake-quantized tensors to integer codes plus scales.

A `QuantizedTensor` holds int8 (or uint8) codes and float32 scales with ``x_hat = codes * scale``
(zero point 0; B. Jacob et al., "Quantization and Training of Neural Networks for Efficient
Integer-Arithmetic-Only Inference", CVPR 2018, eq. 1 with ``Z = 0``). `export_quantizer` uses a
trained quantizer's own scale and code range, so that, for float32 ``x``,

    export_quantizer(q, x).dequantize() == q(x)      (bit-exact, ``q`` in eval mode)

Compiled vs eager: XLA compiles ``a / c`` for a constant ``c`` as ``a * (1 / c)``. The quantizers
of this package write such reciprocals explicitly, so they are exact against their export in
both modes; `FakeQuant` divides its max by a constant, so its export matches ``q(x)`` evaluated
under ``jax.jit`` / ``nnx.jit`` (as models run) and may differ by one ulp of the scale from an
eager (op-by-op) call.

`quantize_rows_int8` produces the per-row (per-node) int8 features with float32 scales that
`codesign.kernels.bsr_spmm_int8` consumes (it dequantizes ``x_q * scales[:, None]`` in the
kernel; the kernel module has no quantization helper of its own).
"""

from __future__ import annotations

import dataclasses
import functools
import numbers
from typing import Optional

import jax
import jax.numpy as jnp

from codesign.quant.degree import DegreeQuant
from codesign.quant.fake_quant import NO_QUANT_BITS, FakeQuant, qrange
from codesign.quant.learned_bits import LearnedBitQuant, learned_bit_codes
from codesign.quant.lsq import LSQQuant, check_float, lsq_codes

MAX_EXPORT_BITS = 8
"""Codes are stored as int8 (signed) or uint8 (unsigned), so at most 8 bits."""

@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class QuantizedTensor:
    """Integer codes with their scale(s); a pytree (``values``, ``scale``, ``row_bits`` are leaves).

    Fields:
      values: the integer codes ``k``: int8 [...] when ``signed``, uint8 [...] when unsigned (so
        8-bit unsigned codes ``0..255`` fit).
      scale: float32 step size(s), units of the original tensor: [] per tensor (``axis=None``),
        [C] per column of the last axis (``axis=-1``), or [N] per row (``axis=0``).
      row_bits: int32 [N] per-row bit-widths (per-node learned bits), or None when every code
        uses ``bits``.
      bits: int (static), the width every code fits in (the maximum of ``row_bits`` if set).
      signed: bool (static).
      axis: None, -1 or 0 (static), which axis ``scale`` indexes.
    """

    values: jax.Array
    scale: jax.Array
    row_bits: Optional[jax.Array]
    bits: int = dataclasses.field(metadata=dict(static=True))
    signed: bool = dataclasses.field(metadata=dict(static=True))
    axis: Optional[int] = dataclasses.field(metadata=dict(static=True))

    def dequantize(self, dtype=jnp.float32) -> jax.Array:
        """``values * scale`` (broadcast along ``axis``) in ``dtype`` (default float32); same shape
        as ``values``."""
        return self.values.astype(dtype) * _broadcast(self.scale.astype(dtype), self.axis, self.values.ndim)


def _broadcast(scale: jax.Array, axis: Optional[int], ndim: int) -> jax.Array:
    if scale.ndim == 0:
        return scale
    if axis == 0:
        return scale.reshape((-1,) + (1,) * (ndim - 1))
    return scale.reshape((1,) * (ndim - 1) + (-1,))  # [C] against the last axis


def _check_export_bits(bits, signed: bool) -> int:
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral):
        raise ValueError(f"bits must be an int, got bits={bits!r}")
    lo = 2 if signed else 1
    if not lo <= bits <= MAX_EXPORT_BITS:
        raise ValueError(f"bits must be in [{lo}, {MAX_EXPORT_BITS}] to export {'signed' if signed else 'unsigned'} "
                         f"codes as 8-bit integers, got {bits=}")
    return int(bits)


def _max_scale(x: jax.Array, hi: int, signed: bool, axis: Optional[int]) -> jax.Array:
    """``amax * (1 / hi)`` (1 where ``amax == 0``): the value `fake_quant`'s ``amax / hi`` takes
    when compiled (XLA turns a division by a constant into a multiplication by its reciprocal)."""
    vals = jnp.abs(x) if signed else jnp.maximum(x, 0)
    red = None if axis is None else (tuple(range(x.ndim - 1)) if axis == -1 else tuple(range(1, x.ndim)))
    amax = jnp.max(vals, axis=red)
    return jnp.where(amax > 0, amax * (1.0 / hi), jnp.ones_like(amax))


@functools.partial(jax.jit, static_argnames=("lo", "hi", "signed", "axis"))
def _quantize(x: jax.Array, scale: Optional[jax.Array], *, lo: int, hi: int, signed: bool,
              axis: Optional[int]) -> tuple[jax.Array, jax.Array]:
    """``(clip(round(x / scale), lo, hi), scale)``, with `_max_scale` when ``scale`` is None."""
    if scale is None:
        scale = _max_scale(x, hi, signed, axis)
    return jnp.clip(jnp.round(x / _broadcast(scale, axis, x.ndim)), lo, hi), scale


def _from_codes(codes: jax.Array, scale: jax.Array, bits: int, signed: bool, axis: Optional[int],
                row_bits: Optional[jax.Array] = None) -> QuantizedTensor:
    values = codes.astype(jnp.int8 if signed else jnp.uint8)
    return QuantizedTensor(values=values, scale=jnp.asarray(scale, jnp.float32), row_bits=row_bits, bits=bits,
                           signed=signed, axis=axis)


def quantize_to_int(x: jax.Array, bits: int, *, signed: bool = True, per_channel: bool = False,
                    scale=None) -> QuantizedTensor:
    """Uniform symmetric quantization of ``x`` to 8-bit integer codes in `qrange` ``(bits, signed)``.

    Same grid as `codesign.quant.fake_quant` (``-(2^(b-1)-1) .. 2^(b-1)-1`` signed, ``0 .. 2^b-1``
    unsigned): ``codes = clip(round(x / scale), lo, hi)``.

    Args:
      x: float [..., C].
      bits: int, [2, 8] signed or [1, 8] unsigned (int8 / uint8 storage).
      signed: code range.
      per_channel: one scale per column of the last axis (float32 [C]) instead of one per tensor.
      scale: explicit step(s) > 0 (float, or [C] when ``per_channel``); None means
        ``max|x| / hi`` (``max(x, 0) / hi`` unsigned), 1 where that max is 0.

    Returns:
      `QuantizedTensor` with ``axis=-1`` when ``per_channel`` else None; for ``scale=None`` and
      ``per_channel=False`` its ``dequantize()`` equals ``fake_quant(x, bits, signed=signed)``
      compiled with ``jax.jit`` (module docstring).

    Raises:
      ValueError: ``bits`` out of range; ``x`` not floating (or 0-d with ``per_channel``); a
        ``scale`` of the wrong shape or not > 0 (when concrete).
    """
    bits = _check_export_bits(bits, signed)
    x = check_float(x)
    if per_channel and x.ndim == 0:
        raise ValueError(f"per_channel needs x with at least one axis, got {x.shape=}")
    lo, hi = qrange(bits, signed)
    axis = -1 if per_channel else None
    if scale is not None:
        scale = jnp.asarray(scale, x.dtype)
        want = (x.shape[-1],) if per_channel else ()
        if scale.shape != want and not (per_channel and scale.shape == ()):
            raise ValueError(f"scale must have shape {want}, got {scale.shape=}")
        if not isinstance(scale, jax.core.Tracer) and not bool(jnp.all(scale > 0)):
            raise ValueError("scale must be > 0")
    codes, scale = _quantize(x, scale, lo=lo, hi=hi, signed=signed, axis=axis)
    return _from_codes(codes, scale, bits, signed, axis)


def quantize_rows_int8(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-row symmetric int8 quantization for `codesign.kernels.bsr_spmm_int8`.

    ``scales[i] = max_j |x[i, j]| / 127`` (1 for an all-zero row) and ``x_q = clip(round(x /
    scales[:, None]), -127, 127)``, so ``|x - x_q * scales[:, None]| <= scales[:, None] / 2``.

    Args:
      x: float [N, F] node features (in the kernel's padded node order if it is to be used there).

    Returns:
      ``(x_q, scales)``: int8 [N, F] and float32 [N].

    Raises:
      ValueError: ``x`` not a 2-D floating array.
    """
    x = check_float(x)
    if x.ndim != 2:
        raise ValueError(f"x must be [N, F], got {x.shape=}")
    _, hi = qrange(8, True)
    codes, scale = _quantize(x, None, lo=-hi, hi=hi, signed=True, axis=0)
    return codes.astype(jnp.int8), scale.astype(jnp.float32)


def _concrete_true(flag) -> bool:
    return isinstance(flag, jax.core.Tracer) or bool(flag)


def export_quantizer(q, x: jax.Array) -> QuantizedTensor:
    """Integer export of ``q(x)`` with ``q``'s own scale and code range (eval-mode semantics).

    * `FakeQuant`: ``quantize_to_int(x, q.bits, signed=q.signed)`` (max-based per-tensor scale).
    * `LSQQuant`: the learned step ``q.step_size()`` and LSQ's range ``[-Qn, Qp]``
      (``axis=-1`` if per channel).
    * `LearnedBitQuant`: the step ``d``, codes ``round(clip(x, +-q_max) / d)``, ``bits`` the
      largest of ``q.hard_bits()``; per node: ``axis=0`` and ``row_bits = q.hard_bits()``.
    * `DegreeQuant`: the eval-mode scale over all rows (no protection).

    Args:
      q: a trained quantizer of the types above.
      x: float32 tensor that ``q`` quantizes (shape as ``q`` requires).

    Returns:
      `QuantizedTensor` with ``dequantize() == q(x)`` bit-exactly for float32 ``x`` (``q`` in eval
      mode; for `FakeQuant`, ``q(x)`` under jit, see the module docstring).

    Raises:
      ValueError: the bit-width exceeds 8 (or means full precision); LSQ /
        learned-bit quantizer not initialised yet (call it once on data first); bad ``x``.
      TypeError: ``q`` of another type.
    """
    x = check_float(x)
    if isinstance(q, FakeQuant):
        if q.bits is None or q.bits >= NO_QUANT_BITS:
            raise ValueError(f"q.bits={q.bits} means full precision: nothing to export")
        return quantize_to_int(x, q.bits, signed=q.signed)
    if isinstance(q, LSQQuant):
        if not _concrete_true(q.initialized[...]):
            raise ValueError("q.initialized is False: call the LSQQuant once on data before exporting")
        bits = _check_export_bits(q.bits, q.signed)  # LSQ's [-2^(b-1), 2^(b-1)-1] fits int8 too
        q._check_x(x)
        step = q.step_size()
        return _from_codes(lsq_codes(x, step, bits, signed=q.signed), step, bits, q.signed,
                           -1 if q.per_channel else None)
    if isinstance(q, LearnedBitQuant):
        if not _concrete_true(q.initialized[...]):
            raise ValueError("q.initialized is False: call the LearnedBitQuant once on data before exporting")
        q._check_x(x)
        hb = q.hard_bits()
        bits = _check_export_bits(int(jnp.max(hb)), q.signed)
        d = q.step_size()
        row = q._per_row
        codes = learned_bit_codes(x, row(d), row(q.range_max()), signed=q.signed)
        per_node = q.per_node is not None
        return _from_codes(codes, d, bits, q.signed, 0 if per_node else None,
                           row_bits=hb.astype(jnp.int32) if per_node else None)
    if isinstance(q, DegreeQuant):
        bits = _check_export_bits(q.bits, q.signed)
        if x.ndim == 0 or x.shape[0] != q.n_nodes:
            raise ValueError(f"x must have N={q.n_nodes} rows, got {x.shape=}")
        lo, hi = qrange(bits, q.signed)
        codes, scale = _quantize(x, q.scale(x).astype(x.dtype), lo=lo, hi=hi, signed=q.signed, axis=None)
        return _from_codes(codes, scale, bits, q.signed, None)
    raise TypeError(f"q must be a FakeQuant, LSQQuant, LearnedBitQuant or DegreeQuant, got {type(q).__name__}")
