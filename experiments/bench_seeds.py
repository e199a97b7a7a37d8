"""Seeds batched vs one by one (issue 34): wall-clock of `codesign train`'s work for 1 seed, for
S seeds as one vmapped program (`codesign.train.train_seeds`), for S seeds one after the other
(`codesign.train.train` each) and for S seeds one after the other inside one compiled program
(``train_seeds(batch_size=1)``: `jax.lax.map`, no vmap) and for S seeds one after the other on one
compiled step (``batch_size=0``), default config of ``--model`` on ``--dataset``, in one process.

``S_vmap``: ``train_seeds(batch_size=None)``; ``S_mapped``: ``batch_size=1``; ``S_reused``:
``batch_size=0``. Each timed call is a whole `train` / `train_seeds` (set-up, compile, epochs, hardening, cost), as
`codesign train --seeds S` runs it; every call compiles its own step, as the CLI's do. The three
modes alternate (rotated order per repeat), after one untimed warm-up round (one-time compiles of
the dense reference, the evaluation, ...); medians of ``--repeats``. Per mode also the steady
per-epoch time (between the first and the last epoch of each fit, both waited for) and the rest
(``overhead_s``: set-up, compile, first epoch, hardening and costing). The load average (1 min)
is recorded before each call: compare ratios, not absolute times, on a shared machine; ``cpu_s``
(the process's CPU seconds, every thread) moves less with the other processes' load than wall.
``sparse_input``: whether the model trained on its input's nonzeros (`codesign.train.graph_data`).

    python experiments/bench_seeds.py            # -> results/bench_seeds.json
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
from flax import nnx

from codesign.data import load_dataset
from codesign.hwmodel import presets
from codesign.results import write_json_atomic
from codesign.kernels import SparseFeatures
from codesign.train import TrainConfig, adjacency, build_model, graph_data, train, train_seeds
from codesign.train.loop import SEED_BATCH

OUT = Path(__file__).resolve().parent.parent / "results" / "bench_seeds.json"


def _timed(run, epochs: int) -> dict:
    """Wall-clock of ``run(on_epoch)`` and its steady epochs: each fit's first and last epoch are
    waited for (`jax.block_until_ready`), the epochs between them are steady state."""
    marks = []

    def on_epoch(epoch, values):
        if epoch in (0, epochs - 1):
            jax.block_until_ready(values["loss"])
            marks.append((epoch, time.perf_counter()))
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    run(on_epoch)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    starts = [t for e, t in marks if e == 0]
    ends = [t for e, t in marks if e == epochs - 1]
    steady = sum(b - a for a, b in zip(starts, ends))
    n_steady = len(starts) * (epochs - 1)
    return {"wall_s": wall, "fits": len(starts), "epoch_ms": 1e3 * steady / n_steady if n_steady else None,
            "overhead_s": wall - steady, "cpu_s": cpu, "load_1min": load}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="cora")
    ap.add_argument("--model", default="gcn")
    ap.add_argument("--hw", default="h100")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=None, help="default: the model's default config")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--data-root", default=None)
    ap.add_argument("--out", default=None, help=f"default {OUT} ({OUT.stem}_quick.json with --quick)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 seeds, 3 epochs, 1 repeat")
    args = ap.parse_args(argv)
    if args.quick:
        args.seeds, args.epochs, args.repeats = 2, 3, 1
    args.out = args.out or str(OUT.with_name(f"{OUT.stem}_quick.json") if args.quick else OUT)

    graph, hw = load_dataset(args.dataset, root=args.data_root), presets.get(args.hw)
    given = {} if args.epochs is None else {"epochs": args.epochs}
    cfgs = [TrainConfig.for_model(args.model, seed=s, **given) for s in range(args.seeds)]
    epochs = cfgs[0].optim.epochs
    s = args.seeds
    modes = {
        "1": lambda cb: train(graph, cfgs[0], hw, on_epoch=cb),
        f"{s}_vmap": lambda cb: list(train_seeds(graph, cfgs, hw, on_epoch=cb, batch_size=None)),
        f"{s}_sequential": lambda cb: [train(graph, c, hw, on_epoch=cb) for c in cfgs],
        # one compiled program, the seeds one after the other inside it (jax.lax.map, no vmap)
        f"{s}_mapped": lambda cb: list(train_seeds(graph, cfgs, hw, on_epoch=cb, batch_size=1)),
        # one after the other, each its own epoch loop, all on one compiled step (no recompile)
        f"{s}_reused": lambda cb: list(train_seeds(graph, cfgs, hw, on_epoch=cb, batch_size=0)),
    }
    # whether the model trains on its input's nonzeros here (codesign.train.graph_data: SparseFeatures)
    sparse_input = isinstance(graph_data(graph, adjacency(graph), build_model(cfgs[0], graph, nnx.Rngs(0)))[2],
                              SparseFeatures)
    warm = [c.replace(epochs=2) for c in cfgs]  # one-time compiles (dense reference, evaluation, costing)
    train(graph, warm[0], hw)
    list(train_seeds(graph, warm, hw, batch_size=None))
    list(train_seeds(graph, warm, hw, batch_size=1))
    list(train_seeds(graph, warm, hw, batch_size=0))
    runs = {name: [] for name in modes}
    names = list(modes)
    for r in range(args.repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:  # rotated order: no mode always first
            runs[name].append(_timed(modes[name], epochs))
            t = runs[name][-1]
            print(f"repeat {r} {name:>14s}: {t['wall_s']:7.2f} s  cpu {t['cpu_s']:7.2f} s  epoch {t['epoch_ms']:6.2f} ms  "
                  f"overhead {t['overhead_s']:6.2f} s  load {t['load_1min']:.2f}", file=sys.stderr, flush=True)
    med = {name: {k: statistics.median(t[k] for t in ts) for k in ("wall_s", "epoch_ms", "overhead_s", "cpu_s")}
           for name, ts in runs.items()}
    spread = {name: {k: [min(t[k] for t in ts), max(t[k] for t in ts)] for k in ("wall_s", "cpu_s")}
              for name, ts in runs.items()}
    one = med["1"]["wall_s"]
    out = {
        "what": f"{args.model} on {args.dataset}, default config ({epochs} epochs), hw {args.hw}: 1 seed vs {s} seeds "
                f"in one program (train_seeds: vmapped, or mapped one after the other) vs {s} seeds sequential "
                f"(train each), one process",
        "config": cfgs[0].flat(), "sparse_input": sparse_input, "seeds": s, "epochs": epochs, "repeats": args.repeats,
        "median": med, "min_max": spread,
        "ratio_vmap_to_one": med[f"{s}_vmap"]["wall_s"] / one,
        "ratio_sequential_to_one": med[f"{s}_sequential"]["wall_s"] / one,
        "ratio_mapped_to_one": med[f"{s}_mapped"]["wall_s"] / one,
        "ratio_reused_to_one": med[f"{s}_reused"]["wall_s"] / one,
        # the same by process CPU seconds (all threads): less moved by other processes on a shared machine
        "cpu_ratio_to_one": {name: med[name]["cpu_s"] / med["1"]["cpu_s"] for name in med if name != "1"},
        "target_ratio": 2.0,
        # what `codesign train --seeds` runs here (train_seeds' batch_size="auto", codesign.train.loop.SEED_BATCH)
        "cli_mode": {None: f"{s}_vmap", 0: f"{s}_reused", 1: f"{s}_mapped"}.get(SEED_BATCH.get(jax.default_backend())),
        "runs": runs,
        "load_1min": {"min": min(t["load_1min"] for ts in runs.values() for t in ts),
                      "max": max(t["load_1min"] for ts in runs.values() for t in ts)},
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "backend": jax.default_backend(),
                    "devices": [str(d) for d in jax.devices()], "jax": jax.__version__},
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_json_atomic(args.out, out)
    print(f"{s} vmap / 1 = {out['ratio_vmap_to_one']:.2f}x, {s} sequential / 1 = "
          f"{out['ratio_sequential_to_one']:.2f}x, {s} mapped / 1 = {out['ratio_mapped_to_one']:.2f}x, "
          f"{s} reused / 1 = {out['ratio_reused_to_one']:.2f}x "
          f"(median wall, load {out['load_1min']['min']:.2f}-{out['load_1min']['max']:.2f}) -> {args.out}")
    return out


if __name__ == "__main__":
    main()
