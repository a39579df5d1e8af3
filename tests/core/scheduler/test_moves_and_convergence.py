"""The schedulers with a previous placement (moved TEBs cost their transfers) and with the noise-scale
convergence term: the closed form is still the cost model, DSSDA still tracks the exhaustive optimum, and
it weighs what moving TEBs costs."""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import pytest

from collapipe_core.costmodel import evaluate
from collapipe_core.costmodel.closed_form import costs
from collapipe_core.costmodel.problem import build_problem
from collapipe_core.scheduler import dssda, optimal
from collapipe_core.scheduler.candidates import RowSet, best_moves, segment_step
from collapipe_core.state import Placement, RoundState
from tests.core.scheduler.instances import random_decision, random_instance, random_round

Term = Literal["variance", "noise_scale"]


def _with(state: RoundState, rng: np.random.Generator, term: Term) -> RoundState:
    """``state`` after a random previous round (segments on any devices, random rates and powers), with the
    convergence term ``term`` and a measured B_noise."""
    n, k = state.scenario.shape
    blocks = state.profile.num_blocks
    previous = np.stack([rng.multinomial(blocks, rng.dirichlet(np.ones(k))) for _ in range(n)])
    placement = Placement(
        num_blocks=previous.astype(np.int64),
        rate_bps=np.where(previous > 0, 10 ** rng.uniform(5, 7, (n, k)), 0.0),
        power_w=np.where(previous > 0, rng.uniform(0.01, 0.3, (n, k)), 0.0),
    )
    settings = dataclasses.replace(state.settings, convergence=term, gradient_noise_scale=None)
    env = dataclasses.replace(state.env, settings=settings)
    noise = float(10 ** rng.uniform(0, 3))
    return dataclasses.replace(state, env=env, previous=placement, measured_noise_scale=noise)


@pytest.mark.parametrize("term", ["variance", "noise_scale"])
@pytest.mark.parametrize("moves", [False, True])
def test_the_closed_form_is_the_cost_model_with_or_without_moves_and_either_term(
    term: Term, moves: bool
) -> None:
    rng = np.random.default_rng(23)
    moved = 0
    for seed in range(40):
        state = _with(random_instance(seed), rng, term)
        if not moves:
            state = dataclasses.replace(state, previous=None)
        pr = build_problem(state)
        decision = random_decision(state, rng)
        delta, beta, power, micro = (
            decision.num_blocks(),
            decision.bandwidth_share(),
            decision.power_w(),
            decision.num_microbatches(),
        )
        ev = evaluate(state, decision)
        c = costs(pr, delta, micro, pr.time_per_bit(beta, power), power)
        assert float(c.objective) == pytest.approx(ev.objective, rel=1e-12)
        assert float(c.latency_s) == pytest.approx(ev.latency_s, rel=1e-12)
        assert np.allclose(c.energy_j, ev.energy_j, rtol=1e-12, atol=0.0)
        assert np.allclose(c.train_s, ev.redistribution_s + state.settings.local_iterations * ev.pipeline_s)
        moved += int(ev.blocks_moved.sum())
    assert (moved > 0) == moves  # the draws move TEBs


def _ratios(term: Term, moves: bool) -> np.ndarray:
    """DSSDA's objective ÷ optimal's on 60 random small rounds (the feasible ones)."""
    rng = np.random.default_rng(29)
    ratios = []
    for seed in range(60):
        state = _with(random_instance(seed), rng, term)
        if not moves:
            state = dataclasses.replace(state, previous=None)
        try:
            _, best, _ = optimal.solve(state)
        except ValueError:
            continue
        decision, value = dssda.solve(state)
        assert evaluate(state, decision).objective == pytest.approx(value, rel=1e-9)
        ratios.append(value / best)
    assert len(ratios) >= 40
    assert min(ratios) >= 1 - 1e-6  # the optimum is a lower bound
    return np.array(ratios)


def test_dssda_stays_within_one_percent_of_the_optimum_with_the_noise_scale_term() -> None:
    ratios = _ratios("noise_scale", moves=False)
    assert ratios.max() <= 1.01, f"worst DSSDA/optimal ratio {ratios.max():.4f}"


@pytest.mark.parametrize("term", ["variance", "noise_scale"])
def test_dssda_tracks_the_optimum_when_blocks_can_move(term: Term) -> None:
    """With a previous placement the link step's bandwidth structures see the download of moved optimizer
    state at δ, not at δ + in·B_opt/B (its scoring sees it exactly): measured here, geometric mean 1.002
    and worst 1.06 (variance) / 1.07 (noise scale) over 46 rounds, 2 of them above 1.01."""
    ratios = _ratios(term, moves=True)
    assert float(np.exp(np.mean(np.log(ratios)))) <= 1.005
    assert ratios.max() <= 1.1, f"worst DSSDA/optimal ratio {ratios.max():.4f}"


def test_dssda_weighs_what_moving_blocks_costs() -> None:
    """Told where the TEBs are, DSSDA's round is no worse than the decision it takes without knowing (which
    pays for the moves it did not see) — to the descent's stopping tolerance, since both are local searches
    — and it moves fewer TEBs over the rounds."""
    rng = np.random.default_rng(31)
    informed_moves = blind_moves = 0
    for seed in range(40):
        base = random_instance(seed)
        if base.scenario.shape[1] < 2 or base.profile.num_blocks < 2:
            continue
        state = _with(base, rng, "variance")
        try:
            informed, value = dssda.solve(state)
            blind = dssda.solve(dataclasses.replace(state, previous=None))[0]
        except ValueError:
            continue
        blind_ev = evaluate(state, blind)
        assert value <= blind_ev.objective * (1 + dssda.TOLERANCE), seed
        informed_moves += int(evaluate(state, informed).blocks_moved.sum())
        blind_moves += int(blind_ev.blocks_moved.sum())
    assert informed_moves < blind_moves, (informed_moves, blind_moves)


def test_moves_are_ranked_with_the_upload_their_previous_holders_would_pay() -> None:
    """A move that gives a TEB back to its previous holder saves that holder's upload of the TEB's optimizer
    state, which the segment models do not see: over a slow previous link from a device with a long queue
    that upload outweighs everything else, so the move must be among the best ranked (ranked by the
    models alone it is not: the long queue makes every TEB on that device look dear)."""
    for seed in range(20):
        state = random_round(seed, 1, 4)
        blocks = state.profile.num_blocks
        if not state.available.all() or (build_problem(state).memory_caps(np.ones(1)) < blocks).any():
            continue
        now = np.array([[0, blocks - 2, 1, 1]])
        before = np.array([[1, blocks - 3, 1, 1]])  # TEB 0 was on device 0
        queues = state.queues.copy()
        queues[0, 0] = 1e3 * max(float(queues.max()), 1.0)
        placement = Placement(
            num_blocks=before, rate_bps=np.array([[1e3, 1e6, 1e6, 1e6]]), power_w=np.full((1, 4), 0.1)
        )
        pr = build_problem(dataclasses.replace(state, previous=placement, queues=queues))
        share = np.where(now > 0, 1 / 3, 0.0)
        solution = (now, np.ones(1, dtype=np.int64), share, np.where(now > 0, pr.max_power_w, 0.0))
        rows = [RowSet(np.ones(1), np.ones(1))]
        _, models, at_current = segment_step(pr, solution, now, rows, False)
        ranked = best_moves(pr, solution, models, at_current)
        assert np.any(np.all(ranked.delta == before, axis=1)), ranked.delta
        return
    pytest.fail("no seed gave four available devices that each hold the encoder")
