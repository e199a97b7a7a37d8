"""Tests of codesign.quant.lsq (LSQ gradients against the paper's formulas, data-dependent
initialisation also under nnx.jit, straight-through pieces, protocol, validation)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx

from codesign.quant import (FakeQuant, LSQQuant, QuantStep, expected_bits, hard_bits, lsq_init_step, lsq_quant,
                            lsq_range, round_ste, scale_grad)


@pytest.fixture(autouse=True)
def _strict_promotion():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


def _normal(seed: int, shape, scale=1.0) -> jax.Array:
    """Fixed-seed float32 test data (numpy's generator: no per-shape JAX compilation)."""
    return jnp.asarray((np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32))


# v = x / 0.3 covers: below -Qn, inside (both signs), above Qp, for 3 bits signed (Qn=4, Qp=3);
# no value sits on a rounding tie or a range bound.
X = np.array([[-2.0, -0.95, -0.2, 0.05, 0.37, 0.8, 1.3],
              [0.61, -1.4, 0.0, -0.41, 2.2, 0.13, -0.07]], np.float32)


def _paper_grads(x, s, w, bits, signed, per_channel):
    """LSQ eq. 3 and Sec. 2.2 by hand (float64): d sum(w * x_hat) / d s and / d x."""
    qn, qp = (2 ** (bits - 1), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    x, w = x.astype(np.float64), w.astype(np.float64)
    s = np.asarray(s, np.float64)
    v = x / s
    inside = (v > -qn) & (v < qp)
    ds_elem = np.where(inside, -v + np.round(v), np.where(v <= -qn, -qn, qp))
    n_per_step = x.size // s.size
    g = 1.0 / math.sqrt(n_per_step * qp)
    ds = g * (np.sum(w * ds_elem, axis=0) if per_channel else np.sum(w * ds_elem))
    return ds, w * inside


def test_lsq_range():
    assert lsq_range(3, True) == (4, 3)
    assert lsq_range(3, False) == (0, 7)
    assert lsq_range(8, True) == (128, 127)


@pytest.mark.parametrize("signed", [True, False])
@pytest.mark.parametrize("per_channel", [False, True])
def test_gradients_match_paper_formula(signed, per_channel):
    bits = 3
    w = np.asarray(_normal(1, X.shape))
    s = np.full((X.shape[1],), 0.3, np.float32) if per_channel else np.float32(0.3)
    if per_channel:
        s = s * np.linspace(0.8, 1.2, X.shape[1], dtype=np.float32)  # distinct steps per column
    want_ds, want_dx = _paper_grads(X, s, w, bits, signed, per_channel)

    # The pure function.
    def loss(x, step):
        return jnp.sum(jnp.asarray(w) * lsq_quant(x, step, bits, signed=signed))

    dx, ds = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(X), jnp.asarray(s))
    np.testing.assert_allclose(ds, want_ds, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, want_dx, rtol=1e-6)  # w * (s / s): one float32 rounding
    np.testing.assert_array_equal(np.asarray(dx) == 0, want_dx == 0)  # zero exactly where clipped

    # The module: the stored QuantStep gets the same gradient (d(|s| + eps)/ds = 1 for s > 0).
    q = LSQQuant(bits, signed=signed, per_channel=per_channel, n_channels=X.shape[1] if per_channel else None,
                 init_scale=0.3)
    q.step[...] = jnp.asarray(s)  # |s| + 1e-8 == s in float32 for s ~ 0.3

    def module_loss(q, x):
        return jnp.sum(jnp.asarray(w) * q(x))

    grads = nnx.jit(nnx.grad(module_loss))(q, jnp.asarray(X))
    np.testing.assert_allclose(grads.step[...], want_ds, rtol=1e-5, atol=1e-6)


def test_forward_values_on_grid():
    x = _normal(2, (64, 8))
    s = 0.17
    quant = jax.jit(lsq_quant, static_argnames=("bits", "signed"))
    for signed in (True, False):
        qn, qp = lsq_range(4, signed)
        x_hat = np.asarray(quant(x, jnp.float32(s), bits=4, signed=signed))
        k = x_hat / np.float32(s)
        np.testing.assert_allclose(k, np.round(k), atol=1e-4)
        assert k.min() >= -qn - 1e-4 and k.max() <= qp + 1e-4
        inside = (np.asarray(x) / s > -qn) & (np.asarray(x) / s < qp)
        assert np.all(np.abs(np.asarray(x) - x_hat)[inside] <= s / 2 + 1e-6)


def test_round_ste_and_scale_grad():
    x = np.array([-1.7, -0.5, 0.49, 0.51, 2.5, 3.2], np.float32)
    y = np.array([0.1, 1e-7, 3.3], np.float32)

    @jax.jit
    def check(x, y):
        _, t = jax.jvp(round_ste, (x,), (2.0 * jnp.ones_like(x),))
        return (round_ste(x), jax.grad(lambda v: round_ste(v).sum())(x), t, scale_grad(y, 0.125),
                jax.grad(lambda v: (scale_grad(v, 0.125) * v).sum())(y))

    r, g, t, sy, gy = check(x, y)
    np.testing.assert_array_equal(r, np.round(x))  # half to even, like jnp.round
    np.testing.assert_array_equal(g, np.ones(6, np.float32))
    np.testing.assert_array_equal(t, np.full(6, 2.0, np.float32))
    np.testing.assert_array_equal(sy, y)  # forward bit-exact
    np.testing.assert_allclose(gy, 0.125 * y + y, rtol=1e-6)


def test_default_grad_scale_is_one_over_sqrt_n_qp():
    x = jnp.asarray(X)
    g_default = jax.grad(lambda s: lsq_quant(x, s, 3).sum())(jnp.float32(0.3))
    g_one = jax.grad(lambda s: lsq_quant(x, s, 3, grad_scale=1.0).sum())(jnp.float32(0.3))
    np.testing.assert_allclose(g_default, g_one / math.sqrt(X.size * 3), rtol=1e-6)


@pytest.mark.parametrize("per_channel", [False, True])
def test_data_dependent_init_under_jit(per_channel):
    x = _normal(3, (32, 5), 2.0)
    q = LSQQuant(4, per_channel=per_channel, n_channels=5 if per_channel else None)
    assert not bool(q.initialized[...])

    @nnx.jit
    def f(q, x):
        return q(x)

    f(q, x)
    axis = 0 if per_channel else None
    want = 2 * np.mean(np.abs(np.asarray(x)), axis=axis) / math.sqrt(7)  # LSQ Sec. 2, Qp = 7
    np.testing.assert_allclose(q.step[...], want, rtol=1e-6)
    assert bool(q.initialized[...])
    f(q, 10 * x)  # later calls leave the step alone
    np.testing.assert_allclose(q.step[...], want, rtol=1e-6)
    np.testing.assert_allclose(lsq_init_step(x, 4, per_channel=per_channel), want, rtol=1e-6)


def test_training_step_under_jit_initialises_then_learns():
    x = _normal(4, (256,))
    q = LSQQuant(3)
    opt = nnx.Optimizer(q, optax.adam(1e-2), wrt=QuantStep)

    @nnx.jit
    def step(q, opt, x):
        def loss_fn(q):
            return jnp.mean(jnp.square(q(x) - x))

        loss, grads = nnx.value_and_grad(loss_fn)(q)
        opt.update(q, grads)
        return loss, grads.step[...]

    with jax.numpy_dtype_promotion("standard"):  # optax's adam is not strict-promotion clean
        loss0, g0 = step(q, opt, x)
        assert float(g0) == 0.0  # the first call used the data-derived step, not the parameter
        np.testing.assert_allclose(q.step[...], 2 * np.mean(np.abs(np.asarray(x))) / math.sqrt(3), rtol=1e-6)
        for _ in range(40):
            loss, _ = step(q, opt, x)
    assert float(loss) < 0.9 * float(loss0)  # the step size moved towards the MSE optimum


def test_bfloat16_input_keeps_dtype():
    x = _normal(5, (8, 4)).astype(jnp.bfloat16)
    q = LSQQuant(4, per_channel=True, n_channels=4)
    y = nnx.jit(lambda q, x: q(x))(q, x)
    assert y.dtype == jnp.bfloat16 and y.shape == x.shape
    assert q.step[...].dtype == jnp.float32


def test_protocol_and_variable_types():
    q = LSQQuant(5, signed=False)
    assert expected_bits(q).dtype == jnp.float32 and float(expected_bits(q)) == 5.0
    assert hard_bits(q) == 5 and q.hard_bits() == 5
    assert float(expected_bits(FakeQuant(None))) == 32.0 and hard_bits(FakeQuant(None)) == 32
    assert float(expected_bits(FakeQuant(6))) == 6.0 and hard_bits(FakeQuant(6)) == 6
    assert float(expected_bits(FakeQuant(32))) == 32.0 and hard_bits(FakeQuant(32)) == 32
    with pytest.raises(ValueError, match=r"^bits: must be in \[2, 32\]"):
        FakeQuant(40)  # not float32: an error
    assert float(expected_bits(None)) == 32.0
    with pytest.raises(TypeError, match="expected_bits"):
        expected_bits(object())
    with pytest.raises(TypeError, match="hard_bits"):
        hard_bits(object())

    class Net(nnx.Module):
        def __init__(self):
            self.w = nnx.Param(jnp.ones((3, 2)))
            self.q = LSQQuant(4)

    net = Net()
    steps = nnx.state(net, QuantStep)
    assert len(jax.tree.leaves(steps)) == 1
    weights = nnx.state(net, nnx.All(nnx.Param, nnx.Not(QuantStep)))
    assert [v.shape for v in jax.tree.leaves(weights)] == [(3, 2)]  # the weight only


@pytest.mark.parametrize("kwargs, match", [
    (dict(bits=1), "bits"),
    (dict(bits=0, signed=False), "bits"),
    (dict(bits=17), "bits"),
    (dict(bits=4, per_channel=True), "n_channels"),
    (dict(bits=4, per_channel=True, n_channels=0), "n_channels"),
    (dict(bits=4, init_scale=0.0), "init_scale"),
    (dict(bits=4, init_scale=float("nan")), "init_scale"),
    (dict(bits=4, init_method="mse"), "init_method"),
    (dict(bits=4, init_method="percentile"), "percentile"),
    (dict(bits=4, init_method="percentile", percentile=0.0), "percentile"),
])
def test_constructor_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LSQQuant(**kwargs)


@pytest.mark.parametrize("bits", [True, 4.0])
def test_constructor_bits_type_errors(bits):
    with pytest.raises(TypeError, match=r"^bits: must be an int"):
        LSQQuant(bits)


def test_call_errors():
    with pytest.raises(ValueError, match="x.dtype"):
        LSQQuant(4)(jnp.arange(4))
    with pytest.raises(ValueError, match="n_channels"):
        LSQQuant(4, per_channel=True, n_channels=3)(jnp.ones((2, 4)))
    with pytest.raises(ValueError, match="step"):
        lsq_quant(jnp.ones((2, 4)), jnp.ones((3,)), 4)


def test_cap_step_projects_onto_max_grid():
    """cap_step: a step above amax / Qp is projected back at the next call (written to the module)."""
    x = jnp.asarray([[0.0, 0.5, 1.5]], jnp.float32)
    q = LSQQuant(4, signed=False, init_scale=0.3, cap_step=True)   # cap = 1.5 / 15 = 0.1
    q(x)
    np.testing.assert_allclose(float(q.step[...]), 0.1, rtol=1e-6)
    q.step[...] = jnp.asarray(0.05)                                 # below the cap: untouched
    q(x)
    np.testing.assert_allclose(float(q.step[...]), 0.05, rtol=1e-6)
    free = LSQQuant(4, signed=False, init_scale=0.3)                # default: no projection
    free(x)
    np.testing.assert_allclose(float(free.step[...]), 0.3, rtol=1e-6)
