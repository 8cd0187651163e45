"""langmem audited as a memory system: its store manager turn by turn, provenance captured per memory id.

`langmem <https://github.com/langchain-ai/langmem>`_ (the ``langmem``
extra: ``pip install 'pytest-restore[langmem]'``) keeps memories in a
LangGraph store. Its store manager (``create_memory_store_manager``) reads
each new message, searches the store for the memories nearest to it, and
makes one chat call that offers the model three tools: ``Memory`` (insert a
new memory), ``PatchDoc`` (rewrite a memory it was shown) and ``RemoveDoc``
(delete one); it then writes the model's calls to the store.
:class:`LangmemSystem` is a :class:`~pytest_restore.memory.systems.MemorySystem`
(the policy ``langmem``) over one LangGraph ``InMemoryStore`` per store:

- **Ingestion.** Each unit goes through the manager's ``ainvoke`` in
  chronological order (on one event loop per process: langchain's clients
  keep their connections process-wide, bound to a loop), one user message per unit: ``[date] Speaker: text``
  (langmem has no timestamp of its own, so the date rides in the text).
- **Provenance is captured per memory id.** The adapter's store records
  every write langmem makes while a unit is ingested: a put to a new key is
  an *insert* and cites the unit; a put to a key it holds is a *patch* and
  adds the unit to what the memory cited; a put of nothing is a *remove*.
  After every unit, what the store holds must be exactly what the writes
  account for; anything else is an error naming the question and the unit.
- **Budget.** langmem has none. While the memories held are over the budget
  (o200k_base tokens of their snippets) the adapter deletes the oldest
  through the store (oldest: whose newest source is earliest, then earliest
  written), so langmem's later searches see only what is held.
  ``LangmemSystem(..., budgeted=False)`` keeps everything.
- **Answers langmem cannot use are counted.** langmem drops a reply whose
  tool arguments are not JSON, and one with no tool call where a call was
  required, without a word; a call of the wrong shape is sent back to the
  model (trustcall's *repair* calls) and dropped when the repairs fail too.
  A reply whose tool arguments are JSON but not an object is worse:
  langchain cannot read it into a message and langmem's call raises; the
  adapter counts it the same way and the unit gives nothing, as a dropped
  answer. Each such reply is counted by the call it answered and the cause
  in the store's :class:`~pytest_restore.memory.systems.SystemFigures`, beside the
  model calls by kind (``memory update``, ``repair``, ``embeddings``) and
  the writes (``insert``, ``patch``, ``remove``).
- **Reproducible prompts.** langmem names each memory and each session
  block of its prompt with a random ``uuid4``, so the same history would
  give other prompts on every run and no cache could answer them. While a
  store ingests, langmem's ``uuid4`` gives ids counted from the question's
  id instead (the same history gives the same ids, hence the same prompts).
- **Locality.** Chat and embeddings go to :class:`~.guest.LibraryEndpoints`
  (by default the run's gateway, :func:`~.guest.run_endpoints`), the
  embeddings without langchain's token check (it
  would download a tokenizer); the store is in memory, one per history;
  LangSmith tracing is off before langchain is imported.

Failures (langmem not installed, an exception inside it, no reply within the
deadline) are one line naming langmem, the question and the unit
(:func:`~.guest.guest_failure`).

Retrieval: :class:`LangmemRanker` (the ranker ``langmem``) ranks a langmem
store's memories by the store's own semantic search for the question.

:func:`fake_answer` is the offline writer's answer to langmem's calls,
registered as a shape of the gateway's fake writer (several tool calls in one
reply): it reads the new message and the memories shown in the request,
never a gold label.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from pytest_restore.data.units import History, Unit
from pytest_restore.libraries.system import (
    DEFAULT_GUEST_DEADLINE,
    EndpointsSource,
    LibraryRanker,
    LibrarySearch,
    LibrarySystem,
    LibraryTally,
    StoreLoop,
    importing,
    run_endpoints,
)
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.systems import SystemFigures
from pytest_restore.models.fake_writer import ToolCalls, WriterAsk, python_literal, register_shape

LIBRARY = "langmem"
#: The kinds of model call langmem makes: the manager's tool call, trustcall's repairs of a reply that
#: failed validation, and the store's embeddings.
UPDATE, REPAIR, EMBEDDINGS = "memory update", "repair", "embeddings"
#: The tools of a repair call (trustcall asks the model to patch its own failed call).
REPAIR_TOOLS = frozenset({"PatchFunctionErrors", "PatchFunctionName"})
#: The store namespace every memory of a store is written under.
NAMESPACE = ("memories",)
#: How many items a listing of the whole store asks for.
LIST_LIMIT = 100_000
#: Roles langmem reads as they are; a speaker's name is written into the text.
PLAIN_ROLES = ("user", "assistant")


def message_text(unit: Unit) -> str:
    """What one unit is sent to langmem as: ``[date] Speaker: text`` (a user/assistant turn: no speaker)."""
    said = (
        unit.content if unit.role in (*PLAIN_ROLES, "session") else f"{unit.role}: {unit.content}"
    )
    return f"[{unit.date}] {said}"


def memory_text(value: Mapping[str, Any]) -> str:
    """A stored memory's text: a ``Memory``'s content, any other schema's fields as JSON."""
    content = value.get("content")
    if isinstance(content, Mapping) and set(content) == {"content"}:
        return str(content["content"])
    return json.dumps(content, sort_keys=True)


