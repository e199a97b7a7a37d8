"""The one fit loop, and `train`: a single-device run built on it.

`fit(model, problem, cfg)` trains any model on any `Problem`: the problem supplies the forward
pass (logits and task loss) and the modeled cost ratio as functions of the model and a data
pytree; the loop owns the rest - the objective (`codesign.train.objective`: a sum of pure loss
terms), the budget controller (`codesign.train.budget`), one typed-parameter optimizer
(`codesign.train.optim`), epoch selection (`codesign.train.select`) and divergence detection.
`train` (one device), `codesign.distributed.train_distributed` (a device mesh) and
`codesign.baselines.ugs` use it with their own forward and cost.
"""

from __future__ import annotations

import dataclasses
import functools
import time
import weakref
from typing import Any, Callable, Iterator, NamedTuple, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from codesign import hwmodel, kernels
from codesign.graph import Graph
from codesign.models import MODELS
from codesign.models.layers import input_nnz
from codesign.sparsify import BlockEdgeMask
from codesign.train.budget import Controller, no_controller, pi_controller
from codesign.train.build import (adjacency, build_model, cheapest_cost, dense_reference, loss_inputs, store_costs,
                                  teacher_config, workload_inputs)
from codesign.train.config import TrainConfig
from codesign.train.objective import LossContext, LossTerm, masked_accuracy, masked_cross_entropy, objective
from codesign.train.optim import optimizer
from codesign.train.select import BestVal, selection_terms, track_best, track_best_seeds

__all__ = ["Problem", "FitResult", "TrainStep", "make_step", "make_batched_step", "fit", "fit_seeds", "graph_forward",
           "graph_evaluate", "graph_data", "train", "train_seeds", "seeds_batchable", "dense_teacher", "check_budget_feasible"]


@dataclasses.dataclass(frozen=True)
class Problem:
    """What `fit` trains on: functions of the model and of ``data`` (a pytree of arrays, passed to
    the jitted step as an argument, so large graphs are not baked into the program as constants).

    Fields:
      data: pytree of arrays (a `Graph` and its adjacency, shards on a mesh, ...).
      forward: ``(model, data) -> (logits float [N, C], task loss float32 scalar)`` in train mode.
      cost_ratio: ``(model, hard: bool) -> float32 scalar``: modeled cost / dense cost, at the
        expected (``hard=False``, differentiable) or the hardened densities and bit-widths.
      evaluate: ``(model, data) -> (val accuracy, val loss)`` of the eval-mode model, for
        ``select="best_val"``; None if the problem does not support it.
      targets: pytree of arrays the loss terms read besides the model's output, passed to the
        step as an argument like ``data`` (`codesign.train.objective.LossContext`): the
        distillation teacher's float32 [N, C] logits; None without distillation.
    """

    data: Any
    forward: Callable
    cost_ratio: Callable
    evaluate: Optional[Callable] = None
    targets: Any = None


class TrainStep(NamedTuple):
    """What `make_step` returns: ``graphdef`` and ``state`` of the split ``(model, optimizer)``,
    ``step(state, data, ctrl, targets=None) -> (state, loss, cost_ratio, ctrl, hard_cost_ratio)``
    (jitted, ``state`` donated; ``targets`` = `Problem.targets`) and the budget ``controller``
    (``ctrl = controller.init()``)."""

    graphdef: Any
    state: Any
    step: Callable
    controller: Controller


@dataclasses.dataclass(frozen=True)
class FitResult:
    """What `fit` returns (the model itself is updated in place to the selected epoch's weights):
    ``final_loss``, ``final_cost_ratio``, ``multiplier`` (floats of the last step), ``train_time_s``
    (wall-clock of the epochs, compile included, s; `fit_seeds`: the batch's / S), ``selected_epoch``,
    ``first_nonfinite_epoch`` (the first epoch with a non-finite loss, -1: none)."""

    final_loss: float
    final_cost_ratio: float
    multiplier: float
    train_time_s: float
    selected_epoch: int
    first_nonfinite_epoch: int = -1


def make_step(model, problem: Problem, cfg: TrainConfig, terms: Sequence[LossTerm], *,
              first_layer: str = "conv1", tx: Optional[optax.GradientTransformation] = None,
              wrt=nnx.Param, donate_model: bool = False) -> TrainStep:
    """The training step of `fit`, for callers that drive or time the epochs themselves
    (experiments/bench_train.py times exactly this step).

    One step: forward, loss = sum of ``terms`` (`codesign.train.objective`), one update of the
    ``wrt`` parameters by ``tx`` (default: the typed-parameter optimizer of ``cfg``,
    `codesign.train.optim.optimizer`), then the hardened cost ratio (when ``cfg`` has a cost term)
    feeds the budget controller. The step is a pure function of the split ``(model, optimizer)``
    state, jitted with that state donated (no copy of the parameters per epoch).

    Args:
      model: an `nnx.Module` in train mode (its state is copied into the returned ``state``).
      problem, cfg, terms, first_layer: as in `fit`.
      tx: an optax transformation replacing ``cfg``'s optimizer (a baseline's own, e.g. UGS's
        Adam with coupled L2 on every trained parameter).
      wrt: the `nnx` filter of the trained parameters (default every `nnx.Param`).
      donate_model: the returned ``state`` holds the model's own arrays, not copies, and the
        first step donates them: the model must not be read until it is updated from a step's
        state (`fit` does at its end). One copy of every parameter less while training (with
        edge gates on a large graph, the gate logits and their mask are per-edge arrays).
    """
    graphdef, state, step, controller = _pure_step(model, problem, cfg, terms, first_layer, tx, wrt, donate_model)
    return TrainStep(graphdef, state, jax.jit(step, donate_argnums=0), controller)


