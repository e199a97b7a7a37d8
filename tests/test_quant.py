"""Tests of codesign.quant: fake quantization error bound, levels, STE gradient, validation."""

from __future__ import annotations

import functools

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.quant import NO_QUANT_BITS, FakeQuant, fake_quant, qrange


@pytest.fixture(autouse=True)
def _strict_promotion():
    """As equinox's conftest: implicit dtype promotion and rank broadcasting are errors."""
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


def _default_scale(x: np.ndarray, bits: int, signed: bool) -> float:
    _, hi = qrange(bits, signed)
    amax = float(np.max(np.abs(x))) if signed else float(np.max(np.maximum(x, 0)))
    return amax / hi if amax > 0 else 1.0


_values = st.floats(-1e4, 1e4, width=32, allow_subnormal=False).map(lambda v: 0.0 if abs(v) < 1e-20 else v)
_arrays = hnp.arrays(np.float32, (32,), elements=_values)  # one shape: one compile per (bits, signed)
_fake_quant_jit = jax.jit(fake_quant, static_argnames=("bits", "signed"))


@functools.partial(jax.jit, static_argnames=("bits", "signed"))
def _grad_sum(x, bits, signed=True):
    """d sum(fake_quant(x)) / dx, jitted (one compile instead of many eager op compiles)."""
    return jax.grad(lambda v: fake_quant(v, bits, signed=signed).sum())(x)


@settings(max_examples=60, deadline=None)
@given(x=_arrays, bits=st.integers(2, 8), signed=st.booleans())
def test_error_bound_and_levels(x, bits, signed):
    if not signed:
        x = np.abs(x)
    x_hat = np.asarray(_fake_quant_jit(jnp.asarray(x), bits=bits, signed=signed))
    assert x_hat.dtype == np.float32 and x_hat.shape == x.shape and np.all(np.isfinite(x_hat))
    scale = _default_scale(x, bits, signed)
    amax = float(np.max(np.abs(x)))
    # |x - x_hat| <= scale / 2, up to float32 rounding of x / scale and q * scale.
    tol = 0.5 * scale + 4 * np.finfo(np.float32).eps * amax
    assert np.max(np.abs(x.astype(np.float64) - x_hat)) <= tol
    lo, hi = qrange(bits, signed)
    codes = x_hat.astype(np.float64) / scale
    np.testing.assert_allclose(codes, np.round(codes), atol=1e-3)
    assert codes.min() >= lo - 1e-3 and codes.max() <= hi + 1e-3
    assert len(np.unique(x_hat)) <= 2**bits


@pytest.mark.parametrize("bits,signed", [(2, True), (3, True), (4, True), (1, False), (3, False)])
def test_level_count_on_a_dense_ramp(bits, signed):
    x = jnp.linspace(-1.0 if signed else 0.0, 1.0, 10_001, dtype=jnp.float32)
    n_levels = len(np.unique(np.asarray(fake_quant(x, bits, signed=signed))))
    assert n_levels == (2**bits - 1 if signed else 2**bits)


def test_known_values():
    x = jnp.asarray([-1.0, -0.4, 0.0, 0.2, 0.5, 1.0], jnp.float32)
    # bits=3 signed: qmax = 3, scale = 1/3; codes round(x * 3) = [-3, -1, 0, 1, 2, 3] (0.6 -> 1, 1.5 -> 2)
    np.testing.assert_allclose(np.asarray(fake_quant(x, 3)), np.asarray([-3, -1, 0, 1, 2, 3]) / 3, rtol=1e-6)
    # explicit scale 0.25, bits=2 unsigned: codes clip(round(4 x), 0, 3)
    np.testing.assert_allclose(
        np.asarray(fake_quant(x, 2, signed=False, scale=0.25)), np.asarray([0, 0, 0, 1, 2, 3]) * 0.25
    )


@pytest.mark.parametrize("signed", [True, False])
def test_ste_gradient_is_identity(signed):
    x = jax.random.normal(jax.random.key(0), (257,), jnp.float32)
    if not signed:
        x = jnp.abs(x)
    g = _grad_sum(x, 4, signed)
    np.testing.assert_array_equal(np.asarray(g), np.ones(257, np.float32))


