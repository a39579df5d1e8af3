"""The gradient noise scale estimator: its formulas, pooling and smoothing, and the online estimate of a
real model's training steps against a direct estimate from every sample's own gradient."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from collapipe_core import api
from collapipe_core.data import load_dataset
from collapipe_core.gradient_noise import (
    GradientNormSums,
    NoiseEstimate,
    NoiseScaleAverage,
    estimate_round,
    estimate_step,
    is_measured_iteration,
)
from collapipe_core.models import loss_for, source_mask, split_targets
from collapipe_core.pipeline import simulated
from collapipe_core.pipeline.gradient_norms import GradientNormProbe
from collapipe_core.pipeline.simulated import SimulatedExecutor, build_run_model
from collapipe_core.pipeline.split import accumulate_microbatches, split_model
from collapipe_core.state import build_environment, observe
from tests.core.builders import tiny_config

FloatArray = np.ndarray[Any, np.dtype[np.float64]]


def _sums(microbatch_gradients: FloatArray, microbatch_size: int) -> GradientNormSums:
    """What a step reports when micro-batch m's gradient is ``microbatch_gradients[m]`` (c_m = g_m / M)."""
    m = microbatch_gradients.shape[0]
    contributions = microbatch_gradients / m
    return GradientNormSums(
        microbatch_sq_sum=float((contributions**2).sum()),
        step_sq=float((contributions.sum(axis=0) ** 2).sum()),
        num_microbatches=m,
        microbatch_size=microbatch_size,
    )


def test_a_step_s_estimates_are_the_two_batch_size_formulas() -> None:
    rng = np.random.default_rng(0)
    g = rng.normal(0.3, 1.0, size=(5, 40))  # 5 micro-batch gradients of 40 parameters
    b = 4
    found = estimate_step(_sums(g, b))
    assert found is not None

    small, big = b, 5 * b
    g_small = float((g**2).sum(axis=1).mean())  # mean |g_m|²
    g_big = float((g.mean(axis=0) ** 2).sum())
    assert found.sq_norm == pytest.approx((big * g_big - small * g_small) / (big - small), rel=1e-12)
    assert found.trace == pytest.approx((g_small - g_big) / (1 / small - 1 / big), rel=1e-12)
    # tr(Σ) is b × the micro-batch gradients' sample variance: never negative
    assert found.trace == pytest.approx(b * g.var(axis=0, ddof=1).sum(), rel=1e-12)


def test_one_micro_batch_estimates_nothing_and_steps_of_different_shapes_do_not_add() -> None:
    assert estimate_step(GradientNormSums(1.0, 1.0, 1, 8)) is None
    with pytest.raises(ValueError, match="different steps"):
        _ = GradientNormSums(1.0, 1.0, 2, 8) + GradientNormSums(1.0, 1.0, 4, 8)


def test_squared_norms_of_disjoint_parameters_add() -> None:
    rng = np.random.default_rng(1)
    g = rng.normal(size=(3, 30))
    whole = _sums(g, 2)
    parts = _sums(g[:, :10], 2) + _sums(g[:, 10:25], 2) + _sums(g[:, 25:], 2)
    assert parts.microbatch_sq_sum == pytest.approx(whole.microbatch_sq_sum, rel=1e-12)
    assert parts.step_sq == pytest.approx(whole.step_sq, rel=1e-12)


def test_a_round_averages_each_cluster_s_steps_then_weights_clusters_by_data() -> None:
    a = GradientNormSums(2.0, 3.0, 2, 4)  # trace 8, sq_norm 2
    b = GradientNormSums(2.5, 5.0, 2, 4)  # trace 0, sq_norm 5
    c = GradientNormSums(3.0, 2.0, 4, 1)  # trace 40/3, sq_norm -4/3
    single = GradientNormSums(9.0, 9.0, 1, 4)  # M = 1: left out
    assert estimate_step(a) == NoiseEstimate(8.0, 2.0)
    assert estimate_step(b) == NoiseEstimate(0.0, 5.0)

    found = estimate_round([[a, b, single], [c], [single]], [100, 300, 600])
    assert found is not None
    assert found.trace == pytest.approx((100 * 4.0 + 300 * 40 / 3) / 400)
    assert found.sq_norm == pytest.approx((100 * 3.5 + 300 * -4 / 3) / 400)
    assert estimate_round([[single], []], [1, 1]) is None
    with pytest.raises(ValueError, match="data sizes"):
        estimate_round([[a]], [1, 2])


def test_the_noise_scale_is_the_ratio_of_the_two_running_averages() -> None:
    average = NoiseScaleAverage(decay=0.5)
    assert average.noise_scale is None and average.averages() is None
    average = average.update(None)  # a round without an estimate changes nothing
    assert average.num_estimates == 0

    average = average.update(NoiseEstimate(trace=8.0, sq_norm=2.0))
    assert average.noise_scale == pytest.approx(4.0)  # the first estimate's own ratio
    average = average.update(NoiseEstimate(trace=20.0, sq_norm=4.0))
    # the averages 0.5·(0.5·8) + 0.5·20 and 0.5·(0.5·2) + 0.5·4: the corrections (1 − 0.5²) cancel
    assert average.noise_scale == pytest.approx(12.0 / 2.5)
    averages = average.averages()
    assert averages is not None
    assert (averages.trace, averages.sq_norm) == pytest.approx((12.0 / 0.75, 2.5 / 0.75))
    average = average.update(NoiseEstimate(trace=0.0, sq_norm=-10.0))
    assert average.noise_scale is None  # the averaged |G|² is negative: not resolved
    assert NoiseScaleAverage.from_json(average.to_json()) == average


