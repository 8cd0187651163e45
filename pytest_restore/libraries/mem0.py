"""mem0 audited as a memory system: its ``add`` turn by turn, provenance from the events ``add`` returns.

`mem0 <https://github.com/mem0ai/mem0>`_ (the ``mem0ai`` package, the
``mem0`` extra: ``pip install 'pytest-restore[mem0]'``), 1.x or 2.x. mem0 1
extracts facts from each message with a model and then asks the model
whether each fact adds a memory, updates or deletes one it holds, or
changes nothing; mem0 2 makes one call that only adds. :class:`Mem0System`
is a :class:`~pytest_restore.memory.systems.MemorySystem` (the built-in
policy ``mem0``, registered lazily: mem0 is imported when a run names it)
over one mem0 ``Memory`` per store:

- **Ingestion.** Each unit goes through ``Memory.add`` in chronological
  order, one message per call. A unit whose role is ``user`` or ``assistant``
  keeps it; any other role (LoCoMo's speaker names) is sent as a user message
  ``Name: text``, since mem0 extracts facts from what the user says.
- **Provenance.** mem0 1: from the events ``add`` returns: an ``ADD`` cites the
  unit being added; an ``UPDATE`` adds it to what the memory cited before (a
  memory rewritten by a later turn cites both); a ``DELETE`` drops the memory.
  After every ``add`` the memories mem0 holds (``get_all``) must be exactly
  those its events account for; anything else is an error naming the
  question and the unit. mem0 2's ``add`` reports only ``ADD``: provenance is
  captured by comparing what ``get_all`` lists before and after each ``add``
  (a memory that is new or whose text changed cites the arriving unit, added
  to what it cited before; one that is gone is dropped), as
  :class:`~pytest_restore.memory.systems.CapturedMemorySystem` does. mem0 2
  writes the day's date into its prompt; the adapter gives it the arriving
  unit's date instead, so the prompt (and the cache key) is the same on any
  day.
- **Budget.** mem0 has none: it keeps whatever the model adds. The adapter
  gives it one the simplest way an agent would: after each ``add``, while the
  memories held are over the budget (o200k_base tokens of their snippets, as
  for every memory system), it deletes the oldest through mem0's own
  ``delete`` (oldest: whose newest source is earliest, then earliest added),
  so mem0's later updates and searches see only what is held. With
  ``budgeted=False`` (``Mem0System(..., budgeted=False)``) it holds everything
  and the budget is ignored, as for ``no-evict``.
- **Answers mem0 rejects are counted.** mem0 drops a model answer it cannot
  parse (it logs the error and carries on as if the model had found
  nothing). That is mem0's behaviour and is audited as it is, but every such
  answer is counted, by the call it answered and the cause, in the store's
  :class:`~pytest_restore.memory.systems.SystemFigures`
  (:meth:`Mem0System.figures`), beside the model calls mem0 made by kind and
  the events it returned; the audit sums them per cell and the report shows
  them (its memory-systems section, ``summary.json``'s
  ``run.checks.memory_systems``).
- **Locality.** mem0's chat and embedding calls go to the run's gateway
  (:func:`~pytest_restore.libraries.guest.run_endpoints`: the writer model,
  ``--restore-writer-model``, else the reader, and ``--restore-writer-embedder``,
  through the managed layer: cached, priced, paced) or to the endpoints
  given; each store's vectors live in an in-memory Qdrant of its own and its
  history in an in-memory SQLite database, so nothing is shared between
  stores or left on disk. Telemetry is switched off before mem0 is imported
  (:func:`~pytest_restore.libraries.guest.quiet_environment`), and mem0's
  home directory (``MEM0_DIR``) is a temporary one unless set.

Retrieval: the audit's rankers read mem0's memories as they read any memory
system's; :class:`Mem0Ranker` (the ranker ``mem0``) ranks them by mem0's own
``search`` instead. It reads only ``mem0`` stores.

The fake writer answers mem0's calls in mem0's formats (the shapes this
module registers: the facts of a message are its sentences; every new fact
is added, every memory found kept), so the adapter runs offline in CI.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pytest_restore.data.units import History, Unit
from pytest_restore.libraries.system import (
    EndpointsSource,
    LibraryEndpoints,
    LibraryRanker,
    LibrarySearch,
    LibrarySystem,
    LibraryTally,
    importing,
    run_endpoints,
)
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.systems import SystemFigures
from pytest_restore.models.fake_writer import WriterAsk, python_literal, register_shape

#: The logger mem0's ``Memory`` reports a dropped answer to.
MEM0_LOGGER = "mem0.memory.main"
#: mem0's two kinds of chat call: the facts of a message, then what they do to the memories held.
EXTRACTION, UPDATE = "fact extraction", "memory update"
#: What each of mem0's error lines means: the kind of call, and whether its answer was rejected
#: (``True``: the cause is read from the error) or the call failed (``False``).
REJECTIONS: tuple[tuple[str, str, bool], ...] = (
    ("Error in new_retrieved_facts", EXTRACTION, True),
    ("Invalid JSON response", UPDATE, True),
    ("Error iterating new_memories_with_actions", UPDATE, True),
    ("Error processing memory action", UPDATE, True),
    ("Error in new memory actions response", UPDATE, False),
    ("Error parsing extraction response", EXTRACTION, True),  # mem0 2's one call
)
#: What Python's JSON parser's errors end with: where the text stopped parsing.
_JSON_ERROR = re.compile(r"line \d+ column \d+")
#: How many memories ``get_all`` is asked for (mem0's default is 100).
GET_ALL_LIMIT = 100_000
#: Roles mem0 reads as they are; any other role (a speaker's name) is sent as a user message.
MEM0_ROLES = ("user", "assistant")


def mem0_message(unit: Unit) -> tuple[str, str]:
    """The message one unit is added as: its role and text, or a speaker's line as a user message."""
    if unit.role in MEM0_ROLES:
        return unit.role, unit.content
    if unit.role == "session":  # a whole session: its turns already name their speakers
        return "user", unit.content
    return "user", f"{unit.role}: {unit.content}"


