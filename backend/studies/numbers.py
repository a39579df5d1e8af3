"""Numbers with their units as the dashboard writes them (frontend/js/format.js), for the HTML report:
three significant digits with an SI prefix for seconds, joules, watts, hertz and bit/s, binary units
for bytes, an exponent for plain numbers below 10⁻³ or from 10⁶ on."""

from __future__ import annotations

import math

SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"))
SI_UNITS = ("s", "J", "W", "Hz", "bit/s")
BYTE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")
MISSING = "—"


def _exponential(value: float, decimals: int) -> str:
    """JavaScript's ``toExponential``: ``1.23e+6``."""
    mantissa, exponent = f"{value:.{decimals}e}".split("e")
    return f"{mantissa}e{'-' if int(exponent) < 0 else '+'}{abs(int(exponent))}"


def _precision(value: float, digits: int) -> str:
    """JavaScript's ``toPrecision``: ``digits`` significant digits, an exponent from 10^digits on."""
    if value == 0:
        return f"{0:.{digits - 1}f}"
    exponent = int(f"{value:.{digits - 1}e}".split("e")[1])
    if exponent < -6 or exponent >= digits:
        return _exponential(value, digits - 1)
    return f"{value:.{max(digits - 1 - exponent, 0)}f}"


def _trim(text: str) -> str:
    """Trailing zeros of the decimals off (not of an exponent's mantissa)."""
    if "e" in text or "." not in text:
        return text
    return text.rstrip("0").rstrip(".")


def _si(value: float, unit: str, digits: int) -> str:
    if value == 0:
        return f"0 {unit}"
    for scale, prefix in SI:
        if abs(value) >= scale * 0.9995:
            return f"{_trim(_precision(value / scale, digits))} {prefix}{unit}"
    return f"{_exponential(value, 2)} {unit}"


def _bytes(value: float) -> str:
    unit = 0
    while abs(value) >= 1000 and unit < len(BYTE_UNITS) - 1:  # 1000–1023 of a unit: the next unit
        value /= 1024
        unit += 1
    return f"{_trim(_precision(value, 3))} {BYTE_UNITS[unit]}"


def format_number(value: float | None, digits: int = 3) -> str:
    if value is None or math.isnan(value):
        return MISSING
    if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
        return _exponential(value, digits - 1)
    return _trim(_precision(value, digits))


def format_value(value: float | None, unit: str = "1", digits: int = 3) -> str:
    """A value with its unit, as the dashboard's tables and tiles write it."""
    if value is None or math.isnan(value):
        return MISSING
    if unit == "bytes":
        return _bytes(value)
    if unit in SI_UNITS:
        return _si(value, unit, digits)
    return format_number(value, digits)


def format_ratio(value: float | None) -> str:
    if value is None or math.isnan(value):
        return MISSING
    return f"×{value:.1f}" if value >= 10 else f"×{value:.3f}"


def mean_with_interval(mean: float | None, low: float | None, high: float | None, unit: str) -> str:
    """``12.3 ms ± 0.4 ms``: the mean ± the half width of its interval (the mean alone without one)."""
    if mean is None:
        return MISSING
    if low is None or high is None:
        return format_value(mean, unit)
    return f"{format_value(mean, unit)} ± {format_value((high - low) / 2, unit)}"
