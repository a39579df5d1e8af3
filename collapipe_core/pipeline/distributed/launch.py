"""Start the ranks, hand them rounds, collect their reports, and notice when one fails.

The driver (the process running the :class:`~.executor.DistributedExecutor`) hosts the rendezvous
store, a ``torch.distributed.TCPStore``, at ``master_addr:master_port`` (port 0: a free one). Each rank
is a fresh interpreter running ``python -m collapipe_core.pipeline.distributed.worker`` with torchrun's
variables in its environment: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``; plus ``MALLOC_MMAP_THRESHOLD_=65536`` (honest resident-set figures) and
``OMP_NUM_THREADS=1``.

Why a fresh interpreter (``subprocess``) rather than ``multiprocessing``'s spawn context: each rank
gets its own environment without touching the driver's ``os.environ`` (which a Celery or web worker
shares between threads), the caller's ``__main__`` module is never re-imported, and the command is the
same one other hosts run (docs/distributed.md). Ranks on other hosts are started by the operator;
``local_ranks`` says which ranks this driver starts itself.

Failure handling: every collective and p2p has the process-group timeout; the driver polls the
reports and its own children; once one rank failed it waits ``grace_s`` for the others and raises
:class:`~.failures.DistributedRoundError` naming the rank that failed first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path

from collapipe_core.pipeline.distributed import protocol as p
from collapipe_core.pipeline.distributed.failures import (
    DistributedRoundError,
    DistributedStartupError,
    FailureKind,
    RankFailure,
    first_failure,
)
from collapipe_core.pipeline.distributed.measure import MALLOC_ENV

WORKER_MODULE = "collapipe_core.pipeline.distributed.worker"
POLL_S = (0.001, 0.02)  # the driver polls the store at first every 1 ms, backing off to 20 ms
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])  # the directory holding collapipe_core/


def rank_environment(
    base: Mapping[str, str],
    rank: int,
    world_size: int,
    master_addr: str,
    master_port: int,
    local_rank: int,
    local_world_size: int,
) -> dict[str, str]:
    """The environment of one rank: torchrun's variables, the allocator setting, one thread."""
    env = dict(base)
    env.update(MALLOC_ENV)
    env.update(
        {
            "MASTER_ADDR": master_addr,
            "MASTER_PORT": str(master_port),
            "WORLD_SIZE": str(world_size),
            "RANK": str(rank),
            "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(local_world_size),
            "OMP_NUM_THREADS": "1",
        }
    )
    path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = _PACKAGE_ROOT + (os.pathsep + path if path else "")
    return env


