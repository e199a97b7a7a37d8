"""UGS-style baseline trainer: iterative magnitude pruning of the adjacency and the weights with
rewinding (Chen et al., "A Unified Lottery Ticket Hypothesis for Graph Neural Networks", ICML 2021,
Alg. 1; code github.com/VITA-Group/Unified-LTH-GNN, ``NodeClassification/main_pruning_imp.py``,
``pruning.py``, ``net.py``).

One round ``k = 1, 2, ...`` (`ugs_prune`):

1. *get mask* (``run_get_mask``): a GCN with a trainable per-edge graph mask ``m_g``
   (`EdgeWeightMask`) and one trainable elementwise mask ``m_theta`` per kernel (`WeightMask`),
   both initialized to 1 on the entries still kept (0 on the pruned ones, which stay 0: their
   gradients are 0), is trained from the *initial* weights (rewound; pruned weights zeroed) with
   ``CE + s1 ||m_g||_1 + s2 sum_l ||m_theta_l||_1``; the mask values are taken at the epoch of best
   validation accuracy (UGS calls ``get_final_mask_epoch`` whenever the validation accuracy
   improves);
2. *prune*: ``graph_rate`` of the remaining edges with the smallest ``|m_g|``
   (`magnitude_prune`) and ``weight_rate`` of the remaining weights with the smallest
   ``|m_theta|``, one threshold across both layers (`global_magnitude_prune`);
3. *evaluate the ticket* (``run_fix_mask``, the number UGS reports): retrain from the rewound
   initial weights with the binary masks fixed, and report the test accuracy at the epoch of best
   validation accuracy.

``pruning="random"`` is the control of UGS's ``main_pruning_random.py``: step 1 is skipped and
step 2 prunes uniformly random entries, the same counts per round.

Settings of the official Cora command (``NodeClassification/README.md``): hidden 512, Adam
lr 0.008, weight decay 8e-5 (torch Adam's L2 term, on every parameter, masks included),
200 epochs in both stages (``--total_epoch 200``; ``run_fix_mask`` hard-codes 200),
``--s1 1e-2 --s2 1e-2``, ``--pruning_percent_adj 0.05 --pruning_percent_wei 0.2``,
``--init_soft_mask_type all_one``: before every get-mask stage the masks are set to
``keep * (1 + 1e-5 * U(-1, 1))`` with the same draws each round (``soft_mask_init`` re-seeds);
`UGS_MASK_NOISE`. These are `ugs_prune`'s defaults.

The noise decides ties: a mask entry that gets no task gradient (an edge more than two hops
from every training node, a weight of a feature no training node's receptive field holds)
follows the same Adam trajectory as every other such entry, so on Cora thousands of entries tie
(measured after the first get-mask stage, seed 0: 2,779 edges and 69,875 weights share one
value; the first round's 20 % weight threshold falls inside the weight tie, its 5 % edge
threshold below the edge tie). The noise orders a tie at random; without it (``mask_noise=0``)
`magnitude_prune` takes the lowest flat indices, i.e. whole rows of the first input features.

``net="ugs"`` (default) is UGS's ``net_gcn``: no biases, dropout 0.5 on the hidden layer only,
PyTorch's default ``nn.Linear`` init ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (kaiming-uniform,
a = sqrt(5)). ``net="gcn"`` keeps this package's `GCN` as it is (Glorot init, biases, dropout
on both layers' inputs). Remaining differences from the official code:
  * combine-then-aggregate with ``D^-1/2 (A m_g + I) D^-1/2`` (UGS: ``A m_g`` then the same
    normalization, aggregate-then-combine; the same function);
  * masks are per directed edge of the edge list, self-loops are not masked (UGS masks the dense
    ``A`` without self-loops: the same set of entries on Cora);
  * exact prune counts (`prune_count`, rounded) instead of a threshold at ``int(n * p)``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Optional, final

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from codesign import hwmodel
from codesign.graph import Graph
from codesign.models.gcn import GCN
from codesign.quant import Quantizer
from codesign.sparsify.baselines import (UGS_GRAPH_RATE, UGS_WEIGHT_RATE, EdgeWeightMask, MaskWeight, PruneMask,
                                         UGSSchedule, check_fraction, global_magnitude_prune, magnitude_prune)
from codesign.train import LossTerm, Problem, TrainConfig, adjacency, graph_forward, masked_accuracy, task_term
from codesign.train import fit as train_fit

UGS_CORA = dict(hidden=512, lr=0.008, weight_decay=8e-5, epochs=200, s1=1e-2, s2=1e-2)
"""The official Cora GCN command's settings (Unified-LTH-GNN ``NodeClassification/README.md``)."""
UGS_MASK_NOISE = 1e-5
"""Relative uniform noise on the all-one soft masks (``pruning.add_trainable_mask_noise(c=1e-5)``)."""
NETS = ("ugs", "gcn")
PRUNINGS = ("ugs", "random")

