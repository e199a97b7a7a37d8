"""Hard-concrete (L0) gates: pure functions, the `GateLogit` variable type and `HardConcreteGate`.

Source: C. Louizos, M. Welling, D. P. Kingma, "Learning Sparse Neural Networks through L0
Regularization", ICLR 2018 (arXiv:1712.01312), Section 3 ("hard concrete" distribution).
A gate ``z`` in ``[0, 1]`` is a binary-concrete sample stretched to ``(GAMMA, ZETA)`` and clipped
("hard-sigmoid"), so ``z`` is exactly 0 or exactly 1 with nonzero probability while its
parameter ``log_alpha`` still gets reparameterized gradients.

    u ~ U(0, 1)
    s = sigmoid((log u - log(1 - u) + log_alpha) / beta)          (paper eq. 9-10)
    z = min(1, max(0, s * (ZETA - GAMMA) + GAMMA))
    P(z != 0) = sigmoid(log_alpha - beta * log(-GAMMA / ZETA))    (paper eq. 12, expected L0)
    z_test = min(1, max(0, sigmoid(log_alpha) * (ZETA - GAMMA) + GAMMA))   (paper eq. 13)

The constants are the paper's (Section 4 / Appendix): ``BETA = 2/3``, ``GAMMA = -0.1``,
``ZETA = 1.1``. All values are unitless.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from typing import final

import jax
import jax.numpy as jnp
from flax import nnx

BETA = 2.0 / 3.0
"""Temperature of the binary concrete (Louizos et al. 2018, Sec. 4: beta = 2/3)."""
GAMMA = -0.1
"""Left end of the stretch interval (Louizos et al. 2018, Sec. 4: gamma = -0.1)."""
ZETA = 1.1
"""Right end of the stretch interval (Louizos et al. 2018, Sec. 4: zeta = 1.1)."""

_U_EPS = 1e-6
"""Uniform noise is clipped to ``[_U_EPS, 1 - _U_EPS]`` so ``log u`` and ``log(1 - u)`` stay finite
(1 - 1e-6 is representable in float32)."""


def check_beta(beta: float) -> float:
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or not (beta > 0 and math.isfinite(beta)):
        raise ValueError(f"beta must be a finite float > 0, got {beta=!r}")
    return float(beta)


def _stretch_clip(s: jax.Array) -> jax.Array:
    return jnp.clip(s * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


def _noise(key: jax.Array, shape: tuple, dtype) -> jax.Array:
    """Logistic noise ``log u - log(1 - u)``, ``u ~ U(0, 1)`` clipped to ``[_U_EPS, 1 - _U_EPS]``."""
    u = jnp.clip(jax.random.uniform(key, shape, dtype), _U_EPS, 1.0 - _U_EPS)
    return jnp.log(u) - jnp.log1p(-u)


def _sigmoid(key: jax.Array, log_alpha: jax.Array, beta: float) -> jax.Array:
    """The sample's pre-clip value ``s = sigmoid((noise + log_alpha) / beta)``, ``noise = _noise(key)``."""
    return jax.nn.sigmoid((_noise(key, log_alpha.shape, log_alpha.dtype) + log_alpha) / beta)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _sample(key: jax.Array, log_alpha: jax.Array, beta: float) -> jax.Array:
    """``_stretch_clip(sigmoid((noise + log_alpha) / beta))`` with ``noise = _noise(key)``, whose
    backward pass keeps no array per gate: it draws the same noise again from ``key`` and
    recomputes the sigmoid ``s`` (the logits are the caller's parameters, alive anyway). Saving
    ``s`` cost one float32 array per gate from the forward to the backward pass; with autodiff the
    compiler also kept the clip's two derivative factors, computed ahead of the cotangent (two
    more arrays per gate: 32 MB of a partitioned training step's temporaries with 4 M edge gates
    per process, docs/log/scale_out_rss.md). Gradient: ``[0 < stretch(s) < 1] (ZETA - GAMMA) s (1 - s) / beta``,
    autodiff's but for exact ties at the clip's ends (autodiff gives half there; a tie has
    probability 0 under the continuous noise)."""
    return _stretch_clip(_sigmoid(key, log_alpha, beta))