def make_batched_step(models: Sequence, problem: Problem, cfg: TrainConfig, terms: Sequence[LossTerm], *,
                      first_layer: str = "conv1", tx: Optional[optax.GradientTransformation] = None,
                      wrt=nnx.Param, batched_targets: bool = False,
                      batch_size: Optional[int] = None) -> TrainStep:
    """`make_step` for S models of one structure (the seeds of one point): one compiled program
    trains all of them. Each model's split ``(model, optimizer)`` state is stacked along a leading
    seed axis and the step of `make_step` is `jax.vmap`-ed over it; ``data`` is shared (not
    batched), ``ctrl`` is stacked (``controller.init()`` per model), ``targets`` is shared or, with
    ``batched_targets``, stacked too (each seed's own distillation teacher). Every random stream
    (dropout, gates, quantizer noise) lives in each model's own `nnx.Rngs` state, so a seed draws
    exactly the numbers it draws alone; the step returns ``[S]`` losses, cost ratios and hardened
    cost ratios. ``batch_size`` k runs the seeds by `jax.lax.map` instead, k at a time
    (`over_seeds`): one program still, for a backend where the vmapped step is slower per seed
    than the single one (XLA:CPU's batched dots).

    Raises:
      ValueError: the models' graph definitions or state shapes differ.
    """
    if not models:
        raise ValueError("make_batched_step: no models")
    parts = [_pure_step(m, problem, cfg, terms, first_layer, tx, wrt) for m in models]
    graphdef, _, step, controller = parts[0]  # one optimizer (``cfg``'s or ``tx``) serves every model
    shapes = lambda p: (nnx.graphdef(p[1]), jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), p[1]))
    if any(nnx.graphdef(m) != nnx.graphdef(models[0]) or shapes(p) != shapes(parts[0])
           for m, p in zip(models[1:], parts[1:])):
        raise ValueError("make_batched_step: the models differ in structure (graph definitions or state shapes); "
                         "train them apart")
    state = stack([p[1] for p in parts])
    seeded = over_seeds(step, (0, None, 0, 0 if batched_targets else None), batch_size)
    return TrainStep(graphdef, state, jax.jit(seeded, donate_argnums=0), controller)


# `fit_seeds`'s "auto" batch size per JAX backend (absent: None, vmap every seed). On XLA:CPU the
# seeds run one after the other on one compiled step (0): with the input's nonzeros (`graph_data`)
# that was the fastest way to train 5 Cora GCN seeds; vmapped (None) or mapped inside one program
# (1, `jax.lax.map`) the larger program compiles longer than its steps save
# (experiments/bench_seeds.py -> results/bench_seeds.json).
SEED_BATCH = {"cpu": 0}


def _seed_batch(batch_size):
    """``batch_size`` with "auto" resolved (`SEED_BATCH`)."""
    return SEED_BATCH.get(jax.default_backend()) if batch_size == "auto" else batch_size


def over_seeds(f: Callable, in_axes: tuple, batch_size: Any = "auto") -> Callable:
    """``f`` mapped over the leading seed axis of the arguments whose ``in_axes`` entry is 0 (the
    others shared): `jax.vmap` over all seeds (``batch_size`` None), or `jax.lax.map` over them,
    ``batch_size`` seeds vmapped at a time (1: one seed after the other inside the one program);
    "auto": `SEED_BATCH` of the default backend."""
    batch_size = _seed_batch(batch_size)
    if batch_size == 0:
        raise ValueError("over_seeds: batch_size 0 (one compiled step per seed, fit_seeds) is no mapping")
    if batch_size is None:
        return jax.vmap(f, in_axes=in_axes)

    def mapped(*args):
        seeded = tuple(a for a, ax in zip(args, in_axes) if ax == 0)

        def one(xs):
            it = iter(xs)
            return f(*(next(it) if ax == 0 else a for a, ax in zip(args, in_axes)))
        return jax.lax.map(one, seeded, batch_size=None if batch_size == 1 else batch_size)
    return mapped