LAYERS = ("conv1", "conv2")


class WeightMask(nnx.Module):
    """UGS's weight mask ``m_theta`` of one kernel: trainable values ``weight`` (`MaskWeight`,
    float32 [F_in, F_out], init 1) times a fixed binary ``keep`` (`PruneMask`, bool [F_in, F_out];
    UGS's ``weight_mask_train`` / ``weight_mask_fixed``)."""

    def __init__(self, shape: tuple[int, int]):
        self.weight = MaskWeight(jnp.ones(shape, jnp.float32))
        self.keep = PruneMask(jnp.ones(shape, bool))

    def gates(self) -> jax.Array:
        """float32 [F_in, F_out]: ``weight * keep``."""
        return self.weight[...] * self.keep[...].astype(jnp.float32)

    def l1_norm(self) -> jax.Array:
        """float32 scalar ``sum |weight * keep|`` (times ``s2`` in the loss)."""
        return jnp.sum(jnp.abs(self.gates()))


@final
class MaskedWeightQuant(Quantizer):
    """UGS's masked kernel in a layer's own weight path: ``q(w * mask.gates())``, ``q`` the
    layer's quantizer (a wrapper, not a new quantizer: its bits are ``q``'s).

    Shapes: ``w`` float32 [F_in, F_out] -> float32 [F_in, F_out].
    """

    def __init__(self, mask: WeightMask, inner: Quantizer):
        self.mask, self.inner = mask, inner

    def __call__(self, w: jax.Array) -> jax.Array:
        return self.inner(w * self.mask.gates())

    def expected_bits(self) -> jax.Array:
        return self.inner.expected_bits()

    def hard_bits(self):
        return self.inner.hard_bits()

    def takes_sparse(self) -> bool:
        return False  # a weight path: never given node features


class UGSGCN(nnx.Module):
    """`GCN` with an `EdgeWeightMask` (``gcn.edge_mask``) and a `WeightMask` per kernel
    (``mask1``, ``mask2``): each layer's weight path is ``quant_w(kernel * mask.gates())``
    (`MaskedWeightQuant` wraps the layer's quantizer), so the GCN runs unchanged.

    Shapes: ``__call__(x float32 [N, F], adj CooAdjacency E edges) -> logits float32 [N, C]``.
    """

    def __init__(self, n_features: int, hidden: int, n_classes: int, n_edges: int, *, dropout: float,
                 bits: Optional[int] = None, signed_input: bool = False, net: str = "ugs", rngs: nnx.Rngs):
        if net not in NETS:
            raise ValueError(f"UGSGCN: net must be one of {NETS}, got {net!r}")
        self.net = net
        self.gcn = GCN(n_features, hidden, n_classes, edge_sparsifier=EdgeWeightMask(n_edges), dropout=dropout,
                       input_dropout=net == "gcn", bits=bits, signed_input=signed_input, rngs=rngs)
        if net == "ugs":  # torch nn.Linear(bias=False): U(-1/sqrt(fan_in), 1/sqrt(fan_in)); biases stay 0
            for conv in (self.gcn.conv1, self.gcn.conv2):
                bound = 1.0 / math.sqrt(conv.in_features)
                conv.kernel[...] = jax.random.uniform(rngs.params(), conv.kernel.shape, jnp.float32, -bound, bound)
        self.mask1 = WeightMask(self.gcn.conv1.kernel.shape)
        self.mask2 = WeightMask(self.gcn.conv2.kernel.shape)
        for conv, mask in self.pairs():
            conv.quant_w = MaskedWeightQuant(mask, conv.quant_w)

    def trainable(self, train_masks: bool):
        """The `nnx` filter of what the optimizer updates: the weights (not the biases with
        ``net="ugs"``: UGS's layers have none), and the `MaskWeight` masks if ``train_masks``."""
        wrt = nnx.Param if train_masks else nnx.All(nnx.Param, nnx.Not(MaskWeight))
        return nnx.All(wrt, nnx.Not(nnx.PathContains("bias"))) if self.net == "ugs" else wrt

    def pairs(self):
        """``[(conv1, mask1), (conv2, mask2)]``."""
        return [(self.gcn.conv1, self.mask1), (self.gcn.conv2, self.mask2)]

    def __call__(self, x: jax.Array, adj) -> jax.Array:
        return self.gcn(x, adj)

    def effective_kernels(self) -> list[jax.Array]:
        """float32 kernels as the forward uses them: ``kernel * weight_mask * keep``."""
        return [conv.kernel[...] * mask.gates() for conv, mask in self.pairs()]

    def l1_terms(self) -> tuple[jax.Array, jax.Array]:
        """``(||m_g||_1, sum_l ||m_theta_l||_1)``, float32 scalars."""
        return self.gcn.edge_mask.l1_norm(), self.mask1.l1_norm() + self.mask2.l1_norm()


