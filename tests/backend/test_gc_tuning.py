"""The collector of a serving process: start-up objects frozen, young collections rarer, once."""

from __future__ import annotations

import subprocess
import sys

from backend.gc_tuning import YOUNG_THRESHOLD

PROBE = """
import gc
from backend.gc_tuning import settle_after_startup
before = gc.get_threshold()
settle_after_startup()
frozen = gc.get_freeze_count()
settle_after_startup()
after = gc.get_threshold()
print(before[0], after[0], after[1:] == before[1:], frozen > 0, gc.get_freeze_count() == frozen)
"""


def test_settling_freezes_the_start_up_heap_and_raises_the_young_threshold_once() -> None:
    # in a child process: freezing is for a whole process, not for the test run's
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True).stdout
    default, young, older_unchanged, frozen, once = out.split()
    assert int(default) < YOUNG_THRESHOLD == int(young)
    assert (older_unchanged, frozen, once) == ("True", "True", "True")
