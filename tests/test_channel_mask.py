"""Tests of `ChannelMask` (one hard-concrete gate per hidden channel) and of the protocol methods
added to `EdgeMask`."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.sparsify import (
    BETA,
    GAMMA,
    ZETA,
    ChannelMask,
    EdgeMask,
    EdgeSparsifier,
    FeatureMask,
    GateLogit,
    Sparsifier,
    deterministic,
)


@pytest.fixture(autouse=True)
def _strict_promotion():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


def _set_logits(mask, values):
    mask.gate.log_alpha[...] = jnp.asarray(values, jnp.float32)


class _MLP(nnx.Module):
    """A user's two-layer block with a channel mask between the layers."""

    def __init__(self, d_in, hidden, d_out, *, rngs):
        self.lin1 = nnx.Linear(d_in, hidden, rngs=rngs)
        self.chan_mask = ChannelMask(hidden, rngs=rngs)
        self.lin2 = nnx.Linear(hidden, d_out, rngs=rngs)

    def __call__(self, x):
        return self.lin2(self.chan_mask(jax.nn.relu(self.lin1(x))))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(3, 4), (2, 3, 4)])
def test_applies_one_gate_per_channel(dtype, shape):
    cm = ChannelMask(4, rngs=nnx.Rngs(0))
    _set_logits(cm, [20.0, -20.0, 20.0, -20.0])
    h = jnp.arange(math.prod(shape), dtype=dtype).reshape(shape) + 1
    y = cm(h, deterministic=True)
    assert y.dtype == dtype and y.shape == shape
    np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(h, np.float32) * np.asarray([1, 0, 1, 0]))
    assert cm(h).dtype == dtype
    z = np.asarray(cm(jnp.ones((50, 4), jnp.float32)))  # training: one draw shared by all rows
    assert np.all(z == z[:1])


def test_pruned_channels_shrink_both_gemms():
    """Hardened: the block equals the smaller block with the pruned columns of W1 and rows of W2 removed."""
    model = _MLP(5, 8, 3, rngs=nnx.Rngs(0))
    la = np.asarray([9.0, -9.0, 0.5, -9.0, 2.0, 9.0, -9.0, 1.0], np.float32)
    _set_logits(model.chan_mask, la)
    model.eval()
    x = jnp.asarray(np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32))
    y = nnx.jit(lambda m, x: m(x))(model, x)
    keep = np.asarray(model.chan_mask.hard_mask())
    np.testing.assert_array_equal(keep, la > -math.log(11))
    z = np.asarray(deterministic(jnp.asarray(la)))[keep]
    w1, b1 = np.asarray(model.lin1.kernel[...])[:, keep], np.asarray(model.lin1.bias[...])[keep]
    w2, b2 = np.asarray(model.lin2.kernel[...])[keep, :], np.asarray(model.lin2.bias[...])
    small = (np.maximum(np.asarray(x) @ w1 + b1, 0) * z) @ w2 + b2  # [N, 5] x [5, K] x [K, 3]
    assert w1.shape == (5, 5) and w2.shape == (5, 3)
    np.testing.assert_allclose(np.asarray(y), small, rtol=1e-5, atol=1e-6)
    assert float(model.chan_mask.hard_density()) == pytest.approx(5 / 8)


def test_expected_density_matches_monte_carlo(getkey):
    cm = ChannelMask(64, rngs=nnx.Rngs(0))
    la = np.linspace(-3.0, 3.0, 64).astype(np.float32)
    _set_logits(cm, la)
    draws = jax.vmap(lambda k: cm.gate(key=k) > 0)(jax.random.split(getkey(), 4000))
    frac = np.asarray(draws).mean(axis=1)
    n = frac.size
    assert abs(frac.mean() - float(cm.expected_density())) < 5 * frac.std() / math.sqrt(n) + 1e-6
    p = 1 / (1 + np.exp(-(la.astype(np.float64) - BETA * math.log(-GAMMA / ZETA))))
    per_gate = np.asarray(draws).mean(axis=0)
    np.testing.assert_array_less(np.abs(per_gate - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-3)


def test_expected_density_gradient_matches_finite_differences():
    cm = ChannelMask(5, rngs=nnx.Rngs(0))
    la = np.asarray([-2.0, -0.3, 0.0, 1.1, 2.5], np.float32)
    _set_logits(cm, la)
    g = np.asarray(nnx.grad(lambda m: m.expected_density(), argnums=nnx.DiffState(0, GateLogit))(cm)["gate"]["log_alpha"][...])
    assert np.all(np.isfinite(g)) and np.all(g > 0)
    eps = 1e-2
    fd = []
    for e in np.eye(5, dtype=np.float32):
        vals = []
        for sign in (1, -1):
            _set_logits(cm, la + sign * eps * e)
            vals.append(float(cm.expected_density()))
        fd.append((vals[0] - vals[1]) / (2 * eps))
    np.testing.assert_allclose(g, fd, rtol=2e-3, atol=1e-5)


def test_modes_and_variable_types():
    model = _MLP(5, 8, 3, rngs=nnx.Rngs(0))
    _set_logits(model.chan_mask, np.zeros(8))
    fwd = nnx.jit(lambda m, x: m(x))
    x = jnp.ones((7, 5), jnp.float32)
    assert not np.array_equal(np.asarray(fwd(model, x)), np.asarray(fwd(model, x)))
    model.eval()
    assert model.chan_mask.gate.deterministic
    np.testing.assert_array_equal(np.asarray(fwd(model, x)), np.asarray(fwd(model, x)))
    assert [jnp.shape(v) for v in jax.tree.leaves(nnx.state(model, GateLogit))] == [(8,)]
    assert isinstance(model.chan_mask, Sparsifier) and not isinstance(model.chan_mask, EdgeSparsifier)
    assert not isinstance(FeatureMask(3, rngs=nnx.Rngs(0)), EdgeSparsifier)


def test_shape_and_size_errors():
    cm = ChannelMask(4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"n_channels=4.*\(3, 5\)"):
        cm(jnp.ones((3, 5)))
    with pytest.raises(ValueError, match="n_channels"):
        cm(jnp.float32(1.0))
    for bad in (0, -1, 2.5, True, None):
        with pytest.raises(ValueError, match="n_channels"):
            ChannelMask(bad, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="beta"):
        ChannelMask(3, beta=-1.0, rngs=nnx.Rngs(0))


# ---------------------------------------------------------------- EdgeMask's protocol methods


def test_edge_mask_protocol_methods():
    em = EdgeMask(6, rngs=nnx.Rngs(0))
    la = np.asarray([-9.0, 9.0, 0.2, -0.5, 4.0, -4.0], np.float32)
    _set_logits(em, la)
    assert isinstance(em, EdgeSparsifier)
    np.testing.assert_array_equal(np.asarray(em.edge_gates(deterministic=True)), np.asarray(em(deterministic=True)))
    s = jnp.zeros(6, jnp.int32)
    np.testing.assert_array_equal(np.asarray(em.edge_gates(jnp.ones((2, 3)), s, s, deterministic=True)),
                                  np.asarray(deterministic(jnp.asarray(la))))
    assert float(em.expected_edge_density()) == float(em.expected_density())
    np.testing.assert_array_equal(np.asarray(em.hard_edge_mask()), np.asarray(em.hard_mask()))
    assert float(em.hard_edge_density()) == float(em.hard_density()) == pytest.approx(4 / 6)  # -log 11 < -0.5
    with pytest.raises(ValueError, match=r"receivers must have shape \(6,\)"):
        em.edge_gates(None, s, jnp.zeros(5, jnp.int32))
