"""What FedAvg exchanges: the tensors that train, and how many bytes each part of the model uploads.

FedAvg gathers, averages and uploads only the trainable parameters (``requires_grad``): with LoRA the
adapters and ``modules_to_save``, in full training every parameter. A parameter is exchanged under
each of its state-dict names (a tied one, held by the CU's embedding and the edge server's head, under
both). Frozen parameters (a LoRA base) and buffers never change: every participant keeps its own copy,
bit for bit (averaging equal values is not exact in floating point, so they are not averaged at all).

:func:`upload_bytes` counts, per part of the model, the bytes of what it exchanges: after a round each
device sends its blocks' share to its CU and the edge server the head's; the CU's embedding share is
already on the CU. It works on the meta skeleton (nothing allocated), for the cost model's upload.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from torch import Tensor, nn

from collapipe_core.models import EncoderStackModel


def averaged_keys(module: nn.Module) -> list[str]:
    """The state-dict keys of the tensors FedAvg averages: the trainable parameters, in state-dict order."""
    return [
        name
        for name, tensor in module.state_dict(keep_vars=True).items()
        if isinstance(tensor, nn.Parameter) and tensor.requires_grad
    ]


def tensor_bytes(tensors: Mapping[str, Tensor]) -> int:
    """Σ numel × element size."""
    return sum(t.numel() * t.element_size() for t in tensors.values())


@dataclass(frozen=True)
class UploadBytes:
    """Bytes of the averaged tensors per part: the CU's embedding, each block, the edge server's head."""

    embedding: int
    blocks: tuple[int, ...]
    head: int

    def devices(self, num_blocks: list[int] | tuple[int, ...]) -> list[int]:
        """What each device of a segment vector uploads to its CU: the sum over its blocks."""
        out, start = [], 0
        for count in num_blocks:
            out.append(sum(self.blocks[start : start + count]))
            start += count
        return out


def upload_bytes(model: EncoderStackModel) -> UploadBytes:
    """:class:`UploadBytes` of a split model (``embedding``, ``blocks.<i>``, ``head``), real or on meta."""
    state = model.state_dict(keep_vars=True)
    averaged = {name: state[name] for name in averaged_keys(model)}
    num_blocks = len(model.blocks)

    def part(prefix: str) -> int:
        return tensor_bytes({k: t for k, t in averaged.items() if k.startswith(prefix)})

    return UploadBytes(
        embedding=part("embedding."),
        blocks=tuple(part(f"blocks.{i}.") for i in range(num_blocks)),
        head=part("head."),
    )
