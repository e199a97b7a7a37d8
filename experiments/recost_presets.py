"""Price stored design points on other presets: the reductions a dataset's records give on each.

    python experiments/recost_presets.py --dataset wordnet-lsa --trained-for h100 --to h100,h200,h200-datasheet

Each record of ``results/<dataset>_tradeoff.jsonl`` trained for ``--trained-for`` is re-priced on every
preset of ``--to`` by `migrate_records.recost`: the same model (its stored kept fractions and
bit-widths), and the best dense reference of the same architecture on that preset, through the same
cost entry point as training. The reductions (dense / design point, energy and latency) are
summarized per method, candidate and cost weight as medians over seeds. The design points were
selected for ``--trained-for``, so on another preset they show how the same networks fare there, not
what training for that preset would find. Writes ``results/<dataset>_recost.json`` atomically.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from migrate_records import recost  # noqa: E402

from codesign.data import load_dataset  # noqa: E402
from codesign.hwmodel import presets  # noqa: E402
from codesign.results import write_json_atomic  # noqa: E402


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="wordnet-lsa")
    ap.add_argument("--trained-for", default="h100")
    ap.add_argument("--to", default="h100,h200,h200-datasheet")
    ap.add_argument("--records", default=None, help="the records (default results/<dataset>_tradeoff.jsonl)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    targets = [t.strip() for t in args.to.split(",") if t.strip()]
    hws = {t: presets.get(t) for t in targets}  # unknown names fail here, listing the presets
    path = args.records or f"results/{args.dataset}_tradeoff.jsonl"
    records = [json.loads(line) for line in open(path) if line.strip()]
    graph = load_dataset(args.dataset)
    groups, dropped, cache = collections.defaultdict(list), collections.Counter(), {}
    for rec in records:
        cfg = rec.get("config") or {}
        if cfg.get("hw") != args.trained_for:
            continue
        row = {}
        for name, hw in hws.items():
            new, why = recost(rec, graph, hw, cache)
            if new is None:
                dropped[why] += 1
                row = None
                break
            row[name] = {"energy_reduction": new["dense_modeled"]["energy_j"] / new["modeled"]["energy_j"],
                         "latency_reduction": new["dense_modeled"]["latency_s"] / new["modeled"]["latency_s"]}
        if row:
            key = f"{cfg.get('method')} / candidate {cfg.get('candidate')} / cost weight {cfg.get('cost_weight')}"
            groups[key].append({"seed": cfg.get("seed"), "val_accuracy": rec["val_accuracy"], **row})
    summary = {}
    for key, rows in sorted(groups.items()):
        summary[key] = {"seeds": len(rows), "val_accuracy_mean": float(np.mean([r["val_accuracy"] for r in rows])),
                        **{t: {m: float(np.median([r[t][m] for r in rows])) for m in rows[0][t]} for t in targets}}
        print(f"{key:45s} n={len(rows)} " + "  ".join(
            f"{t}: {summary[key][t]['energy_reduction']:.2f}x energy {summary[key][t]['latency_reduction']:.2f}x latency"
            for t in targets))
    out = {"what": f"{args.dataset} records trained for {args.trained_for}, re-priced on {targets}",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "summary": summary, "dropped": dict(dropped), "runs": {k: v for k, v in sorted(groups.items())},
           "command": "python experiments/recost_presets.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    write_json_atomic(args.out or f"results/{args.dataset}_recost.json", out)
    return out


if __name__ == "__main__":
    main()
