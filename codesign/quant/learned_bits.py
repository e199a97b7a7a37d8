"""Learned bit-widths (the ``(d, q_max)`` parametrization), the `BitParam` type and the protocol helpers.

Source: S. Uhlich, L. Mauch, F. Cardinaux, K. Yoshiyama, J. A. Garcia, S. Tiedemann, T. Kemp,
A. Nakamura, "Mixed Precision DNNs: All you need is a good parametrization", ICLR 2020
(arXiv:1905.11452), Sec. 2 and Table 1, case "U2": learn the step size ``d`` and the dynamic
range ``q_max``; the bit-width is a derived, differentiable quantity

    signed:    b = log2(q_max / d + 1) + 1        codes in [-(2^(b-1)-1), 2^(b-1)-1]
    unsigned:  b = log2(q_max / d + 1)            codes in [0, 2^b - 1]
    x_hat = d * round(clip(x, -q_max, q_max) / d)           (unsigned: clip to [0, q_max])

Gradients (straight-through ``round``, as in the paper's Sec. 2): ``d x_hat / d x = 1`` inside the
range and 0 outside; ``d x_hat / d q_max = sign(x)`` outside the range; ``d x_hat / d d =
round(c / d) - c / d`` with ``c`` the clipped value. (The paper returns exactly ``sign(x) q_max``
outside the range; we round the clipped value to the grid so that every output is ``d`` times
an integer code and the tensor can be exported exactly; the ``q_max`` gradient is the same.)

Constraints: the effective step is ``|d| + STEP_EPS`` and the effective range is ``|q_max|``
clamped to ``[d L(min_bits), d L(max_bits)]`` (``L(b) = 2^(b-1) - 1`` signed, ``2^b - 1``
unsigned), so ``b`` stays in ``[min_bits, max_bits]``. The clamp is straight-through (forward
clamped, gradient as if unclamped), so a bit-width at a bound still gets a gradient that can move
it back; the stored ``q_max`` may therefore sit outside the box. Uhlich et al. constrain the
parameters to admissible ranges instead; a trainer may also clip them after each update.

Values are in the units of ``x``; bits are unitless.
"""

from __future__ import annotations

import functools
import math
import numbers
from typing import Mapping, Optional, Sequence, final

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from codesign.kernels.features import SparseFeatures
from codesign.quant.fake_quant import NO_QUANT_BITS, Quantizer
from codesign.quant.lsq import STEP_EPS, QuantStep, check_float, init_once, round_ste

MAX_LEARNED_BITS = 16
"""Largest ``max_bits`` accepted by `LearnedBitQuant` (export to int8 needs ``<= 8``)."""


class BitParam(nnx.Param):
    """Variable type of learned bit-width parameters (here the dynamic range ``q_max`` that,
    with the step size, determines the bit-width).

    ``nnx.state(model, BitParam)`` collects them, e.g. to give them their own optimizer /
    learning rate; ``nnx.All(nnx.Param, nnx.Not(nnx.Any(BitParam, QuantStep)))`` selects the
    ordinary weights.
    """


def levels(bits, signed: bool = True):
    """Largest code ``L(b)``: ``2^(b-1) - 1`` signed, ``2^b - 1`` unsigned (float or array ``b``)."""
    return 2.0 ** (bits - 1) - 1.0 if signed else 2.0**bits - 1.0


@functools.partial(jax.jit, static_argnames="signed")
def bits_from_range(d: jax.Array, qmax: jax.Array, *, signed: bool = True) -> jax.Array:
    """Continuous bit-width ``log2(q_max / d + 1) + 1`` (signed) or ``log2(q_max / d + 1)``
    (unsigned) (Uhlich et al. 2020, Table 1, case U2).

    Args:
      d: step size > 0, float [...].
      qmax: dynamic range >= 0, float [...] (broadcast with ``d``).

    Returns:
      float [...] bits, differentiable in ``d`` and ``qmax``.
    """
    d, qmax = jnp.asarray(d), jnp.asarray(qmax)
    return jnp.log2(qmax / d + 1.0) + (1.0 if signed else 0.0)


