"""Quark MXFP4 quantization config: which modules are 4-bit and which stay bf16.

The engine reads the config registered for the architecture from configs/quant/ in this tree (it takes
precedence over the checkpoint's copy, so day-0 fixes to it are reviewable diffs). A module is kept bf16
when its registered name matches an `exclude` pattern (fnmatch, or the exact name); otherwise its weight
slot is packed MXFP4: two 4-bit values per byte plus one e8m0 scale per group of 32.
Does not cover loading (model_loader/).
"""

import fnmatch
import json
from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent / "configs" / "quant"
REGISTERED = {"GlmMoeDsaForCausalLM": "glm5_mxfp4_quark.json"}


class QuarkConfig:
    def __init__(self, raw: dict, source: Path):
        self.raw = raw
        self.source = source
        self.exclude: list[str] = list(raw.get("exclude", []))
        weight = raw["global_quant_config"]["weight"]
        self.weight_dtype: str = weight["dtype"]
        self.group_size: int = int(weight.get("group_size", 32))

    @classmethod
    def for_architecture(cls, architecture: str) -> "QuarkConfig":
        if architecture not in REGISTERED:
            raise ValueError(f"no Quark config registered for {architecture}; known: {sorted(REGISTERED)}")
        path = CONFIG_DIR / REGISTERED[architecture]
        return cls(json.loads(path.read_text()), path)

    def is_layer_excluded(self, prefix: str) -> bool:
        return any(prefix == pattern or fnmatch.fnmatchcase(prefix, pattern) for pattern in self.exclude)

    def weight_slots(self, prefix: str, out_features: int, in_features: int) -> dict[str, tuple[tuple, str]]:
        """Parameter name -> (shape, dtype) for one linear module under this config."""
        if self.is_layer_excluded(prefix):
            return {f"{prefix}.weight": ((out_features, in_features), "BF16")}
        return {
            f"{prefix}.weight": ((out_features, in_features // 2), "U8"),
            f"{prefix}.weight_scale": ((out_features, in_features // self.group_size), "U8"),
        }
