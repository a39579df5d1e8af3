"""The config-check and pre-flight children: a child says it is ready only once it has checked the
launch form's first preset and computed its round 0, so that a new user's first "Check & pre-flight"
pays neither the corpus, nor the model's profile, nor lazy imports, and none of it counts against a
request's deadline."""

from __future__ import annotations

import json
from pathlib import Path

from backend.preflight import _CONTEXT, _serve
from collapipe_core.workspace import Workspace

QUICKSTART = Path(__file__).resolve().parents[2] / "frontend" / "presets" / "quickstart.json"


def test_a_child_is_ready_once_it_has_checked_and_pre_flighted_the_quickstart() -> None:
    parent, child = _CONTEXT.Pipe()
    process = _CONTEXT.Process(target=_serve, args=(child, None), daemon=True)
    process.start()
    child.close()
    try:
        assert parent.poll(300), "the child did not start"
        status, warmed = parent.recv()
        assert status == "ready"
        assert warmed["warmed"] == "quickstart" and warmed["warm_up_s"] > 0, warmed
        config = json.loads(QUICKSTART.read_text(encoding="utf-8"))
        parent.send(("preflight", config, Workspace.local()))
        assert parent.recv() == ("checked", None)
        status, result = parent.recv()
        assert status == "ok" and result["round"]["round"] == 0 and result["round"]["policy"] == "dssda"
    finally:
        process.kill()
        process.join(timeout=10)
        parent.close()
