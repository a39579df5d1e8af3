"""Per-rank measurements: where a rank's time goes in a pipeline step, and its peak memory.

Time (seconds, summed over the round's local iterations):

- ``compute_s``: forward and backward of the rank's own stage (and the loss on the edge server);
- ``send_s`` / ``recv_s``: time the rank was blocked waiting for a send / a receive to complete (a
  gloo send completes once the receiver took it; with link emulation, ``send_s`` is the time spent
  draining the links after each step). The pipeline bubble shows up as ``recv_s``: a stage waiting
  for its upstream activation or downstream gradient;
- ``idle_s`` = ``step_s − compute_s − send_s``: time in the step neither computing nor sending — the
  measured counterpart of the cost model's idle time (makespan − compute − transmit). It contains
  ``recv_s`` and the schedule's own bookkeeping;
- ``step_s``: wall time inside ``schedule.step()``; ``optimizer_s``: the optimizer steps.

Memory (bytes), notes/torch-pipelining-cpu.md §5:

- OS truth: the child starts with ``MALLOC_MMAP_THRESHOLD_=65536`` (large blocks go back to the OS when
  freed, so the resident set follows the live data). Before training, write ``5`` to
  ``/proc/self/clear_refs`` (resets ``VmHWM`` to the current RSS) and read ``VmHWM`` as the baseline;
  after training, ``VmHWM`` is the peak resident set (never below the baseline);
- tensor truth: a :class:`TensorBytesTracker` (a ``TorchDispatchMode``) adds up the storages created
  during training and keeps the running peak; tensors that existed before (the stage's weights and
  optimizer state) are counted directly.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
from torch.distributed.pipelining import schedules as pipeline_schedules
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakIdKeyDictionary

MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536"}
"""Set in every rank's environment before start-up: freed large blocks return to the OS."""

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


# -- resident set ----------------------------------------------------------------------------------


def _status_bytes(field_name: str) -> int | None:
    try:
        text = _STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024  # reported in kB
    return None


def reset_rss_peak() -> int | None:
    """Reset the resident-set high-water mark to the current RSS and return it (None if unsupported).

    The value returned is ``VmHWM`` read right after the reset, not ``VmRSS`` read before it: the
    process's other threads can free memory in between, and a baseline above the mark just set would
    make a later peak read below its own baseline."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return None
    return rss_peak_bytes()


def rss_peak_bytes() -> int | None:
    """The resident-set high-water mark (``VmHWM``) since the last :func:`reset_rss_peak`."""
    return _status_bytes("VmHWM")


# -- tensors ---------------------------------------------------------------------------------------


def tensor_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (non-tensors are ignored)."""
    seen: set[int] = set()
    total = 0
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "meta":
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