# -- reproducible ids ------------------------------------------------------------------------

#: The id source of the store ingesting in this context (``None``: langmem's own random ``uuid4``).
_IDS: ContextVar[Callable[[], uuid.UUID] | None] = ContextVar("langmem_ids", default=None)


class _CountedUuid:
    """Stands in for the ``uuid`` module inside langmem: ``uuid4`` counts from the store's seed while a
    store ingests (:data:`_IDS`), and is random otherwise; the rest is the real module."""

    def __getattr__(self, name: str) -> Any:
        return getattr(uuid, name)

    @staticmethod
    def uuid4() -> uuid.UUID:
        ids = _IDS.get()
        return ids() if ids is not None else uuid.uuid4()


def counted_ids(seed: str) -> Callable[[], uuid.UUID]:
    """Version-4 uuids from ``seed`` and a counter: the same seed gives the same sequence."""
    n = 0

    def next_id() -> uuid.UUID:
        nonlocal n
        n += 1
        digest = hashlib.sha256(f"{seed}:{n}".encode()).digest()[:16]
        return uuid.UUID(bytes=digest, version=4)

    return next_id


# -- langmem, imported on demand -------------------------------------------------------------


@dataclass(frozen=True)
class _Langmem:
    """The pieces of langmem and LangGraph the adapter uses, imported once."""

    create_manager: Any
    chat_model: Any
    embeddings: Any
    store_class: Any
    callback_class: Any
    embeddings_class: Any


_LOADED: list[_Langmem] = []
#: The one event loop langmem runs on in this process: langchain's OpenAI clients keep their HTTP
#: connections process-wide, bound to the loop that opened them (a loop per store: "Event loop is closed").
_LOOP: list[StoreLoop] = []


def _process_loop() -> StoreLoop:
    """This process's loop for langmem (started on first use)."""
    if not _LOOP:
        _LOOP.append(StoreLoop(LIBRARY))
    return _LOOP[0]


def _import_langmem() -> _Langmem:
    """langmem, LangGraph's in-memory store and langchain's OpenAI clients, tracing off (``ImportError``
    with the install line when langmem is not installed)."""
    if _LOADED:
        return _LOADED[0]
    with importing("langmem", "langmem"):
        from langchain_core.callbacks import BaseCallbackHandler
        from langchain_core.embeddings import Embeddings
        from langchain_openai import ChatOpenAI, OpenAIEmbeddings
        from langgraph.store.memory import InMemoryStore
        from langmem import create_memory_store_manager
        from langmem.knowledge import extraction
    extraction.uuid = _CountedUuid()  # reproducible ids (module docstring)
    loaded = _Langmem(
        create_memory_store_manager,
        ChatOpenAI,
        OpenAIEmbeddings,
        InMemoryStore,
        BaseCallbackHandler,
        Embeddings,
    )
    _LOADED.append(loaded)
    return loaded


