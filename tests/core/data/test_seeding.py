from __future__ import annotations

from collapipe_core.data.seeding import stream_rng


def test_same_seed_and_stream_give_the_same_draws() -> None:
    assert stream_rng(7, "eval-split").integers(0, 1_000_000, 5).tolist() == (
        stream_rng(7, "eval-split").integers(0, 1_000_000, 5).tolist()
    )


def test_streams_and_seeds_are_independent() -> None:
    base = stream_rng(7, "eval-split").integers(0, 1_000_000, 5).tolist()
    assert stream_rng(7, "dirichlet").integers(0, 1_000_000, 5).tolist() != base
    assert stream_rng(8, "eval-split").integers(0, 1_000_000, 5).tolist() != base
