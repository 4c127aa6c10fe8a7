"""An estimate of a checkpoint's weight bytes from its config's shapes, for when it publishes no weight index.

Counts the parameters of each part by each layer's kind (embeddings, lm_head; a layer's mixer: MLA with its DSA
indexer, GQA, linear attention or Mamba-2; its MLP: routed experts at their width or latent, shared experts, router,
or a dense MLP, gated or not; the MTP layers) and prices each at the quantization's bytes per weight (scales
included) unless the exclude list keeps it unquantized (a representative module name per part, in the family's own
names, matched as the formats write their entries: exact, a dotted prefix or component, a glob with `*`, or a regex
after `re:`), routed experts at their own format where the checkpoint gives them one, and each part of a
mixed-precision checkpoint at the format its per-module list gives it (matched as the engines resolve it: the module
or a module under it, in any wrapper's and family's names). Embeddings and norms are never quantized (they are not
Linear layers). What it leaves out is said (a vision tower; norms and biases, which are tiny). Used only when the
index's metadata.total_size is missing; init says so. sized_facts is the facts with their weights. Does not read
files.
"""

from __future__ import annotations

import fnmatch
import functools
import re
from dataclasses import dataclass, field

from porter.init.checkpoint_facts import CheckpointFacts, FactsError, read_facts, text_config
from porter.init.config_keys import MODULE_NAMES
from porter.init.per_layer import count
from porter.init.quant_formats import Quantization

DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "float32": 4.0}
# How a multimodal wrapper names its text model's modules (transformers' Llava/Kimi `language_model.model.layers`,
# Qwen3-VL/Qwen3.5 `model.language_model.layers`, DeepSeek-VL2 `language.model.layers`, which sglang
# srt/models/deepseek_vl2.py load_weights strips to `model.`), and nemotron_h its own (`backbone.`, which sglang
# srt/models/nemotron_h.py hf_to_sglang_mapper maps to `model.`): each exclude or per-module name is read under every
# form, as sglang's and vLLM's ModelOptMixedPrecisionConfig._quantized_layer_prefix_candidates try them.
WRAPPERS = (
    ("", ""), ("", "language_model."), ("model.", "model.language_model."), ("model.", "backbone."), ("", "language.")
)  # fmt: skip
LAYER_PREFIXES = (
    "", "model.", "language_model.", "language_model.model.", "model.language_model.", "backbone.", "language.model."
)  # fmt: skip
# Module names families give the same part (the engines map them so: sglang srt/models/deepseek_v4.py `.ffn.` ->
# `.mlp.`, `.attn.` -> `.self_attn.`; nemotron_h's `mixer`; Mixtral's and MiniMax's `block_sparse_moe`; Qwen's
# `shared_expert`; Gemma 4's `router`), for matching a per-module format list by the part a name plays in its layer.
_CONTAINER = re.compile(r"\.(?:mlp|block_sparse_moe|mixer|ffn|feed_forward|self_attn|attn)(?=\.)")
_SYNONYMS = ((".shared_expert.", ".shared_experts."), (".router.", ".gate."))
VISION_PREFIXES = (
    "vision_model.",
    "vision_tower.",
    "visual.",
    "model.visual.",
    "mm_projector.",
    "multi_modal_projector",
)


@dataclass
class Estimate:
    bytes: int
    how: str
    routed_fraction: float  # the share of the bytes in routed experts (what expert or MoE-over-DP sharding splits)
    left_out: list[str] = field(default_factory=list)
    expert_dtype: str = ""  # what one routed expert weight takes
    expert_why: str = ""
    expert_format: Quantization | None = None  # the routed experts' format, for the MoE tuning rows


def bytes_per_weight(quant: Quantization, dtype_bytes: float) -> float:
    """Bytes one quantized weight takes with its share of the scales."""
    bits, group = quant.weight_bits, quant.group_size
    if not bits:
        return dtype_bytes
    value = bits / 8
    if quant.block:
        return value + 4 / (quant.block[0] * quant.block[1])  # one float32 scale per block
    if group:
        # e8m0 scales (MX formats, Quark fp4) are 1 byte, NVFP4's fp8 scales 1 byte, int groups' bf16 scales 2
        scale = 2 if quant.weight_kind == "int" else 1
        return value + scale / group
    return value


