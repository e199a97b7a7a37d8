"""The hidden block of a two-layer GNN as one operation, in row chunks:
``Y = dropout(ReLU(A @ W1 + b1)) @ W2``.

``A`` is the first layer's input as its GEMM reads it (aggregated first: GCN's ``Â X``,
GraphSAGE's ``[mean(X) | X]``), ``W2`` the second layer's weight when that layer multiplies before
it aggregates (combine-first, the usual case of a hidden width above the class count). Written
out, autodiff holds two [N, H] float32 arrays at once in each pass: the pre-activation ``Z`` beside
the hidden layer ``H`` in the forward pass, and ``H`` (for ``dW2``) beside its gradient ``dH`` (for
``dZ`` and ``dW1``) in the backward pass. Here ``Z`` and ``dH`` exist only for one block of
`ROW_CHUNK` rows at a time: the forward pass writes ``H`` block by block, the backward pass
accumulates ``dW1 = Σ A[c]ᵀ dZ[c]`` over the blocks. One [N, H] array (``H``) is kept, a [N, H]
array less at the peak of each pass (on ogbn-products' shape at hidden 256, 2.5 GB).

Why not XLA alone: its CPU scheduler does not split a GEMM over rows to shorten live ranges, and
``jax.checkpoint`` of the block moves the same two arrays to the backward pass
(docs/log/large_graphs.md).

Dropout is `HashDropout`'s: element ``(i, j)`` of ``H`` is kept iff ``hash_u32(i * H + j, seed)``
clears the rate, the mask `HashDropout` draws for the whole [N, H] tensor, so the block computes
what ``dropout(relu(z))`` computes.
"""

from __future__ import annotations

import functools
from typing import Optional

import jax
import jax.numpy as jnp

from codesign.models.dropout import hash_u32

__all__ = ["ROW_CHUNK", "hidden_block"]

ROW_CHUNK = 16384
"""Rows per block (ASSUMPTION, not tuned: a [16384, 256] float32 block is 16 MiB, large enough for
an efficient GEMM, small beside the [N, H] arrays it replaces)."""


def _blocks(n: int, chunk: int) -> tuple[int, int]:
    c = max(1, min(chunk, n))
    return c, -(-n // c)


def _start(i, n: int, c: int):
    """Block ``i``'s first row; the last block is moved back to end at row ``n`` (it then repeats
    rows of the block before it, which the backward pass masks out)."""
    return jnp.minimum(i * c, n - c)


def _activation(z, rows, seed, rate: float):
    h = jax.nn.relu(z)
    if rate == 0.0:
        return h
    index = rows[:, None].astype(jnp.uint32) * jnp.uint32(z.shape[1]) + jnp.arange(z.shape[1], dtype=jnp.uint32)
    keep = hash_u32(index, seed) >= jnp.uint32(int(rate * 2**32))
    return jnp.where(keep, h / (1.0 - rate), jnp.zeros((), h.dtype))


def _hidden(a, w1, b1, seed, rate: float, chunk: int):
    n, width = a.shape[0], w1.shape[1]
    c, k = _blocks(n, chunk)

    def body(i, h):
        s = _start(i, n, c)
        z = jax.lax.dynamic_slice_in_dim(a, s, c) @ w1 + b1
        return jax.lax.dynamic_update_slice_in_dim(h, _activation(z, s + jnp.arange(c), seed, rate), s, 0)

    return jax.lax.fori_loop(0, k, body, jnp.zeros((n, width), jnp.result_type(a, w1)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _block(a, w1, b1, w2, seed, rate: float, chunk: int):
    return _hidden(a, w1, b1, seed, rate, chunk) @ w2


def _block_fwd(a, w1, b1, w2, seed, rate, chunk):
    h = _hidden(a, w1, b1, seed, rate, chunk)
    return h @ w2, (a, w1, w2, h)


def _block_bwd(rate, chunk, res, g):
    a, w1, w2, h = res
    n = a.shape[0]
    c, k = _blocks(n, chunk)
    scale = 1.0 / (1.0 - rate)

    def body(i, carry):
        dw1, db1, da = carry
        s = _start(i, n, c)
        fresh = (s + jnp.arange(c)) >= i * c  # rows not done by an earlier block
        hc, gc = jax.lax.dynamic_slice_in_dim(h, s, c), jax.lax.dynamic_slice_in_dim(g, s, c)
        # ReLU's derivative and the dropout mask are both in the sign of H (`HashDropout.relu_apply`)
        dz = jnp.where((hc > 0) & fresh[:, None], (gc @ w2.T) * scale, jnp.zeros((), g.dtype))
        ac = jax.lax.dynamic_slice_in_dim(a, s, c)
        da_c = jnp.where(fresh[:, None], dz @ w1.T, jax.lax.dynamic_slice_in_dim(da, s, c))
        return dw1 + ac.T @ dz, db1 + dz.sum(0), jax.lax.dynamic_update_slice_in_dim(da, da_c, s, 0)

    init = (jnp.zeros_like(w1), jnp.zeros((w1.shape[1],), w1.dtype), jnp.zeros_like(a))
    dw1, db1, da = jax.lax.fori_loop(0, k, body, init)  # da: dropped by XLA where nothing reads it
    return da, dw1, db1, h.T @ g, None


_block.defvjp(_block_fwd, _block_bwd)


def hidden_block(a: jax.Array, w1: jax.Array, b1: jax.Array, w2: jax.Array, dropout=None, *,
                 chunk: Optional[int] = None) -> jax.Array:
    """``dropout(relu(a @ w1 + b1)) @ w2`` with the [N, H] intermediates of both passes made one
    `ROW_CHUNK`-row block at a time (module docstring); differentiable in ``a``, ``w1``, ``b1``
    and ``w2``.

    Args:
      a: float32 [N, K]; w1: float32 [K, H]; b1: float32 [H]; w2: float32 [H, C].
      dropout: a `HashDropout` (its next seed is drawn, as one call of it draws one) or None;
        inactive (eval, rate 0) means ReLU alone.
      chunk: rows per block (>= 1; None: `ROW_CHUNK`).

    Returns:
      float32 [N, C].

    Raises:
      ValueError: shapes that do not chain (naming them) or ``chunk < 1``.
    """
    if a.ndim != 2 or w1.ndim != 2 or w2.ndim != 2 or b1.shape != (w1.shape[1],) \
            or a.shape[1] != w1.shape[0] or w1.shape[1] != w2.shape[0]:
        raise ValueError(f"hidden_block: shapes must chain a [N, K] @ w1 [K, H] + b1 [H], @ w2 [H, C]; got "
                         f"a {a.shape}, w1 {w1.shape}, b1 {b1.shape}, w2 {w2.shape}")
    chunk = ROW_CHUNK if chunk is None else chunk
    if not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"hidden_block: chunk must be an int >= 1, got {chunk!r}")
    active = dropout is not None and dropout.active
    seed = dropout.draw_seed() if active else jnp.uint32(0)
    return _block(a, w1, b1, w2, seed, float(dropout.rate) if active else 0.0, chunk)
