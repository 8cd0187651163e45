"""A loopback HTTP proxy that keeps a proxy's rules and counts what it relays, and a server to reach through it.

``LoopbackProxy`` does what a forward proxy does: ``CONNECT host:port`` opens
a tunnel (``200 Connection established``, then bytes both ways until a side
closes); a request whose target is a whole ``http://`` URL is forwarded to
that server and its reply sent back (hop-by-hop headers and
``Proxy-Authorization`` not passed on); a request in origin form (a bare
path, as a client that thinks it talks to the server sends) is refused with
400; with ``credentials`` set, a request without the matching
``Proxy-Authorization: Basic`` gets 407 with ``Proxy-Authenticate``.
``tunnels`` and ``forwarded`` count, per ``host:port``, what it relayed.

``EchoServer`` answers every POST with 200 and a JSON body naming the path,
the ``Host`` header and the body it got, over HTTP or (``tls=True``) HTTPS
with the loopback certificate in ``certs/`` (for 127.0.0.1 only, made for
these tests; a client trusts it through ``SSL_CERT_FILE``).
"""

from __future__ import annotations

import base64
import http.client
import json
import selectors
import socket
import ssl
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CERTS = Path(__file__).resolve().parent / "certs"
#: The certificate ``EchoServer(tls=True)`` presents (subject and address 127.0.0.1).
CERT = CERTS / "loopback-cert.pem"
KEY = CERTS / "loopback-key.pem"

#: Headers that concern one connection only: a proxy does not pass them on.
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authorization", "proxy-authenticate", "proxy-connection", "te",
              "trailer", "transfer-encoding", "upgrade"}


class _Running:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 in a thread of its own: ``with`` starts and stops it."""

    server: ThreadingHTTPServer

    def start(self) -> _Running:
        self.server.daemon_threads = True
        # serve_forever looks for a shutdown every poll_interval: stopping a server waits for it (0.5 s by default)
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])


class LoopbackProxy(_Running):
    """An HTTP proxy on 127.0.0.1 (``url``): CONNECT tunnels and forwarded requests, counted per target."""

    def __init__(self, credentials: str | None = None) -> None:
        """``credentials`` (``USER:PASSWORD``): the ``Proxy-Authorization`` it requires, else none."""
        self.credentials = credentials
        self.tunnels: Counter[str] = Counter()
        self.forwarded: Counter[str] = Counter()
        self.refused: Counter[int] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _refuse(self, status: int, headers: dict[str, str] | None = None) -> None:
                with proxy._lock:
                    proxy.refused[status] += 1
                body = f"proxy: {status}\n".encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _authorised(self) -> bool:
                if proxy.credentials is None:
                    return True
                expected = "Basic " + base64.b64encode(proxy.credentials.encode()).decode()
                if self.headers.get("Proxy-Authorization") == expected:
                    return True
                self._refuse(407, {"Proxy-Authenticate": 'Basic realm="loopback"'})
                return False

            def do_CONNECT(self) -> None:
                if not self._authorised():
                    return
                host, _, port = self.path.rpartition(":")
                try:
                    upstream = socket.create_connection((host, int(port)), timeout=5)
                except (OSError, ValueError):
                    self._refuse(502)
                    return
                with proxy._lock:
                    proxy.tunnels[self.path] += 1
                self.send_response(200, "Connection established")
                self.end_headers()
                self.wfile.flush()
                _relay(self.connection, upstream)
                self.close_connection = True

            def do_POST(self) -> None:
                if not self.path.startswith("http://"):
                    self._refuse(400)  # a proxy is sent the whole URL
                    return
                if not self._authorised():
                    return
                target = urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                upstream = http.client.HTTPConnection(target.hostname or "", target.port or 80, timeout=10)
                try:
                    upstream.request("POST", target.path + (f"?{target.query}" if target.query else ""), body, headers)
                    reply = upstream.getresponse()
                    answer = reply.read()
                except OSError:
                    self._refuse(502)
                    return
                finally:
                    upstream.close()
                with proxy._lock:
                    proxy.forwarded[f"{target.hostname}:{target.port or 80}"] += 1
                self.send_response(reply.status, reply.reason)
                for name, value in reply.getheaders():
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    def url(self, credentials: str | None = None) -> str:
        """The proxy's URL, with ``USER:PASSWORD@`` when given."""
        return f"http://{credentials + '@' if credentials else ''}127.0.0.1:{self.port}"


def _relay(client: socket.socket, upstream: socket.socket) -> None:
    """Bytes both ways between the two sockets until either side closes."""
    with selectors.DefaultSelector() as selector, upstream:
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        while True:
            for key, _ in selector.select(timeout=10):
                source: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    data = source.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                key.data.sendall(data)


class EchoServer(_Running):
    """Answers every POST with 200 and ``{"path", "host", "body"}``; ``requests`` counts them; HTTPS with ``tls``."""

    def __init__(self, *, tls: bool = False) -> None:
        self.requests = 0
        self.tls = tls
        echo = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                echo.requests += 1
                answer = json.dumps({"path": self.path, "host": self.headers.get("Host"), "body": body.decode()}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(CERT, KEY)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)

    @property
    def base_url(self) -> str:
        """``http(s)://127.0.0.1:PORT/v1``."""
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}/v1"
