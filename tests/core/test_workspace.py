"""The workspace: a service reads a config's files only from its data directory, by name."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collapipe_core.scheduler import PolicyRegistry
from collapipe_core.workspace import FileRefused, Workspace

FIELD = "network.trace_file"


def service(data_dir: Path, max_file_bytes: int = 1000) -> Workspace:
    return Workspace.service(
        data_dir, PolicyRegistry(), max_file_bytes=max_file_bytes, memory_limit_bytes=None
    )


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    (root / "traces").mkdir(parents=True)
    (root / "traces" / "ok.csv").write_text("round,cluster,device\n0,0,0\n")
    (tmp_path / "secret.txt").write_text("password=hunter2\n")
    return root


def test_a_name_inside_the_directory_is_read(data_dir: Path) -> None:
    assert service(data_dir).read_text(FIELD, "traces/ok.csv").startswith("round,")
    assert service(data_dir).read_text(FIELD, "./traces/ok.csv").startswith("round,")


@pytest.mark.parametrize(
    "name",
    [
        "/etc/passwd",
        "/proc/self/environ",
        "../secret.txt",
        "traces/../../secret.txt",
        "http://example.org/trace.csv",
        "file:///etc/passwd",
        "C:/Windows/win.ini",
        "~root/.bashrc",
        "traces\\..\\..\\secret.txt",
        "traces/ok.csv\x00.png",
        "x" * 300,
    ],
)
def test_paths_that_leave_the_directory_are_refused_by_name_alone(data_dir: Path, name: str) -> None:
    with pytest.raises(FileRefused) as caught:
        service(data_dir).read_text(FIELD, name)
    assert caught.value.field == FIELD
    assert "relative to the data directory" in caught.value.message or "characters" in caught.value.message
    assert "hunter2" not in str(caught.value) and "root:" not in str(caught.value)


def test_missing_files_symlinks_out_devices_and_directories_get_one_answer(data_dir: Path) -> None:
    (data_dir / "out.csv").symlink_to(data_dir.parent / "secret.txt")
    (data_dir / "zero").symlink_to("/dev/zero")
    os.mkfifo(data_dir / "pipe.csv")
    answers = set()
    for name in ("nope.csv", "out.csv", "zero", "pipe.csv", "traces"):
        with pytest.raises(FileRefused) as caught:
            service(data_dir).read_text(FIELD, name)
        answers.add(caught.value.message.replace(repr(name), "NAME"))
    assert answers == {"no file named NAME in the data directory"}


def test_a_symlink_inside_the_directory_is_followed(data_dir: Path) -> None:
    (data_dir / "alias.csv").symlink_to(data_dir / "traces" / "ok.csv")
    assert service(data_dir).read_text(FIELD, "alias.csv").startswith("round,")


def test_size_is_checked_before_reading(data_dir: Path) -> None:
    (data_dir / "big.csv").write_bytes(b"x" * 5000)
    with pytest.raises(FileRefused, match=r"at most 0.0 MiB|MiB"):
        service(data_dir, max_file_bytes=1000).read_bytes(FIELD, "big.csv")
    assert len(service(data_dir, max_file_bytes=5000).read_bytes(FIELD, "big.csv")) == 5000


def test_text_must_be_utf8(data_dir: Path) -> None:
    (data_dir / "latin1.csv").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(FileRefused, match="not UTF-8"):
        service(data_dir).read_text(FIELD, "latin1.csv")


def test_the_local_workspace_takes_plain_paths(data_dir: Path) -> None:
    local = Workspace.local()
    assert local.read_text(FIELD, str(data_dir / "traces" / "ok.csv")).startswith("round,")
    with pytest.raises(FileRefused, match="No such file"):
        local.read_text(FIELD, str(data_dir / "nope.csv"))
    with pytest.raises(FileRefused, match="not a regular file"):
        local.read_text(FIELD, str(data_dir))


def test_a_small_file_costs_its_size_not_the_limit(data_dir: Path) -> None:
    """A read buffer of the whole limit (256 MiB by default) was allocated for every file read."""
    import tracemalloc

    (data_dir / "small.csv").write_bytes(b"text,label\nhi,1\n")
    tracemalloc.start()
    try:
        data = service(data_dir, max_file_bytes=2**28).read_bytes(FIELD, "small.csv")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data == b"text,label\nhi,1\n" and peak < 2**20


def test_a_file_growing_while_read_is_read_whole_or_refused(data_dir: Path) -> None:
    from collapipe_core.workspace import FileTooBig, read_regular_file

    path = data_dir / "grows.csv"
    path.write_bytes(b"x" * 10)
    real_fstat = os.fstat

    def stale(fd: int) -> os.stat_result:  # the size seen before a writer appended
        info = real_fstat(fd)
        return os.stat_result((info.st_mode, *info[1:6], 4, *info[7:]))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(os, "fstat", stale)
        assert read_regular_file(path, None) == b"x" * 10
        assert read_regular_file(path, 10) == b"x" * 10
        with pytest.raises(FileTooBig):
            read_regular_file(path, 9)
