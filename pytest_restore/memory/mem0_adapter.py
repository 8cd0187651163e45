"""mem0 audited as a memory system: its ``add`` turn by turn, provenance from the events ``add`` returns.

`mem0 <https://github.com/mem0ai/mem0>`_ (the ``mem0ai`` package, the
``mem0`` extra: ``pip install 'pytest-restore[mem0]'``) extracts facts from
each message with a model and then asks the model whether each fact adds a
memory, updates or deletes one it holds, or changes nothing. :class:`Mem0System`
is a :class:`~pytest_restore.memory.systems.MemorySystem` (the policy
``mem0``) over one mem0 ``Memory`` per store:

- **Ingestion.** Each unit goes through ``Memory.add`` in chronological
  order, one message per call. A unit whose role is ``user`` or ``assistant``
  keeps it; any other role (LoCoMo's speaker names) is sent as a user message
  ``Name: text``, since mem0 extracts facts from what the user says.
- **Provenance** comes from the events ``add`` returns: an ``ADD`` cites the
  unit being added; an ``UPDATE`` adds it to what the memory cited before (a
  memory rewritten by a later turn cites both); a ``DELETE`` drops the memory.
  After every ``add`` the memories mem0 holds (``get_all``) must be exactly
  those its events account for; anything else is an error naming the
  question and the unit.
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
  answer is counted by kind in the store's :class:`Mem0Tally` (and, when
  ``tally_path`` is set, written there as one JSON line per store), beside
  the model calls mem0 made and the events it returned.
- **Locality.** mem0's chat calls go to an OpenAI-compatible base URL (the
  run's reader's), its vectors to an embeddings endpoint; each store's
  vectors live in an in-memory Qdrant of its own and its history in an
  in-memory SQLite database, so nothing is shared between stores or left on
  disk. mem0's telemetry is switched off before mem0 is imported
  (``MEM0_TELEMETRY=False``), and its home directory (``MEM0_DIR``) is a
  temporary one unless set.

Retrieval: the audit's rankers read mem0's memories as they read any memory
system's; :class:`Mem0Ranker` (the ranker ``mem0``) ranks them by mem0's own
``search`` instead. It reads only ``mem0`` stores.

The extra pins mem0 1.0: mem0 2 replaced the extract-then-update pipeline
with a single additive call whose ``add`` only ever returns ``ADD``; the
rewriting this audit asks about (a fact updated or deleted by a later turn)
is mem0 1.0's.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import warnings
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from pytest_restore.data.units import History, Unit
from pytest_restore.memory.eviction import EvictionContext
from pytest_restore.memory.memories import MEMORY_ROLE, Memory, memory_tokens
from pytest_restore.memory.retrieval import Ranker, Store
from pytest_restore.memory.systems import MemorySystem

#: The logger mem0's ``Memory`` reports a dropped answer to, and what each of its error lines means.
MEM0_LOGGER = "mem0.memory.main"
REJECTIONS: tuple[tuple[str, str], ...] = (
    ("Error in new_retrieved_facts", "fact-extraction answer rejected"),
    ("Invalid JSON response", "memory-update answer rejected"),
    ("Error iterating new_memories_with_actions", "memory-update answer rejected"),
    ("Error in new memory actions response", "memory-update call failed"),
    ("Error processing memory action", "memory action not applied"),
)
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


@dataclass(frozen=True)
class Mem0Endpoints:
    """Where mem0's model calls go: an OpenAI-compatible chat model and an embeddings model."""

    base_url: str
    #: the chat model mem0 extracts and updates with (the model name the server knows)
    llm_model: str
    embedding_model: str
    #: the embeddings' dimension (the vector store is made for it)
    embedding_dims: int
    #: the embeddings endpoint's base URL (``None``: ``base_url``)
    embeddings_base_url: str | None = None
    #: mem0's sampling temperature (0: the same prompt gives the same answer on a deterministic server)
    temperature: float = 0.0
    max_tokens: int = 1000

    @classmethod
    def of_reader(
        cls, reader: str | None, base_url: str | None, *, embedding_model: str, embedding_dims: int
    ) -> Mem0Endpoints:
        """The run's reader (``--restore-reader openai:MODEL``) at its base URL (``--restore-base-url``,
        else ``OPENAI_BASE_URL``), with the embeddings model named, at the same server."""
        provider, _, model = (reader or "").partition(":")
        if provider != "openai" or not model:
            raise ValueError(f"--restore-reader: mem0 calls an OpenAI-compatible model (openai:MODEL); got {reader!r}")
        url = base_url or os.environ.get("OPENAI_BASE_URL")
        if not url:
            raise ValueError("--restore-base-url: mem0 needs the base URL of its model's server")
        return cls(url, model, embedding_model, embedding_dims)


