"""Optional link emulation: every pipeline transfer takes as long as the modeled channel says.

A rank's sends to one peer go through one transmitter thread, first in first out: a payload of ``numel
× element size`` bytes (the tensor as sent: fp32, or bf16 under precision bf16) ready at time r leaves
when the transmitter is free and keeps it busy for ``8·bytes / rate_bps`` seconds; then the real
``isend`` is issued, so the receiver gets the data at the end of the emulated transmission. That is
the cost model's link (docs/system-model.md, :mod:`collapipe_core.costmodel.timeline`): one full-
duplex link between neighbours, each direction a FIFO resource, timed at the *sender's* rate — the
CU's configured link rate for activations it sends, the device's Shannon rate r_k for both directions,
the edge server's downlink rate for gradients.

A send "completes" for the schedule as soon as it is queued, as a send into a socket buffer does: the
compute thread never waits for the transmission, so a device computes its next micro-batch while its
link transmits, as the model assumes. The transmitter keeps the tensor alive until it is sent, and
:meth:`LinkEmulator.flush` (called after every pipeline step) waits until everything queued has been
transmitted and received, so no pipeline message can overtake a later one (FedAvg's gather uses the
same process group). Only pipeline transfers are slowed; FedAvg's gather is not.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import torch.distributed as dist


def transfer_s(num_elements: int, bytes_per_element: int, rate_bps: float) -> float:
    """Seconds to send ``num_elements`` elements of ``bytes_per_element`` bytes at ``rate_bps``."""
    if rate_bps <= 0:
        raise ValueError(f"a link that carries data needs a positive rate, got {rate_bps} bit/s")
    return 8.0 * num_elements * bytes_per_element / rate_bps


@dataclass
class _Transfer:
    op: dist.P2POp
    ready_s: float


class QueuedSend:
    """What ``submit`` returns: the payload is queued on the link, so waiting on it returns at once."""

    def wait(self, *args: Any) -> bool:
        return True


class LinkEmulator:
    """Per-peer FIFO transmitters of one rank, all at the rank's send rate."""

    def __init__(self, rate_bps: float, timeout_s: float) -> None:
        if rate_bps <= 0:
            raise ValueError(f"link emulation needs a positive rate, got {rate_bps} bit/s")
        self.rate_bps = rate_bps
        self.timeout_s = timeout_s
        self.busy_s = 0.0  # summed emulated transmission time
        self._queues: dict[int, queue.SimpleQueue[_Transfer | None]] = {}
        self._threads: list[threading.Thread] = []
        self._issued: list[Any] = []  # real isend works not waited for yet
        self._errors: list[BaseException] = []
        self._pending = 0  # queued, not yet issued
        self._cond = threading.Condition()

    def submit(self, op: dist.P2POp) -> QueuedSend:
        with self._cond:
            self._pending += 1
        self._queue_for(op.peer).put(_Transfer(op=op, ready_s=time.perf_counter()))
        return QueuedSend()

    def flush(self) -> None:
        """Wait until every queued payload was transmitted and received; raise a transmitter's error."""
        deadline = time.monotonic() + self.timeout_s
        with self._cond:
            while self._pending and not self._errors:
                if not self._cond.wait(max(deadline - time.monotonic(), 0.0)):
                    raise TimeoutError(f"emulated links did not drain within {self.timeout_s} s")
            issued, self._issued = self._issued, []
            if self._errors:
                raise RuntimeError("emulated link failed to send") from self._errors[0]
        for work in issued:
            work.wait()

    def close(self) -> None:
        """Drain the links and stop the transmitter threads."""
        try:
            self.flush()
        finally:
            for q in self._queues.values():
                q.put(None)
            for thread in self._threads:
                thread.join(self.timeout_s)
            self._queues.clear()
            self._threads.clear()

    def _queue_for(self, peer: int) -> queue.SimpleQueue[_Transfer | None]:
        if peer not in self._queues:
            q: queue.SimpleQueue[_Transfer | None] = queue.SimpleQueue()
            thread = threading.Thread(target=self._transmit, args=(q,), name=f"link->{peer}", daemon=True)
            self._queues[peer] = q
            self._threads.append(thread)
            thread.start()
        return self._queues[peer]

    def _transmit(self, q: queue.SimpleQueue[_Transfer | None]) -> None:
        free_s = 0.0
        while (transfer := q.get()) is not None:
            work: Any = None
            error: BaseException | None = None
            duration = 0.0
            try:
                tensor = transfer.op.tensor
                duration = transfer_s(tensor.numel(), tensor.element_size(), self.rate_bps)
                done = max(free_s, transfer.ready_s) + duration
                delay = done - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                free_s = done
                op = transfer.op
                work = dist.isend(op.tensor, group=op.group, tag=op.tag, group_dst=op.group_peer)
            except BaseException as err:  # handed to flush() on the compute thread
                error = err
            with self._cond:
                self.busy_s += duration
                if error is not None:
                    self._errors.append(error)
                elif work is not None:
                    self._issued.append(work)
                self._pending -= 1
                self._cond.notify_all()
