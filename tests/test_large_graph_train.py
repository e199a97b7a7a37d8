"""``experiments/large_graph_train.py`` on a tiny csbm-products (300 nodes, 2 epochs): one child
process per model, a record per run with the fields the issue asks for, appended to the results
file; a rerun skips what is there; bad arguments are one line. No timing assertions."""

import json

from experiment_modules import load

lg = load("large_graph_train")


def test_a_run_is_recorded_once_with_rss_time_and_accuracy(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # the child's generated graph
    out = tmp_path / "runs.json"
    args = ["--models", "gcn", "--nodes", "300", "--hidden", "8", "--epochs", "2", "--out", str(out)]
    assert lg.main(args) == 0
    (r,) = json.loads(out.read_text())["runs"]
    assert (r["model"], r["nodes"], r["hidden"], r["epochs"]) == ("gcn", 300, 8, 2)
    assert r["peak_rss_gb"] >= r["load_peak_rss_gb"] > 0 and len(r["epoch_s"]) == 2 and r["epoch_s_median"] > 0
    assert 0 <= r["val_accuracy"] <= 1 and 0 <= r["test_accuracy"] <= 1 and r["backend"]["aggregate"]
    assert lg.main(args) == 0 and "already in" in capsys.readouterr().out
    assert len(json.loads(out.read_text())["runs"]) == 1


def test_bad_arguments_are_one_line(capsys):
    assert lg.main(["--models", "gat"]) == 2
    assert "large_graph_train.py: error: models from" in capsys.readouterr().err
