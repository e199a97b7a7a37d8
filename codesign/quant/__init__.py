"""Quantization: fake quantization with a straight-through estimator, learned step sizes (LSQ),
learned bit-widths, degree-aware quantization (Degree-Quant, A^2Q-style per-node bits), and integer
export.

Every quantizer derives from the abstract base `Quantizer`: ``q(x) -> x_hat`` (same shape and
dtype), ``expected_bits()`` (float32 scalar, the mean bit-width the cost model prices) and
``hard_bits()`` (deployed integer bit-width(s)); the free functions `expected_bits` /
`hard_bits` also accept None (32 bits). Learned step sizes are `QuantStep`
variables and learned bit-width parameters `BitParam` variables (both ``nnx.Param``
subclasses), so optimizers can treat them separately.
"""

from codesign.quant.degree import DegreeQuant, a2q_init_bits, degree_cdf, protection_probs
from codesign.quant.export import QuantizedTensor, export_quantizer, quantize_rows_int8, quantize_to_int
from codesign.quant.fake_quant import NO_QUANT_BITS, FakeQuant, Quantizer, check_bits, fake_quant, qrange
from codesign.quant.learned_bits import (BitParam, LearnedBitQuant, average_bits, bits_from_range, code_bits,
                                         expected_bits, hard_bits, learned_bit_codes, learned_bit_quant,
                                         pin_ranges)
from codesign.quant.lsq import (LSQQuant, QuantStep, lsq_codes, lsq_init_step, lsq_quant, lsq_range, round_ste,
                                scale_grad)
from codesign.quant.recorded import RecordedBits, set_recorded_bits

__all__ = [
    "NO_QUANT_BITS",
    "Quantizer",
    "FakeQuant",
    "check_bits",
    "fake_quant",
    "qrange",
    # learned step size (LSQ)
    "QuantStep",
    "LSQQuant",
    "lsq_quant",
    "lsq_codes",
    "lsq_init_step",
    "lsq_range",
    "round_ste",
    "scale_grad",
    # learned bit-widths
    "BitParam",
    "LearnedBitQuant",
    "learned_bit_quant",
    "learned_bit_codes",
    "bits_from_range",
    "code_bits",
    "pin_ranges",
    "average_bits",
    # quantizer protocol helpers
    "expected_bits",
    "hard_bits",
    # degree-aware
    "DegreeQuant",
    "protection_probs",
    "degree_cdf",
    "a2q_init_bits",
    # recorded widths (re-pricing stored runs)
    "RecordedBits",
    "set_recorded_bits",
    # export
    "QuantizedTensor",
    "quantize_to_int",
    "quantize_rows_int8",
    "export_quantizer",
]
