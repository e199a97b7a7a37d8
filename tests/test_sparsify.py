"""Tests of codesign.sparsify: hard-concrete statistics, gradients, modes, masks, variable types."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import optax
from flax import nnx

from codesign.sparsify import (
    BETA,
    GAMMA,
    ZETA,
    EdgeMask,
    FeatureMask,
    GateLogit,
    HardConcreteGate,
    deterministic,
    prob_nonzero,
    sample,
)

LOG_ALPHAS = [-3.0, -1.0, 0.0, 1.0, 3.0]
_sample_jit = jax.jit(sample)


@pytest.fixture(autouse=True)
def _strict_promotion():
    """As equinox's conftest: implicit dtype promotion and rank broadcasting are errors."""
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


@pytest.fixture
def getkey():
    keys = iter(jax.random.split(jax.random.key(1234), 64))
    return lambda: next(keys)


class _Tiny(nnx.Module):
    """A user's model with one edge mask and one feature mask."""

    def __init__(self, n_edges: int, n_features: int, *, rngs: nnx.Rngs):
        self.edge_mask = EdgeMask(n_edges, rngs=rngs)
        self.feat_mask = FeatureMask(n_features, rngs=rngs)
        self.linear = nnx.Linear(n_features, 2, rngs=rngs)

    def __call__(self, x):
        return self.linear(self.feat_mask(x)), self.edge_mask()


def _set_logits(gate: HardConcreteGate, values) -> None:
    gate.log_alpha[...] = jnp.asarray(values, jnp.float32)


# ---------------------------------------------------------------- distribution


def test_prob_nonzero_matches_monte_carlo(getkey):
    n = 200_000
    la = jnp.asarray(LOG_ALPHAS, jnp.float32)[:, None]
    z = _sample_jit(getkey(), jnp.broadcast_to(la, (len(LOG_ALPHAS), n)))
    mc = np.asarray(jnp.mean((z > 0).astype(jnp.float32), axis=1))
    p = np.asarray(prob_nonzero(la[:, 0]))
    se = np.sqrt(p * (1 - p) / n)
    np.testing.assert_array_less(np.abs(mc - p), 5 * se + 1e-6)
    # closed form checked by hand: log_alpha = 0 -> sigmoid(-(2/3) log(1/11)) = sigmoid(1.5986)
    assert float(p[2]) == pytest.approx(1 / (1 + math.exp(-(2 / 3) * math.log(11))), rel=1e-6)


def test_prob_one_and_mean_match_monte_carlo(getkey):
    n = 200_000
    la = jnp.asarray(LOG_ALPHAS, jnp.float32)[:, None]
    z = np.asarray(_sample_jit(getkey(), jnp.broadcast_to(la, (len(LOG_ALPHAS), n))), np.float64)
    # P(z = 1) = P(s >= (1 - GAMMA) / (ZETA - GAMMA)) = sigmoid(log_alpha - BETA log((1 - GAMMA) / (ZETA - 1)))
    la64 = np.asarray(LOG_ALPHAS)
    p_one = 1 / (1 + np.exp(-(la64 - BETA * np.log((1 - GAMMA) / (ZETA - 1)))))
    se_one = np.sqrt(p_one * (1 - p_one) / n)
    np.testing.assert_array_less(np.abs((z == 1).mean(axis=1) - p_one), 5 * se_one + 1e-6)
    # E[z] by midpoint-rule integration over u in (0, 1), float64.
    m = 1_000_000
    u = (np.arange(m) + 0.5) / m
    logit_u = np.log(u) - np.log1p(-u)
    s = 1 / (1 + np.exp(-(logit_u[None, :] + la64[:, None]) / BETA))
    mean_exact = np.clip(s * (ZETA - GAMMA) + GAMMA, 0, 1).mean(axis=1)
    se_mean = z.std(axis=1) / np.sqrt(n)
    np.testing.assert_array_less(np.abs(z.mean(axis=1) - mean_exact), 5 * se_mean + 1e-4)
    assert np.all((z >= 0) & (z <= 1))


def test_deterministic_values():
    la = jnp.asarray([-50.0, -math.log(11), 0.0, 50.0], jnp.float32)
    d = np.asarray(deterministic(la))
    assert d[0] == 0.0 and d[3] == 1.0
    assert d[1] == pytest.approx(0.0, abs=1e-6)
    assert d[2] == pytest.approx(0.5 * (ZETA - GAMMA) + GAMMA, rel=1e-6)  # 0.5
    assert np.all((d >= 0) & (d <= 1))


