"""`EdgeScorer`: inductive learned edge removal, an MLP on the endpoint features predicts each edge's
hard-concrete logit.

Sources:
  * D. Luo, W. Cheng, W. Yu, B. Zong, J. Ni, H. Chen, X. Zhang, "Learning to Drop: Robust Graph
    Neural Network via Topological Denoising" (PTDNet), WSDM 2021, arXiv:2011.07057, Sec. 4: a
    parameterized denoising network ``alpha_uv = f_theta(h_u, h_v)`` gives every edge the
    location of a hard-concrete gate, trained with an L0 penalty on the expected number of kept
    edges. The official code (github.com/flyingdoog/PTDNet, ``models.py``,
    ``PTDNetGCN.get_attention``) projects each endpoint with its own ``Dense(16, relu)``,
    concatenates the two and maps them with ``Dense(1)`` to the logit; this module does the same.
  * C. Zheng, B. Zong, W. Cheng, D. Song, J. Ni, W. Yu, H. Chen, W. Wang, "Robust Graph
    Representation Learning via Neural Sparsification" (NeuralSparse), ICML 2020: the same idea
    of an MLP on endpoint (and edge) features scoring edges, with a top-k Gumbel-softmax sampler
    per node instead of independent hard-concrete gates.

Formula (``E`` edges, ``N`` nodes, ``F`` input features, ``H`` hidden units)::

    a_s = relu(x @ W_s + b_s)[senders]          a_r = relu(x @ W_r + b_r)[receivers]     [E, H]
    log_alpha = [a_s || a_r] @ w_o + b_o                                                  [E]
    z = sample(key, log_alpha, beta)  (training)  |  deterministic(log_alpha)  (eval)

``sample`` / ``deterministic`` / ``prob_nonzero`` are those of `codesign.sparsify.hard_concrete`
(Louizos et al., ICLR 2018, eq. 9-13). Differences to PTDNet's code: PTDNet's stretch interval is
``(gamma, zeta) = (0, 1.01)`` and its temperature is annealed from 2.0; here
the Louizos constants are used, at a fixed temperature. PTDNet also
applies dropout inside the scorer (off by default, ``--dropout 0``); this scorer has none.
"""

from __future__ import annotations

import math
from typing import Optional, final

import jax
import jax.numpy as jnp
from flax import nnx

from codesign.sparsify.hard_concrete import BETA, check_beta, deterministic, prob_nonzero, sample
from codesign.sparsify.masks import EdgeItems, check_count

_deterministic_gate = deterministic  # ``deterministic`` is also an argument name below


class ScorerParam(nnx.Param):
    """Variable type of the weights of an `EdgeScorer` MLP.

    They are ordinary weights, but they only shape the edge gates, so trainers usually put them in
    the gate optimizer group: ``nnx.Any(GateLogit, ScorerParam)`` (exported as
    ``codesign.sparsify.GATE_PARAMS``) selects gate logits and scorer weights,
    ``nnx.All(nnx.Param, nnx.Not(GATE_PARAMS))`` the model weights alone.
    """


class ScorerLogits(nnx.Variable):
    """Variable type of `EdgeScorer`'s cache of the logits it computed last (not a parameter)."""


