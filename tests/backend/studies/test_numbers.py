"""The report's numbers are written as the dashboard writes them (frontend/js/format.js)."""

from __future__ import annotations

from backend.studies.numbers import format_number, format_ratio, format_value, mean_with_interval


def test_numbers_and_units_read_as_on_the_page() -> None:
    assert format_value(0.0135, "s") == "13.5 ms"
    assert format_value(66.4, "s") == "66.4 s"
    assert format_value(1.0, "s") == "1 s" and format_value(0, "s") == "0 s"
    assert format_value(2.5e9, "Hz") == "2.5 GHz"
    assert format_value(3_131_662_592, "bytes") == "2.92 GiB"
    assert format_value(1000, "bytes") == "0.977 KiB" and format_value(512, "bytes") == "512 B"
    assert format_value(0.5, "1") == "0.5" and format_value(1234.5, "1") == "1.23e+3"
    assert format_number(2.5e6) == "2.50e+6" and format_number(0.0001234) == "1.23e-4"
    assert format_value(None, "s") == "—"
    assert format_ratio(0.5) == "×0.500" and format_ratio(12.34) == "×12.3"
    assert mean_with_interval(0.0135, 0.0135 - 0.00635, 0.0135 + 0.00635, "s") == "13.5 ms ± 6.35 ms"
    assert mean_with_interval(0.0135, None, None, "s") == "13.5 ms"
