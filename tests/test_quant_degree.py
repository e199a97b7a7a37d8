"""Tests of codesign.quant.degree: the Degree-Quant protection probabilities (by hand and by Monte
Carlo), DegreeQuant train/eval behaviour, A^2Q-style bit initialisation, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.quant import (DegreeQuant, LearnedBitQuant, a2q_init_bits, degree_cdf, expected_bits, hard_bits,
                            protection_probs, qrange)


@pytest.fixture(autouse=True)
def _strict_promotion():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


DEG = np.array([0, 0, 1, 3, 3, 3, 10], np.int32)


def _normal(seed: int, shape, scale=1.0) -> jax.Array:
    """Fixed-seed float32 test data (numpy's generator: no per-shape JAX compilation)."""
    return jnp.asarray((np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32))


def _np_fake_quant(x, bits, scale):
    """The `fake_quant` grid in numpy: clip(round(x / scale), -hi, hi) * scale, float32."""
    _, hi = qrange(bits)
    x = np.asarray(x, np.float32)
    return (np.clip(np.round(x / np.float32(scale)), -hi, hi) * np.float32(scale)).astype(np.float32)


def test_protection_probs_by_hand():
    # CDF (#{deg_j <= deg_i} / N): deg 0 -> 2/7, 1 -> 3/7, 3 -> 6/7, 10 -> 7/7 (camlsys/degree-quant).
    cdf = np.array([2, 2, 3, 6, 6, 6, 7], np.float64) / 7
    np.testing.assert_allclose(degree_cdf(DEG), cdf, rtol=1e-6)
    np.testing.assert_allclose(protection_probs(DEG, 0.1, 0.5), 0.1 + 0.4 * cdf, rtol=1e-6)
    np.testing.assert_allclose(protection_probs(DEG.astype(np.float32), 0.0, 0.0), np.zeros(7))
    assert float(protection_probs(DEG, 0.0, 0.3)[-1]) == pytest.approx(0.3)  # the highest degree gets p_max


class _Net(nnx.Module):
    def __init__(self, deg, **kw):
        self.q = DegreeQuant(4, deg, p_min=0.2, p_max=0.8, rngs=nnx.Rngs(quant=3), **kw)

    def __call__(self, x):
        return self.q(x)


_apply = nnx.jit(lambda m, x: m(x))


def test_train_protects_masked_rows_and_ranges_from_the_rest():
    x = _normal(1, (7, 5), np.arange(1, 8)[:, None])
    q = DegreeQuant(4, DEG, p_min=0.2, p_max=0.8, rngs=nnx.Rngs(0))
    y, protected = jax.jit(lambda x, k: (q(x, key=k), jax.random.bernoulli(k, protection_probs(DEG, 0.2, 0.8))))(
        x, jax.random.key(7))
    y, protected = np.asarray(y), np.asarray(protected)
    assert protected.any() and not protected.all()  # the fixed key exercises both cases
    xn = np.asarray(x)
    np.testing.assert_array_equal(y[protected], xn[protected])  # full precision, unchanged
    _, hi = qrange(4)
    scale = np.max(np.abs(xn[~protected])) / hi  # range from the quantized rows only
    np.testing.assert_allclose(y[~protected], _np_fake_quant(xn, 4, scale)[~protected], rtol=1e-6)
    k = y[~protected] / scale
    np.testing.assert_allclose(k, np.round(k), atol=1e-4)


def test_eval_quantizes_every_row_and_modes_switch():
    x = _normal(2, (7, 3))
    net = _Net(DEG)
    net.eval()
    assert net.q.deterministic
    _, hi = qrange(4)
    want = _np_fake_quant(x, 4, np.max(np.abs(np.asarray(x))) / np.float32(hi))  # max over all rows
    np.testing.assert_allclose(_apply(net, x), want, rtol=1e-6)
    net.train()
    assert not net.q.deterministic
    ys = [np.asarray(_apply(net, x)) for _ in range(6)]
    exact = [np.all(y == np.asarray(x), axis=1) for y in ys]  # rows passed through unchanged
    assert any(e.any() for e in exact)
    assert any(not np.array_equal(exact[0], e) for e in exact[1:])  # the stream advances per call


def test_gradients_identity_on_protected_rows():
    x = _normal(3, (7, 4))
    q = DegreeQuant(3, DEG, p_min=0.5, p_max=0.5, rngs=nnx.Rngs(0))

    @jax.jit
    def grad_and_mask(x, key):
        return jax.grad(lambda x: jnp.sum(q(x, key=key) * 3.0))(x), jax.random.bernoulli(key, q.protect_prob[...])

    g, protected = (np.asarray(a) for a in grad_and_mask(x, jax.random.key(11)))
    assert protected.any() and not protected.all()
    np.testing.assert_array_equal(g[protected], np.full_like(g[protected], 3.0))
    # Quantized rows: straight-through, all in range with the max-based scale.
    np.testing.assert_array_equal(g[~protected], np.full_like(g[~protected], 3.0))


def test_percentile_range():
    x = jnp.asarray(np.concatenate([np.linspace(-1, 1, 6 * 50).reshape(6, 50),
                                    np.full((1, 50), 100.0)]), jnp.float32)
    q = DegreeQuant(8, DEG, percentile=90.0, rngs=nnx.Rngs(0))
    q.deterministic = True
    s = float(jax.jit(q.scale)(x))
    np.testing.assert_allclose(s, np.percentile(np.abs(np.asarray(x)), 90.0) / 127, rtol=1e-5)
    y = np.asarray(_apply(q, x))
    assert np.all(np.abs(y) <= 127 * s * (1 + 1e-6))  # the outlier row saturates


def test_protocol():
    q = DegreeQuant(6, DEG, signed=False, rngs=nnx.Rngs(0))
    assert float(expected_bits(q)) == 6.0 and hard_bits(q) == 6
    q.deterministic = True
    assert float(q.expected_bits()) == 6.0


def test_a2q_init_bits():
    deg = np.array([0, 1, 1, 2, 5, 9, 30, 2], np.int32)
    b = np.asarray(a2q_init_bits(deg, 4.0, 2.0, 8.0))
    assert b.dtype == np.float32 and b.shape == (8,)
    assert b.mean() == pytest.approx(4.0, abs=1e-5)
    assert b.min() >= 2.0 - 1e-6 and b.max() <= 8.0 + 1e-6
    assert b.min() == pytest.approx(2.0, abs=1e-5) or b.max() == pytest.approx(8.0, abs=1e-5)  # widest spread
    order = np.argsort(deg, kind="stable")
    assert np.all(np.diff(b[order]) >= -1e-6)  # non-decreasing in the in-degree
    assert b[1] == b[2] and b[3] == b[7]  # equal degrees, equal bits
    np.testing.assert_allclose(a2q_init_bits(np.full(5, 3), 5.0, 2.0, 8.0), np.full(5, 5.0))
    # Initialises a per-node learned-bit quantizer.
    x = _normal(4, (8, 3))
    q = LearnedBitQuant(b, per_node=8, min_bits=2, max_bits=8)
    mean_bits = nnx.jit(lambda q, x: (q(x), q.expected_bits())[1])(q, x)
    assert float(mean_bits) == pytest.approx(4.0, abs=1e-4)


@pytest.mark.parametrize("p_min, p_max, match", [
    (-0.1, 0.5, "p_min"), (0.2, 1.5, "p_max"), (0.6, 0.5, "p_min must be <= p_max"), (True, 0.5, "p_min"),
])
def test_probability_errors(p_min, p_max, match):
    with pytest.raises(ValueError, match=match):
        protection_probs(DEG, p_min, p_max)


def test_other_errors():
    with pytest.raises(ValueError, match="in_degree"):
        protection_probs(np.zeros((2, 3)), 0.0, 0.1)
    with pytest.raises(ValueError, match="in_degree"):
        protection_probs(np.array([1, -1]), 0.0, 0.1)
    with pytest.raises(ValueError, match="mean_bits"):
        a2q_init_bits(DEG, 9.0, 2.0, 8.0)
    with pytest.raises(ValueError, match="bits"):
        DegreeQuant(1, DEG, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="bits"):
        DegreeQuant(32, DEG, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="percentile"):
        DegreeQuant(4, DEG, percentile=0.0, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="rngs"):
        DegreeQuant(4, DEG, rngs=0)
    q = DegreeQuant(4, DEG, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="rows"):
        q(jnp.ones((6, 2)))
    with pytest.raises(ValueError, match="x.dtype"):
        q(jnp.ones((7, 2), jnp.int32))