def _check_mask_noise(mask_noise) -> None:
    if not 0.0 <= mask_noise < 1.0:
        raise ValueError(f"mask_noise must be in [0, 1), got mask_noise={mask_noise!r}")


def build_ticket(graph: Graph, seed: int, edge_keep=None, weight_keeps: Optional[Sequence] = None, *,
                 hidden: int = UGS_CORA["hidden"], dropout: float = 0.5, bits: Optional[int] = None,
                 net: str = "ugs", mask_noise: float = 0.0) -> UGSGCN:
    """The rewound model of a ticket: the initial weights of ``seed`` (the same every round), the
    pruned kernel entries zeroed, the keep masks set and the trainable masks reset to them
    (UGS: ``rewind_weight[...mask_train] = rewind_weight[...mask_fixed] = final_mask``).

    Args:
      graph: the `Graph` (E = ``graph.n_edges`` directed edges).
      seed: initialization (``params``), dropout (``dropout`` = seed + 1) and mask-noise streams.
      edge_keep: bool [E] or None (all kept).
      weight_keeps: ``[bool [F, hidden], bool [hidden, C]]`` or None (all kept).
      bits: fake-quantization bit-width of the GCN's features and weights (None = fp32); the
        masked kernel is what gets quantized.
      net: "ugs" (UGS's ``net_gcn``) or "gcn" (this package's `GCN`); see the module docstring.
      mask_noise: relative noise ``c`` of UGS's all-one soft-mask init: every trainable mask is
        ``keep * (1 + c * U(-1, 1))``, the same draws for the same ``seed`` (`UGS_MASK_NOISE` for
        the get-mask stage; 0 = exactly the binary masks, as the fixed-mask retraining uses).

    Returns:
      `UGSGCN` in training mode.

    Raises:
      ValueError: ``net`` unknown, ``mask_noise`` outside [0, 1).
    """
    _check_mask_noise(mask_noise)
    model = UGSGCN(graph.n_features, hidden, graph.n_classes, graph.n_edges, dropout=dropout, bits=bits,
                   signed_input=graph.signed_features, net=net, rngs=nnx.Rngs(params=seed, dropout=seed + 1))
    em = model.gcn.edge_mask
    if edge_keep is not None:
        em.keep[...] = jnp.asarray(edge_keep, bool)
    if weight_keeps is not None:
        for (conv, mask), keep in zip(model.pairs(), weight_keeps, strict=True):
            mask.keep[...] = jnp.asarray(keep, bool)
            conv.kernel[...] = conv.kernel[...] * mask.keep[...]
    noise_keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), 0x55), 3)
    for key, m in zip(noise_keys, (em, model.mask1, model.mask2)):
        keep = m.keep[...].astype(jnp.float32)
        noise = mask_noise * jax.random.uniform(key, keep.shape, jnp.float32, -1.0, 1.0) if mask_noise else 0.0
        m.weight[...] = keep * (1.0 + noise)
    model.train()
    return model


