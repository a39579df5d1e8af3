"""The launch form's presets are the example configs: frontend/presets/*.json equal examples/*.yaml."""

from __future__ import annotations

import json
from pathlib import Path

from frontend.presets.build import PRESETS, index, preset_json

PRESET_DIR = Path(__file__).resolve().parents[2] / "frontend" / "presets"


def test_presets_match_the_example_configs() -> None:
    for name in PRESETS:
        shipped = json.loads((PRESET_DIR / f"{name}.json").read_text(encoding="utf-8"))
        assert shipped == preset_json(name), (
            f"{name}.json is stale: run .venv/bin/python frontend/presets/build.py"
        )
    assert json.loads((PRESET_DIR / "index.json").read_text(encoding="utf-8")) == index()