class WorkerPool:
    """The ranks of one run, started once and fed one task per rank per round."""

    def __init__(
        self,
        spec: p.WorldSpec,
        *,
        master_addr: str = "127.0.0.1",
        master_port: int = 0,
        local_ranks: Iterable[int] | None = None,
        startup_timeout_s: float = 300.0,
        grace_s: float = 2.0,
    ) -> None:
        self.spec = spec
        self.layout = spec.layout
        self.grace_s = grace_s
        self.seq = 0
        self.store = p.TCPStore(
            master_addr,
            master_port,
            is_master=True,
            wait_for_workers=False,
            timeout=timedelta(seconds=max(spec.timeout_s, startup_timeout_s)),
        )
        self.master_addr = master_addr
        self.master_port = int(self.store.port)
        self.control = p.PrefixStore(p.CONTROL_PREFIX, self.store)
        p.put(self.control, p.init_key(), p.dumps(spec))
        world = self.layout.world_size
        ranks = list(range(world)) if local_ranks is None else sorted(set(local_ranks))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        try:
            for local_rank, rank in enumerate(ranks):
                env = rank_environment(
                    os.environ, rank, world, master_addr, self.master_port, local_rank, len(ranks)
                )
                self.procs[rank] = subprocess.Popen(
                    [sys.executable, "-m", WORKER_MODULE],
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=sys.stderr.fileno() if _has_fileno(sys.stderr) else subprocess.DEVNULL,
                    start_new_session=True,  # a Ctrl-C reaches the driver, which stops the ranks
                )
            self._wait_ready(startup_timeout_s)
        except BaseException:
            self.kill()
            raise

    def _wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        pending = set(range(self.layout.world_size))
        while pending:
            for rank in sorted(pending):
                if self.control.check([p.ready_key(rank)]):
                    answer = self.control.get(p.ready_key(rank))
                    if answer != b"ok":
                        raise DistributedStartupError(
                            f"rank {rank} ({self.layout.participant_id(rank)}) could not start:\n"
                            + answer.decode(errors="replace")
                        )
                    pending.discard(rank)
            for rank, proc in self.procs.items():
                if rank in pending and proc.poll() is not None:
                    raise DistributedStartupError(
                        f"rank {rank} ({self.layout.participant_id(rank)}) exited with code "
                        f"{proc.returncode} while starting (its error is on the driver's stderr)"
                    )
            if time.monotonic() > deadline:
                names = ", ".join(f"{r} ({self.layout.participant_id(r)})" for r in sorted(pending))
                raise DistributedStartupError(
                    f"ranks {names} did not join within {timeout_s:.0f} s; ranks not started by this host "
                    f"must be launched with MASTER_ADDR={self.master_addr} MASTER_PORT={self.master_port} "
                    f"WORLD_SIZE={self.layout.world_size} RANK=<rank> python -m {WORKER_MODULE}"
                )
            time.sleep(POLL_S[1])

    def run(self, tasks: Mapping[int, p.RankTask], round_index: int) -> dict[int, p.RankReport]:
        """Give every rank its task and return every rank's report; raise if any rank failed."""
        seq = self.seq
        self.seq += 1
        world = self.layout.world_size
        if sorted(tasks) != list(range(world)):
            raise ValueError(f"need one task per rank 0..{world - 1}, got ranks {sorted(tasks)}")
        for rank in range(world):
            p.put_payload(
                self.control, p.task_key(seq, rank), p.dumps(dataclasses.replace(tasks[rank], seq=seq))
            )
        reports: dict[int, p.RankReport] = {}
        deaths: dict[int, RankFailure] = {}
        failed_since: float | None = None
        counted = 0
        poll_s = POLL_S[0]
        while True:
            count = int(self.control.add(p.report_count_key(seq), 0))
            if count > counted:
                counted = count
                poll_s = POLL_S[0]
                for rank in range(world):
                    key = p.report_key(seq, rank)
                    if rank not in reports and self.control.check([key]):
                        reports[rank] = p.loads(p.take_payload(self.control, key))
            for rank, proc in self.procs.items():
                if rank not in reports and rank not in deaths and proc.poll() is not None:
                    deaths[rank] = RankFailure(
                        rank,
                        self.layout.participant_id(rank),
                        "died",
                        time.time(),
                        f"exited with code {proc.returncode} without a report",
                    )
            failed = bool(deaths) or any(not r.ok for r in reports.values())
            if failed and failed_since is None:
                failed_since = time.monotonic()
            if len(reports) + len(deaths) == world:
                break
            if failed_since is not None and time.monotonic() - failed_since > self.grace_s:
                break
            time.sleep(poll_s)
            poll_s = min(poll_s * 1.5, POLL_S[1])
        if not failed:
            return reports
        failures = list(deaths.values())
        for rank, report in reports.items():
            if not report.ok:
                kind: FailureKind = "peer" if report.peer_failure else "error"
                failures.append(
                    RankFailure(rank, self.layout.participant_id(rank), kind, report.failed_at, report.error)
                )
        now = time.time()
        for rank in range(world):
            if rank not in reports and rank not in deaths:
                failures.append(
                    RankFailure(
                        rank,
                        self.layout.participant_id(rank),
                        "unresponsive",
                        now,
                        f"no report {self.grace_s:g} s after the first failure (alive, or on another host)",
                    )
                )
        first = first_failure(failures)
        others = sorted((f for f in failures if f is not first), key=lambda f: (f.at, f.rank))
        raise DistributedRoundError(round_index, first, others)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Tell every rank to exit, wait for this host's ranks, kill the ones that do not."""
        with contextlib.suppress(Exception):
            for rank in range(self.layout.world_size):
                p.put_payload(self.control, p.task_key(self.seq, rank), p.STOP)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(deadline - time.monotonic(), 0.01))
        self.kill()

    def kill(self) -> None:
        """Kill this host's ranks that are still running (each by its own process id)."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10.0)


def _has_fileno(stream: object) -> bool:
    try:
        stream.fileno()  # type: ignore[attr-defined]
    except (AttributeError, OSError, ValueError):
        return False
    return True
