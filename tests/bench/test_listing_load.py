"""bench/listing_load.py's recovery figure: from the end of a load to the first probe from which on
the API answered normally."""

from __future__ import annotations

from bench.listing_load import Probe, recovery_s

END = 100.0


def _probes(*answers: tuple[float, int | None, float]) -> list[Probe]:
    return [Probe(END + offset, status, latency_s) for offset, status, latency_s in answers]


def test_an_api_that_answers_normally_when_the_load_ends_recovered_at_once() -> None:
    probes = _probes((-1.0, 503, 0.01), (0.1, 200, 0.05), (0.35, 200, 0.04))
    assert recovery_s(probes, END) == 0.0


def test_recovery_counts_to_the_first_probe_after_the_last_abnormal_answer() -> None:
    probes = _probes(
        (0.0, None, 10.0),  # unanswered
        (0.25, 200, 3.0),  # answered, too late to count as normal
        (0.5, 200, 0.2),
        (0.75, 503, 0.01),  # shed
        (1.0, 200, 0.1),
        (1.25, 200, 0.1),
    )
    assert recovery_s(probes, END) == 1.0


def test_an_api_still_failing_at_the_last_probe_did_not_recover() -> None:
    assert recovery_s(_probes((0.0, 200, 0.1), (0.25, 503, 0.01)), END) is None
    assert recovery_s([], END) is None
