"""Realized savings: measured design points on Cora and WordNet, modeled beside measured.

Runs ``codesign sweep --measure`` (every trained GCN deployed by `codesign.deploy`, timed next to
the dense FP32 program of the same architecture on this machine, both with the faster feature
store, dense or CSR, the ``cpu_numpy`` preset's modeled latency beside) for:

* Cora, the main job's grid (feature mask + 8-bit, cost weights 0 .. 3, 3 seeds, trained against
  `h100` energy) -> ``results/cora_gcn_h100_measured.jsonl``;
* Cora, ``codesign_int8`` (feature + channel gates at INT8) trained against `h100` modeled
  *latency*, cost weights 1 and 3 -> ``results/cora_gcn_h100_codesign_int8_measured.jsonl``;
* Cora, ``codesign_cpu`` (edge, feature and channel gates, FP32, self-distilled from the dense
  GCN, trained against the latency of the ``cpu_numpy`` preset, the machine as the deployed
  program uses it, with CSR-stored features: `TrainConfig.cost.sparse_features`), cost weights
  1, 3 and 5 -> ``results/cora_gcn_cpu_numpy_codesign_cpu_measured.jsonl``;
* WordNet 3.0, ``codesign_cpu``, cost weights 1, 3, 10 and 30 (the last two close gates at an
  accuracy cost: design points that spread the latencies the model is checked on), 100 epochs
  (the WordNet baselines' budget), 1 seed -> ``results/wordnet_gcn_cpu_numpy_codesign_cpu_measured.jsonl``;

then prints, per dataset, the agreement of modeled and measured latency (`paper_figures.measured`)
and draws ``paper_figures/out/<dataset>_measured.{png,pdf}``. Every sweep is resumable.
Measured latencies are only as good as the machine is quiet: each record carries the load
average around its timing (`codesign.deploy.measure`). The script re-runs itself with glibc's
allocator told to keep its memory (`codesign.bench.MALLOC_ENV`, recorded as ``malloc_env``), as
`experiments/hwmodel_validation.py` times the kernels the model is fitted on: otherwise every
call of a WordNet program faults its fresh [117,659, 45] result in again, 4 KiB at a time, and its
time moves between 19 and 30 ms from one process to the next (2026-11-25, same program).

    python experiments/realized_savings.py            # about 30 minutes on 2 quiet cores
    python experiments/realized_savings.py --quick    # CI smoke run: Cora, 2 epochs, *_quick files
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

# numpy / scipy's OpenBLAS on one thread, before numpy loads: on this 2-vCPU VM its two threads wait
# out other tenants' time slices (the dense WordNet program: median 36.4 ms [23.1, 37.9] on two
# threads, 26.3 ms [25.1, 27.5] on one, 2026-11-25, load 0.5); both programs get the same setting,
# recorded in every record (`codesign.deploy.measure`: ``blas_threads``).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SWEEPS = [
    ["--dataset", "cora"],
    ["--dataset", "cora", "--method", "codesign_int8", "--objective", "latency_s", "--cost-weights", "1,3"],
    ["--dataset", "cora", "--hw", "cpu_numpy", "--method", "codesign_cpu", "--cost-weights", "1,3,5"],
    ["--dataset", "wordnet", "--hw", "cpu_numpy", "--method", "codesign_cpu", "--cost-weights", "1,3,10,30",
     "--seeds", "1", "--epochs", "100", "--reps", "10"],
]
"""The measured sweeps (``codesign sweep --measure`` arguments)."""


def main(argv=None) -> list[dict]:
    from codesign import cli
    from codesign.bench import reexec_with_malloc_env
    from paper_figures import measured

    if __name__ == "__main__":  # the allocator keeps its buffers, as in the kernels' validation
        reexec_with_malloc_env(__file__, sys.argv[1:] if argv is None else list(argv))

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="results", help="results folder")
    p.add_argument("--figures", default=str(Path(__file__).resolve().parents[1] / "paper_figures" / "out"),
                   help="figure folder")
    p.add_argument("--quick", action="store_true", help="CI smoke run: Cora, one cost weight, 1 seed, 2 epochs")
    args = p.parse_args(argv)
    sweeps = [["--dataset", "cora", "--cost-weights", "1", "--seeds", "1", "--epochs", "2", "--reps", "2",
               "--name", "cora_gcn_h100_measured_quick"]] if args.quick else SWEEPS
    for sweep in sweeps:
        rc = cli.main(["sweep", "--measure", *sweep, "--out", args.out])
        if rc != 0:
            raise SystemExit(f"realized_savings: codesign sweep --measure {' '.join(sweep)} failed (exit {rc})")
    out = Path(args.out)
    files = sorted(out.glob("*_measured_quick.jsonl")) if args.quick else measured.find_inputs(out)
    points = measured.load_points(files)
    rows = []
    for dataset in sorted({q["dataset"] for q in points}):
        pts = [q for q in points if q["dataset"] == dataset]
        a = measured.agreement(pts)
        best = max(pts, key=lambda q: q["speedup"])
        rows.append({"dataset": dataset, **a, "best_speedup": best["speedup"], "best_accuracy": best["accuracy"]})
        print(f"{dataset}: {a['n']} programs, Spearman {a['spearman']:.3f}, MAPE {100 * a['mape']:.1f} %, "
              f"median modeled/measured {a['median_ratio']:.3g}; largest measured speedup {best['speedup']:.2f}x "
              f"at {100 * best['accuracy']:.2f} %", file=sys.stderr)
        if not args.quick:
            measured.draw(points, Path(args.figures), dataset)
    return rows


if __name__ == "__main__":
    main()
