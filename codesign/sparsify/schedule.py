"""Temperature annealing of hard-concrete gates: `temperature_schedule` and `set_temperature`.

Louizos et al. (ICLR 2018) keep the temperature fixed at ``beta = 2/3``; PTDNet (Luo et al.,
WSDM 2021, official code ``train_PTDNet.py``) anneals it per epoch,
``beta_t = max(0.05, 2.0 * 0.99^t)``, so that the relaxed gates approach binary ones as
training proceeds. A lower beta also lowers ``P(z > 0) = sigmoid(log_alpha - beta log(-gamma/zeta))``,
so the L0 term follows the schedule too.

Retracing: ``HardConcreteGate.beta`` and ``EdgeScorer.beta`` are static Python floats (the pure
functions ``sample`` / ``prob_nonzero`` validate them on the host), so every distinct value seen by
an ``nnx.jit``-ed step compiles it once more. `temperature_schedule` is therefore a staircase that
changes every ``every`` steps: at most ``ceil(steps / every) + 1`` distinct values, hence compiles.
"""

from __future__ import annotations

import math
import numbers

import jax
import optax
from flax import nnx

from codesign.sparsify.hard_concrete import BETA, HardConcreteGate, check_beta
from codesign.sparsify.scorer import EdgeScorer


def _positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {name}={value!r}")
    return int(value)


def _temperature(value, name: str) -> float:
    """A concrete finite float > 0 (Python / NumPy number or 0-d concrete array)."""
    try:
        if isinstance(value, (bool, str, bytes)):
            raise TypeError
        return check_beta(float(value))
    except (TypeError, ValueError, jax.errors.ConcretizationTypeError):
        raise ValueError(f"{name} must be a concrete finite float > 0, got {name}={value!r}") from None


def temperature_schedule(init: float = BETA, *, final: float, steps: int, every: int = 1) -> optax.Schedule:
    """Geometric staircase from ``init`` to ``final``: ``beta_t = init * r^floor(t / every)``, clamped
    at ``final``, with ``r = (final / init)^(1 / ceil(steps / every))`` (an ``optax.exponential_decay``
    with ``staircase=True``), so ``beta_t = final`` for ``t >= ceil(steps / every) * every``.

    PTDNet's schedule (``2.0 * 0.99^epoch``, floored at 0.05) is
    ``temperature_schedule(2.0, final=0.05, steps=367)`` (``0.99^367 ~ 0.025``).

    Args:
      init: temperature at step 0 (> 0; default Louizos et al.'s 2/3).
      final: temperature reached at the end (> 0; may exceed ``init`` to anneal upwards).
      steps: number of steps (e.g. epochs) over which to anneal, a positive int.
      every: the value changes every ``every`` steps (bounds recompilations), a positive int.

    Returns:
      ``optax.Schedule``: step (int or int array) -> float32 temperature.

    Raises:
      ValueError: naming ``init`` / ``final`` (not finite > 0) or ``steps`` / ``every`` (not
        positive ints).
    """
    init, final = _temperature(init, "init"), _temperature(final, "final")
    steps, every = _positive_int(steps, "steps"), _positive_int(every, "every")
    n_stairs = math.ceil(steps / every)
    if init == final:
        return optax.constant_schedule(init)
    rate = (final / init) ** (1.0 / n_stairs)
    return optax.exponential_decay(init, transition_steps=every, decay_rate=rate, staircase=True, end_value=final)


def set_temperature(model: nnx.Module, beta: float) -> int:
    """Sets ``beta`` of every `HardConcreteGate` and `EdgeScorer` inside ``model`` (host-side,
    outside ``jit``; the masks built on gates, e.g. `EdgeMask` or `BlockEdgeMask`, are covered
    through their ``.gate``).

    Example::

      sched = temperature_schedule(2.0, final=0.05, steps=300, every=10)
      for epoch in range(300):
          set_temperature(model, float(sched(epoch)))
          loss = step(model, optimizer, batch)          # recompiles when beta changes

    Args:
      model: any `nnx.Module`.
      beta: the new temperature, a finite float > 0 (a concrete number or 0-d array, not a
        traced value).

    Returns:
      int, the number of gate modules updated.

    Raises:
      ValueError: ``beta`` not a finite positive number.
    """
    beta = _temperature(beta, "beta")
    n = 0
    for _, module in nnx.iter_modules(model):
        if isinstance(module, (HardConcreteGate, EdgeScorer)):
            module.beta = beta
            n += 1
    return n