@dataclass
class Mem0Tally:
    """What one store's ingestion cost and what mem0 did with it."""

    question: str
    budget: int
    units: int = 0
    #: model calls mem0 made: ``chat`` (extraction and update) and ``embeddings``
    calls: Counter[str] = field(default_factory=Counter)
    #: the events mem0's ``add`` returned, by kind (``ADD``, ``UPDATE``, ``DELETE``)
    events: Counter[str] = field(default_factory=Counter)
    #: answers mem0 dropped, by kind (:data:`REJECTIONS`)
    rejected: Counter[str] = field(default_factory=Counter)
    #: memories the adapter deleted to keep within the budget
    evicted: int = 0
    held: int = 0
    held_tokens: int = 0

    def to_json(self) -> dict[str, Any]:
        """The tally as one JSON object (counters as plain, sorted mappings)."""
        return {
            "question": self.question,
            "budget": self.budget,
            "units": self.units,
            "calls": dict(sorted(self.calls.items())),
            "events": dict(sorted(self.events.items())),
            "rejected": dict(sorted(self.rejected.items())),
            "evicted": self.evicted,
            "held": self.held,
            "held_tokens": self.held_tokens,
        }


class _Rejections(logging.Handler):
    """Counts the error lines mem0 logs when it drops an answer, by kind."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.counts: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        kind = next((k for prefix, k in REJECTIONS if message.startswith(prefix)), None)
        self.counts[kind or f"other mem0 error: {message[:60]}"] += 1


def _import_mem0() -> Any:
    """mem0's ``Memory`` class, imported with its telemetry off and its home directory out of the way."""
    os.environ["MEM0_TELEMETRY"] = "False"  # read once, when mem0 is first imported
    if not os.environ.get("MEM0_DIR"):
        os.environ["MEM0_DIR"] = tempfile.mkdtemp(prefix="mem0-home-")
    try:
        from mem0 import Memory
    except ImportError as err:
        raise ImportError(f"the mem0 memory system needs mem0: pip install 'pytest-restore[mem0]' ({err})") from None
    return Memory


@dataclass
class _Store:
    """One live mem0 store: the ``Memory``, its user id, and each memory's sources by mem0 id."""

    memory: Any
    user_id: str
    sources: dict[str, tuple[int, ...]]
    order: dict[str, int]
    tally: Mem0Tally
    #: mem0 id -> text, as ``get_all`` last returned it
    texts: dict[str, str] = field(default_factory=dict)


