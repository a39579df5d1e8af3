"""Config checks and pre-flight estimates, computed in child processes with a deadline and a memory
limit, never in the API's threads.

Checking a config reads the files it names (datasets, a checkpoint's config.json, tokenizers) and
builds the model's skeleton; a pre-flight then runs round 0 of the config's policy on the cost model.
Both grow with what users give — a 24 MB JSONL of 10⁶ lines cost the API 1.5 GB and 18 s to check, a
64 MB tokenizer.json stalled every request for 5.5 s, DSSDA over 100 clusters × 100 devices takes over
a minute on 2 cores — and any viewer may ask for them. So each API process keeps two children
(spawned on first use), one for checks (``POST /api/config/validate``) and one for pre-flights (which
check first), each working one request at a time; a request waits for its turn without holding a
thread.

- **Memory**: a child may grow by at most ``memory_bytes`` (COLLAPIPE_CHECK_MEMORY_BYTES) beyond what
  its imports took: its address space is limited (RLIMIT_AS), so an allocation past it fails inside
  the child, which is then replaced, and the request gets a 422 saying so.
- **Deadlines**: a check still running after ``validate_timeout_s`` (COLLAPIPE_VALIDATE_TIMEOUT_S), or
  a pre-flight's estimate after ``timeout_s`` (COLLAPIPE_PREFLIGHT_TIMEOUT_S), is stopped: the child is
  killed, the next request starts a new one, and the request gets a 422 that says how to get the
  answer another way.
- **Warm-up**: a child checks the launch form's quickstart preset and computes its round 0 before it
  says it is ready, outside any deadline, so that a new user's first "Check & pre-flight" finds the
  corpus, the model's profile and the lazily imported code loaded (``_warm_up``); a replaced child
  warms up again before it answers.

A config with problems gets the same 422 as any other endpoint that checks configs.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import traceback
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any

from anyio import to_thread

from backend.errors import InvalidConfig, InvalidInput, Unavailable
from collapipe_core.workspace import Workspace

if TYPE_CHECKING:
    from collapipe_core.config import ExperimentConfig

PROBLEM = "config"  # the field a refusal that is about the whole config names
PRELOADED = [
    "backend.config_input",
    "backend.jsonsafe",
    "collapipe_core.runner",
    "collapipe_core.sinks",
    "collapipe_core.data",
    "collapipe_core.models.hf.bert",
    "collapipe_core.models.hf.bart",
    "collapipe_core.models.hf.gpt2",
    "collapipe_core.models.hf.llama",
    "pyarrow.compute",
    "pyarrow.parquet",
    "tokenizers",
]
"""What the children import before their memory is limited. They are forked from a server process
that imported these once (multiprocessing's forkserver), so a child replaced after a deadline starts
in a fraction of a second rather than the seconds torch and transformers take to import."""
_CONTEXT = multiprocessing.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOADED)


def _limit_memory(memory_bytes: int | None) -> None:
    """Cap this process's address space at what it holds now plus ``memory_bytes`` (Linux: elsewhere
    there is no /proc to read the size from, and the child runs without the cap)."""
    if memory_bytes is None:
        return
    import resource

    try:
        with open("/proc/self/status", encoding="ascii") as status:
            size_kib = next(int(line.split()[1]) for line in status if line.startswith("VmSize:"))
    except (OSError, StopIteration):
        return
    limit = size_kib * 1024 + memory_bytes
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(
        resource.RLIMIT_AS, (limit if hard == resource.RLIM_INFINITY else min(limit, hard), hard)
    )


WARM_UP = Path(__file__).resolve().parents[1] / "examples" / "quickstart.yaml"
"""What a child checks and pre-flights before it says it is ready: the launch form's first preset, so
that a new user's first "Check & pre-flight" finds its corpus, profile and lazy imports loaded."""


