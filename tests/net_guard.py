"""A socket-level guard: a test's code may connect to the addresses it names (the gateway, a loopback server) and nowhere else.

A memory library that phones home (telemetry, a model download, a cost map)
does it from deep inside, often in a thread, and often swallows the error
when the connection fails; on a machine without a network that failure is
silent. :func:`net_guard` patches every way Python opens a connection
(``socket.socket.connect``/``connect_ex``, ``socket.create_connection``)
and name lookups (``socket.getaddrinfo``): a connection to an address not
allowed is refused with an ``OSError`` naming it, and *recorded*, so the
test fails on leaving the block even when the library caught the error::

    with net_guard(gateway.port) as guard:
        system.hold(...)
    # leaving the block asserts guard.blocked == [] (each entry names the address)

Allowed: the loopback ports given (``None``: any loopback port), Unix
sockets, and lookups of ``localhost``/``127.0.0.1``/``::1``.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class BlockedConnection(ConnectionRefusedError):
    """A connection (or a name lookup) the guard refused: its message names the address."""


@dataclass
class Guard:
    """What the guard allowed and what it refused."""

    ports: frozenset[int] | None
    #: each refused attempt, ``"connect 93.184.216.34:443"`` or ``"lookup us.i.posthog.com"``
    blocked: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def allows(self, address: Any) -> bool:
        """Whether ``address`` (a socket address) may be connected to."""
        if not isinstance(address, tuple):  # a Unix socket's path
            return True
        host, port = str(address[0]), int(address[1])
        local = host in LOOPBACK or host.startswith("127.")
        return local and (self.ports is None or port in self.ports)

    def refuse(self, what: str) -> BlockedConnection:
        """Record ``what`` and the error to raise for it."""
        with self.lock:
            self.blocked.append(what)
        return BlockedConnection(f"net_guard: {what} is not allowed (only {self.allowed()})")

    def allowed(self) -> str:
        """The allowed addresses, in words."""
        return "loopback" if self.ports is None else "127.0.0.1:" + ",".join(str(p) for p in sorted(self.ports))

    def check(self) -> None:
        """Fail (``AssertionError``) naming every address refused."""
        if self.blocked:
            raise AssertionError(f"connections outside {self.allowed()} attempted: {', '.join(self.blocked)}")


@contextmanager
def net_guard(*ports: int, check: bool = True) -> Iterator[Guard]:
    """Allow connections to the loopback ``ports`` (none given: any loopback port) only; ``check``: fail the
    block on leaving it when anything was refused."""
    guard = Guard(frozenset(ports) if ports else None)
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex
    real_create, real_lookup = socket.create_connection, socket.getaddrinfo

    def connect(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not guard.allows(address):
            raise guard.refuse(f"connect {address[0]}:{address[1]}")
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not guard.allows(address):
            raise guard.refuse(f"connect {address[0]}:{address[1]}")
        return real_connect_ex(self, address)

    def create_connection(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        if not guard.allows(address):
            raise guard.refuse(f"connect {address[0]}:{address[1]}")
        return real_create(address, *args, **kwargs)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if host is not None and name not in LOOPBACK and not name.startswith("127."):
            raise socket.gaierror(socket.EAI_NONAME, str(guard.refuse(f"lookup {name}")))
        return real_lookup(host, *args, **kwargs)

    socket.socket.connect = connect  # type: ignore[method-assign]
    socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]
    socket.create_connection = create_connection  # type: ignore[assignment]
    socket.getaddrinfo = getaddrinfo  # type: ignore[assignment]
    try:
        yield guard
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]
        socket.create_connection = real_create  # type: ignore[assignment]
        socket.getaddrinfo = real_lookup  # type: ignore[assignment]
    if check:
        guard.check()
