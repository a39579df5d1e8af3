"""A PostgreSQL server of a test's own (Debian's initdb and pg_ctl in a temporary directory), so a test
can stop and start it: the shared server on 5432 is never stopped.

The server runs as the invoking user, or as ``postgres`` when the tests run as root (PostgreSQL
refuses to run as root); it trusts local connections and listens on a free loopback port.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.integration.processes import free_port

BIN_DIRS = sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)


def _tool(name: str) -> str:
    for directory in BIN_DIRS:
        if (directory / name).exists():
            return str(directory / name)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(
            f"{name} is missing: install PostgreSQL's server package (apt-get install postgresql)"
        )
    return found


@dataclass
class OwnPostgres:
    data_dir: Path
    port: int
    user: str

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of its ``collapipe`` database."""
        return f"postgresql+psycopg://{self.user}@127.0.0.1:{self.port}/collapipe"

    def _run(self, *argv: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run(
            _tool("pg_ctl"), "-D", str(self.data_dir), "-l", str(self.data_dir / "server.log"), "-w",
            "-o", f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data_dir}", "start",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop it now (fast shutdown: open sessions are ended, as in an outage)."""
        self._run(_tool("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop")


@contextlib.contextmanager
def own_postgres() -> Iterator[OwnPostgres]:
    """A new server with an empty ``collapipe`` database, running; removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="collapipe-pg-"))
    user = "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    if os.geteuid() == 0:
        record = pwd.getpwnam("postgres")
        os.chown(root, record.pw_uid, record.pw_gid)
    server = OwnPostgres(root / "data", free_port(), user)
    try:
        server._run(_tool("initdb"), "-D", str(server.data_dir), "-U", user, "-A", "trust", "--no-sync")
        server.start()
        server._run(_tool("createdb"), "-h", "127.0.0.1", "-p", str(server.port), "-U", user, "collapipe")
        yield server
    finally:
        with contextlib.suppress(subprocess.CalledProcessError, FileNotFoundError):
            server.stop()
        shutil.rmtree(root, ignore_errors=True)
