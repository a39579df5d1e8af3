"""Devices, channel trace and measured device traces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collapipe_core.network import TraceError, build_scenario, channel_gains, parse_trace
from collapipe_core.state import build_environment, load_device_trace, observe
from collapipe_core.workspace import Workspace
from tests.core.builders import tiny_config


def test_path_loss_follows_the_log_distance_model() -> None:
    config = tiny_config(
        channel={"rayleigh_fading": False, "reference_loss_db": 40.0, "path_loss_exponent": 3.0}
    )
    scenario = build_scenario(config)
    expected_db = 40.0 + 30.0 * np.log10(scenario.distance_m)
    assert np.allclose(-10 * np.log10(channel_gains(scenario, 5)), expected_db)


def test_fading_is_seeded_by_round_not_by_history() -> None:
    scenario = build_scenario(tiny_config())
    assert np.array_equal(channel_gains(scenario, 7), channel_gains(scenario, 7))
    assert not np.array_equal(channel_gains(scenario, 7), channel_gains(scenario, 8))
    other_seed = build_scenario(tiny_config(channel={"seed": 99}))
    assert not np.array_equal(channel_gains(scenario, 7), channel_gains(other_seed, 7))
    ratio = channel_gains(scenario, 3) / scenario.path_gain  # |g|² ~ Exp(1)
    assert np.all(ratio > 0)


def test_devices_are_heterogeneous_and_reproducible() -> None:
    a, b = build_scenario(tiny_config()), build_scenario(tiny_config())
    assert np.array_equal(a.cpu_hz, b.cpu_hz) and np.array_equal(a.memory_bytes, b.memory_bytes)
    assert np.unique(a.cpu_hz).size == a.cpu_hz.size
    low, high = 1.0e9, 2.5e9
    assert np.all((a.cpu_hz >= low) & (a.cpu_hz <= high))


def test_profiles_are_assigned_cyclically() -> None:
    profiles = [
        {"name": "fast", "cpu_hz": 3e9, "memory_bytes": 10**9, "max_power_w": 0.2, "energy_budget_j": 1.0},
        {"name": "slow", "cpu_hz": 1e9, "memory_bytes": 10**9, "max_power_w": 0.1, "energy_budget_j": 0.5},
    ]
    scenario = build_scenario(tiny_config(network={"profiles": profiles}))
    assert scenario.profile_names == ("fast", "slow", "fast", "slow", "fast", "slow")
    assert scenario.max_power_w.tolist() == [[0.2, 0.1, 0.2], [0.1, 0.2, 0.1]]


def test_csv_trace_sets_speed_and_availability_and_wraps(tmp_path: Path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("round,cluster,device,speed_factor,available\n0,0,1,0.5,1\n1,1,2,1.0,0\n")
    config = tiny_config(network={"trace_file": str(trace)})
    env = build_environment(config, 40, 2, load_device_trace(config, Workspace.local()))
    s0, s1, s2 = observe(env, 0), observe(env, 1), observe(env, 2)
    assert s0.speed_factor[0, 1] == 0.5 and s0.available.all()
    assert not s1.available[1, 2] and s1.speed_factor[0, 1] == 1.0
    assert s2.speed_factor[0, 1] == 0.5  # round 2 wraps to trace row 0


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("round,cluster,device,speed_factor\n0,5,0,1.0\n", r"row 2, column 'cluster': 5 is outside 0..1"),
        ("round,cluster,device,speed_factor\n0,0,0,1\n0,0,1,-1\n", r"row 3, column 'speed_factor': .*> 0"),
        ("round,cluster,device,speed_factor\n0,0,0,fast\n", r"row 2, column 'speed_factor': not a number"),
        (
            "round,cluster,device,speed_factor\n0,0,0,nan\n",
            r"row 2, column 'speed_factor': must be a finite number",
        ),
        ("round,cluster,device\nzero,0,0\n", r"row 2, column 'round': not a whole number"),
        ("round,cluster\n0,0\n", r"row 2, column 'device': missing"),
        ("round,cluster,device,available\n0,0,0,maybe\n", r"row 2, column 'available'"),
        ("round,cluster,device\n3999999,0,0\n", r"row 2, column 'round': .*more than 4,000,000 cells"),
        ("", r"the trace is empty"),
        ("round,cluster,device\n", r"the trace has no rows"),
    ],
)
def test_bad_csv_traces_name_the_row_and_column_not_the_content(text: str, where: str) -> None:
    with pytest.raises(TraceError, match=where) as caught:
        parse_trace(text, False, 2, 3)
    assert "fast" not in str(caught.value) and "maybe" not in str(caught.value)


def test_json_traces_take_rows_of_objects() -> None:
    trace = parse_trace('{"rows": [{"round": 0, "cluster": 1, "device": 0, "available": false}]}', True, 2, 3)
    assert not trace.available[0, 1, 0]
    assert (
        parse_trace('[{"round": 1, "cluster": 0, "device": 2, "speed_factor": 2}]', True, 2, 3).num_rounds
        == 2
    )
    with pytest.raises(TraceError, match="row 2: each row must be an object"):
        parse_trace('[{"round": 0, "cluster": 0, "device": 0}, 7]', True, 2, 3)
    with pytest.raises(TraceError, match=r"column 'device': not a whole number"):
        parse_trace('[{"round": 0, "cluster": 0, "device": true}]', True, 2, 3)
    with pytest.raises(TraceError, match="not valid JSON"):
        parse_trace("[" * 100_000, True, 2, 3)
