"""A private PgBouncer in transaction mode, in front of the test PostgreSQL (Debian's `pgbouncer`).

One per test: its one database alias pins the server sessions' search_path to
the test's schema (`connect_query`, how a deployment would point a pooled
database at a schema: PgBouncer refuses libpq's `options` parameter), and
the test's `TIDEGATE_DATABASE_DIRECT` is the schema's direct URL, where
LISTEN goes. PgBouncer refuses to run as root, so as root it runs as `nobody`.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
ALIAS = "tidegate"
POOL_SIZE = 20  # server sessions per (alias, user): more than a test's clients ever hold at once


class PgBouncer:
    """A running pgbouncer process; `url` reaches `schema` of `server` through it."""

    def __init__(self, server_host: str, server_port: int, dbname: str, schema: str, settings: str = "") -> None:
        """`settings`: more `SET ...;` statements each server session runs first (the alias's connect_query)."""
        self.folder = Path(tempfile.mkdtemp(prefix="tidegate-pgbouncer-"))
        self.folder.chmod(0o755)  # readable by `nobody` after it drops root
        self.port = _free_port()
        config = self.folder / "pgbouncer.ini"
        users = self.folder / "users.txt"
        users.write_text('"postgres" ""\n')
        config.write_text(
            "[databases]\n"
            f"{ALIAS} = host={server_host} port={server_port} dbname={dbname}"
            f" connect_query='SET search_path = {schema}; SET jit = off; {settings}'\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {users}\n"
            f"pool_mode = transaction\ndefault_pool_size = {POOL_SIZE}\nmax_client_conn = 500\n"
            "server_reset_query =\nserver_check_delay = 0\nlogfile =\npidfile =\n"
        )
        for path in (config, users):
            path.chmod(0o644)
        command = [BINARY] + (["-u", "nobody"] if os.geteuid() == 0 else []) + [str(config)]
        self._log = open(self.folder / "log.txt", "wb")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT)
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/{ALIAS}?tidegate_pooler=transaction"
        self._wait_ready()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 10
        while True:
            try:
                psycopg.connect(self.url.partition("?")[0], connect_timeout=2).close()
                return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"pgbouncer did not start: {self.log()}") from None
                time.sleep(0.02)

    def log(self) -> str:
        return (self.folder / "log.txt").read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