# -- what langmem did ------------------------------------------------------------------------


def rejection(tools: Sequence[Mapping[str, Any]], required: bool, message: Any) -> str | None:
    """Why langmem cannot use a reply (``None``: it can): its tool arguments are not JSON, it calls no
    tool where one was required, or it calls a tool it was not offered or leaves out a required field."""
    if getattr(message, "invalid_tool_calls", None):
        return "not valid JSON"
    calls = list(getattr(message, "tool_calls", None) or [])
    if not calls:
        return "no tool call" if required else None
    offered = {str(t.get("function", t).get("name")): t.get("function", t) for t in tools}
    for call in calls:
        tool = offered.get(str(call.get("name")))
        if tool is None:
            return "a tool it did not offer"
        missing = [
            k
            for k in tool.get("parameters", {}).get("required", [])
            if k not in (call.get("args") or {})
        ]
        if missing:
            return f"JSON of the wrong shape (no {missing[0]!r})"
    return None


def _counter(base: type, figures: SystemFigures) -> Any:
    """A langchain callback handler that counts langmem's chat calls and the replies it cannot use."""

    class Counter(base):  # type: ignore[misc]  # langchain's handler, typed or not
        def __init__(self) -> None:
            super().__init__()
            self.asked: dict[Any, tuple[str, list[Mapping[str, Any]], bool]] = {}
            #: replies langchain could not even read into a message (a tool's arguments not a JSON object)
            self.unreadable = 0

        def on_chat_model_start(
            self, serialized: Any, messages: Any, *, run_id: Any, **kwargs: Any
        ) -> None:
            params = kwargs.get("invocation_params") or {}
            tools = list(params.get("tools") or [])
            names = {str(t.get("function", t).get("name")) for t in tools}
            kind = REPAIR if names & REPAIR_TOOLS else UPDATE
            required = params.get("tool_choice") not in (None, "auto", "none")
            self.asked[run_id] = (kind, tools, required)
            figures.calls[kind] += 1

        def on_llm_end(self, response: Any, *, run_id: Any, **kwargs: Any) -> None:
            kind, tools, required = self.asked.pop(run_id, (UPDATE, [], False))
            for generations in response.generations:
                for generation in generations:
                    cause = rejection(tools, required, getattr(generation, "message", None))
                    if cause is not None:
                        figures.reject(kind, cause)

        def on_llm_error(self, error: BaseException, *, run_id: Any, **kwargs: Any) -> None:
            kind, _, _ = self.asked.pop(run_id, (UPDATE, [], False))
            if type(error).__name__ == "ValidationError":  # pydantic's, reading the reply into a message
                figures.reject(kind, "arguments not a JSON object")
                self.unreadable += 1
            else:
                figures.failed[kind] += 1

    return Counter()


def _counted_embeddings(base: type, inner: Any, figures: SystemFigures) -> Any:
    """``inner`` (langchain embeddings) with each request counted as an ``embeddings`` call (``base``: langchain's
    ``Embeddings``)."""

    class Counted(base):  # type: ignore[misc]  # langchain's interface, typed or not
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            figures.calls[EMBEDDINGS] += 1
            return list(inner.embed_documents(texts))

        def embed_query(self, text: str) -> list[float]:
            figures.calls[EMBEDDINGS] += 1
            return list(inner.embed_query(text))

        async def aembed_documents(self, texts: list[str]) -> list[list[float]]:
            figures.calls[EMBEDDINGS] += 1
            return list(await inner.aembed_documents(texts))

        async def aembed_query(self, text: str) -> list[float]:
            figures.calls[EMBEDDINGS] += 1
            return list(await inner.aembed_query(text))

    return Counted()


