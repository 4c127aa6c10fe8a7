"""The twin's model families (sandboxes/twin/families): each checkpoint is built from its own config.json, the device
derives its parameters from that config (the flagship's figures are the ones it was calibrated on), and the second
family's checkpoint and FP8 block rules look like a real DeepSeek-V3-style FP8 export. Pure functions and files, no
server (the scenarios' servers: test_twin_scenarios.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TWIN = ROOT / "sandboxes" / "twin"
# ../shared/model_configs beside the repository, or $PORTER_MODEL_CONFIGS (a git worktree lives elsewhere)
SHARED_CONFIGS = Path(os.environ.get("PORTER_MODEL_CONFIGS") or ROOT.parent / "shared" / "model_configs")
sys.path.insert(0, str(TWIN))
sys.path.insert(0, str(TWIN / "device"))
sys.path.insert(0, str(TWIN / "engine"))

from families import corvid3, glm52  # noqa: E402
from twin.fp8_block import Fp8Config  # noqa: E402
from twin_device.model import Device, checkpoint_shape  # noqa: E402
from twin_device.server import scenario_device  # noqa: E402


def test_the_flagship_device_is_the_table_it_was_calibrated_on() -> None:
    """GLM-5.2's step times from its config equal the per-TP table the story's proportions were fitted with
    (prefill per token 0.14 + 0.10 (x2 untuned) + 0.02 ms at TP8, all-reduce 0.147; decode weights 6.4 ms, all-reduce
    1.45, 0.75 ms per 1k context tokens, 0.3 ms a draft step), so its calibration did not move."""
    device = Device()
    old_prefill = {8: (0.14 + 0.10 * 2 + 0.02) * 1 + 0.147, 4: (0.14 + 0.10 * 2 + 0.02) * 2 + 0.04}
    old_decode_weights = {8: 6.4, 4: 7.0, 2: 7.5, 1: 8.0}
    old_decode_allreduce = {8: 1.45, 4: 1.05, 2: 0.6, 1: 0.0}
    for tp, per_token in old_prefill.items():
        assert device.prefill_ms({"tp": tp}, 1000, 0) == pytest.approx(3.0 + 1000 * per_token, rel=1e-4)
    for tp in (1, 2, 4, 8):
        old = old_decode_weights[tp] * 1.03 + old_decode_allreduce[tp] + 0.15 + 0.75 * 10
        assert device.decode_ms({"tp": tp}, 1, 10000) == pytest.approx(old, rel=1e-4)
    spec = {"tp": 8, "spec_steps": 3, "spec_draft_tokens": 4}
    no_draft = device.decode_ms({"tp": 8}, 1, 0)
    assert device.decode_ms(spec, 1, 0) == pytest.approx(no_draft * (1 + 0.02 * 4 * (1 + 1 / 16)) + 0.3 * 3, rel=1e-4)


def test_the_second_family_runs_on_its_own_shape() -> None:
    """Corvid-V3's work per token, KV and MTP come from its config: less active work than GLM-5.2 (so more tokens
    per second on the same node), its 160-wide query/key head, its own acceptance profile and error rates."""
    glm, corvid = Device(), Device(family="corvid3")
    shape = corvid.shape
    assert shape["quant"] == "fp8" and shape["qk_head"] == 160 and shape["v_head"] == 128
    assert shape["kv_mb"] == pytest.approx((512 + 64) * 2 * 48 / 1e6)
    assert shape["active_gb"] < glm.shape["active_gb"] / 1.5
    for config in ({"tp": 8}, {"tp": 4}):
        assert corvid.prefill_ms(config, 8000, 0) < glm.prefill_ms(config, 8000, 0)
        assert corvid.decode_ms(config, 1, 10000) < glm.decode_ms(config, 1, 10000)
    assert corvid.p["draft_acceptance_by_position"] == corvid3.DEVICE["draft_acceptance_by_position"]
    assert corvid.error_rates("auto", False) != glm.error_rates("auto", False)


def test_a_scenario_runs_its_family_and_the_prefill_kernel_must_fit_its_heads() -> None:
    device = scenario_device("corvid3-mla-hdim-gfx950")
    assert device.shape == checkpoint_shape(corvid3.config())
    native = {"tp": 4, "kernels": {"mla_prefill": "fmha_v3_fwd_hd192_128"}}
    fallback = {"tp": 4, "kernels": {"mla_prefill": "ck_tile_fmha_fwd"}}
    too_small = {"tp": 4, "kernels": {"mla_prefill": "fmha_v3_fwd_hd128_128"}}
    assert device.prefill_ms(native, 8000, 0) < device.prefill_ms(fallback, 8000, 0)
    assert device.prefill_ms(too_small, 8000, 0) == device.prefill_ms(fallback, 8000, 0)
    assert scenario_device("glm52-day0").shape == checkpoint_shape(glm52.config())


@pytest.fixture(scope="module")
def corvid_checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("corvid")
    subprocess.run([sys.executable, str(TWIN / "make_checkpoint.py"), str(out), "--family", "corvid3"], check=True)
    return out


def test_the_fp8_checkpoint_is_written_as_a_block_fp8_export(corvid_checkpoint: Path) -> None:
    config = json.loads((corvid_checkpoint / "config.json").read_text())
    quantization = config["quantization_config"]
    assert quantization["quant_method"] == "fp8" and quantization["fmt"] == "e4m3"
    assert quantization["weight_block_size"] == [128, 128] and quantization["activation_scheme"] == "dynamic"
    assert "model.layers.48.eh_proj" in quantization["modules_to_not_convert"]
    index = json.loads((corvid_checkpoint / "model.safetensors.index.json").read_text())
    names = index["weight_map"]
    assert names["model.layers.5.mlp.experts.159.down_proj.weight_scale_inv"].endswith(".safetensors")
    assert "model.layers.48.embed_tokens.weight" in names and "model.layers.48.eh_proj.weight_scale_inv" not in names
    assert 150e9 < index["metadata"]["total_size"] < 250e9


@pytest.mark.skipif(not SHARED_CONFIGS.is_dir(), reason="../shared/model_configs is not on this machine")
def test_the_second_family_has_every_key_a_real_deepseek_v3_fp8_config_has() -> None:
    """Read for realism only (nothing from ../shared is in the repository): every key of the public DeepSeek-V3
    config, except its remote-code map, is in Corvid-V3's, with values of the same types."""
    real = json.loads((SHARED_CONFIGS / "deepseek__DeepSeek-V3.json").read_text())
    twin = corvid3.config()
    for key in set(real) - {"auto_map"}:
        assert key in twin, key
        assert type(twin[key]) is type(real[key]) or {type(twin[key]), type(real[key])} <= {int, float}, key
    assert set(real["quantization_config"]) <= set(twin["quantization_config"])


