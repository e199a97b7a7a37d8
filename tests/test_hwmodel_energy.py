"""Energy that respects physics: per-op energies scaled to each preset's process node, and every
preset's peak power within its published power (`presets.POWER_LIMITS_W`)."""

import math

import pytest

from codesign.hwmodel import presets
from codesign.hwmodel.power import CHIP_PARTS, PEAK_POWER_PARTS, peak_power_parts, peak_power_w
from codesign.hwmodel.spec import (HOROWITZ_FP32_MAC_PJ, HOROWITZ_TF32_MAC_PJ, PJ, mac_energy_pj, process_energy_scale,
                                   scaled_op_energies)


def power_check(name: str, hw) -> tuple[float, float]:
    """(modeled peak power over the limit's scope, limit) of preset ``name`` priced as ``hw``.

    Raises:
      AssertionError: naming the preset, its modeled power and its limit, when over the limit."""
    watts, scope, source = presets.POWER_LIMITS_W[name]
    parts = CHIP_PARTS if scope == "chip" else PEAK_POWER_PARTS
    p = float(peak_power_w(hw, parts))
    assert p <= watts, (f"preset {name!r}: modeled peak power {p:.1f} W ({scope}) exceeds its limit {watts:.1f} W "
                        f"({source})")
    return p, watts


def test_every_preset_has_a_power_limit_and_a_node():
    assert set(presets.POWER_LIMITS_W) == set(presets.names())
    for name, (watts, scope, source) in presets.POWER_LIMITS_W.items():
        assert watts > 0 and scope in ("chip", "system") and source, name
    for key, (node, vdd, source) in presets.PROCESS_NODES.items():
        assert 3 <= node <= 180 and 0.5 <= vdd <= 1.8 and source, key


@pytest.mark.parametrize("name", presets.names())
def test_peak_power_within_published_power(name):
    p, _ = power_check(name, presets.get(name))
    assert p > 0


def test_over_powered_spec_fails_naming_it():
    """h100 with its MAC energies back at Horowitz's 45 nm figures (the issue's 1,138 W at the TF32 peak)."""
    hw = presets.get("h100").replace(mac_energy_fp32_pj=HOROWITZ_FP32_MAC_PJ, matrix_mac_energy_fp32_pj=None,
                                     mac_energy_bf16_pj=1.5, mac_energy_int8_pj=0.23)
    with pytest.raises(AssertionError, match=r"preset 'h100': modeled peak power 1\d{3}\.\d W \(system\) exceeds its "
                                             r"limit 700\.0 W"):
        power_check("h100", hw)
    # the TF32 tier at 45 nm alone: 494.7e12 / 2 MAC/s x 4.6 pJ = 1,138 W
    assert float(peak_power_parts(hw)["matrix"]) == pytest.approx(494.7e12 / 2 * 4.6 * PJ, rel=1e-5)


def test_over_powered_chip_fails_naming_it():
    """hygcn's chip at Horowitz's 45 nm energies: (4096 + 512) x 1e9 MAC/s x 4.6 pJ = 21.2 W > 6.7 W."""
    hw = presets.get("hygcn").replace(**scaled_op_energies(45.0, 0.9))
    with pytest.raises(AssertionError, match=r"preset 'hygcn': modeled peak power 21\.2 W \(chip\) exceeds its limit "
                                             r"6\.7 W \(HyGCN"):
        power_check("hygcn", hw)


def test_peak_power_within_limits_at_both_ends_of_every_assumption():
    """Every ranged `presets.ASSUMPTIONS` entry at its low and high end (the presets it enters, as
    experiments/hwmodel_sensitivity.py rebuilds them) keeps every preset within its power limit."""
    from experiment_modules import load
    mod = load("hwmodel_sensitivity")
    checked = 0
    for name, (value, rng, _) in presets.ASSUMPTIONS.items():
        if value is None or rng is None:
            continue
        for end in rng:
            for hw_name, hw in mod.variants(name, end).items():
                power_check(hw_name, hw)
                checked += 1
    assert checked > 20