def _sample_fwd(key, log_alpha, beta):
    return _sample(key, log_alpha, beta), (key, log_alpha)


def _after(key: jax.Array, ct: jax.Array) -> jax.Array:
    """``key`` unchanged in value, but computed from ``ct``: its key data plus an integer 0 that
    the compiler cannot fold (``0 * ct[0]``, a float product XLA does not simplify; a non-finite
    ``ct[0]`` counts as 0)."""
    if ct.size == 0:  # no gates: nothing to order
        return key
    c0 = ct.reshape(-1)[0]
    zero = (jnp.where(jnp.isfinite(c0), c0, 0.0) * 0.0).astype(jnp.uint32)
    if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
        return jax.random.wrap_key_data(jax.random.key_data(key) + zero, impl=jax.random.key_impl(key))
    return key + zero


def _sample_bwd(beta, res, ct):
    # The noise is drawn again from a key that depends on the cotangent (`_after`), so the
    # redraw runs when the cotangent exists, at the end of the backward pass, and cannot be merged
    # with the forward pass's draw: merged (common subexpression elimination) or scheduled early,
    # its [...] arrays would stay alive through the backward pass. An optimization barrier alone
    # does not do it: XLA removes barriers before it schedules.
    key, log_alpha = res
    key = _after(key, ct)
    s = _sigmoid(key, log_alpha, beta)
    # one elementwise expression of (ct, s), so the compiler cannot compute a factor of it ahead
    # of the cotangent and keep that instead (it did with the clip's own derivative)
    pre = s * (ZETA - GAMMA) + GAMMA
    return None, jnp.where((pre > 0.0) & (pre < 1.0), ct * (ZETA - GAMMA), 0.0) * (s * (1 - s)) / beta


_sample.defvjp(_sample_fwd, _sample_bwd)


def sample(key: jax.Array, log_alpha: jax.Array, beta: float = BETA) -> jax.Array:
    """Draws one hard-concrete gate per entry of ``log_alpha`` (reparameterized, paper eq. 9-10).

    Args:
      key: a JAX PRNG key.
      log_alpha: float [...] gate logits (location ``log alpha`` of the paper).
      beta: temperature, > 0 (default ``BETA = 2/3``).

    Returns:
      float [...] (dtype of ``log_alpha``) gates in ``[0, 1]``; exact zeros and ones occur.
      Differentiable w.r.t. ``log_alpha`` (zero gradient where the clip is active).

    Raises:
      ValueError: ``beta`` not a finite positive number.
    """
    return _sample(key, jnp.asarray(log_alpha), check_beta(beta))


def deterministic(log_alpha: jax.Array) -> jax.Array:
    """Test-time gate ``min(1, max(0, sigmoid(log_alpha) (ZETA - GAMMA) + GAMMA))`` (paper eq. 13).

    Args:
      log_alpha: float [...] gate logits.

    Returns:
      float [...] values in ``[0, 1]``; not binary in general (entries between 0 and 1 scale
      their edge or feature). Exactly 0 iff ``log_alpha <= log(-GAMMA / ZETA) = -log 11``.
    """
    return _stretch_clip(jax.nn.sigmoid(jnp.asarray(log_alpha)))


def prob_nonzero(log_alpha: jax.Array, beta: float = BETA) -> jax.Array:
    """``P(z > 0) = sigmoid(log_alpha - beta log(-GAMMA / ZETA))`` (paper eq. 12, expected L0 per gate).

    Args:
      log_alpha: float [...] gate logits.
      beta: temperature, > 0.

    Returns:
      float [...] probabilities in ``(0, 1)``; smooth in ``log_alpha``.

    Raises:
      ValueError: ``beta`` not a finite positive number.
    """
    beta = check_beta(beta)
    return jax.nn.sigmoid(jnp.asarray(log_alpha) - beta * math.log(-GAMMA / ZETA))


_deterministic_gate = deterministic  # for methods whose argument ``deterministic`` shadows the name


class GateLogit(nnx.Param):
    """Variable type of gate logits ``log_alpha`` (the pattern of ``LoRAParam`` in flax/nnx/nn/lora.py).

    ``nnx.state(model, GateLogit)`` collects every gate logit of a model. Because it subclasses
    ``nnx.Param``, the filter ``nnx.Param`` also includes gate logits; use
    ``nnx.All(nnx.Param, nnx.Not(GateLogit))`` for the weights alone, e.g. to give the two
    groups different optimizers or learning rates.
    """


