"""Refresh docs/img/: the run view, the study page and the study's HTML report as docs/dashboard.md shows
them, taken at 1280 × 800 in headless Chromium by the first-hour walk (tests/e2e/test_first_hour_walk.py)
on a fresh embedded server.

    .venv/bin/python scripts/screenshots.py [--out docs/img]

Exits with the walk's status; the PNGs are written only when the walk gets to them.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WALK = "tests/e2e/test_first_hour_walk.py"
NAMES = ("run-view", "study-page", "study-report")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img", help="folder of the PNGs")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "COLLAPIPE_SCREENSHOT_DIR": str(out)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", WALK]
    status = subprocess.run(command, cwd=REPO, env=env, check=False).returncode
    for name in NAMES:
        path = out / f"{name}.png"
        print(f"{path}: {path.stat().st_size // 1024} KiB" if path.exists() else f"{path}: missing")
    return status


if __name__ == "__main__":
    sys.exit(main())
