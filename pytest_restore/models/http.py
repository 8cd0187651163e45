"""The one HTTP transport of the model layer: JSON over HTTP/1.1 (the standard library's), pooled, with a deadline.

A provider's :class:`~pytest_restore.models.api.ModelAPI` says what to send
(path, headers, body) and how to read the answer; :class:`HTTPTransport`
sends it to one base URL and says how it went, in the words the managed
layer classifies: a reply (any status, its headers and body), or a
:class:`TransportError` of one of three kinds (``timeout``: no whole reply
within the deadline; ``unreachable``: nothing listens there or the name does
not resolve; ``connection``: the connection failed or ended mid-reply).

Calls are blocking and made from the managed layer's worker threads: the
standard library's client releases the interpreter lock while it waits on
the socket, and costs a fraction of an async client per call (measured in
``benches/bench_throughput.py``). Kept-alive connections are pooled per
transport; a connection that failed is closed, never reused, and so are the
idle ones beside it (a server that dropped one has usually dropped them all). The deadline
bounds the whole exchange: each socket operation waits at most what is left
of it, and the body is read in pieces with the clock checked between them,
so a body that trickles in a byte at a time ends too.
"""

from __future__ import annotations

import errno
import http.client
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

#: Bytes read at a time from a reply body (the deadline is checked between reads).
READ_SIZE = 65536


class TransportError(Exception):
    """A request that got no whole reply: ``kind`` is ``timeout``, ``unreachable`` or ``connection``."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Reply:
    """A whole HTTP reply: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


class HTTPTransport:
    """Posts JSON bodies to one base URL over pooled keep-alive connections."""

    def __init__(self, base_url: str) -> None:
        """``base_url`` is ``http(s)://host[:port][/prefix]``; a path is posted under the prefix."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL {base_url!r} is not http(s)://HOST[:PORT][/PATH]")
        self.base_url = base_url.rstrip("/")
        self.https = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.https else 80)
        self.prefix = parts.path.rstrip("/")
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._context = ssl.create_default_context() if self.https else None

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """A pooled connection (``True``: reused) or a new one."""
        with self._lock:
            if self._idle:
                connection = self._idle.pop()
                connection.timeout = timeout
                if connection.sock is not None:
                    connection.sock.settimeout(timeout)
                return connection, True
        if self.https:
            return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._context), False
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout), False

    def post(self, path: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Reply:
        """POST ``body`` to ``path`` and read the whole reply within ``timeout`` seconds; raises :class:`TransportError`."""
        deadline = time.monotonic() + timeout
        connection, _ = self._connection(timeout)
        try:
            # not sent again here when a kept-alive connection turns out closed: the caller's
            # retries count every attempt, so the server never gets a request it was not told of
            reply = self._exchange(connection, path, body, headers, deadline)
        except TransportError as exc:
            connection.close()
            if exc.kind != "timeout":
                self.close()
            raise
        except TimeoutError:
            connection.close()
            raise TransportError("timeout", "timed out") from None
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            # the server went away (or restarted): its other kept-alive connections are as dead
            self.close()
            raise _classified(exc) from exc
        if reply.headers.get("connection", "").lower() == "close":
            connection.close()
        else:
            with self._lock:
                self._idle.append(connection)
        return reply

    def _exchange(
        self, connection: http.client.HTTPConnection, path: str, body: bytes, headers: Mapping[str, str], deadline: float
    ) -> Reply:
        connection.request("POST", self.prefix + path, body, dict(headers))
        _left(connection, deadline)
        response = connection.getresponse()
        pieces = []
        while response.length != 0:  # None: a chunked body, or one that ends with the connection
            _left(connection, deadline)
            piece = response.read1(READ_SIZE)
            if not piece:
                break
            pieces.append(piece)
        incomplete = response.length not in (None, 0)
        response.close()  # read to its end: the connection takes the next request
        if incomplete:
            raise TransportError("connection", "the server ended the connection before its reply was complete")
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, b"".join(pieces))

    def close(self) -> None:
        """Close every pooled connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


def _left(connection: http.client.HTTPConnection, deadline: float) -> None:
    """Give the socket what is left of the deadline; past it, a timeout."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TransportError("timeout", "timed out")
    if connection.sock is not None:
        connection.sock.settimeout(left)


def _classified(exc: BaseException) -> TransportError:
    """A socket or protocol error in the managed layer's words."""
    chain: list[BaseException] = []
    cause: BaseException | None = exc
    while cause is not None and all(cause is not c for c in chain):
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    for c in chain:
        if isinstance(c, (ConnectionRefusedError, socket.gaierror)):
            return TransportError("unreachable", f"{type(c).__name__}: {c}")
    if any(isinstance(c, ConnectionResetError) or getattr(c, "errno", None) == errno.ECONNRESET for c in chain):
        return TransportError("connection", "the server reset the connection before its reply was complete")
    if isinstance(exc, (http.client.RemoteDisconnected, http.client.IncompleteRead)):
        return TransportError(
            "connection", f"the connection ended without a whole reply ({type(exc).__name__})"
        )
    text = str(exc).strip()
    return TransportError("connection", f"{type(exc).__name__}: {text}" if text else type(exc).__name__)