def test_peak_power_is_the_largest_tier_and_sums_the_parts():
    """h100: the matrix engine's largest tier is bf16 (989.4 TFLOP/s x the scaled fp16 MAC), not TF32
    (half the rate x the scaled TF32 MAC) nor int8 (twice bf16's rate x the scaled int8 MAC)."""
    hw = presets.get("h100")
    s = process_energy_scale(5.0, 0.75)
    parts = peak_power_parts(hw)
    tiers = {"int8": 1978.9e12 / 2 * 0.23 * s, "bf16": 989.4e12 / 2 * 1.5 * s, "tf32": 494.7e12 / 2 * 2.0 * s}
    assert float(parts["matrix"]) == pytest.approx(max(tiers.values()) * PJ, rel=1e-5)
    assert max(tiers, key=tiers.get) == "bf16"
    assert float(parts["vector"]) == pytest.approx(max(66.9e12 / 2 * 4.6, 4 * 66.9e12 / 2 * 0.23,
                                                       2 * 66.9e12 / 2 * 1.5) * s * PJ, rel=1e-5)
    assert float(parts["dram"]) == pytest.approx(3.35e12 * 31.2 * PJ, rel=1e-6)
    assert float(parts["static"]) == pytest.approx(70.0)
    assert float(parts["total"]) == pytest.approx(sum(float(parts[k]) for k in PEAK_POWER_PARTS), rel=1e-6)
    # hygcn's chip: fp32-only engines at 12 nm; its HBM at the paper's 7 pJ/bit is outside the chip
    hy = presets.get("hygcn")
    s12 = process_energy_scale(12.0, 0.8)
    assert float(peak_power_w(hy, CHIP_PARTS)) == pytest.approx((4096e9 + 512e9) * 4.6 * s12 * PJ, rel=1e-5)
    assert hy.dram_energy_pj_per_byte == pytest.approx(56.0)


def test_process_scaling_by_hand():
    """Stillmaker & Baas (2017) energy fits a Vdd^2 + b Vdd + c, ratio to Horowitz's 45 nm / 0.9 V."""
    ref = 1.018 * 0.81 - 0.3107 * 0.9 + 0.1539
    assert process_energy_scale(45.0, 0.9) == pytest.approx(1.0)
    assert process_energy_scale(7.0, 0.75) == pytest.approx((0.1776 * 0.75**2 - 0.09097 * 0.75 + 0.02447) / ref)
    # the paper's corrigendum: HP32 at 0.9 V -> 0.4571
    assert process_energy_scale(32.0, 0.9) == pytest.approx(0.4571 / ref, rel=1e-3)
    # 12 nm: log-linear between 14 and 10 nm
    e14 = 0.2363 * 0.64 - 0.09675 * 0.8 + 0.02239
    e10 = 0.2068 * 0.64 - 0.09311 * 0.8 + 0.02375
    t = math.log(12 / 14) / math.log(10 / 14)
    assert process_energy_scale(12.0, 0.8) == pytest.approx(e14 ** (1 - t) * e10 ** t / ref, rel=1e-9)
    # below 7 nm: x N5_ENERGY_PER_NODE_STEP per full step 7 -> 5 nm
    assert process_energy_scale(5.0, 0.75) == pytest.approx(0.7 * process_energy_scale(7.0, 0.75))
    # smaller nodes and lower supplies spend less per op
    assert process_energy_scale(5.0, 0.75) < process_energy_scale(7.0, 0.75) < process_energy_scale(12.0, 0.75)
    assert process_energy_scale(7.0, 0.7) < process_energy_scale(7.0, 0.8)
    with pytest.raises(ValueError, match="2.0 nm"):
        process_energy_scale(2.0, 0.7)


def test_presets_take_their_energies_from_the_one_mechanism():
    for name, key in (("h100", "h100"), ("a100", "a100"), ("hygcn", "hygcn"), ("gnnear", "gnnear"), ("cpu", "cpu"),
                      ("hbm-pim", "mi100"), ("upmem", "upmem-host"), ("v100", "v100"), ("mi100", "mi100"),
                      ("xeon-e5-2698v4", "xeon-e5-2698v4"), ("upmem-host", "upmem-host"), ("gnnear-host", "gnnear")):
        hw = presets.get(name)
        node, vdd, _ = presets.PROCESS_NODES[key]
        want = scaled_op_energies(node, vdd, tf32_matrix=key in presets.TF32_MATRIX)
        for field, v in want.items():
            got = getattr(hw, field)
            assert (got is None and v is None) or got == pytest.approx(v), (name, field)
    # TF32 tensor cores: fp32 GEMMs at the TF32 MAC energy, fp32 vector work at the fp32 one
    h = presets.get("h100")
    assert float(mac_energy_pj(h, 32.0, matrix=True)) == pytest.approx(h.mac_energy_fp32_pj * HOROWITZ_TF32_MAC_PJ
                                                                       / HOROWITZ_FP32_MAC_PJ, rel=1e-6)
    assert float(mac_energy_pj(h, 32.0)) == pytest.approx(h.mac_energy_fp32_pj, rel=1e-6)


