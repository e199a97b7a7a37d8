"""``experiments/bench_train.py`` smoke tests on a tiny R-MAT graph and the tiny WordNet fixture: the
codesign side for real (child processes, JSON written by its command line); the PyG configurations'
plumbing (best-of speedup, agreement check, table) with faked children; the PyG child itself only
where a PyG venv exists (`ensure_pyg_venv` at the default path, else skipped). No timing
assertions: speed targets live in the benchmark, not in tests."""

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codesign.data import wordnet as wn
from experiment_modules import load

bt = load("bench_train")
(DEFAULT_EPOCHS, DEFAULT_VENV, GRAPHS, PYG_CONFIGS, RmatSpec, build_graph, ensure_pyg_venv, format_table, model_spec,
 save_graph_npz) = (bt.DEFAULT_EPOCHS, bt.DEFAULT_VENV, bt.GRAPHS, bt.PYG_CONFIGS, bt.RmatSpec, bt.build_graph,
                    bt.ensure_pyg_venv, bt.format_table, bt.model_spec, bt.save_graph_npz)

TINY = ["--graphs", "rmat", "--rmat-scale", "7", "--rmat-draws", "600", "--rmat-features", "8"]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench_train.json"
    code = bt.main([*TINY, "--models", "gcn,sage", "--rounds", "1", "--epochs", "2", "--no-pyg",
                     "--json", str(out)])
    assert code == 0
    return json.loads(out.read_text())


def test_cli_writes_the_result_json(cli_run, capsys):
    r = cli_run
    assert {"date", "versions", "machine", "settings", "pyg", "graphs", "results"} <= set(r)
    assert r["machine"]["cpu_count"] >= 1 and "jax" in r["versions"]
    assert r["graphs"]["rmat"]["n_nodes"] == 128 and r["graphs"]["rmat"]["n_features"] == 8
    assert [(e["graph"], e["model"]) for e in r["results"]] == [("rmat", "gcn"), ("rmat", "sage")]
    for e in r["results"]:
        s = e["codesign"]["auto"]
        assert len(s["epoch_s"]) == 1 and len(s["epoch_s"][0]) == 2
        assert s["epoch_s_median"] > 0 and s["compile_s"] > 0 and s["first_step_s"] > 0
        assert s["peak_mib"] >= 0 and s["baseline_rss_mib"] > 0 and s["max_rss_mib"] > s["baseline_rss_mib"]
        assert e["killed"] == {}
        assert all(np.isfinite(s["final_loss"]))
        assert e["pyg"] is None and e["speedup"] == {}  # --no-pyg
    table = format_table(r)
    assert table.splitlines()[0].split()[:5] == ["graph", "model", "impl", "codesign", "s/ep"]
    assert len(table.splitlines()) == 2 + 2


def test_missing_venv_skips_with_a_clear_message(tmp_path):
    py, msg = ensure_pyg_venv(tmp_path / "nope", create=False, log=lambda s: None)
    assert py is None and "--create-venv" in msg and str(tmp_path / "nope") in msg


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="unknown model"):
        model_spec("cora", "gin")
    assert bt.main([*TINY, "--models", "gin", "--no-pyg"]) == 2
    assert bt.build_parser().parse_args(["--json"]).json == "-"  # bare --json: print JSON


