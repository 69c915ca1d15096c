"""A TCP relay on 127.0.0.1 that a test can take down and freeze, to play a failing PostgreSQL.

The shared test server must never be stopped or signalled (other tests use
it), so a test points its store at this proxy instead and breaks the proxy:

- `down()` closes every relayed connection and refuses new ones (a stopped server);
- `up()` accepts again on the same port (a server that is back);
- `freeze(ports)` keeps chosen connections open but relays nothing on them,
  either way (a SIGSTOPped backend: its kernel still holds the TCP connection);
- `thaw()` relays again.

Connections are named by the local port of their upstream side, which is
`client_port` in the server's `pg_stat_activity`. Standard library only:
two threads per connection and one accepting.
"""

from __future__ import annotations

import socket
import threading
from contextlib import suppress
from urllib.parse import urlsplit, urlunsplit

ACCEPT_SLICE = 0.05  # how often the accepting thread looks up to notice down() or close()
CONNECT_TIMEOUT = 5.0


class _Pair:
    """One client connection and its upstream connection to the server."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.upstream_port: int = upstream.getsockname()[1]
        self.relaying = threading.Event()  # cleared while frozen
        self.relaying.set()
        self.closed = False

    def close(self) -> None:
        self.closed = True
        self.relaying.set()  # a pump held by a freeze must see the close
        for sock in (self.client, self.upstream):
            with suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self._target = (target_host, target_port)
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self._listener: socket.socket | None = None
        self._accepting: threading.Thread | None = None
        self._stopped = threading.Event()
        self.port = 0
        self.up()

    @classmethod
    def in_front_of(cls, url: str) -> TcpProxy:
        parts = urlsplit(url)
        return cls(parts.hostname or "127.0.0.1", parts.port or 5432)

    def url(self, url: str) -> str:
        """`url` (a postgresql:// URL to the proxied server) with its host and port pointing here."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    # --- faults -----------------------------------------------------------------------------

    def down(self) -> None:
        """Close every relayed connection and refuse new ones."""
        self._stop_accepting()
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.close()

    def up(self) -> None:
        """Accept again, on the same port as before."""
        if self._accepting is not None:
            return
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        listener.settimeout(ACCEPT_SLICE)
        self.port = listener.getsockname()[1]
        self._listener = listener
        self._stopped.clear()
        self._accepting = threading.Thread(target=self._accept, args=(listener,), name="tcp-proxy", daemon=True)
        self._accepting.start()

    def upstream_ports(self) -> set[int]:
        with self._lock:
            return {pair.upstream_port for pair in self._pairs if not pair.closed}

    def freeze(self, ports: set[int]) -> None:
        """Stop relaying on the connections whose upstream local port is in `ports`."""
        with self._lock:
            for pair in self._pairs:
                if pair.upstream_port in ports:
                    pair.relaying.clear()

    def thaw(self) -> None:
        with self._lock:
            for pair in self._pairs:
                pair.relaying.set()

    def close(self) -> None:
        self.down()

    # --- threads ------------------------------------------------------------------------------

    def _stop_accepting(self) -> None:
        if self._accepting is None:
            return
        self._stopped.set()
        self._accepting.join(timeout=5)
        assert self._listener is not None
        self._listener.close()
        self._listener = None
        self._accepting = None

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target, timeout=CONNECT_TIMEOUT)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            upstream.settimeout(None)
            pair = _Pair(client, upstream)
            with self._lock:
                if self._stopped.is_set():
                    pair.close()
                    return
                self._pairs.append(pair)
            for source, target in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(pair, source, target), name="tcp-proxy-pump", daemon=True).start()


def _pump(pair: _Pair, source: socket.socket, target: socket.socket) -> None:
    """Relay one direction until either side closes; while frozen, hold what was read."""
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            pair.relaying.wait()
            if pair.closed:
                break
            target.sendall(data)
    except OSError:
        pass
    finally:
        pair.close()
