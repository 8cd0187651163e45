"""An OpenAI-compatible chat-completions and embeddings server on 127.0.0.1, for tests and benches.

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

``POST /v1/embeddings`` keeps the real API's rules (:data:`EMBEDDING_MODELS`:
dimensions by model, ``dimensions`` only for the text-embedding-3 family; at
most 2,048 inputs a request, none empty, none over 8,192 tokens, 300,000
tokens in all, each refused with the real 400 message; an unknown model is
a 404); its vectors are the fake embedder's at the model's dimensions, so
they depend on the text only. ``server.embedded`` counts each input text of
the answered requests (``server.received_inputs``: of every request, faulted
ones included). Faults and modes apply to it as to chat requests.

Every request is logged (``server.log``); ``server.attempts`` counts requests
per canonical body and ``server.successes`` counts well-formed 200 replies per
canonical body, so a test can check that nothing was sent (or answered) twice.
The ``Authorization`` header is checked against ``expected_key`` when set but
never stored, so the log can be printed without leaking a key.

The server is a minimal HTTP/1.1 (keep-alive, ``Content-Length`` bodies) on
one asyncio event loop in a background thread: one thread instead of one per
connection keeps its share of the GIL small, so it disturbs the client it
measures as little as possible. The responder runs on that loop and should
be quick (a fake model, not a real one).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http import HTTPStatus
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from pytest_restore.models.base import ChatRequest, ReplyFormat
from pytest_restore.models.embeddings import FakeEmbedder
from pytest_restore.models.fake import FakeJudge, FakeReader, FakeScorer
from pytest_restore.models.prompts import (
    FACTS_SYSTEM,
    JUDGE_JSON_SYSTEM,
    JUDGE_SYSTEM,
    READER_SYSTEM,
    SCORER_SYSTEM,
    SUMMARY_SYSTEM,
    VERDICT_SCHEMA,
)

if TYPE_CHECKING:
    from typing_extensions import Self

    from pytest_restore.data.units import History

#: Builds the reply text from the request's messages (``[{"role", "content"}]``). A responder with an
#: ``answer_body(body)`` method is given the whole request instead (its ``tools``, its ``response_format``)
#: and returns the assistant message: ``content``, or ``tool_calls`` in the API's form.
Responder = Callable[[list[dict[str, Any]]], str]

#: Every kind of fault the server can inject.
FAULT_KINDS: tuple[str, ...] = ("429", "500", "503", "timeout", "malformed", "drop")

#: Appended to the requested model name to play a provider's dated snapshot id.
SNAPSHOT_SUFFIX = "-2024-07-18"

#: Hostile or broken behaviours the server can show on every chat request (``server.mode``).
MODES: tuple[str, ...] = (
    "non-json-200",  # a 200 whose body is an HTML page
    "missing-choices",  # a 200 completion object without "choices"
    "null-content",  # a 200 whose message content is null
    "401-echo-key",  # a 401 whose message repeats the bearer key it was sent
    "500-echo-key",  # a 500 whose message repeats the bearer key it was sent (chat and embeddings)
    "404-model",  # "The model ... does not exist"
    "429-huge-retry-after",  # a 429 asking to wait a day
    "slow-drip",  # a 200 whose body trickles in a byte every ``drip_interval`` seconds
    "hang",  # never answers
    "huge-reply",  # a 200 whose reply text is ``huge_chars`` characters long
    "echo-key",  # a 200 whose answer contains the bearer key
    "echo-key-forms",  # a 200 whose answer has the key in other forms: cut short, upper case, base64, %-encoded
    "reset",  # the connection is reset (TCP RST) once the request is read, as a crashed proxy does
    "no-usage",  # a 200 without a usage object, as some local servers answer
)


#: Embedding models the server serves, with their native dimensions.
EMBEDDING_MODELS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "nomic-embed-text": 768,  # what a local Ollama or llama.cpp server commonly serves
}
#: The real API's limits on one embeddings request.
EMBEDDING_MAX_INPUTS = 2048
EMBEDDING_MAX_TOKENS = 8192
EMBEDDING_MAX_REQUEST_TOKENS = 300_000
#: The real API's 400 for an input list it refuses (too long, or an empty string in it).
INVALID_INPUT = "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference."
#: How the embeddings endpoint can misanswer (``server.embed_mode``): an all-zero vector among the
#: others, vectors of no dimension, and two vectors given one ``index`` (the last input's missing).
EMBED_MODES: tuple[str, ...] = ("zero-vectors", "empty-vectors", "duplicate-index")
#: Paths the server answers (faults and modes apply to each).
ROUTES = ("/v1/chat/completions", "/v1/embeddings")


def is_reasoning_model(model: str) -> bool:
    """OpenAI's reasoning families, as the real API tells them apart (gpt-5*, o1*, o3*, o4*)."""
    base = model.lower().removeprefix("ft:")
    return base.startswith("gpt-5") or any(base == f or base.startswith(f + "-") for f in ("o1", "o3", "o4"))


def reasoning_parameter_error(body: dict[str, Any]) -> str | None:
    """The 400 message the real API gives a reasoning model for a parameter it rejects."""
    if not is_reasoning_model(str(body.get("model", ""))):
        return None
    if "max_tokens" in body:
        return "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."
    if "temperature" in body and body["temperature"] != 1:
        return (
            f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. "
            "Only the default (1) value is supported."
        )
    return None


#: How the server takes ``response_format`` (``server.structured``): as OpenAI's API, or as
#: llama-cpp-python's server (0.3.x: the types ``text`` and ``json_object``, a schema beside it).
STRUCTURED_SERVERS = ("openai", "llama-cpp-python")
#: OpenAI's models that refuse ``json_schema``, each with its dated and longer names (gpt-4 covers gpt-4-turbo):
#: structured outputs came with gpt-4o-2024-08-06 ...
NO_JSON_SCHEMA = ("gpt-3.5-turbo", "gpt-4", "gpt-4o-2024-05-13", "o1-mini", "o1-preview")
#: ... and those that refuse ``json_object`` too, exactly these names (JSON mode came with the 1106 models).
NO_JSON_OBJECT = ("gpt-4", "gpt-4-0613", "gpt-4-0314", "gpt-4-32k", "gpt-3.5-turbo-0613", "gpt-3.5-turbo-0301")


