"""MXFP4 linear layers outside the fused MoE, after sglang's Quark W4A4 MXFP4 scheme
(srt/layers/quantization/quark/schemes/quark_w4a4_mxfp4.py)."""

import math

E8M0_BIAS = 127
E8M0_NAN = 255
UNIT_BYTE = E8M0_BIAS  # the byte of the scale 1.0
NATIVE_FP4_ARCHS = ("gfx950",)


def e8m0_to_float(byte: int) -> float:
    """An e8m0 scale byte as a float (sglang's `torch.exp2(weight_scale - 127.0)`, NaN mapped to 0)."""
    return 0.0 if byte == E8M0_NAN else math.ldexp(1.0, byte - E8M0_BIAS)


def native_group_scale(byte: int) -> float:
    """The scale aiter's FP4 GEMM applies to a group (gfx950): the e8m0 byte read as the kernel reads it."""
    return e8m0_to_float(byte)


def dequantized_group_scale(byte: int) -> float:
    """The scale folded into the bf16 weight when the GPU has no FP4 units (gfx942)."""
    return e8m0_to_float(byte)


def unit_scale(arch: str) -> float:
    """What this GPU's MXFP4 linear path multiplies a group by whose scale byte says 1.0."""
    if arch in NATIVE_FP4_ARCHS:
        return native_group_scale(UNIT_BYTE)
    return dequantized_group_scale(UNIT_BYTE)
