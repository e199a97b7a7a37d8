"""Bad input at the boundaries: the command line (one line on stderr naming the flag, exit 2, no
traceback) and `TrainConfig` (a ValueError / TypeError naming the field); training that diverges
names the settings used; every option has help text."""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import pathlib
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
    (["train", "--link", "pcie5_x16"], "--link"),
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


def test_every_option_of_every_subcommand_has_help():
    subs = _subparsers(cli.build_parser())
    assert set(subs) == {"train", "deploy", "sweep", "cost", "bench"}
    for name, p in subs.items():
        for action in p._actions:
            assert action.help and action.help.strip(), f"codesign {name} {action.option_strings or action.dest}"


@pytest.mark.parametrize("command", ["train", "sweep", "cost"])
def test_help_lists_choices_and_defaults(command):
    from codesign.data import DATASETS
    from codesign.hwmodel import presets
    from codesign.models import MODELS
    text = _subparsers(cli.build_parser())[command].format_help()
    assert "{" + ",".join(DATASETS) + "}" in text
    assert "{" + ",".join(sorted(MODELS)) + "}" in text
    assert all(name in text for name in presets.names())
    assert "(default: cora)" in text and "(default: gcn)" in text and "(default: h100)" in text


def test_sweep_help_shows_its_own_defaults():
    text = " ".join(_subparsers(cli.build_parser())["sweep"].format_help().split())
    assert "(default: 8)" in text and "(default: off)" in text  # --bits, --edge-mask
    assert "(default: [0.0, 0.03, 0.1, 0.3, 1.0, 3.0])" in text and "(default: 3)" in text
