"""The garbage collector of a serving process, tuned once the application has started.

A full collection walks every tracked object; after start-up most of them (modules, routes, ORM
mappers, compiled statements) live as long as the process, so each full collection of a serving
process spent tens of milliseconds re-walking them, a pause that every request in flight waited
out. Freezing them leaves the collector the objects of requests; a larger first-generation threshold
makes the young collections rarer (requests allocate and free most of their objects without cycles).
"""

from __future__ import annotations

import gc

YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)

_settled = False


def settle_after_startup() -> None:
    """Collect once, move the survivors out of the collector's reach, raise the young threshold.

    Idempotent within a process (a second application in the same process changes nothing).
    """
    global _settled
    if _settled:
        return
    _settled = True
    gc.collect()
    gc.freeze()
    _young, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
