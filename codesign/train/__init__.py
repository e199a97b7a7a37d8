"""Full-batch co-design training: one fit loop over a sum of pure loss terms.

    config.py     `TrainConfig` and the domain of every field (`FIELD_DOMAINS`)
    objective.py  the loss terms (task, cost penalty or budget constraint, bits, edge L0, distillation)
    budget.py     the budget's PI-controlled Lagrange multiplier, an ``(init, update)`` pair
    optim.py      one optimizer over typed parameters (weights, gates, quantizer parameters)
    select.py     which epoch is evaluated (last, or best validation; cost-aware)
    build.py      the model, adjacency and dense reference cost of a config
    loop.py       `fit` (any model, any `Problem`), and `train` (one device) built on it

`codesign.distributed.train_distributed` and `codesign.baselines.ugs` call `fit` with their own
forward and cost. Measured results of these settings are in docs/results.md.
"""

from codesign.train.budget import Controller, no_controller, pi_controller
from codesign.train.build import adjacency, build_model, dense_cost, teacher_config
from codesign.train.config import (DECAY_SCOPES, EDGE_SPARSIFIERS, FIELD_DOMAINS, GATE_OPTIMIZERS, MODEL_OPTIONS,
                                   OBJECTIVES, SELECTIONS, Interval, OneOf, TrainConfig)
from codesign.train.loop import FitResult, Problem, check_budget_feasible, dense_teacher, fit, train
from codesign.train.objective import (LossContext, LossTerm, distill_kl, masked_accuracy, masked_cross_entropy,
                                      objective)
from codesign.train.optim import QUANT_PARAMS, decay_mask, gate_transform, optimizer, param_labels, scale_by_tensor_rms
from codesign.train.select import BestVal, selection_terms, track_best

__all__ = [
    "TrainConfig", "FIELD_DOMAINS", "Interval", "OneOf", "OBJECTIVES", "SELECTIONS", "DECAY_SCOPES",
    "GATE_OPTIMIZERS", "EDGE_SPARSIFIERS", "MODEL_OPTIONS",
    "train", "fit", "Problem", "FitResult", "dense_teacher", "check_budget_feasible",
    "build_model", "adjacency", "dense_cost", "teacher_config",
    "objective", "LossContext", "LossTerm", "masked_cross_entropy", "masked_accuracy", "distill_kl",
    "Controller", "pi_controller", "no_controller",
    "optimizer", "param_labels", "gate_transform", "decay_mask", "scale_by_tensor_rms", "QUANT_PARAMS",
    "BestVal", "selection_terms", "track_best",
]
