"""Post-training quantization (PTQ) baselines: calibrated scales and a model-level recalibration.

PTQ (B. Jacob et al., CVPR 2018, Sec. 3; H. Wu et al., "Integer Quantization for Deep Learning
Inference: Principles and Empirical Evaluation", arXiv:2004.09602, Sec. 3.4 "Calibration")
takes a trained float model and fixes quantization scales from the weights and from activations
recorded on a few calibration batches, without training:

    max calibration:         scale = max|x| / qmax
    percentile calibration:  scale = percentile_p(|x|) / qmax      (values above are clipped)

with ``qmax = 2^(b-1) - 1`` signed, ``2^b - 1`` unsigned (the grid of `fake_quant`). Apply a
calibrated scale with ``fake_quant(x, bits, signed=..., scale=scale)``.

Quantization-aware training (QAT) needs no code here: it is ordinary training with `FakeQuant`
(fixed bits, dynamic max scale), `LSQQuant` (learned step) or `LearnedBitQuant` (learned bits)
in the forward pass; their straight-through gradients make the weights adapt to the grid.

For a model built with `LSQQuant` quantizers, `prepare_ptq` turns it into a PTQ model: it
re-arms their data-dependent initialisation with max or percentile calibration, so one forward
pass on calibration data (in eval mode, outside any gradient) sets every step, after which the
model evaluates with fixed calibrated scales. `FakeQuant` has nothing to calibrate (its scale is
the max of each tensor it sees, i.e. dynamic max quantization).
"""

from __future__ import annotations

from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax import nnx

from codesign.quant.fake_quant import check_bits, qrange
from codesign.quant.lsq import LSQQuant, calib_amax, check_float, check_percentile

CALIBRATION_METHODS = ("max", "percentile")
"""Calibration statistics of `calibrate_scale`."""


def calibrate_scale(x: jax.Array, bits: int, *, signed: bool = True, method: str = "max",
                    percentile: float = 99.99, per_channel: bool = False) -> jax.Array:
    """PTQ step size of ``x`` for the `fake_quant` grid (module docstring).

    Args:
      x: float [..., C] weights or calibration activations (concatenate batches first).
      bits: int, >= 2 signed / >= 1 unsigned, < 32.
      signed: ``|x|`` (signed) or ``max(x, 0)`` (unsigned) statistics.
      method: ``"max"`` or ``"percentile"``.
      percentile: in (0, 100], for ``method="percentile"``.
      per_channel: one scale per column of the last axis.

    Returns:
      float32 scale > 0 (units of ``x``): [] or [C]; 1 where the statistic is 0.

    Raises:
      ValueError: invalid ``bits`` (incl. >= 32), ``method`` or ``percentile``; ``x`` not floating.
    """
    if check_bits(bits, signed) is None:
        raise ValueError(f"bits must be < 32 to calibrate a quantizer, got {bits=}")
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {CALIBRATION_METHODS}, got {method=!r}")
    pct = check_percentile(percentile) if method == "percentile" else None
    x = check_float(x)
    _, hi = qrange(bits, signed)
    amax = calib_amax(x, signed=signed, percentile=pct, per_channel=per_channel)
    return jnp.where(amax > 0, amax * (1.0 / hi), 1.0).astype(jnp.float32)


def calibrate_ptq(tensors: Any, bits: int, *, signed: bool = True, method: str = "max",
                  percentile: float = 99.99, per_channel: bool = False) -> Any:
    """`calibrate_scale` of every array leaf of a pytree (e.g. ``{"w1": W1, "x1": acts1}``).

    Returns:
      a pytree of the same structure with float32 scales; ``signed`` etc. apply to every leaf
      (call once per group with different settings, e.g. unsigned for post-ReLU activations).

    Raises:
      ValueError: as `calibrate_scale`.
    """
    return jax.tree.map(lambda t: calibrate_scale(t, bits, signed=signed, method=method, percentile=percentile,
                                                  per_channel=per_channel), tensors)


def prepare_ptq(model: nnx.Module, method: str = "max", percentile: Optional[float] = 99.99) -> int:
    """Re-arms every `LSQQuant` in ``model`` to calibrate its step from the next call's data.

    Usage::

      prepare_ptq(model, "max")
      model.eval()
      model(calibration_inputs)      # sets each step to max|x| / Qp (or the percentile)
      evaluate(model)                # fixed, calibrated steps

    Args:
      model: an NNX module (searched recursively).
      method: ``"max"`` or ``"percentile"``.
      percentile: in (0, 100], for ``method="percentile"``.

    Returns:
      The number of quantizers re-armed.

    Raises:
      ValueError: invalid ``method`` or ``percentile``.
    """
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {CALIBRATION_METHODS}, got {method=!r}")
    pct = check_percentile(percentile) if method == "percentile" else None
    count = 0
    for _, module in nnx.iter_modules(model):
        if isinstance(module, LSQQuant):
            module.reset(init_method=method, percentile=pct)
            count += 1
    return count