def learned_bit_quant(x: jax.Array, d: jax.Array, qmax: jax.Array, *, signed: bool = True) -> jax.Array:
    """``d * round(clip(x, -q_max, q_max) / d)`` (unsigned: clip to ``[0, q_max]``) with the
    straight-through gradients of the module docstring.

    Args:
      x: float [...] (computed in its dtype).
      d: step size > 0, broadcastable to ``x`` (e.g. [] per tensor or [N, 1] per row).
      qmax: range > 0, broadcastable to ``x``.

    Returns:
      ``x_hat``, shape and dtype of ``x``; ``x_hat / d`` is an integer in
      ``[-round(q_max/d), round(q_max/d)]`` (``[0, ...]`` unsigned).

    Raises:
      ValueError: ``x`` not floating.
    """
    return _learned_bit_quant(check_float(x), jnp.asarray(d), jnp.asarray(qmax), signed=signed)


@functools.partial(jax.jit, static_argnames="signed")
def _learned_bit_quant(x: jax.Array, d: jax.Array, qmax: jax.Array, *, signed: bool) -> jax.Array:
    d = d.astype(x.dtype)
    return d * round_ste(_clip_range(x, qmax, signed) * (1.0 / d))  # reciprocal: see `lsq` docstring


def _clip_range(x: jax.Array, qmax: jax.Array, signed: bool) -> jax.Array:
    """Clip to ``[-qmax, qmax]`` (``[0, qmax]`` unsigned); where-based, so the gradient goes to
    ``x`` strictly inside and to the bound outside (``jnp.clip`` splits it at ties)."""
    qmax = jnp.asarray(qmax).astype(x.dtype)
    lo = -qmax if signed else jnp.zeros_like(qmax)
    return jnp.where(x >= qmax, qmax, jnp.where(x <= lo, lo, x))


def learned_bit_codes(x: jax.Array, d: jax.Array, qmax: jax.Array, *, signed: bool = True) -> jax.Array:
    """The integer codes of `learned_bit_quant`, ``round(clip(x) / d)`` (floats of ``x``'s dtype,
    no gradient tricks); ``learned_bit_quant(x, d, qmax) == d * codes`` exactly.

    Raises:
      ValueError: ``x`` not floating.
    """
    return _learned_bit_codes(check_float(x), jnp.asarray(d), jnp.asarray(qmax), signed=signed)


@functools.partial(jax.jit, static_argnames="signed")
def _learned_bit_codes(x: jax.Array, d: jax.Array, qmax: jax.Array, *, signed: bool) -> jax.Array:
    return jnp.round(_clip_range(x, qmax, signed) * (1.0 / d.astype(x.dtype)))


@functools.partial(jax.jit, static_argnames="signed")
def code_bits(max_code: jax.Array, *, signed: bool = True) -> jax.Array:
    """Fewest bits holding the integer codes ``[-k, k]`` (signed) or ``[0, k]`` (unsigned), ``k =
    max_code >= 0``: ``bit_length(k) + 1`` signed, ``bit_length(k)`` unsigned. int32 [...]."""
    k = jnp.asarray(max_code).astype(jnp.int32)
    bit_length = 32 - jax.lax.clz(k)
    return bit_length + (1 if signed else 0)


