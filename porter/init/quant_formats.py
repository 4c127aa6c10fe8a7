"""A checkpoint's quantization as `porter init` reads it: the format, the bits a weight takes, and which modules.

Covers the quantization_config of each format init knows (fp8 with block scales, mxfp4, Quark, compressed-tensors,
ModelOpt: method, format, weight bits, group or block size, activations, KV-cache scheme, the exclude list under its
own key) and ModelOpt's hf_quant_config.json beside config.json (where sglang's and vLLM's modelopt loaders read it
when config.json has no quantization_config); a mixed-precision checkpoint's per-module formats (ModelOpt's
quantized_layers, or config groups that name their modules); routed experts stored in a format of their own
(DeepSeek-V4's expert_dtype, a hybrid's moe_quant_algo). A key of a quantization config init does not read that
could change what a weight is stored as (a per-layer or per-expert format) leaves the expert dtype and the weight
bytes undecided. Does not price the weights (weight_estimate.py).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

# ModelOpt's algorithms by the bits and group they store a weight in (modelopt's QuantizationFormat names, as
# sglang's srt/layers/quantization/modelopt_quant.py dispatches them): NVFP4 is fp4 e2m1 with an fp8 scale a 16;
# MXFP8 e4m3 with an e8m0 scale a 32 (vLLM model_executor/layers/quantization/modelopt.py LINEAR_ALGOS).
MODELOPT_ALGOS = {"FP8": (8, None), "NVFP4": (4, 16), "W4A16_NVFP4": (4, 16), "MXFP8": (8, 32)}
# The key a format's loader reads its unquantized modules from: vLLM's and sglang's fp8.py Fp8Config.from_config read
# ignored_layers, else modules_to_not_convert (an fp8 config's `ignore` is read by neither); the others as listed.
EXCLUDE_KEYS = {"fp8": ("ignored_layers", "modules_to_not_convert")}
DEFAULT_EXCLUDE_KEYS = ("modules_to_not_convert", "ignore", "exclude", "exclude_modules", "ignored_layers")
# Keys of a quantization config that change what a weight is stored as, if init did not read them.
RISKY = re.compile(r"layer|expert|moe|module|target|dtype|bits|algo|group|scheme|format|type")
READ = frozenset(
    "quant_method fmt activation_scheme weight_block_size scale_fmt modules_to_not_convert ignore exclude "
    "global_quant_config config_groups format quant_algo group_size kv_cache_scheme kv_cache_quant_algo "
    "exclude_modules quantized_layers producer quantization_status kv_cache_group export algo_config moe_quant_algo "
    "ignored_layers".split()
)


@dataclass
class Quantization:
    method: str  # quant_method, or "none"
    summary: str  # what a person reads: format, bits, grouping, activations
    weight_bits: int | None = None
    weight_kind: str = ""  # float or int
    group_size: int | None = None  # elements sharing one scale along the input dimension
    block: tuple[int, int] | None = None  # 2-D weight blocks sharing one scale (fp8 block)
    exclude_key: str | None = None  # the list of modules kept unquantized, under its format's key
    exclude: list[str] = field(default_factory=list)
    kv_cache: str | None = None  # a KV-cache scheme the checkpoint carries
    per_module: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # module -> (bits, group), mixed
    experts: Quantization | None = None  # the routed experts' own format; without weight_bits: undecided


def read_quantization(config: dict, text: dict, quant_file: dict | None, undecided: list) -> tuple[Quantization, str]:
    """config.json's quantization_config (the wrapper's or its text model's), else ModelOpt's hf_quant_config.json;
    and where it was read."""
    quant = config.get("quantization_config") or text.get("quantization_config")
    source = "quantization_config"
    modelopt = (quant_file or {}).get("quantization") if isinstance(quant_file, dict) else None
    if not isinstance(quant, dict) and isinstance(modelopt, dict):
        quant, source = {"quant_method": "modelopt", **modelopt}, "hf_quant_config.json"
    if not isinstance(quant, dict):
        unquantized = "no quantization_config nor hf_quant_config.json: weights in the checkpoint's dtype"
        return Quantization("none", "unquantized"), unquantized
    method = _name(quant.get("quant_method") or "unknown")
    reader = QUANT_READERS.get(method)
    if reader is None:
        undecided.append(f"quantization method {method[:60]!r} is not one init reads: expert dtype and weight bytes")
        result = Quantization(method, f"{method[:60]} (not read)")
    else:
        result = reader(quant, undecided)
    for key in EXCLUDE_KEYS.get(method, DEFAULT_EXCLUDE_KEYS):
        if isinstance(quant.get(key), list):
            result.exclude_key, result.exclude = key, [str(entry) for entry in quant[key]]
            break
    unread = sorted(str(key)[:60] for key in quant if key not in READ and RISKY.search(str(key).lower()))
    if unread:
        undecided.append(f"expert dtype and weight bytes: {source} keys init does not read: {unread}")
    result.experts = _expert_format(config, text, quant, undecided)
    if result.experts is not None:
        result.summary += f"; routed experts: {result.experts.summary}"
    return result, f"{source}.quant_method = {method[:60]!r}"


def _expert_format(config: dict, text: dict, quant: dict, undecided: list) -> Quantization | None:
    """The routed experts' format where the checkpoint stores them apart from its other Linears (None: the same).

    DeepSeek-V4 keeps its Linears in fp8 blocks and names its routed experts' format in config.json's top-level
    expert_dtype: "fp4" is MXFP4 (vLLM models/deepseek_v4/quant_config.py DeepseekV4FP8Config.get_quant_method:
    Mxfp4MoEMethod, whose create_weights stores two e2m1 a byte and a uint8 e8m0 scale a 32; sglang
    srt/layers/quantization/fp8.py Fp8MoEMethod.create_weights with is_fp4_expert: int8 pairs, fp4_block_k 32), "fp8"
    the checkpoint's fp8 blocks. Without the key vLLM assumes fp4 and sglang reads the experts' safetensors dtype
    (srt/configs/deepseek_v4.py try_detect_fp4_experts): init, reading config.json alone, cannot say. A hybrid
    MIXED_PRECISION export names its experts' ModelOpt algorithm in moe_quant_algo with group_size (sglang
    srt/configs/model_config.py nvfp4_moe_meta; vLLM DeepseekV4FP8Config._is_nvfp4_expert_layer).
    """
    algo, dtype = _name(quant.get("moe_quant_algo") or "").upper(), text.get("expert_dtype")
    if algo in MODELOPT_ALGOS:
        bits, group = MODELOPT_ALGOS[algo]
        group = quant.get("group_size") or group
        return Quantization("modelopt", f"ModelOpt {algo} experts, group {group}", bits, "float", group)
    if algo:
        why = f"moe_quant_algo = {algo!r} is not a ModelOpt algorithm init reads"
    elif dtype == "fp4":
        return _mxfp4(quant, undecided)
    elif dtype == "fp8" and quant.get("quant_method") == "fp8":
        return None
    elif dtype is not None:
        why = f"expert_dtype = {_name(dtype)!r} is not one init reads"
    elif str((config.get("architectures") or [""])[0]).startswith("DeepseekV4"):
        why = "no expert_dtype: vLLM then assumes fp4 and sglang reads the experts' safetensors dtype"
    else:
        return None
    undecided.append(f"expert dtype, weight bytes and MoE tuning rows: {why}")
    return Quantization("unknown", f"undecided: {why}")


def _name(value: object) -> str:
    return re.sub(r"[^\w.-]", "?", str(value))[:60]  # a config's string as a name, never ${VAR}


def _fp8(quant: dict, undecided: list) -> Quantization:
    block = quant.get("weight_block_size")
    grain = f"{block[0]}x{block[1]} weight blocks" if block else "per-tensor scales"
    fmt = quant.get("fmt") or "e4m3"
    scale = f", {quant['scale_fmt']} scales" if quant.get("scale_fmt") else ""
    summary = f"fp8 {fmt}, {grain}{scale}, {quant.get('activation_scheme', 'dynamic')} activations"
    return Quantization("fp8", summary, 8, "float", block=tuple(block) if block else None)


def _mxfp4(quant: dict, undecided: list) -> Quantization:
    # OCP MX: 32 elements share one e8m0 scale (the format fixes the group; gpt-oss's config does not repeat it)
    return Quantization("mxfp4", "MXFP4 (fp4 e2m1, 32-element groups, e8m0 scales)", 4, "float", group_size=32)


def _quark(quant: dict, undecided: list) -> Quantization:
    weight = (quant.get("global_quant_config") or {}).get("weight") or {}
    inputs = (quant.get("global_quant_config") or {}).get("input_tensors") or {}
    dtype, group = str(weight.get("dtype") or "unknown"), weight.get("group_size")
    bits = 4 if "4" in dtype else 8 if "8" in dtype else None
    activations = f"{inputs.get('dtype')} activations" if inputs else "weight-only"
    scales = f"{weight.get('scale_format', '')} scales"
    summary = f"Quark {dtype} {weight.get('qscheme', '')} group {group} ({scales}), {activations}"
    for key in ("layer_quant_config", "layer_type_quant_config"):
        if quant.get(key):
            undecided.append(f"expert dtype and weight bytes: Quark's {key} sets per-layer formats init does not read")
    return Quantization("quark", summary, bits, "float", group_size=group)


def _groups(quant: dict, undecided: list) -> dict:
    """The one config group every Linear follows; several groups mean per-module formats (read by _modelopt)."""
    groups = list((quant.get("config_groups") or {}).values())
    if len(groups) > 1 and quant.get("quant_method") != "modelopt":
        undecided.append(f"expert dtype and weight bytes: {len(groups)} config_groups (per-module formats not read)")
    return groups[0] if groups and isinstance(groups[0], dict) else {}


def _compressed_tensors(quant: dict, undecided: list) -> Quantization:
    group = _groups(quant, undecided)
    weights, inputs = group.get("weights") or {}, group.get("input_activations")
    bits, kind, size = weights.get("num_bits"), weights.get("type", ""), weights.get("group_size")
    grain = f"group {size}" if size else str(weights.get("strategy") or "")
    activations = (
        f"{inputs.get('num_bits')}-bit {inputs.get('type')} {inputs.get('strategy') or ''} activations".strip()
        if inputs
        else "weight-only"
    )
    summary = f"compressed-tensors {quant.get('format')}: {bits}-bit {kind} weights, {grain}, {activations}"
    return Quantization("compressed-tensors", summary, bits, kind, group_size=size)


def _modelopt(quant: dict, undecided: list) -> Quantization:
    algo = str(quant.get("quant_algo") or "")
    kv = quant.get("kv_cache_scheme") or quant.get("kv_cache_quant_algo")
    kv_text = f"{kv.get('num_bits')}-bit {kv.get('type')}" if isinstance(kv, dict) else str(kv) if kv else None
    if algo == "MIXED_PRECISION":
        return _modelopt_mixed(quant, kv_text, undecided)
    if algo not in MODELOPT_ALGOS:
        undecided.append(f"expert dtype and weight bytes: ModelOpt quant_algo {algo[:60]!r} is not one init reads")
        return Quantization("modelopt", f"ModelOpt {algo[:60]} (not read)", kv_cache=kv_text)
    bits, group = MODELOPT_ALGOS[algo]
    weights = _groups(quant, undecided).get("weights") or {}
    group = weights.get("group_size") or quant.get("group_size") or group
    grain = f"group {group}" if group else "per-tensor scales"
    summary = f"ModelOpt {algo}: {bits}-bit float weights and activations, {grain}"
    return Quantization("modelopt", summary, bits, "float", group, kv_cache=kv_text)


def _modelopt_mixed(quant: dict, kv_text: str | None, undecided: list) -> Quantization:
    """Per-module formats: hf_quant_config.json's quantized_layers, or config groups naming their modules."""
    per_module: dict[str, tuple[int, int | None]] = {}
    for name, spec in (quant.get("quantized_layers") or {}).items():
        per_module[name] = MODELOPT_ALGOS.get(str((spec or {}).get("quant_algo")), (0, None))
    for group in (quant.get("config_groups") or {}).values():
        weights = group.get("weights") or {}
        for name in group.get("targets") or []:
            per_module.setdefault(str(name), (int(weights.get("num_bits") or 0), weights.get("group_size")))
    if not per_module or any(bits == 0 for bits, _ in per_module.values()):
        undecided.append("expert dtype and weight bytes: a mixed-precision module format init does not read")
    counts = Counter(per_module.values())
    kinds = ", ".join(f"{n} modules {bits}-bit{f' group {g}' if g else ''}" for (bits, g), n in counts.items())
    return Quantization("modelopt", f"ModelOpt MIXED_PRECISION: {kinds}", kv_cache=kv_text, per_module=per_module)


QUANT_READERS = {
    "fp8": _fp8,
    "mxfp4": _mxfp4,
    "quark": _quark,
    "compressed-tensors": _compressed_tensors,
    "modelopt": _modelopt,
}
