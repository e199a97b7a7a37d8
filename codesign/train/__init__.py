"""Full-batch co-design training: one fit loop over a sum of pure loss terms.

    config.py     `TrainConfig`: nested frozen sections (model, masks, quant, cost, optim, distill), each
                  validated where it lives; the flat names of the CLI and records (`FLAT_FIELDS`)
    objective.py  the loss terms (task, cost penalty or budget constraint, bits, edge L0, distillation)
    budget.py     the budget's PI-controlled Lagrange multiplier, an ``(init, update)`` pair
    optim.py      one optimizer over typed parameters (weights, gates, quantizer parameters)
    select.py     which epoch is evaluated (last, or best validation; cost-aware)
    build.py      the model, adjacency and dense reference cost of a config
    loop.py       `fit` (any model, any `Problem`), and `train` (one device) built on it; `fit_seeds` /
                  `train_seeds`: the seeds of one point as one vmapped program

`codesign.distributed.train_distributed` and `codesign.baselines.ugs` call `fit` with their own
forward and cost. Measured results of these settings are in docs/results.md.
"""

from codesign.train.budget import Controller, ControllerState, no_controller, pi_controller
from codesign.train.build import (adjacency, build_model, cheapest_cost, cheapest_store, dense_cost, dense_reference,
                                  loss_inputs, store_costs, teacher_config, workload_inputs)
from codesign.train.config import (DECAY_SCOPES, EDGE_SPARSIFIERS, FIELD_DOMAINS, FLAT_FIELDS, GATE_OPTIMIZERS,
                                   LEARNED_BITS, OBJECTIVES, SECTIONS, SELECTIONS, CostConfig, DistillConfig,
                                   Interval, MaskConfig, ModelConfig, OneOf, OptimConfig, QuantConfig, TrainConfig)
from codesign.train.loop import (FitResult, Problem, TrainStep, check_budget_feasible, dense_teacher, fit,
                                 fit_seeds, graph_data, graph_evaluate, graph_forward, make_batched_step, make_step,
                                 seeds_batchable, train, train_seeds)
from codesign.train.objective import (LossContext, LossTerm, bits_penalty, cost_constraint, cost_penalty, distill_kl,
                                      distillation, edge_l0, masked_accuracy, masked_cross_entropy, objective,
                                      task_term)
from codesign.train.optim import QUANT_PARAMS, decay_mask, gate_transform, optimizer, param_labels, scale_by_tensor_rms
from codesign.train.select import BestVal, selection_terms, track_best, track_best_seeds

__all__ = [
    "TrainConfig", "ModelConfig", "MaskConfig", "QuantConfig", "CostConfig", "OptimConfig", "DistillConfig",
    "SECTIONS", "FLAT_FIELDS", "FIELD_DOMAINS", "Interval", "OneOf", "OBJECTIVES", "SELECTIONS", "DECAY_SCOPES",
    "GATE_OPTIMIZERS", "EDGE_SPARSIFIERS", "LEARNED_BITS",
    "train", "train_seeds", "seeds_batchable", "fit", "fit_seeds", "make_step", "make_batched_step", "graph_forward",
    "graph_evaluate", "graph_data",
    "TrainStep", "Problem", "FitResult",
    "dense_teacher", "check_budget_feasible",
    "build_model", "adjacency", "dense_cost", "dense_reference", "store_costs", "cheapest_store", "cheapest_cost",
    "teacher_config",
    "workload_inputs", "loss_inputs",
    "objective", "LossContext", "LossTerm", "task_term", "cost_penalty", "cost_constraint", "bits_penalty", "edge_l0",
    "distillation", "masked_cross_entropy", "masked_accuracy", "distill_kl",
    "Controller", "ControllerState", "pi_controller", "no_controller",
    "optimizer", "param_labels", "gate_transform", "decay_mask", "scale_by_tensor_rms", "QUANT_PARAMS",
    "BestVal", "selection_terms", "track_best", "track_best_seeds",
]
