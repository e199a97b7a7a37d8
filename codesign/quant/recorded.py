"""Recorded bit-widths: price a stored run's learned widths without retraining.

A run record keeps the deployed mean width of every quantizer (``layer_bits``, a model's
``layer_bits(hard=True)``); `set_recorded_bits` puts those widths back into a freshly built model
of the same configuration, so its own ``workload`` prices them: `experiments/migrate_records.py`
re-prices stored records this way, `experiments/hwmodel_sensitivity.py` its rebuilt designs.
"""

from __future__ import annotations

from typing import Mapping, final

import jax.numpy as jnp
from flax import nnx

from codesign.hwmodel.validate import check_bits
from codesign.quant.fake_quant import Quantizer

__all__ = ["RecordedBits", "set_recorded_bits"]


@final
class RecordedBits(Quantizer):
    """A quantizer slot that only carries a recorded mean bit-width (float, in [1, 32]) for the
    cost model: ``expected_bits`` and ``hard_bits`` return it; calling it raises
    NotImplementedError (it does not quantize). A per-node width is carried as its mean over the
    nodes, exact for the bytes the cost model prices (traffic is linear in the width,
    `codesign.models.layers.quant_bits`)."""

    def __init__(self, bits: float):
        self.mean_bits = float(check_bits(bits, "RecordedBits.bits"))

    def __call__(self, x):
        raise NotImplementedError("RecordedBits carries a width for costing; it does not quantize")

    def expected_bits(self):
        return jnp.asarray(self.mean_bits, jnp.float32)

    def hard_bits(self):
        return self.mean_bits

    def takes_sparse(self) -> bool:
        return False  # it does not quantize


def _set_at(model, path: tuple, value) -> None:
    parent = model
    for step in path[:-1]:
        parent = parent[step] if isinstance(step, int) else getattr(parent, step)
    if isinstance(path[-1], int):
        parent[path[-1]] = value
    else:
        setattr(parent, path[-1], value)


def set_recorded_bits(model, layer_bits: Mapping[str, float]):
    """Replaces every quantizer of ``model`` (a `codesign.models` model, changed in place and
    returned) by a `RecordedBits` carrying its width in ``layer_bits`` (keys as the model's
    ``layer_bits()``: ``{"x0", "w0", ...}`` for GCN and GAT, quantizer paths otherwise).

    Which key is which quantizer is read from the model itself: each quantizer first gets a distinct
    probe width (1, 2, ...; a slot without one reports 32), and ``model.layer_bits(hard=True)`` says under which key it reports it.

    Raises:
      ValueError: ``layer_bits`` names a key the model does not report, misses one it does, gives
        a slot without a quantizer a width other than 32, or a width outside [1, 32]
        (`codesign.hwmodel.check_bits`).
    """
    paths = [path for path, node in nnx.iter_graph(model) if isinstance(node, Quantizer)]
    if len(paths) > 31:
        raise ValueError(f"set_recorded_bits: cannot tell {type(model).__name__}'s {len(paths)} quantizers apart")
    for i, path in enumerate(paths):
        _set_at(model, path, RecordedBits(1 + i))
    probe = {k: int(round(float(v))) for k, v in model.layer_bits(hard=True).items()}
    if set(probe) != set(layer_bits):
        raise ValueError(f"set_recorded_bits: layer_bits keys {sorted(layer_bits)} are not "
                         f"{type(model).__name__}'s {sorted(probe)}")
    for key, width in probe.items():
        if width == 32:  # a slot without a quantizer: the record must say float32 there
            if float(layer_bits[key]) != 32:
                raise ValueError(f"set_recorded_bits: layer_bits[{key!r}]={layer_bits[key]} but "
                                 f"{type(model).__name__} has no quantizer there (32 bits)")
            continue
        _set_at(model, paths[width - 1], RecordedBits(layer_bits[key]))
    return model
