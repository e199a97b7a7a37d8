"""End-to-end training: accuracy of the dense GCN, the cost term's effect, hardening, and the CLI."""

import json

import numpy as np
import pytest

from codesign import cli
from codesign.hwmodel import presets
from codesign.train import TrainConfig, train, train_seeds


def test_dense_gcn_reaches_paper_accuracy_on_cora(cora):
    """Kipf & Welling report 81.5%; the skeleton's bar is a 5-seed mean >= 80.0%."""
    cfgs = [TrainConfig.from_flat(seed=s) for s in range(5)]  # the seeds on one compiled step (train_seeds)
    accs = [r["test_accuracy"] for r in train_seeds(cora, cfgs, presets.get("h100"))]
    assert np.mean(accs) >= 0.80, accs


def test_cost_term_prunes_and_hardened_cost_is_consistent(cora):
    hw = presets.get("h100-datasheet")  # launch-free datasheet H100: on the fitted h100 a Cora model is launch-bound (~1x to gain)
    r = train(cora, TrainConfig.from_flat(seed=0, epochs=100, cost_weight=0.3, bits=8), hw)
    d = r["densities"]
    assert d["edge"] < 0.9 and d["feature"] < 0.9, d  # the cost term removed edges and features
    assert r["modeled"]["energy_j"] < 0.5 * r["dense_modeled"]["energy_j"]
    assert r["test_accuracy"] > 0.5  # still far above chance (1/7) after hardening
    assert 0 < r["final_cost_ratio"] < 1


def test_zero_cost_weight_has_no_masks_and_dense_cost(cora):
    r = train(cora, TrainConfig.from_flat(seed=0, epochs=2), presets.get("cpu"))
    assert r["densities"] == {"edge": 1.0, "feature": 1.0}
    assert r["modeled"] == r["dense_modeled"]
    assert r["backend"] == {"aggregate": "segment"}  # what impl="auto" resolved to (no CsrPattern attached)


