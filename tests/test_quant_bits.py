"""Tests of codesign.quant.learned_bits: the (d, q_max) bit formula and its gradients against
finite differences, straight-through gradients, per-node shapes, hard bits, init, validation."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from codesign.quant import (BitParam, LearnedBitQuant, QuantStep, bits_from_range, code_bits, expected_bits,
                            hard_bits, learned_bit_quant)


@pytest.fixture(autouse=True)
def _strict_promotion():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


def _b64(d, q, signed):
    """The continuous bit formula in float64 (Uhlich et al. 2020, Table 1, U2)."""
    return np.log2(q / d + 1.0) + (1.0 if signed else 0.0)


def _set(q: LearnedBitQuant, d, qmax):
    q.step[...] = jnp.asarray(d, jnp.float32)
    q.qmax[...] = jnp.asarray(qmax, jnp.float32)
    q.initialized[...] = jnp.asarray(True)


def _normal(seed: int, shape, scale=1.0) -> jax.Array:
    """Fixed-seed float32 test data (numpy's generator: no per-shape JAX compilation)."""
    return jnp.asarray((np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32))


_apply = nnx.jit(lambda q, x: q(x))


def test_bits_from_range_values():
    np.testing.assert_allclose(bits_from_range(1.0, 7.0), 4.0, rtol=1e-6)
    np.testing.assert_allclose(bits_from_range(1.0, 7.0, signed=False), 3.0, rtol=1e-6)
    np.testing.assert_allclose(bits_from_range(0.5, 1.5), 3.0, rtol=1e-6)
    np.testing.assert_array_equal(code_bits(jnp.array([0, 1, 2, 3, 4, 127, 128])), [1, 2, 3, 3, 4, 8, 9])
    np.testing.assert_array_equal(code_bits(jnp.array([1, 15, 16, 255]), signed=False), [1, 4, 5, 8])


@pytest.mark.parametrize("signed", [True, False])
def test_expected_bits_gradient_matches_finite_differences(signed):
    d = np.array([0.13, 0.05, 0.4], np.float64)
    qm = np.array([1.7, 0.9, 2.0], np.float64)
    q = LearnedBitQuant(4.0, signed=signed, per_node=3)
    _set(q, d, qm)
    value, grads = nnx.jit(nnx.value_and_grad(lambda q: q.expected_bits()))(q)
    np.testing.assert_allclose(value, np.mean(_b64(d, qm, signed)), rtol=1e-6)
    h = 1e-6
    fd_d = (_b64(d + h, qm, signed) - _b64(d - h, qm, signed)) / (2 * h) / 3  # mean over 3 nodes
    fd_q = (_b64(d, qm + h, signed) - _b64(d, qm - h, signed)) / (2 * h) / 3
    np.testing.assert_allclose(grads.step[...], fd_d, rtol=1e-4)
    np.testing.assert_allclose(grads.qmax[...], fd_q, rtol=1e-4)
    assert np.all(np.asarray(grads.step[...]) < 0) and np.all(np.asarray(grads.qmax[...]) > 0)


@pytest.mark.parametrize("signed", [True, False])
def test_straight_through_gradients(signed):
    d, qm = 0.25, 1.1  # q_max / d = 4.4
    x = np.array([-2.0, -1.3, -0.61, -0.1, 0.0, 0.2, 0.38, 0.9, 1.2, 3.0], np.float32)
    w = np.asarray(_normal(0, x.shape))

    def loss(x, d, qm):
        return jnp.sum(jnp.asarray(w) * learned_bit_quant(x, d, qm, signed=signed))

    dx, dd, dq = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(jnp.asarray(x), jnp.float32(d), jnp.float32(qm))
    lo = -qm if signed else 0.0
    xd = x.astype(np.float64)
    inside = (xd > lo) & (xd < qm)
    c = np.clip(xd, lo, qm)
    np.testing.assert_array_equal(np.asarray(dx) != 0, inside & (w != 0))
    np.testing.assert_allclose(dx, w * inside, rtol=1e-6)
    np.testing.assert_allclose(dd, np.sum(w * (np.round(c / d) - c / d)), rtol=1e-5, atol=1e-6)
    d_dq = np.where(xd >= qm, 1.0, np.where((xd <= lo) & signed, -1.0, 0.0))
    np.testing.assert_allclose(dq, np.sum(w * d_dq), rtol=1e-5, atol=1e-6)
    x_hat = np.asarray(learned_bit_quant(jnp.asarray(x), d, qm, signed=signed))
    np.testing.assert_allclose(x_hat, d * np.round(c / d), rtol=1e-6)


@nnx.jit
def _summary(q, x):
    return q(x), q.bits(), q.expected_bits(), q.hard_bits(), q.step_size(), q.range_max()


def test_per_node_init_shapes_and_rows():
    scale = np.array([[0.1], [1.0], [3.0], [0.0]], np.float32)
    x = _normal(1, (4, 6), scale)
    init_bits = np.array([2.0, 3.0, 4.5, 8.0], np.float32)
    q = LearnedBitQuant(init_bits, per_node=4)
    y, bits, mean_bits, hb, d, qm = _summary(q, x)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert q.step.shape == q.qmax.shape == (4,)
    amax = np.max(np.abs(np.asarray(x)), axis=1)
    want_q = np.where(amax > 0, amax, 1.0)  # an all-zero row gets range 1
    np.testing.assert_allclose(q.qmax[...], want_q, rtol=1e-6)
    np.testing.assert_allclose(q.step[...], want_q / (2.0 ** (init_bits - 1) - 1), rtol=1e-6)
    np.testing.assert_allclose(bits, init_bits, rtol=1e-5)
    np.testing.assert_allclose(mean_bits, init_bits.mean(), rtol=1e-5)
    hb = np.asarray(hb)
    assert hb.dtype == np.int32 and hb.shape == (4,)
    np.testing.assert_array_equal(hb, [2, 3, 5, 8])
    # Each row is quantized on its own grid, exactly as a per-tensor quantizer with its parameters.
    rows = jax.jit(jax.vmap(learned_bit_quant))(x, d, qm)
    np.testing.assert_array_equal(y, rows)
    np.testing.assert_array_equal(y[3], np.zeros(6, np.float32))


def test_per_tensor_unsigned_init():
    x = _normal(2, (50,))
    q = LearnedBitQuant(3.0, signed=False)
    _summary(q, jnp.zeros_like(x))  # e.g. a shape-inference call on dummy data: range 1
    assert float(q.qmax[...]) == 1.0
    q.reset()
    y, _, mean_bits, hb, _, _ = _summary(q, x)
    np.testing.assert_allclose(q.qmax[...], np.max(np.asarray(x)), rtol=1e-6)
    np.testing.assert_allclose(q.step[...], np.max(np.asarray(x)) / 7.0, rtol=1e-6)
    assert float(np.min(y)) == 0.0 and float(mean_bits) == pytest.approx(3.0, rel=1e-5) and int(hb) == 3
    assert int(hard_bits(q)) == 3 and float(expected_bits(q)) == pytest.approx(3.0, rel=1e-5)


_check_fn = nnx.jit(lambda q, x: (q(x) / q.step_size(), q.hard_bits(), q.bits()))


@settings(max_examples=40, deadline=None)
@given(d=st.floats(1e-3, 1.0), ratio=st.floats(0.0, 400.0), seed=st.integers(0, 2**16))
def test_hard_bits_hold_every_code(d, ratio, seed):
    q = LearnedBitQuant(4.0)
    _set(q, d, d * ratio)
    x = _normal(seed, (64,), d * max(ratio, 1.0) * 2.0)
    k, hb, b = _check_fn(q, x)
    k, hb, b = np.asarray(k), int(hb), float(b)
    np.testing.assert_allclose(k, np.round(k), atol=1e-3)
    assert 2 <= hb <= 8 and 2.0 - 1e-5 <= b <= 8.0 + 1e-5
    assert np.max(np.abs(np.round(k))) <= 2 ** (hb - 1) - 1  # every code fits in hard_bits
    assert b - 0.5 < hb <= math.ceil(b + 1e-5)  # rounded codes: at most ceil(b), never half a bit less


def test_bits_clamped_to_bounds_but_keep_a_gradient():
    q = LearnedBitQuant(4.0, max_bits=6)
    _set(q, 0.01, 100.0)  # q_max / d = 1e4 would be ~14.3 bits
    assert float(q.expected_bits()) == pytest.approx(6.0, abs=1e-5)
    assert int(q.hard_bits()) == 6
    x = jnp.linspace(-200.0, 200.0, 101, dtype=jnp.float32)
    k = np.asarray(_apply(q, x)) / float(q.step_size())
    assert np.max(np.abs(np.round(k))) <= 31
    g = nnx.jit(nnx.grad(lambda q: q.expected_bits()))(q)
    assert float(g.qmax[...]) > 0 and float(g.step[...]) < 0  # straight-through clamp
    _set(q, 1.0, 0.01)  # below the 2-bit floor
    assert float(q.expected_bits()) == pytest.approx(2.0, abs=1e-5) and int(q.hard_bits()) == 2


def test_bits_penalty_and_training_under_jit():
    x = _normal(3, (8, 16))
    q = LearnedBitQuant(6.0, per_node=8)
    assert float(q.bits_penalty(8.0)) == 0.0

    @nnx.jit
    def step(q, x):
        def loss_fn(q):
            return jnp.mean(jnp.square(q(x) - x)) + q.bits_penalty(3.0)

        loss, grads = nnx.value_and_grad(loss_fn)(q)
        nnx.update(q, jax.tree.map(lambda p, g: p - 0.05 * g, nnx.state(q, nnx.Param), grads))
        return loss, grads

    _, g0 = step(q, x)  # first call: data-dependent init inside the traced step
    assert float(jnp.abs(g0.qmax[...]).sum()) == 0.0
    np.testing.assert_allclose(q.expected_bits(), 6.0, rtol=1e-5)
    for _ in range(20):
        step(q, x)
    assert float(q.expected_bits()) < 6.0 - 0.1  # the penalty pulls the bits down


def test_variable_types_are_collected():
    q = LearnedBitQuant(4.0, per_node=5)
    assert [v.shape for v in jax.tree.leaves(nnx.state(q, BitParam))] == [(5,)]
    assert [v.shape for v in jax.tree.leaves(nnx.state(q, QuantStep))] == [(5,)]
    assert len(jax.tree.leaves(nnx.state(q, nnx.Param))) == 2


@pytest.mark.parametrize("kwargs, match", [
    (dict(init_bits=1.0), "init_bits"),
    (dict(init_bits=9.0), "init_bits"),
    (dict(init_bits=float("nan")), "init_bits"),
    (dict(init_bits=True), "init_bits"),
    (dict(init_bits=np.full(3, 4.0)), "init_bits"),  # array without per_node
    (dict(init_bits=np.full(3, 4.0), per_node=4), "init_bits"),
    (dict(init_bits=4.0, per_node=0), "per_node"),
    (dict(init_bits=4.0, min_bits=1), "min_bits"),
    (dict(init_bits=1.0, signed=False, min_bits=0), "min_bits"),
    (dict(init_bits=4.0, min_bits=5, max_bits=4), "max_bits"),
    (dict(init_bits=4.0, max_bits=17), "max_bits"),
    (dict(init_bits=4.0, init_qmax=-1.0), "init_qmax"),
])
def test_constructor_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LearnedBitQuant(**kwargs)


def test_call_errors():
    q = LearnedBitQuant(4.0, per_node=3)
    with pytest.raises(ValueError, match="per_node"):
        q(jnp.ones((4, 2)))
    with pytest.raises(ValueError, match="per_node"):
        q(jnp.ones((3,)))
    with pytest.raises(ValueError, match="x.dtype"):
        q(jnp.ones((3, 2), jnp.int32))
    with pytest.raises(ValueError, match="target_bits"):
        q.bits_penalty(0.0)


def test_cap_and_pin_range_project_onto_data():
    """cap_range: q_max <= amax, d <= amax / L(min_bits); pin_range: q_max = amax per row with d
    rescaled so the bit-width is kept; defaults leave the parameters alone."""
    x = jnp.asarray([[0.0, 0.2], [0.1, 0.4]], jnp.float32)
    q = LearnedBitQuant(3.0, signed=False, init_qmax=2.0, cap_range=True)
    q(x)
    np.testing.assert_allclose(float(q.range_max()), 0.4, rtol=1e-6)
    q.step[...] = jnp.asarray(5.0)
    q(x)
    assert float(q.step[...]) <= 0.4 + 1e-7
    p = LearnedBitQuant(3.0, signed=False, per_node=2, pin_range=True)
    p(x)
    b0 = np.asarray(p.bits())
    p.qmax[...] = p.qmax[...] * 0.5
    p.step[...] = p.step[...] * 0.5
    p(2.0 * x)
    np.testing.assert_allclose(np.asarray(p.range_max()), [0.4, 0.8], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(p.bits()), b0, rtol=1e-5)
    free = LearnedBitQuant(3.0, signed=False, init_qmax=2.0)
    free(x)
    np.testing.assert_allclose(float(free.range_max()), 2.0, rtol=1e-6)
