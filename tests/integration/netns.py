"""Hosts on one machine, for tests of the stack across hosts: network namespaces on a private bridge.

``host_network(("db", "worker-1"))`` gives each host a network namespace of its own with one
interface (``cpnet0``) on a bridge of its own and an address in a private /24; the root namespace (the
test process, and an API started from it) has an address on the bridge too. Hosts reach each other
only through the bridge. ``host.command(argv)`` (``host.prefix + argv``) runs ``argv`` on a host: in
its namespace and under its own host name (a UTS namespace), so the names a process reports — a
Celery node, a run's lease owner — say which host it ran on. ``host.kill_all()`` kills every process
of the host.

``postgres_on(host, …)`` runs a PostgreSQL cluster of its own (initdb into a temporary directory, as
the ``postgres`` user: initdb and postgres refuse root) and ``redis_on(host, …)`` a ``redis-server``,
each listening only on the host's bridge address.

Everything is removed on exit, also when a test fails: processes, namespaces, links, temporary
directories. Names carry the test process's id (``collapipe-<pid>-…``, ``cpbr<pid>-…``), so concurrent
sessions never meet; what a killed session left behind is removed by the next one.

Needs root and iproute2's ``ip netns``; ``netns_unavailable()`` says why when they are not there.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis

from tests.integration.processes import wait_until

NETNS_PREFIX = "collapipe-"
BRIDGE_PREFIX = "cpbr"
INTERFACE = "cpnet0"  # every host's interface on the bridge (the same name on each, as GLOO_SOCKET_IFNAME)
# run argv[2:] with host name argv[1] (in a fresh UTS namespace: the machine's name is untouched)
_AS_HOST = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execvp(sys.argv[2], sys.argv[2:])"
_networks = itertools.count()


@dataclass(frozen=True)
class Host:
    name: str  # its host name, e.g. "worker-1"
    netns: str  # its network namespace
    address: str  # its address on the bridge
    interface: str  # its interface on the bridge (inside the namespace)

    @property
    def prefix(self) -> list[str]:
        """What runs a command on this host. Every step execs the next: the process id is the command's."""
        in_namespace = ["ip", "netns", "exec", self.netns, "unshare", "--uts"]
        return [*in_namespace, sys.executable, "-I", "-c", _AS_HOST, self.name]

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as run on this host."""
        return [*self.prefix, *argv]

    def pids(self) -> list[int]:
        """Every process running on this host."""
        return namespace_pids(self.netns)

    def kill_all(self, sig: signal.Signals = signal.SIGKILL) -> list[int]:
        """Send ``sig`` to every process of this host; the process ids it was sent to."""
        return _signal_all(self.netns, sig)


@dataclass(frozen=True)
class Network:
    bridge: str
    subnet: ipaddress.IPv4Network
    root_address: str  # the root namespace's address on the bridge
    hosts: dict[str, Host]


def netns_unavailable() -> str | None:
    """Why network namespaces cannot be used here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root (ip netns add)"
    if shutil.which("ip") is None:
        return "iproute2's ip command is not installed"
    probe = f"{NETNS_PREFIX}{os.getpid()}-probe"
    added = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, check=False)
    if added.returncode != 0:
        return f"`ip netns add` failed: {added.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, check=False)
    return None