@pytest.mark.parametrize("field,value", [("cost_weight", -1.0), ("epochs", 0), ("lr", 0.0),
                                         ("objective", "watts"), ("model", "transformer"), ("dropout", 1.0)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        TrainConfig.from_flat(**{field: value})


def test_cli_train_json(cora, capsys, tmp_path):
    rc = cli.main(["train", "--dataset", "cora", "--model", "gcn", "--hw", "h100", "--cost-weight", "0.1",
                   "--bits", "8", "--epochs", "20", "--seeds", "2", "--json", "--out", str(tmp_path)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"test_accuracy", "test_accuracy_std", "modeled", "dense_modeled"}
    assert len(out["per_seed_test_accuracy"]) == 2
    assert out["test_accuracy"] == pytest.approx(np.mean(out["per_seed_test_accuracy"]))
    for k in ("latency_s", "energy_j", "dram_bytes"):
        assert 0 < out["modeled"][k] < out["dense_modeled"][k]  # 8-bit is cheaper in every total
    assert out["bits"] == 8


def test_cli_learned_bit_flags_reach_the_config(cora, capsys, tmp_path):
    args = cli.build_parser().parse_args(["train", "--bits", "8", "--quantizer", "learned", "--bits-weight", "0.1",
                                          "--pin-ranges"])
    cfg = cli._config(args, 0.3, 8, 0)
    assert (cfg.quant.quantizer, cfg.quant.bits_weight, cfg.quant.pin_ranges) == ("learned", 0.1, True)
    cfg = cli._config(cli.build_parser().parse_args(["train"]), 0.0, None, 0)
    assert (cfg.quant.quantizer, cfg.quant.bits_weight, cfg.quant.pin_ranges) == ("fixed", 0.0, False)  # TrainConfig defaults
    rc = cli.main(["train", "--bits", "8", "--quantizer", "learned", "--pin-ranges", "--bits-weight", "0.1",
                   "--cost-weight", "0.3", "--edge-mask", "off", "--feature-mask", "off", "--epochs", "3",
                   "--seeds", "1", "--json", "--out", str(tmp_path)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["layer_bits"]) == {"x0", "w0", "x1", "w1"}
    assert all(1 <= b <= 8 for b in out["layer_bits"].values())
    assert cli.main(["train", "--bits", "8", "--bits-weight", "0.1", "--epochs", "1", "--seeds", "1",
                     "--out", str(tmp_path)]) == 2
    assert "bits_weight" in capsys.readouterr().err  # the fixed quantizer has no width to learn


def test_cli_table_and_errors(cora, capsys, tmp_path):
    assert cli.main(["train", "--epochs", "2", "--seeds", "1", "--out", str(tmp_path)]) == 0
    assert "test accuracy" in capsys.readouterr().out
    assert cli.main(["train", "--epochs", "2", "--seeds", "1", "--hw", "tpu9", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "argument --hw: invalid choice: 'tpu9'" in err and len(err.strip().splitlines()) == 1


def test_cli_sweep_is_resumable(cora, tmp_path, capsys):
    args = ["sweep", "--epochs", "3", "--seeds", "1", "--cost-weights", "0.1", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    path = tmp_path / "cora_gcn_h100.jsonl"
    first = path.read_text().splitlines()
    assert len(first) == 2  # dense fp32 reference + one cost weight
    rec = json.loads(first[1])
    assert rec["config"]["cost_weight"] == 0.1 and rec["config"]["bits"] == 8
    assert cli.main(args) == 0  # nothing left to do: the file is unchanged
    assert path.read_text().splitlines() == first
    assert "0 runs to do" in capsys.readouterr().err


def test_cli_cost_json(cora, capsys):
    assert cli.main(["cost", "--hw", "h100,cpu", "--bits", "8", "--edge-density", "0.5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"h100", "cpu"}
    dense, csr, given = out["h100"].values()
    assert given["energy_j"] < dense["energy_j"]
    assert csr["energy_j"] < dense["energy_j"]  # Cora's 1.3 %-dense features stored CSR
    assert all(s["bound"] in ("compute", "memory") for s in dense["stages"].values())
    assert cli.main(["cost", "--edge-density", "1.5"]) == 2


def test_sweep_run_key_ignores_fields_left_at_their_defaults():
    from codesign.experiment import run_key
    cfg = TrainConfig.from_flat(cost_weight=0.1, bits=8, seed=2)
    assert run_key("cora", "h100", cfg) == run_key("cora", "h100", cfg.replace())
    assert run_key("cora", "h100", cfg) != run_key("cora", "h100", cfg.replace(seed=3))
    assert run_key("cora", "h100", cfg) != run_key("cora", "gnnear", cfg)


def test_budget_mode_lands_at_the_budget(cora):
    """PI multiplier on the hardened cost, against the reported (CSR-stored) dense reference, each
    layer mapped by the energy objective (cost model 5): 0.976 / 0.993 of a 0.4 budget on seeds
    0 / 1 at the default budget_lr 0.1 (2026-11-29; budget_lr 0.3 overshoots to 0.86-0.87; 0.1, the
    budget this test had against the dense-stored reference, is below the 0.25 floor: every mask
    closed)."""
    hw = presets.get("h100-datasheet")  # launch-free datasheet H100: on the fitted h100 a Cora model is launch-bound (~1x to gain)
    r = train(cora, TrainConfig.from_flat(seed=0, budget=0.4, bits=8), hw)
    ratio = r["modeled"]["energy_j"] / r["dense_modeled"]["energy_j"]
    assert 0.9 <= ratio / 0.4 <= 1.05, ratio
    assert r["densities"]["feature"] < 0.7 and r["densities"]["edge"] < 0.5  # the 8-bit model alone is at 0.50
    assert r["test_accuracy"] > 0.65  # 0.70-0.71 measured: this budget costs accuracy on Cora


def test_budget_mode_multiplier_stays_zero_when_the_budget_is_loose(cora):
    r = train(cora, TrainConfig.from_flat(seed=0, epochs=20, budget=0.99, bits=8), presets.get("h100"))
    assert r["multiplier"] == 0.0  # 8-bit is already at 0.97 of the (CSR-stored) dense cost: constraint inactive
    assert r["densities"]["feature"] > 0.9


@pytest.mark.parametrize("kw,match", [(dict(budget=0.0), "budget"), (dict(budget=1.5), "budget"),
                                      (dict(budget=0.1, cost_weight=1.0), "either budget or cost_weight"),
                                      (dict(budget_kp=-1.0), "budget_kp"),
                                      (dict(gate_optimizer="sgd"), "gate_optimizer")])
def test_bad_budget_config(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_flat(**kw)


def test_infeasible_budget_is_refused_before_training(cora):
    # Only the feature mask learns: the aggregation of the second layer and the 8-bit GEMMs stay.
    cfg = TrainConfig.from_flat(budget=1e-4, bits=8, edge_mask=False)
    with pytest.raises(ValueError, match="infeasible budget"):
        train(cora, cfg, presets.get("h100"))


def test_tensor_rms_keeps_relative_gradient_sizes_and_is_scale_free():
    """`scale_by_tensor_rms`: one second moment per tensor, so inside a tensor the update keeps the
    gradient's proportions (per-element Adam would make every entry ~1), and scaling the whole
    gradient leaves the update unchanged."""
    import jax.numpy as jnp
    from codesign.train import scale_by_tensor_rms
    opt = scale_by_tensor_rms()
    params = {"a": jnp.zeros(4)}
    g = {"a": jnp.array([1e-4, 2e-4, -4e-4, 0.0])}
    u, _ = opt.update(g, opt.init(params), params)
    u_big, _ = opt.update({"a": 1e3 * g["a"]}, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(u["a"]), np.asarray(u_big["a"]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(u["a"]) / float(u["a"][0]), [1.0, 2.0, -4.0, 0.0], rtol=1e-5)
    rms = float(jnp.sqrt(jnp.mean(jnp.square(g["a"]))))
    np.testing.assert_allclose(np.asarray(u["a"]), np.asarray(g["a"]) / rms, rtol=1e-4)  # first step: g / rms(g)


@pytest.mark.parametrize("kw,match", [
    (dict(bits_weight=-0.1, quantizer="learned", bits=8), "bits_weight"),
    (dict(bits_weight=0.1, quantizer="fixed", bits=8), "bits_weight: needs a learned bit-width quantizer"),
    (dict(distill_weight=float("nan")), "distill_weight"),
    (dict(edge_l0_weight=-1.0), "edge_l0_weight"),
    (dict(edge_l0_weight=1.0, edge_mask=False), "edge_l0_weight: needs an edge mask"),
    (dict(distill_temperature=0.0), "distill_temperature")])
def test_bad_bits_and_distill_config(kw, match):
    with pytest.raises(ValueError, match=match):
        TrainConfig.from_flat(**kw)


def test_distill_kl_by_hand():
    import jax.numpy as jnp

    from codesign.train import distill_kl
    t = jnp.array([[2.0, 0.0, -1.0], [0.5, 0.5, 0.0]])
    s = jnp.array([[0.0, 1.0, 0.0], [1.0, -1.0, 2.0]])
    assert float(distill_kl(t, t, 2.0)) == pytest.approx(0.0, abs=1e-7)
    for temp in (1.0, 3.0):
        p, q = np.exp(np.asarray(t) / temp), np.exp(np.asarray(s) / temp)
        p, q = p / p.sum(1, keepdims=True), q / q.sum(1, keepdims=True)
        want = temp ** 2 * np.mean(np.sum(p * np.log(p / q), axis=1))
        assert float(distill_kl(s, t, temp)) == pytest.approx(want, rel=1e-5)


@pytest.mark.parametrize("sparsifier,ce_share", [("edge", 0.8), ("block", 0.9)])
def test_distillation_reaches_every_edge_gate(cora, sparsifier, ce_share):
    """Cross-entropy on the 140 training nodes moves only the gates of edges (or tiles) within two
    hops of them; the distillation KL over all nodes moves every gate."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from codesign.sparsify import GATE_PARAMS
    from codesign.train import adjacency, build_model, distill_kl, masked_cross_entropy, teacher_config

    cfg = TrainConfig.from_flat(seed=0, cost_weight=0.3, edge_mask=True, feature_mask=False, distill_weight=1.0,
                      edge_sparsifier=sparsifier)
    assert teacher_config(cfg).uses_edge_mask is False and teacher_config(cfg).distill.weight == 0.0
    model = build_model(cfg, cora, nnx.Rngs(params=0, dropout=1, gates=2, quant=3))
    # gate logits 0: every deterministic (eval-mode) gate sits inside the hard-concrete's linear
    # range, so a gate's gradient is zero only where the loss does not depend on its edge
    nnx.update(model, jax.tree.map(jnp.zeros_like, nnx.state(model, GATE_PARAMS)))
    model.eval()
    adj = adjacency(cora)
    teacher = jax.random.normal(jax.random.key(0), (cora.n_nodes, int(cora.y.max()) + 1))

    def n_moved(loss):
        grads = nnx.grad(loss, argnums=nnx.DiffState(0, GATE_PARAMS))(model)
        g = jnp.concatenate([jnp.ravel(v) for v in jax.tree.leaves(grads)])
        return int(jnp.sum(g != 0)), g.size

    ce_moved, n = n_moved(lambda m: masked_cross_entropy(m(cora.x, adj), cora.y, cora.train_mask))
    kl_moved, _ = n_moved(lambda m: distill_kl(m(cora.x, adj), teacher))
    assert n == (cora.n_edges if sparsifier == "edge" else model.edge_mask.n_gated_tiles)
    # measured: 7778 of the 10556 edges, 2212 of the 2592 gated tiles, lie in the training nodes' two hops
    assert ce_moved < ce_share * n, (ce_moved, n)
    assert kl_moved == n


def test_bits_penalty_lowers_every_tensor(cora):
    r = train(cora, TrainConfig.from_flat(seed=0, epochs=40, bits=8, quantizer="learned", edge_mask=False,
                                feature_mask=False, bits_weight=1.0), presets.get("h100"))
    assert set(r["layer_bits"]) == {"x0", "w0", "x1", "w1"}
    assert all(b < 8 for b in r["layer_bits"].values()), r["layer_bits"]


def test_edge_l0_weight_prunes_edges(cora):
    """The L0 term prunes where the cost term alone does not (the energy hardly depends on edges)."""
    hw = presets.get("h100")
    base = dict(seed=0, epochs=150, cost_weight=0.3, edge_mask=True, feature_mask=False)
    plain = train(cora, TrainConfig.from_flat(**base), hw)["densities"]["edge"]
    l0 = train(cora, TrainConfig.from_flat(**base, edge_l0_weight=3.0), hw)["densities"]["edge"]
    assert l0 < plain - 0.1, (l0, plain)


def test_cli_passes_distillation_and_l0_flags():
    from codesign.cli import _config, build_parser

    args = build_parser().parse_args(["train", "--edge-mask", "on", "--edge-l0-weight", "0.8",
                                      "--distill-weight", "1", "--distill-temperature", "2"])
    cfg = _config(args, cost_weight=0.3, bits=None, seed=0)
    assert (cfg.masks.edge_l0_weight, cfg.distill.weight, cfg.distill.temperature, cfg.masks.edge) == (0.8, 1.0, 2.0, True)
    assert _config(build_parser().parse_args(["train"]), 0.0, None, 0).distill.weight == 0.0


def test_dense_teacher_is_trained_once_per_graph_and_config(cora, monkeypatch):
    import codesign.train.loop as T

    calls = []
    real_train = T.train

    def counting_train(graph, cfg, hw, **kw):
        if kw.get("return_logits"):
            calls.append(cfg)
        return real_train(graph, cfg, hw, **kw)

    monkeypatch.setattr(T, "train", counting_train)
    monkeypatch.setattr(T, "_TEACHERS", {})
    hw = presets.get("h100")
    a = T.dense_teacher(cora, TrainConfig.from_flat(seed=0, epochs=3, edge_mask=True, distill_weight=1.0), hw)
    b = T.dense_teacher(cora, TrainConfig.from_flat(seed=0, epochs=3, edge_mask=True, edge_sparsifier="block",
                                          cost_weight=0.3, distill_weight=2.0), hw)
    assert len(calls) == 1 and a[1] == b[1] and a[0] is b[0]
    T.dense_teacher(cora, TrainConfig.from_flat(seed=1, epochs=3, edge_mask=True, distill_weight=1.0), hw)
    assert len(calls) == 2 and calls[1].seed == 1


def test_teacher_logits_passed_in_equal_the_trained_teacher(cora):
    """``train(teacher_logits=)`` with the dense teacher's own logits trains the same student."""
    from codesign.train import dense_teacher
    hw = presets.get("h100")
    cfg = TrainConfig.from_flat(seed=0, epochs=4, cost_weight=0.3, edge_mask=True, feature_mask=False, distill_weight=1.0)
    logits, acc = dense_teacher(cora, cfg, hw)
    own, passed = train(cora, cfg, hw), train(cora, cfg, hw, teacher_logits=logits)
    assert passed["final_loss"] == pytest.approx(own["final_loss"], rel=1e-6)
    assert passed["teacher_accuracy"] == pytest.approx(acc) and passed["densities"] == own["densities"]


@pytest.mark.parametrize("kw,match", [
    (dict(distill_weight=0.0), r"distill\.weight is 0"),
    (dict(shape=(5, 7)), r"teacher_logits.shape=\(5, 7\)"),
    (dict(fill=float("nan")), "teacher_logits has non-finite")])
def test_bad_teacher_logits(cora, kw, match):
    import jax.numpy as jnp
    shape = kw.get("shape", (cora.n_nodes, cora.n_classes))
    cfg = TrainConfig.from_flat(seed=0, epochs=1, distill_weight=kw.get("distill_weight", 1.0))
    with pytest.raises(ValueError, match=match):
        train(cora, cfg, presets.get("h100"), teacher_logits=jnp.full(shape, kw.get("fill", 0.0)))


def test_trainconfig_sections_flat_view_and_replace():
    from codesign.train import CostConfig, ModelConfig, QuantConfig
    cfg = TrainConfig(model=ModelConfig(name="gat", heads=4), quant=QuantConfig(bits=8), cost=CostConfig(weight=0.3))
    assert cfg == TrainConfig.from_flat(model="gat", heads=4, bits=8, cost_weight=0.3)
    flat = cfg.flat()
    assert (flat["model"], flat["heads"], flat["bits"], flat["cost_weight"], flat["quant_lr"]) == ("gat", 4, 8, 0.3, 0.02)
    assert TrainConfig.from_flat(**flat) == cfg
    other = cfg.replace(bits=4, distill_weight=1.0)
    assert (other.quant.bits, other.distill.weight, other.model.heads, cfg.quant.bits) == (4, 1.0, 4, 8)
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['bitz'\]"):
        TrainConfig.from_flat(bitz=8)
    with pytest.raises(TypeError, match=r"TrainConfig\.quant: must be a QuantConfig, got dict"):
        TrainConfig(quant={"bits": 8})
    with pytest.raises(ValueError, match=r"TrainConfig\.model\.heads: model 'gcn' has no option 'heads'"):
        ModelConfig(heads=2)
    with pytest.raises(ValueError, match=r"TrainConfig\.quant\.bits: must be an integer in \[1, 32\]"):
        QuantConfig(bits=0)


def test_distillation_teacher_is_a_step_argument_not_a_program_constant(cora):
    """The teacher's [N, C] logits reach the jitted step as `Problem.targets`, an argument: in the
    lowered program they are a parameter, never a constant (XLA would constant-fold log_softmax of
    a constant at every compile); without targets the distillation term refuses to trace."""
    import re

    import jax.numpy as jnp
    from flax import nnx

    from codesign.train import Problem, adjacency, build_model, graph_forward, make_step, objective

    cfg = TrainConfig.from_flat(seed=0, epochs=1, distill_weight=1.0)
    n, c = cora.n_nodes, int(cora.y.max()) + 1
    model = build_model(cfg, cora, nnx.Rngs(params=0, dropout=1, gates=2, quant=3))
    model.train()
    unit = lambda m, hard: jnp.ones((), jnp.float32)
    problem = Problem((cora, adjacency(cora), cora.x), graph_forward, unit, targets=jnp.zeros((n, c), jnp.float32))
    ts = make_step(model, problem, cfg, objective(cfg))
    text = ts.step.lower(ts.state, problem.data, ts.controller.init(), problem.targets).as_text()
    shape = f"tensor<{n}x{c}xf32>"
    assert shape in text  # the teacher is in the program ...
    assert not [ln for ln in text.splitlines() if re.search(r"constant", ln) and shape in ln]  # ... not as a constant
    bare = Problem(problem.data, graph_forward, unit)
    ts = make_step(model, bare, cfg, objective(cfg))
    with pytest.raises(ValueError, match="Problem.targets"):
        ts.step.lower(ts.state, bare.data, ts.controller.init())


def test_fit_on_the_models_own_arrays_equals_fit_on_copies(cora):
    """``fit(donate_model=True)`` (train_distributed's: no copy of the per-edge gate logits) trains
    exactly as on copies, and leaves the model at the trained weights."""
    from flax import nnx
    import jax
    from codesign.train import objective
    from codesign.train.loop import _prepare, fit
    cfg = TrainConfig.from_flat(epochs=4, edge_mask=True, cost_weight=0.5)
    hw = presets.get("h100")
    out = []
    for donate in (False, True):
        run = _prepare(cora, cfg, hw)
        run.model.train()
        first = jax.tree.leaves(nnx.state(run.model, nnx.Param))[0]
        fitted = fit(run.model, run.problem, cfg, objective(cfg), donate_model=donate)
        assert first.is_deleted() == donate  # donated: the model's own array was the training state
        out.append((fitted.final_loss, nnx.state(run.model, nnx.Param)))
    assert out[0][0] == out[1][0]
    for a, b in zip(jax.tree.leaves(out[0][1]), jax.tree.leaves(out[1][1]), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_fit_returns_the_compilers_freed_heap_once_after_the_first_step(cora, monkeypatch):
    """`fit` calls `release_free_heap` (glibc's ``malloc_trim``) exactly once, after the first
    step (compiled by then), and training is the same with it as without; on this Linux (glibc)
    the call exists and runs."""
    import sys
    import codesign.train.loop as loop
    from codesign.train import objective
    from codesign.train.loop import _prepare, fit
    if sys.platform.startswith("linux"):
        assert loop.release_free_heap() is True
    cfg = TrainConfig.from_flat(epochs=3)
    hw = presets.get("h100")
    losses, real = [], loop.release_free_heap
    for trim in (True, False):
        calls = []
        monkeypatch.setattr(loop, "release_free_heap", (lambda: calls.append(1) or real()) if trim else (lambda: False))
        run = _prepare(cora, cfg, hw)
        run.model.train()
        losses.append(fit(run.model, run.problem, cfg, objective(cfg)).final_loss)
        if trim:
            assert calls == [1]
    assert losses[0] == losses[1]


def test_the_loss_prices_the_store_it_is_told_and_the_reports_the_cheaper_one(cora):
    """``cost.sparse_features`` off: the loss prices the features stored dense (so a stored run
    trains as it did), while the reported model and its dense reference take the store the target
    runs cheaper (CSR for Cora's 1.3 %-dense bag of words on h100). On: the loss prices both."""
    from codesign.train import dense_cost, loss_inputs, store_costs
    from codesign.train.loop import _prepare
    hw = presets.get("h100")
    cfg = TrainConfig.from_flat(seed=0, epochs=1, cost_weight=1.0, bits=8)
    run = _prepare(cora, cfg, hw)
    dense_store = {"locality": run.inputs["locality"]}
    assert run.loss_dense == float(dense_cost(cfg, cora, hw, dense_store).energy_j)
    assert run.dense_store == "csr" and float(run.dense.energy_j) < run.loss_dense
    n, e = cora.n_nodes, cora.n_edges
    want = float(store_costs(run.model, n, e, hw, dense_store, objective="energy_j")["dense"].energy_j) / run.loss_dense
    np.testing.assert_allclose(float(run.problem.cost_ratio(run.model, True)), want, rtol=1e-6)
    on = _prepare(cora, cfg.replace(sparse_features=True), hw)
    assert loss_inputs(on.cfg, on.inputs) is on.inputs and on.loss_dense == float(on.dense.energy_j)
    r = train(cora, cfg, hw)
    assert r["dense_modeled"] == run.dense.summary() and r["by_hw"]["h100"]["dense_feature_store"] == "csr"
