"""Student-t intervals without SciPy: the quantiles against a printed table, the interval's formula."""

from __future__ import annotations

import math
import statistics

import pytest

from collapipe_core.intervals import mean_interval, t_quantile, t_two_sided_probability

# two-sided 95 % (the 97.5 % quantile) and 99 % points of Student's t, from a printed table
T_TABLE = {
    (0.95, 1): 12.7062,
    (0.95, 2): 4.3027,
    (0.95, 3): 3.1824,
    (0.95, 4): 2.7764,
    (0.95, 9): 2.2622,
    (0.95, 29): 2.0452,
    (0.95, 120): 1.9799,
    (0.99, 1): 63.6567,
    (0.99, 5): 4.0321,
}


@pytest.mark.parametrize(("confidence", "df"), sorted(T_TABLE))
def test_t_quantiles_match_the_table(confidence: float, df: int) -> None:
    assert t_quantile(confidence, df) == pytest.approx(T_TABLE[confidence, df], abs=5e-5)


def test_the_cdf_has_the_closed_forms_of_one_and_two_degrees_of_freedom() -> None:
    for t in (0.1, 1.0, 3.0, 30.0):
        assert t_two_sided_probability(t, 1) == pytest.approx(2 * math.atan(t) / math.pi, rel=1e-14)
        assert t_two_sided_probability(t, 2) == pytest.approx(t / math.sqrt(2 + t * t), rel=1e-14)


def test_the_interval_is_mean_plus_minus_t_s_over_root_n() -> None:
    values = [1.0, 2.0, 4.0]
    interval = mean_interval(values)
    half = 4.302652729749464 * statistics.stdev(values) / math.sqrt(3)
    assert (interval.mean, interval.n) == (statistics.fmean(values), 3)
    assert (interval.low, interval.high) == pytest.approx(
        (interval.mean - half, interval.mean + half), rel=1e-12
    )
    assert mean_interval([5.0]) == type(interval)(5.0, None, None, 1)
    assert mean_interval([]).mean is None