@contextmanager
def host_network(names: Sequence[str]) -> Iterator[Network]:
    """One namespace per host name on a fresh bridge (hosts .1, .2, … and the root namespace .254)."""
    remove_stale()
    tag = f"{os.getpid()}-{next(_networks)}"
    subnet = _free_subnet()
    addresses = list(subnet.hosts())
    with ExitStack() as cleanup:
        bridge = f"{BRIDGE_PREFIX}{tag}"
        _ip("link", "add", bridge, "type", "bridge")
        cleanup.callback(_quietly, "link", "del", bridge)
        root_address = str(addresses[-1])
        _ip("addr", "add", f"{root_address}/{subnet.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        hosts = {}
        for index, name in enumerate(names):
            netns = f"{NETNS_PREFIX}{tag}-{name}"
            _ip("netns", "add", netns)
            cleanup.callback(remove_namespace, netns)
            veth = f"cp{tag}-{index}"  # the bridge's end (the other end, INTERFACE, is in the namespace)
            _ip("link", "add", veth, "type", "veth", "peer", "name", INTERFACE, "netns", netns)
            cleanup.callback(_quietly, "link", "del", veth)  # normally gone with the namespace
            _ip("link", "set", veth, "master", bridge, "up")
            address = str(addresses[index])
            _ip("-n", netns, "link", "set", "lo", "up")
            _ip("-n", netns, "addr", "add", f"{address}/{subnet.prefixlen}", "dev", INTERFACE)
            _ip("-n", netns, "link", "set", INTERFACE, "up")
            hosts[name] = Host(name, netns, address, INTERFACE)
        yield Network(bridge, subnet, root_address, hosts)


def namespace_pids(netns: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True, check=False)
    return [int(word) for word in out.stdout.split()]


def remove_namespace(netns: str, grace_s: float = 3.0) -> None:
    """Stop every process in ``netns`` (SIGTERM, then SIGKILL after ``grace_s``) and delete it."""
    _signal_all(netns, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while namespace_pids(netns) and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + 10.0
    while _signal_all(netns, signal.SIGKILL) and time.monotonic() < deadline:
        time.sleep(0.05)
    _quietly("netns", "del", netns)


def remove_stale() -> None:
    """Remove the namespaces, bridges and temporary directories of test sessions whose process is gone
    (sessions that were killed)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for match in re.finditer(rf"^({NETNS_PREFIX}(\d+)-\S+)", listed, re.MULTILINE):
        if not _alive(int(match[2])):
            remove_namespace(match[1])
    bridges = ["ip", "-o", "link", "show", "type", "bridge"]
    links = subprocess.run(bridges, capture_output=True, text=True, check=False)
    for match in re.finditer(rf"^\d+: ({BRIDGE_PREFIX}(\d+)-\d+)[:@]", links.stdout, re.MULTILINE):
        if not _alive(int(match[2])):
            _quietly("link", "del", match[1])
    for path in Path(tempfile.gettempdir()).glob(f"{NETNS_PREFIX}*"):
        owner = re.fullmatch(rf"{NETNS_PREFIX}(\d+)-(pg|redis)-.+", path.name)
        if owner and not _alive(int(owner[1])):
            shutil.rmtree(path, ignore_errors=True)


# -- services of a database host ------------------------------------------------------------------


@contextmanager
def postgres_on(
    host: Host, trusted: ipaddress.IPv4Network, log_path: Path, port: int = 5432
) -> Iterator[str]:
    """A PostgreSQL cluster of its own on ``host``, listening only on its address, trusting every
    client of ``trusted``; yields the superuser's URL (``postgresql://postgres@ADDRESS:PORT/postgres``).
    Durability is off (fsync): the tests kill workers, never this server."""
    bin_dir = _postgres_bin()
    root = Path(tempfile.mkdtemp(prefix=f"{NETNS_PREFIX}{os.getpid()}-pg-"))
    try:
        shutil.chown(root, "postgres", "postgres")
        data = root / "data"
        as_postgres = ["setpriv", "--reuid=postgres", "--regid=postgres", "--init-groups"]
        initdb = [*as_postgres, str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust"]
        initdb += ["--no-sync", "--no-instructions", "-E", "UTF8", "--locale=C"]
        subprocess.run(initdb, cwd=root, capture_output=True, check=True)
        with (data / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {trusted} trust\n")
        settings = {
            "listen_addresses": host.address,
            "port": str(port),
            "unix_socket_directories": str(root),
            "fsync": "off",
            "full_page_writes": "off",
            "synchronous_commit": "off",
        }
        argv = [*as_postgres, str(bin_dir / "postgres"), "-D", str(data)]
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        url = f"postgresql://postgres@{host.address}:{port}/postgres"
        with _started(host.command(argv), log_path, cwd=root, stop=signal.SIGINT) as server:  # fast shutdown
            wait_until(lambda: server.poll() is None and _pg_answers(url), 60.0, lambda: _tail(log_path))
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def redis_on(host: Host, log_path: Path, port: int = 6379) -> Iterator[str]:
    """A ``redis-server`` of its own on ``host``, listening only on its address, keeping nothing on
    disk; yields its URL (``redis://ADDRESS:PORT``)."""
    root = Path(tempfile.mkdtemp(prefix=f"{NETNS_PREFIX}{os.getpid()}-redis-"))
    argv = ["redis-server", "--bind", host.address, "--port", str(port), "--save", "", "--appendonly", "no"]
    argv += ["--protected-mode", "no", "--dir", str(root)]
    url = f"redis://{host.address}:{port}"
    try:
        with _started(host.command(argv), log_path, cwd=root, stop=signal.SIGTERM) as server:
            wait_until(lambda: server.poll() is None and _redis_answers(url), 30.0, lambda: _tail(log_path))
            yield url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def _started(
    argv: list[str], log_path: Path, cwd: Path, stop: signal.Signals
) -> Iterator[subprocess.Popen[bytes]]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        yield process
    finally:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(stop)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _pg_answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.OperationalError:
        return False


def _redis_answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    except redis.RedisError:
        return False
    finally:
        client.close()


def _postgres_bin() -> Path:
    """Where initdb and postgres are: COLLAPIPE_TEST_PG_BIN, Debian's newest, or the PATH."""
    if "COLLAPIPE_TEST_PG_BIN" in os.environ:
        return Path(os.environ["COLLAPIPE_TEST_PG_BIN"])
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]))
    if versions:
        return versions[-1].parent
    found = shutil.which("initdb")
    if found is None:
        raise RuntimeError("initdb not found: install PostgreSQL's server or set COLLAPIPE_TEST_PG_BIN")
    return Path(found).parent


# -- plumbing -------------------------------------------------------------------------------------


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


def _quietly(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True, check=False)


def _signal_all(netns: str, sig: signal.Signals) -> list[int]:
    pids = namespace_pids(netns)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    return pids


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_subnet() -> ipaddress.IPv4Network:
    """A private /24 derived from the process id that overlaps no address or route of this machine."""
    used = []
    for argv in (["ip", "-4", "-o", "addr", "show"], ["ip", "-4", "route", "show", "table", "all"]):
        out = subprocess.run(argv, capture_output=True, text=True, check=False).stdout
        for word in re.findall(r"\b\d+\.\d+\.\d+\.\d+(?:/\d+)?\b", out):
            used.append(ipaddress.ip_network(word, strict=False))
    pid = os.getpid()
    for step in range(256):
        candidate = ipaddress.IPv4Network(f"10.{200 + pid % 50}.{(pid // 50 + step) % 256}.0/24")
        if not any(candidate.overlaps(network) for network in used):
            return candidate
    raise RuntimeError("no free private /24 for the test network")


def _tail(path: Path, num_chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-num_chars:] if path.exists() else f"{path}: no log"
