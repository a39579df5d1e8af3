"""Training precision (``training.precision``): fp32, or bf16 as mixed precision on the CPU.

- **fp32**: nothing is cast (the tests run the models in float64 this way).
- **bf16**:
  - every stage runs under CPU autocast: matrix products and attention in bf16, reductions where torch
    keeps them in fp32;
  - the trainable parameters, their gradients and the optimizer state stay fp32 (autocast casts a
    weight per op, and the gradient flows back through that cast to the fp32 parameter);
  - only the frozen parameters (a LoRA base) are stored in bf16 (:func:`store_frozen`);
  - each stage casts its output to bf16 (:func:`to_boundary`): the dtype that crosses the links,
    forward as activation and backward as gradient;
  - the head's logits are cast to fp32 before the loss (:func:`to_loss`).

This CPU has no native bf16 arithmetic, so bf16 is not faster here; it halves what crosses the links
and what the frozen weights and the kept activations take.
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor, nn

PRECISIONS = ("fp32", "bf16")


def _checked(precision: str) -> str:
    if precision not in PRECISIONS:
        raise ValueError(f"training.precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return precision


def boundary_dtype(precision: str) -> torch.dtype | None:
    """The dtype of what crosses a stage boundary; None: whatever the model computes in (fp32)."""
    return torch.bfloat16 if _checked(precision) == "bf16" else None


def autocast(precision: str) -> contextlib.AbstractContextManager[object]:
    """CPU autocast to bf16 for ``bf16``; nothing for ``fp32``."""
    if _checked(precision) == "bf16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def to_boundary(h: Tensor, precision: str) -> Tensor:
    """A stage's output as it crosses the boundary: bf16 under ``bf16``, unchanged under ``fp32``."""
    dtype = boundary_dtype(precision)
    return h if dtype is None else h.to(dtype)


def to_loss(logits: Tensor, precision: str) -> Tensor:
    """Logits for the loss: fp32 under ``bf16`` (the loss and its softmax in fp32), unchanged otherwise."""
    return logits.float() if _checked(precision) == "bf16" else logits


def store_frozen(model: nn.Module, precision: str) -> None:
    """Store the parameters that do not train (``requires_grad`` False) in bf16 under ``bf16``.

    A parameter keeps its identity (a tied one stays one ``Parameter``); on the meta device only the
    dtype changes. Trainable parameters and buffers are left as they are.
    """
    if boundary_dtype(precision) is None:
        return
    with torch.no_grad():
        for param in {id(p): p for p in model.parameters()}.values():
            if not param.requires_grad and param.dtype != torch.bfloat16:
                param.data = param.data.to(torch.bfloat16)
