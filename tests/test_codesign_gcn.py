"""The co-design hooks of GCN through `train`: every edge sparsifier, the channel mask, every
quantizer kind, and the cost model seeing what they learn."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign import hwmodel
from codesign.graph import feature_column_nnz
from codesign.hwmodel import presets
from codesign.models import GCN
from codesign.models.layers import QUANTIZERS, make_quantizer
from codesign.sparsify import BlockEdgeMask
from codesign.train import TrainConfig, adjacency, build_model, dense_cost, train


@pytest.mark.parametrize("sparsifier", ["edge", "block", "scorer", "dropedge"])
def test_every_edge_sparsifier_trains_and_is_costed(cora, sparsifier):
    cfg = TrainConfig.from_flat(seed=0, epochs=15, edge_mask=True, feature_mask=False, cost_weight=1.0,
                      edge_sparsifier=sparsifier)
    hw = presets.get("h100")
    r = train(cora, cfg, hw)
    assert np.isfinite(r["final_loss"]) and 0 < r["test_accuracy"] <= 1
    edge = r["densities"]["edge"]
    if sparsifier == "dropedge":
        assert edge == 1.0  # DropEdge keeps every edge at test time
    else:
        assert 0 <= edge <= 1
    # The reported costs are the cost model's, recomputed here independently: the dense FP32
    # reference, and a fresh model of the same config with the reported hard densities (and, for
    # tile gates, the reported number of kept tiles) costed as `train` documents, each with its
    # features stored dense or CSR, whichever costs less energy (the default objective).
    n, e = cora.n_nodes, cora.n_edges
    locality = hwmodel.measure_locality(cora.senders, cora.receivers, n)
    nnz = feature_column_nnz(cora.x)

    def cheaper(m, **kw):
        stores = [hwmodel.estimate(m.workload(n, e, hard=True, locality=locality, feature_nnz=f, **kw), hw)
                  for f in (None, nnz)]
        return min(stores, key=lambda rep: float(rep.energy_j))

    ref = cheaper(build_model(cfg, cora, nnx.Rngs(0), dense=True))
    assert r["dense_modeled"] == ref.summary()
    assert float(ref.energy_j) < float(dense_cost(cfg, cora, hw, {"locality": locality}).energy_j)  # CSR, on Cora
    fresh = build_model(cfg, cora, nnx.Rngs(0))
    fresh.eval()
    fresh(cora.x, adjacency(cora))  # an EdgeScorer's densities need logits cached by a forward
    if sparsifier == "block":
        mask = fresh.edge_mask
        open_gates = round(r["tiles"]["kept"]) - mask.n_always_kept_tiles
        assert 0 <= open_gates <= mask.n_gated_tiles and r["tiles"]["total"] == mask.n_tiles
        mask.gate.log_alpha[...] = jnp.where(jnp.arange(mask.n_gated_tiles) < open_gates, 10.0, -10.0)
        assert float(mask.hard_kept_tiles()) == r["tiles"]["kept"]
    expected = cheaper(fresh, densities=r["densities"])
    for k, v in expected.summary().items():
        assert np.isfinite(r["modeled"][k]) and r["modeled"][k] > 0, k
        np.testing.assert_allclose(r["modeled"][k], v, rtol=1e-6, err_msg=k)
    assert r["by_hw"][hw.name]["modeled"] == r["modeled"]
    # pruning edges (same kernel, same bits) never makes the modeled aggregation dearer
    if sparsifier in ("edge", "scorer"):
        for k in ("energy_j", "dram_bytes"):
            assert r["modeled"][k] <= r["dense_modeled"][k], k
            if edge < 1.0:
                assert r["modeled"][k] < r["dense_modeled"][k], k
    else:
        if sparsifier == "dropedge":
            assert r["modeled"] == r["dense_modeled"]


def test_block_edge_mask_is_costed_as_the_bsr_kernel_over_kept_tiles(cora):
    model = build_model(TrainConfig.from_flat(edge_mask=True, edge_sparsifier="block", cost_weight=1.0), cora, nnx.Rngs(0))
    assert isinstance(model.edge_mask, BlockEdgeMask)
    n, e = cora.n_nodes, cora.n_edges
    wl = model.workload(n, e, hard=True)
    kinds = {s.kind for layer in wl.layers for s in layer.aggregate_first + layer.combine_first}
    assert "bsr" in kinds and "spmm" not in kinds
    # Closing half of the gated tiles lowers the modeled aggregation bytes.
    full = hwmodel.estimate(wl, presets.get("h100")).dram_bytes
    la = model.edge_mask.gate.log_alpha
    la[...] = la[...].at[::2].set(-10.0)
    assert float(model.edge_mask.hard_kept_tiles()) < model.edge_mask.n_tiles
    half = hwmodel.estimate(model.workload(n, e, hard=True), presets.get("h100")).dram_bytes
    assert float(half) < float(full)


def test_channel_mask_shrinks_both_gemms(cora):
    model = build_model(TrainConfig.from_flat(channel_mask=True, hidden=16), cora, nnx.Rngs(0))
    hw = presets.get("h100")
    full = hwmodel.estimate(model.workload(cora.n_nodes, cora.n_edges, hard=True), hw)
    la = model.channel_mask.gate.log_alpha
    la[...] = la[...].at[:8].set(-10.0)
    assert float(model.densities(hard=True)["channel"]) == 0.5
    half = hwmodel.estimate(model.workload(cora.n_nodes, cora.n_edges, hard=True), hw)
    assert float(half.energy_j) < float(full.energy_j)
    model.eval()
    h_logits = model(cora.x, adjacency(cora))
    assert np.all(np.isfinite(np.asarray(h_logits)))


@pytest.mark.parametrize("kind", QUANTIZERS)
def test_every_quantizer_kind_trains_and_reports_its_bits(cora, kind):
    r = train(cora, TrainConfig.from_flat(seed=0, epochs=10, bits=4, quantizer=kind), presets.get("h100"))
    assert np.isfinite(r["final_loss"])
    bits = r["layer_bits"]
    assert set(bits) == {"x0", "w0", "x1", "w1"}
    assert all(1 <= b <= 32 for b in bits.values())
    if kind in ("fixed", "lsq", "degree"):
        assert all(b == 4.0 for b in bits.values())


def test_learned_bits_get_the_cost_gradient(cora):
    """The cost term reaches a learned bit-width: d cost / d q_max != 0 through layer_bits."""
    import jax
    model = build_model(TrainConfig.from_flat(bits=4, quantizer="learned"), cora, nnx.Rngs(0, quant=1))
    model(cora.x, adjacency(cora))  # data-dependent init of the quantizers
    hw = presets.get("h100")
    from codesign.quant import BitParam

    def cost(m):
        return hwmodel.estimate(m.workload(cora.n_nodes, cora.n_edges), hw).energy_j

    grads = nnx.grad(cost, argnums=nnx.DiffState(0, BitParam))(model)
    leaves = [np.asarray(g) for g in jax.tree.leaves(grads)]
    assert leaves and all(np.all(np.isfinite(g)) for g in leaves)
    assert any(np.any(g != 0) for g in leaves)


def test_quantizer_factory_errors():
    with pytest.raises(ValueError, match="unknown kind"):
        make_quantizer("ternary", 4, signed=True, node_wise=False)
    with pytest.raises(ValueError, match="in_degree"):
        make_quantizer("degree", 4, signed=False, node_wise=True)


def test_options_a_model_does_not_take_are_refused(cora):
    with pytest.raises(ValueError, match="channel_mask"):
        build_model(TrainConfig.for_model("gin", channel_mask=True), cora, nnx.Rngs(0))


def test_gcn_takes_a_user_built_sparsifier(cora):
    """The three-line use: build a sparsifier, hand it to the model, read its density."""
    mask = BlockEdgeMask.from_graph(cora.senders, cora.receivers, cora.n_nodes, 16, rngs=nnx.Rngs(0))
    model = GCN(cora.n_features, 16, cora.n_classes, edge_sparsifier=mask, rngs=nnx.Rngs(0))
    out = model(cora.x, adjacency(cora))
    assert out.shape == (cora.n_nodes, cora.n_classes)
    assert 0 < float(model.densities()["edge"]) <= 1
