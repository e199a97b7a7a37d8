"""Bad input at the boundaries: the command line (one line on stderr naming the flag, exit 2, no
traceback) and `TrainConfig` (a ValueError / TypeError naming the field); training that diverges
names the settings used; every option has help text; outputs and options are checked before any
training, corrupt checkpoints and every bad-input error class are one line, Ctrl-C is status 130."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import pathlib
import pickle
import re
import subprocess
import sys

import pytest

from codesign import cli
from codesign.train import FIELD_DOMAINS, FLAT_FIELDS, SECTIONS, TrainConfig, train

ROOT = pathlib.Path(__file__).resolve().parent.parent

# (argv, the flag the one-line message must name). None of these trains or loads data: argparse
# refuses them before the command runs.
BAD_ARGV = [
    (["train", "--seeds", "0"], "--seeds"),
    (["train", "--hidden", "0"], "--hidden"),
    (["train", "--heads", "0"], "--heads"),
    (["train", "--epochs", "0"], "--epochs"),
    (["train", "--epochs", "-1"], "--epochs"),
    (["train", "--lr", "inf"], "--lr"),
    (["train", "--lr", "abc"], "--lr"),
    (["train", "--weight-decay", "-1"], "--weight-decay"),
    (["train", "--weight-decay", "nan"], "--weight-decay"),
    (["train", "--gate-lr", "inf"], "--gate-lr"),
    (["train", "--distill-temperature", "inf"], "--distill-temperature"),
    (["train", "--dropout", "1.5"], "--dropout"),
    (["train", "--cost-weight", "-0.1"], "--cost-weight"),
    (["train", "--budget", "0"], "--budget"),
    (["train", "--budget", "1.5"], "--budget"),
    (["train", "--devices", "0"], "--devices"),
    (["train", "--devices", "-2"], "--devices"),
    (["train", "--int8-halo"], "--int8-halo"),
    (["train", "--processes", "0"], "--processes"),
    (["train", "--processes", "1"], "--processes"),  # one device: not a partitioned run
    (["train", "--processes", "2", "--devices", "3"], "--devices"),
    (["train", "--processes", "2", "--coordinator", "127.0.0.1:1234"], "--processes"),
    (["train", "--coordinator", "127.0.0.1:1234"], "--coordinator"),
    (["train", "--coordinator", "localhost", "--process-id", "0", "--num-processes", "2"], "--coordinator"),
    (["train", "--coordinator", "h:1", "--process-id", "2", "--num-processes", "2"], "--process-id"),
    (["train", "--num-processes", "2", "--process-id", "0", "--coordinator", "h:1", "--save", "d"], "--save"),
    (["train", "--link", "pcie5_x16"], "--link"),
    (["train", "--topology", "loopback_gloo"], "--topology"),
    (["train", "--devices", "4", "--topology", "dgx_h100"], "--topology"),
    (["train", "--devices", "4", "--topology", "loopback_gloo", "--link", "nvlink4"], "--topology"),
    (["train", "--devices", "4", "--topology", "loopback_gloo"], "--topology"),
    (["train", "--devices", "8", "--processes", "4", "--topology", "loopback_gloo"], "--topology"),
    (["train", "--bits", "33"], "--bits"),
    (["train", "--bits", "0"], "--bits"),
    (["sweep", "--bits", "33"], "--bits"),
    (["cost", "--bits", "-4"], "--bits"),
    (["sweep", "--seeds", "0"], "--seeds"),
    (["sweep", "--cost-weights", "0.1,-1"], "--cost-weights"),
    (["sweep", "--cost-weights", "0.1,inf"], "--cost-weights"),
    (["sweep", "--cost-weights", ","], "--cost-weights"),
    (["cost", "--edge-density", "2"], "--edge-density"),
    (["cost", "--feature-density", "-0.1"], "--feature-density"),
    (["cost", "--hw", "h100,tpu9"], "--hw"),
    (["train", "--dataset", "imagenet"], "--dataset"),
    (["train", "--model", "transformer"], "--model"),
    (["sweep", "--hw", "tpu9"], "--hw"),
    (["bench", "cost", "--points", "0"], "--points"),
    (["bench", "cost", "--reps", "0"], "--reps"),
    (["bench", "cost", "--hw", "tpu9"], "--hw"),
]


@pytest.mark.parametrize("argv,flag", BAD_ARGV, ids=[" ".join(a) for a, _ in BAD_ARGV])
def test_bad_flag_is_one_line_naming_the_flag(argv, flag, capsys):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"codesign {argv[0]}: error: argument {flag}:"), lines[0]
    assert captured.out == ""


def test_sweep_refuses_an_unwritable_out_folder_before_training(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert cli.main(["sweep", "--out", str(blocker / "results"), "--epochs", "2", "--seeds", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("codesign sweep: error: argument --out:") and str(blocker) in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_sweep_with_zero_seeds_writes_nothing_and_names_no_file(tmp_path, capsys):
    assert cli.main(["sweep", "--seeds", "0", "--out", str(tmp_path)]) == 2
    captured = capsys.readouterr()
    assert "--seeds" in captured.err and ".jsonl" not in captured.out + captured.err
    assert list(tmp_path.iterdir()) == []


def test_config_error_from_the_library_is_one_line_exit_2(cora, capsys):
    # both a budget and a cost weight: argparse cannot see it, TrainConfig refuses it
    assert cli.main(["train", "--budget", "0.5", "--cost-weight", "0.1", "--epochs", "2", "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("codesign train: error: TrainConfig.cost.budget:") and "cost_weight" in err


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "codesign.cli", *argv], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)


def test_process_exit_status_and_no_traceback():
    r = _cli("train", "--bits", "33")
    assert r.returncode == 2
    assert r.stderr.strip() == ("codesign train: error: argument --bits: must be an integer in [1, 32], got '33' "
                                "(see codesign train --help)")
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_out_of_memory_is_one_line_exit_1(cora, capsys, monkeypatch, tmp_path):
    """A job too large for the machine (METIS on csbm-products reached 12.5 GB here and raised):
    one line naming the machine's memory, status 1, nothing written."""
    import codesign.distributed as dist

    def too_big(*args, **kw):
        raise MemoryError("std::bad_alloc")
    monkeypatch.setattr(dist, "partition_graph", too_big)
    assert cli.main(["partition", "cora", "--parts", "4", "--out", str(tmp_path / "shards")]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert re.fullmatch(r"codesign partition: error: out of memory \(std::bad_alloc\); this machine has "
                        r"[0-9.]+ GiB \(set CODESIGN_TRACEBACK=1 for where it ran out\)", err), err
    assert not (tmp_path / "shards").exists()


@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")  # an "Exception ignored" fails it
@pytest.mark.parametrize("where", ["__del__", "weakref.finalize"])
def test_ctrl_c_that_python_would_drop_still_ends_the_command_with_130(capsys, where):
    """A SIGINT arriving where Python ignores exceptions (a ``__del__``, a ``weakref.finalize``
    callback; JAX's garbage-collector callback in the run that found this: the command ran to the end
    and exited 0; a finalizer in CI, which printed "Exception ignored in: <finalize object ...>" and
    its traceback) is only remembered by `main`'s handler, nothing printed: the next epoch callback
    raises it (`_Progress.check`) and the command ends with the one interrupted line and 130."""
    import gc
    import signal
    import weakref

    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # Python's own, as in a console process
    epochs_after = []

    class DropsIt:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # the handler runs at a bytecode boundary in here
                pass

    class Owner:
        pass

    def command(args):
        if where == "__del__":
            DropsIt()
        else:
            owner = Owner()
            weakref.finalize(owner, DropsIt.__del__, None)
            del owner
        gc.collect()
        for epoch in range(3):  # a training loop's epoch callback
            epochs_after.append(epoch)
            args.progress.check()
        return 0
    try:
        args = argparse.Namespace(command="train", func=command, progress=cli._Progress())
        assert cli._run(args) == 130
        assert args.progress.interrupted and epochs_after == [0]
        assert capsys.readouterr().err.strip() == "codesign train: interrupted: nothing stored"  # no "Exception ignored"
        assert signal.signal(signal.SIGINT, before) is signal.default_int_handler  # the handler put back
    finally:
        signal.signal(signal.SIGINT, before)


# ---- TrainConfig: one case per class of bad value, each naming the field

BAD_CONFIG = [
    ("lr", math.inf, ValueError), ("lr", 0.0, ValueError), ("gate_lr", math.nan, ValueError),
    ("quant_lr", -1.0, ValueError), ("distill_temperature", math.inf, ValueError),
    ("distill_temperature", 0.0, ValueError),
    ("bits", 33, ValueError), ("bits", 0, ValueError), ("bits", 8.0, TypeError),
    ("hidden", 0, ValueError), ("hidden", 16.5, TypeError), ("hidden", True, TypeError),
    ("epochs", 0, ValueError), ("seed", -1, ValueError), ("block_size", 0, ValueError),
    ("heads", 0, ValueError), ("k_hops", -1, ValueError), ("alpha", 1.5, ValueError),
    ("dropout", 1.0, ValueError), ("dropout", -0.1, ValueError), ("dropedge_rate", 1.0, ValueError),
    ("weight_decay", -1e-4, ValueError), ("weight_decay", math.nan, ValueError),
    ("cost_weight", math.inf, ValueError), ("budget_kp", -1.0, ValueError), ("bits_weight", math.nan, ValueError),
    ("budget", 0.0, ValueError), ("budget", 1.5, ValueError),
    ("objective", "watts", ValueError), ("select", "best", ValueError), ("reorder", "random", ValueError),
    ("edge_mask", 1, ValueError), ("channel_mask", None, ValueError), ("lr", "0.01", TypeError),
]


@pytest.mark.parametrize("field,value,error", BAD_CONFIG, ids=[f"{f}={v!r}" for f, v, _ in BAD_CONFIG])
def test_trainconfig_refuses_values_outside_the_domain(field, value, error):
    section, name = FLAT_FIELDS[field]
    path = name if section is None else f"{section}.{name}"
    with pytest.raises(error, match=rf"^TrainConfig\.{path}( \({field}\))?: must be "):
        TrainConfig.from_flat(**{field: value})


def test_every_trainconfig_field_has_a_domain_and_its_default_is_inside():
    assert set(FIELD_DOMAINS) == set(FLAT_FIELDS)
    # every section field has exactly one flat name (and the seed is TrainConfig's own field)
    nested = {(s, f.name) for s, cls in SECTIONS.items() for f in dataclasses.fields(cls)} | {(None, "seed")}
    assert sorted(FLAT_FIELDS.values(), key=str) == sorted(nested, key=str)
    assert {f.name for f in dataclasses.fields(TrainConfig)} == {*SECTIONS, "seed"}
    TrainConfig.from_flat()  # every default passes its own domain
    for model in ("gcn", "gat", "sage", "gin", "appnp", "rgcn"):
        TrainConfig.for_model(model)


def test_trainconfig_domain_edges_are_accepted():
    cfg = TrainConfig.from_flat(bits=32, dropout=0.0, weight_decay=0.0, seed=0, budget=1.0, lr=1, hidden=1)
    assert (cfg.quant.bits, cfg.cost.budget, cfg.model.hidden) == (32, 1.0, 1)
    assert TrainConfig.from_flat(bits=1).quant.bits == 1 and TrainConfig.from_flat(bits=None).quant.bits is None


# ---- divergence: one line naming the epoch and the settings used


def test_divergence_names_the_epoch_and_the_settings(cora):
    from codesign.hwmodel import presets
    cfg = TrainConfig.from_flat(lr=1e30, epochs=3, seed=0)
    with pytest.raises(FloatingPointError, match=r"^training diverged: loss not finite from epoch \d+ of 3 ") as info:
        train(cora, cfg, presets.get("cpu"))
    msg = str(info.value)
    assert "\n" not in msg
    assert "training diverged: loss not finite from epoch " in msg and " of 3 " in msg
    for setting in ("model=gcn", "lr=1e+30", "gate_lr=0.05", "cost_weight=0.0", "bits=32"):
        assert setting in msg, (setting, msg)
    epoch = int(msg.split("from epoch ")[1].split(" ")[0])
    assert 0 <= epoch < 3


def test_cli_divergence_is_one_line_exit_1(cora, capsys, tmp_path):
    assert cli.main(["train", "--lr", "1e30", "--epochs", "3", "--seeds", "1", "--json", "--out", str(tmp_path)]) == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()  # the results-file progress line, then the error
    errors = [ln for ln in lines if "error" in ln]
    assert len(errors) == 1 and errors[0] == lines[-1] and "Traceback" not in captured.err
    err = errors[0]
    assert err.startswith("codesign train: error: training diverged:") and "lr=1e+30" in err
    assert captured.out == ""


# ---- --help


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def test_help_lists_every_registered_subcommand(capsys):
    """``codesign --help`` names every subcommand the parser registers (the list is read from the
    parser, so a new subcommand cannot be left out of the help, as deploy once was)."""
    subs = _subparsers(cli.build_parser())
    assert cli.main(["--help"]) == 0
    text = capsys.readouterr().out
    usage = text.split("\n\n")[0]
    assert "{" + ",".join(subs) + "}" in usage, usage
    for name in subs:
        assert re.search(rf"^    {name}\s", text, re.MULTILINE), f"codesign --help has no line for {name!r}:\n{text}"


def test_every_option_of_every_subcommand_has_help():
    subs = _subparsers(cli.build_parser())
    assert {"train", "deploy", "sweep", "cost", "bench", "validate"} <= set(subs)
    for name, p in subs.items():
        for action in p._actions:
            assert action.help and action.help.strip(), f"codesign {name} {action.option_strings or action.dest}"


@pytest.mark.parametrize("command", ["train", "sweep", "cost"])
def test_help_lists_choices_and_defaults(command):
    from codesign.data import DATASETS
    from codesign.hwmodel import presets
    from codesign.models import MODELS
    text = " ".join(_subparsers(cli.build_parser())[command].format_help().split())  # argparse wraps lines
    assert "{" + ",".join(DATASETS) + "}" in text
    assert "{" + ",".join(sorted(MODELS)) + "}" in text
    assert all(name in text for name in presets.names())
    assert "(default: cora)" in text and "(default: gcn)" in text and "(default: h100)" in text


def test_sweep_help_shows_its_own_defaults():
    text = " ".join(_subparsers(cli.build_parser())["sweep"].format_help().split())
    assert "(default: 8)" in text and "(default: off)" in text  # --bits, --edge-mask
    assert "(default: [0.0, 0.03, 0.1, 0.3, 1.0, 3.0])" in text and "(default: 3)" in text


# ---- issue 36: outputs and options checked before any training; corrupt checkpoints; every bad-input
# class one line; Ctrl-C one line with status 130


def _one_error_line(err: str, command: str) -> str:
    """The single ``codesign <command>: error:`` line of ``err`` (progress lines may precede it)."""
    assert "Traceback" not in err, err
    errors = [ln for ln in err.strip().splitlines() if ln.startswith(f"codesign {command}: error:")]
    assert len(errors) == 1 and errors[0] == err.strip().splitlines()[-1], err
    return errors[0]


@pytest.fixture
def no_training(monkeypatch):
    """`codesign.train.train` and `train_seeds` that fail the test if called: the command had to refuse first."""
    import codesign.train as train_mod

    def refuse(*args, **kwargs):
        raise AssertionError("trained although the command could have refused before training")
    monkeypatch.setattr(train_mod, "train", refuse)
    monkeypatch.setattr(train_mod, "train_seeds", refuse)


def test_train_save_under_a_file_fails_before_training(tmp_path, capsys, no_training):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert cli.main(["train", "--seeds", "1", "--epochs", "2", "--out", str(tmp_path / "r"),
                     "--save", str(blocker / "ck")]) == 2
    line = _one_error_line(capsys.readouterr().err, "train")
    assert line.startswith("codesign train: error: argument --save:") and f"{str(blocker)!r} is a file" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]