def test_ste_gradient_cancelled_where_saturated():
    x = jnp.asarray([0.1, 0.6, 0.74, 0.76, -0.8, -0.3], jnp.float32)
    # bits=2 signed, scale 0.5: range [-1, 1] codes; x / scale = [0.2, 1.2, 1.48, 1.52, -1.6, -0.6]
    g = jax.grad(lambda v: fake_quant(v, 2, scale=0.5).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), [1, 1, 1, 0, 0, 1])
    # unsigned: negative values saturate at 0
    g = jax.grad(lambda v: fake_quant(v, 2, signed=False, scale=0.5).sum())(x)
    np.testing.assert_array_equal(np.asarray(g), [1, 1, 1, 1, 0, 0])


def test_no_gradient_into_explicit_scale():
    x = jnp.asarray([0.3, -0.7], jnp.float32)
    g = jax.grad(lambda s: fake_quant(x, 4, scale=s).sum())(jnp.float32(0.1))
    assert float(g) == 0.0


@pytest.mark.parametrize("bits", [None, NO_QUANT_BITS])
def test_no_quantization_is_identity(bits):
    x = jax.random.normal(jax.random.key(1), (33,), jnp.float32)
    np.testing.assert_array_equal(np.asarray(fake_quant(x, bits)), np.asarray(x))
    np.testing.assert_array_equal(np.asarray(FakeQuant(bits)(x)), np.asarray(x))


@pytest.mark.parametrize("signed", [True, False])
def test_zero_tensor(signed):
    x = jnp.zeros((4, 5), jnp.float32)
    y = fake_quant(x, 4, signed=signed)
    np.testing.assert_array_equal(np.asarray(y), 0.0)
    g = _grad_sum(x, 4, signed)
    assert bool(jnp.all(jnp.isfinite(g)))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_dtype_preserved_and_jittable(dtype):
    x = jnp.linspace(-2.0, 2.0, 16, dtype=dtype)
    y = jax.jit(functools.partial(fake_quant, bits=4))(x)
    assert y.dtype == dtype and y.shape == x.shape
    assert len(np.unique(np.asarray(y, np.float32))) <= 15


@pytest.mark.parametrize("bits,signed", [(0, False), (-1, False), (1, True), (0, True), (33, True), (33, False),
                                         (64, True)])
def test_bad_bits_raise(bits, signed):
    """Out of range, above 32 included: 33 bits is an error, not float32 (32 is)."""
    match = rf"^bits: must be in \[{2 if signed else 1}, 32\] .*got {bits}$"
    with pytest.raises(ValueError, match=match):
        fake_quant(jnp.ones(3), bits, signed=signed)
    with pytest.raises(ValueError, match=match):
        FakeQuant(bits, signed=signed)


@pytest.mark.parametrize("bits", [2.5, 8.0, True, "8"])
def test_bits_of_wrong_type_raise(bits):
    with pytest.raises(TypeError, match=r"^bits: must be an int or None"):
        fake_quant(jnp.ones(3), bits)
    with pytest.raises(TypeError, match=r"^bits: must be an int or None"):
        FakeQuant(bits)


def test_unsigned_one_bit_is_allowed():
    y = fake_quant(jnp.asarray([0.0, 0.4, 0.6, 1.0], jnp.float32), 1, signed=False)
    np.testing.assert_array_equal(np.asarray(y), [0.0, 0.0, 1.0, 1.0])


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="x must be a floating"):
        fake_quant(jnp.arange(4), 4)
    with pytest.raises(ValueError, match="scale"):
        fake_quant(jnp.ones(3), 4, scale=0.0)
    with pytest.raises(ValueError, match="bits"):
        qrange(32)


def test_fake_quant_module():
    q = FakeQuant(8, signed=False)
    assert q.bits == 8 and q.signed is False
    assert FakeQuant(None).bits is None
    x = jnp.abs(jax.random.normal(jax.random.key(2), (10, 3), jnp.float32))
    np.testing.assert_array_equal(np.asarray(q(x)), np.asarray(fake_quant(x, 8, signed=False)))
    assert nnx.state(q, nnx.Param) == nnx.State({})  # no parameters
