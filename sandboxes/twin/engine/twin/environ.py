import os
import warnings
from contextlib import contextmanager
from typing import Any


class EnvField:
    def __init__(self, default: Any):
        self.default = default

    def __set_name__(self, owner, name):
        self.name = name

    def parse(self, value: str) -> Any:
        raise NotImplementedError()

    def get(self) -> Any:
        value = os.getenv(self.name)
        if value is None:
            return self.default
        try:
            return self.parse(value)
        except ValueError as e:
            warnings.warn(f'Invalid value for {self.name}: {e}, using default "{self.default}"', stacklevel=2)
            return self.default

    def is_set(self) -> bool:
        return self.name in os.environ

    def set(self, value: Any) -> None:
        os.environ[self.name] = str(value)

    @contextmanager
    def override(self, value: Any):
        backup = os.environ.get(self.name)
        self.set(value)
        yield
        if backup is None:
            os.environ.pop(self.name, None)
        else:
            os.environ[self.name] = backup

    def clear(self) -> None:
        os.environ.pop(self.name, None)

    def __bool__(self):
        raise RuntimeError("Please use `envs.YOUR_FLAG.get()` instead of `envs.YOUR_FLAG`")


class EnvStr(EnvField):
    def parse(self, value: str) -> str:
        return value


class EnvBool(EnvField):
    def parse(self, value: str) -> bool:
        value = value.lower()
        if value in ["true", "1", "yes", "y"]:
            return True
        if value in ["false", "0", "no", "n"]:
            return False
        raise ValueError(f'"{value}" is not a valid boolean value')


class EnvInt(EnvField):
    def parse(self, value: str) -> int:
        try:
            return int(value)
        except ValueError:
            raise ValueError(f'"{value}" is not a valid integer value') from None


class EnvFloat(EnvField):
    def parse(self, value: str) -> float:
        try:
            return float(value)
        except ValueError:
            raise ValueError(f'"{value}" is not a valid float value') from None


class Envs:
    # ===================================================================
    # Model configuration, discovery, and weight loading
    # ===================================================================
    SGLANG_USE_MODELSCOPE = EnvBool(False)
    SGLANG_SORT_WEIGHT_FILES = EnvInt(0)
    SGLANG_MOE_COPY_WEIGHT_VIEWS_BEFORE_H2D = EnvBool(False)
    # In seconds; a warmup forward batch that takes longer crashes the server instead of hanging it.
    SGLANG_WARMUP_TIMEOUT = EnvFloat(-1)

    # ===================================================================
    # Logging
    # ===================================================================
    SGLANG_LOG_GC = EnvBool(False)
    SGLANG_LOG_FORWARD_ITERS = EnvBool(False)
    SGLANG_LOG_MS = EnvBool(False)
    SGLANG_LOG_REQUEST_EXCEEDED_MS = EnvInt(-1)
    SGLANG_LOG_SCHEDULER_STATUS_INTERVAL = EnvFloat(60.0)

    # ===================================================================
    # CI and test execution
    # ===================================================================
    SGLANG_IS_IN_CI = EnvBool(False)

    # ===================================================================
    # ROCm and AITER
    # ===================================================================
    SGLANG_USE_AITER = EnvBool(False)
    SGLANG_USE_AITER_AG = EnvBool(True)
    SGLANG_USE_AITER_UNIFIED_ATTN = EnvBool(False)
    SGLANG_USE_AITER_MOE_GU_ITLV = EnvBool(True)
    SGLANG_AITER_FUSE_RMSNORM_PAD = EnvBool(False)
    SGLANG_AITER_KV_CACHE_LAYOUT = EnvStr("nhd")
    SGLANG_ROCM_FUSED_DECODE_MLA = EnvBool(False)
    SGLANG_ROCM_DISABLE_LINEARQUANT = EnvBool(False)
    SGLANG_ROCM_USE_MULTI_STREAM = EnvBool(False)
    SGLANG_USE_AITER_FP8_PER_TOKEN = EnvBool(False)
    SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION = EnvBool(False)
    SGLANG_AITER_MLA_GLUON = EnvBool(True)

    # ===================================================================
    # Compilation and JIT kernels
    # ===================================================================
    SGLANG_ENABLE_TORCH_COMPILE = EnvBool(False)
    SGLANG_ENABLE_JIT_DEEPGEMM = EnvBool(True)
    SGLANG_JIT_DEEPGEMM_PRECOMPILE = EnvBool(True)
    SGLANG_JIT_DEEPGEMM_COMPILE_WORKERS = EnvInt(4)
    SGLANG_CACHE_DIR = EnvStr(os.path.expanduser("~/.cache/sglang"))
    SGLANG_JIT_CACHE_DIR = EnvStr(None)

    # ===================================================================
    # Kernel options
    # ===================================================================
    SGLANG_OPT_USE_TOPK_V2 = EnvBool(True)
    SGLANG_MOE_PADDING = EnvBool(False)
    SGLANG_INT4_WEIGHT = EnvBool(False)

    # ===================================================================
    # DeepSeek sparse attention (DSA)
    # ===================================================================
    SGLANG_DSA_TOPK_FLASHINFER_DETERMINISTIC = EnvBool(False)
    SGLANG_DSA_MQA_LOGITS_FREE_MEM_FRACTION = EnvFloat(0.2)
    SGLANG_DSA_TOPK_BROADCAST = EnvBool(False)

    # ===================================================================
    # Scheduling and CPU placement
    # ===================================================================
    SGLANG_SET_CPU_AFFINITY = EnvBool(False)


envs = Envs()
