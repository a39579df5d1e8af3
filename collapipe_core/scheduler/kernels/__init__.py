"""Compiled (numba) kernels of DSSDA's hottest small-array steps: scalar loops, one row at a time.

- :func:`bandwidth_rows` (``bandwidth.py``) — the bandwidth step's KKT structures;
- :func:`allocate_rows` (``links.py``) — the link allocation (bandwidth and power rounds) of rows of
  single clusters, the link memo's, with the bandwidth step per row of ``bandwidth.py``;
- :func:`best_rows` (``segments.py``) — the whole segment step of each row: thresholds, each pair's
  device caps and LP lower bound, the exact DP of the pairs that can still win;
- :func:`priced_rows` (``priced.py``) — the segment step's priced-links model: per (row, target,
  device, TEB) the link's SNR by its first-order condition and power cap, the cost and the gather time;
- :func:`memory_limits`, :func:`joint_microbatches` (``microbatches.py``) — the micro-batch step's
  memory limit on M and its exact joint M;
- :func:`decision_costs` (``costs.py``) — the closed-form figures of a batch of decisions;
- ``scalars.py`` — the helpers they share (numpy's min/max and pairwise row sum, a stable sort).

Each does the arithmetic of the numpy formulation it replaced, element by element and in the same
order: candidates in the same order, the first least one taken, sums over a row's devices in numpy's
pairwise order. Where only +, −, ×, ÷, √ and comparisons are involved (the bandwidth step, the segment
DP and pair bounds, the micro-batch step, the costs) the outputs were bit-identical on every call
captured; the link
rounds and the priced-links model also call log2/log1p/exp/expm1, which the C library rounds
differently from numpy's SIMD versions in the last place for some inputs, so there the results agree
within 1e-9 relative (their tests state each tolerance). Ties of two devices' sort keys may be ordered
differently from numpy's argsort (unstable, SIMD): here they keep device order. ``arrays.py`` gives the
wrappers' inputs one layout (contiguous, writable), so each kernel has one compiled signature. One
change of the search itself: the segment step takes each row's own candidate thresholds (the numpy
version padded every row's list to the batch's longest, which narrowed a short row's window).

Compiled on first use and cached on disk (``cache=True``: in ``NUMBA_CACHE_DIR`` if set, else in
``__pycache__`` beside these files, else in numba's user-wide cache directory: the first writable one).
:func:`warm_up` (``python -m collapipe_core.scheduler.kernels``) compiles them all once, at install and
image build; docs/scheduler.md gives the compile times.
"""

from collapipe_core.scheduler.kernels.bandwidth import bandwidth_rows
from collapipe_core.scheduler.kernels.costs import decision_costs
from collapipe_core.scheduler.kernels.links import allocate_rows
from collapipe_core.scheduler.kernels.microbatches import joint_microbatches, memory_limits
from collapipe_core.scheduler.kernels.priced import priced_rows
from collapipe_core.scheduler.kernels.segments import best_rows
from collapipe_core.scheduler.kernels.warmup import warm_up

__all__ = [
    "allocate_rows",
    "bandwidth_rows",
    "best_rows",
    "decision_costs",
    "joint_microbatches",
    "memory_limits",
    "priced_rows",
    "warm_up",
]
