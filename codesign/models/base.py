"""What every model checks at its boundary: its widths at construction, its input at each call.

One place for the checks that turn a shape mistake into one line naming the field, instead of a
``ZeroDivisionError`` in an initializer or a ``dot_general`` error deep inside JAX. Shapes are
static, so `check_input` also works under ``jit``.
"""

from __future__ import annotations

import jax
import numpy as np

__all__ = ["check_widths", "check_input"]


def check_widths(owner: str, **widths) -> None:
    """Each keyword (``in_features``, ``hidden``, ``n_classes``, ``heads``, ...) must be an int >= 1.

    Args:
      owner: the model's name, used in the message (e.g. ``"GCN"``).
      **widths: name -> value.

    Raises:
      ValueError: ``"GCN: in_features must be an int >= 1, got 0"``.
    """
    for name, v in widths.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{owner}: {name} must be an int >= 1, got {v!r}")


def check_input(owner: str, x: jax.Array, in_features: int, n_nodes: int) -> None:
    """``x`` must be float [n_nodes, in_features].

    Args:
      owner: the model's name, used in the message.
      x: the node features given to the model.
      in_features: the width the model was built for.
      n_nodes: the adjacency's N.

    Raises:
      ValueError: ``"x: GCN expects 1433 input features, got 100"`` (or the wrong row count / rank).
    """
    if getattr(x, "ndim", None) != 2:
        raise ValueError(f"x: {owner} expects node features [N, {in_features}], got shape {getattr(x, 'shape', None)}")
    if x.shape[1] != in_features:
        raise ValueError(f"x: {owner} expects {in_features} input features, got {x.shape[1]}")
    if x.shape[0] != n_nodes:
        raise ValueError(f"x: {owner} got {x.shape[0]} rows of features for an adjacency of {n_nodes} nodes")