def _val_accuracy(m, data):
    """UGS's selection key: the validation accuracy alone (loss 0, so an equal accuracy never
    replaces the first epoch that reached it: UGS's strictly improving best)."""
    graph, adj, x = data
    return masked_accuracy(m(x, adj), graph.y, graph.val_mask), jnp.zeros((), jnp.float32)


def _l1_term(weight: float, which: int) -> LossTerm:
    """``weight * ||m||_1`` of the graph masks (``which`` 0) or the weight masks (1) of a `UGSGCN`."""
    return lambda ctx: weight * ctx.model.l1_terms()[which]


def fit(model: UGSGCN, graph: Graph, *, train_masks: bool, epochs: int, lr: float, weight_decay: float,
        s1: float = 0.0, s2: float = 0.0) -> dict:
    """Full-batch training of ``model`` (in place) with UGS's optimizer and selection, through the
    one fit loop (`codesign.train.fit`): Adam (lr, L2 ``weight_decay`` coupled on every trained
    parameter, as torch's ``Adam(weight_decay=...)``), one evaluation per epoch, the epoch with
    the best (strictly improving) validation accuracy selected; the model ends at that epoch.

    Args:
      train_masks: True: the get-mask stage (weights and `MaskWeight` masks trained, L1 ``s1`` on
        the graph mask and ``s2`` on the weight masks); False: the fixed-mask retraining.

    Returns:
      ``{"val_accuracy", "test_accuracy", "epoch"}`` at the best-validation epoch (epoch -1 and
      both accuracies 0 if the validation accuracy never rose above 0; the model then ends at
      epoch 0), and with ``train_masks`` ``"masks"``: ``(edge float32 [E], [kernel masks])``
      trained mask values at that epoch (``weight * keep``).
    """
    cfg = TrainConfig.from_flat(epochs=epochs, lr=lr, weight_decay=weight_decay, select="best_val")
    tx = optax.chain(optax.add_decayed_weights(cfg.optim.weight_decay), optax.adam(cfg.optim.lr))
    terms = [task_term, _l1_term(s1, 0), _l1_term(s2, 1)] if train_masks else [task_term]
    adj = adjacency(graph)
    problem = Problem((graph, adj, graph.x), graph_forward, lambda m, hard: jnp.ones((), jnp.float32), _val_accuracy)
    model.train()
    result = train_fit(model, problem, cfg, terms, tx=tx, wrt=model.trainable(train_masks))
    model.eval()
    logits = model(graph.x, adj)
    val = float(masked_accuracy(logits, graph.y, graph.val_mask))
    best = {"val_accuracy": val, "test_accuracy": float(masked_accuracy(logits, graph.y, graph.test_mask)),
            "epoch": result.selected_epoch}
    if val == 0.0:
        best.update(val_accuracy=0.0, test_accuracy=0.0, epoch=-1)
    if train_masks:
        best["masks"] = (model.gcn.edge_mask.edge_gates(), [mask.gates() for _, mask in model.pairs()])
    model.train()
    return best


def ugs_counted_macs(n_nodes: int, kept_edges: int, weight_nnz: Sequence[int], in_widths: Sequence[int]) -> int:
    """MACs of a sparse GCN counted as UGS does (GEMM MACs x weight density + aggregation MACs x
    edge density, in UGS's aggregate-then-combine order, ``net.py``): per layer ``l``,
    ``N * nnz(W_l) + (kept_edges + N) * F_in_l`` (self-loops kept). Unstructured weight sparsity
    is counted as saved work here; `hwmodel` does not model it."""
    return int(sum(n_nodes * int(w) + (int(kept_edges) + n_nodes) * int(f) for w, f in zip(weight_nnz, in_widths)))


