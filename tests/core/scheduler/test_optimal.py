"""The exhaustive reference: its link solve is exact and its search misses no candidate."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from collapipe_core.costmodel import evaluate
from collapipe_core.costmodel.problem import build_problem
from collapipe_core.decision import Decision
from collapipe_core.scheduler import get_policy, optimal
from collapipe_core.scheduler.optimal_links import solve_links
from tests.core.scheduler.instances import random_instance


def test_barrier_link_solution_is_what_evaluate_scores_and_no_perturbation_beats_it() -> None:
    rng = np.random.default_rng(3)
    state = random_instance(0)
    pr = build_problem(state)
    delta, micro, _ = optimal.cluster_candidates(pr, 0)
    pick = rng.choice(delta.shape[0], min(12, delta.shape[0]), replace=False)
    beta, power, value = solve_links(pr, delta[pick][:, None], micro[pick][:, None])
    for i, c in enumerate(pick):
        decision = Decision.from_arrays(delta[c][None], beta[i], power[i], micro[c])
        ev = evaluate(state, decision)
        assert ev.feasible
        assert ev.objective == pytest.approx(value[i], rel=1e-8)
        on = delta[c][None] > 0
        for _ in range(100):
            b = np.where(on, beta[i] * np.exp(rng.normal(0, 0.05, on.shape)), 0.0)
            b = b / b.sum()
            p = np.where(
                on, np.minimum(power[i] * np.exp(rng.normal(0, 0.05, on.shape)), pr.max_power_w), 0.0
            )
            trial = evaluate(state, Decision.from_arrays(delta[c][None], b, p, micro[c]))
            assert trial.objective >= ev.objective * (1 - 1e-7)


def test_branch_and_bound_returns_the_best_of_all_candidates() -> None:
    for seed in (1, 2, 4, 6, 9):
        state = random_instance(seed)
        pr = build_problem(state)
        decision, value, _ = optimal.solve(state)
        per = [optimal.cluster_candidates(pr, n) for n in range(pr.shape[0])]
        index = np.array(list(itertools.product(*(range(d.shape[0]) for d, _, _ in per))))
        delta = np.stack([per[n][0][index[:, n]] for n in range(pr.shape[0])], axis=1)
        micro = np.stack([per[n][1][index[:, n]] for n in range(pr.shape[0])], axis=1)
        every = np.concatenate(
            [solve_links(pr, delta[i : i + 64], micro[i : i + 64])[2] for i in range(0, len(delta), 64)]
        )
        assert value == pytest.approx(every.min(), rel=1e-9)
        assert evaluate(state, decision).objective == pytest.approx(value, rel=1e-8)


def test_compositions_cover_every_placement_on_available_devices() -> None:
    rows = optimal.compositions(4, np.array([True, False, True, True]))
    assert len(rows) == 15  # C(4 + 3 − 1, 3 − 1)
    assert np.all(rows.sum(axis=1) == 4) and np.all(rows[:, 1] == 0)
    assert len({tuple(r) for r in rows}) == 15


def test_optimal_is_a_registered_policy_and_refuses_large_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    decision = get_policy("optimal").decide(random_instance(1))
    assert evaluate(random_instance(1), decision).feasible
    monkeypatch.setattr(optimal, "MAX_CANDIDATES", 1)
    with pytest.raises(ValueError, match="small instances"):
        optimal.solve(random_instance(1))