def _refuses(model: str, kind: str) -> bool:
    """Whether OpenAI's ``model`` refuses a ``response_format`` of type ``kind``."""
    if kind == "json_object":
        return model in NO_JSON_OBJECT
    return any(model == f or model.startswith(f + "-") for f in NO_JSON_SCHEMA)


def _strict_schema_problem(schema: Any, name: str) -> str | None:
    """OpenAI's strict-mode rule: every object closes its properties and requires each of them."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if schema.get("additionalProperties") is not False:
        return f"Invalid schema for response_format '{name}': In context=(), 'additionalProperties' is required to be supplied and to be false."
    properties = schema.get("properties") or {}
    missing = [key for key in properties if key not in (schema.get("required") or [])]
    if missing:
        return (
            f"Invalid schema for response_format '{name}': In context=(), 'required' is required to be supplied and to "
            f"be an array including every key in properties. Missing '{missing[0]}'."
        )
    return next((p for p in (_strict_schema_problem(v, name) for v in properties.values()) if p), None)


def response_format_error(body: dict[str, Any], server: str) -> tuple[int, dict[str, Any]] | None:
    """The status and error body a real server gives a ``response_format`` it refuses (``None``: accepted).

    ``server`` is one of :data:`STRUCTURED_SERVERS`. OpenAI: the types text,
    json_object (not with a schema beside it, not for the models before JSON
    mode, and only when a message says "json") and json_schema (a name, a
    strict schema, only for the models with structured outputs).
    llama-cpp-python's server (0.3.36) validates the request with pydantic,
    and its error handler wraps the validation error in a 500 (an
    ``internal_server_error`` whose message is the error and where it was
    raised): a type other than text or json_object gets that.
    """
    found = body.get("response_format")
    if found is None:
        return None
    kind = found.get("type") if isinstance(found, dict) else None
    if server == "llama-cpp-python":
        if kind in ("text", "json_object"):
            return None
        error = (
            "1 validation error:\n  {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
            f"'msg': \"Input should be 'text' or 'json_object'\", 'input': {kind!r}, "
            "'ctx': {'expected': \"'text' or 'json_object'\"}}\n\n  File \"llama_cpp/server/app.py\", line 376, "
            "in create_chat_completion\n    POST /v1/chat/completions"
        )
        return 500, {"error": {"message": error, "type": "internal_server_error", "param": None, "code": None}}
    model = str(body.get("model", ""))

    def refused(message: str, param: str = "response_format") -> tuple[int, dict[str, Any]]:
        return 400, {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": None}}

    if not isinstance(found, dict):
        return refused(f"Invalid type for 'response_format': expected an object, but got {type(found).__name__} instead.")
    if kind not in ("text", "json_object", "json_schema"):
        return refused(f"Invalid value: '{kind}'. Supported values are: 'text', 'json_object', and 'json_schema'.", "response_format.type")
    if kind == "text":
        return None
    unknown = [key for key in found if key not in ("type", kind)]
    if unknown:
        return refused(f"Unknown parameter: 'response_format.{unknown[0]}'.", f"response_format.{unknown[0]}")
    if _refuses(model, kind):
        tail = (
            " Learn more about supported models at the Structured Outputs guide: "
            "https://platform.openai.com/docs/guides/structured-outputs"
        ) if kind == "json_schema" else ""
        return refused(f"Invalid parameter: 'response_format' of type '{kind}' is not supported with this model.{tail}")
    if kind == "json_object":
        if not any("json" in str(m.get("content", "")).lower() for m in body.get("messages") or []):
            return refused("'messages' must contain the word 'json' in some form, to use 'response_format' of type 'json_object'.", "messages")
        return None
    spec = found.get("json_schema")
    if not isinstance(spec, dict) or not spec.get("name"):
        return refused("Missing required parameter: 'response_format.json_schema.name'.", "response_format.json_schema.name")
    if spec.get("strict"):
        problem = _strict_schema_problem(spec.get("schema"), str(spec["name"]))
        if problem:
            return refused(problem, "response_format")
    return None


def echo_responder(messages: list[dict[str, Any]]) -> str:
    """A deterministic default reply: an echo of the last message's content."""
    return f"echo: {messages[-1]['content']}" if messages else "echo:"


def fake_models_responder(histories: Iterable[History]) -> Responder:
    """Serve the project's fake reader, judge and scorer, told apart by their system prompt.

    ``histories`` are what the fake reader knows (``units.build_history`` of
    the audited questions). Each reply is the fake model's own ``run`` on the
    request rebuilt from the wire, so a grid through the server gets exactly
    the answers the in-process fake models give. An unknown system prompt is
    a responder error (the server's 500).
    """
    reader = FakeReader(histories)
    models: dict[str, Any] = {
        READER_SYSTEM: reader,
        JUDGE_SYSTEM: FakeJudge(),
        JUDGE_JSON_SYSTEM: FakeJudge(),  # asked for a structured verdict (below)
        SCORER_SYSTEM: FakeScorer(),
        # the memory systems' writers (session-summary-model, fact-extract-model) are the reader's model
        SUMMARY_SYSTEM: reader,
        FACTS_SYSTEM: reader,
    }

    def respond(messages: list[dict[str, Any]]) -> str:
        system = next((m["content"] for m in messages if m.get("role") == "system"), None)
        model = models.get(system or "")
        if model is None:
            raise ValueError("no fake model has this system prompt")
        # the wire's response_format is the server's to check; the fake judge answers in its shape as a constrained model would
        structured = ReplyFormat("verdict", VERDICT_SCHEMA) if system == JUDGE_JSON_SYSTEM else None
        request = ChatRequest(tuple((m["role"], m["content"]) for m in messages), max_tokens=1, reply_format=structured)
        text: str = model.run([request])[0].text
        return text

    return respond


