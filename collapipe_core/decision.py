"""A scheduling decision for one round: per cluster M; per device δ (TEBs), β (bandwidth share), p (W).

Segments are contiguous in device order: :func:`plan_segments` is the one map from a segment vector
to the TEBs each device holds (the pipeline's split, the records and the cost model's block moves use
it).

Decisions serialise to and from plain JSON in the shape the CLI prints and the API stores::

    {"clusters": [{"cluster": 0, "num_microbatches": 4,
                   "devices": [{"device": "c0-d0", "num_blocks": 2, "bandwidth_share": 0.25,
                                "power_w": 0.2}, ...]}, ...]}

``recompute`` (the device recomputes its blocks' activations in backward) is written only where true; absent
means false.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from collapipe_core.network import device_id


def plan_segments(num_blocks: Sequence[int]) -> tuple[range, ...]:
    """Contiguous TEB index ranges per device, in device order (an empty range for a 0-block device).

    >>> plan_segments([2, 0, 3])
    (range(0, 2), range(2, 2), range(2, 5))
    """
    counts: list[int] = []
    for k, n in enumerate(num_blocks):
        try:
            if isinstance(n, bool):
                raise TypeError
            count = operator.index(n)
        except TypeError:
            raise ValueError(
                f"num_blocks[{k}] = {n!r} is not an integer; give the number of TEBs on each device"
            ) from None
        if count < 0:
            raise ValueError(f"num_blocks[{k}] = {count} is negative; a device holds 0 or more TEBs")
        counts.append(count)
    ranges: list[range] = []
    start = 0
    for count in counts:
        ranges.append(range(start, start + count))
        start += count
    return tuple(ranges)


@dataclass(frozen=True)
class ClusterDecision:
    num_microbatches: int
    num_blocks: tuple[int, ...]  # δ_k in device order; the segments are contiguous in that order
    bandwidth_share: tuple[float, ...]  # β_k, Σ ≤ 1
    power_w: tuple[float, ...]  # p_k ∈ [0, p_max]
    # whether device k recomputes its blocks' activations in backward (empty: no device does)
    recompute: tuple[bool, ...] = ()


@dataclass(frozen=True)
class Decision:
    clusters: tuple[ClusterDecision, ...]
    solver_iterations: int = 0  # block-coordinate descent passes (0 for rule-based policies)
    # "pipeline": segments δ cut the encoder (Σδ = L); "replicated": the `fl` baseline, every device
    # with δ_k = L holds the whole encoder and trains on an equal share of the cluster's batch.
    mode: Literal["pipeline", "replicated"] = "pipeline"

    # -- array views, (N, K) --------------------------------------------------------------------
    def num_blocks(self) -> npt.NDArray[np.int64]:
        return np.array([c.num_blocks for c in self.clusters], dtype=np.int64)

    def bandwidth_share(self) -> npt.NDArray[np.float64]:
        return np.array([c.bandwidth_share for c in self.clusters], dtype=np.float64)

    def power_w(self) -> npt.NDArray[np.float64]:
        return np.array([c.power_w for c in self.clusters], dtype=np.float64)

    def num_microbatches(self) -> npt.NDArray[np.int64]:
        return np.array([c.num_microbatches for c in self.clusters], dtype=np.int64)

    def recompute(self) -> npt.NDArray[np.bool_]:
        """(N, K): the devices that recompute their blocks' activations in backward."""
        return np.array(
            [c.recompute or (False,) * len(c.num_blocks) for c in self.clusters], dtype=np.bool_
        ).reshape(len(self.clusters), -1)

    @staticmethod
    def from_arrays(
        num_blocks: npt.ArrayLike,
        bandwidth_share: npt.ArrayLike,
        power_w: npt.ArrayLike,
        num_microbatches: npt.ArrayLike,
        solver_iterations: int = 0,
        mode: Literal["pipeline", "replicated"] = "pipeline",
        recompute: npt.ArrayLike | None = None,
    ) -> Decision:
        delta = np.asarray(num_blocks, dtype=np.int64)
        beta = np.asarray(bandwidth_share, dtype=np.float64)
        power = np.asarray(power_w, dtype=np.float64)
        micro = np.broadcast_to(np.asarray(num_microbatches, dtype=np.int64), (delta.shape[0],))
        again = None if recompute is None else np.broadcast_to(np.asarray(recompute, dtype=bool), delta.shape)
        return Decision(
            clusters=tuple(
                ClusterDecision(
                    num_microbatches=int(micro[n]),
                    num_blocks=tuple(int(x) for x in delta[n]),
                    bandwidth_share=tuple(float(x) for x in beta[n]),
                    power_w=tuple(float(x) for x in power[n]),
                    recompute=() if again is None or not again[n].any() else tuple(bool(x) for x in again[n]),
                )
                for n in range(delta.shape[0])
            ),
            solver_iterations=solver_iterations,
            mode=mode,
        )

    # -- JSON ---------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "clusters": [
                {
                    "cluster": n,
                    "num_microbatches": c.num_microbatches,
                    "devices": [
                        {
                            "device": device_id(n, k),
                            "num_blocks": c.num_blocks[k],
                            "bandwidth_share": c.bandwidth_share[k],
                            "power_w": c.power_w[k],
                            **({"recompute": True} if c.recompute and c.recompute[k] else {}),
                        }
                        for k in range(len(c.num_blocks))
                    ],
                }
                for n, c in enumerate(self.clusters)
            ],
            "solver_iterations": self.solver_iterations,
            "mode": self.mode,
        }

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> Decision:
        """Parse the JSON shape above; raises ValueError naming the path of a malformed entry."""
        try:
            clusters: Sequence[Mapping[str, Any]] = data["clusters"]
            parsed = []
            for i, c in enumerate(clusters):
                devices = c["devices"]
                again = tuple(bool(d.get("recompute", False)) for d in devices)
                parsed.append(
                    ClusterDecision(
                        num_microbatches=int(c["num_microbatches"]),
                        num_blocks=tuple(int(d["num_blocks"]) for d in devices),
                        bandwidth_share=tuple(float(d["bandwidth_share"]) for d in devices),
                        power_w=tuple(float(d["power_w"]) for d in devices),
                        recompute=again if any(again) else (),
                    )
                )
                if not devices:
                    raise ValueError(f"clusters[{i}].devices is empty")
        except (KeyError, TypeError) as err:
            raise ValueError(f"malformed decision JSON: missing or wrong field {err}") from None
        mode = data.get("mode", "pipeline")
        if mode not in ("pipeline", "replicated"):
            raise ValueError(f"decision mode must be 'pipeline' or 'replicated', got {mode!r}")
        return Decision(
            clusters=tuple(parsed), solver_iterations=int(data.get("solver_iterations", 0)), mode=mode
        )