def _cost(model: UGSGCN, graph: Graph, hw, dense_report) -> dict:
    report = hwmodel.estimate(model.gcn.workload(graph.n_nodes, graph.n_edges, hard=True), hw)
    return {"energy_ratio": float(report.energy_j / dense_report.energy_j),
            "latency_ratio": float(report.latency_s / dense_report.latency_s)}


def _check_rounds(rounds) -> int:
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 0:
        raise ValueError(f"rounds must be a non-negative int, got rounds={rounds!r}")
    return rounds


def ugs_prune(graph: Graph, rounds: int = 8, *, seed: int = 0, epochs: int = UGS_CORA["epochs"],
              hw: Optional[hwmodel.HardwareSpec] = None, graph_rate: float = UGS_GRAPH_RATE,
              weight_rate: float = UGS_WEIGHT_RATE, s1: float = UGS_CORA["s1"], s2: float = UGS_CORA["s2"],
              hidden: int = UGS_CORA["hidden"], lr: float = UGS_CORA["lr"],
              weight_decay: float = UGS_CORA["weight_decay"], dropout: float = 0.5, dense_round: bool = True,
              bits: Optional[int] = None, net: str = "ugs", mask_noise: float = UGS_MASK_NOISE,
              pruning: str = "ugs", on_round: Optional[Callable[[dict], None]] = None) -> list[dict]:
    """UGS iterative magnitude pruning with rewinding (module docstring), ``rounds`` rounds.

    Args:
      graph: a `Graph` with train/val/test masks.
      rounds: number of pruning rounds (>= 0); after ``k`` the nominal sparsities are
        ``1 - (1 - graph_rate)^k`` and ``1 - (1 - weight_rate)^k`` (`UGSSchedule`).
      seed: the initialization (rewound to every round) and dropout seed.
      epochs: epochs of each stage (UGS: 200 and 200).
      hw: `HardwareSpec` for the modeled cost (default ``presets.get("h100")``).
      graph_rate, weight_rate: fractions of the remaining edges / weights pruned per round, in [0, 1].
      s1, s2: L1 coefficients on the graph / weight masks (UGS Cora: 1e-2, 1e-2).
      hidden, lr, weight_decay, dropout: the GCN and optimizer (UGS Cora: 512, 0.008, 8e-5, 0.5).
      dense_round: also record round 0, the unpruned model trained the same way (fixed all-one masks).
      bits: train both stages with ``bits``-bit fake quantization (UGS + INT8 QAT: the
        "UGS-style + INT8" baseline); the modeled cost then uses those bits. None = fp32 (UGS).
      net: "ugs" (UGS's ``net_gcn``) or "gcn" (this package's `GCN`), see the module docstring.
      mask_noise: relative noise of the get-mask stage's all-one masks (`build_ticket`); 0 breaks
        ties among equal mask values by index.
      pruning: "ugs" (prune the smallest trained mask values) or "random" (the control of UGS's
        ``main_pruning_random.py``: the same schedule of prune counts on uniformly random scores,
        with no get-mask stage; the weights of both layers pooled as in "ugs").
      on_round: optional callback with each round's record as it finishes.

    Returns:
      One dict per round: ``round``, ``graph_sparsity`` / ``weight_sparsity`` (measured pruned
      fractions of the E edges / of the kernel entries; biases are not masked and not counted),
      ``nominal_graph_sparsity`` / ``nominal_weight_sparsity``, ``test_accuracy`` /
      ``val_accuracy`` / ``best_epoch`` of the fixed-mask retraining (UGS's reported number),
      ``mask_stage_test_accuracy`` (best-val test accuracy of the get-mask stage, None in round 0),
      ``kept_edges``, ``weight_nnz`` (per layer), ``energy_ratio`` / ``latency_ratio`` (modeled on
      ``hw`` vs the dense GCN; only edges shrink it), ``ugs_counted_macs`` / ``dense_ugs_counted_macs``
      / ``ugs_macs_ratio``, ``time_s``.

    Raises:
      ValueError: a rate outside [0, 1], ``rounds`` not a non-negative int, ``epochs < 1``, ``net``
        unknown, ``mask_noise`` outside [0, 1), ``pruning`` unknown.
    """
    if net not in NETS:
        raise ValueError(f"ugs_prune: net must be one of {NETS}, got {net!r}")
    if pruning not in PRUNINGS:
        raise ValueError(f"ugs_prune: pruning must be one of {PRUNINGS}, got {pruning!r}")
    _check_mask_noise(mask_noise)  # before round 0's training, and also where no get-mask stage uses it
    graph_rate, weight_rate = check_fraction(graph_rate, "graph_rate"), check_fraction(weight_rate, "weight_rate")
    rounds = _check_rounds(rounds)
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got epochs={epochs!r}")
    if hw is None:
        hw = hwmodel.presets.get("h100")
    schedule = UGSSchedule(graph_rate, weight_rate)
    dense = GCN(graph.n_features, hidden, graph.n_classes, dropout=dropout, rngs=nnx.Rngs(0))  # fp32 reference
    dense_report = hwmodel.estimate(dense.workload(graph.n_nodes, graph.n_edges, hard=True), hw)
    in_widths = (graph.n_features, hidden)
    dense_macs = ugs_counted_macs(graph.n_nodes, graph.n_edges, [graph.n_features * hidden, hidden * graph.n_classes],
                                  in_widths)
    train_kw = dict(epochs=epochs, lr=lr, weight_decay=weight_decay)
    net_kw = dict(hidden=hidden, dropout=dropout, bits=bits, net=net)
    edge_keep = jnp.ones((graph.n_edges,), bool)
    weight_keeps = [jnp.ones((graph.n_features, hidden), bool), jnp.ones((hidden, graph.n_classes), bool)]
    records = []
    for k in range(0 if dense_round else 1, rounds + 1):
        t0 = time.perf_counter()
        mask_stage = None
        if k > 0:
            if pruning == "random":
                keys = jax.random.split(jax.random.fold_in(jax.random.key(seed), k), 1 + len(weight_keeps))
                edge_scores = jax.random.uniform(keys[0], edge_keep.shape)
                weight_scores = [jax.random.uniform(key, w.shape) for key, w in zip(keys[1:], weight_keeps)]
            else:
                model = build_ticket(graph, seed, edge_keep, weight_keeps, mask_noise=mask_noise, **net_kw)
                got = fit(model, graph, train_masks=True, s1=s1, s2=s2, **train_kw)
                mask_stage = got["test_accuracy"]
                edge_scores, weight_scores = got["masks"]
            edge_keep = magnitude_prune(edge_scores, edge_keep, graph_rate)
            weight_keeps = global_magnitude_prune(weight_scores, weight_keeps, weight_rate)
        model = build_ticket(graph, seed, edge_keep, weight_keeps, **net_kw)
        res = fit(model, graph, train_masks=False, **train_kw)
        kept = int(np.count_nonzero(np.asarray(edge_keep)))
        nnz = [int(np.count_nonzero(np.asarray(w))) for w in weight_keeps]
        total = sum(int(np.size(w)) for w in weight_keeps)
        macs = ugs_counted_macs(graph.n_nodes, kept, nnz, in_widths)
        g_nom, w_nom = schedule.sparsity(k)
        rec = {"round": k, "seed": seed,
               "graph_sparsity": 1.0 - kept / graph.n_edges, "weight_sparsity": 1.0 - sum(nnz) / total,
               "nominal_graph_sparsity": g_nom, "nominal_weight_sparsity": w_nom,
               "test_accuracy": res["test_accuracy"], "val_accuracy": res["val_accuracy"],
               "best_epoch": res["epoch"], "mask_stage_test_accuracy": mask_stage,
               "kept_edges": kept, "weight_nnz": nnz, **_cost(model, graph, hw, dense_report),
               "ugs_counted_macs": macs, "dense_ugs_counted_macs": dense_macs, "ugs_macs_ratio": macs / dense_macs,
               "time_s": time.perf_counter() - t0}
        if not all(math.isfinite(v) for v in (rec["energy_ratio"], rec["test_accuracy"])):
            rec["warning"] = "non-finite result"
        records.append(rec)
        if on_round is not None:
            on_round(rec)
    return records
