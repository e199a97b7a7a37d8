"""Command line: ``codesign train | deploy | sweep | cost | bench | validate | partition``.

  codesign train --dataset cora --model gcn --hw h100 --cost-weight 0 --seeds 5 --json
  codesign train --bits 8 --feature-mask on --cost-weight 3 --seeds 1 --save ckpt && codesign deploy ckpt/seed0
  codesign train --dataset cora --devices 4 --processes 2 --seeds 1    # 2 local jax.distributed processes
  codesign sweep --dataset cora --model gcn --hw h100          # -> results/cora_gcn_h100.jsonl
  codesign cost --model gcn --dataset cora --hw h100,cpu --bits 8 --edge-density 0.5
  codesign validate                                            # every preset's evidence
  codesign validate --table shared/data/gpu_timings/h100_spmm_fp32.csv --hw h100 --json
  codesign partition cora --parts 4 --out shards/cora-4                # one file per part + manifest.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
import sys
from typing import Optional, Sequence

import numpy as np


class _Parser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors are one line on stderr (``codesign <cmd>: error: ...``),
    exit status 2, no usage block; subcommand parsers inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _HelpFormatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Keeps the description's line breaks; appends ``(default: X)`` to every option whose
    default is a value (not None / False: those options say in their help what happens unset)."""

    def _get_help_string(self, action):
        if action.default is None or action.default is False:
            return action.help
        return super()._get_help_string(action)


def _checked(domain, name: str):
    """An argparse ``type=``: parses an int (``domain.integer``) or float and checks it against
    ``domain`` (`codesign.train.Interval`), else ``argument --FLAG: must be ..., got ...``."""
    parse = int if domain.integer else float

    def convert(text: str):
        try:
            value = parse(text)
            domain.check(name, value)
        except (ValueError, TypeError):
            raise argparse.ArgumentTypeError(f"must be {domain.describe(with_none=False)}, got {text!r}") from None
        return value
    convert.__name__ = name  # argparse names the type in some messages
    return convert


def _field(name: str):
    """The ``type=`` of a flag that sets `TrainConfig` field ``name``: the field's own domain
    (`codesign.train.FIELD_DOMAINS`), so the command line and the config cannot disagree."""
    from codesign.train import FIELD_DOMAINS
    return _checked(FIELD_DOMAINS[name], name)


def _positive_int(name: str):
    from codesign.train import Interval
    return _checked(Interval(1, integer=True), name)


def _unit_interval(name: str):
    from codesign.train import Interval
    return _checked(Interval(0, 1), name)


def _cost_weights(text: str) -> list[float]:
    """``--cost-weights``: a non-empty comma-separated list of `TrainConfig.cost_weight` values."""
    check = _field("cost_weight")
    values = [check(v.strip()) for v in text.split(",") if v.strip()]
    if not values:
        raise argparse.ArgumentTypeError(f"needs at least one comma-separated cost weight, got {text!r}")
    return values


def _hw_list(text: str) -> str:
    """``cost --hw``: comma-separated `codesign.hwmodel.presets` names (case-insensitive)."""
    from codesign.hwmodel import presets
    names = [v.strip().lower() for v in text.split(",") if v.strip()]
    bad = [v for v in names if v not in presets.names()]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown hardware preset(s) {bad or [text]}; choose from "
                                         f"{', '.join(presets.names())}")
    return ",".join(names)


def _model_default(name: str) -> str:
    """Help suffix of a flag that defaults to the model's `MODEL_DEFAULTS` entry, else
    `TrainConfig`'s field default, e.g. `` (default: 0.01; gat 0.005)``."""
    from codesign.models import MODEL_DEFAULTS
    from codesign.train import TrainConfig
    base = TrainConfig().flat()[name]
    per_model = [f"{m} {d[name]}" for m, d in MODEL_DEFAULTS.items() if name in d and d[name] != base]
    base = "the model's own" if base is None else base
    return f" (default: {base}" + ("; " + ", ".join(per_model) if per_model else "") + ")"


def _add_common(p: argparse.ArgumentParser, multi_hw: bool = False):
    from codesign.data import DATASETS
    from codesign.hwmodel import presets
    from codesign.models import MODELS
    p.add_argument("--dataset", default="cora", type=str.lower, choices=DATASETS,
                   help="dataset (Planetoid, WordNet 3.0, WordNet with LSA features, cSBM with ogbn-products' shape, "
                        "NCBI Taxonomy tree: needs codesign[ncbi], R-MAT rmat-<scale> with Graph500's edge factor 16)")
    p.add_argument("--data-root", default=None, help="folder holding planetoid/ (default: $CODESIGN_DATA or cache)")
    p.add_argument("--model", default="gcn", choices=sorted(MODELS),
                   help="model (hyper-parameters not given default to its MODEL_DEFAULTS entry)")
    if multi_hw:
        p.add_argument("--hw", default="h100", type=_hw_list,
                       help=f"comma-separated hardware presets, from {', '.join(presets.names())}")
    else:
        p.add_argument("--hw", default="h100", type=str.lower, choices=presets.names(),
                       help="hardware preset the cost refers to")


# Training flags that default to the model's `MODEL_DEFAULTS` entry (then `TrainConfig`'s default)
# when not given: flag destination -> TrainConfig field.
_MODEL_DEFAULTED = ("epochs", "lr", "gate_lr", "weight_decay", "hidden", "dropout", "objective", "heads", "aggr",
                    "k_hops", "alpha", "select", "weight_decay_scope")


