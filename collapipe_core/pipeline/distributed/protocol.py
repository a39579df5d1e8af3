"""What the driver (the parent process) and the ranks say to each other, over the rendezvous store.

The driver hosts a ``torch.distributed.TCPStore`` at MASTER_ADDR:MASTER_PORT; ranks connect to it,
build their process group on a prefix of it, and use the rest as a mailbox:

- ``init``: :class:`WorldSpec`, written once by the driver;
- ``ready/<rank>``: a rank is up (or the text of why it is not);
- ``task/<seq>/<rank>``: the ``seq``-th :class:`RankTask` for a rank, or :data:`STOP`;
- ``report/<seq>/<rank>``: its :class:`RankReport`; ``reports/<seq>`` counts them.

Tasks and reports can exceed the store's 8 MiB limit per value (weights and optimizer state), so they
are written in pieces (:func:`put_payload`).

Payloads are pickled with ``torch.save``: the store must only be reachable by the run's own hosts,
as for any torch.distributed rendezvous.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

import torch

# the typed home of the store classes torch.distributed re-exports (mypy --strict sees no re-export)
from torch._C._distributed_c10d import PrefixStore, Store, TCPStore

from collapipe_core.pipeline.distributed.plan import ClusterPlan, Layout, Role

STOP = b"stop"
PG_PREFIX = "pg"
CONTROL_PREFIX = "ctl"


def init_key() -> str:
    return "init"


def ready_key(rank: int) -> str:
    return f"ready/{rank}"


def task_key(seq: int, rank: int) -> str:
    return f"task/{seq}/{rank}"


def report_key(seq: int, rank: int) -> str:
    return f"report/{seq}/{rank}"


def report_count_key(seq: int) -> str:
    return f"reports/{seq}"


__all__ = ["PrefixStore", "Store", "TCPStore"]


CHUNK_BYTES = 4 * 2**20
"""The store refuses values over 8 MiB (libuv backend); larger payloads go in pieces of this size."""


def put(store: Store, key: str, value: bytes) -> None:
    """``store.set`` with bytes (the binding takes bytes; its stub says str)."""
    store.set(key, value)  # type: ignore[arg-type]


def put_payload(store: Store, key: str, value: bytes) -> None:
    """Write ``value`` under ``key`` in pieces: ``key#0``, ``key#1``, ... then ``key`` = the piece count.

    ``key`` is written last, so a reader that sees it finds every piece.
    """
    pieces = max(1, -(-len(value) // CHUNK_BYTES))
    for i in range(pieces):
        put(store, f"{key}#{i}", value[i * CHUNK_BYTES : (i + 1) * CHUNK_BYTES])
    put(store, key, str(pieces).encode())


def take_payload(store: Store, key: str) -> bytes:
    """Read (waiting for it) and delete what :func:`put_payload` wrote under ``key``."""
    pieces = int(store.get(key))
    parts = []
    for i in range(pieces):
        parts.append(store.get(f"{key}#{i}"))
        store.delete_key(f"{key}#{i}")
    store.delete_key(key)
    return b"".join(parts)


def dumps(obj: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def loads(data: bytes) -> Any:
    return torch.load(io.BytesIO(data), weights_only=False)


@dataclass(frozen=True)
class WorldSpec:
    """Everything a rank needs once: the experiment, the layout and the run options."""

    config_json: str  # ExperimentConfig.model_dump_json(by_alias=True)
    src_vocab_size: int
    tgt_size: int
    layout: Layout
    backend: str
    timeout_s: float
    concurrent_clusters: bool
    track_tensor_bytes: bool
    report_gradients: bool
    pad_id: int | None = 0  # the data's padding id (None: no padding): masks and the loss
    bos_id: int | None = None  # the data's special ids (models that need them: bart)
    eos_id: int | None = None
    pretrained_dir: str | None = None  # model.pretrained_path resolved: its config.json, read by every rank


@dataclass(frozen=True)
class StageTask:
    """The stage a rank runs this round and everything it needs for it."""

    cluster: int
    role: Role
    block_range: range | None  # device ranks only
    weights: dict[str, torch.Tensor]  # the stage's parameters and buffers (frozen ones too), by model name
    optimizer_state: dict[str, dict[str, Any]] | None  # per-parameter state by name; None: fresh
    batches: list[dict[str, torch.Tensor]]  # per local iteration: the rank's inputs (M·b samples)
    dropout_seed: int
    send_rate_bps: float | None  # link emulation: this rank's send rate; None = off
    data_sizes: tuple[int, ...] = ()  # FedAvg weights, all clusters (CUs only)
    recompute: bool = False  # a device that recomputes its blocks' activations in backward


@dataclass(frozen=True)
class RankTask:
    """One round for one rank; ``stage`` is None for a device that sits the round out."""

    seq: int
    round_index: int
    plans: tuple[ClusterPlan, ...]
    stage: StageTask | None
    microbatch_size: int


@dataclass
class RankReport:
    """What a rank sends back after a round (or instead of it, when it failed)."""

    seq: int
    rank: int
    ok: bool
    error: str = ""  # the exception and traceback when not ok
    peer_failure: bool = False  # the error is a lost/timed-out peer, not this rank's own fault
    failed_at: float = 0.0  # time.time() of the failure
    measured: dict[str, float] = field(default_factory=dict)
    details: dict[str, list[float]] = field(default_factory=dict)  # per micro-batch / per step timings
    optimizer_state: dict[str, dict[str, Any]] = field(default_factory=dict)
    losses: list[list[float]] = field(default_factory=list)  # edge: per iteration, per micro-batch
    # per measured iteration, over the rank's own parameters: (Σ_m |c_m|², |Σ_m c_m|²), gradient_noise.py
    gradient_norms: list[tuple[float, float]] = field(default_factory=list)
    averaged_state: dict[str, torch.Tensor] | None = None  # the CU of cluster 0: FedAvg result
    gradients: dict[str, torch.Tensor] = field(default_factory=dict)  # report_gradients only