def stack(trees: Sequence) -> Any:
    """Pytrees of one structure stacked along a new leading axis (the seed axis of
    `make_batched_step`)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def unstack(tree, i: int) -> Any:
    """The ``i``-th slice of a pytree stacked by `stack`."""
    return jax.tree.map(lambda x: x[i], tree)


def _pure_step(model, problem: Problem, cfg: TrainConfig, terms: Sequence[LossTerm], first_layer: str,
               tx: Optional[optax.GradientTransformation], wrt, donate_model: bool = False):
    """``(graphdef, state, step, controller)`` of `make_step`, the step not yet jitted."""
    opt = nnx.Optimizer(model, tx, wrt=wrt) if tx is not None else optimizer(cfg, model, first_layer)
    controller = pi_controller(cfg.cost.budget, cfg.cost.budget_lr, cfg.cost.budget_kp, cfg.cost.budget_band) \
        if cfg.cost.budget is not None else no_controller()
    forward, cost_ratio, terms = problem.forward, problem.cost_ratio, tuple(terms)
    graphdef, state = nnx.split((model, opt))
    if not donate_model:  # donated below: never the caller's arrays (the model may share them)
        state = jax.tree.map(jnp.copy, state)

    def loss_fn(m, data, ctrl, targets):
        logits, task = forward(m, data)
        ctx = LossContext(m, logits, task, cost_ratio(m, False), ctrl.multiplier, targets)
        loss = terms[0](ctx)
        for term in terms[1:]:
            loss = loss + term(ctx)
        return loss, ctx.cost_ratio

    def step(state, data, ctrl, targets=None):
        m, o = nnx.merge(graphdef, state)
        (loss, ratio), grads = nnx.value_and_grad(loss_fn, argnums=nnx.DiffState(0, wrt), has_aux=True)(
            m, data, ctrl, targets)
        o.update(m, grads)
        hard = cost_ratio(m, True) if cfg.costed else jnp.ones((), jnp.float32)
        return nnx.state((m, o)), loss, ratio, controller.update(ctrl, hard), hard

    return graphdef, state, step, controller


def fit(model, problem: Problem, cfg: TrainConfig, terms: Sequence[LossTerm], *,
        first_layer: str = "conv1", on_epoch: Optional[Callable[[int, dict], None]] = None,
        tx: Optional[optax.GradientTransformation] = None, wrt=nnx.Param, donate_model: bool = False) -> FitResult:
    """Trains ``model`` on ``problem`` for ``cfg.optim.epochs`` full-batch steps (`make_step`).

    With ``cfg.optim.select="best_val"`` the eval-mode model is validated after every step
    (`codesign.train.select`) and the model ends at the selected epoch's weights; otherwise at the
    last epoch's.

    Args:
      model: an `nnx.Module` in train mode; updated in place.
      problem: the `Problem`.
      cfg: `TrainConfig` (optim: epochs, optimizer settings, select; cost: budget).
      terms: the loss terms, e.g. ``objective(cfg)``.
      first_layer: attribute name of the model's first layer (weight decay scope "first").
      on_epoch: optional callback ``(epoch, {"loss", "cost_ratio", "multiplier"})``.
      tx, wrt: a baseline's own optimizer and trained-parameter filter (`make_step`).
      donate_model: train on the model's own arrays instead of copies (`make_step`); the model
        is unreadable until this returns, and must share no array with another model.

    Raises:
      ValueError: ``select="best_val"`` on a problem without ``evaluate``.
      FloatingPointError: the final loss is not finite; the message names the first epoch with a
        non-finite loss and the settings used.
    """
    return _finite(cfg, _fit([model], problem, cfg, terms, first_layer, on_epoch, tx, wrt, batched=False,
                             donate_model=donate_model)[0])


def _finite(cfg: TrainConfig, fitted: FitResult) -> FitResult:
    """``fitted``, or FloatingPointError when its final loss is not finite (`_divergence_message`)."""
    if not np.isfinite(fitted.final_loss):
        raise FloatingPointError(_divergence_message(cfg, fitted.final_loss, fitted.first_nonfinite_epoch))
    return fitted


def fit_seeds(models: Sequence, problem: Problem, cfg: TrainConfig, terms: Sequence[LossTerm], *,
              first_layer: str = "conv1", on_epoch: Optional[Callable[[int, dict], None]] = None,
              tx: Optional[optax.GradientTransformation] = None, wrt=nnx.Param,
              batched_targets: bool = False, batch_size: Any = "auto") -> list[FitResult]:
    """`fit` of S models of one structure (the seeds of one point) on one compiled step: by
    default (`make_batched_step`) the step and the best-validation tracking are `jax.vmap`-ed over
    the stacked states, the data shared (``batch_size`` below for the other ways); each model ends
    updated in place exactly as `fit` leaves it.

    Args:
      models: `nnx.Module` s in train mode with equal graph definitions (same config but seed).
      problem, cfg, terms, first_layer, tx, wrt: as in `fit`; with ``batched_targets``
        ``problem.targets`` is stacked ``[S, ...]`` (a teacher per model).
      on_epoch: optional callback ``(epoch, {"loss", "cost_ratio", "multiplier"})``, once per
        epoch for all models, with ``[S]`` arrays.
      batch_size: None: the step vmapped over all S seeds; k: `jax.lax.map` over the seeds, k at
        a time vmapped (1: one after the other, inside the one compiled program); 0: `fit` of each
        model in turn, every one on the first model's compiled step (no recompile; ``on_epoch``
        then as in `fit`, per model, and ``train_time_s`` each model's own); "auto": by backend
        (`SEED_BATCH`).

    Returns:
      One `FitResult` per model; ``train_time_s`` is each model's share (the batch's wall-clock / S).
      A diverged model is not raised here (its siblings are fine): its ``final_loss`` is not
      finite and ``first_nonfinite_epoch`` says where (`train_seeds` raises at that seed).

    Raises:
      ValueError: as `fit`; models of different structures (`make_batched_step`).
    """
    return _fit(list(models), problem, cfg, terms, first_layer, on_epoch, tx, wrt, batched=True,
                batched_targets=batched_targets, batch_size=batch_size)


@functools.lru_cache(maxsize=None)
def _malloc_trim():
    import ctypes
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)
    except OSError:
        return None


def release_free_heap() -> bool:
    """Returns the C heap's free pages to the operating system: glibc's ``malloc_trim(0)``; where
    the C library has no such call (macOS, musl) nothing is done. Returns whether it was called.

    Why: compiling a training step (XLA's LLVM backend) frees its many small allocations back to
    glibc's heap, which keeps them as resident memory; the step's own buffers then come on top,
    so the process's peak resident set holds the compiler's garbage too. `fit` calls this once,
    after the first step is compiled. What it saves per process in multi-process training is in
    docs/log/scale_out_rss.md. A memory-use measure only: results are unchanged."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def _on_the_mesh(tree, data):
    """``tree`` with every array that is not laid out on a device mesh put there, replicated
    (``NamedSharding(mesh, P())``), when ``data`` lives on a mesh of several devices (partitioned
    training, `codesign.distributed`); else ``tree`` unchanged.

    The step returns its state and controller laid out on the mesh; arrays made on one device
    (the controller's scalars, an optimizer count) or replicated under another sharding type would
    make the second epoch's call differ from the first in its argument shardings, and JAX would
    compile the whole step a second time (found with a per-process memory sampler: the process's
    peak came at that second epoch; docs/log/scale_out_rss.md)."""
    mesh = next((x.sharding.mesh for x in jax.tree.leaves(data)
                 if isinstance(x, jax.Array) and isinstance(x.sharding, jax.sharding.NamedSharding)
                 and x.sharding.mesh.size > 1), None)
    if mesh is None:
        return tree
    leaves, treedef = jax.tree.flatten(tree)
    move = [i for i, x in enumerate(leaves)
            if isinstance(x, jax.Array) and not isinstance(x.sharding, jax.sharding.NamedSharding)]
    if move:  # a jitted identity, not device_put: across processes the mesh has devices this process cannot address
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
        moved = jax.jit(lambda xs: xs, out_shardings=replicated)([leaves[i] for i in move])
        for i, x in zip(move, moved):
            leaves[i] = x
    return jax.tree.unflatten(treedef, leaves)


def _fit(models: list, problem: Problem, cfg: TrainConfig, terms, first_layer, on_epoch, tx, wrt, *,
         batched: bool, batched_targets: bool = False, batch_size: Any = "auto",
         shared: Optional[TrainStep] = None, donate_model: bool = False) -> list[FitResult]:
    """The epoch loop of `fit` (one model, ``batched=False``; ``shared``: a `make_step` of a
    model of the same structure, whose compiled step this model's state runs) and `fit_seeds`
    (``batched=True``: the same loop over the seed-stacked state, with mapped step and vmapped
    selection; ``batch_size`` 0: this loop per model, all on the first model's compiled step)."""
    if cfg.optim.select == "best_val" and problem.evaluate is None:
        raise ValueError("TrainConfig.optim.select: 'best_val' needs a problem with an evaluate function")
    if batched and _seed_batch(batch_size) == 0:  # one after the other, one compiled step
        problems = [problem if not batched_targets else dataclasses.replace(problem, targets=problem.targets[i])
                    for i in range(len(models))]
        return list(_fit_in_turn(models, problems, cfg, terms, first_layer, on_epoch, tx, wrt))
    if batched:
        graphdef, state, step, controller = make_batched_step(models, problem, cfg, terms, first_layer=first_layer,
                                                              tx=tx, wrt=wrt, batched_targets=batched_targets,
                                                              batch_size=batch_size)
        ctrl = stack([controller.init() for _ in models])
        best = stack([BestVal.start(m) for m in models]) if cfg.optim.select == "best_val" else None
        first_bad = jnp.full((len(models),), -1, jnp.int32)
        track = track_best_seeds
    else:
        graphdef, state, step, controller = shared or make_step(models[0], problem, cfg, terms,
                                                                first_layer=first_layer, tx=tx, wrt=wrt,
                                                                donate_model=donate_model)
        ctrl = controller.init()
        state, ctrl = _on_the_mesh((state, ctrl), problem.data)
        best = BestVal.start(models[0]) if cfg.optim.select == "best_val" else None
        first_bad = jnp.int32(-1)  # first epoch with a non-finite loss (-1: none), kept on the device
        track = track_best
    t0 = time.perf_counter()
    loss = ratio = jnp.nan
    for epoch in range(cfg.optim.epochs):
        state, loss, ratio, ctrl, hard = step(state, problem.data, ctrl, problem.targets)
        if epoch == 0:  # the step is compiled: the compiler's freed memory back to the OS before the step's own peak
            release_free_heap()
        first_bad = _first_nonfinite(first_bad, epoch, loss)
        if best is not None:  # validation forward of the eval-mode model (no dropout, deterministic gates)
            best = track(graphdef, state, problem.evaluate, problem.data, best, epoch, *selection_terms(cfg, hard))
        if on_epoch is not None:
            on_epoch(epoch, {"loss": loss, "cost_ratio": ratio, "multiplier": ctrl.multiplier})
    jax.block_until_ready(loss)
    train_time_s = (time.perf_counter() - t0) / len(models)
    loss, ratio, mult, first_bad = (np.atleast_1d(np.asarray(v)) for v in (loss, ratio, ctrl.multiplier, first_bad))
    out = []
    for i, model in enumerate(models):
        state_i, best_i = (state, best) if not batched else \
            (unstack(state, i), None if best is None else unstack(best, i))
        nnx.update(model, nnx.state(nnx.merge(graphdef, state_i)[0]))
        if best_i is not None:
            nnx.update(model, best_i.params)
        out.append(FitResult(float(loss[i]), float(ratio[i]), float(mult[i]), train_time_s,
                             cfg.optim.epochs - 1 if best_i is None else int(best_i.epoch), int(first_bad[i])))
    return out


def _fit_in_turn(models: Sequence, problems: Sequence[Problem], cfg: TrainConfig, terms, first_layer, on_epoch, tx,
                 wrt) -> Iterator[FitResult]:
    """`_fit` of each model on its problem in turn, every one on the first model's compiled step
    (no recompile: the models share a structure); each `FitResult` yielded as its loop ends."""
    shared = make_step(models[0], problems[0], cfg, terms, first_layer=first_layer, tx=tx, wrt=wrt)
    for i, (m, problem) in enumerate(zip(models, problems)):
        step = shared if i == 0 else shared._replace(state=_pure_step(m, problem, cfg, terms, first_layer, tx, wrt)[1])
        yield _fit([m], problem, cfg, terms, first_layer, on_epoch, tx, wrt, batched=False, shared=step)[0]


@jax.jit
def _first_nonfinite(first_bad: jax.Array, epoch, loss: jax.Array) -> jax.Array:
    """``epoch`` if ``loss`` is the first non-finite loss seen, else ``first_bad`` (-1: none yet)."""
    return jnp.where((first_bad < 0) & ~jnp.isfinite(loss), epoch, first_bad).astype(jnp.int32)


def _divergence_message(cfg: TrainConfig, final_loss: float, first_bad: int) -> str:
    """One line: where the loss stopped being finite and the settings that were used."""
    cost = f"budget={cfg.cost.budget}" if cfg.cost.budget is not None else f"cost_weight={cfg.cost.weight}"
    return (f"training diverged: loss not finite from epoch {first_bad} of {cfg.optim.epochs} "
            f"(final loss {final_loss}); settings used: model={cfg.model.name}, lr={cfg.optim.lr}, "
            f"gate_lr={cfg.masks.gate_lr}, weight_decay={cfg.optim.weight_decay}, "
            f"{cost}, bits={cfg.quant.bits or 32}, quantizer={cfg.quant.quantizer}, seed={cfg.seed}")


# The densest input features `train` gives a model as their nonzeros (`SparseFeatures`, where
# `GNN.takes_sparse_input`), per JAX backend (absent: always dense): on XLA:CPU the gather +
# segment_sum product costs about 20x a dense GEMM per stored entry (timed on Cora's
# [2708, 1433] @ [1433, 16], 2026-11-26), so it pays below about 5 % nonzeros.
SPARSE_INPUT_MAX_DENSITY = {"cpu": 0.05}


def graph_data(graph: Graph, adj, model) -> tuple:
    """A node-classification `Problem`'s ``data``: ``(graph, adj, x)``, ``x`` the features the model
    reads: ``graph.x``'s nonzeros (`codesign.kernels.sparse_features`) where ``model`` takes them
    (`GNN.takes_sparse_input`) and their density is at most `SPARSE_INPUT_MAX_DENSITY` of the
    backend, else ``graph.x``. The model's logits are the same either way, to float rounding."""
    limit = SPARSE_INPUT_MAX_DENSITY.get(jax.default_backend())
    x = graph.x
    if limit is not None and model.takes_sparse_input():
        dense = np.asarray(x)
        if np.count_nonzero(dense) <= limit * dense.size:
            x = kernels.sparse_features(dense)
    return graph, adj, x


def graph_forward(m, data):
    """A node-classification `Problem`'s forward: ``data = (graph, adj, x)`` (`graph_data`) ->
    ``(logits float [N, C], mean cross-entropy over graph.train_mask)`` of ``m(x, adj)``."""
    graph, adj, x = data
    logits = m(x, adj)
    return logits, masked_cross_entropy(logits, graph.y, graph.train_mask)


def graph_evaluate(m, data):
    """A node-classification `Problem`'s evaluate: ``(val accuracy, val cross-entropy)`` of
    ``m(x, adj)`` for ``data = (graph, adj, x)`` (`graph_data`)."""
    graph, adj, x = data
    logits = m(x, adj)
    return (masked_accuracy(logits, graph.y, graph.val_mask),
            masked_cross_entropy(logits, graph.y, graph.val_mask))


def train(graph: Graph, cfg: TrainConfig, hw: hwmodel.HardwareSpec,
          on_epoch: Optional[Callable[[int, dict], None]] = None,
          also_cost: Sequence[hwmodel.HardwareSpec] = (), return_logits: bool = False,
          teacher_logits: Optional[jax.Array] = None, return_model: bool = False) -> dict:
    """Trains ``cfg``'s model on ``graph`` full-batch (`fit`), hardens it, evaluates and costs it.

    Args:
      graph: a `Graph` with train/val/test masks.
      cfg: `TrainConfig`.
      hw: the `HardwareSpec` the cost term (and the reported cost) refers to.
      on_epoch: optional callback ``(epoch, {"loss", "cost_ratio", "multiplier"})``.
      also_cost: more `HardwareSpec` targets to cost the hardened model on (training only ever
        sees ``hw``), e.g. to place one trained baseline on every target's front.
      return_logits: also return the hardened model's logits.
      return_model: also return the hardened model itself (eval mode), e.g. for `codesign.deploy`.
      teacher_logits: float [N, C], the distillation teacher's logits when ``cfg.distill.weight >
        0``; None = `dense_teacher` trained on ``graph`` (pass them to distill from a teacher
        trained on another graph, e.g. a random-subgraph control of a learned edge mask).

    Raises:
      ValueError: ``teacher_logits`` given while ``cfg.distill.weight`` is 0, of the wrong shape or
        not finite; ``cfg.cost.budget`` below the cost floor (`check_budget_feasible`).
      FloatingPointError: the training diverged (see `fit`).

    Returns:
      dict with every `codesign.results.RUN_RECORD_FIELDS` field: ``test_accuracy``,
      ``val_accuracy``, ``train_accuracy`` (hardened model), ``modeled`` / ``dense_modeled``
      (``latency_s``, ``energy_j``, ``dram_bytes``), ``densities`` (hard kept fractions), ``bits``,
      ``layer_bits``, ``final_loss``, ``final_cost_ratio``, ``multiplier``, ``train_time_s``,
      ``selected_epoch``; plus ``breakdown`` / ``dense_breakdown`` (per-stage costs), ``tiles``
      (`BlockEdgeMask` models) and ``by_hw`` (the same costs for ``hw`` and every ``also_cost``
      target), ``backend`` (what ``impl="auto"`` resolved to in the hardened forward,
      `codesign.kernels.recorded_choices`: e.g. ``{"aggregate": "segment", "attention": "csr"}``,
      a list where layers differ); ``feature_nnz_kept`` where the model can read its input CSR
      (the kept columns' share of the input's stored nonzeros, float in [0, 1]: what re-pricing
      the CSR store needs, `experiments/migrate_records.py`); with distillation
      ``teacher_accuracy``; with ``return_logits`` ``logits``; with
      ``return_model`` ``model``.
    """
    run = _prepare(graph, cfg, hw, teacher_logits)
    run.model.train()
    fitted = fit(run.model, run.problem, cfg, objective(cfg), first_layer=run.model.FIRST_LAYER, on_epoch=on_epoch)
    return _finish(run, fitted, also_cost, return_logits, return_model)


def train_seeds(graph: Graph, cfgs: Sequence[TrainConfig], hw: hwmodel.HardwareSpec,
                on_epoch: Optional[Callable[[int, dict], None]] = None,
                also_cost: Sequence[hwmodel.HardwareSpec] = (), return_logits: bool = False,
                return_model: bool = False, batch_size: Any = "auto") -> Iterator[dict]:
    """`train` of configs that differ only in their seed, the seeds' training step compiled once
    (`fit_seeds`: vmapped or mapped over the seed axis in one program, or one seed after the other
    on the first seed's compiled step) where `seeds_batchable` allows, else `train` each.

    Each seed's record has the fields and values `train` gives it alone (to float rounding: the
    seeds draw the same random numbers, the batched program may sum in another order), except
    ``train_time_s``: the seed's share of the batch's wall-clock. With distillation each seed has
    its own dense teacher (`dense_teacher`, as `train`).

    Args:
      graph, hw, also_cost, return_logits, return_model: as `train`.
      cfgs: the seeds' `TrainConfig` s.
      on_epoch: optional callback ``(epoch, {"loss", "cost_ratio", "multiplier"})``: vmapped or
        mapped, once per epoch with ``[S]`` arrays; else once per epoch of each seed, as `train`.
      batch_size: how the one program runs the seeds (`fit_seeds`): None vmaps all of them, 1
        maps them one after the other inside it, 0 runs its compiled step for each seed in turn,
        "auto" picks by backend (`SEED_BATCH`).

    Yields:
      One `train` result dict per config, in order, each as soon as it is hardened and costed: with
      ``batch_size`` 0 (the CPU default) right after its own epoch loop, so a stop loses only the
      seed in training; vmapped or mapped, all after the one program.

    Raises:
      As `train`; a diverged seed raises its FloatingPointError when its turn to be yielded comes
      (the seeds before it have been yielded).
    """
    cfgs = list(cfgs)
    if not seeds_batchable(cfgs):
        for cfg in cfgs:
            yield train(graph, cfg, hw, on_epoch=on_epoch, also_cost=also_cost, return_logits=return_logits,
                        return_model=return_model)
        return
    runs = [_prepare(graph, cfgs[0], hw)]
    runs += [_prepare(graph, cfg, hw, like=runs[0]) for cfg in cfgs[1:]]
    models = [run.model for run in runs]
    for m in models:
        m.train()
    if any(nnx.graphdef(m) != nnx.graphdef(models[0]) for m in models[1:]):  # a seed-dependent structure
        for run in runs:
            fitted = fit(run.model, run.problem, run.cfg, objective(run.cfg), first_layer=run.model.FIRST_LAYER,
                         on_epoch=on_epoch)
            yield _finish(run, fitted, also_cost, return_logits, return_model)
        return
    shared = {}  # what `_finish` computes once for all the seeds
    if _seed_batch(batch_size) == 0:  # one seed after the other on one compiled step: each yielded as it finishes
        fits = _fit_in_turn(models, [run.problem for run in runs], cfgs[0], objective(cfgs[0]),
                            models[0].FIRST_LAYER, on_epoch, None, nnx.Param)
        for run, fit_i in zip(runs, fits):
            yield _finish(run, _finite(run.cfg, fit_i), also_cost, return_logits, return_model, shared)
        return
    teachers = [run.problem.targets for run in runs]
    problem = runs[0].problem  # data, forward and cost are the same for every seed; the teacher is not
    if teachers[0] is not None:
        problem = dataclasses.replace(problem, targets=jnp.stack(teachers))
    fitted = fit_seeds(models, problem, cfgs[0], objective(cfgs[0]), first_layer=models[0].FIRST_LAYER,
                       on_epoch=on_epoch, batched_targets=teachers[0] is not None, batch_size=batch_size)
    for run, fit_i in zip(runs, fitted):
        yield _finish(run, _finite(run.cfg, fit_i), also_cost, return_logits, return_model, shared)


def seeds_batchable(cfgs: Sequence[TrainConfig]) -> bool:
    """Whether `train_seeds` trains ``cfgs`` as one vmapped program: more than one config, all
    equal but for the seed. (Every model and co-design option of `codesign.models` vmaps: their
    steps are jitted, so no Python control flow depends on a traced value; models whose structure
    depends on the seed fall back in `train_seeds`, after they are built.)"""
    return len(cfgs) > 1 and len({cfg.replace(seed=0) for cfg in cfgs}) == 1


class _Run(NamedTuple):
    """One seed's training set up by `_prepare`: its config, model (built from the seed's
    `nnx.Rngs`), `Problem`, dense reference cost and what `_finish` needs. ``inputs``, ``dense``
    and ``dense_store``: the reported pricing (`workload_inputs`, every store the model can read);
    ``loss_dense``: the dense reference's ``cfg.cost.objective`` as the loss prices it
    (`loss_inputs`), the denominator of its cost ratio."""

    graph: Graph
    cfg: TrainConfig
    hw: Any
    model: Any
    problem: Problem
    adj: Any
    inputs: dict
    dense: Any
    dense_store: str
    loss_dense: float
    teacher_accuracy: Optional[float]


def _prepare(graph: Graph, cfg: TrainConfig, hw: hwmodel.HardwareSpec, teacher_logits=None,
             like: Optional[_Run] = None) -> _Run:
    """`train` up to its `fit`: the teacher, the dense reference, the model, the budget check and
    the `Problem`. ``like``: the `_Run` of a config equal to ``cfg`` but for the seed, whose
    workload inputs (the graph's measured locality), dense reference and adjacency are reused."""
    teacher, teacher_accuracy = None, None
    if teacher_logits is not None:
        teacher = _check_teacher_logits(teacher_logits, graph, cfg)
        teacher_accuracy = float(masked_accuracy(teacher, graph.y, graph.test_mask))
    elif cfg.distill.weight > 0:
        teacher, teacher_accuracy = dense_teacher(graph, cfg, hw)
    if like is None:
        inputs = workload_inputs(cfg, graph)  # the measured locality + feature nonzeros: every store, for reports
        (dense_store, dense) = dense_reference(cfg, graph, hw, inputs)
        loss_in = loss_inputs(cfg, inputs)
        loss_ref = dense if loss_in is inputs else dense_reference(cfg, graph, hw, loss_in)[1]
        loss_dense = float(getattr(loss_ref, cfg.cost.objective))
        adj = adjacency(graph, MODELS[cfg.model.name].SELF_LOOPS)
    else:
        inputs, dense_store, dense, adj = like.inputs, like.dense_store, like.dense, like.adj
        loss_in, loss_dense = loss_inputs(cfg, inputs), like.loss_dense
    model = build_model(cfg, graph, nnx.Rngs(params=cfg.seed, dropout=cfg.seed + 1, gates=cfg.seed + 2,
                                             quant=cfg.seed + 3))
    if cfg.cost.budget is not None:
        check_budget_feasible(cfg, model, graph, hw, loss_in, loss_dense)
    n, e = graph.n_nodes, graph.n_edges

    def cost_ratio(m, hard: bool):  # the cheaper of the stores the loss prices, as its reference (`store_costs`)
        costs = store_costs(m, n, e, hw, loss_in, objective=cfg.cost.objective, hard=hard).values()
        return functools.reduce(jnp.minimum, (getattr(r, cfg.cost.objective) for r in costs)) / loss_dense

    data = graph_data(graph, adj, model) if like is None else like.problem.data
    problem = Problem(data, graph_forward, cost_ratio, graph_evaluate, targets=teacher)
    return _Run(graph, cfg, hw, model, problem, adj, inputs, dense, dense_store, loss_dense, teacher_accuracy)


def _finish(run: _Run, fitted: FitResult, also_cost, return_logits: bool, return_model: bool,
            shared: Optional[dict] = None) -> dict:
    """`train` after its `fit`: harden, evaluate and cost the run's model; the result dict.
    ``shared``: a dict kept across the seeds of one `train_seeds` batch (same config but the
    seed), which holds what does not depend on the seed once computed: the backends ``impl="auto"``
    resolved to (from shapes, dtypes and pattern types only, `codesign.kernels.auto_impl`) and
    the dense references on the ``also_cost`` targets."""
    graph, cfg, hw, model, adj, inputs, dense = run.graph, run.cfg, run.hw, run.model, run.adj, run.inputs, run.dense
    dense_store = run.dense_store
    shared = {} if shared is None else shared
    n, e = graph.n_nodes, graph.n_edges
    model.eval()  # harden: deterministic gates, exact zeros for pruned edges/features
    if "backend" not in shared:
        with kernels.recorded_choices() as backend:  # what impl="auto" resolved to, per op: traced afresh
            nnx.eval_shape(lambda m: m(graph.x, adj), model)  # (the cached jit below may not trace at all)
        shared["backend"] = backend
    backend = shared["backend"]
    logits = _eval_logits(model, graph.x, adj)
    by_hw = {}
    for target in (hw, *also_cost):
        store, rep = cheapest_cost(model, n, e, target, inputs, objective=cfg.cost.objective)
        if target is not hw and ("ref", target.name) not in shared:
            shared["ref", target.name] = dense_reference(cfg, graph, target, inputs)
        ref_store, ref = (dense_store, dense) if target is hw else shared["ref", target.name]
        by_hw[target.name] = {"modeled": rep.summary(), "dense_modeled": ref.summary(),
                              "breakdown": rep.breakdown(target), "dense_breakdown": ref.breakdown(target),
                              "feature_store": store, "dense_feature_store": ref_store}
    acc = lambda mask: float(masked_accuracy(logits, graph.y, mask))
    extra = {}
    if "feature_nnz" in inputs:  # the kept columns' share of the input's nonzeros: re-pricing's CSR store
        nnz = inputs["feature_nnz"]
        extra["feature_nnz_kept"] = float(input_nnz(model, nnz, None, {}, True)) / max(float(jnp.sum(nnz)), 1.0)
    if run.problem.targets is not None:
        extra["teacher_accuracy"] = run.teacher_accuracy
    if return_logits:
        extra["logits"] = logits
    if return_model:
        extra["model"] = model
    return {**extra,
        "test_accuracy": acc(graph.test_mask), "val_accuracy": acc(graph.val_mask),
        "train_accuracy": acc(graph.train_mask),
        "modeled": by_hw[hw.name]["modeled"], "dense_modeled": dense.summary(),
        "breakdown": by_hw[hw.name]["breakdown"], "dense_breakdown": by_hw[hw.name]["dense_breakdown"],
        "densities": {k: float(v) for k, v in model.densities(hard=True).items()},
        "bits": cfg.quant.bits or 32,
        "layer_bits": {k: float(v) for k, v in model.layer_bits(hard=True).items()},
        "tiles": _tile_stats(model),
        "final_loss": fitted.final_loss, "final_cost_ratio": fitted.final_cost_ratio,
        "multiplier": fitted.multiplier, "train_time_s": fitted.train_time_s,
        "selected_epoch": fitted.selected_epoch,
        "by_hw": by_hw,
        "backend": {k: v[0] if len(v) == 1 else v for k, v in backend.items()},
    }


_TEACHERS: dict = {}  # (id(graph), teacher config) -> (weakref to graph, logits, test accuracy)


def dense_teacher(graph: Graph, cfg: TrainConfig, hw: hwmodel.HardwareSpec) -> tuple[jax.Array, float]:
    """``(logits float32 [N, C], test accuracy)`` of ``cfg``'s dense teacher (`teacher_config`)
    on ``graph``, trained once per graph and teacher config in this process: the methods and cost
    weights of a sweep that share a seed share it (the teacher does not depend on ``hw``)."""
    tcfg = teacher_config(cfg)
    key = (id(graph), tcfg)
    hit = _TEACHERS.get(key)
    if hit is not None and hit[0]() is graph:
        return hit[1], hit[2]
    res = train(graph, tcfg, hw, return_logits=True)
    _TEACHERS[key] = (weakref.ref(graph), jax.lax.stop_gradient(res["logits"]), res["test_accuracy"])
    return _TEACHERS[key][1], _TEACHERS[key][2]


def _check_teacher_logits(teacher_logits, graph: Graph, cfg: TrainConfig) -> jax.Array:
    """``teacher_logits`` as a float32 [N, C] constant (no gradient), checked against ``graph``.

    Raises:
      ValueError: ``cfg.distill.weight`` is 0 (the logits would be ignored), the shape is not
        ``(graph.n_nodes, graph.n_classes)`` or a value is not finite.
    """
    if not cfg.distill.weight > 0:
        raise ValueError("train: teacher_logits given but TrainConfig.distill.weight is 0 (they would be ignored)")
    t = jnp.asarray(teacher_logits, jnp.float32)
    want = (graph.n_nodes, graph.n_classes)
    if t.shape != want:
        raise ValueError(f"train: invalid teacher_logits.shape={t.shape}, expected (n_nodes, n_classes)={want}")
    if not bool(jnp.all(jnp.isfinite(t))):
        raise ValueError("train: teacher_logits has non-finite values")
    return jax.lax.stop_gradient(t)


def check_budget_feasible(cfg: TrainConfig, model, graph: Graph, hw: hwmodel.HardwareSpec,
                          inputs: dict, dense_c: float) -> None:
    """Raises ValueError when ``cfg.cost.budget`` is below the cost floor: the modeled cost of the
    untrained ``model`` with every mask the config learns fully closed (the cost left by
    self-loops, kept layers, the bits). ``inputs``: the loss's (`loss_inputs`); ``dense_c``: its
    dense reference's ``cfg.cost.objective``."""
    closed = {k: 0.0 for k, on in (("edge", cfg.uses_edge_mask), ("feature", cfg.uses_feature_mask)) if on}
    cheapest = cheapest_cost(model, graph.n_nodes, graph.n_edges, hw, inputs, objective=cfg.cost.objective,
                             densities=closed)[1]
    floor = float(getattr(cheapest, cfg.cost.objective)) / dense_c
    if cfg.cost.budget < floor:
        raise ValueError(f"TrainConfig.cost.budget: infeasible budget {cfg.cost.budget:g}: the {cfg.model.name} "
                         f"model with every "
                         f"learned mask closed still costs {floor:.4g} x the dense {cfg.cost.objective} on {hw.name}")


def _tile_stats(model) -> Optional[dict]:
    """Hardened tile counts of a `BlockEdgeMask` model (a `codesign.models.GNN`): ``kept`` and
    ``total`` B x B tiles (the kernel's nnz_blocks after and before pruning) and ``kept_fraction``;
    None for other edge sparsifiers or none."""
    mask = model.edge_mask
    if not isinstance(mask, BlockEdgeMask):
        return None
    kept = float(mask.hard_kept_tiles())
    return {"kept": kept, "total": mask.n_tiles, "kept_fraction": kept / mask.n_tiles,
            "gated": mask.n_gated_tiles, "block_size": mask.block_size}


@nnx.jit
def _eval_logits(model, x, adj):
    return model(x, adj)