@final
class HardConcreteGate(nnx.Module):
    """A tensor of independent hard-concrete gates with learnable logits.

    In training mode (``deterministic=False``) each call draws fresh gates with ``sample``; in
    deterministic mode it returns the test-time estimator ``deterministic(log_alpha)``. The mode is
    the attribute ``deterministic``, which ``model.eval()`` / ``model.train()`` of flax NNX set
    (they call ``set_attributes(deterministic=...)`` on every submodule that has the attribute)
    and ``nnx.view(model, deterministic=...)`` sets through ``set_view``; a ``deterministic=``
    call argument overrides it.

    Attributes:
      log_alpha: `GateLogit` float32 [*shape].
      beta: float temperature (static).
      deterministic: bool (static), False at construction (training mode).
      rngs: `nnx.RngStream` forked at construction from ``rngs[rng_collection]`` (``rngs.default``
        when that collection is absent), as ``nnx.Dropout`` does.

    Example::

      gate = HardConcreteGate((16,), rngs=nnx.Rngs(0))
      z = gate()                   # float32 [16], random, in [0, 1]
      penalty = gate.expected_density()
    """

    def __init__(
        self,
        shape: int | Sequence[int],
        *,
        init_log_alpha: float = 3.0,
        beta: float = BETA,
        rng_collection: str = "gates",
        rngs: nnx.Rngs,
    ):
        """Args:
          shape: gate tensor shape (int or tuple of non-negative ints).
          init_log_alpha: initial logit of every gate; 3.0 gives P(z > 0) ~ 0.99.
          beta: temperature, > 0.
          rng_collection: name of the stream in ``rngs`` used for sampling.
          rngs: `nnx.Rngs`.

        Raises:
          ValueError: ``init_log_alpha`` not finite, ``beta`` not > 0, or a bad ``shape``.
          TypeError: ``rngs`` not an `nnx.Rngs`.
        """
        dims = (shape,) if isinstance(shape, numbers.Integral) else tuple(shape)
        if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) and d >= 0 for d in dims):
            raise ValueError(f"shape must be an int or a tuple of non-negative ints, got {shape=!r}")
        shape = tuple(int(d) for d in dims)
        if isinstance(init_log_alpha, bool) or not isinstance(init_log_alpha, (int, float)) or not math.isfinite(init_log_alpha):
            raise ValueError(f"init_log_alpha must be a finite float, got {init_log_alpha=!r}")
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs, got {type(rngs).__name__}")
        self.beta = check_beta(beta)
        self.log_alpha = GateLogit(jnp.full(shape, float(init_log_alpha), jnp.float32))
        self.deterministic = False
        self.rngs = rngs[rng_collection].fork()

    def __call__(self, deterministic: bool | None = None, *, key: jax.Array | None = None) -> jax.Array:
        """Gate values.

        Args:
          deterministic: overrides ``self.deterministic`` when not None.
          key: optional PRNG key used instead of the module's stream (training mode only).

        Returns:
          float32 [*shape] in ``[0, 1]``.
        """
        det = self.deterministic if deterministic is None else deterministic
        if det:
            return _deterministic_gate(self.log_alpha[...])
        return sample(self.rngs() if key is None else key, self.log_alpha[...], self.beta)

    def expected_density(self) -> jax.Array:
        """Mean of ``prob_nonzero`` over all gates: float32 scalar, differentiable in ``log_alpha``."""
        return jnp.mean(prob_nonzero(self.log_alpha[...], self.beta))

    def hard_mask(self) -> jax.Array:
        """bool [*shape]: the gates that are nonzero at test time (``deterministic(log_alpha) > 0``)."""
        return _deterministic_gate(self.log_alpha[...]) > 0

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction of gates in ``hard_mask``."""
        return jnp.mean(self.hard_mask().astype(jnp.float32))

    def set_view(self, deterministic: bool | None = None):
        """Hook of ``nnx.view`` (flax >= 0.12): ``nnx.view(model, deterministic=True)``."""
        if deterministic is not None:
            self.deterministic = deterministic

