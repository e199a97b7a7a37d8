"""Tests of the bit-width penalty (`TrainConfig.bits_weight`), pinned learned ranges
(`codesign.quant.pin_ranges`, `TrainConfig.pin_ranges`) and the two bit averages
(`codesign.quant.average_bits`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.data.synthetic import csbm
from codesign.hwmodel import presets
from codesign.quant import LearnedBitQuant, average_bits, pin_ranges
from codesign.train import TrainConfig, adjacency, build_model, train

TENSORS = ("x0", "w0", "x1", "w1")


@pytest.fixture(scope="module")
def tiny():
    return csbm(60, 12, avg_degree=4.0, homophily=0.8, mu=1.0, n_classes=3, seed=0)


def _penalty_model(graph, pinned: bool):
    cfg = TrainConfig.from_flat(bits=6, quantizer="learned", hidden=8, dropout=0.0, pin_ranges=pinned, bits_weight=1.0)
    model = build_model(cfg, graph, nnx.Rngs(params=0, dropout=1, gates=2, quant=3))
    model(graph.x, adjacency(graph))  # data-dependent initialisation of every quantizer
    return model


@pytest.mark.parametrize("pinned", [False, True])
def test_penalty_gradient_lowers_every_tensors_bits(tiny, pinned):
    """One gradient step on ``mean_t E[b_t]`` (the `bits_weight` term) alone lowers each of the
    four tensors' continuous bit-widths, with learned and with pinned ranges."""
    model = _penalty_model(tiny, pinned)
    before = {k: float(v) for k, v in model.layer_bits().items()}
    np.testing.assert_allclose(list(before.values()), 6.0, rtol=1e-5)

    def penalty(m):
        return jnp.mean(jnp.stack(list(m.layer_bits().values())))

    grads = nnx.grad(penalty, argnums=nnx.DiffState(0, nnx.Param))(model)
    params = nnx.state(model, nnx.Param)
    nnx.update(model, jax.tree.map(lambda p, g: p - 0.05 * g / (jnp.abs(g) + 1e-12) * jnp.abs(p), params, grads))
    after = {k: float(v) for k, v in model.layer_bits().items()}
    for k in TENSORS:
        assert after[k] < before[k] - 0.01, (k, before[k], after[k])


def test_training_with_penalty_ends_lower_on_every_tensor(tiny):
    hw = presets.get("h100")
    base = dict(bits=8, quantizer="learned", hidden=8, epochs=15, pin_ranges=True, quant_lr=0.1, seed=0)
    free = train(tiny, TrainConfig.from_flat(**base), hw)["layer_bits"]
    pushed = train(tiny, TrainConfig.from_flat(**base, bits_weight=1.0), hw)["layer_bits"]
    for k in TENSORS:
        assert pushed[k] < free[k], (k, free, pushed)


def test_average_bits_by_hand():
    bits = {"x0": 1.0, "w0": 8.0, "x1": 4.0, "w1": 6.0}
    n = {"x0": 100, "w0": 10, "x1": 20, "w1": 2}
    per_tensor, per_value = average_bits(bits, n)
    assert per_tensor == pytest.approx((1 + 8 + 4 + 6) / 4)
    assert per_value == pytest.approx((1 * 100 + 8 * 10 + 4 * 20 + 6 * 2) / 132)
    assert average_bits({"a": 3.0}, {"a": 7, "unused": 1}) == (3.0, 3.0)


@pytest.mark.parametrize("bits,n,match", [({}, {}, "bits"), ({"a": 0.5}, {"a": 1}, r"bits\['a'\]"),
                                          ({"a": float("nan")}, {"a": 1}, r"bits\['a'\]"),
                                          ({"a": 2.0}, {}, r"n_values\['a'\]"),
                                          ({"a": 2.0}, {"a": 0}, r"n_values\['a'\]")])
def test_average_bits_errors(bits, n, match):
    with pytest.raises(ValueError, match=match):
        average_bits(bits, n)


@pytest.mark.parametrize("kwargs,field", [(dict(quantizer="learned", bits_weight=-0.1), "bits_weight"),
                                          (dict(quantizer="learned", bits_weight=float("inf")), "bits_weight"),
                                          (dict(quantizer="fixed", bits=8, bits_weight=0.1), "bits_weight"),
                                          (dict(quantizer="learned", bits=0), "bits"),
                                          (dict(quantizer="fixed", bits=8, pin_ranges=True), "pin_ranges")])
def test_bad_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"TrainConfig\.quant\.{field}:"):
        TrainConfig.from_flat(**kwargs)


def test_pin_ranges_skips_and_follows_the_data():
    class Two(nnx.Module):
        def __init__(self):
            self.a = LearnedBitQuant(4.0)
            self.b = LearnedBitQuant(4.0)

    m = Two()
    assert pin_ranges(m, skip=(m.b,)) == 1 and m.a.pin_range and not m.b.pin_range
    assert pin_ranges(m) == 1 and pin_ranges(m) == 0  # idempotent
    x = jnp.asarray([-1.0, 0.5, 2.0], jnp.float32)
    m.a(x)
    np.testing.assert_allclose(m.a.range_max(), 2.0, rtol=1e-6)
    m.a(10 * x)  # the range follows the data max, the width is kept
    np.testing.assert_allclose(m.a.range_max(), 20.0, rtol=1e-6)
    np.testing.assert_allclose(m.a.bits(), 4.0, rtol=1e-5)


def test_build_model_pins_all_but_the_input(tiny):
    model = build_model(TrainConfig.from_flat(bits=8, quantizer="learned", pin_ranges=True), tiny, nnx.Rngs(0))
    assert not model.conv1.quant_x.pin_range
    assert model.conv1.quant_w.pin_range and model.conv2.quant_x.pin_range and model.conv2.quant_w.pin_range
    dense = build_model(TrainConfig.from_flat(bits=8, quantizer="learned", pin_ranges=True), tiny, nnx.Rngs(0), dense=True)
    assert not any(isinstance(q, LearnedBitQuant) for _, q in nnx.iter_modules(dense))