#: One store mem0 built (its figures: units fed, model calls by kind, ``fact extraction``, ``memory update``,
#: ``embeddings``, the answers mem0 dropped by kind and cause, the events ``add`` returned, the evicted).
Mem0Tally = LibraryTally


def rejection_cause(error: str) -> str:
    """Why mem0 could not use an answer, from its error text: not JSON at all (a parser's error names
    the line and column), or JSON of another shape (a missing key, a list where an object was due)."""
    if _JSON_ERROR.search(error):
        return "not valid JSON"
    return f"JSON of the wrong shape ({error[:60]})"


#: The figures of the store whose model call this thread made last (mem0 logs a dropped answer on the
#: thread that called for it): which store's handler counts the line.
_CALLER = threading.local()


class _Rejections(logging.Handler):
    """Reads the error lines mem0 logs when it drops an answer into the store's figures."""

    def __init__(self, figures: SystemFigures) -> None:
        super().__init__(logging.ERROR)
        self.figures = figures

    def emit(self, record: logging.LogRecord) -> None:
        # stores built side by side each listen: an error line is its store's whose call its thread made last
        owner = getattr(_CALLER, "figures", None)
        if owner is not None and owner is not self.figures:
            return
        message = record.getMessage()
        found = next(((p, k, r) for p, k, r in REJECTIONS if message.startswith(p)), None)
        if found is None:
            self.figures.reject("other", f"mem0 error: {message[:60]}")
            return
        prefix, kind, rejected = found
        if rejected:
            self.figures.reject(kind, rejection_cause(message[len(prefix):].lstrip(": ")))
        else:
            self.figures.failed[kind] += 1


def _import_mem0() -> Any:
    """mem0's ``Memory`` class, imported with its telemetry off and its home directory out of the way."""
    with importing("mem0", "mem0"):
        os.environ["MEM0_TELEMETRY"] = "False"  # read once, when mem0 is first imported
        if not os.environ.get("MEM0_DIR"):
            os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="mem0-home-")
        from mem0 import Memory
    return Memory


@dataclass
class _Store:
    """One live mem0 store: the ``Memory``, its user id, and each memory's sources by mem0 id."""

    memory: Any
    user_id: str
    sources: dict[str, tuple[int, ...]]
    order: dict[str, int]
    tally: LibraryTally
    #: mem0 id -> text, as ``get_all`` last returned it
    texts: dict[str, str] = field(default_factory=dict)


