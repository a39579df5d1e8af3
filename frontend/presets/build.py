"""Regenerate the launch form's presets (frontend/presets/*.json) from examples/*.yaml.

The service has no endpoint that serves the example configs, so the dashboard ships them as static
JSON. tests/e2e/test_presets.py fails when a YAML file changes without this being re-run:

    .venv/bin/python frontend/presets/build.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
PRESETS = {
    "quickstart": "Quick start (G2P, 2 × 4 devices)",
    "paper-transformer": "Paper: Transformer (G2P, 4 × 5 devices)",
    "paper-bert": "Paper: BERT-style classifier (4 × 5 devices)",
    "llm-causal": "LLaMA-style LM on pydoc-topics (2 × 4 devices)",
    "bert-langid": "BERT language ID (2 × 4 devices)",
    "bart-g2p": "BART grapheme-to-phoneme (2 × 4 devices)",
    "llama-7b-analytic": "LLaMA-2-7B on phones to laptops (cost model, 4 × 8)",
    "llama-lora-edge": "LLaMA-style LM with LoRA, bf16 and recomputation (2 × 4 small devices)",
    "llama-7b-lora-analytic": "LLaMA-2-7B with LoRA on phones alone (cost model, 2 × 8)",
}


def preset_json(name: str) -> dict[str, Any]:
    """The example's config as plain JSON (YAML 1.2 floats such as 2.5e9 read as numbers)."""
    sys.path.insert(0, str(REPO))
    from collapipe_core.validation import _Loader

    text = (REPO / "examples" / f"{name}.yaml").read_text(encoding="utf-8")
    config: dict[str, Any] = yaml.load(text, Loader=_Loader)
    return config


def index() -> list[dict[str, str]]:
    return [{"id": name, "label": label, "file": f"{name}.json"} for name, label in PRESETS.items()]


def main() -> None:
    out = Path(__file__).resolve().parent
    for name in PRESETS:
        (out / f"{name}.json").write_text(json.dumps(preset_json(name), indent=1) + "\n", encoding="utf-8")
    (out / "index.json").write_text(json.dumps(index(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(PRESETS)} presets to {out}")


if __name__ == "__main__":
    main()
