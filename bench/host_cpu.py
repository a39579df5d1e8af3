"""CPU time of the host's processes from /proc, for the API load of bench/service.py: who spent the
cores while the load ran (the API, the load generator, PostgreSQL, everything else)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def process_cpu_s(select: Callable[[str, list[str]], bool]) -> dict[int, float]:
    """User + system CPU seconds of each process whose (name, /proc stat fields) ``select`` accepts."""
    tick_s = 1.0 / os.sysconf("SC_CLK_TCK")
    found: dict[int, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended meanwhile
            continue
        name = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()  # fields[0] is the state, as in proc(5)'s 3rd
        if select(name, fields):
            found[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) * tick_s
    return found


def host_busy_s() -> float:
    """CPU seconds all cores of the host spent busy since boot (/proc/stat: all but idle and iowait)."""
    fields = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def in_group(group: int) -> Callable[[str, list[str]], bool]:
    return lambda _name, fields: int(fields[2]) == group


def is_postgres(name: str, _fields: list[str]) -> bool:
    return name == "postgres"
