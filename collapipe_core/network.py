"""The heterogeneous edge network: devices drawn from the config and a seed, and the per-round channel.

Everything is an (N, K) array: cluster n, device k. Two policies given the same config see the same
devices and the same channel trace, because every draw comes from a generator seeded with the
channel seed and the round index (never a global RNG, never history).

Channel model (documented product model): gain h = 10^(−PL_dB/10) · |g|², with log-distance path
loss PL_dB = reference_loss_db + 10·α·log10(distance_m / 1 m) and Rayleigh fading |g|² ~ Exp(1)
redrawn per device and round (|g|² = 1 when fading is off).

An optional trace gives measured per-round device speed (a factor on FLOP/s) and availability;
rounds past its end wrap around (round t uses trace row t mod length). :func:`parse_trace` reads
its text; the file itself is read through the run's workspace (:mod:`collapipe_core.workspace`).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from collapipe_core.config import ExperimentConfig

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def device_id(cluster: int, device: int) -> str:
    """The stable name of device k of cluster n used in records, JSON and the dashboard."""
    return f"c{cluster}-d{device}"


@dataclass(frozen=True, eq=False)
class Scenario:
    """The static part of the network: (N, K) arrays of device properties and per-cluster constants."""

    num_clusters: int
    devices_per_cluster: int
    profile_names: tuple[str, ...]  # N·K labels, row-major
    cpu_hz: FloatArray
    flops_per_cycle: FloatArray
    memory_bytes: FloatArray
    max_power_w: FloatArray
    energy_budget_j: FloatArray
    distance_m: FloatArray
    path_gain: FloatArray  # linear, 10^(−PL_dB/10)
    cu_flops_per_s: float
    edge_flops_per_s: float
    cu_link_rate_bps: float
    edge_downlink_rate_bps: float
    cu_uplink_rate_bps: float
    kappa: float
    link_latency_s: float  # τ: every transfer's fixed latency
    block_overhead_flops: float  # Φ_0: a TEB's fixed forward work per micro-batch (FLOPs)
    block_backward_overhead_flops: float  # Φ_0B: its fixed backward work per micro-batch
    runtime_overhead_bytes: float
    bandwidth_hz: float
    noise_density_w_per_hz: float
    rayleigh_fading: bool
    channel_seed: int

    @property
    def shape(self) -> tuple[int, int]:
        return (self.num_clusters, self.devices_per_cluster)

    @property
    def flops_per_s(self) -> FloatArray:
        return self.cpu_hz * self.flops_per_cycle

    def device_ids(self) -> list[str]:
        n, k = self.shape
        return [device_id(c, d) for c in range(n) for d in range(k)]


def build_scenario(config: ExperimentConfig) -> Scenario:
    """Draw (or take from profiles) every device's properties with the scenario seed."""
    net, ch = config.network, config.channel
    shape = (net.num_clusters, net.devices_per_cluster)
    if net.profiles:
        profiles = [net.profiles[i % len(net.profiles)] for i in range(shape[0] * shape[1])]

        def column(attr: str) -> FloatArray:
            return np.array([float(getattr(p, attr)) for p in profiles]).reshape(shape)

        cpu_hz, fpc, mem = column("cpu_hz"), column("flops_per_cycle"), column("memory_bytes")
        pmax, budget, dist = column("max_power_w"), column("energy_budget_j"), column("distance_m")
        names = tuple(p.name for p in profiles)
    else:
        rng = np.random.default_rng([config.seed, 0x5CE7A10])
        cpu_hz = rng.uniform(net.cpu_hz.low, net.cpu_hz.high, shape)
        mem = np.floor(rng.uniform(net.memory_bytes.low, net.memory_bytes.high, shape))
        dist = rng.uniform(net.distance_m.low, net.distance_m.high, shape)
        fpc = np.full(shape, net.flops_per_cycle)
        pmax = np.full(shape, net.max_power_w)
        budget = np.full(shape, net.energy_budget_j)
        names = tuple(f"{hz / 1e9:.2f}GHz" for hz in cpu_hz.ravel())
    loss_db = ch.reference_loss_db + 10.0 * ch.path_loss_exponent * np.log10(np.maximum(dist, 1e-3))
    return Scenario(
        num_clusters=shape[0],
        devices_per_cluster=shape[1],
        profile_names=names,
        cpu_hz=cpu_hz,
        flops_per_cycle=fpc,
        memory_bytes=mem,
        max_power_w=pmax,
        energy_budget_j=budget,
        distance_m=dist,
        path_gain=10.0 ** (-loss_db / 10.0),
        cu_flops_per_s=net.cu_flops_per_s,
        edge_flops_per_s=net.edge_flops_per_s,
        cu_link_rate_bps=net.cu_link_rate_bps,
        edge_downlink_rate_bps=net.edge_downlink_rate_bps,
        cu_uplink_rate_bps=net.cu_uplink_rate_bps,
        kappa=net.kappa,
        link_latency_s=net.link_latency_s,
        block_overhead_flops=net.block_overhead_flops,
        block_backward_overhead_flops=net.block_backward_overhead_flops,
        runtime_overhead_bytes=float(net.runtime_overhead_bytes),
        bandwidth_hz=ch.bandwidth_hz,
        noise_density_w_per_hz=ch.noise_density_w_per_hz,
        rayleigh_fading=ch.rayleigh_fading,
        channel_seed=config.channel_seed,
    )


