"""Learned Step Size Quantization (LSQ), the `QuantStep` variable type and the straight-through pieces.

Source: S. K. Esser, J. L. McKinstry, D. Bablani, R. Appuswamy, D. S. Modha, "Learned Step Size
Quantization", ICLR 2020 (arXiv:1902.08153). With step size ``s > 0`` and the code range
``[-Qn, Qp]`` (paper Sec. 2: ``Qn = 2^(b-1)``, ``Qp = 2^(b-1) - 1`` signed; ``Qn = 0``,
``Qp = 2^b - 1`` unsigned; note the signed range is the full two's-complement range, unlike the
symmetric `codesign.quant.fake_quant`):

    v     = x / s
    x_hat = round(clip(v, -Qn, Qp)) * s                                   (paper eq. 1-2)
    d x_hat / d s = -v + round(v)  if -Qn < v < Qp,  -Qn if v <= -Qn,  Qp if v >= Qp   (eq. 3)
    d x_hat / d x = 1 if -Qn < v < Qp else 0                 (straight-through estimator, Sec. 2)
    gradient of s scaled by g = 1 / sqrt(N * Qp)                          (Sec. 2.2)
    initial s = 2 * mean(|x|) / sqrt(Qp)                                  (Sec. 2)

``N`` is the number of elements that share one step size (the whole tensor per-tensor, one
column per-channel). ``x / s`` is computed as ``x * (1 / s)``: XLA rewrites a division by a
compile-time constant into a multiplication by its reciprocal, so writing the reciprocal
explicitly gives the same codes in eager and compiled evaluation, whether ``s`` is traced or
constant (the export in `codesign.quant.export` relies on it).

The gradient scale is applied with a ``custom_jvp`` whose forward is the identity
(`scale_grad`); it has the derivative of the paper's ``x*g + stop_gradient(x - x*g)`` trick but
returns ``x`` bit-exactly, which the export relies on as well.

Every value here is unitless or in the units of ``x``.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Optional, final

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from codesign.quant.fake_quant import Quantizer

STEP_EPS = 1e-8
"""The effective step is ``|s| + STEP_EPS`` (units of ``x``): keeps it > 0 whatever sign the
optimizer drives the stored parameter to. Below float32 resolution for steps >= ~0.1; it only
matters when ``s`` collapses towards 0."""

MAX_LSQ_BITS = 16
"""Largest bit-width accepted by `LSQQuant` (codes must stay exact integers in float32)."""

INIT_METHODS = ("lsq", "max", "percentile")
"""Data-dependent initialisations of `LSQQuant`: the paper's ``2 mean|x| / sqrt(Qp)``, or the
post-training-quantization calibrations ``amax / Qp`` (max or percentile of ``|x|``)."""


class QuantStep(nnx.Param):
    """Variable type of learned quantizer step sizes / scales (pattern of ``LoRAParam``).

    ``nnx.state(model, QuantStep)`` collects them; ``nnx.All(nnx.Param, nnx.Not(QuantStep))``
    excludes them from the weights, e.g. to give step sizes their own optimizer or learning rate.
    """


@jax.custom_jvp
def round_ste(x: jax.Array) -> jax.Array:
    """``round(x)`` (half to even) with the straight-through gradient ``d/dx = 1`` (Bengio et al.
    2013, arXiv:1308.3432). Forward is exactly ``jnp.round(x)``; same shape and dtype as ``x``."""
    return jnp.round(x)


@round_ste.defjvp
def _round_ste_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jnp.round(x), t


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def scale_grad(x: jax.Array, g: float) -> jax.Array:
    """Identity in the forward pass, gradient multiplied by ``g`` (LSQ Sec. 2.2 "grad scale").

    Returns ``x`` unchanged (bit-exact), unlike ``x*g + stop_gradient(x - x*g)`` whose forward
    value can differ from ``x`` by a rounding error. ``g`` is a Python float (static).
    """
    return x


@scale_grad.defjvp
def _scale_grad_jvp(g, primals, tangents):
    (x,), (t,) = primals, tangents
    return x, t * jnp.asarray(g, t.dtype)


def _check_lsq_bits(bits, signed: bool) -> int:
    if isinstance(bits, bool) or not isinstance(bits, numbers.Integral):
        raise TypeError(f"bits: must be an int, got {bits!r} ({type(bits).__name__})")
    min_bits = 2 if signed else 1
    if not min_bits <= int(bits) <= MAX_LSQ_BITS:
        raise ValueError(f"bits: must be in [{min_bits}, {MAX_LSQ_BITS}] for "
                         f"{'signed' if signed else 'unsigned'} LSQ, got {bits}")
    return int(bits)


def lsq_range(bits: int, signed: bool = True) -> tuple[int, int]:
    """``(Qn, Qp)`` of LSQ (paper Sec. 2): ``(2^(b-1), 2^(b-1)-1)`` signed, ``(0, 2^b-1)`` unsigned.

    Codes lie in ``[-Qn, Qp]``. Raises ValueError: ``bits`` not in ``[2, 16]`` (signed) or
    ``[1, 16]`` (unsigned); TypeError: ``bits`` not an int.
    """
    b = _check_lsq_bits(bits, signed)
    return (2 ** (b - 1), 2 ** (b - 1) - 1) if signed else (0, 2**b - 1)


def check_float(x, name: str = "x") -> jax.Array:
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(f"{name} must be a floating array, got {name}.dtype={x.dtype}")
    return x


def _clip_codes(v: jax.Array, lo: float, hi: float) -> jax.Array:
    """``clip(v, lo, hi)`` whose gradient is 1 strictly inside and 0 at or beyond the bounds
    (``jnp.clip`` splits the gradient at ties), as LSQ eq. 3 specifies."""
    return jnp.where(v >= hi, jnp.asarray(hi, v.dtype), jnp.where(v <= lo, jnp.asarray(lo, v.dtype), v))


def _per_channel(step: jax.Array, ndim: int) -> jax.Array:
    """A [C] step reshaped to ``[1, ..., 1, C]`` (rank ``ndim``) for explicit broadcasting."""
    return step.reshape((1,) * (ndim - 1) + (-1,)) if step.ndim == 1 else step


def lsq_codes(x: jax.Array, step: jax.Array, bits: int, *, signed: bool = True) -> jax.Array:
    """Integer codes ``round(clip(x / step, -Qn, Qp))`` as floats (no gradient tricks).

    Args:
      x: float [..., C] (or [...] with a scalar step).
      step: step size > 0, float scalar or [C] (broadcast over the last axis of ``x``).
      bits, signed: see `lsq_range`.

    Returns:
      float [...] (dtype of ``x``) with integer values in ``[-Qn, Qp]``.
    """
    qn, qp = lsq_range(bits, signed)
    return _lsq_codes(check_float(x), jnp.asarray(step), qn, qp)


@functools.partial(jax.jit, static_argnames=("qn", "qp"))
def _lsq_codes(x: jax.Array, step: jax.Array, qn: int, qp: int) -> jax.Array:
    s = _per_channel(step, x.ndim).astype(x.dtype)
    return jnp.round(_clip_codes(x * (1.0 / s), -qn, qp))


def lsq_quant(x: jax.Array, step: jax.Array, bits: int, *, signed: bool = True,
              grad_scale: Optional[float] = None) -> jax.Array:
    """LSQ fake quantization ``round(clip(x / s, -Qn, Qp)) * s`` with the paper's gradients (eq. 1-3).

    Args:
      x: float [..., C] (any float dtype; computed in that dtype).
      step: the step size ``s`` (> 0, units of ``x``): float scalar (per tensor) or [C] (per
        channel, broadcast over the last axis of ``x``). Its gradient is the LSQ formula
        (module docstring) times ``grad_scale``.
      bits: int in [2, 16] signed, [1, 16] unsigned.
      signed: signed ``[-2^(b-1), 2^(b-1)-1]`` or unsigned ``[0, 2^b-1]`` code range.
      grad_scale: ``g``; default ``1 / sqrt(N * Qp)`` with ``N = x.size / step.size`` elements
        per step size (LSQ Sec. 2.2).

    Returns:
      ``x_hat``, shape and dtype of ``x``: ``step * k`` with integer ``k`` in ``[-Qn, Qp]``.

    Raises:
      ValueError: invalid ``bits``; ``x`` not floating; ``step`` neither a scalar nor
        ``[x.shape[-1]]``.
      TypeError: ``bits`` not an int.
    """
    qn, qp = lsq_range(bits, signed)
    x = check_float(x)
    step = jnp.asarray(step)
    if step.ndim > 1 or (step.ndim == 1 and (x.ndim == 0 or step.shape[0] != x.shape[-1])):
        raise ValueError(f"step must be a scalar or [x.shape[-1]], got {step.shape=} for {x.shape=}")
    if grad_scale is None:
        n_per_step = max(x.size // max(step.size, 1), 1)
        grad_scale = 1.0 / math.sqrt(n_per_step * qp)
    return _lsq_quant(x, step, qn, qp, float(grad_scale))


@functools.partial(jax.jit, static_argnames=("qn", "qp", "grad_scale"))
def _lsq_quant(x: jax.Array, step: jax.Array, qn: int, qp: int, grad_scale: float) -> jax.Array:
    s = _per_channel(scale_grad(step, grad_scale), x.ndim).astype(x.dtype)
    return round_ste(_clip_codes(x * (1.0 / s), -qn, qp)) * s


def init_once(initialized: jax.Array, current, data_init):
    """``current`` if ``initialized`` else ``data_init()``; a ``lax.cond`` when the flag is traced
    (under ``nnx.jit``), a Python branch when it is concrete (cheaper in eager mode)."""
    if isinstance(initialized, jax.core.Tracer):
        return jax.lax.cond(initialized, lambda c: c, lambda _: data_init(), current)
    return current if bool(initialized) else data_init()


@functools.partial(jax.jit, static_argnames=("signed", "percentile", "per_channel"))
def calib_amax(x: jax.Array, *, signed: bool, percentile: Optional[float] = None,
                per_channel: bool = False, where: Optional[jax.Array] = None) -> jax.Array:
    """Calibrated range: max (or ``percentile``-th percentile, in (0, 100]) of ``|x|`` (signed) or
    ``max(x, 0)`` (unsigned), over the entries where ``where`` is True (all if None). Float32
    scalar, or [C] per last-axis column when ``per_channel``; 0 where no entry is selected."""
    vals = jnp.abs(x) if signed else jnp.maximum(x, 0)
    vals = vals.astype(jnp.float32)
    if where is not None:
        vals = jnp.where(where, vals, jnp.nan)
    axis = tuple(range(x.ndim - 1)) if per_channel else None
    if percentile is None:
        amax = jnp.nanmax(vals, axis=axis)
    else:
        amax = jnp.nanpercentile(vals, percentile, axis=axis)
    return jnp.where(jnp.isnan(amax), 0.0, amax)


def check_percentile(percentile) -> Optional[float]:
    if percentile is None:
        return None
    if isinstance(percentile, bool) or not isinstance(percentile, numbers.Real) or not 0 < percentile <= 100:
        raise ValueError(f"percentile must be a float in (0, 100] or None, got {percentile=!r}")
    return float(percentile)


def lsq_init_step(x: jax.Array, bits: int, *, signed: bool = True, per_channel: bool = False,
                  method: str = "lsq", percentile: Optional[float] = None) -> jax.Array:
    """Data-dependent initial step size (float32 scalar, or [C] per last-axis column).

    ``method="lsq"``: ``2 mean|x| / sqrt(Qp)`` (LSQ Sec. 2). ``"max"``: ``max|x| / Qp``;
    ``"percentile"``: ``percentile(|x|) / Qp`` (post-training calibration, as in B. Jacob et al.,
    CVPR 2018 / H. Wu et al., arXiv:2004.09602 Sec. 3.4). Unsigned uses ``max(x, 0)`` for the
    max/percentile methods. Where the statistic is 0 (all-zero input) the step is 1.

    Raises:
      ValueError: invalid ``bits``, ``method`` or ``percentile``; ``x`` not floating.
      TypeError: ``bits`` not an int.
    """
    _, qp = lsq_range(bits, signed)
    x = check_float(x)
    if method not in INIT_METHODS:
        raise ValueError(f"method must be one of {INIT_METHODS}, got {method=!r}")
    pct = check_percentile(percentile if method == "percentile" else None)
    if method == "percentile" and pct is None:
        raise ValueError("percentile must be given when method='percentile'")
    return _lsq_init_step(x, qp=qp, signed=signed, per_channel=per_channel, method=method, percentile=pct)


@functools.partial(jax.jit, static_argnames=("qp", "signed", "per_channel", "method", "percentile"))
def _lsq_init_step(x, *, qp, signed, per_channel, method, percentile):
    if method == "lsq":
        axis = tuple(range(x.ndim - 1)) if per_channel else None
        stat = 2.0 * jnp.mean(jnp.abs(x).astype(jnp.float32), axis=axis) * (1.0 / math.sqrt(qp))
    else:
        stat = calib_amax(x, signed=signed, percentile=percentile, per_channel=per_channel) * (1.0 / qp)
    return jnp.where(stat > 0, stat, 1.0).astype(jnp.float32)


@functools.partial(jax.jit, static_argnames=("qp", "signed", "per_channel"))
def _cap_step(x: jax.Array, step: jax.Array, *, qp: int, signed: bool, per_channel: bool) -> jax.Array:
    """``min(|step|, amax / Qp)`` (`LSQQuant` ``cap_step``); unchanged where ``amax`` is 0. The
    projection is in the forward pass, so the gradient flows to the (projected) step as usual."""
    cap = calib_amax(x, signed=signed, per_channel=per_channel) * (1.0 / qp)
    return jnp.where(cap > 0, jnp.minimum(jnp.abs(step), cap), step).astype(step.dtype)


@final
class LSQQuant(Quantizer):
    """LSQ fake-quantization layer with a learned step size (`QuantStep`).

    The step is initialised from the data at the first call (`lsq_init_step`), unless
    ``init_scale`` is given. The flag ``initialized`` is an ``nnx.Variable`` and the update is a
    ``jax.lax.cond`` on it when traced, so this also works when the first call is traced inside
    ``nnx.jit`` / ``nnx.grad``: that call writes the initial step into the module (the step gets a
    zero gradient on that first call, because the forward pass used the data-derived value).

    Quantizer protocol: ``__call__(x) -> x_hat``; ``expected_bits()`` = float32 ``bits``;
    ``hard_bits()`` = ``bits``. No train/eval difference (no ``deterministic`` attribute).

    Attributes:
      step: `QuantStep` float32 [] (per tensor) or [n_channels] (per channel); the effective step
        is ``|step| + STEP_EPS`` (`step_size`).
      initialized: ``nnx.Variable`` bool [].
      bits, signed, per_channel, init_method, percentile: static.

    Example::

      self.q_x = LSQQuant(4, signed=False)              # in __init__
      h = self.linear(self.q_x(x))                      # in __call__
    """

    def __init__(self, bits: int, *, signed: bool = True, per_channel: bool = False,
                 n_channels: Optional[int] = None, init_scale: Optional[float] = None,
                 init_method: str = "lsq", percentile: Optional[float] = None, cap_step: bool = False):
        """Args:
          bits: int in [2, 16] signed, [1, 16] unsigned.
          signed: code range (see `lsq_range`).
          per_channel: one step per column of the last axis (needs ``n_channels``).
          n_channels: the size of the last axis of ``x`` when ``per_channel``.
          init_scale: initial step (float > 0); None means data-dependent at the first call.
          init_method: data-dependent initialisation, one of `INIT_METHODS` (default the paper's).
          percentile: for ``init_method="percentile"``, in (0, 100].
          cap_step: at every call, project the stored step onto ``(0, amax / Qp]`` with ``amax``
            the max of ``|x|`` (unsigned: ``max(x, 0)``) of that call, per tensor or column, and
            write it back (projected gradient descent, like the admissible-range constraint of
            Uhlich et al., ICLR 2020, Sec. 2). A larger step leaves the top codes unused and
            only acts as a gain on ``x``. Our addition, for sparse non-negative activations
            (`make_quantizer` turns it on for node features): on Cora GCN at 4 bits the
            bag-of-words step drifted from max/Qp = 0.067 to 0.093 under the task gradient (a
            gain the first layer's weight decay does not see), rounding every entry of rows
            with > 21 words to 0; test accuracy 76.5 % (2 seeds) vs 80.95 % fixed.

        Raises:
          ValueError: invalid ``bits``, ``n_channels`` (missing or < 1 when ``per_channel``),
            ``init_scale`` (not a finite float > 0), ``init_method`` or ``percentile``.
          TypeError: ``bits`` not an int.
        """
        self.bits = _check_lsq_bits(bits, signed)
        self.signed = bool(signed)
        self.per_channel = bool(per_channel)
        if per_channel:
            if isinstance(n_channels, bool) or not isinstance(n_channels, numbers.Integral) or n_channels < 1:
                raise ValueError(f"n_channels must be an int >= 1 when per_channel=True, got {n_channels=!r}")
            shape: tuple[int, ...] = (int(n_channels),)
        else:
            shape = ()
        if init_scale is not None and (isinstance(init_scale, bool) or not isinstance(init_scale, numbers.Real)
                                       or not (math.isfinite(init_scale) and init_scale > 0)):
            raise ValueError(f"init_scale must be a finite float > 0 or None, got {init_scale=!r}")
        if init_method not in INIT_METHODS:
            raise ValueError(f"init_method must be one of {INIT_METHODS}, got {init_method=!r}")
        self.percentile = check_percentile(percentile)
        if init_method == "percentile" and self.percentile is None:
            raise ValueError("percentile must be given when init_method='percentile'")
        self.init_method = init_method
        self.cap_step = bool(cap_step)
        s0 = np.full(shape, 1.0 if init_scale is None else float(init_scale), np.float32)  # host: no compile
        self.step = QuantStep(jnp.asarray(s0))
        self.initialized = nnx.Variable(jnp.asarray(init_scale is not None))

    def step_size(self) -> jax.Array:
        """Effective step ``|step| + STEP_EPS``: float32 [] or [n_channels], > 0, units of ``x``."""
        return jnp.abs(self.step[...]) + STEP_EPS

    def _check_x(self, x) -> jax.Array:
        x = check_float(x)
        if self.per_channel and (x.ndim == 0 or x.shape[-1] != self.step.shape[0]):
            raise ValueError(f"x.shape[-1] must equal n_channels={self.step.shape[0]}, got {x.shape=}")
        return x

    def __call__(self, x: jax.Array) -> jax.Array:
        """Fake-quantized ``x`` (`lsq_quant`), same shape and dtype; initialises the step first if needed.

        Raises:
          ValueError: ``x`` not floating, or its last axis is not ``n_channels`` (per channel).
        """
        x = self._check_x(x)

        def data_init():
            return lsq_init_step(jax.lax.stop_gradient(x), self.bits, signed=self.signed,
                                 per_channel=self.per_channel, method=self.init_method, percentile=self.percentile)

        # The statistic (a sort for percentiles) is only computed on the first call.
        self.step[...] = init_once(self.initialized[...], self.step[...], data_init)
        self.initialized[...] = jnp.asarray(True)
        if self.cap_step:
            self.step[...] = _cap_step(jax.lax.stop_gradient(x), self.step[...], qp=lsq_range(self.bits, self.signed)[1],
                                       signed=self.signed, per_channel=self.per_channel)
        return lsq_quant(x, self.step_size(), self.bits, signed=self.signed)

    def expected_bits(self) -> jax.Array:
        """float32 scalar ``bits`` (fixed bit-width; no gradient)."""
        return jnp.asarray(self.bits, jnp.float32)

    def hard_bits(self) -> int:
        """Deployed bit-width (int)."""
        return self.bits

    def takes_sparse(self) -> bool:
        """`Quantizer.takes_sparse`: False (the initial step reads ``mean |x|``, zeros included)."""
        return False

    def reset(self, init_method: Optional[str] = None, percentile: Optional[float] = None) -> None:
        """Marks the step as uninitialised, so the next call re-initialises it from the data.

        ``init_method`` / ``percentile`` (if given) replace the initialisation (e.g. ``"max"`` for
        post-training calibration).

        Raises:
          ValueError: invalid ``init_method`` or ``percentile``.
        """
        if init_method is not None:
            if init_method not in INIT_METHODS:
                raise ValueError(f"init_method must be one of {INIT_METHODS}, got {init_method=!r}")
            pct = check_percentile(percentile) if percentile is not None else self.percentile
            if init_method == "percentile" and pct is None:
                raise ValueError("percentile must be given when init_method='percentile'")
            self.init_method, self.percentile = init_method, pct
        self.initialized[...] = jnp.asarray(False)
