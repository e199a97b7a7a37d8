"""The co-design hooks of GAT and GraphSAGE (edge sparsifiers, channel mask, quantizer kinds,
per-layer bits in the workload) and cost-weighted / budget training that actually prunes them."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from codesign import hwmodel
from codesign.hwmodel import presets
from codesign.kernels import CooAdjacency
from codesign.models import GAT, GraphSAGE
from codesign.quant import BitParam
from codesign.sparsify import BlockEdgeMask
from codesign.train import TrainConfig, build_model, train

MODELS = {"gat": GAT, "sage": GraphSAGE}
N_NODES, IN, HIDDEN, CLASSES, HEADS = 48, 12, 4, 3, 2


@pytest.fixture
def graph(getkey):
    """Random directed graph without self-loops or duplicate edges, non-negative features."""
    k1, k2, k3 = getkey(), getkey(), getkey()
    snd = np.asarray(jax.random.randint(k1, (240,), 0, N_NODES))
    rcv = np.asarray(jax.random.randint(k2, (240,), 0, N_NODES))
    pairs = np.unique(np.stack([snd, rcv], 1)[snd != rcv], axis=0)
    adj = CooAdjacency(jnp.asarray(pairs[:, 0], jnp.int32), jnp.asarray(pairs[:, 1], jnp.int32), None, N_NODES)
    return adj, jax.random.uniform(k3, (N_NODES, IN))


def make(name, **kw):
    extra = dict(heads=HEADS) if name == "gat" else {}
    return MODELS[name](IN, HIDDEN, CLASSES, rngs=nnx.Rngs(0, gates=1, quant=2), **extra, **kw)


def width(name):
    return HIDDEN * HEADS if name == "gat" else HIDDEN


def kinds(wl):
    return {s.kind for layer in wl.layers for s in layer.aggregate_first + layer.combine_first}


def macs(wl, layer, kind):
    """MACs of the ``kind`` stage of layer ``layer`` in the combine-first order."""
    return sum(float(s.macs) for s in wl.layers[layer].combine_first if s.kind == kind)


def close(gate, idx):
    la = gate.log_alpha
    la[...] = la[...].at[idx].set(-10.0)


def block_mask(adj, self_loops):
    return BlockEdgeMask.from_graph(adj.senders, adj.receivers, N_NODES, 8, "rcm", self_loops, rngs=nnx.Rngs(3))


# --- edge sparsifiers ---------------------------------------------------------------------------

def test_sage_block_mask_is_costed_as_bsr_over_kept_tiles(graph):
    adj, x = graph
    mask = block_mask(adj, self_loops=False)
    model = make("sage", edge_sparsifier=mask)
    wl = model.workload(N_NODES, adj.n_edges, hard=True)
    assert "bsr" in kinds(wl) and "spmm" not in kinds(wl)
    bsr = [s for s in wl.layers[0].combine_first if s.kind == "bsr"][0]
    assert float(bsr.macs) == mask.n_tiles * 8 * 8 * HIDDEN  # every tile kept at init
    close(mask.gate, slice(None, None, 2))
    kept = float(mask.hard_kept_tiles())
    assert kept < mask.n_tiles
    wl_half = model.workload(N_NODES, adj.n_edges, hard=True)
    assert macs(wl_half, 0, "bsr") == kept * 8 * 8 * HIDDEN
    hw = presets.get("h100")
    assert float(hwmodel.estimate(wl_half, hw).dram_bytes) < float(hwmodel.estimate(wl, hw).dram_bytes)
    # The max aggregator has no BSR form: a gather over the kept edges.
    mx = make("sage", edge_sparsifier=mask, aggr="max")
    wl_max = mx.workload(N_NODES, adj.n_edges, hard=True)
    assert "bsr" not in kinds(wl_max)
    assert macs(wl_max, 0, "spmm") == pytest.approx(float(mask.hard_edge_mask().sum()) * IN)


def test_sage_refuses_a_block_mask_with_self_loops(graph):
    adj, _ = graph
    with pytest.raises(ValueError, match="self_loops=False"):
        make("sage", edge_sparsifier=block_mask(adj, self_loops=True))


def test_gat_block_mask_is_costed_through_its_kept_edges(graph):
    """GAT's attention runs edge-wise (no block-sparse form): closing tiles removes exactly their
    edges from the SDDMM, softmax and SpMM nnz, and no BSR stage appears."""
    adj, x = graph
    mask = block_mask(adj, self_loops=True)
    model = make("gat", edge_sparsifier=mask)
    close(mask.gate, slice(None, None, 2))
    kept_edges = float(mask.hard_edge_mask().sum())
    assert kept_edges < adj.n_edges
    wl = model.workload(N_NODES, adj.n_edges, hard=True)
    assert "bsr" not in kinds(wl)
    nnz = kept_edges + N_NODES  # + self-loops
    assert macs(wl, 0, "spmm") == pytest.approx(nnz * HIDDEN * HEADS)
    assert macs(wl, 0, "sddmm") == pytest.approx(nnz * HEADS * 2)


@pytest.mark.parametrize("name", ["gat", "sage"])
def test_hardened_edge_mask_equals_the_pruned_graph(name, graph):
    """Hard-zero gates remove their edges exactly: the masked model equals the unmasked model
    (same weights) on the graph without those edges."""
    adj, x = graph
    masked = make(name, n_edges=adj.n_edges)
    drop = np.arange(adj.n_edges) % 3 == 0
    close(masked.edge_mask.gate, np.flatnonzero(drop))
    masked.eval()
    gates = masked.edge_mask.edge_gates(x, adj.senders, adj.receivers)
    assert np.all(np.asarray(gates)[drop] == 0.0)
    plain = make(name)
    for mine, theirs in ((plain.conv1, masked.conv1), (plain.conv2, masked.conv2)):
        nnx.update(mine, nnx.state(theirs))
    plain.eval()
    assert np.all(np.asarray(gates)[~drop] == 1.0)  # log_alpha 3: the deterministic gate clips to 1
    keep = jnp.asarray(~drop)
    pruned = CooAdjacency(adj.senders[keep], adj.receivers[keep], None, N_NODES)
    np.testing.assert_allclose(masked(x, adj), plain(x, pruned), rtol=1e-5, atol=1e-6)
    assert float(masked.densities(hard=True)["edge"]) == pytest.approx(1 - drop.mean())


# --- channel mask -------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gat", "sage"])
def test_channel_mask_shrinks_the_workload_and_removes_channels_exactly(name, graph):
    adj, x = graph
    model = make(name, channel_mask=True)  # fp32: per-tensor quantizer scales would see pruned weights
    hw = presets.get("h100")
    c = width(name)
    # Half of every head's channels (GAT): a closed channel must leave its head's scores too.
    closed = np.flatnonzero(np.arange(c) % HIDDEN < HIDDEN // 2)
    full = model.workload(N_NODES, adj.n_edges, hard=True)
    close(model.channel_mask.gate, closed)
    assert float(model.densities(hard=True)["channel"]) == 0.5
    half = model.workload(N_NODES, adj.n_edges, hard=True)
    for layer in range(len(full.layers)):  # every GEMM reading or writing the hidden channels halves
        assert macs(half, layer, "gemm") == pytest.approx(0.5 * macs(full, layer, "gemm"))
    if name == "gat":
        assert macs(half, 0, "spmm") == pytest.approx(0.5 * macs(full, 0, "spmm"))
    assert float(hwmodel.estimate(half, hw).energy_j) < float(hwmodel.estimate(full, hw).energy_j)
    # Exact removal: the pruned channels' weights (and GAT's attention entries) no longer matter.
    model.eval()
    before = np.asarray(model(x, adj))
    if name == "gat":
        params = [(model.conv1.kernel, (slice(None), closed)), (model.conv1.bias, closed),
                  (model.conv2.kernel, (closed, slice(None))),
                  (model.conv1.att_src, (slice(None), slice(0, HIDDEN // 2))),
                  (model.conv1.att_dst, (slice(None), slice(0, HIDDEN // 2)))]
    else:
        params = [(model.conv1.kernel_neigh, (slice(None), closed)), (model.conv1.kernel_root, (slice(None), closed)),
                  (model.conv1.bias, closed), (model.conv2.kernel_neigh, (closed, slice(None))),
                  (model.conv2.kernel_root, (closed, slice(None)))]
    for p, idx in params:
        p[...] = p[...].at[idx].add(3.0)
    np.testing.assert_array_equal(np.asarray(model(x, adj)), before)


# --- quantizers ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gat", "sage"])
def test_learned_bits_are_differentiable_in_the_workload(name, graph):
    adj, x = graph
    model = make(name, bits=4, quantizer="learned")
    model(x, adj)  # data-dependent init of the quantizers
    lb = model.layer_bits()
    assert set(lb) == {"x0", "w0", "x1", "w1"}
    wl = model.workload(N_NODES, adj.n_edges)
    gemm0 = [s for s in wl.layers[0].combine_first if s.kind == "gemm"][0]
    np.testing.assert_allclose(float(gemm0.bits), max(float(lb["x0"]), float(lb["w0"])), rtol=1e-6)
    hw = presets.get("h100")
    cost = lambda m: hwmodel.estimate(m.workload(N_NODES, adj.n_edges), hw).energy_j
    grads = nnx.grad(cost, argnums=nnx.DiffState(0, BitParam))(model)
    leaves = [np.asarray(g) for g in jax.tree.leaves(grads)]
    assert len(leaves) >= 4 and all(np.all(np.isfinite(g)) for g in leaves)
    assert sum(np.any(g != 0) for g in leaves) >= 4  # every layer's input and weight bits
    hard = model.layer_bits(hard=True)
    assert all(1 <= float(b) <= 8 for b in hard.values())


@pytest.mark.parametrize("name", ["gat", "sage"])
def test_degree_quantizers_need_in_degree(name, graph):
    adj, x = graph
    for kind in ("degree", "a2q"):
        with pytest.raises(ValueError, match="in_degree"):
            make(name, bits=4, quantizer=kind)
    deg = np.bincount(np.asarray(adj.receivers), minlength=N_NODES) + 1
    model = make(name, bits=4, quantizer="a2q", in_degree=deg)
    out = model(x, adj)
    assert out.shape == (N_NODES, CLASSES) and bool(jnp.isfinite(out).all())
    per_node = model.conv1.quant_x.bits()  # A^2Q: one learned bit-width per node, set by in-degree
    assert per_node.shape == (N_NODES,) and float(per_node.max()) > float(per_node.min())


@pytest.mark.parametrize("name", ["gat", "sage"])
def test_feature_mask_removes_columns_exactly(name, graph):
    adj, x = graph
    model = make(name, feature_mask=True, n_edges=adj.n_edges, bits=8)
    close(model.feature_mask.gate, slice(0, IN // 2))
    model.eval()
    before = np.asarray(model(x, adj))
    after = np.asarray(model(x.at[:, : IN // 2].add(7.0), adj))
    np.testing.assert_array_equal(after, before)
    assert float(model.densities(hard=True)["feature"]) == 0.5
    full = make(name, feature_mask=True, bits=8).workload(N_NODES, adj.n_edges, hard=True)
    half = model.workload(N_NODES, adj.n_edges, hard=True)
    assert macs(half, 0, "gemm") == pytest.approx(0.5 * macs(full, 0, "gemm"))


# --- training on Cora ---------------------------------------------------------------------------

def test_build_model_gives_gat_and_sage_every_hook(cora):
    for name in ("gat", "sage"):
        cfg = TrainConfig.for_model(name, edge_mask=True, edge_sparsifier="block", channel_mask=True,
                                    bits=4, quantizer="degree")
        model = build_model(cfg, cora, nnx.Rngs(0))
        assert isinstance(model.edge_mask, BlockEdgeMask) and model.channel_mask is not None
        # GraphSAGE aggregates no self-loops: its tiles are those of A, GAT's those of A + I.
        assert model.edge_mask.n_entries == cora.n_edges + (cora.n_nodes if name == "gat" else 0)


@pytest.mark.slow
def test_gat_cost_weighted_training_prunes_under_best_val_selection(cora):
    """GAT's defaults select the best-validation epoch; before the selection was cost-aware it
    picked an epoch before any gate had closed (densities 1.0)."""
    cfg = TrainConfig.for_model("gat", cost_weight=1.0, bits=8, epochs=25, gate_lr=0.3, seed=0)
    assert cfg.optim.select == "best_val"
    r = train(cora, cfg, presets.get("h100"))
    assert r["densities"]["edge"] < 0.9 and r["densities"]["feature"] < 0.9
    assert r["modeled"]["energy_j"] < r["dense_modeled"]["energy_j"]
    assert r["test_accuracy"] > 0.5  # 7 classes: chance ~ 0.14


@pytest.mark.slow
def test_sage_cost_weighted_training_prunes(cora):
    cfg = TrainConfig.for_model("sage", cost_weight=1.0, bits=8, epochs=25, gate_lr=0.3, seed=0, select="last")
    r = train(cora, cfg, presets.get("h100-datasheet"))  # launch-free datasheet H100: on the fitted h100 a Cora model is launch-bound (~1x to gain)
    assert r["densities"]["edge"] < 0.9 and r["densities"]["feature"] < 0.9
    assert r["test_accuracy"] > 0.4


@pytest.mark.slow
def test_gat_budget_lands_within_five_percent(cora):
    """Budget mode on Cora GAT (feature + edge mask, 8 bits, h100-datasheet energy): the hardened cost of
    the selected epoch is within 5 % of the budget (300 epochs, gate_lr 0.05). Against the
    reported dense reference (features stored CSR, cheaper there) every gate closed still costs 0.29
    of dense, so the budget is 0.4 (it was 0.15 against the dense-stored one). Measured with the
    suite's XLA flags, cost model 5 (layers mapped by energy), 2026-11-29: 0.999 / 0.983 of it on seeds
    0 / 1 (test accuracy 75.3 / 74.5 %); gate_lr 0.075 (the former setting) gave 0.948 on seed 0 there,
    0.972 with XLA's default flags: the PI loop amplifies float differences over 300 epochs."""
    budget = 0.4
    cfg = TrainConfig.for_model("gat", budget=budget, bits=8, epochs=300, gate_lr=0.05, seed=0)
    r = train(cora, cfg, presets.get("h100-datasheet"))  # launch-free datasheet H100: on the fitted h100 a Cora model is launch-bound (~1x to gain)
    ratio = r["modeled"]["energy_j"] / r["dense_modeled"]["energy_j"]
    assert 0.95 <= ratio / budget <= 1.05, ratio / budget
    assert r["densities"]["edge"] < 1 and r["densities"]["feature"] < 1
