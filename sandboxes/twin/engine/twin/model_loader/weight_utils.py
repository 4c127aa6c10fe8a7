"""Utilities for loading weights: checkpoint tensors, parameter slots and the weight loaders between them.

A checkpoint tensor carries its dtype and shape from the safetensors header. A Parameter is a slot the
model registered; `copy_` checks the shape as torch's Tensor.copy_ does and takes another dtype as its raw
bytes. A fused-MoE slot is filled one expert's projection at a time (expert_weight_loader).
"""

from dataclasses import dataclass


class Size(tuple):
    def __repr__(self) -> str:
        return f"torch.Size([{', '.join(str(d) for d in self)}])"


@dataclass
class Tensor:
    name: str
    dtype: str
    shape: Size

    def size(self) -> Size:
        return self.shape

    def narrow(self, dim: int, start: int, length: int) -> "Tensor":
        shape = list(self.shape)
        shape[dim] = length
        return Tensor(self.name, self.dtype, Size(shape))

    def view(self, *shape: int) -> "Tensor":
        return Tensor(self.name, self.dtype, Size(shape))


@dataclass
class Parameter:
    name: str
    shape: Size
    dtype: str
    loaded_from: str | None = None
    garbage: bool = False
    # a fused module's slot: checkpoint shard name -> (row offset, rows), as a merged linear's weight_loader
    # narrows its output dimension for each shard
    shards: dict[str, tuple[int, int]] | None = None
    parent: "Parameter | None" = None

    def size(self) -> Size:
        return self.shape

    def shard(self, name: str) -> "Parameter":
        """The rows of one packed checkpoint shard (gate_proj of gate_up_proj), loaded into this slot."""
        rows = self.shards[name][1]
        return Parameter(f"{self.name}, shard {name}", Size((rows, *self.shape[1:])), self.dtype, parent=self)

    def copy_(self, tensor: Tensor) -> None:
        if tuple(tensor.shape) != tuple(self.shape):
            raise RuntimeError(
                f"The size of tensor a ({self.shape[-1]}) must match the size of tensor b ({tensor.shape[-1]}) "
                f"at non-singleton dimension {len(self.shape) - 1}"
            )
        owner = self.parent or self
        owner.loaded_from = tensor.name
        owner.garbage = owner.garbage or tensor.dtype != self.dtype


def default_weight_loader(param: Parameter, loaded_weight: Tensor) -> None:
    """Load a checkpoint tensor into a parameter slot of the same shape."""
    assert param.size() == loaded_weight.size(), (
        f"Attempted to load weight ({loaded_weight.size()}) into parameter ({param.size()}) "
        f"for {param.name} ({param.dtype} slot, checkpoint tensor {loaded_weight.name} is {loaded_weight.dtype})"
    )
    param.copy_(loaded_weight)


def expert_weight_loader(param: Parameter, loaded_weight: Tensor, expert: int, shard: int) -> None:
    """Load one expert's projection into a fused-MoE slot: w13 holds gate (shard 0) and up (shard 1) stacked on
    the output dimension, w2 holds down whole."""
    experts, rows, columns = param.size()
    halves = 2 if ".w13_" in param.name else 1
    expected = Size((rows // halves, columns))
    assert 0 <= expert < experts and loaded_weight.size() == expected, (
        f"Attempted to load weight ({loaded_weight.size()}) into expert {expert} shard {shard} ({expected}) "
        f"of parameter {param.name} ({param.size()})"
    )
    param.loaded_from = loaded_weight.name
    param.garbage = param.garbage or loaded_weight.dtype != param.dtype
