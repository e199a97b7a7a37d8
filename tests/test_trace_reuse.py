"""The two caches that keep the cost model out of repeated traces: `hwmodel.estimate` of a traced
workload runs one jitted function (traced once per workload structure and spec, values and
gradients equal to the eager path's), and `kernels.auto_impl`'s stage costs are memoized on their
static arguments (the same number as computing them afresh)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from codesign import hwmodel
from codesign.hwmodel import presets
from codesign.kernels import CooAdjacency, api

EST = sys.modules["codesign.hwmodel.estimate"]  # the module (the package exports the function by its name)


def _workload(k, nnz):
    """A GEMM [1000, k] @ [k, 16] and an SpMM of ``nnz`` nonzeros over 1,000 rows (k, nnz traced or concrete)."""
    gemm = hwmodel.gemm_stage(1000.0, k, 16.0, 8.0, 8.0, 32.0)
    spmm = hwmodel.spmm_stage(1000.0, nnz, 16.0, 32.0, 32.0)
    return hwmodel.Workload((hwmodel.LayerWorkload("layer1", (spmm, gemm), (gemm, spmm), ()),))


def _inner(fn, *args) -> list:
    """The cost model's jitted calls in ``fn``'s jaxpr: their inner (closed) jaxprs."""
    jaxpr = jax.make_jaxpr(fn)(*args)
    return [e.params["jaxpr"] for e in jaxpr.eqns if "jaxpr" in e.params and e.params.get("name") == "_estimate"]


@pytest.mark.parametrize("hw_name", ["h100", "gnnear"])  # a GPU and a near-memory spec (two mappings)
def test_traced_estimate_equals_eager_in_value_and_gradient(hw_name):
    hw = presets.get(hw_name)
    k, nnz = 64.0, 5.0e3

    def energy(k, nnz):
        return hwmodel.estimate(_workload(k, nnz), hw).energy_j

    eager = float(energy(k, nnz))
    assert len(_inner(energy, jnp.float32(k), jnp.float32(nnz))) == 1  # traced: one call of the jitted model
    value, grads = jax.jit(jax.value_and_grad(energy, argnums=(0, 1)))(jnp.float32(k), jnp.float32(nnz))
    assert float(value) == pytest.approx(eager, rel=1e-6)
    # the eager path's gradient: the same function, the jitted path switched off
    eager_grads = jax.grad(lambda m, n: EST._estimate(_workload(m, n), hw, True, True, False).energy_j,
                           argnums=(0, 1))(jnp.float32(k), jnp.float32(nnz))
    for g, ref in zip(grads, eager_grads):
        assert np.isfinite(float(g)) and float(g) == pytest.approx(float(ref), rel=1e-5)


def test_a_second_trace_of_the_same_structure_reuses_the_first():
    hw = presets.get("h100")
    f = lambda k: hwmodel.estimate(_workload(k, 5.0e3), hw).latency_s  # noqa: E731
    (first,) = _inner(f, jnp.float32(64.0))
    (again,) = _inner(lambda k: f(k) * 2.0, jnp.float32(128.0))  # a new outer program, the same cost structure
    assert again is first  # JAX's trace cache returned the same inner program: not traced again
    (other,) = _inner(lambda k: hwmodel.estimate(_workload(k, 5.0e3), presets.get("a100")).latency_s,
                      jnp.float32(64.0))  # another spec: traced anew
    assert other is not first


def test_a_spec_holding_arrays_takes_the_eager_path():
    hw = presets.get("h100")
    latency = lambda bw: hwmodel.estimate(_workload(64.0, 5.0e3), hw.replace(dram_bw_bytes_per_s=bw)).latency_s  # noqa: E731
    assert _inner(latency, jnp.float32(hw.dram_bw_bytes_per_s)) == []  # the spec is traced: eager path
    assert float(jax.grad(latency)(jnp.float32(hw.dram_bw_bytes_per_s))) <= 0.0  # more bandwidth, less time


def test_auto_impl_stage_costs_are_memoized_and_equal_a_fresh_computation():
    s = jnp.asarray(np.arange(3000) % 500, jnp.int32)
    r = jnp.asarray((np.arange(3000) * 7) % 500, jnp.int32)
    adj, x, hw = CooAdjacency(s, r, None, 500), jnp.ones((500, 32), jnp.float32), presets.get("cpu")
    for training in (False, True):
        first = api.modeled_cost_s("segment", adj, x, hw, training=training)
        hits = api._stages_cost_s.cache_info().hits
        assert api.modeled_cost_s("segment", adj, x, hw, training=training) == first
        assert api._stages_cost_s.cache_info().hits == hits + 1
        fresh = api._stages_cost_s.__wrapped__("segment", 500, 3000, 32, 32.0, 0, training, False, hw)
        assert first == fresh > 0
    # another spec is another entry, and may cost differently
    slow = hw.replace(dram_bw_bytes_per_s=hw.dram_bw_bytes_per_s / 10)
    assert api.modeled_cost_s("segment", adj, x, slow) > api.modeled_cost_s("segment", adj, x, hw)