def _warm_up() -> dict[str, Any]:
    """Check :data:`WARM_UP` and compute its round 0 (outside any request's deadline); what was warmed
    and how long it took. A failure is logged: the child serves requests all the same."""
    import time

    from backend.config_input import validated_config
    from collapipe_core.validation import read_yaml

    started = time.monotonic()
    try:
        config = validated_config(read_yaml(WARM_UP.read_text(encoding="utf-8")), Workspace.local())
        _round_zero(config, Workspace.local())
    except Exception:  # the child still answers; its first request pays what the warm-up would have
        traceback.print_exc()
        return {"warmed": None, "warm_up_s": time.monotonic() - started}
    seconds = time.monotonic() - started
    print(f"collapipe: a config-check child warmed up with {WARM_UP.name} in {seconds:.1f} s", flush=True)
    return {"warmed": WARM_UP.stem, "warm_up_s": seconds}


def _round_zero(config: ExperimentConfig, workspace: Workspace) -> dict[str, Any]:
    """Round 0 of ``config`` (checked) on the cost model: round, devices, model, memory_parts."""
    from backend.jsonsafe import sanitize
    from collapipe_core.api import memory_report
    from collapipe_core.decision import Decision
    from collapipe_core.runner import Runner
    from collapipe_core.sinks import MemorySink
    from collapipe_core.state import observe

    analytic = config.model_copy(
        update={"executor": "analytic", "training": config.training.model_copy(update={"rounds": 1})}
    )
    sink = MemorySink()
    runner = Runner(analytic, sink, workspace=workspace)
    runner.run()
    record = sink.results[0]
    result = record.to_json()
    decision = Decision.from_json(record.round.decision)
    result.update(memory_report(observe(runner.env, 0), decision))
    answer: dict[str, Any] = sanitize(result)
    return answer


def _serve(connection: Connection, memory_bytes: int | None) -> None:
    """The child: import what checks need, warm up (:func:`_warm_up`), limit its memory, say it is ready
    (``("ready", what was warmed)``); then answer ``(work, config, workspace)`` requests forever.
    ``work`` "validate" answers once: ``("ok", the normalized config)``; "preflight" answers
    ``("checked", None)`` when the config passed, then ``("ok", round 0's records)``; "dataset" answers
    ``("ok", what the config's data hold)``, "architectures" ``("ok", the families' config fields)``. A
    refused config answers ``("invalid", (message, details))``."""
    import importlib

    for module in PRELOADED:  # already imported by the fork server: nothing to do but make sure
        importlib.import_module(module)
    from backend.config_input import architecture_fields, dataset_capacity, normalized, validated_config

    warmed = _warm_up()  # before the memory limit: the warm caches are the server's, not a request's
    _limit_memory(memory_bytes)
    connection.send(("ready", warmed))
    while True:
        try:
            work, data, workspace = connection.recv()
        except EOFError:
            return
        try:
            if work == "dataset":
                connection.send(("ok", dataset_capacity(data, workspace)))
                continue
            if work == "architectures":
                connection.send(("ok", architecture_fields()))
                continue
            config = validated_config(data, workspace)
            if work == "validate":
                connection.send(("ok", normalized(config)))
                continue
            connection.send(("checked", None))
            connection.send(("ok", _round_zero(config, workspace)))
        except InvalidConfig as err:
            connection.send(("invalid", (err.message, err.details)))
        except MemoryError:
            connection.send(("memory", None))
            return  # a fresh child for the next request
        except Exception as err:  # not the user's input: a bug, logged, and reported without a 500
            traceback.print_exc()
            connection.send(("error", f"{type(err).__name__}: {err}"[:500]))


Key = tuple[str, int | None]  # (the child's work, its memory limit)
Started = tuple[BaseProcess, Connection]
STARTUP_TIMEOUT_S = 120.0  # the first child waits for the fork server's imports; no deadline counts
_idle: dict[Key, Started] = {}
"""Started children nobody uses: warmed at an app's start, or kept when an app shut down (with their
caches: corpora, tokenizers) for the next app of this process; they end with the process (daemons)."""
_warming: dict[Key, threading.Thread] = {}
_pool = threading.Lock()  # guards _idle and _warming (the event loop's threads and the warming ones)


