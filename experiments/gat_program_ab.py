"""GATConv through its vertex program ("program", `codesign.models.GAT`) against the hand-written
forward it replaced ("hand": main c96fa98's `GATConv.__call__`, copied below), in ONE process with
alternating epochs, so both sides see the same machine load (the shared 2-core host's load moves
cross-process timings by 2x). Training step = forward + backward + Adam of the paper's 2-layer GAT
(8 heads x 8, dropout and attention dropout 0.6), full batch; the same parameters and data.

    OMP_NUM_THREADS=1 python experiments/gat_program_ab.py --graph cora --impl auto --reps 30

``--impl``: the attention backend of both sides ("auto": `codesign.kernels.auto_impl`; "csr":
scipy's CSR kernels, the adjacency carrying a `CsrPattern` of edges + self-loops; "reference":
XLA gather + segment ops). Prints (and with ``--out`` appends to a JSON list) the median of
per-epoch times of each side, their min / max, the median of the paired ratios program / hand,
the same for the process CPU time of each epoch (all threads: less moved by other processes'
load than wall time), XLA's temp bytes of each compiled step, and the load before and after. ``--vs-impl B``: the
"hand" side is the program with ``impl=B`` instead (backend against backend).
Run it with one XLA thread (``XLA_FLAGS=--xla_cpu_multi_thread_eigen=false``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from codesign.graph import add_self_loops
from codesign.kernels import CooAdjacency, CsrPattern, aggregate, csr_spmm, gat_aggregate, with_csr_pattern
from codesign.models import GAT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vertex_layers_bench import _load_graph  # noqa: E402


def _edge_attention(senders, receivers, n, s_src, s_dst, slope, sorted_=False):
    z = s_dst[receivers] + s_src[senders]
    e = jnp.where(z > 0, z, slope * z)
    seg = dict(num_segments=n, indices_are_sorted=sorted_)
    m = jax.ops.segment_max(e, receivers, **seg)
    m = jax.lax.stop_gradient(jnp.where(jnp.isfinite(m), m, 0.0))
    p = jnp.exp(e - m[receivers])
    d = jax.ops.segment_sum(p, receivers, **seg)
    return p / jnp.where(d > 0, d, 1.0)[receivers]


def hand_conv(conv, x, loops, dropout, mode):
    """c96fa98's `GATConv.__call__` without edge gates or a channel gate (the benchmark has none)."""
    n = x.shape[0]
    x = dropout(conv.quant_x(x))
    h = (x @ conv.quant_w(conv.kernel[...])).reshape(n, conv.heads, conv.out_features)
    s_src, s_dst = jnp.sum(h * conv.att_src[...], -1), jnp.sum(h * conv.att_dst[...], -1)
    active = not conv.attn_dropout.deterministic and conv.attn_dropout.rate > 0
    if mode == "csr":
        p = loops.pattern
        alpha = _edge_attention(p.indices, p.rows, n, s_src, s_dst, conv.negative_slope, True)
        out = csr_spmm(p, conv.attn_dropout(alpha), h)
    elif not active:
        out = gat_aggregate(loops, h, s_src, s_dst, negative_slope=conv.negative_slope, impl=mode)
    else:
        alpha = conv.attn_dropout(_edge_attention(loops.senders, loops.receivers, n, s_src, s_dst,
                                                  conv.negative_slope))
        heads = conv.heads
        offs = jnp.arange(heads, dtype=loops.senders.dtype)
        a = CooAdjacency((loops.senders[:, None] * heads + offs).reshape(-1),
                         (loops.receivers[:, None] * heads + offs).reshape(-1), alpha.reshape(-1), n * heads)
        out = aggregate(a, h.reshape(n * heads, -1)).reshape(h.shape)
    out = out.reshape(n, -1) if conv.concat else out.mean(axis=1)
    return out + conv.bias[...]


def hand_gat(m, x, adj):
    s, r = add_self_loops(adj.senders, adj.receivers, adj.n_nodes)
    loops = CooAdjacency(s, r, None, adj.n_nodes, adj.pattern if isinstance(adj.pattern, CsrPattern) else None)
    h = jnp.zeros((adj.n_nodes, m.conv1.heads, m.conv1.out_features))
    mode = m.conv1.attention_backend(loops, h)
    h = jax.nn.elu(hand_conv(m.conv1, x, loops, m.dropout, mode))
    return hand_conv(m.conv2, h, loops, m.dropout, mode)


