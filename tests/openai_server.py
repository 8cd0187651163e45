"""An OpenAI-compatible chat-completions server on 127.0.0.1, for tests and benches.

No machine that runs the tests reaches the internet, so the real ``openai``
client is pointed at this server instead. It answers ``POST
/v1/chat/completions`` by calling a responder the test supplies, and can be
told to misbehave the ways real providers do (429, 5xx, hangs, garbage bodies,
dropped connections) on a seeded, reproducible share of the requests.

Usage::

    with OpenAIServer(responder, latency=0.01) as server:
        model = OpenAIChatModel(model="gpt-4o-mini", base_url=server.base_url)
        server.faults = Faults(rate=0.2, seed=1)
        ...
        assert max(server.successes.values()) == 1

Every request is logged (``server.log``); ``server.attempts`` counts requests
per canonical body and ``server.successes`` counts well-formed 200 replies per
canonical body, so a test can check that nothing was sent (or answered) twice.
The ``Authorization`` header is checked against ``expected_key`` when set but
never stored, so the log can be printed without leaking a key.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from typing_extensions import Self

#: Builds the reply text from the request's messages (``[{"role", "content"}]``).
Responder = Callable[[list[dict[str, Any]]], str]

#: Every kind of fault the server can inject.
FAULT_KINDS: tuple[str, ...] = ("429", "500", "503", "timeout", "malformed", "drop")

#: Appended to the requested model name to play a provider's dated snapshot id.
SNAPSHOT_SUFFIX = "-2024-07-18"


def echo_responder(messages: list[dict[str, Any]]) -> str:
    """A deterministic default reply: an echo of the last message's content."""
    return f"echo: {messages[-1]['content']}" if messages else "echo:"


