from __future__ import annotations

from collapipe_core.data.synthetic import ALPHABET, generate_strings, parity_samples, reverse_pairs


def test_strings_are_distinct_within_bounds_and_seeded() -> None:
    strings = generate_strings(seed=3, num_strings=500, max_len=10, stream="t")
    assert len(strings) == 500 and len(set(strings)) == 500
    assert all(2 <= len(s) <= 10 and set(s) <= set(ALPHABET) for s in strings)
    assert generate_strings(3, 500, 10, "t") == strings
    assert generate_strings(4, 500, 10, "t") != strings


def test_a_smaller_pool_is_a_prefix_of_a_larger_one() -> None:
    assert generate_strings(5, 6000, 12, "t")[:100] == generate_strings(5, 100, 12, "t")


def test_fewer_strings_when_fewer_exist() -> None:
    assert sorted(generate_strings(0, 100, 1, "t")) == sorted(ALPHABET)


def test_reverse_targets_are_the_reversed_source() -> None:
    for source, target in reverse_pairs(0, 50, 8):
        assert "".join(target) == source[::-1]


def test_parity_label_counts_the_letter_a() -> None:
    samples = parity_samples(0, 400, 12)
    assert all(label == source.count("a") % 2 for source, label in samples)
    assert 100 < sum(label for _, label in samples) < 300  # both classes well represented