def _recording_store(base: type, index: Mapping[str, Any], writes: list[tuple[str, Any]]) -> Any:
    """LangGraph's ``InMemoryStore`` that appends each write's key and value (``None``: a delete) to ``writes``."""

    class Recording(base):  # type: ignore[misc]  # LangGraph's store, typed or not
        def _record(self, ops: Sequence[Any]) -> None:
            for op in ops:
                if type(op).__name__ == "PutOp" and tuple(op.namespace) == NAMESPACE:
                    writes.append((str(op.key), op.value))

        def batch(self, ops: Any) -> Any:
            ops = list(ops)
            self._record(ops)
            return super().batch(ops)

        async def abatch(self, ops: Any) -> Any:
            ops = list(ops)
            self._record(ops)
            return await super().abatch(ops)

    return Recording(index=dict(index))


#: One store langmem built (its figures: calls by kind, the replies it could not use, its writes).
LangmemTally = LibraryTally


@dataclass
class _Store:
    """One live langmem store: the manager, the LangGraph store, each memory's sources and write order."""

    manager: Any
    store: Any
    loop: StoreLoop
    ids: Callable[[], uuid.UUID]
    counter: Any
    writes: list[tuple[str, Any]]
    tally: LibraryTally
    sources: dict[str, tuple[int, ...]] = field(default_factory=dict)
    order: dict[str, int] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)

    def listing(self) -> dict[str, str]:
        """Every memory the store holds: key -> text."""
        return {
            str(item.key): memory_text(item.value)
            for item in self.store.search(NAMESPACE, limit=LIST_LIMIT)
        }


