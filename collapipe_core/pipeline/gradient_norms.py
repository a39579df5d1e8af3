"""Read the squared gradient norms of an optimizer step as it trains (:mod:`collapipe_core.gradient_noise`).

:class:`GradientNormProbe` puts a tensor hook on each parameter for the steps it measures, from
``start_step()`` to ``finish_step()``. autograd calls a leaf's hook once per backward, with that
backward's whole gradient for it (summed over every use, a tied weight's two included) before adding
it to ``.grad``: one micro-batch's contribution c_m, exactly, with no copy of ``.grad``. The probe
keeps its norm (a 0-d tensor per parameter and micro-batch, squared and summed in float64 at the step's
end) and, at the end, the norm of the accumulated ``.grad``. What a measured step costs per
micro-batch is one pass over the gradient, beside the backward that made it, and per parameter one call
into Python and one norm (in a small model, such as the quickstart's 76 parameters, these fixed costs
are most of it, so the hook does nothing else); bench/training_overhead.py measures the whole.

Between measured steps the parameters carry no hook of the probe: ``finish_step()`` removes the hooks
and, where no other hook is left on a parameter, its emptied hook dict too (autograd would otherwise
still call into Python for it in every backward), so an unmeasured step costs nothing.

A parameter another process also holds (the distributed executor's tied weight, one copy on the CU and
one on the edge server) is ``kept``: its contributions are kept whole, per micro-batch, for the two
processes to add before taking norms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from types import TracebackType

import torch
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from collapipe_core.gradient_noise import GradientNormSums


class GradientNormProbe:
    """Per-step sums of squared gradient norms of ``parameters`` (each counted once).

    Per measured step: ``start_step()`` before the step's first backward (it puts the hooks on),
    ``finish_step(M, b)`` after its last (it takes them off). Use as a context manager: on exit a step
    left open loses its hooks, and a closed probe measures nothing more.
    """

    def __init__(self, parameters: Iterable[nn.Parameter], kept: Iterable[nn.Parameter] = ()) -> None:
        kept_ids = {id(p) for p in kept}
        unique = {id(p): p for p in parameters if p.requires_grad}
        self.parameters = [p for i, p in unique.items() if i not in kept_ids]
        self.kept = [p for i, p in unique.items() if i in kept_ids]
        self._norms: list[Tensor] = []
        self._contributions: dict[int, list[Tensor]] = {id(p): [] for p in self.kept}
        self._hooks = [(p, self._norm_adder()) for p in self.parameters] + [
            (p, self._keeper(p)) for p in self.kept
        ]
        self._handles: list[RemovableHandle] = []
        self._closed = False

    def _norm_adder(self) -> Callable[[Tensor], None]:
        norms, norm = self._norms, torch.linalg.vector_norm  # bound once: the hook runs per parameter

        def add_norm(grad: Tensor) -> None:
            norms.append(norm(grad))  # no graph: grad mode is off in a backward without create_graph

        return add_norm

    def _keeper(self, param: nn.Parameter) -> Callable[[Tensor], None]:
        parts = self._contributions[id(param)]

        def keep(grad: Tensor) -> None:
            parts.append(grad.detach().clone())

        return keep

    def start_step(self) -> None:
        self._norms.clear()
        for parts in self._contributions.values():
            parts.clear()
        if not self._closed and not self._handles:
            self._handles = [p.register_hook(hook) for p, hook in self._hooks]  # type: ignore[no-untyped-call]

    def finish_step(self, num_microbatches: int, microbatch_size: int) -> GradientNormSums:
        """The step's sums over the (not kept) parameters, from their contributions and their ``.grad``."""
        self._remove_hooks()
        return GradientNormSums(
            microbatch_sq_sum=sum_of_squares(self._norms),
            step_sq=sum_of_squares(
                torch.linalg.vector_norm(p.grad) for p in self.parameters if p.grad is not None
            ),
            num_microbatches=num_microbatches,
            microbatch_size=microbatch_size,
        )

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        if self._handles:
            for param, _ in self._hooks:
                if param._backward_hooks is not None and not param._backward_hooks:
                    param._backward_hooks = None  # else autograd still calls into Python per backward
        self._handles = []

    def contributions(self, param: nn.Parameter) -> list[Tensor]:
        """A kept parameter's contributions of this step, one per backward, in order."""
        return self._contributions[id(param)]

    def close(self) -> None:
        """Remove the hooks, drop what the last step kept and measure nothing more."""
        self._remove_hooks()
        self._closed = True
        self.start_step()

    def __enter__(self) -> GradientNormProbe:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def sum_of_squares(norms: Iterable[Tensor]) -> float:
    """Σ norm², in float64."""
    found = list(norms)
    if not found:
        return 0.0
    return float(torch.stack(found).to(torch.float64).square().sum())
