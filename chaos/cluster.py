"""A private PostgreSQL cluster for the chaos suite: its own data dir, port and socket dir.

The suite restarts, stops and freezes backends of its database; doing that to
the shared server would break every other test running on the machine, so it
starts a throw-away cluster with `initdb` + `pg_ctl` in a temp dir and removes
it at the end, even on error. initdb refuses to run as root, so when we are
root the binaries run as the `postgres` user (`runuser`), who owns the dir.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

BIN_DIRS = ("/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/14/bin")


def postgres_bin() -> Path | None:
    """The folder holding `initdb` and `pg_ctl`, or None when PostgreSQL's server is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for folder in BIN_DIRS:
        if (Path(folder) / "initdb").exists():
            return Path(folder)
    return None


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """A running private cluster: its URL, and the faults the suite injects (restart, stop, start, crash)."""

    def __init__(self, folder: Path, bin_dir: Path, port: int) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.bin_dir = bin_dir
        self.port = port
        self.url = f"postgresql://postgres@127.0.0.1:{port}/postgres"

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        return subprocess.run(
            [*prefix, str(self.bin_dir / command[0]), *command[1:]],
            check=check,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def _ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            "pg_ctl",
            action,
            "-D",
            str(self.data),
            "-w",
            "-t",
            "60",
            "-o",
            options,
            "-l",
            str(self.folder / "server.log"),
            *extra,
        )

    def init(self) -> None:
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        self.start()

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def restart(self) -> None:
        self._ctl("restart", "-m", "fast")

    def crash(self) -> list[int]:
        """SIGKILL the postmaster and every process it forked, as when the kernel's OOM killer takes
        the whole server: no shutdown checkpoint is written, so the next `start` replays the WAL
        (`recoveries` counts it). The postmaster is stopped first, so it cannot
        fork a backend between the listing of its children and the kill. The cluster runs with
        fsync off: a committed transaction's WAL is in the kernel's page cache, which a process
        crash leaves intact (a machine crash is not this fault). Returns the pids killed."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)
        victims = [postmaster, *children_of(postmaster)]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(alive(pid) for pid in victims):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the private cluster's processes outlived SIGKILL: {victims}")
            time.sleep(0.02)
        # The dead postmaster was reparented to init, which may leave it a zombie for a while; the
        # next postmaster would take the pid in its lock files (the data directory's and the
        # socket's) for a live server and refuse to start. Every process is dead, so the locks are
        # stale: removed, as an operator would after a crash.
        for lock in (self.data / "postmaster.pid", self.folder / f".s.PGSQL.{self.port}.lock"):
            lock.unlink(missing_ok=True)
        return victims

    def recoveries(self) -> int:
        """How many starts of this cluster found it not shut down and replayed the WAL."""
        return recoveries_in((self.folder / "server.log").read_text(errors="replace"))

    def accepting(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=2):
                return True
        except psycopg.Error:
            return False

    def wait_accepting(self, timeout: float = 30.0) -> float:
        """Wait until the server accepts connections; the monotonic time it did."""
        deadline = time.monotonic() + timeout
        while not self.accepting():
            if time.monotonic() > deadline:
                raise TimeoutError("the private cluster does not accept connections")
            time.sleep(0.05)
        return time.monotonic()

    def backends(self, application_name: str) -> list[int]:
        """Pids of the backends that connected as `application_name` (e.g. tidegate-listener)."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            rows = connection.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
                (application_name,),
            ).fetchall()
        return [int(row[0]) for row in rows]

    def terminate(self, pid: int) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as connection:
            connection.execute("SELECT pg_terminate_backend(%s)", (pid,))


RECOVERY_LINE = "database system was not properly shut down; automatic recovery in progress"


def recoveries_in(server_log: str) -> int:
    """Crash recoveries (WAL replays at start) that a server log records."""
    return server_log.count(RECOVERY_LINE)


def children_of(parent: int) -> list[int]:
    """Pids whose parent is `parent` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                # the command name may hold spaces and parentheses: the fields after its last ')'
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(fields[1]) == parent:
                    found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for its parent to reap it does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextmanager
def private_cluster() -> Iterator[Cluster]:
    """Start a private cluster on a free port; stopped and deleted on the way out."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError("initdb was not found: install the PostgreSQL server to run the chaos suite on it")
    folder = Path(tempfile.mkdtemp(prefix="tidegate-chaos-pg-"))
    if os.geteuid() == 0:
        shutil.chown(folder, user="postgres", group="postgres")
    cluster = Cluster(folder, bin_dir, free_port())
    try:
        cluster.init()
        yield cluster
    finally:
        cluster._run("pg_ctl", "stop", "-D", str(cluster.data), "-m", "immediate", check=False)
        shutil.rmtree(folder, ignore_errors=True)
