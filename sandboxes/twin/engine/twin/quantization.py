"""Quantization configs read from the checkpoint's `quantization_config`: Quark (after sglang's
srt/layers/quantization/quark/quark.py and quark/utils.py); FP8 block quantization is in fp8_block.py.
"""

import fnmatch
import re
from pathlib import Path

from twin.fp8_block import Fp8Config

# The fused modules the engine registers and the checkpoint shards each packs (the mapping sglang's model loader
# hands a Quark config: model_loader/loader.py, _get_quantization_config).
PACKED_MODULES = {
    "gate_up_proj": ["gate_proj", "up_proj"],
    "fused_qkv_a_proj_with_mqa": ["q_a_proj", "kv_a_proj_with_mqa"],
}


def _equal_or_regex(name: str, targets: list[str]) -> bool:
    return any(re.match(target[3:], name) if target.startswith("re:") else target == name for target in targets)


def should_ignore_layer(layer_name: str, ignore: list[str], fused_mapping: dict[str, list[str]]) -> bool:
    """Whether the module `layer_name` stays unquantized under the exclude list `ignore`."""
    proj_name = layer_name.split(".")[-1]
    if proj_name not in fused_mapping:
        return _equal_or_regex(layer_name, ignore)
    shards = fused_mapping[proj_name]
    verdicts = {_equal_or_regex(layer_name.replace(proj_name, shard), ignore) for shard in shards}
    if len(verdicts) > 1:
        raise ValueError(
            f"Found different quantization schemes for {shards} in {layer_name}. SGLang requires all to use the "
            "same scheme."
        )
    return verdicts.pop()


class QuarkConfig:
    moe_quant = "mxfp4"  # the fused-MoE kernels' quantization (moe.Q_DTYPES)

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

    def describe(self) -> str:
        return f"Using Quark config from {self.source} (exclude: {len(self.exclude)} patterns)"

    def is_layer_excluded(self, prefix: str) -> bool:
        return should_ignore_layer(prefix, self.exclude, PACKED_MODULES)

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


def from_config(raw: dict, source: Path):
    """The quantization config of a checkpoint, by its `quant_method`."""
    if raw.get("quant_method") == "fp8":
        return Fp8Config.from_config(raw, source)
    return QuarkConfig.from_config(raw, source)
