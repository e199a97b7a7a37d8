"""The seeds of one point trained as one compiled program (`codesign.train.train_seeds`: vmapped,
or mapped one after the other inside it) give each seed the record `train` gives it alone."""

import numpy as np
import pytest

from codesign.hwmodel import presets
from codesign.train import TrainConfig, seeds_batchable, train, train_seeds

FIELDS = ("final_loss", "final_cost_ratio", "multiplier", "test_accuracy", "val_accuracy", "train_accuracy")


def _same_as_alone(batched: list, alone: list) -> None:
    assert len(batched) == len(alone)
    for b, a in zip(batched, alone):
        assert set(b) == set(a)  # the same record fields
        for k in FIELDS:
            np.testing.assert_allclose(b[k], a[k], rtol=1e-4, atol=1e-6, err_msg=k)
        assert b["selected_epoch"] == a["selected_epoch"]
        for k in a["densities"]:
            np.testing.assert_allclose(b["densities"][k], a["densities"][k], rtol=1e-4, err_msg=k)
        assert b["modeled"] == pytest.approx(a["modeled"], rel=1e-4)


@pytest.mark.parametrize("kw", [
    # dropout on: each seed's stream lives in its own model state, so the batched seeds draw the same masks
    dict(epochs=6, select="best_val"),
    # cost term + 8-bit quantization + cost-aware best-validation selection, and a budget's multiplier
    # (seconds of compiling the cost model each)
    pytest.param(dict(epochs=6, cost_weight=0.1, bits=8, edge_mask=True, select="best_val"), marks=pytest.mark.slow),
    pytest.param(dict(epochs=6, budget=0.7, select="best_val"), marks=pytest.mark.slow),
], ids=["dense", "penalty_best_val", "budget"])
def test_batched_seeds_match_each_seed_trained_alone(cora, kw):
    hw = presets.get("h100-datasheet")  # launch-free: a budget of 0.7 is below an FP32 Cora GCN's floor on the fitted h100 (0.52 here)
    cfgs = [TrainConfig.for_model("gcn", seed=s, **kw) for s in range(2)]
    assert seeds_batchable(cfgs)
    batched = list(train_seeds(cora, cfgs, hw, batch_size=None))  # jax.vmap over the seeds, on every backend
    _same_as_alone(batched, [train(cora, cfg, hw) for cfg in cfgs])
    losses = [r["final_loss"] for r in batched]
    assert len(set(losses)) == len(losses), losses  # the seeds are different runs


@pytest.mark.parametrize("batch_size", [1, 0], ids=["mapped", "reused"])
def test_seeds_mapped_or_on_one_compiled_step_match_each_seed_trained_alone(cora, batch_size):
    """``batch_size=1``: `jax.lax.map` over the seeds instead of `jax.vmap`; 0: each seed's own
    epoch loop on the first seed's compiled step; the same records."""
    hw = presets.get("cpu")
    cfgs = [TrainConfig.for_model("gcn", seed=s, epochs=4, select="best_val") for s in range(2)]
    _same_as_alone(list(train_seeds(cora, cfgs, hw, batch_size=batch_size)), [train(cora, cfg, hw) for cfg in cfgs])


def test_batched_seeds_call_on_epoch_once_per_epoch_with_a_value_per_seed(cora):
    seen = []
    cfgs = [TrainConfig.for_model("gcn", seed=s, epochs=3) for s in range(2)]
    list(train_seeds(cora, cfgs, presets.get("cpu"), batch_size=None,
                     on_epoch=lambda e, v: seen.append((e, np.shape(v["loss"])))))
    assert seen == [(0, (2,)), (1, (2,)), (2, (2,))]


def test_configs_that_differ_beyond_the_seed_are_trained_one_by_one(cora, monkeypatch):
    import codesign.train.loop as loop
    cfgs = [TrainConfig.for_model("gcn", seed=0, epochs=2), TrainConfig.for_model("gcn", seed=1, epochs=3)]
    assert not seeds_batchable(cfgs) and not seeds_batchable(cfgs[:1])
    calls = []
    real = loop.train
    monkeypatch.setattr(loop, "train", lambda g, cfg, *a, **k: calls.append(cfg) or real(g, cfg, *a, **k))
    monkeypatch.setattr(loop, "fit_seeds", lambda *a, **k: pytest.fail("batched configs that differ"))
    out = list(train_seeds(cora, cfgs, presets.get("cpu")))
    assert calls == cfgs and [r["selected_epoch"] for r in out] == [1, 2]


def test_a_diverged_seed_raises_after_the_seeds_before_it(cora, monkeypatch):
    import codesign.train.loop as loop
    real = loop.fit_seeds

    def second_diverges(*a, **k):
        import dataclasses
        res = real(*a, **k)
        res[1] = dataclasses.replace(res[1], final_loss=float("nan"), first_nonfinite_epoch=1)
        return res
    monkeypatch.setattr(loop, "fit_seeds", second_diverges)
    cfgs = [TrainConfig.for_model("gcn", seed=s, epochs=2) for s in range(3)]
    results = train_seeds(cora, cfgs, presets.get("cpu"), batch_size=None)
    assert np.isfinite(next(results)["final_loss"])
    with pytest.raises(FloatingPointError, match="from epoch 1 of 2.*seed=1"):
        next(results)
