"""Measurements behind results/graphs_generation.json: `csbm-products` generation at a given size
(time, graph statistics; peak RSS from the caller's ``/usr/bin/time -v``) and `wordnet-lsa`'s
build (uncached, gloss parsing and TF-IDF + SVD separately, cached load).

  OPENBLAS_NUM_THREADS=1 /usr/bin/time -v python experiments/graphs_generation.py csbm --nodes 2449029 --out a.json
  OPENBLAS_NUM_THREADS=1 /usr/bin/time -v python experiments/graphs_generation.py lsa --out b.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time

import numpy as np


def csbm(nodes: int) -> dict:
    from codesign.data.csbm_products import CsbmProductsParams, csbm_products_arrays
    p = CsbmProductsParams()
    p = p if nodes == p.n_nodes else p.scaled(nodes)
    t = time.perf_counter()
    a = csbm_products_arrays(p)
    gen = time.perf_counter() - t
    s, r, y, n = a["senders"], a["receivers"], a["y"], p.n_nodes
    deg = np.bincount(r, minlength=n)
    ks = np.array([k for k in (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000)])
    ccdf = [(deg >= k).mean() for k in ks]
    tail = (ks >= 50) & (ks <= 2000)
    slope = float(np.polyfit(np.log(ks[tail]), np.log(np.asarray(ccdf)[tail]), 1)[0])
    code = r.astype(np.int64) * n + s
    return dict(params=p.as_dict(), generate_s=gen, n_nodes=n, n_directed_edges=int(s.size),
                n_undirected_edges=int(s.size // 2), self_loops=int((s == r).sum()),
                sorted_unique=bool((np.diff(code) > 0).all()),
                edge_homophily=float((y[s] == y[r]).mean()),
                degree=dict(mean=float(deg.mean()), median=float(np.median(deg)), max=int(deg.max()),
                            min=int(deg.min()), isolated=int((deg == 0).sum()),
                            p90=float(np.percentile(deg, 90)), p99=float(np.percentile(deg, 99)),
                            ccdf={int(k): float(c) for k, c in zip(ks, ccdf)}, ccdf_slope_50_2000=slope),
                class_sizes=np.bincount(y).tolist(), split=np.bincount(a["split"]).tolist(),
                bytes=dict(senders=s.nbytes, receivers=r.nbytes, x=a["x"].nbytes),
                ru_maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def lsa() -> dict:
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="lsa-cache-")  # a cold cache
    from codesign.data import wordnet as wn
    from codesign.data import wordnet_lsa as wl
    t = time.perf_counter()
    g = wl.load_wordnet_lsa()
    first = time.perf_counter() - t
    d = wn._locate(None)
    data, _ = wn._read_files(d, True)
    t = time.perf_counter()
    gl = wl._glosses(d, data)
    parse = time.perf_counter() - t
    t = time.perf_counter()
    x = wl.lsa_features(gl)
    fit = time.perf_counter() - t
    t = time.perf_counter()
    g2 = wl.load_wordnet_lsa()
    hit = time.perf_counter() - t
    same = bool(np.array_equal(np.asarray(g.x), x) and np.array_equal(np.asarray(g2.x), x))
    return dict(first_load_s=first, gloss_parse_s=parse, tfidf_svd_s=fit, cached_load_s=hit,
                shape=list(x.shape), rebuild_identical=same,
                ru_maxrss_kb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("csbm", "lsa"))
    ap.add_argument("--nodes", type=int, default=2_449_029)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    out = csbm(args.nodes) if args.what == "csbm" else lsa()
    with open(args.out, "w") as fh:
        json.dump(out, fh, indent=1)
    print(json.dumps({k: v for k, v in out.items() if k != "class_sizes"})[:1500])


if __name__ == "__main__":
    main()
