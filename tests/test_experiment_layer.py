"""The experiment layer (`codesign.experiment`): the method registry as data, one key scheme, one
record schema, and `codesign sweep --method NAME`."""

from __future__ import annotations

import dataclasses
import json

import pytest

from codesign import cli
from codesign.experiment import (COST_MODEL_VERSION, METHODS, PAPER_METHODS, REFERENCE, RunRecord,
                                 get_method, load_grid, make_record, parse_part, run_key, take_part, versions)
from codesign.models import MODELS
from codesign.train import FLAT_FIELDS, TrainConfig
from experiment_modules import load


def test_the_library_registry_holds_methods_not_ablation_grids_or_plot_styles():
    """Ablation grids live in experiments/, plot styles in paper_figures/ (issue 35)."""
    import codesign.experiment as experiment
    from paper_figures.styles import STYLES
    assert not hasattr(experiment, "ABLATIONS") and not hasattr(experiment, "RANDOM")
    assert not {"label", "color", "marker"} & {f.name for f in dataclasses.fields(experiment.Method)}
    assert set(METHODS) == set(PAPER_METHODS) and set(STYLES) == set(PAPER_METHODS)
    assert "edge_mask_distill_l0.8" in load("sparsify_quant").METHODS


def test_every_method_builds_a_valid_config_for_every_model_it_applies_to():
    for name, m in METHODS.items():
        for model in (m.models or tuple(MODELS)):
            if m.family == "ablation" and model != "gcn":
                continue  # the ablations were run on GCN
            over = {k: v for k, v in m.overrides.items()
                    if k not in ("edge_sparsifier", "channel_mask", "quantizer") or MODELS[model].accepts(k)}
            TrainConfig.for_model(model, **over)


def test_unknown_method_names_the_known_ones():
    with pytest.raises(ValueError, match=r"method: unknown method 'nope'; choose from dense, codesign"):
        get_method("nope")


def test_the_key_is_the_resolved_configuration_not_its_spelling_or_label():
    implicit = TrainConfig.from_flat(cost_weight=0.1, bits=8)
    explicit = TrainConfig.from_flat(cost_weight=0.1, bits=8, seed=0, lr=TrainConfig().flat()["lr"])
    assert run_key("cora", "h100", implicit) == run_key("cora", "h100", explicit)
    assert run_key("cora", "h100", implicit) != run_key("cora", "h100", implicit.replace(seed=1))
    assert run_key("cora", "h100", implicit) != run_key("cora", "gnnear", implicit)
    assert run_key("cora", "h100", implicit) != run_key("cora", "h100", implicit, devices=2)
    # the method's name is a label in config, not identity: a renamed method keeps its records
    rec_a = make_record(run_key("cora", "h100", implicit), {"method": "old_name"}, {})
    rec_b = make_record(run_key("cora", "h100", implicit), {"method": "new_name"}, {})
    assert rec_a["key"] == rec_b["key"] and rec_a["versions"] == versions()


def test_the_key_changes_with_the_cost_model_version(monkeypatch):
    cfg = TrainConfig.from_flat(bits=8)
    before = run_key("cora", "h100", cfg)
    monkeypatch.setattr("codesign.experiment.COST_MODEL_VERSION", COST_MODEL_VERSION + 1)
    assert run_key("cora", "h100", cfg) != before
    with pytest.raises(ValueError, match=r"run_key: extra identity field\(s\) \['seed'\]"):
        run_key("cora", "h100", cfg, seed=3)


def _write(path, recs):
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))


def _rec(key, cost_model=COST_MODEL_VERSION, reference=REFERENCE, **config):
    rec = make_record(key, {"dataset": "cora", "hw": "h100", "seed": 0, **config},
                      {"test_accuracy": 0.8, "val_accuracy": 0.79, "modeled": {"energy_j": 1.0},
                       "dense_modeled": {"energy_j": 3.0}, "densities": {"edge": 0.5}, "bits": 8,
                       "layer_bits": {}, "measured": {"latency_s": 1e-3}})
    rec["versions"] = {"cost_model": cost_model, "reference": reference}
    return rec


def test_load_grid_types_records_and_keeps_the_latest_per_key(tmp_path):
    path = tmp_path / "g.jsonl"
    _write(path, [_rec("a", method="dense"), _rec("b", method="codesign"), _rec("a", method="renamed")])
    grid = load_grid(path)
    assert [(r.key, r.method) for r in grid] == [("a", "renamed"), ("b", "codesign")]
    r = grid[0]
    assert isinstance(r, RunRecord) and r.dataset == "cora" and r.hw == "h100" and r.seed == 0
    assert r.reduction() == 3.0 and r.extra == {"measured": {"latency_s": 1e-3}}


