"""Where an API process spends its time under load: a sampling profiler inside the process.

py-spy is not installed on the project's machine and nothing may be added to the environment, so
each API process samples itself: a daemon thread takes every other thread's Python stack
(``sys._current_frames()``) every ``INTERVAL_S`` and counts identical stacks. Every
``DUMP_EVERY_S`` and at exit the counts are written to
``$COLLAPIPE_BENCH_PROFILE_DIR/profile-<pid>.txt`` as collapsed stacks
(``role;frame;frame;... count``, the format of flame-graph tools), with the role ``loop`` (the
thread running the event loop), ``worker`` (AnyIO's worker threads: sync endpoints and
dependencies, session ends) or the thread's name.

Both views matter: a thread waiting (for a database connection, a lock, a socket) is sampled as
much as a running one, so ``summarize`` prints each role's busiest frames twice, over every sample
(wall time: where requests wait) and over the samples whose innermost frame is not a known idle
wait (roughly CPU time). The sampler takes the GIL to sample, so stacks are seen at the points
where threads let it go; read shares, not exact times.

    # serve with it (bench/listing_load.py --profile DIR does this), then:
    .venv/bin/python bench/request_profile.py DIR [--top 25]

``create_app`` is a uvicorn factory: it starts the sampler, then builds the app of
``bench.tuning_toggles`` (the production app unless optimisations are switched off).
"""

from __future__ import annotations

import argparse
import atexit
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

ENV = "COLLAPIPE_BENCH_PROFILE_DIR"
INTERVAL_S = 0.01
DUMP_EVERY_S = 5.0
# innermost frames of a thread that waits rather than runs (file name, function)
IDLE_LEAVES = frozenset(
    {
        ("threading.py", "wait"),
        ("threading.py", "_wait_for_tstate_lock"),
        ("queue.py", "get"),
        ("selectors.py", "select"),
        ("runners.py", "run"),
        ("base_events.py", "run_forever"),
        ("base_events.py", "run_until_complete"),
        ("server.py", "serve"),
        ("main.py", "run"),
    }
)


def _role(thread: threading.Thread | None) -> str:
    if thread is None:
        return "other"
    if thread is threading.main_thread():
        return "loop"
    if thread.name.startswith("AnyIO worker thread"):
        return "worker"
    return thread.name.split("-")[0]


class Sampler(threading.Thread):
    def __init__(self, out: Path, interval_s: float = INTERVAL_S) -> None:
        super().__init__(name="bench-sampler", daemon=True)
        self.out = out
        self.interval_s = interval_s
        self.counts: Counter[tuple[str, tuple[CodeType, ...]]] = Counter()
        self.halt = threading.Event()

    def run(self) -> None:
        me = threading.get_ident()
        next_dump = time.monotonic() + DUMP_EVERY_S
        while not self.halt.wait(self.interval_s):
            threads = {t.ident: t for t in threading.enumerate()}
            for ident, frame in sys._current_frames().items():
                if ident != me:
                    self.counts[(_role(threads.get(ident)), _codes(frame))] += 1
            if time.monotonic() > next_dump:  # a process killed at the end keeps what it sampled
                self.write()
                next_dump = time.monotonic() + DUMP_EVERY_S

    def dump(self) -> None:
        self.halt.set()
        self.write()

    def write(self) -> None:
        lines = [
            ";".join([role, *(_label(code) for code in codes)]) + f" {count}"
            for (role, codes), count in self.counts.most_common()
        ]
        self.out.write_text("\n".join(lines) + "\n")


def _codes(frame: FrameType | None) -> tuple[CodeType, ...]:
    codes = []
    while frame is not None:
        codes.append(frame.f_code)
        frame = frame.f_back
    return tuple(reversed(codes))


def _label(code: CodeType) -> str:
    parts = Path(code.co_filename).parts
    short = "/".join(parts[-2:]) if len(parts) >= 2 else code.co_filename
    return f"{short}:{code.co_name}".replace(";", ",").replace(" ", "_")


def start(directory: Path) -> Sampler:
    directory.mkdir(parents=True, exist_ok=True)
    sampler = Sampler(directory / f"profile-{os.getpid()}.txt")
    sampler.start()
    atexit.register(sampler.dump)
    return sampler


def create_app() -> Any:
    directory = os.environ.get(ENV)
    if directory:
        start(Path(directory))
    from bench.tuning_toggles import create_app as create_toggled_app

    return create_toggled_app()


# -- reading the profiles -----------------------------------------------------------------------------


def read(directory: Path) -> Counter[tuple[str, ...]]:
    """Every process's collapsed stacks added up (role first)."""
    counts: Counter[tuple[str, ...]] = Counter()
    for path in sorted(directory.glob("profile-*.txt")):
        for line in path.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack:
                counts[tuple(stack.split(";"))] += int(count)
    return counts


def _is_idle(frame: str) -> bool:
    location, _, function = frame.rpartition(":")
    return (location.rsplit("/", 1)[-1], function) in IDLE_LEAVES


def summary(counts: Counter[tuple[str, ...]], top: int) -> dict[str, Any]:
    """Per role: samples, the share idle, and the ``top`` frames by inclusive share of all samples
    (wall) and of busy samples, and by self share of busy samples."""
    report: dict[str, Any] = {}
    for role in sorted({stack[0] for stack in counts}):
        stacks = {stack[1:]: n for stack, n in counts.items() if stack[0] == role and len(stack) > 1}
        total = sum(stacks.values())
        busy = {stack: n for stack, n in stacks.items() if not _is_idle(stack[-1])}
        busy_total = sum(busy.values())
        report[role] = {
            "samples": total,
            "idle_share": round(1 - busy_total / total, 3) if total else None,
            "wall_inclusive": _inclusive(stacks, total, top),
            "busy_inclusive": _inclusive(busy, busy_total, top),
            "busy_self": _self(busy, busy_total, top),
        }
    return report


def _inclusive(stacks: dict[tuple[str, ...], int], total: int, top: int) -> list[tuple[str, float]]:
    found: Counter[str] = Counter()
    for stack, n in stacks.items():
        for frame in set(stack):
            found[frame] += n
    return [(frame, round(n / total, 3)) for frame, n in found.most_common(top)] if total else []


def _self(stacks: dict[tuple[str, ...], int], total: int, top: int) -> list[tuple[str, float]]:
    found: Counter[str] = Counter()
    for stack, n in stacks.items():
        found[stack[-1]] += n
    return [(frame, round(n / total, 3)) for frame, n in found.most_common(top)] if total else []


def main() -> None:
    parser = argparse.ArgumentParser(description="summarise the API processes' sampled stacks")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    for role, figures in summary(read(args.directory), args.top).items():
        print(f"== {role}: {figures['samples']} samples, idle share {figures['idle_share']}")
        for view in ("wall_inclusive", "busy_inclusive", "busy_self"):
            print(f"  -- {view}")
            for frame, share in figures[view]:
                print(f"    {share:6.1%}  {frame}")


if __name__ == "__main__":
    main()
