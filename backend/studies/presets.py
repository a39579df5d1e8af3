"""Study files (YAML): a POST /api/studies body whose bases may name config files, and the presets
shipped in ``examples/studies/``.

A base's ``config_file`` is read relative to the study file (YAML or JSON, as ``collapipe run``
reads configs) and inlined as its ``config``; a study file's ``description`` is for people. The server
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


def load_study_file(path: Path) -> tuple[str, dict[str, Any]]:
    """(description, body) of a study file; ``config_file`` bases inlined."""
    data = _read(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a study file is a mapping (name, bases, axes, ...)")
    body = dict(data)
    description = str(body.pop("description", ""))
    bases = []
    for base in body.get("bases", []):
        base = dict(base)
        if "config_file" in base:
            base["config"] = _read(path.parent / str(base.pop("config_file")))
        bases.append(base)
    body["bases"] = bases
    return description, body


def presets(directory: Path = PRESETS_DIR) -> list[StudyPreset]:
    """The study files of ``directory`` (none when it is missing), by file name."""
    if not directory.is_dir():
        return []
    found = []
    for path in sorted(directory.glob("*.yaml")):
        description, body = load_study_file(path)
        found.append(StudyPreset(name=path.stem, description=description, definition=body))
    return found