def test_train_save_where_a_later_seed_exists_fails_before_training(cora, tmp_path, capsys, no_training):
    from codesign.results import ResultsStore
    (tmp_path / "ck" / "seed1").mkdir(parents=True)
    assert cli.main(["train", "--seeds", "2", "--epochs", "2", "--out", str(tmp_path), "--save",
                     str(tmp_path / "ck")]) == 2
    line = _one_error_line(capsys.readouterr().err, "train")
    assert line == (f"codesign train: error: argument --save: {tmp_path / 'ck' / 'seed1'} exists and holds no codesign "
                    f"checkpoint; choose a new folder")
    assert ResultsStore(tmp_path / "train_cora_gcn_h100.jsonl").records() == []


def test_record_is_stored_before_the_checkpoint_and_save_completes_a_stored_run(cora, tmp_path, capsys, monkeypatch):
    import codesign.checkpoint as ck_mod
    from codesign.checkpoint import read_meta
    from codesign.results import ResultsStore
    argv = ["train", "--seeds", "1", "--epochs", "2", "--out", str(tmp_path), "--json", "--save", str(tmp_path / "ck")]
    store = ResultsStore(tmp_path / "train_cora_gcn_h100.jsonl")
    real_save = ck_mod.save_model

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "ck" / "seed0"))
    monkeypatch.setattr(ck_mod, "save_model", disk_full)
    assert cli.main(argv) == 2
    assert "No space left on device" in _one_error_line(capsys.readouterr().err, "train")
    [record] = store.records()  # the run is stored although its checkpoint failed
    assert not (tmp_path / "ck").exists()

    # the stored run has no checkpoint: --save trains it again and saves it, keeping the one record
    monkeypatch.setattr(ck_mod, "save_model", real_save)
    assert cli.main(argv) == 0
    err = capsys.readouterr().err
    assert "trained again for --save (the stored record is kept)" in err and "1 of 1 seeds to train" in err
    assert store.records() == [record]
    assert read_meta(tmp_path / "ck" / "seed0")["run_key"] == record["key"]

    # now stored and saved: nothing to train
    import codesign.train as train_mod
    monkeypatch.setattr(train_mod, "train", lambda *a, **k: pytest.fail("trained a stored and saved run"))
    monkeypatch.setattr(train_mod, "train_seeds",
                        lambda g, cfgs, *a, **k: iter(cfgs) if not cfgs else pytest.fail("trained a stored run"))
    assert cli.main(argv) == 0
    assert f"train: seed 0 already saved in {tmp_path / 'ck' / 'seed0'}" in capsys.readouterr().err
    assert store.records() == [record]


