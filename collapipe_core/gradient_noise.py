"""The gradient noise scale B_noise = tr(Σ)/|G|², estimated online from the gradient norms training has.

McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training" (2018), §2 and
appendix A.1. Σ is the covariance of one sample's gradient and G the true gradient. The mean gradient
G_B of B samples has E|G_B|² = |G|² + tr(Σ)/B, so the squared norms of gradients over two batch sizes
give two equations. A pipeline step has both: B_small = b (one micro-batch) and B_big = M·b (the
step's M micro-batches), with

    |G_small|² = (1/M)·Σ_m |g_m|²        (the mean over the step's micro-batch gradients g_m)
    |G_big|²   = |(1/M)·Σ_m g_m|²         (the accumulated gradient)

and the unbiased estimates (for M ≥ 2)

    |G|²  ≈ (B_big·|G_big|² − B_small·|G_small|²) / (B_big − B_small)
    tr(Σ) ≈ (|G_small|² − |G_big|²) / (1/B_small − 1/B_big)
    B_noise = tr(Σ) / |G|²                (in samples)

What the executors measure (:class:`GradientNormSums`). A step's gradient accumulates, per
micro-batch m, c_m = ∇(loss.sum(micro-batch m) / N), N the step's number of loss terms
(:mod:`collapipe_core.models.losses`). The micro-batch gradient is taken as g_m = M·c_m: the gradient of
its loss terms divided by the step's mean number of terms per micro-batch — the micro-batch's own mean
loss when every micro-batch has as many terms (classifiers, unpadded windows), a token-weighted variant
otherwise — so that the accumulated gradient is exactly their mean. Each step reports

    S_micro = Σ_m |c_m|²  and  S_step = |Σ_m c_m|²,   i.e. |G_small|² = M·S_micro, |G_big|² = S_step,

and in these terms

    tr(Σ) ≈ b·M·(M·S_micro − S_step) / (M − 1)   (b × the sample variance of the g_m: never negative)
    |G|²  ≈ M·(S_step − S_micro) / (M − 1)        (can be negative when noise dominates)

Squared norms add over disjoint sets of parameters: each pipeline stage reports the sums of its own
parameters (a parameter two stages share counted once) and the stages' sums are added
(:meth:`GradientNormSums.__add__`). A step with M = 1 has one batch size only and estimates nothing.

Measured steps. The executors measure the steps of a cluster's local iterations 0, k, 2k, … of each
round, k = :data:`MEASUREMENT_INTERVAL` (:func:`is_measured_iteration`), and train the others
without reading any norm: every round that trains has a measured step per cluster (iteration 0), and
each measured step's estimates are as unbiased as any step's, so fewer of them only make the average
noisier. Reading the norms costs passes over the gradient that a large model pays in memory traffic
(bench/training_overhead.py).

Clusters. Each cluster trains its own replica on its own shard, from the same global weights, before
FedAvg; the micro-batch count M acts on these local steps. A round's estimate
(:func:`estimate_round`) is the mean over a cluster's measured steps of the two unbiased estimates,
then the data-size weighted mean over the clusters (FedAvg's weights) that ran M ≥ 2: tr(Σ) and |G|²
of the clusters' local steps. With non-IID shards this is not the noise scale of the pooled data (whose
gradient is the mean of the clusters' and can be much shorter than each).

Smoothing (:class:`NoiseScaleAverage`): as McCandlish et al. do, exponential moving averages of tr(Σ)
and |G|² separately, over rounds, and their ratio. B_noise is None before any round estimated it and
while the averaged |G|² is not positive (the gradient's signal not yet resolved from its noise).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

SMOOTHING_DECAY = 0.9
"""Per round: weight of the running averages against the round's estimate (about 10 rounds' memory)."""

MEASUREMENT_INTERVAL = 2
"""Local iterations from one measured step to the next (:func:`is_measured_iteration`): every other one,
which halves the measurement's cost where I ≥ 2 and keeps one step in two for the estimate."""


def is_measured_iteration(local_iteration: int) -> bool:
    """Whether the step of this local iteration (0, 1, … within a round and cluster) is measured."""
    return local_iteration % MEASUREMENT_INTERVAL == 0