@final
class EdgeScorer(EdgeItems):
    """Per-edge hard-concrete gates whose logits an MLP predicts from the endpoint features (PTDNet).

    Inductive: the parameters do not depend on the graph, so the scorer applies to any graph
    whose node features have ``in_features`` columns. Implements `EdgeSparsifier`.

    Density design: the protocol's ``expected_density()`` takes no inputs, while the logits depend
    on ``(x, senders, receivers)``. ``edge_gates`` therefore stores the logits it computes in
    ``self.last_log_alpha`` (a `ScorerLogits` variable); ``expected_density()``,
    ``hard_mask()`` etc. read that cache. Call ``edge_gates`` in the forward pass and the density
    afterwards *in the same traced function* (the loss): inside ``nnx.jit`` / ``nnx.grad`` the
    cache then holds the traced logits and the density is differentiable in the scorer weights.
    To evaluate a density for other inputs without a forward pass, use
    ``prob_nonzero(scorer.logits(x, senders, receivers), scorer.beta)``. The cache holds one call:
    a model that gates several layers (PTDNet scores each layer's input) uses one scorer per layer.

    Attributes:
      w_send, w_recv: `ScorerParam` float32 [F, H]; b_send, b_recv: float32 [H].
      w_out: `ScorerParam` float32 [2H, 1]; b_out: float32 [] (initialized to ``init_log_alpha``).
      last_log_alpha: `ScorerLogits` float32 [E] of the last ``edge_gates`` call ([0] before).
      beta: float temperature (static).
      deterministic: bool (static), False at construction; ``model.eval()`` / ``model.train()``
        set it, and ``nnx.view(model, deterministic=...)`` through ``set_view``.
      rngs: `nnx.RngStream` forked from ``rngs[rng_collection]`` (``default`` when absent).

    Example (inside your own ``nnx.Module``)::

      self.scorer = EdgeScorer(graph.x.shape[1], rngs=rngs)                   # in __init__
      w = self.scorer.edge_gates(x, senders, receivers) * edge_weight        # in __call__, [E]
      loss = task_loss + lam * model.scorer.expected_density()               # in the loss, after the forward
    """

    def __init__(self, in_features: int, hidden: int = 16, *, init_log_alpha: float = 3.0, beta: float = BETA,
                 rng_collection: str = "gates", rngs: nnx.Rngs):
        """Args:
          in_features: F, columns of the node features the scorer reads; a positive int.
          hidden: H, units of each endpoint projection (PTDNet's ``denoise_hidden_1`` = 16).
          init_log_alpha: initial value of the output bias, so every edge starts near
            P(keep) = prob_nonzero(init_log_alpha) (3.0 gives ~0.99; PTDNet's bias starts at 0).
          beta: hard-concrete temperature (> 0).
          rng_collection: stream of ``rngs`` used for sampling the gates.
          rngs: `nnx.Rngs`; ``rngs.params()`` initializes the weights (He-normal, PTDNet's
            default ``--initializer he``; biases zero).

        Raises:
          ValueError: ``in_features`` / ``hidden`` not positive ints, ``init_log_alpha`` not finite,
            ``beta`` not > 0.
          TypeError: ``rngs`` not an `nnx.Rngs`.
        """
        self.in_features = check_count(in_features, "in_features")
        self.hidden = check_count(hidden, "hidden")
        if isinstance(init_log_alpha, bool) or not isinstance(init_log_alpha, (int, float)) or not math.isfinite(init_log_alpha):
            raise ValueError(f"init_log_alpha must be a finite float, got {init_log_alpha=!r}")
        if not isinstance(rngs, nnx.Rngs):
            raise TypeError(f"rngs must be an nnx.Rngs, got {type(rngs).__name__}")
        self.beta = check_beta(beta)
        he = jax.nn.initializers.he_normal()
        f, h = self.in_features, self.hidden
        self.w_send = ScorerParam(he(rngs.params(), (f, h), jnp.float32))
        self.b_send = ScorerParam(jnp.zeros((h,), jnp.float32))
        self.w_recv = ScorerParam(he(rngs.params(), (f, h), jnp.float32))
        self.b_recv = ScorerParam(jnp.zeros((h,), jnp.float32))
        self.w_out = ScorerParam(he(rngs.params(), (2 * h, 1), jnp.float32))
        self.b_out = ScorerParam(jnp.asarray(float(init_log_alpha), jnp.float32))
        self.deterministic = False
        self.rngs = rngs[rng_collection].fork()
        self.last_log_alpha = ScorerLogits(jnp.zeros((0,), jnp.float32))

    def logits(self, x: jax.Array, senders: jax.Array, receivers: jax.Array) -> jax.Array:
        """Per-edge logits ``log_alpha`` float32 [E] (pure: does not touch the cache).

        Args:
          x: float [N, F] node features (cast to float32).
          senders, receivers: int [E] edge endpoints.

        Raises:
          ValueError: ``x`` not [N, in_features]; ``senders`` / ``receivers`` not 1-D of equal shape.
        """
        if jnp.ndim(x) != 2 or x.shape[1] != self.in_features:
            raise ValueError(f"x must have shape [N, in_features={self.in_features}], got x.shape={jnp.shape(x)}")
        if senders is None or receivers is None or jnp.ndim(senders) != 1 or jnp.shape(senders) != jnp.shape(receivers):
            raise ValueError(f"senders and receivers must be int [E] of equal shape, got "
                             f"{jnp.shape(senders) if senders is not None else None} and "
                             f"{jnp.shape(receivers) if receivers is not None else None}")
        x = jnp.asarray(x, jnp.float32)
        a_s = jax.nn.relu(x @ self.w_send[...] + self.b_send[...])[senders]
        a_r = jax.nn.relu(x @ self.w_recv[...] + self.b_recv[...])[receivers]
        return (jnp.concatenate([a_s, a_r], axis=-1) @ self.w_out[...])[:, 0] + self.b_out[...]

    def edge_gates(self, x=None, senders=None, receivers=None, deterministic: Optional[bool] = None) -> jax.Array:
        """Gate per edge, float32 [E] in [0, 1]; caches the logits in ``last_log_alpha``.

        Args:
          x: float [N, F] node features (or the layer input, for a scorer per layer as in PTDNet).
          senders, receivers: int [E].
          deterministic: overrides ``self.deterministic`` when not None.

        Raises:
          ValueError: as `logits` (``x``, ``senders`` and ``receivers`` are required).
        """
        log_alpha = self.logits(x, senders, receivers)
        self.last_log_alpha.set_value(log_alpha)  # [...] = would keep the old shape
        det = self.deterministic if deterministic is None else deterministic
        if det:
            return _deterministic_gate(log_alpha)
        return sample(self.rngs(), log_alpha, self.beta)

    def _cached(self) -> jax.Array:
        log_alpha = self.last_log_alpha[...]
        if log_alpha.shape[0] == 0:
            raise ValueError("EdgeScorer: no cached logits; call edge_gates(x, senders, receivers) first "
                             "(in the same traced function as the density), on a graph with edges")
        return log_alpha

    def expected_density(self) -> jax.Array:
        """float32 scalar: expected kept-edge fraction of the last ``edge_gates`` call,
        ``mean_e P(z_e > 0)`` (Louizos et al. eq. 12; PTDNet's L0 term ``l0_norm``).

        Raises:
          ValueError: ``edge_gates`` has not been called yet.
        """
        return jnp.mean(prob_nonzero(self._cached(), self.beta))

    def hard_mask(self) -> jax.Array:
        """bool [E]: edges kept at test time for the last ``edge_gates`` inputs.

        Raises:
          ValueError: ``edge_gates`` has not been called yet.
        """
        return _deterministic_gate(self._cached()) > 0

    def hard_density(self) -> jax.Array:
        """float32 scalar: fraction of edges in `hard_mask`."""
        return jnp.mean(self.hard_mask().astype(jnp.float32))

    def set_view(self, deterministic: bool | None = None):
        """Hook of ``nnx.view`` (flax >= 0.12): ``nnx.view(model, deterministic=True)``."""
        if deterministic is not None:
            self.deterministic = deterministic
