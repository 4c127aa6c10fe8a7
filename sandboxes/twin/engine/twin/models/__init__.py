"""The model implementations the engine knows, picked by the checkpoint's `architectures` (as sglang's and vLLM's
model registries are): each module declares ARCHITECTURES and provides target_params, draft_params and
load_weights. Does not cover reading the files (model_loader/)."""

from types import ModuleType

from twin.models import deepseek_v3, glm5

MODELS: dict[str, ModuleType] = {name: module for module in (glm5, deepseek_v3) for name in module.ARCHITECTURES}


def model_for(config: dict) -> ModuleType:
    architectures = config.get("architectures") or []
    for name in architectures:
        if name in MODELS:
            return MODELS[name]
    raise ValueError(
        f"Model architectures {architectures} are not supported for now. Supported architectures: {sorted(MODELS)}"
    )