def _add_training(p: argparse.ArgumentParser, bits: Optional[int] = None, edge_mask: str = "auto"):
    """The training flags; ``bits`` and ``edge_mask`` are the command's defaults of those two."""
    from codesign.models.layers import QUANTIZERS
    from codesign.models.sage import AGGREGATORS
    from codesign.train import DECAY_SCOPES, OBJECTIVES, SELECTIONS
    dflt = _model_default
    p.add_argument("--bits", type=_field("bits"), default=bits,
                   help="N-bit fake quantization of features and weights, N in [1, 32] (32 or unset: FP32)")
    p.add_argument("--epochs", type=_field("epochs"), default=None, help="training epochs" + dflt("epochs"))
    p.add_argument("--lr", type=_field("lr"), default=None, help="Adam step size of the weights" + dflt("lr"))
    p.add_argument("--gate-lr", type=_field("gate_lr"), default=None,
                   help="Adam step size of the gate logits" + dflt("gate_lr"))
    p.add_argument("--weight-decay", type=_field("weight_decay"), default=None,
                   help="L2 weight decay" + dflt("weight_decay"))
    p.add_argument("--weight-decay-scope", choices=DECAY_SCOPES, default=None,
                   help="weight decay on the first layer or on all weights" + dflt("weight_decay_scope"))
    p.add_argument("--hidden", type=_field("hidden"), default=None, help="hidden width (GAT: per head)" + dflt("hidden"))
    p.add_argument("--dropout", type=_field("dropout"), default=None, help="dropout rate in [0, 1)" + dflt("dropout"))
    p.add_argument("--objective", default=None, choices=OBJECTIVES,
                   help="which modeled cost total the cost term uses" + dflt("objective"))
    p.add_argument("--select", choices=SELECTIONS, default=None,
                   help="evaluate the last epoch's weights or the best-validation epoch's" + dflt("select"))
    p.add_argument("--heads", type=_positive_int("heads"), default=None,
                   help="GAT: first-layer attention heads" + dflt("heads"))
    p.add_argument("--aggr", choices=AGGREGATORS, default=None, help="GraphSAGE aggregator" + dflt("aggr"))
    p.add_argument("--k-hops", type=_field("k_hops"), default=None, help="APPNP: propagation steps K" + dflt("k_hops"))
    p.add_argument("--alpha", type=_field("alpha"), default=None,
                   help="APPNP: teleport probability in [0, 1]" + dflt("alpha"))
    for mask, default in (("edge", edge_mask), ("feature", "auto")):
        p.add_argument(f"--{mask}-mask", choices=sorted(_SWITCH), default=default,
                       help=f"learn the {mask} mask: on, off, or auto (on when there is a cost term)")
    p.add_argument("--edge-l0-weight", type=_field("edge_l0_weight"), default=None,
                   help="weight of the expected kept-edge fraction in the loss (TrainConfig.edge_l0_weight; default 0)")
    p.add_argument("--distill-weight", type=_field("distill_weight"), default=None,
                   help="self-distillation from a dense teacher over all nodes (TrainConfig.distill_weight; default 0)")
    p.add_argument("--distill-temperature", type=_field("distill_temperature"), default=None,
                   help="distillation temperature T > 0 (default 1)")
    p.add_argument("--quantizer", choices=QUANTIZERS, default=None,
                   help="quantizer kind with --bits (TrainConfig.quantizer; default fixed)")
    p.add_argument("--bits-weight", type=_field("bits_weight"), default=None,
                   help="bit-width penalty of learned widths, independent of the hardware (TrainConfig.bits_weight; "
                        "default 0)")
    p.add_argument("--pin-ranges", action="store_const", const=True, default=None,
                   help="learned widths: pin weight / hidden ranges to the data max (TrainConfig.pin_ranges)")
    p.add_argument("--sparse-features", action="store_const", const=True, default=None,
                   help="let the loss price the input features stored dense or CSR, whichever the target runs "
                        "cheaper, for the model and its dense reference alike (reports always do; "
                        "TrainConfig.cost.sparse_features)")


_SWITCH = {"auto": None, "on": True, "off": False}
# Training flags passed to `TrainConfig` only when given (no model default).
_OPTIONAL = ("edge_l0_weight", "distill_weight", "distill_temperature", "quantizer", "bits_weight", "pin_ranges",
             "sparse_features")


def _config(args, cost_weight: float, bits: Optional[int], seed: int):
    """The `TrainConfig` of the parsed flags: given flags, then ``MODEL_DEFAULTS[args.model]``,
    then `TrainConfig`'s defaults (`TrainConfig.for_model`)."""
    from codesign.train import TrainConfig
    given = {k: getattr(args, k) for k in _MODEL_DEFAULTED + _OPTIONAL if getattr(args, k, None) is not None}
    if getattr(args, "budget", None) is not None:
        given["budget"] = args.budget
    return TrainConfig.for_model(args.model, **given, bits=bits, cost_weight=cost_weight, seed=seed,
                                 edge_mask=_SWITCH[args.edge_mask], feature_mask=_SWITCH[args.feature_mask])


def _load(args):
    from codesign.data import load_dataset
    return load_dataset(args.dataset, root=args.data_root)


def _mean_dicts(ds: list[dict]) -> dict:
    return {k: float(np.mean([d[k] for d in ds])) for k in ds[0]}


def _train_store(args):
    """``codesign train``'s results file (`ResultsStore`): ``<--out>/<--name>.jsonl``, by default
    ``train_<dataset>_<model>_<hw>.jsonl`` (sweep's stem behind ``train_``: not a sweep input of
    ``paper_figures``, which reads ``<dataset>_<model>_<hw>[_<suffix>].jsonl``), checked writable now."""
    import os

    from codesign.results import ResultsStore
    name = args.name or f"train_{args.dataset}_{args.model}_{args.hw}"
    store = ResultsStore(os.path.join(args.out, f"{name}.jsonl"))
    store.check_writable()
    return store


def _save_plan(args, configs, keys, stored) -> dict:
    """``{seed: checkpoint folder}`` of the seeds `codesign train --save DIR` must still save, checked
    before any training: ``DIR/seed<k>`` must not exist unless it is that very run's checkpoint
    (its meta.json's ``run_key``), which is then not saved again.

    Raises:
      ValueError: ``argument --save: ...`` naming a folder that holds something else.
    """
    from codesign.checkpoint import read_meta
    if not args.save:
        return {}
    todo = {}
    for cfg, key in zip(configs, keys):
        folder = Path(args.save) / f"seed{cfg.seed}"
        if not folder.exists():
            todo[cfg.seed] = folder
            continue
        try:
            same = read_meta(folder).get("run_key") == key
        except FileNotFoundError:
            raise ValueError(f"argument --save: {folder} exists and holds no codesign checkpoint; choose a new "
                             f"folder") from None
        except (OSError, ValueError) as err:
            raise ValueError(f"argument --save: {folder} exists and is not a checkpoint of this run ({err}); choose "
                             f"a new folder") from None
        if not same:
            raise ValueError(f"argument --save: {folder} exists and holds another run's checkpoint; choose a new "
                             f"folder")
        if key in stored:
            print(f"train: seed {cfg.seed} already saved in {folder}", file=sys.stderr)
    return todo


def _native_stdout_to_stderr() -> None:
    """Points file descriptor 1 at stderr and ``sys.stdout`` at a copy of the old descriptor 1:
    Python's prints still reach stdout, native libraries' (gloo's "[Gloo] Rank 0 is connected to
    N peer ranks") go to stderr."""
    import os
    sys.stdout.flush()
    keep = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = os.fdopen(keep, "w", buffering=1, encoding=sys.stdout.encoding or "utf-8")


