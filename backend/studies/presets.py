"""Study files (YAML): a POST /api/studies body whose bases may name config files, and the presets
shipped in ``examples/studies/``.

A base's ``config_file`` is read relative to the study file (YAML or JSON, as ``collapipe run``
reads configs) and inlined as its ``config``; a study file's ``description`` and ``fewer_rounds`` (what
its runs cut to fewer rounds than it is written for cannot show) are for people. The server
reads only its own presets directory this way; a client (a CLI) reads the user's files and sends the
body.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from backend.studies.schemas import StudyPreset
from collapipe_core.validation import read_yaml

PRESETS_DIR = Path(__file__).resolve().parents[2] / "examples" / "studies"


def _read(path: Path) -> Any:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix.lower() == ".json" else read_yaml(text)


FOR_PEOPLE = ("description", "fewer_rounds")  # keys of a study file that are no part of the study


def _study_file(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the file as read, the study's body with ``config_file`` bases inlined)."""
    data = _read(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a study file is a mapping (name, bases, axes, ...)")
    body = {k: v for k, v in data.items() if k not in FOR_PEOPLE}
    bases = []
    for base in body.get("bases", []):
        base = dict(base)
        if "config_file" in base:
            base["config"] = _read(path.parent / str(base.pop("config_file")))
        bases.append(base)
    body["bases"] = bases
    return data, body


def load_study_file(path: Path) -> tuple[str, dict[str, Any]]:
    """(description, body) of a study file; ``config_file`` bases inlined."""
    data, body = _study_file(path)
    return str(data.get("description", "")), body


def rounds_of(body: dict[str, Any]) -> int | None:
    """The rounds per run a study is written for: its ``training.rounds`` axis's most, else its bases'
    (None when no base names them)."""
    axis = next((a["values"] for a in body.get("axes", []) if a.get("field") == "training.rounds"), None)
    if axis is not None:
        return max(int(v) for v in axis)
    configs = [b.get("config") or {} for b in body["bases"]]
    named = [c["training"]["rounds"] for c in configs if "rounds" in (c.get("training") or {})]
    return max(int(r) for r in named) if named else None


def presets(directory: Path = PRESETS_DIR) -> list[StudyPreset]:
    """The study files of ``directory`` (none when it is missing), by file name."""
    if not directory.is_dir():
        return []
    found = []
    for path in sorted(directory.glob("*.yaml")):
        data, body = _study_file(path)
        found.append(
            StudyPreset(
                name=path.stem,
                description=str(data.get("description", "")),
                definition=body,
                rounds=rounds_of(body),
                fewer_rounds=str(data.get("fewer_rounds", "")),
            )
        )
    return found
