"""Running the model without graphs (sglang's cuda-graph backends disabled, vLLM's --enforce-eager): the engine
that start-up picks then."""

from twin import jit, memory
from twin.engine import CAPTURE_BATCH_SIZES, Engine
from twin.environ import envs


class EagerEngine(Engine):
    """Every forward runs eagerly: nothing is captured, and the first forwards build the kernels a capture would
    have built (the top-k kernel, the MoE's at each batch size)."""

    def _capture_graphs(self, plan: memory.MemoryPlan) -> None:
        if self.options.dsa_topk_v2_env and getattr(envs, self.options.dsa_topk_v2_env).get():
            jit.topk_v2()
        for batch_size in CAPTURE_BATCH_SIZES:
            self.moe.kernel(batch_size * self.tokens_per_decode_step())