@dataclass(frozen=True)
class GradientNormSums:
    """One optimizer step's squared gradient norms over a set of parameters (a stage, or a whole model)."""

    microbatch_sq_sum: float  # S_micro = Σ_m |c_m|², c_m micro-batch m's contribution to the gradient
    step_sq: float  # S_step = |Σ_m c_m|², the accumulated gradient's
    num_microbatches: int  # M
    microbatch_size: int  # b, samples

    def __add__(self, other: GradientNormSums) -> GradientNormSums:
        """The sums over both parameter sets (disjoint, of the same step)."""
        if (self.num_microbatches, self.microbatch_size) != (other.num_microbatches, other.microbatch_size):
            raise ValueError(
                f"cannot add the gradient norms of different steps: M·b = {self.num_microbatches}·"
                f"{self.microbatch_size} and {other.num_microbatches}·{other.microbatch_size}"
            )
        return replace(
            self,
            microbatch_sq_sum=self.microbatch_sq_sum + other.microbatch_sq_sum,
            step_sq=self.step_sq + other.step_sq,
        )


@dataclass(frozen=True)
class NoiseEstimate:
    """Unbiased estimates of tr(Σ) (per sample) and |G|²; the ratio of their expectations is B_noise."""

    trace: float  # tr(Σ)
    sq_norm: float  # |G|²


def estimate_step(sums: GradientNormSums) -> NoiseEstimate | None:
    """The step's unbiased tr(Σ) and |G|² (module docstring); None when M = 1."""
    m, b = sums.num_microbatches, sums.microbatch_size
    if m < 2:
        return None
    return NoiseEstimate(
        trace=b * m * (m * sums.microbatch_sq_sum - sums.step_sq) / (m - 1),
        sq_norm=m * (sums.step_sq - sums.microbatch_sq_sum) / (m - 1),
    )


def estimate_round(
    steps: Sequence[Sequence[GradientNormSums]], data_sizes: Sequence[float]
) -> NoiseEstimate | None:
    """The round's estimate from each cluster's steps (``steps[n]``: cluster n's, in order).

    The mean over a cluster's steps, then the mean over clusters weighted by ``data_sizes``; steps with
    M = 1 are left out and so is a cluster with none left. None when no step had M ≥ 2.
    """
    if len(steps) != len(data_sizes):
        raise ValueError(f"{len(steps)} clusters' steps but {len(data_sizes)} data sizes")
    trace = sq_norm = weight = 0.0
    for cluster_steps, size in zip(steps, data_sizes, strict=True):
        found = [e for e in map(estimate_step, cluster_steps) if e is not None]
        if not found or size <= 0:
            continue
        trace += size * sum(e.trace for e in found) / len(found)
        sq_norm += size * sum(e.sq_norm for e in found) / len(found)
        weight += size
    if weight == 0.0:
        return None
    return NoiseEstimate(trace=trace / weight, sq_norm=sq_norm / weight)


@dataclass(frozen=True)
class NoiseScaleAverage:
    """Exponential moving averages of tr(Σ) and |G|² over rounds; B_noise is their ratio.

    Both averages start at 0 and are not bias-corrected: the correction, (1 − decay^k) after k
    estimates, is the same for both and cancels in the ratio. A round without an estimate changes
    nothing.
    """

    trace: float = 0.0
    sq_norm: float = 0.0
    num_estimates: int = 0
    decay: float = SMOOTHING_DECAY

    def update(self, estimate: NoiseEstimate | None) -> NoiseScaleAverage:
        if estimate is None:
            return self
        keep, add = self.decay, 1.0 - self.decay
        return replace(
            self,
            trace=keep * self.trace + add * estimate.trace,
            sq_norm=keep * self.sq_norm + add * estimate.sq_norm,
            num_estimates=self.num_estimates + 1,
        )

    @property
    def noise_scale(self) -> float | None:
        """B_noise in samples; None before the first estimate and while the averaged |G|² ≤ 0."""
        if self.num_estimates == 0 or self.sq_norm <= 0.0:
            return None
        return self.trace / self.sq_norm

    def averages(self) -> NoiseEstimate | None:
        """The averaged tr(Σ) and |G|², bias-corrected (divided by 1 − decay^k after k estimates)."""
        if self.num_estimates == 0:
            return None
        correction = 1.0 - self.decay**self.num_estimates
        return NoiseEstimate(trace=self.trace / correction, sq_norm=self.sq_norm / correction)

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "sq_norm": self.sq_norm,
            "num_estimates": self.num_estimates,
            "decay": self.decay,
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> NoiseScaleAverage:
        return NoiseScaleAverage(
            trace=float(data["trace"]),
            sq_norm=float(data["sq_norm"]),
            num_estimates=int(data["num_estimates"]),
            decay=float(data["decay"]),
        )
