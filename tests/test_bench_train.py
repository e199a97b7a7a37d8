"""``codesign bench train`` smoke tests on a tiny R-MAT graph: the codesign side for real (child
processes, JSON written by the CLI), the PyG side only where torch_geometric imports. No timing
assertions: speed targets live in the benchmark, not in tests."""

import json
import subprocess
import sys

import numpy as np
import pytest

from codesign import cli
from codesign.bench_train import (RmatSpec, build_graph, ensure_pyg_venv, format_table, model_spec,
                                  save_graph_npz)

TINY = ["--graphs", "rmat", "--rmat-scale", "7", "--rmat-draws", "600", "--rmat-features", "8"]


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "bench_train.json"
    code = cli.main(["bench", "train", *TINY, "--models", "gcn", "--rounds", "1", "--epochs", "2", "--no-pyg",
                     "--json", str(out)])
    assert code == 0
    return json.loads(out.read_text())


def test_cli_writes_the_result_json(cli_run, capsys):
    r = cli_run
    assert {"date", "versions", "machine", "settings", "pyg", "graphs", "results"} <= set(r)
    assert r["machine"]["cpu_count"] >= 1 and "jax" in r["versions"]
    assert r["graphs"]["rmat"]["n_nodes"] == 128 and r["graphs"]["rmat"]["n_features"] == 8
    assert [(e["graph"], e["model"]) for e in r["results"]] == [("rmat", "gcn")]
    for e in r["results"]:
        s = e["codesign"]["auto"]
        assert len(s["epoch_s"]) == 1 and len(s["epoch_s"][0]) == 2
        assert s["epoch_s_median"] > 0 and s["compile_s"] > 0 and s["first_step_s"] > 0
        assert s["peak_mib"] >= 0 and s["baseline_rss_mib"] > 0
        assert all(np.isfinite(s["final_loss"]))
        assert e["pyg"] is None and e["speedup"] == {}  # --no-pyg
    table = format_table(r)
    assert table.splitlines()[0].split()[:5] == ["graph", "model", "impl", "codesign", "s/ep"]
    assert len(table.splitlines()) == 2 + 1


def test_missing_venv_skips_with_a_clear_message(tmp_path):
    py, msg = ensure_pyg_venv(tmp_path / "nope", create=False, log=lambda s: None)
    assert py is None and "--create-venv" in msg and str(tmp_path / "nope") in msg


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="unknown model"):
        model_spec("cora", "sage")
    assert cli.main(["bench", "train", *TINY, "--models", "gin", "--no-pyg"]) == 2
    args = cli.build_parser().parse_args(["bench", "cost", "--json"])
    assert args.json == "-"  # bare --json still means "print JSON" (cost's old flag)


def test_pyg_child_on_the_tiny_graph(tmp_path):
    pytest.importorskip("torch_geometric")
    save_graph_npz(build_graph("rmat", rmat=RmatSpec(scale=7, draws=600, features=8)), tmp_path / "g.npz")
    spec = {**model_spec("rmat", "gat"), "graph_npz": str(tmp_path / "g.npz"), "epochs": 2, "seed": 0, "threads": 1}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    from codesign.bench_train import _CHILD_SCRIPT
    out = subprocess.run([sys.executable, str(_CHILD_SCRIPT), str(tmp_path / "spec.json")], capture_output=True,
                         text=True, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(r["epoch_s"]) == 2 and np.isfinite(r["final_loss"]) and "torch_geometric" in r["versions"]