def test_sample_is_finite_at_extreme_logits(getkey):
    la = jnp.asarray([-1e4, -30.0, 30.0, 1e4], jnp.float32)
    z = _sample_jit(getkey(), jnp.broadcast_to(la, (1000, 4)))
    assert bool(jnp.all(jnp.isfinite(z)))
    np.testing.assert_array_equal(np.asarray(z[:, 0]), 0.0)
    np.testing.assert_array_equal(np.asarray(z[:, 3]), 1.0)


# ---------------------------------------------------------------- gradients


def test_expected_density_gradient_matches_finite_differences():
    gate = HardConcreteGate((4,), rngs=nnx.Rngs(0))
    values = np.asarray([-2.0, -0.5, 0.7, 2.5], np.float32)
    _set_logits(gate, values)
    grads = nnx.grad(lambda g: g.expected_density(), argnums=nnx.DiffState(0, GateLogit))(gate)
    g = np.asarray(grads["log_alpha"][...])
    assert np.all(g > 0)

    def f(v):
        return float(jnp.mean(prob_nonzero(jnp.asarray(v, jnp.float32))))

    eps = 1e-2
    fd = np.asarray([(f(values + eps * e) - f(values - eps * e)) / (2 * eps) for e in np.eye(4, dtype=np.float32)])
    np.testing.assert_allclose(g, fd, rtol=2e-3, atol=1e-5)
    # analytic: d/dla mean(sigmoid(la - c)) = sigmoid'(la - c) / 4
    p = 1 / (1 + np.exp(-(values.astype(np.float64) - BETA * np.log(-GAMMA / ZETA))))
    np.testing.assert_allclose(g, p * (1 - p) / 4, rtol=1e-5)


def test_sample_gradient_is_reparameterized(getkey):
    gate = HardConcreteGate((256,), init_log_alpha=0.0, rngs=nnx.Rngs(0))
    key = getkey()
    grads = nnx.grad(lambda g: jnp.sum(g(key=key)), argnums=nnx.DiffState(0, GateLogit))(gate)
    g = np.asarray(grads["log_alpha"][...])
    z = np.asarray(gate(key=key))
    inside = (z > 0) & (z < 1)
    assert inside.any() and np.all(g[inside] > 0)
    np.testing.assert_array_equal(g[~inside], 0.0)  # clipped gates pass no gradient


@pytest.mark.parametrize("typed_key", [True, False])
def test_sample_gradient_redraws_the_forward_noise(getkey, typed_key):
    """The sample's backward pass keeps no per-gate array: it draws the noise again from the key
    (made to depend on the cotangent). Its gradient equals autodiff's of the same formula, also
    jitted, vmapped over seeds, with a legacy uint32 key and with a non-finite cotangent entry."""
    from codesign.sparsify.hard_concrete import _noise, _stretch_clip
    key = getkey() if typed_key else jax.random.PRNGKey(7)
    la = jnp.linspace(-4.0, 4.0, 512, dtype=jnp.float32)
    w = jnp.cos(jnp.arange(512, dtype=jnp.float32))

    def autodiff(k, a):
        return _stretch_clip(jax.nn.sigmoid((_noise(k, a.shape, a.dtype) + a) / BETA))

    for f in (lambda a: jnp.sum(w * sample(key, a)), jax.jit(lambda a: jnp.sum(w * sample(key, a)))):
        np.testing.assert_array_equal(np.asarray(sample(key, la)), np.asarray(autodiff(key, la)))
        np.testing.assert_allclose(np.asarray(jax.grad(f)(la)),
                                   np.asarray(jax.grad(lambda a: jnp.sum(w * autodiff(key, a)))(la)), rtol=1e-5, atol=1e-7)
    keys = jax.random.split(key, 3)
    got = jax.vmap(jax.grad(lambda k, a: jnp.sum(w * sample(k, a)), argnums=1), in_axes=(0, None))(keys, la)
    want = jax.vmap(jax.grad(lambda k, a: jnp.sum(w * autodiff(k, a)), argnums=1), in_axes=(0, None))(keys, la)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-7)
    # a non-finite cotangent at [0] does not poison the redraw (only that entry's gradient)
    g = jax.grad(lambda a: jnp.sum(w.at[0].set(jnp.inf) * sample(key, a)))(la)
    assert bool(jnp.all(jnp.isfinite(g[1:])))
    # no gates at all (a graph without edges): an empty gradient, not an index error
    assert jax.grad(lambda a: jnp.sum(sample(key, a)))(jnp.zeros((0,), jnp.float32)).shape == (0,)


# ---------------------------------------------------------------- modes