def _start(key: Key) -> Started:
    name, memory_bytes = key
    parent, child = _CONTEXT.Pipe()
    process = _CONTEXT.Process(
        target=_serve, args=(child, memory_bytes), name=f"collapipe-{name}", daemon=True
    )
    process.start()
    child.close()
    try:
        ready = parent.poll(STARTUP_TIMEOUT_S) and parent.recv()[0] == "ready"
    except (EOFError, OSError):  # it died starting
        ready = False
    if not ready:
        _kill((process, parent))
        raise Unavailable(f"the {name} process did not start; try again, or see the server log")
    return process, parent


def _kill(started: Started) -> None:
    process, connection = started
    process.kill()
    process.join(timeout=10)
    connection.close()


def _keep(key: Key, started: Started) -> None:
    """``started`` as the idle child of ``key``, unless there is one."""
    with _pool:
        spare = key in _idle or not started[0].is_alive()
        if not spare:
            _idle[key] = started
    if spare:
        _kill(started)


def warm(key: Key) -> None:
    """Start a child of ``key`` in the background, unless one is idle or starting."""
    with _pool:
        if key in _idle or key in _warming:
            return
        thread = threading.Thread(target=_warm, args=(key,), name=f"collapipe-warm-{key[0]}", daemon=True)
        _warming[key] = thread
    thread.start()


def _warm(key: Key) -> None:
    started: Started | None = None
    try:
        started = _start(key)
    except Exception:  # the first request starts one and reports why it cannot
        traceback.print_exc()
    with _pool:
        _warming.pop(key, None)
        if started is not None and key not in _idle:
            _idle[key], started = started, None
    if started is not None:
        _kill(started)


class _Child:
    """The child process one kind of work uses, and the turn of the requests that use it."""

    def __init__(self, name: str, memory_bytes: int | None) -> None:
        self.key: Key = (name, memory_bytes)
        self.turn = asyncio.Lock()
        self._started: Started | None = None

    def ready(self) -> Connection:
        """The child's end of the pipe: an idle child's, or a new one's (waits for one warming)."""
        if self._started is not None and self._started[0].is_alive():
            return self._started[1]
        self.stop()
        with _pool:
            warming = _warming.get(self.key)
        if warming is not None:
            warming.join(STARTUP_TIMEOUT_S)
        with _pool:
            kept = _idle.pop(self.key, None)
        if kept is not None and kept[0].is_alive():
            self._started = kept
        else:
            if kept is not None:
                _kill(kept)
            self._started = _start(self.key)
        return self._started[1]

    def stop(self) -> None:
        """Kill the child (past a deadline, out of memory, or its request cancelled)."""
        if self._started is not None:
            _kill(self._started)
        self._started = None

    def release(self) -> None:
        """The app shuts down: its child, idle, is kept for the next app of this process."""
        if self._started is not None:
            _keep(self.key, self._started)
        self._started = None