def channel_gains(scenario: Scenario, round_index: int) -> FloatArray:
    """h for every device in round ``round_index``: path gain × Rayleigh |g|² (seeded by seed and round)."""
    if not scenario.rayleigh_fading:
        return scenario.path_gain.copy()
    rng = np.random.default_rng([scenario.channel_seed, 0xFAD1, round_index])
    return scenario.path_gain * rng.exponential(1.0, scenario.shape)


@dataclass(frozen=True, eq=False)
class DeviceTrace:
    """Measured per-round device conditions: speed factor on FLOP/s and availability, (R, N, K)."""

    speed_factor: FloatArray
    available: BoolArray

    @property
    def num_rounds(self) -> int:
        return int(self.speed_factor.shape[0])

    def at(self, round_index: int) -> tuple[FloatArray, BoolArray]:
        i = round_index % self.num_rounds
        return self.speed_factor[i], self.available[i]


MAX_TRACE_BYTES = 8 * 2**20
"""Largest trace file read (a CSV row is ~20 bytes: ~400,000 rows)."""
MAX_TRACE_CELLS = 4_000_000
"""Largest trace: rounds × clusters × devices (each cell holds a speed factor and an availability)."""
_TRUE, _FALSE = {"1", "true", "yes"}, {"0", "false", "no"}


class TraceError(ValueError):
    """A trace that cannot be used; names the row (1-based, as an editor shows it) and the column."""

    def __init__(self, message: str, row: int | None = None, column: str | None = None) -> None:
        where = "".join(
            [f"row {row}" if row is not None else "", f", column {column!r}" if column is not None else ""]
        )
        super().__init__(f"{where}: {message}" if where else message)


def parse_trace(text: str, is_json: bool, num_clusters: int, devices_per_cluster: int) -> DeviceTrace:
    """A CSV (header ``round,cluster,device,speed_factor,available``) or JSON (a list of such objects,
    or ``{"rows": [...]}``) trace. Cells not given default to speed 1 and available; rounds past the
    trace's end wrap around. Raises TraceError naming the row and column, never quoting the file."""
    rows: list[tuple[int, dict[str, object]]]
    if is_json:
        try:
            loaded = json.loads(text)
        except (ValueError, RecursionError) as err:  # ValueError: also an integer of > 4300 digits
            line = getattr(err, "lineno", None)
            raise TraceError("not valid JSON", row=line) from None
        items = loaded.get("rows") if isinstance(loaded, dict) else loaded
        if not isinstance(items, list):
            raise TraceError('a JSON trace is a list of rows or {"rows": [...]}')
        rows = []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                raise TraceError("each row must be an object with round, cluster, device", row=i + 1)
            rows.append((i + 1, item))
    else:
        reader = csv.DictReader(text.splitlines())
        if reader.fieldnames is None:
            raise TraceError("the trace is empty; give a header line and at least one row")
        # line numbers as an editor shows them: the header is line 1
        rows = [(i + 2, dict(row)) for i, row in enumerate(reader)]
    if not rows:
        raise TraceError("the trace has no rows")
    parsed = [_parse_trace_row(line, row, num_clusters, devices_per_cluster) for line, row in rows]
    num_rounds = max(r[0] for r in parsed) + 1
    if num_rounds * num_clusters * devices_per_cluster > MAX_TRACE_CELLS:
        line = rows[max(range(len(parsed)), key=lambda i: parsed[i][0])][0]
        devices = num_clusters * devices_per_cluster
        raise TraceError(
            f"round {num_rounds - 1} makes the trace {num_rounds} rounds × {devices} "
            f"devices, more than {MAX_TRACE_CELLS:,} cells; rounds past the end wrap around, so a shorter "
            "trace repeats",
            row=line,
            column="round",
        )
    speed = np.ones((num_rounds, num_clusters, devices_per_cluster))
    available = np.ones((num_rounds, num_clusters, devices_per_cluster), dtype=bool)
    for t, n, k, factor, avail in parsed:
        speed[t, n, k] = factor
        available[t, n, k] = avail
    return DeviceTrace(speed_factor=speed, available=available)


def _parse_trace_row(
    line: int, row: dict[str, object], num_clusters: int, devices_per_cluster: int
) -> tuple[int, int, int, float, bool]:
    def integer(column: str, high: int) -> int:
        raw = row.get(column)
        if raw is None or raw == "":
            raise TraceError("missing; every row needs round, cluster and device", line, column)
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = int(raw) if isinstance(raw, int) else int(str(raw).strip())
        except ValueError:
            raise TraceError("not a whole number", line, column) from None
        if not 0 <= value < high:
            limit = f"{high - 1:,}" if high < 2**31 else "the trace's size"
            raise TraceError(f"{value} is outside 0..{limit}", line, column)
        return value

    t = integer("round", MAX_TRACE_CELLS)
    n = integer("cluster", num_clusters)
    k = integer("device", devices_per_cluster)
    raw_factor = row.get("speed_factor", 1.0)
    try:
        if isinstance(raw_factor, bool) or raw_factor is None:
            raise ValueError
        factor = float(raw_factor) if isinstance(raw_factor, int | float) else float(str(raw_factor))
    except ValueError:
        raise TraceError("not a number", line, "speed_factor") from None
    if not (np.isfinite(factor) and factor > 0):
        raise TraceError("must be a finite number > 0", line, "speed_factor")
    raw_avail = row.get("available", True)
    if isinstance(raw_avail, bool):
        return t, n, k, factor, raw_avail
    text = str(raw_avail).strip().lower()
    if text not in _TRUE | _FALSE:
        raise TraceError("must be 1/0, true/false or yes/no", line, "available")
    return t, n, k, factor, text in _TRUE