class TensorBytesTracker(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Live bytes of the tensor storages created while the mode is active, and their peak.

    Every output of every op is looked at; a storage seen for the first time is counted until it is
    freed (a weak reference's callback). In-place ops and views return known storages and add nothing.
    """

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.live_bytes = 0
        self.peak_bytes = 0
        self._known: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor) and leaf.device.type != "meta":
                self._track(leaf.untyped_storage())
        return out

    def _track(self, storage: torch.UntypedStorage) -> None:
        if storage in self._known:
            return
        size = storage.nbytes()
        self._known[storage] = size
        self.live_bytes += size
        self.peak_bytes = max(self.peak_bytes, self.live_bytes)
        weakref.finalize(storage, self._release, size)

    def _release(self, size: int) -> None:
        self.live_bytes -= size


# -- time ------------------------------------------------------------------------------------------


@dataclass
class StepClock:
    """Accumulates a rank's time over a round; ``forward_chunks_s`` etc. keep every micro-batch.

    The ``*_cpu_chunks_s`` lists are the same micro-batches' CPU time of the rank's thread (torch runs
    one thread per rank): the compute without the time the thread waited for a core, which on a host
    whose ranks share cores is what a stage would take with a core of its own.
    """

    forward_chunks_s: list[float] = field(default_factory=list)
    backward_chunks_s: list[float] = field(default_factory=list)
    forward_starts_s: list[float] = field(default_factory=list)  # monotonic clock
    backward_starts_s: list[float] = field(default_factory=list)
    forward_cpu_chunks_s: list[float] = field(default_factory=list)
    backward_cpu_chunks_s: list[float] = field(default_factory=list)
    loss_chunks_s: list[float] = field(default_factory=list)  # the edge server's loss, per micro-batch
    loss_cpu_chunks_s: list[float] = field(default_factory=list)
    send_s: float = 0.0
    recv_s: float = 0.0
    step_s: float = 0.0
    optimizer_s: float = 0.0
    steps: list[tuple[float, float]] = field(default_factory=list)  # (start, end), monotonic clock

    @property
    def compute_s(self) -> float:
        return sum(self.forward_chunks_s) + sum(self.backward_chunks_s) + sum(self.loss_chunks_s)

    def details(self) -> dict[str, list[float]]:
        """The per-micro-batch and per-step timings a rank reports beside its figures."""
        return {
            "forward_chunks_s": list(self.forward_chunks_s),
            "backward_chunks_s": list(self.backward_chunks_s),
            "forward_starts_s": list(self.forward_starts_s),
            "backward_starts_s": list(self.backward_starts_s),
            "forward_cpu_chunks_s": list(self.forward_cpu_chunks_s),
            "backward_cpu_chunks_s": list(self.backward_cpu_chunks_s),
            "loss_chunks_s": list(self.loss_chunks_s),
            "loss_cpu_chunks_s": list(self.loss_cpu_chunks_s),
            "step_start_s": [s for s, _ in self.steps],
            "step_end_s": [e for _, e in self.steps],
        }

    def add_wait(self, kind: str, seconds: float) -> None:
        if kind == "send":
            self.send_s += seconds
        else:
            self.recv_s += seconds

    def figures(self) -> dict[str, float]:
        """The per-round figures that go into the records (see the module docstring)."""
        forward, backward = self.forward_chunks_s, self.backward_chunks_s
        return {
            "compute_s": self.compute_s,
            "forward_s": sum(forward),
            "backward_s": sum(backward),
            "send_s": self.send_s,
            "recv_s": self.recv_s,
            "idle_s": max(self.step_s - self.compute_s - self.send_s, 0.0),
            "step_s": self.step_s,
            "optimizer_s": self.optimizer_s,
            "forward_microbatch_s": sum(forward) / len(forward) if forward else 0.0,
            "backward_microbatch_s": sum(backward) / len(backward) if backward else 0.0,
        }


def timed(clock: StepClock, fn: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """``fn`` (the loss) with each call's time added to ``clock.loss_chunks_s`` (and its CPU time)."""

    def run(*args: Any, **kwargs: Any) -> torch.Tensor:
        started, cpu = time.perf_counter(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            clock.loss_chunks_s.append(time.perf_counter() - started)
            clock.loss_cpu_chunks_s.append(time.thread_time() - cpu)

    return run


class TimedWork:
    """A p2p work whose ``wait()`` is timed as a send or a receive."""

    def __init__(self, work: Any, kind: str, clock: StepClock) -> None:
        self._work = work
        self._kind = kind
        self._clock = clock

    def wait(self, *args: Any) -> Any:
        started = time.perf_counter()
        try:
            return self._work.wait(*args)
        finally:
            self._clock.add_wait(self._kind, time.perf_counter() - started)


class SendLink(Protocol):
    """Something that takes over isend ops and returns a work to wait on (link emulation, :mod:`.link`)."""

    def submit(self, op: dist.P2POp) -> Any: ...


class RecvPrefetch:
    """Receives posted ahead of time, keyed by their buffer.

    gloo moves a message only once the receiver has posted its ``irecv``; torch's single-stage
    schedules post the receive of micro-batch i+1 only after computing i, so every hop waits a round
    trip between processes. The stage posts i+1's receive as soon as i's is asked for (after i's, to
    keep gloo's per-peer matching order); the wrapped ``_batch_p2p`` then hands out these works.
    """

    def __init__(self) -> None:
        self._works: dict[int, Any] = {}

    def post(self, ops: Iterable[dist.P2POp]) -> None:
        for op in ops:
            if id(op.tensor) not in self._works:
                self._works[id(op.tensor)] = dist.irecv(
                    op.tensor, group=op.group, tag=op.tag, group_src=op.group_peer
                )

    def take(self, op: dist.P2POp) -> Any | None:
        return self._works.pop(id(op.tensor), None)

    def pending(self) -> int:
        return len(self._works)


@contextmanager
def instrument_p2p(
    clock: StepClock, link: SendLink | None = None, prefetch: RecvPrefetch | None = None
) -> Iterator[None]:
    """Time every p2p wait of the pipeline schedules; route sends through ``link`` when given.

    ``torch.distributed.pipelining`` issues all of its p2p through the module function
    ``schedules._batch_p2p`` and waits with ``work.wait()``; we wrap that function for the duration of
    a step (in the rank's own process) and hand back works whose ``wait`` is timed.
    """
    original = pipeline_schedules._batch_p2p

    def batch_p2p(p2p_ops: list[dist.P2POp], desc: str | None = None) -> list[Any]:
        if prefetch is not None:
            ready = {id(op): prefetch.take(op) for op in p2p_ops if op.op is not dist.isend}
            if any(work is not None for work in ready.values()):
                rest = iter(batch_p2p([op for op in p2p_ops if ready.get(id(op)) is None], desc))
                return [
                    TimedWork(ready[id(op)], "recv", clock) if ready.get(id(op)) is not None else next(rest)
                    for op in p2p_ops
                ]
        if link is not None:
            recvs = [op for op in p2p_ops if op.op is not dist.isend]
            recv_works = iter(original(recvs, desc=desc) if recvs else [])
            return [
                TimedWork(link.submit(op), "send", clock)
                if op.op is dist.isend
                else TimedWork(next(recv_works), "recv", clock)
                for op in p2p_ops
            ]
        works = original(p2p_ops, desc=desc)
        if len(works) == len(p2p_ops):
            kinds = ["send" if op.op is dist.isend else "recv" for op in p2p_ops]
        else:  # a coalesced batch (NCCL): one work; waiting on it is waiting for the receive
            kinds = ["recv" if any(op.op is not dist.isend for op in p2p_ops) else "send"] * len(works)
        return [TimedWork(w, kind, clock) for w, kind in zip(works, kinds, strict=True)]

    pipeline_schedules._batch_p2p = batch_p2p
    try:
        yield
    finally:
        pipeline_schedules._batch_p2p = original
