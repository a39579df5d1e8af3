"""Means with Student-t confidence intervals over seeds (no SciPy: the t distribution's CDF
for integer degrees of freedom has a closed form, inverted here by bisection).

For ν degrees of freedom and θ = atan(t / √ν), P(|T| ≤ t) is (Abramowitz & Stegun 26.7.3–4)

    ν odd:   (2/π)·(θ + sin θ·(cos θ + (2/3)cos³θ + … + (2·4…(ν−3))/(1·3…(ν−2))·cos^(ν−2)θ))
    ν even:  sin θ·(1 + (1/2)cos²θ + (1·3)/(2·4)cos⁴θ + … + (1·3…(ν−3))/(2·4…(ν−2))·cos^(ν−2)θ)

(the sum is empty for ν = 1 and the bracket is 1 for ν = 2).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

CONFIDENCE = 0.95


def t_two_sided_probability(t: float, df: int) -> float:
    """P(|T| ≤ t) for Student's t with ``df`` ≥ 1 degrees of freedom, t ≥ 0."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    theta = math.atan(t / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        term, total = math.cos(theta), 0.0
        for k in range(1, (df - 1) // 2 + 1):  # cos θ·(2k−2)!!/(2k−1)!!·cos^(2k−2)θ
            total += term
            term *= cos2 * (2 * k) / (2 * k + 1)
        return (2 / math.pi) * (theta + sin * total)
    term, total = 1.0, 0.0
    for k in range(1, df // 2 + 1):  # (2k−3)!!/(2k−2)!!·cos^(2k−2)θ
        total += term
        term *= cos2 * (2 * k - 1) / (2 * k)
    return sin * total


def t_quantile(confidence: float, df: int) -> float:
    """t such that P(|T| ≤ t) = ``confidence`` (e.g. 0.95 → the 97.5 % quantile), to 1e-12."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence}")
    low, high = 0.0, 1.0
    while t_two_sided_probability(high, df) < confidence:
        high *= 2
    while high - low > 1e-12 * max(1.0, high):
        middle = (low + high) / 2
        if t_two_sided_probability(middle, df) < confidence:
            low = middle
        else:
            high = middle
    return (low + high) / 2


@dataclass(frozen=True)
class Interval:
    """The mean of ``n`` values and its Student-t confidence interval (None below two values)."""

    mean: float | None
    low: float | None
    high: float | None
    n: int


def mean_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Mean ± t(confidence, n−1)·s/√n of ``values`` (s: the sample standard deviation)."""
    n = len(values)
    if n == 0:
        return Interval(None, None, None, 0)
    mean = statistics.fmean(values)
    if n == 1:
        return Interval(mean, None, None, 1)
    half = t_quantile(confidence, n - 1) * statistics.stdev(values) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)