class Mem0System(LibrarySystem[_Store]):
    """mem0 as a memory system (module docstring): ``add`` per unit, provenance from its events."""

    name = "mem0"
    distribution = "mem0ai"
    #: stores built side by side (each waits on its model calls); every finished one stays searchable
    parallel_stores = 64

    def __init__(
        self,
        endpoints: EndpointsSource = run_endpoints,
        *,
        budgeted: bool = True,
        temperature: float = 0.0,
        max_tokens: int = 1000,
    ) -> None:
        """``endpoints``: where mem0's model calls go (default: the run's gateway, started on the first store);
        ``temperature`` and ``max_tokens``: what mem0 asks its model for."""
        super().__init__(endpoints, budgeted=budgeted)
        self.temperature = temperature
        self.max_tokens = max_tokens

    # -- one store -------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        from qdrant_client import QdrantClient

        e = self._endpoints
        # the gateway's run token (a loopback server's any key): never a provider's key
        return {
            "llm": {
                "provider": "openai",
                "config": {
                    "model": e.chat_model,
                    "openai_base_url": e.base_url,
                    "api_key": e.api_key,
                    "temperature": self.temperature,
                    "max_tokens": self.max_tokens,
                },
            },
            "embedder": {
                "provider": "openai",
                # no embedding_dims here: mem0 would send ``dimensions``, which a local server refuses
                "config": {"model": e.embedding_model, "openai_base_url": e.base_url, "api_key": e.api_key},
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "memories",
                    "embedding_model_dims": e.embedding_dims,
                    "client": QdrantClient(location=":memory:"),
                    "path": ":memory:",  # mem0's config asks for a path; the client above is used
                },
            },
            "history_db_path": ":memory:",
        }

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        tally = self.begin(budget, ctx)
        memory_class = self.imported(_import_mem0)
        self._major = _major(self.version)
        try:
            self._endpoints: LibraryEndpoints = self.resolved_endpoints()
            with warnings.catch_warnings():  # local Qdrant says payload indexes do nothing there: as meant
                warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
                memory = memory_class.from_config(self._config())
        except Exception as err:
            raise self.failure("making a store", err) from err
        self._count_calls(memory)
        self._where = f"memory system {self.name!r} on {ctx.question_id}"
        self.store = _Store(memory, "audit", {}, {}, tally)

    def _count_calls(self, memory: Any) -> None:
        """Count the model calls mem0 makes (its LLM and embedder are wrapped where they call out)."""

        def counted(kind: str | None, call: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                _CALLER.figures = self.store.tally.figures
                self.store.tally.figures.calls[kind or _chat_kind(args, kwargs)] += 1
                return call(*args, **kwargs)

            return wrapper

        memory.llm.generate_response = counted(None, memory.llm.generate_response)
        memory.embedding_model.embed = counted("embeddings", memory.embedding_model.embed)
        if hasattr(memory.embedding_model, "embed_batch"):  # mem0 2 embeds a message's memories in one call
            memory.embedding_model.embed_batch = counted("embeddings", memory.embedding_model.embed_batch)

    def ingest(self, unit: Unit) -> None:
        """``add`` one message; provenance from its events (mem0 1) or captured from ``get_all`` (mem0 2)."""
        store = self.store
        role, content = mem0_message(unit)
        _CALLER.figures = store.tally.figures
        with _counting_rejections(store.tally.figures), _dated(unit.date):
            try:
                result = store.memory.add([{"role": role, "content": content}], user_id=store.user_id)
            except Exception as err:
                raise self.failure(f"add on unit {unit.position}", err) from err
        self.received(unit)
        events = [e for e in (result.get("results", []) if isinstance(result, Mapping) else []) if isinstance(e, Mapping)]
        if self._major >= 2:  # add reports only ADD: what changed is read from get_all
            for event in events:
                store.tally.figures.events[str(event.get("event"))] += 1
            self._capture(unit.position)
        else:
            for event in events:
                self._apply(event, unit.position)
            self._read_held(f"after unit {unit.position} arrived")

    def _apply(self, event: Mapping[str, Any], position: int) -> None:
        kind, key = str(event.get("event")), str(event.get("id"))
        store = self.store
        store.tally.figures.events[kind] += 1
        if kind == "ADD":
            store.sources[key] = (position,)
            store.order[key] = len(store.order)
        elif kind == "UPDATE":
            store.sources[key] = tuple(sorted({*store.sources.get(key, ()), position}))
            store.order.setdefault(key, len(store.order))
        elif kind == "DELETE":
            store.sources.pop(key, None)
        else:
            raise ValueError(f"{self._where}: mem0's add returned an event {kind!r} (expected ADD, UPDATE or DELETE)")

    def _listed(self) -> dict[str, str]:
        """What mem0 holds now (``get_all``): each memory's text by mem0 id."""
        store = self.store
        if self._major >= 2:
            found = store.memory.get_all(filters={"user_id": store.user_id}, top_k=GET_ALL_LIMIT)
        else:
            found = store.memory.get_all(user_id=store.user_id, limit=GET_ALL_LIMIT)
        return {str(m["id"]): str(m["memory"]) for m in found.get("results", [])}

    def _capture(self, position: int) -> None:
        """mem0 2: provenance from what ``get_all`` lists now against what it listed before ``add``."""
        store = self.store
        texts = self._listed()
        for key, text in texts.items():
            if key not in store.texts:
                store.sources[key] = (position,)
                store.order[key] = len(store.order)
            elif text != store.texts[key]:
                store.sources[key] = tuple(sorted({*store.sources.get(key, ()), position}))
                store.tally.figures.events["UPDATE (captured)"] += 1
        for key in set(store.texts) - set(texts):
            store.sources.pop(key, None)
            store.tally.figures.events["DELETE (captured)"] += 1
        store.texts = texts

    def _read_held(self, when: str) -> None:
        """What mem0 holds (``get_all``), checked against what its events account for."""
        store = self.store
        texts = self._listed()
        unexplained = sorted(set(texts) - set(store.sources))
        if unexplained:
            raise ValueError(f"{self._where} {when}: mem0 holds memory {unexplained[0]} that no event of add reported")
        missing = sorted(set(store.sources) - set(texts))
        if missing:
            raise ValueError(f"{self._where} {when}: mem0 reported memory {missing[0]} but does not hold it")
        store.texts = texts

    def delete_oldest(self, unit: Unit) -> None:
        """Delete the oldest memories (through mem0) while those held are over the budget."""
        store = self.store
        for key in self.oldest_over_budget(store.order):
            store.memory.delete(key)
            store.sources.pop(key)
            del store.texts[key]

    def held_items(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Each memory mem0 holds by its id: its text and the units it cites."""
        store = self.store
        return {key: (text, store.sources[key]) for key, text in store.texts.items()}


def _chat_kind(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """Which of mem0's chat calls this is: the extraction opens with its system prompt, the update has none."""
    messages = kwargs.get("messages", args[0] if args else [])
    return EXTRACTION if messages and messages[0].get("role") == "system" else UPDATE


@contextmanager
def _counting_rejections(figures: SystemFigures) -> Iterator[None]:
    """Count in ``figures`` the answers mem0 drops while the block runs (its add logs them from its own threads)."""
    logger = logging.getLogger(MEM0_LOGGER)
    handler = _Rejections(figures)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


class Mem0Ranker(LibraryRanker):
    """mem0's own ``search`` over a ``mem0`` store's memories, best first (the ranker ``mem0``): the cosine
    of each memory's embedding to the question's (:class:`~.system.LibraryRanker` places the results)."""

    name = "mem0"
    system = Mem0System

    def search(self, history: History, state: LibrarySearch, k: int) -> list[int]:
        memory, user_id = state.store.memory, state.store.user_id
        if _major(Mem0System.version) >= 2:  # every memory ranked, as mem0 1's search does (no threshold)
            found = memory.search(history.question.question, filters={"user_id": user_id}, top_k=k, threshold=0.0)
        else:
            found = memory.search(history.question.question, user_id=user_id, limit=k)
        return self.placed(state, (str(result["memory"]) for result in found.get("results", [])))


def _major(version: str) -> int:
    """The major version of ``version`` (``2.2.1`` -> 2; 1 when it cannot be read)."""
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else 1


#: The date mem0 2's prompt names as today, per thread (``_dated``): the arriving unit's.
_TODAY = threading.local()


@contextmanager
def _dated(date: str) -> Iterator[None]:
    """mem0 2 writes ``datetime.now()``'s day into its extraction prompt: while the block runs, it writes
    ``date`` (the arriving unit's) instead, so one turn's prompt is the same on any day (and cached)."""
    try:
        from mem0.memory import main as mem0_main
    except ImportError:  # mem0 1: nothing to date
        yield
        return
    original = getattr(mem0_main, "generate_additive_extraction_prompt", None)
    if original is None:
        yield
        return
    if not getattr(original, "_restore_dated", False):

        def dated(*args: Any, **kwargs: Any) -> Any:
            today = getattr(_TODAY, "date", None)
            if today is not None:
                kwargs.setdefault("current_date", today)
            return original(*args, **kwargs)

        dated._restore_dated = True  # type: ignore[attr-defined]
        mem0_main.generate_additive_extraction_prompt = dated
    _TODAY.date = date
    try:
        yield
    finally:
        _TODAY.date = None


# -- the fake writer's answers to mem0's calls ---------------------------------------------------

#: mem0's update prompt: the memories found, then the new facts, each between triple backticks
_BLOCKS = re.compile(r"```\n(.*?)\n\s*```", re.DOTALL)


def _facts(text: str) -> list[str]:
    """The statements of a message (its sentences of four words or more that ask nothing)."""
    sentences = re.findall(r"[^.!?\n]+[.!?]?", text)
    return [s.strip() for s in sentences if len(s.split()) >= 4 and not s.strip().endswith("?")]


def _is_extraction(ask: WriterAsk) -> bool:
    return bool(ask.json_object and ask.messages and ask.messages[0].get("role") == "system" and ask.last_user.startswith("Input:"))


def _is_update(ask: WriterAsk) -> bool:
    return ask.json_object and "new retrieved facts" in ask.last_user


def _is_additive(ask: WriterAsk) -> bool:
    return ask.json_object and "## New Messages" in ask.last_user


def _said(text: str) -> list[str]:
    """The statements of one message, each as its speaker said it (``Name: ...`` where the message opens
    with a name, as the adapter sends a named speaker's turn)."""
    speaker, colon, rest = text.partition(": ")
    if not colon or " " in speaker or len(speaker) > 40:
        speaker, rest = "", text
    return [f"{speaker}: {fact}" if speaker else fact for fact in _facts(rest)]


def _extraction(ask: WriterAsk) -> Any:
    """mem0 1's fact extraction: the statements of the input's messages (one ``role: text`` line each)."""
    lines = ask.last_user.removeprefix("Input:").strip().splitlines()
    return {"facts": [fact for line in lines for fact in _said(line.partition(": ")[2] or line)]}


def _update(ask: WriterAsk) -> Any:
    blocks = _BLOCKS.findall(ask.last_user)
    try:
        old = python_literal(blocks[0].strip()) if len(blocks) == 2 else []
        new = python_literal(blocks[-1].strip()) if blocks else []
    except (ValueError, SyntaxError):
        old, new = [], []
    kept = [{"id": str(m.get("id")), "text": str(m.get("text")), "event": "NONE"} for m in old if isinstance(m, dict)]
    added = [{"id": f"new{i}", "text": str(fact), "event": "ADD"} for i, fact in enumerate(new)]
    return {"memory": kept + added}


def _additive(ask: WriterAsk) -> Any:
    """mem0 2's one call: a memory for each statement of the new messages."""
    section = ask.last_user.split("## New Messages", 1)[1].split("\n## ", 1)[0].strip()
    try:
        said = [str(m.get("content", "")) for m in json.loads(section) if isinstance(m, dict)]
    except (ValueError, TypeError, AttributeError):  # mem0 2.2 writes them one ``role: text`` line each
        said = [line.partition(": ")[2] or line for line in section.splitlines()]
    facts = [fact for text in said for fact in _said(text)]
    return {"memory": [{"id": str(i), "text": fact} for i, fact in enumerate(facts)]}


register_shape(_is_extraction, _extraction, owner="mem0")
register_shape(_is_update, _update, owner="mem0")
register_shape(_is_additive, _additive, owner="mem0")
