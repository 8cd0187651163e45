"""What every library adapter shares: where its model calls go, its environment, its failures, its loop.

- :class:`LibraryEndpoints`: the OpenAI-compatible endpoint a library is
  configured with (the run's gateway in a run; a loopback server in a test).
  An adapter takes the endpoints, or a callable that gives them, and resolves
  it when its first store is made, so a run that never asks for the library
  starts no gateway.
- :func:`quiet_environment`: telemetry switched off before a library is
  imported (the variables each library reads once, at import); :func:`importing`
  around an adapter's imports of its library: telemetry off, and a missing
  package said with its install line.
- :func:`library_version`: the installed distribution's version, for the report.
- :class:`GuestFailure` / :func:`guest_failure`: a library's exception as one
  line naming the library, the question and the unit, its text redacted.
- :class:`StoreLoop`: one event loop per store, on a thread of its own, for
  the async libraries (graphiti, cognee): a coroutine is run to completion
  with a deadline, and the loop is closed with the store.
- :func:`run_endpoints`: the default :data:`EndpointsSource` of every
  adapter: the run's gateway (:mod:`pytest_restore.models.gateway`), started
  on first use in the process that builds stores and closed at its end
  (:func:`configure_gateway` / :func:`close_gateway`, called by the run). With
  no run configuring one (a test, a script), a gateway over the fake writer
  and the fake embedder: offline and deterministic.
- :class:`CallTally`: what the gateway was asked while one store was built
  (the figures a report compares libraries by: calls per turn by kind, and
  the tokens the store's chat calls cost).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from importlib import metadata
from typing import Any, TypeVar

from pytest_restore.memory.systems import MemorySystemError
from pytest_restore.models.gateway import Gateway
from pytest_restore.models.interrupt import interrupted
from pytest_restore.models.redact import redact_keys

T = TypeVar("T")

#: Environment variables that switch the libraries' telemetry (and litellm's cost-map download) off;
#: each is read by its library when it is first imported, so they are set before any import.
TELEMETRY_OFF: dict[str, str] = {
    "MEM0_TELEMETRY": "False",
    "GRAPHITI_TELEMETRY_ENABLED": "false",
    "TELEMETRY_DISABLED": "1",
    "ANONYMIZED_TELEMETRY": "False",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "POSTHOG_DISABLED": "1",
    "DO_NOT_TRACK": "1",
    "LANGCHAIN_TRACING_V2": "false",
    "LANGSMITH_TRACING": "false",
}

#: The longest a library's one call (an ``add``, a ``search``) may take by default, in seconds.
DEFAULT_GUEST_DEADLINE = 600.0


@dataclass(frozen=True)
class LibraryEndpoints:
    """Where a library's model calls go: one OpenAI-compatible base URL for chat and embeddings.

    In a run this is the gateway's (a port the OS picked on 127.0.0.1 and a
    bearer token made for the run, never a provider's key); the model names
    are the names the gateway answers to.
    """

    #: ``http://127.0.0.1:PORT/v1``
    base_url: str
    #: the bearer token the endpoint takes (the gateway's run token)
    api_key: str
    #: the chat model's name as the endpoint knows it
    chat_model: str
    #: the embeddings model's name as the endpoint knows it
    embedding_model: str
    #: the embeddings' dimension (vector stores are made for it)
    embedding_dims: int


#: What an adapter is given: the endpoints, or how to get them when its first store is made.
EndpointsSource = LibraryEndpoints | Callable[[], LibraryEndpoints]


def resolve_endpoints(source: EndpointsSource) -> LibraryEndpoints:
    """The endpoints ``source`` names (calling it when it is a callable)."""
    return source if isinstance(source, LibraryEndpoints) else source()


#: How the run makes its gateway (``None``: the offline default, :func:`offline_gateway`).
GatewayFactory = Callable[[], Gateway]


def offline_gateway() -> Gateway:
    """A gateway over the fake writer and the fake embedder (no network, no model, deterministic)."""
    from pytest_restore.models.embeddings import FakeEmbedder
    from pytest_restore.models.fake_writer import FakeWriter

    return Gateway(FakeWriter(), FakeEmbedder(), chat_name="fake", embedding_name="fake")


class _RunGateway:
    """This process's gateway: how to make it, and the one made (started on first use)."""

    def __init__(self) -> None:
        self.factory: GatewayFactory | None = None
        self.gateway: Gateway | None = None
        self.endpoints: LibraryEndpoints | None = None
        self.lock = threading.Lock()


_RUN = _RunGateway()


def configure_gateway(factory: GatewayFactory | None) -> None:
    """How this process's gateway is made when a library first needs it (``None``: :func:`offline_gateway`).

    Called by the run with its writer model and embedder; a gateway already
    started under another factory is closed first.
    """
    with _RUN.lock:
        if _RUN.factory is factory:
            return
    close_gateway()
    with _RUN.lock:
        _RUN.factory = factory


def run_gateway() -> Gateway | None:
    """The gateway this process started (``None``: no library has asked for one)."""
    return _RUN.gateway


