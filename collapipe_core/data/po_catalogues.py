"""Django's gettext catalogues (``*.po``) as translated texts per language, for language identification.

The Django wheel ships ``django/**/locale/<lang>/LC_MESSAGES/*.po`` for ~100 languages (BSD-3-Clause,
"distributed under the same license as the Django package"). We read them as text files; Django is
never imported. :func:`parse_po` understands what those files use: ``msgctxt``/``msgid``/
``msgid_plural``/``msgstr``/``msgstr[n]`` keywords, strings continued over several quoted lines, C
escapes, ``#`` comments and the ``#, fuzzy`` flag.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from collapipe_core.data.wheel_files import package_dir

LICENCE = "BSD-3-Clause (Django translation catalogues)"
REQUIREMENT = "Django==5.2.19"

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "'": "'", "a": "\a", "b": "\b", "f": "\f"}
_ESCAPE = re.compile(r"\\(.)")
_KEYWORD = re.compile(r"(msgctxt|msgid_plural|msgid|msgstr)(?:\[(\d+)\])?\s+(\".*\")$")


@dataclass(frozen=True)
class PoEntry:
    """One catalogue message; ``msgstrs`` holds the singular translation or every plural form in order."""

    msgid: str
    msgstrs: tuple[str, ...]
    msgid_plural: str | None = None
    context: str | None = None
    fuzzy: bool = False


def _unquote(quoted: str, line_number: int) -> str:
    if len(quoted) < 2 or quoted[0] != '"' or quoted[-1] != '"':
        raise ValueError(f"line {line_number}: expected a quoted string, got {quoted!r}")

    def unescape(match: re.Match[str]) -> str:
        if match.group(1) not in _ESCAPES:
            raise ValueError(f"line {line_number}: unknown escape \\{match.group(1)} in {quoted!r}")
        return _ESCAPES[match.group(1)]

    return _ESCAPE.sub(unescape, quoted[1:-1])


def parse_po(text: str) -> list[PoEntry]:
    """Every entry of a ``.po`` text, in file order.

    The header (the entry with an empty msgid) is returned like any other; callers skip it. Obsolete
    ``#~`` entries are comments to gettext and so are dropped. Malformed lines raise ValueError with
    their line number.
    """
    entries: list[PoEntry] = []
    fields: dict[str, str] = {}  # "msgid", "msgid_plural", "msgctxt", "msgstr[0]", ...
    fuzzy = False
    current: str | None = None  # the field a continuation line "..." appends to

    def flush() -> None:
        nonlocal fields, fuzzy
        if "msgid" in fields:
            forms = sorted((int(k[7:-1]), v) for k, v in fields.items() if k.startswith("msgstr["))
            msgstrs = tuple(v for _, v in forms) if forms else (fields.get("msgstr", ""),)
            entries.append(
                PoEntry(fields["msgid"], msgstrs, fields.get("msgid_plural"), fields.get("msgctxt"), fuzzy)
            )
        fields, fuzzy = {}, False

    for line_number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            if any(k.startswith("msgstr") for k in fields):
                flush()  # a comment or blank line after a translation closes the entry
            fuzzy = fuzzy or (line.startswith("#,") and "fuzzy" in line)
            current = None
            continue
        if line.startswith('"'):
            if current is None:
                raise ValueError(f"line {line_number}: string continuation without a keyword")
            fields[current] += _unquote(line, line_number)
            continue
        match = _KEYWORD.match(line)
        if match is None:
            raise ValueError(f"line {line_number}: cannot parse {line!r}")
        keyword, index, quoted = match.groups()
        if keyword in ("msgctxt", "msgid") and any(k.startswith("msgstr") for k in fields):
            flush()
        current = f"{keyword}[{index}]" if index is not None else keyword
        fields[current] = _unquote(quoted, line_number)
    flush()
    return entries


def locale_root() -> Path:
    """The installed Django package folder (found without importing Django)."""
    return package_dir("django", REQUIREMENT)


@functools.cache
def catalogue_paths() -> dict[str, tuple[Path, ...]]:
    """Language code -> its ``.po`` files in the installed Django wheel, sorted (one walk per process)."""
    by_language: dict[str, list[Path]] = {}
    for path in sorted(locale_root().glob("**/locale/*/LC_MESSAGES/*.po")):
        by_language.setdefault(path.parent.parent.name, []).append(path)
    return {language: tuple(paths) for language, paths in sorted(by_language.items())}


def available_languages() -> tuple[str, ...]:
    """Language codes that have at least one catalogue in the installed Django wheel, sorted."""
    return tuple(catalogue_paths())


@functools.cache
def language_texts(language: str) -> tuple[str, ...]:
    """Distinct non-empty translations (msgstr, or msgstr[0] of plural entries) of one language.

    Catalogues are read in sorted path order so the result is the same on every machine. The header
    entry and fuzzy (unreviewed) translations are skipped, as gettext skips them at run time.
    """
    paths = catalogue_paths().get(language)
    if paths is None:
        raise ValueError(
            f"unknown language code {language!r} in data.languages; "
            f"the installed Django catalogues have: {', '.join(available_languages())}"
        )
    texts: dict[str, None] = {}  # insertion-ordered set
    for path in paths:
        for entry in parse_po(path.read_text(encoding="utf-8")):
            if entry.msgid and not entry.fuzzy and entry.msgstrs[0]:
                texts.setdefault(entry.msgstrs[0], None)
    return tuple(texts)
