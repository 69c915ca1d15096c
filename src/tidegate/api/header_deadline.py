"""A deadline on a request's headers: uvicorn's HTTP protocols with a bound on slow clients.

uvicorn closes a connection only when it is idle after a response
(`timeout_keep_alive`), and any byte received cancels that timer; nothing
bounds how long a request's headers may take, or how long a connection that
never sends one stays open. A client sending one header line every few
seconds held its connection, and its file descriptor, for as long as it liked
(the slowloris attack), and an ASGI middleware cannot help: the app is called
only once the headers are complete.

So the protocol `serve` runs arms a timer when a connection opens and when
the first byte of a later request arrives, and disarms it once the request's
headers are parsed (the response, an event stream included, may then take as
long as it needs). When it fires the connection is closed, with a 408 when
part of a request came. A slow client therefore costs a socket and a few
hundred bytes for at most the timeout, and never a task or a store call.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

log = logging.getLogger("tidegate.api")
_SAID = b"the request's headers came too slowly\n"
REQUEST_TIMEOUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\nconnection: close\r\n"
    b"content-length: %d\r\n\r\n%s" % (len(_SAID), _SAID)
)


class _HeaderDeadline(asyncio.Protocol):
    """Mixed in before one of uvicorn's HTTP/1.1 protocols (whose `cycle` is the request in flight)."""

    header_timeout = 10.0
    _deadline: asyncio.TimerHandle | None = None
    _partial = False  # part of a request came while the deadline ran
    _connection: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._connection = cast(asyncio.Transport, transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._deadline is None and self._between_requests():
            self._arm()  # a request starts on a kept-alive connection: its headers get the same time
        self._partial = self._partial or bool(data)
        super().data_received(data)
        connection = self._connection
        upgraded = connection is not None and connection.get_protocol() is not self
        if upgraded or not self._between_requests():
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _between_requests(self) -> bool:
        """No request is in flight: its headers are what is awaited (uvicorn's own fields say so)."""
        cycle: Any = getattr(self, "cycle", None)
        return (cycle is None or cycle.response_complete) and not getattr(self, "pipeline", None)

    def _arm(self) -> None:
        self._disarm()
        self._partial = False
        self._deadline = asyncio.get_running_loop().call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        connection = self._connection
        if connection is None or connection.is_closing() or not self._between_requests():
            return
        if self._partial:
            connection.write(REQUEST_TIMEOUT)
        log.debug("closed a connection whose request headers took over %.1fs", self.header_timeout)
        connection.close()


def header_deadline_protocol(timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol (httptools when installed, as uvicorn picks, else h11) with the
    deadline: pass it as uvicorn's `http=`."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
    except ImportError:  # pragma: no cover - httptools is a dependency of the service extra
        from uvicorn.protocols.http.h11_impl import H11Protocol as base  # type: ignore[assignment]
    return type("HeaderDeadlineProtocol", (_HeaderDeadline, base), {"header_timeout": timeout})