def run_endpoints() -> LibraryEndpoints:
    """The endpoints of this process's gateway, started on the first call (the default :data:`EndpointsSource`)."""
    with _RUN.lock:
        if _RUN.endpoints is None:
            if interrupted():  # a store fed beside another that was waiting here when Ctrl-C came: no new gateway
                raise KeyboardInterrupt
            gateway = (_RUN.factory or offline_gateway)()
            try:
                gateway.start()
                dims = gateway.probe_dimensions()
            except BaseException:
                gateway.close()
                raise
            _RUN.gateway = gateway
            _RUN.endpoints = LibraryEndpoints(gateway.base_url, gateway.token, gateway.chat_name, gateway.embedding_name, dims)
        return _RUN.endpoints


def close_gateway() -> None:
    """Close this process's gateway, if one was started (the next :func:`run_endpoints` starts another)."""
    with _RUN.lock:
        gateway, _RUN.gateway, _RUN.endpoints = _RUN.gateway, None, None
    if gateway is not None:
        gateway.close()


class CallTally:
    """The gateway's calls by kind while one store is built: ``CallTally()`` before, :meth:`calls` after.

    Counts the calls of every library of the process (stores are built one at
    a time in a process, so they are the store's); nothing when no gateway runs.
    """

    def __init__(self) -> None:
        gateway = run_gateway()
        self._start = Counter(gateway.calls) if gateway is not None else Counter()
        self._tokens = Counter(gateway.tokens) if gateway is not None else Counter()

    def calls(self) -> Counter[str]:
        """The calls made since this tally began, by kind (``json_schema NAME``, ``tools``, ``json_object``,
        ``text``, ``embeddings``)."""
        gateway = run_gateway()
        if gateway is None:
            return Counter()
        now = Counter(gateway.calls)
        now.subtract(self._start)
        return Counter({k: v for k, v in now.items() if v > 0})

    def tokens(self) -> tuple[int, int, int]:
        """The tokens (in, out) of the chat calls answered since this tally began, cached ones included, and how
        many of those calls' tokens were estimated (a model that reported no usage): what the store cost."""
        gateway = run_gateway()
        if gateway is None:
            return 0, 0, 0
        now = Counter(gateway.tokens)
        now.subtract(self._tokens)
        return now["input"], now["output"], now["estimated"]

    def embeddings(self) -> tuple[str, int] | None:
        """The embedder the gateway sends to (its run name: ``fake``, ``openai:MODEL``) and the o200k_base tokens
        of the texts embeddings requests asked for since this tally began, read from disk or not: what the store's
        embeddings cost (``None``: no gateway)."""
        gateway = run_gateway()
        if gateway is None:
            return None
        return gateway.embedder.name, gateway.tokens["embedding"] - self._tokens["embedding"]


def quiet_environment() -> None:
    """Switch every known library's telemetry off (before the library is imported; a user's own
    setting of one of these variables is kept)."""
    for name, value in TELEMETRY_OFF.items():
        os.environ.setdefault(name, value)


@contextlib.contextmanager
def importing(needs: str, extra: str) -> Iterator[None]:
    """Around a library's imports: its telemetry off first (each library reads it once, when first imported),
    and an ``ImportError`` inside raised again as one naming what is missing and the install line
    (``needs cognee: pip install 'pytest-restore[cognee]' (No module named 'cognee')``)."""
    quiet_environment()
    try:
        yield
    except ImportError as err:
        raise ImportError(f"needs {needs}: pip install 'pytest-restore[{extra}]' ({err})") from None


def library_version(distribution: str) -> str:
    """The installed version of ``distribution`` (``"not installed"`` where it is not)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


class GuestFailure(MemorySystemError):
    """A library failed inside a store: the message is one line, names the library, the question
    and the unit, and carries no key. A memory system's failure like any other, so a grid cell ends
    on this line alone, never on the library's frames."""


class GuestImportFailure(GuestFailure, ImportError):
    """A library that could not be imported when a store was made: the one line, and an ``ImportError``."""


def guest_failure(library: str, question_id: str, what: str, err: BaseException | str) -> GuestFailure:
    """One line for a library's failure: ``library``'s ``what`` on ``question_id`` and the cause,
    redacted and cut to its first line."""
    text = str(err) if isinstance(err, str) else (str(err) or type(err).__name__)
    first = redact_keys(text).strip().splitlines()[0] if text.strip() else type(err).__name__
    if len(first) > 300:
        first = first[:297] + "..."
    kind = "" if isinstance(err, str) else f"{type(err).__name__}: "
    failure = GuestImportFailure if isinstance(err, ImportError) else GuestFailure
    return failure(f"memory library {library!r} on {question_id}: {what} failed: {kind}{first}")


class StoreLoop:
    """One event loop on a thread of its own, for one store of an async library.

    :meth:`run` runs a coroutine to completion on it within ``deadline``
    seconds (a coroutine past it is cancelled and ``TimeoutError`` raised);
    :meth:`close` cancels what is left and stops the thread.
    """

    def __init__(self, name: str = "library") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=f"restore-{name}-loop", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], deadline: float = DEFAULT_GUEST_DEADLINE) -> T:
        """The coroutine's result, run on this store's loop; ``TimeoutError`` past ``deadline`` seconds."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.loop)
        try:
            return future.result(timeout=deadline)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"no answer within {deadline:g} s") from None

    def close(self) -> None:
        """Cancel the loop's remaining tasks and stop its thread."""
        if self.loop.is_closed():
            return

        async def _cancel_rest() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):  # a loop that will not settle is stopped all the same
            asyncio.run_coroutine_threadsafe(_cancel_rest(), self.loop).result(timeout=5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.loop.close()
