"""Every command line that README.md, experiments/README.md and docs/**/*.md (the log included)
document runs end to end, shortened (``--epochs 2 --seeds 1``; a sweep with one cost weight into
``tmp_path``; ``bench cost`` with 10 points), and prints the fields it promises.

They run in this process through `codesign.cli.main` (the function the ``codesign`` console script
calls), in their own working directory, stdout and stderr captured: no Python start, JAX import
and teardown per command, and the traces the commands share (the cost model's,
`codesign.hwmodel.estimate`) are reused (the time this saves: docs/log/suite_time.md). The
console script itself runs in a subprocess once
(`test_the_console_script_prints_what_main_prints`).

Not here: the multi-device commands (``--devices``; tests/test_distributed.py, tests/test_cli_train_e2e.py,
tests/test_multiprocess.py, which trains ``--processes 4 --shards``); ``experiments/bench_train.py``
(needs the PyG environment; tests/test_bench_train.py runs it without PyG)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

from codesign import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", ROOT / "experiments" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README = "\n".join(p.read_text() for p in DOCS)  # every documented command line, wherever it is documented
SHORT = ["--epochs", "2", "--seeds", "1"]  # argparse keeps the last value of a repeated flag


def readme_commands() -> list[str]:
    """The ``codesign ...`` command lines of README.md, experiments/README.md and docs/*.md: in ```bash blocks (split at ``&&``, comments
    dropped) and in inline code spans (which may wrap a line), whitespace-normalized, in order."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", README, re.S):
        for line in block.splitlines():
            for part in line.split("#")[0].split("&&"):
                words = part.split()
                while words and "=" in words[0]:  # leading VAR=value environment settings
                    words = words[1:]
                if words[:1] == ["codesign"]:
                    found.append(" ".join(words))
    found += [" ".join(span.split()) for span in re.findall(r"`(codesign [^`]+)`", README)]
    return list(dict.fromkeys(found))


def _covered(cmd: str) -> bool:
    return "--devices" not in cmd


COMMANDS = [c for c in readme_commands() if _covered(c)]


def test_readme_documents_every_command():
    kinds = {" ".join(c.split()[:3]) if c.startswith("codesign bench") else " ".join(c.split()[:2])
             for c in COMMANDS}
    assert kinds == {"codesign train", "codesign deploy", "codesign sweep", "codesign cost", "codesign bench cost",
                     "codesign validate", "codesign partition"}, COMMANDS


def _run(argv: list[str], cwd: pathlib.Path) -> subprocess.CompletedProcess:
    """``codesign argv`` run in this process (`codesign.cli.main`) with ``cwd`` as the working
    directory; its exit status and captured stdout / stderr as a `subprocess.CompletedProcess`."""
    out, err, here = io.StringIO(), io.StringIO(), os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(["codesign", *argv], code, out.getvalue(), err.getvalue())


def test_the_console_script_prints_what_main_prints(tmp_path):
    """The installed ``codesign`` script (else ``python -m codesign.cli``) in a subprocess: a
    documented command gives status 0 and the same stdout as `main` in this process."""
    argv = ["cost", "--model", "gcn", "--dataset", "cora", "--hw", "h100,gnnear,upmem", "--bits", "8",
            "--edge-density", "0.5"]
    assert "codesign " + " ".join(argv) in COMMANDS  # a command the docs show
    script = shutil.which("codesign", path=os.path.dirname(sys.executable))
    exe = [script] if script else [sys.executable, "-m", "codesign.cli"]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([*exe, *argv], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    here = _run(argv, tmp_path)
    assert here.returncode == 0 and here.stdout == p.stdout and "latency_s" in p.stdout


def _flag(argv: list[str], flag: str, default=None):
    values = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]
    return values[-1] if values else default


SAVE = next(c for c in COMMANDS if c.startswith("codesign train") and "--save" in c)
"""README's ``codesign train ... --save ckpt``, which makes the checkpoint ``codesign deploy`` restores."""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> tuple[subprocess.CompletedProcess, pathlib.Path]:
    """`SAVE` (shortened) run once, and its working directory: its test checks what it printed, the
    deploy command's test deploys the checkpoint it saved there."""
    cwd = tmp_path_factory.mktemp("saved")
    return _run(shlex.split(SAVE)[1:] + SHORT, cwd), cwd


PARTITION = next(c for c in COMMANDS if c.startswith("codesign partition") and "--out" in c)
"""The documented ``codesign partition ... --out DIR``, whose folder ``codesign partition --check DIR`` verifies."""


@pytest.fixture(scope="module")
def partitioned(tmp_path_factory) -> tuple[subprocess.CompletedProcess, pathlib.Path]:
    """`PARTITION` run once, and its working directory (the ``--check`` command's test reads it)."""
    cwd = tmp_path_factory.mktemp("partitioned")
    return _run(shlex.split(PARTITION)[1:], cwd), cwd


@pytest.mark.parametrize("command", COMMANDS)
def test_readme_command_runs(command, cora, tmp_path, request):
    data = os.environ.get("CODESIGN_DATA", str(ROOT.parent / "shared" / "data"))
    argv = shlex.split(command.replace("<name>", "gat").replace("$CODESIGN_DATA", data))[1:]
    cwd = tmp_path
    if argv[0] == "train":
        argv += SHORT
    elif argv[0] == "sweep":
        argv += ["--cost-weights", "0.1", *SHORT, "--out", str(tmp_path)]
    elif argv[:2] == ["bench", "cost"]:
        argv += ["--points", "10", "--reps", "1"]
    elif argv[0] == "partition":  # run once (`partitioned`); --check verifies the folder that run wrote
        made, cwd = request.getfixturevalue("partitioned")
        assert made.returncode == 0, made.stderr[-3000:]
        assert _flag(shlex.split(PARTITION), "--out") == _flag(argv, "--check", _flag(argv, "--out"))
    elif argv[0] == "deploy":  # the checkpoint it names, made by README's preceding `train --save`
        made, cwd = request.getfixturevalue("saved")
        assert made.returncode == 0, made.stderr[-3000:]
        assert _flag(shlex.split(SAVE), "--save") == str(pathlib.PurePath(argv[1]).parent)
        argv += ["--reps", "2"]
    r = (request.getfixturevalue("saved")[0] if command == SAVE
         else request.getfixturevalue("partitioned")[0] if command == PARTITION else _run(argv, cwd))
    assert r.returncode == 0, r.stderr[-3000:]
    out = r.stdout

    if argv[0] == "train" and "--json" in argv:
        rec = json.loads(out)
        assert rec["seeds"] == 1 and len(rec["per_seed_test_accuracy"]) == 1
        assert 0 <= rec["test_accuracy"] <= 1
        assert rec["bits"] == int(_flag(argv, "--bits", 32))
        assert rec["model"] == _flag(argv, "--model", "gcn")
        for totals in (rec["modeled"], rec["dense_modeled"]):
            assert set(totals) == {"latency_s", "energy_j", "dram_bytes", "static_energy_j"}
            assert all(totals[k] > 0 for k in ("latency_s", "energy_j", "dram_bytes")) and totals["static_energy_j"] >= 0
    elif argv[0] == "train":
        for field in ("test accuracy", "kept edges", "latency_s", "energy_j", "dram_bytes"):
            assert field in out, (field, out)
    elif argv[0] == "sweep":
        path = pathlib.Path(out.strip().splitlines()[-1])
        assert path.parent == tmp_path and path.suffix == ".jsonl"
        recs = [json.loads(line) for line in path.read_text().splitlines()]
        assert sorted(r["config"]["cost_weight"] for r in recs) == [0.0, 0.1]  # dense reference + one weight
        assert all(0 <= r["test_accuracy"] <= 1 and r["modeled"]["energy_j"] > 0 for r in recs)
    elif argv[0] == "cost":
        hws = _flag(argv, "--hw", "h100").split(",")
        if "--json" in argv:
            rec = json.loads(out)
            assert list(rec) == hws
            for per in rec.values():
                assert len(per) == 3 and all(rep["energy_j"] > 0 and rep["stages"] for rep in per.values())
                # bag-of-words features stored CSR: the dense model's first GEMM over their nonzeros
                assert per["dense fp32, CSR features"]["energy_j"] < per["dense fp32"]["energy_j"]
        else:
            assert all(hw in out for hw in hws) and "latency_s" in out and "bound" in out
    elif argv[0] == "deploy":
        for field in ("kept features", "measured latency_s", "measured model_bytes", "modeled latency_s (cpu)"):
            assert field in out, (field, out)
    elif argv[0] == "validate":
        if "--table" in argv:
            rep = json.loads(out)
            assert rep["hw"] == _flag(argv, "--hw") and rep["kernels"]["best"]["by_width"]["all"]["n"] > 100
        else:
            assert "h100-datasheet" in out and "fitted on public device timings" in out
    elif argv[0] == "partition":
        folder = cwd / _flag(argv, "--check", _flag(argv, "--out"))
        manifest = json.loads((folder / "manifest.json").read_text())
        assert len(manifest["parts"]) == manifest["n_parts"] == 4 and manifest["graph"] == "cora"
        assert all((folder / p["file"]).is_file() for p in manifest["parts"])
        assert "4 parts" in out and ("all verified" in out) == ("--check" in argv)
    else:  # bench cost
        assert "cost + gradient of 10 design points" in out and "points/s" in out
