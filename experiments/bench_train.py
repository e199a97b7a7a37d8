"""``python experiments/bench_train.py``: full-batch training speed and peak memory of codesign's GCN and GAT
next to PyG 2.x (CPU torch, in its own virtual environment) on the same graphs, in one run, in
two PyG configurations; speedups are quoted against the faster one (the best a PyG user would do).

What is measured (both sides, same definitions):
  * epoch: one full-batch training step = forward + backward + Adam update (with L2 weight
    decay), dropout active. ``epoch_s``: wall time of each timed epoch (``time.perf_counter``;
    codesign waits with `jax.block_until_ready`, torch on CPU is synchronous).
  * compile: codesign's ``jax.jit`` trace + lower + compile time, measured apart
    (``compile_s``, ahead-of-time ``.lower().compile()``); ``first_step_s`` is the first
    execution after it (PyG: the first epoch, which includes its warm-up). Neither is in the
    per-epoch median.
  * memory: ``peak_mib`` = peak resident set size (VmHWM) over the timed epochs minus the RSS
    after imports and after the graph is in the framework's arrays (``baseline_rss_mib``); the
    high-water mark is reset (``/proc/self/clear_refs``) at the baseline and after the first
    epoch, so the peak covers model, optimizer state, per-graph structures built after the
    baseline (codesign's `CsrPattern`, PyG's CSR ``adj_t``) and the largest transient of an
    epoch, not the compiler.
    ``peak_first_step_mib`` is the same over the first epoch (XLA compilation included);
    ``resident_after_first_step_mib`` the RSS left after it (model, optimizer state, compiled
    code), over the same baseline.
    Each (graph, model, side or configuration) runs in a fresh subprocess.
  * repetition: ``rounds`` rounds; in each, every configuration runs both sides back to back
    (order alternating between rounds), so background load hits both alike. Medians pool the
    epochs of all rounds; the per-round speedups are reported too.

Models (same hyper-parameters on both sides): GCN (Kipf & Welling 2017): 2 layers, hidden 16 on
Cora, 64 on R-MAT and WordNet, 256 on csbm-products, dropout 0.5, lr 0.01, weight decay 5e-4 (all
weights). GraphSAGE (Hamilton et al. 2017; PyG's ``SAGEConv`` defaults: neighbour mean plus a root
weight, one bias): the same widths (64 on Cora), dropout and optimizer. GAT
(Veličković et al. 2018): 8 heads x 8 hidden, 1 output head (averaged), dropout 0.6 on inputs and
attention, lr 0.005, weight decay 5e-4. Graphs (`build_graph`): Cora (public split); an R-MAT
graph (scale 17: 131,072 nodes, 2,033,118 directed edges after symmetrization and
de-duplication, 64 N(0,1) features, 8 random classes, 60 % train nodes); WordNet 3.0
(`codesign.data.load_wordnet`: 117,659 synsets, 367,578 directed edges after symmetrization,
2,000 binary bag-of-words features, 45 classes, 60/20/20 stratified split); csbm-products
(`codesign.data.load_csbm_products`: ogbn-products' shape, 2,449,029 nodes, 123,718,280 directed
edges, 100 dense features, 47 classes; ``--csbm-nodes`` scales it). Every graph reaches
the children the same way (`save_graph_npz`, features dense and uncompressed).

codesign's side either attaches a `codesign.kernels.CsrPattern` to the adjacency (impl "auto", the
default: aggregation with ``impl="auto"`` then runs scipy's CSR kernel on CPU where the product is
large enough, and GAT its CSR path) or not (impl "segment": XLA gather + segment_sum only).
The PyG side is ``experiments/bench_pyg_child.py``, run by the venv's python, in the
configurations ``PYG_CONFIGS`` (details in its docstring):
  * ``pyg``: ``GCNConv`` / ``GATConv`` on ``edge_index`` (PyG's examples; normalization on every
    call, gather + scatter aggregation).
  * ``pyg_csr``: what PyG's "Memory-Efficient Aggregations" guide recommends on CPU: a sparse
    ``adj_t`` (torch CSR, ``torch_geometric.utils.to_torch_csr_tensor(edge_index.flip(0))``; this
    venv has no torch_sparse) with ``GCNConv(..., cached=True)`` (normalization once, then
    ``torch.sparse.mm``); GAT: ``GATConv`` on the same ``adj_t``.
Each result entry keeps both (``pyg``); ``speedup``, ``round_speedups`` and ``memory_ratio``
compare with ``pyg_best``, the configuration with the lower median s/epoch. Check: GCN's
first-epoch loss must agree across the configurations to `FIRST_LOSS_RTOL` (same initial weights
and node-dropout masks), else the run stops; GAT's is only reported (its attention-dropout masks
follow each layout's edge order; without dropout the two agree, tests/test_bench_train.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "experiments"):  # codesign, and the PyG child beside this script
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench_pyg_child import CONFIGS as PYG_CONFIGS  # noqa: E402
from bench_pyg_child import peak_mib, reset_peak, rss_mib, run_child  # noqa: E402  one memory definition, both sides

GRAPHS = ("cora", "rmat", "wordnet", "csbm-products")
MODELS = ("gcn", "gat", "sage")
IMPLS = ("auto", "segment")
DEFAULT_EPOCHS = {"cora": 50, "rmat": 10, "wordnet": 10, "csbm-products": 3}
LARGE_GRAPHS = ("csbm-products",)
"""Graphs of ogbn-products' scale: hidden 256 (OGB's full-batch GCN and GraphSAGE baselines, Hu et
al. 2020, sec. 4.1), and a child killed for memory is recorded (``killed``), not fatal: that PyG
stops at some size is a result."""
FIRST_LOSS_RTOL = 1e-4
"""GCN's first-epoch loss may differ between the PyG configurations by this much (relative):
float32 sums in another order, nothing more (same weights, same dropout masks)."""
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "codesign" / "pyg-venv"
# Installed into the venv only when its python cannot import torch (the +cpu local version exists
# only as a CPU wheel, so pip fails rather than fetch a CUDA build).
TORCH_CPU_REQUIREMENT = "torch==2.13.0+cpu"
_CHILD_SCRIPT = Path(__file__).with_name("bench_pyg_child.py")


@dataclasses.dataclass(frozen=True)
class RmatSpec:
    """The R-MAT benchmark graph: `codesign.data.rmat_graph` arguments.

    Fields: scale (N = 2**scale), draws (edges drawn before symmetrization/de-duplication),
    features (F), classes (C), seed.
    """

    scale: int = 17
    draws: int = 1_100_000
    features: int = 64
    classes: int = 8
    seed: int = 0


def model_spec(graph: str, model: str) -> dict:
    """Hyper-parameters of ``model`` on ``graph`` (identical for both sides).

    Raises:
      ValueError: unknown ``graph`` or ``model``.
    """
    if graph not in GRAPHS:
        raise ValueError(f"bench train: unknown graph {graph!r}; choose from {GRAPHS}")
    if model in ("gcn", "sage"):
        hidden = 16 if graph == "cora" and model == "gcn" else 256 if graph in LARGE_GRAPHS else 64
        return {"model": model, "hidden": hidden, "heads": 1, "out_heads": 1,
                "dropout": 0.5, "lr": 0.01, "weight_decay": 5e-4}
    if model == "gat":
        return {"model": "gat", "hidden": 8, "heads": 8, "out_heads": 1, "dropout": 0.6, "lr": 0.005,
                "weight_decay": 5e-4}
    raise ValueError(f"bench train: unknown model {model!r}; choose from {MODELS}")


def n_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ------------------------------------------------------------------------------ codesign side

def run_codesign(spec: dict) -> dict:
    """One codesign training benchmark in this process (call it in a fresh one).

    Args:
      spec: ``graph_npz``, ``impl`` ("auto" | "segment"), ``epochs``, ``seed`` and the
        `model_spec` fields.

    Returns:
      ``epoch_s`` (list), ``compile_s``, ``first_step_s``, ``baseline_rss_mib``, ``peak_mib``,
      ``peak_first_step_mib``, ``peak_reset``, ``final_loss``, ``versions``.
    """
    import jax
    import jax.numpy as jnp
    import optax
    from flax import nnx

    from codesign.kernels import CooAdjacency, with_csr_pattern
    from codesign.models import GAT, GCN, GraphSAGE
    from codesign.train import Problem, TrainConfig, make_step, masked_cross_entropy, task_term

    if spec["impl"] not in IMPLS:
        raise ValueError(f"bench train: unknown impl {spec['impl']!r}; choose from {IMPLS}")
    g = np.load(spec["graph_npz"])
    n = int(g["n_nodes"])
    x, y = jnp.asarray(g["x"], jnp.float32), jnp.asarray(g["y"], jnp.int32)
    mask = jnp.asarray(g["train_mask"], bool)
    adj = CooAdjacency(jnp.asarray(g["senders"], jnp.int32), jnp.asarray(g["receivers"], jnp.int32), None, n)
    del g
    jax.block_until_ready((x, y, mask, adj))
    baseline = rss_mib()
    reset = reset_peak()

    cls = {"gcn": GCN, "gat": GAT, "sage": GraphSAGE}[spec["model"]]
    if spec["impl"] == "auto":  # per-graph host structure: counted in the training memory
        adj = with_csr_pattern(adj, self_loops=cls.SELF_LOOPS)
    seed, p, n_cls = int(spec["seed"]), float(spec["dropout"]), int(y.max()) + 1
    rngs = nnx.Rngs(params=seed, dropout=seed + 1)
    if spec["model"] in ("gcn", "sage"):
        model = cls(x.shape[1], int(spec["hidden"]), n_cls, dropout=p, rngs=rngs)
    else:
        model = GAT(x.shape[1], int(spec["hidden"]), n_cls, heads=int(spec["heads"]),
                    out_heads=int(spec["out_heads"]), dropout=p, rngs=rngs)
    model.train()
    # the toolkit's own training step (`codesign.train.make_step`, what `fit` runs each epoch):
    # Adam with L2 on every weight and bias (PyG's Adam(weight_decay=...)), no cost term
    cfg = TrainConfig.from_flat(lr=float(spec["lr"]), weight_decay=float(spec["weight_decay"]),
                                weight_decay_scope="all", epochs=int(spec["epochs"]), seed=seed)

    def forward(m, data):
        x, y, mask, adj = data
        logits = m(x, adj)
        return logits, masked_cross_entropy(logits, y, mask)

    problem = Problem((x, y, mask, adj), forward, lambda m, hard: jnp.ones((), jnp.float32))
    train_step = make_step(model, problem, cfg, [task_term], first_layer=model.FIRST_LAYER)
    state, ctrl = train_step.state, train_step.controller.init()

    t0 = time.perf_counter()
    compiled = train_step.step.lower(state, problem.data, ctrl).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, loss, _, ctrl, _ = jax.block_until_ready(compiled(state, problem.data, ctrl))
    first_step_s = time.perf_counter() - t0
    peak_first, resident = peak_mib() - baseline, rss_mib() - baseline
    reset_peak()
    epoch_s = []
    for _ in range(int(spec["epochs"])):
        t0 = time.perf_counter()
        state, loss, _, ctrl, _ = jax.block_until_ready(compiled(state, problem.data, ctrl))
        epoch_s.append(time.perf_counter() - t0)
    import flax
    import scipy
    return {"epoch_s": epoch_s, "compile_s": compile_s, "first_step_s": first_step_s, "baseline_rss_mib": baseline,
            "peak_mib": peak_mib() - baseline, "peak_first_step_mib": peak_first,
            "resident_after_first_step_mib": resident, "peak_reset": reset,
            "final_loss": float(loss),
            "versions": {"jax": jax.__version__, "flax": flax.__version__, "optax": optax.__version__,
                         "scipy": scipy.__version__, "numpy": np.__version__, "python": sys.version.split()[0]}}


# --------------------------------------------------------------------------------- PyG venv

def _venv_python(venv: Path) -> Path:
    return Path(venv) / "bin" / "python"


def pyg_versions(python: Path) -> Optional[dict]:
    """``{"torch", "torch_geometric", "torch_cuda"}`` as seen by ``python``, or None if it cannot
    import both."""
    code = ("import json, torch, torch_geometric; print(json.dumps({'torch': torch.__version__, "
            "'torch_geometric': torch_geometric.__version__, 'torch_cuda': torch.version.cuda}))")
    try:
        out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None


def ensure_pyg_venv(venv: Path, create: bool, log: Callable[[str], None] = print) -> tuple[Optional[Path], str]:
    """The python of a virtual environment that imports torch and torch_geometric.

    With ``create``, makes it if needed (idempotent): ``python -m venv --system-site-packages``
    (so a CPU torch installed beside codesign is reused), then ``pip install torch_geometric``
    (pure Python in 2.x; no torch_scatter / torch_sparse / pyg_lib extensions) with torch pinned
    to the version the venv sees by a constraints file, so pip never swaps in another torch
    build. If the venv sees no torch at all, ``TORCH_CPU_REQUIREMENT`` is installed first.

    Returns:
      ``(python, message)``; python is None (and message says why) when the PyG side cannot run.

    Raises:
      RuntimeError: ``create`` was asked and a step failed (the message has pip's output tail).
    """
    venv = Path(venv).expanduser()
    py = _venv_python(venv)
    if py.exists() and (v := pyg_versions(py)) is not None:
        return py, f"PyG venv {venv}: torch {v['torch']}, torch_geometric {v['torch_geometric']}"
    if not create:
        return None, (f"PyG side skipped: no virtual environment with torch and torch_geometric at {venv} "
                      f"(pass --create-venv to create it, or --pyg-venv PATH)")

    def run(cmd, what):
        log(f"  {what}: {' '.join(map(str, cmd))}")
        r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"bench train: {what} failed ({r.returncode}):\n{(r.stdout + r.stderr)[-3000:]}")

    log(f"creating the PyG virtual environment at {venv}")
    if not py.exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        run([sys.executable, "-m", "venv", "--system-site-packages", venv], "venv")
    torch_version = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"],
                                   capture_output=True, text=True)
    if torch_version.returncode != 0:
        run([py, "-m", "pip", "install", TORCH_CPU_REQUIREMENT], "install CPU torch")
        torch_version = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"],
                                       capture_output=True, text=True, check=True)
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(f"torch=={torch_version.stdout.strip()}\n")
    try:
        run([py, "-m", "pip", "install", "-c", f.name, "torch_geometric"], "install torch_geometric")
    finally:
        os.unlink(f.name)
    v = pyg_versions(py)
    if v is None:
        raise RuntimeError(f"bench train: {py} still cannot import torch and torch_geometric")
    return py, f"PyG venv {venv} created: torch {v['torch']}, torch_geometric {v['torch_geometric']}"


# ---------------------------------------------------------------------------------- graphs

def build_graph(name: str, data_root: Optional[str] = None, rmat: RmatSpec = RmatSpec(),
                csbm_nodes: Optional[int] = None):
    """The benchmark `Graph`: ``"cora"`` or ``"wordnet"`` (`codesign.data.load_dataset`: Cora's
    public split; WordNet 3.0 symmetrized, 2,000 bag-of-words features, 45 classes), ``"rmat"``
    (`rmat_graph` of ``rmat``) or ``"csbm-products"`` (`codesign.data.load_csbm_products`:
    ogbn-products' shape, 2,449,029 nodes and 123,718,280 directed edges; ``csbm_nodes``: the same
    generator at that many nodes, `CsbmProductsParams.scaled`, mean degree kept).

    Raises:
      ValueError: unknown name; FileNotFoundError: dataset files missing (see `load_planetoid`,
        `load_wordnet`).
    """
    if name in ("cora", "wordnet"):
        from codesign.data import load_dataset
        return load_dataset(name, root=data_root)
    if name == "csbm-products":
        from codesign.data.csbm_products import CsbmProductsParams, load_csbm_products
        return load_csbm_products(None if csbm_nodes is None else CsbmProductsParams().scaled(csbm_nodes))
    if name == "rmat":
        from codesign.data import rmat_graph
        return rmat_graph(rmat.scale, rmat.draws, n_features=rmat.features, n_classes=rmat.classes, seed=rmat.seed)
    raise ValueError(f"bench train: unknown graph {name!r}; choose from {GRAPHS}")


def save_graph_npz(graph, path: Path) -> dict:
    """Writes what both sides load (senders, receivers, x, y, train_mask, n_nodes; uncompressed,
    x dense: WordNet's 117,659 x 2,000 float32 x is 941 MB, written in ~0.5 s and read by each child
    in ~1.3 s, before its clocks start) and returns the graph's sizes: ``n_nodes``, ``n_edges``,
    ``n_features``, ``n_classes``, ``isolated_nodes``."""
    s, r = np.asarray(graph.senders), np.asarray(graph.receivers)
    np.savez(path, senders=s, receivers=r, x=np.asarray(graph.x, np.float32), y=np.asarray(graph.y),
             train_mask=np.asarray(graph.train_mask), n_nodes=np.int64(graph.n_nodes))
    deg = np.bincount(np.concatenate([s, r]), minlength=graph.n_nodes)
    return {"n_nodes": int(graph.n_nodes), "n_edges": int(s.shape[0]), "n_features": int(graph.x.shape[1]),
            "n_classes": int(np.asarray(graph.y).max()) + 1, "isolated_nodes": int((deg == 0).sum())}


# -------------------------------------------------------------------------------- the run

def _child(cmd: list, spec: dict, spec_path: Path, env: dict, tolerate_kill: bool = False) -> dict:
    """Runs one side in a fresh process; adds the 1-minute load average before and after it
    (``loadavg``: other work on the machine slows both sides, see the module docstring) and the
    process's whole-life peak RSS as the kernel accounts it (``max_rss_mib``, ``wait4``'s
    ``ru_maxrss``: loading and compiling included, no baseline subtracted).

    With ``tolerate_kill``, a child killed by SIGKILL (the kernel's out-of-memory killer) returns
    ``{"killed": True, "max_rss_mib", "loadavg"}`` instead of raising.

    Raises:
      RuntimeError: the child failed (otherwise).
    """
    spec_path.write_text(json.dumps(spec))
    load_before = os.getloadavg()[0]
    rc, stdout, stderr, max_rss = run_child([*cmd, spec_path], env)
    tail = {"max_rss_mib": max_rss, "loadavg": [load_before, os.getloadavg()[0]]}
    if rc == -signal.SIGKILL and tolerate_kill:
        return {"killed": True, **tail}
    if rc != 0:
        raise RuntimeError(f"bench train: child {cmd[0]} failed ({rc}) on {spec['model']}:\n"
                           f"{(stdout + stderr)[-3000:]}")
    return {**json.loads(stdout.strip().splitlines()[-1]), **tail}


def _summary(runs: list[dict]) -> dict:
    """Pools the epochs of all rounds: median s/epoch; per-round medians; medians of compile and
    first-step times; the largest peak over rounds (the same rule for both sides)."""
    med = lambda k: float(np.median([r[k] for r in runs]))
    out = {"epoch_s_median": float(np.median(np.concatenate([r["epoch_s"] for r in runs]))),
           "round_epoch_s_median": [float(np.median(r["epoch_s"])) for r in runs],
           "first_step_s": med("first_step_s"), "peak_mib": float(max(r["peak_mib"] for r in runs)),
           "peak_first_step_mib": float(max(r["peak_first_step_mib"] for r in runs)),
           "baseline_rss_mib": med("baseline_rss_mib"),
           "resident_after_first_step_mib": med("resident_after_first_step_mib"),
           "peak_reset": all(r["peak_reset"] for r in runs),
           "max_rss_mib": float(max(r["max_rss_mib"] for r in runs)),
           "final_loss": [r["final_loss"] for r in runs], "epoch_s": [r["epoch_s"] for r in runs],
           "loadavg": [r["loadavg"] for r in runs]}
    if "compile_s" in runs[0]:
        out["compile_s"] = med("compile_s")
    return out


def _check_first_loss(model: str, runs: dict) -> Optional[float]:
    """Largest relative difference of the first-epoch losses of one round's PyG configurations
    (``runs``: config -> child result), None with fewer than two.

    Raises:
      RuntimeError: GCN's differ by more than `FIRST_LOSS_RTOL` (the configurations would not
        train the same model). GAT's are only reported: its attention dropout draws one mask
        entry per edge in the order the layer holds its edges, which differs between
        ``edge_index`` and the CSR ``adj_t`` (same computation without dropout:
        tests/test_bench_train.py).
    """
    losses = {c: r["first_loss"] for c, r in runs.items()}
    if len(losses) < 2:
        return None
    ref = max(abs(v) for v in losses.values())
    diff = (max(losses.values()) - min(losses.values())) / max(ref, 1e-12)
    if model == "gcn" and not diff <= FIRST_LOSS_RTOL:
        raise RuntimeError(f"bench train: the PyG configurations disagree on GCN's first-epoch loss: {losses} "
                           f"(relative difference {diff:.2e} > {FIRST_LOSS_RTOL})")
    return diff


def bench_train(graphs: Sequence[str] = GRAPHS[:3], models: Sequence[str] = ("gcn", "gat"),
                impls: Sequence[str] = ("auto",), rounds: int = 3, epochs: Optional[int] = None,
                pyg_venv: Optional[Path] = DEFAULT_VENV, create_venv: bool = False,
                pyg_configs: Sequence[str] = PYG_CONFIGS,
                data_root: Optional[str] = None, rmat: RmatSpec = RmatSpec(), seed: int = 0,
                csbm_nodes: Optional[int] = None, log: Callable[[str], None] = print) -> dict:
    """Runs the benchmark (see the module docstring) and returns its JSON-able result.

    Args:
      graphs: subset of ``GRAPHS``; models: subset of ``MODELS``; impls: codesign aggregation
        backends to time (subset of ``IMPLS``).
      rounds: repetitions (>= 1); epochs: timed epochs per run (None: ``DEFAULT_EPOCHS[graph]``).
      pyg_venv: the PyG virtual environment (None: skip the PyG side); create_venv: create it if
        missing (`ensure_pyg_venv`); pyg_configs: PyG configurations to time (subset of
        ``PYG_CONFIGS``: ``pyg`` on ``edge_index``, ``pyg_csr`` cached on a CSR ``adj_t``).
      data_root: dataset root for Cora and WordNet (None: ``$CODESIGN_DATA`` or the cache).
      rmat: the R-MAT graph. seed: model init and dropout seed (both sides).
      csbm_nodes: ``csbm-products`` at this many nodes (None: ogbn-products' 2,449,029).
      log: progress lines.

    Returns:
      dict with ``date``, ``machine`` (cpu count, platform, load averages at start and end),
      ``versions``, ``settings``, ``pyg`` (status message), ``graphs`` (sizes) and ``results``:
      one entry per (graph, model) with ``codesign`` (per impl, `_summary`), ``pyg`` (per PyG
      configuration, `_summary` plus ``first_loss``; None without the PyG side), ``pyg_best``
      (the configuration with the lowest median s/epoch), ``speedup`` (best PyG median /
      codesign median, per impl), ``speedup_per_pyg`` (per impl, per configuration),
      ``round_speedups`` and ``memory_ratio`` (codesign peak / best PyG configuration's peak),
      ``pyg_first_loss_rdiff`` (per round, `_check_first_loss`).

    Raises:
      ValueError: naming a bad argument; RuntimeError: a child run failed, or the PyG
        configurations disagree on GCN (`_check_first_loss`).
    """
    for name, vals, allowed in (("graphs", graphs, GRAPHS), ("models", models, MODELS), ("impls", impls, IMPLS),
                                ("pyg_configs", pyg_configs, PYG_CONFIGS)):
        bad = [v for v in vals if v not in allowed]
        if bad or not vals:
            raise ValueError(f"bench train: {name} must be a non-empty subset of {allowed}, got {list(vals)}")
    if rounds < 1 or (epochs is not None and epochs < 1):
        raise ValueError(f"bench train: rounds and epochs must be >= 1, got rounds={rounds}, epochs={epochs}")
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    load_start = os.getloadavg()
    pyg_py, pyg_note = (None, "PyG side disabled") if pyg_venv is None else ensure_pyg_venv(pyg_venv, create_venv, log)
    log(pyg_note)
    threads = n_cpus()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    sides = [("codesign", impl) for impl in impls] + ([("pyg", c) for c in pyg_configs] if pyg_py else [])
    runs, rdiffs, killed = {}, {}, {}
    with tempfile.TemporaryDirectory(prefix="codesign_bench_train_") as tmp:
        sizes = {}
        for gname in graphs:
            sizes[gname] = save_graph_npz(build_graph(gname, data_root, rmat, csbm_nodes), Path(tmp) / f"{gname}.npz")
            log(f"graph {gname}: {sizes[gname]}")
        for rnd in range(rounds):
            for gname in graphs:
                for model in models:
                    base = {**model_spec(gname, model), "graph_npz": str(Path(tmp) / f"{gname}.npz"),
                            "epochs": epochs or DEFAULT_EPOCHS[gname], "seed": seed, "threads": threads}
                    for side, conf in (sides if rnd % 2 == 0 else sides[::-1]):
                        key = (gname, model, side, conf)
                        if key in killed:  # out of memory once: the same run would be again
                            continue
                        if side == "pyg":
                            cmd, spec = [pyg_py, _CHILD_SCRIPT], {**base, "config": conf}
                        else:
                            cmd, spec = [sys.executable, Path(__file__).resolve(), "child"], {**base, "impl": conf}
                        r = _child(cmd, spec, Path(tmp) / "spec.json", env, tolerate_kill=gname in LARGE_GRAPHS)
                        name = f"round {rnd + 1}/{rounds} {gname} {model} {'codesign/' if side == 'codesign' else ''}{conf}"
                        if r.get("killed"):
                            killed[key] = r
                            log(f"{name}: killed (out of memory) at {r['max_rss_mib']:.0f} MiB")
                            continue
                        runs.setdefault(key, []).append(r)
                        log(f"{name}: {np.median(r['epoch_s']):.4f} s/epoch, peak {r['peak_mib']:.0f} MiB "
                            f"(process {r['max_rss_mib']:.0f} MiB), load {r['loadavg'][0]:.1f}-{r['loadavg'][1]:.1f}")
                    d = _check_first_loss(model, {c: runs[(gname, model, "pyg", c)][-1]
                                                  for side, c in sides if side == "pyg" and (gname, model, side, c) in runs})
                    if d is not None:
                        rdiffs.setdefault((gname, model), []).append(d)
                        log(f"round {rnd + 1}/{rounds} {gname} {model}: PyG configurations' first-epoch losses "
                            f"differ by {d:.1e} (relative)")
    results, versions = [], {}
    for gname in graphs:
        for model in models:
            entry = {"graph": gname, "model": model, **model_spec(gname, model), "codesign": {}, "pyg": None,
                     "pyg_best": None, "speedup": {}, "speedup_per_pyg": {}, "round_speedups": {},
                     "memory_ratio": {}, "pyg_first_loss_rdiff": rdiffs.get((gname, model))}
            pyg_runs = {c: runs[(gname, model, "pyg", c)] for side, c in sides
                        if side == "pyg" and (gname, model, side, c) in runs}
            entry["killed"] = {f"{side}/{c}": {"max_rss_mib": r["max_rss_mib"]}
                               for (g, m, side, c), r in killed.items() if (g, m) == (gname, model)}
            if pyg_runs:
                entry["pyg"] = {c: {**_summary(rs), "first_loss": [r["first_loss"] for r in rs]}
                                for c, rs in pyg_runs.items()}
                entry["pyg_best"] = min(entry["pyg"], key=lambda c: entry["pyg"][c]["epoch_s_median"])
                versions.update(next(iter(pyg_runs.values()))[0]["versions"])
            for impl in impls:
                if (gname, model, "codesign", impl) not in runs:
                    continue
                cs = runs[(gname, model, "codesign", impl)]
                versions.update({k: v for k, v in cs[0]["versions"].items() if k != "python"})
                entry["codesign"][impl] = s = _summary(cs)
                if entry["pyg"]:
                    p = entry["pyg"][entry["pyg_best"]]
                    entry["speedup"][impl] = p["epoch_s_median"] / s["epoch_s_median"]
                    entry["speedup_per_pyg"][impl] = {c: q["epoch_s_median"] / s["epoch_s_median"]
                                                      for c, q in entry["pyg"].items()}
                    entry["round_speedups"][impl] = [a / b for a, b in zip(p["round_epoch_s_median"],
                                                                           s["round_epoch_s_median"])]
                    entry["memory_ratio"][impl] = s["peak_mib"] / p["peak_mib"] if p["peak_mib"] > 0 else None
            results.append(entry)
    return {"date": started, "versions": {**versions, "python": sys.version.split()[0]},
            "machine": {"cpu_count": threads, "platform": platform.platform(), "processor": platform.processor(),
                        "loadavg_start": list(load_start), "loadavg_end": list(os.getloadavg())},
            "settings": {"rounds": rounds, "epochs": {g: epochs or DEFAULT_EPOCHS[g] for g in graphs},
                         "impls": list(impls), "pyg_configs": list(pyg_configs) if pyg_py else [], "seed": seed,
                         "rmat": dataclasses.asdict(rmat), "csbm_nodes": csbm_nodes, "threads": threads},
            "pyg": pyg_note, "graphs": sizes, "results": results}


def format_table(result: dict) -> str:
    """The result as a text table: one row per (graph, model, codesign impl); a column per PyG
    configuration; speedup, its per-round range and the memory ratio against the fastest PyG
    configuration (``best``)."""
    confs = result["settings"].get("pyg_configs") or list(PYG_CONFIGS)
    head = (f"{'graph':7s} {'model':5s} {'impl':8s} {'codesign s/ep':>13s} "
            + " ".join(f"{c + ' s/ep':>12s}" for c in confs)
            + f" {'best':>7s} {'speedup':>8s} {'rounds':>11s} {'compile s':>9s} {'cs MiB':>7s} {'PyG MiB':>8s}"
              f" {'mem ratio':>9s}")
    lines = [head, "-" * len(head)]
    nan = float("nan")
    for e in result["results"]:
        pyg = e["pyg"] or {}
        best = pyg.get(e["pyg_best"]) if e["pyg_best"] else None
        for impl, s in e["codesign"].items():
            sp, mr = e["speedup"].get(impl), e["memory_ratio"].get(impl)
            rs = e["round_speedups"].get(impl) or []
            lines.append(
                f"{e['graph']:7s} {e['model']:5s} {impl:8s} {s['epoch_s_median']:13.4f} "
                + " ".join(f"{pyg[c]['epoch_s_median'] if c in pyg else nan:12.4f}" for c in confs)
                + f" {e['pyg_best'] or '-':>7s} {sp if sp else nan:7.2f}x "
                  f"{(f'{min(rs):.2f}-{max(rs):.2f}x' if rs else '-'):>11s} {s['compile_s']:9.2f} "
                  f"{s['peak_mib']:7.0f} {best['peak_mib'] if best else nan:8.0f} {mr if mr else nan:9.2f}")
    return "\n".join(lines)


def _names(s: str) -> list[str]:
    return [v.strip() for v in s.split(",") if v.strip()]


def _positive_int(s: str) -> int:
    v = int(s)
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _json_path(s: str) -> str:
    """``-`` (stdout) or a file that can be written (checked before the benchmark runs)."""
    if s != "-":
        if os.path.isdir(s):
            raise argparse.ArgumentTypeError(f"{s!r} is a folder")
        probe = os.path.dirname(os.path.abspath(s))
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if not os.path.isdir(probe) or not os.access(probe, os.W_OK | os.X_OK):
            raise argparse.ArgumentTypeError(f"{s!r}: {probe!r} is a file or not writable")
    return s


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="experiments/bench_train.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH", type=_json_path,
                   help="without PATH: print one JSON object instead of a table; with PATH: also write the result "
                        "there (atomically)")
    p.add_argument("--graphs", default=",".join(GRAPHS[:3]), help=f"comma-separated, from {', '.join(GRAPHS)}")
    p.add_argument("--models", default="gcn,gat", help=f"comma-separated, from {', '.join(MODELS)}")
    p.add_argument("--csbm-nodes", type=_positive_int, default=None,
                   help="csbm-products at this many nodes (default: ogbn-products' 2,449,029)")
    p.add_argument("--impls", default="auto",
                   help="codesign side(s), comma-separated: auto (CsrPattern attached: scipy CSR where faster), "
                        "segment (XLA segment_sum only)")
    p.add_argument("--rounds", type=_positive_int, default=3, help="interleaved repetitions of every configuration")
    p.add_argument("--epochs", type=_positive_int, default=None,
                   help="timed epochs per run (default: cora 50, rmat 10, wordnet 10, csbm-products 3)")
    p.add_argument("--pyg-venv", default=str(DEFAULT_VENV), help="virtual environment with torch_geometric")
    p.add_argument("--create-venv", action="store_true", help="create --pyg-venv if it is missing")
    p.add_argument("--no-pyg", action="store_true", help="codesign side only")
    p.add_argument("--pyg-configs", default=",".join(PYG_CONFIGS),
                   help="PyG side(s), comma-separated: pyg (edge_index), pyg_csr (GCNConv(cached=True) / GATConv on "
                        "a torch CSR adj_t); speedups are against the fastest")
    p.add_argument("--data-root", default=None, help="folder holding planetoid/ (Cora) and wordnet/")
    p.add_argument("--rmat-scale", type=_positive_int, default=17, help="R-MAT graph with 2**scale nodes")
    p.add_argument("--rmat-draws", type=_positive_int, default=1_100_000,
                   help="R-MAT edges drawn (before symmetrizing)")
    p.add_argument("--rmat-features", type=_positive_int, default=64, help="R-MAT feature width")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``child SPEC.json``: one codesign run (`run_codesign`) printed as one JSON line; otherwise the
    benchmark (`bench_train`) with the flags of `build_parser`, printed as a table (`format_table`)
    or JSON. Bad input is one line and status 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["child"]:
        if len(argv) != 2:
            print("usage: python experiments/bench_train.py child SPEC.json", file=sys.stderr)
            return 2
        print(json.dumps(run_codesign(json.loads(Path(argv[1]).read_text()))))
        return 0
    from codesign.results import write_json_atomic
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # --help (0) or a flag error, already printed (2)
        return e.code if isinstance(e.code, int) else 0
    to_stdout = args.json == "-"
    log = (lambda s: print(s, file=sys.stderr)) if to_stdout else print
    try:
        result = bench_train(graphs=_names(args.graphs), models=_names(args.models), impls=_names(args.impls),
                             rounds=args.rounds, epochs=args.epochs,
                             pyg_venv=None if args.no_pyg else Path(args.pyg_venv).expanduser(),
                             create_venv=args.create_venv, pyg_configs=_names(args.pyg_configs),
                             data_root=args.data_root,
                             rmat=RmatSpec(scale=args.rmat_scale, draws=args.rmat_draws, features=args.rmat_features),
                             csbm_nodes=args.csbm_nodes, log=log)
    except (ValueError, OSError) as e:
        print(f"bench_train.py: error: {e}", file=sys.stderr)
        return 2
    if to_stdout:
        print(json.dumps(result))
        return 0
    print(format_table(result))
    if args.json:
        write_json_atomic(args.json, result)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