def test_a_round_measures_every_other_local_iteration_from_the_first() -> None:
    assert [i for i in range(5) if is_measured_iteration(i)] == [0, 2, 4]


def test_the_simulated_executor_s_estimate_is_that_of_its_measured_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = tiny_config(training={"local_iterations": 3})
    bundle = load_dataset(config)
    executor = SimulatedExecutor(config, bundle)
    found: list[GradientNormSums] = []

    class Recording(GradientNormProbe):
        def finish_step(self, num_microbatches: int, microbatch_size: int) -> GradientNormSums:
            sums = super().finish_step(num_microbatches, microbatch_size)
            found.append(sums)
            return sums

    monkeypatch.setattr(simulated, "GradientNormProbe", Recording)
    env = build_environment(config, bundle.src_vocab_size, bundle.tgt_vocab_size, None)
    state = observe(env, 0)
    outcome = executor.execute(state, api.decide("uniform", state))
    assert len(found) == 2 * 2  # local iterations 0 and 2 of each of the 2 clusters
    sizes = [len(shard) for shard in bundle.shards]
    assert outcome.gradient_noise == estimate_round([found[:2], found[2:]], sizes)


# -- a real model's training steps against the gradients of every sample ------------------------------

POOL = 512  # samples; the steps draw their micro-batches from them with replacement
STEPS, MICROBATCHES, MICROBATCH_SIZE = 100, 8, 16


def test_online_estimates_of_training_steps_match_a_direct_estimate_from_every_sample_s_gradient() -> None:
    """The direct estimate: each of POOL samples' own gradient (one backward each, no micro-batches);
    tr(Σ) = the mean of |g_i − G|², |G|² = |G|², G the mean (the pool is the distribution the steps
    sample). The online one: STEPS steps of the split model, M micro-batches of b drawn from the pool,
    the probe's sums per step and the estimator's unbiased estimates averaged over the steps.

    Exact part: every step's sums equal those computed from the per-sample gradients of its own
    micro-batches (to float rounding). Statistical part: tolerances of about three standard deviations
    of the online average at this number of steps (tr(Σ) ±15 %, |G|² ±25 %, B_noise ±30 %; measured by
    redrawing the steps with 30 seeds from the same per-sample gradients: 4.7 %, 7.1 %, ~10 %)."""
    config = tiny_config(network={"num_clusters": 1}, data={"samples_per_cluster": POOL})
    bundle = load_dataset(config)
    model = build_run_model(config, bundle, None)
    loss = loss_for(config.model.kind, pad_id=bundle.pad_id)
    src, tgt = bundle.shards[0].src, bundle.shards[0].tgt
    mask = source_mask(src, bundle.pad_id)
    params = list(model.parameters())

    per_sample = []
    for i in range(POOL):
        dec_in, labels = split_targets(model.kind, tgt[i : i + 1])
        grads = torch.autograd.grad(loss.sum(model(src[i : i + 1], mask[i : i + 1], dec_in), labels), params)
        per_sample.append(torch.cat([g.reshape(-1) for g in grads]).double())
    samples = torch.stack(per_sample).numpy()  # (POOL, parameters)
    mean = samples.mean(axis=0)
    direct = NoiseEstimate(
        trace=float(((samples - mean) ** 2).sum(axis=1).mean()), sq_norm=float(mean @ mean)
    )

    generator = torch.Generator().manual_seed(0)
    stages = split_model(model, [2, 0, 2])
    steps = []
    with GradientNormProbe(model.parameters()) as probe:
        for _ in range(STEPS):
            idx = torch.randint(POOL, (MICROBATCHES * MICROBATCH_SIZE,), generator=generator)
            model.zero_grad(set_to_none=True)
            probe.start_step()
            accumulate_microbatches(stages, loss, src[idx], mask[idx], tgt[idx], MICROBATCHES)
            sums = probe.finish_step(MICROBATCHES, MICROBATCH_SIZE)
            expected = _sums(
                samples[idx.numpy()].reshape(MICROBATCHES, MICROBATCH_SIZE, -1).mean(axis=1), MICROBATCH_SIZE
            )
            assert sums.microbatch_sq_sum == pytest.approx(expected.microbatch_sq_sum, rel=1e-4)
            assert sums.step_sq == pytest.approx(expected.step_sq, rel=1e-4)
            steps.append(sums)

    online = estimate_round([steps], [POOL])
    assert online is not None
    assert online.trace == pytest.approx(direct.trace, rel=0.15)
    assert online.sq_norm == pytest.approx(direct.sq_norm, rel=0.25)
    assert online.trace / online.sq_norm == pytest.approx(direct.trace / direct.sq_norm, rel=0.30)