@pytest.mark.parametrize("quantizer,cls", [("lsq", "LSQQuant"), ("degree", "DegreeQuant")])
def test_sweep_measure_refuses_an_undeployable_quantizer_before_training(cora, tmp_path, capsys, no_training,
                                                                         quantizer, cls):
    argv = ["sweep", "--measure", "--quantizer", quantizer, "--cost-weights", "1", "--seeds", "1", "--epochs", "2",
            "--out", str(tmp_path)]
    for _ in range(2):  # a re-run refuses again, still without training
        assert cli.main(argv) == 2
        line = _one_error_line(capsys.readouterr().err, "sweep")
        assert line.startswith("codesign sweep: error: argument --measure: deploy: only the fixed (FakeQuant) and learned bit-width "
                               f"(LearnedBitQuant) quantizers are supported, got {cls} ")
        assert f"quantizer={quantizer!r}, bits=8)" in line
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".jsonl"] in ([], ["cora_gcn_h100_measured.jsonl"])


def _cora_checkpoint(cora, folder, **flat):
    """A real checkpoint of an untrained model for Cora (`codesign deploy` loads Cora for it)."""
    from flax import nnx

    from codesign.checkpoint import save_model
    from codesign.train import TrainConfig, build_model
    cfg = TrainConfig.for_model(flat.pop("model", "gcn"), **flat)
    return save_model(folder, build_model(cfg, cora, nnx.Rngs(0)), cfg, cora, "cora")


