"""Pieces shared by the models: a fake-quantized linear layer, mask densities, the workload of
a graph-free dense layer."""

from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
from flax import nnx

from codesign import hwmodel
from codesign.quant import FakeQuant
from codesign.sparsify import EdgeMask, FeatureMask

FP32_BITS = 32


class QuantLinear(nnx.Module):
    """``y = Q(x) @ Q(W) + b`` with per-tensor fake quantization Q (`FakeQuant`).

    Args:
      in_features, out_features: K and F.
      bits: bit-width of ``x`` and ``W`` (None = fp32).
      signed_input: quantize ``x`` on a signed grid (False for non-negative inputs: bag-of-words
        features, ReLU outputs; values below 0 would be clipped to 0).
      use_bias: add a bias ``b [F]`` (zeros at init).

    Weights use Glorot-uniform init. Shapes: ``x [N, K] -> [N, F]``; `quantize` and `combine`
    expose the two halves so a caller can aggregate between the GEMM and the bias.
    """

    def __init__(self, in_features: int, out_features: int, *, bits: Optional[int] = None,
                 signed_input: bool = False, use_bias: bool = True, rngs: nnx.Rngs):
        self.in_features, self.out_features = in_features, out_features
        init = jax.nn.initializers.glorot_uniform()
        self.kernel = nnx.Param(init(rngs.params(), (in_features, out_features), jnp.float32))
        self.bias = nnx.Param(jnp.zeros((out_features,), jnp.float32)) if use_bias else None
        self.quant_x = FakeQuant(bits, signed=signed_input)
        self.quant_w = FakeQuant(bits, signed=True)

    def combine(self, x: jax.Array) -> jax.Array:
        """``Q(x) @ Q(W)`` without the bias: [N, K] -> [N, F]."""
        return self.quant_x(x) @ self.quant_w(self.kernel[...])

    def add_bias(self, y: jax.Array) -> jax.Array:
        return y if self.bias is None else y + self.bias[...]

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.add_bias(self.combine(x))


def mask_densities(edge_mask: Optional[EdgeMask], feature_mask: Optional[FeatureMask], hard: bool) -> dict:
    """``{"edge": ..., "feature": ...}`` kept fractions (float32 scalars; 1.0 without a mask):
    expected (differentiable) when ``hard=False``, of the deterministic hard masks otherwise."""
    def of(mask):
        if mask is None:
            return jnp.ones((), jnp.float32)
        return mask.hard_density() if hard else mask.expected_density()
    return {"edge": of(edge_mask), "feature": of(feature_mask)}


def dense_layer(name: str, n_nodes: int, in_dim, out_dim, x_bits, w_bits, out_bits, *,
                training: bool = False) -> hwmodel.LayerWorkload:
    """A graph-free layer ``act(X @ W + b)``: one GEMM (the same in both dataflow orders) and the
    bias/activation elementwise stage; backward added when ``training``.
    """
    gemm = (hwmodel.gemm_stage(n_nodes, in_dim, out_dim, x_bits, w_bits, out_bits),)
    elem = (hwmodel.elementwise_stage(n_nodes, out_dim, out_bits),)
    if training:
        gemm, elem = hwmodel.with_backward(gemm), hwmodel.with_backward(elem)
    return hwmodel.LayerWorkload(name, gemm, gemm, elem)