def cmd_train(args) -> int:
    if getattr(args, "processes", None) is not None:  # local launcher: this command again as N processes
        from codesign.distributed.launch import launch
        return launch(args.argv, args.processes)
    primary = True
    if getattr(args, "num_processes", None) is not None:  # join a cluster, before anything starts JAX
        from codesign.distributed import initialize, is_primary
        _native_stdout_to_stderr()  # gloo prints its connections on stdout; --json stays one line
        initialize(args.coordinator, args.num_processes, args.process_id,
                   local_devices=args.devices // args.num_processes)
        primary = is_primary()  # only process 0 writes records (and prints the summary)
    from tqdm import tqdm

    from codesign.hwmodel import presets
    from codesign.experiment import check_versions, make_record, run_key
    from codesign.results import check_run_record
    from codesign.train import train_seeds
    hw = presets.get(args.hw)
    store = _train_store(args) if primary else None  # an unwritable --out fails here, before any training
    if primary:
        check_versions(store.path, store.records())  # never add to a file priced by another cost model
    args.progress = getattr(args, "progress", None) or _Progress()
    args.progress.store = store
    # the link, or the topology that replaces it, is part of a partitioned run's identity
    comm_target = {"link": args.link} if args.topology is None else {"topology": args.topology}
    scale_out = {"devices": args.devices, **comm_target, "int8_halo": args.int8_halo} if args.devices > 1 else {}
    if args.shards is not None:  # each process reads its own parts (codesign.distributed.shards), not the graph
        from codesign.distributed.shards import read_manifest
        manifest = read_manifest(args.shards)
        if any(a == "--dataset" or a.startswith("--dataset=") for a in args.argv) and args.dataset != manifest["graph"]:
            raise ValueError(f"--dataset {args.dataset}: the shard folder {args.shards} holds {manifest['graph']!r}")
        args.dataset, graph = manifest["graph"], None
        if (manifest["method"], manifest["seed"]) != ("metis", 0):  # the partition the graph path computes
            scale_out.update(partition_method=manifest["method"], partition_seed=manifest["seed"])
    else:
        graph = _load(args)
    configs = [_config(args, args.cost_weight, args.bits, seed) for seed in range(args.seeds)]
    # sweep's key scheme; a partitioned run is another run than the single-device one (the same run
    # whether its devices sit in one process or several, and whether they read shard files or cut
    # the graph themselves)
    keys = [run_key(args.dataset, args.hw, cfg, **scale_out) for cfg in configs]
    stored = {r["key"]: r for r in store.records() if "key" in r} if primary else {}
    to_save = _save_plan(args, configs, keys, stored)  # every --save folder checked before any training
    for cfg, key in zip(configs, keys):
        if key in stored:
            again = " but not saved: trained again for --save (the stored record is kept)" if cfg.seed in to_save \
                else "; not trained again"
            print(f"train: seed {cfg.seed} already in {store.path} (key {key}){again}", file=sys.stderr)
    wanted = [key not in stored or cfg.seed in to_save for cfg, key in zip(configs, keys)]
    if getattr(args, "num_processes", None) is not None:  # process 0's store decides for every process
        from jax.experimental import multihost_utils
        wanted = np.asarray(multihost_utils.broadcast_one_to_all(np.asarray(wanted, np.int32))).astype(bool).tolist()
    todo = [(cfg, key) for (cfg, key), w in zip(zip(configs, keys), wanted) if w]
    args.progress.todo = {key for _, key in todo if key not in stored}
    if primary:
        print(f"train: {len(todo)} of {len(configs)} seeds to train, results in {store.path}", file=sys.stderr)
    with tqdm(total=sum(c.optim.epochs for c, _ in todo), disable=args.json or not primary or None, desc="train",
              unit="epoch") as bar:
        def progress(epoch, values):
            args.progress.check()  # a Ctrl-C Python dropped (`_Progress.check`)
            bar.update(np.size(values["loss"]))  # [S] losses when seeds are batched
        if args.devices > 1:  # partitioned full-batch training over a device mesh (codesign.distributed)
            from codesign.distributed import train_distributed
            results = (train_distributed(graph, cfg, hw, args.devices,
                                         link=args.link, topology=args.topology,
                                         int8_halo=args.int8_halo,
                                         shards=args.shards, on_epoch=progress) for cfg, _ in todo)
        else:  # the seeds on one compiled step where the model allows (codesign.train.train_seeds)
            results = train_seeds(graph, [cfg for cfg, _ in todo], hw, on_epoch=progress, return_model=bool(to_save))
        for (cfg, key), result in zip(todo, results):
            result.pop("by_hw", None)  # one target: the same numbers as modeled / breakdown
            model = result.pop("model", None)
            if primary and key not in stored:
                check_run_record(result, "train_distributed" if args.devices > 1 else "train")
                record = make_record(key, {"dataset": args.dataset, "hw": args.hw, **cfg.flat(), **scale_out},
                                     result)
                store.append(record)  # written as it finishes, before the checkpoint: a later failure loses nothing
                stored[key] = record
            if cfg.seed in to_save:  # orbax checkpoint of this seed's hardened model (codesign deploy DIR)
                from codesign.checkpoint import save_model
                saved = save_model(to_save[cfg.seed], model, cfg, graph, args.dataset, run_key=key)
                args.progress.saved += 1
                print(f"train: saved seed {cfg.seed} to {saved}", file=sys.stderr)
    if not primary:  # process 0 stored the records and prints the summary
        return 0
    runs = [stored[key] for key in keys]
    acc = np.array([r["test_accuracy"] for r in runs])
    out = {
        "dataset": args.dataset, "model": args.model, "hw": args.hw, "cost_weight": args.cost_weight,
        "budget": args.budget,
        "bits": args.bits or 32, "seeds": args.seeds,
        "test_accuracy": float(acc.mean()), "test_accuracy_std": float(acc.std()),
        "val_accuracy": float(np.mean([r["val_accuracy"] for r in runs])),
        "modeled": _mean_dicts([r["modeled"] for r in runs]),
        "dense_modeled": runs[0]["dense_modeled"],
        "densities": _mean_dicts([r["densities"] for r in runs]),
        "per_seed_test_accuracy": acc.tolist(),
        # hardened bit-width per quantized tensor, mean over seeds ({} without quantization)
        "layer_bits": _mean_dicts([r["layer_bits"] for r in runs]) if runs[0]["layer_bits"] else {},
        "train_time_s": float(np.mean([r["train_time_s"] for r in runs])),
        "results": str(store.path),
    }
    if args.json:
        print(json.dumps(out))
        return 0
    m, dm = out["modeled"], out["dense_modeled"]
    print(f"\n{args.model} on {args.dataset}, {args.seeds} seeds, cost weight {args.cost_weight}, "
          f"{out['bits']}-bit, hardware {args.hw}")
    print(f"  test accuracy   {100 * out['test_accuracy']:.2f} +- {100 * out['test_accuracy_std']:.2f} %")
    print(f"  kept edges      {100 * out['densities']['edge']:.1f} %   kept features "
          f"{100 * out['densities']['feature']:.1f} %")
    if out["layer_bits"]:
        print("  bits            " + "  ".join(f"{k} {b:.2f}" for k, b in out["layer_bits"].items()))
    print(f"  {'':14s}{'hardened':>14s}{'dense fp32':>14s}{'ratio':>8s}")
    for k, unit in (("latency_s", "s"), ("energy_j", "J"), ("dram_bytes", "B")):
        print(f"  {k:14s}{m[k]:14.4g}{dm[k]:14.4g}{dm[k] / m[k]:7.2f}x")
    print(f"  results         {out['results']}")
    return 0


def cmd_deploy(args) -> int:
    """Restores a checkpoint (`codesign train --save`), deploys it and measures it on this machine."""
    from codesign import hwmodel
    from codesign.checkpoint import load_model, read_meta
    from codesign.data import load_dataset
    from codesign.deploy import check_deployable, measure_model
    meta = read_meta(args.checkpoint)  # a missing, edited or pre-hash checkpoint fails here, in one line
    graph = load_dataset(meta["dataset"], root=args.data_root)
    model, cfg, meta = load_model(args.checkpoint, graph)
    check_deployable(cfg, graph)  # a model deploy cannot compile (GAT, ...): one line
    _warn_fit_host("cpu_numpy")
    out = measure_model(model, graph, hwmodel.presets.get("cpu_numpy"), reps=args.reps)
    kept = out["kept"]
    if args.json:
        print(json.dumps(out))
        return 0
    m, d = out["measured"], out["dense_measured"]
    print(f"{cfg.model.name} from {args.checkpoint} on {meta['dataset']}: kept features "
          f"{100 * kept['feature_fraction']:.1f} %, channels {100 * kept['channel_fraction']:.1f} %, "
          f"edges {100 * kept['edge_fraction']:.1f} %")
    print(f"  {'':22s}{'compact':>14s}{'dense fp32':>14s}{'ratio':>8s}")
    for k in ("latency_s", "peak_bytes", "model_bytes"):
        print(f"  {'measured ' + k:22s}{m[k]:14.4g}{d[k]:14.4g}{d[k] / m[k]:7.2f}x")
    ml, dl = out["modeled_local"]["latency_s"], out["dense_modeled_local"]["latency_s"]
    print(f"  {'modeled latency_s (cpu)':22s}{ml:14.4g}{dl:14.4g}{dl / ml:7.2f}x")
    return 0


def sweep_configs(args) -> list:
    """The sweep grid: the dense FP32 reference plus every cost weight at ``--bits``, x seeds. With
    ``--method NAME`` (`codesign.experiment.METHODS`) the method's `TrainConfig` overrides replace
    the flags' values: a cost-level method at every cost weight, any other at one point per seed.

    Raises:
      ValueError: a method whose levels need their own driver (UGS rounds, random keep fractions)
        or that does not apply to ``--model``.
    """
    grid = [(0.0, None)] + [(cw, args.bits) for cw in args.cost_weights]
    if getattr(args, "method", None) is None:
        return [_config(args, cw, bits, seed) for cw, bits in dict.fromkeys(grid) for seed in range(args.seeds)]
    from codesign.experiment import get_method
    method = get_method(args.method)
    if method.levels not in (None, "cost") or (method.models is not None and args.model not in method.models):
        raise ValueError(f"--method: {args.method!r} (levels {method.levels!r}, models {method.models}) cannot be "
                         f"swept for --model {args.model}; run python experiments/tradeoff.py --methods {args.method}")
    dense = [_config(args, 0.0, None, seed) for seed in range(args.seeds)]
    overrides = method.overrides_for(args.dataset, args.model)
    weights = args.cost_weights if method.levels == "cost" else [overrides.get("cost_weight", 0.0)]
    runs = [_config(args, cw, args.bits, seed).replace(**{**overrides, "cost_weight": cw})
            for cw in dict.fromkeys(weights) for seed in range(args.seeds)]
    return list(dict.fromkeys(dense + runs))


def cmd_sweep(args) -> int:
    import os

    from codesign.experiment import GridPoint, check_versions, run_grid, run_key
    from codesign.hwmodel import presets
    from codesign.results import ResultsStore
    from codesign.train import train_seeds
    configs = sweep_configs(args)  # a method that cannot be swept fails here, before any loading
    if args.measure and args.model not in ("gcn", "sage", "gat"):
        raise ValueError(f"--measure: codesign.deploy compiles GCN, GraphSAGE and GAT models only, got --model "
                         f"{args.model}")
    name = args.name or (f"{args.dataset}_{args.model}_{args.hw}" + (f"_{args.method}" if args.method else "")
                         + ("_measured" if args.measure else ""))
    path = os.path.join(args.out, f"{name}.jsonl")
    store = ResultsStore(path)
    store.check_writable()  # before any loading or training
    check_versions(path, store.records())  # never mix records priced by another cost model
    args.progress = getattr(args, "progress", None) or _Progress()
    args.progress.store = store
    graph, hw = _load(args), presets.get(args.hw)
    done = store.done_keys()
    method = {"method": args.method} if args.method else {}
    measured = {"measured_on": "cpu"} if args.measure else {}  # part of the run's identity
    todo = [(cfg, {"dataset": args.dataset, "hw": args.hw, **cfg.flat(), **method, **measured})
            for cfg in configs if run_key(args.dataset, args.hw, cfg, **measured) not in done]
    if args.measure:  # every run to do must deploy: refused now, not after its training
        from codesign.deploy import NotDeployableError, check_deployable
        for cfg in dict.fromkeys(cfg.replace(seed=0) for cfg, _ in todo):
            try:
                check_deployable(cfg, graph)
            except NotDeployableError as err:
                raise NotDeployableError(f"argument --measure: {err}") from None
    args.progress.todo = {run_key(args.dataset, args.hw, cfg, **measured) for cfg, _ in todo}
    print(f"sweep {name}: {len(todo)} runs to do, {len(done)} already in {path}", file=sys.stderr)
    if args.measure:  # the measuring machine's spec and the graph's locality, once for every run
        from codesign.deploy import measure_model
        from codesign.hwmodel import measure_locality
        local_hw, locality = presets.get("cpu_numpy"), measure_locality(graph.senders, graph.receivers, graph.n_nodes)
        _warn_fit_host("cpu_numpy")
    grouped = {}  # the seeds of a point, trained together (codesign.train.train_seeds)
    for cfg, config in todo:
        grouped.setdefault(cfg.replace(seed=0), []).append((cfg, config))

    def runner(runs):
        def run():
            for (cfg, config), result in zip(runs, train_seeds(graph, [cfg for cfg, _ in runs], hw,
                                                               return_model=args.measure)):
                result.pop("by_hw")  # one target: the same numbers as modeled / breakdown
                if args.measure:
                    result.update(measure_model(result.pop("model"), graph, local_hw, reps=args.reps,
                                                locality=locality))
                yield run_key(args.dataset, args.hw, cfg, **measured), config, result
        return run

    points = [GridPoint(tuple(run_key(args.dataset, args.hw, cfg, **measured) for cfg, _ in runs), runner(runs))
              for runs in grouped.values()]
    run_grid(store, points, desc=f"sweep {name}")  # the one grid runner of experiments/tradeoff.py too
    print(path)
    return 0


def _warn_fit_host(preset: str) -> None:
    """One line on stderr when the measured ``preset`` was fitted on another CPU than this one
    (`hwmodel.calibrate.fit_host`): its ``modeled_local`` then prices that CPU, not this."""
    from codesign.hwmodel.calibrate import fit_host
    check = fit_host(preset)
    if check is not None and not check["matches"]:
        f, h = check["fit"], check["here"]
        print(f"warning: the {preset} preset was fitted on {f['cpu_model']} ({', '.join(f['simd'] or [])}), this host "
              f"is {h['cpu_model']} ({', '.join(h['simd'] or [])}): modeled_local prices the other CPU; re-fit with "
              f"python experiments/hwmodel_validation.py --peaks-only --save-preset", file=sys.stderr)


def cmd_cost(args) -> int:
    from flax import nnx

    from codesign import hwmodel
    from codesign.train import TrainConfig, build_model
    graph = _load(args)
    model = build_model(TrainConfig.for_model(args.model), graph, nnx.Rngs(0), dense=True)
    n, e = graph.n_nodes, graph.n_edges
    common = dict(training=args.training, locality=hwmodel.measure_locality(graph.senders, graph.receivers, n))
    bits = 32 if args.bits is None else args.bits  # not `args.bits or 32`: --bits 0 must be refused, not costed as 32
    from codesign.graph import feature_column_nnz
    workloads = {
        "dense fp32": model.workload(n, e, hard=True, **common),
        "dense fp32, CSR features": model.workload(n, e, hard=True, feature_nnz=feature_column_nnz(graph.x), **common),
        f"given ({bits}-bit, edges {args.edge_density:g}, features {args.feature_density:g})":
            model.workload(n, e, bits=float(bits),
                           densities={"edge": args.edge_density, "feature": args.feature_density}, **common),
    }
    out = {}
    for hw_name in args.hw.split(","):
        hw = hwmodel.presets.get(hw_name)
        out[hw_name] = {}
        for label, wl in workloads.items():
            rep = hwmodel.estimate(wl, hw, mapping=args.mapping)
            out[hw_name][label] = {**rep.summary(), "on_nmp": {k: bool(v) for k, v in rep.on_nmp.items()},
                                   "aggregate_first": {k: bool(v) for k, v in rep.aggregate_first.items()},
                                   "stages": {
                k: {"latency_s": float(s.latency_s), "energy_j": float(s.energy_j),
                    "dram_bytes": float(s.dram_bytes), "bound": s.bound} for k, s in rep.stages.items()}}
    if args.json:
        print(json.dumps(out))
        return 0
    for hw_name, per in out.items():
        for label, rep in per.items():
            print(f"\n{hw_name} - {args.model} on {args.dataset} - {label}: latency {rep['latency_s']:.4g} s, "
                  f"energy {rep['energy_j']:.4g} J, DRAM {rep['dram_bytes']:.4g} B")
            print(f"  {'stage':22s}{'latency_s':>12s}{'energy_j':>12s}{'dram_bytes':>12s}  bound")
            for k, s in rep["stages"].items():
                print(f"  {k:22s}{s['latency_s']:12.4g}{s['energy_j']:12.4g}{s['dram_bytes']:12.4g}  {s['bound']}")
    return 0


def cmd_validate(args) -> int:
    from codesign.hwmodel import presets, tables
    if args.table is None:
        rows = [presets.evidence(n) for n in presets.names()]
        if args.json:
            print(json.dumps(rows))
            return 0
        for r in rows:
            err = "" if r["error"] is None else "; error " + json.dumps(r["error"], separators=(",", ":"))
            print(f"{r['preset']:10s} {r['level']}: {r['checked_against']}{err}"
                  f"{'' if r['date'] is None else '; ' + r['date']}")
        return 0
    hw = presets.get(args.hw)
    table = tables.screen(tables.read_timing_table(args.table, args.kind), hw)
    # the fitted preset is scored with each kernel column's own fitted factors (its own for cuSPARSE); every
    # other preset as it is, with uniform re-reference (no fit of its own on this table)
    rec = presets.gpu_fit_record() if hw.name == "h100" else None
    fits = None if rec is None else {k: v["factors"] for k, v in
                                     rec["tables"].get(table.kind, {}).get("kernels", {}).items()}
    out = tables.validate_table(table, hw, fits)
    out["screened"] = table.screened
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.table} ({table.kind}) on {hw.name}; screened (impossible times): {table.screened}")
    print(f"  {'kernel':10s}{'width':>6s}{'n':>5s}{'MAPE':>8s}{'Spearman':>10s}{'median mod/meas':>17s}  factors")
    for k, v in out["kernels"].items():
        for w, m in v["by_width"].items():
            if m["n"] == 0:
                continue
            rho = "-" if m["spearman"] is None else f"{m['spearman']:.3f}"
            print(f"  {k:10s}{w:>6s}{m['n']:5d}{m['mape']:8.3f}{rho:>10s}{m['median_ratio']:17.3f}  {v['factors_from']}")
    return 0


