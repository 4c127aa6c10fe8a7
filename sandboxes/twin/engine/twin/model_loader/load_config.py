"""How the model is built and loaded besides its checkpoint, as sglang's configs/load_config.py (LoadConfig) and
--json-model-override-args, and vLLM's LoadConfig and --hf-overrides, say it. Does not cover reading the checkpoint
(loader.py)."""

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class LoadConfig:
    load_format: str = "auto"  # dummy: random values, no checkpoint tensor read
    model_override_args: dict = field(default_factory=dict)  # config.json keys replaced before the model is built
    cuda_graphs: bool = True  # False: every forward runs eagerly, no graph captured
