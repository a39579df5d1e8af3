"""The heterogeneous edge network: devices drawn from the config and a seed, and the per-round channel.

Everything is an (N, K) array: cluster n, device k. Two policies given the same config see the same
devices and the same channel trace, because every draw comes from a generator seeded with the
channel seed and the round index (never a global RNG, never history).

Channel model (documented product model): gain h = 10^(−PL_dB/10) · |g|², with log-distance path
loss PL_dB = reference_loss_db + 10·α·log10(distance_m / 1 m) and Rayleigh fading |g|² ~ Exp(1)
redrawn per device and round (|g|² = 1 when fading is off).

An optional trace file gives measured per-round device speed (a factor on FLOP/s) and availability;
rounds past its end wrap around (round t uses trace row t mod length).
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from collapipe_core.config import ExperimentConfig

FloatArray = npt.NDArray[np.float64]
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


def load_trace(path: str | Path, num_clusters: int, devices_per_cluster: int) -> DeviceTrace:
    """Read a CSV or JSON trace of rows {round, cluster, device, speed_factor, available}.

    Rows not given default to speed 1 and available. Raises ValueError naming the row and field.
    """
    path = Path(path)
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        loaded = json.loads(text)
        rows = loaded["rows"] if isinstance(loaded, dict) else loaded
    else:
        rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise ValueError(f"{path}: the trace has no rows")
    parsed = [_parse_trace_row(path, i, row, num_clusters, devices_per_cluster) for i, row in enumerate(rows)]
    num_rounds = max(r[0] for r in parsed) + 1
    speed = np.ones((num_rounds, num_clusters, devices_per_cluster))
    available = np.ones((num_rounds, num_clusters, devices_per_cluster), dtype=bool)
    for t, n, k, factor, avail in parsed:
        speed[t, n, k] = factor
        available[t, n, k] = avail
    return DeviceTrace(speed_factor=speed, available=available)


def _parse_trace_row(
    path: Path, index: int, row: dict[str, object], num_clusters: int, devices_per_cluster: int
) -> tuple[int, int, int, float, bool]:
    where = f"{path} row {index + 1}"
    try:
        t, n, k = int(str(row["round"])), int(str(row["cluster"])), int(str(row["device"]))
        factor = float(str(row.get("speed_factor", 1.0)))
        avail_raw = str(row.get("available", "1")).strip().lower()
    except KeyError as missing:
        raise ValueError(f"{where}: missing column {missing}; need round, cluster, device") from None
    except ValueError as bad:
        raise ValueError(f"{where}: {bad}") from None
    if t < 0 or not 0 <= n < num_clusters or not 0 <= k < devices_per_cluster:
        raise ValueError(
            f"{where}: (round {t}, cluster {n}, device {k}) is outside the network "
            f"({num_clusters} clusters × {devices_per_cluster} devices)"
        )
    if not factor > 0:
        raise ValueError(f"{where}: speed_factor must be > 0, got {factor}")
    if avail_raw not in {"1", "0", "true", "false", "yes", "no"}:
        raise ValueError(f"{where}: available must be 1/0 or true/false, got {avail_raw!r}")
    return t, n, k, factor, avail_raw in {"1", "true", "yes"}
