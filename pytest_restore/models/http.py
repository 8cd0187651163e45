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

Proxies are read from the environment as the ``openai`` client (httpx) reads
them: ``HTTPS_PROXY`` for an ``https`` base URL, ``HTTP_PROXY`` for an
``http`` one, ``ALL_PROXY`` for either (lower-case names too, which win),
and ``NO_PROXY`` for the hosts reached directly. An ``https`` base URL goes
through the proxy in a ``CONNECT`` tunnel (TLS with the server itself); an
``http`` one is forwarded (the request line names the whole URL). A proxy
URL is ``http://[USER:PASSWORD@]HOST[:PORT]`` (the credentials go in
``Proxy-Authorization``, never in a message). ``NO_PROXY`` is a comma list
of: ``*`` (every host); a domain, which covers its subdomains (``example.com``,
``.example.com`` and ``*.example.com`` alike); an IP address, matched as an
address, never as a suffix (``127.0.0.1`` covers neither ``127.0.0.10`` nor a
name ending in it); a network in CIDR
form (``127.0.0.0/8``, ``::1/128``); any of these with ``:PORT`` to bypass the
proxy for that port only. ``localhost`` names the host ``localhost``, not
``127.0.0.1``: a base URL on the loopback address bypasses a proxy when
``NO_PROXY`` names that address or a network holding it.
"""

from __future__ import annotations

import base64
import errno
import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit
from urllib.request import getproxies_environment

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


@dataclass(frozen=True)
class Proxy:
    """An HTTP proxy from the environment: where it listens and the ``Proxy-Authorization`` it needs."""

    host: str
    port: int
    #: the ``Proxy-Authorization`` header's value (``None``: the URL named no user)
    authorization: str | None = None

    def __str__(self) -> str:
        return f"proxy {self.host}:{self.port}"  # never its credentials


def proxy_for(scheme: str, host: str, port: int) -> Proxy | None:
    """The proxy the environment names for ``scheme://host:port``, or ``None`` (see the module's notes).

    The variables are read as the standard library reads them (lower-case
    names win); a proxy URL that is not ``http://[USER:PASSWORD@]HOST[:PORT]``
    is a ``ValueError`` naming the variable.
    """
    proxies = getproxies_environment()
    if _bypassed(host, port, proxies.get("no", "")):
        return None
    url = proxies.get(scheme) or proxies.get("all")
    if not url:
        return None
    name = f"${scheme.upper()}_PROXY" if proxies.get(scheme) else "$ALL_PROXY"
    parts = urlsplit(url if "://" in url else f"http://{url}")
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"{name}: {parts.scheme}://{parts.hostname or ''} is not an http://HOST[:PORT] proxy")
    authorization = None
    if parts.username is not None:
        pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        authorization = "Basic " + base64.b64encode(pair).decode("ascii")
    return Proxy(parts.hostname, parts.port or 80, authorization)


def _bypassed(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` sends requests to ``host:port`` directly."""
    host = host.lower().strip("[]")
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address | None = ipaddress.ip_address(host)
    except ValueError:
        address = None
    for entry in no_proxy.lower().split(","):
        entry = entry.strip()
        if entry == "*":
            return True
        name, entry_port = _host_port(entry)
        if not name or (entry_port is not None and entry_port != port):
            continue
        try:
            network = ipaddress.ip_network(name, strict=False)
        except ValueError:
            network = None
        if address is not None or network is not None:  # addresses match addresses only, never as a suffix
            if address is not None and network is not None and address in network:
                return True
            continue
        domain = name.removeprefix("*").lstrip(".")
        if domain and (host == domain or host.endswith("." + domain)):
            return True
    return False


