"""`codesign train` end to end, in subprocesses: the README's multi-device command, a killed run
resumed without re-training its finished seeds, an unwritable ``--out``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path


from codesign import cli
from codesign.results import RUN_RECORD_FIELDS, ResultsStore
from conftest import xla_flags

ROOT = Path(__file__).resolve().parent.parent


def _env(planetoid_root, devices: int = 1) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu", CODESIGN_DATA=str(planetoid_root))
    if devices > 1:
        env["XLA_FLAGS"] = xla_flags(f"--xla_force_host_platform_device_count={devices}")
    return env


def _train_cmd(*flags: str) -> list[str]:
    return [sys.executable, "-m", "codesign.cli", "train", *flags]


def test_readme_multi_device_command(planetoid_root, tmp_path):
    # README: XLA_FLAGS=--xla_force_host_platform_device_count=4 codesign train --devices 4 --dataset cora --seeds 1
    p = subprocess.run(_train_cmd("--devices", "4", "--dataset", "cora", "--seeds", "1", "--epochs", "2",
                                  "--out", str(tmp_path)),
                       capture_output=True, text=True, env=_env(planetoid_root, 4), cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    path = tmp_path / "train_cora_gcn_h100.jsonl"
    for field in ("gcn on cora, 1 seeds", "test accuracy", "kept edges", "bits            x0 32.00",
                  "latency_s", "energy_j", "dram_bytes", f"results         {path}"):
        assert field in p.stdout, (field, p.stdout)
    [rec] = ResultsStore(path).records()
    assert set(rec) >= set(RUN_RECORD_FIELDS) | {"key", "config", "code_version", "time", "partition"}
    assert rec["devices"] == 4 and rec["config"]["devices"] == 4 and rec["partition"]["n_parts"] == 4
    assert rec["modeled"]["comm_bytes"] > 0  # the halo exchange is costed


def test_killed_train_resumes_without_retraining(planetoid_root, tmp_path):
    seeds = 4
    cmd = _train_cmd("--dataset", "cora", "--seeds", str(seeds), "--epochs", "30", "--out", str(tmp_path), "--json")
    path = tmp_path / "train_cora_gcn_h100.jsonl"
    store = ResultsStore(path)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=_env(planetoid_root), cwd=tmp_path)
    deadline = time.monotonic() + 240
    try:
        while not (path.exists() and store.records()):  # the first seed's record: written atomically
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no record within 240 s"
            time.sleep(0.02)
    finally:
        proc.kill()  # SIGKILL: no cleanup runs
        proc.communicate()
    before = store.records()
    assert 1 <= len(before) < seeds, "the run finished before it could be killed"
    finished = [r["config"]["seed"] for r in before]

    p = subprocess.run(cmd, capture_output=True, text=True, env=_env(planetoid_root), cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    for seed in finished:
        assert f"train: seed {seed} already in {path}" in p.stderr
    assert f"train: {seeds - len(before)} of {seeds} seeds to train" in p.stderr
    out = json.loads(p.stdout)
    after = store.records()
    assert after[:len(before)] == before  # nothing lost or rewritten
    assert sorted(r["config"]["seed"] for r in after) == list(range(seeds))
    assert len({r["key"] for r in after}) == seeds
    by_seed = {r["config"]["seed"]: r["test_accuracy"] for r in after}
    assert out["per_seed_test_accuracy"] == [by_seed[s] for s in range(seeds)]
    assert out["results"] == str(path)


def test_train_file_is_not_a_sweep_input(tmp_path):
    from paper_figures.all import sweep_inputs
    args = cli.build_parser().parse_args(["train", "--out", str(tmp_path)])
    cli._train_store(args).append({"key": "k"})
    sweep_record = '{"key": "k", "modeled": {"energy_j": 1.0}}\n'  # a sweep's records carry modeled costs
    (tmp_path / "cora_gcn_h100.jsonl").write_text(sweep_record, encoding="utf-8")
    (tmp_path / "cora_deploy_cpu.jsonl").write_text('{"key": "k"}\n', encoding="utf-8")  # measured only: no
    assert [p.name for p in sweep_inputs(tmp_path)] == ["cora_gcn_h100.jsonl"]


def test_unwritable_out_fails_before_training(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("", encoding="utf-8")
    t0 = time.perf_counter()
    # no data root needed: the results path is checked before the graph is loaded
    assert cli.main(["train", "--epochs", "2", "--seeds", "1", "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err
    assert f"codesign train: error: results file {blocker}/sub/train_cora_gcn_h100.jsonl cannot be written" in err
    assert "seeds to train" not in err
    assert time.perf_counter() - t0 < 5.0


def test_two_concurrent_sweeps_into_one_file_lose_no_record(planetoid_root, tmp_path):
    """Two `codesign sweep` processes write one results file at the same time (different cost
    weights, the same dense reference): every run of both ends up in the file, every line is a
    record, and a third run of either sweep trains nothing."""
    def sweep(cost_weight: str) -> list[str]:
        return [sys.executable, "-m", "codesign.cli", "sweep", "--cost-weights", cost_weight, "--seeds", "2",
                "--epochs", "2", "--out", str(tmp_path), "--name", "shared"]

    procs = [subprocess.Popen(sweep(cw), env=_env(planetoid_root), cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for cw in ("0.1", "0.3")]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    path = tmp_path / "shared.jsonl"
    lines = path.read_text().splitlines()
    records = [json.loads(line) for line in lines]  # every line parses: no torn or interleaved write
    weights = {(r["config"]["cost_weight"], r["config"]["bits"], r["config"]["seed"]) for r in records}
    # dense FP32 reference + each sweep's weight at 8 bits, 2 seeds each
    assert weights == {(0.0, None, 0), (0.0, None, 1), (0.1, 8, 0), (0.1, 8, 1), (0.3, 8, 0), (0.3, 8, 1)}
    # the dense reference may have been trained by both (neither had finished it when the other
    # started); each of the 4 weighted runs exactly once
    assert 6 <= len(records) <= 8
    for cw in ("0.1", "0.3"):
        again = subprocess.run(sweep(cw), env=_env(planetoid_root), cwd=tmp_path, capture_output=True, text=True,
                               timeout=300)
        assert again.returncode == 0 and "0 runs to do" in again.stderr, again.stderr[-2000:]
    assert path.read_text().splitlines() == lines


def test_ctrl_c_is_one_line_exit_130_counting_the_stored_runs(planetoid_root, tmp_path):
    """SIGINT (Ctrl-C) after the first seed is stored: status 130 and one line saying how many
    runs are in the results file, instead of a KeyboardInterrupt traceback."""
    import re
    import signal
    path = tmp_path / "train_cora_gcn_h100.jsonl"
    store = ResultsStore(path)
    # 400 epochs a seed (~1 s each since training runs on the input's nonzeros): the later seeds are still
    # training when the signal arrives
    proc = subprocess.Popen(_train_cmd("--dataset", "cora", "--seeds", "4", "--epochs", "400", "--out", str(tmp_path),
                                       "--json"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(planetoid_root),
                            cwd=tmp_path)
    deadline = time.monotonic() + 240
    try:
        while not (path.exists() and store.records()):
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "no record within 240 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err and out == ""
    last = err.strip().splitlines()[-1]
    m = re.fullmatch(rf"codesign train: interrupted: (\d) run\(s\) stored in {re.escape(str(path))}; a re-run resumes "
                     rf"from there", last)
    assert m, last
    assert int(m.group(1)) == len(store.records()) >= 1
