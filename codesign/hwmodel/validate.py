"""The cost model's input domain: one validator for bit-widths, densities and counts.

Every `Workload` is built from stage builders (`codesign.hwmodel.workload`), and every model's
``workload(...)`` merges its what-if ``densities`` / ``bits`` through `resolve_densities` and
`check_bits`; all of them check their numbers here, so one rule holds everywhere:

  bits       finite and in [`MIN_BITS`, `MAX_BITS`] = [1, 32] (32 = fp32), every element of an
             array (per-layer or per-node bit-widths);
  densities  finite and in [0, 1]; a key the model does not use is an error that lists the
             keys it does;
  counts     (rows, nonzeros, widths, heads) finite and >= 0.

What is checked under `jax.jit`, `jax.grad` or `jax.vmap`: nothing about values. A traced value
(a `jax.core.Tracer`) has no value at trace time, so it is passed through unchecked; only the
structure (unknown density keys, wrong types) is checked then. Concrete values -- Python and
NumPy numbers, concrete JAX arrays -- are checked in full. Learned bit-widths and densities that
come from the quantizers and masks are kept in range by those modules themselves (clamped
parametrizations), so a traced value from them is in range by construction.

Errors: ``ValueError`` (a value out of range or not finite) or ``TypeError`` (not a real number
or array), with a one-line message that starts with the field, e.g.
``"densities['feature']: must be finite and in [0, 1], got -0.5"``.
"""

from __future__ import annotations

import dataclasses
from typing import Mapping, Optional

import jax
import jax.numpy as jnp
import numpy as np

def register_checked_dataclass(cls):
    """Registers the frozen dataclass ``cls`` as a JAX pytree (as ``jax.tree_util.register_dataclass``
    does: fields with ``metadata=dict(static=True)`` are static, the others leaves, with
    ``GetAttrKey`` paths) whose REBUILDING from leaves skips ``__init__`` / ``__post_init__``.

    So the checks in ``__post_init__`` run where a user builds the object (or calls
    ``dataclasses.replace``), and never on trees JAX builds from it: tracers under ``jit``/``vmap``
    and concrete trees of gradients (``jax.grad`` with respect to a spec gives a spec-shaped tree
    of derivatives, which are negative where more of a field lowers the cost), or
    ``jax.tree.map`` results.
    """
    fields = dataclasses.fields(cls)
    data = tuple(f.name for f in fields if not f.metadata.get("static"))
    meta = tuple(f.name for f in fields if f.metadata.get("static"))
    keys = tuple(jax.tree_util.GetAttrKey(n) for n in data)

    def flatten_with_keys(obj):
        return tuple(zip(keys, (getattr(obj, n) for n in data))), tuple(getattr(obj, n) for n in meta)

    def flatten(obj):
        return tuple(getattr(obj, n) for n in data), tuple(getattr(obj, n) for n in meta)

    def unflatten(meta_values, leaves):
        obj = object.__new__(cls)
        for n, v in zip(meta, meta_values):
            object.__setattr__(obj, n, v)
        for n, v in zip(data, leaves):
            object.__setattr__(obj, n, v)
        return obj

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls


MIN_BITS = 1
MAX_BITS = 32
"""Bit-widths the cost model prices: 1 (binary) to 32 (fp32)."""


def _concrete_values(value, field: str) -> Optional[np.ndarray]:
    """``value`` as a float64 NumPy array, or None when it is traced (no value to check).

    Raises:
      TypeError: ``value`` is a bool, a string, None or a non-numeric array.
    """
    if isinstance(value, jax.core.Tracer):
        return None
    if value is None or isinstance(value, (bool, np.bool_, str, bytes)):
        raise TypeError(f"{field}: must be a real number or array, got {value!r}")
    try:
        a = np.asarray(value)
    except Exception as e:  # noqa: BLE001 - objects NumPy cannot convert
        raise TypeError(f"{field}: must be a real number or array, got {type(value).__name__}") from e
    if a.dtype == np.bool_ or not (jnp.issubdtype(a.dtype, jnp.integer) or jnp.issubdtype(a.dtype, jnp.floating)):
        raise TypeError(f"{field}: must be a real number or array, got dtype {a.dtype}")
    return a.astype(np.float64)


def _check(value, field: str, lo: float, hi: float):
    a = _concrete_values(value, field)
    if a is None:
        return value
    bad = ~(np.isfinite(a) & (a >= lo) & (a <= hi))
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        where = field if a.ndim == 0 else f"{field}[{', '.join(map(str, idx))}]"
        rng = f">= {lo:g}" if hi == np.inf else f"in [{lo:g}, {hi:g}]"
        raise ValueError(f"{where}: must be finite and {rng}, got {float(a[idx])!r}")
    return value


def check_bits(bits, field: str = "bits"):
    """Checks a bit-width (scalar or array: per-layer / per-node) lies in [1, 32] and is finite.

    Args:
      bits: Python/NumPy number or array, or JAX array (traced values pass unchecked).
      field: the name the error message starts with.

    Returns:
      ``bits`` unchanged.

    Raises:
      ValueError: an element outside [1, 32] or not finite (NaN, inf).
      TypeError: not a real number or numeric array (bool, str, None).
    """
    return _check(bits, field, MIN_BITS, MAX_BITS)


def check_density(density, field: str = "density"):
    """Checks a kept fraction (scalar or array) lies in [0, 1] and is finite; returns it unchanged.

    Raises:
      ValueError: an element outside [0, 1] or not finite.
      TypeError: not a real number or numeric array.
    """
    return _check(density, field, 0.0, 1.0)


def check_count(count, field: str):
    """Checks a count (rows, nonzeros, width, MACs; scalar or array) is finite and >= 0; returns
    it unchanged.

    Raises:
      ValueError: an element below 0 or not finite.
      TypeError: not a real number or numeric array.
    """
    return _check(count, field, 0.0, np.inf)


def resolve_densities(defaults: Mapping[str, object], overrides: Optional[Mapping[str, object]]) -> dict:
    """A model's densities with what-if ``overrides`` applied: ``{**defaults, **overrides}``.

    Args:
      defaults: the model's own kept fractions (e.g. ``{"edge", "feature", "channel"}`` from
        ``model.densities(hard)``); their keys are the ones the model's workload uses.
      overrides: None or a mapping from some of those keys to kept fractions in [0, 1] (floats
        or float arrays; traced values pass unchecked).

    Returns:
      A new dict with the keys of ``defaults``.

    Raises:
      ValueError: an override key not in ``defaults`` (the message lists the known keys), or a
        value outside [0, 1] / not finite (the message names ``densities['<key>']``).
      TypeError: ``overrides`` not a mapping, or a value not a real number or array.
    """
    if overrides is None:
        return dict(defaults)
    if not isinstance(overrides, Mapping):
        raise TypeError(f"densities: must be a dict of kept fractions, got {type(overrides).__name__}")
    unknown = [k for k in overrides if k not in defaults]
    if unknown:
        raise ValueError(f"densities: unknown key {unknown[0]!r}; known keys: {', '.join(sorted(defaults))}")
    for k, v in overrides.items():
        check_density(v, f"densities[{k!r}]")
    return {**defaults, **overrides}
