"""What a single-device run is built from: the model of a config, its adjacency, the dense FP32
reference cost, and the self-distillation teacher."""

from __future__ import annotations

from typing import Optional

import jax
import numpy as np
from flax import nnx

from codesign import hwmodel
from codesign.graph import Graph, feature_column_nnz
from codesign.kernels import CooAdjacency, with_csr_pattern
from codesign.models import MODELS
from codesign.quant import pin_ranges
from codesign.sparsify import BlockEdgeMask, DropEdge, EdgeScorer
from codesign.train.config import FLAT_FIELDS, TrainConfig

__all__ = ["build_model", "adjacency", "dense_cost", "dense_reference", "teacher_config", "store_costs",
           "cheapest_store", "FEATURE_STORES"]

FEATURE_STORES = ("dense", "csr")
"""How a model's input features can be stored: dense [N, F] or CSR (`store_costs`)."""


def build_model(cfg: TrainConfig, graph: Graph, rngs: nnx.Rngs, *, dense: bool = False):
    """The model of ``cfg`` for ``graph``; ``dense=True`` gives its dense FP32 reference.

    Raises:
      ValueError: a co-design option (``edge_sparsifier`` other than "edge", ``channel_mask``,
        ``quantizer`` other than "fixed") that ``cfg.model.name`` does not take.
    """
    kw = dict(n_edges=None if dense or not cfg.uses_edge_mask else graph.n_edges,
              feature_mask=False if dense else cfg.uses_feature_mask, bits=None if dense else cfg.quant.bits,
              signed_input=graph.signed_features)
    if not dense:
        if cfg.uses_edge_mask and cfg.masks.edge_sparsifier != "edge":
            kw["edge_sparsifier"] = _edge_sparsifier(cfg, graph, rngs)
        if cfg.masks.channel:
            kw["channel_mask"] = True
        if cfg.quant.quantizer != "fixed":
            kw["quantizer"] = cfg.quant.quantizer
            if cfg.quant.quantizer in ("degree", "a2q"):
                kw["in_degree"] = np.bincount(np.asarray(graph.receivers), minlength=graph.n_nodes) + 1
    for name in ("edge_sparsifier", "channel_mask", "quantizer"):
        if name in kw and not MODELS[cfg.model.name].accepts(name):
            raise ValueError(f"TrainConfig.{'.'.join(FLAT_FIELDS[name])}: model {cfg.model.name!r} does not take "
                             f"a {name}")
    model = MODELS[cfg.model.name](graph.n_features, cfg.model.hidden, graph.n_classes, dropout=cfg.model.dropout,
                                   rngs=rngs, **kw, **cfg.model.options())
    if cfg.quant.pin_ranges and not dense:  # the input quantizer keeps its learned range (TrainConfig.pin_ranges)
        pin_ranges(model, skip=(model.first_layer.quant_x,))
    return model


def _edge_sparsifier(cfg: TrainConfig, graph: Graph, rngs: nnx.Rngs):
    if cfg.masks.edge_sparsifier == "block":
        return BlockEdgeMask.from_graph(graph.senders, graph.receivers, graph.n_nodes, cfg.masks.block_size,
                                        cfg.masks.reorder,
                                        self_loops=MODELS[cfg.model.name].SELF_LOOPS, rngs=rngs)
    if cfg.masks.edge_sparsifier == "scorer":
        return EdgeScorer(graph.n_features, rngs=rngs)
    return DropEdge(graph.n_edges, cfg.masks.dropedge_rate, rngs=rngs)


def adjacency(graph: Graph, self_loops: Optional[bool] = None) -> CooAdjacency:
    """The graph's edges as a `CooAdjacency` (the models add self-loops and normalize).

    With ``self_loops`` (the model's `codesign.models.GNN.SELF_LOOPS`: whether it appends N
    self-loops before aggregating) and JAX on the CPU, a `codesign.kernels.CsrPattern` of the edges
    the model aggregates is attached (host-side, O(E log E), once per graph), so that
    ``impl="auto"`` may run scipy's CSR kernel: `codesign.kernels.auto_impl` picks it where its
    modeled cost on the CPU preset is lower than XLA's gather + segment_sum, whose [E, F] message
    buffer is what keeps a large graph (``csbm-products``: 124M edges) from training in memory.
    None: no pattern (the aggregation runs XLA's segment_sum)."""
    adj = CooAdjacency(graph.senders, graph.receivers, graph.edge_weight, graph.n_nodes)
    if self_loops is None or jax.default_backend() != "cpu":
        return adj
    return with_csr_pattern(adj, self_loops=bool(self_loops))


def prices_csr_store(cfg: TrainConfig) -> bool:
    """Whether ``cfg``'s model can read its input features stored CSR: every model but GraphSAGE
    with max aggregation (it reads its input rows dense)."""
    return not (cfg.model.name == "sage" and cfg.model.aggr == "max")


