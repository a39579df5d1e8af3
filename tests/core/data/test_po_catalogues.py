from __future__ import annotations

import pytest

from collapipe_core.data.po_catalogues import (
    PoEntry,
    available_languages,
    catalogue_paths,
    language_texts,
    parse_po,
)

SAMPLE = r"""# Translators:
# Someone <someone@example.org>, 2024
msgid ""
msgstr ""
"Project-Id-Version: django\n"
"Language: de\n"

#: some/file.py:10
msgid "Arabic"
msgstr "Arabisch"

msgid ""
"Please enter the correct %(username)s and password. Note that both "
"fields may be case-sensitive."
msgstr ""
"Bitte einen gültigen %(username)s und ein Passwort eingeben. Beide Felder "
"berücksichtigen die Groß-/Kleinschreibung."

msgid "Say \"hi\"\n"
msgstr "Sag \"hallo\"\tC:\\temp\n"

msgctxt "abbrev. month"
msgid "Jan."
msgstr "Jan."

msgid "%(num)d object"
msgid_plural "%(num)d objects"
msgstr[0] "%(num)d Objekt"
msgstr[1] "%(num)d Objekte"

#, fuzzy
msgid "Unreviewed"
msgstr "Ungeprüft"

msgid "Untranslated"
msgstr ""

#~ msgid "Obsolete"
#~ msgstr "Veraltet"
"""


def test_parses_every_entry_in_order() -> None:
    entries = parse_po(SAMPLE)
    assert [e.msgid for e in entries] == [
        "",
        "Arabic",
        "Please enter the correct %(username)s and password. Note that both fields may be case-sensitive.",
        'Say "hi"\n',
        "Jan.",
        "%(num)d object",
        "Unreviewed",
        "Untranslated",
    ]
    assert entries[0].msgstrs == ("Project-Id-Version: django\nLanguage: de\n",)


def test_multi_line_strings_are_joined() -> None:
    assert parse_po(SAMPLE)[2].msgstrs == (
        "Bitte einen gültigen %(username)s und ein Passwort eingeben. Beide Felder "
        "berücksichtigen die Groß-/Kleinschreibung.",
    )


def test_escapes_are_decoded() -> None:
    assert parse_po(SAMPLE)[3].msgstrs == ('Sag "hallo"\tC:\\temp\n',)


def test_context_plural_and_fuzzy_are_kept() -> None:
    entries = parse_po(SAMPLE)
    assert entries[4].context == "abbrev. month"
    assert entries[5] == PoEntry(
        "%(num)d object", ("%(num)d Objekt", "%(num)d Objekte"), msgid_plural="%(num)d objects"
    )
    assert entries[6].fuzzy and not entries[5].fuzzy


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('msgid "a"\nmsgstr "b\\q"\n', r"line 2: unknown escape \\q"),
        ('"dangling"\n', "line 1: string continuation without a keyword"),
        ('msgid "a"\nmsgstr b\n', "line 2: cannot parse"),
    ],
)
def test_malformed_lines_raise_with_line_numbers(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_po(text)


def test_real_german_catalogue() -> None:
    path = next(p for p in catalogue_paths()["de"] if p.parts[-5:-3] == ("conf", "locale"))
    entries = {e.msgid: e for e in parse_po(path.read_text(encoding="utf-8"))}
    assert entries["Arabic"].msgstrs == ("Arabisch",)
    assert "Language: de" in entries[""].msgstrs[0]
    plural = next(e for e in entries.values() if e.msgid_plural is not None)
    assert len(plural.msgstrs) == 2 and all(plural.msgstrs)


def test_language_texts_skip_the_header_and_are_distinct() -> None:
    texts = language_texts("de")
    assert len(texts) > 500 and len(set(texts)) == len(texts)
    assert "Arabisch" in texts and all(texts)
    assert not any(t.startswith("Project-Id-Version") for t in texts)


def test_available_languages_cover_the_default_classes() -> None:
    assert {"de", "fr", "es", "it", "nl", "pt", "pl", "sv", "pt_BR"} <= set(available_languages())


def test_unknown_language_names_the_code_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown language code 'xx'.*: af, am, ar, ar_DZ,"):
        language_texts("xx")
