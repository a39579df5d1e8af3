"""A cluster's round on the timeline: the redistribution phase, then the first iteration after it."""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel import build_problem, evaluate
from collapipe_core.costmodel.chain import cluster_round_timeline, cluster_stages
from collapipe_core.costmodel.closed_form import stage_times
from collapipe_core.costmodel.timeline import simulate
from collapipe_core.decision import Decision
from collapipe_core.state import Placement, build_environment, observe
from tests.core.builders import tiny_config


def test_the_redistribution_phase_comes_before_the_first_iteration() -> None:
    env = build_environment(tiny_config(), 40, 2, None)
    before = Placement(
        num_blocks=np.array([[3, 0, 1], [1, 1, 2]]),
        rate_bps=np.full((2, 3), 2.0e6),
        power_w=np.full((2, 3), 0.1),
    )
    state = observe(env, 1, previous=before)
    decision = Decision.from_arrays([[1, 2, 1], [2, 1, 1]], np.full((2, 3), 1 / 3), np.full((2, 3), 0.2), 2)
    ev = evaluate(state, decision)
    prof = state.profile
    model_s = 8.0 * 4 * (prof.embedding_params + 4 * prof.block_params) / env.scenario.cu_uplink_rate_bps
    state_bits = 2 * 8.0 * prof.block_params * 4  # AdamW: two fp32 moments per weight
    upload_s = 2 * state_bits / 2.0e6  # c0-d0 hands TEBs 1 and 2 over to c0-d1

    timeline = cluster_round_timeline(state, decision, 0)
    assert timeline.redistribution_s == pytest.approx(ev.redistribution_s[0], rel=1e-12)
    phase = [e for e in timeline.events if e.phase == "redistribution"]
    pipeline = [e for e in timeline.events if e.phase == "pipeline"]
    by_sender = {(e.participant, e.peer): e for e in phase if e.kind == "send"}
    assert set(by_sender) == {
        ("edge", "cu"),
        ("c0-d0", "cu"),
        ("cu", "c0-d0"),
        ("cu", "c0-d1"),
        ("cu", "c0-d2"),
    }
    assert (by_sender["edge", "cu"].start_s, by_sender["edge", "cu"].end_s) == pytest.approx((0.0, model_s))
    state_upload = by_sender["c0-d0", "cu"]
    assert (state_upload.start_s, state_upload.end_s) == pytest.approx((model_s, model_s + upload_s))
    assert state_upload.label == "optimizer state of 2 TEBs"
    assert by_sender["cu", "c0-d1"].label == "weights of 2 TEBs + optimizer state of 2 TEBs"
    assert by_sender["cu", "c0-d1"].start_s == pytest.approx(model_s + upload_s)
    assert max(e.end_s for e in phase) == pytest.approx(timeline.redistribution_s)
    # every transfer shows on both ends
    assert sum(e.kind == "receive" for e in phase) == len(by_sender)

    # the iteration is the one the chain's schedule simulates, shifted by R_n
    pr, delta = build_problem(state), decision.num_blocks()
    u = np.where(delta > 0, pr.time_per_bit(decision.bandwidth_share(), decision.power_w()), 0.0)
    times = stage_times(pr, delta, decision.num_microbatches(), u)
    iteration = simulate(cluster_stages(times, decision, 0), 2, "gpipe")
    assert len(pipeline) == len(iteration.events)
    assert min(e.start_s for e in pipeline) == pytest.approx(timeline.redistribution_s)
    assert timeline.makespan_s == iteration.makespan_s
    shifted = sorted(
        (e.participant, e.kind, e.microbatch, e.start_s - timeline.redistribution_s) for e in pipeline
    )
    expected = sorted((e.participant, e.kind, e.microbatch, e.start_s) for e in iteration.events)
    for got, want in zip(shifted, expected, strict=True):
        assert got[:3] == want[:3] and got[3] == pytest.approx(want[3], abs=1e-12)
