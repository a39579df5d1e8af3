"""What the distributed executor measured reaches the records: every device, the CU and the edge server.

These tests need no processes: ``build_result`` is fed a ``TrainingOutcome`` shaped like the
executor's (``measured`` keyed by participant id); the run test in ``test_distributed.py`` checks the
same on a real distributed run.
"""

from __future__ import annotations

import json

from collapipe_core.costmodel import evaluate
from collapipe_core.data import load_dataset
from collapipe_core.pipeline.executor import TrainingOutcome
from collapipe_core.records import RoundResult
from collapipe_core.runner import build_result
from collapipe_core.scheduler import get_policy
from collapipe_core.state import build_environment, observe
from tests.core.builders import tiny_config


def _figures(compute_s: float, peak_bytes: float) -> dict[str, float]:
    return {
        "compute_s": compute_s,
        "send_s": 0.01,
        "recv_s": 0.02,
        "idle_s": 0.03,
        "peak_tensor_bytes": peak_bytes,
    }


def _result(measured: dict[str, dict[str, float]]) -> RoundResult:
    config = tiny_config(network={"num_clusters": 1, "devices_per_cluster": 2})
    bundle = load_dataset(config)
    env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None)
    state = observe(env, 0)
    decision = get_policy("uniform").decide(state)
    outcome = TrainingOutcome(train_loss=1.0, eval_loss=1.0, measured=measured)
    return build_result(state, decision, evaluate(state, decision), outcome, "uniform", 0.0)


def test_the_cu_and_edge_server_figures_are_kept_beside_the_devices() -> None:
    measured = {
        "c0-cu": _figures(0.1, 1e6),
        "c0-d0": _figures(0.2, 2e6),
        "c0-d1": _figures(0.3, 3e6),
        "c0-edge": _figures(0.4, 4e6),
    }
    result = _result(measured)

    assert result.round.measured == measured
    assert {d.device_id: d.measured for d in result.devices} == {
        "c0-d0": measured["c0-d0"],
        "c0-d1": measured["c0-d1"],
    }
    # the records are copies: changing the executor's dicts later changes nothing stored
    measured["c0-cu"]["compute_s"] = 99.0
    assert result.round.measured["c0-cu"]["compute_s"] == 0.1


def test_measured_figures_survive_the_json_records() -> None:
    result = _result(
        {"c0-cu": _figures(0.1, 1e6), "c0-d0": _figures(0.2, 2e6), "c0-edge": _figures(0.4, 4e6)}
    )

    again = RoundResult.from_json(json.loads(json.dumps(result.to_json())))

    assert again == result
    assert again.round.measured["c0-edge"]["peak_tensor_bytes"] == 4e6


def test_executors_that_measure_nothing_leave_the_field_empty_and_old_records_still_load() -> None:
    result = _result({})
    assert result.round.measured == {}
    assert all(d.measured == {} for d in result.devices)

    data = result.to_json()
    del data["round"]["measured"]  # a record written before the field existed
    assert RoundResult.from_json(data).round.measured == {}
