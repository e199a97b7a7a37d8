"""The cost model's input domain (issue 16): bits in [1, 32], densities in [0, 1], counts >= 0, all
finite; unknown density keys and impossible hardware specs are refused with a one-line error that
names the field. One case per bad-input class; property tests for the domain's inside and outside."""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import example, given, settings
from hypothesis import strategies as st

from codesign import cli, hwmodel
from codesign.hwmodel import NearMemorySpec, comm, presets
from codesign.models import MODELS

N, E = 2708, 10556  # Cora's sizes (no data is loaded)
PRESETS = ("h100", "h100-datasheet", "cpu", "cpu_numpy", "hygcn", "gnnear", "upmem", "hbm-pim")
"""One preset per distinct path through the cost model (the others take the same paths with other numbers)."""
assert set(PRESETS) <= set(presets.names())
PROPERTY = settings(max_examples=40, deadline=None)


@functools.lru_cache(maxsize=None)
def model(name: str = "gcn"):
    return MODELS[name](12, 8, 3, rngs=nnx.Rngs(0))


# ---------------------------------------------------------------------------------------------
# bits: the model's ``bits`` argument, the stage builders' bit-widths
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits, shown", [
    (-4.0, "-4.0"),          # negative (was: negative energy)
    (0.0, "0.0"),            # zero (the CLI costed 0 as 32)
    (0.5, "0.5"),            # below one bit
    (33.0, "33.0"),          # above fp32
    (math.nan, "nan"),       # not finite
    (math.inf, "inf"),
])
def test_bits_out_of_domain(bits, shown):
    with pytest.raises(ValueError, match=rf"^bits: must be finite and in \[1, 32\], got {shown}$"):
        model().workload(N, E, bits=bits)


def test_bits_array_names_the_bad_element():
    """Per-layer / per-node bit-width arrays count too: the message names the element."""
    with pytest.raises(ValueError, match=r"^bits\[2\]: must be finite and in \[1, 32\], got 40.0$"):
        hwmodel.check_bits(np.array([4.0, 8.0, 40.0]))
    with pytest.raises(ValueError, match=r"^bits\[0, 1\]: .* got nan$"):
        hwmodel.check_bits(jnp.array([[4.0, jnp.nan]]))


@pytest.mark.parametrize("bits", [True, "8", None])
def test_bits_of_wrong_type(bits):
    with pytest.raises(TypeError, match=r"^bits: must be a real number or array"):
        hwmodel.check_bits(bits)


@pytest.mark.parametrize("builder, args, field", [
    (hwmodel.gemm_stage, (10, 10, 10, 8.0, 0.0, 8.0), r"gemm_stage\(w_bits\)"),
    (hwmodel.spmm_stage, (10, 30, 4, 8.0, 64.0), r"spmm_stage\(out_bits\)"),
    (hwmodel.elementwise_stage, (10, 4, -1.0), r"elementwise_stage\(bits\)"),
])
def test_stage_builders_refuse_bits(builder, args, field):
    """Any workload (not only a model's) goes through the stage builders' check."""
    with pytest.raises(ValueError, match=rf"^{field}: must be finite and in \[1, 32\]"):
        builder(*args)


@pytest.mark.parametrize("builder, args, field", [
    (hwmodel.gemm_stage, (10, -5, 10, 8.0, 8.0, 8.0), r"gemm_stage\(k\)"),
    (hwmodel.spmm_stage, (10, math.nan, 4, 8.0, 8.0), r"spmm_stage\(nnz\)"),
    (hwmodel.elementwise_stage, (math.inf, 4, 8.0), r"elementwise_stage\(n\)"),
])
def test_stage_builders_refuse_counts(builder, args, field):
    with pytest.raises(ValueError, match=rf"^{field}: must be finite and >= 0"):
        builder(*args)


def test_stage_builders_refuse_bad_edge_density_and_block_size():
    with pytest.raises(ValueError, match=r"^message_passing_layer\(edge_density\): must be finite and in \[0, 1\]"):
        hwmodel.message_passing_layer("l", 10, 20, 4, 4, 8.0, 8.0, 8.0, edge_density=1.5)
    with pytest.raises(ValueError, match=r"^bsr_spmm_stage\(block_size\): must be an int >= 1"):
        hwmodel.bsr_spmm_stage(16, 2, 0, 4, 8.0, 8.0)


def test_communication_stage_refuses_bits():
    with pytest.raises(ValueError, match=r"^communication_stage\(bits\): must be finite and in \[1, 32\]"):
        comm.communication_stage("l", np.ones((2, 2)), 4, 0)