def test_training_mode_is_stochastic_and_deterministic_mode_is_not():
    gate = HardConcreteGate((64,), init_log_alpha=0.0, rngs=nnx.Rngs(0))
    assert gate.deterministic is False
    a, b = gate(), gate()
    assert not np.array_equal(np.asarray(a), np.asarray(b))
    c, d = gate(deterministic=True), gate(deterministic=True)
    np.testing.assert_array_equal(np.asarray(c), np.asarray(d))
    np.testing.assert_array_equal(np.asarray(c), np.asarray(deterministic(gate.log_alpha[...])))
    gate.deterministic = True
    e, f = gate(), gate(deterministic=False)  # call argument overrides the attribute
    np.testing.assert_array_equal(np.asarray(e), np.asarray(c))
    assert not np.array_equal(np.asarray(f), np.asarray(c))


def test_model_eval_and_train_switch_masks():
    model = _Tiny(32, 8, rngs=nnx.Rngs(0))
    for m in (model.edge_mask, model.feat_mask):
        _set_logits(m.gate, jnp.linspace(-3.0, 3.0, m.gate.log_alpha.shape[0]))
    x = jnp.ones((5, 8), jnp.float32)
    fwd = nnx.jit(lambda m, v: m(v))  # one compile per mode instead of many eager op compiles
    y1, z1 = fwd(model, x)
    y2, z2 = fwd(model, x)
    assert not np.array_equal(np.asarray(z1), np.asarray(z2))
    assert not np.array_equal(np.asarray(y1), np.asarray(y2))

    model.eval()
    assert model.edge_mask.gate.deterministic and model.feat_mask.gate.deterministic
    y3, z3 = fwd(model, x)
    y4, z4 = fwd(model, x)
    np.testing.assert_array_equal(np.asarray(z3), np.asarray(z4))
    np.testing.assert_array_equal(np.asarray(y3), np.asarray(y4))
    # jit fuses the ops: equal to the eager formula up to float32 rounding
    np.testing.assert_allclose(np.asarray(z3), np.asarray(deterministic(model.edge_mask.gate.log_alpha[...])), rtol=1e-6, atol=1e-7)

    model.train()
    assert not model.edge_mask.gate.deterministic
    _, z5 = fwd(model, x)
    _, z6 = fwd(model, x)
    assert not np.array_equal(np.asarray(z5), np.asarray(z6))


def test_modes_under_nnx_jit():
    model = _Tiny(16, 4, rngs=nnx.Rngs(0))
    _set_logits(model.edge_mask.gate, jnp.zeros(16))
    step = nnx.jit(lambda m: m.edge_mask())
    assert not np.array_equal(np.asarray(step(model)), np.asarray(step(model)))  # rng state advances
    model.eval()  # static attribute: a retrace, then deterministic
    np.testing.assert_array_equal(np.asarray(step(model)), np.asarray(step(model)))


@pytest.mark.skipif(not hasattr(nnx, "view"), reason="nnx.view needs flax >= 0.12")
def test_nnx_view_sets_deterministic():
    model = _Tiny(8, 4, rngs=nnx.Rngs(0))
    view = nnx.view(model, deterministic=True)
    assert view.edge_mask.gate.deterministic and view.feat_mask.gate.deterministic
    assert not model.edge_mask.gate.deterministic  # the original keeps its mode


# ---------------------------------------------------------------- hard exports


def test_hard_mask_matches_deterministic_gate():
    mask = EdgeMask(101, rngs=nnx.Rngs(0))
    la = jnp.linspace(-5.0, 5.0, 101)
    _set_logits(mask.gate, la)
    hard = np.asarray(mask.hard_mask())
    assert hard.dtype == np.bool_ and hard.shape == (101,)
    np.testing.assert_array_equal(hard, np.asarray(mask(deterministic=True)) > 0)
    np.testing.assert_array_equal(hard, np.asarray(la) > math.log(-GAMMA / ZETA))
    assert float(mask.hard_density()) == pytest.approx(hard.mean())


@pytest.mark.parametrize("layer", ["edge", "feature"])
def test_extreme_logits_give_empty_and_full_masks(layer):
    make = (lambda la: EdgeMask(10, init_log_alpha=la, rngs=nnx.Rngs(0))) if layer == "edge" else (
        lambda la: FeatureMask(10, init_log_alpha=la, rngs=nnx.Rngs(0))
    )
    off, on = make(-20.0), make(20.0)
    assert not np.asarray(off.hard_mask()).any() and float(off.hard_density()) == 0.0
    assert float(off.expected_density()) < 1e-6
    assert np.asarray(on.hard_mask()).all() and float(on.hard_density()) == 1.0
    assert float(on.expected_density()) > 1 - 1e-6


def test_default_init_is_nearly_dense():
    mask = EdgeMask(7, rngs=nnx.Rngs(0))
    expected = 1 / (1 + math.exp(-(3.0 - BETA * math.log(-GAMMA / ZETA))))
    assert float(mask.expected_density()) == pytest.approx(expected, rel=1e-6)
    assert mask.expected_density().dtype == jnp.float32 and mask.expected_density().shape == ()


