"""Deploy: a hardened model as a compact inference program, and `measure` of what it saves.

`deploy(model, graph)` turns a hardened (eval-mode) GCN into a `CompactGCN` (a GraphSAGE into a
`CompactSAGE`, a GAT into a `CompactGAT`, below):

- input features whose gate is 0 are removed: the program stores ``Q(X[:, kept] * z[kept])``
  (the feature store of the deployed model holds only the columns it reads, quantized once: the
  features are static data in transductive node classification) and the first weight matrix
  only the kept rows; the store is dense or scipy CSR, whichever runs the first product faster
  on this machine (``feature_store="auto"``, timed at deploy; bag-of-words features are ~1 %
  nonzero), and the dense reference gets the same choice, so the reference is the best
  configuration of the dense model, not a strawman;
- hidden channels whose gate is 0 are removed from the first layer's columns and bias and from
  the second layer's rows;
- edges whose gate is 0 are removed and the GCN normalization ``D^-1/2 (A_gated + I) D^-1/2``
  is recomputed over the kept ones, as the hardened model defines it (`gcn_normalize`); the
  result is one scipy CSR matrix;
- quantized weights are stored as integer codes (int8 arrays; their stored bytes are counted at
  ``bits`` per value, as packed) with their per-tensor scale, taken from the *full* weight before
  rows and columns are removed (the hardened model's grid); activations are quantized at run
  time on the same grid as the hardened model (per-tensor max scale). On this CPU the matrix
  products run in float32 on the dequantized codes: numpy has no int8 GEMM faster than its
  float32 one (docs/results.md), so the integer path is not taken.

Its logits equal the hardened model's up to float32 summation order (the removed terms are exact
zeros; the quantized values are the same grid points).

`measure(compact, dense)` times the compact program and the dense FP32 program of the same
architecture (`dense_program`) in one process, alternating, and reports the median latency,
peak memory of one call (tracemalloc) and the stored model bytes of each.

Learned bit-widths (`LearnedBitQuant`: the "learned" and "a2q" quantizers, per tensor or per node)
deploy on the grid the hardened model used: the model is run once on the graph (its pinned or
capped ranges follow the data then), weights are exported with their learned step
(`codesign.quant.export_quantizer`), the static input features are quantized once by the model's
own input quantizer, and the hidden activation is quantized at run time with the step and range
(per tensor or per node row) of that forward pass: a transductive program sees the same hidden
activation at every call, so these are its calibrated static scales.

Supported: `codesign.models.GCN` with any edge sparsifier whose deterministic gates are per
edge (`EdgeMask`, `BlockEdgeMask`, `DropEdge`), a `FeatureMask`, a `ChannelMask`, and the
"fixed" quantizer (`FakeQuant`), learned bit-widths (`LearnedBitQuant`) or none; and
`codesign.models.GraphSAGE` with the mean aggregator, the same masks and the fixed quantizer or
none (`CompactSAGE`: the mean over the kept edges, ``D^-1 A_gated``, recomputed as the hardened
model defines it, and the root and neighbour weights of each layer stored as codes on their own
grids); and `codesign.models.GAT` with the same masks and the fixed quantizer or none
(`CompactGAT`: per head the kept channels, the attention over the kept edges and the self-loops
with each edge counted ``g_e`` times in its receiver's softmax, as
`codesign.vertex.Program.with_edge_gates` defines it, in numpy / scipy CSR). Other models,
aggregators and quantizers raise `NotDeployableError` (a NotImplementedError, and a ValueError so that the command
line reports it in one line); `check_deployable` asks that of a `TrainConfig` before training.
"""

from __future__ import annotations

import abc
import dataclasses
import os
import statistics
import time
import tracemalloc
from typing import Callable, Optional, final

import numpy as np
import scipy.sparse as sp

from codesign.bench import MALLOC_ENV
from codesign.graph import Graph
from codesign.models import GAT, GCN, GraphSAGE
from codesign.quant import FakeQuant, LearnedBitQuant, qrange

COMPUTE_BITS = 32
"""Width the compact program computes and stores activations in: float32 (weights are stored as
integer codes and dequantized once). numpy has no integer GEMM faster than its float32 one on the
CPUs measured (docs/results.md), so the integer path is not taken, and `measure_model` prices
the program at this width."""

CHANNEL_LANES = 4
"""The hidden width of a deployed program is padded to a multiple of this (float32 lanes of a 128-bit
vector). Measured on this CPU (docs/results.md): scipy's CSR products run slower at widths that are
not multiples of 4 than at the next multiple (Cora, width 15: X @ W 172 us, A @ H 57 us; width
16: 128 us, 50 us), so a pruned width of 15 ran slower than the full 16."""

__all__ = ["NotDeployableError", "check_deployable", "COMPUTE_BITS", "CHANNEL_LANES", "FEATURE_STORES", "QuantizedMatrix", "CompactGCN",
           "CompactSAGE", "CompactGAT", "deploy",
           "dense_program", "pick_feature_store", "measure", "measure_model"]


class NotDeployableError(NotImplementedError, ValueError):
    """A model or quantizer `deploy` cannot compile (yet): a NotImplementedError, and a ValueError
    so that the command line reports it as one line of bad input."""


def _check_supported(model) -> None:
    """Raises `NotDeployableError` unless `deploy` compiles ``model``'s kind and quantizers (the
    structural rules of `deploy`, in one place)."""
    if isinstance(model, GraphSAGE):
        if model.aggr != "mean":
            raise NotDeployableError(f"deploy: GraphSAGE compiles with the mean aggregator only, got aggr={model.aggr!r}")
        for conv in (model.conv1, model.conv2):
            for q in (conv.quant_x, conv.quant_w_neigh, conv.quant_w_root):
                if not isinstance(q, FakeQuant):
                    raise NotDeployableError(f"deploy: GraphSAGE compiles with the fixed quantizer (FakeQuant) or none "
                                             f"only, got {type(q).__name__}")
        return
    if isinstance(model, GAT):
        for conv in (model.conv1, model.conv2):
            for q in (conv.quant_x, conv.quant_w):
                if not isinstance(q, FakeQuant):
                    raise NotDeployableError(f"deploy: GAT compiles with the fixed quantizer (FakeQuant) or none only, "
                                             f"got {type(q).__name__}")
        return
    if not isinstance(model, GCN):
        raise NotDeployableError(f"deploy: only codesign.models.GCN, GraphSAGE and GAT are supported so far, got "
                                 f"{type(model).__name__}")
    for conv in (model.conv1, model.conv2):
        for q in (conv.quant_x, conv.quant_w):
            if not isinstance(q, (FakeQuant, LearnedBitQuant)):
                raise NotDeployableError(f"deploy: only the fixed (FakeQuant) and learned bit-width (LearnedBitQuant) "
                                         f"quantizers are supported, got {type(q).__name__}")