def test_cpu_process_node_is_the_fit_hosts():
    """The `cpu` preset's energies are scaled to the node of the host its fit was timed on: a re-fit
    on another host that left `PROCESS_NODES["cpu"]` as it was fails here."""
    assert presets.PROCESS_NODES["cpu"][:2] == presets.cpu_process_node(presets.load_fit("cpu")["host"])
    xeon = {"cpu_model": "Intel(R) Xeon(R) Processor", "simd": ["avx512f", "amx_tile"]}
    assert presets.cpu_process_node(xeon) == (10.0, 0.75)
    assert presets.cpu_process_node({"cpu_model": "AMD EPYC", "simd": ["avx2", "avx512f"]}) == (5.0, 0.75)
    assert presets.cpu_process_node({"cpu_model": "AMD EPYC 7763", "simd": ["avx2"]}) == (7.0, 0.75)
    with pytest.raises(ValueError, match="cpu_process_node: no process node known for host cpu_model='Apple M2'"):
        presets.cpu_process_node({"cpu_model": "Apple M2", "simd": []})


def test_saving_a_cpu_fit_of_another_node_says_so(capsys):
    from codesign.hwmodel.calibrate import _warn_if_node_differs
    _warn_if_node_differs(presets.load_fit("cpu")["host"])
    assert capsys.readouterr().err == ""
    _warn_if_node_differs({"cpu_model": "Intel(R) Xeon(R) Processor", "simd": ["avx512f", "amx_tile"]})
    assert "save_cpu_fit: the fitted host is a 10 nm part, PROCESS_NODES['cpu'] says 5 nm" in capsys.readouterr().err
    _warn_if_node_differs({"cpu_model": "Apple M2", "simd": []})
    assert "set PROCESS_NODES['cpu'] by hand" in capsys.readouterr().err


def test_docs_power_table_is_current():
    from pathlib import Path
    docs = (Path(__file__).resolve().parent.parent / "docs" / "hwmodel.md").read_text()
    assert presets.power_limit_table() in docs, "docs/hwmodel.md: regenerate the table with presets.power_limit_table()"


def test_power_cap_throttles_a_stage_and_bounds_peak_power():
    """A stage whose dynamic energy over its roofline latency exceeds ``power_cap_w - static_power_w``
    takes energy / (cap - static) instead; below the cap nothing changes; the peak power is at most
    the cap; a cap at or below the static power is refused, naming the field."""
    from codesign.hwmodel import gemm_stage, stage_cost
    hot = presets.get("h200-datasheet").replace(mac_energy_bf16_pj=5.0, matrix_mac_energy_fp32_pj=8.0,
                                                mac_energy_fp32_pj=8.0)
    gemm = gemm_stage(8192, 8192, 8192, 16.0, 16.0, 16.0)
    free = stage_cost(gemm, hot)
    capped = stage_cost(gemm, hot.replace(power_cap_w=700.0))
    assert float(capped.energy_j) == pytest.approx(float(free.energy_j))
    assert float(free.energy_j) / float(free.latency_s) > 700.0 - hot.static_power_w  # over the cap unthrottled
    assert float(capped.latency_s) == pytest.approx(float(free.energy_j) / (700.0 - hot.static_power_w), rel=1e-5)
    cool = stage_cost(gemm_stage(64, 64, 64, 16.0, 16.0, 16.0), hot.replace(power_cap_w=700.0))
    assert float(cool.latency_s) == pytest.approx(float(stage_cost(gemm_stage(64, 64, 64, 16.0, 16.0, 16.0),
                                                                   hot).latency_s))
    assert float(peak_power_parts(hot)["total"]) > 700.0
    assert float(peak_power_w(hot.replace(power_cap_w=700.0))) == pytest.approx(700.0)
    with pytest.raises(ValueError, match="power_cap_w"):
        hot.replace(power_cap_w=hot.static_power_w)