def _host_port(entry: str) -> tuple[str, int | None]:
    """A ``NO_PROXY`` entry as (host or network, port or ``None``): ``h``, ``h:p``, ``[v6]``, ``[v6]:p``, a CIDR."""
    if entry.startswith("["):
        name, _, rest = entry[1:].partition("]")
        port = rest.removeprefix(":")
        return name, int(port) if port.isdigit() else None
    if entry.count(":") == 1:
        name, _, port = entry.partition(":")
        return name, int(port) if port.isdigit() else None
    return entry, None


class HTTPTransport:
    """Posts JSON bodies to one base URL over pooled keep-alive connections, through the environment's proxy."""

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
        self.proxy = proxy_for(parts.scheme, self.host, self.port)
        self._idle: list[http.client.HTTPConnection] = []
        self._busy: set[http.client.HTTPConnection] = set()  # exchanges in flight: cut by abort()
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
        proxy = self.proxy
        if proxy is None:
            if self.https:
                return http.client.HTTPSConnection(self.host, self.port, timeout=timeout, context=self._context), False
            return http.client.HTTPConnection(self.host, self.port, timeout=timeout), False
        if not self.https:  # forwarded: the request line names the whole URL (see _target)
            return http.client.HTTPConnection(proxy.host, proxy.port, timeout=timeout), False
        connection = http.client.HTTPSConnection(proxy.host, proxy.port, timeout=timeout, context=self._context)
        tunnel_headers = {"Proxy-Authorization": proxy.authorization} if proxy.authorization else None
        connection.set_tunnel(self.host, self.port, headers=tunnel_headers)
        return connection, False

    def _target(self, path: str, headers: Mapping[str, str]) -> tuple[str, dict[str, str]]:
        """The request target and headers: the path, or the whole URL (and the proxy's credentials) when forwarded."""
        if self.proxy is None or self.https:
            return self.prefix + path, dict(headers)
        netloc = f"[{self.host}]" if ":" in self.host else self.host
        forwarded = dict(headers)
        if self.proxy.authorization:
            forwarded["Proxy-Authorization"] = self.proxy.authorization
        return f"http://{netloc}:{self.port}{self.prefix}{path}", forwarded

    def post(self, path: str, body: bytes, headers: Mapping[str, str], timeout: float) -> Reply:
        """POST ``body`` to ``path`` and read the whole reply within ``timeout`` seconds; raises :class:`TransportError`."""
        return self.request("POST", path, body, headers, timeout)

    def request(self, method: str, path: str, body: bytes | None, headers: Mapping[str, str], timeout: float) -> Reply:
        """Send ``method`` (``GET``, ``POST``) to ``path`` and read the whole reply within ``timeout`` seconds, as :meth:`post`."""
        deadline = time.monotonic() + timeout
        connection, _ = self._connection(timeout)
        with self._lock:
            self._busy.add(connection)
        try:
            # not sent again here when a kept-alive connection turns out closed: the caller's
            # retries count every attempt, so the server never gets a request it was not told of
            reply = self._exchange(connection, method, path, body, headers, deadline)
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
            error = _classified(exc)
            if self.proxy is not None:  # said with the proxy's address, never its credentials
                error = TransportError(error.kind, f"{error.detail} (through {self.proxy})")
            raise error from exc
        finally:
            with self._lock:
                self._busy.discard(connection)
        if reply.headers.get("connection", "").lower() == "close":
            connection.close()
        else:
            with self._lock:
                self._idle.append(connection)
        return reply

    def _exchange(
        self,
        connection: http.client.HTTPConnection,
        method: str,
        path: str,
        body: bytes | None,
        headers: Mapping[str, str],
        deadline: float,
    ) -> Reply:
        target, sent_headers = self._target(path, headers)
        connection.request(method, target, body, sent_headers)
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

    def abort(self) -> None:
        """Cut every exchange in flight (its thread's wait on the socket ends at once, as a failed
        connection) and close the idle connections: Ctrl-C, which must not wait for a silent server."""
        with self._lock:
            busy = list(self._busy)
        for connection in busy:
            sock = connection.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:  # closed meanwhile
                    pass
        self.close()

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
