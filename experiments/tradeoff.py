"""The accuracy-vs-cost tradeoff of issues 7 and 22: methods x models x hardware x cost levels x seeds.

    python experiments/tradeoff.py                              # Cora; GCN, GAT, GraphSAGE; 3 seeds; GRID_METHODS
    python experiments/tradeoff.py --dataset wordnet --epochs 300 --measure
    python experiments/tradeoff.py --models gcn --measure --part 1/3   # seed 0 of the Cora GCN grid, measured
    python experiments/tradeoff.py --budgets 0.1,0.2            # budget mode instead of cost weights
    python experiments/tradeoff.py --quick                      # CI smoke run (GCN, 1 seed, 3 epochs, measured)

Methods (`codesign.experiment.PAPER_METHODS`; the default ``--methods`` is `GRID_METHODS`):

  dense         FP32, no masks: the reference every cost is divided by.
  codesign      the flagship (`codesign.experiment.FLAGSHIP`): learned edge gates under an L0 pressure,
                self-distilled from the dense model of the same architecture; input-feature and hidden-channel
                gates; learned per-tensor bit-widths from 8 bits with ranges pinned to the data max and a
                bit penalty; the epoch chosen on the validation objective; the target's modeled cost in the
                loss. Settings chosen on validation accuracy by experiments/select_flagship.py (Cora's
                choice everywhere, except where `FLAGSHIP_BY_DATASET` holds a dataset's or a model's own).
  codesign_a2q  the same with A2Q-style per-node bit-widths on node features.
  codesign_no_* the flagship with one ingredient dropped (edges, features, bits, distill): the ablation.
  codesign_v1   the joint method of issue 7 (no distillation, learned ranges, no bit penalty; per-tensor
                gate Adam).
  codesign_int8, edge_only, quant_only, codesign_cpu: earlier co-design variants (run when named).
  ugs_int8      UGS-style iterative magnitude pruning of edges and weights with rewinding
                (`codesign.baselines.ugs.ugs_prune`, Chen et al. ICML 2021), trained with INT8 fake
                quantization; one point per pruning round. GCN only (UGS's trainer is a GCN).
  degree_quant  Degree-Quant INT4 (Tailor et al., ICLR 2021).
  a2q           A2Q (Zhu et al., ICLR 2023) as our quantizer supports it: per-node learned widths, pinned
                ranges, a bit penalty, no hardware cost.
  int8, int4    uniform quantization-aware training.
  random_edges  FP32 on a random ``keep`` fraction of the edges (one point per ``--keeps`` level);
  random_edges_distill  the same, distilled from the dense model of the full graph.
  dropedge      DropEdge 0.5 (Rong et al., ICLR 2020): all edges at inference, so dense cost.

The codesign and ablation families are trained once per hardware target (the cost in their loss is
that target's); baselines do not see the hardware, so each is trained once and its hardened model
costed on every target. Every (model, method, level, seed) gives one record per target in
``results/<dataset>_tradeoff.jsonl``, appended atomically with the full config and the code version
as soon as the run finishes (resumable: finished runs are skipped, an interrupted run restarts from
scratch). A record's key is `codesign.experiment.run_key` of its resolved `TrainConfig`, dataset,
target, grid level outside the config (keep, round, training target) and the cost-model and
reference versions (`record_key`): a method renamed or re-chosen to the same training keeps its
records, a change of the cost model makes every key new (re-price the stored records with
``experiments/migrate_records.py`` instead of retraining). Each
record holds test / validation accuracy, the modeled cost of the hardened model and of the dense FP32
model on that target, and both per-stage breakdowns (`codesign.hwmodel.CostReport.breakdown`).
With ``--measure`` every model trained on the full graph that `codesign.deploy` compiles (GCN; GraphSAGE-mean
and GAT with fixed or no quantization) is also deployed (`codesign.deploy.measure_model`,
as ``codesign sweep --measure`` of experiments/realized_savings.py) and timed next to the dense FP32
program on this CPU: ``measured``, ``dense_measured``, ``modeled_local``, ... (`MEASURED_METHODS_SKIP`
are not). ``python -m paper_figures`` draws the fronts and writes results/summary.{md,json} from it.

Datasets: Planetoid (cora, citeseer, pubmed), ``wordnet`` (`codesign.data.load_wordnet`, 117,659 nodes) or
``wordnet-lsa`` (the same graph with 128 dense LSA features, `codesign.data.load_wordnet_lsa`; its host
model, GraphSAGE-256, in `HOST_MODELS`: ``--models sage``).

Parts (``--part K/N``): the plan is seed-major, so ``--part K/3`` of a 3-seed grid is seed K-1 of every
(model, method, level): a finished part is a whole grid at one seed, and parts 1..K at K seeds.
What a part costs on 2 cores, alone (Cora: wall time of whole grid commands, 2026-11-25 evening;
the totals are ESTIMATES from those per-run rates; WordNet: train_time_s of single runs):
  Cora GCN, one seed, GRID_METHODS: the flagship and codesign_a2q ~16 s a run with --measure (36 runs
    at 2 cost weights x 3 targets x 3 seeds took 9.5 min), 24 runs each (8 cost weights x 3 targets);
    the 4 ablations 96 runs; the baselines with UGS's 8 rounds ~2.5 min: ~45 min a seed (estimate).
  Cora GAT / GraphSAGE, one seed: the flagship ~26 s a run (48 runs took 21 min), codesign_a2q 93-125 s
    a run (train_time_s), the baselines ~1.2 min: ~1.7 h each with the ablations (estimate), so all of
    Cora ~4.2 h a seed, ~12.5 h for 3 (estimate).
  WordNet GCN, one seed, --epochs 100 (measured 2026-11-25 as train_time_s, beside a niced Cora run):
    dense 49 s, INT8 61 s, Degree-Quant 77 s, A2Q 443 s, the flagship and its ablations 285-294 s
    (without learned bits 145 s) a run (--measure not included); at 7 cost weights the 42 runs of the
    co-design family ~3.4 h, the 84 ablation runs ~6.8 h, the baselines ~20 min: ~10.5 h a seed
    (estimate from those). GAT on WordNet does not fit this machine's budget (one GAT epoch: see
    experiments/wordnet_baselines.py).
  WordNet GCN, one seed, --epochs 300 (the grid's setting since 2026-11-26: dense reaches 70.6 %
    there, 65.8 % at 100; train_time_s, 2 cores shared by 3-4 such runs): dense 164 s (alone), INT8
    337 s, INT4 345 s, Degree-Quant 409 s, DropEdge 335 s, random edges 267 s, A2Q 2,433 s, the
    flagship 1,471-2,207 s a run: the 48-run co-design family alone is ~17 h (estimate), so split it
    by --hws / --cost-weights / --part.
  WordNet GCN since 2026-11-29 (the flagship, A2Q and Degree-Quant train on the input's nonzeros,
    `codesign.models.GCN.takes_sparse_input`; alone: flagship epoch 3.8 s -> 0.37 s, Degree-Quant
    1.3 s -> 0.16 s), 5 seeds a point, two grid commands sharing the 2 cores (train_time_s a seed):
    dense 48-56 s at 200 epochs, 96 s at 400; the flagship 108-136 s at 200 epochs; with three
    commands: the flagship 270-368 s at 400, INT8 138-199 s at 400, dense 327 s at 800, 449-462 s
    at 1600 (WordNet's dense validation accuracy still rose at 1600: docs/log/results.md, 2026-11-29).

With ``--budgets`` the codesign family is trained in budget mode (``TrainConfig.budget``: at most
that fraction of the dense model's modeled cost, a Lagrange multiplier enforces it) instead of at
fixed cost weights.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Optional

# numpy / scipy's OpenBLAS on one thread before numpy loads, as experiments/realized_savings.py: the
# measured programs (--measure) then run as there; each measured record says so (``blas_threads``)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from codesign.experiment import DISTILL as DISTILL_BASELINE  # noqa: E402
from codesign.experiment import PAPER_METHODS as METHODS  # noqa: E402

HWS = ("h100", "gnnear", "hygcn")
MODELS = ("gcn", "gat", "sage")
DATASETS = ("cora", "citeseer", "pubmed", "wordnet", "wordnet-lsa")
HOST_MODELS: dict[str, dict] = {
    "wordnet-lsa/sage": dict(hidden=256, dropout=0.2, aggr="mean", lr=0.03, weight_decay=0.0)}
"""Per ``"dataset/model"`` scope, the `TrainConfig` flat fields every method of that scope starts from
(under the method's own overrides and its candidate): the host model chosen on validation accuracy for
the dataset. ``wordnet-lsa/sage``: GraphSAGE-256 (mean aggregator), dropout 0.2, step 0.03, no weight
decay, chosen over GraphSAGE 64 / 128, GCN-256 and GAT 8x8 / 8x32 on one seed each, then 5 seeds
(docs/log/wordnet_lsa.md: with `MODEL_DEFAULTS`' decay 5e-4 and dropout 0.5 it underfits at 63.7 %).
A scope not listed starts from `MODEL_DEFAULTS` (the Cora settings of each model's paper)."""
COST_WEIGHTS = (0.1, 0.3, 1.0, 2.0, 2.5, 3.0, 5.0, 10.0)
"""The codesign family's cost weights: 0.1, 2 and 5 were added when the front between 1 and 10 had
two points, 2.5 where Cora GCN's flagship front falls off between 2 and 3 (docs/results.md)."""
KEEPS = (0.3, 0.5, 0.7)
UGS_ROUNDS = 8
GRID_METHODS = ("dense", "codesign", "codesign_a2q", "int8", "int4", "degree_quant", "a2q", "ugs_int8", "random_edges",
                "random_edges_distill", "dropedge", "codesign_no_edges", "codesign_no_features", "codesign_no_bits",
                "codesign_no_distill")
"""The methods of the paper's grid (the default ``--methods``): the flagship, its A2Q variant, every
baseline of issue 22 and the flagship's one-ingredient ablations. The other `PAPER_METHODS`
(``codesign_v1``, ``codesign_int8``, ``edge_only``, ``quant_only``, ``codesign_cpu``) run when named."""
CANDIDATES: dict[str, tuple[dict, ...]] = {
    "dense": (tuple(dict(select="best_val", lr=lr, weight_decay=wd) for lr in (0.01, 0.005) for wd in (5e-4, 5e-3))
              + tuple(dict(select="best_val", lr=0.01, weight_decay=wd, epochs=400) for wd in (5e-4, 5e-3))
              + (dict(select="best_val", lr=0.01, weight_decay=5e-3, epochs=800),
                 dict(select="best_val", lr=0.01, weight_decay=5e-4, epochs=800),
                 dict(select="best_val", lr=0.01, weight_decay=5e-4, epochs=1600),
                 dict(select="best_val", lr=0.01, weight_decay=5e-4, epochs=3200),
                 dict(select="best_val", lr=0.01, weight_decay=5e-3, epochs=1600),
                 dict(select="best_val", lr=0.01, weight_decay=5e-3, epochs=3200))
              + tuple(dict(select="best_val", lr=0.01, weight_decay=0.0, epochs=e) for e in (800, 1600, 3200))
              + tuple(dict(select="best_val", lr=0.03, weight_decay=0.0, epochs=e) for e in (1600, 3200))),
    "ugs_int8": tuple(dict(lr=lr, weight_decay=wd) for lr in (0.008, 0.01) for wd in (8e-5, 5e-4)),
    **{m: tuple(dict(select="best_val", lr=lr, **d) for lr in (0.01, 0.005)
                for d in ({}, DISTILL_BASELINE)) + (dict(select="best_val", lr=0.01, weight_decay=0.0),
                                                    dict(select="best_val", lr=0.03, weight_decay=0.0))
       for m in ("int8", "int4", "degree_quant", "a2q", "random_edges", "dropedge")},
}
"""Each baseline's own small search (issue 34: the same tuning treatment as the flagship), chosen on
validation accuracy by ``paper_figures/summary.py``: 6 `TrainConfig` override sets per method, on
top of the method's own, every one with the epoch chosen on validation (``select="best_val"``, as
the flagship). The dense FP32 reference tries two step sizes x two weight decays at the grid's
epochs, then the step size 0.01 with both decays at 400, 800, 1600 and 3200 epochs, then without
weight decay at 800, 1600 and 3200 (candidates 12-14: a one-seed WordNet probe without decay at 800
epochs validated above the 3200-epoch reference with decay 5e-4), then the step size 0.03 without decay
at 1600 and 3200 (candidates 15-16: WordNet's candidate 14 still kept epochs in the last tenth of
3200; a larger step reaches the plateau in fewer epochs than doubling them would; indices in
the order the candidates were added, so stored records keep theirs): each longer budget was added
when the references' selected epochs sat at the end of the shorter one, and a reference whose
seeds still keep an epoch in the last tenth of training is reported as not shown converged
(``paper_figures/summary.py``; the history, with its numbers, is in docs/log/results.md and
results/dense_convergence_cora_gcn.json). So the reference may train up to 16x as long as every
other method: a stronger reference, never a weaker one; an explicit ``--epochs`` overrides it; the
quantized and edge-dropping baselines two step sizes x with / without self-distillation from the dense model
(``DISTILL_BASELINE``, the flagship's mechanism), then (candidate 4) the step size 0.01 without weight
decay, the dense search's best setting on WordNet, and (candidate 5) the step size 0.03 without decay,
the host model's setting on wordnet-lsa (`HOST_MODELS`), which every other candidate's step would
undercut there; UGS (its own trainer, best-validation epoch of each round built in) UGS's Cora step
size and weight decay (0.008, 8e-5) and this package's GCN defaults
(0.01, 5e-4), crossed. Methods not listed (the co-design family: its cost weights are its levels,
its settings chosen by experiments/select_flagship.py on 16 candidates) have one candidate."""
MEASURED_METHODS_SKIP = ("random_edges", "random_edges_distill", "ugs_int8")
"""Methods whose records ``--measure`` leaves unmeasured: their models are not trained on the full
graph by `codesign.train.train` (a random subgraph; UGS's own trainer), so `codesign.deploy.measure_model`
has no hardened model of the full graph to deploy. A configuration `codesign.deploy` cannot compile
(Degree-Quant's quantizer; GraphSAGE or GAT with learned bit-widths) is not measured either
(`deployable`)."""


def deployable(cfg, graph) -> bool:
    """Whether `codesign.deploy` compiles the model ``cfg`` trains on ``graph``
    (`codesign.deploy.check_deployable`, asked before training)."""
    from codesign.deploy import NotDeployableError, check_deployable
    try:
        check_deployable(cfg, graph)
    except NotDeployableError:
        return False
    return True


@dataclasses.dataclass(frozen=True)
class Job:
    """One training run: it yields one record per hardware target in ``hws``."""

    model: str
    method: str
    level: Optional[float]
    seed: int
    hws: tuple
    train_hw: Optional[str] = None  # the target in the loss (codesign family), else None
    candidate: int = 0  # index into CANDIDATES[method] (0 where the method has none)


def candidates(method: str) -> tuple[dict, ...]:
    """The `TrainConfig` override sets of ``method``'s search (`CANDIDATES`; one empty set if none)."""
    return CANDIDATES.get(method, ({},))


def level_name(method: str, budget_mode: bool) -> Optional[str]:
    """The config field a method's level goes into: cost_weight / budget / keep / round."""
    kind = METHODS[method].levels
    if kind == "cost":
        return "budget" if budget_mode else "cost_weight"
    return kind


def record_config(job: Job, hw: str, dataset: str, epochs: Optional[int], budget_mode: bool) -> dict:
    """The labels of one record (method, level, target; its key is `record_key`)."""
    cfg = {"experiment": "tradeoff", "dataset": dataset, "model": job.model, "method": job.method, "hw": hw,
           "cost_weight": 0.0, "budget": None, "keep": None, "round": None, "seed": job.seed, "epochs": epochs,
           "trained_for_hw": job.train_hw, "candidate": job.candidate}
    name = level_name(job.method, budget_mode)
    if name is not None:
        cfg[name] = job.level
    return cfg


def plan(models, methods, hws, seeds, levels: dict) -> list[Job]:
    """Every job of the grid, seed-major (every job of seed 0, then of seed 1, ...; within a seed in
    ``models`` then ``methods`` order, then the method's `candidates`), so that a leading part of it
    (`part`) is a whole grid at fewer seeds. ``levels``: ``{"cost": [...], "keep": [...], "round": [...]}``;
    ugs_int8 is one job per seed and candidate whose rounds 0..max are its points (``level`` = last round)."""
    jobs = []
    for seed in range(seeds):
        for model in models:
            for method in methods:
                m = METHODS[method]
                if m.models is not None and model not in m.models:
                    continue
                for c in range(len(candidates(method))):
                    if m.levels == "cost":
                        jobs += [Job(model, method, lv, seed, (hw,), hw, c) for hw in hws for lv in levels["cost"]]
                    elif m.levels == "keep":
                        jobs += [Job(model, method, lv, seed, tuple(hws), None, c) for lv in levels["keep"]]
                    elif m.levels == "round":
                        jobs.append(Job(model, method, levels["round"], seed, tuple(hws), None, c))
                    else:
                        jobs.append(Job(model, method, None, seed, tuple(hws), None, c))
    return jobs


def points_of(jobs: list[Job]) -> list[list[Job]]:
    """``jobs`` grouped into points (every field but the seed equal), in order of first appearance:
    a point's seeds are trained together (`codesign.train.train_seeds`)."""
    out: dict = {}
    for j in jobs:
        out.setdefault(dataclasses.replace(j, seed=0), []).append(j)
    return list(out.values())


def part(jobs: list, k: int, n: int) -> list:
    """The ``k``-th of ``n`` slices of ``jobs`` (`codesign.experiment.take_part`). With the seed-major
    `plan` and ``n`` = the number of seeds, part ``k`` is seed ``k - 1`` of the whole grid.

    Raises:
      ValueError: not ``1 <= k <= n``.
    """
    from codesign.experiment import take_part
    return take_part(jobs, k, n)


def record_key(job: Job, hw: str, dataset, epochs, budget_mode) -> str:
    """The key of ``job``'s record on ``hw``: `codesign.experiment.run_key` of its resolved
    `TrainConfig` (`train_config`), dataset and target, plus the grid fields that are no
    `TrainConfig` field (random kept fraction, UGS round, the target it was trained for); the
    method's name is a label in the record's config, not identity."""
    from codesign.experiment import run_key
    config = record_config(job, hw, dataset, epochs, budget_mode)
    extra = {k: config[k] for k in ("keep", "round", "trained_for_hw") if config.get(k) is not None}
    return run_key(dataset, hw, train_config(job, dataset, epochs, budget_mode), **extra)


def job_keys(job: Job, dataset, epochs, budget_mode) -> list[str]:
    """Keys of every record ``job`` writes (ugs_int8: one per round and target; `record_key`)."""
    if job.method == "ugs_int8":
        return [record_key(dataclasses.replace(job, level=k), hw, dataset, epochs, budget_mode)
                for k in range(int(job.level) + 1) for hw in job.hws]
    return [record_key(job, hw, dataset, epochs, budget_mode) for hw in job.hws]


def train_config(job: Job, dataset: str, epochs, budget_mode: bool):
    """The `TrainConfig` of ``job`` on ``dataset`` (the method's `Method.overrides_for` it)."""
    from codesign.train import TrainConfig
    over = {**HOST_MODELS.get(f"{dataset}/{job.model}", {}), **METHODS[job.method].overrides_for(dataset, job.model),
            **candidates(job.method)[job.candidate]}
    name = level_name(job.method, budget_mode)
    if name in ("cost_weight", "budget"):
        over[name] = job.level
    if epochs is not None:
        over["epochs"] = epochs
    return TrainConfig.for_model(job.model, seed=job.seed, **over)


def _costs(model, graph, hw, cfg, locality, densities=None) -> dict:
    """Modeled cost of ``model`` (hardened, on the full ``graph``) and of the dense FP32 model, each
    with its features stored as ``hw`` runs them cheaper where the model can read them CSR
    (`codesign.train.store_costs`, `codesign.train.workload_inputs`)."""
    from codesign.train import cheapest_cost, dense_cost, workload_inputs
    inputs = workload_inputs(cfg, graph, locality)
    extra = {} if densities is None else {"densities": densities}
    rep = cheapest_cost(model, graph.n_nodes, graph.n_edges, hw, inputs, objective=cfg.cost.objective, **extra)[1]
    ref = dense_cost(cfg, graph, hw, inputs)
    return {"modeled": rep.summary(), "dense_modeled": ref.summary(), "breakdown": rep.breakdown(hw),
            "dense_breakdown": ref.breakdown(hw)}


def run_job(job: Job, graph, dataset: str, epochs, budget_mode: bool,
            measure: Optional[dict] = None) -> list[tuple[Job, str, dict]]:
    """Trains ``job`` on ``graph`` (the graph of ``dataset``) and returns ``[(job of the point, hw name, result fields)]``.

    ``measure``: ``{"reps", "locality"}`` to deploy a model trained on the full graph and time it next to the
    dense FP32 program on this machine (`codesign.deploy.measure_model`, priced by the ``cpu_numpy`` preset: the
    fields ``measured``, ``dense_measured``, ``modeled_local``, ... of every record of the job); None,
    `MEASURED_METHODS_SKIP` and configurations `deploy` cannot compile (`deployable`) are not measured."""
    from flax import nnx

    from codesign import hwmodel
    from codesign.hwmodel import presets
    from codesign.train import build_model, train
    cfg = train_config(job, dataset, epochs, budget_mode)
    targets = [presets.get(h) for h in job.hws]
    if METHODS[job.method].levels == "keep":  # random edge removal at the kept fraction, with the method's loss
        from codesign.sparsify import random_edge_removal
        import jax
        from codesign.train import dense_teacher
        keep = np.asarray(random_edge_removal(jax.random.key(job.seed), graph.n_edges, job.level))
        # distilled: from the dense teacher of the full graph, as the learned masks are (experiments/sparsify_quant.py)
        teacher = dense_teacher(graph, cfg, targets[0])[0] if cfg.distill.weight > 0 else None
        r = train(graph.keep_edges(keep), cfg, targets[0], teacher_logits=teacher)
        locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
        shell = build_model(cfg, graph, nnx.Rngs(0))  # fp32, no masks: the cost depends on shapes only
        dens = {"edge": float(keep.sum()) / graph.n_edges}
        common = _accuracy_fields(r)
        return [(job, hw.name, {**common, **_costs(shell, graph, hw, cfg, locality, dens), "densities": dens})
                for hw in targets]
    if job.method == "ugs_int8":
        from codesign.models import GCN
        from codesign.baselines.ugs import ugs_prune
        locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
        kw = {} if epochs is None else {"epochs": epochs}
        rounds = ugs_prune(graph, int(job.level), seed=job.seed, hidden=cfg.model.hidden, bits=8, hw=targets[0], net="gcn",
                           lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay, **kw)
        shell = GCN(graph.n_features, cfg.model.hidden, graph.n_classes, bits=8, rngs=nnx.Rngs(0))
        out = []
        for rec in rounds:
            dens = {"edge": rec["kept_edges"] / graph.n_edges, "feature": 1.0}
            fields = {"test_accuracy": rec["test_accuracy"], "val_accuracy": rec["val_accuracy"],
                      "densities": dens, "weight_sparsity": rec["weight_sparsity"], "bits": 8,
                      "train_time_s": rec["time_s"]}
            point = dataclasses.replace(job, level=rec["round"])
            out += [(point, hw.name, {**fields, **_costs(shell, graph, hw, cfg, locality, dens)}) for hw in targets]
        return out
    return list(run_point([job], graph, dataset, epochs, budget_mode, measure))


def run_point(jobs: list[Job], graph, dataset: str, epochs, budget_mode: bool,
              measure: Optional[dict] = None):
    """`run_job` of the seeds of one point (`points_of`): random-keep and UGS jobs one after the
    other, any other method's seeds together in one compiled program (`codesign.train.train_seeds`:
    each seed's record as that seed trained alone, to float rounding). Yields ``(job, hw name,
    result fields)`` per record as soon as its seed is finished, so a stop loses only the seed in
    training."""
    from codesign.hwmodel import presets
    from codesign.train import train_seeds
    job = jobs[0]
    if METHODS[job.method].levels in ("keep", "round"):
        for j in jobs:
            yield from run_job(j, graph, dataset, epochs, budget_mode, measure)
        return
    cfgs = [train_config(j, dataset, epochs, budget_mode) for j in jobs]
    targets = [presets.get(h) for h in job.hws]
    measuring = measure is not None and job.method not in MEASURED_METHODS_SKIP and deployable(cfgs[0], graph)
    for j, r in zip(jobs, train_seeds(graph, cfgs, targets[0], also_cost=targets[1:], return_model=measuring)):
        common = {**_accuracy_fields(r), "densities": r["densities"], "layer_bits": r["layer_bits"],
                  "tiles": r["tiles"], "multiplier": r["multiplier"], "selected_epoch": r["selected_epoch"],
                  **{k: r[k] for k in ("feature_nnz_kept",) if k in r}}
        if measuring:
            from codesign.deploy import measure_model
            common.update(measure_model(r.pop("model"), graph, presets.get("cpu_numpy"), reps=measure["reps"],
                                        locality=measure["locality"]), measured_on="cpu")
        for hw in targets:
            yield j, hw.name, {**common, **r["by_hw"][hw.name]}


def _accuracy_fields(r: dict) -> dict:
    return {k: r[k] for k in ("test_accuracy", "val_accuracy", "train_accuracy", "bits", "train_time_s") if k in r}


def summarize(records: list[dict]) -> list[dict]:
    """One row per (model, hw, method, level): seeds, test accuracy mean / std, mean energy and
    latency of the hardened model relative to the dense FP32 model."""
    groups: dict = {}
    for r in records:
        c = r["config"]
        method = c["method"]
        kind = METHODS[method].levels
        field = ("budget" if c.get("budget") is not None else "cost_weight") if kind == "cost" else kind
        level = None if field is None else c[field]
        groups.setdefault((c["model"], c["hw"], method, level, c.get("candidate", 0)), []).append(r)
    rows = []
    for (model, hw, method, level, cand), rs in groups.items():
        acc = np.array([r["test_accuracy"] for r in rs])
        ratio = lambda f: float(np.mean([r["modeled"][f] / r["dense_modeled"][f] for r in rs]))
        meas = [r for r in rs if "measured" in r]
        rows.append(dict(model=model, hw=hw, method=method, level=level, candidate=cand, seeds=len(rs),
                         test_accuracy=float(acc.mean()), test_accuracy_std=float(acc.std(ddof=1)) if len(acc) > 1 else 0.0,
                         energy_ratio=ratio("energy_j"), latency_ratio=ratio("latency_s"),
                         measured_speedup=float(np.mean([r["dense_measured"]["latency_s"] / r["measured"]["latency_s"]
                                                         for r in meas])) if meas else None))
    order = {m: i for i, m in enumerate(METHODS)}
    rows.sort(key=lambda r: (r["model"], r["hw"], order[r["method"]], -1 if r["level"] is None else r["level"],
                             r["candidate"]))
    return rows


def _floats(text: str, name: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",") if v.strip()]
    except ValueError as err:
        raise SystemExit(f"--{name}: not a comma-separated list of numbers: {text!r}") from err
    if not vals:
        raise SystemExit(f"--{name}: empty list")
    return vals


def _names(text: str, allowed, name: str) -> list[str]:
    vals = [v.strip() for v in text.split(",") if v.strip()]
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        raise SystemExit(f"--{name}: unknown {bad or 'empty'}; choose from {list(allowed)}")
    return vals


def load_graph(dataset: str):
    """The `Graph` of ``dataset`` (`codesign.data.load_dataset`): WordNet 3.0, with bag-of-words or LSA
    features, or a Planetoid graph.

    Raises:
      SystemExit: ``dataset`` not in `DATASETS`.
    """
    if dataset not in DATASETS:
        raise SystemExit(f"--dataset: unknown {dataset!r}; choose from {list(DATASETS)}")
    from codesign.data import load_dataset
    return load_dataset(dataset)


def main(argv=None) -> list[dict]:
    from codesign.hwmodel import presets
    from codesign.experiment import GridPoint, parse_part, run_grid
    from codesign.results import ResultsStore
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="cora", help=f"one of {', '.join(DATASETS)}")
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--methods", default=",".join(GRID_METHODS), help="default: GRID_METHODS")
    p.add_argument("--hws", default=",".join(HWS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--cost-weights", default=",".join(map(str, COST_WEIGHTS)))
    p.add_argument("--budgets", default=None, help="budget mode for the codesign family, e.g. 0.1,0.2")
    p.add_argument("--keeps", default=",".join(map(str, KEEPS)), help="random_edges kept fractions")
    p.add_argument("--ugs-rounds", type=int, default=UGS_ROUNDS)
    p.add_argument("--candidates", type=int, default=None,
                   help="only the first N of each method's CANDIDATES (default: all)")
    p.add_argument("--candidate-ids", default=None,
                   help="only these indices into each method's CANDIDATES, e.g. 4,7 (default: all)")
    p.add_argument("--epochs", type=int, default=None, help="override every model's epochs")
    p.add_argument("--out", default="results")
    p.add_argument("--part", default=None, help="K/N: only the K-th of N contiguous slices of the seed-major plan")
    p.add_argument("--measure", action="store_true", help="deploy every model trained on the full graph that "
                   "codesign.deploy compiles and time it "
                   "next to the dense FP32 program on this CPU (codesign.deploy.measure_model)")
    p.add_argument("--reps", type=int, default=20, help="with --measure: timed inferences of each program")
    p.add_argument("--quick", action="store_true", help="smoke run: GCN; dense, codesign, ugs_int8 (round 0), "
                   "random_edges_distill; 2 targets, 1 seed, 3 epochs, measured (2 reps)")
    args = p.parse_args(argv)
    if args.quick:
        args.models, args.methods, args.hws = "gcn", "dense,codesign,ugs_int8,random_edges_distill", "h100,gnnear"
        args.seeds, args.epochs, args.cost_weights, args.keeps, args.ugs_rounds = 1, 3, "1", "0.5", 0
        args.measure, args.reps, args.candidates = True, 2, 1
    models = _names(args.models, MODELS, "models")
    methods = _names(args.methods, METHODS, "methods")
    hws = _names(args.hws, presets.names(), "hws")
    if args.seeds < 1 or args.ugs_rounds < 0 or args.reps < 1 or (args.candidates is not None and args.candidates < 1):
        raise SystemExit("--seeds, --reps and --candidates must be >= 1 and --ugs-rounds >= 0")
    try:
        which = parse_part(args.part)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    budget_mode = args.budgets is not None
    levels = {"cost": _floats(args.budgets if budget_mode else args.cost_weights, "budgets" if budget_mode
                              else "cost-weights"),
              "keep": _floats(args.keeps, "keeps"), "round": args.ugs_rounds}
    if budget_mode and not all(0 < b <= 1 for b in levels["cost"]):
        raise SystemExit(f"--budgets: each must be a fraction in (0, 1], got {levels['cost']}")
    if not all(0 < k <= 1 for k in levels["keep"]):
        raise SystemExit(f"--keeps: each must be in (0, 1], got {levels['keep']}")
    ids = None if args.candidate_ids is None else set(_floats(args.candidate_ids, "candidate-ids"))
    if ids is not None and not all(i >= 0 and i == int(i) for i in ids):
        raise SystemExit(f"--candidate-ids: each must be an integer >= 0, got {sorted(ids)}")
    graph = load_graph(args.dataset)
    name = f"{args.dataset}_tradeoff{'_budget' if budget_mode else ''}{'_quick' if args.quick else ''}"
    store = ResultsStore(Path(args.out) / f"{name}.jsonl")
    jobs = plan(models, methods, hws, args.seeds, levels)
    if args.candidates is not None:
        jobs = [j for j in jobs if j.candidate < args.candidates]
    if args.candidate_ids is not None:
        jobs = [j for j in jobs if j.candidate in ids]
    if which is not None:
        jobs = part(jobs, *which)
    keys_of = {j: job_keys(j, args.dataset, args.epochs, budget_mode) for j in jobs}
    measure = None
    if args.measure:  # the graph's locality once for every measured run
        from codesign.hwmodel import measure_locality
        measure = {"reps": args.reps, "locality": measure_locality(graph.senders, graph.receivers, graph.n_nodes)}

    def runner(group):
        def run():
            for point, hw, fields in run_point(group, graph, args.dataset, args.epochs, budget_mode, measure):
                config = record_config(point, hw, args.dataset, args.epochs, budget_mode)
                cfg = train_config(point, args.dataset, args.epochs, budget_mode)
                yield (record_key(point, hw, args.dataset, args.epochs, budget_mode), {**config, "train": cfg.flat()},
                       fields)
        return run

    # the one grid runner (`codesign sweep`'s too): a point's seeds together, each record as it finishes
    done = store.done_keys()  # a point interrupted mid-way trains only its seeds still missing
    points = [GridPoint(tuple(k for j in group for k in keys_of[j]), runner(group))
              for group in points_of([j for j in jobs if not all(k in done for k in keys_of[j])])]
    try:
        run_grid(store, points, desc="tradeoff")
    except ValueError as err:  # a results file of other cost-model versions
        raise SystemExit(str(err)) from None
    wanted = {k for keys in keys_of.values() for k in keys}
    latest = {r["key"]: r for r in store.records()}  # a later record replaces an earlier one of its key
    rows = summarize([r for k, r in latest.items() if k in wanted])
    print(f"\n{'model':6s}{'hw':8s}{'method':22s}{'level':>7s}{'cand':>5s}{'seeds':>6s}{'test acc %':>16s}{'energy':>9s}"
          f"{'latency':>9s}{'measured x':>11s}")
    for r in rows:
        lv = "" if r["level"] is None else f"{r['level']:g}"
        ms = "" if r["measured_speedup"] is None else f"{r['measured_speedup']:.2f}"
        print(f"{r['model']:6s}{r['hw']:8s}{r['method']:22s}{lv:>7s}{r['candidate']:5d}{r['seeds']:6d}"
              f"{100 * r['test_accuracy']:10.2f} +-{100 * r['test_accuracy_std']:4.2f}"
              f"{r['energy_ratio']:9.4f}{r['latency_ratio']:9.4f}{ms:>11s}")
    return rows


if __name__ == "__main__":
    main()