@pytest.mark.parametrize(("moe_tp", "fails"), [(8, True), (4, False), (1, False)])
def test_the_moe_weights_need_whole_blocks_per_rank(moe_tp: int, fails: bool) -> None:
    """vLLM's check at weight creation: TP8's share of a 1536-wide expert (192) fails, TP4's (384) and a whole
    expert (expert parallelism) do not."""
    quant = Fp8Config.from_config(corvid3.config()["quantization_config"], Path("config.json"))
    if fails:
        with pytest.raises(ValueError, match="= 192 is not divisible by weight quantization block_n = 128"):
            quant.expert_slots("m", 160, 5120, 1536, moe_tp)
    else:
        slots = quant.expert_slots("m", 160, 5120, 1536, moe_tp)
        assert slots["m.w13_weight"] == ((160, 3072, 5120), "F8_E4M3")
        assert slots["m.w13_weight_scale_inv"] == ((160, 24, 40), "F32")
        assert quant.moe_padding == 1.0


def test_sglangs_aiter_moe_pads_the_share_and_pays_for_it() -> None:
    """sglang with aiter pads TP8's 192 to 256 (no error): each rank holds a third more, and the device runs the
    padding too."""
    quant = Fp8Config.from_config(corvid3.config()["quantization_config"], Path("config.json"))
    quant.expert_slots("m", 160, 5120, 1536, 8, pad_to=128)
    assert quant.moe_padding == pytest.approx(256 / 192)
    device = Device(family="corvid3")
    padded, whole = {"tp": 8, "moe_tp": 8}, {"tp": 8, "moe_tp": 1}
    assert device.moe_padding(padded) == pytest.approx(256 / 192) and device.moe_padding(whole) == 1.0
    assert device.prefill_ms(padded, 8000, 0) > device.prefill_ms(whole, 8000, 0)
    assert device.decode_ms(padded, 1, 1000) > device.decode_ms(whole, 1, 1000)
    assert Device().moe_padding({"tp": 8, "moe_tp": 8}) == 1.0  # GLM-5.2: MXFP4, 256 per rank