def check_deployable(cfg, graph: Graph) -> None:
    """Whether `deploy` can compile the model that ``cfg`` trains on ``graph``, answered before
    any training: builds that model (`codesign.train.build_model`, untrained: cheap) and applies
    `deploy`'s own rules to it.

    Args:
      cfg: a `codesign.train.TrainConfig`.
      graph: the `Graph` it would be trained on.

    Raises:
      NotDeployableError: naming the model or quantizer `deploy` does not compile, and the config
        field that chose it.
      ValueError: ``cfg`` cannot be built for ``graph`` (as `build_model`).
    """
    from flax import nnx

    from codesign.train import build_model
    try:
        _check_supported(build_model(cfg, graph, nnx.Rngs(0)))
    except NotDeployableError as err:
        raise NotDeployableError(f"{err} (TrainConfig model={cfg.model.name!r}, quantizer={cfg.quant.quantizer!r}, "
                                 f"bits={cfg.quant.bits})") from None


@dataclasses.dataclass(frozen=True)
class QuantizedMatrix:
    """A weight stored as integer codes: ``values = codes * scale``.

    Fields:
      codes: int8 [K, F] (bits <= 8) or float32 [K, F] (not quantized, ``bits`` 32).
      scale: float32 step (1.0 when not quantized).
      bits: 1..8 or 32.
    """

    codes: np.ndarray
    scale: float
    bits: int

    @property
    def stored_bytes(self) -> int:
        """Bytes of the stored codes (``bits`` per value, packed; ceil per matrix) + the scale."""
        if self.bits >= 32:
            return int(self.codes.size * 4)
        return int(-(-self.codes.size * self.bits // 8)) + 4

    def dequantized(self) -> np.ndarray:
        """float32 [K, F]: the values the hardened model multiplies by."""
        return (self.codes.astype(np.float32) * np.float32(self.scale)) if self.bits < 32 else self.codes


def _quantize_weight(w: np.ndarray, bits: Optional[int]) -> tuple[np.ndarray, float, int]:
    """Integer codes and scale of ``w`` on `fake_quant`'s signed per-tensor grid."""
    if bits is None or bits >= 32:
        return w.astype(np.float32), 1.0, 32
    lo, hi = qrange(bits, True)
    amax = float(np.max(np.abs(w)))
    scale = np.float32(amax / hi) if amax > 0 else np.float32(1.0)
    codes = np.clip(np.round(w / scale), lo, hi).astype(np.int8)
    return codes, float(scale), int(bits)


def _weight_codes(q, w: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Integer codes, scale and bits of the weight ``w`` on quantizer ``q``'s grid (`FakeQuant`: max
    scale; `LearnedBitQuant`: its learned step, `codesign.quant.export_quantizer`)."""
    if isinstance(q, FakeQuant):
        return _quantize_weight(w, q.bits)
    import jax.numpy as jnp

    from codesign.quant import export_quantizer
    t = export_quantizer(q, jnp.asarray(w, jnp.float32))
    return np.asarray(t.values).astype(np.int8), float(np.asarray(t.scale)), int(t.bits)


def _grid(q) -> Optional[tuple[np.ndarray, np.ndarray]]:
    """``(step, range)`` float32 ([] per tensor, [N, 1] per node) of a `LearnedBitQuant` as its last
    call left them (`LearnedBitQuant.step_size`, `range_max`); None for a `FakeQuant`."""
    if not isinstance(q, LearnedBitQuant):
        return None
    row = (lambda v: v[:, None]) if q.per_node is not None else (lambda v: v)
    return (row(np.asarray(q.step_size(), np.float32)), row(np.asarray(q.range_max(), np.float32)))


def _quantize_on_grid(x: np.ndarray, grid: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """`codesign.quant.learned_bit_quant` (unsigned) in numpy: ``d * round(clip(x, 0, q_max) / d)``."""
    d, qmax = grid
    return (d * np.round(np.clip(x, 0, qmax) * (np.float32(1.0) / d))).astype(np.float32)


def _quantize_activation(x: np.ndarray, bits: Optional[int], signed: bool = False) -> np.ndarray:
    """`fake_quant` of an activation (per-tensor max scale: ``max(x, 0)`` unsigned, ``max|x|``
    signed), float32."""
    if bits is None or bits >= 32:
        return x
    lo, hi = qrange(bits, signed)
    amax = np.float32(np.max(np.abs(x) if signed else np.maximum(x, 0)))
    scale = amax / np.float32(hi) if amax > 0 else np.float32(1.0)
    return (np.clip(np.round(x / scale), lo, hi) * scale).astype(np.float32)


class _CompactProgram(abc.ABC):
    """What every compact program (`CompactGCN`, `CompactSAGE`, `CompactGAT`) offers: a call that
    returns the logits, its hidden width, and its stored bytes (parameters; graph = edges +
    feature columns)."""

    @abc.abstractmethod
    def __call__(self) -> np.ndarray:
        """Logits float32 [N, C]."""

    @property
    @abc.abstractmethod
    def run_channels(self) -> int:
        """The hidden width the program computes with."""

    @property
    @abc.abstractmethod
    def model_bytes(self) -> int:
        """Stored parameter bytes."""

    @property
    @abc.abstractmethod
    def edge_bytes(self) -> int:
        """Stored bytes of the edges the program aggregates over."""

    @property
    def feature_store(self) -> str:
        """``"csr"`` when the features are stored as scipy CSR, else ``"dense"``."""
        return "csr" if sp.issparse(self.x) else "dense"

    @property
    def graph_bytes(self) -> int:
        """Stored bytes of the edges (`edge_bytes`) and the feature columns."""
        return self.edge_bytes + _stored_bytes(self.x)


def _lane_width(kept: int) -> int:
    """``kept`` hidden channels rounded up to a multiple of `CHANNEL_LANES` (the width a program computes with)."""
    return -(-kept // CHANNEL_LANES) * CHANNEL_LANES


def _all_kept(features: int, channels: int, edges: int) -> dict:
    """A dense program's `CompactGCN.kept`: every feature, channel and edge."""
    return {"features": features, "feature_fraction": 1.0, "channels": channels, "channel_fraction": 1.0,
            "edges": edges, "edge_fraction": 1.0}


@final
@dataclasses.dataclass(frozen=True)
class CompactGCN(_CompactProgram):
    """A deployed two-layer GCN (`deploy`): run it with ``compact()`` (its features are stored).

    Fields:
      adj: scipy CSR float32 [N, N], the normalized adjacency over the kept edges + self-loops.
      x: float32 [N, F_kept] the kept, gate-scaled input feature columns, already on the first
        layer's activation grid (the features are static data: quantized once at deploy time);
        a numpy array or a scipy CSR matrix (`feature_store`).
      w0, w1: `QuantizedMatrix` [F_kept, H_kept] and [H_kept, C].
      b0: float32 [H_kept]; b1: float32 [C].
      channel_gate: float32 [H_kept] the kept hidden channels' deterministic gates.
      bits: activation bit-width (None = fp32) of a fixed quantizer (per-tensor max scale per call).
      kept: dict of kept counts and fractions (``features``, ``channels``, ``edges``).
      hidden_grid: ``(step, range)`` float32 ([] or [N, 1]) of a learned bit-width quantizer of the
        hidden activation (`_grid`), used instead of ``bits``; None otherwise.
    """

    adj: sp.csr_matrix
    x: np.ndarray | sp.csr_matrix
    w0: QuantizedMatrix
    w1: QuantizedMatrix
    b0: np.ndarray
    b1: np.ndarray
    channel_gate: np.ndarray
    bits: Optional[int]
    kept: dict
    hidden_grid: Optional[tuple] = None

    def __post_init__(self):
        # the run-time matrices: dequantized, the hidden width padded with zero channels to a multiple
        # of CHANNEL_LANES (a padded channel is relu(0 + 0) * 0 = 0 and its row of w1 is 0: exact)
        pad = self.run_channels - self.w0.codes.shape[1]
        object.__setattr__(self, "_w0", np.pad(self.w0.dequantized(), ((0, 0), (0, pad))))
        object.__setattr__(self, "_w1", np.pad(self.w1.dequantized(), ((0, pad), (0, 0))))
        object.__setattr__(self, "_b0", np.pad(self.b0, (0, pad)))
        # gates that are all 1 (the dense program, a mask whose kept gates saturate) are not applied
        gate = None if np.all(self.channel_gate == 1.0) else np.pad(self.channel_gate, (0, pad))
        object.__setattr__(self, "_gate", gate)

    def __call__(self) -> np.ndarray:
        """Logits float32 [N, C]."""
        h = _layer(self.adj, self.x, self._w0, self._b0)
        np.maximum(h, 0, out=h)  # in place: numpy does not fuse, so each op is a pass over h
        if self._gate is not None:
            h *= self._gate
        grid = self.hidden_grid
        h = _quantize_activation(h, self.bits) if grid is None else _quantize_on_grid(h, grid)
        return _layer(self.adj, h, self._w1, self.b1)

    @property
    def run_channels(self) -> int:
        """The hidden width the program computes with: the kept channels rounded up to a multiple
        of `CHANNEL_LANES` (zero channels; the stored model keeps only the kept ones)."""
        return _lane_width(self.w0.codes.shape[1])

    @property
    def model_bytes(self) -> int:
        """Stored parameter bytes: integer codes (packed) + scales + biases + channel gates."""
        return self.w0.stored_bytes + self.w1.stored_bytes + 4 * (self.b0.size + self.b1.size + self.channel_gate.size)

    @property
    def edge_bytes(self) -> int:
        """Stored bytes of the adjacency (CSR indptr, indices, values)."""
        return _stored_bytes(self.adj)


def _stored_bytes(a) -> int:
    """Bytes of a dense array or of a scipy CSR matrix's indptr, indices and values."""
    return int(a.indptr.nbytes + a.indices.nbytes + a.data.nbytes) if sp.issparse(a) else int(a.nbytes)


@final
@dataclasses.dataclass(frozen=True)
class CompactSAGE(_CompactProgram):
    """A deployed two-layer GraphSAGE with the mean aggregator (`deploy`): run it with
    ``compact()``. Each layer is ``A_mean @ h @ W_neigh + h @ W_root + b`` (Hamilton et al.,
    NeurIPS 2017, Alg. 1 with ``W`` split in two, as `codesign.models.SAGEConv`).

    Fields (as `CompactGCN`, except):
      adj: scipy CSR float32 [N, N], ``D^-1 A`` over the kept edges, rows = receivers, no
        self-loops (`codesign.models.sage.mean_adjacency`: the gates weight the mean).
      w0_neigh, w0_root: `QuantizedMatrix` [F_kept, H_kept]; w1_neigh, w1_root: [H_kept, C].
    """

    adj: sp.csr_matrix
    x: np.ndarray | sp.csr_matrix
    w0_neigh: QuantizedMatrix
    w0_root: QuantizedMatrix
    w1_neigh: QuantizedMatrix
    w1_root: QuantizedMatrix
    b0: np.ndarray
    b1: np.ndarray
    channel_gate: np.ndarray
    bits: Optional[int]
    kept: dict

    def __post_init__(self):
        # as CompactGCN: the hidden width padded with zero channels to a multiple of CHANNEL_LANES
        pad = self.run_channels - self.w0_neigh.codes.shape[1]
        cols = lambda m: np.pad(m.dequantized(), ((0, 0), (0, pad)))
        rows = lambda m: np.pad(m.dequantized(), ((0, pad), (0, 0)))
        object.__setattr__(self, "_w0", (cols(self.w0_neigh), cols(self.w0_root)))
        object.__setattr__(self, "_w1", (rows(self.w1_neigh), rows(self.w1_root)))
        object.__setattr__(self, "_b0", np.pad(self.b0, (0, pad)))
        gate = None if np.all(self.channel_gate == 1.0) else np.pad(self.channel_gate, (0, pad))
        object.__setattr__(self, "_gate", gate)

    def __call__(self) -> np.ndarray:
        """Logits float32 [N, C]."""
        h = _sage_layer(self.adj, self.x, *self._w0, self._b0)
        np.maximum(h, 0, out=h)
        if self._gate is not None:
            h *= self._gate
        return _sage_layer(self.adj, _quantize_activation(h, self.bits), *self._w1, self.b1)

    @property
    def run_channels(self) -> int:
        """The hidden width the program computes with (`CompactGCN.run_channels`)."""
        return _lane_width(self.w0_neigh.codes.shape[1])

    @property
    def model_bytes(self) -> int:
        """Stored parameter bytes: integer codes (packed) + scales + biases + channel gates."""
        ws = (self.w0_neigh, self.w0_root, self.w1_neigh, self.w1_root)
        return sum(w.stored_bytes for w in ws) + 4 * (self.b0.size + self.b1.size + self.channel_gate.size)

    @property
    def edge_bytes(self) -> int:
        """Stored bytes of the adjacency (CSR indptr, indices, values)."""
        return _stored_bytes(self.adj)


@final
@dataclasses.dataclass(frozen=True)
class CompactGAT(_CompactProgram):
    """A deployed two-layer GAT (`deploy`): run it with ``compact()``. Per layer and head ``k``
    (Velickovic et al., ICLR 2018, eq. 1-4): ``h = x @ W_k``, scores ``LeakyReLU(a_src . h_u +
    a_dst . h_v)`` on the kept edges and the self-loops, a softmax per receiver in which an edge
    counts ``g_e`` times (its deterministic gate; self-loops 1: `codesign.vertex.Program.with_edge_gates`),
    ``out = sum_u alpha_uv h_u``; layer 0 concatenates its heads, layer 1 averages them; ELU between.

    Fields:
      senders, receivers: int32 [E_kept + N] kept edges then self-loops; gate: float32 [E_kept + N].
      x: float32 [N, F_kept] (dense or scipy CSR, `feature_store`), gate-scaled and quantized once.
      heads0: per head of layer 0, ``(columns int [C_k], W QuantizedMatrix [F_kept, C_k], att_src,
        att_dst float32 [C_k])``: its kept channels (indices into layer 0's H*F output), their
        weight columns and attention entries (a channel gate scales ``h``; folded in at run time).
      channel_gate: float32 [C_kept] the kept channels' gates; b0: float32 [C_kept].
      w1: `QuantizedMatrix` [C_kept, H1*F1]; att1_src, att1_dst: float32 [H1, F1]; b1: float32 [F1].
      bits1: layer 1's input bits (signed grid, per-tensor max; None = fp32); slopes: the two
        layers' LeakyReLU slopes; kept: as `CompactGCN`.
    """

    senders: np.ndarray
    receivers: np.ndarray
    gate: np.ndarray
    x: np.ndarray | sp.csr_matrix
    heads0: tuple
    channel_gate: np.ndarray
    b0: np.ndarray
    w1: QuantizedMatrix
    att1_src: np.ndarray
    att1_dst: np.ndarray
    b1: np.ndarray
    bits1: Optional[int]
    slopes: tuple
    kept: dict

    def __post_init__(self):
        n = self.x.shape[0]
        order = np.argsort(self.receivers, kind="stable")  # CSR order (rows = receivers), once
        indptr = np.searchsorted(self.receivers[order], np.arange(n + 1)).astype(np.int64)
        object.__setattr__(self, "_csr", (self.senders[order], self.receivers[order], self.gate[order], indptr,
                                          np.diff(indptr)))
        # one GEMM for all heads: the kept columns side by side, the channel gate folded in
        ws = [w.dequantized() for _, w, _, _ in self.heads0]
        w0 = np.concatenate(ws, 1) if ws else np.zeros((self.x.shape[1], 0), np.float32)
        object.__setattr__(self, "_w0", np.ascontiguousarray(w0 * self.channel_gate[None, :]))
        bounds = np.cumsum([0] + [w.shape[1] for w in ws])
        heads1, f1 = self.att1_src.shape
        # the attention scores of all heads as one product: h @ [C, H] (a head's column holds its
        # attention vector at its own channels' rows, zeros elsewhere)
        src0, dst0 = (np.zeros((int(bounds[-1]), len(ws)), np.float32) for _ in range(2))
        for k, (a, b, (_, _, a_s, a_d)) in enumerate(zip(bounds[:-1], bounds[1:], self.heads0)):
            src0[a:b, k], dst0[a:b, k] = a_s, a_d
        src1, dst1 = (np.zeros((heads1 * f1, heads1), np.float32) for _ in range(2))
        for k in range(heads1):
            src1[k * f1:(k + 1) * f1, k], dst1[k * f1:(k + 1) * f1, k] = self.att1_src[k], self.att1_dst[k]
        object.__setattr__(self, "_layers", (
            (src0, dst0, [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]),
            (src1, dst1, [slice(k * f1, (k + 1) * f1) for k in range(heads1)])))
        object.__setattr__(self, "_w1", self.w1.dequantized())
        # one CSR matrix per head, built once: a call only writes its values (scipy's constructor
        # cost about as much as a head's product on Cora)
        s_, _, _, indptr, _ = self._csr
        csr = lambda: sp.csr_matrix((np.zeros(len(s_), np.float32), s_, indptr), shape=(n, n))
        object.__setattr__(self, "_heads_csr", tuple([csr() for _ in sl] for _, _, sl in self._layers))

    def _attend(self, h: np.ndarray, layer: int) -> np.ndarray:
        """All heads of ``layer``: ``sum_u alpha_uv h_u`` per head, side by side [N, C] for h [N, C];
        the scores, the softmax and the normalization of every head in one pass over the edges
        [E', H], then one CSR product (rows = receivers) per head."""
        src, dst, slices = self._layers[layer]
        s, r, g, indptr, _ = self._csr
        e = (h @ src)[s] + (h @ dst)[r]  # [E', H]
        slope = np.float32(self.slopes[layer])
        e = np.where(e > 0, e, slope * e)
        # every row holds its self-loop, so no row is empty (reduceat needs that); max-shifted as jax.nn.softmax
        e -= np.maximum.reduceat(e, indptr[:-1], axis=0)[r]
        p = np.exp(e, out=e)
        p *= g[:, None]
        p /= np.add.reduceat(p, indptr[:-1], axis=0)[r]
        out = np.empty_like(h)
        for k, (sl, a) in enumerate(zip(slices, self._heads_csr[layer])):
            a.data[:] = p[:, k]
            out[:, sl] = a @ h[:, sl]
        return out

    def __call__(self) -> np.ndarray:
        """Logits float32 [N, F1]."""
        h = self._attend(np.asarray(self.x @ self._w0), 0)
        h += self.b0
        h = np.where(h > 0, h, np.expm1(np.minimum(h, 0))).astype(np.float32)  # ELU
        h *= self.channel_gate
        h = _quantize_activation(h, self.bits1, signed=True)
        heads, f = self.att1_src.shape
        z = self._attend(h @ self._w1, 1).reshape(h.shape[0], heads, f)
        return (z.mean(axis=1) + self.b1).astype(np.float32)

    @property
    def run_channels(self) -> int:
        """Layer 0's kept output channels (all heads; not padded)."""
        return int(self.channel_gate.size)

    @property
    def model_bytes(self) -> int:
        """Stored parameter bytes: weight codes (packed) + scales, attention vectors, biases, channel gates."""
        w = sum(h[1].stored_bytes for h in self.heads0) + self.w1.stored_bytes
        f32 = sum(h[2].size + h[3].size for h in self.heads0) + self.att1_src.size + self.att1_dst.size
        return int(w + 4 * (f32 + self.b0.size + self.b1.size + self.channel_gate.size))

    @property
    def edge_bytes(self) -> int:
        """Stored bytes of the kept edges and self-loops (int32 senders, receivers; float32 gates)."""
        return int(self.senders.nbytes + self.receivers.nbytes + self.gate.nbytes)


def _sage_layer(adj: sp.csr_matrix, x, w_neigh: np.ndarray, w_root: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``A @ x @ w_neigh + x @ w_root + b``, float32 [N, width]: combine first (one GEMM with both
    weights side by side, then the aggregation of the neighbour half) when that narrows the
    aggregated matrix or ``x`` is sparse, else aggregate ``x`` first (`codesign.models.SAGEConv`'s
    orders)."""
    f = w_neigh.shape[1]
    if f <= w_neigh.shape[0] or sp.issparse(x):
        both = np.asarray(x @ np.concatenate([w_neigh, w_root], 1))
        out = np.asarray(adj @ np.ascontiguousarray(both[:, :f]))
        out += both[:, f:]
    else:
        out = np.asarray(adj @ x) @ w_neigh
        out += x @ w_root
    out += b
    return out


def _mean_csr(senders: np.ndarray, receivers: np.ndarray, weight: np.ndarray, n: int) -> sp.csr_matrix:
    """``D^-1 A`` as float32 CSR (rows = receivers, no self-loops; a row without edges is empty),
    computed as `codesign.models.sage.mean_adjacency`."""
    w = weight.astype(np.float32)
    deg = np.zeros(n, np.float32)
    np.add.at(deg, receivers, w)
    inv = np.where(deg > 0, 1.0 / np.where(deg > 0, deg, 1.0), 0.0).astype(np.float32)
    return sp.csr_matrix(((w * inv[receivers]).astype(np.float32), (receivers, senders)), shape=(n, n))


def _layer(adj: sp.csr_matrix, x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``A @ x @ w + b`` in the cheaper order (combine first when it narrows the matrix, or when
    ``x`` is sparse: aggregating it first would be a sparse x sparse product), float32 [N, width];
    the bias is added in place."""
    out = np.asarray(adj @ (x @ w)) if w.shape[1] <= w.shape[0] or sp.issparse(x) else np.asarray(adj @ x) @ w
    out += b  # in place (a fresh result of ours): no second [N, width] buffer
    return out


def _normalized_csr(senders: np.ndarray, receivers: np.ndarray, weight: np.ndarray, n: int) -> sp.csr_matrix:
    """``D^-1/2 (A + I) D^-1/2`` as float32 CSR (rows = receivers), computed as `gcn_normalize`."""
    s = np.concatenate([senders, np.arange(n)])
    r = np.concatenate([receivers, np.arange(n)])
    w = np.concatenate([weight.astype(np.float32), np.ones(n, np.float32)])
    deg = np.zeros(n, np.float32)
    np.add.at(deg, r, w)
    inv = (1.0 / np.sqrt(np.maximum(deg, np.float32(1e-12)))).astype(np.float32)
    return sp.csr_matrix(((w * inv[s] * inv[r]).astype(np.float32), (r, s)), shape=(n, n))


FEATURE_STORES = ("auto", "dense", "csr")
"""Feature stores of `deploy` / `dense_program`: ``"auto"`` times both (`pick_feature_store`)."""


def pick_feature_store(x: np.ndarray, w: np.ndarray, store: str = "auto", reps: int = 5):
    """The features ``x`` float32 [N, K] as the program stores them: dense, scipy CSR, or (``"auto"``)
    whichever computes ``x @ w`` (``w`` float32 [K, H], the first layer's weight) faster here,
    by the median of ``reps`` timed products of each; with ``H`` = 0 (nothing computed), the
    smaller of the two. Features whose CSR form is no smaller than the dense array (density above
    ~1/2: 4 value + 4 index bytes per nonzero) stay dense without timing: the CSR product then
    does the same multiply-adds through an index per element, and timing two products of a few
    microseconds on a loaded machine picked CSR for fully dense features by noise.

    Raises:
      ValueError: ``store`` not in `FEATURE_STORES`.
    """
    if store not in FEATURE_STORES:
        raise ValueError(f"feature_store: must be one of {FEATURE_STORES}, got {store!r}")
    if store == "dense":
        return x
    xs = sp.csr_matrix(x)
    if store == "csr":
        return xs
    csr_smaller = _stored_bytes(xs) < x.nbytes
    if w.shape[1] == 0 or not csr_smaller:  # nothing to time, or CSR cannot win: the smaller store
        return xs if csr_smaller else x

    def median_s(a):
        ts = []
        for _ in range(reps + 1):  # the first is a warm-up
            t0 = time.perf_counter()
            a @ w
            ts.append(time.perf_counter() - t0)
        return statistics.median(ts[1:])

    return xs if median_s(xs) < median_s(x) else x


def deploy(model: GCN | GraphSAGE | GAT, graph: Graph, feature_store: str = "auto"):
    """The compact program of the hardened ``model`` on ``graph`` (see the module docstring): a
    `CompactGCN`, a `CompactSAGE` for a `codesign.models.GraphSAGE` (mean aggregator), a
    `CompactGAT` for a `codesign.models.GAT`.

    Args:
      model: a trained `codesign.models.GCN`, `GraphSAGE` or `GAT`; it is switched to eval mode
        (deterministic gates).
      graph: the `Graph` it runs on (its features are stored compact in the program).
      feature_store: "dense", "csr" or "auto" (`pick_feature_store`).

    Raises:
      NotDeployableError: (a NotImplementedError and a ValueError) a model other than GCN,
        GraphSAGE (mean) and GAT, or a quantizer other than `FakeQuant` and `LearnedBitQuant`
        (GraphSAGE, GAT: `FakeQuant` or none).
      ValueError: ``graph.n_features`` differs from the model's input width; an unknown
        ``feature_store``.
    """
    _check_supported(model)
    convs = (model.conv1, model.conv2)
    quantizers = [q for conv in convs for q in (conv.quant_x, conv.quant_w)] if isinstance(model, GCN) else []
    if graph.n_features != model.in_features:
        raise ValueError(f"graph.x: the model expects {model.in_features} input features, got {graph.n_features}")
    model.eval()
    if any(isinstance(q, LearnedBitQuant) for q in quantizers):  # ranges that follow the data: set them on it
        from codesign.train import adjacency
        model(graph.x, adjacency(graph))
    n = graph.n_nodes
    senders, receivers = np.asarray(graph.senders), np.asarray(graph.receivers)
    gate = np.ones(len(senders), np.float32) if model.edge_mask is None else \
        np.asarray(model.edge_mask.edge_gates(graph.x, graph.senders, graph.receivers, deterministic=True), np.float32)
    # GAT reads no edge weights (its attention weighs the edges): the gates alone
    weight = gate if graph.edge_weight is None or isinstance(model, GAT) else \
        np.asarray(graph.edge_weight, np.float32) * gate
    keep_e = weight != 0
    adj = _normalized_csr(senders[keep_e], receivers[keep_e], weight[keep_e], n) if isinstance(model, GCN) else None

    x = np.asarray(graph.x, np.float32)
    z_f = np.ones(x.shape[1], np.float32) if model.feature_mask is None else \
        np.asarray(model.feature_mask.gate(True), np.float32)
    keep_f = z_f > 0
    hidden = _hidden_width(model)
    z_c = np.ones(hidden, np.float32) if model.channel_mask is None else \
        np.asarray(model.channel_mask.gate(True), np.float32)
    keep_c = z_c > 0
    kept = {"features": int(keep_f.sum()), "feature_fraction": float(keep_f.mean()),
            "channels": int(keep_c.sum()), "channel_fraction": float(keep_c.mean()),
            "edges": int(keep_e.sum()), "edge_fraction": float(keep_e.mean()) if len(keep_e) else 1.0}
    if isinstance(model, GraphSAGE):
        adj = _mean_csr(senders[keep_e], receivers[keep_e], weight[keep_e], n)
        return _sage_program(model, adj, x, z_f, z_c, kept, feature_store)
    if isinstance(model, GAT):  # the kept edges, then the self-loops (never gated)
        loops = np.arange(n)
        return _gat_program(model, np.concatenate([senders[keep_e], loops]), np.concatenate([receivers[keep_e], loops]),
                            np.concatenate([weight[keep_e], np.ones(n, np.float32)]).astype(np.float32), x, z_f, z_c,
                            kept, feature_store)

    hidden_grid = _grid(model.conv2.quant_x)  # before any other call of the quantizers
    w0, s0, b0bits = _weight_codes(model.conv1.quant_w, np.asarray(model.conv1.kernel[...]))
    w1, s1, b1bits = _weight_codes(model.conv2.quant_w, np.asarray(model.conv2.kernel[...]))
    w0 = QuantizedMatrix(np.ascontiguousarray(w0[keep_f][:, keep_c]), s0, b0bits)
    qx = model.conv1.quant_x
    if isinstance(qx, FakeQuant):
        x = _quantize_activation(np.ascontiguousarray(x[:, keep_f] * z_f[keep_f]), qx.bits, signed=qx.signed)
    else:  # the static features through the model's own input quantizer, once (per node rows: all columns)
        import jax.numpy as jnp
        x = np.ascontiguousarray(np.asarray(qx(jnp.asarray(x * z_f)), np.float32)[:, keep_f])
    return CompactGCN(
        adj=adj, x=pick_feature_store(x, w0.dequantized(), feature_store), w0=w0,
        w1=QuantizedMatrix(np.ascontiguousarray(w1[keep_c]), s1, b1bits),
        b0=np.asarray(model.conv1.bias[...], np.float32)[keep_c], b1=np.asarray(model.conv2.bias[...], np.float32),
        channel_gate=z_c[keep_c], bits=model.conv2.quant_x.bits if hidden_grid is None else None,
        hidden_grid=hidden_grid, kept=kept)


def _hidden_width(model) -> int:
    """Layer 0's output channels, the channel mask's width: H * F for a GAT, F otherwise."""
    c = model.conv1
    return c.heads * c.out_features if isinstance(model, GAT) else c.out_features


def _gat_program(model: GAT, senders: np.ndarray, receivers: np.ndarray, gate: np.ndarray, x: np.ndarray,
                 z_f: np.ndarray, z_c: np.ndarray, kept: dict, feature_store: str, fp32: bool = False) -> CompactGAT:
    """`deploy`'s program of a GAT (fixed quantizer or none): the kept edges and self-loops with
    their gates, the kept feature columns (quantized once), per head of layer 0 its kept channels'
    weight columns (codes on the full weight's grid) and attention entries, layer 1's weight rows
    of the kept channels. ``fp32``: no quantizer at all (`dense_program`)."""
    keep_f, keep_c = z_f > 0, z_c > 0
    c0, c1 = model.conv1, model.conv2
    codes = (lambda q, w: _quantize_weight(w, None)) if fp32 else _weight_codes
    codes0, s0, bits0 = codes(c0.quant_w, np.asarray(c0.kernel[...], np.float32))
    codes1, s1, bits1 = codes(c1.quant_w, np.asarray(c1.kernel[...], np.float32))
    a_src, a_dst = (np.asarray(a[...], np.float32) for a in (c0.att_src, c0.att_dst))
    f = c0.out_features
    heads0 = []
    for k in range(c0.heads):
        cols = np.flatnonzero(keep_c[k * f:(k + 1) * f])
        if len(cols):  # a head with every channel removed contributes nothing
            heads0.append((cols + k * f, QuantizedMatrix(np.ascontiguousarray(codes0[keep_f][:, cols + k * f]), s0, bits0),
                           a_src[k, cols].copy(), a_dst[k, cols].copy()))
    x = _quantize_activation(np.ascontiguousarray(x[:, keep_f] * z_f[keep_f]), None if fp32 else c0.quant_x.bits,
                             signed=c0.quant_x.signed)
    w_all = np.concatenate([h[1].dequantized() for h in heads0], 1) if heads0 else np.zeros((x.shape[1], 0), np.float32)
    return CompactGAT(senders=senders.astype(np.int32), receivers=receivers.astype(np.int32), gate=gate,
                      x=pick_feature_store(x, w_all, feature_store), heads0=tuple(heads0), channel_gate=z_c[keep_c],
                      b0=np.asarray(c0.bias[...], np.float32)[keep_c],
                      w1=QuantizedMatrix(np.ascontiguousarray(codes1[keep_c]), s1, bits1),
                      att1_src=np.asarray(c1.att_src[...], np.float32), att1_dst=np.asarray(c1.att_dst[...], np.float32),
                      b1=np.asarray(c1.bias[...], np.float32), bits1=None if fp32 else c1.quant_x.bits,
                      slopes=(float(c0.negative_slope), float(c1.negative_slope)), kept=kept)


def _sage_program(model: GraphSAGE, adj: sp.csr_matrix, x: np.ndarray, z_f: np.ndarray, z_c: np.ndarray, kept: dict,
                  feature_store: str) -> CompactSAGE:
    """`deploy`'s program of a GraphSAGE (mean, fixed quantizer or none): the kept feature columns
    (gate-scaled, quantized once on the per-tensor grid), the kept hidden channels' columns of both
    layer-0 weights and bias and rows of both layer-1 weights, each weight's codes on its own
    quantizer's grid taken from the full weight."""
    keep_f, keep_c = z_f > 0, z_c > 0
    c0, c1 = model.conv1, model.conv2
    def q(quant, kernel, sel):
        codes, scale, bits = _weight_codes(quant, np.asarray(kernel[...], np.float32))
        return QuantizedMatrix(np.ascontiguousarray(sel(codes)), scale, bits)

    first = lambda c: c[keep_f][:, keep_c]
    second = lambda c: c[keep_c]
    w0n, w0r = q(c0.quant_w_neigh, c0.kernel_neigh, first), q(c0.quant_w_root, c0.kernel_root, first)
    x = _quantize_activation(np.ascontiguousarray(x[:, keep_f] * z_f[keep_f]), c0.quant_x.bits,
                             signed=c0.quant_x.signed)
    both = np.concatenate([w0n.dequantized(), w0r.dequantized()], 1)  # the first product's weight, as it runs
    return CompactSAGE(adj=adj, x=pick_feature_store(x, both, feature_store), w0_neigh=w0n, w0_root=w0r,
                       w1_neigh=q(c1.quant_w_neigh, c1.kernel_neigh, second),
                       w1_root=q(c1.quant_w_root, c1.kernel_root, second),
                       b0=np.asarray(c0.bias[...], np.float32)[keep_c], b1=np.asarray(c1.bias[...], np.float32),
                       channel_gate=z_c[keep_c], bits=c1.quant_x.bits, kept=kept)


def dense_program(model: GCN | GraphSAGE | GAT, graph: Graph, feature_store: str = "auto"):
    """The dense FP32 program of the same architecture (all features, channels and edges, float32
    weights of ``model``, no quantization), run by the same code: the fair reference of `measure`.
    ``feature_store`` as in `deploy` (the faster store by default: the reference's best
    configuration)."""
    n = graph.n_nodes
    weight = np.ones(graph.n_edges, np.float32) if graph.edge_weight is None else np.asarray(graph.edge_weight, np.float32)
    if isinstance(model, GAT):
        hidden, loops = _hidden_width(model), np.arange(n)
        kept = _all_kept(model.in_features, hidden, graph.n_edges)
        return _gat_program(model, np.concatenate([np.asarray(graph.senders), loops]),
                            np.concatenate([np.asarray(graph.receivers), loops]), np.ones(graph.n_edges + n, np.float32),
                            np.array(graph.x, np.float32, order="C"), np.ones(model.in_features, np.float32),
                            np.ones(hidden, np.float32), kept, feature_store, fp32=True)
    if isinstance(model, GraphSAGE):
        hidden = model.conv1.out_features
        kept = _all_kept(model.in_features, hidden, graph.n_edges)
        c0, c1 = model.conv1, model.conv2
        f32 = lambda k: QuantizedMatrix(np.array(k[...], np.float32), 1.0, 32)
        w0n, w0r = f32(c0.kernel_neigh), f32(c0.kernel_root)
        x = pick_feature_store(np.array(graph.x, np.float32, order="C"),
                               np.concatenate([w0n.codes, w0r.codes], 1), feature_store)
        return CompactSAGE(adj=_mean_csr(np.asarray(graph.senders), np.asarray(graph.receivers), weight, n), x=x,
                           w0_neigh=w0n, w0_root=w0r, w1_neigh=f32(c1.kernel_neigh), w1_root=f32(c1.kernel_root),
                           b0=np.asarray(c0.bias[...], np.float32), b1=np.asarray(c1.bias[...], np.float32),
                           channel_gate=np.ones(hidden, np.float32), bits=None, kept=kept)
    adj = _normalized_csr(np.asarray(graph.senders), np.asarray(graph.receivers), weight, n)
    w0, w1 = (np.asarray(c.kernel[...], np.float32) for c in (model.conv1, model.conv2))
    # an owned C-contiguous copy, as the compact program's feature store (not a view of the JAX buffer)
    x = pick_feature_store(np.array(graph.x, np.float32, order="C"), w0, feature_store)
    return CompactGCN(adj=adj, x=x, w0=QuantizedMatrix(w0, 1.0, 32),
                      w1=QuantizedMatrix(w1, 1.0, 32), b0=np.asarray(model.conv1.bias[...], np.float32),
                      b1=np.asarray(model.conv2.bias[...], np.float32),
                      channel_gate=np.ones(w0.shape[1], np.float32), bits=None,
                      kept=_all_kept(w0.shape[0], w0.shape[1], graph.n_edges))


def _peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes allocated (tracemalloc, which numpy reports to) during one call of ``fn``."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return int(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()


def measure(compact: CompactGCN, dense: CompactGCN, *, reps: int = 20, warmup: int = 3) -> dict:
    """Times ``compact`` and ``dense`` in this process, alternating call by call (the first of each
    pair alternates too).

    Args:
      compact, dense: the programs (`deploy`, `dense_program`).
      reps: timed calls of each (>= 1); warmup: untimed calls of each first.

    Returns:
      ``{"measured": {...}, "dense_measured": {...}, "speedup": dense median / compact median,
      "speedup_spread": [min, max] of the per-pair ratios}``; each ``measured`` dict holds
      ``latency_s`` (median wall-clock of one inference), ``latency_spread_s`` ([min, max]),
      ``peak_bytes`` (tracemalloc peak of one call), ``model_bytes`` and ``graph_bytes``; and
      ``load_average`` (the machine's 1-minute load average before and after the timing: other
      work on the cores inflates and spreads the latencies) and ``blas_threads`` (the
      ``OPENBLAS_NUM_THREADS`` the process runs with, None = OpenBLAS's default) and
      ``malloc_env`` (the process's `codesign.bench.MALLOC_ENV` variables, None = unset: glibc
      then unmaps a large result on free and faults it in again on the next call).

    Raises:
      ValueError: ``reps < 1`` or ``warmup < 0``.
    """
    if reps < 1 or warmup < 0:
        raise ValueError(f"measure: reps must be >= 1 and warmup >= 0, got reps={reps}, warmup={warmup}")
    load_before = os.getloadavg()[0]
    for _ in range(warmup):
        compact(), dense()
    tc, td = [], []
    for i in range(reps):  # alternating, and which runs first alternates too (ABBA: no order bias)
        pair = ((compact, tc), (dense, td))
        for prog, out in (pair if i % 2 == 0 else pair[::-1]):
            t0 = time.perf_counter()
            prog()
            out.append(time.perf_counter() - t0)

    def stats(prog: CompactGCN, times: list) -> dict:
        return {"latency_s": statistics.median(times), "latency_spread_s": [min(times), max(times)],
                "peak_bytes": _peak_bytes(prog), "model_bytes": prog.model_bytes, "graph_bytes": prog.graph_bytes}

    ratios = [d / c for c, d in zip(tc, td)]
    return {"measured": stats(compact, tc), "dense_measured": stats(dense, td),
            "speedup": statistics.median(td) / statistics.median(tc), "speedup_spread": [min(ratios), max(ratios)],
            "load_average": [load_before, os.getloadavg()[0]],
            "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS"),
            "malloc_env": {k: os.environ.get(k) for k in MALLOC_ENV}}


def program_cost(model: GCN | GraphSAGE | GAT, graph: Graph, hw, *, locality, feature_store: str = "dense",
                 run_channels: Optional[int] = None):
    """The modeled cost (`codesign.hwmodel.CostReport`) on ``hw`` of a deployed program of ``model``
    on ``graph``, priced as the program runs: the model's hard (deployed) masks over
    ``graph``'s edges, its input features stored as ``feature_store`` ("csr": their nonzeros per
    column, `codesign.graph.feature_column_nnz`; "dense": the whole array), the hidden width it
    computes with (``run_channels`` of `_hidden_width`; None: all of them), at the width the
    program computes and stores in (`COMPUTE_BITS`: float32, integer codes dequantized), not the
    quantizers' width. The one pricing rule of a deployed program (`measure_model`,
    `experiments/csbm_products_ceiling.py`).

    Args:
      locality: a `codesign.hwmodel.LocalityProfile` of ``graph``'s edges.

    Raises:
      ValueError: ``feature_store`` not "csr" or "dense".
    """
    from codesign import hwmodel
    from codesign.graph import feature_column_nnz
    if feature_store not in ("csr", "dense"):
        raise ValueError(f"program_cost: feature_store must be 'csr' or 'dense', got {feature_store!r}")
    hidden = _hidden_width(model)
    channels = hidden if run_channels is None else run_channels
    nnz = feature_column_nnz(graph.x) if feature_store == "csr" else None
    return hwmodel.estimate(model.workload(graph.n_nodes, graph.n_edges, hard=True, bits=float(COMPUTE_BITS),
                                           locality=locality, feature_nnz=nnz,
                                           densities={"channel": min(1.0, channels / hidden)}), hw)


def measure_model(model: GCN | GraphSAGE | GAT, graph: Graph, local_hw, *, reps: int = 20, warmup: int = 3,
                  locality=None, feature_store: str = "auto") -> dict:
    """Deploys the hardened ``model`` and measures it next to the dense FP32 program on this
    machine (`measure`), beside the cost model's prediction for this machine: the record fields of
    a measured design point (`codesign sweep --measure`, `codesign deploy`, experiments/deploy_measure.py).

    Args:
      model: a trained `codesign.models.GCN`, `GraphSAGE` or `GAT` (switched to eval mode).
      graph: the `Graph` it runs on.
      local_hw: the `codesign.hwmodel.HardwareSpec` of the machine that measures, as the
        programs use it (the ``cpu_numpy`` preset on a CPU: one core, numpy / scipy calls; it
        assumes one BLAS thread, ``OPENBLAS_NUM_THREADS=1``, recorded as ``blas_threads``).
      reps, warmup: as in `measure`.
      locality: a `codesign.hwmodel.LocalityProfile` of ``graph`` (measured when None).
      feature_store: of both programs, as in `deploy`; each is priced with the store it got
        (CSR: the first product as `hwmodel.csr_gemm_stage` over the kept columns' nonzeros).

    Returns:
      `measure`'s dict plus ``modeled_local`` / ``dense_modeled_local`` (``latency_s`` s and
      ``energy_j`` J on ``local_hw`` of the compact program as it runs, i.e. the hardened model's
      kept features and edges and its `CompactGCN.run_channels` at `COMPUTE_BITS`, and of the dense
      FP32 model of the same widths; a width padded past the model's hidden width is priced at
      the hidden width), ``kept`` (`CompactGCN.kept` + ``feature_nnz``, the kept columns'
      nonzeros, and ``dense_feature_nnz``), ``feature_store`` (``{"compact", "dense"}``: the store
      each program got), ``max_logit_gap`` (max |compact - hardened model| over the logits, float)
      and ``preset_host`` (`hwmodel.calibrate.fit_host` of ``local_hw``: whether a measured preset
      was fitted on this host; None for a published one).

    Raises:
      NotDeployableError / ValueError: as `deploy`.
    """
    from flax import nnx

    from codesign import hwmodel
    from codesign.graph import feature_column_nnz
    from codesign.train import adjacency
    compact, dense = deploy(model, graph, feature_store), dense_program(model, graph, feature_store)
    out = measure(compact, dense, reps=reps, warmup=warmup)
    if locality is None:
        locality = hwmodel.measure_locality(graph.senders, graph.receivers, graph.n_nodes)
    modeled = program_cost(model, graph, local_hw, locality=locality, feature_store=compact.feature_store,
                           run_channels=compact.run_channels)
    # the dense model of the same architecture (no masks, no quantizers), priced as the reference runs
    hidden = _hidden_width(model)
    c0, c1 = model.conv1, model.conv2
    if isinstance(model, GAT):
        shell = GAT(model.in_features, c0.out_features, c1.out_features, heads=c0.heads, out_heads=c1.heads,
                    rngs=nnx.Rngs(0))
    elif isinstance(model, GraphSAGE):
        shell = GraphSAGE(model.in_features, hidden, c1.out_features, aggr=model.aggr, rngs=nnx.Rngs(0))
    else:
        shell = GCN(model.in_features, hidden, c1.out_features, rngs=nnx.Rngs(0))
    ref = program_cost(shell, graph, local_hw, locality=locality, feature_store=dense.feature_store,
                       run_channels=dense.run_channels)
    logits = np.asarray(model(graph.x, adjacency(graph)))
    out["modeled_local"] = {"latency_s": float(modeled.latency_s), "energy_j": float(modeled.energy_j)}
    out["dense_modeled_local"] = {"latency_s": float(ref.latency_s), "energy_j": float(ref.energy_j)}
    from codesign.hwmodel.calibrate import fit_host
    out["preset_host"] = fit_host(local_hw.name)
    out["feature_store"] = {"compact": compact.feature_store, "dense": dense.feature_store}
    keep_f = np.ones(model.in_features, bool) if model.feature_mask is None else \
        np.asarray(model.feature_mask.hard_mask())
    col_nnz = feature_column_nnz(graph.x)
    out["kept"] = {**compact.kept, "feature_nnz": float(col_nnz[keep_f].sum()),
                   "dense_feature_nnz": float(col_nnz.sum())}
    out["max_logit_gap"] = float(np.abs(compact() - logits).max())
    return out