def workload_inputs(cfg: TrainConfig, graph: Graph, locality: Optional[hwmodel.LocalityProfile] = None) -> dict:
    """What a model's ``workload`` reads of ``graph`` beyond its sizes when a run is reported, as
    keyword arguments: ``locality`` (the measured `hwmodel.LocalityProfile`) and, where
    `prices_csr_store`, ``feature_nnz`` (float32 [F] nonzeros per feature column,
    `codesign.graph.feature_column_nnz`), which lets `store_costs` price the CSR store beside the
    dense one. The model's reported cost and its dense reference each take the store the target
    runs cheaper, whatever ``cfg.cost.sparse_features`` says (until 2026-11-29 only with it, so
    every grid reference was dense-stored: `codesign.experiment.REFERENCE`). What the loss prices
    is `loss_inputs`. ``locality``: the graph's profile when already measured (else measured here)."""
    if locality is None:
        locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
    inputs = {"locality": locality}
    if prices_csr_store(cfg):
        inputs["feature_nnz"] = feature_column_nnz(graph.x)
    return inputs


def loss_inputs(cfg: TrainConfig, inputs: dict) -> dict:
    """The `workload_inputs` the cost term of the loss (and a budget's feasibility check) prices:
    all of them (the CSR feature store too) with ``cfg.cost.sparse_features`` or a
    ``cfg.cost.budget`` (a budget is a fraction of the reported dense reference, so the loss prices
    as the reports do), else without ``feature_nnz``: the penalty then prices the features stored
    dense, so a stored penalty run trains as it did when it was written."""
    if cfg.cost.sparse_features or cfg.cost.budget is not None:
        return inputs
    return {k: v for k, v in inputs.items() if k != "feature_nnz"}


def store_costs(model, n_nodes: int, n_edges: int, hw: hwmodel.HardwareSpec, inputs: Optional[dict] = None, *,
                objective: str, hard: bool = True, **kw) -> dict:
    """The modeled cost of ``model`` on ``hw`` per way of storing its input features: ``{"dense":
    CostReport}`` and, when ``inputs`` holds ``feature_nnz``, ``"csr"`` (`FEATURE_STORES`; every
    model's ``workload(feature_nnz=...)``). ``inputs``: `workload_inputs`; ``kw``: further
    ``workload`` arguments (``densities``, ``bits``). ``objective``: the run's
    ``cfg.cost.objective``, by which each layer's mapping is chosen (`hwmodel.estimate`'s
    ``mapping``: an energy-objective run is priced at its least-energy mapping, on both sides).
    Traceable (the reports hold jax scalars).

    The one cost entry point of a run: the co-designed model and its dense FP32 reference are
    both priced here, and each takes the store ``hw`` runs cheaper (`cheapest_store`), so a
    reduction is never against features a target would not store dense."""
    inputs = dict(inputs or {})
    nnz = inputs.pop("feature_nnz", None)
    out = {"dense": hwmodel.estimate(model.workload(n_nodes, n_edges, hard=hard, **inputs, **kw), hw, mapping=objective)}
    if nnz is not None:
        out["csr"] = hwmodel.estimate(model.workload(n_nodes, n_edges, hard=hard, feature_nnz=nnz, **inputs, **kw), hw,
                                      mapping=objective)
    return out


def cheapest_store(costs: dict, objective: str) -> tuple:
    """``(store, CostReport)`` of the cheapest entry of `store_costs` by ``objective`` (a
    `CostReport` total: "energy_j", "latency_s", "dram_bytes"); concrete values only."""
    store = min(costs, key=lambda k: float(getattr(costs[k], objective)))
    return store, costs[store]


def cheapest_cost(model, n_nodes: int, n_edges: int, hw: hwmodel.HardwareSpec, inputs: Optional[dict] = None, *,
                  objective: str, **kw) -> tuple:
    """``(store, CostReport)``: ``model`` on ``hw`` priced by `store_costs` and the store that
    ``objective`` makes cheaper kept (`cheapest_store`), so the mapping and the store are chosen by
    the one ``objective``. Arguments as `store_costs`; concrete values only."""
    return cheapest_store(store_costs(model, n_nodes, n_edges, hw, inputs, objective=objective, **kw), objective)


def dense_reference(cfg: TrainConfig, graph: Graph, hw: hwmodel.HardwareSpec,
                    inputs: Optional[dict] = None) -> tuple:
    """``(store, CostReport)``: the modeled inference cost of the dense FP32 version of ``cfg``'s
    model on ``graph``, its features stored as ``hw`` runs them cheaper by ``cfg.cost.objective``
    (`store_costs`; ``inputs``: `workload_inputs`; None: uniform re-reference, dense features)."""
    ref = build_model(cfg, graph, nnx.Rngs(0), dense=True)
    return cheapest_cost(ref, graph.n_nodes, graph.n_edges, hw, inputs, objective=cfg.cost.objective)


def dense_cost(cfg: TrainConfig, graph: Graph, hw: hwmodel.HardwareSpec,
               inputs: Optional[dict] = None) -> hwmodel.CostReport:
    """The `CostReport` of `dense_reference`."""
    return dense_reference(cfg, graph, hw, inputs)[1]


def teacher_config(cfg: TrainConfig) -> TrainConfig:
    """The dense FP32 teacher of ``cfg``'s self-distillation: the same model, data and training
    settings, with no sparsifier, quantizer, cost term or distillation."""
    return TrainConfig(model=cfg.model, optim=cfg.optim, seed=cfg.seed)