@functools.lru_cache(maxsize=4096)
def _regex(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(pattern)
    except re.error:
        return None


def excluded(name: str, entries: tuple[str, ...]) -> bool:
    """Whether an exclude entry covers the module `name`, read as generously as any format writes it."""
    for full in _forms(name):
        for entry in entries:
            if entry.startswith("re:"):
                compiled = _regex(entry[3:])
                if compiled is not None and compiled.match(full):
                    return True
            elif "*" in entry:
                if fnmatch.fnmatchcase(full, entry) or fnmatch.fnmatchcase(full, entry.rstrip(".*") + ".*"):
                    return True
            elif full == entry or full.startswith(entry + ".") or f".{entry}." in f".{full}.":
                return True
    return False


def _forms(name: str) -> list[str]:
    """The module's name as the text model itself and under each wrapper."""
    return [prefix + name[len(old) :] for old, prefix in WRAPPERS if name.startswith(old)]


def sized_facts(config: dict, index: dict | None, quant_file: dict | None = None) -> CheckpointFacts:
    """The checkpoint's facts with its weight bytes: the index's metadata.total_size, else the estimate."""
    facts = read_facts(config, quant_file)
    text = text_config(config)
    try:
        result = estimate(text, facts)
    except (TypeError, ValueError, KeyError, ZeroDivisionError, AttributeError, OverflowError) as exc:
        raise FactsError(f"config.json: a shape init cannot read ({type(exc).__name__})") from None
    facts.routed_fraction, facts.expert_dtype = result.routed_fraction, result.expert_dtype
    facts.expert_format = result.expert_format
    facts.why.expert_dtype = result.expert_why
    total = ((index or {}).get("metadata") or {}).get("total_size")
    if isinstance(total, int) and not isinstance(total, bool) and 0 < total < 1 << 50:
        facts.weight_bytes = total
        facts.why.weights = "model.safetensors.index.json metadata.total_size"
    else:
        facts.weight_bytes = result.bytes
        facts.why.weights = f"ESTIMATE from the shapes (no weight index with metadata.total_size): {result.how}"
        facts.undecided.extend(result.left_out)
    return facts


def _unknown_prefixes(entries: list[str]) -> list[str]:
    """Exclude entries naming layers under a prefix none of WRAPPERS forms: the estimate cannot match them."""
    found = []
    for entry in entries:
        head = entry.removeprefix("re:").lstrip(".*^").partition("layers.")
        if head[1] and not entry.startswith(VISION_PREFIXES) and head[0].replace("\\", "") not in LAYER_PREFIXES:
            found.append(entry)
    return found


def estimate(text: dict, facts: CheckpointFacts) -> Estimate:
    quant = facts.quantization
    dtype_bytes = DTYPE_BYTES.get(facts.dtype, 2.0)
    price = _pricer(facts, dtype_bytes)
    total, routed, quantized_params, params = 0.0, 0.0, 0, 0
    experts: dict[tuple, list] = {}  # the routed experts by the format they are priced at: [name, bytes, format, size]
    shapes = Shapes(text)
    for name, parameters, linear in _parts(shapes, facts):
        params += parameters
        each, form = price(name, linear)
        size = parameters * (each or dtype_bytes)
        total += size
        quantized_params += parameters if each else 0
        if name.endswith(".experts"):
            routed += size
            experts.setdefault((each, form and form.summary), [name, each or dtype_bytes, form, 0])[3] += size
    how = (
        f"{params / 1e9:.1f}B parameters, {quantized_params / 1e9:.1f}B of them quantized (scales included), the "
        f"rest at {dtype_bytes:g} bytes ({facts.dtype})"
    )
    left_out = ["the weight bytes are an estimate from the shapes (the checkpoint has no weight index)"]
    if facts.dtype not in DTYPE_BYTES:
        left_out.append(f"weight bytes: dtype {facts.dtype!r} is not one init prices (2 bytes a weight assumed)")
    if shapes.unread:
        unread = ", ".join(shapes.unread)
        left_out.append(f"weight bytes: {unread} not a whole number: the parts they size are left out")
    if "vision_config" in text:
        left_out.append("the vision tower (vision_config) is not in the weight estimate")
    strange = [] if quant.per_module else _unknown_prefixes(quant.exclude)
    if strange:
        left_out.append(f"weight bytes: exclude entries under a prefix init does not know, e.g. {strange[0][:80]!r}")
    if not experts:
        return Estimate(int(total), how, 0.0, left_out, "", "no routed experts")
    name, each, form, size = max(experts.values(), key=lambda found: found[3])
    expert_dtype = f"{each:.3f} bytes a weight, scales included"
    if len(experts) > 1:
        expert_dtype += f" ({size / routed:.0%} of the routed bytes; the others in {len(experts) - 1} other format(s))"
    if form is not None and not form.weight_bits:
        expert_dtype = f"{form.summary}; priced at {dtype_bytes:g} bytes ({facts.dtype}), an upper bound"
    elif form is None and quant.method != "none":
        keeps = "the per-module list names no format for them" if quant.per_module else "the exclude list keeps them so"
        expert_dtype += f", unquantized ({facts.dtype}: {keeps})"
    expert_why = f"{name} priced by the quantization, its per-module formats and its exclude list"
    return Estimate(int(total), how, routed / total, left_out, expert_dtype, expert_why, form)


def _pricer(facts: CheckpointFacts, dtype_bytes: float):
    """price(name, is Linear) -> (bytes a weight, or None when unquantized or undecided; the format it is stored in)."""
    quant = facts.quantization
    renames = next((pairs for family, pairs in MODULE_NAMES.items() if facts.model_type.startswith(family)), ())
    entries, modules = tuple(quant.exclude), _module_index(quant.per_module)

    def price(name: str, linear: bool) -> tuple[float | None, Quantization | None]:
        for old, new in renames:
            name = name.replace(old, new)
        if not linear or quant.method == "none" or excluded(name, entries):
            return None, None
        if quant.per_module:
            spec = modules.get(_normal(name)) or modules.get("^" + _normal(name))
            if spec is None:  # listed nowhere: the engines leave it unquantized
                return None, None
            bits, group = spec
            what = f"{bits}-bit float, group {group}" if bits else "undecided: a per-module format init does not read"
            form = Quantization("mixed", what, bits or None, "float", group)
        else:
            form = (quant.experts or quant) if name.endswith(".experts") else quant
        return (bytes_per_weight(form, dtype_bytes) if form and form.weight_bits else None), form

    return price


def _normal(name: str) -> str:
    """A module name as the engines resolve it, whatever the wrapper and the family's names for the same part."""
    name = "." + _canonical(name) + "."
    for old, new in _SYNONYMS:
        name = name.replace(old, new)
    return _CONTAINER.sub("", name).strip(".")


def _module_index(per_module: dict[str, tuple[int, int | None]]) -> dict[str, tuple[int, int | None]]:
    """Each listed module's format under its normal name, and under "^" and each module above it: sglang's and vLLM's
    ModelOptMixedPrecisionConfig._resolve_quant_algo take the module itself, else the first listed module under it (a
    fused MoE whose experts are listed one by one); a module neither finds stays unquantized."""
    index: dict[str, tuple[int, int | None]] = {}
    for name, spec in per_module.items():
        normal = _normal(name)
        index[normal] = spec
        while "." in normal:
            normal = normal.rpartition(".")[0]
            index.setdefault("^" + normal, spec)
    return index


def _canonical(name: str) -> str:
    """A checkpoint's module name as the estimate's parts spell it (the text model's own names)."""
    for old, prefix in WRAPPERS[1:]:
        if name.startswith(prefix):
            return old + name[len(prefix) :]
    return name


class Shapes:
    """A config's sizes as the estimate reads them: one missing or not a whole number counts 0 and is named."""

    def __init__(self, text: dict) -> None:
        self.text, self.unread = text, []

    def __getitem__(self, key: str) -> int:
        return self.get(key, None)

    def get(self, key: str, default: int | None = 0) -> int:
        """text[key]; absent or null is `default` (None: the key is needed, so it is named)."""
        value = self.text.get(key)
        if (value is None and default is not None) or count(value) is not None:
            return default if value is None else count(value)
        self.unread += [] if key in self.unread else [key]
        return 0


def _parts(shapes: Shapes, facts: CheckpointFacts):
    """(representative module name, parameters, is a Linear layer) of every part of the model."""
    text, hidden, vocab = shapes.text, shapes["hidden_size"], shapes["vocab_size"]
    yield "model.embed_tokens", vocab * hidden, False
    if not text.get("tie_word_embeddings"):
        yield "lm_head", vocab * hidden, True
    mtp = [("full", "moe" if facts.moe else "dense")] * facts.mtp_layers
    for index, (mixer, mlp) in enumerate(facts.layer_kinds + mtp):
        prefix = f"model.layers.{index}"
        if mixer == "mamba":
            yield f"{prefix}.mixer.out_proj", _mamba(shapes), True
        elif mixer == "linear":
            yield f"{prefix}.linear_attn.out_proj", _linear_attention(shapes), True
        elif mixer != "none":
            layer_heads = facts.layer_kv_heads[index] if index < len(facts.layer_kv_heads) else None
            yield f"{prefix}.self_attn.o_proj", _attention(shapes, facts, mixer, layer_heads), True
        if mlp == "moe":
            yield from _moe(prefix, facts, hidden)
        elif mlp == "dense":
            yield f"{prefix}.mlp.down_proj", _matrices(facts) * hidden * _dense_width(shapes, facts, index), True
        if index >= len(facts.layer_kinds):  # an MTP layer: its projection of [embedding; hidden] back to hidden
            yield f"{prefix}.eh_proj", 2 * hidden * hidden, True


def _dense_width(shapes: Shapes, facts: CheckpointFacts, index: int) -> int:
    if index < len(facts.mlp_widths):  # a width each layer sets (block_configs)
        return facts.mlp_widths[index]
    return facts.moe.dense_width if facts.moe else shapes["intermediate_size"]


def _matrices(facts: CheckpointFacts) -> int:
    return 3 if facts.gated else 2  # gate, up and down; or up and down


def _moe(prefix: str, facts: CheckpointFacts, hidden: int):
    moe, matrices = facts.moe, _matrices(facts)
    yield f"{prefix}.mlp.experts", moe.experts * matrices * moe.hidden * moe.expert_width, True
    if moe.hidden != hidden:  # a latent MoE's projections into and out of the experts' width
        yield f"{prefix}.mlp.fc1_latent_proj", 2 * hidden * moe.hidden, True
    if moe.shared_experts:  # the shared expert sees the full hidden state, latent or not
        yield f"{prefix}.mlp.shared_experts.down_proj", moe.shared_experts * matrices * hidden * moe.shared_width, True
    yield f"{prefix}.mlp.gate", hidden * moe.experts, True


def _mamba(shapes: Shapes) -> int:
    """Mamba-2's projections (vLLM model_executor/layers/mamba/mamba_mixer2.py): in_proj to z, x, B, C and dt, out."""
    inner = shapes["mamba_num_heads"] * shapes["mamba_head_dim"]
    groups_state = 2 * shapes["n_groups"] * shapes["ssm_state_size"]
    hidden = shapes["hidden_size"]
    return hidden * (2 * inner + groups_state + shapes["mamba_num_heads"]) + inner * hidden


def _linear_attention(shapes: Shapes) -> int:
    hidden, kda = shapes["hidden_size"], shapes.text.get("linear_attn_config")
    if isinstance(kda, dict):  # sglang kimi_k3.py KimiK3DeltaAttention: q, k, v, the gate and o of heads x head_dim
        return 5 * hidden * int(kda["num_heads"]) * int(kda["head_dim"])
    key_dim = shapes["linear_num_key_heads"] * shapes["linear_key_head_dim"]
    value_heads = shapes["linear_num_value_heads"]
    value_dim = value_heads * shapes["linear_value_head_dim"]
    return hidden * (2 * key_dim + 2 * value_dim + 2 * value_heads) + value_dim * hidden


def _attention(shapes: Shapes, facts: CheckpointFacts, mixer: str, layer_heads: int | None) -> int:
    """One attention layer's projections; `layer_heads`: its own KV heads where layers differ (Nemotron-NAS)."""
    attention, hidden, text = facts.attention, shapes["hidden_size"], shapes.text
    heads = attention.heads
    if attention.kv_lora_rank:
        nope, rope = shapes.get("qk_nope_head_dim"), shapes.get("qk_rope_head_dim")
        value, q_rank = shapes.get("v_head_dim", nope), shapes.get("q_lora_rank")
        query = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        latent = hidden * (attention.kv_lora_rank + rope) + attention.kv_lora_rank * heads * (nope + value)
        count = query + latent + heads * value * hidden
        if attention.index_topk:
            index_heads, index_dim = shapes.get("index_n_heads"), shapes.get("index_head_dim")
            count += (q_rank or hidden) * index_heads * index_dim + hidden * index_dim + hidden * index_heads
        return count
    shape = (attention.kv_heads, attention.head_dim, attention.head_dim)
    kv_heads, key_dim, value_dim = attention.kv_shapes.get(mixer, shape)  # a kind's own shape (Gemma 4, MiMo-V2)
    kv_heads = layer_heads or kv_heads
    query = hidden * heads * key_dim * (2 if text.get("attn_output_gate") else 1)
    return query + hidden * kv_heads * (key_dim + value_dim) + heads * value_dim * hidden