def test_deploy_of_a_corrupted_or_edited_checkpoint_is_one_line(cora, tmp_path, capsys):
    ck = _cora_checkpoint(cora, tmp_path / "ck", bits=4, feature_mask=True)
    data = max((p for p in (ck / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    raw = bytearray(data.read_bytes())
    raw[100:164] = bytes(b ^ 0x5A for b in raw[100:164])
    good = data.read_bytes()
    data.write_bytes(bytes(raw))
    assert cli.main(["deploy", str(ck), "--reps", "1"]) == 2
    line = _one_error_line(capsys.readouterr().err, "deploy")
    assert line.startswith(f"codesign deploy: error: checkpoint {ck}: {data.relative_to(ck).as_posix()} is corrupt")
    data.write_bytes(good)
    meta = ck / "meta.json"
    meta.write_text(meta.read_text().replace('"bits": 4', '"bits": 8'))
    assert cli.main(["deploy", str(ck), "--reps", "1"]) == 2
    assert _one_error_line(capsys.readouterr().err, "deploy") == (
        f"codesign deploy: error: checkpoint {ck}: meta.json was edited or corrupted (its SHA-256 differs from the "
        f"meta_sha256 saved in it); re-save it (codesign train --save)")


def test_deploy_of_a_gin_checkpoint_is_one_line(cora, tmp_path, capsys):
    ck = _cora_checkpoint(cora, tmp_path / "gin", model="gin")
    assert cli.main(["deploy", str(ck), "--reps", "1"]) == 2
    assert _one_error_line(capsys.readouterr().err, "deploy").startswith(
        "codesign deploy: error: deploy: only codesign.models.GCN, GraphSAGE and GAT are supported so far, got GIN "
        "(TrainConfig model='gin'")


def test_deploy_of_a_truncated_checkpoint_in_a_process_is_one_line(cora, tmp_path):
    ck = _cora_checkpoint(cora, tmp_path / "ck")
    data = max((p for p in (ck / "state").rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    data.write_bytes(data.read_bytes()[:10])
    r = _cli("deploy", str(ck), "--reps", "1")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr  # no orbax traceback, no "Event loop is closed"
    assert r.stderr.startswith(f"codesign deploy: error: checkpoint {ck}: {data.relative_to(ck).as_posix()} is "
                               f"corrupt (SHA-256 ")


def _library_errors() -> list[Exception]:
    """One instance of every exception class codesign raises for bad input (`grep -rn raise codesign/`)
    and of the ones it lets through from its dependencies (filelock, pickle, the file system)."""
    import filelock

    from codesign.checkpoint import CheckpointError
    from codesign.deploy import NotDeployableError
    from codesign.results import ResultsPathError
    from codesign.vertex.trace import VertexProgramError
    return [
        ValueError("TrainConfig.lr: must be > 0, got -1"), TypeError("TrainConfig.bits: must be an int, got float"),
        FileNotFoundError(2, "No such file or directory", "/d/x"), FileExistsError(17, "File exists", "/d/x"),
        PermissionError(13, "Permission denied", "/d/x"), IsADirectoryError(21, "Is a directory", "/d/x"),
        CheckpointError("checkpoint /d/x: state/ is corrupt"), NotDeployableError("deploy: only GCN, got GAT"),
        ResultsPathError("results file /d/x.jsonl cannot be written"),
        VertexProgramError("vertex program: v.h has no input named h"),
        filelock.Timeout("/d/x.jsonl.lock"), pickle.UnpicklingError("refusing to load global os.system"),
        ImportError("needs the optional package pymetis"), NotImplementedError("deploy: only GCN"),
        UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"),
    ]


@pytest.mark.parametrize("error", _library_errors(), ids=lambda e: type(e).__name__)
def test_every_bad_input_class_is_one_line_exit_2(error, monkeypatch, capsys):
    import codesign.data as data_mod

    def load(*args, **kwargs):
        raise error
    monkeypatch.setattr(data_mod, "load_dataset", load)
    assert cli.main(["cost"]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"codesign cost: error: {error}\n" and captured.out == ""


@pytest.mark.parametrize("argv,start", [
    (["deploy", "/nonexistent/ck"], "codesign deploy: error: load_model: /nonexistent/ck holds no codesign checkpoint"),
    (["validate", "--table", "/nonexistent/t.csv"], "codesign validate: error: [Errno 2] No such file or directory"),
], ids=["deploy_missing_checkpoint", "validate_missing_table"])
def test_a_missing_file_is_one_line_exit_2(argv, start, capsys):
    assert cli.main(argv) == 2
    assert _one_error_line(capsys.readouterr().err, argv[0]).startswith(start)


def test_a_bug_still_propagates(monkeypatch):
    """A bare KeyError is a bug, not bad input: the library's lookups by name (`presets.get`,
    `comm.get_link`, `experiment.get_method`) raise a ValueError listing the known names."""
    import codesign.data as data_mod
    monkeypatch.setattr(data_mod, "load_dataset", lambda *a, **k: {}["no such key"])
    with pytest.raises(KeyError):
        cli.main(["cost"])


def test_ctrl_c_exits_130_saying_how_many_runs_were_stored(cora, tmp_path, capsys, monkeypatch):
    import codesign.train as train_mod
    from codesign.results import ResultsStore
    real = train_mod.train_seeds

    def train_then_ctrl_c(*args, **kwargs):  # the seeds trained together; interrupted before the 2nd is stored
        for i, result in enumerate(real(*args, **kwargs)):
            if i == 1:
                raise KeyboardInterrupt
            yield result
    monkeypatch.setattr(train_mod, "train_seeds", train_then_ctrl_c)
    assert cli.main(["train", "--seeds", "3", "--epochs", "2", "--out", str(tmp_path), "--json"]) == 130
    captured = capsys.readouterr()
    path = tmp_path / "train_cora_gcn_h100.jsonl"
    assert "Traceback" not in captured.err and captured.out == ""
    assert captured.err.strip().splitlines()[-1] == (f"codesign train: interrupted: 1 run(s) stored in {path}; "
                                                     f"a re-run resumes from there")
    assert [r["config"]["seed"] for r in ResultsStore(path).records()] == [0]