class Mem0System(MemorySystem):
    """mem0 as a memory system (module docstring): ``add`` per unit, provenance from its events."""

    name = "mem0"

    #: every live store of the process, by (history id, held texts): what :class:`Mem0Ranker` searches
    live: ClassVar[dict[tuple[str, tuple[str, ...]], _Store]] = {}

    def __init__(
        self,
        endpoints: Mem0Endpoints,
        *,
        budgeted: bool = True,
        tally_path: str | Path | None = None,
        api_key: str | None = None,
    ) -> None:
        self.endpoints = endpoints
        self.budgeted = budgeted  # type: ignore[misc]  # per instance: mem0 with or without a budget
        self.tally_path = Path(tally_path) if tally_path is not None else None
        self._api_key = api_key
        #: the tallies of the stores this instance built, in order
        self.tallies: list[Mem0Tally] = []

    # -- one store -------------------------------------------------------

    def _config(self) -> dict[str, Any]:
        from qdrant_client import QdrantClient

        e = self.endpoints
        # a local server takes any key; never one from a record, a cache or a log: only the environment's
        key = self._api_key or os.environ.get("OPENAI_API_KEY") or "local"
        return {
            "llm": {
                "provider": "openai",
                "config": {
                    "model": e.llm_model,
                    "openai_base_url": e.base_url,
                    "api_key": key,
                    "temperature": e.temperature,
                    "max_tokens": e.max_tokens,
                },
            },
            "embedder": {
                "provider": "openai",
                # no embedding_dims here: mem0 would send ``dimensions``, which a local server refuses
                "config": {"model": e.embedding_model, "openai_base_url": e.embeddings_base_url or e.base_url, "api_key": key},
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
        memory_class = _import_mem0()
        with warnings.catch_warnings():  # local Qdrant says payload indexes do nothing there: as meant
            warnings.filterwarnings("ignore", "Payload indexes have no effect", UserWarning)
            memory = memory_class.from_config(self._config())
        self._count_calls(memory)
        self.budget = budget
        self._where = f"memory system {self.name!r} on {ctx.question_id}"
        self.store = _Store(memory, "audit", {}, {}, Mem0Tally(ctx.question_id, budget))
        self.tallies.append(self.store.tally)
        self._units: list[Unit] = []

    def _count_calls(self, memory: Any) -> None:
        """Count the model calls mem0 makes (its LLM and embedder are wrapped where they call out)."""

        def counted(kind: str, call: Callable[..., Any]) -> Callable[..., Any]:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                self.store.tally.calls[kind] += 1
                return call(*args, **kwargs)

            return wrapper

        memory.llm.generate_response = counted("chat", memory.llm.generate_response)
        memory.embedding_model.embed = counted("embeddings", memory.embedding_model.embed)

    def add(self, unit: Unit) -> None:
        store = self.store
        role, content = mem0_message(unit)
        with _counting_rejections() as rejections:
            try:
                result = store.memory.add([{"role": role, "content": content}], user_id=store.user_id)
            except Exception as err:
                raise RuntimeError(f"{self._where}: mem0's add failed on unit {unit.position}: {err}") from err
        store.tally.rejected.update(rejections)
        store.tally.units += 1
        self._units.append(unit)
        for event in result.get("results", []) if isinstance(result, Mapping) else []:
            self._apply(event, unit.position)
        self._read_held(f"after unit {unit.position} arrived")
        if self.budgeted:
            self._evict()

    def _apply(self, event: Mapping[str, Any], position: int) -> None:
        kind, key = str(event.get("event")), str(event.get("id"))
        store = self.store
        store.tally.events[kind] += 1
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

    def _read_held(self, when: str) -> None:
        """What mem0 holds (``get_all``), checked against what its events account for."""
        store = self.store
        found = store.memory.get_all(user_id=store.user_id, limit=GET_ALL_LIMIT)
        texts = {str(m["id"]): str(m["memory"]) for m in found.get("results", [])}
        unexplained = sorted(set(texts) - set(store.sources))
        if unexplained:
            raise ValueError(f"{self._where} {when}: mem0 holds memory {unexplained[0]} that no event of add reported")
        missing = sorted(set(store.sources) - set(texts))
        if missing:
            raise ValueError(f"{self._where} {when}: mem0 reported memory {missing[0]} but does not hold it")
        store.texts = texts

    def _evict(self) -> None:
        """Delete the oldest memories (through mem0) while those held are over the budget."""
        store = self.store
        held = self._held()
        sizes = dict(zip(held, memory_tokens([m for _, m in held.items()])))
        total = sum(sizes.values())
        for key in sorted(held, key=lambda k: (max(store.sources[k]), store.order[k])):
            if total <= self.budget:
                break
            store.memory.delete(key)
            store.sources.pop(key)
            del store.texts[key]
            total -= sizes[key]
            store.tally.evicted += 1

    def _held(self) -> dict[str, Memory]:
        """Each held memory by mem0 id: its text, the date of its newest source, its sources."""
        store = self.store
        return {
            key: Memory(text, self._units[max(store.sources[key])].date, store.sources[key])
            for key, text in store.texts.items()
        }

    def memories(self) -> list[Memory]:
        held = self._held()
        return sorted(held.values(), key=lambda m: (m.sources, m.text))

    def finish(self) -> None:
        store = self.store
        held = self.memories()
        store.tally.held, store.tally.held_tokens = len(held), sum(memory_tokens(held))
        Mem0System.live[(store.tally.question, tuple(sorted(m.text for m in held)))] = store
        if self.tally_path is not None:
            with self.tally_path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(store.tally.to_json(), sort_keys=True) + "\n")


@contextmanager
def _counting_rejections() -> Iterator[Counter[str]]:
    """Count, by kind, the answers mem0 drops while the block runs (its add logs them from its own threads)."""
    logger = logging.getLogger(MEM0_LOGGER)
    handler = _Rejections()
    logger.addHandler(handler)
    try:
        yield handler.counts
    finally:
        logger.removeHandler(handler)


@dataclass
class _Search:
    """A question's mem0 store and the positions of its view's memories by text."""

    store: _Store
    positions: dict[str, list[int]]
    results: dict[int, list[int]] = field(default_factory=dict)


class Mem0Ranker(Ranker):
    """mem0's own ``search`` over a ``mem0`` store's memories, best first (the ranker ``mem0``).

    mem0 ranks by the cosine of each memory's embedding to the question's.
    A result is placed at the view's unit that holds its text (two memories
    of one text: both, in view order). Units mem0 does not hold (the raw gold
    turns the restore adds) are not ranked: the restore forces them anyway.
    """

    name = "mem0"

    def prepare(self, history: History) -> _Search | None:
        derived = [u for u in history.units if u.role == MEMORY_ROLE]
        key = (history.question.history_key, tuple(sorted(u.content for u in derived)))
        store = Mem0System.live.get(key)
        if store is None:
            return None  # a raw history, or another system's memories: ranking it is the error
        positions: dict[str, list[int]] = {}
        for unit in derived:
            positions.setdefault(unit.content, []).append(unit.position)
        return _Search(store, positions)

    def rank(self, history: History, store: Store, k: int, state: Any) -> list[int]:
        if state is None:  # prepared for a store mem0 does not hold
            raise ValueError(
                f"ranker {self.name!r} reads only the stores of the memory system 'mem0'; "
                f"{history.question.question_id} was given another's"
            )
        if k not in state.results:
            found = state.store.memory.search(history.question.question, user_id=state.store.user_id, limit=max(k, 1))
            ranked: list[int] = []
            for result in found.get("results", []):
                ranked.extend(state.positions.get(str(result["memory"]), []))
            state.results[k] = list(dict.fromkeys(ranked))
        members = np.asarray(store, dtype=bool)
        return [p for p in state.results[k] if members[p]][:k]


def tallies(path: str | Path) -> list[dict[str, Any]]:
    """The tallies a run's stores wrote to ``tally_path`` (one JSON object a line)."""
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


def summed(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The tallies of several stores added up (counts of calls, events and rejected answers)."""
    out: dict[str, Any] = {"stores": len(records), "units": 0, "evicted": 0, "held": 0}
    calls: Counter[str] = Counter()
    events: Counter[str] = Counter()
    rejected: Counter[str] = Counter()
    for r in records:
        out["units"] += r["units"]
        out["evicted"] += r["evicted"]
        out["held"] += r["held"]
        calls.update(r["calls"])
        events.update(r["events"])
        rejected.update(r["rejected"])
    out.update(calls=dict(sorted(calls.items())), events=dict(sorted(events.items())), rejected=dict(sorted(rejected.items())))
    return out
