"""UGS-style baseline on Cora GCN: iterative magnitude pruning of adjacency and weights with
rewinding (`codesign.baselines.ugs.ugs_prune`; Chen et al., ICML 2021), x seeds.

    python experiments/ugs_baseline.py                    # 8 rounds (weight sparsity 83 %), 3 seeds
    python experiments/ugs_baseline.py --rounds 8 --seeds 5
    python experiments/ugs_baseline.py --quick            # smoke run: 1 round, 1 seed, 5 epochs
    python experiments/ugs_baseline.py --pruning random   # control: random subsets, same schedule
    python experiments/ugs_baseline.py --net gcn          # codesign's GCN instead of UGS's net_gcn

Writes one record per (seed, round) to ``results/<dataset>_gcn_ugs.jsonl`` as each round finishes
(appended atomically by `codesign.results.ResultsStore`, with the config and the code version).
Resumable: a seed whose rounds are all stored is skipped; a partly done seed is rerun (its rounds
depend on each other) and only its missing rounds are appended. Prints mean +- std over seeds per
round: measured graph / weight sparsity, test accuracy of the fixed-mask retraining (best
validation epoch), modeled energy on ``--hw`` vs the dense GCN, and UGS-counted MACs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np


def _key(config_key, cfg: dict, seed: int, k: int) -> str:
    return config_key({**cfg, "seed": seed, "round": k})


def summarize(records: list[dict]) -> list[dict]:
    """Per round: ``seeds``, means of the sparsities / ratios, test accuracy mean and std."""
    rows = []
    for k in sorted({r["round"] for r in records}):
        rs = [r for r in records if r["round"] == k]
        acc = np.array([r["test_accuracy"] for r in rs])
        rows.append(dict(round=k, seeds=len(rs), graph_sparsity=float(np.mean([r["graph_sparsity"] for r in rs])),
                         weight_sparsity=float(np.mean([r["weight_sparsity"] for r in rs])),
                         test_accuracy=float(acc.mean()), test_accuracy_std=float(acc.std()),
                         energy_ratio=float(np.mean([r["energy_ratio"] for r in rs])),
                         ugs_macs_ratio=float(np.mean([r["ugs_macs_ratio"] for r in rs]))))
    return rows


def main(argv=None) -> list[dict]:
    from tqdm import tqdm

    from codesign.data import load_planetoid
    from codesign.hwmodel import presets
    from codesign.experiment import make_record
    from codesign.results import ResultsStore, config_key
    from codesign.baselines.ugs import NETS, PRUNINGS, UGS_CORA, UGS_MASK_NOISE, ugs_prune
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora")
    p.add_argument("--hw", default="h100")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--first-seed", type=int, default=0,
                   help="run seeds first-seed .. seeds-1 only (e.g. the rest of a run split over machines)")
    p.add_argument("--epochs", type=int, default=UGS_CORA["epochs"])
    p.add_argument("--hidden", type=int, default=UGS_CORA["hidden"])
    p.add_argument("--net", choices=NETS, default="ugs",
                   help="ugs: UGS's net_gcn (no bias, hidden-only dropout, torch init); gcn: codesign's GCN")
    p.add_argument("--mask-noise", type=float, default=UGS_MASK_NOISE,
                   help="relative noise of the all-one soft masks (UGS: 1e-5; 0 = ties broken by index)")
    p.add_argument("--pruning", choices=PRUNINGS, default="ugs",
                   help="ugs: prune the smallest trained masks; random: random subsets on the same schedule (control)")
    p.add_argument("--out", default="results")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 round, 1 seed, 5 epochs")
    args = p.parse_args(argv)
    rounds, seeds, epochs = (1, 1, 5) if args.quick else (args.rounds, args.seeds, args.epochs)
    graph, hw = load_planetoid(args.dataset), presets.get(args.hw)
    cfg = dict(dataset=args.dataset, hw=args.hw, method="ugs" if args.pruning == "ugs" else "ugs_random",
               epochs=epochs, hidden=args.hidden,
               **{k: v for k, v in UGS_CORA.items() if k not in ("epochs", "hidden")},
               net=args.net, mask_noise=args.mask_noise)
    store = ResultsStore(Path(args.out) / f"{args.dataset}_gcn_ugs{'_quick' if args.quick else ''}.jsonl")
    done = store.done_keys()
    todo = [s for s in range(args.first_seed, seeds)
            if any(_key(config_key, cfg, s, k) not in done for k in range(rounds + 1))]
    print(f"{len(todo)} seeds to run, results in {store.path}", file=sys.stderr)
    bar = tqdm(total=len(todo) * (rounds + 1), desc="ugs rounds", unit="round")

    def on_round(rec):
        key = _key(config_key, cfg, rec["seed"], rec["round"])
        if key not in done:
            store.append(make_record(key, cfg, rec))
        bar.update(1)
        bar.set_postfix(seed=rec["seed"], acc=f"{rec['test_accuracy']:.3f}", wsp=f"{rec['weight_sparsity']:.2f}")

    for seed in todo:
        ugs_prune(graph, rounds, seed=seed, epochs=epochs, hw=hw, hidden=args.hidden, net=args.net,
                  mask_noise=args.mask_noise, pruning=args.pruning, on_round=on_round)
    bar.close()
    recs = [r for r in store.records() if r.get("config") == cfg and r["seed"] < seeds and r["round"] <= rounds]
    rows = summarize(recs)
    print(f"\n{'round':>5s}{'seeds':>6s}{'graph sp':>9s}{'weight sp':>10s}{'test acc %':>16s}{'energy':>8s}{'UGS MACs':>9s}")
    for r in rows:
        print(f"{r['round']:5d}{r['seeds']:6d}{100 * r['graph_sparsity']:8.2f}%{100 * r['weight_sparsity']:9.2f}%"
              f"{100 * r['test_accuracy']:10.2f} +-{100 * r['test_accuracy_std']:4.2f}{r['energy_ratio']:8.3f}"
              f"{r['ugs_macs_ratio']:9.3f}")
    return rows


if __name__ == "__main__":
    main()