@contextmanager
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 where every connection is refused, for as long as the block runs.

    The port is bound but never listened on, so a connection to it is
    refused at once, and no other server (another xdist worker's loopback
    server, say) can be given it meanwhile, nor can a client's own ephemeral
    port land on it. A server stopped beforehand gives neither guarantee.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", 0))
        yield int(held.getsockname()[1])


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
    #: the route asked (``/v1/chat/completions``, ``/v1/files``, ``/v1/batches/ID``, ...)
    path: str = "/v1/chat/completions"


@dataclass
class _State:
    lock: threading.Lock = field(default_factory=threading.Lock)
    log: list[LoggedRequest] = field(default_factory=list)
    attempts: Counter[str] = field(default_factory=Counter)
    successes: Counter[str] = field(default_factory=Counter)
    computed: Counter[str] = field(default_factory=Counter)
    embedded: Counter[str] = field(default_factory=Counter)
    received_inputs: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    max_in_flight: int = 0
    connections: int = 0


class OpenAIServer:
    """An OpenAI-compatible server on a free port of 127.0.0.1, run from a background thread."""

    #: The routes whose requests faults apply to.
    routes: tuple[str, ...] = ROUTES

    def __init__(
        self,
        responder: Responder = echo_responder,
        *,
        latency: float = 0.0,
        faults: Faults | None = None,
        expected_key: str | None = None,
        slots: int | None = None,
    ) -> None:
        self.responder = responder
        #: Seconds every request waits before it is answered (or faulted).
        self.latency = latency
        #: The fault injection in force; assign a new ``Faults`` to switch it.
        self.faults = faults or Faults()
        #: When set, a request whose bearer token differs gets a 401.
        self.expected_key = expected_key
        #: One of ``MODES`` (or ``None``): how every chat request is misanswered.
        self.mode: str | None = None
        #: One of ``STRUCTURED_SERVERS``: which ``response_format`` shapes it takes and how it refuses the others.
        self.structured = "openai"
        #: Seconds an embeddings request takes per input text, on top of ``latency`` (a slow local
        #: server: a large request outlives the client's timeout where a small one does not).
        self.embed_seconds_per_input = 0.0
        #: An embeddings request holding this text is refused with a 413 (too large), as a proxy would.
        self.refuse_input: str | None = None
        #: One of ``EMBED_MODES`` (or ``None``): how every embeddings request is misanswered.
        self.embed_mode: str | None = None
        #: Seconds between the bytes of a ``slow-drip`` body.
        self.drip_interval = 0.05
        #: Characters of a ``huge-reply`` answer.
        self.huge_chars = 2_000_000
        #: ``slots=1`` plays a local llama.cpp/Ollama server that computes one request at a
        #: time: requests queue for a slot, then take ``latency`` seconds each. A request is
        #: computed once it gets its slot, whether or not its client still waits for it.
        self._slots = slots
        self._slot_gate: asyncio.Semaphore | None = None
        self._state = _State()
        self._embedders: dict[int, FakeEmbedder] = {}
        #: The Files and Batches API (``/v1/files``, ``/v1/batches``); its lines are answered by ``_reply``.
        self.batches = BatchAPI(self._answer_line)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.Server | None = None
        self._thread: threading.Thread | None = None
        self._port = 0

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Self:
        """Bind a free port and serve from a background thread."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="openai-server", daemon=True)
        self._thread.start()
        # A large backlog: a 32-way client opens its connections in one burst.
        opening = asyncio.start_server(self._serve_connection, "127.0.0.1", 0, backlog=512)
        self._server = asyncio.run_coroutine_threadsafe(opening, loop).result(timeout=10)
        self._port = int(self._server.sockets[0].getsockname()[1])
        return self

    def stop(self) -> None:
        """Stop serving, drop open connections and release the port."""
        loop, server = self._loop, self._server
        if loop is None or server is None:
            return

        async def shutdown() -> None:
            server.close()
            current = asyncio.current_task()
            tasks = [task for task in asyncio.all_tasks() if task is not current]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(shutdown(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(timeout=10)
        loop.close()
        self._loop = self._server = self._thread = None

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
        if self._server is None:
            raise RuntimeError("server not started")
        return self._port

    @property
    def base_url(self) -> str:
        """The ``base_url`` to hand an OpenAI client (ends in ``/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log(self) -> list[LoggedRequest]:
        """Every request handled so far, in the order they ended (with arrival times)."""
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
    def computed(self) -> Counter[str]:
        """Requests computed per canonical body (the one-slot server's work, timed-out ones included)."""
        with self._state.lock:
            return Counter(self._state.computed)

    @property
    def embedded(self) -> Counter[str]:
        """Input texts of the embeddings requests answered with vectors, per text."""
        with self._state.lock:
            return Counter(self._state.embedded)

    @property
    def received_inputs(self) -> Counter[str]:
        """Input texts of every embeddings request received (faulted and refused ones included), per text."""
        with self._state.lock:
            return Counter(self._state.received_inputs)

    @property
    def total_requests(self) -> int:
        """How many requests arrived (hung ones included; the log has them when they end)."""
        with self._state.lock:
            return sum(self._state.attempts.values())

    @property
    def connections(self) -> int:
        """How many TCP connections clients opened."""
        with self._state.lock:
            return self._state.connections

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
            self._state.embedded.clear()
            self._state.received_inputs.clear()
            self._state.max_in_flight = self._state.in_flight

    # -- HTTP (runs on the server's event loop) -----------------------------

    async def _serve_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        with self._state.lock:
            self._state.connections += 1
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, _, rest = request_line.partition(" ")
                path = rest.rpartition(" ")[0]
                headers = {}
                for line in header_lines:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length") or 0)
                raw = await reader.readexactly(length) if length else b""
                keep_open = await self._handle(method, path, headers, raw, writer)
                if not keep_open or headers.get("connection", "").lower() == "close":
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except asyncio.CancelledError:
            # stop() cancels open connections; asyncio would log a cancelled
            # connection task as an error, and ending it is all we want.
            return
        finally:
            writer.close()

    async def _handle(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        raw: bytes,
        writer: asyncio.StreamWriter,
    ) -> bool:
        """Answer one request; ``False`` when the connection must be closed."""
        if path.startswith(("/v1/files", "/v1/batches")):
            if method == "POST" and path == "/v1/batches" and self.batches.behaviour.create_delay:
                await asyncio.sleep(self.batches.behaviour.create_delay)  # the batch is made after it all the same
            status, reply = self.batches.handle(method, path, headers, raw, self._authorized(headers))
            with self._state.lock:
                self._state.log.append(LoggedRequest(time.monotonic(), "", None, 0, None, status, path))
            writer.write(reply)
            await writer.drain()
            return True
        try:
            body: dict[str, Any] | None = json.loads(raw)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = None
        body_key = canonical_body(body) if body is not None else raw.decode("utf-8", "replace")
        attempt, started = self._enter(body_key)
        # what computing the request takes: the latency, and per input text of an embeddings request
        inputs = body.get("input") if body is not None and path.rstrip("/") == "/v1/embeddings" else None
        work = self.latency + self.embed_seconds_per_input * (len(inputs) if isinstance(inputs, list) else 0)
        if self._slots is not None:
            if self._slot_gate is None:
                self._slot_gate = asyncio.Semaphore(self._slots)
            async with self._slot_gate:
                with self._state.lock:
                    self._state.computed[body_key] += 1
                await asyncio.sleep(work)
        elif work > 0:
            await asyncio.sleep(work)
        if self.mode == "reset" and method == "POST":
            # SO_LINGER 0: closing sends an RST instead of a FIN, as a crashed proxy or a dropped NAT entry does
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self._leave(started, body_key, body, attempt, "reset", None, path)
            writer.transport.abort()
            return False
        fault = None
        if method == "POST" and path.rstrip("/") in self.routes and body is not None:
            fault = self.faults.pick(body_key, attempt) if self._authorized(headers) else None
        status, reply = self._reply(method, path, headers, body, fault)
        # Logged before the reply leaves: a client holding its reply can
        # rely on the log and the counters already showing it.
        self._leave(started, body_key, body, attempt, fault, status, path)
        if fault == "timeout":
            await asyncio.sleep(self.faults.hang_seconds)
        if self.mode == "hang" and status == 200:
            await asyncio.sleep(3600)  # until the client gives up (or the server stops)
        if reply is None:
            writer.transport.abort()
            return False
        if self.mode == "slow-drip" and status == 200:
            head, _, data = reply.partition(b"\r\n\r\n")
            writer.write(head + b"\r\n\r\n")
            for i in range(len(data)):
                writer.write(data[i : i + 1])
                await writer.drain()
                await asyncio.sleep(self.drip_interval)
            return True
        writer.write(reply)
        await writer.drain()
        return True

    def _authorized(self, headers: dict[str, str]) -> bool:
        expected = self.expected_key
        return expected is None or headers.get("authorization") == f"Bearer {expected}"

    def _reply(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: dict[str, Any] | None,
        fault: str | None,
    ) -> tuple[int | None, bytes | None]:
        """The status and bytes to send (``None`` bytes: drop the connection)."""
        if method == "POST" and path.rstrip("/") == "/v1/embeddings":
            return self._embeddings(headers, body, fault)
        if method != "POST" or path.rstrip("/") != "/v1/chat/completions":
            return 404, _render(404, {"error": {"message": "not found"}})
        if body is None:
            return 400, _render(400, {"error": {"message": "invalid JSON body"}})
        if not self._authorized(headers):
            error = {
                "message": "Incorrect API key provided.",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
            return 401, _render(401, {"error": error})
        if fault is not None:
            return self._fault(fault)
        problem = reasoning_parameter_error(body)
        if problem is not None:
            return 400, _render(400, {"error": {"message": problem, "type": "invalid_request_error"}})
        refused = response_format_error(body, self.structured)
        if refused is not None:
            return refused[0], _render(*refused)
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        mode = self.mode
        if mode == "401-echo-key":
            return 401, _render(401, {"error": {"message": f"Incorrect API key provided: {bearer}."}})
        if mode == "500-echo-key":
            return 500, _render(500, {"error": {"message": f"internal error handling key {bearer}"}})
        if mode == "404-model":
            message = f"The model `{body.get('model')}` does not exist or you do not have access to it."
            return 404, _render(404, {"error": {"message": message, "code": "model_not_found"}})
        if mode == "429-huge-retry-after":
            return 429, _render(429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "86400"})
        if mode == "non-json-200":
            page = b"<html><body>Welcome to the captive portal</body></html>"
            return 200, _encode(200, page, {})
        answer_body = getattr(self.responder, "answer_body", None)
        try:
            if answer_body is not None:  # a responder that reads the whole request (tools, response_format)
                message = answer_body(body)
                if message.get("tool_calls"):
                    return 200, _render(200, _completion(body, "", message))
                text = str(message.get("content") or "")
            else:
                text = self.responder(body.get("messages") or [])
        except Exception as exc:  # noqa: BLE001 - a responder bug is the test's 500
            return 500, _render(500, {"error": {"message": f"responder: {exc}"}})
        if mode == "echo-key":
            text = f"{text} (your key is {bearer})"
        elif mode == "echo-key-forms":
            basic = base64.b64encode(f"user:{bearer}".encode()).decode()
            text = (
                f"{text} (key starts {bearer[:16]}..., KEY {bearer.upper()}, "
                f"basic {basic}, url {quote(bearer, safe='')}, b64url {base64.urlsafe_b64encode(bearer.encode()).decode()})"
            )
        elif mode == "huge-reply":
            text = "x" * self.huge_chars
        completion = _completion(body, text)
        if mode == "missing-choices":
            del completion["choices"]
        elif mode == "null-content":
            completion["choices"][0]["message"]["content"] = None
        elif mode == "no-usage":
            del completion["usage"]
        return 200, _render(200, completion)

    def _embeddings(
        self, headers: dict[str, str], body: dict[str, Any] | None, fault: str | None
    ) -> tuple[int | None, bytes | None]:
        """``POST /v1/embeddings`` with the real API's rules (see the module docstring)."""
        if body is None:
            return 400, _render(400, {"error": {"message": "invalid JSON body"}})
        raw_input = body.get("input")
        inputs = [raw_input] if isinstance(raw_input, str) else raw_input
        if isinstance(inputs, list):
            with self._state.lock:
                self._state.received_inputs.update(str(t) for t in inputs)
        if not self._authorized(headers):
            error = {"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}
            return 401, _render(401, {"error": error})
        if fault is not None:
            return self._fault(fault)
        bearer = headers.get("authorization", "").removeprefix("Bearer ")
        if self.mode == "401-echo-key":
            return 401, _render(401, {"error": {"message": f"Incorrect API key provided: {bearer}."}})
        if self.mode == "500-echo-key":
            return 500, _render(500, {"error": {"message": f"internal error handling key {bearer}"}})
        if self.mode == "429-huge-retry-after":
            return 429, _render(429, {"error": {"message": "Rate limit reached"}}, {"Retry-After": "86400"})
        model = str(body.get("model", ""))
        if model not in EMBEDDING_MODELS:
            message = f"The model `{model}` does not exist or you do not have access to it."
            return 404, _render(404, {"error": {"message": message, "code": "model_not_found"}})
        invalid = _render(400, {"error": {"message": INVALID_INPUT, "type": "invalid_request_error"}})
        if (
            not isinstance(inputs, list)
            or not 0 < len(inputs) <= EMBEDDING_MAX_INPUTS
            or not all(isinstance(t, str) and t for t in inputs)
        ):
            return 400, invalid
        if self.refuse_input is not None and self.refuse_input in inputs:
            return 413, _render(413, {"error": {"message": "Request Entity Too Large", "type": "invalid_request_error"}})
        from pytest_restore.data.tokens import count_tokens

        counts = count_tokens(inputs)
        longest = max(counts)
        if longest > EMBEDDING_MAX_TOKENS:
            message = (
                f"This model's maximum context length is {EMBEDDING_MAX_TOKENS} tokens, however you requested "
                f"{longest} tokens ({longest} in your prompt; 0 for the completion). Please reduce your prompt; "
                "or completion length."
            )
            return 400, _render(400, {"error": {"message": message, "type": "invalid_request_error"}})
        if sum(counts) > EMBEDDING_MAX_REQUEST_TOKENS:
            message = f"Requested {sum(counts)} tokens, max {EMBEDDING_MAX_REQUEST_TOKENS} tokens per request"
            return 400, _render(400, {"error": {"message": message, "type": "invalid_request_error"}})
        dims = EMBEDDING_MODELS[model]
        if "dimensions" in body:
            if not model.startswith("text-embedding-3"):
                message = "This model does not support specifying dimensions."
                return 400, _render(400, {"error": {"message": message, "type": "invalid_request_error"}})
            dims = int(body["dimensions"])
        vectors = self._embedder(dims).embed(inputs)
        vectors[~vectors.any(axis=1), 0] = 1.0  # a real model gives no text the zero vector
        if self.embed_mode == "zero-vectors":
            vectors[len(vectors) // 2] = 0.0
        elif self.embed_mode == "empty-vectors":
            vectors = vectors[:, :0]
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode() if as_base64 else [float(x) for x in v],
            }
            for i, v in enumerate(vectors)
        ]
        if self.embed_mode == "duplicate-index" and len(data) > 1:
            data[-1]["index"] = data[0]["index"]
        served = f"{model} (your key is {bearer})" if self.mode == "echo-key" else model
        with self._state.lock:
            self._state.embedded.update(inputs)
        usage = {"prompt_tokens": sum(counts), "total_tokens": sum(counts)}
        return 200, _render(200, {"object": "list", "data": data, "model": served, "usage": usage})

    def _embedder(self, dims: int) -> FakeEmbedder:
        """The fake embedder at ``dims`` dimensions (one per size, made on first use)."""
        if dims not in self._embedders:
            self._embedders[dims] = FakeEmbedder(dims)
        return self._embedders[dims]
    def _answer_line(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """One batch line answered by the chat logic (modes and responder included, no fault injection)."""
        headers = {"authorization": f"Bearer {self.expected_key}"} if self.expected_key else {}
        status, reply = self._reply("POST", "/v1/chat/completions", headers, body, None)
        payload: dict[str, Any]
        try:
            payload = json.loads((reply or b"").partition(b"\r\n\r\n")[2])
        except ValueError:
            return 500, {"error": {"message": "the server's reply was not JSON"}}
        return status or 500, payload

    def _fault(self, kind: str) -> tuple[int | None, bytes | None]:
        """How to misbehave as ``kind``: the status and bytes, as ``_reply``."""
        faults = self.faults
        if kind in ("429", "503"):
            headers: dict[str, str] = {}
            if faults.retry_after is not None:
                headers["Retry-After"] = faults.retry_after
            if faults.retry_after_ms is not None:
                headers["retry-after-ms"] = faults.retry_after_ms
            message = "Rate limit reached" if kind == "429" else "Service unavailable"
            return int(kind), _render(int(kind), {"error": {"message": message}}, headers)
        if kind.isdigit():
            return int(kind), _render(int(kind), {"error": {"message": f"injected {kind}"}})
        if kind == "malformed":
            return 200, _encode(200, b'{"id": "chatcmpl-broken", "choices": [{"message": ', {})
        if kind in ("timeout", "drop"):
            return None, None  # a timeout hangs first (in _handle), then drops
        raise ValueError(f"unknown fault kind {kind!r}")

    # -- accounting (also read from the test's thread) ----------------------

    def _enter(self, body_key: str) -> tuple[int, float]:
        with self._state.lock:
            attempt = self._state.attempts[body_key]
            self._state.attempts[body_key] += 1
            self._state.in_flight += 1
            self._state.max_in_flight = max(self._state.max_in_flight, self._state.in_flight)
            return attempt, time.monotonic()

    def _leave(
        self,
        started: float,
        body_key: str,
        body: dict[str, Any] | None,
        attempt: int,
        fault: str | None,
        status: int | None,
        path: str = "/v1/chat/completions",
    ) -> None:
        with self._state.lock:
            self._state.in_flight -= 1
            self._state.log.append(LoggedRequest(started, body_key, body, attempt, fault, status, path.rstrip("/")))
            if status == 200 and fault is None:
                self._state.successes[body_key] += 1


def _render(status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> bytes:
    """A whole JSON response, ready to send."""
    return _encode(status, json.dumps(payload).encode(), headers or {})


def _encode(status: int, data: bytes, headers: dict[str, str]) -> bytes:
    # Status line, headers and body go out in one write: split writes meet
    # the client's delayed ACK under Nagle and cost ~40 ms each.
    phrase = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else "Overloaded"  # 529
    lines = [
        f"HTTP/1.1 {status} {phrase}",
        "Content-Type: application/json",
        f"Content-Length: {len(data)}",
        *(f"{name}: {value}" for name, value in headers.items()),
        "",
        "",
    ]
    return "\r\n".join(lines).encode("latin-1") + data


def _completion(body: dict[str, Any], text: str, message: dict[str, Any] | None = None) -> dict[str, Any]:
    """A chat.completion object the official client parses (``message``: an assistant message with tool calls)."""
    messages = body.get("messages") or []
    prompt_tokens = sum(len(str(m.get("content", "")).split()) + 4 for m in messages) + 3
    completion_tokens = len(text.split())
    choice_message = {"role": "assistant", "content": text, "refusal": None}
    if message is not None and message.get("tool_calls"):
        completion_tokens += len(json.dumps(message["tool_calls"]).split())
        choice_message = {"role": "assistant", "content": message.get("content"), "refusal": None,
                          "tool_calls": message["tool_calls"]}
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
                "message": choice_message,
                "logprobs": None,
                "finish_reason": "tool_calls" if "tool_calls" in choice_message else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


# -- the Files and Batches API -------------------------------------------------------------


@dataclass
class BatchBehaviour:
    """How the server's batches move; each look at a batch (a retrieve) is one step of its life.

    Driven by the client's polls rather than the wall clock, so a test
    decides exactly when a batch is in progress, expires or completes.
    """

    #: retrieves a new batch answers ``validating`` before it is checked
    validating_polls: int = 1
    #: lines answered per retrieve while ``in_progress`` (``None``: all at once)
    lines_per_poll: int | None = None
    #: while set, an ``in_progress`` batch answers nothing and stays in progress
    hold: bool = False
    #: the batch expires once this many of its lines are answered (the rest: ``batch_expired``)
    expire_after: int | None = None
    #: retrieves a batch spends ``finalizing`` before its files are ready
    finalizing_polls: int = 1
    #: seconds from a batch's creation to its ``expires_at`` (the API's 24h window; negative: already past)
    expires_in: int = 86_400
    #: this many creates make their batch and then answer 500 (as a gateway that lost the reply does)
    create_failures: int = 0
    #: seconds a create takes before the batch is made and the reply sent
    create_delay: float = 0.0
    #: when set, validation fails with this message (``{key}``: the key the create was sent with)
    validation_error: str | None = None
    #: when set, every line is answered with a 400 whose message is this (``{key}`` as above)
    line_error: str | None = None
    #: every answered line is written twice in the output file, the second time with another answer
    duplicate_lines: bool = False
    #: this many lines of requests the batch never held (unknown ``custom_id``) are added to the output file
    stray_lines: int = 0


@dataclass
class _Batch:
    """One batch as the server keeps it."""

    id: str
    input_file_id: str
    endpoint: str
    window: str
    metadata: dict[str, Any]
    created_at: int
    lines: list[dict[str, Any]] = field(default_factory=list)
    status: str = "validating"
    polls: int = 0
    #: answered lines: (custom id, status code, body)
    answered: list[tuple[str, int, dict[str, Any]]] = field(default_factory=list)
    errors: list[dict[str, Any]] = field(default_factory=list)
    times: dict[str, int] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None
    #: the key the create was sent with (what a hostile server echoes)
    key: str = ""


#: What a batch line may call, and the only completion window, as the real API has them.
BATCH_ENDPOINTS = ("/v1/chat/completions", "/v1/embeddings", "/v1/completions", "/v1/responses")


class BatchAPI:
    """``/v1/files`` (upload, retrieve, content) and ``/v1/batches`` (create, retrieve, list, cancel).

    A batch goes ``validating`` -> ``in_progress`` -> ``finalizing`` ->
    ``completed`` (or ``failed`` when its file breaks the rules, ``expired``
    per ``behaviour.expire_after``, ``cancelling`` -> ``cancelled``), with
    ``request_counts`` kept as lines are answered. Each line is answered by
    the server's own chat logic; the output file lists the 200s in another
    order than they were sent, the error file the rest (non-200 responses,
    and ``batch_expired`` / ``batch_cancelled`` lines for those never run).
    """

    def __init__(self, answer: Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]) -> None:
        self._answer = answer
        self._lock = threading.Lock()
        self.behaviour = BatchBehaviour()
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.batches: dict[str, _Batch] = {}
        #: how many times each canonical request body was put into a created batch
        self.lines_by_body: Counter[str] = Counter()

    @property
    def created(self) -> list[str]:
        """Ids of the batches created, in order."""
        with self._lock:
            return list(self.batches)

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes, authorized: bool) -> tuple[int, bytes]:
        """Answer one Files or Batches request: the status and the whole HTTP response."""
        if not authorized:
            return 401, _render(401, {"error": {"message": "Incorrect API key provided.", "code": "invalid_api_key"}})
        parts = [p for p in path.split("?")[0].split("/") if p][1:]  # drop "v1"
        with self._lock:
            try:
                status, payload = self._route(method, parts, headers, raw)
            except _APIError as err:
                status, payload = err.status, {"error": {"message": err.message, "type": "invalid_request_error"}}
        if isinstance(payload, bytes):
            return status, _encode(status, payload, {})
        return status, _render(status, payload)

    def _route(self, method: str, parts: list[str], headers: dict[str, str], raw: bytes) -> tuple[int, Any]:
        if parts == ["files"] and method == "POST":
            return 200, self._upload(headers, raw)
        if len(parts) >= 2 and parts[0] == "files" and method == "GET":
            meta, data = self._file(parts[1])
            return (200, data) if parts[2:] == ["content"] else (200, meta)
        if parts == ["batches"] and method == "POST":
            created = self._create(raw, headers.get("authorization", "").removeprefix("Bearer "))
            if self.behaviour.create_failures > 0:
                self.behaviour.create_failures -= 1
                raise _APIError(500, "The server had an error while processing your request.")
            return 200, created
        if parts == ["batches"] and method == "GET":
            return 200, {"object": "list", "data": [self._object(b) for b in self.batches.values()], "has_more": False}
        if len(parts) == 2 and parts[0] == "batches" and method == "GET":
            batch = self._batch(parts[1])
            self._step(batch)
            return 200, self._object(batch)
        if len(parts) == 3 and parts[0] == "batches" and parts[2] == "cancel" and method == "POST":
            batch = self._batch(parts[1])
            if batch.status in ("completed", "failed", "expired", "cancelled"):
                raise _APIError(409, f"Cannot cancel a batch with status '{batch.status}'.")
            batch.status = "cancelling"
            batch.times["cancelling_at"] = int(time.time())
            return 200, self._object(batch)
        raise _APIError(404, "not found")

    # -- files -------------------------------------------------------------

    def _upload(self, headers: dict[str, str], raw: bytes) -> dict[str, Any]:
        from email.parser import BytesParser
        from email.policy import HTTP

        kind = headers.get("content-type", "")
        if not kind.startswith("multipart/form-data"):
            raise _APIError(400, "a file upload must be multipart/form-data")
        message = BytesParser(policy=HTTP).parsebytes(f"Content-Type: {kind}\r\n\r\n".encode() + raw)
        fields: dict[str, tuple[str | None, bytes]] = {}
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            fields[str(name)] = (part.get_filename(), payload if isinstance(payload, bytes) else b"")
        purpose = fields.get("purpose", (None, b""))[1].decode()
        if "file" not in fields:
            raise _APIError(400, "missing required parameter: 'file'")
        if purpose not in ("batch", "fine-tune", "assistants", "vision", "user_data", "evals"):
            raise _APIError(400, f"'{purpose}' is not a valid purpose")
        return self._store(fields["file"][0] or "upload.jsonl", fields["file"][1], purpose)

    def _store(self, filename: str, data: bytes, purpose: str) -> dict[str, Any]:
        file_id = f"file-{len(self.files) + 1:06d}{hashlib.sha256(data).hexdigest()[:8]}"
        meta = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
            "status": "processed",
        }
        self.files[file_id] = (meta, data)
        return meta

    def _file(self, file_id: str) -> tuple[dict[str, Any], bytes]:
        if file_id not in self.files:
            raise _APIError(404, f"No such File object: {file_id}")
        return self.files[file_id]

    # -- batches -----------------------------------------------------------

    def _create(self, raw: bytes, key: str = "") -> dict[str, Any]:
        try:
            body = json.loads(raw)
        except ValueError:
            raise _APIError(400, "invalid JSON body") from None
        meta, data = self._file(str(body.get("input_file_id")))
        if meta["purpose"] != "batch":
            raise _APIError(400, "the input file must be uploaded with purpose 'batch'")
        if body.get("endpoint") not in BATCH_ENDPOINTS:
            raise _APIError(400, f"invalid endpoint: {body.get('endpoint')!r}")
        if body.get("completion_window") != "24h":
            raise _APIError(400, "completion_window must be '24h'")
        batch_id = f"batch_{len(self.batches) + 1:04d}{hashlib.sha256(data).hexdigest()[:12]}"
        batch = _Batch(batch_id, meta["id"], body["endpoint"], "24h", dict(body.get("metadata") or {}), int(time.time()))
        batch.key = key
        batch.times["expires_at"] = batch.created_at + self.behaviour.expires_in
        for text in data.decode("utf-8", "replace").split("\n"):  # JSON lines end at "\n" only
            if text.strip():
                try:
                    batch.lines.append(json.loads(text))
                except ValueError:
                    batch.lines.append({"_invalid": text})
        for line in batch.lines:
            if isinstance(line.get("body"), dict):
                self.lines_by_body[canonical_body(line["body"])] += 1
        self.batches[batch_id] = batch
        return self._object(batch)

    def _batch(self, batch_id: str) -> _Batch:
        if batch_id not in self.batches:
            raise _APIError(404, f"No batch found with id '{batch_id}'.")
        return self.batches[batch_id]

    def _problems(self, batch: _Batch) -> list[dict[str, Any]]:
        """The input file's broken rules, as the real API lists them (one per line, first ten)."""
        problems: list[dict[str, Any]] = []
        if self.behaviour.validation_error is not None:
            message = self.behaviour.validation_error.format(key=batch.key)
            return [{"code": "invalid_request", "message": message, "param": None, "line": 1}]
        seen: set[str] = set()
        models: set[str] = set()
        for n, line in enumerate(batch.lines, 1):
            body = line.get("body")
            if "_invalid" in line:
                message = "This line is not parseable as valid JSON."
            elif not isinstance(line.get("custom_id"), str):
                message = "Missing required parameter: 'custom_id'."
            elif line["custom_id"] in seen:
                message = f"Duplicate custom_id '{line['custom_id']}'; custom_id must be unique within a batch."
            elif line.get("method") != "POST":
                message = "Only the POST method is supported."
            elif line.get("url") != batch.endpoint:
                message = f"The url '{line.get('url')}' does not match the batch endpoint '{batch.endpoint}'."
            elif not isinstance(body, dict) or not body.get("model"):
                message = "Missing required parameter: 'body.model'."
            else:
                seen.add(line["custom_id"])
                models.add(str(body["model"]))
                if len(models) > 1:
                    message = "All requests in a batch must use the same model."
                else:
                    continue
            problems.append({"code": "invalid_request", "message": message, "param": None, "line": n})
        return problems[:10]

    def _step(self, batch: _Batch) -> None:
        """One look at the batch moves it along its life (see ``BatchBehaviour``)."""
        b = self.behaviour
        batch.polls += 1
        now = int(time.time())
        if batch.status == "validating" and batch.polls > b.validating_polls:
            problems = self._problems(batch)
            if problems:
                batch.status, batch.errors = "failed", problems
                batch.times["failed_at"] = now
                return
            batch.status = "in_progress"
            batch.times["in_progress_at"] = now
        elif batch.status == "in_progress" and not b.hold:
            todo = batch.lines[len(batch.answered) :]
            if b.lines_per_poll is not None:
                todo = todo[: b.lines_per_poll]
            for line in todo:
                if b.expire_after is not None and len(batch.answered) >= b.expire_after:
                    break
                if b.line_error is not None:
                    message = b.line_error.format(key=batch.key)
                    status, payload = 400, {"error": {"message": message, "type": "invalid_request_error"}}
                else:
                    status, payload = self._answer(line["body"])
                batch.answered.append((line["custom_id"], status, payload))
            if b.expire_after is not None and len(batch.answered) >= b.expire_after < len(batch.lines):
                self._close(batch, "expired", "batch_expired", "This request could not be executed before the completion window expired.")
            elif len(batch.answered) == len(batch.lines):
                batch.status, batch.polls = "finalizing", 0
                batch.times["finalizing_at"] = now
        elif batch.status == "finalizing" and batch.polls > b.finalizing_polls:
            self._close(batch, "completed", "", "")
        elif batch.status == "cancelling":
            self._close(batch, "cancelled", "batch_cancelled", "This request was not executed because the batch was cancelled.")

    def _close(self, batch: _Batch, status: str, code: str, message: str) -> None:
        """End the batch: write its output file (shuffled) and its error file."""
        done = {cid for cid, _, _ in batch.answered}
        out, err = [], []
        for n, (cid, code_, payload) in enumerate(batch.answered):
            line = {
                "id": f"batch_req_{batch.id[-8:]}{n:05d}",
                "custom_id": cid,
                "response": {"status_code": code_, "request_id": f"req_{n:05d}", "body": payload},
                "error": None,
            }
            (out if code_ == 200 else err).append(line)
            if code_ == 200 and self.behaviour.duplicate_lines:  # the same request answered again, otherwise
                again = json.loads(json.dumps(line))
                again["id"] += "-again"
                for choice in again["response"]["body"].get("choices", []):
                    choice["message"]["content"] = f"{choice['message']['content']} (answered again)"
                out.append(again)
        if out:
            for n in range(self.behaviour.stray_lines):  # answers to requests nobody sent in this batch
                stray = json.loads(json.dumps(out[0]))
                stray["id"], stray["custom_id"] = f"{stray['id']}-stray{n}", f"reader-{n:064x}"
                out.append(stray)
        if code:
            for n, line in enumerate(batch.lines):
                if line.get("custom_id") not in done:
                    err.append({
                        "id": f"batch_req_{batch.id[-8:]}x{n:05d}",
                        "custom_id": line.get("custom_id"),
                        "response": None,
                        "error": {"code": code, "message": message},
                    })
        # real output files are not in input order: a client must match lines by custom_id
        random.Random(batch.id).shuffle(out)
        if out:
            batch.output_file_id = self._store(f"{batch.id}_output.jsonl", _jsonl(out), "batch_output")["id"]
        if err:
            batch.error_file_id = self._store(f"{batch.id}_error.jsonl", _jsonl(err), "batch_output")["id"]
        batch.status = status
        batch.times[f"{status}_at"] = int(time.time())

    def _object(self, batch: _Batch) -> dict[str, Any]:
        completed = sum(1 for _, code, _ in batch.answered if code == 200)
        failed = len(batch.answered) - completed
        if batch.status in ("expired", "cancelled"):
            failed = len(batch.lines) - completed
        times = {k: batch.times.get(k) for k in (
            "in_progress_at", "expires_at", "finalizing_at", "completed_at", "failed_at", "expired_at",
            "cancelling_at", "cancelled_at",
        )}
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": batch.endpoint,
            "errors": {"object": "list", "data": batch.errors} if batch.errors else None,
            "input_file_id": batch.input_file_id,
            "completion_window": batch.window,
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": batch.created_at,
            **times,
            "request_counts": {"total": len(batch.lines), "completed": completed, "failed": failed},
            "metadata": batch.metadata,
        }


class _APIError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _jsonl(lines: list[dict[str, Any]]) -> bytes:
    # UTF-8 with non-ASCII characters unescaped (U+2028 too), as JSON writers may: a client splits on "\n" only
    return "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines).encode()
