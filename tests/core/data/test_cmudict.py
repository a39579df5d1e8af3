from __future__ import annotations

from collapipe_core.data.cmudict import load_cmudict, parse_cmudict

ARPABET = {
    "AA", "AE", "AH", "AO", "AW", "AY", "B", "CH", "D", "DH", "EH", "ER", "EY", "F", "G", "HH", "IH",
    "IY", "JH", "K", "L", "M", "N", "NG", "OW", "OY", "P", "R", "S", "SH", "T", "TH", "UH", "UW", "V",
    "W", "Y", "Z", "ZH",
}  # fmt: skip

SAMPLE = """\
'bout B AW1 T
a.m. EY2 EH1 M
abandon AH0 B AE1 N D AH0 N
abandon(2) AH0 B AE1 N D IH0 N
ad-hoc AE1 D HH AA1 K
aalborg AO1 L B AO0 R G # place, danish

lonely
"""


def test_parse_keeps_plain_words_strips_stress_and_comments() -> None:
    assert parse_cmudict(SAMPLE) == (
        ("'bout", ("B", "AW", "T")),
        ("abandon", ("AH", "B", "AE", "N", "D", "AH", "N")),
        ("aalborg", ("AO", "L", "B", "AO", "R", "G")),
    )


def test_installed_dictionary_maps_known_words() -> None:
    pronunciations = dict(load_cmudict())
    assert pronunciations["abandon"] == ("AH", "B", "AE", "N", "D", "AH", "N")
    assert pronunciations["python"] == ("P", "AY", "TH", "AA", "N")
    assert "abandon(2)" not in pronunciations and "a.m." not in pronunciations


def test_installed_dictionary_uses_the_39_arpabet_phonemes_and_plain_words() -> None:
    entries = load_cmudict()
    assert len(entries) > 120_000
    assert {p for _, phonemes in entries for p in phonemes} == ARPABET
    assert set("".join(word for word, _ in entries)) == set("abcdefghijklmnopqrstuvwxyz'")


def test_parsing_is_cached_per_process() -> None:
    assert load_cmudict() is load_cmudict()