class PreflightProcess:
    """The API process's two children: config checks and pre-flight estimates."""

    def __init__(
        self, timeout_s: float, validate_timeout_s: float = 60.0, memory_bytes: int | None = None
    ) -> None:
        self.timeout_s = timeout_s
        self.validate_timeout_s = validate_timeout_s
        self.memory_bytes = memory_bytes
        self._checks = _Child("config-check", memory_bytes)
        self._preflights = _Child("preflight", memory_bytes)
        self._architectures: dict[str, Any] | None = None

    async def validate(self, config: dict[str, Any], workspace: Workspace) -> dict[str, Any]:
        """``config`` checked in ``workspace`` and normalized (every field explicit); InvalidConfig
        naming each problem, InvalidInput when the check is too slow or too large for the server."""
        result: dict[str, Any] = await self._check("validate", config, workspace)
        return result

    async def run(self, config: dict[str, Any], workspace: Workspace) -> dict[str, Any]:
        """Round 0 of ``config`` as ``{"round": ..., "devices": [...]}``, after checking it as
        :meth:`validate` does."""
        async with self._preflights.turn:
            child = self._preflights
            connection = await to_thread.run_sync(child.ready)
            connection.send(("preflight", config, workspace))
            await self._reply(child, connection, self.validate_timeout_s, "check")
            payload = await self._reply(child, connection, self.timeout_s, "pre-flight")
        result: dict[str, Any] = payload
        return result

    async def dataset(self, config: dict[str, Any], workspace: Workspace) -> dict[str, Any]:
        """What the data of ``config`` hold and the largest samples_per_cluster and eval_samples they
        allow (read as a check reads them, with its deadline); InvalidConfig when they cannot be read."""
        result: dict[str, Any] = await self._check("dataset", config, workspace)
        return result

    async def architectures(self, workspace: Workspace) -> dict[str, Any]:
        """Each Hugging Face family's kind and config fields (asked once: they are the installed
        transformers')."""
        if self._architectures is None:
            self._architectures = await self._check("architectures", None, workspace)
        return self._architectures

    async def _check(self, work: str, data: Any, workspace: Workspace) -> Any:
        """The checks' child's answer to ``work`` on ``data``, within the checks' deadline."""
        async with self._checks.turn:
            connection = await to_thread.run_sync(self._checks.ready)
            connection.send((work, data, workspace))
            return await self._reply(self._checks, connection, self.validate_timeout_s, "check")

    async def _reply(self, child: _Child, connection: Connection, timeout_s: float, what: str) -> Any:
        """The payload of the child's next answer within ``timeout_s``; the refusals as exceptions."""
        try:
            answered = await to_thread.run_sync(connection.poll, timeout_s)
            reply: tuple[str, Any] = connection.recv() if answered else ("late", None)
        except (EOFError, OSError):  # the child died: Rust code aborts on a failed allocation
            await to_thread.run_sync(child.stop)
            raise self._too_large(what) from None
        except BaseException:  # cancelled (the client left): start afresh
            child.stop()
            raise
        status, payload = reply
        if status == "invalid":
            message, details = payload
            raise InvalidConfig(message, details)
        if status == "memory":
            await to_thread.run_sync(child.stop)
            raise self._too_large(what)
        if status == "late":
            await to_thread.run_sync(child.stop)
            raise self._late(what, timeout_s)
        if status == "error":
            raise InvalidInput(
                f"the {what} failed: {payload}", [{"field": PROBLEM, "value": None, "message": payload}]
            )
        return payload

    def _too_large(self, what: str) -> InvalidInput:
        budget = f"{self.memory_bytes / 2**20:,.0f} MiB" if self.memory_bytes else "the memory"
        message = (
            f"the {what} of this config needs more than the {budget} the server gives it "
            "(COLLAPIPE_CHECK_MEMORY_BYTES); use smaller files or a smaller model, or check it locally with "
            "`collapipe config validate CONFIG`"
        )
        return InvalidInput(message, [{"field": PROBLEM, "value": None, "message": message}])

    def _late(self, what: str, timeout_s: float) -> InvalidInput:
        if what == "pre-flight":
            message = (
                f"the pre-flight estimate of this config takes longer than {timeout_s:g} s on the server; "
                "launch the run, or compute round 0 locally with `collapipe schedule CONFIG --rounds 1 "
                "--json`"
            )
            detail = "too large for the server's pre-flight"
        else:
            message = (
                f"checking this config takes longer than {timeout_s:g} s on the server "
                "(COLLAPIPE_VALIDATE_TIMEOUT_S); use smaller data files, or check it locally with "
                "`collapipe config validate CONFIG`"
            )
            detail = "too large for the server's check"
        return InvalidInput(message, [{"field": PROBLEM, "value": None, "message": detail}])

    def warm(self) -> None:
        """The app's start: start both children in the background, so that the first check and the first
        pre-flight need not wait for the fork server's imports nor for the children's warm-up (seconds)."""
        warm(self._checks.key)
        warm(self._preflights.key)

    def stop(self) -> None:
        """The app's shutdown: its children, idle, are kept for the next app this process builds (tests
        build many; each child would import and load its data again); they end with the process."""
        self._checks.release()
        self._preflights.release()
