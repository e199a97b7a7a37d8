"""Quantization: fake quantization with a straight-through estimator (LSQ / learned bits planned)."""

from codesign.quant.fake_quant import NO_QUANT_BITS, FakeQuant, fake_quant, qrange

__all__ = ["NO_QUANT_BITS", "FakeQuant", "fake_quant", "qrange"]