def cmd_bench(args) -> int:
    from codesign.bench import bench_cost
    if args.target == "cost":
        r = bench_cost(args.points, args.hw, args.reps)
        if args.json:
            print(json.dumps(r))
        else:
            print(f"cost + gradient of {r['points']} design points on {r['hw']} (vmap): median {r['median_s']:.3f} s "
                  f"over {args.reps} runs ({r['points_per_s']:.0f} points/s), compile {r['compile_s']:.2f} s")
    return 0


def cmd_partition(args) -> int:
    from codesign.distributed import partition_graph
    from codesign.distributed.shards import load_shard, read_manifest, write_shards
    if args.check is not None:  # every part loads: its SHA-256 and header match the manifest
        m = read_manifest(args.check)
        for i in range(m["n_parts"]):
            load_shard(args.check, i)
        out = args.check
    else:
        args.dataset = args.graph
        graph = _load(args)
        part = partition_graph(np.asarray(graph.senders), np.asarray(graph.receivers), graph.n_nodes, args.parts,
                               args.method, seed=args.seed)
        m = write_shards(graph, part, args.out, graph_name=args.graph,
                         seed=args.seed if part.method == "metis" else None)
        out = args.out
    summary = {"out": out, **{k: m[k] for k in ("graph", "n_nodes", "n_edges", "n_parts", "method", "seed",
                                                 "block_size", "edge_cut")},
               "files": [p["file"] for p in m["parts"]], "checked": args.check is not None}
    if args.json:
        print(json.dumps(summary))
        return 0
    seed = "" if m["seed"] is None else f", seed {m['seed']}"
    print(f"{m['graph']}: {m['n_nodes']} nodes, {m['n_edges']} edges -> {m['n_parts']} parts ({m['method']}{seed}): "
          f"block {m['block_size']} rows, edge cut {m['edge_cut']} ({m['edge_cut'] / max(m['n_edges'], 1):.1%}); "
          f"{m['n_parts']} files + manifest.json in {out}{' (all verified)' if args.check else ''}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from codesign.hwmodel import MAPPING_OBJECTIVES, presets
    from codesign.hwmodel.comm import LINKS
    from codesign.hwmodel.topology import TOPOLOGIES
    parser = _Parser(prog="codesign", description=__doc__, formatter_class=_HelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    add = lambda name, help: sub.add_parser(name, help=help, description=help, formatter_class=_HelpFormatter)

    p = add("train", "train (several seeds), harden, evaluate and cost one configuration")
    _add_common(p)
    _add_training(p)
    p.add_argument("--cost-weight", type=_field("cost_weight"), default=0.0,
                   help="weight of the log cost-ratio term in the loss (0: accuracy only)")
    p.add_argument("--budget", type=_field("budget"), default=None,
                   help="train under cost <= BUDGET x the dense FP32 model's cost, BUDGET in (0, 1] (Lagrange "
                        "multiplier); replaces --cost-weight")
    p.add_argument("--seeds", type=_positive_int("seeds"), default=5, help="seeds 0 .. SEEDS-1, averaged")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.add_argument("--devices", type=_positive_int("devices"), default=None,
                   help="partition the graph (METIS) over this many devices and train full-batch across them "
                        "(GCN; on CPU in one process set XLA_FLAGS=--xla_force_host_platform_device_count=P); "
                        "default 1, or the number of processes with --processes / --num-processes")
    p.add_argument("--processes", type=_positive_int("processes"), default=None, metavar="N",
                   help="train one partitioned run as N local processes (jax.distributed, coordinator on 127.0.0.1, "
                        "gloo collectives on CPU), each holding DEVICES/N devices; starts this command N times with "
                        "the join flags below; only process 0 writes results")
    p.add_argument("--shards", default=None, metavar="DIR",
                   help="with --devices > 1: train from the shard folder DIR (codesign partition GRAPH --parts P "
                        "--out DIR) instead of loading and partitioning the graph; each process reads the manifest "
                        "and its own parts only; --devices must be the folder's P")
    p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                   help="join a cluster whose process 0 listens at HOST:PORT (with --process-id, --num-processes)")
    p.add_argument("--process-id", type=int, default=None, metavar="I", help="with --coordinator: this process's rank")
    p.add_argument("--num-processes", type=_positive_int("num_processes"), default=None, metavar="N",
                   help="with --coordinator: processes in the cluster")
    p.add_argument("--link", default=None, choices=list(LINKS),
                   help="with --devices > 1: the link between devices that the cost model charges, a ring on "
                        "one link per device (default: nvlink4)")
    p.add_argument("--topology", default=None, choices=list(TOPOLOGIES),
                   help="with --devices > 1, instead of --link: a declared topology (devices on hosts, shared "
                        "links) on which each layer's exchange is priced as the DGCL-style planner plans it; "
                        "loopback_gloo is this machine's processes (fitted here), dgx_h100 needs --devices 8, "
                        "two_dgx_h100_ib --devices 16")
    p.add_argument("--int8-halo", action="store_true", help="with --devices > 1: send halo rows as int8")
    p.add_argument("--out", default="results",
                   help="results folder: each finished seed is appended there as it finishes; a re-run skips "
                        "the seeds already stored")
    p.add_argument("--name", default=None, help="results file stem (default train_<dataset>_<model>_<hw>)")
    p.add_argument("--save", default=None, metavar="DIR",
                   help="save each seed's hardened model with orbax to DIR/seed<k> (a new folder), with its config "
                        "and the graph's hash, for `codesign deploy DIR/seed<k>` (single device only); a seed "
                        "already stored in the results file but not saved is trained again to save it, one "
                        "already saved there is skipped")
    p.set_defaults(func=cmd_train)

    p = add("deploy", "restore a saved model, deploy it as a compact program and measure it next to dense FP32")
    p.add_argument("checkpoint", help="a folder written by codesign train --save (DIR/seed<k>)")
    p.add_argument("--data-root", default=None, help="folder holding planetoid/ (default: $CODESIGN_DATA or cache)")
    p.add_argument("--reps", type=_positive_int("reps"), default=30, help="timed inferences of each program")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=cmd_deploy)

    p = add("sweep", "accuracy-vs-cost sweep over cost weights x seeds (resumable)")
    _add_common(p)
    # Default method: feature mask + 8-bit. Free per-edge gates overfit Cora's 140 labels: at cost
    # weight 0 they still drop 23% of edges and cost 2.5 points (measured); see docs/results.md.
    _add_training(p, bits=8, edge_mask="off")
    p.add_argument("--cost-weights", type=_cost_weights, default=[0.0, 0.03, 0.1, 0.3, 1.0, 3.0],
                   help="comma-separated cost weights (finite, >= 0), each run at --bits (the FP32 dense "
                        "reference is added)")
    p.add_argument("--seeds", type=_positive_int("seeds"), default=3, help="seeds 0 .. SEEDS-1 per configuration")
    from codesign.experiment import METHODS
    p.add_argument("--method", default=None, choices=[m for m, v in METHODS.items() if v.levels in (None, "cost")],
                   metavar="NAME",
                   help="a method of the paper (codesign.experiment.METHODS, e.g. codesign_int8): its TrainConfig "
                        "overrides replace the flags' values; cost-level methods run at every --cost-weights value")
    p.add_argument("--measure", action="store_true",
                   help="also deploy every trained model (codesign.deploy: GCN, GraphSAGE, GAT) and time it next to the dense "
                        "FP32 program on this machine, beside the cpu preset's modeled latency: adds measured, "
                        "dense_measured and modeled_local to each record")
    p.add_argument("--reps", type=_positive_int("reps"), default=20, help="with --measure: timed inferences of each "
                   "program (median)")
    p.add_argument("--name", default=None, help="results file stem (default <dataset>_<model>_<hw>[_<method>]"
                   "[_measured])")
    p.add_argument("--out", default="results", help="results folder (created if missing)")
    p.set_defaults(func=cmd_sweep)

    p = add("cost", "modeled cost per stage of the dense model and of given densities/bits")
    _add_common(p, multi_hw=True)
    p.add_argument("--bits", type=_field("bits"), default=None,
                   help="bit-width of features and weights in [1, 32] (default: 32, FP32)")
    p.add_argument("--edge-density", type=_unit_interval("edge_density"), default=1.0,
                   help="kept fraction of the edges, in [0, 1]")
    p.add_argument("--feature-density", type=_unit_interval("feature_density"), default=1.0,
                   help="kept fraction of the input features, in [0, 1]")
    p.add_argument("--training", action="store_true", help="cost forward + backward instead of inference")
    p.add_argument("--mapping", choices=MAPPING_OBJECTIVES, default="latency_s",
                   help="what each layer's mapping (dataflow order x unit) is chosen by (default latency_s; a run "
                        "prices by its objective, energy_j for the grids)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=cmd_cost)

    p = add("bench", "benchmarks: medians of repeated runs, compile time apart")
    p.add_argument("target", choices=["cost"],
                   help="cost: cost model + gradient over many design points (training speed next to PyG is "
                        "an experiment that builds its own PyG environment: python experiments/bench_train.py)")
    p.add_argument("--points", type=_positive_int("points"), default=10_000, help="cost: design points")
    p.add_argument("--hw", default="gnnear", type=str.lower, choices=presets.names(), help="cost: hardware preset")
    p.add_argument("--reps", type=_positive_int("reps"), default=5, help="cost: timed repetitions")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(func=cmd_bench)

    p = add("validate", "each hardware preset's evidence (what it was checked against, the error, when); "
                        "with --table, the cost model's error on a device timing table")
    p.add_argument("--table", default=None, metavar="FILE",
                   help="CSV timing table (columns matrix, n_rows, nnz, width, <kernel>_ms; "
                        "shared/data/gpu_timings/README.md)")
    p.add_argument("--kind", default=None, choices=["spmm", "sddmm"],
                   help="kernel of the table (default: from the file name)")
    p.add_argument("--hw", default="h100", type=str.lower, choices=presets.names(), help="hardware preset")
    p.add_argument("--json", action="store_true", help="print one JSON object (with --table: per-row predictions)")
    p.set_defaults(func=cmd_validate)

    from codesign.data import DATASETS
    from codesign.distributed.partition import METHODS as PARTITIONERS
    p = add("partition", "partition a graph once, offline: one shard file per part (its nodes, edges, halo send / "
                         "receive lists, features, labels, masks) plus manifest.json with SHA-256s, for processes "
                         "that each load only their part (codesign.distributed.shards.load_shard)")
    p.add_argument("graph", nargs="?", type=str.lower, choices=DATASETS, metavar="GRAPH",
                   help=f"dataset name: {', '.join(DATASETS)}")
    p.add_argument("--parts", type=_positive_int("parts"), default=None, help="number of parts P (required)")
    p.add_argument("--out", default=None, metavar="DIR", help="folder to write (created; files there replaced; "
                   "required)")
    p.add_argument("--check", default=None, metavar="DIR",
                   help="instead of writing: verify shard folder DIR (every part's SHA-256 and header against its "
                        "manifest) and print its summary")
    p.add_argument("--method", default="metis", choices=list(PARTITIONERS), help="partitioner")
    p.add_argument("--seed", type=int, default=0, help="METIS seed")
    p.add_argument("--data-root", default=None, help="folder holding planetoid/ (default: $CODESIGN_DATA or cache)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a line")
    p.set_defaults(func=cmd_partition)
    return parser


def _writable_folder_error(path: str) -> Optional[str]:
    """Why files cannot be written under folder ``path`` (created with its parents if missing),
    or None: its nearest existing ancestor must be a writable folder."""
    import os
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{path!r} cannot be a folder: {probe!r} is a file"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{path!r}: folder {probe!r} is not writable"
    return None


def _check_combinations(parser: argparse.ArgumentParser, args) -> None:
    """Checks between flags that argparse cannot express; exits 2 with one line naming the flags."""
    if args.command == "train":
        err = lambda flag, why: parser.exit(2, f"codesign train: error: argument {flag}: {why}\n")
        join = {"--coordinator": args.coordinator, "--process-id": args.process_id,
                "--num-processes": args.num_processes}
        given = [f for f, v in join.items() if v is not None]
        if args.processes is not None and given:
            err("--processes", f"not with {given[0]} (the launcher sets the join flags)")
        if given and len(given) < 3:
            err(given[0], f"needs {' and '.join(f for f in join if f not in given)}")
        if given:
            host, _, port = args.coordinator.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                err("--coordinator", f"must be HOST:PORT, got {args.coordinator!r}")
            if not 0 <= args.process_id < args.num_processes:
                err("--process-id", f"must be in [0, {args.num_processes}), got {args.process_id}")
        n = args.processes or args.num_processes
        args.devices = args.devices or n or 1
        if n is not None:
            flag = "--processes" if args.processes is not None else "--num-processes"
            if args.devices < 2:
                err(flag, "needs --devices > 1 (a partitioned run)")
            if args.devices % n:
                err("--devices", f"must be a multiple of {flag} {n} (devices per process), got {args.devices}")
        if args.devices == 1:
            for flag, given in (("--int8-halo", args.int8_halo), ("--link", args.link is not None),
                                ("--topology", args.topology is not None), ("--shards", args.shards is not None)):
                if given:
                    parser.exit(2, f"codesign train: error: argument {flag}: needs --devices > 1\n")
        if args.topology is not None:
            if args.link is not None:
                parser.exit(2, "codesign train: error: argument --topology: not with --link\n")
            from codesign.hwmodel.topology import get_topology
            try:
                get_topology(args.topology, args.devices)
            except ValueError as e:
                parser.exit(2, f"codesign train: error: argument --topology: {e}\n")
            if args.topology == "loopback_gloo" and n != args.devices:
                parser.exit(2, "codesign train: error: argument --topology: loopback_gloo prices one device per "
                               "process: needs --processes (or --num-processes) equal to --devices\n")
        elif args.link is None:
            args.link = "nvlink4"
        if args.save is not None:
            if args.devices > 1:
                parser.exit(2, "codesign train: error: argument --save: single device only (not with --devices > 1)\n")
            why = _writable_folder_error(args.save)  # seed<k> folders already there are checked by cmd_train
            if why:
                parser.exit(2, f"codesign train: error: argument --save: {why}\n")
    if args.command == "partition":
        if args.check is not None:
            for flag, given in (("GRAPH", args.graph), ("--parts", args.parts), ("--out", args.out)):
                if given is not None:
                    parser.exit(2, f"codesign partition: error: argument --check: not with {flag}\n")
            return
        for flag, given in (("GRAPH", args.graph), ("--parts", args.parts), ("--out", args.out)):
            if given is None:
                parser.exit(2, f"codesign partition: error: argument {flag}: required (or --check DIR)\n")
    if args.command in ("sweep", "partition"):
        why = _writable_folder_error(args.out)
        if why:
            parser.exit(2, f"codesign {args.command}: error: argument --out: {why}\n")


class _Progress:
    """What a command has stored so far, for the Ctrl-C line: ``store`` (its `ResultsStore`, once
    known), ``todo`` (the keys of the runs it set out to store, none of them stored then) and
    ``saved`` (checkpoints written)."""

    def __init__(self):
        self.store, self.todo, self.saved = None, set(), 0
        self.interrupted = False  # set by `_run`'s SIGINT handler

    def check(self) -> None:
        """Raise `KeyboardInterrupt` if a SIGINT arrived. Python drops an exception raised while a
        garbage-collector callback runs (JAX registers one; it prints "Exception ignored in
        _xla_gc_callback"), so a Ctrl-C landing there would be lost; the training loops' epoch
        callbacks call this, so it takes effect within an epoch."""
        if self.interrupted:
            raise KeyboardInterrupt

    def summary(self) -> str:
        """``N run(s) stored in PATH[, M checkpoint(s) saved]; ...``: N counted in the file (an
        interrupt between a write and a counter cannot miscount)."""
        if self.store is None:
            return "nothing stored"
        try:
            n = len(self.store.done_keys() & self.todo)
        except (OSError, ValueError):
            return f"see {self.store.path}"
        saved = f", {self.saved} checkpoint(s) saved" if self.saved else ""
        return f"{n} run(s) stored in {self.store.path}{saved}; a re-run resumes from there"


def _bad_input_errors() -> tuple:
    """The exception classes the library raises for bad input (a value, a file, a config or an
    option it cannot honour); `main` reports them in one line with status 2. Their subclasses come
    with them: `codesign.checkpoint.CheckpointError`, `codesign.vertex.trace.VertexProgramError`
    (ValueError), `codesign.deploy.NotDeployableError` (NotImplementedError, ValueError),
    `codesign.results.ResultsPathError` and filelock's ``Timeout`` (OSError), FileNotFoundError,
    FileExistsError, UnicodeDecodeError (ValueError). A bare KeyError is not here: the library's
    lookups by name raise ValueError listing the known names, so a KeyError is a bug."""
    import pickle
    return (ValueError, TypeError, OSError, NotImplementedError, ImportError, pickle.UnpicklingError)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line ``argv`` and returns its exit status. Bad input (a flag out of its
    domain, a config the library refuses, a missing, unreadable or corrupt file, an unwritable
    output, an option that cannot be honoured: `_bad_input_errors`) is one line on stderr and
    status 2; a training run that diverges, or a job that runs out of memory (`MemoryError`, e.g.
    METIS on a graph too large for this machine), is one line and status 1; Ctrl-C is one line saying
    how many runs were stored, status 130; anything else propagates (a bug). Set
    ``CODESIGN_TRACEBACK=1`` to get the traceback of a reported error. ``--help`` prints the help
    and returns 0."""
    import os
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        _check_combinations(parser, args)
    except SystemExit as e:  # argparse: --help (0) or a flag error, already printed (2)
        return e.code if isinstance(e.code, int) else 0
    args.progress = _Progress()
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what `codesign train --processes N` starts again
    if getattr(args, "num_processes", None) is None:
        return _run(args)
    # A process of a cluster that fails leaves at once: at exit, jax.distributed waits (~30 s) at a
    # shutdown barrier for the other processes, which are blocked in a collective with this one.
    try:
        code = _run(args)
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    if code:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(args) -> int:
    """``args.func(args)`` with `main`'s error handling."""
    import os
    import signal
    import threading

    def on_sigint(signum, frame):
        args.progress.interrupted = True  # remembered where Python drops the exception (`_Progress.check`)
        if not _in_finalizer(frame):  # there it would be printed as "Exception ignored in ..." and lost
            signal.default_int_handler(signum, frame)

    # only Python's own handler is wrapped (not one a host program such as pytest set), from the main thread
    own = (threading.current_thread() is threading.main_thread()
           and signal.getsignal(signal.SIGINT) is signal.default_int_handler)
    previous = signal.signal(signal.SIGINT, on_sigint) if own else None
    try:
        code = args.func(args)
        args.progress.check()
        return code
    except KeyboardInterrupt:
        print(f"codesign {args.command}: interrupted: {args.progress.summary()}", file=sys.stderr)
        return 130
    except FloatingPointError as e:  # an ArithmeticError: not bad input, the run diverged
        if os.environ.get("CODESIGN_TRACEBACK"):
            raise
        print(f"codesign {args.command}: error: {e}", file=sys.stderr)
        return 1
    except MemoryError as e:  # not bad input, not a bug: the machine is too small for the job (status 1)
        if os.environ.get("CODESIGN_TRACEBACK"):
            raise
        why = f" ({e})" if str(e) else ""
        print(f"codesign {args.command}: error: out of memory{why}; this machine has "
              f"{_total_memory_gib():.1f} GiB (set CODESIGN_TRACEBACK=1 for where it ran out)", file=sys.stderr)
        return 1
    except _bad_input_errors() as e:
        if os.environ.get("CODESIGN_TRACEBACK"):
            raise
        print(f"codesign {args.command}: error: {e}", file=sys.stderr)
        return 2
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)


def _in_finalizer(frame) -> bool:
    """Whether ``frame`` (where a signal arrived) runs inside a callback whose exceptions Python
    ignores, printing "Exception ignored in ..." with a traceback: a ``__del__`` method, a
    ``weakref.finalize`` callback, or a garbage-collector callback (JAX's ``_xla_gc_callback``). A
    Ctrl-C landing there is only remembered; the next `_Progress.check` raises it."""
    while frame is not None:
        code = frame.f_code
        if (code.co_name == "__del__" or "gc_callback" in code.co_name
                or (code.co_filename.endswith("weakref.py") and code.co_name in ("__call__", "_exitfunc"))):
            return True
        frame = frame.f_back
    return False


def _total_memory_gib() -> float:
    """Physical memory of this machine, GiB (POSIX ``sysconf``; 0 where it is not known)."""
    import os
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


if __name__ == "__main__":
    sys.exit(main())
