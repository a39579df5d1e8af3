"""The objective's convergence term under the two readings of micro-batching.

With a fixed batch (``training.batch_size`` B) a step trains N·B samples over the clusters whatever M
is, so the term G (σ²/B_step or B_noise/B_step) does not change with M: decisions that differ only in M
differ in latency and energy, never in G. With a fixed micro-batch b a step trains b·Σ_n M_n samples and
G falls as 1/Σ_n M_n.
"""

from __future__ import annotations

import numpy as np
import pytest

from collapipe_core.costmodel import build_problem, evaluate
from collapipe_core.costmodel.evaluation import Evaluation
from collapipe_core.decision import Decision
from collapipe_core.state import RoundState, build_environment, observe
from tests.core.builders import tiny_config

BATCH = 8  # B
MICRO = 2  # b of the fixed micro-batch reading
SEGMENTS = [[2, 0, 2], [1, 2, 1]]  # 2 clusters × 3 devices, 4 TEBs
CHOICES = [[1, 1], [2, 2], [4, 4], [8, 8], [1, 8], [4, 2]]  # M per cluster; all divide B


def _state(reading: str, convergence: str) -> RoundState:
    training = (
        {"batch_size": BATCH, "microbatch_size": None} if reading == "batch" else {"microbatch_size": MICRO}
    )
    config = tiny_config(
        training={**training, "local_iterations": 2},
        scheduler={
            "V": 3.0,
            "lambda": 0.5,
            "gradient_variance": 2.0,
            "convergence": convergence,
            "gradient_noise_scale": 40.0,
            "max_microbatches": 8,
        },
    )
    return observe(build_environment(config, 40, 2, None), 0)


def _evaluate(state: RoundState, micro: list[int]) -> Evaluation:
    shares = [[1.0 / sum(b > 0 for b in row) if b else 0.0 for b in row] for row in SEGMENTS]
    power = [[0.1 if b else 0.0 for b in row] for row in SEGMENTS]
    decision = Decision.from_arrays(SEGMENTS, shares, power, np.asarray(micro))
    result = evaluate(state, decision)
    assert not result.violations, result.violations
    return result


def test_with_a_fixed_batch_the_variance_term_does_not_depend_on_m() -> None:
    state = _state("batch", "variance")
    results = [_evaluate(state, m) for m in CHOICES]
    g = 2.0 / (2 * BATCH)  # σ²/(N·B)
    for m, result in zip(CHOICES, results, strict=True):
        assert result.convergence == pytest.approx(g, rel=1e-15), m
        assert result.objective_convergence == pytest.approx(3.0 * 0.5 * g, rel=1e-15), m
    assert len({r.latency_s for r in results}) > 1  # M changed the round all the same
    assert build_problem(state).convergence_gain == 0.0  # the solver steps see no gain from M either


def test_with_a_fixed_batch_the_noise_scale_term_depends_on_m_only_through_the_latency() -> None:
    state = _state("batch", "noise_scale")
    g = 40.0 / (2 * BATCH)  # B_noise/(N·B)
    for m in CHOICES:
        result = _evaluate(state, m)
        assert result.convergence == pytest.approx(g, rel=1e-15), m
        assert result.objective_convergence == pytest.approx(result.objective_latency * g, rel=1e-12), m


@pytest.mark.parametrize("convergence", ["variance", "noise_scale"])
def test_with_a_fixed_micro_batch_the_term_falls_with_the_micro_batches(convergence: str) -> None:
    state = _state("micro", convergence)
    scale = 2.0 if convergence == "variance" else 40.0  # σ² or B_noise
    results = {tuple(m): _evaluate(state, m) for m in CHOICES}
    for m, result in results.items():
        assert result.convergence == pytest.approx(scale / (MICRO * sum(m)), rel=1e-15), m
    assert len({r.convergence for r in results.values()}) == len({sum(m) for m in CHOICES}) > 1
    if convergence == "variance":  # noise_scale's gain needs a latency estimate, which a solver sets
        assert build_problem(state).convergence_gain > 0.0
