"""codesign.quant.set_recorded_bits: a stored run's per-tensor widths, carried back into a fresh
model of its configuration, are what that model's workload prices."""

import numpy as np
import pytest
from flax import nnx

from codesign import hwmodel
from codesign.hwmodel import presets
from codesign.models import GAT, GCN
from codesign.quant import LearnedBitQuant, RecordedBits, set_recorded_bits


def test_recorded_widths_land_in_their_own_slots_and_are_priced():
    model = GCN(40, 16, 3, quantizer="learned", bits=8, rngs=nnx.Rngs(0))
    assert isinstance(model.conv1.quant_x, LearnedBitQuant)
    widths = {"x0": 4.0, "w0": 5.0, "x1": 6.5, "w1": 3.0}
    set_recorded_bits(model, widths)
    assert {k: float(v) for k, v in model.layer_bits(hard=True).items()} == widths
    assert model.conv2.quant_x.hard_bits() == 6.5 and isinstance(model.conv1.quant_w, RecordedBits)
    one = GCN(40, 16, 3, quantizer="learned", bits=8, rngs=nnx.Rngs(0))
    set_recorded_bits(one, dict.fromkeys(widths, 5.0))
    hw = presets.get("h100")
    same = hwmodel.estimate(one.workload(500, 2000, hard=True), hw)
    ref = hwmodel.estimate(GCN(40, 16, 3, rngs=nnx.Rngs(0)).workload(500, 2000, hard=True, bits=5.0), hw)
    np.testing.assert_allclose(float(same.energy_j), float(ref.energy_j), rtol=1e-4)  # float32 sums
    # narrower recorded widths move fewer bytes
    assert float(hwmodel.estimate(model.workload(500, 2000, hard=True), hw).dram_bytes) < float(
        hwmodel.estimate(GCN(40, 16, 3, rngs=nnx.Rngs(0)).workload(500, 2000, hard=True, bits=8.0), hw).dram_bytes)


def test_set_recorded_bits_refuses_keys_and_widths_it_cannot_place():
    with pytest.raises(ValueError, match=r"layer_bits keys \['conv1.x'\] are not GCN's"):
        set_recorded_bits(GCN(40, 16, 3, quantizer="learned", bits=8, rngs=nnx.Rngs(0)), {"conv1.x": 8.0})
    fp32 = GCN(40, 16, 3, rngs=nnx.Rngs(0))  # unquantized slots: recorded at 32 bits
    assert set_recorded_bits(fp32, dict.fromkeys(("x0", "w0", "x1", "w1"), 32.0)) is fp32
    assert {float(v) for v in fp32.layer_bits(hard=True).values()} == {32.0}
    with pytest.raises(ValueError, match="RecordedBits.bits"):
        RecordedBits(40.0)
    gat = GAT(40, 8, 3, heads=2, bits=8, rngs=nnx.Rngs(0))
    set_recorded_bits(gat, {"x0": 4.0, "w0": 8.0, "x1": 8.0, "w1": 2.0})
    assert float(gat.layer_bits(hard=True)["w1"]) == 2.0