def canonical_body(body: dict[str, Any]) -> str:
    """One string per distinct request body, independent of key order."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class Faults:
    """Which share of replies go wrong, and how; reproducible from ``seed``.

    Whether an attempt is faulted depends only on (seed, request body, how
    many times that body was seen before), never on thread timing, so two
    runs of the same test fault the same attempts.
    """

    rate: float = 0.0
    kinds: tuple[str, ...] = FAULT_KINDS
    seed: int = 0
    #: ``Retry-After`` header sent with 429/503 (``None``: no header).
    retry_after: str | None = "0"
    #: ``retry-after-ms`` header sent with 429/503 (``None``: no header).
    retry_after_ms: str | None = None
    #: How long a ``timeout`` fault hangs before closing without a reply;
    #: set it above the client's timeout.
    hang_seconds: float = 1.0
    #: Attempts of one body past this many faults always succeed (``None``:
    #: no limit), so a test with faults still knows every request completes.
    max_per_request: int | None = 2

    def pick(self, body_key: str, attempt: int) -> str | None:
        """The fault for the ``attempt``-th (0-based) sending of ``body_key``, if any."""
        if self.rate <= 0 or not self.kinds:
            return None
        if self.max_per_request is not None and attempt >= self.max_per_request:
            return None
        digest = hashlib.sha256(f"{self.seed}\0{attempt}\0{body_key}".encode()).digest()
        draw = int.from_bytes(digest[:8], "big") / 2**64
        if draw >= self.rate:
            return None
        return self.kinds[int.from_bytes(digest[8:12], "big") % len(self.kinds)]


@dataclass(frozen=True)
class LoggedRequest:
    """One request as the server saw it (no headers: they may carry a key)."""

    time: float
    body_key: str
    body: dict[str, Any] | None
    attempt: int
    fault: str | None
    status: int | None


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    log: list[LoggedRequest] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    successes: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    max_in_flight: int = 0


class OpenAIServer:
    """A threaded OpenAI-compatible server on a free port of 127.0.0.1."""

    def __init__(
        self,
        responder: Responder = echo_responder,
        *,
        latency: float = 0.0,
        faults: Faults | None = None,
        expected_key: str | None = None,
    ) -> None:
        self.responder = responder
        #: Seconds every request waits before it is answered (or faulted).
        self.latency = latency
        #: The fault injection in force; assign a new ``Faults`` to switch it.
        self.faults = faults or Faults()
        #: When set, a request whose bearer token differs gets a 401.
        self.expected_key = expected_key
        self._state = _State()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Self:
        """Bind a free port and serve from a background thread."""
        handler = _make_handler(self)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=False)
        # The default listen backlog (5) drops connection bursts from a
        # 32-way client into SYN retries that cost a second each.
        httpd.request_queue_size = 256
        httpd.daemon_threads = True
        httpd.server_bind()
        httpd.server_activate()
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- what the tests read ----------------------------------------------

    @property
    def port(self) -> int:
        """The bound port."""
        if self._httpd is None:
            raise RuntimeError("server not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The ``base_url`` to hand an OpenAI client (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log(self) -> list[LoggedRequest]:
        """Every request received so far, in arrival order."""
        with self._state.lock:
            return list(self._state.log)

    @property
    def attempts(self) -> Counter[str]:
        """Requests received per canonical body, faulted ones included."""
        with self._state.lock:
            return Counter(self._state.attempts)

    @property
    def successes(self) -> Counter[str]:
        """Well-formed 200 replies sent per canonical body."""
        with self._state.lock:
            return Counter(self._state.successes)

    @property
    def total_requests(self) -> int:
        """How many requests arrived."""
        with self._state.lock:
            return len(self._state.log)

    @property
    def max_in_flight(self) -> int:
        """The most requests that were being handled at the same moment."""
        with self._state.lock:
            return self._state.max_in_flight

    def reset_counters(self) -> None:
        """Forget the log, the counters and the concurrency gauge."""
        with self._state.lock:
            self._state.log.clear()
            self._state.attempts.clear()
            self._state.successes.clear()
            self._state.max_in_flight = self._state.in_flight

    # -- request handling (runs on the server's threads) -------------------

    def _enter(self, body_key: str, body: dict[str, Any] | None) -> tuple[int, float]:
        with self._state.lock:
            attempt = self._state.attempts[body_key]
            self._state.attempts[body_key] += 1
            self._state.in_flight += 1
            self._state.max_in_flight = max(self._state.max_in_flight, self._state.in_flight)
            return attempt, time.monotonic()

    def _leave(
        self,
        *,
        started: float,
        body_key: str,
        body: dict[str, Any] | None,
        attempt: int,
        fault: str | None,
        status: int | None,
    ) -> None:
        with self._state.lock:
            self._state.in_flight -= 1
            self._state.log.append(LoggedRequest(started, body_key, body, attempt, fault, status))
            if status == 200 and fault is None:
                self._state.successes[body_key] += 1


def _completion(body: dict[str, Any], text: str) -> dict[str, Any]:
    """A chat.completion object the official client parses."""
    messages = body.get("messages") or []
    prompt_tokens = sum(len(str(m.get("content", "")).split()) + 4 for m in messages) + 3
    completion_tokens = len(text.split())
    digest = hashlib.sha256(canonical_body(body).encode()).hexdigest()[:24]
    return {
        "id": f"chatcmpl-{digest}",
        "object": "chat.completion",
        "created": 1_721_260_800,
        "model": f"{body.get('model', 'unknown')}{SNAPSHOT_SUFFIX}",
        "system_fingerprint": "fp_test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def _make_handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        # HTTP/1.1 so the client keeps its pooled connections alive.
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # the structured log replaces the stderr access log

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body: dict[str, Any] | None = json.loads(raw)
            except ValueError:
                body = None
            body_key = (
                canonical_body(body) if isinstance(body, dict) else raw.decode("utf-8", "replace")
            )
            attempt, started = server._enter(body_key, body)
            fault: str | None = None
            status: int | None = None
            try:
                if server.latency > 0:
                    time.sleep(server.latency)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    status = self._send_json(404, {"error": {"message": "not found"}})
                    return
                if not isinstance(body, dict):
                    status = self._send_json(400, {"error": {"message": "invalid JSON"}})
                    return
                if server.expected_key is not None:
                    auth = self.headers.get("Authorization", "")
                    if auth != f"Bearer {server.expected_key}":
                        status = self._send_json(
                            401,
                            {
                                "error": {
                                    "message": "Incorrect API key provided.",
                                    "type": "invalid_request_error",
                                    "code": "invalid_api_key",
                                }
                            },
                        )
                        return
                fault = server.faults.pick(body_key, attempt)
                if fault is not None:
                    status = self._fault(fault)
                    return
                try:
                    text = server.responder(body.get("messages") or [])
                except Exception as exc:  # noqa: BLE001 - a responder bug is the test's 500
                    status = self._send_json(500, {"error": {"message": f"responder: {exc}"}})
                    return
                status = self._send_json(200, _completion(body, text))
            except (BrokenPipeError, ConnectionResetError):
                status = None  # the client gave up (its timeout); nothing to send
            finally:
                server._leave(
                    started=started,
                    body_key=body_key,
                    body=body if isinstance(body, dict) else None,
                    attempt=attempt,
                    fault=fault,
                    status=status,
                )

        def _fault(self, kind: str) -> int | None:
            faults = server.faults
            if kind in ("429", "503"):
                headers: dict[str, str] = {}
                if faults.retry_after is not None:
                    headers["Retry-After"] = faults.retry_after
                if faults.retry_after_ms is not None:
                    headers["retry-after-ms"] = faults.retry_after_ms
                message = "Rate limit reached" if kind == "429" else "Service unavailable"
                return self._send_json(int(kind), {"error": {"message": message}}, headers)
            if kind.isdigit():
                return self._send_json(int(kind), {"error": {"message": f"injected {kind}"}})
            if kind == "timeout":
                time.sleep(faults.hang_seconds)
                self._drop()
                return None
            if kind == "malformed":
                payload = b'{"id": "chatcmpl-broken", "choices": [{"message": '
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return 200
            if kind == "drop":
                self._drop()
                return None
            raise ValueError(f"unknown fault kind {kind!r}")

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def _send_json(
            self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
        ) -> int:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
            return status

    return Handler