@jax.custom_jvp
def _st_clip(v: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """``clip(v, lo, hi)`` exactly in the forward pass; derivative 1 in ``v`` and 0 in the bounds
    (straight-through). ``v + stop_gradient(clip(v) - v)`` would be off by a rounding error of
    ``v``'s magnitude when ``v`` is far outside the bounds."""
    return jnp.clip(v, lo, hi)


@_st_clip.defjvp
def _st_clip_jvp(primals, tangents):
    (v, lo, hi), (t, _, _) = primals, tangents
    return jnp.clip(v, lo, hi), t


def _check_int(value, name: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {name}={value!r}")
    return int(value)


@final
class LearnedBitQuant(Quantizer):
    """Fake quantization with a learned step ``d`` (`QuantStep`) and range ``q_max`` (`BitParam`),
    hence a learned, differentiable bit-width; per tensor or per node (one row of ``x`` each).

    Per node (``per_node=N``) is for transductive full-batch graphs: ``x`` is [N, F] and row
    ``i`` uses ``d[i]``, ``q_max[i]``, as the per-node bit-widths of A^2Q (Zhu et al., ICLR
    2023, arXiv:2302.00193); initialise those from the degrees with
    `codesign.quant.degree.a2q_init_bits`.

    Initialisation at the first call (unless ``init_qmax``): ``q_max = max|x|`` (unsigned:
    ``max(x, 0)``) over the tensor or each row (1 where that is 0), and ``d = q_max /
    L(init_bits)``, so the continuous bit-width starts at exactly ``init_bits``. Works inside
    ``nnx.jit`` (an ``nnx.Variable`` flag and ``jax.lax.cond`` when traced).

    Quantizer protocol: ``__call__(x) -> x_hat``; ``expected_bits()`` the mean continuous
    bit-width (differentiable); ``hard_bits()`` the deployed integer bit-width(s). No train/eval
    difference.

    Attributes:
      step: `QuantStep` float32 [] or [N], the step ``d`` (effective ``|d| + STEP_EPS``).
      qmax: `BitParam` float32 [] or [N], the range (effective: see the module docstring).
      init_bits: ``nnx.Variable`` float32 [] or [N], used by the data-dependent initialisation.
      initialized: ``nnx.Variable`` bool [].
      signed, per_node, min_bits, max_bits: static.
    """

    def __init__(self, init_bits=4.0, *, signed: bool = True, per_node: Optional[int] = None,
                 min_bits: Optional[int] = None, max_bits: int = 8, init_qmax: Optional[float] = None,
                 cap_range: bool = False, pin_range: bool = False):
        """Args:
          init_bits: initial continuous bit-width: a float, or a float array [per_node] (one per
            node), within ``[min_bits, max_bits]``.
          signed: symmetric signed range ``[-q_max, q_max]`` or unsigned ``[0, q_max]``.
          per_node: number of nodes N for per-row parameters, or None for one (d, q_max).
          min_bits: lower bound of the bit-width, int; default 2 signed, 1 unsigned (also the
            smallest allowed).
          max_bits: upper bound, int in ``[min_bits, 16]``.
          init_qmax: initial range (float > 0); None means data-dependent at the first call.
          cap_range: at every call, project the stored parameters onto the admissible set
            ``q_max <= amax`` and ``d <= amax / L(min_bits)`` with ``amax`` the max of ``|x|``
            (unsigned: ``max(x, 0)``) of that call, per tensor or row, and write them back
            (Uhlich et al. 2020 constrain parameters to admissible ranges; this box is ours). A
            range above the data max only adds unused codes (bits the cost model pays for) and
            acts as a gain on ``x``; a step above ``amax / L(min_bits)`` rounds the whole tensor
            or row to 0. `make_quantizer` turns it on for node features (measured reason there).
          pin_range: like ``cap_range``, but ``q_max`` is set to ``amax`` itself at every call
            and ``d`` is rescaled by the same factor (the bit-width is kept), so only the
            bit-width is learned and the range follows the data. Hidden features grow by an
            order of magnitude during training from their epoch-0 initialisation: with ``d``
            left in place the bits of Cora's per-node hidden tensor rose from 4 to 7. With
            ``per_node`` a learned ``q_max`` is a free gain on every node's row (N parameters the
            task loss can fit); measured on Cora GCN (A^2Q-style per-node bits on the hidden
            features) train accuracy 99 % and test 37.5 % (2 seeds). Implies ``cap_range``.

        Raises:
          ValueError: any argument outside the ranges above, ``init_bits`` not finite, or an
            ``init_bits`` array whose shape is not ``[per_node]``.
        """
        self.signed = bool(signed)
        floor_bits = 2 if signed else 1
        self.min_bits = floor_bits if min_bits is None else _check_int(min_bits, "min_bits", floor_bits)
        self.max_bits = _check_int(max_bits, "max_bits", self.min_bits)
        if self.max_bits > MAX_LEARNED_BITS:
            raise ValueError(f"max_bits must be <= {MAX_LEARNED_BITS}, got max_bits={max_bits}")
        self.per_node = None if per_node is None else _check_int(per_node, "per_node", 1)
        shape: tuple[int, ...] = () if self.per_node is None else (self.per_node,)
        if isinstance(init_bits, bool):
            raise ValueError(f"init_bits must be a float or a float array, got {init_bits=!r}")
        b0 = np.asarray(init_bits, np.float64)
        if b0.ndim > 0 and b0.shape != shape:
            raise ValueError(f"init_bits must be a scalar or of shape {shape} (per_node), got {b0.shape=}")
        if not np.all(np.isfinite(b0)) or np.any(b0 < self.min_bits) or np.any(b0 > self.max_bits):
            raise ValueError(f"init_bits must be finite and in [min_bits={self.min_bits}, "
                             f"max_bits={self.max_bits}], got range [{b0.min()}, {b0.max()}]")
        if init_qmax is not None and (isinstance(init_qmax, bool) or not isinstance(init_qmax, numbers.Real)
                                      or not (math.isfinite(init_qmax) and init_qmax > 0)):
            raise ValueError(f"init_qmax must be a finite float > 0 or None, got {init_qmax=!r}")
        # numpy on the host: no per-shape device computation at construction
        b0 = np.broadcast_to(b0, shape).astype(np.float32)
        q0 = np.full(shape, 1.0 if init_qmax is None else float(init_qmax), np.float32)
        self.init_bits = nnx.Variable(jnp.asarray(b0))
        self.qmax = BitParam(jnp.asarray(q0))
        self.step = QuantStep(jnp.asarray((q0 / levels(b0.astype(np.float64), self.signed)).astype(np.float32)))
        self.initialized = nnx.Variable(jnp.asarray(init_qmax is not None))
        self.cap_range = bool(cap_range) or bool(pin_range)
        self.pin_range = bool(pin_range)

    def _derived(self) -> dict:
        return _derived_params(self.step[...], self.qmax[...], signed=self.signed, min_bits=self.min_bits,
                               max_bits=self.max_bits)

    def step_size(self) -> jax.Array:
        """Effective step ``|d| + STEP_EPS``: float32 [] or [N], > 0."""
        return self._derived()["d"]

    def range_max(self) -> jax.Array:
        """Effective ``q_max``: ``|q_max|`` clamped (straight-through) to ``[d L(min_bits), d
        L(max_bits)]``; float32 [] or [N]."""
        return self._derived()["qmax"]

    def bits(self) -> jax.Array:
        """Continuous bit-width(s) `bits_from_range` of the effective parameters: float32 [] or [N]."""
        return self._derived()["bits"]

    def expected_bits(self) -> jax.Array:
        """Mean continuous bit-width over nodes (float32 scalar), differentiable in ``d`` and
        ``q_max``. Bytes are linear in bits, so this mean times the element count is the traffic."""
        return jnp.mean(self.bits())

    def hard_bits(self) -> jax.Array:
        """Deployed bit-width(s), int32 [] or [N]: the fewest bits holding every code this
        quantizer can emit (`code_bits` of ``round(q_max / d)``), at least ``min_bits``.

        This is exact for the emitted codes; it is ``<= ceil(bits())`` and can be one lower
        because codes are rounded (signed ``q_max / d = 3.4``: ``b = 3.14``, but the codes
        ``[-3, 3]`` fit in 3 bits). Computed with integer arithmetic (``lax.clz``), so no float
        rounding of ``log2`` can add a bit.
        """
        return self._derived()["hard_bits"]

    def takes_sparse(self) -> bool:
        """`Quantizer.takes_sparse`: True (each row's or the tensor's range is its nonzeros' max)."""
        return True

    def bits_penalty(self, target_bits: float) -> jax.Array:
        """``max(0, expected_bits() - target_bits)^2``: float32 scalar, differentiable; a simple
        hinge penalty for a bit budget (our choice; the cost model is the main consumer).

        Raises:
          ValueError: ``target_bits`` not a finite number > 0.
        """
        if isinstance(target_bits, bool) or not isinstance(target_bits, numbers.Real) or not (
                math.isfinite(target_bits) and target_bits > 0):
            raise ValueError(f"target_bits must be a finite float > 0, got {target_bits=!r}")
        return jnp.square(jnp.maximum(self.expected_bits() - float(target_bits), 0.0))

    def reset(self) -> None:
        """Marks the parameters as uninitialised: the next call re-initialises ``d`` and ``q_max``
        from its data (e.g. after a shape-inference call on dummy data)."""
        self.initialized[...] = jnp.asarray(False)

    def _check_x(self, x):
        if isinstance(x, SparseFeatures):
            check_float(x.values)
        else:
            x = check_float(x)
        if self.per_node is not None and (x.ndim != 2 or x.shape[0] != self.per_node):
            raise ValueError(f"x must be [N={self.per_node}, F] for per_node={self.per_node}, got {x.shape=}")
        return x

    def _per_row(self, v: jax.Array) -> jax.Array:
        return v if self.per_node is None else v[:, None]

    def __call__(self, x):
        """Fake-quantized ``x`` (`learned_bit_quant`), same shape and dtype; initialises first if needed.

        Args:
          x: float [...] (per tensor) or [N, F] (per node); or `codesign.kernels.SparseFeatures`
            [N, F], the nonzeros of such a tensor: its stored entries are quantized with their
            row's (or the tensor's) step and range, and the result is `SparseFeatures` with the
            dense result's nonzeros and the same gradients (a 0 quantizes to 0 with no gradient
            to ``d``, ``q_max`` or itself; each row's max counts its implicit zeros, `_amax`).

        Raises:
          ValueError: ``x`` not floating, or not [N, F] when ``per_node=N``.
        """
        x = self._check_x(x)
        per_row = self.per_node is not None
        amax = lambda: _amax(jax.lax.stop_gradient(x), signed=self.signed, per_row=per_row)  # noqa: E731
        q, d = init_once(self.initialized[...], (self.qmax[...], self.step[...]),
                         lambda: _data_init(amax(), self.init_bits[...], signed=self.signed))
        self.qmax[...], self.step[...] = q, d
        self.initialized[...] = jnp.asarray(True)
        if self.cap_range:
            self.qmax[...], self.step[...] = _cap_range(amax(), self.qmax[...], self.step[...], signed=self.signed,
                                                        min_bits=self.min_bits, max_bits=self.max_bits,
                                                        pin=self.pin_range)
        p = self._derived()
        d, qmax = p["d"], p["qmax"]
        if isinstance(x, SparseFeatures):
            if per_row:
                d, qmax = d[x.rows], qmax[x.rows]
            return x.with_values(learned_bit_quant(x.values, d, qmax, signed=self.signed))
        return learned_bit_quant(x, self._per_row(d), self._per_row(qmax), signed=self.signed)


def _amax(x, *, signed: bool, per_row: bool) -> jax.Array:
    """float32 [] or [N]: ``max|x|`` (``max(x, 0)`` unsigned) over the tensor or each row. For
    `SparseFeatures` the implicit zeros count: the stored entries' max (per row: a sorted
    ``segment_max``), floored at 0, so an empty row gives 0 as its dense row of zeros does."""
    if isinstance(x, SparseFeatures):
        v = x.values
        vals = (jnp.abs(v) if signed else jnp.maximum(v, 0)).astype(jnp.float32)
        if per_row:
            m = jax.ops.segment_max(vals, x.rows, num_segments=x.n_rows, indices_are_sorted=True)
            return jnp.maximum(m, 0.0)
        return jnp.maximum(jnp.max(vals, initial=0.0), 0.0)
    vals = (jnp.abs(x) if signed else jnp.maximum(x, 0)).astype(jnp.float32)
    return jnp.max(vals, axis=1) if per_row else jnp.max(vals)


@functools.partial(jax.jit, static_argnames=("signed",))
def _data_init(amax: jax.Array, init_bits: jax.Array, *, signed: bool) -> tuple[jax.Array, jax.Array]:
    """``(q_max, d)`` from ``amax`` (`_amax`, per tensor or row): ``q_max = amax``, 1 where 0;
    ``d = q_max / L(init_bits)``, so the continuous bit-width starts at ``init_bits``."""
    q0 = jnp.where(amax > 0, amax, 1.0)
    return q0, q0 / levels(init_bits, signed)


@functools.partial(jax.jit, static_argnames=("signed", "min_bits", "max_bits", "pin"))
def _cap_range(amax: jax.Array, qmax: jax.Array, step: jax.Array, *, signed: bool,
               min_bits: int, max_bits: int, pin: bool = False) -> tuple[jax.Array, jax.Array]:
    """``(min(|q_max|, amax), min(|d|, amax / L(min_bits)))`` (`LearnedBitQuant` ``cap_range``),
    per tensor or row; unchanged where ``amax`` is 0 (an all-zero row has nothing to fit).

    With ``pin``: ``q_max = amax`` and ``d = amax / L_eff``, where ``L_eff = clip(|q_max| / (|d| +
    STEP_EPS), L(min_bits), L(max_bits))`` is the effective number of levels (`_derived_params`:
    ``bits() = log2(L_eff + 1) (+ 1)``), so the effective bit-width is kept and only the range
    follows the data. The divisor is floored at ``L(min_bits) >= 1`` and the ratio's at
    ``STEP_EPS``: as ``q_max`` or ``d`` goes to 0 the value and its gradient stay finite (the
    former ``d * amax / max(|q_max|, 1e-30)`` had a gradient ``-d amax / q_max^2``: inf / NaN on
    every node whose learned range reached 0, while the loss stayed finite). ``amax``: `_amax` of
    the call's data, per tensor or row."""
    ok = amax > 0
    q = jnp.where(ok, amax if pin else jnp.minimum(jnp.abs(qmax), amax), qmax)
    if pin:
        n_levels = _st_clip(jnp.abs(qmax) / (jnp.abs(step) + STEP_EPS), levels(min_bits, signed),
                            levels(max_bits, signed))
        d = amax / n_levels
    else:
        d = jnp.abs(step)
    d = jnp.where(ok, jnp.minimum(d, amax / levels(min_bits, signed)), step)
    return q.astype(qmax.dtype), d.astype(step.dtype)


@functools.partial(jax.jit, static_argnames=("signed", "min_bits", "max_bits"))
def _derived_params(step: jax.Array, qmax: jax.Array, *, signed: bool, min_bits: int, max_bits: int) -> dict:
    """Effective ``d``, ``q_max`` (module docstring), continuous and hard bits of the stored parameters."""
    d = jnp.abs(step) + STEP_EPS
    q = _st_clip(jnp.abs(qmax), d * levels(min_bits, signed), d * levels(max_bits, signed))
    k = jnp.round(q * (1.0 / d))  # the largest code the forward pass can emit (same reciprocal)
    hard = jnp.clip(code_bits(k, signed=signed), min_bits, max_bits)
    return dict(d=d, qmax=q, bits=bits_from_range(d, q, signed=signed), hard_bits=hard)


def expected_bits(q) -> jax.Array:
    """Average bit-width (float32 scalar) of the values quantizer ``q`` emits, for the cost model:
    ``q.expected_bits()`` for every `Quantizer` (differentiable where learned); ``None`` (no
    quantizer) -> 32.

    Raises:
      TypeError: ``q`` is neither None nor a `Quantizer`.
    """
    if q is None:
        return jnp.asarray(float(NO_QUANT_BITS), jnp.float32)
    if not isinstance(q, Quantizer):
        raise TypeError(f"q must be None or a Quantizer (expected_bits, hard_bits), got {type(q).__name__}")
    return jnp.asarray(q.expected_bits(), jnp.float32)


def hard_bits(q):
    """Deployed integer bit-width(s) of quantizer ``q``: ``q.hard_bits()`` (int, or int32 [N] per
    node); ``None`` -> 32.

    Raises:
      TypeError: ``q`` is neither None nor a `Quantizer`.
    """
    if q is None:
        return NO_QUANT_BITS
    if not isinstance(q, Quantizer):
        raise TypeError(f"q must be None or a Quantizer (expected_bits, hard_bits), got {type(q).__name__}")
    return q.hard_bits()


def pin_ranges(module: nnx.Module, *, skip: Sequence[nnx.Module] = ()) -> int:
    """Turns on ``pin_range`` (hence ``cap_range``) of every `LearnedBitQuant` inside ``module``
    except those in ``skip`` (compared by identity): their range ``q_max`` then follows the max of
    the data at every call and only the bit-width is learned (see `LearnedBitQuant`).

    Why: with learned ranges (Uhlich et al., ICLR 2020, case U2) Cora GCN's weights and hidden
    features outgrow the range set at their first call (Glorot-initialised weights grow under
    Adam; hidden features grow by an order of magnitude); the range only follows through the
    gradient of the clipped values and acts as a learned gain. Measured (Cora GCN, learned widths
    at 8 bits, no cost term, seed 0): test accuracy 75.4 % with learned ranges, 81.1 % with every
    range pinned (fixed INT8: 81.1 %). A pinned range follows the data at its max, so a tensor
    kept at a learned range can do what a pinned one cannot: clip (the row-normalized bag-of-words
    input of Cora binarizes at 1-2 bits), hence ``skip``.

    Call it before training; pinning is a static flag (a retrace, no new parameters).

    Args:
      module: any NNX module (e.g. a model).
      skip: quantizers to leave as they are.

    Returns:
      The number of quantizers changed (int).
    """
    skip_ids = {id(m) for m in skip}
    n = 0
    for _, m in nnx.iter_modules(module):
        if isinstance(m, LearnedBitQuant) and id(m) not in skip_ids and not m.pin_range:
            m.pin_range = m.cap_range = True
            n += 1
    return n


def average_bits(bits: Mapping[str, float], n_values: Mapping[str, int]) -> tuple[float, float]:
    """``(per-tensor mean, element-weighted mean)`` of the bit-widths of a model's quantized tensors.

    per-tensor mean        ``mean_t b_t``, every tensor counts once (the stricter average for a
                           model whose few large tensors sit at low widths);
    element-weighted mean  ``sum_t n_t b_t / sum_t n_t``, the bits per stored value, the average
                           reported by Uhlich et al. (ICLR 2020, the memory-weighted mean) and
                           A^2Q (Zhu et al., ICLR 2023, "average bits").

    Per-node widths enter as their mean over nodes (``b_t``), which is exact for the element
    weighting since every node of a tensor has the same number of values.

    Args:
      bits: ``{tensor name: bits}``, floats >= 1 (a model's ``layer_bits(hard=True)``).
      n_values: ``{tensor name: number of stored values}``, ints >= 1, with every key of ``bits``.

    Returns:
      Two Python floats.

    Raises:
      ValueError: ``bits`` empty, a width below 1 or not finite, a count missing or below 1.
    """
    if not bits:
        raise ValueError("bits: no quantized tensors")
    for k, b in bits.items():
        if not (math.isfinite(float(b)) and float(b) >= 1):
            raise ValueError(f"bits[{k!r}] must be finite and >= 1, got {b!r}")
        n = n_values.get(k)
        if n is None or isinstance(n, bool) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"n_values[{k!r}] must be an int >= 1, got {n!r}")
    per_tensor = sum(float(b) for b in bits.values()) / len(bits)
    total = sum(int(n_values[k]) for k in bits)
    return per_tensor, sum(float(b) * int(n_values[k]) for k, b in bits.items()) / total