def test_load_grid_refuses_mixed_versions_in_one_line(tmp_path):
    path = tmp_path / "g.jsonl"
    _write(path, [_rec("a"), _rec("b", cost_model=1)])
    with pytest.raises(ValueError) as err:
        load_grid(path)
    msg = str(err.value)
    assert "\n" not in msg and str(path) in msg and f"{COST_MODEL_VERSION!r} vs 1" in msg and "cost_model" in msg
    _write(path, [_rec("a"), _rec("b", reference="dense_fp32")])
    with pytest.raises(ValueError, match=r"reference version: 'cheaper_store_always' vs 'dense_fp32'"):
        load_grid(path)
    legacy = _rec("c")
    del legacy["versions"]
    _write(path, [legacy])
    with pytest.raises(ValueError, match=r"record 'c' lacks versions"):
        load_grid(path)


def test_sweep_refuses_to_append_to_a_file_of_another_version(tmp_path, capsys):
    _write(tmp_path / "cora_gcn_h100.jsonl", [_rec("a", cost_model=1)])
    assert cli.main(["sweep", "--seeds", "1", "--epochs", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "cora_gcn_h100.jsonl: holds records of versions" in err and "'cost_model': 1" in err
    # codesign train too, before any training
    _write(tmp_path / "train_cora_gcn_h100.jsonl", [_rec("b", cost_model=1)])
    assert cli.main(["train", "--seeds", "1", "--epochs", "1", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "train_cora_gcn_h100.jsonl: holds records of versions" in err and "'cost_model': 1" in err


@pytest.mark.parametrize("name", ["cora_gcn_h100", "cora_gcn_h100_measured", "cora_gcn_h100_edgemask"])
def test_stored_sweep_records_are_repriced_and_keyed_by_their_configuration(name):
    """The repository's sweep records were re-priced by experiments/migrate_records.py: one version,
    today's, and each key is today's run_key of its stored configuration."""
    grid = load_grid(f"results/{name}.jsonl")
    assert grid and all(r.versions == versions() for r in grid)
    for r in grid:
        fields = {k: v for k, v in r.config.items() if k in FLAT_FIELDS}
        extra = {k: r.config[k] for k in ("measured_on",) if k in r.config}
        assert run_key(r.dataset, r.hw, TrainConfig.from_flat(**fields), **extra) == r.key, (name, r.key)


def test_parts_split_a_run_list_into_contiguous_slices_that_cover_it():
    items = list(range(10))
    for n in (1, 3, 4, 10, 12):
        slices = [take_part(items, k, n) for k in range(1, n + 1)]
        assert [i for sl in slices for i in sl] == items
        assert max(map(len, slices)) - min(map(len, slices)) <= 1
    assert parse_part(None) is None and parse_part("2/3") == (2, 3)
    for bad in ("0/3", "4/3", "2", "a/b", "1/2/3"):
        with pytest.raises(ValueError, match="--part"):
            parse_part(bad)
    with pytest.raises(ValueError, match="--part"):
        take_part(items, 0, 3)


def test_record_schema():
    rec = make_record("k", {"dataset": "cora"}, {"test_accuracy": 0.5})
    assert list(rec)[:3] == ["key", "config", "test_accuracy"] and rec["time"].endswith("+00:00")
    assert isinstance(rec["code_version"], str)


def test_sweep_method_runs_the_registry_overrides(cora, tmp_path, capsys):
    argv = ["sweep", "--method", "codesign_int8", "--cost-weights", "1", "--seeds", "1", "--epochs", "2",
            "--out", str(tmp_path)]
    assert cli.main(argv) == 0
    path = tmp_path / "cora_gcn_h100_codesign_int8.jsonl"
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    dense, run = sorted(recs, key=lambda r: r["config"]["cost_weight"])
    assert dense["config"]["bits"] is None and dense["config"]["cost_weight"] == 0.0
    over = METHODS["codesign_int8"].overrides
    assert all(run["config"][k] == v for k, v in over.items()) and run["config"]["cost_weight"] == 1.0
    assert run["config"]["method"] == "codesign_int8"
    capsys.readouterr()
    assert cli.main(argv) == 0 and "0 runs to do" in capsys.readouterr().err  # resumable
    # a changed field is another run: only the changed point trains (the dense reference is kept)
    assert cli.main(argv[:4] + ["0.5"] + argv[5:]) == 0 and "1 runs to do" in capsys.readouterr().err
    assert len(load_grid(path)) == 3


@pytest.mark.parametrize("name", ["ugs_int8", "random_edges", "random_edges_0.5"])
def test_sweep_refuses_methods_that_need_their_own_driver(name, capsys):
    assert cli.main(["sweep", "--method", name, "--seeds", "1"]) == 2
    assert "argument --method: invalid choice" in capsys.readouterr().err
