"""Quark quantization config, read from the checkpoint's config.json (`quantization_config`) the way sglang's
quark loader does (sglang/srt/layers/quantization/quark/quark.py, QuarkConfig.from_config and
get_quant_method): which modules are 4-bit and which stay bf16.

A module is kept bf16 when its prefix, as the engine registers it, matches an `exclude` pattern (fnmatch, or
the exact name); otherwise its scheme is the first `layer_quant_config` pattern that matches, else
`global_quant_config`, and an MXFP4 weight slot is packed: two 4-bit values per byte plus one e8m0 scale per
group of 32. Does not cover loading (model_loader/).
"""

import fnmatch
from pathlib import Path


class QuarkConfig:
    def __init__(self, raw: dict, source: Path):
        self.raw = raw
        self.source = source
        self.exclude: list[str] = list(raw.get("exclude") or [])
        weight = raw["global_quant_config"]["weight"]
        self.weight_dtype: str = weight["dtype"]
        self.group_size: int = int(weight.get("group_size", 32))

    @classmethod
    def from_config(cls, config: dict, source: Path) -> "QuarkConfig":
        """From a checkpoint's `quantization_config`, with sglang's checks on the fields it needs."""
        if config.get("quant_method") != "quark":
            raise NotImplementedError(f"quant_method {config.get('quant_method')!r} is not supported by the twin")
        if config.get("export") is None:
            raise ValueError("The export key should be included in the configurations of Quark quantized model")
        return cls(config, source)

    def is_layer_excluded(self, prefix: str) -> bool:
        return any(prefix == pattern or fnmatch.fnmatchcase(prefix, pattern) for pattern in self.exclude)

    def scheme(self, prefix: str) -> dict:
        for pattern, scheme in (self.raw.get("layer_quant_config") or {}).items():
            if fnmatch.fnmatch(prefix, pattern):
                return scheme
        return self.raw["global_quant_config"]

    def weight_slots(self, prefix: str, out_features: int, in_features: int) -> dict[str, tuple[tuple, str]]:
        """Parameter name -> (shape, dtype) for one linear module under this config."""
        if self.is_layer_excluded(prefix):
            return {f"{prefix}.weight": ((out_features, in_features), "BF16")}
        group = int(self.scheme(prefix)["weight"].get("group_size", self.group_size))
        return {
            f"{prefix}.weight": ((out_features, in_features // 2), "U8"),
            f"{prefix}.weight_scale": ((out_features, in_features // group), "U8"),
        }