@pytest.mark.parametrize("where", ["under_a_file", "a_folder"])
def test_json_path_is_checked_before_the_benchmark(tmp_path, capsys, monkeypatch, where):
    monkeypatch.setattr(bt, "bench_train", lambda *a, **k: pytest.fail("benchmarked before checking --json"))
    (tmp_path / "a_file").write_text("")
    path = tmp_path / "a_file" / "out.json" if where == "under_a_file" else tmp_path
    assert bt.main(["--no-pyg", "--json", str(path)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    assert "argument --json: " in line
    assert ("is a file" if where == "under_a_file" else f"{str(path)!r} is a folder") in line


def test_wordnet_is_a_benchmark_graph():
    assert "wordnet" in GRAPHS and DEFAULT_EPOCHS["wordnet"] == DEFAULT_EPOCHS["rmat"] == 10
    assert model_spec("wordnet", "gcn")["hidden"] == model_spec("rmat", "gcn")["hidden"] == 64
    assert (model_spec("wordnet", "gat")["heads"], model_spec("wordnet", "gat")["hidden"]) == (8, 8)
    args = bt.build_parser().parse_args([])
    # the default run is the three small graphs; csbm-products is asked for by name (minutes per run)
    assert bt._names(args.graphs) == list(GRAPHS[:3]) and bt._names(args.pyg_configs) == list(PYG_CONFIGS)
    assert bt.main(["--graphs", "wordnet,citeseer", "--no-pyg"]) == 2
    assert bt.main([*TINY, "--pyg-configs", "pyg_sparse", "--no-pyg"]) == 2


WORDNET_TINY = Path(__file__).parent / "data" / "wordnet_tiny"


def test_cli_runs_wordnet_through_build_graph(tmp_path, monkeypatch):
    """The tiny WordNet fixture (tests/test_wordnet.py) through the CLI, codesign side only."""
    monkeypatch.setattr(wn, "CHECKSUMS", {f: hashlib.sha256((WORDNET_TINY / f).read_bytes()).hexdigest()
                                          for f in wn.DATA_FILES})
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shutil.copytree(WORDNET_TINY, tmp_path / "data" / "wordnet")
    out = tmp_path / "r.json"
    assert bt.main(["--graphs", "wordnet", "--data-root", str(tmp_path / "data"), "--models", "gcn",
                     "--rounds", "1", "--epochs", "1", "--no-pyg", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert r["graphs"]["wordnet"]["n_nodes"] == 11 and r["settings"]["epochs"] == {"wordnet": 1}
    (e,) = r["results"]
    assert e["graph"] == "wordnet" and e["hidden"] == 64 and np.isfinite(e["codesign"]["auto"]["final_loss"]).all()


def _fake_runs(monkeypatch, pyg_s_per_epoch: dict, first_loss: dict):
    """Replaces the children: codesign takes 0.1 s/epoch, PyG configuration c ``pyg_s_per_epoch[c]``
    with first-epoch loss ``first_loss[c]``; the PyG venv is taken as present."""
    monkeypatch.setattr(bt, "ensure_pyg_venv", lambda venv, create, log: (Path("/fake/python"), "fake PyG"))
    specs = []

    def child(cmd, spec, spec_path, env, tolerate_kill=False):
        specs.append(spec)
        pyg = "config" in spec
        t = pyg_s_per_epoch[spec["config"]] if pyg else 0.1
        out = {"epoch_s": [t] * spec["epochs"], "first_step_s": 1.0, "baseline_rss_mib": 100.0,
               "peak_mib": 50.0 if pyg else 20.0, "peak_first_step_mib": 60.0, "resident_after_first_step_mib": 5.0,
               "peak_reset": True, "final_loss": 1.0, "loadavg": [0.0, 0.0], "max_rss_mib": 200.0,
               "versions": {"torch": "x", "torch_geometric": "y"} if pyg else {"jax": "z"}}
        return {**out, "first_loss": first_loss[spec["config"]]} if pyg else {**out, "compile_s": 0.5}
    monkeypatch.setattr(bt, "_child", child)
    return specs


TINY_RMAT = RmatSpec(scale=7, draws=600, features=8)


def test_speedup_is_against_the_faster_pyg_configuration(monkeypatch):
    specs = _fake_runs(monkeypatch, {"pyg": 0.8, "pyg_csr": 0.4}, {"pyg": 1.9, "pyg_csr": 1.9 * (1 + 1e-6)})
    r = bt.bench_train(graphs=["rmat"], models=["gcn"], rounds=2, epochs=2, rmat=TINY_RMAT, log=lambda s: None)
    assert sorted(s.get("config", "codesign") for s in specs) == ["codesign", "codesign", "pyg", "pyg", "pyg_csr",
                                                                   "pyg_csr"]
    (e,) = r["results"]
    assert set(e["pyg"]) == {"pyg", "pyg_csr"} and e["pyg_best"] == "pyg_csr"
    assert e["speedup"]["auto"] == pytest.approx(4.0) and e["round_speedups"]["auto"] == pytest.approx([4.0, 4.0])
    assert e["speedup_per_pyg"]["auto"] == pytest.approx({"pyg": 8.0, "pyg_csr": 4.0})
    assert e["memory_ratio"]["auto"] == pytest.approx(20.0 / 50.0)
    assert e["pyg"]["pyg"]["first_loss"] == [1.9, 1.9] and max(e["pyg_first_loss_rdiff"]) < 1e-5
    assert r["settings"]["pyg_configs"] == ["pyg", "pyg_csr"]
    head, _, row = format_table(r).splitlines()
    assert head.split()[5:10] == ["pyg", "s/ep", "pyg_csr", "s/ep", "best"]
    assert row.split()[4:7] == ["0.8000", "0.4000", "pyg_csr"] and row.split()[7] == "4.00x"


def test_one_pyg_configuration_and_gcn_disagreement(monkeypatch):
    _fake_runs(monkeypatch, {"pyg": 0.8, "pyg_csr": 0.4}, {"pyg": 1.9, "pyg_csr": 1.8})
    r = bt.bench_train(graphs=["rmat"], models=["gcn"], rounds=1, epochs=1, rmat=TINY_RMAT, pyg_configs=["pyg"],
                       log=lambda s: None)
    (e,) = r["results"]
    assert list(e["pyg"]) == ["pyg"] and e["pyg_best"] == "pyg" and e["speedup"]["auto"] == pytest.approx(8.0)
    assert e["pyg_first_loss_rdiff"] is None
    with pytest.raises(RuntimeError, match="PyG configurations disagree on GCN"):
        bt.bench_train(graphs=["rmat"], models=["gcn"], rounds=1, epochs=1, rmat=TINY_RMAT, log=lambda s: None)
    # GAT's attention-dropout masks follow each layout's edge order: reported, not checked
    r = bt.bench_train(graphs=["rmat"], models=["gat"], rounds=1, epochs=1, rmat=TINY_RMAT, log=lambda s: None)
    assert r["results"][0]["pyg_first_loss_rdiff"][0] == pytest.approx(0.1 / 1.9)


def _pyg_python() -> str:
    py, msg = ensure_pyg_venv(DEFAULT_VENV, create=False, log=lambda s: None)
    if py is not None:
        return str(py)
    pytest.importorskip("torch_geometric", reason=msg)
    return sys.executable


def _run_pyg_child(python: str, tmp_path, **spec) -> dict:
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    out = subprocess.run([python, str(bt._CHILD_SCRIPT), str(tmp_path / "spec.json")], capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_pyg_configurations_train_the_same_model(tmp_path, model):
    """Without dropout both PyG configurations compute the same losses (same initial weights);
    with dropout GCN's too (its masks are per node, in node order)."""
    python = _pyg_python()
    save_graph_npz(build_graph("rmat", rmat=TINY_RMAT), tmp_path / "g.npz")
    base = {**model_spec("rmat", model), "graph_npz": str(tmp_path / "g.npz"), "epochs": 3, "seed": 0, "threads": 1}
    for dropout in ([0.0, base["dropout"]] if model == "gcn" else [0.0]):
        r = {c: _run_pyg_child(python, tmp_path, **{**base, "dropout": dropout, "config": c}) for c in PYG_CONFIGS}
        assert all(len(v["epoch_s"]) == 3 and v["config"] == c and "torch_geometric" in v["versions"]
                   for c, v in r.items())
        assert r["pyg_csr"]["first_loss"] == pytest.approx(r["pyg"]["first_loss"], rel=1e-5, abs=1e-6)
        assert r["pyg_csr"]["final_loss"] == pytest.approx(r["pyg"]["final_loss"], rel=1e-4, abs=1e-6)


def test_csbm_products_is_a_benchmark_graph_at_ogb_width(tmp_path, monkeypatch):
    """csbm-products at a reduced node count (``--csbm-nodes``), hidden 256 for GCN and GraphSAGE as
    OGB's full-batch baselines on ogbn-products."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert "csbm-products" in GRAPHS and "sage" in bt.MODELS
    assert model_spec("csbm-products", "gcn")["hidden"] == model_spec("csbm-products", "sage")["hidden"] == 256
    g = build_graph("csbm-products", csbm_nodes=500)
    assert g.n_nodes == 500 and g.x.shape == (500, 100)


def test_a_child_killed_for_memory_is_recorded_on_large_graphs_only(tmp_path):
    """The kernel's out-of-memory killer sends SIGKILL: on a large graph that is a result (PyG stops
    at that size), with the child's peak RSS; elsewhere a failure."""
    kill = [sys.executable, "-c", "import os, signal; x = bytearray(50 << 20); os.kill(os.getpid(), signal.SIGKILL)"]
    spec = {"model": "gcn"}
    r = bt._child(kill, spec, tmp_path / "spec.json", dict(__import__("os").environ), tolerate_kill=True)
    assert r["killed"] and r["max_rss_mib"] >= 50
    with pytest.raises(RuntimeError, match=r"failed \(-9\)"):
        bt._child(kill, spec, tmp_path / "spec.json", dict(__import__("os").environ))