class LangmemSystem(LibrarySystem[_Store]):
    """langmem as a memory system (module docstring): the store manager per unit, writes captured per id."""

    name = "langmem"
    distribution = "langmem"

    def __init__(
        self,
        endpoints: EndpointsSource = run_endpoints,
        *,
        budgeted: bool = True,
        deadline: float = DEFAULT_GUEST_DEADLINE,
        query_limit: int = 5,
    ) -> None:
        """``deadline``: seconds one unit's ingestion may take before it fails; ``query_limit``: how many of the
        nearest memories langmem shows the model with each message (its default: 5)."""
        super().__init__(endpoints, budgeted=budgeted, deadline=deadline)
        self.query_limit = query_limit

    def reset(self, budget: int, ctx: EvictionContext) -> None:
        tally = self.begin(budget, ctx)
        lib = self.imported(_import_langmem)
        e = self.resolved_endpoints()
        chat = lib.chat_model(
            model=e.chat_model,
            base_url=e.base_url,
            api_key=e.api_key,
            temperature=0,
            timeout=self.deadline,
        )
        # no token check: it would fetch a tokenizer for the model's name (a download)
        embed = lib.embeddings(
            model=e.embedding_model,
            base_url=e.base_url,
            api_key=e.api_key,
            check_embedding_ctx_length=False,
        )
        writes: list[tuple[str, Any]] = []
        store = _recording_store(
            lib.store_class,
            {
                "dims": e.embedding_dims,
                "embed": _counted_embeddings(lib.embeddings_class, embed, tally.figures),
            },
            writes,
        )
        manager = lib.create_manager(
            chat,
            namespace=NAMESPACE,
            store=store,
            enable_deletes=True,
            query_limit=self.query_limit,
        )
        self._store = _Store(
            manager,
            store,
            _process_loop(),
            counted_ids(f"langmem:{ctx.question_id}"),
            _counter(lib.callback_class, tally.figures),
            writes,
            tally,
        )

    def ingest(self, unit: Unit) -> None:
        """The store manager on one message; langmem's writes cite the unit."""
        s = self.store
        message = {"role": "user", "content": message_text(unit)}

        async def ingest() -> Any:
            # this task's context only: langmem's ids for this store (module docstring)
            _IDS.set(s.ids)
            return await s.manager.ainvoke({"messages": [message]}, config={"callbacks": [s.counter]})

        unreadable = s.counter.unreadable
        try:
            s.loop.run(ingest(), self.deadline)
        except Exception as err:
            # a reply langchain cannot read into a message stops langmem's call: counted as rejected (the
            # callback did), the unit gives nothing, as an answer langmem drops; anything else is a failure
            if s.counter.unreadable == unreadable:
                raise self.failure(f"ingesting unit {unit.position}", err) from err
        self.received(unit)
        self._apply(unit.position)

    def _apply(self, position: int) -> None:
        """Cite ``position`` from what langmem wrote while it ingested it, then check the store against it."""
        s = self.store
        for key, value in s.writes:
            if value is None:
                s.tally.figures.events["remove"] += 1
                s.sources.pop(key, None)
            elif key in s.sources:
                s.tally.figures.events["patch"] += 1
                s.sources[key] = tuple(sorted({*s.sources[key], position}))
            else:
                s.tally.figures.events["insert"] += 1
                s.sources[key] = (position,)
                s.order[key] = len(s.order)
        s.writes.clear()
        held = s.listing()
        unexplained = sorted(set(held) - set(s.sources))
        if unexplained:
            raise self.failure(f"unit {position}", f"the store holds memory {unexplained[0]} that no write made")
        missing = sorted(set(s.sources) - set(held))
        if missing:
            raise self.failure(f"unit {position}", f"memory {missing[0]} was written but is not held")
        s.texts = held

    def delete_oldest(self, unit: Unit) -> None:
        """Delete the oldest memories (through the store langmem reads) while those held are over the budget."""
        s = self.store
        for key in self.oldest_over_budget(s.order):
            s.store.delete(NAMESPACE, key)
            s.sources.pop(key)
            del s.texts[key]
        s.writes.clear()  # the adapter's own deletes are not langmem's

    def held_items(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """Each memory the store holds by its key: its text and the units it cites."""
        s = self.store
        return {key: (text, s.sources[key]) for key, text in s.texts.items()}


# -- the ranker --------------------------------------------------------------------------------


class LangmemRanker(LibraryRanker):
    """The langmem store's own semantic search for the question, best first (the ranker ``langmem``)."""

    name = "langmem"
    system = LangmemSystem

    def search(self, history: History, state: LibrarySearch, k: int) -> list[int]:
        found = state.store.store.search(NAMESPACE, query=history.question.question, limit=k)
        return self.placed(state, (memory_text(item.value) for item in found))


# -- the offline writer's answers --------------------------------------------------------------

_SESSION = re.compile(r"<session_[^>]*>\s*(.*?)\s*</session_", re.DOTALL)
_INSTANCE = re.compile(
    r"<instance id=(\S+) schema_type=\"Memory\">\s*(.*?)\s*</instance>", re.DOTALL
)
_SAID = re.compile(
    r"^\[(?P<date>[^\]]*)\]\s*(?:(?P<speaker>[^:\n]{1,40}):\s)?(?P<text>.*)$", re.DOTALL
)
_SENTENCE = re.compile(r"[^.!?]+[.!?]?")
_LONG_WORD = re.compile(r"[A-Za-z]{6,}")


def _said(session: str) -> tuple[str, str]:
    """The speaker and text of the session block's message (``[date] Speaker: text``; ``User`` unnamed)."""
    body = session.split("\n\n", 1)[-1].strip() if "Message ==" in session else session.strip()
    m = _SAID.match(body)
    return ((m["speaker"] or "User"), m["text"].strip()) if m else ("User", body)


def _facts(speaker: str, text: str) -> list[tuple[str, str]]:
    """Each statement of a message: ``(speaker, "Speaker: sentence")``."""
    sentences = [
        s.strip()
        for s in _SENTENCE.findall(text)
        if not s.strip().endswith("?") and len(s.split()) >= 4
    ]
    return [(speaker, f"{speaker}: {s}") for s in sentences]


def _words(text: str) -> set[str]:
    return {w.lower() for w in _LONG_WORD.findall(text.partition(": ")[2])}


def fake_answer(body: Mapping[str, Any], *, always_call: bool = False) -> dict[str, Any] | None:
    """The offline writer's answer to one of langmem's chat calls (``None``: not a call langmem makes).

    The manager's call: each statement of the new message (a sentence not
    ending in ``?``, four words or more) is a fact ``Speaker: sentence``. A
    fact sharing a word of six letters or more with a memory of the same
    speaker shown in the request patches that memory (its text becomes the
    fact), or removes it where the fact says ``no longer`` and ``RemoveDoc`` is
    offered; any other fact is a new ``Memory``. A message with no statement
    gets one ``Memory`` of its whole line (``Speaker: text``) when a call is required (``always_call``: always,
    as the gateway's fake writer answers every tools request with a call). Built from
    the request's text alone, so the same request gets the same answer.
    """
    tools = {str(t.get("function", {}).get("name")) for t in body.get("tools") or []}
    messages = body.get("messages") or []
    if "Memory" not in tools or not messages:
        return None
    text = "\n".join(str(m.get("content") or "") for m in messages)
    session = _SESSION.search(text)
    if session is None:
        return None
    speaker, said = _said(session.group(1))
    facts = _facts(speaker, said)
    existing = [
        (doc, _instance_text(raw))
        for doc, raw in _INSTANCE.findall(str(messages[0].get("content") or ""))
    ]
    calls: list[tuple[str, dict[str, Any]]] = []
    touched: set[str] = set()
    for speaker, fact in facts:
        near = next(
            (
                doc
                for doc, old in existing
                if doc not in touched
                and old.partition(": ")[0] == speaker
                and _words(fact) & _words(old)
            ),
            None,
        )
        if near is not None and "PatchDoc" in tools:
            touched.add(near)
            if "no longer" in fact and "RemoveDoc" in tools:
                calls.append(("RemoveDoc", {"json_doc_id": near}))
            else:
                patch = [{"op": "replace", "path": "/content", "value": fact}]
                calls.append(
                    (
                        "PatchDoc",
                        {
                            "json_doc_id": near,
                            "planned_edits": "replace the content",
                            "patches": patch,
                        },
                    )
                )
        else:
            calls.append(("Memory", {"content": fact}))
    if not calls and (always_call or body.get("tool_choice") not in (None, "auto", "none")):
        calls.append(("Memory", {"content": f"{speaker}: {said}"}))
    if not calls:
        return {"role": "assistant", "content": "Nothing to remember."}
    digest = hashlib.sha256(json.dumps(calls).encode()).hexdigest()[:12]
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{digest}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args)},
            }
            for i, (name, args) in enumerate(calls)
        ],
    }


