"""The modeled clock of a run's series: every point's ``elapsed_s`` is Σ latency_s of the run's rounds
up to its round, whatever range, downsampling or device it comes from.

The expected values are recomputed here from the stored latencies (the full, undownsampled series).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.backend.builders import tiny_config
from tests.backend.conftest import Api

ROUNDS = 12


@pytest.fixture
def run_id(api: Api) -> int:
    created = api.client.post(
        "/api/runs", json={"config": tiny_config(training={"rounds": ROUNDS})}, headers=api.as_("operator")
    )
    run_id: int = created.json()["id"]
    assert api.run_to_end(run_id) == "succeeded"
    return run_id


def _get(api: Api, path: str, **params: Any) -> Any:
    response = api.client.get(path, params=params, headers=api.as_("viewer"))
    assert response.status_code == 200, response.text
    return response.json()


def _clock(api: Api, run_id: int) -> np.ndarray:
    """Elapsed time at the end of each round: the running sum of every stored round's latency_s."""
    body = _get(api, f"/api/runs/{run_id}/rounds", fields="latency_s", method="none")
    latency = body["series"]["latency_s"]
    assert latency["round"] == list(range(ROUNDS))
    return np.cumsum(latency["value"])


def _at_rounds(clock: np.ndarray, series: dict[str, list[float]]) -> list[float]:
    return [float(clock[int(r)]) for r in series["round"]]


def test_round_series_carry_the_elapsed_time_of_each_point(api: Api, run_id: int) -> None:
    clock = _clock(api, run_id)
    fields = ["latency_s", "objective", "bubble_fraction_mean"]
    body = _get(api, f"/api/runs/{run_id}/rounds", fields=fields)
    for field in fields:
        assert body["series"][field]["elapsed_s"] == pytest.approx(clock.tolist()), field
    assert body["last_round"] == ROUNDS - 1 and body["elapsed_s"] == pytest.approx(clock[-1])

    # a range counts the rounds before it: the clock does not restart at ``from``
    ranged = _get(api, f"/api/runs/{run_id}/rounds", fields="objective", **{"from": 3, "to": 7})
    assert ranged["series"]["objective"]["round"] == [3, 4, 5, 6, 7]
    assert ranged["series"]["objective"]["elapsed_s"] == pytest.approx(clock[3:8].tolist())
    assert ranged["last_round"] == 7 and ranged["elapsed_s"] == pytest.approx(clock[7])

    # LTTB keeps points: their elapsed time is their round's
    thin = _get(api, f"/api/runs/{run_id}/rounds", fields="objective", max_points=4)["series"]["objective"]
    assert len(thin["round"]) == 4
    assert thin["elapsed_s"] == pytest.approx(_at_rounds(clock, thin))

    # bucket means: 12 rounds in 4 buckets of 3, the elapsed time averaged over the same rounds
    mean = _get(api, f"/api/runs/{run_id}/rounds", fields="objective", max_points=4, method="mean")
    buckets = np.arange(ROUNDS).reshape(4, 3)
    assert mean["series"]["objective"]["round"] == pytest.approx(buckets.mean(axis=1).tolist())
    assert mean["series"]["objective"]["elapsed_s"] == pytest.approx(clock[buckets].mean(axis=1).tolist())
    assert mean["elapsed_s"] == pytest.approx(clock[-1])  # the range's end, not a bucket's mean

    # nothing in range: no last round, no time
    empty = _get(api, f"/api/runs/{run_id}/rounds", fields="objective", **{"from": 50})
    assert (empty["last_round"], empty["elapsed_s"]) == (None, 0.0)
    assert empty["series"]["objective"] == {"round": [], "value": [], "elapsed_s": []}


def test_device_series_carry_the_elapsed_time_of_each_point(api: Api, run_id: int) -> None:
    clock = _clock(api, run_id)
    path = f"/api/runs/{run_id}/devices"
    full = _get(api, path, metric=["energy_j", "queue"], method="none")["metrics"]
    for metric in ("energy_j", "queue"):
        assert len(full[metric]["series"]) == 6
        for device, series in full[metric]["series"].items():
            assert series["round"] == list(range(ROUNDS)), (metric, device)
            assert series["elapsed_s"] == pytest.approx(clock.tolist()), (metric, device)

    ranged = _get(api, path, metric="energy_j", cluster=1, **{"from": 4, "to": 9})["metrics"]["energy_j"]
    for device, series in ranged["series"].items():
        assert series["round"] == list(range(4, 10)), device
        assert series["elapsed_s"] == pytest.approx(clock[4:10].tolist()), device

    # per metric downsampling: LTTB points at their round's time, bucket means of the times
    mixed = _get(api, path, metric=["energy_j:4", "num_blocks:4:mean"], device_id="c0-d1")["metrics"]
    lttb = mixed["energy_j"]["series"]["c0-d1"]
    assert len(lttb["round"]) == 4 and lttb["elapsed_s"] == pytest.approx(_at_rounds(clock, lttb))
    buckets = np.arange(ROUNDS).reshape(4, 3)
    mean = mixed["num_blocks"]["series"]["c0-d1"]
    assert mean["round"] == pytest.approx(buckets.mean(axis=1).tolist())
    assert mean["elapsed_s"] == pytest.approx(clock[buckets].mean(axis=1).tolist())