# ---------------------------------------------------------------------------------------------
# densities
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, shown", [(-0.5, "-0.5"), (1.5, "1.5"), (math.nan, "nan"), (-math.inf, "-inf")])
def test_density_out_of_domain(value, shown):
    with pytest.raises(ValueError, match=rf"^densities\['feature'\]: must be finite and in \[0, 1\], got {shown}$"):
        model().workload(N, E, densities={"feature": value})


def test_unknown_density_key_lists_known_keys():
    with pytest.raises(ValueError, match=r"^densities: unknown key 'edges'; known keys: channel, edge, feature$"):
        model("gcn").workload(N, E, densities={"edges": 0.1})
    # a model without a channel mask does not use "channel": refused, not ignored
    with pytest.raises(ValueError, match=r"^densities: unknown key 'channel'; known keys: edge, feature$"):
        model("gin").workload(N, E, densities={"channel": 0.5})


def test_density_of_wrong_type():
    with pytest.raises(TypeError, match=r"^densities\['edge'\]: must be a real number or array"):
        model().workload(N, E, densities={"edge": "0.5"})
    with pytest.raises(TypeError, match=r"^densities: must be a dict"):
        model().workload(N, E, densities=[("edge", 0.5)])


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_validates(name):
    """Every model's workload goes through the one validator (bits and densities)."""
    m = model(name)
    with pytest.raises(ValueError, match=r"^densities\['edge'\]: must be finite and in \[0, 1\]"):
        m.workload(N, E, densities={"edge": -0.1})
    with pytest.raises(ValueError, match=r"^densities: unknown key 'edges'"):
        m.workload(N, E, densities={"edges": 0.1})
    with pytest.raises(ValueError, match=r"^bits: must be finite and in \[1, 32\]"):
        m.workload(N, E, bits=0.0)


def test_traced_values_are_not_checked_but_differentiate():
    """Under jit/grad the values are tracers: documented as unchecked (the structure still is)."""
    hw = presets.get("h100")
    cost = lambda b, e: hwmodel.estimate(model().workload(N, E, bits=b, densities={"edge": e}), hw).energy_j
    assert np.isfinite(float(jax.grad(cost)(8.0, 0.5)))
    jax.jit(cost)(-8.0, 0.5)  # no error: a traced value has no value to check
    with pytest.raises(ValueError, match=r"^densities: unknown key 'edges'"):
        jax.jit(lambda e: model().workload(N, E, densities={"edges": e}))(0.5)


