"""The distributed executor: the same training as ``simulated``, really split over processes.

Tests marked ``distributed`` start one process per CU, device and edge server (5 or 8 here), each
with one torch thread; tiny models (d = 16, dropout 0) keep a round to a fraction of a second, and
start-up (a few seconds per pool) dominates.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch.distributed.pipelining import schedules as pipeline_schedules

from collapipe_core.config import ExperimentConfig
from collapipe_core.costmodel import link_rate_bps
from collapipe_core.data import load_dataset
from collapipe_core.decision import Decision
from collapipe_core.models import build_model
from collapipe_core.pipeline.distributed import (
    DistributedExecutor,
    DistributedOptions,
    DistributedRoundError,
    RankFailure,
)
from collapipe_core.pipeline.distributed.failures import first_failure
from collapipe_core.pipeline.distributed.launch import WORKER_MODULE, rank_environment
from collapipe_core.pipeline.distributed.link import transfer_s
from collapipe_core.pipeline.distributed.measure import (
    RecvPrefetch,
    StepClock,
    TensorBytesTracker,
    instrument_p2p,
)
from collapipe_core.pipeline.distributed.plan import (
    Layout,
    effective_schedule,
    local_optimizer_state,
    merge_optimizer_states,
    plan_round,
    slice_optimizer_state,
)
from collapipe_core.pipeline.distributed.stages import stage_module
from collapipe_core.pipeline.distributed.worker import FAULT_ENV, Fault, is_peer_failure
from collapipe_core.pipeline.simulated import SimulatedExecutor, make_optimizer
from collapipe_core.records import RoundResult
from collapipe_core.runner import Runner
from collapipe_core.sinks import MemorySink, read_json_lines
from collapipe_core.state import RoundState, build_environment, observe
from tests.core.builders import tiny_config

MODELS: dict[str, dict[str, Any]] = {
    "classifier": {"kind": "classifier", "dataset": "synthetic-parity"},
    "seq2seq": {"kind": "seq2seq", "dataset": "synthetic-reverse"},
}


def _config(kind: str, clusters: int, devices: int, blocks: int, **sections: Any) -> ExperimentConfig:
    model = {
        "kind": kind,
        "d_model": 16,
        "num_heads": 2,
        "ffn_dim": 32,
        "num_blocks": blocks,
        "seq_len": 12,
        "target_len": 8,
        "dropout": 0.0,
    }
    data = {"dataset": MODELS[kind]["dataset"], "samples_per_cluster": 64, "eval_samples": 32}
    network = {"num_clusters": clusters, "devices_per_cluster": devices, "energy_budget_j": 0.05}
    merged = {"model": model, "data": data, "network": network, **sections}
    return tiny_config(**merged)


def _state(config: ExperimentConfig, round_index: int, schedule: str) -> RoundState:
    sizes = load_dataset(config)
    env = build_environment(config, sizes.src_vocab_size, sizes.tgt_vocab_size, None)
    settings = dataclasses.replace(env.settings, schedule=schedule)
    return observe(dataclasses.replace(env, settings=settings), round_index)


def _decision(segments: list[list[int]], microbatches: int) -> Decision:
    shares = [[1.0 / len(row)] * len(row) for row in segments]
    return Decision.from_arrays(segments, shares, [[0.1] * len(row) for row in segments], microbatches)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- pure parts: layout, plan, optimizer state, failures, measurement --------------------------------


def test_layout_gives_every_participant_one_rank() -> None:
    layout = Layout(num_clusters=2, devices_per_cluster=3)
    assert layout.world_size == 10
    names = [layout.participant_id(r) for r in range(layout.world_size)]
    assert names == [
        *("c0-cu", "c0-d0", "c0-d1", "c0-d2", "c0-edge"),
        *("c1-cu", "c1-d0", "c1-d1", "c1-d2", "c1-edge"),
    ]
    assert layout.leader_ranks() == (0, 5)
    with pytest.raises(ValueError, match="outside the world of 10"):
        layout.locate(10)


def test_plan_leaves_out_devices_without_blocks_and_falls_back_from_1f1b() -> None:
    layout = Layout(num_clusters=2, devices_per_cluster=3)
    plans = plan_round(layout, _decision([[3, 0, 2], [1, 1, 3]], 4), "1f1b")
    assert plans[0].ranks == (0, 1, 3, 4) and dict(plans[0].block_ranges) == {1: range(0, 3), 3: range(3, 5)}
    assert (plans[0].schedule, plans[0].schedule_fallback) == ("1f1b", False)  # M = 4 ≥ 4 stages
    assert plans[1].ranks == (5, 6, 7, 8, 9)
    assert (plans[1].schedule, plans[1].schedule_fallback) == ("gpipe", True)  # M = 4 < 5 stages
    assert effective_schedule("gpipe", 1, 9) == ("gpipe", False)


def test_plan_refuses_the_replicated_fl_rounds() -> None:
    decision = dataclasses.replace(_decision([[5, 5, 5]], 2), mode="replicated")
    with pytest.raises(ValueError, match="run it with executor 'simulated'"):
        plan_round(Layout(1, 3), decision, "gpipe")


@pytest.mark.parametrize("optimizer", ["adamw", "momentum", "sgd"])
def test_a_stage_optimizer_on_its_slice_steps_as_the_whole_model_optimizer(optimizer: str) -> None:
    config = _config("seq2seq", 1, 3, 5, training={"optimizer": optimizer})
    model = build_model(config.model, 13, 11, seed=1)
    names = [n for n, _ in model.named_parameters()]
    whole = make_optimizer(config, model)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.01)
    whole.step()
    full_state = whole.state_dict()
    roles = [("cu", None), ("device", range(0, 3)), ("device", range(3, 5)), ("edge", None)]
    slices = []
    for role, blocks in roles:
        stage = stage_module(model, role, blocks)  # type: ignore[arg-type]
        stage_names = [n for n, _ in stage.named_parameters()]
        part = slice_optimizer_state(full_state, names, stage_names)
        assert part is not None
        local = make_optimizer(config, stage)
        local.load_state_dict(local_optimizer_state(part, stage_names, local.state_dict()["param_groups"]))
        slices.append({stage_names[i]: v for i, v in local.state_dict()["state"].items()})
    merged = merge_optimizer_states(slices, names, full_state["param_groups"])
    assert merged["param_groups"] == full_state["param_groups"]
    assert merged["state"].keys() == full_state["state"].keys()
    for i, entry in full_state["state"].items():
        for key, value in entry.items():
            assert torch.equal(torch.as_tensor(merged["state"][i][key]), torch.as_tensor(value)), (i, key)
    assert slice_optimizer_state(None, names, names[:2]) is None


def test_the_rank_that_failed_first_is_blamed() -> None:
    peer = RankFailure(1, "c0-d0", "peer", 10.0, "Connection closed by peer")
    hung = RankFailure(2, "c0-d1", "unresponsive", 30.0, "no report")
    died = RankFailure(3, "c0-d2", "died", 20.0, "exited with code 1")
    own = RankFailure(4, "c0-edge", "error", 40.0, "Traceback ...\nValueError: bad")
    assert first_failure([peer, hung, died, own]) is own
    assert first_failure([peer, hung, died]) is died
    assert first_failure([peer, hung]) is hung
    assert first_failure([peer, dataclasses.replace(peer, rank=0, at=5.0)]).rank == 0
    error = DistributedRoundError(3, own, [peer])
    assert str(error).startswith("round 3: rank 4 (c0-edge) failed: ValueError: bad")
    assert "rank 1 (c0-d0) lost a peer" in str(error)


def test_gloo_peer_errors_are_told_apart_from_a_rank_s_own() -> None:
    timeout = RuntimeError("[gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv")
    closed = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    try:
        raise RuntimeError("Stage 2 failed to run forward") from closed
    except RuntimeError as wrapped:
        assert is_peer_failure(wrapped)
    assert is_peer_failure(timeout)
    assert not is_peer_failure(ValueError("num_heads must divide d_model"))
    assert Fault.from_env("3:1") == Fault(3, 1, "exit")
    assert Fault.from_env("3:1:hang") == Fault(3, 1, "hang")
    with pytest.raises(ValueError, match="RANK:ROUND"):
        Fault.from_env("3")


def test_tensor_tracker_counts_live_storages_and_their_peak() -> None:
    tracker = TensorBytesTracker()
    with tracker:
        a = torch.ones(1000)  # 4000 bytes
        b = a * 2  # 4000 more
        a.add_(1)  # in place: nothing new
        view = b[:10]  # a view: nothing new
        del a
        c = torch.zeros(250)  # 1000
    assert tracker.peak_bytes == 8000
    assert tracker.live_bytes == 5000
    del b, view, c


_RSS_PROBE = """
import torch
from collapipe_core.pipeline.distributed.measure import reset_rss_peak, rss_peak_bytes
baseline = reset_rss_peak()
block = torch.ones(16 * 2**20 // 4)  # 16 MiB, touched, then freed
del block
print(rss_peak_bytes() - baseline)
"""


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_rss_peak_is_reset_and_sees_a_transient_allocation() -> None:
    # in a fresh process with the ranks' allocator setting: a long-lived process (pytest) may serve
    # the block from freed heap that is still resident, which is what MALLOC_MMAP_THRESHOLD_ prevents
    env = rank_environment(os.environ, 0, 1, "127.0.0.1", 1, 0, 1)
    done = subprocess.run(
        [sys.executable, "-c", _RSS_PROBE], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    assert int(done.stdout.strip()) >= 15 * 2**20


def test_p2p_instrumentation_is_undone_after_the_step() -> None:
    original = pipeline_schedules._batch_p2p
    with instrument_p2p(StepClock(), prefetch=RecvPrefetch()):
        assert pipeline_schedules._batch_p2p is not original
    assert pipeline_schedules._batch_p2p is original


def test_a_rank_environment_follows_torchrun_conventions() -> None:
    env = rank_environment({"PATH": "/bin"}, 3, 8, "10.0.0.1", 29500, 1, 4)
    assert {k: env[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK")} == {
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": "29500",
        "WORLD_SIZE": "8",
        "RANK": "3",
        "LOCAL_RANK": "1",
    }
    assert env["MALLOC_MMAP_THRESHOLD_"] == "65536" and env["OMP_NUM_THREADS"] == "1"


# -- one round against the simulated executor ---------------------------------------------------------

ROUNDS = [  # (schedule, segments of the 3 devices (5 TEBs), M): re-partitioned every round
    ("gpipe", [3, 0, 2], 4),
    ("1f1b", [0, 2, 3], 4),
    ("1f1b", [1, 1, 3], 2),  # 5 stages > M = 2: GPipe, recorded as a fallback
]


@pytest.mark.distributed
@pytest.mark.parametrize("kind", ["classifier", "seq2seq"])
def test_rounds_give_the_simulated_gradients_weights_and_metrics(kind: str) -> None:
    """Classifier: link emulation on, and rank 2 started by hand as another host would start it."""
    config = _config(kind, 1, 3, 5, training={"local_iterations": 1})
    bundle = load_dataset(config)
    external = kind == "classifier"
    port = _free_port()
    options = DistributedOptions(
        report_gradients=True,
        timeout_s=60.0,
        link_emulation=external,
        master_port=port,
        local_ranks=(0, 1, 3, 4) if external else None,
    )
    outside = None
    if external:  # the documented multi-host launch: torchrun's variables + the worker module
        env = rank_environment(os.environ, 2, 5, "127.0.0.1", port, 0, 1)
        outside = subprocess.Popen([sys.executable, "-m", WORKER_MODULE], env=env, stdin=subprocess.DEVNULL)
    simulated = SimulatedExecutor(config, bundle)
    try:
        with DistributedExecutor(config, bundle, options) as distributed:
            for t, (schedule, segments, micro) in enumerate(ROUNDS):
                state = _state(config, t, schedule)
                decision = _decision([segments], micro)
                expected = simulated.execute(state, decision)
                got = distributed.execute(state, decision)

                sim_grads = {n: p.grad for n, p in simulated.model.named_parameters()}
                assert distributed.last_gradients[0].keys() == sim_grads.keys()
                for name, grad in distributed.last_gradients[0].items():
                    torch.testing.assert_close(grad, sim_grads[name], rtol=1e-5, atol=1e-5, msg=name)
                for name, weight in simulated.global_state.items():
                    torch.testing.assert_close(distributed.global_state[name], weight, rtol=1e-5, atol=1e-5)
                sim_opt, dist_opt = simulated.optimizer_states[0], distributed.optimizer_states[0]
                assert sim_opt is not None and dist_opt is not None
                for i, entry in sim_opt["state"].items():
                    for key, value in entry.items():
                        torch.testing.assert_close(dist_opt["state"][i][key], value, rtol=1e-5, atol=1e-5)
                assert got.train_loss == pytest.approx(expected.train_loss, abs=1e-6)
                assert got.eval_loss == pytest.approx(expected.eval_loss, abs=1e-6)
                assert got.eval_metrics == pytest.approx(expected.eval_metrics, abs=1e-6)
                # the stages' squared gradient norms, summed over the ranks, are the single process's
                assert got.gradient_noise is not None and expected.gradient_noise is not None
                assert vars(got.gradient_noise) == pytest.approx(vars(expected.gradient_noise), rel=1e-4)

                scheduled = [f"c0-d{k}" for k, blocks in enumerate(segments) if blocks > 0]
                assert sorted(got.measured) == sorted(["c0-cu", *scheduled, "c0-edge"])
                for figures in got.measured.values():
                    assert figures["compute_s"] > 0 and figures["step_s"] >= figures["compute_s"]
                    assert figures["peak_tensor_bytes"] > figures["resident_state_bytes"] > 0
                    assert figures["schedule_fallback"] == (1.0 if t == 2 else 0.0)
                if external:
                    _assert_links_emulated(state, decision, got.measured, micro)
    finally:
        if outside is not None:
            outside.wait(30)


def _assert_links_emulated(
    state: RoundState, decision: Decision, measured: dict[str, dict[str, float]], micro: int
) -> None:
    """Each device sends M activations and M gradients, each taking payload/r_k on its link."""
    sc = state.scenario
    rates = link_rate_bps(
        decision.bandwidth_share(), decision.power_w(), state.gain, sc.bandwidth_hz, sc.noise_density_w_per_hz
    )
    elements = state.settings.microbatch_size * 12 * 16  # b × S × d per transfer
    for k, blocks in enumerate(decision.clusters[0].num_blocks):
        if blocks:
            expected = 2 * micro * transfer_s(elements, 4, float(rates[0, k]))
            assert measured[f"c0-d{k}"]["link_s"] == pytest.approx(expected, rel=1e-9)
    assert measured["c0-cu"]["link_s"] == pytest.approx(micro * transfer_s(elements, 4, sc.cu_link_rate_bps))


# -- whole runs through the Runner and the CLI -------------------------------------------------------


def _run_config() -> ExperimentConfig:
    """2 clusters × 2 devices (8 ranks), 1F1B with M = 4 = stages, 3 rounds of 2 iterations."""
    return _config(
        "seq2seq",
        2,
        2,
        4,
        training={"rounds": 3, "local_iterations": 2, "schedule": "1f1b", "microbatch_size": 4},
        scheduler={"policy": "uniform", "num_microbatches": 4, "max_microbatches": 4},
    )


def _comparable(result: RoundResult) -> dict[str, Any]:
    data = result.to_json()
    data["round"].pop("solve_time_s")  # wall clock
    data["round"].pop("measured")
    for device in data["devices"]:
        device.pop("measured")
    return data


@pytest.fixture(scope="module")
def uninterrupted() -> Iterator[list[RoundResult]]:
    config = _run_config().model_copy(update={"executor": "distributed"})
    sink = MemorySink()
    runner = Runner(config, sink)
    runner.run()
    assert isinstance(runner.executor, DistributedExecutor)
    runner.executor.close()
    yield sink.results


@pytest.mark.distributed
def test_a_run_gives_the_simulated_run_s_records(uninterrupted: list[RoundResult]) -> None:
    simulated = MemorySink()
    Runner(_run_config(), simulated).run()
    assert len(uninterrupted) == len(simulated.results) == 3
    for got, expected in zip(uninterrupted, simulated.results, strict=True):
        a, b = got.round, expected.round
        assert a.train_loss == pytest.approx(b.train_loss, abs=1e-4)
        assert a.eval_loss == pytest.approx(b.eval_loss, abs=1e-4)
        assert a.eval_metrics == pytest.approx(b.eval_metrics, abs=1e-4)
        assert a.decision == b.decision and a.latency_s == b.latency_s
        assert a.gradient_noise_scale is not None and b.gradient_noise_scale is not None
        assert a.gradient_noise_scale == pytest.approx(b.gradient_noise_scale, rel=1e-4)
        assert a.gradient_variance == pytest.approx(b.gradient_variance, rel=1e-4)
        assert a.gradient_sq_norm == pytest.approx(b.gradient_sq_norm, rel=1e-4)
        for device in got.devices:  # uniform: every device holds 2 TEBs, so every device measured
            assert {"compute_s", "send_s", "recv_s", "idle_s", "peak_rss_bytes", "peak_tensor_bytes"} <= set(
                device.measured
            ), device.device_id
            assert device.measured["schedule_1f1b"] == 1.0
            assert got.round.measured[device.device_id] == device.measured
        # the CU and the edge server have no DeviceRecord: their figures are in the round record
        participants = {f"c{n}-{role}" for n in range(2) for role in ("cu", "d0", "d1", "edge")}
        assert set(got.round.measured) == participants
        for n in range(2):
            for role in ("cu", "edge"):
                figures = got.round.measured[f"c{n}-{role}"]
                assert figures["compute_s"] > 0 and figures["peak_tensor_bytes"] > 0, (n, role, figures)
                assert figures["peak_rss_bytes"] >= figures["baseline_rss_bytes"] > 0, (n, role, figures)


@pytest.mark.distributed
def test_a_killed_rank_fails_the_round_and_the_cli_resumes_the_run(
    tmp_path: Path, uninterrupted: list[RoundResult]
) -> None:
    config = _run_config().model_copy(update={"executor": "distributed"})
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config.model_dump(mode="json", by_alias=True)))
    out = tmp_path / "out"
    command = [sys.executable, "-m", "collapipe_core", "run", str(path), "--out", str(out), "--json"]
    env = {**os.environ, FAULT_ENV: "5:1"}  # rank 5 = c1-d0 exits in the middle of round 1

    started = time.monotonic()
    failed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert failed.returncode != 0
    assert "round 1: rank 5 (c1-d0) died: exited with code 1" in failed.stderr, failed.stderr
    assert (
        time.monotonic() - started < 120
    )  # start-up and 2 rounds; a dead peer is seen at once, not at the timeout
    assert [r.round.round for r in read_json_lines(out / "records.jsonl")] == [0]

    env.pop(FAULT_ENV)
    resumed = subprocess.run(
        [*command, "--resume"], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert resumed.returncode == 0, resumed.stderr
    records = read_json_lines(out / "records.jsonl")
    assert [_comparable(r) for r in records] == [_comparable(r) for r in uninterrupted]
    summary = json.loads(resumed.stdout.splitlines()[-1])["summary"]
    assert summary["rounds_done"] == 3


@pytest.mark.distributed
def test_a_hung_rank_fails_the_round_within_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    config = _config("classifier", 1, 2, 4, training={"local_iterations": 1})
    bundle = load_dataset(config)
    options = DistributedOptions(timeout_s=4.0, failure_grace_s=1.0)
    monkeypatch.setenv(FAULT_ENV, "1:1:hang")  # c0-d0 stops in round 1's first step (read at start-up)
    executor = DistributedExecutor(config, bundle, options)
    executor.execute(_state(config, 0, "gpipe"), _decision([[2, 2]], 2))  # ranks up, round 0 fine
    started = time.monotonic()
    with pytest.raises(DistributedRoundError) as caught:
        executor.execute(_state(config, 1, "gpipe"), _decision([[2, 2]], 2))
    # not a speed check: without the timeouts this round would never end; the margin is generous
    assert time.monotonic() - started < options.timeout_s + options.failure_grace_s + 15.0
    assert (caught.value.failure.rank, caught.value.failure.kind) == (1, "unresponsive")
    assert caught.value.others and all(o.kind == "peer" for o in caught.value.others)
    assert "timed out on a peer" in str(caught.value)
