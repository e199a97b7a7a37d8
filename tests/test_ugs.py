"""Tests of the UGS-style baseline trainer (`codesign.baselines.ugs`) on a tiny cSBM graph."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign.data.synthetic import csbm
from codesign.sparsify.baselines import global_magnitude_prune, magnitude_prune, prune_count
from codesign.baselines.ugs import build_ticket, fit, ugs_counted_macs, ugs_prune
from codesign.train import adjacency, masked_accuracy


@pytest.fixture(scope="module")
def graph():
    return csbm(60, 12, 4.0, 0.8, 1.0, n_classes=3, seed=0)


@pytest.fixture(scope="module")
def records(graph):
    return ugs_prune(graph, 2, seed=0, epochs=4, hidden=8, graph_rate=0.1, weight_rate=0.3)


def test_sparsity_follows_schedule(graph, records):
    assert [r["round"] for r in records] == [0, 1, 2]
    e, w = graph.n_edges, graph.n_features * 8 + 8 * graph.n_classes
    for r in records:
        kept_e, kept_w = e, w
        for _ in range(r["round"]):
            kept_e -= prune_count(kept_e, 0.1)
            kept_w -= prune_count(kept_w, 0.3)
        assert r["kept_edges"] == kept_e and sum(r["weight_nnz"]) == kept_w
        assert r["graph_sparsity"] == pytest.approx(r["nominal_graph_sparsity"], abs=1.0 / e)
        assert r["weight_sparsity"] == pytest.approx(r["nominal_weight_sparsity"], abs=1.0 / w)
        assert 0.0 <= r["test_accuracy"] <= 1.0
    assert records[0]["energy_ratio"] == pytest.approx(1.0) and records[0]["ugs_macs_ratio"] == 1.0
    assert records[2]["ugs_macs_ratio"] < records[1]["ugs_macs_ratio"] < 1.0
    assert records[2]["energy_ratio"] <= 1.0


def _pruned_keeps(graph, hidden=8):
    rng = np.random.default_rng(0)
    edge = magnitude_prune(jnp.asarray(rng.normal(size=graph.n_edges)), jnp.ones(graph.n_edges, bool), 0.4)
    shapes = [(graph.n_features, hidden), (hidden, graph.n_classes)]
    ws = global_magnitude_prune([jnp.asarray(rng.normal(size=s)) for s in shapes], [jnp.ones(s, bool) for s in shapes], 0.5)
    return edge, ws


def test_rewind_restores_initial_weights_of_kept_entries(graph):
    edge, ws = _pruned_keeps(graph)
    fresh = build_ticket(graph, 3, hidden=8)
    ticket = build_ticket(graph, 3, edge, ws, hidden=8)
    for (c0, _), (c1, m1), keep in zip(fresh.pairs(), ticket.pairs(), ws):
        np.testing.assert_array_equal(np.asarray(c1.kernel[...]), np.asarray(c0.kernel[...] * keep))
        np.testing.assert_array_equal(np.asarray(m1.weight[...]), np.asarray(keep, np.float32))
    np.testing.assert_array_equal(np.asarray(ticket.gcn.edge_mask.weight[...]), np.asarray(edge, np.float32))


def _check_best_epoch(out, graph, rebuild, *, epochs, **kw):
    """`fit`'s contract: ``epoch`` is the first epoch of best validation accuracy (-1, with both
    accuracies 0, if it never rose above 0), and the accuracies are the model's at that epoch:
    replaying training for ``epoch + 1`` epochs from the same rewound ticket ends on them."""
    n_val, n_test = int(np.sum(graph.val_mask)), int(np.sum(graph.test_mask))
    assert -1 <= out["epoch"] < epochs
    if out["epoch"] == -1:
        assert out["val_accuracy"] == 0.0 and out["test_accuracy"] == 0.0
        return
    assert 0.0 < out["val_accuracy"] <= 1.0 and 0.0 <= out["test_accuracy"] <= 1.0
    # accuracies are fractions of the validation / test nodes
    assert out["val_accuracy"] * n_val == pytest.approx(round(out["val_accuracy"] * n_val), abs=1e-4)
    assert out["test_accuracy"] * n_test == pytest.approx(round(out["test_accuracy"] * n_test), abs=1e-4)
    replay = rebuild()
    again = fit(replay, graph, epochs=out["epoch"] + 1, **kw)
    assert (again["epoch"], again["val_accuracy"], again["test_accuracy"]) == (
        out["epoch"], out["val_accuracy"], out["test_accuracy"])
    replay.eval()
    logits = replay(graph.x, adjacency(graph))
    assert float(masked_accuracy(logits, graph.y, graph.val_mask)) == out["val_accuracy"]
    assert float(masked_accuracy(logits, graph.y, graph.test_mask)) == out["test_accuracy"]


@pytest.mark.parametrize("train_masks", [False, True])
def test_pruned_entries_stay_zero_after_training(graph, train_masks):
    edge, ws = _pruned_keeps(graph)
    model = build_ticket(graph, 1, edge, ws, hidden=8)
    before = [np.asarray(c.kernel[...]) for c, _ in model.pairs()]
    kw = dict(train_masks=train_masks, lr=0.01, weight_decay=5e-4, s1=1e-2, s2=1e-2)
    out = fit(model, graph, epochs=5, **kw)
    _check_best_epoch(out, graph, lambda: build_ticket(graph, 1, edge, ws, hidden=8), epochs=5, **kw)
    assert out["epoch"] >= 0  # this fixture learns within 5 epochs, so the replay above ran
    for w, keep, b in zip(model.effective_kernels(), ws, before):
        assert np.all(np.asarray(w)[~np.asarray(keep)] == 0)
        assert not np.allclose(np.asarray(w)[np.asarray(keep)], b[np.asarray(keep)])  # kept ones trained
    gates = np.asarray(model.gcn.edge_mask.edge_gates())
    assert np.all(gates[~np.asarray(edge)] == 0)
    if train_masks:
        e_scores, w_scores = out["masks"]
        assert np.all(np.asarray(e_scores)[~np.asarray(edge)] == 0)
        for s, keep in zip(w_scores, ws):
            assert np.all(np.asarray(s)[~np.asarray(keep)] == 0)
    else:
        np.testing.assert_array_equal(gates, np.asarray(edge, np.float32))  # fixed masks not trained


@pytest.mark.parametrize("kw", [dict(graph_rate=1.5), dict(weight_rate=-0.1), dict(graph_rate="x"),
                                dict(rounds=-1), dict(epochs=0), dict(mask_noise=1.5),
                                dict(mask_noise=-0.1, pruning="random")])
def test_bad_arguments(graph, kw):
    (name,) = [k for k in kw if k != "pruning"]
    with pytest.raises(ValueError, match=rf"^{name} must be .*, got {name}="):
        ugs_prune(graph, **{"rounds": 1, "epochs": 1, **kw})


def test_ugs_counted_macs():
    assert ugs_counted_macs(10, 30, [6, 4], [3, 2]) == 10 * 6 + 40 * 3 + 10 * 4 + 40 * 2


def test_int8_ticket_quantizes_the_masked_kernels(graph):
    edge, ws = _pruned_keeps(graph)
    fp = build_ticket(graph, 2, edge, ws, hidden=8)
    q8 = build_ticket(graph, 2, edge, ws, hidden=8, bits=8)
    assert fp.gcn.layer_bits(hard=True)["w0"] == 32 and q8.gcn.layer_bits(hard=True)["w0"] == 8
    fp.eval(), q8.eval()
    from codesign.train import adjacency
    x = jnp.abs(graph.x)  # GCN's input grid is unsigned (bag-of-words); cSBM features are Gaussian
    a, b = fp(x, adjacency(graph)), q8(x, adjacency(graph))
    assert not np.allclose(np.asarray(a), np.asarray(b))  # the 8-bit grid changes the logits ...
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=0.1 * float(jnp.abs(a).max()))  # ... a little
    # pruned kernel entries are still exactly 0 after the 8-bit grid
    for conv, mask in q8.pairs():
        w = conv.quant_w(conv.kernel[...] * mask.gates())
        assert np.all(np.asarray(w)[~np.asarray(mask.keep[...])] == 0)


def test_ugs_net_is_official_net_gcn(graph):
    # UGS's net_gcn: torch nn.Linear init U(-1/sqrt(fan_in), 1/sqrt(fan_in)), no bias (zero and not
    # trained), dropout on the hidden layer only; net="gcn" keeps the package GCN (Glorot, biases).
    ugs, gcn = build_ticket(graph, 0, hidden=8), build_ticket(graph, 0, hidden=8, net="gcn")
    assert not ugs.gcn.input_dropout and gcn.gcn.input_dropout
    for conv in (ugs.gcn.conv1, ugs.gcn.conv2):
        bound = 1.0 / np.sqrt(conv.in_features)
        k = np.asarray(conv.kernel[...])
        assert np.abs(k).max() <= bound and np.abs(k).max() > 0.8 * bound
    fit(ugs, graph, train_masks=False, epochs=5, lr=0.01, weight_decay=5e-4)
    fit(gcn, graph, train_masks=False, epochs=5, lr=0.01, weight_decay=5e-4)
    assert all(np.all(np.asarray(c.bias[...]) == 0) for c in (ugs.gcn.conv1, ugs.gcn.conv2))
    assert any(np.any(np.asarray(c.bias[...]) != 0) for c in (gcn.gcn.conv1, gcn.gcn.conv2))
    with pytest.raises(ValueError, match="net must be one of"):
        build_ticket(graph, 0, hidden=8, net="pyg")


def test_hidden_only_dropout_leaves_the_input_alone(graph):
    # GCN(input_dropout=False) in training equals a hand-written forward that drops out only the
    # hidden layer (the same dropout stream, one draw); with input dropout it does not
    from flax import nnx

    from codesign.models import GCN
    from codesign.models.norm import gcn_normalize
    from codesign.train import adjacency
    adj = adjacency(graph)
    same = []
    for input_dropout in (False, True):
        m = GCN(graph.n_features, 8, graph.n_classes, dropout=0.5, input_dropout=input_dropout, rngs=nnx.Rngs(0))
        m.train()
        ref = nnx.clone(m)
        out = m(graph.x, adj)
        a = gcn_normalize(adj)
        hand = ref.conv2(jax.nn.relu(ref.conv1(graph.x, a, None)), a, ref.dropout)
        same.append(bool(np.allclose(np.asarray(out), np.asarray(hand), atol=1e-6)))
    assert same == [True, False]


def test_mask_noise_is_relative_seeded_and_spares_pruned_entries(graph):
    edge, ws = _pruned_keeps(graph)
    a = build_ticket(graph, 4, edge, ws, hidden=8, mask_noise=1e-5)
    b = build_ticket(graph, 4, edge, ws, hidden=8, mask_noise=1e-5)
    c = build_ticket(graph, 5, edge, ws, hidden=8, mask_noise=1e-5)
    for m in ("mask1", "mask2"):
        wa, keep = np.asarray(getattr(a, m).weight[...]), np.asarray(getattr(a, m).keep[...])
        assert np.all(wa[~keep] == 0) and np.all(np.abs(wa[keep] - 1) <= 1e-5)
        assert len(np.unique(wa[keep])) > 0.9 * keep.sum()  # ties broken
        np.testing.assert_array_equal(wa, np.asarray(getattr(b, m).weight[...]))  # same seed, same draws
        assert not np.array_equal(wa, np.asarray(getattr(c, m).weight[...]))
    ea = np.asarray(a.gcn.edge_mask.weight[...])
    assert np.all(ea[~np.asarray(edge)] == 0) and np.all(np.abs(ea[np.asarray(edge)] - 1) <= 1e-5)
    plain = build_ticket(graph, 4, edge, ws, hidden=8)
    np.testing.assert_array_equal(np.asarray(plain.mask1.weight[...]), np.asarray(ws[0], np.float32))
    with pytest.raises(ValueError, match="mask_noise"):
        build_ticket(graph, 4, hidden=8, mask_noise=-0.1)


def test_mask_noise_breaks_ties_at_random_not_by_index():
    # entries with no task gradient follow one trajectory: with exactly-one masks they tie and
    # magnitude pruning takes the lowest indices; the noise spreads the pruned ones over the array
    tied = jnp.ones((1000,), jnp.float32)
    by_index = np.flatnonzero(~np.asarray(magnitude_prune(tied, jnp.ones(1000, bool), 0.2)))
    assert by_index.max() == 199
    noisy = tied * (1.0 + 1e-5 * jax.random.uniform(jax.random.key(0), (1000,), jnp.float32, -1.0, 1.0))
    spread = np.flatnonzero(~np.asarray(magnitude_prune(noisy, jnp.ones(1000, bool), 0.2)))
    assert spread.size == 200 and spread.max() > 800 and spread.min() < 200


def test_random_pruning_control_follows_the_same_schedule(graph):
    rec = ugs_prune(graph, 2, seed=0, epochs=4, hidden=8, graph_rate=0.1, weight_rate=0.3, pruning="random")
    ugs = ugs_prune(graph, 2, seed=0, epochs=4, hidden=8, graph_rate=0.1, weight_rate=0.3)
    for r, u in zip(rec, ugs, strict=True):  # the same prune counts every round
        assert sum(r["weight_nnz"]) == sum(u["weight_nnz"]) and r["kept_edges"] == u["kept_edges"]
    assert all(r["mask_stage_test_accuracy"] is None for r in rec)  # no get-mask stage
    assert rec[0]["test_accuracy"] == ugs[0]["test_accuracy"]  # round 0: the same dense model
    with pytest.raises(ValueError, match="pruning must be one of"):
        ugs_prune(graph, 1, epochs=1, pruning="lottery")
