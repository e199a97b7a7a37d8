"""Budget mode: a PI-controlled Lagrange multiplier that keeps the hardened cost under a budget.

The constraint is ``g = log(hard_cost / (budget * dense_cost)) <= 0``; the multiplier ``lam >= 0``
is updated once per step by projected dual ascent with a proportional term, the PI multiplier
update of Sohrabi et al., "On PI Controllers for Updating Lagrange Multipliers in Constrained
Optimization", ICML 2024:

    xi  <- max(0, xi + budget_lr * g * [|g| < budget_band])      (integral, conditional)
    lam  = max(0, xi + budget_kp * g)                            (plus proportional)

Choices (why each is there; measurements in docs/results.md):
  * ``g`` uses the *hardened* cost (deterministic gates), the proxy-Lagrangian of Cotter et al.
    (ALT 2019), while the loss gradient uses the expected cost.
  * The proportional term drops ``lam`` the step the hardened cost falls under the budget (plain
    dual ascent, ``budget_kp = 0``, winds up and over-prunes).
  * The integral only moves within ``budget_band`` of the budget (conditional integration, the
    anti-windup of K. J. Astrom & T. Hagglund, "PID Controllers", 1995, sec. 3.5).

The controller is an ``(init, update)`` pair in the style of optax transformations.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp

__all__ = ["Controller", "ControllerState", "pi_controller", "no_controller"]


class ControllerState(NamedTuple):
    """The controller's state (a pytree; float32 scalars, or [S] arrays when seeds are stacked):
    ``integral`` (xi above) and ``multiplier`` (lam, the Lagrange multiplier the loss uses)."""

    integral: jax.Array
    multiplier: jax.Array


class Controller(NamedTuple):
    """``init() -> ControllerState`` (zeros) and ``update(state, hard_ratio) -> ControllerState``
    (jittable; ``hard_ratio`` is the hardened cost / dense cost, a float32 scalar)."""

    init: Callable[[], ControllerState]
    update: Callable[[ControllerState, jax.Array], ControllerState]


def _zeros() -> ControllerState:
    zero = jnp.zeros((), jnp.float32)
    return ControllerState(zero, zero)


def pi_controller(budget: float, lr: float, kp: float, band: float) -> Controller:
    """The PI multiplier update above for ``cost <= budget * dense_cost``.

    Args:
      budget: fraction in (0, 1] of the dense cost.
      lr, kp, band: integral gain, proportional gain, integration band (log cost ratio units).
    """
    log_budget = math.log(budget)

    def update(state: ControllerState, hard_ratio: jax.Array) -> ControllerState:
        gap = jnp.log(hard_ratio) - log_budget
        xi = jnp.maximum(0.0, state.integral + lr * gap * (jnp.abs(gap) < band))
        return ControllerState(xi, jnp.maximum(0.0, xi + kp * gap))

    return Controller(_zeros, update)


def no_controller() -> Controller:
    """Penalty mode: the state stays zero (no multiplier)."""
    return Controller(_zeros, lambda state, hard_ratio: state)
