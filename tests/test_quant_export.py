"""Tests of codesign.quant.export: bit-exact round trips ``export(q, x).dequantize() == q(x)`` for
every quantizer, per-row int8 features for the SpMM kernel, validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign.kernels import BlockSparseAdjacency, CooAdjacency, bsr_spmm_int8_reference
from codesign.quant import (DegreeQuant, FakeQuant, LearnedBitQuant, LSQQuant, QuantizedTensor, a2q_init_bits,
                            export_quantizer, qrange, quantize_rows_int8, quantize_to_int)


@pytest.fixture(autouse=True)
def _strict_promotion():
    with jax.numpy_dtype_promotion("strict"), jax.numpy_rank_promotion("raise"):
        yield


N, F = 12, 5
DEG = np.array([0, 1, 1, 2, 2, 2, 3, 4, 6, 9, 15, 40], np.int32)


def _normal(seed: int, shape, scale=1.0) -> jax.Array:
    return jnp.asarray((np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32))


def _perturb(q):
    """Moves learned parameters off their data-derived values (as training would)."""
    for name in ("step", "qmax"):
        if hasattr(q, name):
            v = getattr(q, name)
            v[...] = v[...] * jnp.asarray(np.linspace(0.9, 1.13, v.size).reshape(v.shape), jnp.float32)


QUANTIZERS = {
    "fake_signed4": lambda: FakeQuant(4),
    "fake_unsigned8": lambda: FakeQuant(8, signed=False),
    "lsq_signed4": lambda: LSQQuant(4),
    "lsq_per_channel3": lambda: LSQQuant(3, per_channel=True, n_channels=F),
    "lsq_unsigned8": lambda: LSQQuant(8, signed=False),
    "learned_bits": lambda: LearnedBitQuant(5.3),
    "learned_bits_unsigned": lambda: LearnedBitQuant(3.0, signed=False, min_bits=1),
    "learned_bits_per_node": lambda: LearnedBitQuant(a2q_init_bits(DEG, 4.0, 2.0, 8.0), per_node=N),
    "degree_quant": lambda: DegreeQuant(4, DEG, p_max=0.5, rngs=nnx.Rngs(0)),
}


@pytest.mark.parametrize("name", sorted(QUANTIZERS))
def test_export_roundtrip_is_bit_exact(name):
    q = QUANTIZERS[name]()
    x = _normal(0, (N, F), 2.0)
    if "unsigned" in name:
        x = jnp.maximum(x, 0.0)
    apply = nnx.jit(lambda q, x: q(x))
    apply(q, x)  # data-dependent initialisation (train mode)
    _perturb(q)
    q.eval()
    y = apply(q, x)
    t = export_quantizer(q, x)
    assert isinstance(t, QuantizedTensor) and t.values.shape == x.shape
    assert t.values.dtype == (jnp.int8 if t.signed else jnp.uint8)
    np.testing.assert_array_equal(t.dequantize(), y)
    if not isinstance(q, FakeQuant):  # ours write reciprocals explicitly: eager == compiled, too
        np.testing.assert_array_equal(t.dequantize(), q(x))
    codes = np.asarray(t.values, np.int32)
    if t.row_bits is None:
        lo = -(2 ** (t.bits - 1)) if t.signed else 0
        hi = 2 ** (t.bits - 1) - 1 if t.signed else 2**t.bits - 1
        assert codes.min() >= lo and codes.max() <= hi
    else:  # per node: every row fits its own bit-width
        rb = np.asarray(t.row_bits)
        assert rb.shape == (N,) and t.bits == rb.max()
        assert np.all(np.max(np.abs(codes), axis=1) <= 2 ** (rb - 1) - 1)
        assert len(np.unique(rb)) > 1  # the degree-based init gives several widths


def test_quantize_to_int_matches_fake_quant_grid():
    x = _normal(1, (20, 4), 3.0)
    t = quantize_to_int(x, 4)
    lo, hi = qrange(4)
    codes = np.asarray(t.values)
    assert t.values.dtype == jnp.int8 and codes.min() >= lo and codes.max() <= hi
    amax = np.max(np.abs(np.asarray(x)))
    np.testing.assert_allclose(t.scale, amax / hi, rtol=1e-6)
    np.testing.assert_array_equal(t.dequantize(), jax.jit(FakeQuant(4))(x))
    tc = quantize_to_int(x, 6, per_channel=True)
    assert tc.scale.shape == (4,) and tc.axis == -1
    np.testing.assert_allclose(tc.scale, np.max(np.abs(np.asarray(x)), axis=0) / 31, rtol=1e-6)
    err = np.abs(np.asarray(tc.dequantize()) - np.asarray(x))
    assert np.all(err <= np.asarray(tc.scale) / 2 + 1e-6)
    te = quantize_to_int(x, 3, scale=0.5)  # explicit scale: values beyond 3 * 0.5 saturate
    assert float(jnp.max(te.dequantize())) == 1.5
    tu = quantize_to_int(jnp.maximum(x, 0.0), 8, signed=False)
    assert tu.values.dtype == jnp.uint8 and int(np.max(np.asarray(tu.values))) == 255


def test_quantized_tensor_is_a_pytree():
    t = QuantizedTensor(jnp.array([[1, -2], [3, 0], [0, 1]], jnp.int8), jnp.array([0.5, 0.25, 2.0], jnp.float32),
                        jnp.array([3, 3, 2], jnp.int32), 3, True, 0)
    leaves = jax.tree.leaves(t)
    assert len(leaves) == 3  # values, scale, row_bits
    t2 = jax.jit(lambda t: t)(t)
    assert (t2.bits, t2.signed, t2.axis) == (t.bits, t.signed, 0)
    np.testing.assert_array_equal(jax.jit(lambda t: t.dequantize())(t), [[0.5, -1.0], [0.75, 0.0], [0.0, 2.0]])


def test_quantize_rows_int8_agrees_with_the_int8_kernel_reference():
    rng = np.random.default_rng(3)
    n = 29
    s, r = rng.integers(0, n, 90), rng.integers(0, n, 90)
    coo = CooAdjacency(jnp.asarray(s, jnp.int32), jnp.asarray(r, jnp.int32),
                       jnp.asarray(rng.normal(size=90), jnp.float32), n)
    adj = BlockSparseAdjacency.from_coo(coo, 16, reorder=None)
    x = _normal(4, (adj.n_pad, 24)) * jnp.asarray(rng.uniform(0.01, 10.0, (adj.n_pad, 1)), jnp.float32)
    x = x.at[5].set(0.0)  # an all-zero row
    x_q, scales = quantize_rows_int8(x)
    assert x_q.dtype == jnp.int8 and scales.dtype == jnp.float32 and scales.shape == (adj.n_pad,)
    assert float(scales[5]) == 1.0 and not np.any(np.asarray(x_q[5]))
    amax = np.max(np.abs(np.asarray(x)), axis=1)
    np.testing.assert_allclose(scales, np.where(amax > 0, amax / 127, 1.0), rtol=1e-6)
    deq = np.asarray(x_q, np.float32) * np.asarray(scales)[:, None]  # the kernel's dequantization
    assert np.all(np.abs(deq - np.asarray(x)) <= np.asarray(scales)[:, None] / 2 + 1e-6)
    t = QuantizedTensor(x_q, scales, None, 8, True, 0)
    np.testing.assert_array_equal(t.dequantize(), deq)
    with jax.numpy_dtype_promotion("standard"):
        out = np.asarray(jax.jit(bsr_spmm_int8_reference)(adj, x_q, scales))
    dense = np.zeros((adj.n_pad, adj.n_pad))  # reorder=None: node order unchanged, rows = receivers
    np.add.at(dense, (r, s), np.asarray(coo.edge_weight, np.float64))
    np.testing.assert_allclose(out, dense @ deq, rtol=1e-5, atol=1e-4)  # the kernel's contract
    assert np.max(np.abs(out - dense @ np.asarray(x))) <= np.abs(dense).sum(1).max() * np.max(np.asarray(scales)) / 2


@pytest.mark.parametrize("call, match", [
    (lambda: quantize_to_int(jnp.ones(3), 9), "bits"),
    (lambda: quantize_to_int(jnp.ones(3), 1), "bits"),
    (lambda: quantize_to_int(jnp.ones(3, jnp.int32), 4), "x.dtype"),
    (lambda: quantize_to_int(jnp.ones((2, 3)), 4, per_channel=True, scale=jnp.ones(2)), "scale"),
    (lambda: quantize_to_int(jnp.ones(3), 4, scale=0.0), "scale"),
    (lambda: export_quantizer(FakeQuant(None), jnp.ones(3)), "full precision"),
    (lambda: export_quantizer(LSQQuant(4), jnp.ones(3)), "initialized"),
    (lambda: export_quantizer(LearnedBitQuant(4.0), jnp.ones(3)), "initialized"),
    (lambda: export_quantizer(LearnedBitQuant(12.0, max_bits=12, init_qmax=1.0), jnp.ones(3)), "bits"),
    (lambda: quantize_rows_int8(jnp.ones(3)), r"\[N, F\]"),
])
def test_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_export_rejects_other_types():
    with pytest.raises(TypeError, match="FakeQuant"):
        export_quantizer(object(), jnp.ones(3))