def _instance_text(raw: str) -> str:
    """A memory's text as langmem shows it in the prompt (a Python dict's repr: ``{'content': '...'}``)."""
    try:
        value = python_literal(raw)
    except (ValueError, SyntaxError):
        return raw
    return str(value.get("content", raw)) if isinstance(value, dict) else raw


def _is_langmem(ask: WriterAsk) -> bool:
    """Whether a fake writer's request is langmem's store manager call (its tools and its session block)."""
    return "Memory" in ask.tools and any("<session_" in str(m.get("content") or "") for m in ask.messages)


def _shape(ask: WriterAsk) -> ToolCalls:
    """:func:`fake_answer` as the gateway's fake writer gives it: the tool calls, with their arguments."""
    body = {
        "messages": ask.messages,
        "tools": [{"type": "function", "function": {"name": name, "parameters": p}} for name, p in ask.tools.items()],
        "tool_choice": ask.request.wire_fields().get("tool_choice"),
    }
    answer = fake_answer(body, always_call=True) or {}
    return ToolCalls(
        (str(c["function"]["name"]), json.loads(c["function"]["arguments"])) for c in answer.get("tool_calls") or []
    )


register_shape(_is_langmem, _shape, owner=LIBRARY)

__all__ = ["LangmemRanker", "LangmemSystem", "fake_answer", "message_text"]