def _commit() -> str:
    """The checkout's commit (``git describe --always --dirty``), or "" outside a git checkout."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--graph", default="cora", choices=("cora", "rmat15"))
    ap.add_argument("--impl", default="auto", choices=("auto", "csr", "reference"))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--vs-impl", choices=("csr", "reference"),
                    help="instead of the hand-written side, the program on this backend (a CsrPattern attached)")
    ap.add_argument("--out")
    a = ap.parse_args()
    load = [os.getloadavg()]
    g = _load_graph(a.graph)
    adj = CooAdjacency(g.senders, g.receivers, None, g.n_nodes)
    if a.impl in ("auto", "csr") or a.vs_impl:
        adj = with_csr_pattern(adj, self_loops=True)
    m = GAT(g.n_features, 8, g.n_classes, heads=8, impl=a.impl, rngs=nnx.Rngs(params=0, dropout=1))
    m.train()
    if a.vs_impl:  # the same parameters, another backend
        other = GAT(g.n_features, 8, g.n_classes, heads=8, impl=a.vs_impl, rngs=nnx.Rngs(params=0, dropout=1))
        other.train()
        hand = lambda mm, x, ad: nnx.merge(nnx.graphdef(other), nnx.state(mm))(x, ad)
    else:
        hand = hand_gat
    y, mask = g.y, g.train_mask.astype(jnp.float32)
    steps, states, temps = {}, {}, {}
    for side, fwd in (("hand", hand), ("program", lambda mm, x, ad: mm(x, ad))):
        graphdef, state = nnx.split((m, nnx.Optimizer(m, optax.adam(0.005), wrt=nnx.Param)))

        def step(state, x, adj, graphdef=graphdef, fwd=fwd):
            mm, opt = nnx.merge(graphdef, state)

            def loss_fn(mm):
                ce = optax.softmax_cross_entropy_with_integer_labels(fwd(mm, x, adj), y)
                return jnp.sum(ce * mask) / jnp.maximum(mask.sum(), 1.0)
            loss, grads = nnx.value_and_grad(loss_fn)(mm)
            opt.update(mm, grads)
            return nnx.state((mm, opt)), loss

        compiled = jax.jit(step).lower(state, g.x, adj).compile()
        steps[side], states[side] = compiled, state
        temps[side] = int(compiled.memory_analysis().temp_size_in_bytes)
        for _ in range(2):
            states[side], loss = compiled(states[side], g.x, adj)
        jax.block_until_ready(loss)
    times, cpu = {"hand": [], "program": []}, {"hand": [], "program": []}
    for i in range(a.reps):
        for side in (("hand", "program") if i % 2 == 0 else ("program", "hand")):
            t0, c0 = time.perf_counter(), time.process_time()
            states[side], loss = steps[side](states[side], g.x, adj)
            jax.block_until_ready(loss)
            times[side].append(time.perf_counter() - t0)
            cpu[side].append(time.process_time() - c0)
    load.append(os.getloadavg())
    ratios = [p / h for p, h in zip(times["program"], times["hand"])]
    cpu_ratios = [p / h for p, h in zip(cpu["program"], cpu["hand"])]
    row = {"graph": a.graph, "impl": a.impl, "hand_side": a.vs_impl and f"program impl={a.vs_impl}", "reps": a.reps, "n_nodes": int(g.n_nodes), "n_edges": int(g.n_edges),
           **{f"{s}_s_median": statistics.median(t) for s, t in times.items()},
           **{f"{s}_s_min": min(t) for s, t in times.items()}, **{f"{s}_s_max": max(t) for s, t in times.items()},
           "paired_ratio_median": statistics.median(ratios), "paired_ratio_min": min(ratios),
           "paired_ratio_max": max(ratios),
           **{f"{s}_cpu_s_median": statistics.median(t) for s, t in cpu.items()},
           "paired_cpu_ratio_median": statistics.median(cpu_ratios), "paired_cpu_ratio_min": min(cpu_ratios),
           "paired_cpu_ratio_max": max(cpu_ratios), "temp_bytes": temps, "loadavg_before_after": load,
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "commit": _commit()}
    print(json.dumps(row))
    if a.out:
        rows = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else []
        Path(a.out).write_text(json.dumps(rows + [row], indent=1) + "\n")


if __name__ == "__main__":
    main()
