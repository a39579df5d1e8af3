"""Crash injection for the crash-recovery tests: SIGKILL this process at a named point, once.

Test-only and off unless ``COLLAPIPE_CRASH_AT`` is set. Its value is a comma-separated list of
``POINT@KEY`` (e.g. ``round-after-commit@5,status-change@succeeded``); the process kills itself with
SIGKILL the first time code reaches ``crash_point(POINT, KEY)`` for one of them.
``COLLAPIPE_CRASH_MARKER`` names a directory where a file ``POINT@KEY`` is created just before the
kill: while it exists no process crashes there again, so the process that takes the run over after
the crash gets past the same point. The points:

- ``round-before-commit`` / ``round-after-commit``: a round's transaction, keyed by the round index
  (backend.runtime.lifecycle);
- ``checkpoint-write``: between writing the checkpoint's temporary file and renaming it
  (collapipe_core.checkpoint), keyed by the round the checkpoint continues at;
- ``status-change``: a transition's transaction, keyed by the new status (backend.runtime.lifecycle);
- ``relay-publish``: waking the live readers after a commit (backend.runtime.wake, Redis only).
"""

from __future__ import annotations

import os
import signal

CRASH_AT = "COLLAPIPE_CRASH_AT"
CRASH_MARKER = "COLLAPIPE_CRASH_MARKER"


def crash_point(point: str, key: object) -> None:
    """SIGKILL this process if ``COLLAPIPE_CRASH_AT`` lists ``point@key`` and no process crashed there yet."""
    targets = os.environ.get(CRASH_AT)
    name = f"{point}@{key}"
    if not targets or name not in targets.split(","):
        return
    markers = os.environ.get(CRASH_MARKER)
    if not markers:
        raise RuntimeError(f"{CRASH_AT} is set without {CRASH_MARKER}: the crash would repeat forever")
    try:
        os.close(os.open(os.path.join(markers, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return
    os.kill(os.getpid(), signal.SIGKILL)
