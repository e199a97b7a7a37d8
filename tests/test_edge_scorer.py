"""Tests of `EdgeScorer` (PTDNet-style learned edge gates) and of the temperature schedule."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.sparsify import (
    BETA,
    GATE_PARAMS,
    EdgeMask,
    EdgeScorer,
    EdgeSparsifier,
    ScorerLogits,
    ScorerParam,
    deterministic,
    prob_nonzero,
)

F, H, N, E = 6, 4, 30, 90


@pytest.fixture(scope="module")
def inputs():
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(N, F)).astype(np.float32))
    s = jnp.asarray(rng.integers(0, N, E).astype(np.int32))
    r = jnp.asarray(rng.integers(0, N, E).astype(np.int32))
    return x, s, r


def _scorer(**kw):
    return EdgeScorer(F, H, rngs=nnx.Rngs(0), **kw)


def _numpy_logits(sc, x, s, r):
    p = {k: np.asarray(getattr(sc, k)[...], np.float64) for k in ("w_send", "b_send", "w_recv", "b_recv", "w_out", "b_out")}
    x = np.asarray(x, np.float64)
    a_s = np.maximum(x @ p["w_send"] + p["b_send"], 0)[np.asarray(s)]
    a_r = np.maximum(x @ p["w_recv"] + p["b_recv"], 0)[np.asarray(r)]
    return np.concatenate([a_s, a_r], axis=1) @ p["w_out"][:, 0] + p["b_out"]


# ---------------------------------------------------------------- formula and modes


def test_logits_match_numpy_reference(inputs):
    x, s, r = inputs
    sc = _scorer()
    la = sc.logits(x, s, r)
    assert la.dtype == jnp.float32 and la.shape == (E,)
    np.testing.assert_allclose(np.asarray(la), _numpy_logits(sc, x, s, r), rtol=1e-5, atol=1e-5)
    assert np.std(np.asarray(la)) > 0.05  # the endpoints matter
    # the bias starts at init_log_alpha
    assert float(_scorer(init_log_alpha=-1.5).b_out[...]) == -1.5


def test_edge_gates_modes_and_cache(inputs):
    x, s, r = inputs
    sc = _scorer(init_log_alpha=0.0)
    assert sc.last_log_alpha.shape == (0,) and isinstance(sc.last_log_alpha, ScorerLogits)
    z1, z2 = sc.edge_gates(x, s, r), sc.edge_gates(x, s, r)
    assert z1.dtype == jnp.float32 and z1.shape == (E,)
    assert not np.array_equal(np.asarray(z1), np.asarray(z2))
    assert bool(jnp.all((z1 >= 0) & (z1 <= 1)))
    np.testing.assert_array_equal(np.asarray(sc.last_log_alpha[...]), np.asarray(sc.logits(x, s, r)))
    zd = sc.edge_gates(x, s, r, deterministic=True)
    np.testing.assert_array_equal(np.asarray(zd), np.asarray(deterministic(sc.logits(x, s, r))))
    np.testing.assert_array_equal(np.asarray(sc.hard_mask()), np.asarray(zd) > 0)
    assert float(sc.hard_density()) == pytest.approx(float(np.mean(np.asarray(zd) > 0)))
    np.testing.assert_array_equal(np.asarray(sc.hard_edge_mask()), np.asarray(sc.hard_mask()))
    assert float(sc.expected_density()) == pytest.approx(float(jnp.mean(prob_nonzero(sc.logits(x, s, r)))), rel=1e-6)
    assert float(sc.expected_edge_density()) == float(sc.expected_density())
    assert isinstance(sc, EdgeSparsifier)


class _UserModel(nnx.Module):
    def __init__(self, *, rngs):
        self.scorer = EdgeScorer(F, H, init_log_alpha=0.0, rngs=rngs)

    def __call__(self, x, s, r):
        return self.scorer.edge_gates(x, s, r)


def test_model_train_eval_switch_the_scorer(inputs):
    x, s, r = inputs
    model = _UserModel(rngs=nnx.Rngs(0))
    fwd = nnx.jit(lambda m, x, s, r: m(x, s, r))
    assert not np.array_equal(np.asarray(fwd(model, x, s, r)), np.asarray(fwd(model, x, s, r)))
    model.eval()
    assert model.scorer.deterministic
    np.testing.assert_array_equal(np.asarray(fwd(model, x, s, r)), np.asarray(fwd(model, x, s, r)))
    model.train()
    assert not model.scorer.deterministic
    view = nnx.view(model, deterministic=True) if hasattr(nnx, "view") else None
    if view is not None:
        assert view.scorer.deterministic and not model.scorer.deterministic


# ---------------------------------------------------------------- statistics and gradients


def test_expected_density_matches_monte_carlo(inputs):
    x, s, r = inputs
    sc = _scorer(init_log_alpha=0.5)
    draw = nnx.jit(lambda m: (m.edge_gates(x, s, r) > 0, m.expected_density()))
    n = 200
    kept, dens = zip(*(draw(sc) for _ in range(n)))
    frac = np.asarray(kept).mean(axis=1)
    assert len({float(d) for d in dens}) == 1  # the same logits each draw
    assert abs(frac.mean() - float(dens[0])) < 5 * frac.std() / math.sqrt(n) + 1e-6


def test_gradients_under_jit_reach_every_scorer_weight(inputs):
    x, s, r = inputs
    sc = _scorer(init_log_alpha=0.5)
    y = jnp.asarray(np.random.default_rng(1).normal(size=(E,)).astype(np.float32))

    def loss(m, x, s, r):
        return jnp.sum(m.edge_gates(x, s, r) * y) + 0.1 * m.expected_density()

    step = nnx.jit(lambda m, x, s, r: nnx.value_and_grad(loss, argnums=nnx.DiffState(0, ScorerParam))(m, x, s, r))
    value, grads = step(sc, x, s, r)
    assert np.isfinite(float(value))
    leaves = jax.tree.leaves(grads)
    assert len(leaves) == 6
    for g in leaves:
        assert bool(jnp.all(jnp.isfinite(g))) and float(jnp.abs(g).sum()) > 0
    assert sc.last_log_alpha.shape == (E,)  # the cache left jit as a concrete array
    assert isinstance(sc.last_log_alpha[...], jax.Array) and not isinstance(sc.last_log_alpha[...], jax.core.Tracer)


def test_expected_density_gradient_matches_finite_differences(inputs):
    x, s, r = inputs
    sc = _scorer(init_log_alpha=0.3)

    @nnx.jit
    def dens(m):
        m.edge_gates(x, s, r, deterministic=True)
        return m.expected_density()

    grads = nnx.jit(nnx.grad(dens, argnums=nnx.DiffState(0, ScorerParam)))(sc)
    la = _numpy_logits(sc, x, s, r)
    p = 1 / (1 + np.exp(-(la - BETA * math.log(1 / 11))))
    # d mean(p) / d b_out = mean(p (1 - p)), float64 closed form
    assert float(grads["b_out"][...]) == pytest.approx(float(np.mean(p * (1 - p))), rel=1e-4)
    eps = 1e-2
    w = np.asarray(sc.w_out[...]).copy()
    g = np.asarray(grads["w_out"][...])
    for i in (0, H, 2 * H - 1):
        vals = []
        for sign in (1, -1):
            bumped = w.copy()
            bumped[i, 0] += sign * eps
            sc.w_out[...] = jnp.asarray(bumped)
            vals.append(float(dens(sc)))
        sc.w_out[...] = jnp.asarray(w)
        assert (vals[0] - vals[1]) / (2 * eps) == pytest.approx(g[i, 0], rel=2e-2, abs=1e-5)


def test_inductive_on_a_new_graph(inputs):
    x, s, r = inputs
    sc = _scorer()
    step = nnx.jit(lambda m, x, s, r: (m.edge_gates(x, s, r), m.expected_density()))
    z, _ = step(sc, x, s, r)
    x2 = np.concatenate([np.asarray(x), np.asarray(x[:5]) * 2.0])
    s2 = np.concatenate([np.asarray(s), [30, 31]]).astype(np.int32)
    r2 = np.concatenate([np.asarray(r), [34, 0]]).astype(np.int32)
    z2, d2 = step(sc, jnp.asarray(x2), jnp.asarray(s2), jnp.asarray(r2))
    assert z2.shape == (E + 2,) and sc.last_log_alpha.shape == (E + 2,)
    la = _numpy_logits(sc, x2, s2, r2)
    np.testing.assert_allclose(np.asarray(sc.last_log_alpha[...]), la, rtol=1e-5, atol=1e-5)
    p = 1 / (1 + np.exp(-(la - BETA * math.log(1 / 11))))
    assert float(d2) == pytest.approx(float(p.mean()), rel=1e-5)


# ---------------------------------------------------------------- variable types


def test_scorer_params_are_their_own_type_and_in_gate_params():
    class M(nnx.Module):
        def __init__(self, rngs):
            self.scorer = EdgeScorer(F, H, rngs=rngs)
            self.mask = EdgeMask(5, rngs=rngs)
            self.lin = nnx.Linear(F, 2, rngs=rngs)

    m = M(nnx.Rngs(0))
    assert len(jax.tree.leaves(nnx.state(m, ScorerParam))) == 6
    assert len(jax.tree.leaves(nnx.state(m, GATE_PARAMS))) == 7  # + one GateLogit
    rest = nnx.state(m, nnx.All(nnx.Param, nnx.Not(GATE_PARAMS)))
    assert sorted(jnp.shape(v) for v in jax.tree.leaves(rest)) == [(2,), (F, 2)]
    assert len(jax.tree.leaves(nnx.state(m, ScorerLogits))) == 1
    assert not isinstance(m.scorer.last_log_alpha, nnx.Param)


# ---------------------------------------------------------------- errors


def test_validation_errors(inputs):
    x, s, r = inputs
    sc = _scorer()
    with pytest.raises(ValueError, match="edge_gates"):
        sc.expected_density()
    with pytest.raises(ValueError, match="edge_gates"):
        sc.hard_mask()
    with pytest.raises(ValueError, match=rf"in_features={F}"):
        sc.edge_gates(x[:, :3], s, r)
    with pytest.raises(ValueError, match="senders"):
        sc.edge_gates(x, None, r)
    with pytest.raises(ValueError, match="senders"):
        sc.edge_gates(x, s[:4], r)
    for bad in (0, -2, 2.0, True):
        with pytest.raises(ValueError, match="in_features"):
            EdgeScorer(bad, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="hidden"):
        EdgeScorer(F, 0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="init_log_alpha"):
        EdgeScorer(F, init_log_alpha=float("nan"), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="beta"):
        EdgeScorer(F, beta=0.0, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="rngs"):
        EdgeScorer(F, rngs=jax.random.key(0))