# ---------------------------------------------------------------- variable types


def test_gate_logits_are_their_own_variable_type():
    model = _Tiny(6, 3, rngs=nnx.Rngs(0))
    gates = nnx.state(model, GateLogit)
    shapes = sorted(jnp.shape(v) for v in jax.tree.leaves(gates))
    assert shapes == [(3,), (6,)]
    # GateLogit subclasses nnx.Param: the Param filter includes the logits too ...
    n_param = len(jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert n_param == 2 + 2  # linear kernel + bias, two gate logits
    # ... and this filter excludes them.
    weights = nnx.state(model, nnx.All(nnx.Param, nnx.Not(GateLogit)))
    assert sorted(jnp.shape(v) for v in jax.tree.leaves(weights)) == [(2,), (3, 2)]
    assert model.edge_mask.gate.log_alpha.dtype == jnp.float32


# ---------------------------------------------------------------- feature mask


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_feature_mask_applies_gates(dtype):
    fm = FeatureMask(4, rngs=nnx.Rngs(0))
    _set_logits(fm.gate, [-20.0, 20.0, 20.0, -20.0])
    x = jnp.arange(12, dtype=dtype).reshape(3, 4)
    y = fm(x, deterministic=True)
    assert y.dtype == dtype and y.shape == (3, 4)
    np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(x, np.float32) * np.asarray([0, 1, 1, 0]))
    assert fm(x).dtype == dtype  # training mode too


def test_feature_mask_shape_errors():
    fm = FeatureMask(4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"n_features=4.*\(3, 5\)"):
        fm(jnp.ones((3, 5)))
    with pytest.raises(ValueError, match="n_features"):
        fm(jnp.float32(1.0))


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "3", None])
def test_edge_mask_rejects_bad_n_edges(bad):
    with pytest.raises(ValueError, match="n_edges"):
        EdgeMask(bad, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("bad", [0, -1, 1.0])
def test_feature_mask_rejects_bad_n_features(bad):
    with pytest.raises(ValueError, match="n_features"):
        FeatureMask(bad, rngs=nnx.Rngs(0))


def test_numpy_int_sizes_are_accepted():
    assert EdgeMask(np.int64(5), rngs=nnx.Rngs(0))().shape == (5,)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), "3"])
def test_rejects_bad_init_log_alpha(bad):
    with pytest.raises(ValueError, match="init_log_alpha"):
        HardConcreteGate((3,), init_log_alpha=bad, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="init_log_alpha"):
        EdgeMask(3, init_log_alpha=bad, rngs=nnx.Rngs(0))


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_rejects_bad_beta(bad):
    with pytest.raises(ValueError, match="beta"):
        HardConcreteGate((3,), beta=bad, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="beta"):
        prob_nonzero(jnp.zeros(3), beta=bad)


def test_rejects_bad_shape_and_rngs():
    with pytest.raises(ValueError, match="shape"):
        HardConcreteGate((3, -1), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="rngs"):
        HardConcreteGate((3,), rngs=jax.random.key(0))


@pytest.mark.parametrize("layer", [EdgeMask, FeatureMask])
def test_hard_mask_agrees_with_expected_density_after_training(layer):
    # 150 of 400 gates help the objective, 250 hurt it; after training with the expected L0 in
    # the loss the gates saturate, so the deterministic hard mask keeps what the expectation says
    # and keeps the right ones.
    n, useful = 400, 150
    m = layer(n, rngs=nnx.Rngs(0))
    value = jnp.where(jnp.arange(n) < useful, 1.0, -1.0)
    opt = nnx.Optimizer(m, optax.adam(0.05), wrt=GateLogit)

    @nnx.jit
    def step(m, opt):
        def loss(m):
            gates = m() if layer is EdgeMask else m(jnp.ones((1, n), jnp.float32))[0]
            return -jnp.mean(gates * value) + 0.05 * m.expected_density()
        opt.update(m, nnx.grad(loss, argnums=nnx.DiffState(0, GateLogit))(m))

    m.train()
    start_gap = abs(float(m.expected_density()) - useful / n)
    with jax.numpy_dtype_promotion("standard"):  # optax's Adam mixes its int32 step count with floats
        for _ in range(1500):
            step(m, opt)
    expected, hard = float(m.expected_density()), float(m.hard_density())
    assert start_gap > 0.3  # the test starts far from the answer (default init is nearly dense)
    assert abs(expected - hard) < 0.02, (expected, hard)
    np.testing.assert_array_equal(np.asarray(m.hard_mask()), np.arange(n) < useful)