# ---------------------------------------------------------------------------------------------
# the CLI goes through it (its main turns a ValueError into one line and exit code 2)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bits, shown", [("0", "0.0"), ("-4", "-4.0"), ("33", "33.0")])
def test_cli_cost_refuses_bits(cora, capsys, bits, shown):
    """``--bits 0`` was costed as 32 (``args.bits or 32``), ``--bits -4`` printed negative energy. The
    flag's type refuses them now (one line naming --bits, exit 2); the cost model's own check of
    the same domain is tested on `workload` above."""
    assert cli.main(["cost", "--bits", bits, "--json"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert out.err == (f"codesign cost: error: argument --bits: must be an integer in [1, 32], got '{bits}' "
                       f"(see codesign cost --help)\n")


# ---------------------------------------------------------------------------------------------
# hardware specs
# ---------------------------------------------------------------------------------------------

def test_all_presets_valid():
    for name in PRESETS:
        hw = presets.get(name)
        assert hw == hw.replace()  # re-validates


def test_unknown_preset_lists_known():
    with pytest.raises(ValueError, match=r"^unknown hardware preset 'nope'; known presets: .*h100"):
        presets.get("nope")
    with pytest.raises(TypeError, match=r"^hardware preset: name must be a str, got None; known presets: .*h100"):
        presets.get(None)


@pytest.mark.parametrize("field, value, need", [
    ("dram_bw_bytes_per_s", 0.0, "> 0"),                       # a bandwidth
    ("matrix_int8_macs_per_s", -1.0, "> 0"),                   # a rate
    ("clock_hz", math.nan, "> 0"),                             # a clock
    ("dram_energy_pj_per_byte", -1.0, ">= 0"),                 # an energy
    ("onchip_buffer_bytes", math.inf, ">= 0"),                 # a buffer size
    ("dram_efficiency", 1.5, r"in \(0, 1\]"),                  # a fraction
])
def test_impossible_host_spec(field, value, need):
    with pytest.raises(ValueError, match=rf"^HardwareSpec\('h100'\)\.{field}: must be finite and {need}, got"):
        presets.get("h100").replace(**{field: value})


def test_zero_energies_and_buffer_are_possible():
    hw = presets.get("h100").replace(dram_energy_pj_per_byte=0.0, onchip_buffer_bytes=0.0)
    rep = hwmodel.estimate(model().workload(N, E), hw)
    assert np.isfinite(float(rep.latency_s)) and float(rep.energy_j) > 0


def test_impossible_nmp_and_link_specs():
    nmp = presets.get("gnnear").nmp
    with pytest.raises(ValueError, match=r"^NearMemorySpec\.internal_bw_bytes_per_s: must be finite and > 0"):
        NearMemorySpec(**{**vars(nmp), "internal_bw_bytes_per_s": 0.0})
    with pytest.raises(ValueError, match=r"^NearMemorySpec\.buffer_bytes: must be finite and >= 0"):
        NearMemorySpec(**{**vars(nmp), "buffer_bytes": -1.0})
    with pytest.raises(ValueError, match=r"^LinkSpec\('x'\)\.energy_pj_per_byte: must be finite and >= 0"):
        comm.LinkSpec("x", 1e9, 0.0, -1.0)
    with pytest.raises(TypeError, match=r"^LinkSpec\('x'\)\.bw_bytes_per_s: must be a real number"):
        comm.LinkSpec("x", True, 0.0, 1.0)


def test_spec_field_of_wrong_type():
    with pytest.raises(TypeError, match=r"^HardwareSpec\('h100'\)\.dram_bw_bytes_per_s: must be a real number"):
        presets.get("h100").replace(dram_bw_bytes_per_s="3e12")


# ---------------------------------------------------------------------------------------------
# properties
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _estimator(name: str):
    """``wl -> (totals, flags)`` of preset ``name``, jitted with the workload as its argument: one
    compile per workload structure (inference / training) and preset, then each example runs the
    compiled program. (One program over all presets took 27-30 s to compile per structure; op by op
    each example took 0.2-0.3 s over the presets.)"""
    hw = presets.get(name)

    def run(wl):
        r = hwmodel.estimate(wl, hw)
        return (jnp.stack([r.latency_s, r.energy_j, r.dram_bytes]),
                jnp.stack([*r.aggregate_first.values(), *r.on_nmp.values()]))
    return jax.jit(run)


def _report(wl):
    """On every preset for workload ``wl``: the totals [presets, (latency_s, energy_j, dram_bytes)]
    and each layer's chosen mapping [presets, (aggregate-first flags..., on-NMP flags...)], for both
    property tests (`_estimator`)."""
    out = [_estimator(name)(wl) for name in PRESETS]
    return jnp.stack([t for t, _ in out]), jnp.stack([f for _, f in out])


def _cost(wl) -> tuple[np.ndarray, np.ndarray]:
    """``(totals, mappings)`` of ``wl`` on every preset (`_report`)."""
    totals, mappings = _report(wl)
    return np.asarray(totals), np.asarray(mappings)


densities_in = st.floats(0.0, 1.0)
bits_in = st.floats(1.0, 32.0)


@PROPERTY
@given(bits=bits_in, edge=densities_in, feature=densities_in, channel=densities_in, training=st.booleans())
@example(bits=1.0, edge=0.0, feature=0.0, channel=0.0, training=False)
@example(bits=32.0, edge=1.0, feature=1.0, channel=1.0, training=True)
def test_inside_the_domain_cost_is_finite_and_nonnegative(bits, edge, feature, channel, training):
    wl = model().workload(N, E, bits=bits, training=training,
                          densities={"edge": edge, "feature": feature, "channel": channel})  # validated, concrete
    totals, _ = _cost(wl)  # [presets, (latency_s, energy_j, dram_bytes)]
    assert np.isfinite(totals).all() and (totals >= 0).all(), dict(zip(PRESETS, totals.tolist()))
    assert (totals[:, 0] > 0).all()  # the dense fp32 logits GEMM is always there


outside_unit = st.one_of(st.floats(max_value=-1e-6), st.floats(min_value=1.0 + 1e-6),
                         st.sampled_from([math.nan, math.inf, -math.inf]))
outside_bits = st.one_of(st.floats(max_value=1.0 - 1e-6), st.floats(min_value=32.0 + 1e-6),
                         st.sampled_from([math.nan, math.inf, -math.inf]))


@PROPERTY
@given(key=st.sampled_from(["edge", "feature", "channel"]), value=outside_unit)
def test_outside_the_domain_densities_are_refused(key, value):
    with pytest.raises(ValueError, match=rf"^densities\['{key}'\]: must be finite and in \[0, 1\], got "):
        model().workload(N, E, densities={key: value})


@PROPERTY
@given(bits=outside_bits)
def test_outside_the_domain_bits_are_refused(bits):
    with pytest.raises(ValueError, match=r"^bits: must be finite and in \[1, 32\], got "):
        model().workload(N, E, bits=bits)


@PROPERTY
@given(lo=densities_in, hi=densities_in, bits=st.sampled_from([4.0, 8.0, 16.0, 32.0]))
@example(lo=0.75, hi=1.0, bits=32.0)  # upmem: layer 1 moves onto the DPUs at 0.75 (faster, 0.8 % more energy)
def test_cost_non_increasing_as_edges_are_removed(lo, hi, bits):
    """Latency never rises as edges are removed (each mapping's latency falls, and the estimator
    keeps the fastest mapping). Energy never rises while the chosen mapping stays the same; where
    removing edges moves a layer to another mapping (dataflow order, host or near-memory units),
    the faster mapping may cost more energy: the estimator chooses by latency (`estimate`)."""
    lo, hi = min(lo, hi), max(lo, hi)
    wls = [model().workload(N, E, bits=bits, densities={"edge": e}) for e in (lo, hi)]
    (a, ma), (b, mb) = (_cost(w) for w in wls)
    np.testing.assert_array_less(a[:, 0], b[:, 0] * (1 + 1e-5) + 1e-30)  # latency, every preset
    same = (ma == mb).all(axis=1)
    np.testing.assert_array_less(a[same, 1], b[same, 1] * (1 + 1e-5) + 1e-30)  # energy, same mapping


# ---------------------------------------------------------------------------------------------
# the public Stage and HardwareSpec at the boundary (issue 36): hand-built stages, JAX scalars
# ---------------------------------------------------------------------------------------------

_STAGE = dict(kind="spmm", macs=1e6, bits=8.0, compulsory_bytes=1e6, reuse_bytes=1e5, working_set_bytes=1e4)
STAGE_COUNTS = ("macs", "compulsory_bytes", "reuse_bytes", "working_set_bytes", "working_set_rows", "link_bytes",
                "launches", "gathered_rows", "in_degree_cv", "max_in_degree", "output_rows", "output_bytes", "passes")
SCALAR_KINDS = {"float": float, "numpy": np.float32, "jnp": jnp.float32}


@pytest.mark.parametrize("field, value, message", [
    ("macs", -1.0, r"Stage\.macs: must be finite and >= 0, got -1\.0"),          # was: priced, latency inf
    ("compulsory_bytes", -1e9, r"Stage\.compulsory_bytes: must be finite and >= 0, got -1000000000\.0"),  # DRAM -1e9 B
    ("reuse_bytes", math.nan, r"Stage\.reuse_bytes: must be finite and >= 0, got nan"),
    ("bits", 0.5, r"Stage\.bits: must be finite and in \[1, 32\], got 0\.5"),
    ("bits", 64.0, r"Stage\.bits: must be finite and in \[1, 32\], got 64\.0"),
    ("kind", "fft", r"Stage\.kind: unknown kind 'fft'; known kinds: gemm, elementwise, spmm, bsr, sddmm, softmax"),
    ("reuse_distance_rows", jnp.array([1.0, -3.0]), r"Stage\.reuse_distance_rows\[1\]: must be finite and >= 0, "
                                                    r"got -3\.0"),
])
def test_hand_built_stage_is_refused(field, value, message):
    with pytest.raises(ValueError, match=rf"^{message}$"):
        hwmodel.Stage(**{**_STAGE, field: value})


def test_hand_built_stage_with_fractional_bits_is_priced():
    """Expected bits of a learned bit-width are fractional (6.3): in [1, 32] they are priced, between
    the charged costs of the neighbouring tiers."""
    hw = presets.get("h100")
    lat = {b: float(hwmodel.stage_cost(hwmodel.Stage(**{**_STAGE, "bits": b}), hw).compute_s) for b in (4.0, 6.3, 8.0)}
    assert lat[4.0] <= lat[6.3] <= lat[8.0] and np.isfinite(lat[6.3])


def test_stage_and_spec_tracers_and_gradient_trees_are_not_checked():
    """Traced fields (jit, grad) have no value; JAX's gradient trees of a Stage / HardwareSpec hold
    negative derivatives and are rebuilt without the check."""
    hw = presets.get("h100")
    cost = lambda st, spec: hwmodel.stage_cost(st, spec).latency_s
    stage = hwmodel.Stage(**{**_STAGE, "macs": jnp.float32(1e6), "compulsory_bytes": jnp.float32(1e6)})
    g_stage, g_hw = jax.grad(cost, argnums=(0, 1))(stage, hw)
    assert isinstance(g_stage, hwmodel.Stage) and float(g_stage.compulsory_bytes) > 0
    assert not 1 <= float(g_stage.bits) <= 32  # a derivative, not a bit-width: rebuilt unchecked
    assert isinstance(g_hw, hwmodel.HardwareSpec) and float(g_hw.dram_bw_bytes_per_s) < 0  # more bandwidth, less time
    jax.jit(lambda m: hwmodel.Stage(**{**_STAGE, "macs": m}).macs)(-1.0)  # traced: no value to check
    jax.jit(lambda b: hw.replace(dram_bw_bytes_per_s=b).dram_bw_bytes_per_s)(0.0)


@pytest.mark.parametrize("field, value, need", [
    ("dram_bw_bytes_per_s", jnp.float32(0), "> 0"),               # was: passed (only Python / NumPy checked)
    ("dram_energy_pj_per_byte", jnp.float32(-1), ">= 0"),
    ("dram_efficiency", jnp.array([0.5, 1.5]), r"in \(0, 1\]"),   # a batch of specs: every element
])
def test_spec_checks_concrete_jax_values(field, value, need):
    with pytest.raises(ValueError, match=rf"^HardwareSpec\('h100'\)\.{field}: must be finite and {need}, got "):
        presets.get("h100").replace(**{field: value})
    with pytest.raises(TypeError, match=r"^HardwareSpec\('h100'\)\.dram_bw_bytes_per_s: must be a real number, got "
                                        r"dtype bool$"):
        presets.get("h100").replace(dram_bw_bytes_per_s=jnp.array(True))


_bad_values = st.one_of(st.floats(-3e38, -1e-30), st.just(-math.inf), st.just(math.nan))  # float32-representable


@PROPERTY
@given(field=st.sampled_from(STAGE_COUNTS + ("bits",)), value=_bad_values, kind=st.sampled_from(sorted(SCALAR_KINDS)))
def test_stage_refuses_any_negative_or_nan_field(field, value, kind):
    """Any numeric Stage field, negative or NaN, as a float, NumPy or jnp scalar: one line naming it."""
    v = SCALAR_KINDS[kind](value)
    if np.isfinite(float(v)) and float(v) >= 0:  # a tiny negative float32 rounds to -0.0: still valid
        return
    with pytest.raises(ValueError, match=rf"^Stage\.{field}: must be finite and (>= 0|in \[1, 32\]), got "):
        hwmodel.Stage(**{**_STAGE, field: v})


_HW = presets.get("gnnear")
_HW_FIELDS = tuple(f.name for f in dataclasses.fields(hwmodel.HardwareSpec)
                   if not f.metadata.get("static") and f.name != "nmp")
_NMP_FIELDS = tuple(f.name for f in dataclasses.fields(NearMemorySpec)
                    if not f.metadata.get("static") and getattr(_HW.nmp, f.name) is not None)


@PROPERTY
@given(field=st.sampled_from(_HW_FIELDS + tuple(f"nmp.{f}" for f in _NMP_FIELDS)), value=_bad_values,
       kind=st.sampled_from(sorted(SCALAR_KINDS)))
def test_spec_refuses_any_negative_or_nan_field(field, value, kind):
    """Any numeric HardwareSpec / NearMemorySpec field, negative or NaN, as a float, NumPy or jnp
    scalar: one line naming the owner and field."""
    v = SCALAR_KINDS[kind](value)
    if np.isfinite(float(v)) and float(v) >= 0:
        return
    with pytest.raises(ValueError, match=r"^(HardwareSpec\('gnnear'\)|NearMemorySpec)\.(\w+): must be finite and ") as e:
        if field.startswith("nmp."):
            _HW.nmp.replace(**{field[4:]: v})
        else:
            _HW.replace(**{field: v})
    assert e.value.args[0].split(":")[0].endswith("." + field.split(".")[-1])
